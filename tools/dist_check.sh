#!/usr/bin/env bash
# Checks what `make dist` (tools/dist.sh) left in dist/: twine accepts the metadata, the sdist
# and every wheel carry both license files, and for each Python given there is exactly one
# wheel, whose extension is stripped, links no libpython, needs no glibc symbol newer than its
# manylinux tag allows (checked here and by `auditwheel show`), and installs, picked by pip
# itself from dist/, into a fresh virtual environment of that Python (no build tools, no source
# tree on sys.path), where oxtree imports and round-trips a tree through both faces.
#
#   tools/dist_check.sh VENV PYTHON...     VENV has twine and auditwheel (requirements-dist.txt)
set -euo pipefail
cd "$(dirname "$0")/.."
venv=$1
shift
py=$venv/bin/python

shopt -s nullglob
sdists=(dist/oxtree-*.tar.gz)
wheels=(dist/oxtree-*.whl)
if [ ${#sdists[@]} -ne 1 ] || [ ${#wheels[@]} -ne $# ]; then
    echo "dist_check: expected one sdist and $# wheels in dist/, found: $(ls dist)" >&2
    exit 1
fi

"$venv/bin/twine" check --strict "${sdists[@]}" "${wheels[@]}"

# Names inside an archive, one a line.
members() {
    "$py" - "$1" <<'PY'
import sys, tarfile, zipfile
path = sys.argv[1]
if path.endswith(".whl"):
    names = zipfile.ZipFile(path).namelist()
else:
    names = tarfile.open(path).getnames()
print("\n".join(names))
PY
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

work=target/dist-check
rm -rf "$work"
mkdir -p "$work/empty"

for python in "$@"; do
    tag=$("$python" -c "import sys; print(f'cp{sys.version_info[0]}{sys.version_info[1]}')")
    wheel=""
    for w in "${wheels[@]}"; do
        case $w in *-"$tag"-"$tag"-*) wheel=$w ;; esac
    done
    if [ -z "$wheel" ]; then
        echo "dist_check: no $tag wheel in dist/" >&2
        exit 1
    fi
    echo "dist_check: $wheel"
    # The glibc the tag promises: manylinux_2_17 (alias manylinux2014) means glibc 2.17.
    floor=$(sed -nE 's/.*[-.]manylinux_2_([0-9]+)_x86_64.*/\1/p' <<<"$wheel")
    if [ -z "$floor" ]; then
        echo "dist_check: $wheel has no manylinux_2_N tag" >&2
        exit 1
    fi

    "$py" -m zipfile -e "$wheel" "$work/$tag"
    so=$(find "$work/$tag" -name '_core*.so')
    if [ "$(wc -l <<<"$so")" -ne 1 ] || [ -z "$so" ]; then
        echo "dist_check: $wheel should hold exactly one extension, holds: $so" >&2
        exit 1
    fi
    # The extension's ELF facts: stripped, the libraries it needs (never libpython: the
    # interpreter that imports it provides the C API), the newest glibc symbol version.
    "$py" - "$so" "$floor" <<'PY'
import re
import sys

from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerNeedSection

path, floor = sys.argv[1], int(sys.argv[2])
with open(path, "rb") as f:
    elf = ELFFile(f)
    if elf.get_section_by_name(".symtab") is not None:
        sys.exit(f"dist_check: {path} is not stripped")
    needed = [tag.needed for tag in elf.get_section_by_name(".dynamic").iter_tags("DT_NEEDED")]
    glibc = set()
    for section in elf.iter_sections():
        if isinstance(section, GNUVerNeedSection):
            for _, aux in section.iter_versions():
                for version in aux:
                    m = re.fullmatch(r"GLIBC_2\.(\d+)(?:\.\d+)?", version.name)
                    if m:
                        glibc.add(int(m.group(1)))
if any(name.startswith("libpython") for name in needed):
    sys.exit(f"dist_check: {path} links libpython: {needed}")
newest = max(glibc, default=0)
if newest > floor:
    sys.exit(f"dist_check: {path} needs GLIBC_2.{newest}, newer than its tag's 2.{floor}")
print(
    f"dist_check: extension stripped, needs {', '.join(needed)}; "
    f"newest glibc symbol GLIBC_2.{newest} <= 2.{floor}"
)
PY
    audit=$("$venv/bin/auditwheel" show "$wheel")
    echo "$audit"
    # auditwheel names the oldest tag the wheel's symbols allow; it must not be newer than the
    # wheel's own.
    audited=$(tr -d '\n' <<<"$audit" | sed -nE 's/.*consistent with the following platform tag: *"manylinux_2_([0-9]+)_x86_64".*/\1/p')
    if [ -z "$audited" ] || [ "$audited" -gt "$floor" ]; then
        echo "dist_check: auditwheel does not find $wheel consistent with manylinux_2_$floor" >&2
        exit 1
    fi

    "$python" -m venv "$work/venv-$tag"
    # The README's install line: pip picks this Python's wheel from dist/ by itself.
    "$work/venv-$tag/bin/python" -m pip install --quiet --no-index --find-links dist oxtree
    # Run from an empty directory so that nothing of the source tree can be imported.
    (cd "$work/empty" && "../venv-$tag/bin/python" -I - "$tag" "$floor" <<'PY')
import importlib.metadata as md
import sys
import sysconfig

import oxtree
import oxtree.tree_util as tu

tag, floor = sys.argv[1], sys.argv[2]
site = sysconfig.get_paths()["purelib"]
assert oxtree.__file__.startswith(site), oxtree.__file__
assert oxtree._core.__file__.startswith(site), oxtree._core.__file__
wheel_tags = md.distribution("oxtree").read_text("WHEEL")
assert f"Tag: {tag}-{tag}-manylinux_2_{floor}_x86_64" in wheel_tags, wheel_tags
tree = {"b": [1, (2, None)], "a": 3}
leaves, spec = oxtree.tree_flatten(tree)
assert leaves == [3, 1, 2], leaves
assert oxtree.tree_unflatten(spec, leaves) == tree
assert oxtree.tree_map(lambda x: x * 2, tree) == {"b": [2, (4, None)], "a": 6}
assert str(tu.tree_structure(tree)) == "PyTreeDef({'a': *, 'b': [*, (*, None)]})"
meta = md.metadata("oxtree")
assert meta["License-Expression"] == "MIT OR Apache-2.0", meta["License-Expression"]
print(
    f"dist_check: oxtree {md.version('oxtree')} ({tag}, manylinux_2_{floor}) installed by pip "
    f"from dist/ into a fresh Python {sys.version.split()[0]} venv: imports and round-trips"
)
PY
done
echo "dist_check: $# wheels and the sdist pass"
