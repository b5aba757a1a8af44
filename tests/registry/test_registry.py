"""The registry: custom nodes, node classes, dataclasses, static types, namespaces and Partial.

Registrations are global and live as long as the process, so every test makes its own classes
(`make_box` and friends) and the `track` fixture unregisters them afterwards. Classes whose
treespecs are pickled are defined at module level, so that pickle can find them again.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import gc
import pickle
import sys
import threading
import weakref
from collections import OrderedDict, defaultdict, deque
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import numpy as np
import oxtree
import pytest
from nodes import Point
from oxtree import dataclasses as odc

# --------------------------------------------------------------------------------------------------
# Fresh classes and cleanup.


class Registrations:
    """Registers classes with oxtree and forgets them again when the test ends."""

    def __init__(self) -> None:
        self.made: list[tuple[type, str]] = []

    def track(self, cls: type, namespace: str = "") -> type:
        self.made.append((cls, namespace))
        return cls

    def node(
        self,
        cls: type,
        flatten: Callable[[Any], Any],
        unflatten: Callable[[Any, Any], Any],
        namespace: str = "",
    ) -> type:
        out = oxtree.register_pytree_node(cls, flatten, unflatten, namespace=namespace)
        assert out is cls
        return self.track(cls, namespace)

    def box(self, cls: type, namespace: str = "") -> type:
        """Registers a class made by `make_box` with its own rules."""
        return self.node(cls, cls.flatten, cls.unflatten, namespace)

    def cleanup(self) -> None:
        for cls, namespace in reversed(self.made):
            with contextlib.suppress(ValueError):
                oxtree.unregister_pytree_node(cls, namespace=namespace)


@pytest.fixture
def reg() -> Iterator[Registrations]:
    registrations = Registrations()
    yield registrations
    registrations.cleanup()


def make_box(name: str = "Box") -> type:
    """A fresh container class: children in order, `meta` is the aux data.

    `Box.flatten` returns JAX-style `(children, aux)`; `Box.unflatten(aux, children)` rebuilds.
    """

    class Box:
        __hash__ = None  # type: ignore[assignment]

        def __init__(self, *children: Any, meta: Any = "m") -> None:
            self.children = children
            self.meta = meta

        def __eq__(self, other: object) -> bool:
            return (
                type(other) is type(self)
                and other.meta == self.meta
                and len(other.children) == len(self.children)
                and all(_same(a, b) for a, b in zip(other.children, self.children, strict=True))
            )

        def __repr__(self) -> str:
            inner = ", ".join(map(repr, self.children))
            return f"{type(self).__name__}({inner}, meta={self.meta!r})"

        @staticmethod
        def flatten(box: Any) -> tuple[Any, Any]:
            return box.children, box.meta

        @classmethod
        def unflatten(cls, meta: Any, children: Any) -> Any:
            return cls(*children, meta=meta)

    Box.__name__ = Box.__qualname__ = name
    return Box


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return type(a) is type(b) and np.array_equal(a, b)
    return bool(a == b)


class Boom(Exception):
    """Raised by the flatten and unflatten functions of the error tests."""


# --------------------------------------------------------------------------------------------------
# Module-level classes for the pickling tests (pickle finds classes by module and name).


class PickleBox:
    def __init__(self, a: Any, b: Any, tag: str = "t") -> None:
        self.a, self.b, self.tag = a, b, tag

    def __eq__(self, other: object) -> bool:
        return type(other) is PickleBox and (other.a, other.b, other.tag) == (
            self.a,
            self.b,
            self.tag,
        )

    __hash__ = None  # type: ignore[assignment]


def pickle_box_flatten(box: PickleBox) -> tuple[tuple[Any, Any], str]:
    return (box.a, box.b), box.tag


def pickle_box_unflatten(tag: str, children: tuple[Any, Any]) -> PickleBox:
    return PickleBox(*children, tag=tag)


@dataclasses.dataclass
class PickleData:
    x: Any
    y: Any
    label: str = dataclasses.field(default="L", metadata={"static": True})


@dataclasses.dataclass(frozen=True)
class PickleFrozen:
    x: Any
    doubled: Any = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "doubled", self.x * 2)


class PickleUnit:
    def __init__(self, name: str) -> None:
        self.name = name

    def __eq__(self, other: object) -> bool:
        return type(other) is PickleUnit and other.name == self.name

    def __hash__(self) -> int:
        return hash(("PickleUnit", self.name))

    def __repr__(self) -> str:
        return f"PickleUnit({self.name!r})"


def add3(x: Any, y: Any, z: Any) -> Any:
    return x + y + z


@pytest.fixture
def pickle_registrations(reg: Registrations) -> Registrations:
    reg.node(PickleBox, pickle_box_flatten, pickle_box_unflatten)
    reg.node(PickleBox, pickle_box_flatten, pickle_box_unflatten, namespace="pickle-ns")
    oxtree.register_dataclass(PickleData)
    reg.track(PickleData)
    oxtree.register_dataclass(PickleFrozen, init_on_unflatten=False)
    reg.track(PickleFrozen)
    oxtree.register_static(PickleUnit)
    reg.track(PickleUnit)
    return reg


# --------------------------------------------------------------------------------------------------
# register_pytree_node: the basics.


def test_register_returns_the_class_and_makes_a_node(reg: Registrations) -> None:
    Box = make_box()
    assert oxtree.tree_leaves(Box(1, 2)) == [Box(1, 2)]
    returned = oxtree.register_pytree_node(Box, Box.flatten, Box.unflatten)
    reg.track(Box)
    assert returned is Box
    assert oxtree.tree_leaves(Box(1, 2)) == [1, 2]
    assert oxtree.tree_leaves([Box(1, (2, Box(3, meta="x"))), {"k": Box()}]) == [1, 2, 3]
    assert Box in oxtree.registered_types()


def test_jax_style_and_optree_style_flatten(reg: Registrations) -> None:
    JaxStyle, OptreeStyle = make_box("JaxStyle"), make_box("OptreeStyle")
    reg.box(JaxStyle)
    reg.node(
        OptreeStyle,
        lambda b: (b.children, b.meta, tuple(range(len(b.children)))),
        OptreeStyle.unflatten,
    )
    for cls in (JaxStyle, OptreeStyle):
        tree = [cls(1, [2, 3], meta=("k", 1)), 4]
        leaves, spec = oxtree.tree_flatten(tree)
        assert leaves == [1, 2, 3, 4]
        assert spec.num_leaves == 4
        assert spec.unflatten(leaves) == tree
        assert oxtree.tree_map(lambda x: x * 10, tree) == [cls(10, [20, 30], meta=("k", 1)), 40]


def test_unflatten_gets_the_same_aux_and_a_tuple_of_children(reg: Registrations) -> None:
    Box = make_box()
    aux = ("static", 1)
    calls: list[tuple[Any, Any]] = []

    def unflatten(meta: Any, children: Any) -> Any:
        calls.append((meta, children))
        return Box(*children, meta=meta)

    # The flatten function hands over a list: the unflatten function still gets a tuple.
    reg.node(Box, lambda b: (list(b.children), b.meta), unflatten)
    out = oxtree.tree_map(lambda x: -x, Box(1, 2, meta=aux))
    assert out == Box(-1, -2, meta=aux)
    assert len(calls) == 1
    meta, children = calls[0]
    assert meta is aux
    assert type(children) is tuple
    assert children == (-1, -2)


def test_children_may_be_any_iterable(reg: Registrations) -> None:
    Gen = make_box("Gen")
    reg.node(Gen, lambda b: ((c for c in b.children), None), Gen.unflatten)
    tree = Gen(1, Gen(2, meta=None), 3, meta=None)
    assert oxtree.tree_leaves(tree) == [1, 2, 3]
    assert oxtree.tree_map(str, tree) == Gen("1", Gen("2", meta=None), "3", meta=None)


def test_flatten_called_once_per_node(reg: Registrations) -> None:
    Box = make_box()
    calls: list[Any] = []

    def flatten(b: Any) -> Any:
        calls.append(b)
        return b.children, b.meta

    reg.node(Box, flatten, Box.unflatten)
    inner = Box(2)
    tree = [Box(1, inner), Box()]
    assert oxtree.tree_leaves(tree) == [1, 2]
    assert len(calls) == 3
    assert calls[1] is inner


def test_subclass_of_a_registered_class_is_a_leaf(reg: Registrations) -> None:
    Box = make_box()
    reg.box(Box)

    class SubBox(Box):  # type: ignore[misc, valid-type]
        pass

    sub = SubBox(1, 2)
    assert oxtree.tree_leaves([Box(1), sub]) == [1, sub]


def test_leafless_custom_node_and_none_children(reg: Registrations) -> None:
    Box = make_box()
    reg.box(Box)
    assert oxtree.tree_leaves(Box()) == []
    assert oxtree.tree_structure(Box()).num_leaves == 0
    assert oxtree.tree_leaves(Box(None, 1)) == [1]
    assert oxtree.tree_leaves(Box(None, 1), none_is_leaf=True) == [None, 1]
    spec = oxtree.tree_structure(Box(None, 1))
    assert spec.unflatten([5]) == Box(None, 5)


def test_is_leaf_stops_at_custom_nodes(reg: Registrations) -> None:
    Box = make_box()
    reg.box(Box)
    tree = [Box(1, 2), Box(3)]
    leaves = oxtree.tree_leaves(tree, is_leaf=lambda x: isinstance(x, Box))
    assert leaves == tree
    assert all(a is b for a, b in zip(leaves, tree, strict=True))


def test_spec_of_a_custom_node(reg: Registrations) -> None:
    Box = make_box()
    reg.box(Box)
    spec = oxtree.tree_structure(Box(1, (2, 3)))
    assert repr(spec) == "PyTreeSpec(CustomTreeNode(Box['m'], [*, (*, *)]))"
    assert spec.kind == oxtree.PyTreeKind.CUSTOM
    assert spec.type is Box
    assert spec.num_children == 2
    assert spec.num_leaves == 3
    assert spec.num_nodes == 5
    assert spec.namespace == ""
    assert spec.children()[1] == oxtree.tree_structure((0, 0))


def test_structure_equality_follows_aux_data(reg: Registrations) -> None:
    Box, Other = make_box(), make_box("Other")
    reg.box(Box)
    reg.box(Other)
    a = oxtree.tree_structure([Box(1, 2, meta=("k", 1))])
    same = oxtree.tree_structure([Box("x", "y", meta=("k", 1))])
    assert a == same
    assert hash(a) == hash(same)
    assert a != oxtree.tree_structure([Box(1, 2, meta=("k", 2))])
    assert a != oxtree.tree_structure([Box(1, 2, 3, meta=("k", 1))])
    assert a != oxtree.tree_structure([Other(1, 2, meta=("k", 1))])
    assert a != oxtree.tree_structure([(1, 2)])


def test_reregister_after_unregister_uses_the_new_rules(reg: Registrations) -> None:
    Box = make_box()
    reg.box(Box)
    assert oxtree.tree_leaves(Box(1, 2)) == [1, 2]
    oxtree.unregister_pytree_node(Box)
    assert oxtree.tree_leaves(Box(1, 2)) == [Box(1, 2)]
    reg.node(Box, lambda b: (b.children[:1], b.children[1:]), lambda aux, c: Box(*c, *aux))
    assert oxtree.tree_leaves(Box(1, 2)) == [1]
    assert oxtree.tree_map(lambda x: x + 1, Box(1, 2)) == Box(2, 2)


def test_registered_int_becomes_a_node(reg: Registrations) -> None:
    # Not a built-in node type, so it may be registered (optree allows it too).
    reg.node(int, lambda i: ((), i), lambda aux, _: aux)
    assert oxtree.tree_leaves([1, 2.5]) == [2.5]
    assert oxtree.tree_structure(1) != oxtree.tree_structure(2)
    assert oxtree.tree_unflatten(oxtree.tree_structure([7, 0.0]), [1.5]) == [7, 1.5]


@pytest.mark.parametrize("value", [3, 2.5, "s", True, b"b", 1j], ids=lambda v: type(v).__name__)
def test_registered_scalar_type_is_a_node_only_where_registered(
    reg: Registrations, value: Any
) -> None:
    # Builtin scalars take a fast path that skips the registry while none is registered.
    tree = [value, (value, None)]
    reg.node(type(value), lambda v: ((), v), lambda aux, _: aux, namespace="scalar-ns")
    assert oxtree.tree_leaves(tree) == [value, value]
    assert oxtree.tree_leaves(tree, namespace="scalar-ns") == []
    spec = oxtree.tree_structure(tree, namespace="scalar-ns")
    assert spec.num_leaves == 0
    assert oxtree.tree_unflatten(spec, []) == tree
    oxtree.unregister_pytree_node(type(value), namespace="scalar-ns")
    assert oxtree.tree_leaves(tree, namespace="scalar-ns") == [value, value]


def test_registered_types_lists_namespace_and_global(reg: Registrations) -> None:
    Global, Local = make_box("Global"), make_box("Local")
    reg.box(Global)
    reg.box(Local, "types-ns")
    assert Global in oxtree.registered_types()
    assert Local not in oxtree.registered_types()
    in_ns = oxtree.registered_types(namespace="types-ns")
    assert Global in in_ns
    assert Local in in_ns
    assert Local not in oxtree.registered_types(namespace="another-ns")


def test_deep_chain_of_custom_nodes(reg: Registrations) -> None:
    Box = make_box()
    reg.box(Box)

    @dataclasses.dataclass
    class Link:
        nxt: Any
        depth: int = dataclasses.field(default=0, metadata={"static": True})

    oxtree.register_dataclass(Link)
    reg.track(Link)
    tree: Any = "bottom"
    for depth in range(6000):
        tree = Box(tree, meta=depth) if depth % 2 else Link(tree, depth)
    leaves, spec = oxtree.tree_flatten(tree)
    assert leaves == ["bottom"]
    assert spec.num_nodes == 6001
    top = spec.unflatten(["top"])
    assert type(top) is Box
    assert top.meta == 5999
    assert oxtree.tree_structure(oxtree.tree_map(str.upper, tree)) == spec


def test_reentrant_flatten_and_registration_mid_walk(reg: Registrations) -> None:
    Outer = make_box("Outer")
    made: list[type] = []

    def flatten(box: Any) -> Any:
        # A flatten function may walk trees itself and change the registry.
        assert oxtree.tree_leaves(list(box.children)) is not None
        tmp = make_box("Tmp")
        oxtree.register_pytree_node(tmp, tmp.flatten, tmp.unflatten)
        oxtree.unregister_pytree_node(tmp)
        made.append(tmp)
        return box.children, box.meta

    reg.node(Outer, flatten, Outer.unflatten)
    tree = [Outer(1, Outer(2, [3])), 4]
    assert oxtree.tree_leaves(tree) == [1, 2, 3, 4]
    assert oxtree.tree_map(lambda v: v * 2, tree) == [Outer(2, Outer(4, [6])), 8]
    assert len(made) >= 4
    assert not any(t in oxtree.registered_types() for t in made)


def test_dataclass_fields_read_mid_walk_may_walk_and_fail(reg: Registrations) -> None:
    """A dataclass's fields wait on the walk's pending stack with the values of the dicts
    around them: a field read that walks other trees, or raises, must not disturb it."""
    inner = {"z": [1, {"y": 2, "x": (3,)}], "a": None}

    @dataclasses.dataclass
    class Pair:
        first: Any
        second: Any

    class Reading(Pair):
        fail = False

        @property  # type: ignore[override]
        def second(self) -> Any:
            assert oxtree.tree_leaves(inner) == [1, 3, 2]
            if Reading.fail:
                raise RuntimeError("field read failed")
            return {"q": self.__dict__["second"], "p": 0}

        @second.setter
        def second(self, value: Any) -> None:
            self.__dict__["second"] = value

    for cls in (Pair, Reading):
        oxtree.register_dataclass(cls, data_fields=["first", "second"], meta_fields=[])
        reg.track(cls)
    tree = {"b": Reading({"k": 1, "j": 2}, [3]), "a": [Pair(4, Reading(5, 6)), {"m": 7}]}
    leaves, spec = oxtree.tree_flatten(tree)
    assert leaves == [4, 5, 0, 6, 7, 2, 1, 0, 3]
    assert spec.num_leaves == 9
    Reading.fail = True
    with pytest.raises(RuntimeError, match="field read failed"):
        oxtree.tree_flatten(tree)
    Reading.fail = False
    # Nothing the failed walk left behind reaches the next one.
    assert oxtree.tree_flatten(tree) == (leaves, spec)
    assert oxtree.tree_leaves({"s": Pair(1, 2), "r": Pair({"d": 3, "c": 4}, 5)}) == [
        4,
        3,
        5,
        1,
        2,
    ]


def test_walk_inside_a_walk_sees_a_registration_made_there(reg: Registrations) -> None:
    """The outer walk keeps the registry it started with; a walk started inside it (from a
    flatten function) after a registration sees the new registry, and so does the next."""
    Outer = make_box("Outer")
    Inner = make_box("Inner")
    seen: list[Any] = []

    def flatten(box: Any) -> Any:
        if Inner not in oxtree.registered_types():
            reg.box(Inner)
        seen.append(oxtree.tree_leaves([Inner(1, Inner(2))]))
        return box.children, box.meta

    reg.node(Outer, flatten, Outer.unflatten)
    # Inner was unregistered when the walk began: the walk keeps treating it as a leaf.
    tree = [Outer(Inner(7)), Outer(8)]
    assert oxtree.tree_leaves(tree) == [Inner(7), 8]
    assert seen == [[1, 2], [1, 2]]
    assert oxtree.tree_leaves(tree) == [7, 8]
    oxtree.unregister_pytree_node(Inner)
    # Unregistered again: the walk sees a leaf (and its flatten function registers it anew).
    assert oxtree.tree_leaves(tree) == [Inner(7), 8]
    assert Inner in oxtree.registered_types()


def test_children_from_an_iterator_wait_with_dict_values(reg: Registrations) -> None:
    """Children a flatten function gives as an iterator share the walk's pending stack with
    the values of the dicts around and inside them."""
    Box = make_box("IterBox")
    reg.node(Box, lambda b: (iter(b.children), b.meta), Box.unflatten)
    tree = {"z": [Box(1, {"b": Box(2, 3), "a": 4}), 5], "y": Box()}
    leaves, spec = oxtree.tree_flatten(tree)
    assert leaves == [1, 4, 2, 3, 5]
    assert spec.unflatten(leaves) == tree
    assert oxtree.tree_map(lambda x: x * 10, tree) == {
        "z": [Box(10, {"b": Box(20, 30), "a": 40}), 50],
        "y": Box(),
    }


def test_unregistering_mid_walk_does_not_change_the_walk(reg: Registrations) -> None:
    Box = make_box()

    def flatten(box: Any) -> Any:
        with contextlib.suppress(ValueError):
            oxtree.unregister_pytree_node(Box)
        return box.children, box.meta

    reg.node(Box, flatten, Box.unflatten)
    tree = [Box(1), Box(2, Box(3))]
    # The walk that started with Box registered treats every Box as a node ...
    leaves, spec = oxtree.tree_flatten(tree)
    assert leaves == [1, 2, 3]
    assert spec.unflatten([4, 5, 6]) == [Box(4), Box(5, Box(6))]
    # ... and the next walk sees it unregistered.
    assert oxtree.tree_leaves(tree) == tree


def test_unregistered_class_can_be_collected() -> None:
    def scope() -> tuple[weakref.ref[type], Any]:
        Box = make_box("Collectable")
        oxtree.register_pytree_node(Box, Box.flatten, Box.unflatten, namespace="gc-ns")
        spec = oxtree.tree_structure(Box(1), namespace="gc-ns")
        oxtree.unregister_pytree_node(Box, namespace="gc-ns")
        return weakref.ref(Box), spec

    ref, spec = scope()
    gc.collect()
    assert ref() is not None  # the spec still uses it
    assert spec.unflatten([2]).children == (2,)
    del spec
    gc.collect()
    assert ref() is None


# --------------------------------------------------------------------------------------------------
# Registration errors.


def test_register_twice_in_one_namespace(reg: Registrations) -> None:
    Box = make_box()
    reg.box(Box)
    with pytest.raises(ValueError, match="already registered") as info:
        oxtree.register_pytree_node(Box, Box.flatten, Box.unflatten)
    assert "Box" in str(info.value)
    reg.box(Box, namespace="ns")  # A different namespace is fine.
    with pytest.raises(ValueError, match=r"already registered.*'ns'"):
        oxtree.register_pytree_node(Box, Box.flatten, Box.unflatten, namespace="ns")
    with pytest.raises(ValueError, match="already registered"):
        oxtree.register_static(Box)
    with pytest.raises(ValueError, match="already registered"):
        oxtree.register_dataclass(Box, data_fields=["children"], meta_fields=["meta"])
    # The first registration is still the one in force.
    assert oxtree.tree_leaves(Box(1, 2)) == [1, 2]


BUILTIN_NODE_TYPES = [tuple, list, dict, type(None), OrderedDict, defaultdict, deque]


@pytest.mark.parametrize("cls", BUILTIN_NODE_TYPES, ids=lambda c: c.__name__)
@pytest.mark.parametrize("namespace", ["", "ns"])
def test_builtin_node_types_cannot_be_registered(cls: type, namespace: str) -> None:
    tree = [(1,), {"a": 2}]
    leaves_before = oxtree.tree_leaves(tree, namespace=namespace)
    with pytest.raises(ValueError, match="built-in"):
        oxtree.register_pytree_node(
            cls, lambda x: ((), None), lambda a, c: None, namespace=namespace
        )
    with pytest.raises(ValueError, match="built-in"):
        oxtree.register_static(cls, namespace=namespace)
    with pytest.raises(ValueError, match="built-in"):
        oxtree.unregister_pytree_node(cls, namespace=namespace)
    assert oxtree.tree_leaves(tree, namespace=namespace) == leaves_before


@pytest.mark.parametrize("bad", [make_box()(1), "Box", None, 3, len], ids=repr)
def test_registering_a_non_class_is_a_type_error(bad: Any) -> None:
    with pytest.raises(TypeError, match="class"):
        oxtree.register_pytree_node(bad, lambda x: ((), None), lambda a, c: None)
    with pytest.raises(TypeError, match="class"):
        oxtree.register_static(bad)
    with pytest.raises(TypeError, match="class"):
        oxtree.unregister_pytree_node(bad)
    with pytest.raises(TypeError, match="class"):
        oxtree.register_dataclass(bad, data_fields=[], meta_fields=[])


@pytest.mark.parametrize("bad", [None, 1, "flatten", (lambda x: x,)], ids=repr)
def test_non_callable_functions_are_a_type_error(bad: Any) -> None:
    Box = make_box()
    with pytest.raises(TypeError, match="flatten_func"):
        oxtree.register_pytree_node(Box, bad, Box.unflatten)
    with pytest.raises(TypeError, match="unflatten_func"):
        oxtree.register_pytree_node(Box, Box.flatten, bad)
    if bad is not None:  # None is the default: no keys function.
        with pytest.raises(TypeError, match="flatten_with_keys_func"):
            oxtree.register_pytree_node(Box, Box.flatten, Box.unflatten, flatten_with_keys_func=bad)
    # A failed registration leaves nothing behind.
    assert Box not in oxtree.registered_types()
    assert oxtree.tree_leaves(Box(1)) == [Box(1)]


def test_failed_registration_leaves_the_class_registrable(reg: Registrations) -> None:
    Box = make_box()
    with pytest.raises(TypeError, match="unflatten_func"):
        oxtree.register_pytree_node(Box, Box.flatten, 42)
    reg.box(Box)
    assert oxtree.tree_leaves(Box(1, 2)) == [1, 2]


def test_flatten_with_keys_func_is_accepted(reg: Registrations) -> None:
    Box = make_box()
    out = oxtree.register_pytree_node(
        Box,
        Box.flatten,
        Box.unflatten,
        flatten_with_keys_func=lambda b: ([(i, c) for i, c in enumerate(b.children)], b.meta),
    )
    reg.track(Box)
    assert out is Box
    assert oxtree.tree_leaves(Box(1, 2)) == [1, 2]
    assert oxtree.tree_map(lambda x: x * 2, Box(1, 2)) == Box(2, 4)


# --------------------------------------------------------------------------------------------------
# register_pytree_node_class.


def _node_class_body(name: str) -> type:
    class Node:
        def __init__(self, x: Any, y: Any, label: str = "n") -> None:
            self.x, self.y, self.label = x, y, label

        def __eq__(self, other: object) -> bool:
            return type(other) is type(self) and (other.x, other.y, other.label) == (
                self.x,
                self.y,
                self.label,
            )

        __hash__ = None  # type: ignore[assignment]

        def tree_flatten(self) -> tuple[tuple[Any, Any], str]:
            return (self.x, self.y), self.label

        @classmethod
        def tree_unflatten(cls, label: str, children: tuple[Any, Any]) -> Any:
            return cls(*children, label=label)

    Node.__name__ = Node.__qualname__ = name
    return Node


@pytest.mark.parametrize("form", ["bare", "parentheses", "namespace"])
def test_register_pytree_node_class(reg: Registrations, form: str) -> None:
    cls = _node_class_body("Node")
    namespace = "ns" if form == "namespace" else ""
    if form == "bare":
        decorated = oxtree.register_pytree_node_class(cls)
    elif form == "parentheses":
        decorated = oxtree.register_pytree_node_class()(cls)
    else:
        decorated = oxtree.register_pytree_node_class(namespace="ns")(cls)
    reg.track(cls, namespace)
    assert decorated is cls
    tree = {"n": cls(1, [2, 3], label="L")}
    assert oxtree.tree_leaves(tree, namespace=namespace) == [1, 2, 3]
    mapped = oxtree.tree_map(lambda v: v + 1, tree, namespace=namespace)
    assert mapped == {"n": cls(2, [3, 4], label="L")}
    spec = oxtree.tree_structure(tree, namespace=namespace)
    assert spec.namespace == namespace
    if namespace:
        assert oxtree.tree_leaves(tree) == [tree["n"]]


def test_register_pytree_node_class_as_decorator_syntax(reg: Registrations) -> None:
    @oxtree.register_pytree_node_class
    class Bare:
        def __init__(self, v: Any) -> None:
            self.v = v

        def tree_flatten(self) -> tuple[tuple[Any], None]:
            return (self.v,), None

        @classmethod
        def tree_unflatten(cls, aux: None, children: tuple[Any]) -> Bare:
            return cls(*children)

    @oxtree.register_pytree_node_class(namespace="deco-ns")
    class WithArgs(Bare):
        pass

    reg.track(Bare)
    reg.track(WithArgs, "deco-ns")
    assert isinstance(Bare, type)
    assert isinstance(WithArgs, type)
    assert oxtree.tree_leaves([Bare(1), Bare(Bare(2))]) == [1, 2]
    assert oxtree.tree_leaves(WithArgs(3), namespace="deco-ns") == [3]
    assert type(oxtree.tree_map(str, WithArgs(3), namespace="deco-ns")) is WithArgs


def test_register_pytree_node_class_errors() -> None:
    class NoMethods:
        pass

    class OnlyFlatten:
        def tree_flatten(self) -> tuple[tuple[()], None]:
            return (), None

    with pytest.raises(TypeError, match="tree_flatten"):
        oxtree.register_pytree_node_class(NoMethods)
    with pytest.raises(TypeError, match="tree_unflatten"):
        oxtree.register_pytree_node_class(OnlyFlatten)
    with pytest.raises(TypeError, match="class"):
        oxtree.register_pytree_node_class(OnlyFlatten())
    assert NoMethods not in oxtree.registered_types()
    assert OnlyFlatten not in oxtree.registered_types()


# --------------------------------------------------------------------------------------------------
# unregister_pytree_node.


def test_unregister_something_not_registered() -> None:
    Box = make_box()
    with pytest.raises(ValueError, match="not registered"):
        oxtree.unregister_pytree_node(Box)
    oxtree.register_pytree_node(Box, Box.flatten, Box.unflatten, namespace="ns")
    try:
        with pytest.raises(ValueError, match=r"not registered.*global"):
            oxtree.unregister_pytree_node(Box)
        with pytest.raises(ValueError, match=r"not registered.*'other'"):
            oxtree.unregister_pytree_node(Box, namespace="other")
        assert oxtree.tree_leaves(Box(1), namespace="ns") == [1]
    finally:
        oxtree.unregister_pytree_node(Box, namespace="ns")
    with pytest.raises(ValueError, match="not registered"):
        oxtree.unregister_pytree_node(Box, namespace="ns")
    with pytest.raises(ValueError, match="not registered"):
        oxtree.unregister_pytree_node(int)


# Module level, so that its treespecs pickle; registered and unregistered by the test itself.
GoneBox = make_box("GoneBox")


@pytest.mark.parametrize("namespace", ["", "gone-ns"])
def test_treedefs_outlive_the_registration(reg: Registrations, namespace: str) -> None:
    Box = GoneBox
    reg.box(Box, namespace)
    tree = [Box(1, (2,), meta="k"), 3]
    spec = oxtree.tree_structure(tree, namespace=namespace)
    twin = oxtree.tree_structure(tree, namespace=namespace)
    text = repr(spec)
    oxtree.unregister_pytree_node(Box, namespace=namespace)
    assert Box not in oxtree.registered_types(namespace=namespace)
    # The type is a leaf now...
    assert oxtree.tree_leaves(tree, namespace=namespace) == [tree[0], 3]
    # ... but the treedefs made before keep working.
    assert repr(spec) == text
    assert spec == twin
    assert hash(spec) == hash(twin)
    assert spec.unflatten([10, 20, 30]) == [Box(10, (20,), meta="k"), 30]
    assert spec.num_leaves == 3
    assert copy.deepcopy(spec) == spec
    clone = pickle.loads(pickle.dumps(spec))
    assert clone == spec
    assert repr(clone) == text
    assert clone.unflatten("abc") == [Box("a", ("b",), meta="k"), "c"]
    # A spec of the (now) leaf is a different structure.
    assert oxtree.tree_structure(tree, namespace=namespace) != spec


class _Rebuild:
    """An unflatten function whose only holder is its registration: a weak reference to it
    says whether the registration is alive."""

    def __init__(self, cls: type) -> None:
        self.cls = cls

    def __call__(self, meta: Any, children: Any) -> Any:
        return self.cls(*children, meta=meta)


def _derived_specs(spec: Any, leaf_spec: Any) -> dict[str, Any]:
    """Treespecs whose nodes are copied from `spec`'s (a registered node at the root of its
    first child) by each operation that copies nodes across treespecs."""
    inner = oxtree.tree_structure((0, 0))
    box_spec = spec.child(0)
    return {
        "child": box_spec,
        "children": spec.children()[0],
        "compose": spec.compose(inner),
        "compose-inner": inner.compose(spec),
        "graft": leaf_spec._graft([box_spec]),
        "broadcast": spec.broadcast_to_common_suffix(oxtree.tree_structure([0, 0])),
        "broadcast-other": oxtree.tree_structure([0, 0]).broadcast_to_common_suffix(spec),
        "transform": spec.transform(),
        "one_level": box_spec.one_level(),
        "pickle": pickle.loads(pickle.dumps(spec)),
    }


def test_treespecs_made_from_others_keep_the_registration(reg: Registrations) -> None:
    # Each operation that copies registered nodes into a new treespec brings their
    # registration along: once the type is unregistered and the source treespec is gone, the
    # copies alone keep it alive (and let go of it when they go).
    Box = make_box("GoneBox")
    rebuild = _Rebuild(GoneBox)
    oxtree.register_pytree_node(GoneBox, Box.flatten, rebuild, namespace="keep-ns")
    reg.track(GoneBox, "keep-ns")
    alive = weakref.ref(rebuild)
    del rebuild
    spec = oxtree.tree_structure([GoneBox(1, 2, meta="k"), 3], namespace="keep-ns")
    derived = _derived_specs(spec, oxtree.tree_structure(0))
    texts = {name: repr(d) for name, d in derived.items()}
    oxtree.unregister_pytree_node(GoneBox, namespace="keep-ns")
    del spec
    gc.collect()
    assert alive() is not None
    for name, d in derived.items():
        assert repr(d) == texts[name], name
        leaves = list(range(d.num_leaves))
        assert d.unflatten(leaves) == d.unflatten(leaves), name
        assert oxtree.tree_structure(d.unflatten(leaves)) != d, name  # GoneBox is a leaf now
    del d
    assert derived["child"].unflatten([5, 6]) == GoneBox(5, 6, meta="k")
    assert derived["compose"].unflatten(range(6)) == [GoneBox((0, 1), (2, 3), meta="k"), (4, 5)]
    assert derived["graft"].unflatten([7, 8]) == GoneBox(7, 8, meta="k")
    assert derived["one_level"].unflatten("ab") == GoneBox("a", "b", meta="k")
    for name in list(derived):
        del derived[name]
        gc.collect()
        assert (alive() is None) == (not derived), name


def test_jax_treedefs_made_from_node_data_keep_the_registration(reg: Registrations) -> None:
    Box = make_box("GoneBox")
    rebuild = _Rebuild(GoneBox)
    oxtree.register_pytree_node(GoneBox, Box.flatten, rebuild)
    reg.track(GoneBox)
    alive = weakref.ref(rebuild)
    del rebuild
    leaf = oxtree.tree_util.tree_structure(0)
    made = oxtree.tree_util.PyTreeDef.from_node_data_and_children(
        oxtree.tree_util.default_registry, (GoneBox, "k"), [leaf, leaf]
    )
    oxtree.unregister_pytree_node(GoneBox)
    gc.collect()
    assert alive() is not None
    assert made.unflatten([1, 2]) == GoneBox(1, 2, meta="k")
    del made
    gc.collect()
    assert alive() is None


# --------------------------------------------------------------------------------------------------
# Namespaces.


def test_global_namespace_is_the_empty_string() -> None:
    assert oxtree.GLOBAL_NAMESPACE == ""


def test_namespaced_type_is_a_node_only_in_its_namespace(reg: Registrations) -> None:
    Box = make_box()
    reg.box(Box, "ns")
    tree = {"b": Box(1, 2), "c": 3}
    assert oxtree.tree_leaves(tree) == [tree["b"], 3]
    assert oxtree.tree_leaves(tree, namespace="other") == [tree["b"], 3]
    assert oxtree.tree_leaves(tree, namespace="ns") == [1, 2, 3]
    assert oxtree.tree_map(lambda x: x * 2, tree, namespace="ns") == {"b": Box(2, 4), "c": 6}
    with pytest.raises(TypeError):
        oxtree.tree_map(lambda x: x * 2, tree)
    assert Box in oxtree.registered_types(namespace="ns")
    assert Box not in oxtree.registered_types()
    assert oxtree.tree_is_leaf(Box(1)) is True
    assert oxtree.tree_is_leaf(Box(1), namespace="ns") is False


def test_namespace_lookup_falls_back_to_global(reg: Registrations) -> None:
    Global, Local = make_box("Global"), make_box("Local")
    reg.box(Global)
    reg.box(Local, "ns")
    tree = [Global(1, Local(2)), Local(Global(3))]
    assert oxtree.tree_leaves(tree, namespace="ns") == [1, 2, 3]
    assert oxtree.tree_leaves(tree) == [1, tree[0].children[1], tree[1]]
    assert oxtree.tree_leaves(tree, namespace="elsewhere") == [1, tree[0].children[1], tree[1]]


def test_namespace_rules_override_global_rules(reg: Registrations) -> None:
    Box = make_box()
    reg.box(Box)  # globally: every child
    reg.node(Box, lambda b: (b.children[:1], b.children[1:]), lambda aux, c: Box(*c, *aux), "ns")
    box = Box(1, 2, meta=None)
    assert oxtree.tree_leaves(box) == [1, 2]
    assert oxtree.tree_leaves(box, namespace="ns") == [1]
    assert oxtree.tree_leaves(box, namespace="other") == [1, 2]
    assert oxtree.tree_map(str, box, namespace="ns").children == ("1", 2)
    assert oxtree.tree_map(str, box).children == ("1", "2")
    assert oxtree.tree_structure(box) != oxtree.tree_structure(box, namespace="ns")


def test_spec_namespace_and_repr(reg: Registrations) -> None:
    Global, Local = make_box("Global"), make_box("Local")
    reg.box(Global)
    reg.box(Local, "ns")
    local = oxtree.tree_structure([Local(1, 2), 3], namespace="ns")
    assert local.namespace == "ns"
    assert repr(local) == "PyTreeSpec([CustomTreeNode(Local['m'], [*, *]), *], namespace='ns')"
    # No custom node of the namespace used: the spec is a global one.
    plain = oxtree.tree_structure([1, 2], namespace="ns")
    assert plain.namespace == ""
    assert plain == oxtree.tree_structure([1, 2])
    assert repr(plain) == "PyTreeSpec([*, *])"
    # A custom node found, even of a global registration: the walk keeps its namespace (as
    # optree's does), and an empty namespace matches it in `==`.
    global_only = oxtree.tree_structure(Global(1), namespace="ns")
    assert global_only.namespace == "ns"
    assert repr(global_only) == "PyTreeSpec(CustomTreeNode(Global['m'], [*]), namespace='ns')"
    assert global_only == oxtree.tree_structure(Global(1))
    assert hash(global_only) == hash(oxtree.tree_structure(Global(1)))
    both = oxtree.tree_structure((Global(1), Local(2)), namespace="ns")
    assert both.namespace == "ns"
    assert repr(both).endswith(", namespace='ns')")
    with_none = oxtree.tree_structure([Local(None)], namespace="ns", none_is_leaf=True)
    assert repr(with_none) == (
        "PyTreeSpec([CustomTreeNode(Local['m'], [*])], NoneIsLeaf, namespace='ns')"
    )


def test_namespaced_tree_map_over_several_trees(reg: Registrations) -> None:
    Box = make_box()
    reg.box(Box, "ns")
    a, b = [Box(1, 2)], [Box(10, 20)]
    assert oxtree.tree_map(lambda x, y: x + y, a, b, namespace="ns") == [Box(11, 22)]
    with pytest.raises(ValueError, match=r"tree\[0\]"):
        oxtree.tree_map(lambda x, y: x + y, a, [(10, 20)], namespace="ns")


# --------------------------------------------------------------------------------------------------
# register_dataclass.


def test_register_dataclass_infers_fields(reg: Registrations) -> None:
    @dataclasses.dataclass
    class Q:
        x: Any
        y: Any = dataclasses.field(default=2, metadata={"static": True})
        z: Any = dataclasses.field(default=None, metadata={"pytree_node": False})
        w: Any = dataclasses.field(default=0, metadata={"static": False, "other": 1})

    assert oxtree.register_dataclass(Q) is Q
    reg.track(Q)
    q = Q([1, 2], y=2, z="z", w=3)
    assert oxtree.tree_leaves(q) == [1, 2, 3]
    assert repr(oxtree.tree_structure(Q(1))) == (
        "PyTreeSpec(CustomTreeNode(Q[(('y', 2), ('z', None))], [*, *]))"
    )
    assert oxtree.tree_map(lambda v: v * 10, q) == Q([10, 20], y=2, z="z", w=30)


def test_register_dataclass_repr_like_the_brief(reg: Registrations) -> None:
    @dataclasses.dataclass
    class Q:
        x: Any
        y: Any = dataclasses.field(metadata={"static": True})

    oxtree.register_dataclass(Q)
    reg.track(Q)
    assert repr(oxtree.tree_structure(Q(1, 2))) == "PyTreeSpec(CustomTreeNode(Q[(('y', 2),)], [*]))"


def test_register_dataclass_explicit_lists_and_order(reg: Registrations) -> None:
    @dataclasses.dataclass
    class D:
        a: Any
        b: Any
        c: Any

    oxtree.register_dataclass(D, data_fields=["c", "a"], meta_fields=["b"])
    reg.track(D)
    d = D(1, 2, 3)
    assert oxtree.tree_leaves(d) == [3, 1]
    assert repr(oxtree.tree_structure(d)) == "PyTreeSpec(CustomTreeNode(D[(('b', 2),)], [*, *]))"
    assert oxtree.tree_unflatten(oxtree.tree_structure(d), ["C", "A"]) == D("A", 2, "C")
    assert oxtree.tree_structure(d) == oxtree.tree_structure(D(0, 2, 0))
    assert oxtree.tree_structure(d) != oxtree.tree_structure(D(0, 5, 0))

    # Tuples and generators of names work as lists.
    @dataclasses.dataclass
    class E:
        a: Any
        b: Any

    oxtree.register_dataclass(E, data_fields=(n for n in ["b"]), meta_fields=("a",))
    reg.track(E)
    assert oxtree.tree_leaves(E(1, 2)) == [2]


def test_register_dataclass_calls_the_class(reg: Registrations) -> None:
    inits: list[dict[str, Any]] = []

    @dataclasses.dataclass
    class D:
        a: Any
        tag: str = dataclasses.field(default="t", metadata={"static": True})

        def __post_init__(self) -> None:
            inits.append(dict(vars(self)))

    oxtree.register_dataclass(D)
    reg.track(D)
    d = D(1, tag="x")
    inits.clear()
    assert oxtree.tree_map(lambda v: v + 1, d) == D(2, tag="x")
    assert inits == [{"a": 2, "tag": "x"}, {"a": 2, "tag": "x"}]  # the map, then the == operand


def test_register_dataclass_with_functools_partial(reg: Registrations) -> None:
    register = functools.partial(oxtree.register_dataclass, data_fields=["a"], meta_fields=["n"])

    @register
    @dataclasses.dataclass
    class D:
        n: str
        a: Any

    reg.track(D)
    assert oxtree.tree_leaves([D("x", 1), D("y", [2, 3])]) == [1, 2, 3]


def test_register_dataclass_drop_fields(reg: Registrations) -> None:
    @dataclasses.dataclass
    class D:
        a: Any
        cache: Any = None

    oxtree.register_dataclass(D, data_fields=["a"], meta_fields=[], drop_fields=["cache"])
    reg.track(D)
    d = D(1, cache="expensive")
    assert oxtree.tree_leaves(d) == [1]
    assert oxtree.tree_map(str, d) == D("1", cache=None)  # dropped: back to its default

    @dataclasses.dataclass
    class Inferred:
        a: Any
        b: Any = 0
        s: Any = dataclasses.field(default=0, metadata={"static": True})

    oxtree.register_dataclass(Inferred, drop_fields=["b"])
    reg.track(Inferred)
    assert oxtree.tree_leaves(Inferred(1, 2, 3)) == [1]
    assert repr(oxtree.tree_structure(Inferred(1, 2, 3))) == (
        "PyTreeSpec(CustomTreeNode(Inferred[(('s', 3),)], [*]))"
    )


def test_register_dataclass_ignores_non_init_fields_by_default(reg: Registrations) -> None:
    @dataclasses.dataclass
    class D:
        a: Any
        total: Any = dataclasses.field(init=False)

        def __post_init__(self) -> None:
            self.total = ("total", self.a)

    oxtree.register_dataclass(D)
    reg.track(D)
    assert oxtree.tree_leaves(D(1)) == [1]
    assert oxtree.tree_map(lambda v: v + 1, D(1)).total == ("total", 2)


def _fields_dataclass() -> type:
    @dataclasses.dataclass
    class D:
        a: Any
        b: Any
        c: Any = dataclasses.field(default=0, metadata={"static": True})
        derived: Any = dataclasses.field(default=None, init=False)

    return D


@pytest.mark.parametrize(
    ("data", "meta", "words"),
    [
        (["a"], ["c"], ["Missing", "'b'"]),
        (["a", "b", "q"], ["c"], ["Unexpected", "'q'"]),
        (["a", "b"], ["c", "derived"], ["Unexpected", "'derived'"]),
        (["a"], [], ["Missing", "'b'", "'c'"]),
        (["a", "b"], ["b", "c"], ["overlap", "'b'"]),
        (["a", "b", "c"], ["c", "b"], ["overlap", "'b'", "'c'"]),
    ],
)
def test_register_dataclass_field_errors(
    data: list[str], meta: list[str], words: list[str]
) -> None:
    D = _fields_dataclass()
    with pytest.raises(ValueError, match="data_fields") as info:
        oxtree.register_dataclass(D, data_fields=data, meta_fields=meta)
    for word in words:
        assert word in str(info.value)
    assert D not in oxtree.registered_types()
    assert oxtree.tree_leaves(D(1, 2)) == [D(1, 2)]


def test_register_dataclass_argument_type_errors() -> None:
    D = _fields_dataclass()
    with pytest.raises(TypeError, match="both"):
        oxtree.register_dataclass(D, data_fields=["a", "b"])
    with pytest.raises(TypeError, match="both"):
        oxtree.register_dataclass(D, meta_fields=["c"])

    class NotADataclass:
        def __init__(self, a: Any) -> None:
            self.a = a

    with pytest.raises(TypeError, match=r"NotADataclass.*not a dataclass"):
        oxtree.register_dataclass(NotADataclass)
    with pytest.raises(TypeError, match="class"):
        oxtree.register_dataclass(D(1, 2))
    assert D not in oxtree.registered_types()
    assert NotADataclass not in oxtree.registered_types()


def test_register_dataclass_on_a_plain_class(reg: Registrations) -> None:
    class Plain:
        def __init__(self, a: Any, n: Any) -> None:
            self.a, self.n = a, n

    oxtree.register_dataclass(Plain, data_fields=["a"], meta_fields=["n"])
    reg.track(Plain)
    out = oxtree.tree_map(lambda v: v * 3, Plain([1, 2], "n"))
    assert type(out) is Plain
    assert (out.a, out.n) == ([3, 6], "n")


def test_register_dataclass_in_a_namespace(reg: Registrations) -> None:
    @dataclasses.dataclass
    class D:
        a: Any

    oxtree.register_dataclass(D, namespace="dc-ns")
    reg.track(D, "dc-ns")
    assert oxtree.tree_leaves(D(1)) == [D(1)]
    assert oxtree.tree_leaves(D(1), namespace="dc-ns") == [1]
    assert repr(oxtree.tree_structure(D(1), namespace="dc-ns")) == (
        "PyTreeSpec(CustomTreeNode(D[()], [*]), namespace='dc-ns')"
    )


def test_dataclass_meta_may_be_unhashable(reg: Registrations) -> None:
    # optree and JAX keep unhashable metadata: compared by ==, left out of the hash.
    @dataclasses.dataclass
    class D:
        a: Any
        m: Any = dataclasses.field(default=None, metadata={"static": True})

    oxtree.register_dataclass(D)
    reg.track(D)
    d = D(1, m=["unhashable"])
    spec = oxtree.tree_structure(d)
    assert spec == oxtree.tree_structure(D(2, m=["unhashable"]))
    assert spec != oxtree.tree_structure(D(2, m=["other"]))
    assert hash(spec) == hash(oxtree.tree_structure(D(2, m=["unhashable"])))
    assert oxtree.tree_unflatten(spec, [3]) == D(3, m=["unhashable"])
    assert d.m == ["unhashable"]


# init_on_unflatten=False.


def test_init_on_unflatten_false_skips_post_init_validation(reg: Registrations) -> None:
    @dataclasses.dataclass
    class Validated:
        value: Any
        unit: str = dataclasses.field(default="m", metadata={"static": True})

        def __post_init__(self) -> None:
            if not isinstance(self.value, int | float):
                raise TypeError(f"value must be a number, got {self.value!r}")
            self.value = float(self.value)

    @dataclasses.dataclass
    class Checked(Validated):
        pass

    oxtree.register_dataclass(Validated)
    reg.track(Validated)
    oxtree.register_dataclass(Checked, init_on_unflatten=False)
    reg.track(Checked)
    # Through __init__, a map to strings is rejected by __post_init__ ...
    with pytest.raises(TypeError, match="value must be a number"):
        oxtree.tree_map(str, Validated(1))
    # ... without it, the instance is rebuilt as is.
    out = oxtree.tree_map(str, Checked(1, unit="s"))
    assert type(out) is Checked
    assert out.value == "1.0"
    assert out.unit == "s"
    spec = oxtree.tree_structure(Checked(2))
    rebuilt = spec.unflatten([object])
    assert rebuilt.value is object
    assert rebuilt.unit == "m"


def test_init_on_unflatten_false_frozen_and_init_false_fields(reg: Registrations) -> None:
    post_inits: list[Any] = []

    @dataclasses.dataclass(frozen=True)
    class Frozen:
        x: Any
        n: int = dataclasses.field(default=0, metadata={"static": True})
        total: Any = dataclasses.field(init=False)

        def __post_init__(self) -> None:
            post_inits.append(self.x)
            object.__setattr__(self, "total", self.x + 100)

    oxtree.register_dataclass(Frozen, init_on_unflatten=False)
    reg.track(Frozen)
    f = Frozen(1, n=3)
    assert f.total == 101
    assert oxtree.tree_leaves(f) == [1, 101]  # the init=False field is a child too
    assert repr(oxtree.tree_structure(f)) == (
        "PyTreeSpec(CustomTreeNode(Frozen[(('n', 3),)], [*, *]))"
    )
    post_inits.clear()
    out = oxtree.tree_map(str, f)
    assert post_inits == []
    assert (out.x, out.n, out.total) == ("1", 3, "101")
    with pytest.raises(dataclasses.FrozenInstanceError):
        out.x = 5  # type: ignore[misc]
    # With explicit lists, every field (the init=False one too) must be listed.
    with pytest.raises(ValueError, match="total"):
        oxtree.register_dataclass(
            Frozen, data_fields=["x"], meta_fields=["n"], init_on_unflatten=False
        )


def test_init_on_unflatten_false_slots(reg: Registrations) -> None:
    @dataclasses.dataclass(slots=True)
    class Slotted:
        a: Any
        b: Any = dataclasses.field(default=0, metadata={"static": True})

        def __post_init__(self) -> None:
            if self.a is None:
                raise ValueError("a is required")

    oxtree.register_dataclass(Slotted, init_on_unflatten=False)
    reg.track(Slotted)
    out = oxtree.tree_map(lambda _: None, Slotted(1, 2), none_is_leaf=True)
    assert type(out) is Slotted
    assert (out.a, out.b) == (None, 2)


def test_init_on_unflatten_false_plain_class(reg: Registrations) -> None:
    class Converting:
        def __init__(self, a: Any) -> None:
            self.a = np.asarray(a, dtype=float)

    oxtree.register_dataclass(
        Converting, data_fields=["a"], meta_fields=[], init_on_unflatten=False
    )
    reg.track(Converting)
    sentinel = object()
    out = oxtree.tree_map(lambda _: sentinel, Converting([1, 2]))
    assert type(out) is Converting
    assert out.a is sentinel


# --------------------------------------------------------------------------------------------------
# register_static.


def make_unit(name: str = "Unit") -> type:
    class Unit:
        def __init__(self, symbol: str) -> None:
            self.symbol = symbol

        def __eq__(self, other: object) -> bool:
            return type(other) is type(self) and other.symbol == self.symbol

        def __hash__(self) -> int:
            return hash(("Unit", self.symbol))

        def __repr__(self) -> str:
            return f"{type(self).__name__}({self.symbol!r})"

    Unit.__name__ = Unit.__qualname__ = name
    return Unit


def test_register_static(reg: Registrations) -> None:
    Unit = make_unit()
    assert oxtree.register_static(Unit) is Unit
    reg.track(Unit)
    metre = Unit("m")
    tree = {"length": (1.5, metre), "unit": Unit("s")}
    assert oxtree.tree_leaves(tree) == [1.5]
    spec = oxtree.tree_structure(tree)
    assert spec.num_leaves == 1
    assert spec == oxtree.tree_structure({"length": (0, Unit("m")), "unit": Unit("s")})
    assert spec != oxtree.tree_structure({"length": (0, Unit("km")), "unit": Unit("s")})
    rebuilt = spec.unflatten([2.5])
    assert rebuilt == {"length": (2.5, metre), "unit": Unit("s")}
    assert rebuilt["length"][1] is metre
    assert oxtree.tree_map(lambda x: x * 2, tree)["length"] == (3.0, metre)
    only = oxtree.tree_structure(metre)
    assert repr(only) == "PyTreeSpec(CustomTreeNode(Unit[Unit('m')], []))"
    assert only.unflatten([]) is metre
    assert oxtree.tree_is_leaf(metre) is False


def test_register_static_in_a_namespace(reg: Registrations) -> None:
    Unit = make_unit()
    oxtree.register_static(Unit, namespace="static-ns")
    reg.track(Unit, "static-ns")
    u = Unit("m")
    assert oxtree.tree_leaves([u, 1]) == [u, 1]
    assert oxtree.tree_leaves([u, 1], namespace="static-ns") == [1]
    assert oxtree.tree_structure([u], namespace="static-ns").namespace == "static-ns"


def test_register_static_unhashable_instance(reg: Registrations) -> None:
    # Kept in the treespec and compared by identity (its default ==), as JAX keeps it.
    class Unhashable:
        __hash__ = None  # type: ignore[assignment]

    oxtree.register_static(Unhashable)
    reg.track(Unhashable)
    value = [Unhashable()]
    spec = oxtree.tree_structure(value)
    assert spec.num_leaves == 0
    assert oxtree.tree_unflatten(spec, [])[0] is value[0]
    assert spec != oxtree.tree_structure([Unhashable()])
    hash(spec)
    assert len(value) == 1


# --------------------------------------------------------------------------------------------------
# oxtree.dataclasses.


def test_odc_dataclass_as_decorator_or_called(reg: Registrations) -> None:
    class Bare:
        a: Any
        name: str = odc.field(default="n", pytree_node=False)

    Bare = odc.dataclass(Bare, namespace="")  # type: ignore[misc]

    @odc.dataclass(namespace="")
    class Empty:
        a: Any

    @odc.dataclass(frozen=True, order=True, namespace="")
    class Options:
        a: Any

    for cls in (Bare, Empty, Options):
        reg.track(cls)
        assert dataclasses.is_dataclass(cls)
    assert oxtree.tree_leaves([Bare([1, 2], "x"), Empty(3), Options(4)]) == [1, 2, 3, 4]
    assert oxtree.tree_map(str, Bare(1, "x")) == Bare("1", "x")
    assert repr(oxtree.tree_structure(Bare(1, "x"))) == (
        "PyTreeSpec(CustomTreeNode(Bare[(('name', 'x'),)], [*]))"
    )
    assert Options(1) < Options(2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        Options(1).a = 2  # type: ignore[misc]
    assert type(oxtree.tree_map(str, Options(1))) is Options


def test_odc_field_metadata_kept_in_treedef(reg: Registrations) -> None:
    @odc.dataclass(namespace="odc-ns")
    class Layer:
        weight: Any
        shape: tuple[int, ...] = odc.field(pytree_node=False)
        dtype: str = odc.field(default="float32", pytree_node=False, metadata={"doc": "kind"})
        bias: Any = odc.field(default=0.0, pytree_node=True)

    reg.track(Layer, "odc-ns")
    layer = Layer([1.0, 2.0], (2,))
    assert odc.fields(Layer)[2].metadata["doc"] == "kind"
    assert odc.fields(Layer)[2].metadata["pytree_node"] is False
    assert oxtree.tree_leaves(layer, namespace="odc-ns") == [1.0, 2.0, 0.0]
    assert oxtree.tree_leaves(layer) == [layer]
    spec = oxtree.tree_structure(layer, namespace="odc-ns")
    assert repr(spec) == (
        "PyTreeSpec(CustomTreeNode(Layer[(('shape', (2,)), ('dtype', 'float32'))], "
        "[[*, *], *]), namespace='odc-ns')"
    )
    assert spec != oxtree.tree_structure(Layer([0, 0], (3,)), namespace="odc-ns")
    assert spec == oxtree.tree_structure(Layer([0, 0], (2,), bias=9), namespace="odc-ns")
    assert spec.unflatten([5, 6, 7]) == Layer([5, 6], (2,), bias=7)


def test_odc_dataclass_init_on_unflatten_false(reg: Registrations) -> None:
    @odc.dataclass(init_on_unflatten=False, frozen=True, namespace="")
    class Positive:
        value: Any

        def __post_init__(self) -> None:
            if not self.value > 0:
                raise ValueError("value must be positive")

    reg.track(Positive)
    out = oxtree.tree_map(lambda v: -v, Positive(3))
    assert type(out) is Positive
    assert out.value == -3


def test_odc_make_dataclass(reg: Registrations) -> None:
    P = odc.make_dataclass(
        "P", ["x", ("y", int, odc.field(default=0, pytree_node=False))], frozen=True, namespace=""
    )
    reg.track(P)
    Q = odc.make_dataclass("Q", [("x", Any)], namespace="mk-ns")
    reg.track(Q, "mk-ns")
    assert dataclasses.is_dataclass(P)
    assert oxtree.tree_leaves(P([1, 2], 3)) == [1, 2]
    assert repr(oxtree.tree_structure(P(1, 3))) == "PyTreeSpec(CustomTreeNode(P[(('y', 3),)], [*]))"
    assert oxtree.tree_map(str, P(1, 3)) == P("1", 3)
    assert oxtree.tree_leaves(Q(1)) == [Q(1)]
    assert oxtree.tree_leaves(Q(1), namespace="mk-ns") == [1]


def test_odc_reexports_the_standard_library() -> None:
    for name in ("fields", "replace", "asdict", "astuple", "is_dataclass", "InitVar", "KW_ONLY"):
        assert getattr(odc, name) is getattr(dataclasses, name)
    assert odc.MISSING is dataclasses.MISSING
    assert odc.Field is dataclasses.Field
    assert odc.FrozenInstanceError is dataclasses.FrozenInstanceError
    assert set(odc.__all__) >= {"dataclass", "field", "make_dataclass", "fields", "replace"}


def test_odc_replace_and_asdict_on_a_pytree_dataclass(reg: Registrations) -> None:
    @odc.dataclass(namespace="")
    class Cfg:
        lr: float
        name: str = odc.field(default="adam", pytree_node=False)

    reg.track(Cfg)
    c = odc.replace(Cfg(0.1), lr=0.2)
    assert c == Cfg(0.2)
    assert odc.asdict(c) == {"lr": 0.2, "name": "adam"}
    assert [f.name for f in odc.fields(c)] == ["lr", "name"]
    assert oxtree.tree_leaves(c) == [0.2]


# --------------------------------------------------------------------------------------------------
# Partial.


def test_partial_is_a_pytree() -> None:
    p = oxtree.Partial(add3, 1, z=3)
    assert isinstance(p, functools.partial)
    assert p(2) == 6
    assert oxtree.tree_leaves(p) == [1, 3]
    doubled = oxtree.tree_map(lambda v: v * 10, p)
    assert isinstance(doubled, oxtree.Partial)
    assert doubled.func is add3
    assert doubled(2) == 42
    arrays = oxtree.Partial(add3, np.arange(3), z=np.ones(3))
    out = oxtree.tree_map(lambda a: a * 2, arrays)(np.full(3, 10))
    np.testing.assert_array_equal(out, [12, 14, 16])
    assert oxtree.tree_leaves(oxtree.Partial(add3)) == []


def test_partial_structure_equality() -> None:
    a = oxtree.tree_structure(oxtree.Partial(add3, 1, z=2))
    assert a == oxtree.tree_structure(oxtree.Partial(add3, "x", z="y"))
    assert hash(a) == hash(oxtree.tree_structure(oxtree.Partial(add3, "x", z="y")))
    assert a != oxtree.tree_structure(oxtree.Partial(add3, 1, 2))
    assert a != oxtree.tree_structure(oxtree.Partial(add3, 1, y=2))
    assert a != oxtree.tree_structure(oxtree.Partial(max, 1, z=2))


def test_partial_of_functools_partial_keeps_it_static() -> None:
    inner = functools.partial(add3, 100)
    p = oxtree.Partial(inner, 1)
    assert oxtree.tree_leaves(p) == [1]
    assert p(z=2) == 103
    assert oxtree.tree_map(lambda v: v * 2, p)(z=2) == 104


def test_partial_of_the_same_functools_partial_has_one_structure() -> None:
    # The treedef is what JAX caches compilations on: two Partials around the very same
    # functools.partial must have equal structures (as in jax.tree_util and optree.functools).
    inner = functools.partial(add3, 100)
    assert oxtree.tree_structure(oxtree.Partial(inner, 1)) == oxtree.tree_structure(
        oxtree.Partial(inner, 2)
    )


def test_partial_of_a_partial_keeps_the_inner_one_static() -> None:
    # jax.tree_util.Partial and optree.functools.partial both treat an inner partial (of their
    # own kind too) as the static function: only the outer arguments are children.
    p = oxtree.Partial(oxtree.Partial(add3, 1), 2)
    assert p(3) == 6
    assert oxtree.tree_leaves(p) == [2]


# --------------------------------------------------------------------------------------------------
# What flatten functions may return, and errors from user functions.


def test_unhashable_aux_data_is_kept(reg: Registrations) -> None:
    # optree and JAX accept unhashable aux data (say a list of keys); so does oxtree.
    Box = make_box("ListAux")
    reg.box(Box)
    tree = {"ok": Box(1, meta="fine"), "bad": [Box(2, meta=["a", "list"])]}
    before = repr(tree)
    leaves, spec = oxtree.tree_flatten(tree)
    assert leaves == [2, 1]
    assert "ListAux[['a', 'list']]" in repr(spec)
    assert oxtree.tree_map(lambda x: x * 10, tree) == {
        "ok": Box(10, meta="fine"),
        "bad": [Box(20, meta=["a", "list"])],
    }
    assert spec == oxtree.tree_structure(oxtree.tree_unflatten(spec, leaves))
    assert hash(spec) == hash(oxtree.tree_structure(oxtree.tree_unflatten(spec, leaves)))
    assert repr(tree) == before


@pytest.mark.parametrize(
    ("returned", "words"),
    [
        ((1, None), ["not iterable", "1"]),
        (None, ["None"]),
    ],
    ids=["children_int", "none"],
)
def test_bad_flatten_results_are_type_errors(
    reg: Registrations, returned: Any, words: list[str]
) -> None:
    Box = make_box("BadFlatten")
    reg.node(Box, lambda b: returned, Box.unflatten)
    tree = [1, {"k": Box(2)}]
    with pytest.raises(TypeError, match="BadFlatten") as info:
        oxtree.tree_leaves(tree)
    for word in words:
        assert word in str(info.value)
    with pytest.raises(TypeError, match="BadFlatten"):
        oxtree.tree_map(lambda x: x, tree)
    assert tree[0] == 1
    assert tree[1]["k"] == Box(2)


@pytest.mark.parametrize(
    ("returned", "got"),
    [(((1,),), 1), (((1,), None, None, None), 4)],
    ids=["one_item", "four_items"],
)
def test_flatten_results_of_the_wrong_length_are_optrees_runtime_error(
    reg: Registrations, returned: Any, got: int
) -> None:
    # optree's RuntimeError and text, then what the function returned.
    Box = make_box("BadLength")
    reg.node(Box, lambda b: returned, Box.unflatten)
    tree = [1, {"k": Box(2)}]
    expected = (
        f"PyTree custom flatten function for type {Box!r} should return a 2- or 3-tuple, "
        f"got {got}. It returned: {returned!r}"
    )
    with pytest.raises(RuntimeError) as info:
        oxtree.tree_leaves(tree)
    assert str(info.value) == expected
    assert tree[1]["k"] == Box(2)


@pytest.mark.parametrize(
    "flatten",
    [lambda b: [(1,), "m"], lambda b: (part for part in ((1,), "m"))],
    ids=["list", "generator"],
)
def test_flatten_results_may_be_any_iterable_like_optree(
    reg: Registrations, flatten: Callable[[Any], Any]
) -> None:
    Box = make_box("IterableResult")
    reg.node(Box, flatten, Box.unflatten)
    assert oxtree.tree_leaves([Box(0)]) == [1]
    assert oxtree.tree_unflatten(oxtree.tree_structure(Box(0)), [5]) == Box(5, meta="m")


def test_entries_must_match_children(reg: Registrations) -> None:
    # optree raises when the entries and the children differ in number; so should a drop-in.
    Box = make_box("BadEntries")
    reg.node(Box, lambda b: (b.children, b.meta, ("only-one",)), Box.unflatten)
    with pytest.raises((TypeError, ValueError, RuntimeError), match="BadEntries"):
        oxtree.tree_leaves(Box(1, 2))


def test_flatten_exception_propagates(reg: Registrations) -> None:
    Box = make_box()
    err = Boom("flatten failed")

    def flatten(b: Any) -> Any:
        if b.meta == "bad":
            raise err
        return b.children, b.meta

    reg.node(Box, flatten, Box.unflatten)
    tree = {"a": [Box(1), Box(2, meta="bad")], "b": Box(3)}
    before = repr(tree)
    for call in (oxtree.tree_leaves, oxtree.tree_structure, oxtree.tree_flatten):
        with pytest.raises(Boom) as info:
            call(tree)
        assert info.value is err
    with pytest.raises(Boom):
        oxtree.tree_map(lambda x: x, tree)
    # In a second tree of tree_map too.
    good = {"a": [Box(1), Box(2)], "b": Box(3)}
    with pytest.raises(Boom):
        oxtree.tree_map(lambda x, y: x, good, tree)
    assert repr(tree) == before


def test_unflatten_exception_propagates(reg: Registrations) -> None:
    Box = make_box()
    calls: list[Any] = []

    def unflatten(meta: Any, children: Any) -> Any:
        calls.append(children)
        if meta == "bad":
            raise Boom(f"cannot rebuild from {children!r}")
        return Box(*children, meta=meta)

    reg.node(Box, Box.flatten, unflatten)
    leaf = [1]
    tree = [Box(leaf), Box(2, meta="bad")]
    with pytest.raises(Boom, match="cannot rebuild"):
        oxtree.tree_map(lambda x: x, tree)
    spec = oxtree.tree_structure(tree)
    with pytest.raises(Boom):
        spec.unflatten([[1], 2])
    assert tree[0].children[0] is leaf
    assert leaf == [1]
    assert tree[1] == Box(2, meta="bad")
    # The failing spec is unharmed.
    assert spec.num_leaves == 2
    assert oxtree.tree_structure([Box([0]), Box(0, meta="bad")]) == spec


def test_map_function_exception_leaves_arguments_unchanged(reg: Registrations) -> None:
    Box = make_box()
    reg.box(Box)
    tree = [Box(1, [2, 3]), {"a": Box(4)}]
    before = repr(tree)

    def f(x: int) -> int:
        if x == 3:
            raise Boom("three")
        return x

    with pytest.raises(Boom, match="three"):
        oxtree.tree_map(f, tree)
    assert repr(tree) == before


# --------------------------------------------------------------------------------------------------
# Structure mismatches involving custom nodes.


def test_mismatch_custom_aux_data(reg: Registrations) -> None:
    Box = make_box()
    reg.box(Box)
    with pytest.raises(ValueError, match=r"tree\['k'\]\[1\]") as info:
        oxtree.tree_map(
            lambda a, b: a, {"k": [0, Box(1, meta="m")]}, {"k": [0, Box(1, meta="other")]}
        )
    assert "Box" in str(info.value)


def test_mismatch_custom_type(reg: Registrations) -> None:
    Box, Other = make_box(), make_box("Other")
    reg.box(Box)
    reg.box(Other)
    with pytest.raises(ValueError, match=r"tree\[0\]") as info:
        oxtree.tree_map(lambda a, b: a, [Box(1)], [Other(1)])
    assert "Box" in str(info.value)
    assert "Other" in str(info.value)
    with pytest.raises(ValueError, match=r"tree\[0\]") as info:
        oxtree.tree_map(lambda a, b: a, [Box(1, 2)], [(1, 2)])
    assert "Box" in str(info.value)
    with pytest.raises(ValueError, match=r"tree\[0\]"):
        oxtree.tree_map(lambda a, b: a, [Box(1, 2)], [Box(1, 2, 3)])


def test_mismatch_inside_custom_node(reg: Registrations) -> None:
    Box = make_box()
    reg.box(Box)
    # The path reads as keystr prints the key path: FlattenedIndexKey(1) is [<flat index 1>].
    with pytest.raises(ValueError, match=r"tree\[0\]\[<flat index 1>\]") as info:
        oxtree.tree_map(lambda a, b: a, [Box(0, (1, 2))], [Box(0, [1, 2])])
    assert str(info.value).startswith("Expected an instance of tuple, got [1, 2].")


def test_mismatch_dataclass_field_path(reg: Registrations) -> None:
    @dataclasses.dataclass
    class D:
        x: Any
        tag: Any = dataclasses.field(default="t", metadata={"static": True})

    oxtree.register_dataclass(D)
    reg.track(D)
    with pytest.raises(ValueError, match=r"tree\[0\]") as info:
        oxtree.tree_map(lambda a, b: a, [D((1, 2))], [D([1, 2])])
    assert "tuple" in str(info.value)
    with pytest.raises(ValueError, match=r"tree\['d'\]") as info:
        oxtree.tree_map(lambda a, b: a, {"d": D(1)}, {"d": D(1, tag="u")})
    assert "D" in str(info.value)


def test_mismatch_static_value(reg: Registrations) -> None:
    Unit = make_unit()
    oxtree.register_static(Unit)
    reg.track(Unit)
    with pytest.raises(ValueError, match=r"tree\[1\]"):
        oxtree.tree_map(lambda a, b: a, [1, Unit("m")], [1, Unit("s")])
    assert oxtree.tree_map(lambda a, b: a + b, [1, Unit("m")], [2, Unit("m")]) == [3, Unit("m")]


# --------------------------------------------------------------------------------------------------
# Pickling treedefs with custom nodes.


def test_pickle_custom_dataclass_static_and_partial(pickle_registrations: Registrations) -> None:
    trees: list[tuple[Any, str]] = [
        ([PickleBox(1, (2, 3), tag="x"), {"k": 4}], ""),
        (PickleBox(1, 2), "pickle-ns"),
        ({"d": PickleData([1, 2], 3, label="lbl")}, ""),
        (PickleFrozen(5), ""),
        ((PickleUnit("m"), 1.5), ""),
        (oxtree.Partial(add3, 1, z=3), ""),
    ]
    for tree, namespace in trees:
        leaves, spec = oxtree.tree_flatten(tree, namespace=namespace)
        for protocol in range(2, pickle.HIGHEST_PROTOCOL + 1):
            clone = pickle.loads(pickle.dumps(spec, protocol=protocol))
            assert clone == spec
            assert hash(clone) == hash(spec)
            assert repr(clone) == repr(spec)
            assert clone.namespace == namespace
            rebuilt = clone.unflatten(leaves)
            assert oxtree.tree_structure(rebuilt, namespace=namespace) == spec
            assert oxtree.tree_leaves(rebuilt, namespace=namespace) == leaves
    frozen = pickle.loads(pickle.dumps(oxtree.tree_structure(PickleFrozen(5)))).unflatten([7, 8])
    assert (frozen.x, frozen.doubled) == (7, 8)
    data = pickle.loads(pickle.dumps(oxtree.tree_structure(PickleData(1, 2, "q"))))
    assert data.unflatten(["a", "b"]) == PickleData("a", "b", "q")


def test_pickle_whole_trees_and_specs_together(pickle_registrations: Registrations) -> None:
    tree = [PickleBox(1, PickleData(2, 3)), PickleUnit("s")]
    leaves, spec = oxtree.tree_flatten(tree)
    leaves2, spec2 = pickle.loads(pickle.dumps((leaves, spec)))
    assert leaves2 == [1, 2, 3]
    assert spec2.unflatten(leaves2) == tree


# --------------------------------------------------------------------------------------------------
# Threads.


@contextlib.contextmanager
def fast_switching() -> Iterator[None]:
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


def run_threads(targets: list[Callable[[], None]], timeout: float = 20.0) -> list[BaseException]:
    errors: list[BaseException] = []

    def guarded(target: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                target()
            except BaseException as exc:  # a thread's failure is reported by the test
                errors.append(exc)

        return run

    threads = [threading.Thread(target=guarded(t)) for t in targets]
    with fast_switching():
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    return errors


def test_threads_map_while_another_registers(reg: Registrations) -> None:
    Node = make_box("ThreadNode")
    reg.box(Node)

    @dataclasses.dataclass
    class Rec:
        a: Any
        k: Any = dataclasses.field(default=0, metadata={"static": True})

    oxtree.register_dataclass(Rec)
    reg.track(Rec)
    done = threading.Event()
    churned = [0]

    def registrar() -> None:
        i = 0
        while not done.is_set() or i < 50:
            tmp = type(f"Tmp{i}", (), {})
            namespace = "" if i % 2 else "churn-ns"
            oxtree.register_pytree_node(
                tmp, lambda x: ((), None), lambda a, c, t=tmp: t(), namespace=namespace
            )
            assert oxtree.tree_leaves([tmp(), 1], namespace=namespace) == [1]
            oxtree.unregister_pytree_node(tmp, namespace=namespace)
            if i % 3 == 0:
                oxtree.register_static(tmp)
                oxtree.unregister_pytree_node(tmp)
            i += 1
        churned[0] = i

    def worker(k: int) -> Callable[[], None]:
        def run() -> None:
            for i in range(1000):
                tree = {"n": Node(i, (k, Rec(i, k)), meta=k), "z": [Node(meta=None)]}
                leaves, spec = oxtree.tree_flatten(tree)
                assert leaves == [i, k, i]
                assert spec.unflatten(leaves) == tree
                out = oxtree.tree_map(lambda x: x + 1, tree)
                assert out == {
                    "n": Node(i + 1, (k + 1, Rec(i + 1, k)), meta=k),
                    "z": [Node(meta=None)],
                }
                assert oxtree.tree_structure(out) == spec

        return run

    def stopper(threads: list[Callable[[], None]]) -> Callable[[], None]:
        def run() -> None:
            try:
                for t in threads:
                    t()
            finally:
                done.set()

        return run

    workers = [worker(k) for k in range(4)]
    errors = run_threads([registrar, stopper(workers[:1]), *workers[1:]])
    assert errors == []
    assert churned[0] >= 50


def test_threads_flatten_while_the_type_flips(reg: Registrations) -> None:
    Flip = make_box("Flip")
    readers_left = [2]
    lock = threading.Lock()
    flips = [0]

    def flipper() -> None:
        while readers_left[0] or flips[0] < 20:
            oxtree.register_pytree_node(Flip, Flip.flatten, Flip.unflatten, namespace="flip")
            oxtree.unregister_pytree_node(Flip, namespace="flip")
            flips[0] += 1

    seen: list[int] = []

    def reader() -> None:
        box = Flip(1, 2, meta="m")
        tree = [box, 3]
        try:
            for _ in range(2000):
                leaves, spec = oxtree.tree_flatten(tree, namespace="flip")
                # Either the whole type was a leaf or a node: never anything in between.
                assert leaves in ([box, 3], [1, 2, 3])
                seen.append(len(leaves))
                assert spec.unflatten(leaves) == tree
        finally:
            with lock:
                readers_left[0] -= 1

    errors = run_threads([flipper, reader, reader])
    assert errors == []
    assert len(seen) == 4000
    assert flips[0] >= 20
    assert Flip not in oxtree.registered_types(namespace="flip")
    assert oxtree.tree_leaves(Flip(1), namespace="flip") == [Flip(1)]


# --------------------------------------------------------------------------------------------------
# JAX's "Custom pytree nodes" page, with oxtree and numpy.


class Special:
    def __init__(self, x: Any, y: Any) -> None:
        self.x = x
        self.y = y


def test_custom_nodes_page_unregistered_special_is_a_leaf() -> None:
    items = [Special(0, 1), Special(2, 4)]
    assert oxtree.tree_leaves(items) == items
    with pytest.raises(TypeError, match="unsupported operand"):
        oxtree.tree_map(lambda x: x + 1, items)


def test_custom_nodes_page_registered_special(reg: Registrations) -> None:
    class RegisteredSpecial(Special):
        def __repr__(self) -> str:
            return f"RegisteredSpecial(x={self.x}, y={self.y})"

    def special_flatten(v: RegisteredSpecial) -> tuple[tuple[Any, Any], None]:
        return (v.x, v.y), None

    def special_unflatten(aux_data: None, children: tuple[Any, Any]) -> RegisteredSpecial:
        return RegisteredSpecial(*children)

    reg.node(RegisteredSpecial, special_flatten, special_unflatten)
    out = oxtree.tree_map(lambda x: x + 1, [RegisteredSpecial(0, 1), RegisteredSpecial(2, 4)])
    assert repr(out) == "[RegisteredSpecial(x=1, y=2), RegisteredSpecial(x=3, y=5)]"


def test_custom_nodes_page_register_pytree_node_class(reg: Registrations) -> None:
    @oxtree.register_pytree_node_class
    class RegisteredSpecial2(Special):
        def __repr__(self) -> str:
            return f"RegisteredSpecial2(x={self.x}, y={self.y})"

        def tree_flatten(self) -> tuple[tuple[Any, Any], None]:
            return (self.x, self.y), None

        @classmethod
        def tree_unflatten(cls, aux_data: None, children: tuple[Any, Any]) -> RegisteredSpecial2:
            return cls(*children)

    reg.track(RegisteredSpecial2)
    structured = RegisteredSpecial2(1.0, 2.0)
    flat, tree = structured.tree_flatten()
    assert (flat, tree) == ((1.0, 2.0), None)
    assert repr(RegisteredSpecial2.tree_unflatten(tree, flat)) == "RegisteredSpecial2(x=1.0, y=2.0)"
    leaves, spec = oxtree.tree_flatten(structured)
    assert leaves == [1.0, 2.0]
    assert repr(spec) == "PyTreeSpec(CustomTreeNode(RegisteredSpecial2[None], [*, *]))"
    assert repr(spec.unflatten(leaves)) == "RegisteredSpecial2(x=1.0, y=2.0)"


class MyOtherContainer(NamedTuple):
    name: str
    a: Any
    b: Any
    c: Any


def test_custom_nodes_page_namedtuple_string_field_is_a_leaf() -> None:
    leaves = oxtree.tree_leaves(
        [MyOtherContainer("Alice", 1, 2, 3), MyOtherContainer("Bob", 4, 5, 6)]
    )
    assert leaves == ["Alice", 1, 2, 3, "Bob", 4, 5, 6]


def test_custom_nodes_page_dataclass_with_meta_fields(reg: Registrations) -> None:
    @functools.partial(oxtree.register_dataclass, data_fields=["a", "b", "c"], meta_fields=["name"])
    @dataclasses.dataclass
    class MyDataclassContainer:
        name: str
        a: Any
        b: Any
        c: Any

    reg.track(MyDataclassContainer)
    zeros, pair = np.zeros([4]), np.array([3, 4])
    leaves = oxtree.tree_leaves(
        [
            MyDataclassContainer("apple", 5.3, 1.2, zeros),
            MyDataclassContainer("banana", pair, -1.0, 0.0),
        ]
    )
    assert leaves[:2] == [5.3, 1.2]
    assert leaves[2] is zeros
    assert leaves[3] is pair
    assert leaves[4:] == [-1.0, 0.0]
    mdc = MyDataclassContainer("mdc", 1, 2, 3)
    assert oxtree.tree_structure(mdc) == oxtree.tree_structure(MyDataclassContainer("mdc", 0, 0, 0))
    assert oxtree.tree_structure(mdc) != oxtree.tree_structure(MyDataclassContainer("x", 1, 2, 3))
    # `name` is static: a function of the leaves only ever sees a, b and c.
    assert oxtree.tree_map(lambda v: v * 2, mdc) == MyDataclassContainer("mdc", 2, 4, 6)
    moc = MyOtherContainer("moc", 1, 2, 3)
    with pytest.raises(TypeError):
        oxtree.tree_map(lambda v: v * 2.5, moc)


class MyTree:
    """The page's MyTree, with numpy: __init__ converts (and so rejects) what it is given."""

    def __init__(self, a: Any) -> None:
        self.a = np.asarray(a, dtype=float)


def test_custom_nodes_page_init_conversion_breaks_unflatten(reg: Registrations) -> None:
    reg.node(MyTree, lambda tree: ((tree.a,), None), lambda _, args: MyTree(*args))
    tree = MyTree(np.arange(5.0))
    assert oxtree.tree_leaves(tree)[0] is tree.a
    # Structure probing with object() (what vmap does) calls __init__ with an object().
    with pytest.raises(TypeError):
        oxtree.tree_map(lambda x: object(), tree)
    # A tree of trees (what jacobian builds) calls __init__ with a MyTree.
    with pytest.raises(TypeError):
        oxtree.tree_map(lambda x: tree, tree)


def test_custom_nodes_page_solution_1_guarded_init(reg: Registrations) -> None:
    class GuardedTree:
        def __init__(self, a: Any) -> None:
            if not (type(a) is object or a is None or isinstance(a, GuardedTree)):
                a = np.asarray(a, dtype=float)
            self.a = a

    reg.node(GuardedTree, lambda t: ((t.a,), None), lambda _, args: GuardedTree(*args))
    tree = GuardedTree([0, 1, 2])
    probe = object()
    assert oxtree.tree_map(lambda x: probe, tree).a is probe
    assert oxtree.tree_map(lambda x: tree, tree).a is tree
    np.testing.assert_array_equal(oxtree.tree_map(lambda x: x + 1, tree).a, [1.0, 2.0, 3.0])


def test_custom_nodes_page_solution_2_object_new(reg: Registrations) -> None:
    class NewTree(MyTree):
        pass

    def tree_unflatten(aux_data: None, children: tuple[Any]) -> NewTree:
        del aux_data
        obj = object.__new__(NewTree)
        obj.a = children[0]
        return obj

    reg.node(NewTree, lambda t: ((t.a,), None), tree_unflatten)
    tree = NewTree(np.arange(5.0))
    probe = object()
    assert oxtree.tree_map(lambda x: probe, tree).a is probe
    assert oxtree.tree_map(lambda x: tree, tree).a is tree


def test_custom_nodes_page_init_on_unflatten_false(reg: Registrations) -> None:
    class FieldTree(MyTree):
        pass

    oxtree.register_dataclass(FieldTree, data_fields=["a"], meta_fields=[], init_on_unflatten=False)
    reg.track(FieldTree)
    tree = FieldTree(np.arange(5.0))
    probe = object()
    out = oxtree.tree_map(lambda x: probe, tree)
    assert type(out) is FieldTree
    assert out.a is probe
    assert oxtree.tree_map(lambda x: tree, tree).a is tree
    np.testing.assert_array_equal(oxtree.tree_map(lambda x: x * 2, tree).a, np.arange(5.0) * 2)


def test_custom_nodes_page_internal_handling_examples() -> None:
    value_flat, value_tree = oxtree.tree_flatten([1.0, (2.0, 3.0)])
    assert value_flat == [1.0, 2.0, 3.0]
    assert repr(value_tree) == "PyTreeSpec([*, (*, *)])"
    transformed = oxtree.tree_unflatten(value_tree, [v * 2.0 for v in value_flat])
    assert transformed == [2.0, (4.0, 6.0)]
    zeros = np.zeros(2)
    examples = [
        ((1.0, [2.0, 3.0]), [1.0, 2.0, 3.0]),
        ((1.0, {"b": 2.0, "a": 3.0}), [1.0, 3.0, 2.0]),
        (1.0, [1.0]),
        (None, []),
        (zeros, [zeros]),
        (Point(1.0, 2.0), [1.0, 2.0]),
    ]
    for structured, flat in examples:
        leaves, spec = oxtree.tree_flatten(structured)
        assert len(leaves) == len(flat)
        assert all(a is b or a == b for a, b in zip(leaves, flat, strict=True))
        assert oxtree.tree_unflatten(spec, leaves) is structured or _same(
            oxtree.tree_unflatten(spec, leaves), structured
        )


# --------------------------------------------------------------------------------------------------
# A library's private namespace (autoform's PYTREE_NAMESPACE), with oxtree.

PYTREE_NAMESPACE = "autoform-test"


def af_format(template: str, *args: Any) -> str:
    return template.format(*args)


def test_private_namespace_dataclass_in_the_namespace(reg: Registrations) -> None:
    @odc.dataclass(namespace=PYTREE_NAMESPACE)
    class State:
        topic: str
        draft: str

    reg.track(State, PYTREE_NAMESPACE)
    state = State(topic="dna", draft="short")
    upper = oxtree.tree_map(str.upper, state, namespace=PYTREE_NAMESPACE)
    assert upper == State(topic="DNA", draft="SHORT")
    # Without the namespace the State is a leaf: str.upper gets the State itself.
    with pytest.raises(TypeError):
        oxtree.tree_map(str.upper, state)
    assert oxtree.tree_leaves(state, namespace=PYTREE_NAMESPACE) == ["dna", "short"]


def test_private_namespace_static_metadata_fields(reg: Registrations) -> None:
    @odc.dataclass(namespace=PYTREE_NAMESPACE)
    class F32Array:
        values: tuple[float, ...]
        shape: tuple[int, ...] = odc.field(pytree_node=False)
        dtype: str = odc.field(default="float32", pytree_node=False)

    reg.track(F32Array, PYTREE_NAMESPACE)
    array = F32Array(values=(1.0, 2.0), shape=(2,))
    scaled = oxtree.tree_map(lambda x: x * 10, array, namespace=PYTREE_NAMESPACE)
    assert scaled == F32Array(values=(10.0, 20.0), shape=(2,))
    assert scaled.dtype == "float32"
    spec = oxtree.tree_structure(array, namespace=PYTREE_NAMESPACE)
    assert spec.num_leaves == 2
    assert "('shape', (2,))" in repr(spec)
    assert "('dtype', 'float32')" in repr(spec)
    other = F32Array(values=(1.0, 2.0), shape=(2,), dtype="float64")
    assert oxtree.tree_structure(other, namespace=PYTREE_NAMESPACE) != spec


def test_private_namespace_manual_registration_in_the_namespace(reg: Registrations) -> None:
    class State:
        def __init__(self, topic: str, draft: str) -> None:
            self.topic = topic
            self.draft = draft

    def flatten_state(state: State) -> tuple[tuple[str, str], None]:
        children = (state.topic, state.draft)
        metadata = None
        return children, metadata

    def unflatten_state(metadata: None, children: tuple[str, str]) -> State:
        topic, draft = children
        return State(topic=topic, draft=draft)

    reg.node(State, flatten_state, unflatten_state, namespace=PYTREE_NAMESPACE)
    state = State(topic="dna", draft="short")
    upper = oxtree.tree_map(str.upper, state, namespace=PYTREE_NAMESPACE)
    assert upper.topic == "DNA"
    assert upper.draft == "SHORT"
    assert oxtree.tree_leaves(state) == [state]


def test_private_namespace_method_bearing_dataclass(reg: Registrations) -> None:
    @odc.dataclass(namespace=PYTREE_NAMESPACE)
    class Explainer:
        instruction: str
        style: str

        def __call__(self, topic: str) -> str:
            return af_format("{}\nstyle: {}\ntopic: {}", self.instruction, self.style, topic)

    reg.track(Explainer, PYTREE_NAMESPACE)
    explainer = Explainer("Explain simply.", "terse")
    assert oxtree.tree_leaves(explainer, namespace=PYTREE_NAMESPACE) == ["Explain simply.", "terse"]
    shouting = oxtree.tree_map(str.upper, explainer, namespace=PYTREE_NAMESPACE)
    assert type(shouting) is Explainer
    assert shouting("dna") == "EXPLAIN SIMPLY.\nstyle: TERSE\ntopic: dna"
    # Batched fields (the `batch` transform's view): lists of values in the leaves' places.
    batched = oxtree.tree_map(lambda s: [s, s + "!"], explainer, namespace=PYTREE_NAMESPACE)
    assert batched.style == ["terse", "terse!"]
    # Feedback of the same shape (what `pullback` returns) maps leaf by leaf.
    feedback = Explainer("be more specific", "too terse")
    pairs = oxtree.tree_map(lambda a, b: (a, b), explainer, feedback, namespace=PYTREE_NAMESPACE)
    assert pairs.style == ("terse", "too terse")


def test_private_namespace_while_loop_carry_structure(reg: Registrations) -> None:
    @odc.dataclass(namespace=PYTREE_NAMESPACE)
    class Carry:
        step: Any
        text: Any
        limit: int = odc.field(default=3, pytree_node=False)

    reg.track(Carry, PYTREE_NAMESPACE)
    carry = Carry(0, "a")
    spec = oxtree.tree_structure(carry, namespace=PYTREE_NAMESPACE)
    while carry.step < carry.limit:
        carry = oxtree.tree_map(
            lambda v: v + (1 if isinstance(v, int) else "a"), carry, namespace=PYTREE_NAMESPACE
        )
        assert oxtree.tree_structure(carry, namespace=PYTREE_NAMESPACE) == spec
    assert carry == Carry(3, "aaaa")


def test_user_function_errors_keep_their_type_and_name_the_registered_type() -> None:
    class Raising:
        fail = True

    def flatten(obj: Raising) -> Any:
        if Raising.fail:
            raise KeyError("from flatten")
        return (), None

    def unflatten(aux: Any, children: Any) -> Raising:
        raise LookupError("from unflatten")

    oxtree.register_pytree_node(Raising, flatten, unflatten)
    try:
        with pytest.raises(KeyError, match="from flatten") as info:
            oxtree.tree_leaves([Raising()])
        assert info.value.__notes__ == ["raised by the flatten function registered for Raising"]
        Raising.fail = False
        spec = oxtree.tree_structure([Raising()])
        with pytest.raises(LookupError, match="from unflatten") as info2:
            spec.unflatten([])
        assert info2.value.__notes__ == ["raised by the unflatten function registered for Raising"]
    finally:
        oxtree.unregister_pytree_node(Raising)
