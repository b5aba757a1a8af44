"""The extension module `oxtree._core`: what it exports, under which names, and what it loads.

Its surface is declared in one list (crates/oxtree/src/lib.rs); `mypy.stubtest` checks it against
`_core.pyi`. These tests check what the stubs cannot: module names, the JAX face's submodule,
the pickling functions, and that the core loads oxtree's Python modules only when a feature
written in Python is used.
"""

from __future__ import annotations

import inspect
import json
import pickle
import subprocess
import sys

import oxtree
from oxtree import _core, tree_util


def test_functions_name_the_core_as_their_module() -> None:
    functions = [obj for obj in vars(_core).values() if inspect.isbuiltin(obj)]
    assert len(functions) > 30
    assert {f.__module__ for f in functions} == {"oxtree._core"}


def test_classes_are_public_under_oxtree() -> None:
    classes = [obj for obj in vars(_core).values() if isinstance(obj, type)]
    names = {cls.__name__ for cls in classes}
    assert {"PyTreeSpec", "GraphDef", "PrefixError", "SequenceKey", "DictKey"} <= names
    assert {cls.__module__ for cls in classes if cls.__name__ != "PyTreeKind"} == {"oxtree"}


def test_jax_face_submodule_is_named_for_what_it_is() -> None:
    face = _core.jax_face
    assert face.__name__ == "oxtree._core.jax_face"
    # The JAX integration is `oxtree.jax`; the core has no attribute of that name.
    assert not hasattr(_core, "jax")
    functions = [obj for obj in vars(face).values() if inspect.isbuiltin(obj)]
    assert {f.__module__ for f in functions} == {"oxtree._core.jax_face"}
    assert tree_util.tree_flatten is face.tree_flatten
    assert tree_util.tree_map_with_path is face.tree_map_with_path
    # Same names, different faces: JAX's sorts dict keys on rebuild, optree's keeps order.
    assert face.tree_flatten is not _core.tree_flatten
    spec = face.tree_structure({"b": 1, "a": 2})
    assert list(face.tree_unflatten(spec, [1, 2])) == ["a", "b"]


def test_constants() -> None:
    assert _core.MAX_RECURSION_DEPTH == 200_000
    assert (_core.NONE_IS_LEAF, _core.NONE_IS_NODE, _core.GLOBAL_NAMESPACE) == (True, False, "")
    assert _core.Py_DEBUG is hasattr(sys, "gettotalrefcount")
    assert isinstance(_core.Py_GIL_DISABLED, bool)
    assert _core.OPTREE_HAS_FROZENDICT is False
    assert issubclass(_core.PyTreeKind, int)


def test_pickles_name_the_modules_own_rebuild_functions() -> None:
    spec = oxtree.tree_structure({"a": [1, (2, None)]})
    assert spec.__reduce__()[0] is _core._rebuild_treespec
    assert pickle.loads(pickle.dumps(spec)) == spec
    _, graphdef = oxtree.graph_flatten([[1], [2]])
    assert graphdef.__reduce__()[0] is _core._rebuild_graphdef
    assert pickle.loads(pickle.dumps(graphdef)) == graphdef


def _fresh(code: str) -> dict[str, object]:
    script = f"import json, sys\nout = {{}}\n{code}\nprint(json.dumps(out))"
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=60
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return result


PLUGIN_MODULES = ("oxtree.accessors", "oxtree.serialization", "oxtree.pretty")


def test_core_loads_python_modules_only_for_their_features() -> None:
    out = _fresh(
        "import pickle, oxtree\n"
        f"plugins = {PLUGIN_MODULES!r}\n"
        "spec = oxtree.tree_structure({'a': [1, 2]})\n"
        "pickle.loads(pickle.dumps(spec))\n"
        "pickle.loads(pickle.dumps(oxtree.graph_flatten([1])[1]))\n"
        "out['walks'] = [m for m in plugins if m in sys.modules]\n"
        "spec.accessors()\n"
        "out['accessors'] = [m for m in plugins if m in sys.modules]\n"
        "spec.to_json()\n"
        "out['to_json'] = [m for m in plugins if m in sys.modules]\n"
        "spec._repr_html_()\n"
        "out['html'] = [m for m in plugins if m in sys.modules]\n"
    )
    assert out["walks"] == []
    assert out["accessors"] == ["oxtree.accessors"]
    assert "oxtree.serialization" in out["to_json"]  # type: ignore[operator]
    assert "oxtree.pretty" in out["html"]  # type: ignore[operator]


def test_path_entry_type_is_checked_against_the_accessors_class() -> None:
    out = _fresh(
        "import oxtree\n"
        "class Box:\n"
        "    pass\n"
        "try:\n"
        "    oxtree.register_pytree_node(Box, lambda b: ((), None), lambda a, c: Box(),\n"
        "                                path_entry_type=int, namespace='t')\n"
        "except TypeError as e:\n"
        "    out['error'] = str(e)\n"
        "oxtree.register_pytree_node(Box, lambda b: ((), None), lambda a, c: Box(),\n"
        "                            path_entry_type=oxtree.GetAttrEntry, namespace='t')\n"
        "out['ok'] = True\n"
    )
    assert out["error"] == "Expected a subclass of PyTreeEntry, got <class 'int'>."
    assert out["ok"] is True
