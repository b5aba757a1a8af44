"""Walking and taking apart treespecs, differentially against optree 0.20.

`transform(f_node, f_leaf)`, `traverse(leaves, f_node, f_leaf)`, `walk(leaves, f_node, f_leaf)`
(optree's signature on the main face), `one_level()`, `is_one_level()`, `children()`,
`child(i)` (negative and out of range), `entries()`, `entry(i)` and `paths()`, over the corpus
with both `none_is_leaf` values, a custom node in its own namespace, and hypothesis trees.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import optree
import oxtree
import pytest
from helpers import HYPOTHESIS_SETTINGS, NONE_IS_LEAF_OPTIONS, TREE_IDS, TREES, parametrize, trees
from hypothesis import given
from hypothesis import strategies as st
from nodes import Point

# --------------------------------------------------------------------------------------------------
# Helpers.


def outcome(func: Callable[..., Any], *args: Any) -> tuple[str, Any]:
    """`("ok", func(*args))` or `("error", exception type)`; a Rust panic counts as an error
    type too (it derives from BaseException), so it shows up as a difference, not a crash."""
    try:
        return "ok", func(*args)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as error:
        return "error", type(error)


def specs(tree: Any, none_is_leaf: bool, namespace: str = "") -> tuple[Any, Any]:
    return (
        oxtree.tree_structure(tree, none_is_leaf=none_is_leaf, namespace=namespace),
        optree.tree_structure(tree, none_is_leaf=none_is_leaf, namespace=namespace),
    )


NAMESPACE = "test_treespec_ops_structure"


class Box:
    """A custom node registered (in both libraries) in this module's namespace only."""

    def __init__(self, first: Any, second: Any) -> None:
        self.first, self.second = first, second

    def __repr__(self) -> str:
        return f"Box({self.first!r}, {self.second!r})"


for _lib in (optree, oxtree):
    _lib.register_pytree_node(
        Box,
        lambda box: ((box.first, box.second), "meta", ("first", "second")),
        lambda meta, children: Box(*children),
        namespace=NAMESPACE,
    )

# Corpus trees, plus trees with the custom node, each with the namespace to flatten them in.
CASES: list[tuple[Any, str]] = [(tree, "") for tree in TREES] + [
    (Box(1, [2, None]), NAMESPACE),
    ([Box(Box(1, ()), {"b": 2, "a": None}), Point(Box(None, 3), 4)], NAMESPACE),
    (Box(None, None), NAMESPACE),
]
CASE_IDS = [*TREE_IDS, "box", "box_nested", "box_of_nones"]


def cases(func: Callable[..., Any]) -> Callable[..., Any]:
    return pytest.mark.parametrize(("tree", "namespace"), CASES, ids=CASE_IDS)(func)


def child_repr(spec: Any, index: int) -> str:
    return repr(spec.child(index))


def both_none_is_leaf(tree: Any, namespace: str) -> list[tuple[bool, Any, Any]]:
    return [(nil, *specs(tree, nil, namespace)) for nil in NONE_IS_LEAF_OPTIONS]


# --------------------------------------------------------------------------------------------------
# children / child / entries / entry / paths / one_level / is_one_level.


@cases
def test_children_match_optree(tree: Any, namespace: str) -> None:
    for _, ours, theirs in both_none_is_leaf(tree, namespace):
        children = ours.children()
        assert [repr(c) for c in children] == [repr(c) for c in theirs.children()]
        assert len(children) == ours.num_children == theirs.num_children
        assert sum(c.num_leaves for c in children) == ours.num_leaves or ours.is_leaf()
        for i, child in enumerate(children):
            assert ours.child(i) == child
            assert ours.child(i - len(children)) == child
            assert child.none_is_leaf == ours.none_is_leaf


@cases
def test_child_indices_match_optree(tree: Any, namespace: str) -> None:
    for _, ours, theirs in both_none_is_leaf(tree, namespace):
        n = ours.num_children
        for i in range(-n - 3, n + 3):
            mine = outcome(child_repr, ours, i)
            ref = outcome(child_repr, theirs, i)
            assert mine == ref, (i, mine, ref)
            if not -n <= i < n:
                assert mine == ("error", IndexError)


@cases
def test_entries_match_optree(tree: Any, namespace: str) -> None:
    for _, ours, theirs in both_none_is_leaf(tree, namespace):
        entries = ours.entries()
        assert entries == theirs.entries()
        assert [type(e) for e in entries] == [type(e) for e in theirs.entries()]
        n = len(entries)
        for i in range(-n - 3, n + 3):
            mine = outcome(ours.entry, i)
            ref = outcome(theirs.entry, i)
            assert mine == ref, (i, mine, ref)
            if -n <= i < n:
                assert mine[1] == entries[i]
            else:
                assert mine == ("error", IndexError)


@cases
def test_paths_match_optree(tree: Any, namespace: str) -> None:
    for nil, ours, theirs in both_none_is_leaf(tree, namespace):
        paths = ours.paths()
        assert paths == theirs.paths()
        assert len(paths) == ours.num_leaves
        assert all(type(p) is tuple for p in paths)
        assert paths == optree.tree_paths(tree, none_is_leaf=nil, namespace=namespace)


@cases
def test_one_level_matches_optree(tree: Any, namespace: str) -> None:
    for _, ours, theirs in both_none_is_leaf(tree, namespace):
        one = ours.one_level()
        assert repr(one) == repr(theirs.one_level())
        if ours.is_leaf():
            assert one is None
            continue
        assert one.is_one_level()
        assert one.num_children == ours.num_children
        assert one.num_leaves == ours.num_children
        assert one.entries() == ours.entries()
        assert all(c.is_leaf() for c in one.children())
        assert one.is_prefix(ours)
        assert one.one_level() == one


@cases
def test_is_one_level_matches_optree(tree: Any, namespace: str) -> None:
    for _, ours, theirs in both_none_is_leaf(tree, namespace):
        assert ours.is_one_level() == theirs.is_one_level(), repr(theirs)
        assert ours.is_leaf() == theirs.is_leaf()
        assert ours.is_leaf(strict=False) == theirs.is_leaf(strict=False)


def test_is_one_level_with_none_children() -> None:
    """None is a node, not a leaf, when none_is_leaf=False: a tuple holding None is two levels."""
    assert oxtree.tree_structure((1, None)).is_one_level() is False
    assert optree.tree_structure((1, None)).is_one_level() is False
    assert oxtree.tree_structure((1, None), none_is_leaf=True).is_one_level() is True
    assert oxtree.tree_structure(None).is_one_level() is True


def test_leaf_specs_have_no_children() -> None:
    for make in (oxtree.treespec_leaf, lambda: oxtree.treespec_none(none_is_leaf=True)):
        spec = make()
        assert spec.children() == []
        assert spec.entries() == []
        assert spec.one_level() is None
        assert not spec.is_one_level()
        with pytest.raises(IndexError):
            spec.child(0)
        with pytest.raises(IndexError):
            spec.entry(-1)
    none = oxtree.treespec_none()
    assert none.one_level() == none
    assert none.is_one_level()
    with pytest.raises(IndexError):
        none.child(0)


def test_child_index_types() -> None:
    spec = oxtree.tree_structure([1, [2, None]])
    assert repr(spec.child(True)) == repr(optree.tree_structure([1, [2, None]]).child(True))
    for bad in ("0", 1.0, None):
        with pytest.raises(TypeError):
            spec.child(bad)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            spec.entry(bad)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------------
# transform.


def transform_outcomes(
    spec: Any, lib: Any, f_node: Callable[..., Any] | None, f_leaf: Callable[..., Any] | None
) -> tuple[tuple[str, Any], list[str]]:
    """The result (repr) of spec.transform and the reprs of every spec the functions saw."""
    calls: list[str] = []

    def wrap(func: Callable[..., Any] | None, label: str) -> Callable[..., Any] | None:
        if func is None:
            return None

        def wrapped(arg: Any) -> Any:
            calls.append(f"{label}:{arg!r}")
            return func(arg, lib)

        return wrapped

    result = outcome(lambda: repr(spec.transform(wrap(f_node, "node"), wrap(f_leaf, "leaf"))))
    return result, calls


def same_kind(s: Any, lib: Any) -> bool:
    return int(s.kind) == int(lib.PyTreeKind.TUPLE)


TRANSFORMS: dict[str, tuple[Callable[..., Any] | None, Callable[..., Any] | None]] = {
    "identity": (None, None),
    "identity-functions": (lambda s, lib: s, lambda s, lib: s),
    "leaves-to-none": (None, lambda s, lib: lib.treespec_none(none_is_leaf=s.none_is_leaf)),
    "leaves-to-subtree": (
        None,
        lambda s, lib: lib.tree_structure([0, (1, None)], none_is_leaf=s.none_is_leaf),
    ),
    "leaves-to-empty": (None, lambda s, lib: lib.treespec_tuple(none_is_leaf=s.none_is_leaf)),
    "tuples-to-lists": (
        lambda s, lib: (
            lib.treespec_list(
                [lib.treespec_leaf(none_is_leaf=s.none_is_leaf)] * s.num_children,
                none_is_leaf=s.none_is_leaf,
            )
            if same_kind(s, lib)
            else s
        ),
        None,
    ),
    "nodes-to-tuples": (
        lambda s, lib: lib.treespec_tuple(
            [lib.treespec_leaf(none_is_leaf=s.none_is_leaf)] * s.num_children,
            none_is_leaf=s.none_is_leaf,
        ),
        None,
    ),
    # Invalid results: optree rejects them with ValueError / TypeError.
    "node-not-one-level": (
        lambda s, lib: lib.treespec_list([s], none_is_leaf=s.none_is_leaf),
        None,
    ),
    "node-wrong-arity": (
        lambda s, lib: lib.treespec_tuple(
            [lib.treespec_leaf(none_is_leaf=s.none_is_leaf)] * (s.num_children + 1),
            none_is_leaf=s.none_is_leaf,
        ),
        None,
    ),
    "node-wrong-none-is-leaf": (
        lambda s, lib: lib.treespec_tuple(
            [lib.treespec_leaf(none_is_leaf=not s.none_is_leaf)] * s.num_children,
            none_is_leaf=not s.none_is_leaf,
        ),
        None,
    ),
    "node-not-a-spec": (lambda s, lib: (), None),
    "leaf-not-a-spec": (None, lambda s, lib: 0),
    "leaf-wrong-none-is-leaf": (
        None,
        lambda s, lib: lib.treespec_leaf(none_is_leaf=not s.none_is_leaf),
    ),
}


def transform_difference(ours: Any, theirs: Any, name: str) -> Any:
    """None when oxtree's transform agrees with optree's (result, or error type, and the specs
    the functions saw, in order), else what differs."""
    f_node, f_leaf = TRANSFORMS[name]
    mine, my_calls = transform_outcomes(ours, oxtree, f_node, f_leaf)
    ref, their_calls = transform_outcomes(theirs, optree, f_node, f_leaf)
    if mine != ref:
        return (repr(theirs), mine, ref)
    if mine[0] == "ok" and my_calls != their_calls:
        return (repr(theirs), my_calls, their_calls)
    return None


def assert_transform_matches(ours: Any, theirs: Any, name: str) -> None:
    assert transform_difference(ours, theirs, name) is None


@pytest.mark.parametrize("name", TRANSFORMS)
def test_transform_matches_optree(name: str) -> None:
    differences = []
    for tree, namespace in CASES:
        for _, ours, theirs in both_none_is_leaf(tree, namespace):
            difference = transform_difference(ours, theirs, name)
            if difference is not None:
                differences.append(difference)
    assert not differences, f"{len(differences)} specs differ, e.g. {differences[:3]}"


@cases
def test_transform_identity_and_leaf_counts(tree: Any, namespace: str) -> None:
    for nil, ours, _ in both_none_is_leaf(tree, namespace):
        assert ours.transform() == ours
        assert ours.transform(lambda s: s, lambda s: s) == ours
        pair = oxtree.tree_structure((0, 0), none_is_leaf=nil)
        doubled = ours.transform(None, lambda s, pair=pair: pair)
        assert doubled == ours.compose(pair)
        assert doubled.num_leaves == 2 * ours.num_leaves


def test_transform_function_form() -> None:
    spec = oxtree.tree_structure((1, [2, None]))
    none = oxtree.treespec_none()
    assert oxtree.treespec_transform(spec) == spec
    assert oxtree.treespec_transform(spec, None, lambda _: none) == spec.transform(
        None, lambda _: none
    )
    assert repr(oxtree.treespec_transform(spec, None, lambda _: none)) == repr(
        optree.treespec_transform(
            optree.tree_structure((1, [2, None])), None, lambda _: optree.treespec_none()
        )
    )


# --------------------------------------------------------------------------------------------------
# traverse and walk.


def traverse_outcome(
    spec: Any, leaves: list[Any], f_node: Any, f_leaf: Any
) -> tuple[tuple[str, Any], list[str]]:
    calls: list[str] = []

    def node(x: Any) -> Any:
        calls.append(f"node:{x!r}")
        return ("N", x)

    def leaf(x: Any) -> Any:
        calls.append(f"leaf:{x!r}")
        return ("L", x)

    result = outcome(
        lambda: repr(spec.traverse(leaves, node if f_node else None, leaf if f_leaf else None))
    )
    return result, calls


def walk_outcome(
    spec: Any, leaves: list[Any], f_node: Any, f_leaf: Any
) -> tuple[tuple[str, Any], list[str]]:
    calls: list[str] = []

    def node(node_type: Any, node_data: Any, children: Any) -> Any:
        calls.append(f"node:{node_type!r}:{node_data!r}:{children!r}")
        return ("N", node_type, node_data, children)

    def leaf(x: Any) -> Any:
        calls.append(f"leaf:{x!r}")
        return ("L", x)

    result = outcome(
        lambda: repr(spec.walk(leaves, node if f_node else None, leaf if f_leaf else None))
    )
    return result, calls


FUNCTION_CHOICES = list(itertools.product([True, False], repeat=2))


@pytest.mark.parametrize("method", [traverse_outcome, walk_outcome], ids=["traverse", "walk"])
@pytest.mark.parametrize(("f_node", "f_leaf"), FUNCTION_CHOICES)
def test_traverse_and_walk_match_optree(method: Any, f_node: bool, f_leaf: bool) -> None:
    differences = []
    for tree, namespace in CASES:
        for _, ours, theirs in both_none_is_leaf(tree, namespace):
            leaves = list(range(ours.num_leaves))
            mine = method(ours, leaves, f_node, f_leaf)
            ref = method(theirs, leaves, f_node, f_leaf)
            if mine != ref:
                differences.append((repr(theirs), mine, ref))
    assert not differences, f"{len(differences)} specs differ, e.g. {differences[:2]}"


@parametrize(tree=TREES)
def test_traverse_without_functions_is_unflatten(tree: Any) -> None:
    for nil in NONE_IS_LEAF_OPTIONS:
        ours, _ = specs(tree, nil)
        leaves = [object() for _ in range(ours.num_leaves)]
        assert repr(ours.traverse(leaves)) == repr(ours.unflatten(leaves))
        assert repr(ours.traverse(iter(leaves))) == repr(ours.unflatten(leaves))


@pytest.mark.parametrize("method", ["traverse", "walk"])
def test_traverse_and_walk_leaf_count_errors(method: str) -> None:
    for lib in (oxtree, optree):
        spec = lib.tree_structure((1, [2, None], {"a": 3}))
        func = getattr(spec, method)
        with pytest.raises(ValueError, match=r"(?i)too few leaves"):
            func([1, 2])
        with pytest.raises(ValueError, match=r"(?i)too many leaves"):
            func([1, 2, 3, 4])
        assert func([1, 2, 3]) == (1, [2, None], {"a": 3})


def test_walk_takes_optree_keywords() -> None:
    leaves = [1, 2, 3]
    for lib in (optree, oxtree):
        spec = lib.tree_structure((1, [2], {"a": 3}))
        assert spec.walk(leaves, f_leaf=lambda x: -x) == (-1, [-2], {"a": -3})
        assert spec.walk(leaves, f_node=lambda t, d, c: len(c), f_leaf=None) == 3


def test_traverse_takes_optree_keywords() -> None:
    for lib in (optree, oxtree):
        spec = lib.tree_structure((1, [2], {"a": 3}))
        assert spec.traverse([1, 2, 3], f_leaf=lambda x: -x) == (-1, [-2], {"a": -3})
        assert spec.traverse([1, 2, 3], f_node=lambda n: type(n).__name__) == "tuple"


def test_walk_none_node_without_node_function() -> None:
    """Regression: walk with only f_leaf over a treespec holding None must not panic."""
    spec = oxtree.tree_structure((1, None))
    assert spec.walk([1], None, lambda x: x + 1) == (2, None)


def test_traverse_calls_node_function_on_none() -> None:
    """optree calls f_node on None nodes (they are nodes without children)."""
    seen: list[Any] = []
    spec = oxtree.tree_structure((1, None))
    spec.traverse([1], lambda n: seen.append(n) or n)
    assert seen == [None, (1, None)]


@HYPOTHESIS_SETTINGS
@given(tree=trees(), none_is_leaf=st.booleans())
def test_structure_ops_match_optree_random(tree: Any, none_is_leaf: bool) -> None:
    ours, theirs = specs(tree, none_is_leaf)
    assert ours.paths() == theirs.paths()
    assert ours.entries() == theirs.entries()
    assert [repr(c) for c in ours.children()] == [repr(c) for c in theirs.children()]
    assert repr(ours.one_level()) == repr(theirs.one_level())
    assert ours.is_one_level() == theirs.is_one_level()
    leaves = list(range(ours.num_leaves))
    assert traverse_outcome(ours, leaves, True, True) == traverse_outcome(
        theirs, leaves, True, True
    )
    assert walk_outcome(ours, leaves, True, True) == walk_outcome(theirs, leaves, True, True)
    for name in ("identity", "leaves-to-none", "tuples-to-lists", "node-not-one-level"):
        assert_transform_matches(ours, theirs, name)


class _OnlyIndex:
    def __index__(self) -> int:
        return 1


class _OnlyInt:
    def __int__(self) -> int:
        return 1


@pytest.mark.parametrize("index", [1, _OnlyIndex(), _OnlyInt()], ids=["int", "index", "int-like"])
def test_entry_and_child_take_int_like_indices(index: Any) -> None:
    """As optree's do: `__index__`, or failing that `__int__`."""
    spec = oxtree.tree_structure({"a": 1, "b": [2]})
    theirs = optree.tree_structure({"a": 1, "b": [2]})
    assert spec.entry(index) == oxtree.treespec_entry(spec, index) == theirs.entry(index) == "b"
    assert spec.child(index) == oxtree.treespec_child(spec, index) == oxtree.tree_structure([2])
    assert repr(spec.child(index)) == repr(theirs.child(index))


@pytest.mark.parametrize("index", [1.0, "1", None])
def test_entry_and_child_refuse_other_indices(index: Any) -> None:
    spec = oxtree.tree_structure({"a": 1, "b": [2]})
    for method in (spec.entry, spec.child):
        with pytest.raises(TypeError):
            method(index)
