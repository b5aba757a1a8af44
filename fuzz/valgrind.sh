#!/usr/bin/env bash
# Runs a meaningful subset of the test suite, and a stretch of fuzz cases, under valgrind's
# memcheck with the system allocator, and fails (exit status 97) on any error valgrind reports
# (invalid reads and writes above all); test failures are reported as pytest reports them.
# CPython's and glibc's known noise is suppressed by fuzz/valgrind.supp, which explains each
# entry. Usage: fuzz/valgrind.sh [extra pytest args]; run from the repo.
# Takes tens of minutes; results go to target/valgrind-*.log.
set -u
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
mkdir -p target
VG=(valgrind --tool=memcheck --error-exitcode=97 --suppressions=fuzz/valgrind.supp
    --leak-check=no --num-callers=40 --gen-suppressions=all)
export PYTHONMALLOC=malloc OXTREE_FUZZ_NO_JAX=1 OXTREE_THREAD_ROUNDS=20
status=0

# The engine, errors (hostile callbacks, corrupted pickles), treedef ops, registry, graphs,
# memory and thread tests, and this suite's reliability tests; files that import jax are left
# out (XLA under memcheck takes hours).
TESTS=(tests/engine/test_engine.py tests/errors/test_errors.py tests/treespec/test_treespec_ops.py
       tests/treespec/test_treespec_ops_serialization.py tests/registry/test_registry.py tests/graph/test_graph.py
       tests/reliability/test_memory.py tests/reliability/test_threads.py tests/reliability/test_reliability.py)
echo "== pytest under memcheck: ${TESTS[*]}"
"${VG[@]}" --log-file=target/valgrind-pytest.log \
    "$PY" -m pytest -q -p no:cacheprovider "${TESTS[@]}" -k "not deep_chain_through and not deep_subprocess" "$@" \
    || status=$?
echo "pytest under memcheck: exit status $status (97: valgrind errors; 1: test failures)"

# Fuzz cases in-process (no subprocess per chunk: memcheck reports a use-after-free without
# needing a crash).
echo "== fuzz cases under memcheck"
"${VG[@]}" --log-file=target/valgrind-fuzz.log \
    "$PY" fuzz/fuzz.py --seed 5 --start 0 --count "${FUZZ_CASES:-3000}" | tail -n 1
fuzz_status=${PIPESTATUS[0]}
echo "fuzz under memcheck: exit status $fuzz_status"
[ "$fuzz_status" -ne 0 ] && status=$fuzz_status

grep -h "ERROR SUMMARY" target/valgrind-pytest.log target/valgrind-fuzz.log
exit $status
