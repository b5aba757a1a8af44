"""Namespaces on treespecs, against optree: which walks keep theirs, `==` and `hash` with an
empty namespace, and merging treespecs of different namespaces (compose, transform,
broadcast, the constructors, transpose), with optree's texts."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import optree
import oxtree
import pytest

LIBS = [optree, oxtree]


def global_namespace(m: ModuleType) -> Any:
    """What names the global namespace in `dict_insertion_ordered` (optree refuses '')."""
    return vars(m.registry).get("__GLOBAL_NAMESPACE", "")


def outcome(run: Callable[[], Any]) -> str:
    """The repr of what `run` returns, or the type and message of what it raises, with
    object addresses and module paths left out."""
    try:
        text = repr(run())
    except Exception as error:  # the outcome is compared, whatever it is
        text = f"{type(error).__name__}: {error}"
    text = re.sub(r" at 0x[0-9a-f]+", "", text)
    return re.sub(r"<class '[^']*\.", "<class '", text)


class Pair:
    def __init__(self, a: Any, b: Any) -> None:
        self.a, self.b = a, b


class Single:
    def __init__(self, x: Any) -> None:
        self.x = x


class GlobalOnly:
    def __init__(self, *children: Any) -> None:
        self.children = children


@pytest.fixture
def registered() -> Iterator[None]:
    """Pair registered globally and, otherwise, in 'other'; Single in 'other' only;
    GlobalOnly globally only: in both libraries."""
    for m in LIBS:
        g = global_namespace(m) or ""
        m.register_pytree_node(
            Pair, lambda p: ((p.a, p.b), None, None), lambda _, c: Pair(*c), namespace=g
        )
        m.register_pytree_node(
            Pair,
            lambda p: ((p.b, p.a), None, None),
            lambda _, c: Pair(c[1], c[0]),
            namespace="other",
        )
        m.register_pytree_node(
            Single, lambda s: ((s.x,), None, None), lambda _, c: Single(*c), namespace="other"
        )
        m.register_pytree_node(
            GlobalOnly, lambda t: (t.children, None, None), lambda _, c: GlobalOnly(*c), namespace=g
        )
    yield
    for m in LIBS:
        g = global_namespace(m) or ""
        m.unregister_pytree_node(Pair, namespace=g)
        m.unregister_pytree_node(Pair, namespace="other")
        m.unregister_pytree_node(Single, namespace="other")
        m.unregister_pytree_node(GlobalOnly, namespace=g)


def same(run: Callable[[ModuleType], Any]) -> str:
    """Runs `run` with optree and with oxtree and checks both end the same way."""
    expected, got = (outcome(lambda m=m: run(m)) for m in LIBS)
    assert got == expected
    return got


def test_a_walk_keeps_its_namespace_when_a_custom_node_is_found(registered: None) -> None:
    text = same(lambda m: m.tree_structure(GlobalOnly(1, 2), namespace="other"))
    assert "namespace='other'" in text
    text = same(lambda m: m.tree_structure([1, (2, {"a": 3})], namespace="other"))
    assert "namespace" not in text


def test_a_walk_keeps_its_namespace_when_it_orders_dicts_by_insertion() -> None:
    def walk(m: ModuleType, mode_namespace: Any) -> Any:
        with m.dict_insertion_ordered(True, namespace=mode_namespace):
            return m.tree_structure({"b": 1, "a": 2}, namespace="other")

    assert "namespace='other'" in same(lambda m: walk(m, "other"))
    assert "namespace" not in same(lambda m: walk(m, global_namespace(m)))


def test_an_empty_namespace_matches_any(registered: None) -> None:
    for m in LIBS:
        plain = m.tree_structure(GlobalOnly(1, 2))
        named = m.tree_structure(GlobalOnly(1, 2), namespace="other")
        assert (plain.namespace, named.namespace) == ("", "other")
        assert plain == named
        assert hash(plain) == hash(named)
        assert len({plain, named}) == 1
        assert m.tree_structure(Pair(1, 2), namespace="other") != m.tree_structure(
            Pair(1, 2), namespace="third"
        )


def test_treespec_dict_keeps_an_insertion_ordered_namespace() -> None:
    def make(m: ModuleType) -> Any:
        leaf = m.treespec_leaf()
        with m.dict_insertion_ordered(True, namespace="other"):
            made = m.treespec_dict({"b": leaf, "a": leaf}, namespace="other")
            walked = m.tree_structure({"b": 1, "a": 2}, namespace="other")
        assert made == walked
        return made, made.entries()

    assert "namespace='other'" in same(make)


@pytest.mark.parametrize(
    "merge",
    [
        lambda m: m.tree_structure(Pair(0, 0)).compose(
            m.tree_structure(Single(0), namespace="other")
        ),
        lambda m: m.tree_structure({"k": Pair(0, 0)}).broadcast_to_common_suffix(
            m.tree_structure({"k": Single(0)}, namespace="other")
        ),
        lambda m: m.treespec_from_collection(
            [m.tree_structure(Pair(0, 0)), m.tree_structure(Single(0), namespace="other")]
        ),
        lambda m: m.tree_structure(Pair(0, 0)).transform(
            None, lambda _: m.tree_structure(Single(0), namespace="other")
        ),
        lambda m: m.tree_transpose(
            m.tree_structure(Pair(0, 0)),
            m.tree_structure(Single(0), namespace="other"),
            [1, 2, 3],  # too few leaves: the merge is refused while explaining that
        ),
    ],
    ids=["compose", "broadcast", "from_collection", "transform", "transpose"],
)
def test_merging_into_a_namespace_that_registers_a_type_otherwise_raises(
    registered: None, merge: Callable[[ModuleType], Any]
) -> None:
    text = same(merge)
    assert text.startswith("ValueError: PyTreeSpecs cannot be ")
    assert "no longer resolves to its original registration in namespace 'other'." in text


def test_merging_a_type_registered_only_globally_is_allowed(registered: None) -> None:
    def merge(m: ModuleType) -> Any:
        outer = m.tree_structure(GlobalOnly(0, 0))
        inner = m.tree_structure(Single(0), namespace="other")
        composed = outer.compose(inner)
        return composed, composed.unflatten([1, 2]).children[1].x

    assert "namespace='other'" in same(merge)


@pytest.mark.parametrize(
    "misuse",
    [
        lambda m: m.tree_structure(Pair(0, 0), namespace="other").compose(
            m.tree_structure(GlobalOnly(0), namespace="third")
        ),
        lambda m: m.tree_transpose(
            m.tree_structure(Pair(0, 0), namespace="other"),
            m.tree_structure(GlobalOnly(0), namespace="third"),
            Pair(GlobalOnly(1), GlobalOnly(2)),
        ),
        lambda m: m.treespec_list(
            [
                m.tree_structure(Pair(0, 0), namespace="other"),
                m.tree_structure(GlobalOnly(0), namespace="third"),
            ]
        ),
        lambda m: m.treespec_list(
            [m.tree_structure(Pair(0, 0), namespace="other")], namespace="third"
        ),
        lambda m: m.treespec_list([m.treespec_leaf(), 1]),
        lambda m: m.treespec_dict({"a": m.treespec_leaf(), "b": [m.treespec_leaf()]}),
        lambda m: m.treespec_from_collection([m.treespec_leaf(none_is_leaf=True)]),
    ],
    ids=[
        "compose",
        "transpose",
        "children-of-two-namespaces",
        "children-of-another-namespace",
        "not-a-treespec",
        "not-a-treespec-dict",
        "none-is-leaf",
    ],
)
def test_merge_errors_say_optrees_words(
    registered: None, misuse: Callable[[ModuleType], Any]
) -> None:
    assert same(misuse).startswith("ValueError: ")


@pytest.mark.parametrize(
    "f",
    [
        (lambda m: None, None),
        (None, lambda m: lambda _: None),
        (lambda m: lambda _: m.tree_structure([0, 1]), None),
        (lambda m: lambda s: m.tree_structure([None] + [0] * s.num_children), None),
        (
            lambda m: (
                lambda s: m.treespec_list(
                    [m.treespec_leaf(none_is_leaf=True)] * s.num_children, none_is_leaf=True
                )
            ),
            None,
        ),
        (
            lambda m: lambda s: m.tree_structure(GlobalOnly(*range(s.num_children)), namespace="a"),
            lambda m: lambda _: m.tree_structure(GlobalOnly(0), namespace="b"),
        ),
    ],
    ids=["f_node-none", "f_leaf-none", "arity", "one-level", "none-is-leaf", "two-namespaces"],
)
def test_transform_errors_say_optrees_words(registered: None, f: Any) -> None:
    make_node, make_leaf = f

    def run(m: ModuleType) -> Any:
        f_node = make_node(m) if make_node is not None else None
        f_leaf = make_leaf(m) if make_leaf is not None else None
        if f_node is None and make_node is not None:
            f_node = lambda _: None  # noqa: E731 - a function that returns no treespec
        return m.tree_structure(((1, 2, 3), (4,))).transform(f_node, f_leaf)

    text = same(run)
    assert text.startswith(
        ("TypeError: Expected the PyTreeSpec", "ValueError: Expected the PyTreeSpec")
    )
