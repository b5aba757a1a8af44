"""The tree algebra both faces share (oxtree._core's `_broadcast_prefix`, `_tree_transpose`,
`_tree_reduce`, ...): one crossing of the boundary per call, the core's answers about types
and registered nodes, and every error path of the new entry points."""

from __future__ import annotations

import collections
import dataclasses
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

import jax.tree_util as jtu
import optree
import oxtree
import pytest
from oxtree import _core
from oxtree import tree_util as otu

# --------------------------------------------------------------------------------------------------
# Boundary crossings: calls from Python into the core, counted with a profiler hook.


def _is_core(func: Any) -> bool:
    owner = getattr(func, "__self__", None)
    module = getattr(func, "__module__", None) or ""
    return module.startswith("oxtree._core") or isinstance(owner, _core.PyTreeSpec)


@contextmanager
def _crossings() -> Iterator[list[str]]:
    """Records the name of every core function or treespec method Python code calls."""
    calls: list[str] = []

    def hook(frame: Any, event: str, arg: Any) -> None:
        if event == "c_call" and _is_core(arg):
            calls.append(arg.__name__)

    sys.setprofile(hook)
    try:
        yield calls
    finally:
        sys.setprofile(None)


PREFIX = [0] * 100
FULL = [(i, [i, {"k": i}]) for i in range(100)]

BROADCASTS: dict[str, Callable[[], Any]] = {
    "tree_broadcast_prefix": lambda: oxtree.tree_broadcast_prefix(PREFIX, FULL),
    "broadcast_prefix": lambda: oxtree.broadcast_prefix(PREFIX, FULL),
    "ops.tree_broadcast_prefix": lambda: oxtree.ops.tree_broadcast_prefix(PREFIX, FULL),
    "tree_util.tree_broadcast": lambda: otu.tree_broadcast(PREFIX, FULL),
    "tree.broadcast": lambda: oxtree.tree.broadcast(PREFIX, FULL),
}


@pytest.mark.parametrize("name", list(BROADCASTS))
def test_broadcast_crosses_the_boundary_once_per_call(name: str) -> None:
    call = BROADCASTS[name]
    call()  # imports and lazy attributes resolved before counting
    with _crossings() as calls:
        out = call()
    assert calls == ["_broadcast_prefix"]
    assert len(jtu.tree_leaves(out)) == 300


COMMON = [(i, [0, {"k": 0}]) for i in range(100)]


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (lambda: oxtree.tree_broadcast_common(PREFIX, COMMON), ["_broadcast_common"]),
        (lambda: oxtree.broadcast_common(PREFIX, COMMON), ["_broadcast_common"]),
        (
            lambda: oxtree.tree_broadcast_map(lambda x, y: x, PREFIX, COMMON),
            ["_broadcast_common", "tree_map"],
        ),
    ],
    ids=["tree_broadcast_common", "broadcast_common", "tree_broadcast_map"],
)
def test_broadcast_common_crosses_once(call: Callable[[], Any], expected: list[str]) -> None:
    """No walk per leaf: one core call (and the map over the broadcast trees)."""
    call()
    with _crossings() as calls:
        call()
    assert calls == expected


@pytest.mark.parametrize(
    ("tree", "other"),
    [
        (1, [2, (3, None)]),
        ((1, {"a": 2}), ((3, 4), 5)),
        ({"a": 1, "b": [2]}, collections.OrderedDict(b=[3], a=(4, 5))),
        ([None, 1], [2, (3, 4)]),
        (collections.deque([1, 2], maxlen=3), collections.deque([[1], 2])),
    ],
    ids=repr,
)
def test_broadcast_common_matches_optree(tree: Any, other: Any) -> None:
    assert oxtree.tree_broadcast_common(tree, other) == optree.tree_broadcast_common(tree, other)
    assert oxtree.broadcast_common(tree, other) == optree.broadcast_common(tree, other)
    ours = oxtree.tree_broadcast_map(lambda x, y: (x, y), tree, other)
    assert ours == optree.tree_broadcast_map(lambda x, y: (x, y), tree, other)


def test_broadcast_common_errors() -> None:
    with pytest.raises(ValueError, match="arity mismatch"):
        oxtree.tree_broadcast_common([1, 2], [1, 2, 3])
    with pytest.raises(TypeError, match="needs a tree"):
        _core._broadcast_common(())
    with pytest.raises(TypeError, match="is_leaf must be a callable or None"):
        oxtree.broadcast_common(1, 2, is_leaf=1)  # type: ignore[arg-type]


def test_the_crossing_counter_sees_per_leaf_calls() -> None:
    """The counter itself: a Python loop over treespec methods is counted call by call."""
    spec = oxtree.tree_structure(PREFIX)
    with _crossings() as calls:
        for sub in spec.flatten_up_to(FULL):
            oxtree.tree_structure(sub)
    assert len(calls) == 101


@pytest.mark.parametrize(
    "call",
    [
        lambda: oxtree.tree_reduce(lambda a, b: a + b, FULL),
        lambda: oxtree.tree_reduce_associative(lambda a, b: a + b, FULL),
        lambda: oxtree.tree_all(FULL),
        lambda: oxtree.tree_any(FULL),
        lambda: otu.tree_reduce(lambda a, b: a + b, FULL),
        lambda: otu.tree_reduce_associative(lambda a, b: a + b, FULL),
        lambda: otu.tree_all(FULL),
    ],
)
def test_reductions_cross_once(call: Callable[[], Any]) -> None:
    call()
    with _crossings() as calls:
        call()
    assert len(calls) == 1


def test_transposes_cross_once() -> None:
    outer, inner = oxtree.tree_structure([0, 0]), oxtree.tree_structure((0, 0))
    jouter, jinner = otu.tree_structure([0, 0]), otu.tree_structure((0, 0))
    tree = [(1, 2), (3, 4)]
    with _crossings() as calls:
        a = oxtree.tree_transpose(outer, inner, tree)
        b = otu.tree_transpose(jouter, jinner, tree)
    assert calls == ["_tree_transpose", "_tree_transpose"]
    assert a == b == ([1, 3], [2, 4])


# --------------------------------------------------------------------------------------------------
# Both faces of one operation agree with their peers.

TREES = [
    1,
    None,
    (1, [2, None]),
    {"b": [1, 2], "a": (3, {"c": 4})},
    collections.OrderedDict(b=1, a=[2, 3]),
    collections.deque([1, [2, 3]]),
    time.gmtime(0),
]


@pytest.mark.parametrize("tree", TREES, ids=repr)
def test_reductions_match_both_peers(tree: Any) -> None:
    def add(a: Any, b: Any) -> Any:
        return (a, b)

    assert oxtree.tree_reduce(add, tree, 0) == optree.tree_reduce(add, tree, 0)
    assert otu.tree_reduce(add, tree, 0) == jtu.tree_reduce(add, tree, 0)
    assert oxtree.tree_all(tree) == optree.tree_all(tree)
    assert oxtree.tree_any(tree) == optree.tree_any(tree)
    assert otu.tree_all(tree) == jtu.tree_all(tree)
    assert otu.tree_reduce_associative(add, tree, identity=0) == jtu.tree_reduce_associative(
        add, tree, identity=0
    )


@pytest.mark.parametrize("tree", TREES, ids=repr)
def test_broadcast_of_a_leaf_matches_both_peers(tree: Any) -> None:
    assert oxtree.tree_broadcast_prefix(7, tree) == optree.tree_broadcast_prefix(7, tree)
    assert oxtree.broadcast_prefix(7, tree) == optree.broadcast_prefix(7, tree)
    assert otu.tree_broadcast(7, tree) == jtu.tree_broadcast(7, tree)


def test_broadcast_faces_differ_only_where_their_peers_do() -> None:
    """optree keeps the prefix's nodes and applies is_leaf to both trees; JAX rebuilds with
    the full tree's structure and applies is_leaf to the prefix only."""
    prefix, full = (0, 1), ((1, 2), [3, (4, 5)])

    def is_leaf(x: Any) -> bool:
        return type(x) is tuple and len(x) == 2 and x[0] == 4

    ours = oxtree.tree_broadcast_prefix(prefix, full, is_leaf)
    assert ours == optree.tree_broadcast_prefix(prefix, full, is_leaf)
    assert otu.tree_broadcast(prefix, full, is_leaf) == jtu.tree_broadcast(prefix, full, is_leaf)
    assert oxtree.tree_broadcast_prefix(prefix, full, is_leaf) == ((0, 0), [1, 1])
    assert otu.tree_broadcast(prefix, full, is_leaf) == ((0, 0), [1, (1, 1)])


def test_reduce_errors_are_the_peers() -> None:
    with pytest.raises(TypeError, match="reduce\\(\\) of empty iterable with no initial value"):
        oxtree.tree_reduce(max, [])
    with pytest.raises(TypeError, match="reduce\\(\\) of empty iterable with no initial value"):
        otu.tree_reduce(max, [])
    message = "Must specify identity for parallel reduction of empty sequence."
    for face in (oxtree, otu):
        with pytest.raises(TypeError) as info:
            face.tree_reduce_associative(max, {})
        assert str(info.value) == message
    with pytest.raises(TypeError, match="at most one initial value, got 2"):
        _core._tree_reduce(max, [], 1, 2)
    with pytest.raises(TypeError, match="at most one identity value, got 2"):
        _core._tree_reduce_associative(max, [], 1, 2)


def test_reductions_propagate_errors_and_bad_is_leaf() -> None:
    def boom(a: Any, b: Any) -> Any:
        raise ZeroDivisionError("boom")

    for call in (
        lambda: oxtree.tree_reduce(boom, [1, 2]),
        lambda: oxtree.tree_reduce_associative(boom, [1, 2]),
        lambda: otu.tree_reduce(boom, [1, 2]),
    ):
        with pytest.raises(ZeroDivisionError, match="boom"):
            call()
    with pytest.raises(TypeError, match="is_leaf must be a callable or None"):
        oxtree.tree_all([1], is_leaf=5)  # type: ignore[arg-type]


def test_transpose_errors_speak_each_face() -> None:
    outer, inner = oxtree.tree_structure([0, 0]), oxtree.tree_structure((0, 0))
    with pytest.raises(TypeError, match=r"^Tree structure mismatch; expected: "):
        oxtree.tree_transpose(outer, inner, [(1, 2), (3,)])
    jouter, jinner = otu.tree_structure([0, 0]), otu.tree_structure((0, 0))
    with pytest.raises(TypeError, match=r"^Mismatch\n"):
        otu.tree_transpose(jouter, jinner, [(1, 2), (3,)])
    with pytest.raises(ValueError, match=r"at least one leaf\. Cannot infer the inner"):
        oxtree.tree_transpose(oxtree.tree_structure([]), None, [])
    with pytest.raises(IndexError):
        otu.tree_transpose(otu.tree_structure([]), None, [])
    with pytest.raises(ValueError, match="same none_is_leaf value"):
        oxtree.tree_transpose(outer, oxtree.tree_structure((0, 0), none_is_leaf=True), [])
    with pytest.raises(TypeError, match="is_leaf must be a callable or None"):
        oxtree.tree_transpose(outer, inner, [], is_leaf=1)  # type: ignore[arg-type]


def test_broadcast_mismatch_errors_speak_each_face() -> None:
    with pytest.raises(ValueError, match="broadcast_prefix prefix_tree"):
        otu.tree_broadcast([1, 2], [1, 2, 3])
    with pytest.raises(ValueError, match="arity mismatch") as ours:
        oxtree.tree_broadcast_prefix([1, 2], [1, 2, 3])
    with pytest.raises(ValueError, match="arity mismatch") as theirs:
        optree.tree_broadcast_prefix([1, 2], [1, 2, 3])
    assert str(ours.value).startswith(str(theirs.value).split("\n")[0])
    with pytest.raises(TypeError, match="is_leaf must be a callable or None"):
        oxtree.broadcast_prefix(1, [1], is_leaf=3)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------------
# What the core says about types.


class Point(NamedTuple):
    x: Any
    y: Any


INSTANCES = [
    (1, 2),
    [1],
    {"a": 1},
    None,
    collections.OrderedDict(a=1),
    collections.defaultdict(int, a=1),
    collections.deque([1]),
    Point(1, 2),
    time.gmtime(0),
    os.stat(os.curdir),
    1,
    "s",
    object(),
    type("DictSub", (dict,), {})(a=1),
]


@pytest.mark.parametrize("obj", INSTANCES, ids=lambda o: type(o).__name__)
def test_node_kind_is_the_walks(obj: Any) -> None:
    """A type's kind is the kind of the root of its instances' treespecs, in either face."""
    assert _core._node_kind(type(obj)) is oxtree.tree_structure(obj).kind
    assert _core._node_kind(type(obj), jax=True) is otu.tree_structure(obj).kind
    assert otu.is_tree_node(type(obj)) == jtu.default_registry.is_node(type(obj))


def test_node_kind_answers() -> None:
    kind = oxtree.PyTreeKind
    assert _core._node_kind(list) is kind.LIST
    assert _core._node_kind(int) is kind.LEAF
    assert _core._node_kind(5) is kind.LEAF  # not a type
    assert _core._node_kind(type(None)) is kind.NONE
    assert _core._node_kind(type(None), none_is_leaf=True) is kind.LEAF
    assert _core._node_kind(collections.deque) is kind.DEQUE
    assert _core._node_kind(collections.deque, jax=True) is kind.LEAF
    assert _core._node_kind(time.struct_time) is kind.STRUCTSEQUENCE
    assert _core._node_kind(time.struct_time, jax=True) is kind.LEAF
    assert _core._node_kind(Point, jax=True) is kind.NAMEDTUPLE
    assert _core._node_kind(type("DictSub", (dict,), {})) is kind.LEAF


def test_node_kind_of_a_registered_type_honours_the_namespace() -> None:
    class Box:
        def __init__(self, v: Any) -> None:
            self.v = v

    oxtree.register_pytree_node(
        Box, lambda b: ((b.v,), None), lambda _, c: Box(*c), namespace="algebra-test"
    )
    try:
        assert _core._node_kind(Box) is oxtree.PyTreeKind.LEAF
        assert _core._node_kind(Box, namespace="algebra-test") is oxtree.PyTreeKind.CUSTOM
        assert not otu.is_tree_node(Box)
    finally:
        oxtree.unregister_pytree_node(Box, namespace="algebra-test")


def test_struct_sequence_field_names_come_from_the_core() -> None:
    names = _core._tuple_fields(os.stat_result, unnamed=True)
    assert len(names) == os.stat_result.n_sequence_fields
    assert names[:3] == ["st_mode", "st_ino", "st_dev"]
    assert None in names  # the integer st_atime, st_mtime, st_ctime have no visible name
    assert _core._tuple_fields(os.stat_result) == [n for n in names if n is not None]
    assert _core._tuple_fields(Point, unnamed=True) == ["x", "y"]
    entry = oxtree.StructSequenceEntry(7, os.stat_result, oxtree.PyTreeKind.STRUCTSEQUENCE)
    assert entry.field == "unnamed field"
    with pytest.raises(TypeError, match="Expected a namedtuple or a PyStructSequence type"):
        _core._tuple_fields(tuple, unnamed=True)


# --------------------------------------------------------------------------------------------------
# Rebuilding a registered node from new metadata (tree_flatten_one_level's unflatten_func).


class Tagged:
    def __init__(self, value: Any, tag: Any) -> None:
        self.value, self.tag = value, tag

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Tagged) and (self.value, self.tag) == (other.value, other.tag)

    __hash__ = None  # type: ignore[assignment]


@dataclasses.dataclass
class Meta:
    x: Any
    y: Any
    name: str


@pytest.fixture
def registered() -> Iterator[str]:
    ns = "algebra-unflatten"
    oxtree.register_pytree_node(
        Tagged, lambda t: ((t.value,), t.tag), lambda tag, c: Tagged(c[0], tag), namespace=ns
    )
    oxtree.register_dataclass(Meta, data_fields=["x", "y"], meta_fields=["name"], namespace=ns)
    try:
        yield ns
    finally:
        oxtree.unregister_pytree_node(Tagged, namespace=ns)
        oxtree.unregister_pytree_node(Meta, namespace=ns)


def test_unflatten_func_of_a_registered_node_takes_new_metadata(registered: str) -> None:
    out = oxtree.tree_flatten_one_level(Tagged(1, "a"), namespace=registered)
    assert out.unflatten_func(out.metadata, [5]) == Tagged(5, "a")
    assert out.unflatten_func("b", [6]) == Tagged(6, "b")


def test_unflatten_func_of_a_dataclass_takes_optree_metadata(registered: str) -> None:
    out = oxtree.tree_flatten_one_level(Meta(1, 2, "m"), namespace=registered)
    assert out.metadata == (("name", "m"),)
    assert out.unflatten_func(out.metadata, [3, 4]) == Meta(3, 4, "m")
    assert out.unflatten_func((("name", "n"),), [3, 4]) == Meta(3, 4, "n")
    with pytest.raises(TypeError, match=r"\(\(name, value\), \.\.\.\) for its meta fields"):
        out.unflatten_func(("n",), [3, 4])
    with pytest.raises(TypeError, match="for its meta fields"):
        out.unflatten_func((("other", "n"),), [3, 4])
    with pytest.raises(ValueError, match="has 2 children, got 1"):
        out.unflatten_func(out.metadata, [3])


def test_unflatten_node_wants_a_registered_root() -> None:
    with pytest.raises(TypeError, match="whose root is a registered node"):
        _core._unflatten_node(oxtree.tree_structure([1]), None, [1])


def test_unflatten_node_of_a_static_node_takes_no_children() -> None:
    class Units:
        def __init__(self, name: str) -> None:
            self.name = name

        def __eq__(self, other: object) -> bool:
            return isinstance(other, Units) and other.name == self.name

        def __hash__(self) -> int:
            return hash(self.name)

    otu.register_static(Units)
    try:
        spec = otu.tree_structure(Units("m"))
        assert _core._unflatten_node(spec, Units("s"), []) == Units("s")
        with pytest.raises(ValueError, match="has no children, got 1"):
            _core._unflatten_node(spec, Units("s"), [1])
    finally:
        oxtree.unregister_pytree_node(Units)
