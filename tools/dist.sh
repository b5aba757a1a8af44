#!/usr/bin/env bash
# What `make dist` runs: an sdist and one stripped manylinux wheel per CPython 3.11+ this
# machine has, in dist/, then tools/dist_check.sh over all of them.
#
#   tools/dist.sh VENV      VENV holds maturin, ziglang, twine and auditwheel
#                           (requirements-dist.txt)
#
# Interpreters are found as tools/matrix.sh finds them (tools/find_python.sh: pyenv, then
# python3.X on PATH); VENV's own Python is always among them. A version not found gets no
# wheel, and the script says so. The wheels link with zig (maturin --zig) against an old
# glibc, so that they carry a manylinux tag older than this machine's glibc: manylinux2014
# (glibc 2.17) by default.
#
# Environment: DIST_VERSIONS (default "3.11 3.12 3.13 3.14") picks the versions,
# DIST_COMPATIBILITY (default manylinux2014) the tag maturin builds for.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:?usage: $0 VENV}
versions=${DIST_VERSIONS:-3.11 3.12 3.13 3.14}
compatibility=${DIST_COMPATIBILITY:-manylinux2014}

# shellcheck source=tools/find_python.sh
source tools/find_python.sh

venv_minor=$("$venv/bin/python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
pythons=()
for minor in $versions; do
    py=$(find_python "$minor")
    if [ -z "$py" ] && [ "$minor" = "$venv_minor" ]; then
        py=$venv/bin/python
    fi
    if [ -z "$py" ]; then
        echo "dist: Python $minor not found (pyenv or python$minor on PATH): no cp${minor/./} wheel"
        continue
    fi
    echo "dist: Python $minor: $py"
    pythons+=("$py")
done
case " $versions " in
*" $venv_minor "*) ;;
*)
    echo "dist: Python $venv_minor ($venv) added"
    pythons+=("$venv/bin/python")
    ;;
esac

rm -rf dist
"$venv/bin/maturin" sdist --out dist
# cargo-zigbuild, inside maturin, runs `python3 -m ziglang`: VENV's python3 has it.
PATH=$PWD/$venv/bin:$PATH "$venv/bin/maturin" build --release --strip --zig \
    --compatibility "$compatibility" --interpreter "${pythons[@]}" --out dist
tools/dist_check.sh "$venv" "${pythons[@]}"
