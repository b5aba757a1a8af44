"""The core walks Modules itself, by the fields of their `_ModuleDef` (a core type): the
children are the tree attributes in registration order, the aux data the module's
`_ModuleDef` (its configuration read again after a change), the keys `GetAttrKey`s; a rebuilt
module has the configuration and the children in its `__dict__`, and no class hook runs. The
functions every Module class is registered with are the core's (`_module_flatten`,
`_module_unflatten`), so what they give is the walk's."""

from __future__ import annotations

import contextlib
import functools
import pickle
from typing import Any

import oxtree
import pytest
from oxtree import GetAttrKey, Module, Parameter, State
from oxtree._core import (
    _flatten_one_level,
    _module_flatten,
    _module_flatten_with_keys,
    _module_unflatten,
)
from oxtree.module import _ModuleDef


class Leaf(Module):
    w: Parameter
    n: State

    def __init__(self, w: Any, n: Any = 0) -> None:
        self.w = w
        self.n = n
        self.act = "relu"


class Tree(Module):
    def __init__(self, k: int) -> None:
        self.blocks = [Leaf(float(i)) for i in range(k)]
        self.head = Leaf([1.0, 2.0], n={"a": 1})
        self.name = "tree"


class Guarded(Module):
    """A class whose own __setattr__ refuses every assignment once built."""

    w: Parameter

    def __init__(self, w: Any) -> None:
        self.w = w
        object.__setattr__(self, "frozen", True)

    def __setattr__(self, name: str, value: Any) -> None:
        if self.__dict__.get("frozen"):
            raise AttributeError(f"{type(self).__name__} is frozen")
        super().__setattr__(name, value)


class Lookups(Module):
    """A class with a __getattr__ fallback (called only for missing attributes)."""

    w: Parameter

    def __init__(self, w: Any) -> None:
        self.w = w

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return f"missing {name}"


def _modules() -> list[Module]:
    return [Leaf(1.0), Leaf(None, n=[1, 2]), Tree(3), Guarded(2.0), Lookups(3.0), Module()]


def _expected(m: Module) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The children (tree attributes in registration order) and configuration (the other
    attributes, sorted by name) of ``m``, read from its ``__dict__``."""
    tree = list(m.name_to_kind)
    config = dict(sorted((n, v) for n, v in vars(m).items() if n not in tree))
    return tuple(m.__dict__[n] for n in tree), config


@pytest.mark.parametrize("m", _modules(), ids=lambda m: type(m).__name__)
def test_one_level_flatten_reads_the_module(m: Module) -> None:
    children, spec = _flatten_one_level(m)
    expected_children, config = _expected(m)
    aux = spec.node_data()
    assert tuple(children) == expected_children
    assert type(aux) is _ModuleDef
    assert aux is m._oxtree_def  # the fresh aux data is kept in the module's slot
    assert aux.others == config
    assert aux.names == tuple(m.name_to_kind)
    assert aux.kinds == tuple(m.name_to_kind.values())
    assert tuple(spec.entries()) == aux.keys == tuple(GetAttrKey(n) for n in aux.names)
    assert all(type(k) is GetAttrKey for k in aux.keys)
    # The registered functions are the walk's.
    assert _module_flatten(m) == (expected_children, aux, aux.keys)
    assert _module_flatten_with_keys(m) == (
        tuple(zip(aux.keys, expected_children, strict=True)),
        aux,
    )


@pytest.mark.parametrize("m", _modules(), ids=lambda m: type(m).__name__)
def test_rebuild_restores_configuration_then_children(m: Module) -> None:
    leaves, spec = oxtree.tree_flatten(m)
    out = spec.unflatten(leaves)
    children, config = _expected(m)
    aux = m._oxtree_def
    assert type(out) is type(m)
    assert out is not m
    assert out._oxtree_def is aux
    # The configuration first (sorted by name), then the tree attributes.
    assert list(out.__dict__) == [*config, *aux.names]
    assert all(out.__dict__[k] is v for k, v in config.items())
    assert oxtree.tree_leaves(out) == leaves
    assert oxtree.tree_structure(out) == spec
    # The registered unflatten function is the same rebuild.
    again = _module_unflatten(type(m), aux, list(children))
    assert type(again) is type(m)
    assert list(again.__dict__) == list(out.__dict__)
    assert oxtree.tree_structure(again) == spec


def test_registered_functions_refuse_what_is_no_module_def() -> None:
    m = Leaf(1.0)
    aux = oxtree.tree_structure(m).node_data()
    with pytest.raises(TypeError, match="aux data must be a _ModuleDef, got 'x'"):
        _module_unflatten(Leaf, "x", (1.0, 0))
    with pytest.raises(ValueError, match="cannot rebuild a Leaf from 1 children"):
        _module_unflatten(Leaf, aux, (1.0,))
    with pytest.raises(ValueError, match="cannot rebuild a Leaf from 2 children"):
        _module_unflatten(Leaf, aux.layout.stale, (1.0, 0))
    object.__setattr__(m, "_oxtree_def", "x")
    with pytest.raises(TypeError, match="_oxtree_def must be a _ModuleDef, got 'x'"):
        oxtree.tree_leaves(m)


def test_module_def_equality_hash_and_pickle() -> None:
    a, b = Leaf(1.0), Leaf(2.0)
    da, db = oxtree.tree_structure(a).node_data(), oxtree.tree_structure(b).node_data()
    assert da is not db
    assert da == db
    assert hash(da) == hash(db)
    assert (da != db) is False  # __ne__ is __eq__'s opposite
    b.act = "gelu"
    dc = oxtree.tree_structure(b).node_data()
    assert da != dc
    assert da != "x"
    assert da != da.layout.stale
    # Configuration compares by content where it is unhashable.
    a.sizes, b.sizes, b.act = [1, 2], [1, 2], "relu"
    assert oxtree.tree_structure(a).node_data() == oxtree.tree_structure(b).node_data()
    # Pickles name oxtree.module._ModuleDef, which makes the key again.
    data = pickle.dumps(da)
    assert b"oxtree.module" in data
    assert b"_ModuleDef" in data
    back = pickle.loads(data)
    assert type(back) is _ModuleDef
    assert back == da
    assert hash(back) == hash(da)
    assert repr(back) == repr(da) == "<w: PARAMETER, n: STATE; act='relu', training=True>"
    assert pickle.loads(pickle.dumps(da.layout.stale)) == da.layout.stale
    # The core checks the fields fit each other.
    with pytest.raises(ValueError, match="2 names, 1 kinds and 2 keys"):
        oxtree._core._ModuleDef(da.layout, da.names, da.kinds[:1], da.keys, {}, ())


def test_every_module_class_is_registered_with_the_core_functions() -> None:
    for cls in (Leaf, Tree, Guarded, Module):
        reg = oxtree.register_pytree_node.get(cls)
        assert reg.flatten_func is _module_flatten
        assert isinstance(reg.unflatten_func, functools.partial)
        assert reg.unflatten_func.func is _module_unflatten
        assert reg.unflatten_func.args == (cls,)


def test_rebuild_bypasses_the_class_setattr() -> None:
    g = Guarded(1.0)
    with pytest.raises(AttributeError, match="frozen"):
        g.w = 2.0
    out = oxtree.tree_map(lambda x: x * 10, g)
    assert type(out) is Guarded
    assert out.w == 10.0
    assert out.frozen is True
    assert g.w == 1.0


def test_getattr_fallback_is_not_consulted_for_tree_attributes() -> None:
    m = Lookups(1.0)
    assert oxtree.tree_leaves(m) == [1.0]
    out = oxtree.tree_map(lambda x: x + 1, m)
    assert out.w == 2.0
    assert out.anything == "missing anything"


def test_changed_configuration_is_read_again() -> None:
    m = Leaf(1.0)
    before = oxtree.tree_structure(m)
    m.act = "gelu"  # makes the aux data stale: the walk reads the configuration again
    after = oxtree.tree_structure(m)
    assert before != after
    assert oxtree.tree_unflatten(after, [5.0, 0]).act == "gelu"
    assert oxtree.tree_unflatten(before, [5.0, 0]).act == "relu"


def test_unassigned_attribute_is_reported_as_before() -> None:
    class Half(Module):
        w: Parameter
        b: Parameter

        def __init__(self) -> None:
            self.w = 1.0

    with pytest.raises(AttributeError, match=r"Half\.b \(PARAMETER\) .* never assigned"):
        oxtree.tree_leaves(Half())
    with pytest.raises(AttributeError, match=r"Half\.b \(PARAMETER\) .* never assigned"):
        oxtree.graph_flatten(Half())


def test_deleted_attribute_after_flatten() -> None:
    m = Leaf(1.0)
    oxtree.tree_leaves(m)  # the aux data is fresh now
    del m.__dict__["w"]  # behind the module's back: the aux data still lists it
    with pytest.raises(AttributeError, match=r"Leaf\.w \(PARAMETER\) .* never assigned"):
        oxtree.tree_leaves(m)


def test_rebuilt_modules_flatten_natively_again() -> None:
    t = Tree(4)
    out = oxtree.tree_map(lambda x: x, t)
    assert oxtree.tree_leaves(out) == oxtree.tree_leaves(t)
    assert oxtree.tree_structure(out) == oxtree.tree_structure(t)
    leaves, gd = oxtree.graph_flatten(out)
    again = oxtree.graph_unflatten(gd, leaves)
    assert oxtree.tree_structure(again) == oxtree.tree_structure(t)


# --------------------------------------------------------------------------------------------
# filter_jit's one pass over the leaves


class _Record:
    """A compiled function's record of its result, as filter_jit's `_Out`: `direct` is the
    graphdef to rebuild from the arrays, or None to ask `finish`."""

    def __init__(self, direct: Any) -> None:
        self.direct = direct
        self.finished: list[tuple[Any, ...]] = []

    def finish(self, arrays: Any, leaves: list[Any], roots: tuple[Any, ...]) -> Any:
        self.finished.append((arrays, leaves, roots))
        return "finished"


class _Entry:
    def __init__(self) -> None:
        self.compiled: Any = {}


def _core_jit(known: dict[type, bool], classify: Any, direct: Any = None) -> Any:
    """A `_FilterJitCore` subclass whose rare paths record what the core asks, and whose
    compiled function records its arguments and returns them with a `_Record`."""
    from oxtree._core import _FilterJitCore

    class Jit(_FilterJitCore):
        def __init__(self, *_: Any) -> None:
            self.log: list[tuple[Any, ...]] = []
            self.record = _Record(direct)

        def _entry(self, graphdef: Any, types: Any, has_kwargs: bool) -> _Entry:
            self.log.append(("entry", graphdef, types, has_kwargs))
            return _Entry()

        def _compiled(self, entry: _Entry, statics: Any) -> Any:
            self.log.append(("compiled", statics))

            def compiled(*arrays: Any) -> Any:
                self.log.append(("call", arrays))
                return arrays, self.record

            with contextlib.suppress(TypeError):  # an unhashable static leaf
                entry.compiled[statics] = compiled
            return compiled

        def _call_aliased(self, *call: Any) -> Any:
            self.log.append(("aliased", *call))
            return "aliased"

    return Jit("", known, classify)


def test_filter_jit_core_splits_once() -> None:
    a, b = object(), object()
    known: dict[type, bool] = {object: True, str: False}
    asked: list[type] = []

    def classify(ty: type) -> bool:
        asked.append(ty)
        known[ty] = False
        return False

    jit = _core_jit(known, classify)
    shared = ["x", a]
    args = (shared, b, 1)
    kwargs = {"k": shared}
    assert jit(*args, **kwargs) == "finished"
    # The roots: each positional argument, then the keyword arguments' dict.
    expected_leaves, expected_gd = oxtree.graph_flatten(*args, kwargs)
    (_, gd, types, has_kwargs), compiled, call = jit.log
    assert gd == expected_gd
    assert gd.num_refs == 1  # the list met again through the last root
    assert types == (str, object, object, int)
    assert has_kwargs is True
    assert compiled == ("compiled", ("x", 1))
    assert call == ("call", (a, b))  # one argument per array
    assert asked == [int]  # only the type `known` lacked, once
    ((arrays, leaves, roots),) = jit.record.finished
    assert arrays == (a, b)
    assert leaves == expected_leaves
    assert roots == (*args, kwargs)
    # The same graphdef and leaf types as the last call's: no entry asked, no compile.
    jit.log.clear()
    assert jit(*args, **kwargs) == "finished"
    assert jit.log == [("call", (a, b))]
    # kwargs holding no reference: another graphdef, another entry.
    jit.log.clear()
    jit(["y", b], a, 2, k=None)
    assert [e[0] for e in jit.log] == ["entry", "compiled", "call"]
    assert jit.log[0][1] == oxtree.graph_flatten(["y", b], a, 2, {"k": None})[1]
    # The same graphdef as the first call, other leaf types: another entry.
    jit.log.clear()
    strings = ["x", "a"]
    jit(strings, b, 1, k=strings)
    assert jit.log[0][1] == gd
    assert jit.log[0][2] == (str, str, object, int)
    # Without keyword arguments the roots are the positional arguments: another entry, even
    # where a positional dict gives the same graph.
    jit.log.clear()
    jit(strings, b, 1, {"k": strings})
    assert jit.log[0][1:] == (gd, (str, str, object, int), False)
    ((_, _, roots),) = jit.record.finished[-1:]
    assert roots == (strings, b, 1, {"k": strings})
    # Equal static leaves are no aliasing; an empty keyword dict is no root; no leaves at all
    # split into empty tuples.
    jit.log.clear()
    jit("s", "s")
    assert jit.log[0][1:] == (oxtree.graph_flatten("s", "s")[1], (str, str), False)
    assert jit.log[1:] == [("compiled", ("s", "s")), ("call", ())]
    jit.log.clear()
    jit()
    assert jit.log[0][1] == oxtree.graph_flatten()[1]
    assert jit.log[1:] == [("compiled", ()), ("call", ())]


def test_filter_jit_core_aliased_and_direct() -> None:
    a, b = object(), object()
    known: dict[type, bool] = {object: True, str: False}
    # One array object in two leaves: the aliased path gets the entry, the statics, the
    # arrays, the leaves and the roots.
    jit = _core_jit(known, bool)
    assert jit(a, a, "s") == "aliased"
    (_, gd, _, _), (what, _entry, statics, arrays, leaves, roots) = jit.log
    assert gd == oxtree.graph_flatten(a, a, "s")[1]
    assert (what, statics, arrays, leaves) == ("aliased", ("s",), (a, a), [a, a, "s"])
    assert roots == (a, a, "s")
    # Distinct arrays go to the compiled function one argument each (donation and layouts
    # are options of the compiled function, not a split of its arguments).
    jit = _core_jit(known, bool)
    jit(a, b)
    assert jit.log[-1] == ("call", (a, b))
    # A result with nothing to merge is rebuilt from the arrays by the graphdef it names.
    _, direct = oxtree.graph_flatten([a, b])
    jit = _core_jit(known, bool, direct=direct)
    out = jit(a, b)
    assert out == [a, b]
    assert jit.record.finished == []


def test_filter_jit_core_errors() -> None:
    from oxtree._core import _FilterJitCore

    known: dict[type, bool] = {object: True}

    # A classifier's error comes through, and the walk's errors are the graph walk's.
    def broken(ty: type) -> bool:
        raise RuntimeError(f"cannot classify {ty.__name__}")

    with pytest.raises(RuntimeError, match="cannot classify float"):
        _core_jit(known, broken)(1.5)

    # An unhashable static leaf is handed to `_compiled`, which words the error.
    jit = _core_jit(known, lambda ty: False)
    jit({1}, k=2)
    assert jit.log[1] == ("compiled", ({1}, 2))

    class NoDict(_FilterJitCore):
        def _entry(self, graphdef: Any, types: Any, has_kwargs: bool) -> Any:
            entry = _Entry()
            entry.compiled = [1]
            return entry

    with pytest.raises(TypeError, match="compiled cache must be a dict, got list"):
        NoDict("", known, bool)(object())

    class Bare(_FilterJitCore):
        pass

    with pytest.raises(AttributeError, match="_entry"):
        Bare("", known, bool)(object())

    class BadResult(_FilterJitCore):
        def _entry(self, graphdef: Any, types: Any, has_kwargs: bool) -> Any:
            entry = _Entry()
            entry.compiled[()] = lambda *arrays: 42
            return entry

    with pytest.raises(TypeError):
        BadResult("", known, bool)(object())


def test_filter_jit_on_modules_keeps_results() -> None:
    import jax.numpy as jnp
    import oxtree.jax as oxjax

    t = Tree(2)
    t = oxtree.tree_map(jnp.asarray, t)
    step = oxjax.filter_jit(lambda m, k: oxtree.tree_map(lambda x: x * k, m))
    for k in (2.0, 3.0, 2.0):  # a new static, then the first again (cache hit)
        out = step(t, k)
        assert type(out) is Tree
        assert [float(x.sum()) for x in oxtree.tree_leaves(out)] == [
            float(x.sum()) * k for x in oxtree.tree_leaves(t)
        ]
        assert out.name == "tree"
