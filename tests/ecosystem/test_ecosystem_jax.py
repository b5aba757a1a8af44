"""Types registered with JAX's own functions, seen through oxtree's JAX face.

One class per way of registering with `jax.tree_util` (register_pytree_node,
register_pytree_with_keys, register_pytree_node_class, register_pytree_with_keys_class,
register_dataclass as a decorator and with explicit fields, register_static), a dict subclass
registered with JAX, an unregistered subclass of a registered class, and `jax.tree_util.Partial`.
None of them is registered with oxtree: `oxtree.tree_util` and `oxtree.tree` must treat them
exactly as `jax.tree_util` and `jax.tree` do (ecosystem_oracle.py runs every operation with both).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.tree_util as jtu
import oxtree.tree_util as otu
import pytest
from ecosystem_oracle import (
    ARRAYS,
    HYPOTHESIS_SETTINGS,
    assert_identical,
    check_equalities,
    check_mismatch,
    check_tree,
    nestings,
)
from hypothesis import given
from hypothesis import strategies as st

A, B, C, D = ARRAYS


def add3(a: Any, b: Any = 0, *, c: Any = 0) -> Any:
    return a + b + c


def mul(a: Any, b: Any = 1) -> Any:
    return a * b


class Box:
    """register_pytree_node: children in a tuple, hashable aux data, no keys."""

    def __init__(self, *children: Any, meta: Any = 0) -> None:
        self.children, self.meta = children, meta

    def __repr__(self) -> str:
        return f"Box{self.children!r}"


jtu.register_pytree_node(Box, lambda b: (b.children, b.meta), lambda m, c: Box(*c, meta=m))


class SubBox(Box):
    """A subclass of a registered class, itself unregistered: a leaf to JAX."""


class ListChildren:
    """register_pytree_node whose flatten returns a list and None for the aux data."""

    def __init__(self, *items: Any) -> None:
        self.items = list(items)


jtu.register_pytree_node(ListChildren, lambda n: (n.items, None), lambda _, c: ListChildren(*c))


class UnhashableAux:
    """register_pytree_node with a list for aux data (JAX accepts it)."""

    def __init__(self, x: Any, aux: list[Any]) -> None:
        self.x, self.aux = x, aux


jtu.register_pytree_node(
    UnhashableAux, lambda u: ((u.x,), u.aux), lambda aux, c: UnhashableAux(c[0], aux)
)


class Keyed:
    """register_pytree_with_keys, with a separate flatten_func: attribute keys, sorted."""

    def __init__(self, **fields: Any) -> None:
        self.fields = fields


jtu.register_pytree_with_keys(
    Keyed,
    lambda k: (
        tuple((jtu.GetAttrKey(name), k.fields[name]) for name in sorted(k.fields)),
        tuple(sorted(k.fields)),
    ),
    lambda names, children: Keyed(**dict(zip(names, children, strict=True))),
    lambda k: (tuple(k.fields[name] for name in sorted(k.fields)), tuple(sorted(k.fields))),
)


class KeyedNoFlatten:
    """register_pytree_with_keys without flatten_func: dict keys and a sequence key."""

    def __init__(self, left: Any, right: Any) -> None:
        self.left, self.right = left, right


jtu.register_pytree_with_keys(
    KeyedNoFlatten,
    lambda k: (((jtu.DictKey("left"), k.left), (jtu.SequenceKey(7), k.right)), "lr"),
    lambda _, children: KeyedNoFlatten(*children),
)


@jtu.register_pytree_node_class
class ClassNode:
    """register_pytree_node_class: tree_flatten / tree_unflatten methods."""

    def __init__(self, x: Any, y: Any, tag: str = "t") -> None:
        self.x, self.y, self.tag = x, y, tag

    def tree_flatten(self) -> tuple[tuple[Any, Any], str]:
        return (self.x, self.y), self.tag

    @classmethod
    def tree_unflatten(cls, tag: str, children: Any) -> ClassNode:
        return cls(*children, tag=tag)


@jtu.register_pytree_with_keys_class
class KeysClassNode:
    """register_pytree_with_keys_class: tree_flatten_with_keys (and tree_flatten)."""

    def __init__(self, first: Any, second: Any) -> None:
        self.first, self.second = first, second

    def tree_flatten_with_keys(self) -> tuple[Any, None]:
        return (
            (jtu.GetAttrKey("first"), self.first),
            (jtu.GetAttrKey("second"), self.second),
        ), None

    def tree_flatten(self) -> tuple[tuple[Any, Any], None]:
        return (self.first, self.second), None

    @classmethod
    def tree_unflatten(cls, _: None, children: Any) -> KeysClassNode:
        return cls(*children)


@jtu.register_dataclass
@dataclasses.dataclass
class DC:
    """register_dataclass as a decorator: fields from the dataclass, `static` metadata."""

    x: Any
    y: Any
    name: str = dataclasses.field(default="d", metadata={"static": True})


@dataclasses.dataclass
class Explicit:
    """register_dataclass with explicit data fields (out of declaration order), meta fields
    and a dropped field."""

    a: Any
    b: Any
    meta: str = "m"
    scratch: Any = dataclasses.field(default=None, init=False)


jtu.register_dataclass(
    Explicit, data_fields=["b", "a"], meta_fields=["meta"], drop_fields=["scratch"]
)


@jtu.register_static
class Static:
    """register_static: a node without children whose value is the aux data."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return type(other) is Static and other.value == self.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        return f"Static({self.value!r})"


class JDict(dict):
    """A dict subclass registered with JAX (dict subclasses are leaves to both otherwise)."""


jtu.register_pytree_node(
    JDict, lambda d: (tuple(d.values()), tuple(d)), lambda keys, v: JDict(zip(keys, v, strict=True))
)

Partial = jtu.Partial

TREES: dict[str, Any] = {
    "box": Box(A, 1),
    "box_empty": Box(),
    "box_meta": Box(A, meta=("m", 1)),
    "box_of_nones": Box(None, (None,)),
    "sub_box_is_a_leaf": [SubBox(A), Box(SubBox(B))],
    "list_children": ListChildren(A, [B, None]),
    "unhashable_aux": UnhashableAux({"q": A}, [1, 2]),
    "keyed": Keyed(z=A, a=[B, C], m=None),
    "keyed_no_flatten": KeyedNoFlatten(A, {"b": B}),
    "class_node": ClassNode(A, (B, 2)),
    "keys_class_node": KeysClassNode([A], {"k": B}),
    "dataclass": DC(A, [B, None]),
    "dataclass_meta": DC(A, B, name="e"),
    "explicit_dataclass": Explicit(A, {"k": B}),
    "static": Static(3),
    "static_in_list": [A, Static((1, 2)), B],
    "jdict": JDict(b=A, a=B),
    "partial": Partial(add3, A, c=B),
    "partial_no_args": Partial(add3),
    "partial_nested": Partial(add3, Box(A), c={"d": [B]}),
    "mixed": {
        "box": Box(ClassNode(DC(A, None), Keyed(p=B))),
        "list": [Explicit(C, Static(1)), Partial(mul, D), JDict(z=(A,))],
        "none": None,
    },
    "deep": Box(Box(Box(KeysClassNode(Box(A), DC(Box(), B))))),
}


@pytest.mark.parametrize("name", list(TREES))
def test_jax_registrations_match_jax(name: str) -> None:
    check_tree(TREES[name])


def is_box(x: Any) -> bool:
    return isinstance(x, Box)


def is_dataclass_instance(x: Any) -> bool:
    return dataclasses.is_dataclass(x) and not isinstance(x, type)


@pytest.mark.parametrize("is_leaf", [is_box, is_dataclass_instance])
@pytest.mark.parametrize("name", ["box", "mixed", "deep", "partial_nested"])
def test_is_leaf_stops_at_jax_registered_nodes_like_jax(name: str, is_leaf: Any) -> None:
    check_tree(TREES[name], is_leaf)


def test_keys_of_jax_nodes_are_jax_key_objects() -> None:
    """The keys a JAX-registered node's flatten_with_keys gives (register_dataclass fields,
    register_pytree_with_keys keys) are JAX's own key objects, as JAX hands them out."""
    for tree in (DC(A, B), Explicit(A, B), Keyed(a=A), KeyedNoFlatten(A, B), KeysClassNode(A, B)):
        theirs = jtu.tree_flatten_with_path(tree)[0]
        ours = otu.tree_flatten_with_path(tree)[0]
        assert [type(path[0]) for path, _ in ours] == [type(path[0]) for path, _ in theirs]
        assert [path for path, _ in ours] == [path for path, _ in theirs]


def test_keys_of_keyless_jax_nodes_are_flattened_indices() -> None:
    """A node registered without keys gets JAX's FlattenedIndexKey(i), one per child."""
    ours = otu.tree_flatten_with_path(Box(A, B))[0]
    assert [otu.keystr(path) for path, _ in ours] == ["[<flat index 0>]", "[<flat index 1>]"]
    assert [repr(path) for path, _ in ours] == [
        repr(path) for path, _ in jtu.tree_flatten_with_path(Box(A, B))[0]
    ]


def test_partial_is_a_node_as_in_jax() -> None:
    """jax.tree_util.Partial flattens to its arguments (a tuple and a dict), the function in
    the aux data; oxtree's own Partial is another class."""
    part = Partial(add3, A, c=B)
    assert_identical(otu.tree_leaves(part), [A, B])
    rebuilt = otu.tree_unflatten(otu.tree_structure(part), [C, D])
    assert type(rebuilt) is Partial
    assert rebuilt.func is add3
    assert rebuilt.args[0] is C
    assert rebuilt.keywords["c"] is D


EQUALITY_TREES = [
    Box(A, meta=0),
    Box(B, meta=0),  # equal to the first: only a leaf differs
    Box(A, meta=1),
    Box(A, A),
    (A,),
    SubBox(A),
    ListChildren(A),
    UnhashableAux(A, [1]),
    UnhashableAux(B, [1]),
    UnhashableAux(A, [2]),
    Keyed(a=A, b=B),
    Keyed(a=B, b=A),
    Keyed(a=A, c=B),
    ClassNode(A, B),
    ClassNode(A, B, tag="u"),
    KeysClassNode(A, B),
    DC(A, B),
    DC(B, A),
    DC(A, B, name="e"),
    Explicit(A, B),
    Explicit(A, B, meta="n"),
    Static(1),
    Static(1),
    Static(2),
    JDict(a=A),
    JDict(b=A),
    {"a": A},
    Partial(add3, A),
    Partial(add3, B),
    Partial(mul, A),
    Partial(add3, A, c=B),
    [Box(A), None],
    [Box(B), None],
    [Box(A), ()],
]


def test_treedef_equality_follows_jax() -> None:
    check_equalities(EQUALITY_TREES)


MISMATCHES = {
    "box_arity": (Box(A), Box(A, B)),
    "box_meta": (Box(A, meta=0), Box(A, meta=1)),
    "box_vs_tuple": ([0, Box(A)], [0, (A,)]),
    "box_vs_subbox": ([Box(A)], [SubBox(A)]),
    "class_node_tag": (ClassNode(A, B), ClassNode(A, B, tag="u")),
    "keyed_names": (Keyed(a=A), Keyed(b=A)),
    "dataclass_meta": ({"k": DC(A, B)}, {"k": DC(A, B, name="e")}),
    "dataclass_vs_explicit": (DC(A, B), Explicit(A, B)),
    "static_values": ([Static(1)], [Static(2)]),
    "jdict_keys": (JDict(a=A), JDict(b=A)),
    "partial_functions": (Partial(add3, A), Partial(mul, A)),
    "partial_arity": (Partial(add3, A), Partial(add3, A, B)),
    "deep": (Box(Box(DC(A, (B,)))), Box(Box(DC(A, [B])))),
}


@pytest.mark.parametrize("name", list(MISMATCHES))
def test_structure_mismatches_raise_where_jax_raises(name: str) -> None:
    check_mismatch(*MISMATCHES[name])


def _builders() -> list[Any]:
    return [
        lambda ch: st.builds(lambda *c: Box(*c), ch, ch),
        lambda ch: st.builds(ListChildren, ch),
        lambda ch: st.builds(lambda a, b: Keyed(b=a, a=b), ch, ch),
        lambda ch: st.builds(ClassNode, ch, ch),
        lambda ch: st.builds(KeysClassNode, ch, ch),
        lambda ch: st.builds(DC, ch, ch, st.sampled_from(["d", "e"])),
        lambda ch: st.builds(Explicit, ch, ch),
        lambda ch: st.builds(lambda a, b: Partial(add3, a, c=b), ch, ch),
    ]


RANDOM_TREES = nestings(_builders(), fixed=[Static(1), SubBox(A), Partial(mul), JDict(a=B)])


@HYPOTHESIS_SETTINGS
@given(tree=RANDOM_TREES)
def test_random_nestings_of_jax_registrations_match_jax(tree: Any) -> None:
    check_tree(tree)


@HYPOTHESIS_SETTINGS
@given(trees=st.lists(nestings(_builders(), max_leaves=3), min_size=2, max_size=4))
def test_random_treedef_equalities_follow_jax(trees: list[Any]) -> None:
    check_equalities(trees)
