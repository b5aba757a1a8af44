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
# Python and jax are those of .venv (VENV_PY, default .venv/bin/python). MATRIX_JOBS (test
# mode; default: the number of CPUs) is how many versions are set up, built and tested at
# once: each pytest run uses one CPU. Their output goes to target/matrix/3.X.log and is
# printed, version by version, when each has finished. Benchmarks always run one version
# at a time, alone on the machine.
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

# Sets up, builds and runs version $1; prints what happened and writes its one-line
# summary to target/matrix/$1.summary. Returns 1 when something failed.
one_version() {
    local minor=$1 py jax start=$SECONDS result
    local out=target/matrix/$minor.summary
    py=$(find_python "$minor")
    if [ -z "$py" ]; then
        echo "=== Python $minor: not found (pyenv or python$minor on PATH); skipped"
        echo "$minor: skipped, no interpreter found" >"$out"
        return 0
    fi
    echo "=== Python $minor: $py"
    if ! prepare_venv "$minor" "$py"; then
        echo "=== Python $minor: setting up .venv-$minor failed"
        echo "$minor: FAILED to set up .venv-$minor" >"$out"
        return 1
    fi
    jax=$(versions_of ".venv-$minor/bin/python")
    jax=${jax#* }
    # `make test` has just run this suite in .venv; the same Python with the same jax adds
    # nothing (3.11's newest jax is the one requirements-dev.txt pins).
    if [ "$mode" = test ] && [ -n "${MATRIX_SKIP_VENV:-}" ] && [ -x "$VENV_PY" ] &&
        [ "$(versions_of "$VENV_PY")" = "$minor $jax" ]; then
        echo "=== Python $minor: skipped, $VENV_PY is Python $minor with jax $jax too (make test)"
        echo "$minor: skipped, the same as .venv (Python $minor, jax $jax): make test runs it" >"$out"
        return 0
    fi
    if ! build_extension "$minor"; then
        echo "=== Python $minor: building the extension failed"
        echo "$minor: FAILED to build the extension" >"$out"
        return 1
    fi
    result=passed
    run_version "$minor" || result=FAILED
    echo "$minor: $mode $result ($("$py" -V 2>&1), jax $jax, $((SECONDS - start)) s)" >"$out"
    [ "$result" = passed ]
}

mkdir -p target/matrix
rm -f target/matrix/*.summary
jobs=1
if [ "$mode" = test ]; then
    jobs=${MATRIX_JOBS:-$(nproc 2>/dev/null || echo 1)}
fi
failed=0
if [ "$jobs" -le 1 ]; then
    for minor in $versions; do
        one_version "$minor" || failed=1
    done
else
    # At most $jobs versions at once, each writing to its own log; the logs are printed in
    # the order of $versions, each once its version has finished.
    pids=()
    for minor in $versions; do
        while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do
            wait -n || true
        done
        echo "=== Python $minor: started (output in target/matrix/$minor.log)"
        one_version "$minor" >"target/matrix/$minor.log" 2>&1 &
        pids+=("$!")
    done
    # A version failed when its summary says so or it wrote none (checked below): a job
    # already reaped by `wait -n` has no status left to wait for.
    i=0
    for minor in $versions; do
        wait "${pids[$i]}" || true
        i=$((i + 1))
        cat "target/matrix/$minor.log"
    done
fi
summary=()
benched=()
last_venv=
for minor in $versions; do
    if [ ! -f "target/matrix/$minor.summary" ]; then
        summary+=("$minor: FAILED (stopped before it could say why: target/matrix/$minor.log)")
        failed=1
        continue
    fi
    summary+=("$(cat "target/matrix/$minor.summary")")
    grep -q "FAILED" "target/matrix/$minor.summary" && failed=1
    if [ "$mode" = bench ] && [ -f "target/bench-$minor.json" ] &&
        grep -q " passed " "target/matrix/$minor.summary"; then
        benched+=("target/bench-$minor.json")
        last_venv=.venv-$minor
    fi
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
