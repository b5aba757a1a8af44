"""Treespec relations and algebra, differentially against optree 0.20.

`is_prefix` / `is_suffix` and the ordering operators over every pair of corpus treespecs and
over hypothesis pairs built by replacing leaves with subtrees; `broadcast_to_common_suffix`
(including the mapping kinds standing for each other and deques of different maxlen, and the
mismatch errors naming the key path); `compose` (associativity, leaf and node arithmetic,
optree's repr); and the round trip `spec.unflatten(spec.flatten_up_to(tree))` for full specs
and prefixes of them.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict, defaultdict, deque
from collections.abc import Callable
from typing import Any

import optree
import oxtree
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
)
from hypothesis import given
from hypothesis import strategies as st
from nodes import Point, make_default

# --------------------------------------------------------------------------------------------------
# Helpers.


def outcome(func: Callable[..., Any], *args: Any) -> tuple[str, Any]:
    """`("ok", func(*args))` or `("error", exception type)`: messages differ by design."""
    try:
        return "ok", func(*args)
    except Exception as error:
        return "error", type(error)


def specs(tree: Any, none_is_leaf: bool) -> tuple[oxtree.PyTreeSpec, optree.PyTreeSpec]:
    """The treespec of `tree` from both libraries."""
    return (
        oxtree.tree_structure(tree, none_is_leaf=none_is_leaf),
        optree.tree_structure(tree, none_is_leaf=none_is_leaf),
    )


def relations(a: Any, b: Any) -> dict[str, bool]:
    """Every prefix/suffix/order/equality answer between `a` and `b`, both ways round."""
    answers = {}
    for label, (x, y) in (("ab", (a, b)), ("ba", (b, a))):
        answers.update(
            {
                f"{label}.is_prefix": x.is_prefix(y),
                f"{label}.is_prefix(strict)": x.is_prefix(y, strict=True),
                f"{label}.is_suffix": x.is_suffix(y),
                f"{label}.is_suffix(strict)": x.is_suffix(y, strict=True),
                f"{label} <": x < y,
                f"{label} <=": x <= y,
                f"{label} >": x > y,
                f"{label} >=": x >= y,
                f"{label} ==": x == y,
                f"{label} !=": x != y,
            }
        )
    return answers


def broadcast_repr(a: Any, b: Any) -> str:
    return repr(a.broadcast_to_common_suffix(b))


def relation_differences(ours: dict[str, bool], theirs: dict[str, bool]) -> dict[str, Any]:
    return {k: (ours[k], theirs[k]) for k in ours if ours[k] != theirs[k]}


def assert_order_consistent(a: oxtree.PyTreeSpec, b: oxtree.PyTreeSpec) -> None:
    """The ordering operators are the prefix relation, whatever the pair."""
    assert (a <= b) is a.is_prefix(b)
    assert (a < b) is a.is_prefix(b, strict=True)
    assert (a >= b) is b.is_prefix(a)
    assert (a > b) is b.is_prefix(a, strict=True)
    assert a.is_suffix(b) is b.is_prefix(a)
    assert a.is_suffix(b, strict=True) is b.is_prefix(a, strict=True)
    assert (a != b) is not (a == b)
    if a < b:
        assert a <= b
        assert a != b
        assert not b <= a
    if a == b:
        assert a <= b
        assert a >= b
        assert not a < b
        assert hash(a) == hash(b)
    if a <= b and a != b and not a < b:
        # Only possible when no leaf of `a` meets a node of `b`: the two have the same shape
        # and differ in what optree lets stand for each other (mapping kinds, deque maxlen).
        assert (a.num_nodes, a.num_leaves) == (b.num_nodes, b.num_leaves)


def replace_leaves(tree: Any, none_is_leaf: bool, subtrees: list[Any]) -> Any:
    """`tree` with its leaves (in order) replaced by `subtrees`."""
    spec = optree.tree_structure(tree, none_is_leaf=none_is_leaf)
    return optree.tree_unflatten(spec, subtrees)


def cut_every(k: int | None, tree: Any) -> Callable[[Any], bool]:
    """An is_leaf predicate that cuts every k-th subtree below the root (never when k is None)."""
    counter = itertools.count()
    if k is None:
        return lambda _: False
    return lambda x: x is not tree and next(counter) % k == k - 1


def prefix_tree(tree: Any, none_is_leaf: bool, is_leaf: Callable[[Any], bool]) -> Any:
    """A prefix of `tree`: the subtrees `is_leaf` picks (and every leaf) become the int 0."""
    return optree.tree_map(lambda _: 0, tree, is_leaf=is_leaf, none_is_leaf=none_is_leaf)


# --------------------------------------------------------------------------------------------------
# is_prefix / is_suffix / ordering over the corpus.

CORPUS_SPECS = {
    none_is_leaf: [specs(tree, none_is_leaf) for tree in TREES]
    for none_is_leaf in NONE_IS_LEAF_OPTIONS
}


@parametrize(tree=TREES)
def test_relations_match_optree_against_every_corpus_spec(tree: Any) -> None:
    mismatches = []
    for none_is_leaf in NONE_IS_LEAF_OPTIONS:
        ours, theirs = specs(tree, none_is_leaf)
        for other_ours, other_theirs in CORPUS_SPECS[none_is_leaf]:
            diff = relation_differences(
                relations(ours, other_ours), relations(theirs, other_theirs)
            )
            if diff:
                mismatches.append((repr(theirs), repr(other_theirs), diff))
    assert not mismatches, f"{len(mismatches)} pairs differ from optree, e.g. {mismatches[:3]}"


@parametrize(tree=TREES, none_is_leaf=NONE_IS_LEAF_OPTIONS)
def test_ordering_is_the_prefix_relation_over_the_corpus(tree: Any, none_is_leaf: bool) -> None:
    ours, theirs = specs(tree, none_is_leaf)
    for other, _ in CORPUS_SPECS[none_is_leaf]:
        assert_order_consistent(ours, other)
        assert_order_consistent(other, ours)
    # Against itself: a prefix, not a strict one.
    assert ours.is_prefix(ours)
    assert not ours.is_prefix(ours, strict=True)
    assert ours <= ours
    assert not ours < ours
    # A leaf is a prefix of everything, a strict one of every non-leaf.
    leaf = oxtree.treespec_leaf(none_is_leaf=none_is_leaf)
    assert leaf.is_prefix(ours)
    assert ours.is_suffix(leaf)
    assert leaf <= ours
    assert (leaf < ours) is (not ours.is_leaf())
    assert (leaf < ours) is optree.treespec_leaf(none_is_leaf=none_is_leaf).is_prefix(
        theirs, strict=True
    )


@parametrize(tree=TREES)
def test_specs_with_different_none_is_leaf_are_unrelated(tree: Any) -> None:
    a, _ = specs(tree, False)
    b, _ = specs(tree, True)
    a_theirs, b_theirs = specs(tree, False)[1], specs(tree, True)[1]
    assert relations(a, b) == relations(a_theirs, b_theirs)
    assert not a.is_prefix(b)
    assert not b.is_prefix(a)
    assert a != b


MAPPING_AND_DEQUE_PAIRS = {
    "dict-ordereddict": ({"a": 1, "b": 2}, OrderedDict(a=1, b=2)),
    "dict-ordereddict-reordered": ({"a": 1, "b": 2}, OrderedDict(b=1, a=2)),
    "dict-defaultdict": ({"a": 1, "b": 2}, defaultdict(list, a=1, b=2)),
    "ordereddict-defaultdict": (OrderedDict(b=1, a=2), defaultdict(None, a=1, b=2)),
    "dict-ordereddict-deeper": ({"a": 1, "b": [1]}, OrderedDict(b=[[1]], a=(1,))),
    "defaultdict-factories": (defaultdict(int, a=1), defaultdict(make_default, a=1)),
    "defaultdict-factories-deeper": (defaultdict(int, a=1), defaultdict(list, a=[1])),
    "empty-dict-ordereddict": ({}, OrderedDict()),
    "deque-maxlen": (deque([1, 2]), deque([1, 2], maxlen=3)),
    "deque-maxlen-deeper": (deque([1, 2], maxlen=2), deque([[1], 2], maxlen=3)),
    "nested-kinds": ([{"k": deque([1])}], [OrderedDict(k=deque([(1,)], maxlen=4))]),
    "different-keys": ({"a": 1}, OrderedDict(b=1)),
    "more-keys": ({"a": 1}, OrderedDict(a=1, b=2)),
}


@pytest.mark.parametrize(
    ("left", "right"), MAPPING_AND_DEQUE_PAIRS.values(), ids=MAPPING_AND_DEQUE_PAIRS
)
@pytest.mark.parametrize("none_is_leaf", NONE_IS_LEAF_OPTIONS)
def test_relations_across_mapping_kinds_and_maxlens_match_optree(
    left: Any, right: Any, none_is_leaf: bool
) -> None:
    a, a_theirs = specs(left, none_is_leaf)
    b, b_theirs = specs(right, none_is_leaf)
    assert relation_differences(relations(a, b), relations(a_theirs, b_theirs)) == {}


# --------------------------------------------------------------------------------------------------
# Hypothesis: pairs related by replacing leaves with subtrees, and unrelated pairs.


# Small subtrees to graft at leaves (drawing from a pool keeps data generation cheap).
SUBTREES = [
    *INNER_TREES.values(),
    [1, 2],
    [],
    {"k": [None], "a": 1},
    OrderedDict(b=1, a=(2,)),
    defaultdict(list, {"k": None}),
    deque([1], maxlen=2),
    Point(None, [1]),
]


def draw_replacements(data: st.DataObject, count: int) -> dict[int, Any]:
    """Subtrees for a few of `count` leaf positions, by position."""
    if count == 0:
        return {}
    positions = data.draw(st.lists(st.integers(0, count - 1), max_size=4, unique=True))
    return {position: data.draw(st.sampled_from(SUBTREES)) for position in positions}


@HYPOTHESIS_SETTINGS
@given(data=st.data(), tree=trees(), none_is_leaf=st.booleans())
def test_replacing_leaves_gives_a_suffix(
    data: st.DataObject, tree: Any, none_is_leaf: bool
) -> None:
    leaves = optree.tree_leaves(tree, none_is_leaf=none_is_leaf)
    replacements = draw_replacements(data, len(leaves))
    subtrees = [replacements.get(i, leaf) for i, leaf in enumerate(leaves)]
    bigger = replace_leaves(tree, none_is_leaf, subtrees)
    a, a_theirs = specs(tree, none_is_leaf)
    b, b_theirs = specs(bigger, none_is_leaf)
    assert relation_differences(relations(a, b), relations(a_theirs, b_theirs)) == {}
    assert a.is_prefix(b)
    assert b.is_suffix(a)
    assert a <= b
    assert b >= a
    strict = a != b
    assert a.is_prefix(b, strict=True) is strict
    assert b.is_suffix(a, strict=True) is strict
    assert (a < b) is strict
    assert (b > a) is strict
    assert b.is_prefix(a) is (not strict)
    assert_order_consistent(a, b)
    assert_order_consistent(b, a)
    # The bigger tree, cut at the smaller one's leaves, gives back the subtrees.
    assert_same_leaves(a.flatten_up_to(bigger), subtrees)
    assert_same_tree(a.unflatten(a.flatten_up_to(bigger)), bigger)
    # The common suffix of a prefix and its suffix is the suffix.
    assert a.broadcast_to_common_suffix(b) == b
    assert b.broadcast_to_common_suffix(a) == b


@HYPOTHESIS_SETTINGS
@given(left=trees(8), right=trees(8), none_is_leaf=st.booleans())
def test_unrelated_pairs_match_optree(left: Any, right: Any, none_is_leaf: bool) -> None:
    a, a_theirs = specs(left, none_is_leaf)
    b, b_theirs = specs(right, none_is_leaf)
    assert relation_differences(relations(a, b), relations(a_theirs, b_theirs)) == {}
    assert_order_consistent(a, b)
    assert_order_consistent(b, a)
    assert outcome(broadcast_repr, a, b) == outcome(broadcast_repr, a_theirs, b_theirs)


@HYPOTHESIS_SETTINGS
@given(data=st.data(), base=trees(), none_is_leaf=st.booleans())
def test_common_suffix_of_siblings(data: st.DataObject, base: Any, none_is_leaf: bool) -> None:
    """Two trees grown from one base by replacing different leaves with subtrees: their common
    suffix has every replacement of either."""
    leaves = optree.tree_leaves(base, none_is_leaf=none_is_leaf)
    replacements = draw_replacements(data, len(leaves))
    lefts, rights, everything = [], [], []
    for i, leaf in enumerate(leaves):
        sub = replacements.get(i, leaf)
        side = data.draw(st.sampled_from(["left", "right", "both"])) if i in replacements else ""
        lefts.append(sub if side in ("left", "both") else leaf)
        rights.append(sub if side in ("right", "both") else leaf)
        everything.append(sub)
    left, right, expected = (
        replace_leaves(base, none_is_leaf, x) for x in (lefts, rights, everything)
    )
    a, a_theirs = specs(left, none_is_leaf)
    b, b_theirs = specs(right, none_is_leaf)
    common = a.broadcast_to_common_suffix(b)
    assert common == oxtree.tree_structure(expected, none_is_leaf=none_is_leaf)
    assert common == b.broadcast_to_common_suffix(a)
    assert repr(common) == repr(a_theirs.broadcast_to_common_suffix(b_theirs))
    assert a.is_prefix(common)
    assert b.is_prefix(common)
    assert common.is_suffix(a)
    assert common.is_suffix(b)
    assert relation_differences(relations(a, b), relations(a_theirs, b_theirs)) == {}


# --------------------------------------------------------------------------------------------------
# broadcast_to_common_suffix.


@parametrize(tree=TREES)
def test_broadcast_matches_optree_against_every_corpus_spec(tree: Any) -> None:
    mismatches = []
    for none_is_leaf in NONE_IS_LEAF_OPTIONS:
        ours, theirs = specs(tree, none_is_leaf)
        for other_ours, other_theirs in CORPUS_SPECS[none_is_leaf]:
            mine = outcome(broadcast_repr, ours, other_ours)
            ref = outcome(broadcast_repr, theirs, other_theirs)
            if mine != ref:
                mismatches.append((repr(theirs), repr(other_theirs), mine, ref))
    assert not mismatches, f"{len(mismatches)} pairs differ from optree, e.g. {mismatches[:3]}"


@parametrize(tree=TREES)
def test_broadcast_result_is_a_suffix_of_self(tree: Any) -> None:
    for none_is_leaf in NONE_IS_LEAF_OPTIONS:
        ours, _ = specs(tree, none_is_leaf)
        leaf = oxtree.treespec_leaf(none_is_leaf=none_is_leaf)
        assert ours.broadcast_to_common_suffix(ours) == ours
        assert ours.broadcast_to_common_suffix(leaf) == ours
        assert leaf.broadcast_to_common_suffix(ours) == ours
        for other, _ in CORPUS_SPECS[none_is_leaf]:
            result = outcome(ours.broadcast_to_common_suffix, other)
            if result[0] == "ok":
                assert ours.is_prefix(result[1])
            else:
                assert result[1] is ValueError


@pytest.mark.parametrize(
    ("left", "right"), MAPPING_AND_DEQUE_PAIRS.values(), ids=MAPPING_AND_DEQUE_PAIRS
)
@pytest.mark.parametrize("none_is_leaf", NONE_IS_LEAF_OPTIONS)
def test_broadcast_across_mapping_kinds_and_maxlens_matches_optree(
    left: Any, right: Any, none_is_leaf: bool
) -> None:
    a, a_theirs = specs(left, none_is_leaf)
    b, b_theirs = specs(right, none_is_leaf)
    for x, y, x_theirs, y_theirs in ((a, b, a_theirs, b_theirs), (b, a, b_theirs, a_theirs)):
        ours = outcome(broadcast_repr, x, y)
        theirs = outcome(broadcast_repr, x_theirs, y_theirs)
        assert ours == theirs


def test_broadcast_mapping_kinds_pair_children_by_key() -> None:
    a = oxtree.tree_structure({"a": 1, "b": [1]})
    b = oxtree.tree_structure(OrderedDict(b=[[1]], a=(1,)))
    assert a.broadcast_to_common_suffix(b) == oxtree.tree_structure({"a": (1,), "b": [[1]]})
    assert b.broadcast_to_common_suffix(a) == oxtree.tree_structure(OrderedDict(b=[[1]], a=(1,)))


BROADCAST_MISMATCHES = {
    "root-types": ((1, 2), [1, 2], "tree"),
    "root-arity": ((1, 2), (1, 2, 3), "tree"),
    "root-none-vs-node": (None, [1], "tree"),
    "list-index": ([1, [2]], [1, (2,)], "tree[1]"),
    "dict-key": ([1, {"a": (1, 2)}], [1, {"a": (1, 2, 3)}], "tree[1]['a']"),
    "dict-keys": ({"a": 1}, {"b": 1}, "tree"),
    "mapping-keys-across-kinds": ({"a": 1}, OrderedDict(a=1, b=2), "tree"),
    "namedtuple-field": (Point(1, [2]), Point(1, (2,)), "tree.y"),
    "ordereddict-key": (OrderedDict(z=[1]), OrderedDict(z={"k": 1}), "tree['z']"),
    "deque-index": (deque([1, [1]]), deque([1, (1,)]), "tree[1]"),
    "none-in-tuple": ((None,), ([1],), "tree[0]"),
    "deep": ([[[{"k": (1,)}]]], [[[{"k": [1]}]]], "tree[0][0][0]['k']"),
}


@pytest.mark.parametrize(
    ("left", "right", "path"), BROADCAST_MISMATCHES.values(), ids=BROADCAST_MISMATCHES
)
def test_broadcast_mismatch_is_value_error_naming_the_path(
    left: Any, right: Any, path: str
) -> None:
    a, a_theirs = specs(left, False)
    b, b_theirs = specs(right, False)
    for (x, y), (x_theirs, y_theirs) in (
        ((a, b), (a_theirs, b_theirs)),
        ((b, a), (b_theirs, a_theirs)),
    ):
        # optree's message first, then the key path.
        with pytest.raises(ValueError, match=r"(?i)mismatch|incompatible") as theirs:
            x_theirs.broadcast_to_common_suffix(y_theirs)
        with pytest.raises(ValueError, match="Mismatch at key path") as info:
            x.broadcast_to_common_suffix(y)
        assert str(info.value) == f"{theirs.value}\nMismatch at key path: {path}"


def test_broadcast_rejects_mixed_none_is_leaf_and_non_specs() -> None:
    with pytest.raises(ValueError, match="none_is_leaf"):
        oxtree.treespec_leaf().broadcast_to_common_suffix(oxtree.treespec_leaf(none_is_leaf=True))
    with pytest.raises(ValueError, match="none_is_leaf"):
        optree.treespec_leaf().broadcast_to_common_suffix(optree.treespec_leaf(none_is_leaf=True))
    with pytest.raises(TypeError):
        oxtree.treespec_leaf().broadcast_to_common_suffix(1)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------------
# compose.


@parametrize(tree=TREES)
def test_compose_matches_optree_and_counts(tree: Any) -> None:
    for inner, none_is_leaf in itertools.product(INNER_TREES.values(), NONE_IS_LEAF_OPTIONS):
        check_compose(tree, inner, none_is_leaf)


def check_compose(tree: Any, inner: Any, none_is_leaf: bool) -> None:
    outer, outer_theirs = specs(tree, none_is_leaf)
    inner_spec, inner_theirs = specs(inner, none_is_leaf)
    composed = outer.compose(inner_spec)
    assert repr(composed) == repr(outer_theirs.compose(inner_theirs))
    assert composed.num_leaves == outer.num_leaves * inner_spec.num_leaves
    assert composed.num_nodes == outer.num_nodes + outer.num_leaves * (inner_spec.num_nodes - 1)
    assert composed.none_is_leaf is none_is_leaf
    assert outer.is_prefix(composed)
    # Unflattening the composition nests inner trees at the outer leaves.
    if composed.num_leaves <= 2000:
        leaves = [object() for _ in range(composed.num_leaves)]
        k = inner_spec.num_leaves
        expected = outer.unflatten(
            [inner_spec.unflatten(leaves[i * k : (i + 1) * k]) for i in range(outer.num_leaves)]
        )
        assert_same_tree(composed.unflatten(leaves), expected)
        assert composed == oxtree.tree_structure(expected, none_is_leaf=none_is_leaf)


INNER_SPECS = list(INNER_TREES.values())


@parametrize(tree=TREES, none_is_leaf=NONE_IS_LEAF_OPTIONS)
def test_compose_is_associative_over_the_corpus(tree: Any, none_is_leaf: bool) -> None:
    a, a_theirs = specs(tree, none_is_leaf)
    leaf = oxtree.treespec_leaf(none_is_leaf=none_is_leaf)
    assert a.compose(leaf) == a
    assert leaf.compose(a) == a
    assert repr(a.compose(leaf)) == repr(a)
    for b_tree, c_tree in itertools.product(INNER_SPECS[2:], repeat=2):
        b, b_theirs = specs(b_tree, none_is_leaf)
        c, c_theirs = specs(c_tree, none_is_leaf)
        left = a.compose(b).compose(c)
        right = a.compose(b.compose(c))
        assert left == right
        assert hash(left) == hash(right)
        assert repr(left) == repr(a_theirs.compose(b_theirs.compose(c_theirs)))


@HYPOTHESIS_SETTINGS
@given(a=trees(6), b=trees(4), c=trees(4), none_is_leaf=st.booleans())
def test_compose_is_associative(a: Any, b: Any, c: Any, none_is_leaf: bool) -> None:
    (sa, oa), (sb, ob), (sc, oc) = (specs(t, none_is_leaf) for t in (a, b, c))
    left = sa.compose(sb).compose(sc)
    right = sa.compose(sb.compose(sc))
    assert left == right
    assert repr(left) == repr(right) == repr(oa.compose(ob).compose(oc))
    assert left.num_leaves == sa.num_leaves * sb.num_leaves * sc.num_leaves
    assert sa.is_prefix(left)


def test_compose_rejects_mixed_none_is_leaf() -> None:
    outer = oxtree.tree_structure((1, 2))
    with pytest.raises(ValueError, match="none_is_leaf"):
        outer.compose(oxtree.treespec_leaf(none_is_leaf=True))
    with pytest.raises(ValueError, match="none_is_leaf"):
        optree.tree_structure((1, 2)).compose(optree.treespec_leaf(none_is_leaf=True))


# --------------------------------------------------------------------------------------------------
# flatten_up_to / unflatten round trip, for full specs and their prefixes.

CUTS = [None, 1, 2, 3, 5]


@parametrize(tree=TREES, none_is_leaf=NONE_IS_LEAF_OPTIONS)
def test_unflatten_flatten_up_to_round_trip(tree: Any, none_is_leaf: bool) -> None:
    full, _ = specs(tree, none_is_leaf)
    for cut in CUTS:
        # cut=1 keeps only the root node; None keeps the whole tree.
        prefix = prefix_tree(tree, none_is_leaf, cut_every(cut, tree))
        spec, spec_theirs = specs(prefix, none_is_leaf)
        assert spec.is_prefix(full)
        if cut is None:
            assert spec == full
        subtrees = spec.flatten_up_to(tree)
        assert_same_leaves(subtrees, spec_theirs.flatten_up_to(tree))
        assert len(subtrees) == spec.num_leaves
        assert_same_tree(spec.unflatten(subtrees), tree)


@HYPOTHESIS_SETTINGS
@given(data=st.data(), tree=trees(), none_is_leaf=st.booleans())
def test_unflatten_flatten_up_to_round_trip_random(
    data: st.DataObject, tree: Any, none_is_leaf: bool
) -> None:
    prefix = prefix_tree(tree, none_is_leaf, lambda x: x is not tree and data.draw(st.booleans()))
    spec, spec_theirs = specs(prefix, none_is_leaf)
    full, _ = specs(tree, none_is_leaf)
    assert spec.is_prefix(full)
    assert spec <= full
    subtrees = spec.flatten_up_to(tree)
    assert_same_leaves(subtrees, spec_theirs.flatten_up_to(tree))
    assert_same_tree(spec.unflatten(subtrees), tree)
    assert_same_tree(full.unflatten(full.flatten_up_to(tree)), tree)
