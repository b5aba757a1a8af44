"""The core reads and rebuilds Modules itself: its results are exactly those of module.py's
registered flatten and unflatten functions, and whatever it does not handle (configuration to
read again, an attribute never assigned, a class with its own attribute hooks) gives what
those functions give."""

from __future__ import annotations

import contextlib
from typing import Any

import oxtree
import pytest
from oxtree import GetAttrKey, Module, Parameter, State
from oxtree._core import _flatten_one_level
from oxtree.module import _module as om


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


def _python_flatten(m: Module) -> tuple[tuple[Any, ...], Any, tuple[Any, ...]]:
    return om._flatten(m)


@pytest.mark.parametrize("m", _modules(), ids=lambda m: type(m).__name__)
def test_one_level_flatten_matches_the_python_function(m: Module) -> None:
    children, spec = _flatten_one_level(m)
    expected_children, aux, keys = _python_flatten(m)
    assert tuple(children) == expected_children
    assert spec.node_data() is aux
    assert tuple(spec.entries()) == keys
    assert all(type(k) is GetAttrKey for k in keys)


@pytest.mark.parametrize("m", _modules(), ids=lambda m: type(m).__name__)
def test_rebuild_matches_the_python_function(m: Module) -> None:
    leaves, spec = oxtree.tree_flatten(m)
    out = spec.unflatten(leaves)
    children, aux, _ = _python_flatten(m)
    expected = om._unflattener(type(m))(aux, children)
    assert type(out) is type(m)
    assert out is not m
    assert out._oxtree_def is aux
    # The same attributes in the same order (configuration first, then the tree ones).
    assert list(out.__dict__) == list(expected.__dict__)
    assert all(out.__dict__[k] is v for k, v in aux.others.items())
    assert oxtree.tree_leaves(out) == oxtree.tree_leaves(expected) == leaves
    assert oxtree.tree_structure(out) == spec


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
    m.act = "gelu"  # makes the aux data stale: the core hands the module to module.py
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
    def __init__(self, kept: int | None = None) -> None:
        self.compiled: Any = {}
        self.kept = kept


def _core_jit(
    known: dict[type, bool], classify: Any, kept: int | None = None, direct: Any = None
) -> Any:
    """A `_FilterJitCore` subclass whose rare paths record what the core asks, and whose
    compiled function records its arguments and returns them with a `_Record`."""
    from oxtree._core import _FilterJitCore

    class Jit(_FilterJitCore):
        def __init__(self, *_: Any) -> None:
            self.log: list[tuple[Any, ...]] = []
            self.record = _Record(direct)

        def _entry(self, graphdef: Any, types: Any, has_kwargs: bool) -> _Entry:
            self.log.append(("entry", graphdef, types, has_kwargs))
            return _Entry(kept)

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


def test_filter_jit_core_aliased_and_donated() -> None:
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
    # With donation, the arrays come as two tuples: those kept, then the others.
    jit = _core_jit(known, bool, kept=1)
    jit(a, b)
    assert jit.log[-1] == ("call", ((a,), (b,)))
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
