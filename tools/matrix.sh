#!/usr/bin/env bash
# Runs a command of the project on every CPython 3.11+ this machine has, each in its own
# virtual environment (.venv-3.X) with the extension built for it.
#
#   tools/matrix.sh test    stubtest and the whole pytest suite on each version
#   tools/matrix.sh bench   benchmarks/bench.py on each version, one table per version
#
# Interpreters are looked for in pyenv (`pyenv root`/versions/3.X.*) and as `python3.X` on
# PATH; a version that is not found is reported and skipped. Each venv gets the test tools
# of requirements-dev.txt, except that jax and jaxlib are the newest release that version
# can install within constraints-matrix.txt (requirements-dev.txt pins the jax of the main
# .venv). The venv is reused until either file changes; pip's cache is kept between runs.
#
# Environment: MATRIX_VERSIONS (default "3.11 3.12 3.13 3.14") picks the versions,
# PYTEST_ARGS adds arguments to pytest, BENCH_ARGS to bench.py. MATRIX_SKIP_VENV=1 (what
# `make test-matrix` sets, as it runs after `make test`) skips, in test mode, a version whose
# Python and jax are those of .venv (VENV_PY, default .venv/bin/python).
set -uo pipefail
cd "$(dirname "$0")/.."

mode=${1:-test}
case $mode in
test | bench) ;;
*)
    echo "usage: $0 test|bench" >&2
    exit 2
    ;;
esac
versions=${MATRIX_VERSIONS:-3.11 3.12 3.13 3.14}
VENV_PY=${VENV_PY:-.venv/bin/python}

# find_python MINOR: the interpreter of CPython MINOR, or nothing.
# shellcheck source=tools/find_python.sh
source tools/find_python.sh

# Creates or refreshes .venv-$1 with interpreter $2 and its tools.
prepare_venv() {
    local minor=$1 py=$2 venv=.venv-$1
    local stamp=$venv/.matrix-deps
    if [ ! -f "$stamp" ] || [ requirements-dev.txt -nt "$stamp" ] || [ constraints-matrix.txt -nt "$stamp" ]; then
        rm -rf "$venv"
        "$py" -m venv "$venv" || return 1
        "$venv/bin/python" -m pip install --quiet --upgrade pip || return 1
        # requirements-dev.txt without its jax pins; the newest jax the constraints allow.
        grep -vE '^(jax|jaxlib)[=<>~ ]' requirements-dev.txt >"$venv/requirements.txt"
        echo "jax" >>"$venv/requirements.txt"
        echo "jaxlib" >>"$venv/requirements.txt"
        "$venv/bin/python" -m pip install --quiet -r "$venv/requirements.txt" \
            -c constraints-matrix.txt || return 1
        touch "$stamp"
    fi
}

# Builds the extension into .venv-$1.
build_extension() {
    local minor=$1 venv=.venv-$1
    # Each version keeps its own cargo target directory, so switching versions rebuilds
    # nothing that did not change.
    CARGO_TARGET_DIR=target/py$minor VIRTUAL_ENV=$PWD/$venv PATH=$PWD/$venv/bin:$PATH \
        "$venv/bin/maturin" develop --release --quiet
}

# "3.11 0.10.2": the Python and jax versions of a venv's interpreter $1.
versions_of() {
    "$1" -c "import sys, jax; print(f'{sys.version_info[0]}.{sys.version_info[1]}', jax.__version__)" 2>/dev/null
}

run_version() {
    local minor=$1 venv=.venv-$1
    local py=$venv/bin/python
    if [ "$mode" = test ]; then
        "$py" -m mypy.stubtest oxtree._core || return 1
        # shellcheck disable=SC2086
        "$py" -X dev -m pytest -q -p no:cacheprovider ${PYTEST_ARGS:-}
    else
        # shellcheck disable=SC2086
        "$py" benchmarks/bench.py -q --json "target/bench-$minor.json" ${BENCH_ARGS:-}
    fi
}

summary=()
failed=0
benched=()
last_venv=
for minor in $versions; do
    py=$(find_python "$minor")
    if [ -z "$py" ]; then
        echo "=== Python $minor: not found (pyenv or python$minor on PATH); skipped"
        summary+=("$minor: skipped, no interpreter found")
        continue
    fi
    echo "=== Python $minor: $py"
    start=$SECONDS
    if ! prepare_venv "$minor" "$py"; then
        echo "=== Python $minor: setting up .venv-$minor failed"
        summary+=("$minor: FAILED to set up .venv-$minor")
        failed=1
        continue
    fi
    jax=$(versions_of ".venv-$minor/bin/python")
    jax=${jax#* }
    # `make test` has just run this suite in .venv; the same Python with the same jax adds
    # nothing (3.11's newest jax is the one requirements-dev.txt pins).
    if [ "$mode" = test ] && [ -n "${MATRIX_SKIP_VENV:-}" ] && [ -x "$VENV_PY" ] &&
        [ "$(versions_of "$VENV_PY")" = "$minor $jax" ]; then
        echo "=== Python $minor: skipped, $VENV_PY is Python $minor with jax $jax too (make test)"
        summary+=("$minor: skipped, the same as .venv (Python $minor, jax $jax): make test runs it")
        continue
    fi
    if ! build_extension "$minor"; then
        echo "=== Python $minor: building the extension failed"
        summary+=("$minor: FAILED to build the extension")
        failed=1
        continue
    fi
    if run_version "$minor"; then
        result=passed
        benched+=("target/bench-$minor.json")
        last_venv=.venv-$minor
    else
        result=FAILED
        failed=1
    fi
    summary+=("$minor: $mode $result ($("$py" -V 2>&1), jax $jax, $((SECONDS - start)) s)")
done

echo
echo "=== matrix ($mode)"
printf '  %s\n' "${summary[@]}"
if [ "$mode" = bench ] && [ ${#benched[@]} -gt 0 ]; then
    echo
    # Any of the venvs has what bench.py imports.
    "$last_venv"/bin/python benchmarks/bench_versions.py "${benched[@]}" || failed=1
fi
exit $failed
