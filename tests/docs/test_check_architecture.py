"""tools/check_architecture.py, which `make test` runs on docs/architecture.md: it finds every
kind of citation that does not exist, and passes the ones that do."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def checker():
    spec = importlib.util.spec_from_file_location(
        "check_architecture", ROOT / "tools" / "check_architecture.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def problems_of(checker, tmp_path: Path, text: str) -> list[str]:
    doc = tmp_path / "doc.md"
    doc.write_text(text)
    return checker.check(doc)


GOOD = """\
```
python/oxtree/__init__.py    the face; tree.py too
crates/oxtree/src/
  lib.rs                     the module, `gil_used = true`
  treespec/flatten.rs        the walk, `Flattener<P, NONE_LEAF>`
```

`flatten::leaf_sequence`, `PyTreeSpec::derive`, `TreeError::Mutated`, `internal!`,
`types::PlainNew`, `GraphDef._layout()`, `oxtree._core.jax`, `oxtree.tree_util.tree_map`,
`flatten.rs`, `treespec/select.rs`, tools/compat.py, `make test`, `make compat-jax`,
`sys.setrecursionlimit`, `optree._C`, `oxtree.X`, `__new__.__code__`, `tp_clear`,
`tree[1]['b']`, `(entry, type, kind)`, `i - 1`, a `PyTreeSpec` split over
a line as `Mismatch at key path: tree[1] (in
rests[0])`.
"""


def test_existing_citations_pass(checker, tmp_path):
    assert problems_of(checker, tmp_path, GOOD) == []


def test_architecture_md_is_clean(checker):
    assert checker.check(ROOT / "docs" / "architecture.md") == []


MISSING = {
    "`flatten::no_such_fn`": "'no_such_fn' is not in",
    "`PyTreeSpec::no_such_method`": "'no_such_method' is not in",
    "`TreeError::NoSuchVariant`": "'NoSuchVariant' is not in",
    "`GraphDef._no_such()`": "'_no_such' is not in",
    "`no_such_name_anywhere`": "occurs nowhere in the code",
    "`oxtree._core.no_such_submodule`": "no Rust code names the submodule",
    "`oxtree.tree_util.no_such_function`": "'no_such_function' is not in",
    "`oxtree.no_such_module.x`": "'no_such_module' is not in",
    "`make no-such-target`": "no Makefile target 'no-such-target'",
    "`crates/oxtree/src/no_such.rs`": "crates/oxtree/src/no_such.rs does not exist",
    "see python/oxtree/no_such.py here": "python/oxtree/no_such.py does not exist",
    "`no_such_file.rs`": "no file named 'no_such_file.rs'",
}


@pytest.mark.parametrize("citation", list(MISSING))
def test_missing_citation_is_reported(checker, tmp_path, citation):
    problems = problems_of(checker, tmp_path, f"Intro.\n\nThe text cites {citation}.\n")
    assert len(problems) == 1, problems
    assert MISSING[citation] in problems[0]
    assert "line 3" in problems[0], problems


def test_file_map_entries_are_relative_to_their_folder(checker, tmp_path):
    text = """\
```
crates/oxtree/src/
  lib.rs                     fine
  no_such.rs                 missing
tools/compat.py              fine; no_such_helper.py is not
  treespec/flatten.rs        no longer under crates/oxtree/src/
```
"""
    assert problems_of(checker, tmp_path, text) == [
        "line 4 (file map): crates/oxtree/src/no_such.rs does not exist",
        "line 5 (file map): tools/no_such_helper.py does not exist",
        "line 6 (file map): treespec/flatten.rs does not exist",
    ]


def test_main_reports_and_fails(checker, tmp_path, monkeypatch, capsys):
    doc = tmp_path / "doc.md"
    doc.write_text("`no_such_name_anywhere`\n")
    monkeypatch.setattr(sys, "argv", ["check_architecture.py", str(doc)])
    assert checker.main() == 1
    captured = capsys.readouterr()
    assert "no_such_name_anywhere" in captured.out
    assert "1 citation(s) of doc.md not found in the code" in captured.err
