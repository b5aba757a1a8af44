# The project's commands. Everything runs inside .venv, which `make` creates from scratch
# on a machine that has only the Rust toolchain and CPython 3.11.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.deps-installed

.PHONY: all demo test lint build compat bench bench-jit bench-graph bench-import fuzz docs-check fmt clean

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

lint: $(STAMP)
	cargo fmt --all -- --check
	cargo clippy --all-targets -- -D warnings
	$(VENV)/bin/ruff check python tests benchmarks examples tools fuzz
	$(VENV)/bin/ruff format --check python tests benchmarks examples tools fuzz

fmt: $(STAMP)
	cargo fmt --all
	$(VENV)/bin/ruff format python tests benchmarks examples tools fuzz
	$(VENV)/bin/ruff check --fix python tests benchmarks examples tools fuzz

test: lint build
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

# Benchmark-only dependencies (equinox, flarejax) are installed on demand, never for tests.
BENCH_STAMP := $(VENV)/.bench-deps-installed
$(BENCH_STAMP): requirements-bench.txt $(STAMP)
	$(PIP) install --quiet -r requirements-bench.txt
	touch $(BENCH_STAMP)

bench-jit: build $(BENCH_STAMP)
	$(PY) benchmarks/bench_jit.py

bench-graph: build $(BENCH_STAMP)
	$(PY) benchmarks/bench_graph.py

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

clean:
	rm -rf $(VENV) target
