"""The tree algebra of `oxtree.ops`, differentially against optree 0.20 and `jax.tree_util`.

Every function is compared with optree over the shared corpus (and random trees), the JAX
extras with `jax.tree_util`; hypothesis checks the algebraic properties (partition/combine
round trip, broadcasting a tree onto itself, transposing twice); the error cases check
exception types and that messages name the key path.
"""

from __future__ import annotations

import inspect
import itertools
import operator
import re
from collections import OrderedDict, defaultdict, deque
from collections.abc import Callable
from typing import Any

import jax.tree_util as jtu
import optree
import oxtree
import oxtree.ops as ops
import pytest
from helpers import (
    HYPOTHESIS_SETTINGS,
    INNER_TREES,
    NONE_IS_LEAF_OPTIONS,
    TREES,
    assert_same_leaves,
    assert_same_tree,
    parametrize,
    trees,
    widen,
)
from hypothesis import given
from hypothesis import strategies as st
from nodes import Opaque, Point, Rec, Triple

# --------------------------------------------------------------------------------------------------
# Helpers.

SENTINEL = Opaque("fill")


class Marker:
    """A distinct leaf object (compared by identity), labelled for readable failures."""

    __slots__ = ("label",)

    def __init__(self, label: int) -> None:
        self.label = label

    def __repr__(self) -> str:
        return f"M{self.label}"


def markers() -> Callable[[Any], Marker]:
    """A function giving a fresh Marker on each call (for tree_map)."""
    counter = itertools.count()
    return lambda *_: Marker(next(counter))


def cut(tree: Any, none_is_leaf: bool, choose: Callable[[Any], bool]) -> Any:
    """A prefix of `tree`: every subtree where `choose` says so (and every leaf) becomes a
    fresh Marker."""
    return optree.tree_map(markers(), tree, is_leaf=choose, none_is_leaf=none_is_leaf)


def one_level_prefix(tree: Any, none_is_leaf: bool) -> Any:
    """The prefix of `tree` that keeps only its root node."""
    return cut(tree, none_is_leaf, lambda x: x is not tree)


def outcome(func: Callable[[], Any]) -> tuple[str, Any]:
    """`("ok", result)` or `("error", exception type)`."""
    try:
        return "ok", func()
    except Exception as error:
        return "error", type(error)


def path_in_optree_message(message: str) -> str:
    """The key path of an optree/jax prefix error message (`name tree root` for the root)."""
    match = re.search(r"key path\n\s+(.+)\n", message)
    assert match is not None, message
    path = match.group(1)
    return path.removesuffix(" tree root")


def path_in_our_message(message: str) -> str:
    """The key path of one of our prefix errors: they are optree's messages."""
    return path_in_optree_message(message)


def has_leaves(tree: Any, none_is_leaf: bool = False) -> bool:
    return optree.tree_structure(tree, none_is_leaf=none_is_leaf).num_leaves > 0


def jax_agrees(tree: Any) -> bool:
    """JAX sees the same nodes and leaves as optree (JAX has no deque or structseq nodes and
    cannot sort mixed-type dict keys)."""
    try:
        jax_leaves = jtu.tree_leaves(tree)
        jax_nodes = jtu.tree_structure(tree).num_nodes
    except Exception:
        return False
    ours = optree.tree_leaves(tree)
    return (
        len(jax_leaves) == len(ours)
        and all(a is b for a, b in zip(jax_leaves, ours, strict=True))
        and jax_nodes == optree.tree_structure(tree).num_nodes
    )


def assert_same_as_jax(actual: Any, expected: Any) -> None:
    """Same structure and leaves as JAX's result (JAX rebuilds dicts in sorted key order)."""
    assert optree.tree_structure(actual) == optree.tree_structure(expected)
    assert_same_leaves(optree.tree_leaves(actual), optree.tree_leaves(expected))


JAX_TREES = [tree for tree in TREES if jax_agrees(tree)]
TREES_WITH_LEAVES = [tree for tree in TREES if has_leaves(tree)]
JAX_TREES_WITH_LEAVES = [tree for tree in JAX_TREES if has_leaves(tree)]
INNERS_WITH_LEAVES = [inner for inner in INNER_TREES.values() if has_leaves(inner)]


def distinct_copy(tree: Any, none_is_leaf: bool = False) -> Any:
    """`tree`'s structure with fresh Markers for leaves."""
    return optree.tree_map(markers(), tree, none_is_leaf=none_is_leaf)


def random_cut(data: st.DataObject, tree: Any, none_is_leaf: bool) -> Any:
    return cut(tree, none_is_leaf, lambda _: data.draw(st.booleans()))


def random_mutation(data: st.DataObject, tree: Any, none_is_leaf: bool) -> Any:
    """`tree` with some subtrees replaced by random trees."""
    return optree.tree_map(
        lambda x: data.draw(trees(6)) if data.draw(st.integers(0, 3)) == 0 else x,
        tree,
        is_leaf=lambda _: data.draw(st.integers(0, 4)) == 0,
        none_is_leaf=none_is_leaf,
    )


# --------------------------------------------------------------------------------------------------
# The module's surface: names, signatures, docstrings.

OPTREE_NAMES = [
    name for name in ops.__all__ if name not in ("tree_combine", "tree_reduce_associative")
]
OPTREE_NAMES.remove("FlattenOneLevelOutput")


def describe_signature(func: Callable[..., Any]) -> list[tuple[str, Any, str]]:
    return [
        (p.name, p.kind, "<none>" if p.default is p.empty else repr(p.default))
        for p in inspect.signature(func).parameters.values()
    ]


@parametrize(name=OPTREE_NAMES)
def test_signature_matches_optree(name: str) -> None:
    assert describe_signature(getattr(ops, name)) == describe_signature(getattr(optree, name))


def test_reduce_associative_signature_matches_jax() -> None:
    ours = describe_signature(ops.tree_reduce_associative)
    theirs = describe_signature(jtu.tree_reduce_associative)
    assert [p[:2] for p in ours] == [p[:2] for p in theirs]
    assert ours[2][2] == "<MISSING>"


def test_combine_signature() -> None:
    parameters = inspect.signature(ops.tree_combine).parameters
    assert list(parameters) == ["trees", "fillvalue", "is_leaf", "none_is_leaf", "namespace"]
    assert parameters["trees"].kind is inspect.Parameter.VAR_POSITIONAL
    assert parameters["fillvalue"].default is None


@parametrize(name=ops.__all__)
def test_public_names_have_doctest_examples(name: str) -> None:
    obj = getattr(ops, name)
    assert obj.__doc__
    assert obj.__doc__.strip()
    if callable(obj) and not isinstance(obj, type):
        assert ">>>" in obj.__doc__, f"{name} has no example"


def test_missing_sentinel_is_not_none() -> None:
    assert repr(ops.MISSING) == "<MISSING>"
    assert ops.MISSING is not None
    # None is a real initial value / default, not "missing".
    assert ops.tree_reduce(lambda acc, x: [acc, x], [1], None) == [None, 1]
    assert ops.tree_max([], default=None) is None


# --------------------------------------------------------------------------------------------------
# Prefix broadcasting against optree.


@parametrize(tree=TREES, none_is_leaf=NONE_IS_LEAF_OPTIONS)
def test_broadcast_prefix_one_level(tree: Any, none_is_leaf: bool) -> None:
    prefix = one_level_prefix(tree, none_is_leaf)
    kw = {"none_is_leaf": none_is_leaf}
    expected = optree.tree_broadcast_prefix(prefix, tree, **kw)
    assert_same_tree(ops.tree_broadcast_prefix(prefix, tree, **kw), expected)
    assert_same_leaves(
        ops.broadcast_prefix(prefix, tree, **kw), optree.broadcast_prefix(prefix, tree, **kw)
    )


@parametrize(tree=TREES, none_is_leaf=NONE_IS_LEAF_OPTIONS)
def test_broadcast_prefix_leaves_over_subtrees(tree: Any, none_is_leaf: bool) -> None:
    full = widen(tree, none_is_leaf, optree)
    kw = {"none_is_leaf": none_is_leaf}
    assert_same_tree(
        ops.tree_broadcast_prefix(tree, full, **kw), optree.tree_broadcast_prefix(tree, full, **kw)
    )
    assert_same_leaves(
        ops.broadcast_prefix(tree, full, **kw), optree.broadcast_prefix(tree, full, **kw)
    )


@parametrize(tree=TREES, none_is_leaf=NONE_IS_LEAF_OPTIONS)
def test_broadcast_prefix_of_itself_and_of_a_leaf(tree: Any, none_is_leaf: bool) -> None:
    kw = {"none_is_leaf": none_is_leaf}
    assert_same_tree(ops.tree_broadcast_prefix(tree, tree, **kw), tree)
    leaf = Marker(0)
    assert_same_tree(
        ops.tree_broadcast_prefix(leaf, tree, **kw), optree.tree_broadcast_prefix(leaf, tree, **kw)
    )


def test_broadcast_prefix_in_axes_example() -> None:
    full = (Marker(1), {"k1": Marker(2), "k2": Marker(3)})
    assert ops.tree_broadcast_prefix((None, 0), full, none_is_leaf=True) == (
        None,
        {"k1": 0, "k2": 0},
    )
    assert ops.broadcast_prefix((None, 0), full, none_is_leaf=True) == [None, 0, 0]
    with pytest.raises(ValueError, match=re.escape("tree[0]")):
        ops.tree_broadcast_prefix((None, 0), full)
    assert ops.tree_broadcast_prefix((None, 0), (None, {"k1": 2})) == (None, {"k1": 0})


def test_broadcast_prefix_keeps_the_prefix_nodes() -> None:
    # Like optree, the nodes above the prefix's leaves are the prefix's own (dict kinds are
    # interchangeable, a deque's maxlen is not compared).
    cases = [
        ({"b": 1, "a": 2}, OrderedDict(a=[3], b=4)),
        (OrderedDict(a=1, b=2), {"b": [3, 4], "a": 5}),
        (defaultdict(list, a=1), {"a": (1, 2)}),
        ({"a": 1}, defaultdict(int, a=[1, 2])),
        (deque([1]), deque([[2, 3]], maxlen=4)),
    ]
    for prefix, full in cases:
        assert_same_tree(
            ops.tree_broadcast_prefix(prefix, full), optree.tree_broadcast_prefix(prefix, full)
        )


def test_broadcast_prefix_is_leaf_applies_to_both_trees() -> None:
    def is_leaf(x: Any) -> bool:
        return isinstance(x, list) and len(x) == 1

    for prefix, full in [(0, [[1, 2], [3]]), ([0, [5]], [[1, 2], [[3]]]), ([0, [5]], [[1], 2])]:
        for func in ("tree_broadcast_prefix", "broadcast_prefix"):
            ours = outcome(lambda f=func, p=prefix, t=full: getattr(ops, f)(p, t, is_leaf))
            theirs = outcome(lambda f=func, p=prefix, t=full: getattr(optree, f)(p, t, is_leaf))
            assert ours == theirs


@HYPOTHESIS_SETTINGS
@given(data=st.data(), tree=trees(), none_is_leaf=st.booleans())
def test_broadcast_prefix_random(data: st.DataObject, tree: Any, none_is_leaf: bool) -> None:
    prefix = random_cut(data, tree, none_is_leaf)
    if data.draw(st.booleans()):
        prefix = random_mutation(data, prefix, none_is_leaf)
    kw = {"none_is_leaf": none_is_leaf}
    theirs = outcome(lambda: optree.tree_broadcast_prefix(prefix, tree, **kw))
    ours = outcome(lambda: ops.tree_broadcast_prefix(prefix, tree, **kw))
    assert ours[0] == theirs[0]
    if ours[0] == "ok":
        assert_same_tree(ours[1], theirs[1])
        assert_same_leaves(
            ops.broadcast_prefix(prefix, tree, **kw), optree.broadcast_prefix(prefix, tree, **kw)
        )
    else:
        assert ours[1] is theirs[1] is ValueError


@HYPOTHESIS_SETTINGS
@given(tree=trees(), none_is_leaf=st.booleans())
def test_broadcast_prefix_of_itself_is_itself(tree: Any, none_is_leaf: bool) -> None:
    assert_same_tree(ops.tree_broadcast_prefix(tree, tree, none_is_leaf=none_is_leaf), tree)
    assert_same_leaves(
        ops.broadcast_prefix(tree, tree, none_is_leaf=none_is_leaf),
        optree.tree_leaves(tree, none_is_leaf=none_is_leaf),
    )


# --------------------------------------------------------------------------------------------------
# Prefix broadcasting against jax.tree_util.tree_broadcast (None is a node there).


@parametrize(tree=JAX_TREES)
def test_broadcast_against_jax(tree: Any) -> None:
    prefix = one_level_prefix(tree, False)
    assert_same_as_jax(ops.tree_broadcast_prefix(prefix, tree), jtu.tree_broadcast(prefix, tree))
    full = widen(tree, False, optree)
    assert_same_as_jax(ops.tree_broadcast_prefix(tree, full), jtu.tree_broadcast(tree, full))
    assert_same_as_jax(ops.tree_broadcast_prefix(tree, tree), jtu.tree_broadcast(tree, tree))


def test_broadcast_against_jax_none_is_a_node() -> None:
    full = (None, {"k1": Marker(2), "k2": Marker(3)})
    assert ops.tree_broadcast_prefix((None, 0), full) == jtu.tree_broadcast((None, 0), full)
    assert (
        ops.tree_broadcast_prefix(1, (None, [2]))
        == jtu.tree_broadcast(1, (None, [2]))
        == (
            None,
            [1],
        )
    )
    with pytest.raises(ValueError, match=re.escape("tree[0]")):
        ops.tree_broadcast_prefix((None, 0), (1, 2))
    with pytest.raises(ValueError, match="prefix_tree"):
        jtu.tree_broadcast((None, 0), (1, 2))


# --------------------------------------------------------------------------------------------------
# prefix_errors against optree.

PREFIX_MISMATCHES = {
    "none_vs_leaf": ((None, 0), (1, {"k1": 2, "k2": 3})),
    "two_errors": (
        (None, 0, {"k1": 1, "k3": 2}, [1]),
        (1, {"k1": 2, "k2": 3}, {"k1": 1, "k2": 2}, (1,)),
    ),
    "arity": ((1, 2), (1, 2, 3)),
    "nested_arity": (Point(1, (1,)), Point(1, (1, 2))),
    "namedtuple_vs_tuple": ((1,), Point(1, 2)),
    "root_none": (None, 1),
    "keys_extra": ({"a": 1}, {"a": 1, "b": 2}),
    "keys_missing": ({"a": 1, "b": 2}, {"a": 1}),
    "siblings": ({"a": (1, 2), "b": [1]}, {"a": (1,), "b": (1,)}),
    "deep": ([[[(1, 2)]], {"x": [None]}], [[[(1, 2, 3)]], {"x": [0]}]),
    "node_vs_leaf": ([1, [2]], [1, 2]),
    "triple_vs_point": ([Triple(1, 2, 3)], [Point(1, 2)]),
    "many": ([(1,)] * 5, [(1, 2)] * 5),
}
PREFIX_MATCHES = {
    "dict_vs_ordereddict": ({"a": 1}, OrderedDict(a=[1])),
    "ordereddict_orders": (OrderedDict(a=1, b=2), OrderedDict(b=1, a=2)),
    "defaultdict_vs_dict": (defaultdict(list, a=1), {"a": 1}),
    "deque_maxlen": (deque([1]), deque([(1, 2)], maxlen=3)),
    "leaf_over_none": (1, None),
    "leaf_over_tree": (1, [1, {"a": 2}]),
    "none_over_none": ((None, 1), (None, [1])),
}


def our_paths(errors: list[Callable[[str], ValueError]], name: str) -> list[str]:
    made = [make(name) for make in errors]
    assert all(type(error) is ValueError for error in made)
    return [path_in_our_message(str(error)) for error in made]


def optree_paths(errors: list[Callable[[str], ValueError]], name: str) -> list[str]:
    return [path_in_optree_message(str(make(name))) for make in errors]


@parametrize(case=list(PREFIX_MISMATCHES), none_is_leaf=NONE_IS_LEAF_OPTIONS)
def test_prefix_errors_mismatches(case: str, none_is_leaf: bool) -> None:
    prefix, full = PREFIX_MISMATCHES[case]
    kw = {"none_is_leaf": none_is_leaf}
    ours = our_paths(ops.prefix_errors(prefix, full, **kw), "in_axes")
    theirs = optree_paths(optree.prefix_errors(prefix, full, **kw), "in_axes")
    assert ours == theirs
    assert ours or (none_is_leaf and case in ("none_vs_leaf", "root_none"))


@parametrize(case=list(PREFIX_MATCHES), none_is_leaf=NONE_IS_LEAF_OPTIONS)
def test_prefix_errors_none_when_prefix(case: str, none_is_leaf: bool) -> None:
    prefix, full = PREFIX_MATCHES[case]
    assert optree.prefix_errors(prefix, full, none_is_leaf=none_is_leaf) == []
    assert ops.prefix_errors(prefix, full, none_is_leaf=none_is_leaf) == []


def test_prefix_errors_in_axes_example() -> None:
    prefix = (None, 0, {"k1": 1, "k2": (1, 2)})
    full = (Marker(1), {"k1": 2}, {"k1": Marker(3), "k2": [Marker(4), Marker(5)]})
    errors = ops.prefix_errors(prefix, full)
    messages = [str(make("in_axes")) for make in errors]
    assert messages == [str(make("in_axes")) for make in optree.prefix_errors(prefix, full)]
    assert len(messages) == 2
    assert "\n    in_axes[0]\n" in messages[0]
    assert "<class 'NoneType'>" in messages[0]
    assert "\n    in_axes[2]['k2']\n" in messages[1]
    assert "<class 'tuple'>" in messages[1]
    assert "<class 'list'>" in messages[1]
    # With None as a leaf, only the tuple/list mismatch is left.
    [only] = ops.prefix_errors(prefix, full, none_is_leaf=True)
    assert "\n    in_axes[2]['k2']\n" in str(only("in_axes"))


def test_prefix_errors_messages_say_what_differs() -> None:
    [arity] = ops.prefix_errors({"a": (1, 2)}, {"a": (1, 2, 3)})
    message = str(arity("x"))
    assert "different numbers of pytree children at key path\n    x['a']\n" in message
    assert "with 2 children" in message
    assert "with 3 children" in message
    [keys] = ops.prefix_errors({"a": 1, "k": 2}, {"a": 1, "j": 2})
    message = str(keys("args"))
    assert "missing key(s):\n    ['k']" in message
    assert "extra key(s):\n    ['j']" in message
    [root] = ops.prefix_errors((1, 2), 5)
    message = str(root("tree"))
    assert "\n    tree tree root\n" in message
    assert "<class 'int'>" in message
    [namedtuple] = ops.prefix_errors([Point(1, 2)], [(1, 2)])
    assert "Point'>" in str(namedtuple("p"))


def test_prefix_errors_is_leaf() -> None:
    def is_leaf(x: Any) -> bool:
        return isinstance(x, list) and len(x) == 1

    prefix, full = [0, [5]], [[1, 2], [3, 4]]
    assert ops.prefix_errors(prefix, full, is_leaf) == optree.prefix_errors(prefix, full, is_leaf)
    assert ops.prefix_errors(prefix, full, is_leaf) == []
    assert our_paths(ops.prefix_errors(prefix, full), "a") == ["a[1]"]
    assert optree_paths(optree.prefix_errors(prefix, full), "a") == ["a[1]"]


@parametrize(tree=TREES, none_is_leaf=NONE_IS_LEAF_OPTIONS)
def test_prefix_errors_corpus(tree: Any, none_is_leaf: bool) -> None:
    kw = {"none_is_leaf": none_is_leaf}
    assert ops.prefix_errors(one_level_prefix(tree, none_is_leaf), tree, **kw) == []
    assert ops.prefix_errors(tree, widen(tree, none_is_leaf, optree), **kw) == []
    # Against a wrong full tree: the same mismatches as optree, at the same paths.
    wrong = [tree, [tree]]
    prefix = [tree, (tree,)]
    assert our_paths(ops.prefix_errors(prefix, wrong, **kw), "f") == optree_paths(
        optree.prefix_errors(prefix, wrong, **kw), "f"
    )


@HYPOTHESIS_SETTINGS
@given(data=st.data(), tree=trees(), none_is_leaf=st.booleans())
def test_prefix_errors_random(data: st.DataObject, tree: Any, none_is_leaf: bool) -> None:
    prefix = random_mutation(data, random_cut(data, tree, none_is_leaf), none_is_leaf)
    kw = {"none_is_leaf": none_is_leaf}
    ours = our_paths(ops.prefix_errors(prefix, tree, **kw), "in_axes")
    theirs = optree_paths(optree.prefix_errors(prefix, tree, **kw), "in_axes")
    assert ours == theirs
    broadcast = outcome(lambda: ops.tree_broadcast_prefix(prefix, tree, **kw))
    assert (broadcast[0] == "ok") == (not ours)


# --------------------------------------------------------------------------------------------------
# Common suffix broadcasting and broadcast maps against optree.


def assert_common_matches(tree: Any, other: Any, **kw: Any) -> None:
    theirs = outcome(lambda: optree.tree_broadcast_common(tree, other, **kw))
    ours = outcome(lambda: ops.tree_broadcast_common(tree, other, **kw))
    assert ours[0] == theirs[0], (ours, theirs)
    if ours[0] == "error":
        assert ours[1] is theirs[1] is ValueError
        # optree's message first.
        with pytest.raises(ValueError) as their_error:  # noqa: PT011
            optree.broadcast_common(tree, other, **kw)
        with pytest.raises(ValueError, match=re.escape(str(their_error.value))):
            ops.broadcast_common(tree, other, **kw)
        return
    assert type(ours[1]) is tuple
    assert len(ours[1]) == 2
    assert_same_tree(ours[1][0], theirs[1][0])
    assert_same_tree(ours[1][1], theirs[1][1])
    leaves = ops.broadcast_common(tree, other, **kw)
    expected = optree.broadcast_common(tree, other, **kw)
    assert type(leaves) is tuple
    assert_same_leaves(leaves[0], expected[0])
    assert_same_leaves(leaves[1], expected[1])


@parametrize(tree=TREES, none_is_leaf=NONE_IS_LEAF_OPTIONS)
def test_broadcast_common_corpus(tree: Any, none_is_leaf: bool) -> None:
    kw = {"none_is_leaf": none_is_leaf}
    prefix = one_level_prefix(tree, none_is_leaf)
    wide = widen(distinct_copy(tree, none_is_leaf), none_is_leaf, optree)
    assert_common_matches(tree, prefix, **kw)
    assert_common_matches(prefix, tree, **kw)
    assert_common_matches(tree, wide, **kw)
    assert_common_matches(tree, tree, **kw)
    assert_common_matches(Marker(0), tree, **kw)
    # Mixed: each tree deeper in a different place.
    assert_common_matches([tree, prefix], [prefix, tree], **kw)


def test_broadcast_common_lenient_nodes() -> None:
    cases = [
        ({"b": 1, "a": 2}, OrderedDict(a=[3, 4], b=5)),
        (OrderedDict(a=[3, 4], b=5), {"b": 1, "a": 2}),
        (defaultdict(list, {"a": [1, 2]}), {"a": 1}),
        ({"a": 1}, defaultdict(list, {"a": [1, 2]})),
        (deque([1]), deque([(2, 3)], maxlen=3)),
        ([{"a": 1}, OrderedDict(b=(1, 2))], [OrderedDict(a=(1, 2)), {"b": 3}]),
    ]
    for tree, other in cases:
        assert_common_matches(tree, other)


def test_broadcast_common_errors_name_the_path() -> None:
    # At the root, optree's message alone: it names no place.
    with pytest.raises(ValueError, match="incompatible node types") as theirs:
        optree.tree_broadcast_common((1, 2), [1, 2])
    with pytest.raises(ValueError, match="incompatible node types") as ours:
        ops.tree_broadcast_common((1, 2), [1, 2])
    assert str(ours.value).startswith(str(theirs.value))
    for tree, other, path in [
        ({"a": (1, 2)}, {"a": (1, 2, 3)}, "tree['a']"),
        ([{"a": 1}], [{"b": 1}], "tree[0]"),
        ([0, Point(1, 2)], [0, (1, 2)], "tree[1]"),
    ]:
        with pytest.raises(ValueError, match=re.escape(path)):
            ops.tree_broadcast_common(tree, other)
        with pytest.raises(ValueError, match=r"PyTreeSpecs|mismatch"):
            optree.tree_broadcast_common(tree, other)
    with pytest.raises(ValueError, match=re.escape("tree['a']")):
        ops.tree_broadcast_common({"a": (1, 2)}, OrderedDict(a=(1, 2, 3)))


@HYPOTHESIS_SETTINGS
@given(data=st.data(), tree=trees(), none_is_leaf=st.booleans())
def test_broadcast_common_random(data: st.DataObject, tree: Any, none_is_leaf: bool) -> None:
    prefix = random_cut(data, tree, none_is_leaf)
    # Somewhere the prefix is deeper: replace some of its leaves by random subtrees.
    other = optree.tree_map(
        lambda x: data.draw(trees(4)) if data.draw(st.booleans()) else x,
        prefix,
        none_is_leaf=none_is_leaf,
    )
    if data.draw(st.integers(0, 3)) == 0:
        other = random_mutation(data, other, none_is_leaf)
    assert_common_matches(tree, other, none_is_leaf=none_is_leaf)
    assert_common_matches(other, tree, none_is_leaf=none_is_leaf)


def test_broadcast_common_is_leaf() -> None:
    def is_leaf(x: Any) -> bool:
        return x == [2]

    assert_common_matches([1, [2]], [[3, 4], (5, 6)], is_leaf=is_leaf)
    assert_common_matches([[3, 4], (5, 6)], [1, [2]], is_leaf=is_leaf)


def assert_broadcast_map_matches(*trees_: Any, **kw: Any) -> None:
    theirs = outcome(lambda: optree.tree_broadcast_map(Rec, *trees_, **kw))
    ours = outcome(lambda: ops.tree_broadcast_map(Rec, *trees_, **kw))
    assert ours[0] == theirs[0], (ours, theirs)
    if ours[0] == "error":
        assert ours[1] is theirs[1] is ValueError
        return
    assert_same_tree(ours[1], theirs[1])
    our_calls: list[tuple[Any, ...]] = []
    their_calls: list[tuple[Any, ...]] = []
    ours_with_path = ops.tree_broadcast_map_with_path(
        lambda p, *xs: our_calls.append(p) or Rec(*xs), *trees_, **kw
    )
    theirs_with_path = optree.tree_broadcast_map_with_path(
        lambda p, *xs: their_calls.append(p) or Rec(*xs), *trees_, **kw
    )
    assert_same_tree(ours_with_path, theirs_with_path)
    assert our_calls == their_calls


@parametrize(tree=TREES, none_is_leaf=NONE_IS_LEAF_OPTIONS)
def test_broadcast_map_corpus(tree: Any, none_is_leaf: bool) -> None:
    kw = {"none_is_leaf": none_is_leaf}
    prefix = one_level_prefix(tree, none_is_leaf)
    wide = widen(distinct_copy(tree, none_is_leaf), none_is_leaf, optree)
    assert_broadcast_map_matches(tree, **kw)
    assert_broadcast_map_matches(prefix, tree, wide, **kw)
    assert_broadcast_map_matches(wide, Marker(0), prefix, tree, **kw)


class _OneShot:
    """A registered node whose flatten function may run only once."""

    def __init__(self, x: Any) -> None:
        self.x = x


def test_broadcast_map_of_one_tree_flattens_it_once() -> None:
    """With nothing to broadcast against, the map is tree_map's: one flatten, as optree's."""
    calls = []

    def flatten(node: _OneShot) -> Any:
        calls.append(node)
        return (node.x,), None

    namespace = "test-broadcast-map-one-shot"
    oxtree.register_pytree_node(_OneShot, flatten, lambda _, c: _OneShot(*c), namespace=namespace)
    try:
        for name, func, expected in (
            ("tree_broadcast_map", lambda x: x + 1, 2),
            ("tree_broadcast_map_with_path", lambda p, x: (p, x + 1), ((0, 0), 2)),
            ("tree_broadcast_map_with_accessor", lambda a, x: (len(a), x + 1), (2, 2)),
        ):
            calls.clear()
            out = getattr(ops, name)(func, [_OneShot(1)], namespace=namespace)
            assert len(calls) == 1, name
            assert type(out[0]) is _OneShot
            assert out[0].x == expected, name
    finally:
        oxtree.unregister_pytree_node(_OneShot, namespace=namespace)


def test_broadcast_map_examples() -> None:
    assert ops.tree_broadcast_map(operator.add, (1, {"a": 2}), ([10, 20], 30)) == (
        [11, 21],
        {"a": 32},
    )
    assert ops.tree_broadcast_map(lambda *xs: xs, 1) == (1,)
    assert_broadcast_map_matches({"b": 1, "a": 2}, OrderedDict(a=[3], b=4))
    assert_broadcast_map_matches(OrderedDict(a=[3], b=4), {"b": 1, "a": 2})
    assert_broadcast_map_matches(1, {"b": 1, "a": [2]}, OrderedDict(a=[3], b=(4,)))
    assert_broadcast_map_matches((1, {"a": 2, "b": None}), ([3, None], 5))
    assert_broadcast_map_matches((1, {"a": 2, "b": None}), ([3, None], 5), none_is_leaf=True)
    assert_broadcast_map_matches([1, [2]], [[3, 4], 5], is_leaf=lambda x: x == [2])
    assert_broadcast_map_matches((1, 2), [1, 2])
    with pytest.raises(ValueError, match=re.escape("tree[1]")):
        ops.tree_broadcast_map(Rec, (1, (2, 3)), (1, [2, 3]))


@HYPOTHESIS_SETTINGS
@given(data=st.data(), tree=trees(12), none_is_leaf=st.booleans())
def test_broadcast_map_random(data: st.DataObject, tree: Any, none_is_leaf: bool) -> None:
    first = random_cut(data, tree, none_is_leaf)
    second = optree.tree_map(
        lambda x: data.draw(trees(3)) if data.draw(st.booleans()) else x,
        random_cut(data, tree, none_is_leaf),
        none_is_leaf=none_is_leaf,
    )
    assert_broadcast_map_matches(first, second, tree, none_is_leaf=none_is_leaf)


# --------------------------------------------------------------------------------------------------
# Transposition against optree and jax.


def composed(outer: Any, inner: Any, none_is_leaf: bool = False) -> Any:
    """`outer` with a fresh copy of `inner` (distinct Marker leaves) at each leaf."""
    return optree.tree_map(
        lambda _: distinct_copy(inner, none_is_leaf), outer, none_is_leaf=none_is_leaf
    )


def optree_specs(outer: Any, inner: Any, none_is_leaf: bool) -> tuple[Any, Any]:
    return (
        optree.tree_structure(outer, none_is_leaf=none_is_leaf),
        optree.tree_structure(inner, none_is_leaf=none_is_leaf),
    )


def oxtree_specs(outer: Any, inner: Any, none_is_leaf: bool) -> tuple[Any, Any]:
    return (
        oxtree.tree_structure(outer, none_is_leaf=none_is_leaf),
        oxtree.tree_structure(inner, none_is_leaf=none_is_leaf),
    )


@parametrize(tree=TREES_WITH_LEAVES, none_is_leaf=NONE_IS_LEAF_OPTIONS)
def test_transpose_against_optree(tree: Any, none_is_leaf: bool) -> None:
    for inner in INNERS_WITH_LEAVES:
        full = composed(tree, inner, none_is_leaf)
        expected = optree.tree_transpose(*optree_specs(tree, inner, none_is_leaf), full)
        outer_spec, inner_spec = oxtree_specs(tree, inner, none_is_leaf)
        assert_same_tree(ops.tree_transpose(outer_spec, inner_spec, full), expected)
        assert_same_tree(ops.tree_transpose(outer_spec, None, full), expected)


@parametrize(tree=JAX_TREES_WITH_LEAVES)
def test_transpose_against_jax(tree: Any) -> None:
    for inner in INNERS_WITH_LEAVES:
        full = composed(tree, inner)
        outer_spec, inner_spec = oxtree_specs(tree, inner, False)
        jax_outer = jtu.tree_structure(tree)
        expected = jtu.tree_transpose(jax_outer, jtu.tree_structure(inner), full)
        assert_same_as_jax(ops.tree_transpose(outer_spec, inner_spec, full), expected)
        expected_inferred = jtu.tree_transpose(jax_outer, None, full)
        assert_same_as_jax(ops.tree_transpose(outer_spec, None, full), expected_inferred)


@HYPOTHESIS_SETTINGS
@given(outer=trees(8), inner=trees(5), none_is_leaf=st.booleans())
def test_transpose_twice_is_identity(outer: Any, inner: Any, none_is_leaf: bool) -> None:
    outer_spec, inner_spec = oxtree_specs(outer, inner, none_is_leaf)
    if outer_spec.num_leaves == 0 or inner_spec.num_leaves == 0:
        with pytest.raises(ValueError, match="at least one leaf"):
            ops.tree_transpose(outer_spec, inner_spec, composed(outer, inner, none_is_leaf))
        return
    full = composed(outer, inner, none_is_leaf)
    once = ops.tree_transpose(outer_spec, inner_spec, full)
    assert_same_tree(once, optree.tree_transpose(*optree_specs(outer, inner, none_is_leaf), full))
    assert_same_tree(ops.tree_transpose(inner_spec, outer_spec, once), full)


def test_transpose_examples_and_errors() -> None:
    outer = oxtree.tree_structure([0, 0, 0])
    inner = oxtree.tree_structure({"a": 0, "b": 0})
    tree = [{"a": 1, "b": 2}, {"a": 3, "b": 4}, {"a": 5, "b": 6}]
    assert ops.tree_transpose(outer, inner, tree) == {"a": [1, 3, 5], "b": [2, 4, 6]}
    # Wrong number of leaves: TypeError (optree's and JAX's type), naming both structures.
    with pytest.raises(TypeError, match=re.escape("[{'a': *, 'b': *}, {'a': *, 'b': *}]")):
        ops.tree_transpose(oxtree.tree_structure([0, 0]), inner, tree)
    with pytest.raises(TypeError):
        optree.tree_transpose(optree.tree_structure([0, 0]), optree.tree_structure(tree[0]), tree)
    with pytest.raises(TypeError, match="Mismatch"):
        jtu.tree_transpose(jtu.tree_structure([0, 0]), jtu.tree_structure(tree[0]), tree)
    # Like optree and JAX, only the number of leaves is checked.
    flat = [1, 2, 3, 4, 5, 6]
    assert ops.tree_transpose(outer, inner, flat) == optree.tree_transpose(
        optree.tree_structure([0, 0, 0]), optree.tree_structure({"a": 0, "b": 0}), flat
    )
    # None-is-leaf must agree, and both structures need a leaf.
    with pytest.raises(ValueError, match="none_is_leaf"):
        ops.tree_transpose(outer, oxtree.tree_structure((0, 0), none_is_leaf=True), tree)
    with pytest.raises(ValueError, match="at least one leaf"):
        ops.tree_transpose(oxtree.tree_structure(()), inner, ())
    with pytest.raises(ValueError, match="at least one leaf"):
        ops.tree_transpose(outer, oxtree.tree_structure(()), [(), (), ()])
    with pytest.raises(ValueError, match="at least one leaf"):
        ops.tree_transpose(oxtree.tree_structure([]), None, [])
    # Inferring the inner structure: a mismatch of the outer structure, in optree's words.
    with pytest.raises(ValueError, match=re.escape("Expected an instance of list, got (")):
        ops.tree_transpose(outer, None, ({"a": 1}, {"a": 2}, {"a": 3}))


def test_transpose_is_leaf() -> None:
    tree = [[1, 2], [3, 4]]
    outer = oxtree.tree_structure([0, 0])
    inner = oxtree.tree_structure((0, 0))
    expected = optree.tree_transpose(
        optree.tree_structure([0, 0]), optree.tree_structure((0, 0)), tree
    )
    assert ops.tree_transpose(outer, inner, tree) == expected == ([1, 3], [2, 4])
    with pytest.raises(TypeError):
        ops.tree_transpose(outer, inner, tree, is_leaf=lambda x: x == [3, 4])
    assert ops.tree_transpose(
        oxtree.tree_structure((0, 0)), oxtree.tree_structure(0), tree, is_leaf=lambda x: x != tree
    ) == optree.tree_transpose(
        optree.tree_structure((0, 0)), optree.tree_structure(0), tree, lambda x: x != tree
    )


def transpose_map_outcomes(func: Callable[..., Any], *trees_: Any, **kw: Any) -> None:
    inner = kw.pop("inner", None)
    ours = outcome(
        lambda: ops.tree_transpose_map(
            func, *trees_, inner_treespec=None if inner is None else inner[0], **kw
        )
    )
    theirs = outcome(
        lambda: optree.tree_transpose_map(
            func, *trees_, inner_treespec=None if inner is None else inner[1], **kw
        )
    )
    assert ours[0] == theirs[0], (ours, theirs)
    if ours[0] == "ok":
        assert_same_tree(ours[1], theirs[1])
    else:
        assert ours[1] is theirs[1]


@parametrize(tree=TREES, none_is_leaf=NONE_IS_LEAF_OPTIONS)
def test_transpose_map_against_optree(tree: Any, none_is_leaf: bool) -> None:
    kw = {"none_is_leaf": none_is_leaf}
    # Rec results compare by the identity of the leaves they were made from.
    transpose_map_outcomes(lambda x: {"b": Rec(x), "a": (Rec(x, x), None)}, tree, **kw)
    transpose_map_outcomes(lambda x, y: [Rec(y), Rec(x)], tree, tree, **kw)
    inner = (oxtree.tree_structure((0, 0)), optree.tree_structure((0, 0)))
    transpose_map_outcomes(lambda x: (Rec(x), x), tree, inner=inner, **kw)
    our_paths: list[Any] = []
    their_paths: list[Any] = []
    ours = outcome(
        lambda: ops.tree_transpose_map_with_path(
            lambda p, x: our_paths.append(p) or {"x": Rec(x), "y": [Rec(x)]}, tree, **kw
        )
    )
    theirs = outcome(
        lambda: optree.tree_transpose_map_with_path(
            lambda p, x: their_paths.append(p) or {"x": Rec(x), "y": [Rec(x)]}, tree, **kw
        )
    )
    assert ours[0] == theirs[0]
    if ours[0] == "ok":
        assert_same_tree(ours[1], theirs[1])
    assert our_paths == their_paths


def test_transpose_map_errors() -> None:
    inner = oxtree.tree_structure((0, 0))
    with pytest.raises(ValueError, match="outer structure must have at least one leaf"):
        ops.tree_transpose_map(lambda x: (x, x), [])
    assert ops.tree_transpose_map(lambda x: (x, x), [], inner_treespec=inner) == ([], [])
    with pytest.raises(ValueError, match="inner structure must have at least one leaf"):
        ops.tree_transpose_map(lambda x: (), [1, 2])
    # An output that does not match the inner structure: ValueError naming the key path.
    with pytest.raises(ValueError, match=re.escape("tree['a']")):
        ops.tree_transpose_map(lambda x: {"a": (x,) if x == 1 else (x, x)}, [1, 2])
    with pytest.raises(ValueError, match=re.escape("Expected an instance of tuple, got [2].")):
        ops.tree_transpose_map(lambda x: (x,) if x == 1 else [x], [1, 2])
    with pytest.raises(ValueError, match="tuple"):
        optree.tree_transpose_map(lambda x: (x,) if x == 1 else [x], [1, 2])
    # The rests must match the tree.
    with pytest.raises(ValueError, match="rests"):
        ops.tree_transpose_map(lambda x, y: (x, y), [1, 2], (1, 2))
    assert ops.tree_transpose_map(
        lambda x: [x, x], [[1, 2], 3], is_leaf=lambda x: x == [1, 2]
    ) == optree.tree_transpose_map(lambda x: [x, x], [[1, 2], 3], is_leaf=lambda x: x == [1, 2])


# --------------------------------------------------------------------------------------------------
# Reductions against optree and jax.


def indexed(tree: Any, none_is_leaf: bool = False) -> Any:
    """`tree` with its leaves numbered 0, 1, ... (comparable with ==)."""
    counter = itertools.count()
    return optree.tree_map(lambda _: next(counter), tree, none_is_leaf=none_is_leaf)


def pair(a: Any, b: Any) -> tuple[Any, Any]:
    return (a, b)


@parametrize(tree=TREES, none_is_leaf=NONE_IS_LEAF_OPTIONS)
def test_reduce_against_optree(tree: Any, none_is_leaf: bool) -> None:
    kw = {"none_is_leaf": none_is_leaf}
    # With an initial value: every leaf, in order, by identity.
    ours = ops.tree_reduce(lambda acc, x: [*acc, x], tree, [], **kw)
    assert_same_leaves(ours, optree.tree_reduce(lambda acc, x: [*acc, x], tree, [], **kw))
    numbered = indexed(tree, none_is_leaf)
    assert outcome(lambda: ops.tree_reduce(pair, numbered, **kw)) == outcome(
        lambda: optree.tree_reduce(pair, numbered, **kw)
    )
    assert ops.tree_reduce(pair, numbered, None, **kw) == optree.tree_reduce(
        pair, numbered, None, **kw
    )


@parametrize(tree=JAX_TREES)
def test_reduce_against_jax(tree: Any) -> None:
    numbered = indexed(tree)
    assert outcome(lambda: ops.tree_reduce(pair, numbered)) == outcome(
        lambda: jtu.tree_reduce(pair, numbered)
    )
    assert ops.tree_reduce(pair, numbered, "init") == jtu.tree_reduce(pair, numbered, "init")
    assert outcome(lambda: ops.tree_reduce_associative(pair, numbered)) == outcome(
        lambda: jtu.tree_reduce_associative(pair, numbered)
    )
    assert ops.tree_reduce_associative(pair, numbered, identity="e") == (
        jtu.tree_reduce_associative(pair, numbered, identity="e")
    )
    assert outcome(lambda: ops.tree_all(tree)) == outcome(lambda: jtu.tree_all(tree))


@HYPOTHESIS_SETTINGS
@given(size=st.integers(0, 130), identity=st.sampled_from([ops.MISSING, None, "e"]))
def test_reduce_associative_pairing_matches_jax(size: int, identity: Any) -> None:
    values = list(range(size))
    kw = {} if identity is ops.MISSING else {"identity": identity}
    ours = outcome(lambda: ops.tree_reduce_associative(pair, values, **kw))
    theirs = outcome(lambda: jtu.tree_reduce_associative(pair, values, **kw))
    assert ours == theirs
    assert (ours[0] == "error") == (size == 0 and not kw)


def test_reduce_associative_errors_and_is_leaf() -> None:
    message = "Must specify identity for parallel reduction of empty sequence."
    with pytest.raises(TypeError, match=re.escape(message)):
        ops.tree_reduce_associative(operator.add, {"a": [], "b": None})
    with pytest.raises(TypeError, match=re.escape(message)):
        jtu.tree_reduce_associative(operator.add, {"a": [], "b": None})
    assert ops.tree_reduce_associative(operator.add, [None], identity=0) == 0
    tree = [[1, 2], [3]]
    assert ops.tree_reduce_associative(
        pair, tree, is_leaf=lambda x: x == [1, 2]
    ) == jtu.tree_reduce_associative(pair, tree, is_leaf=lambda x: x == [1, 2])


def test_reduce_errors() -> None:
    with pytest.raises(TypeError, match="empty"):
        ops.tree_reduce(operator.add, {"a": (), "b": None})
    with pytest.raises(TypeError, match="empty"):
        optree.tree_reduce(operator.add, {"a": (), "b": None})
    assert ops.tree_reduce(operator.add, [None], 5) == 5
    assert ops.tree_reduce(operator.add, [None], 5, none_is_leaf=False) == 5
    with pytest.raises(TypeError):
        ops.tree_reduce(operator.add, [None, None], none_is_leaf=True)
    with pytest.raises(ValueError, match="empty"):
        ops.tree_max([None, ()])
    with pytest.raises(ValueError, match="empty"):
        ops.tree_min({})
    assert ops.tree_max([None], default=None) is None
    assert ops.tree_min([(), []], default="d") == "d"


def comparable(result: tuple[str, Any]) -> tuple[str, Any]:
    kind, value = result
    return (kind, value) if kind == "error" else (kind, (type(value), repr(value)))


@parametrize(tree=TREES, none_is_leaf=NONE_IS_LEAF_OPTIONS)
def test_sum_max_min_all_any_against_optree(tree: Any, none_is_leaf: bool) -> None:
    kw = {"none_is_leaf": none_is_leaf}
    for name, extra in [
        ("tree_sum", {}),
        ("tree_sum", {"start": 0.5}),
        ("tree_all", {}),
        ("tree_any", {}),
    ]:
        ours = outcome(lambda n=name, e=extra: getattr(ops, n)(tree, **e, **kw))
        theirs = outcome(lambda n=name, e=extra: getattr(optree, n)(tree, **e, **kw))
        assert comparable(ours) == comparable(theirs), name
    for name in ("tree_max", "tree_min"):
        for extra in ({}, {"default": SENTINEL}, {"key": repr}, {"key": id, "default": 0}):
            ours = outcome(lambda n=name, e=extra: getattr(ops, n)(tree, **e, **kw))
            theirs = outcome(lambda n=name, e=extra: getattr(optree, n)(tree, **e, **kw))
            assert ours[0] == theirs[0], (name, extra)
            if ours[0] == "ok":
                assert ours[1] is theirs[1], (name, extra)
            else:
                assert ours[1] is theirs[1], (name, extra)


def test_sum_max_min_examples() -> None:
    tree = {"a": 1, "b": (5, None, 3)}
    assert ops.tree_sum(tree) == optree.tree_sum(tree) == 9
    assert ops.tree_sum([[1], [2]], start=[], is_leaf=lambda x: len(x) == 1) == [1, 2]
    assert ops.tree_max(tree) == 5
    assert ops.tree_min(tree) == 1
    assert ops.tree_max([3, -7], key=abs) == -7
    assert ops.tree_all([None]) is True
    assert ops.tree_all([None], none_is_leaf=True) is False
    assert ops.tree_any([None]) is False
    assert ops.tree_any([None, 1], none_is_leaf=True) is True
    with pytest.raises(TypeError):
        ops.tree_sum(["a", "b"])


@pytest.mark.parametrize("start", ["", ">", b"", b">", bytearray(b">")])
def test_sum_joins_text_as_optree_does(start: Any) -> None:
    """sum() refuses a text start; optree joins the leaves to it, in the start's type."""
    text = type(start)
    leaves = ["a", "b"] if text is str else [b"a", b"b"]
    tree = {"x": leaves[0], "y": (leaves[1], None)}
    ours, theirs = ops.tree_sum(tree, start=start), optree.tree_sum(tree, start=start)
    assert ours == theirs == start + text().join(leaves)
    assert type(ours) is type(theirs)


# --------------------------------------------------------------------------------------------------
# Partition and combine.

PREDICATES: dict[str, Callable[[Any], Any]] = {
    "is_int": lambda x: type(x) is int,
    "always": lambda x: True,
    "never": lambda x: False,
    "truthy_repr": lambda x: len(repr(x)) % 2,
}


@parametrize(tree=TREES, none_is_leaf=NONE_IS_LEAF_OPTIONS)
def test_partition_against_optree(tree: Any, none_is_leaf: bool) -> None:
    for (name, predicate), fillvalue in itertools.product(PREDICATES.items(), [None, SENTINEL]):
        kw = {"none_is_leaf": none_is_leaf, "fillvalue": fillvalue}
        left, right = ops.tree_partition(predicate, tree, **kw)
        expected_left, expected_right = optree.tree_partition(predicate, tree, **kw)
        assert_same_tree(left, expected_left, f"left[{name}]")
        assert_same_tree(right, expected_right, f"right[{name}]")
        # ...and combining the two halves gives the tree back: same types, keys and leaves.
        combined = ops.tree_combine(left, right, fillvalue=fillvalue, none_is_leaf=none_is_leaf)
        assert_same_tree(combined, tree, f"combined[{name}]")


@parametrize(tree=TREES, none_is_leaf=NONE_IS_LEAF_OPTIONS)
def test_combine_three_ways(tree: Any, none_is_leaf: bool) -> None:
    kw = {"none_is_leaf": none_is_leaf}
    label_of = {id(leaf): i % 3 for i, leaf in enumerate(optree.tree_leaves(tree, **kw))}
    parts = []
    for wanted in range(3):
        part, _ = ops.tree_partition(
            lambda x, w=wanted: label_of.get(id(x), 0) == w, tree, fillvalue=SENTINEL, **kw
        )
        parts.append(part)
    # (A leaf object found at several places is labelled once, so it goes to one part.)
    assert_same_tree(ops.tree_combine(*parts, fillvalue=SENTINEL, **kw), tree)
    assert_same_tree(ops.tree_combine(tree, fillvalue=SENTINEL, **kw), tree)


@HYPOTHESIS_SETTINGS
@given(
    tree=trees(),
    none_is_leaf=st.booleans(),
    fillvalue=st.sampled_from([None, SENTINEL]),
    flags=st.lists(st.booleans(), min_size=30, max_size=30),
)
def test_partition_combine_round_trip(
    tree: Any, none_is_leaf: bool, fillvalue: Any, flags: list[bool]
) -> None:
    iterator = itertools.cycle(flags)
    left, right = ops.tree_partition(
        lambda _: next(iterator), tree, fillvalue=fillvalue, none_is_leaf=none_is_leaf
    )
    combined = ops.tree_combine(left, right, fillvalue=fillvalue, none_is_leaf=none_is_leaf)
    assert_same_tree(combined, tree)
    assert_same_tree(
        ops.tree_combine(right, left, fillvalue=fillvalue, none_is_leaf=none_is_leaf), tree
    )


def test_combine_semantics_and_errors() -> None:
    assert ops.tree_combine((None, [2, None], {"a": 3}), (1, [None, None], {"a": None})) == (
        1,
        [2, None],
        {"a": 3},
    )
    # A placeholder may stand for a whole subtree of another tree.
    assert ops.tree_combine([0, [0, 5]], [[1, 2], 0], fillvalue=0) == [[1, 2], [0, 5]]
    tree = [[1, 2], 3]
    left, right = ops.tree_partition(lambda x: x == [1, 2], tree, is_leaf=lambda x: x == [1, 2])
    assert ops.tree_combine(left, right) == tree
    assert ops.tree_combine(right, left) == tree
    # Node types and key order come from the first tree with a value there.
    merged = ops.tree_combine(OrderedDict(b=1, a=None), {"a": 2, "b": None})
    assert type(merged) is OrderedDict
    assert list(merged.items()) == [("b", 1), ("a", 2)]
    assert ops.tree_combine(None, None) is None
    assert ops.tree_combine(SENTINEL, fillvalue=SENTINEL) is SENTINEL
    # Two values at one leaf: ValueError naming the key path.
    with pytest.raises(ValueError, match=re.escape("tree[1]['k']")):
        ops.tree_combine((1, {"k": 2}), (None, {"k": 3}))
    with pytest.raises(ValueError, match=re.escape("tree[0]")):
        ops.tree_combine([[1, 2]], [3])
    with pytest.raises(ValueError, match=re.escape("tree[0]")):
        ops.tree_combine([[1, 2]], [[3, 4]], is_leaf=lambda x: x == [1, 2])
    # Nodes that differ: ValueError naming the key path.
    with pytest.raises(ValueError, match=re.escape("tree['a']")):
        ops.tree_combine({"a": (1, None)}, {"a": [None, 2]})
    with pytest.raises(TypeError):
        ops.tree_combine()


def test_combine_none_is_leaf() -> None:
    tree = (1, None, [None, 2])
    for fillvalue in (None, SENTINEL):
        left, right = ops.tree_partition(
            lambda x: x is None, tree, none_is_leaf=True, fillvalue=fillvalue
        )
        assert_same_tree(
            ops.tree_combine(left, right, none_is_leaf=True, fillvalue=fillvalue), tree
        )
    with pytest.raises(ValueError, match=re.escape("tree[0]")):
        ops.tree_combine([None], [None], none_is_leaf=True, fillvalue=SENTINEL)
    assert ops.tree_combine([None], [None], fillvalue=SENTINEL) == [None]


# --------------------------------------------------------------------------------------------------
# tree_replace_nones, tree_flatten_one_level, the side-effect maps.


@parametrize(tree=TREES)
def test_replace_nones_against_optree(tree: Any) -> None:
    assert_same_tree(
        ops.tree_replace_nones(SENTINEL, tree), optree.tree_replace_nones(SENTINEL, tree)
    )
    assert not any(
        x is None for x in optree.tree_leaves(ops.tree_replace_nones(0, tree), none_is_leaf=True)
    )


@parametrize(tree=TREES, none_is_leaf=NONE_IS_LEAF_OPTIONS)
def test_flatten_one_level_against_optree(tree: Any, none_is_leaf: bool) -> None:
    kw = {"none_is_leaf": none_is_leaf}
    theirs = outcome(lambda: optree.tree_flatten_one_level(tree, **kw))
    ours = outcome(lambda: ops.tree_flatten_one_level(tree, **kw))
    assert ours[0] == theirs[0]
    if ours[0] == "error":
        assert ours[1] is theirs[1] is ValueError
        with pytest.raises(ValueError, match="leaf"):
            ops.tree_flatten_one_level(tree, **kw)
        return
    result, expected = ours[1], theirs[1]
    assert isinstance(result, ops.FlattenOneLevelOutput)
    children, metadata, entries, unflatten = result
    assert_same_leaves(children, list(expected.children))
    assert metadata == expected.metadata
    assert type(entries) is tuple
    assert entries == expected.entries
    assert_same_tree(unflatten(metadata, children), tree)
    assert_same_tree(
        unflatten(metadata, children), expected.unflatten_func(expected.metadata, children)
    )
    fresh = [Marker(i) for i in range(len(children))]
    assert_same_tree(unflatten(metadata, fresh), expected.unflatten_func(expected.metadata, fresh))


def test_flatten_one_level_examples() -> None:
    children, metadata, entries, unflatten = ops.tree_flatten_one_level({"b": 1, "a": (2, 3)})
    assert children == [(2, 3), 1]
    assert metadata == ["a", "b"]
    assert entries == ("a", "b")
    assert list(unflatten(metadata, [20, 10]).items()) == [("b", 10), ("a", 20)]
    # Plain key lists (not the metadata object) rebuild in the order given, as in optree.
    assert list(unflatten(["a", "b"], [20, 10]).items()) == [("a", 20), ("b", 10)]
    with pytest.raises(ValueError, match="leaf"):
        ops.tree_flatten_one_level(1)
    with pytest.raises(ValueError, match="leaf"):
        ops.tree_flatten_one_level([1], is_leaf=lambda x: True)
    with pytest.raises(ValueError, match="leaf"):
        ops.tree_flatten_one_level(None, none_is_leaf=True)
    assert ops.tree_flatten_one_level(None)[:3] == ([], None, ())


def test_flatten_one_level_custom_node() -> None:
    node = oxtree.Partial(print, 1, k=2)
    children, metadata, entries, unflatten = ops.tree_flatten_one_level(node)
    assert len(children) == len(entries) == oxtree.tree_structure(node).num_children
    rebuilt = unflatten(metadata, children)
    assert type(rebuilt) is type(node)
    assert rebuilt.func is print
    assert rebuilt.args == (1,)
    assert rebuilt.keywords == {"k": 2}
    other = unflatten(repr, children)
    assert other.func is repr
    assert other.args == (1,)


@parametrize(tree=TREES, none_is_leaf=NONE_IS_LEAF_OPTIONS)
def test_side_effect_maps_against_optree(tree: Any, none_is_leaf: bool) -> None:
    kw = {"none_is_leaf": none_is_leaf}
    ours: list[Any] = []
    theirs: list[Any] = []
    assert ops.tree_map_with_path_(lambda p, x, y: ours.append((p, x, y)), tree, tree, **kw) is tree
    optree.tree_map_with_path_(lambda p, x, y: theirs.append((p, x, y)), tree, tree, **kw)
    assert [p for p, _, _ in ours] == [p for p, _, _ in theirs]
    assert_same_leaves([x for _, x, _ in ours], [x for _, x, _ in theirs])
    assert_same_leaves([y for _, _, y in ours], [y for _, _, y in theirs])
    ours.clear()
    theirs.clear()
    assert ops.tree_map_with_accessor_(lambda a, x: ours.append((a, x)), tree, **kw) is tree
    optree.tree_map_with_accessor_(lambda a, x: theirs.append((a, x)), tree, **kw)
    # Entries by type and value, not by `codify` or repr: oxtree's accessors render struct
    # sequence fields differently (`t[0]` for optree's `t.tm_year`).
    assert [[(type(e).__name__, e.entry, e.type) for e in a] for a, _ in ours] == [
        [(type(e).__name__, e.entry, e.type) for e in a] for a, _ in theirs
    ]
    assert all(accessor(tree) is x for accessor, x in ours)
    assert_same_leaves([x for _, x in ours], [x for _, x in theirs])


def test_side_effect_maps_mismatch() -> None:
    with pytest.raises(ValueError, match=re.escape("tree[1]")):
        ops.tree_map_with_path_(lambda *a: None, (1, (2, 3)), (1, [2, 3]))
    with pytest.raises(ValueError, match=re.escape("tree[1]")):
        ops.tree_map_with_accessor_(lambda *a: None, (1, (2, 3)), (1, [2, 3]))


# --------------------------------------------------------------------------------------------------
# A custom node type registered in a namespace (in both libraries).

NAMESPACE = "oxtree-test-ops"


class Box:
    """A custom node: its items are children, its tag is node data, entries name the items."""

    def __init__(self, items: Any, tag: Any) -> None:
        self.items = list(items)
        self.tag = tag

    def __repr__(self) -> str:
        return f"Box({self.items!r}, {self.tag!r})"


def flatten_box(box: Box) -> tuple[list[Any], Any, list[str]]:
    return box.items, box.tag, [f"i{i}" for i in range(len(box.items))]


def unflatten_box(tag: Any, items: Any) -> Box:
    return Box(items, tag)


for _module in (optree, oxtree):
    _module.register_pytree_node(Box, flatten_box, unflatten_box, namespace=NAMESPACE)


def same_boxes(actual: Any, expected: Any) -> None:
    """Trees of Boxes: the same structure (compared by optree) and the very same leaves."""
    kw = {"namespace": NAMESPACE, "none_is_leaf": True}
    assert optree.tree_structure(actual, **kw) == optree.tree_structure(expected, **kw)
    assert_same_leaves(optree.tree_leaves(actual, **kw), optree.tree_leaves(expected, **kw))


def box_tree() -> Any:
    return [Box([Marker(1), (Marker(2), None)], "t"), {"b": Box([], "e"), "a": Marker(3)}]


def test_custom_nodes_in_a_namespace() -> None:
    tree = box_tree()
    kw = {"namespace": NAMESPACE}
    prefix = [0, {"a": 1, "b": 2}]
    same_boxes(
        ops.tree_broadcast_prefix(prefix, tree, **kw),
        optree.tree_broadcast_prefix(prefix, tree, **kw),
    )
    # Outside the namespace a Box is a leaf.
    assert ops.tree_broadcast_prefix(prefix, tree) == optree.tree_broadcast_prefix(prefix, tree)
    left, right = ops.tree_partition(lambda x: x.label == 2, tree, **kw)
    expected_left, expected_right = optree.tree_partition(lambda x: x.label == 2, tree, **kw)
    same_boxes(left, expected_left)
    same_boxes(right, expected_right)
    same_boxes(ops.tree_combine(left, right, **kw), tree)
    assert_same_leaves(ops.broadcast_common(tree, tree, **kw)[0], optree.tree_leaves(tree, **kw))
    same_boxes(
        ops.tree_transpose_map(lambda x: (x, [x]), tree, **kw),
        optree.tree_transpose_map(lambda x: (x, [x]), tree, **kw),
    )


def test_custom_node_flatten_one_level() -> None:
    box = Box([1, (2, 3)], "t")
    children, metadata, entries, unflatten = ops.tree_flatten_one_level(box, namespace=NAMESPACE)
    expected = optree.tree_flatten_one_level(box, namespace=NAMESPACE)
    assert children == list(expected.children) == [1, (2, 3)]
    assert metadata == expected.metadata == "t"
    assert entries == expected.entries == ("i0", "i1")
    rebuilt = unflatten("new", [5, 6])
    assert type(rebuilt) is Box
    assert (rebuilt.items, rebuilt.tag) == ([5, 6], "new")
    with pytest.raises(ValueError, match="leaf"):
        ops.tree_flatten_one_level(box)


def test_custom_node_prefix_errors() -> None:
    tree = [Box([1, (2, 3)], "t"), None]
    kw = {"namespace": NAMESPACE}
    for prefix in ([Box([0, 0], "u"), None], [Box([0], "t"), None], [0, 1]):
        ours = our_paths(ops.prefix_errors(prefix, tree, **kw), "x")
        assert ours == optree_paths(optree.prefix_errors(prefix, tree, **kw), "x")
    [data] = ops.prefix_errors([Box([0, 0], "u"), None], tree, **kw)
    assert "different pytree metadata" in str(data("x"))
    # A custom node's entries show as flat indices in the path, quoted as optree does.
    [inner] = ops.prefix_errors([Box([0, (0,)], "t"), None], tree, **kw)
    assert our_paths([inner], "x") == ["x[0][<flat index 'i1'>]"]
    assert optree_paths(optree.prefix_errors([Box([0, (0,)], "t"), None], tree, **kw), "x") == [
        "x[0][<flat index 'i1'>]"
    ]
    with pytest.raises(ValueError, match=re.escape("tree[0]")):
        ops.tree_broadcast_common([Box([0, 0], "u"), 1], tree, **kw)
