"""JAX-style key paths: `tree_leaves_with_path`, `_core.tree_flatten_with_keys`,
`_core.tree_map_with_keys` and `is_leaf_takes_path`, compared with `jax.tree_util`.

Only trees that jax flattens with oxtree's semantics are compared (see `jax_compatible`): no
deques, struct sequences, OrderedDicts, defaultdicts or dicts with unsortable keys. oxtree's
`none_is_leaf=True` is compared with jax's `is_leaf=lambda x: x is None`.

Registered classes are fresh per test; jax gets its own separate class, because jax's registry is
global and has no way to unregister.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Iterator
from typing import Any

import jax.tree_util as jtu
import oxtree
import pytest
from helpers import HYPOTHESIS_SETTINGS, assert_same_tree, parametrize
from hypothesis import given
from hypothesis import strategies as st
from nodes import Opaque, Point, Vector
from oxtree import _core
from paths_helpers import JAX_TREES, Hit, jax_path, shape_trees

OX_KEY_TYPES = (oxtree.SequenceKey, oxtree.DictKey, oxtree.GetAttrKey, oxtree.FlattenedIndexKey)
JAX_TREE_LIST = list(JAX_TREES.values())


def none_leaf(x: Any) -> bool:
    return x is None


def jax_is_leaf(none_is_leaf: bool) -> Callable[[Any], bool] | None:
    return none_leaf if none_is_leaf else None


def assert_pairs_match_jax(ours: Any, theirs: list[tuple[Any, Any]]) -> None:
    """oxtree's `[(key_path, leaf), ...]` equals jax's: same keys, keystr and leaf objects."""
    assert type(ours) is list
    assert len(ours) == len(theirs), (ours, theirs)
    for pair, (their_path, their_leaf) in zip(ours, theirs, strict=True):
        assert type(pair) is tuple
        assert len(pair) == 2
        path, leaf = pair
        assert type(path) is tuple, path
        assert all(type(k) in OX_KEY_TYPES for k in path), path
        assert jax_path(path) == their_path
        assert oxtree.keystr(path) == jtu.keystr(their_path)
        assert oxtree.keystr(path, simple=True, separator="/") == jtu.keystr(
            their_path, simple=True, separator="/"
        )
        assert leaf is their_leaf, (path, leaf, their_leaf)


def assert_mapped_like_jax(ours: Any, theirs: Any, tree: Any, none_is_leaf: bool) -> None:
    """Results of mapping `Hit` with oxtree and with jax: same structure, same calls, and
    oxtree's result keeps the input's dict order."""
    our_hits, our_def = jtu.tree_flatten(ours)
    their_hits, their_def = jtu.tree_flatten(theirs)
    assert our_def == their_def
    assert len(our_hits) == len(their_hits)
    for a, b in zip(our_hits, their_hits, strict=True):
        assert type(a) is Hit
        assert all(type(k) in OX_KEY_TYPES for k in a.where)
        assert a.same_as(b, convert=jax_path), (a, b)
    back = oxtree.tree_map(lambda h: h.args[0], ours, none_is_leaf=none_is_leaf)
    assert_same_tree(back, tree)


# --------------------------------------------------------------------------------------------------
# The corpus.


@parametrize(tree=JAX_TREE_LIST, none_is_leaf=[False, True])
def test_tree_leaves_with_path_matches_jax(tree: Any, none_is_leaf: bool) -> None:
    ours = oxtree.tree_leaves_with_path(tree, none_is_leaf=none_is_leaf)
    theirs = jtu.tree_leaves_with_path(tree, is_leaf=jax_is_leaf(none_is_leaf))
    assert_pairs_match_jax(ours, theirs)
    leaves = oxtree.tree_leaves(tree, none_is_leaf=none_is_leaf)
    assert len(leaves) == len(ours)
    assert all(a is b for (_, a), b in zip(ours, leaves, strict=True))


@parametrize(tree=JAX_TREE_LIST, none_is_leaf=[False, True])
def test_tree_flatten_with_keys_matches_jax(tree: Any, none_is_leaf: bool) -> None:
    pairs, spec = _core.tree_flatten_with_keys(tree, none_is_leaf=none_is_leaf)
    their_pairs, their_def = jtu.tree_flatten_with_path(tree, is_leaf=jax_is_leaf(none_is_leaf))
    assert_pairs_match_jax(pairs, their_pairs)
    assert spec == oxtree.tree_structure(tree, none_is_leaf=none_is_leaf)
    assert spec.num_leaves == their_def.num_leaves == len(pairs)
    assert spec.none_is_leaf is none_is_leaf
    rebuilt = spec.unflatten([leaf for _, leaf in pairs])
    assert_same_tree(rebuilt, tree)
    assert spec.key_paths() == [path for path, _ in pairs]


@parametrize(tree=JAX_TREE_LIST, none_is_leaf=[False, True])
def test_tree_map_with_keys_matches_jax(tree: Any, none_is_leaf: bool) -> None:
    ours = _core.tree_map_with_keys(Hit, tree, none_is_leaf=none_is_leaf)
    theirs = jtu.tree_map_with_path(Hit, tree, is_leaf=jax_is_leaf(none_is_leaf))
    assert_mapped_like_jax(ours, theirs, tree, none_is_leaf)


@parametrize(tree=JAX_TREE_LIST, none_is_leaf=[False, True])
def test_tree_map_with_keys_several_trees_matches_jax(tree: Any, none_is_leaf: bool) -> None:
    is_leaf = jax_is_leaf(none_is_leaf)
    # Rests made by jax: dicts come back sorted, which must not matter.
    rest1 = jtu.tree_map(lambda x: Opaque("r1"), tree, is_leaf=is_leaf)
    rest2 = jtu.tree_map(lambda x: [x, {"deeper": x}], tree, is_leaf=is_leaf)
    ours = _core.tree_map_with_keys(Hit, tree, rest1, rest2, none_is_leaf=none_is_leaf)
    theirs = jtu.tree_map_with_path(Hit, tree, rest1, rest2, is_leaf=is_leaf)
    assert_mapped_like_jax(ours, theirs, tree, none_is_leaf)


def test_simple_examples() -> None:
    tree = {"b": [1, (2, None)], "a": Point(x=3, y={"k": 4})}
    got = [(oxtree.keystr(p), x) for p, x in oxtree.tree_leaves_with_path(tree)]
    assert got == [("['a'].x", 3), ("['a'].y['k']", 4), ("['b'][0]", 1), ("['b'][1][0]", 2)]
    got = [(oxtree.keystr(p), x) for p, x in oxtree.tree_leaves_with_path(tree, none_is_leaf=True)]
    assert ("['b'][1][1]", None) in got
    assert oxtree.tree_leaves_with_path(5) == [((), 5)]
    assert oxtree.tree_leaves_with_path(None) == []
    assert oxtree.tree_leaves_with_path(None, none_is_leaf=True) == [((), None)]
    mapped = _core.tree_map_with_keys(lambda p, x: oxtree.keystr(p), {"z": [0], "y": 0})
    assert mapped == {"z": ["['z'][0]"], "y": "['y']"}
    assert list(mapped) == ["z", "y"]


# --------------------------------------------------------------------------------------------------
# is_leaf, with and without the path.

PLAIN_PREDICATES: dict[str, Callable[[Any], bool]] = {
    "none": none_leaf,
    "pairs": lambda x: isinstance(x, tuple) and len(x) == 2,
    "dicts": lambda x: type(x) is dict,
    "namedtuples": lambda x: hasattr(x, "_fields"),
    "everything": lambda x: True,
}

# Path predicates that read the path through str(), which both libraries' keys share.
PATH_PREDICATES: dict[str, Callable[[tuple[Any, ...], Any], bool]] = {
    "root": lambda p, x: len(p) == 0,
    "depth2": lambda p, x: len(p) >= 2,
    "ends_in_1": lambda p, x: bool(p) and str(p[-1]) == "[1]",
    "field_y": lambda p, x: any(str(k) == ".y" for k in p),
    "dict_key_a_or_none": lambda p, x: "['a']" in "".join(map(str, p)) or x is None,
    "never": lambda p, x: False,
}


def test_jax_supports_is_leaf_takes_path() -> None:
    for func in (jtu.tree_flatten_with_path, jtu.tree_leaves_with_path, jtu.tree_map_with_path):
        assert "is_leaf_takes_path" in inspect.signature(func).parameters
    for func in (oxtree.tree_leaves_with_path, _core.tree_flatten_with_keys):
        assert "is_leaf_takes_path" in inspect.signature(func).parameters


@parametrize(tree=JAX_TREE_LIST, predicate=list(PLAIN_PREDICATES.values()))
def test_plain_is_leaf_matches_jax(tree: Any, predicate: Callable[[Any], bool]) -> None:
    ours = oxtree.tree_leaves_with_path(tree, predicate)
    theirs = jtu.tree_leaves_with_path(tree, predicate)
    assert_pairs_match_jax(ours, theirs)


class CallLog:
    """Wraps a path predicate and records every call as (keystr of the path, object)."""

    def __init__(self, predicate: Callable[[tuple[Any, ...], Any], bool]) -> None:
        self.predicate = predicate
        self.calls: list[tuple[str, Any]] = []

    def __call__(self, path: tuple[Any, ...], obj: Any) -> bool:
        assert type(path) is tuple
        self.calls.append((jtu.keystr(path), obj))
        return self.predicate(path, obj)


def assert_same_calls(ours: CallLog, theirs: CallLog) -> None:
    assert [p for p, _ in ours.calls] == [p for p, _ in theirs.calls]
    assert all(a is b for (_, a), (_, b) in zip(ours.calls, theirs.calls, strict=True))


PATH_TREES = [
    *JAX_TREE_LIST,
    {"a": [1, (2, 3)], "b": Point(x={"a": 4}, y=[5, None, (6, 7)])},
]


@parametrize(tree=PATH_TREES, predicate=list(PATH_PREDICATES.values()))
def test_is_leaf_takes_path_flatten_matches_jax(
    tree: Any, predicate: Callable[[tuple[Any, ...], Any], bool]
) -> None:
    ours_log, their_log = CallLog(predicate), CallLog(predicate)
    pairs, spec = _core.tree_flatten_with_keys(tree, ours_log, is_leaf_takes_path=True)
    their_pairs, their_def = jtu.tree_flatten_with_path(tree, their_log, is_leaf_takes_path=True)
    assert_pairs_match_jax(pairs, their_pairs)
    assert spec.num_leaves == their_def.num_leaves
    assert_same_calls(ours_log, their_log)
    # Every path handed to is_leaf is made of oxtree's key objects.
    log = []
    oxtree.tree_leaves_with_path(
        tree, lambda p, x: log.append(p) or predicate(p, x), is_leaf_takes_path=True
    )
    assert all(type(k) in OX_KEY_TYPES for path in log for k in path)
    assert [jtu.keystr(p) for p in log] == [p for p, _ in their_log.calls]


@parametrize(tree=PATH_TREES, predicate=list(PATH_PREDICATES.values()))
def test_is_leaf_takes_path_map_matches_jax(
    tree: Any, predicate: Callable[[tuple[Any, ...], Any], bool]
) -> None:
    ours = _core.tree_map_with_keys(Hit, tree, is_leaf=predicate, is_leaf_takes_path=True)
    theirs = jtu.tree_map_with_path(Hit, tree, is_leaf=predicate, is_leaf_takes_path=True)
    our_hits, our_def = jtu.tree_flatten(ours)
    their_hits, their_def = jtu.tree_flatten(theirs)
    assert our_def == their_def
    assert all(a.same_as(b, convert=jax_path) for a, b in zip(our_hits, their_hits, strict=True))
    assert len(our_hits) == len(their_hits)


def test_is_leaf_takes_path_sees_the_root_with_an_empty_path() -> None:
    seen: list[tuple[tuple[Any, ...], Any]] = []
    tree = {"a": [1]}
    oxtree.tree_leaves_with_path(
        tree, lambda p, x: seen.append((p, x)) or False, is_leaf_takes_path=True
    )
    assert seen[0] == ((), tree)
    assert seen[0][1] is tree
    assert seen[1] == ((oxtree.DictKey("a"),), tree["a"])
    assert seen[2] == ((oxtree.DictKey("a"), oxtree.SequenceKey(0)), 1)


def test_is_leaf_takes_path_with_none_is_leaf() -> None:
    tree = [None, (None, 1)]
    seen: list[tuple[str, Any]] = []
    pairs = oxtree.tree_leaves_with_path(
        tree,
        lambda p, x: seen.append((oxtree.keystr(p), x)) or False,
        is_leaf_takes_path=True,
        none_is_leaf=True,
    )
    assert [(oxtree.keystr(p), x) for p, x in pairs] == [
        ("[0]", None),
        ("[1][0]", None),
        ("[1][1]", 1),
    ]
    assert ("[0]", None) in seen


def test_path_predicate_returning_true_for_the_root() -> None:
    tree = {"a": [1, 2]}
    pairs = oxtree.tree_leaves_with_path(tree, lambda p, x: True, is_leaf_takes_path=True)
    assert pairs == [((), tree)]
    assert pairs[0][1] is tree


def test_is_leaf_exception_propagates() -> None:
    def boom(path: tuple[Any, ...], obj: Any) -> bool:
        if path:
            raise RuntimeError(f"boom at {oxtree.keystr(path)}")
        return False

    with pytest.raises(RuntimeError, match=r"boom at \[0\]"):
        oxtree.tree_leaves_with_path([1], boom, is_leaf_takes_path=True)
    with pytest.raises(RuntimeError, match="boom"):
        _core.tree_map_with_keys(Hit, [1], is_leaf=boom, is_leaf_takes_path=True)


# --------------------------------------------------------------------------------------------------
# Registered nodes.


def fresh_pair_class(name: str) -> type:
    """A new two-field class (not a dataclass, not a namedtuple)."""

    def __init__(self: Any, a: Any, b: Any) -> None:
        self.a, self.b = a, b

    def __repr__(self: Any) -> str:
        return f"{name}({self.a!r}, {self.b!r})"

    return type(name, (), {"__init__": __init__, "__repr__": __repr__})


@pytest.fixture
def registered() -> Iterator[list[tuple[type, str]]]:
    """oxtree registrations made in the test, unregistered afterwards."""
    made: list[tuple[type, str]] = []
    yield made
    for cls, namespace in reversed(made):
        oxtree.unregister_pytree_node(cls, namespace=namespace)


def pair_tree(cls: type) -> Any:
    return {"n": cls(1, [cls(2, None), 3]), "m": (cls({"z": 4, "y": 5}, cls(6, 7)),)}


def test_flatten_with_keys_func_gives_the_keys(registered: list[tuple[type, str]]) -> None:
    ox_cls, jax_cls = fresh_pair_class("OxKeyed"), fresh_pair_class("JaxKeyed")

    def flatten(node: Any) -> tuple[tuple[Any, ...], str]:
        return (node.a, node.b), "aux"

    oxtree.register_pytree_node(
        ox_cls,
        flatten,
        lambda aux, children: ox_cls(*children),
        flatten_with_keys_func=lambda n: (
            ((oxtree.GetAttrKey("a"), n.a), (oxtree.DictKey("bee"), n.b)),
            "aux",
        ),
    )
    registered.append((ox_cls, ""))
    jtu.register_pytree_with_keys(
        jax_cls,
        lambda n: (((jtu.GetAttrKey("a"), n.a), (jtu.DictKey("bee"), n.b)), "aux"),
        lambda aux, children: jax_cls(*children),
        flatten,
    )
    ours, theirs = pair_tree(ox_cls), pair_tree(jax_cls)
    assert_pairs_match_jax_leaves(
        oxtree.tree_leaves_with_path(ours), jtu.tree_leaves_with_path(theirs)
    )
    got = [oxtree.keystr(p) for p, _ in oxtree.tree_leaves_with_path(ours)]
    assert "['n'].a" in got
    assert "['n']['bee'][0].a" in got
    pairs, spec = _core.tree_flatten_with_keys(ours)
    their_pairs, _ = jtu.tree_flatten_with_path(theirs)
    assert_pairs_match_jax_leaves(pairs, their_pairs)
    assert spec == oxtree.tree_structure(ours)
    mapped = _core.tree_map_with_keys(lambda p, x: oxtree.keystr(p), ours)
    their_mapped = jtu.tree_map_with_path(lambda p, x: jtu.keystr(p), theirs)
    assert oxtree.tree_leaves(mapped) == jtu.tree_leaves(their_mapped)
    assert type(mapped["n"]) is ox_cls


def assert_pairs_match_jax_leaves(ours: list[Any], theirs: list[Any]) -> None:
    """Like `assert_pairs_match_jax` for trees of parallel classes: leaves compare by value."""
    assert len(ours) == len(theirs)
    for (path, leaf), (their_path, their_leaf) in zip(ours, theirs, strict=True):
        assert jax_path(path) == their_path
        assert oxtree.keystr(path) == jtu.keystr(their_path)
        assert leaf == their_leaf


def test_without_flatten_with_keys_children_get_flat_indices(
    registered: list[tuple[type, str]],
) -> None:
    ox_cls, jax_cls = fresh_pair_class("OxPlain"), fresh_pair_class("JaxPlain")
    oxtree.register_pytree_node(
        ox_cls, lambda n: ((n.a, n.b), None), lambda aux, children: ox_cls(*children)
    )
    registered.append((ox_cls, ""))
    jtu.register_pytree_node(
        jax_cls, lambda n: ((n.a, n.b), None), lambda aux, children: jax_cls(*children)
    )
    ours = oxtree.tree_leaves_with_path(pair_tree(ox_cls))
    assert_pairs_match_jax_leaves(ours, jtu.tree_leaves_with_path(pair_tree(jax_cls)))
    assert ours[0][0] == (
        oxtree.DictKey("m"),
        oxtree.SequenceKey(0),
        oxtree.FlattenedIndexKey(0),
        oxtree.DictKey("y"),
    )
    assert oxtree.keystr(ours[0][0]) == "['m'][0][<flat index 0>]['y']"
    for none_is_leaf in (False, True):
        mapped = _core.tree_map_with_keys(Hit, pair_tree(ox_cls), none_is_leaf=none_is_leaf)
        paths = [h.where for h in oxtree.tree_leaves(mapped, none_is_leaf=none_is_leaf)]
        assert paths == [
            p for p, _ in oxtree.tree_leaves_with_path(pair_tree(ox_cls), none_is_leaf=none_is_leaf)
        ]


def test_register_pytree_node_class_gets_flat_indices(registered: list[tuple[type, str]]) -> None:
    def make(name: str, register: Callable[[type], type]) -> type:
        @register
        class Node:
            def __init__(self, *items: Any) -> None:
                self.items = items

            def tree_flatten(self) -> tuple[tuple[Any, ...], None]:
                return self.items, None

            @classmethod
            def tree_unflatten(cls, aux: Any, children: Any) -> Any:
                return cls(*children)

        Node.__qualname__ = Node.__name__ = name
        return Node

    ox_cls = make("OxNodeClass", oxtree.register_pytree_node_class)
    registered.append((ox_cls, ""))
    jax_cls = make("JaxNodeClass", jtu.register_pytree_node_class)
    ours = oxtree.tree_leaves_with_path([ox_cls("a", ox_cls("b", "c"))])
    theirs = jtu.tree_leaves_with_path([jax_cls("a", jax_cls("b", "c"))])
    assert_pairs_match_jax_leaves(ours, theirs)
    assert oxtree.keystr(ours[-1][0]) == "[0][<flat index 1>][<flat index 1>]"


def test_registered_nodes_of_one_shape_walked_in_turn(registered: list[tuple[type, str]]) -> None:
    # Paths of a tree walked before may be handed out again: never to a tree whose registered
    # nodes name their children otherwise (another registration, the same class registered
    # again, keys from a flatten function).
    plain, named = fresh_pair_class("OxTurnPlain"), fresh_pair_class("OxTurnNamed")
    oxtree.register_pytree_node(plain, lambda n: ((n.a, n.b), None), lambda _, c: plain(*c))
    registered.append((plain, ""))
    oxtree.register_pytree_node(
        named,
        lambda n: ((n.a, n.b), None),
        lambda _, c: named(*c),
        flatten_with_keys_func=lambda n: (
            ((oxtree.GetAttrKey("a"), n.a), (oxtree.DictKey(n.a), n.b)),
            None,
        ),
    )
    registered.append((named, ""))
    expected = {
        plain: ["['k'][0][<flat index 0>]", "['k'][0][<flat index 1>]"],
        named: ["['k'][0].a", "['k'][0][1]"],
    }
    for cls in (plain, plain, named, named, plain):
        got = oxtree.tree_util.tree_flatten_with_path({"k": [cls(1, 2)]})[0]
        assert [oxtree.keystr(p) for p, _ in got] == expected[cls]
    got = oxtree.tree_util.tree_flatten_with_path({"k": [named(7, 2)]})[0]
    assert [oxtree.keystr(p) for p, _ in got] == ["['k'][0].a", "['k'][0][7]"]
    oxtree.unregister_pytree_node(plain)
    registered.remove((plain, ""))
    oxtree.register_dataclass(plain, data_fields=["b", "a"], meta_fields=[])
    registered.append((plain, ""))
    got = oxtree.tree_util.tree_flatten_with_path({"k": [plain(1, 2)]})[0]
    assert [(oxtree.keystr(p), x) for p, x in got] == [("['k'][0].b", 2), ("['k'][0].a", 1)]


def fresh_dataclass(name: str, **options: Any) -> type:
    return dataclasses.make_dataclass(
        name,
        [
            ("w", Any),
            ("meta", Any, dataclasses.field(default="m", metadata={"static": True})),
            ("b", Any, dataclasses.field(default=None)),
        ],
        **options,
    )


@pytest.mark.parametrize("how", ["register_dataclass", "oxtree.dataclasses"])
def test_dataclass_fields_give_getattr_keys(how: str, registered: list[tuple[type, str]]) -> None:
    if how == "register_dataclass":
        ox_cls = oxtree.register_dataclass(fresh_dataclass("OxData"))
    else:

        @oxtree.dataclasses.dataclass(namespace="")
        class OxData2:
            w: Any
            meta: Any = oxtree.dataclasses.field(default="m", pytree_node=False)
            b: Any = None

        ox_cls = OxData2
    registered.append((ox_cls, ""))
    jax_cls = jtu.register_dataclass(fresh_dataclass("JaxData"))

    def build(cls: type) -> Any:
        return [cls(w={"k": 1, "j": (2, 3)}, b=cls(w=4, b=None)), cls(w=None, b=5)]

    for none_is_leaf in (False, True):
        ours = oxtree.tree_leaves_with_path(build(ox_cls), none_is_leaf=none_is_leaf)
        theirs = jtu.tree_leaves_with_path(build(jax_cls), is_leaf=jax_is_leaf(none_is_leaf))
        assert_pairs_match_jax_leaves(ours, theirs)
    keys = [oxtree.keystr(p) for p, _ in oxtree.tree_leaves_with_path(build(ox_cls))]
    assert keys == ["[0].w['j'][0]", "[0].w['j'][1]", "[0].w['k']", "[0].b.w", "[1].b"]


def test_namedtuple_fields_give_getattr_keys() -> None:
    tree = [Point(x=1, y=Vector(dx=2)), Vector(dx=None, dy=(3,))]
    got = [(oxtree.keystr(p), x) for p, x in oxtree.tree_leaves_with_path(tree)]
    assert got == [("[0].x", 1), ("[0].y.dx", 2), ("[0].y.dy", "default"), ("[1].dy[0]", 3)]
    first = oxtree.tree_leaves_with_path(tree)[0][0]
    assert first == (oxtree.SequenceKey(0), oxtree.GetAttrKey("x"))
    assert_pairs_match_jax(oxtree.tree_leaves_with_path(tree), jtu.tree_leaves_with_path(tree))


@pytest.mark.parametrize("n", [1023, 1024, 1025, 3000, 140_000])
def test_long_lists_match_jax(n: int) -> None:
    # Positions past 1,024 (and past 131,072) take their keys from other stores than the
    # first ones; a second flatten must hand out equal keys.
    tree = {"a": list(range(n)), "b": (Point(x=1, y=2), Point(x=3, y=4))}
    theirs = jtu.tree_flatten_with_path(tree)[0]
    for _ in range(2):
        assert_pairs_match_jax(oxtree.tree_util.tree_flatten_with_path(tree)[0], theirs)
    paths, leaves, _ = oxtree.tree_flatten_with_path(tree)
    assert paths[n - 1] == ("a", n - 1)
    assert paths[n:] == [("b", 0, 0), ("b", 0, 1), ("b", 1, 0), ("b", 1, 1)]
    assert leaves == oxtree.tree_leaves(tree)


def test_trees_of_one_shape_walked_in_turn_match_jax() -> None:
    # Paths of a tree walked before may be handed out again: never to a tree whose keys
    # differ, on either face.
    for _ in range(2):
        for tree in shape_trees():
            theirs = jtu.tree_flatten_with_path(tree)[0]
            assert_pairs_match_jax(oxtree.tree_util.tree_flatten_with_path(tree)[0], theirs)
            assert_pairs_match_jax(oxtree.tree_leaves_with_path(tree), theirs)


def test_pairs_list_is_a_new_list_of_new_pairs() -> None:
    tree = {"a": [1, 2], "b": 3}
    first = oxtree.tree_util.tree_flatten_with_path(tree)[0]
    first.append("mine")
    second = oxtree.tree_util.tree_flatten_with_path(tree)[0]
    assert second is not first
    assert len(second) == 3
    assert all(a is not b for a, b in zip(first, second, strict=False))
    assert [p for p, _ in second] == [p for p, _ in first[:3]]


@pytest.mark.parametrize("tree", [(1, 2.0, "x"), [True, 3], (), list(range(16)), list(range(20))])
def test_sequences_of_leaves_match_jax(tree: Any) -> None:
    theirs = jtu.tree_flatten_with_path(tree)
    ours = oxtree.tree_util.tree_flatten_with_path(tree)
    assert_pairs_match_jax(ours[0], theirs[0])
    assert ours[1] == oxtree.tree_util.tree_structure(tree)
    paths, leaves, spec = oxtree.tree_flatten_with_path(tree)
    assert paths == [(i,) for i in range(len(leaves))]
    assert spec == oxtree.tree_structure(tree)


def test_namespaced_registration_gives_keys_only_in_its_namespace(
    registered: list[tuple[type, str]],
) -> None:
    cls = fresh_pair_class("OxNamespaced")
    oxtree.register_pytree_node(
        cls,
        lambda n: ((n.a, n.b), None),
        lambda aux, children: cls(*children),
        flatten_with_keys_func=lambda n: (
            ((oxtree.GetAttrKey("a"), n.a), (oxtree.GetAttrKey("b"), n.b)),
            None,
        ),
        namespace="paths-test",
    )
    registered.append((cls, "paths-test"))
    node = cls(1, [2])
    assert oxtree.tree_leaves_with_path([node]) == [((oxtree.SequenceKey(0),), node)]
    got = oxtree.tree_leaves_with_path([node], namespace="paths-test")
    assert [oxtree.keystr(p) for p, _ in got] == ["[0].a", "[0].b[0]"]
    mapped = _core.tree_map_with_keys(lambda p, x: oxtree.keystr(p), [node], namespace="paths-test")
    assert (mapped[0].a, mapped[0].b) == ("[0].a", ["[0].b[0]"])


# --------------------------------------------------------------------------------------------------
# Random trees.

_JAX_LEAVES = st.one_of(st.none(), st.integers(-3, 3), st.text(alphabet="abc", max_size=3))


def _jax_extend(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    lists = st.lists(children, max_size=4)
    return st.one_of(
        lists,
        lists.map(tuple),
        st.dictionaries(st.text(alphabet="abxy", max_size=2), children, max_size=4),
        st.dictionaries(st.integers(-3, 3), children, max_size=3),
        st.builds(Point, children, children),
        st.builds(Vector, children, children),
    )


JAX_FRIENDLY_TREES = st.recursive(_JAX_LEAVES, _jax_extend, max_leaves=20)


@HYPOTHESIS_SETTINGS
@given(tree=JAX_FRIENDLY_TREES, none_is_leaf=st.booleans())
def test_random_trees_match_jax(tree: Any, none_is_leaf: bool) -> None:
    ours = oxtree.tree_leaves_with_path(tree, none_is_leaf=none_is_leaf)
    assert_pairs_match_jax(ours, jtu.tree_leaves_with_path(tree, is_leaf=jax_is_leaf(none_is_leaf)))
    mapped = _core.tree_map_with_keys(Hit, tree, none_is_leaf=none_is_leaf)
    assert_mapped_like_jax(
        mapped,
        jtu.tree_map_with_path(Hit, tree, is_leaf=jax_is_leaf(none_is_leaf)),
        tree,
        none_is_leaf,
    )


@HYPOTHESIS_SETTINGS
@given(tree=JAX_FRIENDLY_TREES, depth=st.integers(0, 3))
def test_random_trees_is_leaf_takes_path_match_jax(tree: Any, depth: int) -> None:
    def predicate(path: tuple[Any, ...], obj: Any) -> bool:
        return len(path) >= depth

    ours_log, their_log = CallLog(predicate), CallLog(predicate)
    ours = oxtree.tree_leaves_with_path(tree, ours_log, is_leaf_takes_path=True)
    theirs = jtu.tree_leaves_with_path(tree, their_log, is_leaf_takes_path=True)
    assert_pairs_match_jax(ours, theirs)
    assert_same_calls(ours_log, their_log)
    assert all(len(p) <= depth for p, _ in ours)
