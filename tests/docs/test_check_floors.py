"""tools/check_floors.py, which `make test` runs on the Rust core: it passes the crate as it
is, and fails on an import circle, on an arrow up a floor and on a file with no floor."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHECKER = ROOT / "tools" / "check_floors.py"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CHECKER), *args], capture_output=True, text=True, check=False
    )


def crate(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_the_crate_stands_on_its_floors():
    out = run()
    assert out.returncode == 0, out.stdout
    assert " 0 import circle(s), 0 arrow(s) up a floor, 0 file(s) on no floor" in out.stdout
    assert "floor 0 (raw access): ffi/" in out.stdout


def test_a_circle_fails(tmp_path):
    src = crate(
        tmp_path,
        {
            "lib.rs": "mod kind;\nmod types;\n",
            "kind.rs": "use crate::types::PtrMap;\npub enum Kind {}\n",
            # A path in code, not only in `use`, is an arrow too.
            "types.rs": "pub struct PtrMap;\nfn f() -> crate::kind::Kind { todo!() }\n",
        },
    )
    out = run("--src", str(src))
    assert out.returncode == 1
    assert "import circle of 2 files" in out.stdout
    assert "kind.rs -> types.rs" in out.stdout
    assert "types.rs -> kind.rs" in out.stdout


def test_an_arrow_up_a_floor_fails(tmp_path):
    src = crate(
        tmp_path,
        {
            "lib.rs": "mod kind;\nmod walk;\n",
            "kind.rs": "use crate::walk::map_impl;\n",
            "walk.rs": "pub fn map_impl() {}\n",
        },
    )
    out = run("--src", str(src))
    assert out.returncode == 1
    assert "arrow up a floor: kind.rs (floor 1) -> walk.rs (floor 4)" in out.stdout


def test_reexports_and_super_paths_are_followed(tmp_path):
    # `treespec/mod.rs` re-exports `Node` from `node.rs`: importing it through `treespec` is an
    # arrow to node.rs (floor 2), and `super::` in node.rs reaches mod.rs.
    src = crate(
        tmp_path,
        {
            "lib.rs": "mod kind;\nmod treespec;\n",
            "kind.rs": "pub enum Kind {}\n",
            "treespec/mod.rs": "mod node;\npub use node::Node;\npub struct PyTreeSpec;\n",
            "treespec/node.rs": "pub struct Node(crate::kind::Kind);\n",
            "treespec/flatten.rs": "use super::Node;\n",
        },
    )
    out = run("--src", str(src), "--levels")
    assert "0 import circle(s)" in out.stdout
    assert "on no floor:" not in out.stdout
    # flatten.rs imports node.rs, not mod.rs: both stand one level above node.rs.
    assert "level 1: treespec/node.rs" in out.stdout
    assert "level 2: treespec/flatten.rs, treespec/mod.rs" in out.stdout


def test_a_file_on_no_floor_fails(tmp_path):
    src = crate(tmp_path, {"lib.rs": "mod extra;\n", "extra.rs": "pub fn f() {}\n"})
    out = run("--src", str(src))
    assert out.returncode == 1
    assert "on no floor: extra.rs" in out.stdout
