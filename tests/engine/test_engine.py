"""The tree engine (flatten, unflatten, map, treedefs) checked against optree as the oracle.

Every operation runs over every corpus tree in `helpers.py` with both values of none_is_leaf.
"""

from __future__ import annotations

import copy
import enum
import pickle
import sys
from collections import OrderedDict, defaultdict, deque, namedtuple
from typing import Any

import numpy as np
import optree
import oxtree
import pytest
from helpers import (
    CORPUS,
    HYPOTHESIS_SETTINGS,
    INNER_TREES,
    NONE_IS_LEAF_OPTIONS,
    OPAQUE,
    TREES,
    assert_same_leaves,
    assert_same_tree,
    iter_subtrees,
    node_children,
    parametrize,
    trees,
    widen,
)
from hypothesis import given
from hypothesis import strategies as st
from nodes import Point, Rec, Vector, make_default

NIL = NONE_IS_LEAF_OPTIONS
# Trees whose root is a node (whatever none_is_leaf says), for the is_leaf callback tests.
NODE_TREES = [tree for tree in TREES if tree is not None and node_children(tree) is not None]


def reversed_dicts(tree: Any) -> Any:
    """A copy of `tree` where every dict and defaultdict has its insertion order reversed."""
    cls = type(tree)
    if cls is dict:
        return {k: reversed_dicts(v) for k, v in reversed(tree.items())}
    if cls is defaultdict:
        return defaultdict(
            tree.default_factory, {k: reversed_dicts(v) for k, v in reversed(tree.items())}
        )
    if cls is OrderedDict:
        return OrderedDict((k, reversed_dicts(v)) for k, v in tree.items())
    if cls is list:
        return [reversed_dicts(v) for v in tree]
    if cls is tuple:
        return tuple(reversed_dicts(v) for v in tree)
    if cls is deque:
        return deque((reversed_dicts(v) for v in tree), maxlen=tree.maxlen)
    if node_children(tree) is not None and tree is not None and hasattr(cls, "_make"):
        return cls._make(reversed_dicts(v) for v in tree)
    return tree


def ox_and_opt_structure(tree: Any, none_is_leaf: bool, **kwargs: Any) -> tuple[Any, Any]:
    return (
        oxtree.tree_structure(tree, none_is_leaf=none_is_leaf, **kwargs),
        optree.tree_structure(tree, none_is_leaf=none_is_leaf, **kwargs),
    )


# --------------------------------------------------------------------------------------------------
# Module surface.


def test_public_names_exist():
    for name in (
        "tree_flatten",
        "tree_unflatten",
        "tree_leaves",
        "tree_structure",
        "tree_map",
        "tree_map_",
        "tree_iter",
        "tree_is_leaf",
        "all_leaves",
    ):
        assert callable(getattr(oxtree, name)), name
    assert oxtree.PyTreeDef is oxtree.PyTreeSpec
    assert isinstance(oxtree.PyTreeSpec, type)


def test_constants():
    assert oxtree.NONE_IS_LEAF is True
    assert oxtree.NONE_IS_NODE is False
    assert isinstance(oxtree.MAX_RECURSION_DEPTH, int)
    assert oxtree.MAX_RECURSION_DEPTH > 0


KIND_VALUES = {
    "CUSTOM": 0,
    "LEAF": 1,
    "NONE": 2,
    "TUPLE": 3,
    "LIST": 4,
    "DICT": 5,
    "NAMEDTUPLE": 6,
    "ORDEREDDICT": 7,
    "DEFAULTDICT": 8,
    "DEQUE": 9,
    "STRUCTSEQUENCE": 10,
}


def test_kind_enum_values():
    assert issubclass(oxtree.PyTreeKind, enum.IntEnum)
    for name, value in KIND_VALUES.items():
        assert int(oxtree.PyTreeKind[name]) == value, name
        assert int(optree.PyTreeKind[name]) == value, name
        assert oxtree.PyTreeKind(value).name == name


# --------------------------------------------------------------------------------------------------
# Flatten, structure, leaves, unflatten.


@parametrize(tree=TREES, none_is_leaf=NIL)
def test_flatten_matches_optree(tree, none_is_leaf):
    leaves, spec = oxtree.tree_flatten(tree, none_is_leaf=none_is_leaf)
    expected_leaves, expected_spec = optree.tree_flatten(tree, none_is_leaf=none_is_leaf)
    assert_same_leaves(leaves, expected_leaves)
    assert type(spec) is oxtree.PyTreeSpec
    assert repr(spec) == repr(expected_spec)
    assert str(spec) == str(expected_spec)


@parametrize(tree=TREES, none_is_leaf=NIL)
def test_structure_matches_optree(tree, none_is_leaf):
    spec, expected = ox_and_opt_structure(tree, none_is_leaf)
    assert repr(spec) == repr(expected)
    # is_leaf=None passed explicitly, positionally and by keyword, changes nothing.
    assert repr(oxtree.tree_structure(tree, None, none_is_leaf=none_is_leaf)) == repr(expected)
    assert repr(oxtree.tree_structure(tree, is_leaf=None, none_is_leaf=none_is_leaf)) == repr(
        expected
    )


@parametrize(tree=TREES, none_is_leaf=NIL)
def test_unflatten_round_trip(tree, none_is_leaf):
    leaves, spec = oxtree.tree_flatten(tree, none_is_leaf=none_is_leaf)
    assert_same_tree(oxtree.tree_unflatten(spec, leaves), tree)
    assert_same_tree(spec.unflatten(leaves), tree)
    # Any iterable of leaves will do.
    assert_same_tree(oxtree.tree_unflatten(spec, iter(leaves)), tree)
    assert_same_tree(spec.unflatten(tuple(leaves)), tree)
    assert type(oxtree.tree_unflatten(spec, leaves)) is type(tree)


@parametrize(tree=TREES, none_is_leaf=NIL)
def test_leaves_and_iter_match_optree(tree, none_is_leaf):
    expected = optree.tree_leaves(tree, none_is_leaf=none_is_leaf)
    assert_same_leaves(oxtree.tree_leaves(tree, none_is_leaf=none_is_leaf), expected)
    iterator = oxtree.tree_iter(tree, none_is_leaf=none_is_leaf)
    assert iter(iterator) is iterator
    assert_same_leaves(list(iterator), expected)
    with pytest.raises(StopIteration):
        next(iterator)


@parametrize(tree=TREES, none_is_leaf=NIL)
def test_tree_is_leaf_on_every_subtree(tree, none_is_leaf):
    for sub in iter_subtrees(tree):
        result = oxtree.tree_is_leaf(sub, none_is_leaf=none_is_leaf)
        assert type(result) is bool
        assert result == optree.tree_is_leaf(sub, none_is_leaf=none_is_leaf), sub


@parametrize(tree=TREES, none_is_leaf=NIL)
def test_all_leaves(tree, none_is_leaf):
    leaves = optree.tree_leaves(tree, none_is_leaf=none_is_leaf)
    assert oxtree.all_leaves(leaves, none_is_leaf=none_is_leaf) is True
    assert oxtree.all_leaves(iter(leaves), none_is_leaf=none_is_leaf) is True
    assert oxtree.all_leaves([tree], none_is_leaf=none_is_leaf) == optree.all_leaves(
        [tree], none_is_leaf=none_is_leaf
    )
    children = node_children(tree) or []
    assert oxtree.all_leaves(children, none_is_leaf=none_is_leaf) == optree.all_leaves(
        children, none_is_leaf=none_is_leaf
    )


def test_all_leaves_simple_cases():
    assert oxtree.all_leaves([]) is True
    assert oxtree.all_leaves([1, "a", OPAQUE]) is True
    assert oxtree.all_leaves([1, (2,)]) is False
    assert oxtree.all_leaves([None]) is False
    assert oxtree.all_leaves([None], none_is_leaf=True) is True
    assert oxtree.all_leaves([(1,)], is_leaf=lambda x: isinstance(x, tuple)) is True
    assert oxtree.all_leaves(x for x in [1, 2]) is True


def test_tree_is_leaf_simple_cases():
    assert oxtree.tree_is_leaf(1) is True
    assert oxtree.tree_is_leaf(None) is False
    assert oxtree.tree_is_leaf(None, none_is_leaf=True) is True
    assert oxtree.tree_is_leaf(()) is False
    assert oxtree.tree_is_leaf((1,)) is False
    assert oxtree.tree_is_leaf((1,), is_leaf=lambda x: True) is True


@parametrize(tree=TREES, none_is_leaf=NIL, namespace=["", "some.namespace"])
def test_namespace_argument(tree, none_is_leaf, namespace):
    spec, expected = ox_and_opt_structure(tree, none_is_leaf, namespace=namespace)
    assert repr(spec) == repr(expected)
    assert spec.namespace == expected.namespace
    assert_same_leaves(
        oxtree.tree_leaves(tree, none_is_leaf=none_is_leaf, namespace=namespace),
        optree.tree_leaves(tree, none_is_leaf=none_is_leaf, namespace=namespace),
    )


# --------------------------------------------------------------------------------------------------
# Dict ordering.


def test_dict_leaves_sorted_but_unflatten_keeps_insertion_order():
    tree = {"c": 3, "a": 1, "b": {"z": 26, "y": 25}}
    leaves, spec = oxtree.tree_flatten(tree)
    assert leaves == [1, 25, 26, 3]
    assert repr(spec) == "PyTreeSpec({'a': *, 'b': {'y': *, 'z': *}, 'c': *})"
    rebuilt = oxtree.tree_unflatten(spec, leaves)
    assert rebuilt == tree
    assert list(rebuilt) == ["c", "a", "b"]
    assert list(rebuilt["b"]) == ["z", "y"]
    mapped = oxtree.tree_map(lambda x: -x, tree)
    assert mapped == {"c": -3, "a": -1, "b": {"z": -26, "y": -25}}
    assert list(mapped) == ["c", "a", "b"]
    assert list(mapped["b"]) == ["z", "y"]


def test_ordereddict_keeps_its_own_order():
    tree = OrderedDict([("c", 3), ("a", 1)])
    leaves, spec = oxtree.tree_flatten(tree)
    assert leaves == [3, 1]
    assert repr(spec) == "PyTreeSpec(OrderedDict({'c': *, 'a': *}))"
    assert list(oxtree.tree_unflatten(spec, leaves)) == ["c", "a"]


def test_defaultdict_leaves_sorted_order_restored():
    tree = defaultdict(list, {"b": 2, "a": 1})
    leaves, spec = oxtree.tree_flatten(tree)
    assert leaves == [1, 2]
    rebuilt = spec.unflatten(leaves)
    assert list(rebuilt) == ["b", "a"]
    assert list(oxtree.tree_map(str, tree)) == ["b", "a"]


class Label(str):
    """A str subclass: compares with str directly."""

    __slots__ = ()


class Zed:
    """Orderable among its own kind only. Its type sorts before `int` by bare name ('Zed' <
    'int') but after it by module-qualified name ('builtins.int' < 'test_engine.Zed')."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Zed):
            return NotImplemented
        return self.value < other.value

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, Zed):
            return NotImplemented
        return self.value > other.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Zed) and other.value == self.value

    def __repr__(self) -> str:
        return f"Zed({self.value})"


# Types whose __module__ is not a str (some dynamically made classes): their type name for the
# mixed-type ordering cannot be formed, which must not turn into an error.
ModulelessZed = type("ModulelessZed", (Zed,), {"__module__": None})
IntModuleZed = type("IntModuleZed", (Zed,), {})
IntModuleZed.__module__ = 5


def _str_keys_with_deleted_entries() -> dict[str, int]:
    """A dict whose table holds deleted entries between live ones."""
    d = {"d": 1, "x": 0, "b": 2, "y": 0, "a": 3}
    del d["x"], d["y"]
    d["c"] = 4
    return d


class _Holder:
    """Instances whose attribute dicts share one key table (a split table)."""


def _instance_dict() -> dict[str, Any]:
    _Holder().z = 0
    holder = _Holder()
    holder.z, holder.b, holder.a = 1, 2, 3
    return vars(holder)


KEY_ORDER_CASES = {
    "str_keys_with_deleted_entries": _str_keys_with_deleted_entries(),
    "instance_dict": _instance_dict(),
    "sixteen_str_keys": {f"k{i:02d}": i for i in reversed(range(16))},
    "seventeen_str_keys": {f"k{i:02d}": i for i in reversed(range(17))},
    "comparable_int_float": {2: "a", 1.5: "b", 0: "c"},
    "str_and_int": {"b": 1, 2: 2, "a": 3, 1: 4},
    "type_name_qualified": {Zed(2): "z2", 5: "five", Zed(1): "z1", "s": "str"},
    "partial_order_frozensets": {
        frozenset({2}): "a",
        frozenset({1}): "b",
        frozenset({1, 2}): "c",
        frozenset({3}): "d",
    },
    "incomparable_objects": {OPAQUE: 1, Point: 2, make_default: 3},
    "none_key": {None: 0, 1: 1, "a": 2},
    "bool_and_int_keys": {True: "t", 0: "z", 2: "two"},
    "numpy_scalar_keys": {np.int64(2): "a", 1: "b", "c": "c", np.float32(0.5): "d"},
    "complex_keys": {2j: 1, 1j: 2, "a": 3},
    "bytes_and_str_keys": {b"b": 1, "a": 2, b"a": 3},
    "str_subclass_keys": {Label("b"): 1, "a": 2, Label("c"): 3},
    "moduleless_key_type": {ModulelessZed(2): 1, "a": 2, ModulelessZed(1): 3},
    "int_module_key_type": {IntModuleZed(2): 1, "a": 2, IntModuleZed(1): 3},
    "equal_int_float_bool": {1.0: "f", 0: "z", 2: "t"},
}


@parametrize(case=list(KEY_ORDER_CASES), none_is_leaf=NIL)
def test_dict_key_order_matches_optree(case, none_is_leaf):
    tree = KEY_ORDER_CASES[case]
    for wrap in (lambda d: d, lambda d: defaultdict(int, d), lambda d: [d, (d,)]):
        wrapped = wrap(tree)
        leaves, spec = oxtree.tree_flatten(wrapped, none_is_leaf=none_is_leaf)
        expected_leaves, expected_spec = optree.tree_flatten(wrapped, none_is_leaf=none_is_leaf)
        assert_same_leaves(leaves, expected_leaves)
        assert repr(spec) == repr(expected_spec)
        assert_same_tree(spec.unflatten(leaves), wrapped)


def test_type_name_fallback_uses_qualified_names():
    # 'builtins.int' < 'builtins.str' < 'test_engine.Zed'
    leaves = oxtree.tree_leaves({Zed(2): "z2", 5: "five", Zed(1): "z1", "s": "str"})
    assert leaves == ["five", "str", "z1", "z2"]


# --------------------------------------------------------------------------------------------------
# tree_map and tree_map_.


@parametrize(tree=TREES, none_is_leaf=NIL)
def test_tree_map_one_tree(tree, none_is_leaf):
    result = oxtree.tree_map(Rec, tree, none_is_leaf=none_is_leaf)
    assert_same_tree(result, optree.tree_map(Rec, tree, none_is_leaf=none_is_leaf))
    assert_same_tree(oxtree.tree_map(lambda x: x, tree, none_is_leaf=none_is_leaf), tree)

    calls, expected_calls = [], []
    oxtree.tree_map(lambda x: calls.append(x), tree, none_is_leaf=none_is_leaf)
    optree.tree_map(lambda x: expected_calls.append(x), tree, none_is_leaf=none_is_leaf)
    assert_same_leaves(calls, expected_calls)


@parametrize(tree=TREES, none_is_leaf=NIL)
def test_tree_map_two_and_three_trees(tree, none_is_leaf):
    second = optree.tree_map(Rec, tree, none_is_leaf=none_is_leaf)
    third = widen(tree, none_is_leaf, optree)  # subtrees where `tree` has leaves
    for rests in ((second,), (third,), (second, third), (reversed_dicts(third), second)):
        result = oxtree.tree_map(Rec, tree, *rests, none_is_leaf=none_is_leaf)
        expected = optree.tree_map(Rec, tree, *rests, none_is_leaf=none_is_leaf)
        assert_same_tree(result, expected)


@parametrize(tree=TREES, none_is_leaf=NIL)
def test_tree_map_keeps_first_trees_dict_order(tree, none_is_leaf):
    other = reversed_dicts(tree)
    result = oxtree.tree_map(lambda a, b: a, tree, other, none_is_leaf=none_is_leaf)
    assert_same_tree(result, tree)


@parametrize(tree=TREES, none_is_leaf=NIL)
def test_tree_map_inplace(tree, none_is_leaf):
    second = widen(tree, none_is_leaf, optree)
    calls, expected_calls = [], []
    result = oxtree.tree_map_(lambda *a: calls.append(a), tree, second, none_is_leaf=none_is_leaf)
    assert result is tree
    optree.tree_map_(lambda *a: expected_calls.append(a), tree, second, none_is_leaf=none_is_leaf)
    assert len(calls) == len(expected_calls)
    for got, want in zip(calls, expected_calls, strict=True):
        assert_same_leaves(list(got), list(want))


def test_tree_map_compatible_containers_like_optree():
    # optree accepts these pairs: dict-likes match on their key sets, deque maxlen is ignored.
    cases = [
        ({"b": 1, "a": 2}, OrderedDict(a=3, b=4)),
        (OrderedDict(b=1, a=2), {"a": 3, "b": 4}),
        (OrderedDict(b=1, a=2), OrderedDict(a=3, b=4)),
        ({"b": 1, "a": 2}, defaultdict(int, a=3, b=4)),
        (defaultdict(list, a=1), defaultdict(int, a=2)),
        (defaultdict(list, a=1), {"a": 2}),
        (deque([1]), deque([2], maxlen=3)),
    ]
    for first, second in cases:
        result = oxtree.tree_map(Rec, first, second)
        assert_same_tree(result, optree.tree_map(Rec, first, second))


def test_tree_map_flatten_up_to_passes_subtrees():
    got = oxtree.tree_map(
        lambda x, y: (x, y), (1, {"b": 2, "a": 3}), ([4, 5], {"a": None, "b": {}})
    )
    assert got == ((1, [4, 5]), {"b": (2, {}), "a": (3, None)})
    assert list(got[1]) == ["b", "a"]


def test_tree_map_none_handling():
    assert oxtree.tree_map(lambda x: 1, (None, 2)) == (None, 1)
    assert oxtree.tree_map(lambda x: 1, (None, 2), none_is_leaf=True) == (1, 1)
    assert oxtree.tree_map(lambda x, y: y, (None, 2), (None, 3)) == (None, 3)
    assert oxtree.tree_map(lambda x, y: y, (None, 2), ([5], 3), none_is_leaf=True) == ([5], 3)


# --------------------------------------------------------------------------------------------------
# is_leaf callbacks.


def _is_tuple(x):
    return isinstance(x, tuple)


def _is_list(x):
    return type(x) is list


def _is_dict(x):
    return isinstance(x, dict)


def _is_none(x):
    return x is None


def _always(x):
    return True


def _never(x):
    return False


def _is_namedtuple(x):
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


def _truthy_int(x):
    return 1 if isinstance(x, list | deque) else 0


PREDICATES = [
    _is_tuple,
    _is_list,
    _is_dict,
    _is_none,
    _always,
    _never,
    _is_namedtuple,
    _truthy_int,
]


@parametrize(tree=NODE_TREES, is_leaf=PREDICATES, none_is_leaf=NIL)
def test_is_leaf_callbacks(tree, is_leaf, none_is_leaf):
    calls, expected_calls = [], []

    def recording(x):
        calls.append(x)
        return is_leaf(x)

    def expected_recording(x):
        expected_calls.append(x)
        return is_leaf(x)

    leaves, spec = oxtree.tree_flatten(tree, recording, none_is_leaf=none_is_leaf)
    expected_leaves, expected_spec = optree.tree_flatten(
        tree, expected_recording, none_is_leaf=none_is_leaf
    )
    assert_same_leaves(leaves, expected_leaves)
    assert repr(spec) == repr(expected_spec)
    assert_same_leaves(calls, expected_calls)
    assert_same_tree(spec.unflatten(leaves), tree)

    kwargs = {"is_leaf": is_leaf, "none_is_leaf": none_is_leaf}
    assert_same_leaves(oxtree.tree_leaves(tree, **kwargs), expected_leaves)
    assert_same_leaves(list(oxtree.tree_iter(tree, **kwargs)), expected_leaves)
    assert repr(oxtree.tree_structure(tree, **kwargs)) == repr(expected_spec)
    assert oxtree.tree_is_leaf(tree, **kwargs) == optree.tree_is_leaf(tree, **kwargs)
    assert oxtree.all_leaves([tree], **kwargs) == optree.all_leaves([tree], **kwargs)
    assert_same_tree(oxtree.tree_map(Rec, tree, **kwargs), optree.tree_map(Rec, tree, **kwargs))
    wide = widen(tree, none_is_leaf, optree)
    assert_same_tree(
        oxtree.tree_map(Rec, tree, wide, **kwargs), optree.tree_map(Rec, tree, wide, **kwargs)
    )


def test_is_leaf_stops_descent():
    tree = (1, (2, 3), [4, (5,)])
    pairs = oxtree.tree_leaves(tree, is_leaf=lambda x: isinstance(x, tuple) and len(x) == 2)
    assert pairs == [1, (2, 3), 4, 5]
    assert pairs[1] is tree[1]
    leaves, spec = oxtree.tree_flatten(tree, is_leaf=lambda x: isinstance(x, tuple))
    assert leaves == [tree]
    assert leaves[0] is tree
    assert repr(spec) == "PyTreeSpec(*)"
    assert oxtree.tree_map(len, [(1, 2), (3,)], is_leaf=lambda x: isinstance(x, tuple)) == [2, 1]


# --------------------------------------------------------------------------------------------------
# Treedef attributes and methods.


@parametrize(tree=TREES, none_is_leaf=NIL)
def test_treespec_attributes(tree, none_is_leaf):
    spec, expected = ox_and_opt_structure(tree, none_is_leaf)
    assert spec.num_leaves == expected.num_leaves
    assert spec.num_nodes == expected.num_nodes
    assert spec.num_children == expected.num_children
    assert len(spec) == spec.num_leaves
    assert spec.type is expected.type
    assert isinstance(spec.kind, oxtree.PyTreeKind)
    assert int(spec.kind) == int(expected.kind)
    assert spec.none_is_leaf is none_is_leaf
    assert spec.namespace == expected.namespace == ""
    assert spec.is_leaf() is expected.is_leaf()
    assert spec.is_leaf(strict=True) is expected.is_leaf(strict=True)
    assert spec.is_leaf(strict=False) is expected.is_leaf(strict=False)


@parametrize(tree=TREES, none_is_leaf=NIL)
def test_children_and_child(tree, none_is_leaf):
    spec, expected = ox_and_opt_structure(tree, none_is_leaf)
    children = spec.children()
    assert type(children) is list
    assert [repr(c) for c in children] == [repr(c) for c in expected.children()]
    assert len(children) == spec.num_children
    for index, child in enumerate(children):
        assert type(child) is oxtree.PyTreeSpec
        assert child.none_is_leaf is none_is_leaf
        assert spec.child(index) == child
        assert repr(spec.child(index)) == repr(expected.child(index))
    if children:
        assert repr(spec.child(-1)) == repr(expected.child(-1))
    assert sum(c.num_leaves for c in children) == spec.num_leaves or spec.is_leaf()


@parametrize(tree=TREES, none_is_leaf=NIL)
def test_flatten_up_to(tree, none_is_leaf):
    leaves, spec = oxtree.tree_flatten(tree, none_is_leaf=none_is_leaf)
    assert_same_leaves(spec.flatten_up_to(tree), leaves)
    expected_spec = optree.tree_structure(tree, none_is_leaf=none_is_leaf)
    for other in (widen(tree, none_is_leaf, optree), reversed_dicts(tree)):
        assert_same_leaves(spec.flatten_up_to(other), expected_spec.flatten_up_to(other))


@parametrize(tree=TREES, inner=list(INNER_TREES.values()), none_is_leaf=NIL)
def test_compose(tree, inner, none_is_leaf):
    outer, expected_outer = ox_and_opt_structure(tree, none_is_leaf)
    inner_spec, expected_inner = ox_and_opt_structure(inner, none_is_leaf)
    composed = outer.compose(inner_spec)
    expected = expected_outer.compose(expected_inner)
    assert type(composed) is oxtree.PyTreeSpec
    assert repr(composed) == repr(expected)
    assert composed.num_leaves == outer.num_leaves * inner_spec.num_leaves
    assert composed.num_nodes == expected.num_nodes
    leaves = list(range(composed.num_leaves))
    assert_same_tree(composed.unflatten(leaves), expected.unflatten(leaves))


def test_compose_example():
    outer = oxtree.tree_structure((1, [2]))
    inner = oxtree.tree_structure({"b": 0, "a": 0})
    composed = outer.compose(inner)
    assert repr(composed) == "PyTreeSpec(({'a': *, 'b': *}, [{'a': *, 'b': *}]))"
    assert composed == oxtree.tree_structure(({"a": 0, "b": 0}, [{"a": 0, "b": 0}]))


# --------------------------------------------------------------------------------------------------
# Equality and hashing.


def test_equality_and_hash_pairwise_match_optree():
    ox_specs, opt_specs, labels = [], [], []
    for name, tree in CORPUS.items():
        for none_is_leaf in NIL:
            spec, expected = ox_and_opt_structure(tree, none_is_leaf)
            ox_specs.append(spec)
            opt_specs.append(expected)
            labels.append(f"{name}/none_is_leaf={none_is_leaf}")
    disagreements = []
    for i, (a, oa) in enumerate(zip(ox_specs, opt_specs, strict=True)):
        for j, (b, ob) in enumerate(zip(ox_specs, opt_specs, strict=True)):
            equal = oa == ob
            if (a == b) is not equal or (a != b) is equal:
                disagreements.append(f"{labels[i]} vs {labels[j]}: optree says equal={equal}")
            elif equal and hash(a) != hash(b):
                disagreements.append(f"{labels[i]} vs {labels[j]}: equal but hashes differ")
    assert not disagreements, "\n".join(disagreements[:20])


@parametrize(tree=TREES, none_is_leaf=NIL)
def test_equal_to_fresh_structure(tree, none_is_leaf):
    spec = oxtree.tree_structure(tree, none_is_leaf=none_is_leaf)
    again = oxtree.tree_structure(tree, none_is_leaf=none_is_leaf)
    assert spec == again
    assert (spec != again) is False
    assert hash(spec) == hash(again) == hash(spec)
    # Leaf values do not matter.
    zeros = optree.tree_map(lambda x: 0, tree, none_is_leaf=none_is_leaf)
    assert spec == oxtree.tree_structure(zeros, none_is_leaf=none_is_leaf)
    # none_is_leaf always matters.
    other = oxtree.tree_structure(tree, none_is_leaf=not none_is_leaf)
    assert spec != other
    assert (spec == other) is False
    # Comparing with something else is just unequal.
    assert spec != 5
    assert (spec == "spec") is False


def test_equality_rules():
    def s(tree, **kwargs):
        return oxtree.tree_structure(tree, **kwargs)

    # dicts: key sets matter, insertion order does not.
    assert s({"a": 1, "b": 2}) == s({"b": 3, "a": 4})
    assert hash(s({"a": 1, "b": 2})) == hash(s({"b": 3, "a": 4}))
    assert s({"a": 1, "b": 2}) != s({"a": 1, "c": 2})
    assert s(defaultdict(list, a=1, b=2)) == s(defaultdict(list, b=1, a=2))
    # OrderedDict: order matters.
    assert s(OrderedDict(a=1, b=2)) != s(OrderedDict(b=1, a=2))
    assert s(OrderedDict(a=1, b=2)) == s(OrderedDict(a=5, b=6))
    # different node types
    assert s({"a": 1}) != s(OrderedDict(a=1))
    assert s({"a": 1}) != s(defaultdict(list, a=1))
    assert s((1, 2)) != s([1, 2])
    assert s((1, 2)) != s(Point(1, 2))
    assert s(Point(1, 2)) != s(namedtuple("Point", ["x", "y"])(1, 2))
    assert s((1, 2)) != s((1, 2, 3))
    # defaultdict factory and deque maxlen are part of the structure.
    assert s(defaultdict(list, a=1)) != s(defaultdict(int, a=1))
    assert s(deque([1])) != s(deque([1], maxlen=1))
    assert s(deque([1], maxlen=4)) == s(deque([2], maxlen=4))
    # none_is_leaf
    assert s(1) != s(1, none_is_leaf=True)
    assert s((None, 1)) != s((None, 1), none_is_leaf=True)
    assert s(None) != s(1)
    assert s(None, none_is_leaf=True) == s(1, none_is_leaf=True)


# --------------------------------------------------------------------------------------------------
# Pickle and copy.


@parametrize(tree=TREES, none_is_leaf=NIL)
def test_pickle_round_trip(tree, none_is_leaf):
    leaves, spec = oxtree.tree_flatten(tree, none_is_leaf=none_is_leaf)
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        loaded = pickle.loads(pickle.dumps(spec, protocol=protocol))
        assert type(loaded) is oxtree.PyTreeSpec
        assert loaded == spec
        assert repr(loaded) == repr(spec)
        assert hash(loaded) == hash(spec)
        assert loaded.none_is_leaf is none_is_leaf
        assert_same_tree(loaded.unflatten(leaves), tree, copied_keys=True)


@parametrize(tree=TREES, none_is_leaf=NIL)
def test_copy_and_deepcopy(tree, none_is_leaf):
    leaves, spec = oxtree.tree_flatten(tree, none_is_leaf=none_is_leaf)
    for copied in (copy.copy(spec), copy.deepcopy(spec)):
        assert type(copied) is oxtree.PyTreeSpec
        assert copied == spec
        assert repr(copied) == repr(spec)
        assert_same_tree(copied.unflatten(leaves), tree, copied_keys=True)


def test_defaultdict_factory_kept():
    tree = {"outer": defaultdict(make_default, {"k": 1})}
    leaves, spec = oxtree.tree_flatten(tree)
    for rebuilt in (
        spec.unflatten(leaves),
        oxtree.tree_map(lambda x: x, tree),
        pickle.loads(pickle.dumps(spec)).unflatten(leaves),
    ):
        inner = rebuilt["outer"]
        assert type(inner) is defaultdict
        assert inner.default_factory is make_default
        assert inner["missing"] == "made"
    assert (
        oxtree.tree_unflatten(oxtree.tree_structure(defaultdict(None)), []).default_factory is None
    )


def test_deque_maxlen_kept():
    for maxlen in (None, 0, 2, 5):
        tree = [deque([1, 2][: maxlen or 2], maxlen=maxlen)]
        leaves, spec = oxtree.tree_flatten(tree)
        for rebuilt in (
            spec.unflatten(leaves),
            oxtree.tree_map(lambda x: x, tree),
            copy.deepcopy(spec).unflatten(leaves),
        ):
            assert type(rebuilt[0]) is deque
            assert rebuilt[0].maxlen == maxlen
            assert list(rebuilt[0]) == list(tree[0])


def test_namedtuple_types_kept():
    tree = [Point(1, 2), Vector(3), Vector(dx=1, dy=2)]
    rebuilt = oxtree.tree_unflatten(*reversed(oxtree.tree_flatten(tree)))
    assert [type(x) for x in rebuilt] == [Point, Vector, Vector]
    assert rebuilt == tree


@pytest.mark.parametrize(
    "structseq",
    [sys.flags, sys.version_info, sys.float_info, sys.hash_info, sys.thread_info],
    ids=["flags", "version_info", "float_info", "hash_info", "thread_info"],
)
def test_struct_sequences_from_sys(structseq):
    # Some struct sequence types cannot be instantiated from Python (sys.flags, sys.version_info):
    # they still flatten like any struct sequence; only rebuilding them fails, as in optree.
    tree = [structseq, {"k": structseq}]
    leaves, spec = oxtree.tree_flatten(tree)
    expected_leaves, expected_spec = optree.tree_flatten(tree)
    assert_same_leaves(leaves, expected_leaves)
    assert repr(spec) == repr(expected_spec)
    assert int(spec.child(0).kind) == int(optree.PyTreeKind.STRUCTSEQUENCE)
    assert spec.child(0).type is type(structseq)
    assert spec == oxtree.tree_structure(tree)
    try:
        expected = optree.tree_unflatten(expected_spec, leaves)
    except TypeError:
        with pytest.raises(TypeError):
            spec.unflatten(leaves)
    else:
        assert_same_tree(spec.unflatten(leaves), expected)


def test_shared_references_are_not_cycles():
    shared = [1, {"a": 2}]
    tree = [shared, (shared, {"k": shared})]
    leaves, spec = oxtree.tree_flatten(tree)
    assert leaves == [1, 2, 1, 2, 1, 2]
    rebuilt = spec.unflatten(leaves)
    assert rebuilt == tree
    assert rebuilt[0] is not rebuilt[1][0]  # unflatten builds fresh containers


# --------------------------------------------------------------------------------------------------
# Hypothesis: differential tests against optree.


@HYPOTHESIS_SETTINGS
@given(tree=trees(), none_is_leaf=st.booleans())
def test_hypothesis_flatten_unflatten(tree, none_is_leaf):
    leaves, spec = oxtree.tree_flatten(tree, none_is_leaf=none_is_leaf)
    expected_leaves, expected_spec = optree.tree_flatten(tree, none_is_leaf=none_is_leaf)
    assert_same_leaves(leaves, expected_leaves)
    assert repr(spec) == repr(expected_spec)
    assert spec.num_nodes == expected_spec.num_nodes
    assert_same_tree(spec.unflatten(leaves), tree)
    assert_same_leaves(oxtree.tree_leaves(tree, none_is_leaf=none_is_leaf), expected_leaves)
    assert pickle.loads(pickle.dumps(spec)) == spec


@HYPOTHESIS_SETTINGS
@given(
    tree=trees(max_leaves=16),
    inner=trees(max_leaves=4),
    none_is_leaf=st.booleans(),
    is_leaf=st.sampled_from([None, *PREDICATES]),
)
def test_hypothesis_treespec_methods(tree, inner, none_is_leaf, is_leaf):
    kwargs = {"is_leaf": is_leaf, "none_is_leaf": none_is_leaf}
    leaves, spec = oxtree.tree_flatten(tree, **kwargs)
    expected_leaves, expected = optree.tree_flatten(tree, **kwargs)
    assert_same_leaves(leaves, expected_leaves)
    assert repr(spec) == repr(expected)
    assert (spec.num_leaves, spec.num_nodes, spec.num_children) == (
        expected.num_leaves,
        expected.num_nodes,
        expected.num_children,
    )
    assert int(spec.kind) == int(expected.kind)
    assert spec.type is expected.type
    assert [repr(c) for c in spec.children()] == [repr(c) for c in expected.children()]
    assert_same_tree(spec.unflatten(leaves), tree)
    wide = widen(tree, none_is_leaf, optree) if is_leaf is None else tree
    assert_same_leaves(spec.flatten_up_to(wide), expected.flatten_up_to(wide))
    inner_spec = oxtree.tree_structure(inner, none_is_leaf=none_is_leaf)
    composed = spec.compose(inner_spec)
    expected_composed = expected.compose(optree.tree_structure(inner, none_is_leaf=none_is_leaf))
    assert repr(composed) == repr(expected_composed)
    rebuilt = expected_composed.unflatten(range(expected_composed.num_leaves))
    assert composed == oxtree.tree_structure(rebuilt, none_is_leaf=none_is_leaf)


@HYPOTHESIS_SETTINGS
@given(tree=trees(), none_is_leaf=st.booleans())
def test_hypothesis_tree_map_one(tree, none_is_leaf):
    result = oxtree.tree_map(Rec, tree, none_is_leaf=none_is_leaf)
    assert_same_tree(result, optree.tree_map(Rec, tree, none_is_leaf=none_is_leaf))


@HYPOTHESIS_SETTINGS
@given(tree=trees(max_leaves=12), none_is_leaf=st.booleans(), data=st.data())
def test_hypothesis_tree_map_two(tree, none_is_leaf, data):
    # The second tree has the first one's structure, with some leaves replaced by subtrees.
    count = optree.tree_structure(tree, none_is_leaf=none_is_leaf).num_leaves
    keep = object()
    replacements = data.draw(
        st.lists(st.one_of(st.just(keep), trees(max_leaves=4)), min_size=count, max_size=count)
    )
    leaves, spec = optree.tree_flatten(tree, none_is_leaf=none_is_leaf)
    other = spec.unflatten(
        leaf if new is keep else new for leaf, new in zip(leaves, replacements, strict=True)
    )
    result = oxtree.tree_map(Rec, tree, other, none_is_leaf=none_is_leaf)
    assert_same_tree(result, optree.tree_map(Rec, tree, other, none_is_leaf=none_is_leaf))


@HYPOTHESIS_SETTINGS
@given(first=trees(max_leaves=8), second=trees(max_leaves=8), none_is_leaf=st.booleans())
def test_hypothesis_tree_map_independent_trees(first, second, none_is_leaf):
    # Unrelated trees: oxtree must accept exactly what optree accepts.
    try:
        expected = optree.tree_map(Rec, first, second, none_is_leaf=none_is_leaf)
    except ValueError:
        with pytest.raises(ValueError, match=r"tree"):
            oxtree.tree_map(Rec, first, second, none_is_leaf=none_is_leaf)
    else:
        assert_same_tree(oxtree.tree_map(Rec, first, second, none_is_leaf=none_is_leaf), expected)


@HYPOTHESIS_SETTINGS
@given(first=trees(max_leaves=6), second=trees(max_leaves=6), none_is_leaf=st.booleans())
def test_hypothesis_equality_matches_optree(first, second, none_is_leaf):
    a, oa = ox_and_opt_structure(first, none_is_leaf)
    b, ob = ox_and_opt_structure(second, none_is_leaf)
    assert (a == b) is (oa == ob)
    assert (a != b) is (oa != ob)
    if a == b:
        assert hash(a) == hash(b)


@pytest.mark.parametrize("n", [0, 1, 2, 7, 8, 9, 15, 16, 17, 40])
def test_dict_order_round_trips_at_every_size(n: int) -> None:
    # Sizes around the engine's small-dict paths (8 positions packed inline, 16 keys sorted
    # by insertion sort): leaves in sorted order, insertion order rebuilt, through pickle too.
    import pickle
    import random

    rng = random.Random(n)
    keys = [f"k{i:03d}" for i in range(n)]
    rng.shuffle(keys)
    for tree in ({k: k for k in keys}, {**{k: k for k in keys}, 1: "int"}):
        leaves, spec = oxtree.tree_flatten(tree)
        assert leaves == [tree[k] for k in sorted(tree, key=lambda k: (type(k).__name__, k))]
        for s in (spec, pickle.loads(pickle.dumps(spec))):
            rebuilt = s.unflatten(leaves)
            assert list(rebuilt) == list(tree)
            assert rebuilt == tree


def test_dicts_with_the_same_key_objects_keep_their_own_orders() -> None:
    # Small str-keyed dicts whose keys are the very same objects share one sorted key list
    # inside the engine; each treespec must still rebuild its own dict's insertion order,
    # whichever order came first, and with keys outside ASCII (not compared as bytes).
    keys = ["weight", "bias", "scale", "é", "日本", ""]
    trees = [
        {k: i for i, k in enumerate(keys)},
        {k: i for i, k in enumerate(reversed(keys))},
        {k: i for i, k in enumerate(keys)},
        {k: i for i, k in enumerate(sorted(keys))},
    ]
    specs = []
    for tree in trees:
        leaves, spec = oxtree.tree_flatten(tree)
        assert leaves == [tree[k] for k in sorted(keys)]
        assert list(spec.unflatten(leaves)) == list(tree)
        specs.append(spec)
    assert specs[0] == specs[1] == specs[2] == specs[3]
    # Node data is a copy: changing it changes no treespec, even one sharing the key list.
    data = specs[0].node_data()
    data.append("intruder")
    data.reverse()
    assert specs[2].node_data() == sorted(keys)
    assert list(specs[2].unflatten(range(len(keys)))) == keys


@pytest.mark.parametrize("n", [1, 2, 3, 8, 9, 16, 17, 40])
@pytest.mark.parametrize("face", ["optree", "jax"])
def test_tree_map_pairs_values_of_dicts_by_key(n: int, face: str) -> None:
    # Dicts small and large (the engine reads their values off the table when they hold the
    # first tree's very key objects), with the same key objects in the same order, another
    # order, with one key swapped for an equal copy, and with one missing: values are paired
    # by key, and a missing key is reported as optree/JAX report it.
    import random
    import re

    rng = random.Random(n)
    keys = [f"k{i:03d}" for i in range(n)]
    rng.shuffle(keys)
    tree = {k: i for i, k in enumerate(keys)}
    equal_copy = "".join(list(keys[n // 2]))
    others = [
        {k: -v for k, v in tree.items()},
        {k: -tree[k] for k in reversed(keys)},
        {(equal_copy if k == equal_copy else k): -v for k, v in tree.items()},
    ]
    tree_map = oxtree.tree_map if face == "optree" else oxtree.tree_util.tree_map
    for other in others:
        result = tree_map(lambda a, b: (a, b), tree, other)
        # optree rebuilds the first tree's insertion order, JAX sorts.
        assert list(result) == (keys if face == "optree" else sorted(keys))
        assert result == {k: (v, -v) for k, v in tree.items()}
    missing = {k: 0 for k in keys[:-1]} | {"zz": 0}
    peer = optree.tree_map if face == "optree" else __import__("jax").tree_util.tree_map
    with pytest.raises(ValueError, match=r"(?i)key") as want:
        peer(lambda a, b: a, tree, missing)
    with pytest.raises(ValueError, match=re.escape(str(want.value).splitlines()[0])):
        tree_map(lambda a, b: a, tree, missing)
