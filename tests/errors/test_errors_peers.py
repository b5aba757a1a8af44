"""Structure errors in each face's own words: optree's texts on ``oxtree``, JAX's on
``oxtree.tree_util``. Every message starts with the peer's exact text (run on the same input);
oxtree's detail (where the structures differ) may only follow it."""

from __future__ import annotations

import collections
import dataclasses
import pickle
import re
import sys
from typing import Any

import jax.tree_util as jtu
import optree
import oxtree
import oxtree.tree_util as otu
import pytest
from hypothesis import given
from hypothesis import strategies as st

NT = collections.namedtuple("NT", "foo bar")
NT2 = collections.namedtuple("NT2", "foo bar")
NT3 = collections.namedtuple("NT3", "a b c")


class Box:
    """A registered node: its args are the children, ``aux`` the aux data."""

    def __init__(self, *args: Any, aux: Any = 0) -> None:
        self.args = args
        self.aux = aux

    def __repr__(self) -> str:
        return f"Box{self.args!r}@{self.aux!r}"


def _flatten(box: Box) -> tuple[tuple[Any, ...], Any]:
    return box.args, box.aux


def _unflatten(aux: Any, children: Any) -> Box:
    return Box(*children, aux=aux)


@dataclasses.dataclass
class Point:
    x: Any
    y: Any


@pytest.fixture(scope="module", autouse=True)
def _registered() -> Any:
    oxtree.register_pytree_node(Box, _flatten, _unflatten, namespace="")
    optree.register_pytree_node(
        Box, _flatten, _unflatten, namespace=optree.registry.__GLOBAL_NAMESPACE
    )
    jtu.register_pytree_node(Box, _flatten, _unflatten)
    # JAX first: a registration through oxtree.tree_util reaches JAX too, and JAX refuses a
    # second registration of a type (one it has already is left alone).
    jtu.register_dataclass(Point, data_fields=["x"], meta_fields=["y"])
    otu.register_dataclass(Point, data_fields=["x"], meta_fields=["y"])
    yield
    oxtree.unregister_pytree_node(Box, namespace="")
    optree.unregister_pytree_node(Box, namespace=optree.registry.__GLOBAL_NAMESPACE)


OD = collections.OrderedDict
DD = collections.defaultdict

# (treespec source, other tree): every pair is a structure error for at least one peer.
PAIRS = [
    ([1, 2], [7]),
    ((1,), (7, 8)),
    ({"a": 1}, {"a": 7, "b": 8}),
    ({"a": 1}, {"b": 7}),
    ({"a": 1, "b": 2}, {"a": 1, "c": 2}),
    ({"a": 1}, {1: 2}),
    ([1], {"a": 7}),
    ([1], (7,)),
    ((1,), [7]),
    ({"a": 1}, (7,)),
    ({"a": 1}, [7]),
    ([[1]], [7]),
    ([(1,)], [{"a": 7}]),
    ({"a": [1]}, {"a": (7,)}),
    ({"a": {"a": 1}}, {"a": {"b": 7}}),
    (None, [2]),
    ((None,), (3,)),
    ([NT(1, 2)], [(1, 2)]),
    ([NT(1, 2)], [NT2(1, 2)]),
    ([NT(1, 2)], [NT3(1, 2, 3)]),
    ([Box(1, 2)], [(1, 2)]),
    ([Box(1, 2)], [Box(1, 2, aux=1)]),
    ([Box(1, 2)], [Box(1, 2, 3)]),
    (OD(a=1), {"a": 1}),
    ({"a": 1}, OD(a=1)),
    (OD(a=1, b=2), OD(b=1, a=2)),
    (OD(a=1), OD(a=1, b=2)),
    (DD(int, a=1), {"a": 1}),
    (DD(int, a=1), DD(list, a=1)),
    (DD(int, a=1), DD(int, b=1)),
    (collections.deque([1, 2]), collections.deque([1])),
    (collections.deque([1, 2]), [1, 2]),
    ([1], 5),
    ((1, 2), (1, 2, 3)),
    ([1, [2, 3]], [1, [2]]),
    ({"x": (1, [2, {"y": 3}])}, {"x": (1, [2, {"z": 3}])}),
    (sys.float_info, (1,) * 11),
    ([Point(1, 2)], [(1,)]),
    ([Point(1, 2)], [Point(1, 3)]),
]


def _outcome(call: Any) -> tuple[str, Any]:
    try:
        call()
    except ValueError as error:
        return "raise", str(error)
    return "ok", None


def _assert_speaks_like(ours: tuple[str, Any], theirs: tuple[str, Any]) -> None:
    assert ours[0] == theirs[0], (ours, theirs)
    if theirs[0] == "raise":
        assert ours[1].startswith(theirs[1]), f"\nours:   {ours[1]!r}\ntheirs: {theirs[1]!r}"


def _optree_applies(tree: Any, other: Any) -> bool:
    # optree raises TypeError for a Point it has no registration for.
    return not any(isinstance(x, Point) for x in (tree, other, *tree_items(tree)))


def tree_items(tree: Any) -> list[Any]:
    return list(tree) if isinstance(tree, (list, tuple)) else []


@pytest.mark.parametrize(("tree", "other"), PAIRS, ids=repr)
def test_flatten_up_to_speaks_optree(tree: Any, other: Any) -> None:
    if not _optree_applies(tree, other):
        pytest.skip("optree has no registration for Point")
    theirs = _outcome(lambda: optree.tree_structure(tree).flatten_up_to(other))
    ours = _outcome(lambda: oxtree.tree_structure(tree).flatten_up_to(other))
    _assert_speaks_like(ours, theirs)
    theirs = _outcome(lambda: optree.tree_map(lambda *a: 0, tree, other))
    ours = _outcome(lambda: oxtree.tree_map(lambda *a: 0, tree, other))
    _assert_speaks_like(ours, theirs)


JAX_CALLS = {
    "flatten_up_to": lambda tu, tree, other: tu.tree_structure(tree).flatten_up_to(other),
    "tree_map": lambda tu, tree, other: tu.tree_map(lambda *a: 0, tree, other),
    "tree_map_with_path": lambda tu, tree, other: tu.tree_map_with_path(lambda *a: 0, tree, other),
}


@pytest.mark.parametrize("call", list(JAX_CALLS))
@pytest.mark.parametrize(("tree", "other"), PAIRS, ids=repr)
def test_flatten_up_to_and_map_speak_jax(tree: Any, other: Any, call: str) -> None:
    run = JAX_CALLS[call]
    _assert_speaks_like(
        _outcome(lambda: run(otu, tree, other)), _outcome(lambda: run(jtu, tree, other))
    )


def test_detail_follows_the_peer_text() -> None:
    with pytest.raises(ValueError, match="list arity mismatch") as info:
        oxtree.tree_map(lambda *a: 0, {"x": [1, [2]]}, {"x": [1, [2, 3]]})
    assert str(info.value) == (
        "list arity mismatch; expected: 1, got: 2; list: [2, 3].\n"
        "Mismatch at key path: tree['x'][1] (in rests[0])"
    )
    with pytest.raises(ValueError, match="Expected tuple") as info:
        otu.tree_structure([1, (2,)]).flatten_up_to([1, [2]])
    assert str(info.value) == "Expected tuple, got [2].\nMismatch at key path: tree[1]"


@pytest.mark.parametrize("iterate", [False, True])
@pytest.mark.parametrize(("peer", "face"), [(optree, oxtree), (jtu, otu)], ids=["optree", "jax"])
@pytest.mark.parametrize("count", [0, 1, 3, 5])
def test_unflatten_leaf_counts_speak_each_face(
    count: int, peer: Any, face: Any, iterate: bool
) -> None:
    def leaves() -> Any:
        return iter(range(count)) if iterate else list(range(count))

    theirs = _outcome(lambda: peer.tree_unflatten(peer.tree_structure((1, [2])), leaves()))
    ours = _outcome(lambda: face.tree_unflatten(face.tree_structure((1, [2])), leaves()))
    _assert_speaks_like(ours, theirs)


SUFFIX_PAIRS = [
    ([1, 2], [1]),
    ({"a": 1}, {"b": 1}),
    ({"a": 1, "b": 2}, {"a": 1}),
    ((1,), [1]),
    ([Box(1)], [Box(1, 2)]),
    ([Box(1)], [Box(1, aux=2)]),
    ([NT(1, 2)], [NT2(1, 2)]),
    ([None], [(1,)]),
    ([1, (2, 3)], [[4], (5, 6)]),
    ({"a": 1}, OD(a=[1, 2])),
]


@pytest.mark.parametrize(("a", "b"), SUFFIX_PAIRS, ids=repr)
def test_broadcast_to_common_suffix_speaks_optree(a: Any, b: Any) -> None:
    theirs = _outcome(
        lambda: optree.tree_structure(a).broadcast_to_common_suffix(optree.tree_structure(b))
    )
    ours = _outcome(
        lambda: oxtree.tree_structure(a).broadcast_to_common_suffix(oxtree.tree_structure(b))
    )
    _assert_speaks_like(ours, theirs)
    theirs = _outcome(lambda: optree.broadcast_common(a, b))
    ours = _outcome(lambda: oxtree.broadcast_common(a, b))
    _assert_speaks_like(ours, theirs)


PREFIX_PAIRS = [
    ((1, 2), [1, 2]),
    (((1,), (2,)), ([3], (4,))),
    (((1,), (2,)), ([3], [4])),
    ((1,), (2, 3)),
    ([[1], [2]], [[3, 4], [5, 6]]),
    ({"hi": 1}, {"hi": 2, "bye": 3}),
    ({"a": 1}, {"a": 2, "b": 3}),
    ({1: 2}, {3: 4}),
    ([{1: 2}, {3: 4}], [{3: 4}, {5: 6}]),
    ({}, {"a": []}),
    ({"{oops}": {"{a}": 1}}, {"{oops}": {"{b}": 1}}),
    ([Box(1, [2])], [Box(3, 4)]),
    ([Box(1, 2)], [Box(1, 2, aux="x\ny")]),
    (NT(1, (2,)), NT(1, [2])),
    ({"a": 1, "b": (2,)}, OD(b=[2], a=1)),
    (OD(a=1), {"a": 1, "b": 2}),
    (DD(int, a=(1,)), {"a": [1]}),
    (collections.deque([(1,)]), collections.deque([[1]], maxlen=4)),
    ((None, {"k": (0, 1)}), (1, {"k": [2, 3]})),
    ((None, 0), (None, {"k": [2, 3]})),
    ((1, 2), ((11, 12, 13), 2)),
]


def _messages(errors: list[Any], name: str = "in_axes") -> list[str]:
    out = []
    for make in errors:
        error = make(name)
        assert type(error) is ValueError
        out.append(str(error))
    return out


@pytest.mark.parametrize("none_is_leaf", [False, True])
@pytest.mark.parametrize(("prefix", "full"), PREFIX_PAIRS, ids=repr)
def test_prefix_errors_speak_optree(prefix: Any, full: Any, none_is_leaf: bool) -> None:
    theirs = _messages(optree.prefix_errors(prefix, full, none_is_leaf=none_is_leaf))
    ours = _messages(oxtree.prefix_errors(prefix, full, none_is_leaf=none_is_leaf))
    assert ours == theirs


@pytest.mark.parametrize(("prefix", "full"), PREFIX_PAIRS, ids=repr)
def test_prefix_errors_speak_jax(prefix: Any, full: Any) -> None:
    from jax._src.tree_util import prefix_errors

    if isinstance(prefix, NT):
        pytest.skip("jaxlib 0.10.2 names every child of a namedtuple by its first field")
    assert _messages(otu.prefix_errors(prefix, full)) == _messages(prefix_errors(prefix, full))


def test_prefix_errors_is_leaf_and_names() -> None:
    errors = oxtree.prefix_errors([(1,), [2]], [[1], [2]], lambda x: isinstance(x, tuple))
    assert errors == []
    (make,) = oxtree.prefix_errors([(1,), [2]], [[1], [2]])
    assert "\n    vmap in_axes[0]\n" in str(make("vmap in_axes"))
    (make,) = otu.prefix_errors({"a": (1,)}, {"a": [1]})
    assert str(make("x")).startswith(
        "pytree structure error: different types at key path\n    x['a']\n"
    )
    assert "PrefixError" in repr(make)


# A tree strategy of builtin containers, with an int leaf anywhere.
_leaves = st.one_of(st.integers(0, 3), st.none())
_trees = st.recursive(
    _leaves,
    lambda kids: st.one_of(
        st.lists(kids, max_size=3),
        st.lists(kids, max_size=3).map(tuple),
        st.dictionaries(st.sampled_from("abc"), kids, max_size=3),
    ),
    max_leaves=8,
)


@given(tree=_trees, other=_trees)
def test_random_pairs_speak_both_peers(tree: Any, other: Any) -> None:
    _assert_speaks_like(
        _outcome(lambda: oxtree.tree_structure(tree).flatten_up_to(other)),
        _outcome(lambda: optree.tree_structure(tree).flatten_up_to(other)),
    )
    _assert_speaks_like(
        _outcome(lambda: otu.tree_map(lambda *a: 0, tree, other)),
        _outcome(lambda: jtu.tree_map(lambda *a: 0, tree, other)),
    )
    assert _messages(oxtree.prefix_errors(tree, other)) == _messages(
        optree.prefix_errors(tree, other)
    )


def test_forged_treedef_raises_instead_of_panicking() -> None:
    """A treedef whose node counts disagree (a None node given children) is refused or
    reported as an internal error, never a PanicException."""
    leaf = otu.tree_structure(1)
    try:
        forged = otu.PyTreeDef.from_node_data_and_children(None, (type(None), None), [leaf, leaf])
    except ValueError:
        return  # refused at construction: nothing left to check
    for call in (
        lambda: forged.unflatten([]),
        lambda: forged.walk(lambda *a: a, None, []),
        lambda: otu.tree_map(lambda x: x, forged.unflatten([])),
        lambda: forged.unflatten([1, 2]),
    ):
        with pytest.raises((SystemError, ValueError)) as info:
            call()
        if info.type is SystemError:
            assert "please report this to oxtree" in str(info.value)
    assert re.search(r"PyTreeDef", repr(forged))
    pickle.dumps(forged)


@pytest.mark.parametrize(("prefix", "full"), [([1, 2], [1]), ({"a": 1}, {"b": 2}), ((1,), [1])])
def test_jax_broadcast_speaks_jax(prefix: Any, full: Any) -> None:
    import jax

    theirs = _outcome(lambda: jax.tree.broadcast(prefix, full))
    ours = _outcome(lambda: oxtree.tree.broadcast(prefix, full))
    assert ours == theirs
