#!/usr/bin/env bash
# Checks what `make dist` left in dist/: twine accepts the metadata, the sdist and the
# wheel carry both license files, the wheel's extension is stripped, and the wheel installs
# into a fresh virtual environment (no build tools, no source tree on sys.path) where
# oxtree imports and round-trips a tree through both faces.
#
#   tools/dist_check.sh PYTHON TWINE
set -euo pipefail
cd "$(dirname "$0")/.."
python=$1
twine=$2

shopt -s nullglob
sdists=(dist/oxtree-*.tar.gz)
wheels=(dist/oxtree-*.whl)
if [ ${#sdists[@]} -ne 1 ] || [ ${#wheels[@]} -lt 1 ]; then
    echo "dist_check: expected one sdist and at least one wheel in dist/, found: $(ls dist)" >&2
    exit 1
fi

"$twine" check --strict "${sdists[@]}" "${wheels[@]}"

# Names inside an archive, one a line.
members() {
    "$python" - "$1" <<'EOF'
import sys, tarfile, zipfile
path = sys.argv[1]
if path.endswith(".whl"):
    names = zipfile.ZipFile(path).namelist()
else:
    names = tarfile.open(path).getnames()
print("\n".join(names))
EOF
}

for archive in "${sdists[@]}" "${wheels[@]}"; do
    listing=$(members "$archive")
    for license in LICENSE-MIT LICENSE-APACHE; do
        if ! grep -q "/$license\$" <<<"$listing" && ! grep -q "^$license\$" <<<"$listing"; then
            echo "dist_check: $archive lacks $license" >&2
            exit 1
        fi
    done
    echo "dist_check: $archive carries LICENSE-MIT and LICENSE-APACHE"
done
for needed in Cargo.toml Cargo.lock crates/oxtree/src/lib.rs python/oxtree/__init__.py python/oxtree/_core.pyi; do
    if ! grep -q "/$needed\$" <<<"$(members "${sdists[0]}")"; then
        echo "dist_check: ${sdists[0]} lacks $needed" >&2
        exit 1
    fi
done

# The wheel for this interpreter.
tag=$("$python" -c "import sys; print(f'cp{sys.version_info[0]}{sys.version_info[1]}')")
wheel=""
for w in "${wheels[@]}"; do
    case $w in *-"$tag"-*) wheel=$w ;; esac
done
if [ -z "$wheel" ]; then
    echo "dist_check: no $tag wheel in dist/" >&2
    exit 1
fi
case $wheel in
*manylinux*) ;;
*)
    echo "dist_check: $wheel is not a manylinux wheel" >&2
    exit 1
    ;;
esac

work=target/dist-check
rm -rf "$work"
mkdir -p "$work"
"$python" -m zipfile -e "$wheel" "$work/unpacked"
so=$(find "$work/unpacked" -name '_core*.so')
if [ "$(wc -l <<<"$so")" -ne 1 ] || [ -z "$so" ]; then
    echo "dist_check: $wheel should hold exactly one extension, holds: $so" >&2
    exit 1
fi
if "$python" - "$so" <<'EOF'; then
import sys
# An ELF file keeps a .symtab section until it is stripped.
data = open(sys.argv[1], "rb").read()
sys.exit(0 if b".symtab\x00" in data else 1)
EOF
    echo "dist_check: $so is not stripped" >&2
    exit 1
fi
echo "dist_check: $(basename "$so") is stripped ($(($(stat -c %s "$so") / 1024)) KiB)"

"$python" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install --quiet --no-index "$wheel"
# Run from an empty directory so that nothing of the source tree can be imported.
mkdir -p "$work/empty"
(cd "$work/empty" && ../venv/bin/python -I - <<'EOF')
import importlib.metadata as md
import sysconfig

import oxtree
import oxtree.tree_util as tu

site = sysconfig.get_paths()["purelib"]
assert oxtree.__file__.startswith(site), oxtree.__file__
assert oxtree._core.__file__.startswith(site), oxtree._core.__file__
tree = {"b": [1, (2, None)], "a": 3}
leaves, spec = oxtree.tree_flatten(tree)
assert leaves == [3, 1, 2], leaves
assert oxtree.tree_unflatten(spec, leaves) == tree
assert oxtree.tree_map(lambda x: x * 2, tree) == {"b": [2, (4, None)], "a": 6}
assert str(tu.tree_structure(tree)) == "PyTreeDef({'a': *, 'b': [*, (*, None)]})"
meta = md.metadata("oxtree")
assert meta["License-Expression"] == "MIT OR Apache-2.0", meta["License-Expression"]
print(f"dist_check: oxtree {md.version('oxtree')} installed from the wheel works")
EOF
