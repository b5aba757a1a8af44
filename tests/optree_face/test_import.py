"""`import oxtree` stays light: the core's names now, every other name on first use (PEP 562).

What `import oxtree` loads is checked in a fresh interpreter (this one has imported everything);
how long it takes is the job of benchmarks/bench_import.py, not of a test.
"""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import oxtree
import pytest

# Modules `import oxtree` must not load (each costs more than all of `import oxtree` does).
HEAVY = [
    "ast",
    "contextlib",
    "dataclasses",
    "html",
    "inspect",
    "jax",
    "json",
    "numpy",
    "re",
    "typing",
]

# The package's modules that load on first use, each for its own names.
LAZY_MODULES = sorted({*oxtree._LAZY.values(), *oxtree._SUBMODULES} - {"functools"})


def _run(code: str) -> dict[str, object]:
    """Runs `code` in a fresh interpreter; it fills the dict `out`, which comes back as JSON.

    `code` finds the modules loaded at startup in `started` (json is imported after it runs).
    """
    script = f"import sys\nstarted = set(sys.modules)\nout = {{}}\n{code}\n"
    script += "import json\nprint(json.dumps(out))"
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=60
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return result


@pytest.fixture(scope="module")
def fresh() -> dict[str, object]:
    """What a fresh interpreter holds before and after `import oxtree`, and what it sees."""
    return _run(
        "import oxtree\n"
        "out['new'] = sorted(set(sys.modules) - started)\n"
        "out['registered'] = [t.__qualname__ for t in oxtree.registered_types()]\n"
        "out['has_jax'] = hasattr(oxtree, 'jax')\n"
    )


@pytest.mark.parametrize("name", HEAVY)
def test_import_loads_no_heavy_module(fresh: dict[str, object], name: str) -> None:
    assert name not in fresh["new"]  # type: ignore[operator]


def test_import_loads_none_of_the_lazy_modules(fresh: dict[str, object]) -> None:
    # The core, and functools for Partial's registration; a module added here should be cheap.
    loaded = {m for m in fresh["new"] if m.startswith("oxtree.")}  # type: ignore[attr-defined]
    assert loaded == {"oxtree._core", "oxtree.functools"}


def test_import_keeps_registrations_made_at_import(fresh: dict[str, object]) -> None:
    # Partial is registered as a node by `import oxtree`, as it always was; Module registers
    # itself when its module loads (no Module instance can exist before that).
    assert fresh["registered"] == ["Partial"]
    out = _run(
        "import oxtree\n"
        "m = oxtree.Module\n"
        "out['registered'] = [t.__qualname__ for t in oxtree.registered_types()]\n"
    )
    # registered_types() promises no order (the registry is a hash map): compare as sets.
    assert sorted(out["registered"]) == ["Module", "Partial"]  # type: ignore[arg-type]


def test_jax_is_not_an_attribute_until_imported(fresh: dict[str, object]) -> None:
    assert fresh["has_jax"] is False


def test_every_name_in_all_resolves() -> None:
    out = _run(
        "import oxtree\n"
        "missing = [n for n in oxtree.__all__ if getattr(oxtree, n, None) is None]\n"
        "out['missing'] = missing\n"
        "out['all'] = oxtree.__all__\n"
    )
    assert out["missing"] == []
    assert out["all"] == oxtree.__all__
    assert len(set(oxtree.__all__)) == len(oxtree.__all__)


def test_star_import_gives_all() -> None:
    out = _run(
        "ns = {}\n"
        "exec('from oxtree import *', ns)\n"
        "import oxtree\n"
        "out['names'] = sorted(set(ns) - {'__builtins__'})\n"
        "out['same'] = all(ns[n] is getattr(oxtree, n) for n in oxtree.__all__)\n"
    )
    assert out["names"] == sorted(oxtree.__all__)
    assert out["same"] is True


@pytest.mark.parametrize("name", sorted(oxtree._LAZY))
def test_lazy_name_is_its_modules_object(name: str) -> None:
    module = importlib.import_module(f"oxtree.{oxtree._LAZY[name]}")
    assert getattr(oxtree, name) is getattr(module, name)
    assert name in oxtree.__all__
    assert name in vars(oxtree)  # loaded once, then an ordinary attribute


@pytest.mark.parametrize("module", ["graph", "module"])
def test_feature_sections_list_their_modules_all(module: str) -> None:
    names = importlib.import_module(f"oxtree.{module}").__all__
    assert [n for n, m in oxtree._LAZY.items() if m == module] == names


@pytest.mark.parametrize("module", LAZY_MODULES)
def test_submodule_resolves_as_attribute(module: str) -> None:
    out = _run(
        f"import oxtree\nm = oxtree.{module}\n"
        f"out['same'] = m is sys.modules['oxtree.{module}']\n"
        f"out['named'] = m.__name__\n"
    )
    assert out == {"same": True, "named": f"oxtree.{module}"}


def test_submodule_imported_directly_then_names_resolve() -> None:
    out = _run(
        "import oxtree.module\n"
        "import oxtree\n"
        "out['same'] = oxtree.Module is oxtree.module.Module\n"
        "from oxtree import pformat, tree_util\n"
        "out['pformat'] = pformat([1])\n"
        "out['tree_util'] = tree_util.__name__\n"
    )
    assert out == {"same": True, "pformat": "[1]", "tree_util": "oxtree.tree_util"}


def test_first_use_from_many_threads_gives_one_object() -> None:
    out = _run(
        "import threading, oxtree\n"
        "names = ['pformat', 'Module', 'tree_all', 'register_dataclass', 'GraphRef', 'tree']\n"
        "got, go = [], threading.Barrier(8)\n"
        "def work():\n"
        "    go.wait()\n"
        "    got.append([getattr(oxtree, n) for n in names])\n"
        "threads = [threading.Thread(target=work) for _ in range(8)]\n"
        "[t.start() for t in threads]\n"
        "[t.join() for t in threads]\n"
        "out['distinct'] = [len({id(g[i]) for g in got}) for i in range(len(names))]\n"
        "out['count'] = len(got)\n"
    )
    assert out == {"distinct": [1] * 6, "count": 8}


def test_unknown_attribute_raises_attribute_error() -> None:
    with pytest.raises(AttributeError, match=r"module 'oxtree' has no attribute 'no_such_name'"):
        oxtree.no_such_name  # type: ignore[attr-defined]
    assert not hasattr(oxtree, "tree_flatten_not_a_name")


def test_dir_lists_every_public_name_before_loading() -> None:
    out = _run(
        "import oxtree\nout['dir'] = dir(oxtree)\nout['new'] = 'oxtree.pretty' in sys.modules"
    )
    listed = set(out["dir"])  # type: ignore[arg-type]
    assert set(oxtree.__all__) <= listed
    assert set(LAZY_MODULES) <= listed
    assert out["new"] is False  # listing loads nothing
    assert out["dir"] == sorted(listed)


def _type_checking_names() -> set[str]:
    """The names `oxtree/__init__.py` imports from its submodules for type checkers only."""
    tree = ast.parse(Path(oxtree.__file__).read_text())
    names: set[str] = set()
    for node in tree.body:
        if not (isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"):
            continue
        for stmt in node.body:
            if isinstance(stmt, ast.ImportFrom) and stmt.module == "oxtree":
                names.update(a.asname or a.name for a in stmt.names)
            elif isinstance(stmt, ast.ImportFrom) and (stmt.module or "").startswith("oxtree."):
                for alias in stmt.names:
                    if alias.name == "*":
                        names.update(importlib.import_module(stmt.module).__all__)  # type: ignore[arg-type]
                    else:
                        names.add(alias.asname or alias.name)
    return names


def test_type_checkers_see_the_lazy_names() -> None:
    # The `if TYPE_CHECKING:` imports must name what `__getattr__` loads: a name only in
    # `_LAZY` would be unknown to mypy, one only in the imports would fail at run time.
    public_modules = {m for m in LAZY_MODULES if m in oxtree.__all__}
    names = {n for n in _type_checking_names() if not n.startswith("_")}
    assert names == set(oxtree._LAZY) | public_modules
