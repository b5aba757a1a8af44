# Sourced by tools/matrix.sh and tools/dist.sh: finds the CPython interpreters of this machine.
#
#   find_python 3.12     prints the path of a CPython 3.12 interpreter, or nothing
#
# Interpreters are looked for in pyenv (`pyenv root`/versions/3.X.*, newest patch release
# first) and as `python3.X` on PATH.

find_python() {
    local minor=$1 candidates=() root py
    if root=$(pyenv root 2>/dev/null); then
        mapfile -t candidates < <(ls -d "$root"/versions/"$minor".* 2>/dev/null | sort -V -r)
        candidates=("${candidates[@]/%//bin/python$minor}")
    fi
    if py=$(command -v "python$minor" 2>/dev/null); then
        candidates+=("$py")
    fi
    for py in "${candidates[@]}"; do
        # A pyenv shim exists for versions pyenv lacks; running it tells.
        if [ -x "$py" ] && "$py" -c "import sys, platform
ok = sys.version_info[:2] == tuple(map(int, '$minor'.split('.'))) and platform.python_implementation() == 'CPython'
sys.exit(0 if ok else 1)" 2>/dev/null; then
            echo "$py"
            return
        fi
    done
}
