"""Tuples and lists whose items are all leaves.

`tree_flatten`, `tree_leaves` and `tree_structure` skip the walk for an exact tuple or list
whose items are plainly leaves (see `leaf_sequence` in `crates/oxtree/src/treespec/flatten.rs`).
These tests put every kind of item in such a sequence, alone and next to plain leaves, and check
the answers against optree and jax and against the walk's own (an `is_leaf` that is never true
forces the walk).
"""

from __future__ import annotations

import collections
import enum
import gc
import pickle
import sys
from typing import Any

import jax.tree_util as jtu
import numpy as np
import optree
import oxtree
import oxtree.tree_util as otu
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nodes import Point


class Color(enum.IntEnum):
    RED = 1


class MyList(list):  # type: ignore[type-arg]
    pass


class MyDict(dict):  # type: ignore[type-arg]
    pass


class Plain:
    pass


def _never(_: Any) -> bool:
    return False


ITEMS: dict[str, Any] = {
    "int": 1,
    "float": 2.5,
    "str": "s",
    "bool": True,
    "bytes": b"b",
    "complex": 1j,
    "none": None,
    "intenum": Color.RED,
    "ndarray": np.zeros(2),
    "numpy_scalar": np.float32(1.5),
    "object": Plain(),
    "tuple": (1, 2),
    "empty_tuple": (),
    "list": [3],
    "dict": {"a": 1},
    "namedtuple": Point(1, 2),
    "ordereddict": collections.OrderedDict(a=1),
    "defaultdict": collections.defaultdict(int, a=1),
    "deque": collections.deque([1, 2]),
    "list_subclass": MyList([1]),
    "dict_subclass": MyDict(a=1),
}


def _trees(item: Any) -> list[Any]:
    return [(item,), [item], (1, item, 2.5), [item, "x", item], (1.5, "y", item)]


def _same_leaves(got: list[Any], want: list[Any]) -> None:
    assert type(got) is list
    assert len(got) == len(want)
    assert all(g is w for g, w in zip(got, want, strict=True))


@pytest.mark.parametrize("none_is_leaf", [False, True])
@pytest.mark.parametrize("name", list(ITEMS))
def test_optree_face_matches_optree_and_the_walk(name: str, none_is_leaf: bool) -> None:
    for tree in _trees(ITEMS[name]):
        leaves, spec = oxtree.tree_flatten(tree, none_is_leaf=none_is_leaf)
        want_leaves, want_spec = optree.tree_flatten(tree, none_is_leaf=none_is_leaf)
        _same_leaves(leaves, want_leaves)
        assert repr(spec) == repr(want_spec)
        _same_leaves(oxtree.tree_leaves(tree, none_is_leaf=none_is_leaf), want_leaves)
        structure = oxtree.tree_structure(tree, none_is_leaf=none_is_leaf)
        walked_leaves, walked = oxtree.tree_flatten(tree, _never, none_is_leaf=none_is_leaf)
        _same_leaves(walked_leaves, want_leaves)
        assert spec == structure == walked
        assert hash(spec) == hash(structure) == hash(walked)
        assert spec.num_leaves == walked.num_leaves
        assert spec.num_nodes == walked.num_nodes
        assert oxtree.tree_unflatten(spec, leaves) == tree


@pytest.mark.parametrize("name", list(ITEMS))
def test_jax_face_matches_jax(name: str) -> None:
    for tree in _trees(ITEMS[name]):
        leaves, treedef = otu.tree_flatten(tree)
        want_leaves, want_treedef = jtu.tree_flatten(tree)
        _same_leaves(leaves, want_leaves)
        assert repr(treedef) == repr(want_treedef)
        _same_leaves(otu.tree_leaves(tree), want_leaves)
        assert otu.tree_structure(tree) == treedef
        assert treedef == otu.tree_flatten(tree, _never)[1]
        assert otu.tree_unflatten(treedef, leaves) == tree


@pytest.mark.parametrize("seq", [(), []], ids=["tuple", "list"])
def test_empty_sequences(seq: Any) -> None:
    leaves, spec = oxtree.tree_flatten(seq)
    assert leaves == []
    assert repr(spec) == repr(optree.tree_structure(seq))
    assert spec == oxtree.tree_flatten(seq, _never)[1]
    assert oxtree.tree_unflatten(spec, []) == seq
    assert type(oxtree.tree_unflatten(spec, [])) is type(seq)


def test_leaves_are_a_new_list() -> None:
    tree = [1, 2.5, "s"]
    leaves = oxtree.tree_leaves(tree)
    assert leaves == tree
    assert leaves is not tree
    leaves.append(4)
    flat, _ = oxtree.tree_flatten(tree)
    flat.pop()
    assert tree == [1, 2.5, "s"]


def test_references_are_released() -> None:
    items = [object(), np.zeros(1), Plain()]
    before = [sys.getrefcount(i) for i in items]
    for seq in (tuple(items), list(items)):
        for _ in range(100):
            oxtree.tree_flatten(seq)
            oxtree.tree_leaves(seq)
            oxtree.tree_structure(seq)
            otu.tree_flatten(seq)
        del seq
    assert [sys.getrefcount(i) for i in items] == before


def test_spec_is_untracked_and_pickles() -> None:
    spec = oxtree.tree_structure((1, 2.5, None))
    assert not gc.is_tracked(spec)
    assert pickle.loads(pickle.dumps(spec)) == spec


@pytest.mark.parametrize("value", [3, 2.5, "s", True, b"b", 1j], ids=lambda v: type(v).__name__)
def test_scalar_registered_in_a_namespace(value: Any) -> None:
    tree = (value, value)
    oxtree.register_pytree_node(
        type(value), lambda v: ((), v), lambda aux, _: aux, namespace="leafseq-ns"
    )
    try:
        assert oxtree.tree_leaves(tree) == [value, value]
        assert oxtree.tree_leaves(tree, namespace="leafseq-ns") == []
        spec = oxtree.tree_structure(tree, namespace="leafseq-ns")
        assert spec.num_leaves == 0
        assert spec.num_nodes == 3
        assert oxtree.tree_unflatten(spec, []) == tree
    finally:
        oxtree.unregister_pytree_node(type(value), namespace="leafseq-ns")
    assert oxtree.tree_leaves(tree, namespace="leafseq-ns") == [value, value]


def test_registered_class_in_a_sequence_is_a_node() -> None:
    class Box:
        def __init__(self, x: Any) -> None:
            self.x = x

    oxtree.register_pytree_node(Box, lambda b: ((b.x,), None), lambda _, c: Box(*c))
    try:
        tree = (1, Box(2.5), "s")
        assert oxtree.tree_leaves(tree) == [1, 2.5, "s"]
        assert oxtree.tree_structure(tree).num_nodes == 5
        assert oxtree.tree_leaves(tree, namespace="elsewhere") == [1, 2.5, "s"]
    finally:
        oxtree.unregister_pytree_node(Box)
    assert oxtree.tree_leaves(tree) == list(tree)


def test_is_leaf_is_called_for_every_item() -> None:
    seen: list[Any] = []

    def is_leaf(x: Any) -> bool:
        seen.append(x)
        return False

    tree = (1, 2.5, "s")
    assert oxtree.tree_leaves(tree, is_leaf) == [1, 2.5, "s"]
    assert seen == [tree, 1, 2.5, "s"]


_leafy = st.one_of(
    st.integers(),
    st.floats(allow_nan=False),
    st.text(max_size=3),
    st.none(),
    st.booleans(),
    st.sampled_from([ITEMS["ndarray"], ITEMS["object"], ITEMS["deque"], ITEMS["dict"]]),
)


@settings(max_examples=200, deadline=None)
@given(
    items=st.lists(_leafy, max_size=12),
    as_tuple=st.booleans(),
    none_is_leaf=st.booleans(),
)
def test_hypothesis_sequences_match_optree(
    items: list[Any], as_tuple: bool, none_is_leaf: bool
) -> None:
    tree = tuple(items) if as_tuple else items
    leaves, spec = oxtree.tree_flatten(tree, none_is_leaf=none_is_leaf)
    want_leaves, want_spec = optree.tree_flatten(tree, none_is_leaf=none_is_leaf)
    _same_leaves(leaves, want_leaves)
    assert repr(spec) == repr(want_spec)
    assert spec == oxtree.tree_flatten(tree, _never, none_is_leaf=none_is_leaf)[1]
    jax_leaves, treedef = otu.tree_flatten(tree)
    _same_leaves(jax_leaves, jtu.tree_leaves(tree))
    assert repr(treedef) == repr(jtu.tree_structure(tree))


@pytest.mark.parametrize("n", [17, 1000, 1 << 17, (1 << 17) + 1])
def test_long_sequences_of_each_kind_and_option(n: int) -> None:
    # Longer leaf sequences may share a treespec with the last one of the same shape: each
    # call, in any order of kinds, options and lengths, still gets its own tree's treespec.
    cases = [
        (list(range(n)), {}),
        (tuple(range(n)), {}),
        (list(range(n)), {"none_is_leaf": True}),
        ([None] * n, {"none_is_leaf": True}),
        (list(range(n - 1)), {}),
    ]
    for _ in range(2):
        for tree, kwargs in cases:
            spec = oxtree.tree_structure(tree, **kwargs)
            want = optree.tree_structure(tree, **kwargs)
            assert spec.num_leaves == want.num_leaves == len(tree)
            assert spec.num_nodes == want.num_nodes
            assert spec.none_is_leaf == kwargs.get("none_is_leaf", False)
            assert spec == oxtree.tree_flatten(tree, _never, **kwargs)[1]
            rebuilt = oxtree.tree_unflatten(spec, list(tree))
            assert type(rebuilt) is type(tree)
            assert rebuilt == tree
        jax_spec = otu.tree_structure(list(range(n)))
        assert repr(jax_spec).startswith("PyTreeDef([")
        assert repr(jax_spec) == repr(jtu.tree_structure(list(range(n))))
        assert jax_spec == otu.tree_flatten(list(range(n)), _never)[1]
