# The project's commands. Everything runs inside .venv, which `make` creates from scratch
# on a machine that has only the Rust toolchain and CPython 3.11.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.deps-installed

# `make help` prints the lines below that start with `## `: one line per target
# (tests/docs/test_make_help.py checks that every .PHONY target is listed).
## make                the same as make build
## make help           this list
## make venv           create .venv and install requirements-dev.txt into it
## make build          (re)build the release extension into .venv (maturin develop --release)
## make demo           build, then run examples/tour.py, the guided tour
## make test           lint, docs/architecture.md's citations, cargo test, stubtest, pytest
## make lint           cargo fmt --check, clippy -D warnings, ruff check/format --check, mypy, pyright
## make fmt            apply cargo fmt, ruff format and ruff check --fix
## make test-matrix    stubtest and pytest on every other CPython 3.11+ found, each in .venv-3.X
## make compat         optree 0.20.0's own test suite against oxtree; fails below 99%
## make compat-jax     JAX's tests/tree_util_test.py against oxtree.tree_util (JAX_SNAPSHOT=a jax clone)
## make compat-jax-run what compat-jax runs once the jax snapshot is found
## make bench          time oxtree, optree, jax.tree_util and dm-tree side by side
## make bench-jit      filter_jit against jax.jit and equinox (installs requirements-bench.txt)
## make bench-graph    graph_flatten against FlareJax (installs requirements-bench.txt)
## make bench-flat     the tree overhead of an optimizer step with FlatTree, jax.tree.map and nnx
## make bench-import   the wall time of `import oxtree` against optree's
## make bench-matrix   the speed targets against jax on every CPython 3.11+ found
## make fuzz           the long reliability run: a million fuzz cases, the soak, threads, depth
## make docs-check     render the HTML views in headless Chromium (skips without chromium)
## make dist           the sdist and a manylinux2014 wheel per CPython 3.11+ found, checked
## make clean          remove the venvs, target/ and dist/
.PHONY: help venv
help:
	@sed -n 's/^## //p' $(firstword $(MAKEFILE_LIST))

.PHONY: all demo test lint build compat bench bench-jit bench-graph bench-flat bench-import fuzz docs-check fmt \
	clean compat-jax compat-jax-run

all: build

$(STAMP): requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -r requirements-dev.txt
	touch $(STAMP)

venv: $(STAMP)

# A release build of the extension, installed into .venv in editable mode.
build: $(STAMP)
	$(VENV)/bin/maturin develop --release --quiet

demo: build
	$(PY) examples/tour.py

# The type checkers run over what users annotate with (PyTree[T], the JAX face's PyTreeDef and
# KeyPath), strict, as [tool.mypy] and [tool.pyright] in pyproject.toml set them.
TYPING_SAMPLE := tests/typing/sample_pytree_types.py

lint: $(STAMP)
	cargo fmt --all -- --check
	cargo clippy --all-targets -- -D warnings
	$(VENV)/bin/ruff check python tests benchmarks examples tools fuzz
	$(VENV)/bin/ruff format --check python tests benchmarks examples tools fuzz
	$(VENV)/bin/mypy $(TYPING_SAMPLE)
	$(VENV)/bin/pyright --pythonpath $(PY) $(TYPING_SAMPLE)

fmt: $(STAMP)
	cargo fmt --all
	$(VENV)/bin/ruff format python tests benchmarks examples tools fuzz
	$(VENV)/bin/ruff check --fix python tests benchmarks examples tools fuzz

# tools/check_architecture.py: docs/architecture.md cites only files and names that exist.
# tools/check_floors.py: the core's files import no circle and stand on their floors.
test: lint build
	$(PY) tools/check_architecture.py
	$(PY) tools/check_floors.py --quiet
	cargo test --quiet
	$(PY) -m mypy.stubtest oxtree._core
	$(PY) -X dev -m pytest -q

# optree 0.20.0's own test suite (from its sdist on PyPI, cached in .compat/), run unchanged
# against oxtree through the alias package tests/compat/optree; prints the score last and
# fails below 99%. Left-out tests and their reasons: tests/compat/deselect.txt.
COMPAT_STAMP := $(VENV)/.compat-deps-installed
$(COMPAT_STAMP): requirements-compat.txt $(STAMP)
	$(PIP) install --quiet -r requirements-compat.txt
	touch $(COMPAT_STAMP)

compat: build $(COMPAT_STAMP)
	$(PY) tools/compat.py

bench: build
	$(PY) benchmarks/bench.py

# Benchmark-only dependencies (equinox, flax, flarejax) are installed on demand, never for tests.
BENCH_STAMP := $(VENV)/.bench-deps-installed
$(BENCH_STAMP): requirements-bench.txt $(STAMP)
	$(PIP) install --quiet -r requirements-bench.txt
	touch $(BENCH_STAMP)

bench-jit: build $(BENCH_STAMP)
	$(PY) benchmarks/bench_jit.py

bench-graph: build $(BENCH_STAMP)
	$(PY) benchmarks/bench_graph.py

# The tree overhead of an optimizer step (SGD, Adam; by hand, optax, jitted) with
# oxtree.FlatTree, with jax.tree.map / optax on the Module itself, and with nnx.split /
# nnx.update (docs/flat.md).
bench-flat: build $(BENCH_STAMP)
	$(PY) benchmarks/bench_flat.py

# Wall time that `import oxtree` (and the first use of its heavier parts) adds to a fresh
# interpreter, against optree's import.
bench-import: build
	$(PY) benchmarks/bench_import.py

# The long reliability run (docs/reliability.md): a million fuzz cases, then a million calls
# of each operation with RSS and refcounts recorded, the long thread run and the full-depth run.
fuzz: build
	$(PY) fuzz/fuzz.py --cases 1000000
	$(PY) fuzz/soak.py --threads --deep

# Renders HTML views in headless Chromium (Debian's `chromium`) and checks the screenshots;
# separate from `make test`, which needs no browser.
docs-check: build
	$(PY) tools/docs_check.py

# JAX's own tests/tree_util_test.py against oxtree.tree_util / oxtree.tree, scored against
# the tests that pass on jax itself (tools/compat_jax/run.py): the pinned jax in .venv with
# the file of its release tag, then the newest jax from PyPI (Python 3.12, in .venv-jax-new,
# oxtree built into it) with the file of the snapshot's newest commit. The file is read from
# the jax repository snapshot, never copied here; without the snapshot the target skips.
# JAX_SNAPSHOT: a bare or normal git clone of github.com/jax-ml/jax that has the tag
# jax-v0.10.2; `git clone --bare https://github.com/jax-ml/jax .compat/jax` makes the default.
JAX_SNAPSHOT ?= .compat/jax
PYTHON_NEW ?= $(shell for p in python3.12 $$HOME/.pyenv/versions/3.12*/bin/python3.12; do \
	$$p -c 'import sys; print(sys.executable)' 2>/dev/null && break; done)
VENV_NEW := .venv-jax-new
COMPAT_JAX_STAMP := $(VENV)/.compat-jax-deps-installed
NEW_STAMP := $(VENV_NEW)/.deps-installed

$(COMPAT_JAX_STAMP): requirements-compat-jax.txt $(STAMP)
	$(PIP) install --quiet -r requirements-compat-jax.txt
	touch $(COMPAT_JAX_STAMP)

$(NEW_STAMP): requirements-compat-jax.txt
	$(PYTHON_NEW) -m venv $(VENV_NEW)
	$(VENV_NEW)/bin/pip install --quiet --upgrade pip
	$(VENV_NEW)/bin/pip install --quiet --upgrade jax jaxlib pytest numpy "maturin>=1.9.4,<2" \
		-r requirements-compat-jax.txt
	touch $(NEW_STAMP)

compat-jax:
	@if [ ! -d "$(JAX_SNAPSHOT)" ]; then \
		echo "jax suite: skipped, no jax repository snapshot at $(JAX_SNAPSHOT)" \
			"(git clone --bare https://github.com/jax-ml/jax $(JAX_SNAPSHOT))"; exit 0; fi; \
	$(MAKE) --no-print-directory compat-jax-run

compat-jax-run: build $(COMPAT_JAX_STAMP) $(NEW_STAMP)
	VIRTUAL_ENV=$(CURDIR)/$(VENV_NEW) $(VENV_NEW)/bin/maturin develop --release --quiet \
		--target-dir target/jax-new
	@status=0; \
	$(PY) tools/compat_jax/run.py --snapshot $(JAX_SNAPSHOT) --ref jax-v0.10.2 --label \
		|| status=1; \
	$(VENV_NEW)/bin/python tools/compat_jax/run.py --snapshot $(JAX_SNAPSHOT) --ref HEAD --label \
		|| status=1; \
	exit $$status

clean:
	rm -rf $(VENV) $(VENV_NEW) .venv-3.* target dist

# --- Versions and releases ------------------------------------------------------------------
# `make test-matrix`: stubtest and the whole pytest suite on every CPython 3.11+ found (pyenv
# or python3.X on PATH), each in .venv-3.X with the newest jax it can install
# (constraints-matrix.txt); a version not found is reported and skipped. `make bench-matrix`:
# benchmarks/bench.py on each, one table per version. Both run after `make test`/`make build`
# (cargo test is not repeated). MATRIX_VERSIONS="3.12 3.13" narrows the set. test-matrix runs
# as many versions at once as there are CPUs (MATRIX_JOBS=1 for one at a time); bench-matrix
# always one at a time.
.PHONY: test-matrix bench-matrix dist

# Python 3.11 with jax 0.10.2 is what `make test` just ran in .venv: skipped here (printed).
test-matrix:
	MATRIX_SKIP_VENV=1 tools/matrix.sh test

# The ops with targets against jax (benchmarks/bench_versions.py), oxtree and jax only; the
# best of 21 short repeats, steadier than medians on a shared machine.
BENCH_MATRIX_ARGS ?= --libs oxtree,jax --ops flatten,unflatten,leaves,structure,map1,map2,flatten_with_path \
	--stat best --repeats 21 --target-ms 3
bench-matrix:
	BENCH_ARGS="$(BENCH_MATRIX_ARGS)" tools/matrix.sh bench

# `make dist`: the sdist and one stripped wheel per CPython 3.11+ found (as test-matrix finds
# them; DIST_VERSIONS="3.12 3.13" narrows the set), linked with zig for manylinux2014 (glibc
# 2.17; DIST_COMPATIBILITY=manylinux_2_28 for another), in dist/; then tools/dist_check.sh
# (twine check, license files, auditwheel show and the glibc symbol versions of each wheel,
# each wheel installed by pip from dist/ into a fresh venv of its own Python and imported).
DIST_STAMP := $(VENV)/.dist-deps-installed
$(DIST_STAMP): requirements-dist.txt $(STAMP)
	$(PIP) install --quiet -r requirements-dist.txt
	touch $(DIST_STAMP)

dist: $(DIST_STAMP)
	tools/dist.sh $(VENV)
