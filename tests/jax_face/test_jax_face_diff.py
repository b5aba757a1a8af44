"""`oxtree.tree_util` / `oxtree.tree` against `jax.tree_util` / `jax.tree` (jax 0.10.2).

Every public name of JAX's two modules, run on the same inputs with both libraries: same results
(leaves by identity, `repr` of treedefs and rebuilt trees), same signatures, same exception types;
where a structure error has a key path, oxtree's message names it in keystr form.

Inputs are the corpus trees jax flattens like oxtree does (`JAX_TREES`), the whole corpus for
flattening (deques and struct sequences are leaves, OrderedDict/defaultdict custom nodes, mixed
dict keys an error), random trees of the kinds jax supports, and per-library kits of registered
classes. jax's registry is global and permanent, so each library gets its own fresh classes
(same names, so printed output matches); oxtree's registrations are undone after the module.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import os
import re
import time
import typing
from collections import OrderedDict, defaultdict, deque
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import jax.tree
import jax.tree_util
import numpy as np
import oxtree
import oxtree.tree
import oxtree.tree_util
import pytest
from helpers import CORPUS, HYPOTHESIS_SETTINGS, INNER_TREES, OPAQUE, parametrize
from hypothesis import assume, given
from hypothesis import strategies as st
from nodes import Point, Rec, Triple, Vector
from paths_helpers import JAX_TREES, Hit, jax_path

JTU, JT = jax.tree_util, jax.tree
OTU, OT = oxtree.tree_util, oxtree.tree
JAX = (JTU, JT)
OX = (OTU, OT)

JAX_TREE_LIST = list(JAX_TREES.values())
CORPUS_LIST = list(CORPUS.values())


def none_is_leaf(x: Any) -> bool:
    return x is None


def tuple_is_leaf(x: Any) -> bool:
    return type(x) is tuple


IS_LEAF = [None, none_is_leaf, tuple_is_leaf]


def add3(a: Any, b: Any = 0, *, c: Any = 0) -> Any:
    """A module-level function, so treedefs of Partials that hold it print the same address."""
    return a + b + c


# --------------------------------------------------------------------------------------------------
# Running a function with both libraries.


def outcome(fn: Callable[[Any, Any], Any], mods: tuple[Any, Any]) -> tuple[str, Any]:
    try:
        return ("ok", fn(*mods))
    except Exception as exc:
        return ("raise", type(exc))


def both(fn: Callable[[Any, Any], Any], key: Callable[[Any], Any] = repr) -> tuple[Any, Any] | None:
    """Run `fn(tree_util, tree)` with jax's and oxtree's modules: both raise the same exception
    type (returns None), or both return results with equal `key` (returns the two results)."""
    theirs, ours = outcome(fn, JAX), outcome(fn, OX)
    if theirs[0] == "raise" or ours[0] == "raise":
        assert ours == theirs, f"jax: {theirs}, oxtree: {ours}"
        return None
    assert key(ours[1]) == key(theirs[1])
    return theirs[1], ours[1]


def assert_identical(ours: Any, theirs: Any) -> None:
    """Two sequences hold the very same objects."""
    ours, theirs = list(ours), list(theirs)
    assert len(ours) == len(theirs), (ours, theirs)
    for index, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        assert a is b, f"item {index}: {a!r} is not {b!r}"


def assert_same_pairs(ours: Any, theirs: Any) -> None:
    """`[(key_path, leaf), ...]`: same keys (repr, keystr, meaning) and the very same leaves."""
    assert type(ours) is type(theirs) is list
    assert len(ours) == len(theirs)
    for (our_path, our_leaf), (their_path, their_leaf) in zip(ours, theirs, strict=True):
        assert repr(our_path) == repr(their_path)
        assert jax_path(our_path) == their_path
        assert OTU.keystr(our_path) == JTU.keystr(their_path)
        assert our_leaf is their_leaf


def widened(tree: Any, is_leaf: Any = None) -> Any:
    """`tree` with a small subtree in place of each leaf (built once, with jax, for both runs)."""
    return JTU.tree_map(lambda x: [x, (x, {"inner": x})], tree, is_leaf=is_leaf)


def subtrees(tree: Any) -> Iterator[Any]:
    """Every subtree of a jax-compatible tree, as jax sees it."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        if node is not None and JTU.is_tree_node(type(node)) and type(node) is not JTU.Partial:
            children, _ = JTU.flatten_one_level(node)
            stack.extend(children)


# --------------------------------------------------------------------------------------------------
# Checks shared by the corpus tests, the random-tree tests and the registered-class tests.


def check_flatten(tree: Any, is_leaf: Any = None) -> None:
    result = both(lambda tu, tr: tu.tree_flatten(tree, is_leaf))
    if result is None:
        for fn in (
            lambda tu, tr: tu.tree_leaves(tree, is_leaf),
            lambda tu, tr: tu.tree_structure(tree, is_leaf),
            lambda tu, tr: tr.flatten(tree, is_leaf),
        ):
            assert both(fn) is None
        return
    (their_leaves, their_def), (our_leaves, our_def) = result
    assert type(our_leaves) is list
    assert_identical(our_leaves, their_leaves)
    assert repr(our_def) == repr(their_def)
    assert str(our_def) == str(their_def)
    assert_identical(OTU.tree_leaves(tree, is_leaf), their_leaves)
    assert_identical(OT.leaves(tree, is_leaf), their_leaves)
    assert_identical(OT.flatten(tree, is_leaf)[0], their_leaves)
    assert repr(OTU.tree_structure(tree, is_leaf)) == repr(their_def)
    assert repr(OT.structure(tree, is_leaf)) == repr(their_def)
    # Round trips: dicts come back in sorted key order, as jax rebuilds them.
    theirs = JTU.tree_unflatten(their_def, their_leaves)
    ours = OTU.tree_unflatten(our_def, our_leaves)
    assert repr(ours) == repr(theirs)
    assert repr(OT.unflatten(our_def, iter(our_leaves))) == repr(theirs)
    assert repr(our_def.unflatten(our_leaves)) == repr(theirs)
    assert_identical(OTU.tree_leaves(ours, is_leaf), their_leaves)
    assert repr(OTU.tree_structure(ours, is_leaf)) == repr(their_def)


def check_map(tree: Any, is_leaf: Any = None) -> None:
    result = both(lambda tu, tr: tu.tree_map(Rec, tree, is_leaf=is_leaf))
    assert result is not None
    theirs, ours = result
    leaf_recs = lambda t: JTU.tree_leaves(t, is_leaf=lambda x: type(x) is Rec)  # noqa: E731
    assert leaf_recs(ours) == leaf_recs(theirs)  # Rec equality: same objects passed
    rest = widened(tree, is_leaf)
    for fn in (
        lambda tu, tr: tu.tree_map(Rec, tree, rest, is_leaf=is_leaf),
        lambda tu, tr: tr.map(Rec, tree, tree, rest, is_leaf=is_leaf),
    ):
        result = both(fn)
        assert result is not None
        theirs, ours = result
        assert leaf_recs(ours) == leaf_recs(theirs)


def check_paths(tree: Any, is_leaf: Any = None) -> None:
    result = both(lambda tu, tr: tu.tree_flatten_with_path(tree, is_leaf))
    assert result is not None
    (their_pairs, their_def), (our_pairs, our_def) = result
    assert_same_pairs(our_pairs, their_pairs)
    assert repr(our_def) == repr(their_def)
    assert_same_pairs(OTU.tree_leaves_with_path(tree, is_leaf), their_pairs)
    assert_same_pairs(OT.leaves_with_path(tree, is_leaf), their_pairs)
    assert_same_pairs(OT.flatten_with_path(tree, is_leaf)[0], their_pairs)
    rest = widened(tree, is_leaf)
    for fn in (
        lambda tu, tr: tu.tree_map_with_path(Hit, tree, is_leaf=is_leaf),
        lambda tu, tr: tr.map_with_path(Hit, tree, rest, is_leaf=is_leaf),
    ):
        result = both(fn, key=lambda t: repr(JTU.tree_structure(t)))
        assert result is not None
        theirs, ours = result
        our_hits, their_hits = JTU.tree_leaves(ours), JTU.tree_leaves(theirs)
        assert len(our_hits) == len(their_hits)
        for our_hit, their_hit in zip(our_hits, their_hits, strict=True):
            assert our_hit.same_as(their_hit, convert=jax_path), (our_hit, their_hit)
            assert OTU.keystr(our_hit.where) == JTU.keystr(their_hit.where)


class Cat:
    """A leaf wrapper whose `+` concatenates: associative, and keeps the objects it saw."""

    def __init__(self, *items: Any) -> None:
        self.items = items

    def __add__(self, other: Cat) -> Cat:
        return Cat(*self.items, *other.items)


def check_reductions(tree: Any, is_leaf: Any = None) -> None:
    leaves = JTU.tree_leaves(tree, is_leaf)
    assert OTU.all_leaves(leaves, is_leaf) is JTU.all_leaves(leaves, is_leaf)
    assert OTU.all_leaves([tree], is_leaf) is JTU.all_leaves([tree], is_leaf)
    # (Array leaves make `all` raise: then the same exception type as jax.)
    both(lambda tu, tr: tu.tree_all(tree, is_leaf=is_leaf))
    both(lambda tu, tr: tr.all(tree, is_leaf=is_leaf))
    truthy = JTU.tree_map(lambda _: 1, tree, is_leaf=is_leaf)
    assert both(lambda tu, tr: tu.tree_all(truthy, is_leaf=is_leaf)) is not None
    # reduce: the function sees the same objects in the same order.
    pair = lambda a, b: (a, b)  # noqa: E731
    for fn in (
        lambda tu, tr: tu.tree_reduce(pair, tree, is_leaf=is_leaf),
        lambda tu, tr: tu.tree_reduce(pair, tree, "init", is_leaf),
        lambda tu, tr: tr.reduce(pair, tree, initializer=None, is_leaf=is_leaf),
    ):
        result = both(fn)
        if result is not None:
            theirs, ours = result
            assert_identical(
                JTU.tree_leaves(ours, is_leaf=lambda x: x is None),
                JTU.tree_leaves(theirs, is_leaf=lambda x: x is None),
            )
    # reduce_associative with an associative operation: same result, same objects.
    cats = JTU.tree_map(Cat, tree, is_leaf=is_leaf)
    is_cat = lambda x: type(x) is Cat  # noqa: E731
    calls = [
        lambda tu, tr: tr.reduce_associative(
            lambda a, b: a + b, cats, identity=Cat(), is_leaf=is_cat
        )
    ]
    if leaves:  # (empty trees without identity: test_reduce_associative_of_an_empty_tree...)
        calls.append(
            lambda tu, tr: tu.tree_reduce_associative(lambda a, b: a + b, cats, is_leaf=is_cat)
        )
    for fn in calls:
        result = both(fn, key=lambda c: len(c.items))
        assert result is not None
        theirs, ours = result
        assert_identical(ours.items, theirs.items)


def inner_of(x: Any) -> Any:
    return (x, [x, None])


def check_transpose(tree: Any) -> None:
    def make(tu: Any) -> tuple[Any, Any]:
        outer = tu.tree_structure(tree)
        return outer, outer.unflatten([inner_of(x) for x in tu.tree_leaves(tree)])

    for fn in (
        lambda tu, tr: tu.tree_transpose(make(tu)[0], tu.tree_structure(inner_of(0)), make(tu)[1]),
        lambda tu, tr: tr.transpose(make(tu)[0], None, make(tu)[1]),
    ):
        result = both(fn)
        assert result is not None
        theirs, ours = result
        assert_identical(OTU.tree_leaves(ours), JTU.tree_leaves(theirs))


def check_broadcast(tree: Any) -> None:
    full = widened(tree)
    for prefix, full_tree in ((tree, full), (0, tree), ("p", full)):
        for fn in (
            lambda tu, tr, p=prefix, f=full_tree: tu.tree_broadcast(p, f),
            lambda tu, tr, p=prefix, f=full_tree: tr.broadcast(p, f),
        ):
            result = both(fn)
            assert result is not None
            theirs, ours = result
            assert_identical(OTU.tree_leaves(ours), JTU.tree_leaves(theirs))


def node_summary(tu: Any, treedef: Any) -> Any:
    """The treedef's node data, counts and children's summaries, recursively (through
    `children()`)."""
    return (
        repr(treedef),
        repr(treedef.node_data()),
        treedef.num_leaves,
        treedef.num_nodes,
        tu.treedef_is_leaf(treedef),
        [node_summary(tu, child) for child in treedef.children()],
    )


def rebuild(tu: Any, treedef: Any) -> Any:
    """The treedef rebuilt bottom-up from `node_data()` and `children()` with
    `PyTreeDef.from_node_data_and_children`."""
    children = [rebuild(tu, child) for child in treedef.children()]
    return tu.PyTreeDef.from_node_data_and_children(
        tu.default_registry, treedef.node_data(), children
    )


def one_level(tree: Any) -> list[Any]:
    """The children of a jax-compatible tree's root (none for a leaf)."""
    if tree is None or not JTU.is_tree_node(type(tree)):
        return []
    return list(JTU.flatten_one_level(tree)[0])


def check_treedef(tree: Any, is_leaf: Any = None) -> None:
    """Treedef methods and the `treedef_*` functions (children compared by their own flattening;
    their printed form is `check_children_print`)."""
    their_def, our_def = JTU.tree_structure(tree, is_leaf), OTU.tree_structure(tree, is_leaf)
    for sub in subtrees(tree) if is_leaf is None else [tree]:
        their_sub, our_sub = JTU.tree_structure(sub), OTU.tree_structure(sub)
        assert repr(our_sub.node_data()) == repr(their_sub.node_data())
        assert our_sub.num_leaves == their_sub.num_leaves
        assert our_sub.num_nodes == their_sub.num_nodes
        assert OTU.treedef_is_leaf(our_sub) is JTU.treedef_is_leaf(their_sub)
        # from_node_data_and_children, one level at a time, children from tree_structure.
        children = one_level(sub)
        theirs = JTU.PyTreeDef.from_node_data_and_children(
            JTU.default_registry,
            their_sub.node_data(),
            [JTU.tree_structure(c) for c in children],
        )
        ours = OTU.PyTreeDef.from_node_data_and_children(
            OTU.default_registry, our_sub.node_data(), [OTU.tree_structure(c) for c in children]
        )
        assert repr(ours) == repr(theirs) == repr(their_sub)
        assert ours == our_sub
        assert hash(ours) == hash(our_sub)
    our_children, their_children = OTU.treedef_children(our_def), JTU.treedef_children(their_def)
    assert type(our_children) is list
    assert len(our_children) == len(their_children)
    assert our_children == our_def.children()
    assert [c.num_leaves for c in our_children] == [c.num_leaves for c in their_children]
    assert [c.num_nodes for c in our_children] == [c.num_nodes for c in their_children]
    # flatten_up_to / unflatten / compose.
    leaves = JTU.tree_leaves(tree, is_leaf)
    assert_identical(our_def.flatten_up_to(tree), their_def.flatten_up_to(tree))
    full = widened(tree, is_leaf)
    assert repr(our_def.flatten_up_to(full)) == repr(their_def.flatten_up_to(full))
    assert_identical(
        [sub[0] for sub in our_def.flatten_up_to(full)],
        [sub[0] for sub in their_def.flatten_up_to(full)],
    )
    assert repr(our_def.unflatten(iter(leaves))) == repr(their_def.unflatten(iter(leaves)))
    for inner in INNER_TREES.values():
        their_composed = their_def.compose(JTU.tree_structure(inner))
        our_composed = our_def.compose(OTU.tree_structure(inner))
        assert repr(our_composed) == repr(their_composed)
        assert our_composed.num_leaves == their_composed.num_leaves
    # treedef_tuple.
    for parts in ([], [tree], [tree, None, {"k": tree}]):
        their_tuple = JTU.treedef_tuple([JTU.tree_structure(p, is_leaf) for p in parts])
        our_tuple = OTU.treedef_tuple([OTU.tree_structure(p, is_leaf) for p in parts])
        assert repr(our_tuple) == repr(their_tuple)
        assert our_tuple == OTU.tree_structure(tuple(parts), is_leaf)


def walk_node(children: Any, data: Any) -> Any:
    return ("node", children, data)


def walk_leaf(x: Any) -> Any:
    return ("leaf", x)


def check_walk(tree: Any, is_leaf: Any = None) -> None:
    leaves = JTU.tree_leaves(tree, is_leaf)
    their_def, our_def = JTU.tree_structure(tree, is_leaf), OTU.tree_structure(tree, is_leaf)
    theirs = their_def.walk(walk_node, walk_leaf, leaves)
    ours = our_def.walk(walk_node, walk_leaf, iter(leaves))
    assert repr(ours) == repr(theirs)


def check_one_level(tree: Any) -> None:
    """flatten_one_level(_with_keys) and is_tree_node on every subtree."""
    for sub in subtrees(tree):
        assert OTU.is_tree_node(type(sub)) is JTU.is_tree_node(type(sub))
        result = both(lambda tu, tr, s=sub: tu.flatten_one_level(s), key=lambda r: repr(r[1]))
        if result is not None:
            (their_children, _), (our_children, _) = result
            assert_identical(our_children, their_children)
        result = both(
            lambda tu, tr, s=sub: tu.flatten_one_level_with_keys(s), key=lambda r: repr(r[1])
        )
        if result is not None:
            (their_pairs, _), (our_pairs, _) = result
            assert_identical([c for _, c in our_pairs], [c for _, c in their_pairs])
            # jax 0.10.2 names every namedtuple child after the first field: keys differ there.
            if not hasattr(type(sub), "_fields"):
                assert [repr(k) for k, _ in our_pairs] == [repr(k) for k, _ in their_pairs]


# --------------------------------------------------------------------------------------------------
# Public names and signatures.

MODULE_PAIRS = {"tree_util": (JTU, OTU), "tree": (JT, OT)}


def public_names(module: Any) -> set[str]:
    return {name for name in dir(module) if not name.startswith("_")}


@pytest.mark.parametrize("which", list(MODULE_PAIRS))
def test_public_names_are_a_superset(which: str) -> None:
    theirs, ours = MODULE_PAIRS[which]
    assert public_names(theirs)
    assert public_names(theirs) <= public_names(ours)


def _nanobind_signature(cls: type) -> inspect.Signature | None:
    """The signature a nanobind class's ``__init__`` docstring states
    (``__init__(self, key: object | None) -> None``), without ``self``; None when it states
    none. Annotations are read, never evaluated."""
    doc = getattr(getattr(cls, "__init__", None), "__doc__", None) or ""
    first = doc.strip().splitlines()[0] if doc.strip() else ""
    if not first.startswith("__init__("):
        return None
    fn = ast.parse(f"def f{first[len('__init__') :]}: pass").body[0]
    assert isinstance(fn, ast.FunctionDef)
    args = fn.args
    P = inspect.Parameter
    params: list[inspect.Parameter] = []
    positional = [*args.posonlyargs, *args.args]
    defaults = [P.empty] * (len(positional) - len(args.defaults)) + list(args.defaults)
    for i, (arg, default) in enumerate(zip(positional, defaults, strict=True)):
        kind = P.POSITIONAL_ONLY if i < len(args.posonlyargs) else P.POSITIONAL_OR_KEYWORD
        params.append(P(arg.arg, kind, default=_literal(default)))
    if args.vararg:
        params.append(P(args.vararg.arg, P.VAR_POSITIONAL))
    for arg, default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        params.append(P(arg.arg, P.KEYWORD_ONLY, default=_literal(default)))
    if args.kwarg:
        params.append(P(args.kwarg.arg, P.VAR_KEYWORD))
    return inspect.Signature(params[1:])  # without self


def _literal(node: ast.expr | None) -> Any:
    if node is None or node is inspect.Parameter.empty:
        return inspect.Parameter.empty
    try:
        return ast.literal_eval(node)
    except ValueError:
        return object()  # compared by presence only (param_summary's "<sentinel>")


def jax_signature(obj: Any) -> inspect.Signature | None:
    """`obj`'s signature as JAX states it; None when it states none. A nanobind class (JAX's
    key classes) has no introspectable signature: before 3.13 `inspect.signature` raises,
    from 3.13 on it reports `type.__call__`'s ``(*args, **kwargs)``; its ``__init__``
    docstring states the real one."""
    try:
        sig: inspect.Signature | None = inspect.signature(obj)
    except (TypeError, ValueError):
        sig = None
    if inspect.isclass(obj) and (sig is None or str(sig) == "(*args, **kwargs)"):
        sig = _nanobind_signature(obj) or sig
    return sig


def jax_callables() -> list[tuple[str, str]]:
    found = []
    for which, (theirs, _) in MODULE_PAIRS.items():
        for name in sorted(public_names(theirs)):
            obj = getattr(theirs, name)
            if not (inspect.isfunction(obj) or inspect.isbuiltin(obj) or inspect.isclass(obj)):
                continue
            if jax_signature(obj) is None:
                continue
            found.append((which, name))
    return found


def param_summary(param: inspect.Parameter) -> tuple[Any, ...]:
    default = param.default
    if default is inspect.Parameter.empty:
        shown: Any = "<required>"
    elif default is None or isinstance(default, bool | int | float | str | tuple):
        shown = default
    else:
        shown = "<sentinel>"  # e.g. jax's Unspecified(): compared by presence only
    return (param.name, param.kind.name, shown)


@pytest.mark.parametrize(("which", "name"), jax_callables())
def test_signatures_match(which: str, name: str) -> None:
    theirs, ours = MODULE_PAIRS[which]
    their_signature = jax_signature(getattr(theirs, name))
    assert their_signature is not None
    expected = [param_summary(p) for p in their_signature.parameters.values()]
    actual = [param_summary(p) for p in inspect.signature(getattr(ours, name)).parameters.values()]
    assert actual == expected


def test_tree_aliases_are_the_tree_util_functions() -> None:
    for short in public_names(JT) - {"static"}:
        assert callable(getattr(OT, short))
        assert getattr(OT, short) is getattr(OTU, f"tree_{short}"), short


# --------------------------------------------------------------------------------------------------
# The corpus.


@parametrize(tree=CORPUS_LIST, is_leaf=IS_LEAF)
def test_flatten_matches_jax_on_the_whole_corpus(tree: Any, is_leaf: Any) -> None:
    check_flatten(tree, is_leaf)


@parametrize(tree=JAX_TREE_LIST, is_leaf=IS_LEAF)
def test_map_matches_jax(tree: Any, is_leaf: Any) -> None:
    check_map(tree, is_leaf)


@parametrize(tree=JAX_TREE_LIST, is_leaf=IS_LEAF)
def test_paths_match_jax(tree: Any, is_leaf: Any) -> None:
    check_paths(tree, is_leaf)


@parametrize(tree=JAX_TREE_LIST, is_leaf=IS_LEAF)
def test_reductions_match_jax(tree: Any, is_leaf: Any) -> None:
    check_reductions(tree, is_leaf)


@parametrize(tree=JAX_TREE_LIST, is_leaf=[None, none_is_leaf])
def test_treedef_methods_match_jax(tree: Any, is_leaf: Any) -> None:
    check_treedef(tree, is_leaf)


@parametrize(tree=JAX_TREE_LIST)
def test_walk_matches_jax(tree: Any) -> None:
    check_walk(tree)


@parametrize(tree=JAX_TREE_LIST)
def test_one_level_matches_jax(tree: Any) -> None:
    check_one_level(tree)


@parametrize(tree=[t for t in JAX_TREE_LIST if JTU.tree_leaves(t)])
def test_transpose_matches_jax(tree: Any) -> None:
    check_transpose(tree)


@parametrize(tree=JAX_TREE_LIST)
def test_broadcast_matches_jax(tree: Any) -> None:
    check_broadcast(tree)


def test_treedef_equality_and_hash_match_jax() -> None:
    trees = [*JAX_TREE_LIST, *INNER_TREES.values()]
    theirs = [JTU.tree_structure(t) for t in trees]
    ours = [OTU.tree_structure(t) for t in trees]
    for i, (our_a, their_a) in enumerate(zip(ours, theirs, strict=True)):
        assert our_a == OTU.tree_structure(OTU.tree_unflatten(our_a, range(our_a.num_leaves)))
        for our_b, their_b in zip(ours, theirs, strict=True):
            assert (our_a == our_b) is (their_a == their_b), (trees[i], our_a, our_b)
            assert (our_a != our_b) is (their_a != their_b)
            if our_a == our_b:
                assert hash(our_a) == hash(our_b)


TREES_WITH_CHILDREN = {
    "list": [1, (2, None)],
    "dict": {"b": [1], "a": Point(2, 3)},
    "namedtuple": Vector((1,), {"k": None}),
    "nested": JAX_TREES["namedtuple_nested"],
}


@parametrize(tree=list(TREES_WITH_CHILDREN.values()))
def test_children_are_jax_treedefs(tree: Any) -> None:
    """Children of a JAX-face treedef are JAX-face treedefs: they print as `PyTreeDef(...)`,
    their `node_data()` is JAX's, and they rebuild the parent with
    `from_node_data_and_children`."""
    their_def, our_def = JTU.tree_structure(tree), OTU.tree_structure(tree)
    assert [repr(c) for c in OTU.treedef_children(our_def)] == [
        repr(c) for c in JTU.treedef_children(their_def)
    ]
    assert node_summary(OTU, our_def) == node_summary(JTU, their_def)
    rebuilt = rebuild(OTU, our_def)
    assert rebuilt == our_def
    assert repr(rebuilt) == repr(rebuild(JTU, their_def)) == repr(their_def)


# --------------------------------------------------------------------------------------------------
# Random trees of the kinds jax supports: lists, tuples, str-keyed dicts, None, namedtuples,
# int and str leaves.

_LEAVES = st.one_of(st.integers(-3, 3), st.integers(), st.text(alphabet="abc", max_size=3))


def _extend(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    lists = st.lists(children, max_size=4)
    return st.one_of(
        lists,
        lists.map(tuple),
        st.dictionaries(st.text(alphabet="abcxyz", max_size=2), children, max_size=4),
        st.builds(Point, children, children),
        st.builds(Triple, children, children, children),
        st.builds(Vector, children, children),
    )


def jax_trees(max_leaves: int = 16) -> st.SearchStrategy[Any]:
    return st.recursive(st.none() | _LEAVES, _extend, max_leaves=max_leaves)


@HYPOTHESIS_SETTINGS
@given(tree=jax_trees())
def test_random_trees_match_jax(tree: Any) -> None:
    check_flatten(tree)
    check_flatten(tree, none_is_leaf)
    check_map(tree)
    check_paths(tree)
    check_reductions(tree)
    check_treedef(tree)
    check_one_level(tree)
    check_broadcast(tree)
    if JTU.tree_leaves(tree):
        check_transpose(tree)


def node_paths(tree: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """jax key paths of every node (None included, leaves excluded) of a random tree."""
    if tree is None:
        yield path
    elif type(tree) is dict:
        yield path
        for key in sorted(tree):
            yield from node_paths(tree[key], (*path, JTU.DictKey(key)))
    elif isinstance(tree, tuple) and hasattr(type(tree), "_fields"):
        yield path
        for name in type(tree)._fields:
            yield from node_paths(getattr(tree, name), (*path, JTU.GetAttrKey(name)))
    elif type(tree) in (list, tuple):
        yield path
        for index, child in enumerate(tree):
            yield from node_paths(child, (*path, JTU.SequenceKey(index)))


def replace_at(tree: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    key, rest = path[0], path[1:]
    if type(key) is JTU.DictKey:
        return {**tree, key.key: replace_at(tree[key.key], rest, new)}
    if type(key) is JTU.GetAttrKey:
        return tree._replace(**{key.name: replace_at(getattr(tree, key.name), rest, new)})
    items = list(tree)
    items[key.idx] = replace_at(items[key.idx], rest, new)
    return type(tree)(items)


@HYPOTHESIS_SETTINGS
@given(tree=jax_trees(), data=st.data())
def test_random_mismatch_raises_like_jax_and_names_the_path(tree: Any, data: Any) -> None:
    """A node replaced by a leaf in the second tree: same exception type as jax, and our
    message names the node's key path."""
    paths = list(node_paths(tree))
    assume(paths)  # a leaf at the root has no node to replace
    path = data.draw(st.sampled_from(paths))
    other = replace_at(tree, path, 12345)
    where = "tree" + JTU.keystr(path)
    for fn in (
        lambda tu, tr: tu.tree_map(lambda *xs: None, tree, other),
        lambda tu, tr: tr.map_with_path(lambda *xs: None, tree, other),
        lambda tu, tr: tu.tree_structure(tree).flatten_up_to(other),
    ):
        assert both(fn) is None
        with pytest.raises(ValueError, match=re.escape(where)):
            fn(*OX)


# --------------------------------------------------------------------------------------------------
# Leaves jax does not traverse, custom-node containers, unsortable dict keys.

DEQUE_AND_STRUCTSEQ = [deque([1, 2]), deque([None], maxlen=3), time.gmtime(0), os.stat(".")]


@pytest.mark.parametrize("leaf", DEQUE_AND_STRUCTSEQ, ids=lambda x: type(x).__name__)
def test_deques_and_struct_sequences_are_leaves(leaf: Any) -> None:
    tree = [leaf, {"k": (leaf,)}]
    assert_identical(OTU.tree_leaves(tree), [leaf, leaf])
    assert repr(OTU.tree_structure(leaf)) == repr(JTU.tree_structure(leaf)) == "PyTreeDef(*)"
    assert OTU.is_tree_node(type(leaf)) is JTU.is_tree_node(type(leaf)) is False
    check_flatten(tree)
    check_map(tree)
    check_paths(tree)


ORDERED_TREES = {
    "ordereddict": OrderedDict([("z", 1), ("a", [2, None])]),
    "defaultdict": defaultdict(list, {"z": 1, "a": (2,)}),
    "nested": [OrderedDict(b=defaultdict(int, {3: "x", 1: "y"}), a=None), {"k": OrderedDict()}],
}


@parametrize(tree=list(ORDERED_TREES.values()))
def test_ordereddict_and_defaultdict_are_custom_nodes_like_jax(tree: Any) -> None:
    their_def, our_def = JTU.tree_structure(tree), OTU.tree_structure(tree)
    assert repr(our_def) == repr(their_def)
    assert "CustomNode(OrderedDict[" in repr(our_def) or "CustomNode(defaultdict[" in repr(our_def)
    leaves = JTU.tree_leaves(tree)
    theirs, ours = JTU.tree_unflatten(their_def, leaves), OTU.tree_unflatten(our_def, leaves)
    assert repr(ours) == repr(theirs)
    assert type(ours) is type(theirs)
    check_flatten(tree)
    check_map(tree)
    check_paths(tree)
    check_treedef(tree)
    check_walk(tree)


MIXED_KEY_DICTS = [{1: "a", "b": 2}, [{None: 1, "a": 2}], {(1,): 1, 2: 2}]


@pytest.mark.parametrize("tree", MIXED_KEY_DICTS, ids=repr)
def test_dict_with_unsortable_keys_raises_like_jax(tree: Any) -> None:
    for fn in (
        lambda tu, tr: tu.tree_flatten(tree),
        lambda tu, tr: tu.tree_leaves(tree),
        lambda tu, tr: tu.tree_structure(tree),
        lambda tu, tr: tr.map(lambda x: x, tree),
        lambda tu, tr: tu.tree_leaves_with_path(tree),
    ):
        assert both(fn) is None
        assert outcome(fn, OX) == ("raise", ValueError)


# --------------------------------------------------------------------------------------------------
# Structure errors: the same exception type as jax, and our message names the key path.


def structure_cases(kit: Any) -> dict[str, tuple[Any, Any, str]]:
    return {
        "tuple_arity": ([1, {"a": (1, 2)}], [1, {"a": (1, 2, 3)}], "[1]['a']"),
        "list_arity": ([[1, 2]], [[1, 2, 3]], "[0]"),
        "root_arity": ((1, 2), (1, 2, 3), ""),
        "list_vs_tuple": ([1, (1, 2)], [1, [1, 2]], "[1]"),
        "dict_keys": ([0, {"a": 1, "b": 2}], [0, {"a": 1, "c": 2}], "[1]"),
        "dict_fewer_keys": ({"x": {"a": 1, "b": 2}}, {"x": {"a": 1}}, "['x']"),
        "none_vs_leaf": ([0, {"b": [None]}], [0, {"b": [3]}], "[1]['b'][0]"),
        "custom_vs_tuple": ([0, {"b": [kit.Box(1)]}], [0, {"b": [(1,)]}], "[1]['b'][0]"),
        "custom_aux": ([kit.Box(1, meta="m")], [kit.Box(1, meta="n")], "[0]"),
        "dict_vs_ordereddict": ([0, {"b": {"x": 1}}], [0, {"b": OrderedDict(x=1)}], "[1]['b']"),
        "ordereddict_vs_dict": ([0, {"b": OrderedDict(x=1)}], [0, {"b": {"x": 1}}], "[1]['b']"),
        "namedtuple_vs_tuple": ([1, Point(1, 2)], [1, (1, 2)], "[1]"),
        "deep": ({"a": [Point(0, {"q": (1,)})]}, {"a": [Point(0, {"q": [1]})]}, "['a'][0].y['q']"),
    }


@pytest.fixture(scope="module")
def kits() -> Iterator[dict[str, Any]]:
    """One kit of registered classes per library; oxtree's are unregistered afterwards."""
    made = {"jax": make_kit(*JAX), "oxtree": make_kit(*OX)}
    yield made
    for cls in made["oxtree"].registered:
        oxtree.unregister_pytree_node(cls)


def run_with_kits(kits: dict[str, Any], fn: Callable[..., Any]) -> tuple[Any, Any]:
    """`fn(tree_util, tree, kit)` with each library and its own kit."""
    return outcome(lambda tu, tr: fn(tu, tr, kits["jax"]), JAX), outcome(
        lambda tu, tr: fn(tu, tr, kits["oxtree"]), OX
    )


# The case names (a stand-in kit: only the names are needed at collection time).
STRUCTURE_CASES = list(structure_cases(SimpleNamespace(Box=lambda *children, meta=0: None)))

STRUCTURE_CALLS: dict[str, Callable[[Any, Any, Any, Any], Any]] = {
    "tree_map": lambda tu, tr, a, b: tu.tree_map(lambda *xs: xs, a, b),
    "tree.map": lambda tu, tr, a, b: tr.map(lambda *xs: xs, a, a, b),
    "tree_map_with_path": lambda tu, tr, a, b: tu.tree_map_with_path(lambda *xs: xs, a, b),
    "flatten_up_to": lambda tu, tr, a, b: tu.tree_structure(a).flatten_up_to(b),
    "tree_broadcast": lambda tu, tr, a, b: tu.tree_broadcast(a, b),
}


@pytest.mark.parametrize("call", list(STRUCTURE_CALLS))
@pytest.mark.parametrize("case", STRUCTURE_CASES)
def test_structure_mismatch_raises_like_jax_and_names_the_path(
    kits: dict[str, Any], case: str, call: str
) -> None:
    run = STRUCTURE_CALLS[call]

    def fn(tu: Any, tr: Any, kit: Any) -> Any:
        a, b, _ = structure_cases(kit)[case]
        return run(tu, tr, a, b)

    theirs, ours = run_with_kits(kits, fn)
    assert theirs == ("raise", ValueError), theirs
    assert ours == theirs
    a, b, path = structure_cases(kits["oxtree"])[case]
    with pytest.raises(ValueError, match=re.escape(f"tree{path}")) as info:
        run(OTU, OT, a, b)
    # The path is the whole key path, not a prefix of a longer one.
    after = str(info.value).split(f"tree{path}", 1)[1]
    assert not after.startswith(("[", ".")), str(info.value)


UNFLATTEN_COUNTS = [([1, 2], 1), ([1, 2], 3), ({"a": (1, None)}, 0), (None, 1), (5, 0), (5, 2)]


@pytest.mark.parametrize(("tree", "count"), UNFLATTEN_COUNTS, ids=repr)
def test_wrong_leaf_count_raises_like_jax(tree: Any, count: int) -> None:
    leaves = list(range(count))
    for fn in (
        lambda tu, tr: tu.tree_unflatten(tu.tree_structure(tree), leaves),
        lambda tu, tr: tr.unflatten(tr.structure(tree), iter(leaves)),
        lambda tu, tr: tu.tree_structure(tree).unflatten(leaves),
        lambda tu, tr: tu.tree_structure(tree).walk(walk_node, walk_leaf, leaves),
    ):
        assert outcome(fn, JAX) == ("raise", ValueError)
        assert both(fn) is None


ONE_LEVEL_LEAVES = [1, "s", 2.5, OPAQUE, np.zeros(2), deque([1]), time.gmtime(0), Rec()]


@pytest.mark.parametrize("leaf", ONE_LEVEL_LEAVES, ids=lambda x: type(x).__name__)
def test_flatten_one_level_of_a_leaf_raises_like_jax(leaf: Any) -> None:
    for fn in (
        lambda tu, tr: tu.flatten_one_level(leaf),
        lambda tu, tr: tu.flatten_one_level_with_keys(leaf),
    ):
        assert outcome(fn, JAX) == ("raise", ValueError)
        assert both(fn) is None
    assert OTU.default_registry.flatten_one_level(leaf) is None


ONE_LEVEL_NODES = {
    "tuple": (1, (2,)),
    "list": [1, [2]],
    "dict": {"b": 1, "a": 2},
    "none": None,
    "namedtuple": Point(1, 2),
    "ordereddict": OrderedDict(b=1, a=2),
    "defaultdict": defaultdict(list, b=1, a=2),
}


@parametrize(node=list(ONE_LEVEL_NODES.values()))
def test_flatten_one_level_prints_like_jax(node: Any) -> None:
    """The whole result prints the same, container types included (jax gives a tuple's children
    as a tuple, a list's as a list, a dict's values as a tuple)."""
    result = both(lambda tu, tr: tu.flatten_one_level(node))
    assert result is not None
    if not hasattr(type(node), "_fields"):  # (jax 0.10.2's namedtuple keys are all the first field)
        assert both(lambda tu, tr: tu.flatten_one_level_with_keys(node)) is not None


EMPTY_TREES = [[], None, {}, ((), [None]), Point(None, ())]


@pytest.mark.parametrize("tree", EMPTY_TREES, ids=repr)
def test_reduce_of_an_empty_tree_raises_like_jax(tree: Any) -> None:
    fn = lambda tu, tr: tu.tree_reduce(lambda a, b: a + b, tree)  # noqa: E731
    assert outcome(fn, JAX) == ("raise", TypeError)
    assert both(fn) is None
    assert both(lambda tu, tr: tr.reduce(lambda a, b: a + b, tree, 0)) is not None


@pytest.mark.parametrize("tree", EMPTY_TREES, ids=repr)
def test_reduce_associative_of_an_empty_tree_raises_like_jax(tree: Any) -> None:
    fn = lambda tu, tr: tu.tree_reduce_associative(lambda a, b: a + b, tree)  # noqa: E731
    assert outcome(fn, JAX) == ("raise", TypeError)
    assert both(fn) is None
    assert both(lambda tu, tr: tr.reduce_associative(lambda a, b: a + b, tree, identity=7))


TRANSPOSE_MISMATCHES = {
    "inner_too_long": ([0, 0], (0, 0), [(1, 2), (3, 4, 5)]),
    "inner_too_short": ([0, 0], (0, 0), [(1, 2), (3,)]),
    "outer_too_long": ([0, 0], (0, 0), [(1, 2), (3, 4), (5, 6)]),
    "dict_inner": ({"a": 0, "b": 0}, {"x": 0, "y": 0}, {"a": {"x": 1, "y": 2}, "b": {"x": 3}}),
}


@pytest.mark.parametrize("case", list(TRANSPOSE_MISMATCHES))
@pytest.mark.parametrize("given_inner", [True, False])
def test_transpose_mismatch_raises_like_jax(case: str, given_inner: bool) -> None:
    outer, inner, tree = TRANSPOSE_MISMATCHES[case]

    def fn(tu: Any, tr: Any) -> Any:
        inner_def = tu.tree_structure(inner) if given_inner else None
        return tr.transpose(tu.tree_structure(outer), inner_def, tree)

    theirs = outcome(fn, JAX)
    assert theirs[0] == "raise"
    assert both(fn) is None


def test_transpose_is_as_lenient_as_jax() -> None:
    """jax only checks leaf counts: inner trees of another kind but as many leaves pass."""
    tree = [(1, 2), [3, 4]]
    result = both(
        lambda tu, tr: tu.tree_transpose(tu.tree_structure([0, 0]), tu.tree_structure((0, 0)), tree)
    )
    assert result is not None
    assert repr(result[1]) == "([1, 3], [2, 4])"


def test_transpose_of_an_empty_outer_tree_raises_like_jax() -> None:
    fn = lambda tu, tr: tu.tree_transpose(  # noqa: E731
        tu.tree_structure([]), tu.tree_structure((0, 0)), []
    )
    assert outcome(fn, JAX)[0] == "raise"
    assert both(fn) is None


# --------------------------------------------------------------------------------------------------
# Reductions and broadcasting details.


@pytest.mark.parametrize("n", range(1, 9))
def test_reduce_associative_groups_like_jax(n: int) -> None:
    """jax splits the leaves in halves recursively; a non-commutative recorder shows the shape."""
    leaves = list(range(n))
    result = both(lambda tu, tr: tu.tree_reduce_associative(lambda a, b: (a, b), leaves))
    assert result is not None


def test_reduce_associative_sums_floats_like_jax() -> None:
    """Floating-point addition is only nearly associative: the grouping shows in the result."""
    result = both(lambda tu, tr: tr.reduce_associative(lambda a, b: a + b, [0.1, 0.2, 0.3]))
    assert result is not None
    assert result[1] == 0.6


BROADCAST_IS_LEAF_CASES = {
    "none_in_full": (0, [None, 1], none_is_leaf),
    "none_in_both": ((None, 0), (None, {"k1": 1, "k2": None}), none_is_leaf),
    "tuple_leaf": ([0, 1], [(1, 2), (3, (4, 5))], tuple_is_leaf),
    "vmap_in_axes": ((None, 0), (np.zeros(2), {"k1": np.ones(3), "k2": 1}), none_is_leaf),
}


@pytest.mark.parametrize("case", list(BROADCAST_IS_LEAF_CASES))
def test_broadcast_with_is_leaf_matches_jax(case: str) -> None:
    """jax applies `is_leaf` to the prefix only: the full tree's structure is its own."""
    prefix, full, is_leaf = BROADCAST_IS_LEAF_CASES[case]
    for fn in (
        lambda tu, tr: tu.tree_broadcast(prefix, full, is_leaf=is_leaf),
        lambda tu, tr: tr.broadcast(prefix, full, is_leaf),
    ):
        result = both(fn)
        assert result is not None
        assert_identical(OTU.tree_leaves(result[1]), JTU.tree_leaves(result[0]))


# --------------------------------------------------------------------------------------------------
# Registered classes: one kit per library.


@dataclasses.dataclass
class Kit:
    Box: type
    Keyed: type
    NodeClass: type
    KeyedClass: type
    Q: type
    Explicit: type
    Unit: type
    registered: list[type]
    partial: type


def make_kit(tu: Any, tr: Any) -> Kit:
    class Box:
        """register_pytree_node, aux data `meta`."""

        def __init__(self, *children: Any, meta: Any = 0) -> None:
            self.children, self.meta = children, meta

        def __repr__(self) -> str:
            return f"Box{self.children!r}[{self.meta!r}]"

    tu.register_pytree_node(Box, lambda b: (b.children, b.meta), lambda m, c: Box(*c, meta=m))

    class Keyed:
        """register_pytree_with_keys: children named by GetAttrKey / DictKey."""

        def __init__(self, a: Any, b: Any) -> None:
            self.a, self.b = a, b

        def __repr__(self) -> str:
            return f"Keyed({self.a!r}, {self.b!r})"

    tu.register_pytree_with_keys(
        Keyed,
        lambda k: (((tu.GetAttrKey("a"), k.a), (tu.DictKey("bee"), k.b)), ("aux", 1)),
        lambda aux, children: Keyed(*children),
    )

    @tu.register_pytree_node_class
    class NodeClass:
        def __init__(self, *items: Any) -> None:
            self.items = items

        def __repr__(self) -> str:
            return f"NodeClass{self.items!r}"

        def tree_flatten(self) -> tuple[Any, Any]:
            return self.items, len(self.items)

        @classmethod
        def tree_unflatten(cls, aux: Any, children: Any) -> Any:
            return cls(*children)

    @tu.register_pytree_with_keys_class
    class KeyedClass:
        def __init__(self, x: Any, y: Any) -> None:
            self.x, self.y = x, y

        def __repr__(self) -> str:
            return f"KeyedClass({self.x!r}, {self.y!r})"

        def tree_flatten_with_keys(self) -> tuple[Any, Any]:
            return ((tu.GetAttrKey("x"), self.x), (tu.SequenceKey(7), self.y)), None

        @classmethod
        def tree_unflatten(cls, aux: Any, children: Any) -> Any:
            return cls(*children)

    @tu.register_dataclass
    @dataclasses.dataclass
    class Q:
        x: Any
        y: Any = tr.static(default=2)  # noqa: RUF009

    @functools.partial(
        tu.register_dataclass, data_fields=["b", "a"], meta_fields=["name"], drop_fields=["z"]
    )
    @dataclasses.dataclass
    class Explicit:
        name: str
        a: Any
        b: Any
        z: Any = dataclasses.field(default=0, init=False)

    @tu.register_static
    class Unit:
        def __init__(self, tag: Any) -> None:
            self.tag = tag

        def __eq__(self, other: object) -> bool:
            return type(other) is Unit and other.tag == self.tag

        def __hash__(self) -> int:
            return hash(self.tag)

        def __repr__(self) -> str:
            return f"Unit({self.tag!r})"

    return Kit(
        Box, Keyed, NodeClass, KeyedClass, Q, Explicit, Unit,
        [Box, Keyed, NodeClass, KeyedClass, Q, Explicit, Unit], tu.Partial,
    )  # fmt: skip


KIT_TREES: dict[str, Callable[[Kit], Any]] = {
    "box": lambda k: k.Box(1, (2, None), meta=1.5),
    "box_meta_tuple": lambda k: [k.Box({"b": 1, "a": 2}, meta=("t", 1)), k.Box()],
    "keyed": lambda k: {"k": k.Keyed(1, [2, k.Keyed(3, None)])},
    "node_class": lambda k: k.NodeClass(1, k.NodeClass(), [2]),
    "keyed_class": lambda k: (k.KeyedClass([1], {"z": 2}),),
    "dataclass_static": lambda k: [k.Q(1), k.Q((2, 3), y="s")],
    "dataclass_explicit": lambda k: k.Explicit("n", a=[1], b={"q": 2}),
    "static": lambda k: [k.Unit("u"), 1, {"a": k.Unit(2)}],
    "partial": lambda k: k.partial(add3, 1, c=np.float32(2)),
    "mixed": lambda k: {
        "b": [k.Box(k.Q((1, None))), k.Keyed(k.Unit(0), k.NodeClass(2))],
        "a": k.Explicit("e", a=k.KeyedClass(3, 4), b=(5,)),
    },
}


def kit_tree(kits: dict[str, Any], name: str, which: str) -> Any:
    return KIT_TREES[name](kits[which])


@pytest.mark.parametrize("name", list(KIT_TREES))
def test_registered_nodes_match_jax(kits: dict[str, Any], name: str) -> None:
    theirs, ours = kit_tree(kits, name, "jax"), kit_tree(kits, name, "oxtree")
    their_leaves, their_def = JTU.tree_flatten(theirs)
    our_leaves, our_def = OTU.tree_flatten(ours)
    assert repr(our_leaves) == repr(their_leaves)
    assert_identical(our_leaves, OTU.tree_leaves(ours))
    assert repr(our_def) == repr(their_def)
    assert our_def.num_nodes == their_def.num_nodes
    assert repr(OTU.tree_unflatten(our_def, our_leaves)) == repr(
        JTU.tree_unflatten(their_def, their_leaves)
    )
    assert repr(OT.map(lambda x: [x], ours)) == repr(JT.map(lambda x: [x], theirs))
    # Keys appear in the paths.
    our_paths = [OTU.keystr(p) for p, _ in OTU.tree_leaves_with_path(ours)]
    their_paths = [JTU.keystr(p) for p, _ in JTU.tree_leaves_with_path(theirs)]
    assert our_paths == their_paths
    assert [repr(p) for p, _ in OT.leaves_with_path(ours)] == [
        repr(p) for p, _ in JT.leaves_with_path(theirs)
    ]
    assert [OTU.keystr(p) for p, _ in OT.flatten_with_path(ours)[0]] == their_paths
    our_mapped = OTU.tree_map_with_path(lambda p, x: OTU.keystr(p), ours)
    their_mapped = JTU.tree_map_with_path(lambda p, x: JTU.keystr(p), theirs)
    assert repr(our_mapped) == repr(their_mapped)
    # Treedef methods.
    # (Partial's node type is each library's own Partial class: compare names.)
    our_type, our_data = our_def.node_data()
    their_type, their_data = their_def.node_data()
    assert our_type.__qualname__ == their_type.__qualname__
    assert repr(our_data) == repr(their_data)
    assert our_def.num_leaves == their_def.num_leaves
    assert repr(our_def.walk(walk_node, walk_leaf, our_leaves)) == repr(
        their_def.walk(walk_node, walk_leaf, their_leaves)
    )
    assert our_def == OTU.tree_structure(kit_tree(kits, name, "oxtree"))
    assert hash(our_def) == hash(OTU.tree_structure(kit_tree(kits, name, "oxtree")))
    assert OTU.is_tree_node(type(ours)) is JTU.is_tree_node(type(theirs))
    if JTU.is_tree_node(type(theirs)):
        their_children, their_aux = JTU.flatten_one_level(theirs)
        our_children, our_aux = OTU.flatten_one_level(ours)
        assert repr(list(our_children)) == repr(list(their_children))
        assert repr(our_aux) == repr(their_aux)
        their_pairs, _ = JTU.flatten_one_level_with_keys(theirs)
        our_pairs, _ = OTU.flatten_one_level_with_keys(ours)
        assert repr(list(our_pairs)) == repr(list(their_pairs))
        rebuilt = OTU.PyTreeDef.from_node_data_and_children(
            OTU.default_registry,
            our_def.node_data(),
            [OTU.tree_structure(c) for c in our_children],
        )
        assert rebuilt == our_def
        assert repr(rebuilt) == repr(their_def)


def test_children_of_registered_nodes_are_jax_treedefs(kits: dict[str, Any]) -> None:
    theirs, ours = kit_tree(kits, "mixed", "jax"), kit_tree(kits, "mixed", "oxtree")
    their_def, our_def = JTU.tree_structure(theirs), OTU.tree_structure(ours)
    assert node_summary(OTU, our_def) == node_summary(JTU, their_def)
    assert repr(rebuild(OTU, our_def)) == repr(their_def)


def test_register_dataclass_prints_static_fields_in_the_node(kits: dict[str, Any]) -> None:
    ours = OTU.tree_structure(kits["oxtree"].Q(1))
    assert repr(ours) == repr(JTU.tree_structure(kits["jax"].Q(1)))
    assert repr(ours) == "PyTreeDef(CustomNode(Q[(2,)], [*]))"
    field = OT.static(default=3, metadata={"a": 1})
    assert dict(field.metadata) == dict(JT.static(default=3, metadata={"a": 1}).metadata)
    assert field.default == 3


def test_register_dataclass_errors_match_jax() -> None:
    def bad_registrations(tu: Any) -> list[Callable[[], Any]]:
        @dataclasses.dataclass
        class D:
            x: Any
            y: Any

        return [
            lambda: tu.register_dataclass(type("N", (), {})),
            lambda: tu.register_dataclass(D, data_fields=["x"], meta_fields=[]),
            lambda: tu.register_dataclass(D, data_fields=["x"], meta_fields=["y", "w"]),
            lambda: tu.register_dataclass(D, data_fields=["x", "y"]),
        ]

    theirs = [outcome(lambda tu, tr, f=f: f(), JAX) for f in bad_registrations(JTU)]
    ours = [outcome(lambda tu, tr, f=f: f(), OX) for f in bad_registrations(OTU)]
    assert [kind for kind, _ in theirs] == ["raise"] * 4
    assert ours == theirs


class AuxData:
    """Aux data whose str and repr differ: jax prints a custom node's aux data with str()."""

    def __eq__(self, other: object) -> bool:
        return type(other) is AuxData

    def __hash__(self) -> int:
        return 1

    def __str__(self) -> str:
        return "str-form"

    def __repr__(self) -> str:
        return "AuxData()"


@pytest.mark.parametrize("aux", ["meta", AuxData(), ("t", "u"), 1.5, None], ids=repr)
def test_custom_node_aux_data_prints_like_jax(kits: dict[str, Any], aux: Any) -> None:
    ours = OTU.tree_structure(kits["oxtree"].Box(1, meta=aux))
    theirs = JTU.tree_structure(kits["jax"].Box(1, meta=aux))
    assert repr(ours) == repr(theirs)


@pytest.mark.parametrize("aux", [["k", 1], {"d": 1}], ids=repr)
def test_unhashable_aux_data_is_accepted_like_jax(kits: dict[str, Any], aux: Any) -> None:
    """jax stores unhashable aux data (lists, dicts); treedefs still compare and hash."""
    for which, tu in (("jax", JTU), ("oxtree", OTU)):
        box = kits[which].Box(1, meta=aux)
        leaves, treedef = tu.tree_flatten(box)
        assert leaves == [1]
        assert tu.tree_unflatten(treedef, [2]).meta == aux
        assert treedef == tu.tree_structure(kits[which].Box(3, meta=aux))
        assert isinstance(hash(treedef), int)


def test_partial_matches_jax() -> None:
    for fn in (
        lambda tu, tr: tu.Partial(add3, 1, c=np.float32(2)),
        lambda tu, tr: tu.tree_structure(tu.Partial(add3, 1, c=np.float32(2))),
        lambda tu, tr: tu.tree_structure(tu.Partial(add3)),
        lambda tu, tr: tu.tree_leaves(tu.Partial(add3, 1, c=np.float32(2))),
        lambda tu, tr: tu.Partial(add3, 1, c=2)(3),
        lambda tu, tr: tr.map(lambda x: x * 10, tu.Partial(add3, 1, c=2))(1),
        lambda tu, tr: tu.tree_unflatten(tu.tree_structure(tu.Partial(add3, 1)), [5])(1, c=1),
        lambda tu, tr: [tu.keystr(p) for p, _ in tu.tree_leaves_with_path(tu.Partial(add3, 1, c=2))],
        lambda tu, tr: tu.is_tree_node(tu.Partial),
        lambda tu, tr: tu.tree_structure(tu.Partial(add3, 1)) == tu.tree_structure(tu.Partial(add3, 2)),
        lambda tu, tr: tu.tree_structure(tu.Partial(add3, 1)) == tu.tree_structure(tu.Partial(add3)),
    ):  # fmt: skip
        assert both(fn) is not None


def test_partial_of_a_partial_matches_jax() -> None:
    inner = lambda tu: tu.Partial(add3, 1, c=2)  # noqa: E731
    assert both(lambda tu, tr: tu.tree_leaves(tu.Partial(inner(tu), 5))) is not None
    assert both(lambda tu, tr: tu.Partial(inner(tu), 5)()) is not None
    assert both(lambda tu, tr: tu.tree_structure(tu.Partial(inner(tu), 5))) is not None


def test_register_static_matches_jax(kits: dict[str, Any]) -> None:
    ours, theirs = kits["oxtree"].Unit("u"), kits["jax"].Unit("u")
    assert OTU.tree_leaves([ours, 1]) == [1]
    assert repr(OTU.tree_structure(ours)) == repr(JTU.tree_structure(theirs))
    assert repr(OTU.tree_structure(ours)) == "PyTreeDef(CustomNode(Unit[Unit('u')], []))"
    assert OTU.tree_unflatten(OTU.tree_structure([ours]), [])[0] == ours
    assert OTU.tree_structure(ours) != OTU.tree_structure(kits["oxtree"].Unit("v"))
    assert JTU.tree_structure(theirs) != JTU.tree_structure(kits["jax"].Unit("v"))


def test_is_tree_node_matches_jax(kits: dict[str, Any]) -> None:
    plain = [list, tuple, dict, type(None), OrderedDict, defaultdict, deque, int, str, object]
    plain += [Point, Vector, time.struct_time, os.stat_result, np.ndarray, typing.NamedTuple]
    for typ in plain:
        assert OTU.is_tree_node(typ) is JTU.is_tree_node(typ), typ
    for field in dataclasses.fields(Kit):
        if field.name in ("registered", "partial"):
            continue
        ours, theirs = getattr(kits["oxtree"], field.name), getattr(kits["jax"], field.name)
        assert OTU.is_tree_node(ours) is JTU.is_tree_node(theirs) is True
        # jax's class is registered with JAX alone: the JAX face reads JAX's registry too,
        # while the main face (optree's world) keeps it a leaf.
        assert OTU.is_tree_node(theirs) is True
        assert oxtree._core._node_kind(theirs) is oxtree.PyTreeKind.LEAF


# --------------------------------------------------------------------------------------------------
# One registry for both faces.


def fresh_class(name: str) -> type:
    def __init__(self: Any, a: Any, b: Any) -> None:
        self.a, self.b = a, b

    def __repr__(self: Any) -> str:
        return f"{name}({self.a!r}, {self.b!r})"

    return type(name, (), {"__init__": __init__, "__repr__": __repr__})


def test_registration_is_shared_between_the_faces() -> None:
    main, face = fresh_class("ViaMain"), fresh_class("ViaFace")
    oxtree.register_pytree_node(main, lambda x: ((x.a, x.b), None), lambda _, c: main(*c))
    OTU.register_pytree_node(face, lambda x: ((x.a, x.b), "aux"), lambda _, c: face(*c))
    try:
        tree = [main(1, [2]), face(3, (4,))]
        assert OTU.tree_leaves(tree) == [1, 2, 3, 4]
        assert oxtree.tree_leaves(tree) == [1, 2, 3, 4]
        assert OTU.is_tree_node(main) is OTU.is_tree_node(face) is True
        assert (
            repr(OTU.tree_structure(main(1, 2))) == "PyTreeDef(CustomNode(ViaMain[None], [*, *]))"
        )
        assert repr(OT.map(lambda x: x * 2, tree)) == "[ViaMain(2, [4]), ViaFace(6, (8,))]"
        assert repr(oxtree.tree_map(lambda x: -x, face(1, 2))) == "ViaFace(-1, -2)"
    finally:
        oxtree.unregister_pytree_node(main)
        oxtree.unregister_pytree_node(face)
    assert oxtree.tree_leaves(tree) == tree
    assert OTU.is_tree_node(main) is False
    # A registration through the JAX face reached JAX, which never unregisters a type; the
    # JAX face reads JAX's registry, so it still sees `face` as JAX does.
    assert OTU.tree_leaves(tree) == JTU.tree_leaves(tree) == [tree[0], 3, 4]
    assert OTU.is_tree_node(face) is JTU.is_tree_node(face) is True
