"""The oracle of tests/ecosystem/: every JAX-face operation, run by oxtree and by JAX.

`check_tree(tree)` runs each operation of `oxtree.tree_util`, `oxtree.tree` and the treedef
methods on a tree holding types registered with JAX (equinox Modules, flax structs, chex
dataclasses, JAX's own registrations), and asserts that oxtree does what `jax.tree_util` /
`jax.tree` do: the very same leaves, the same keys (`keystr` too), treedefs equal exactly
where JAX's are, rebuilt objects of the same types with the same fields, the same node data,
the same errors. `check_equalities` compares the treedef equality pattern of several trees,
`check_mismatch` a structure error, and `nestings` draws random nestings of a library's
objects with dicts, lists, tuples, None and array/scalar leaves.

This module holds no tests and imports none of the libraries: each test module brings its
own objects (and skips, through `import_or_skip`, when its library is missing).
"""

from __future__ import annotations

import importlib
import pickle
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax.tree
import jax.tree_util
import numpy as np
import oxtree.tree
import oxtree.tree_util
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from nodes import Rec
from paths_helpers import Hit, jax_path

JTU, JT = jax.tree_util, jax.tree
OTU, OT = oxtree.tree_util, oxtree.tree

# Array and scalar leaves for the trees of the test modules (numpy: no device work).
ARRAYS = (
    np.arange(6, dtype=np.float32).reshape(2, 3),
    np.zeros(3, np.float32),
    np.array(1.5, np.float32),
    np.arange(4, dtype=np.int32),
)
SCALARS = (0, 1, -2, 2.5, "s", True)

# The property tests' settings: fewer examples than the core suite's, as every example runs
# every operation twice (the whole folder stays well under a minute).
HYPOTHESIS_SETTINGS = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# Small trees for compose() and the inner structure of tree_transpose().
INNER_TREES = (0, None, (), (0, [0, None]), {"b": 0, "a": 0})


def import_or_skip(name: str) -> Any:
    """The module `name`, or a skip of the calling test module when the library is missing, as
    `pytest.importorskip` does, or when it is installed but fails to import with this JAX:
    `make test-matrix` pairs the pinned libraries with a newer jax, and flax 0.12.8 (the newest
    that resolves with the pinned jax 0.10.2) imports `flax.nnx` with an AttributeError on jax
    0.12."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        pytest.skip(f"could not import {name!r}: {exc}", allow_module_level=True)
    except (ImportError, AttributeError) as exc:
        reason = f"{name} does not import with jax {jax.__version__}: {type(exc).__name__}: {exc}"
        pytest.skip(reason, allow_module_level=True)


def outcome(fn: Callable[[], Any]) -> tuple[str, Any]:
    """("ok", result), or ("raise", exception type)."""
    try:
        return ("ok", fn())
    except Exception as exc:
        return ("raise", type(exc))


def assert_identical(ours: Any, theirs: Any) -> None:
    """Two sequences hold the very same objects."""
    ours, theirs = list(ours), list(theirs)
    assert len(ours) == len(theirs), (ours, theirs)
    for index, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        assert a is b, f"item {index}: {a!r} is not {b!r}"


def assert_same_path(ours: tuple[Any, ...], theirs: tuple[Any, ...]) -> None:
    """Key paths equal in meaning (oxtree's own keys for the built-in nodes are translated to
    JAX's; the keys of a JAX-registered node are JAX's own objects and pass through), in
    repr and in keystr."""
    assert type(ours) is tuple, ours
    assert jax_path(ours) == theirs, (ours, theirs)
    assert repr(ours) == repr(theirs)
    assert OTU.keystr(ours) == JTU.keystr(theirs)


def assert_same_pairs(ours: Any, theirs: Any) -> None:
    """`[(key_path, leaf), ...]`: the same paths and the very same leaves."""
    assert type(ours) is list, type(ours)
    assert len(ours) == len(theirs), (ours, theirs)
    for (our_path, our_leaf), (their_path, their_leaf) in zip(ours, theirs, strict=True):
        assert_same_path(our_path, their_path)
        assert our_leaf is their_leaf, (our_path, our_leaf, their_leaf)


def assert_same_rebuilt(ours: Any, theirs: Any, is_leaf: Any = None) -> None:
    """A tree rebuilt by oxtree is what JAX rebuilt: same root type, same fields, the same
    structure as JAX sees it (node types and aux data at every level) and the same leaves (the
    very same objects, or equal `Rec`s of the very same objects)."""
    assert type(ours) is type(theirs), (type(ours), type(theirs))
    if hasattr(theirs, "__dict__") and not isinstance(theirs, type):
        assert sorted(vars(ours)) == sorted(vars(theirs))
    assert JTU.tree_structure(ours, is_leaf) == JTU.tree_structure(theirs, is_leaf)
    our_leaves, their_leaves = JTU.tree_leaves(ours, is_leaf), JTU.tree_leaves(theirs, is_leaf)
    assert len(our_leaves) == len(their_leaves)
    for index, (a, b) in enumerate(zip(our_leaves, their_leaves, strict=True)):
        assert a is b or (type(a) is Rec and a == b), f"leaf {index}: {a!r} is not {b!r}"


def hashes(treedef: Any) -> bool:
    """Whether `hash(treedef)` works (JAX's does unless some aux data is unhashable)."""
    return outcome(lambda: hash(treedef))[0] == "ok"


def widened(tree: Any, is_leaf: Any = None) -> Any:
    """`tree` with a small subtree in place of each leaf (built once, with JAX, for both)."""
    return JTU.tree_map(lambda x: [x, (x, {"inner": x})], tree, is_leaf=is_leaf)


def subtrees(tree: Any) -> Iterator[Any]:
    """Every subtree of `tree` as JAX sees it (nodes, None and leaves), pre-order."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        if node is not None and JTU.is_tree_node(type(node)):
            children, _ = JTU.flatten_one_level(node)
            stack.extend(reversed(list(children)))


# --------------------------------------------------------------------------------------------------
# The checks.


def check_flatten(tree: Any, is_leaf: Any = None) -> None:
    """Flatten, leaves, structure (both modules), and the counts of the treedef."""
    their_leaves, their_def = JTU.tree_flatten(tree, is_leaf)
    our_leaves, our_def = OTU.tree_flatten(tree, is_leaf)
    assert type(our_leaves) is list
    assert_identical(our_leaves, their_leaves)
    assert our_def.num_leaves == their_def.num_leaves
    assert our_def.num_nodes == their_def.num_nodes
    assert_identical(OTU.tree_leaves(tree, is_leaf), their_leaves)
    assert_identical(OT.leaves(tree, is_leaf), their_leaves)
    assert_identical(OT.flatten(tree, is_leaf)[0], their_leaves)
    assert OTU.tree_structure(tree, is_leaf) == our_def
    assert OT.structure(tree, is_leaf) == our_def
    assert OT.flatten(tree, is_leaf)[1] == our_def


def check_unflatten(tree: Any, is_leaf: Any = None) -> None:
    """Unflatten round trips rebuild what JAX rebuilds."""
    their_leaves, their_def = JTU.tree_flatten(tree, is_leaf)
    our_def = OTU.tree_structure(tree, is_leaf)
    theirs = JTU.tree_unflatten(their_def, their_leaves)
    for ours in (
        OTU.tree_unflatten(our_def, their_leaves),
        OT.unflatten(our_def, iter(their_leaves)),
        our_def.unflatten(their_leaves),
    ):
        assert_same_rebuilt(ours, theirs, is_leaf)
        assert OTU.tree_structure(ours, is_leaf) == our_def


def _is_rec(x: Any) -> bool:
    return type(x) is Rec


def check_map(tree: Any, is_leaf: Any = None) -> None:
    """tree_map with one tree and with more (the others wider than the first)."""
    rest = widened(tree, is_leaf)
    for call in (
        lambda tu, tr: tu.tree_map(Rec, tree, is_leaf=is_leaf),
        lambda tu, tr: tu.tree_map(Rec, tree, rest, is_leaf=is_leaf),
        lambda tu, tr: tr.map(Rec, tree, is_leaf=is_leaf),
        lambda tu, tr: tr.map(Rec, tree, tree, rest, is_leaf=is_leaf),
    ):
        theirs, ours = call(JTU, JT), call(OTU, OT)
        assert_same_rebuilt(ours, theirs, _is_rec)


def check_paths(tree: Any, is_leaf: Any = None) -> None:
    """The with-path forms: the same keys (JAX's key objects for JAX's nodes) and leaves."""
    their_pairs, their_def = JTU.tree_flatten_with_path(tree, is_leaf)
    our_pairs, our_def = OTU.tree_flatten_with_path(tree, is_leaf)
    assert_same_pairs(our_pairs, their_pairs)
    assert our_def == OTU.tree_structure(tree, is_leaf)
    assert our_def.num_nodes == their_def.num_nodes
    assert_same_pairs(OTU.tree_leaves_with_path(tree, is_leaf), their_pairs)
    assert_same_pairs(OT.leaves_with_path(tree, is_leaf), their_pairs)
    assert_same_pairs(OT.flatten_with_path(tree, is_leaf)[0], their_pairs)
    rest = widened(tree, is_leaf)
    for call in (
        lambda tu, tr: tu.tree_map_with_path(Hit, tree, is_leaf=is_leaf),
        lambda tu, tr: tr.map_with_path(Hit, tree, rest, is_leaf=is_leaf),
    ):
        theirs, ours = call(JTU, JT), call(OTU, OT)
        is_hit = lambda x: type(x) is Hit  # noqa: E731
        assert JTU.tree_structure(ours, is_hit) == JTU.tree_structure(theirs, is_hit)
        our_hits, their_hits = JTU.tree_leaves(ours, is_hit), JTU.tree_leaves(theirs, is_hit)
        assert len(our_hits) == len(their_hits)
        for our_hit, their_hit in zip(our_hits, their_hits, strict=True):
            assert our_hit.same_as(their_hit, convert=jax_path), (our_hit, their_hit)
            assert OTU.keystr(our_hit.where) == JTU.keystr(their_hit.where)


def _same_node_data(ours: Any, theirs: Any) -> None:
    if theirs is None:
        assert ours is None, ours
        return
    assert type(ours) is tuple, ours
    assert len(ours) == 2, ours
    assert ours[0] is theirs[0], (ours[0], theirs[0])
    assert repr(ours[1]) == repr(theirs[1])


def _same_nodes(ours: Any, theirs: Any) -> None:
    """Node data, counts and children agree, recursively through `children()`."""
    _same_node_data(ours.node_data(), theirs.node_data())
    assert ours.num_leaves == theirs.num_leaves
    assert ours.num_nodes == theirs.num_nodes
    assert OTU.treedef_is_leaf(ours) is JTU.treedef_is_leaf(theirs)
    our_children, their_children = ours.children(), theirs.children()
    assert len(our_children) == len(their_children)
    assert OTU.treedef_children(ours) == our_children
    for our_child, their_child in zip(our_children, their_children, strict=True):
        _same_nodes(our_child, their_child)


def _rebuild(tu: Any, treedef: Any) -> Any:
    """The treedef rebuilt bottom-up from `node_data()` and `children()`."""
    children = [_rebuild(tu, child) for child in treedef.children()]
    return tu.PyTreeDef.from_node_data_and_children(
        tu.default_registry, treedef.node_data(), children
    )


def check_treedef(tree: Any, is_leaf: Any = None) -> None:
    """node_data, children, from_node_data_and_children, flatten_one_level, is_tree_node,
    walk, treedef_tuple."""
    their_def, our_def = JTU.tree_structure(tree, is_leaf), OTU.tree_structure(tree, is_leaf)
    _same_nodes(our_def, their_def)
    rebuilt = _rebuild(OTU, our_def)
    assert rebuilt == our_def
    if hashes(their_def):
        assert hash(rebuilt) == hash(our_def)
    assert _rebuild(JTU, their_def) == their_def  # (the oracle agrees with itself)
    leaves = JTU.tree_leaves(tree, is_leaf)
    assert_same_rebuilt(rebuilt.unflatten(leaves), their_def.unflatten(leaves), is_leaf)
    for sub in subtrees(tree) if is_leaf is None else [tree]:
        assert OTU.is_tree_node(type(sub)) is JTU.is_tree_node(type(sub)), type(sub)
        theirs = outcome(lambda s=sub: JTU.flatten_one_level(s))
        ours = outcome(lambda s=sub: OTU.flatten_one_level(s))
        assert ours[0] == theirs[0], (sub, ours, theirs)
        if theirs[0] == "ok":
            assert_identical(ours[1][0], theirs[1][0])
            assert repr(ours[1][1]) == repr(theirs[1][1])
            our_pairs, our_aux = OTU.flatten_one_level_with_keys(sub)
            their_pairs, their_aux = JTU.flatten_one_level_with_keys(sub)
            assert_identical([c for _, c in our_pairs], [c for _, c in their_pairs])
            for (our_key, _), (their_key, _) in zip(our_pairs, their_pairs, strict=True):
                assert_same_path((our_key,), (their_key,))
            assert repr(our_aux) == repr(their_aux)
    walk = (lambda children, data: ("node", children, data), lambda x: ("leaf", x))
    assert repr(our_def.walk(*walk, iter(leaves))) == repr(their_def.walk(*walk, leaves))
    parts = [tree, None, {"k": tree}]
    our_tuple = OTU.treedef_tuple([OTU.tree_structure(p, is_leaf) for p in parts])
    their_tuple = JTU.treedef_tuple([JTU.tree_structure(p, is_leaf) for p in parts])
    assert our_tuple == OTU.tree_structure(tuple(parts), is_leaf)
    assert our_tuple.num_leaves == their_tuple.num_leaves
    assert our_tuple.num_nodes == their_tuple.num_nodes


def check_algebra(tree: Any, is_leaf: Any = None) -> None:
    """flatten_up_to, compose, tree_transpose, tree_broadcast, reductions."""
    their_def, our_def = JTU.tree_structure(tree, is_leaf), OTU.tree_structure(tree, is_leaf)
    leaves = JTU.tree_leaves(tree, is_leaf)
    assert_identical(our_def.flatten_up_to(tree), their_def.flatten_up_to(tree))
    full = widened(tree, is_leaf)
    ours_up_to, theirs_up_to = our_def.flatten_up_to(full), their_def.flatten_up_to(full)
    assert_identical(ours_up_to, theirs_up_to)
    # compose: the composed treedefs rebuild the same trees.
    for inner in INNER_TREES:
        their_composed = their_def.compose(JTU.tree_structure(inner))
        our_composed = our_def.compose(OTU.tree_structure(inner))
        assert our_composed.num_leaves == their_composed.num_leaves
        assert our_composed.num_nodes == their_composed.num_nodes
        numbers = list(range(their_composed.num_leaves))
        assert_same_rebuilt(our_composed.unflatten(numbers), their_composed.unflatten(numbers))
    # tree_transpose: each leaf becomes a small tree, then the two levels swap.
    inner_of = lambda x: (x, [x, None])  # noqa: E731
    nested = their_def.unflatten([inner_of(x) for x in leaves])
    for call in (
        lambda tu, tr, d: tu.tree_transpose(d, tu.tree_structure(inner_of(0)), nested),
        lambda tu, tr, d: tr.transpose(d, None, nested),
    ):
        # (JAX cannot transpose a tree without leaves: then oxtree raises the same error.)
        theirs = outcome(lambda c=call: c(JTU, JT, their_def))
        ours = outcome(lambda c=call: c(OTU, OT, our_def))
        assert ours[0] == theirs[0], (ours, theirs)
        if theirs[0] == "raise":
            assert ours[1] is theirs[1], (ours, theirs)
        else:  # (tree_transpose flattens without is_leaf: nodes under one are rebuilt)
            assert_same_rebuilt(ours[1], theirs[1])
    # tree_broadcast, prefix on either side.
    for prefix, full_tree in ((tree, full), (0, tree), ("p", full)):
        theirs = JTU.tree_broadcast(prefix, full_tree, is_leaf=is_leaf)
        assert_same_rebuilt(OTU.tree_broadcast(prefix, full_tree, is_leaf=is_leaf), theirs)
        assert_same_rebuilt(OT.broadcast(prefix, full_tree, is_leaf=is_leaf), theirs)
    # Reductions see the same objects in the same order.
    pair = lambda a, b: (a, b)  # noqa: E731
    is_none = lambda x: x is None  # noqa: E731
    for call in (
        lambda tu, tr: tu.tree_reduce(pair, tree, "init", is_leaf),
        lambda tu, tr: tr.reduce(pair, tree, "init", is_leaf=is_leaf),
    ):
        theirs, ours = call(JTU, JT), call(OTU, OT)
        assert_identical(JTU.tree_leaves(ours, is_none), JTU.tree_leaves(theirs, is_none))
    truthy = JTU.tree_map(lambda _: 1, tree, is_leaf=is_leaf)
    assert OTU.tree_all(truthy, is_leaf=is_leaf) is JTU.tree_all(truthy, is_leaf=is_leaf)
    assert OT.all(truthy, is_leaf=is_leaf) is JT.all(truthy, is_leaf=is_leaf)


def check_pickle(tree: Any) -> None:
    """A treedef pickles where JAX's does (its aux data pickles), and the copy compares to the
    original and rebuilds as JAX's copy does."""
    their_def, our_def = JTU.tree_structure(tree), OTU.tree_structure(tree)
    theirs = outcome(lambda: pickle.loads(pickle.dumps(their_def)))
    ours = outcome(lambda: pickle.loads(pickle.dumps(our_def)))
    assert ours[0] == theirs[0], (ours, theirs)
    if theirs[0] == "raise":
        return
    their_copy, our_copy = theirs[1], ours[1]
    assert (our_copy == our_def) is (their_copy == their_def)
    assert our_copy.num_leaves == their_copy.num_leaves
    assert our_copy.num_nodes == their_copy.num_nodes
    # (A copy may not rebuild: equinox's aux data holds a sentinel compared by identity, and
    # unpickling makes another one. Then oxtree's copy fails as JAX's does.)
    leaves = JTU.tree_leaves(tree)
    ours_rebuilt = outcome(lambda: our_copy.unflatten(leaves))
    theirs_rebuilt = outcome(lambda: their_copy.unflatten(leaves))
    assert ours_rebuilt[0] == theirs_rebuilt[0], (ours_rebuilt, theirs_rebuilt)
    if theirs_rebuilt[0] == "ok":
        assert type(ours_rebuilt[1]) is type(theirs_rebuilt[1])
        assert_identical(JTU.tree_leaves(ours_rebuilt[1]), JTU.tree_leaves(theirs_rebuilt[1]))


def check_tree(tree: Any, is_leaf: Any = None) -> None:
    """Every check of a single tree."""
    check_flatten(tree, is_leaf)
    check_unflatten(tree, is_leaf)
    check_map(tree, is_leaf)
    check_paths(tree, is_leaf)
    check_treedef(tree, is_leaf)
    check_algebra(tree, is_leaf)
    if is_leaf is None:
        check_pickle(tree)


def check_equalities(trees: Sequence[Any]) -> None:
    """For every pair of trees, oxtree's treedefs are equal iff JAX's are (and equal treedefs
    hash alike); treedefs of the same tree are always equal."""
    theirs = [JTU.tree_structure(t) for t in trees]
    ours = [OTU.tree_structure(t) for t in trees]
    for i, (our_a, their_a) in enumerate(zip(ours, theirs, strict=True)):
        assert our_a == OTU.tree_structure(trees[i])
        for j, (our_b, their_b) in enumerate(zip(ours, theirs, strict=True)):
            expected = their_a == their_b
            assert (our_a == our_b) is expected, (i, j, their_a, their_b)
            assert (our_a != our_b) is not expected, (i, j)
            if expected and hashes(their_a):
                assert hash(our_a) == hash(our_b), (i, j)


def check_mismatch(a: Any, b: Any) -> None:
    """A structure mismatch between `a` and `b` raises where JAX raises (ValueError), in every
    operation that matches one tree against another; where JAX does not raise, oxtree does not
    either."""
    calls: dict[str, Callable[[Any, Any], Any]] = {
        "tree_map": lambda tu, tr: tu.tree_map(lambda *xs: xs, a, b),
        "tree.map": lambda tu, tr: tr.map(lambda *xs: xs, a, b),
        "tree_map_with_path": lambda tu, tr: tu.tree_map_with_path(lambda *xs: xs, a, b),
        "flatten_up_to": lambda tu, tr: tu.tree_structure(a).flatten_up_to(b),
        "tree_broadcast": lambda tu, tr: tu.tree_broadcast(a, b),
        "tree.broadcast": lambda tu, tr: tr.broadcast(a, b),
    }
    for name, call in calls.items():
        theirs = outcome(lambda c=call: c(JTU, JT))
        ours = outcome(lambda c=call: c(OTU, OT))
        assert ours[0] == theirs[0], (name, ours, theirs)
        if theirs[0] == "raise":
            assert ours[1] is theirs[1], (name, ours, theirs)
        else:
            assert JTU.tree_structure(ours[1]) == JTU.tree_structure(theirs[1]), name


# --------------------------------------------------------------------------------------------------
# Random nestings.

_LEAVES = st.one_of(st.none(), st.sampled_from(ARRAYS), st.sampled_from(SCALARS))
_KEYS = st.sampled_from(["a", "b", "c", "k"])

Builder = Callable[[st.SearchStrategy[Any]], st.SearchStrategy[Any]]


def nestings(builders: Sequence[Builder], fixed: Sequence[Any] = (), max_leaves: int = 10) -> Any:
    """Random trees: dicts (string keys, as JAX sorts them), lists, tuples and the library's
    nodes (`builders`, each turning a strategy of children into one of nodes) around None,
    numpy arrays, scalars and the library's ready-made objects (`fixed`)."""
    leaves = _LEAVES if not fixed else st.one_of(_LEAVES, st.sampled_from(list(fixed)))

    def extend(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        lists = st.lists(children, max_size=3)
        return st.one_of(
            lists,
            lists.map(tuple),
            st.dictionaries(_KEYS, children, max_size=3),
            *(build(children) for build in builders),
        )

    return st.recursive(leaves, extend, max_leaves=max_leaves)
