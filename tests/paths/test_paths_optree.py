"""optree-compatible raw paths: `tree_flatten_with_path`, `tree_paths`, `tree_map_with_path` and
the treespec's `paths()`, `entries()` and `entry(i)`, compared with optree 0.20 over the whole
corpus, both `none_is_leaf` values, and registered classes and dataclasses.

Custom classes are registered in optree under a namespace of their own (optree's registry is
global too) and unregistered again when the test ends.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterator
from typing import Any

import optree
import oxtree
import pytest
from helpers import (
    HYPOTHESIS_SETTINGS,
    NONE_IS_LEAF_OPTIONS,
    TREES,
    assert_same_leaves,
    assert_same_tree,
    parametrize,
    trees,
)
from hypothesis import given
from hypothesis import strategies as st
from nodes import Rec
from paths_helpers import shape_trees

_counter = itertools.count()


def walk_specs(ox_spec: Any, op_spec: Any) -> Iterator[tuple[Any, Any]]:
    """Pairs of corresponding nodes of an oxtree and an optree treespec, pre-order."""
    stack = [(ox_spec, op_spec)]
    while stack:
        ours, theirs = stack.pop()
        yield ours, theirs
        our_children, their_children = ours.children(), theirs.children()
        assert len(our_children) == len(their_children)
        stack.extend(reversed(list(zip(our_children, their_children, strict=True))))


def assert_same_entries(ours: list[Any], theirs: list[Any]) -> None:
    """Entries are the same objects as optree's (dict keys) or equal values of the same type."""
    assert type(ours) is list
    assert len(ours) == len(theirs), (ours, theirs)
    for a, b in zip(ours, theirs, strict=True):
        assert type(a) is type(b), (a, b)
        assert a is b or a == b, (a, b)


def assert_same_paths(ours: list[Any], theirs: list[Any]) -> None:
    assert type(ours) is list
    assert len(ours) == len(theirs), (ours, theirs)
    for a, b in zip(ours, theirs, strict=True):
        assert type(a) is tuple, a
        assert_same_entries(list(a), list(b))


def compare_with_optree(tree: Any, *, none_is_leaf: bool, namespace: str = "") -> None:
    kw: dict[str, Any] = {"none_is_leaf": none_is_leaf, "namespace": namespace}
    paths, leaves, spec = oxtree.tree_flatten_with_path(tree, **kw)
    their_paths, their_leaves, their_spec = optree.tree_flatten_with_path(tree, **kw)
    assert_same_paths(paths, their_paths)
    assert_same_leaves(leaves, their_leaves)
    assert repr(spec) == repr(their_spec)
    assert_same_paths(oxtree.tree_paths(tree, **kw), their_paths)
    assert_same_paths(spec.paths(), their_spec.paths())
    for ours, theirs in walk_specs(spec, their_spec):
        assert_same_entries(ours.entries(), theirs.entries())
        n = len(theirs.entries())
        assert ours.num_children == n
        for i in range(-n, n):
            a, b = ours.entry(i), theirs.entry(i)
            assert type(a) is type(b)
            assert a is b or a == b
        for i in (n, -n - 1):
            with pytest.raises(IndexError):
                ours.entry(i)


@parametrize(tree=TREES, none_is_leaf=NONE_IS_LEAF_OPTIONS)
def test_paths_and_entries_match_optree(tree: Any, none_is_leaf: bool) -> None:
    compare_with_optree(tree, none_is_leaf=none_is_leaf)


def test_trees_of_one_shape_walked_in_turn_match_optree() -> None:
    # Paths of a tree walked before may be handed out again: never to a tree whose keys
    # differ.
    for _ in range(2):
        for tree in shape_trees():
            compare_with_optree(tree, none_is_leaf=False)


@parametrize(tree=TREES, none_is_leaf=NONE_IS_LEAF_OPTIONS)
def test_tree_map_with_path_matches_optree(tree: Any, none_is_leaf: bool) -> None:
    ours_seen: list[tuple[Any, ...]] = []
    their_seen: list[tuple[Any, ...]] = []

    def recorder(seen: list[tuple[Any, ...]]) -> Callable[..., Rec]:
        def func(path: tuple[Any, ...], *xs: Any) -> Rec:
            seen.append(path)
            return Rec(*xs)

        return func

    rest = optree.tree_map(lambda x: [x], tree, none_is_leaf=none_is_leaf)
    ours = oxtree.tree_map_with_path(recorder(ours_seen), tree, rest, none_is_leaf=none_is_leaf)
    theirs = optree.tree_map_with_path(recorder(their_seen), tree, rest, none_is_leaf=none_is_leaf)
    assert_same_tree(ours, theirs)
    assert_same_paths(ours_seen, their_seen)
    assert_same_paths(ours_seen, oxtree.tree_paths(tree, none_is_leaf=none_is_leaf))


def test_examples() -> None:
    tree = {"b": [1, (2, None)], "a": {"y": 3}}
    paths, leaves, spec = oxtree.tree_flatten_with_path(tree)
    assert paths == [("a", "y"), ("b", 0), ("b", 1, 0)]
    assert leaves == [3, 1, 2]
    assert spec.paths() == paths
    paths_nil = oxtree.tree_paths(tree, none_is_leaf=True)
    assert paths_nil == [("a", "y"), ("b", 0), ("b", 1, 0), ("b", 1, 1)]
    assert oxtree.tree_paths(7) == [()]
    assert oxtree.tree_paths(None) == []
    assert oxtree.tree_paths(None, none_is_leaf=True) == [()]
    assert oxtree.tree_map_with_path(lambda p, x: p, {"k": [0, 0]}) == {"k": [("k", 0), ("k", 1)]}
    assert spec.entries() == ["a", "b"]
    assert spec.entry(-1) == "b"
    assert spec.child(1).child(1).entries() == [0, 1]


def test_is_leaf_stops_paths_like_optree() -> None:
    tree = {"a": [(1, 2), [3, (4, 5)]], "b": None}

    def is_leaf(x: Any) -> bool:
        return isinstance(x, tuple)

    for none_is_leaf in NONE_IS_LEAF_OPTIONS:
        ours = oxtree.tree_flatten_with_path(tree, is_leaf, none_is_leaf=none_is_leaf)
        theirs = optree.tree_flatten_with_path(tree, is_leaf, none_is_leaf=none_is_leaf)
        assert_same_paths(ours[0], theirs[0])
        assert_same_leaves(ours[1], theirs[1])
        mapped = oxtree.tree_map_with_path(lambda p, x: p, tree, is_leaf=is_leaf)
        assert mapped == optree.tree_map_with_path(lambda p, x: p, tree, is_leaf=is_leaf)


@HYPOTHESIS_SETTINGS
@given(tree=trees(), none_is_leaf=st.booleans())
def test_random_trees_match_optree(tree: Any, none_is_leaf: bool) -> None:
    compare_with_optree(tree, none_is_leaf=none_is_leaf)


# --------------------------------------------------------------------------------------------------
# Registered classes, in both libraries.


class Registry:
    """Registrations in a namespace of this test's own, removed again when the test ends."""

    def __init__(self) -> None:
        self.namespace = f"oxtree-paths-{next(_counter)}"
        self.made: list[tuple[Any, type]] = []

    def node(self, lib: Any, cls: type, *args: Any, **kwargs: Any) -> type:
        lib.register_pytree_node(cls, *args, namespace=self.namespace, **kwargs)
        self.made.append((lib, cls))
        return cls

    def track(self, lib: Any, cls: type) -> type:
        self.made.append((lib, cls))
        return cls

    def cleanup(self) -> None:
        for lib, cls in reversed(self.made):
            lib.unregister_pytree_node(cls, namespace=self.namespace)


@pytest.fixture
def registry() -> Iterator[Registry]:
    made = Registry()
    yield made
    made.cleanup()


def make_node_class() -> type:
    class Node:
        def __init__(self, a: Any, b: Any, c: Any = None) -> None:
            self.a, self.b, self.c = a, b, c

        def __repr__(self) -> str:
            return f"Node({self.a!r}, {self.b!r}, {self.c!r})"

        def __eq__(self, other: object) -> bool:
            return type(other) is type(self) and vars(other) == vars(self)

        __hash__ = None  # type: ignore[assignment]

    return Node


def node_tree(cls: type) -> Any:
    return {"x": cls(1, [cls(2, None), None]), "y": (cls({"q": 3, "p": None}, 4), None)}


ENTRY_STYLES: dict[str, Callable[[Any], tuple[Any, ...]]] = {
    # optree style: (children, aux, entries).
    "named_entries": lambda n: ((n.a, n.b), "aux", ("first", "second")),
    "int_entries": lambda n: ((n.a, n.b, n.c), None, (10, 20, 30)),
    "tuple_entries": lambda n: ((n.a, n.b), None, ((0, "a"), (1, "b"))),
    "none_entries": lambda n: ((n.a, n.b), None, None),
    # jax style: (children, aux): entries are 0, 1, ...
    "no_entries": lambda n: ([n.a, n.b], "aux"),
}


def rebuild(cls: type) -> Callable[[Any, Any], Any]:
    return lambda aux, children: cls(*children)


@parametrize(style=list(ENTRY_STYLES), none_is_leaf=NONE_IS_LEAF_OPTIONS)
def test_registered_entries_match_optree(
    style: str, none_is_leaf: bool, registry: Registry
) -> None:
    cls = make_node_class()
    flatten = ENTRY_STYLES[style]
    registry.node(oxtree, cls, flatten, rebuild(cls))
    registry.node(optree, cls, flatten, rebuild(cls))
    namespace = registry.namespace
    tree = node_tree(cls)
    compare_with_optree(tree, none_is_leaf=none_is_leaf, namespace=namespace)
    mapped = oxtree.tree_map_with_path(
        lambda p, x: p, tree, none_is_leaf=none_is_leaf, namespace=namespace
    )
    theirs = optree.tree_map_with_path(
        lambda p, x: p, tree, none_is_leaf=none_is_leaf, namespace=namespace
    )
    assert mapped == theirs


def test_registered_entries_are_the_raw_paths(registry: Registry) -> None:
    cls = make_node_class()
    registry.node(oxtree, cls, ENTRY_STYLES["named_entries"], rebuild(cls))
    namespace = registry.namespace
    paths = oxtree.tree_paths([cls({"k": 1}, 2)], namespace=namespace)
    assert paths == [(0, "first", "k"), (0, "second")]
    assert oxtree.tree_paths([cls({"k": 1}, 2)]) == [(0,)]
    spec = oxtree.tree_structure(cls(1, 2), namespace=namespace)
    assert spec.entries() == ["first", "second"]
    assert spec.entry(-2) == "first"


def test_flatten_with_keys_func_leaves_raw_paths_as_flat_indices(registry: Registry) -> None:
    cls = make_node_class()
    registry.node(
        oxtree,
        cls,
        lambda n: ((n.a, n.b), None),
        rebuild(cls),
        flatten_with_keys_func=lambda n: (
            ((oxtree.GetAttrKey("a"), n.a), (oxtree.GetAttrKey("b"), n.b)),
            None,
        ),
    )
    registry.node(optree, cls, lambda n: ((n.a, n.b), None), rebuild(cls))
    namespace = registry.namespace
    tree = [cls(1, {"z": 2})]
    assert oxtree.tree_paths(tree, namespace=namespace) == [(0, 0), (0, 1, "z")]
    compare_with_optree(tree, none_is_leaf=False, namespace=namespace)


def make_dataclass_in(lib: Any, namespace: str) -> type:
    @lib.dataclasses.dataclass(namespace=namespace)
    class Data:
        weight: Any
        name: str = lib.dataclasses.field(default="d", pytree_node=False)
        bias: Any = None

    return Data


@parametrize(none_is_leaf=NONE_IS_LEAF_OPTIONS)
def test_dataclass_entries_are_field_names_like_optree(
    none_is_leaf: bool, registry: Registry
) -> None:
    namespace = registry.namespace
    ours_cls = registry.track(oxtree, make_dataclass_in(oxtree, namespace))
    their_cls = registry.track(optree, make_dataclass_in(optree, namespace))

    def build(cls: type) -> Any:
        return {"layer": cls(weight=[1, 2], bias=cls(weight=None)), "rest": (cls(3, bias=4),)}

    kw: dict[str, Any] = {"none_is_leaf": none_is_leaf, "namespace": namespace}
    paths, leaves, spec = oxtree.tree_flatten_with_path(build(ours_cls), **kw)
    their_paths, their_leaves, their_spec = optree.tree_flatten_with_path(build(their_cls), **kw)
    assert_same_paths(paths, their_paths)
    assert leaves == their_leaves
    for ours, theirs in walk_specs(spec, their_spec):
        assert_same_entries(ours.entries(), theirs.entries())
    assert ("layer", "weight", 0) in paths
    assert ("rest", 0, "bias") in paths
    assert oxtree.tree_map_with_path(lambda p, x: p, build(ours_cls), **kw)["rest"][0].bias == (
        "rest",
        0,
        "bias",
    )


def test_register_dataclass_entries_are_field_names(registry: Registry) -> None:
    @dataclasses.dataclass
    class Plain:
        second: Any
        first: Any
        meta: Any = dataclasses.field(default=0, metadata={"static": True})

    namespace = registry.namespace
    registry.track(oxtree, oxtree.register_dataclass(Plain, namespace=namespace))
    spec = oxtree.tree_structure(Plain(1, 2), namespace=namespace)
    assert spec.entries() == ["second", "first"]
    assert oxtree.tree_paths({"p": Plain([1], 2)}, namespace=namespace) == [
        ("p", "second", 0),
        ("p", "first"),
    ]
