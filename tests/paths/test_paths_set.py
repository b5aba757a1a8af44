"""`tree_set` (replace the subtree at an accessor, raw path or key path) and the key paths that
structure-mismatch errors print.

For `tree_set` every leaf of every corpus tree is replaced through each of the three spellings of
its path: the new tree holds the value there, every other leaf, and shares every subtree off the
path with the input, which is left untouched.
"""

from __future__ import annotations

import copy
import re
from collections import OrderedDict, defaultdict, deque
from collections.abc import Iterator
from typing import Any

import oxtree
import pytest
from helpers import (
    GMTIME,
    HYPOTHESIS_SETTINGS,
    NONE_IS_LEAF_OPTIONS,
    TREES,
    assert_same_tree,
    parametrize,
    trees,
)
from hypothesis import given
from hypothesis import strategies as st
from nodes import Opaque, Point, Vector
from oxtree import _core

SENTINEL = Opaque("sentinel")
MAX_LEAVES_PER_TREE = 40


def sample(n: int) -> list[int]:
    """Indices of at most MAX_LEAVES_PER_TREE leaves spread over n, always the first and last."""
    if n <= MAX_LEAVES_PER_TREE:
        return list(range(n))
    step = n / (MAX_LEAVES_PER_TREE - 1)
    return sorted({round(i * step) for i in range(MAX_LEAVES_PER_TREE - 1)} | {n - 1})


def where_forms(index: int, accessors: list[Any], key_paths: list[Any]) -> Iterator[Any]:
    accessor = accessors[index]
    yield accessor
    yield accessor.path
    yield list(accessor.path)
    yield key_paths[index]


def snapshot(tree: Any) -> str:
    """A deep, textual record of `tree` to compare before and after."""
    return repr(copy.deepcopy(tree))


def assert_set_leaf(
    tree: Any, where: Any, index: int, *, none_is_leaf: bool, namespace: str = ""
) -> None:
    kw: dict[str, Any] = {"none_is_leaf": none_is_leaf, "namespace": namespace}
    accessors, leaves, spec = oxtree.tree_flatten_with_accessor(tree, **kw)
    before = snapshot(tree)
    new = oxtree.tree_set(tree, where, SENTINEL, **kw)
    # The input is untouched: same text, same leaves, same structure.
    assert snapshot(tree) == before
    assert all(a is b for a, b in zip(oxtree.tree_leaves(tree, **kw), leaves, strict=True)), (
        "input changed"
    )
    # The value is at the path, everything else is as it was.
    assert accessors[index](new) is SENTINEL
    new_leaves = oxtree.tree_leaves(new, **kw)
    assert len(new_leaves) == len(leaves)
    for i, (a, b) in enumerate(zip(new_leaves, leaves, strict=True)):
        assert a is (SENTINEL if i == index else b), i
    assert oxtree.tree_structure(new, **kw) == spec
    if "CustomTreeNode" not in repr(spec):  # assert_same_tree sees registered nodes as leaves
        expected = spec.unflatten([SENTINEL if i == index else x for i, x in enumerate(leaves)])
        assert_same_tree(new, expected)
    # Subtrees off the path are the very same objects.
    target = accessors[index]
    for other in accessors:
        for depth in range(min(len(other), len(target))):
            if other[depth] != target[depth]:
                branch = other[: depth + 1]
                assert branch(new) is branch(tree), branch
                break


@parametrize(tree=TREES, none_is_leaf=NONE_IS_LEAF_OPTIONS)
def test_set_every_leaf_through_every_path_form(tree: Any, none_is_leaf: bool) -> None:
    accessors = oxtree.tree_accessors(tree, none_is_leaf=none_is_leaf)
    key_paths = [p for p, _ in oxtree.tree_leaves_with_path(tree, none_is_leaf=none_is_leaf)]
    for index in sample(len(accessors)):
        for where in where_forms(index, accessors, key_paths):
            assert_set_leaf(tree, where, index, none_is_leaf=none_is_leaf)


@parametrize(tree=TREES)
def test_set_the_root(tree: Any) -> None:
    for where in ((), [], oxtree.PyTreeAccessor()):
        assert oxtree.tree_set(tree, where, SENTINEL) is SENTINEL


@HYPOTHESIS_SETTINGS
@given(tree=trees(), none_is_leaf=st.booleans(), data=st.data())
def test_random_trees_set_a_leaf(tree: Any, none_is_leaf: bool, data: st.DataObject) -> None:
    accessors = oxtree.tree_accessors(tree, none_is_leaf=none_is_leaf)
    if not accessors:
        assert oxtree.tree_set(tree, (), SENTINEL) is SENTINEL
        return
    index = data.draw(st.integers(0, len(accessors) - 1))
    key_paths = [p for p, _ in oxtree.tree_leaves_with_path(tree, none_is_leaf=none_is_leaf)]
    form = data.draw(st.sampled_from(["accessor", "raw", "keys"]))
    where = {"accessor": accessors[index], "raw": accessors[index].path, "keys": key_paths[index]}
    assert_set_leaf(tree, where[form], index, none_is_leaf=none_is_leaf)


def test_set_replaces_whole_subtrees() -> None:
    tree = {"a": [1, (2, 3)], "b": Point(x={"k": 4}, y=None), "c": deque([5], maxlen=4)}
    new = oxtree.tree_set(tree, ("a", 1), "pair")
    assert new == {"a": [1, "pair"], "b": tree["b"], "c": tree["c"]}
    assert new["b"] is tree["b"]
    assert new["c"] is tree["c"]
    assert new["a"] is not tree["a"]
    assert tree["a"] == [1, (2, 3)]
    new = oxtree.tree_set(tree, (oxtree.DictKey("b"), oxtree.GetAttrKey("x")), [7])
    assert type(new["b"]) is Point
    assert new["b"] == Point(x=[7], y=None)
    assert new["a"] is tree["a"]
    # None is a subtree like any other, and the value may be a whole tree.
    new = oxtree.tree_set(tree, ("b", "y"), {"z": (8,)})
    assert new["b"].y == {"z": (8,)}
    assert oxtree.tree_leaves(new) == [1, 2, 3, 4, 8, 5]
    new = oxtree.tree_set(tree, ("c", 0), None)
    assert new["c"] == deque([None], maxlen=4)
    assert new["c"].maxlen == 4


def test_set_keeps_node_details() -> None:
    tree = {
        "z": OrderedDict([("q", 1), ("p", 2)]),
        "y": defaultdict(list, {"b": 3, "a": 4}),
        "x": deque([5, 6], maxlen=2),
        "w": {"n": 7, "m": 8},
        "v": Vector(dx=9),
    }
    for path in [("z", "p"), ("y", "a"), ("x", 1), ("w", "m"), ("v", 1), ("v", "dy")]:
        new = oxtree.tree_set(tree, path, SENTINEL)
        assert sum(x is SENTINEL for x in oxtree.tree_leaves(new)) == 1
        assert list(new["z"]) == ["q", "p"]
        assert list(new["y"]) == ["b", "a"]
        assert new["y"].default_factory is list
        assert new["x"].maxlen == 2
        assert list(new["w"]) == ["n", "m"]
        assert type(new["v"]) is Vector
    assert oxtree.tree_set(tree, ("v", "dy"), SENTINEL)["v"].dy is SENTINEL
    assert oxtree.tree_set(tree, ("v", 1), SENTINEL)["v"].dy is SENTINEL


def test_set_through_struct_sequences() -> None:
    tree = {"t": GMTIME}
    new = oxtree.tree_set(tree, ("t", 1), SENTINEL)
    assert type(new["t"]) is type(GMTIME)
    assert new["t"].tm_mon is SENTINEL
    assert new["t"][2:] == GMTIME[2:]
    path = oxtree.tree_leaves_with_path(tree)[1][0]
    assert oxtree.keystr(path) == "['t'].tm_mon"
    assert oxtree.tree_set(tree, path, SENTINEL)["t"].tm_mon is SENTINEL


def test_set_with_none_is_leaf() -> None:
    tree = [None, (None, 1)]
    assert oxtree.tree_set(tree, (1, 0), SENTINEL, none_is_leaf=True) == [None, (SENTINEL, 1)]
    assert oxtree.tree_set(tree, (1, 0), SENTINEL) == [None, (SENTINEL, 1)]
    with pytest.raises(KeyError):
        oxtree.tree_set(tree, (0, 0), SENTINEL)


# --------------------------------------------------------------------------------------------------
# Paths that do not exist.

MISSING = [
    # (tree, where, error, path as printed)
    ({"a": [1, 2]}, ("a", 5), IndexError, "tree['a'][5]"),
    ({"a": [1, 2]}, ("b",), KeyError, "tree['b']"),
    ({"a": [1, 2]}, ("a", 0, 1), KeyError, "tree['a'][0][1]"),
    ({"a": (1, 2)}, ("a", 2), IndexError, "tree['a'][2]"),
    ({"a": (1, 2)}, ("a", -3), IndexError, "tree['a'][-3]"),
    ([deque([1])], (0, 1), IndexError, "tree[0][1]"),
    ([{"k": 1}], (0, "j"), KeyError, "tree[0]['j']"),
    ([OrderedDict(k=1)], (0, "j"), KeyError, "tree[0]['j']"),
    ([defaultdict(list, k=1)], (0, "j"), KeyError, "tree[0]['j']"),
    ({"a": [1, 2]}, (oxtree.DictKey("a"), oxtree.SequenceKey(5)), IndexError, "tree['a'][5]"),
    ({"a": [1, 2]}, (oxtree.DictKey("b"),), KeyError, "tree['b']"),
    ([Point(1, 2)], (oxtree.SequenceKey(0), oxtree.GetAttrKey("z")), KeyError, "tree[0].z"),
    ([Point(1, 2)], (0, 2), IndexError, "tree[0][2]"),
    ({"a": None}, ("a", 0), KeyError, "tree['a'][0]"),
    (1, (0,), KeyError, "tree[0]"),
]


@pytest.mark.parametrize(
    ("tree", "where", "error", "printed"), MISSING, ids=[m[3] + "-" + repr(m[1]) for m in MISSING]
)
def test_missing_paths_raise_naming_the_path(
    tree: Any, where: Any, error: type[Exception], printed: str
) -> None:
    before = snapshot(tree)
    with pytest.raises(error) as info:
        oxtree.tree_set(tree, where, SENTINEL)
    assert printed in str(info.value)
    assert snapshot(tree) == before


def test_missing_path_errors_are_lookup_errors_of_the_right_kind() -> None:
    with pytest.raises(IndexError, match=re.escape("tree['a'][5]")):
        oxtree.tree_set({"a": [1, 2]}, ("a", 5), 0)
    with pytest.raises(KeyError, match=re.escape("tree['x']")):
        oxtree.tree_set({"a": [1, 2]}, ("x",), 0)
    accessor = oxtree.tree_accessors({"a": [1, 2, 3, 4, 5, 6]})[5]
    with pytest.raises(IndexError, match=re.escape("tree['a'][5]")):
        oxtree.tree_set({"a": [1, 2]}, accessor, 0)


# --------------------------------------------------------------------------------------------------
# Registered classes and dataclasses.


def make_node_class() -> type:
    class Node:
        def __init__(self, a: Any, b: Any) -> None:
            self.a, self.b = a, b

        def __repr__(self) -> str:
            return f"Node({self.a!r}, {self.b!r})"

    return Node


@pytest.fixture
def registered() -> Iterator[list[tuple[type, str]]]:
    made: list[tuple[type, str]] = []
    yield made
    for cls, namespace in reversed(made):
        oxtree.unregister_pytree_node(cls, namespace=namespace)


def all_leaves_settable(tree: Any, namespace: str = "") -> None:
    for none_is_leaf in NONE_IS_LEAF_OPTIONS:
        kw: dict[str, Any] = {"none_is_leaf": none_is_leaf, "namespace": namespace}
        accessors = oxtree.tree_accessors(tree, **kw)
        key_paths = [p for p, _ in oxtree.tree_leaves_with_path(tree, **kw)]
        assert accessors
        for index in range(len(accessors)):
            for where in where_forms(index, accessors, key_paths):
                assert_set_leaf(tree, where, index, **kw)


@pytest.mark.parametrize("namespace", ["", "paths-set"])
def test_set_through_a_registered_node(namespace: str, registered: list[tuple[type, str]]) -> None:
    cls = make_node_class()
    oxtree.register_pytree_node(
        cls, lambda n: ((n.a, n.b), None), lambda aux, ch: cls(*ch), namespace=namespace
    )
    registered.append((cls, namespace))
    all_leaves_settable({"n": cls([1, None], cls(2, (3,)))}, namespace)


def test_set_through_a_node_with_entries(registered: list[tuple[type, str]]) -> None:
    cls = make_node_class()
    oxtree.register_pytree_node(
        cls, lambda n: ((n.a, n.b), None, ("left", "right")), lambda aux, ch: cls(*ch)
    )
    registered.append((cls, ""))
    tree = [cls({"k": 1}, cls(2, None))]
    new = oxtree.tree_set(tree, (0, "right", "left"), SENTINEL)
    assert new[0].b.a is SENTINEL
    assert new[0].a is tree[0].a
    with pytest.raises(KeyError, match=re.escape("middle")):
        oxtree.tree_set(tree, (0, "middle"), SENTINEL)
    all_leaves_settable(tree)


def test_set_through_a_node_with_keys(registered: list[tuple[type, str]]) -> None:
    cls = make_node_class()
    oxtree.register_pytree_node(
        cls,
        lambda n: ((n.a, n.b), None),
        lambda aux, ch: cls(*ch),
        flatten_with_keys_func=lambda n: (
            ((oxtree.GetAttrKey("a"), n.a), (oxtree.DictKey("bee"), n.b)),
            None,
        ),
    )
    registered.append((cls, ""))
    tree = [cls({"k": 1}, [2])]
    # The key paths tree_leaves_with_path hands out lead back to their leaves.
    all_leaves_settable(tree)


def test_set_through_dataclasses(registered: list[tuple[type, str]]) -> None:
    @oxtree.dataclasses.dataclass(namespace="")
    class Layer:
        weight: Any
        name: str = oxtree.dataclasses.field(default="l", pytree_node=False)
        bias: Any = None

    registered.append((Layer, ""))
    tree = {"layers": [Layer([1, 2], bias=3), Layer(weight=Layer(4))]}
    new = oxtree.tree_set(tree, ("layers", 1, "weight", "weight"), SENTINEL)
    assert new["layers"][1].weight.weight is SENTINEL
    assert new["layers"][1].name == "l"
    assert new["layers"][0] is tree["layers"][0]
    key_path = (
        oxtree.DictKey("layers"),
        oxtree.SequenceKey(0),
        oxtree.GetAttrKey("bias"),
    )
    assert oxtree.tree_set(tree, key_path, SENTINEL)["layers"][0].bias is SENTINEL
    with pytest.raises(KeyError, match="nope"):
        oxtree.tree_set(tree, ("layers", 0, "nope"), SENTINEL)
    # A static field is not a child.
    with pytest.raises(KeyError, match="name"):
        oxtree.tree_set(tree, ("layers", 0, "name"), SENTINEL)
    all_leaves_settable(tree)


def test_set_through_register_dataclass(registered: list[tuple[type, str]]) -> None:
    import dataclasses

    @dataclasses.dataclass(frozen=True)
    class Frozen:
        x: Any
        y: Any

    oxtree.register_dataclass(Frozen)
    registered.append((Frozen, ""))
    tree = Frozen(x=(1, 2), y=Frozen(3, 4))
    new = oxtree.tree_set(tree, ("y", "x"), SENTINEL)
    assert new.y.x is SENTINEL
    assert new.x is tree.x
    assert tree.y.x == 3
    all_leaves_settable(tree)


# --------------------------------------------------------------------------------------------------
# Mismatch errors name the key path, printed as keystr does.


def test_mismatch_examples() -> None:
    with pytest.raises(ValueError, match=re.escape("tree['a']")):
        oxtree.tree_map(lambda *xs: xs, {"a": (1, 2)}, {"a": [1, 2]})
    with pytest.raises(ValueError, match=re.escape("tree[0]['k'].y")):
        oxtree.tree_map(lambda *xs: xs, [{"k": Point(1, [2])}], [{"k": Point(1, [2, 3])}])
    with pytest.raises(ValueError, match=re.escape("tree.dy")):
        oxtree.tree_map(lambda *xs: xs, Vector(1, (2,)), Vector(1, 2))


@pytest.mark.parametrize(
    "mapper",
    [
        oxtree.tree_map,
        oxtree.tree_map_,
        oxtree.tree_map_with_path,
        oxtree.tree_map_with_accessor,
        _core.tree_map_with_keys,
    ],
)
def test_every_mapper_names_the_key_path(mapper: Any) -> None:
    with pytest.raises(ValueError, match=re.escape("tree['a'].x[1]")):
        mapper(lambda *xs: None, {"a": Point([1, (2,)], 0)}, {"a": Point([1, 2], 0)})


def test_flatten_up_to_names_the_key_path() -> None:
    spec = oxtree.tree_structure({"a": Point([1, (2,)], 0)})
    with pytest.raises(ValueError, match=re.escape("tree['a'].x[1]")):
        spec.flatten_up_to({"a": Point([1, 2], 0)})


def test_dataclass_fields_are_named_like_attributes(registered: list[tuple[type, str]]) -> None:
    @oxtree.dataclasses.dataclass(namespace="")
    class Holder:
        field: Any
        other: Any = None

    registered.append((Holder, ""))
    with pytest.raises(ValueError, match=re.escape("tree['q'].field")):
        oxtree.tree_map(lambda *xs: xs, {"q": Holder([1, 2])}, {"q": Holder([1])})
    with pytest.raises(ValueError, match=re.escape("tree[0].other['k']")):
        oxtree.tree_map(lambda *xs: xs, [Holder(1, {"k": (1,)})], [Holder(1, {"k": [1]})])


def test_registered_nodes_are_named_like_their_key_paths(
    registered: list[tuple[type, str]],
) -> None:
    plain, keyed = make_node_class(), make_node_class()
    oxtree.register_pytree_node(plain, lambda n: ((n.a, n.b), None), lambda aux, ch: plain(*ch))
    registered.append((plain, ""))
    oxtree.register_pytree_node(
        keyed,
        lambda n: ((n.a, n.b), None),
        lambda aux, ch: keyed(*ch),
        flatten_with_keys_func=lambda n: (
            ((oxtree.GetAttrKey("a"), n.a), (oxtree.DictKey("bee"), n.b)),
            None,
        ),
    )
    registered.append((keyed, ""))
    for cls in (plain, keyed):
        tree, other = [cls(1, [2])], [cls(1, [2, 3])]
        bad_path = oxtree.tree_leaves_with_path(tree)[1][0][:-1]
        printed = "tree" + oxtree.keystr(bad_path)
        assert printed in ("tree[0][<flat index 1>]", "tree[0]['bee']")
        with pytest.raises(ValueError, match=re.escape(printed)):
            oxtree.tree_map(lambda *xs: xs, tree, other)


def internal_nodes(tree: Any) -> Iterator[tuple[Any, tuple[Any, ...]]]:
    """(accessor, key path) of every node above a leaf, except the root, each once."""
    pairs = zip(
        oxtree.tree_accessors(tree),
        [p for p, _ in oxtree.tree_leaves_with_path(tree)],
        strict=True,
    )
    seen: set[str] = set()
    for accessor, key_path in pairs:
        for depth in range(1, len(accessor)):
            code = accessor[:depth].codify()
            if code not in seen:
                seen.add(code)
                yield accessor[:depth], key_path[:depth]


@parametrize(tree=TREES)
def test_mismatch_anywhere_names_its_key_path(tree: Any) -> None:
    checked = 0
    for accessor, key_path in internal_nodes(tree):
        other = oxtree.tree_set(tree, accessor, Opaque("not a node"))
        with pytest.raises(ValueError, match="Mismatch at key path") as info:
            oxtree.tree_map(lambda *xs: None, tree, other)
        printed = "tree" + oxtree.keystr(key_path)
        assert re.search(re.escape(printed) + r"[ :(]", str(info.value)), (printed, info.value)
        checked += 1
        if checked >= 30:
            break
    assert checked or all(len(a) <= 1 for a in oxtree.tree_accessors(tree))
