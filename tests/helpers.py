"""The shared corpus of pytrees and the comparison helpers every test module uses.

Everything here is plain Python: the corpus, the parametrize helper, a structural comparator that
checks node types, dict key order and leaf identity, and a hypothesis strategy for random trees.
The classes the trees are made of live in nodes.py (shared with fuzz/).
"""

from __future__ import annotations

import itertools
import operator
import os
import time
from collections import OrderedDict, defaultdict, deque
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from nodes import (
    DefaultDictSubclass,
    DequeSubclass,
    DictSubclass,
    EmptyNamedTuple,
    EmptyTyped,
    ListSubclass,
    Opaque,
    OrderedDictSubclass,
    Pair,
    Point,
    Rec,
    SubPoint,
    Triple,
    TupleSubclass,
    Vector,
    make_default,
)

NONE_IS_LEAF_OPTIONS = (False, True)

# Hypothesis settings shared by the differential tests: small and deterministic-enough to keep the
# whole suite fast on two cores.
HYPOTHESIS_SETTINGS = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


OPAQUE = Opaque("leaf")
OPAQUE_KEY_1 = Opaque("key1")
OPAQUE_KEY_2 = Opaque("key2")
ARRAY = np.arange(6, dtype=np.float64).reshape(2, 3)
ARRAY_0D = np.array(7)
NAN = float("nan")
BIG_INT = 10**40
SHARED_LIST = [1, OPAQUE]
STAT = os.stat(".")
GMTIME = time.gmtime(0)


def chain(depth: int, leaf: Any = 0, wrap: Callable[[Any], Any] = lambda x: [x]) -> Any:
    """A chain of `depth` nested one-element containers around `leaf`, built iteratively."""
    tree = leaf
    for _ in range(depth):
        tree = wrap(tree)
    return tree


# --------------------------------------------------------------------------------------------------
# Leaves: objects that are leaves whatever none_is_leaf says.

LEAVES_BY_NAME: dict[str, Any] = {
    "int": 1,
    "zero": 0,
    "negative_int": -7,
    "big_int": BIG_INT,
    "bool": True,
    "float": 2.5,
    "nan": NAN,
    "complex": 1 + 2j,
    "str": "hello",
    "empty_str": "",
    "bytes": b"xy",
    "object": OPAQUE,
    "ndarray": ARRAY,
    "ndarray_0d": ARRAY_0D,
    "numpy_scalar": np.float32(1.5),
    "set": {1, 2},
    "frozenset": frozenset({3}),
    "range": range(3),
    "type": int,
    "namedtuple_class": Point,
    "function": make_default,
    "tuple_subclass": TupleSubclass((1, 2)),
    "list_subclass": ListSubclass([1, 2]),
    "dict_subclass": DictSubclass(a=1),
    "ordereddict_subclass": OrderedDictSubclass(a=1),
    "defaultdict_subclass": DefaultDictSubclass(list, a=1),
    "deque_subclass": DequeSubclass([1]),
}
LEAVES: list[Any] = list(LEAVES_BY_NAME.values())

# --------------------------------------------------------------------------------------------------
# The corpus.

CORPUS: dict[str, Any] = {
    # None at the root.
    "none": None,
    # Single leaves at the root.
    **{f"leaf_{name}": leaf for name, leaf in LEAVES_BY_NAME.items()},
    # Empty containers of each kind.
    "empty_tuple": (),
    "empty_list": [],
    "empty_dict": {},
    "empty_ordereddict": OrderedDict(),
    "empty_defaultdict_list": defaultdict(list),
    "empty_defaultdict_nofactory": defaultdict(),
    "empty_deque": deque(),
    "empty_deque_maxlen0": deque(maxlen=0),
    "empty_deque_maxlen5": deque(maxlen=5),
    "empty_namedtuple": EmptyNamedTuple(),
    "empty_typed_namedtuple": EmptyTyped(),
    "nested_empties": ((), [], {}, [[]], ((),), {"a": {}}),
    # One of each node type.
    "tuple": (1, 2.5, "x"),
    "singleton_tuple": (OPAQUE,),
    "list": [1, "two", 3.0, OPAQUE],
    "dict_sorted": {"a": 1, "b": 2, "c": 3},
    "dict_unsorted": {"c": 3, "a": 1, "b": 2},
    "dict_int_keys_unsorted": {3: "c", 1: "a", 2: "b"},
    "dict_mixed_keys": {1: "a", "b": 2},
    "dict_mixed_keys_many": {"b": 1, 2: 2, "a": 3, 1: 4, None: 5, 1.5: 6, (0,): 7},
    "dict_int_float_keys": {2: "a", 1.5: "b", 0: "c"},
    "dict_tuple_keys": {(2,): "a", (1, "z"): "b", (1, "a"): "c"},
    "dict_object_keys": {OPAQUE_KEY_2: "two", OPAQUE_KEY_1: "one"},
    "dict_object_and_str_keys": {OPAQUE_KEY_2: 1, "k": 2, OPAQUE_KEY_1: 3},
    "ordereddict": OrderedDict([("z", 1), ("a", 2), ("m", 3)]),
    "ordereddict_mixed_keys": OrderedDict([(2, "x"), ("a", "y"), (1, "z")]),
    "defaultdict_list": defaultdict(list, {"b": 1, "a": 2}),
    "defaultdict_int": defaultdict(int, {2: "x", 1: "y"}),
    "defaultdict_custom_factory": defaultdict(make_default, {"z": [1], "y": (2,)}),
    "defaultdict_no_factory": defaultdict(None, {"k": 1}),
    "deque": deque([1, 2, 3]),
    "deque_maxlen": deque([1, 2], maxlen=5),
    "deque_full": deque([1, 2], maxlen=2),
    "namedtuple": Point(1, 2),
    "namedtuple_nested": Point(x=(1, [2]), y={"b": 3, "a": 4}),
    "namedtuple_subclass": SubPoint(OPAQUE, ARRAY),
    "triple": Triple("a", "b", "c"),
    "typed_namedtuple": Vector(1.0, "v"),
    "typed_namedtuple_default": Vector([1, 2]),
    "typed_namedtuple_pair": Pair((1,), Pair(2, 3)),
    "struct_time": GMTIME,
    "stat_result": STAT,
    # None in every position.
    "none_in_tuple": (None,),
    "none_in_tuple_middle": (1, None, 2),
    "none_in_list": [None, None],
    "none_in_dict": {"a": None, "b": 1},
    "none_nested": (1, None, [None, {"k": None, "j": (None,)}]),
    "none_in_namedtuple": Point(None, None),
    "none_in_typed_namedtuple": Vector(None, 1),
    "none_in_ordereddict": OrderedDict(b=None, a=1),
    "none_in_defaultdict": defaultdict(list, {"a": None}),
    "none_in_deque": deque([None, 1, None]),
    "none_deep": ((((None,),),),),
    "none_as_dict_key": {None: None, "a": 1},
    # numpy arrays inside nodes.
    "arrays": [ARRAY, {"w": ARRAY_0D, "b": np.zeros(2)}],
    # Shared references (a DAG, not a cycle).
    "shared_leaf": [OPAQUE, OPAQUE, (OPAQUE,)],
    "shared_subtree": [SHARED_LIST, {"a": SHARED_LIST}, (SHARED_LIST,)],
    # Containers holding leaf-like containers.
    "subclass_leaves": [TupleSubclass((1,)), ListSubclass([2]), DictSubclass(b=3)],
    # Mixed nesting of everything.
    "mixed": {
        "z": (1, [2, None], Point(x=3, y=deque([4, 5], maxlen=3))),
        "a": OrderedDict([("q", GMTIME), ("p", [OPAQUE, ARRAY])]),
        "m": defaultdict(list, {"k": Vector(dx={}, dy=[None, ()]), "c": EmptyNamedTuple()}),
        7: [{"y": 1, "x": 2}, Triple(None, (), "s")],
    },
    "stat_in_list": [STAT, GMTIME],
    "deep_chain_list": chain(30, "bottom"),
    "deep_chain_mixed": None,  # filled in below
    "wide_list": list(range(500)),
    "wide_dict": {f"k{i:03d}": i for i in reversed(range(200))},
}


def mixed_chain(depth: int, leaf: Any = 0) -> Any:
    """A chain cycling through every node type, built iteratively."""
    wrappers: list[Callable[[Any], Any]] = [
        lambda x: [x],
        lambda x: (x, None),
        lambda x: {"k": x, "a": 1},
        lambda x: Point(x, None),
        lambda x: OrderedDict(z=x),
        lambda x: defaultdict(list, {0: x}),
        lambda x: deque([x], maxlen=3),
        lambda x: Vector(dx=x),
    ]
    tree = leaf
    for level in range(depth):
        tree = wrappers[level % len(wrappers)](tree)
    return tree


CORPUS["deep_chain_mixed"] = mixed_chain(40, OPAQUE)

TREES: list[Any] = list(CORPUS.values())
TREE_IDS: list[str] = list(CORPUS)

# Small trees that make good inner structures for compose() and good extra trees.
INNER_TREES: dict[str, Any] = {
    "leaf": 0,
    "none": None,
    "empty_tuple": (),
    "pair": (0, [0, None]),
    "dict": {"b": 0, "a": 0},
    "namedtuple": Point(0, 0),
}


# Ids for parameters named `tree` / `inner`: their name in the corpus.
_LABELS: dict[str, dict[int, str]] = {
    "tree": {id(tree): name for name, tree in CORPUS.items()},
    "inner": {id(tree): name for name, tree in INNER_TREES.items()},
}


def parametrize(**kwargs: Any) -> pytest.MarkDecorator:
    """`pytest.mark.parametrize` over the cross product of the keyword arguments' values.

    >>> @parametrize(tree=TREES, none_is_leaf=[False, True])
    ... def test_something(tree, none_is_leaf): ...

    Corpus trees get their corpus name as id; other values get `name=repr`.
    """
    names = list(kwargs)
    pools = [list(values) for values in kwargs.values()]
    combos = list(itertools.product(*pools))
    ids = ["-".join(_param_id(n, v) for n, v in zip(names, combo, strict=True)) for combo in combos]
    return pytest.mark.parametrize(names, combos, ids=ids)


def _param_id(name: str, value: Any) -> str:
    label = _LABELS.get(name, {}).get(id(value))
    if label is not None:
        return label
    if isinstance(value, bool | int | str) or value is None:
        return f"{name}={value!r}"
    if callable(value) and hasattr(value, "__name__"):
        return f"{name}={value.__name__}"
    text = repr(value)
    return f"{name}={text[:40]}"


# --------------------------------------------------------------------------------------------------
# Node classification (mirrors optree's built-in node types) and walking.


def is_namedtuple_instance(obj: Any) -> bool:
    cls = type(obj)
    return (
        issubclass(cls, tuple)
        and isinstance(getattr(cls, "_fields", None), tuple)
        and callable(getattr(cls, "_make", None))
    )


def is_structseq_instance(obj: Any) -> bool:
    cls = type(obj)
    return (
        issubclass(cls, tuple)
        and isinstance(getattr(cls, "n_sequence_fields", None), int)
        and isinstance(getattr(cls, "n_fields", None), int)
        and not cls.__flags__ & (1 << 10)  # Py_TPFLAGS_BASETYPE: struct sequences are final
    )


NODE_TYPES = (tuple, list, dict, OrderedDict, defaultdict, deque)


def node_children(obj: Any, none_is_leaf: bool = False) -> list[Any] | None:
    """The children of a built-in node in insertion order, or None when `obj` is a leaf."""
    if obj is None:
        return None if none_is_leaf else []
    cls = type(obj)
    if cls in (dict, OrderedDict, defaultdict):
        return list(obj.values())
    if cls in (tuple, list, deque) or is_namedtuple_instance(obj):
        return list(obj)
    if is_structseq_instance(obj):
        return list(obj[: cls.n_sequence_fields])
    return None


def iter_subtrees(tree: Any) -> Iterator[Any]:
    """Every subtree of `tree` (nodes, None and leaves), pre-order, iteratively."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        children = node_children(node)
        if children:
            stack.extend(reversed(children))


def contains_none(tree: Any) -> bool:
    return any(sub is None for sub in iter_subtrees(tree))


def same_leaf(actual: Any, expected: Any) -> bool:
    """Leaves match when they are the same object (or equal Rec records of the same objects)."""
    if actual is expected:
        return True
    return type(actual) is Rec and actual == expected


def _copied_key(actual: Any, expected: Any) -> bool:
    return actual is expected or (type(actual) is type(expected) and repr(actual) == repr(expected))


def assert_same_tree(
    actual: Any, expected: Any, path: str = "tree", *, copied_keys: bool = False
) -> None:
    """Assert `actual` has exactly `expected`'s structure and the very same leaves.

    Node types must match exactly; dicts must have the same keys (same objects, or copies of them
    when `copied_keys`, e.g. after pickling a treedef) in the same insertion order; defaultdicts
    the same factory; deques the same maxlen. Leaves compare by identity (see `same_leaf`), which
    also works for numpy arrays and NaN.
    """
    key_eq = _copied_key if copied_keys else operator.is_
    if expected is None:
        assert actual is None, f"{path}: expected None, got {actual!r}"
        return
    expected_children = node_children(expected)
    if expected_children is None:
        assert same_leaf(actual, expected), f"{path}: expected leaf {expected!r}, got {actual!r}"
        return
    assert type(actual) is type(expected), (
        f"{path}: expected type {type(expected).__name__}, got {type(actual).__name__}: {actual!r}"
    )
    cls = type(expected)
    if cls in (dict, OrderedDict, defaultdict):
        actual_keys, expected_keys = list(actual.keys()), list(expected.keys())
        assert len(actual_keys) == len(expected_keys), f"{path}: keys {actual_keys!r}"
        assert all(key_eq(a, b) for a, b in zip(actual_keys, expected_keys, strict=True)), (
            f"{path}: keys {actual_keys!r} != {expected_keys!r} (order or identity)"
        )
        if cls is defaultdict:
            assert actual.default_factory is expected.default_factory, f"{path}: default_factory"
        for key, a_key in zip(expected_keys, actual_keys, strict=True):
            assert_same_tree(
                dict.__getitem__(actual, a_key),
                expected[key],
                f"{path}[{key!r}]",
                copied_keys=copied_keys,
            )
        return
    if cls is deque:
        assert actual.maxlen == expected.maxlen, f"{path}: maxlen {actual.maxlen}"
    actual_children = node_children(actual)
    assert actual_children is not None
    assert len(actual_children) == len(expected_children), f"{path}: arity {len(actual_children)}"
    for index, (a, e) in enumerate(zip(actual_children, expected_children, strict=True)):
        assert_same_tree(a, e, f"{path}[{index}]", copied_keys=copied_keys)


def assert_same_leaves(actual: list[Any], expected: list[Any]) -> None:
    """Two leaf lists hold the very same objects in the same order."""
    assert type(actual) is list, type(actual)
    assert len(actual) == len(expected), (actual, expected)
    for index, (a, e) in enumerate(zip(actual, expected, strict=True)):
        assert same_leaf(a, e), f"leaf {index}: {a!r} is not {e!r}"


def widen(tree: Any, none_is_leaf: bool, optree_module: Any) -> Any:
    """A tree with a small subtree in place of each leaf of `tree` (for flatten-up-to tests)."""
    return optree_module.tree_map(lambda x: [x, (x, {"inner": x})], tree, none_is_leaf=none_is_leaf)


# --------------------------------------------------------------------------------------------------
# Hypothesis strategy for random trees.

_KEYS = st.one_of(
    st.integers(-3, 3),
    st.text(alphabet="abcxyz", max_size=2),
    st.sampled_from([0.5, -1.5, 2.0, None, b"k"]),
    st.tuples(st.integers(0, 2)),
)
_LEAVES = st.one_of(
    st.none(),
    st.integers(-3, 3),
    st.integers(),
    st.text(alphabet="abc", max_size=3),
)


def _extend(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    lists = st.lists(children, max_size=4)
    dicts = st.dictionaries(_KEYS, children, max_size=4)
    return st.one_of(
        lists.map(tuple),
        lists,
        dicts,
        dicts.map(OrderedDict),
        st.builds(defaultdict, st.sampled_from([list, int, make_default, None]), dicts),
        st.builds(
            lambda items, extra: deque(items, None if extra is None else len(items) + extra),
            lists,
            st.none() | st.integers(0, 2),
        ),
        st.builds(Point, children, children),
        st.builds(Triple, children, children, children),
        st.builds(Vector, children, children),
        st.just(EmptyNamedTuple()),
        st.lists(children, min_size=9, max_size=9).map(time.struct_time),
        st.lists(children, min_size=10, max_size=10).map(os.stat_result),
    )


def trees(max_leaves: int = 24) -> st.SearchStrategy[Any]:
    """Random nested trees of every built-in node type with int/str/None leaves."""
    return st.recursive(_LEAVES, _extend, max_leaves=max_leaves)
