"""oxtree.FlatTree without JAX: its constructors against the core's flatten and graph_flatten,
its operations against hand-written list code over the leaves and against the tree
functions, write-back against filter_jit's rules, and an error case for every bad input."""

from __future__ import annotations

import copy
import dataclasses
import functools
import operator
import pickle
import subprocess
import sys
from collections import OrderedDict
from typing import Any

import numpy as np
import oxtree
import pytest
from helpers import TREES, assert_same_leaves, assert_same_tree, parametrize
from nodes import Pair, Point
from oxtree import FlatTree, Module
from oxtree._write_back import REFUSED

# --------------------------------------------------------------------------------------------
# Constructors: the core's walks, once


@parametrize(tree=TREES, none_is_leaf=[False, True])
def test_flatten_is_tree_flatten(tree: Any, none_is_leaf: bool) -> None:
    leaves, treedef = oxtree.tree_flatten(tree, none_is_leaf=none_is_leaf)
    flat = FlatTree.flatten(tree, none_is_leaf=none_is_leaf)
    assert type(flat.leaves) is tuple
    assert_same_leaves(list(flat.leaves), leaves)
    assert flat.treedef == treedef
    assert flat.indices is None
    assert len(flat) == len(leaves)
    assert_same_leaves(list(flat), leaves)
    assert_same_tree(flat.unflatten(), oxtree.tree_unflatten(treedef, leaves))


@parametrize(tree=TREES)
def test_from_graph_is_graph_flatten(tree: Any) -> None:
    try:
        leaves, graphdef = oxtree.graph_flatten(tree)
    except Exception as err:  # a corpus tree the graph walk refuses: so does the flat tree
        with pytest.raises(type(err)):
            FlatTree.from_graph(tree)
        return
    flat = FlatTree.from_graph(tree)
    assert_same_leaves(list(flat.leaves), leaves)
    assert flat.treedef == graphdef
    assert_same_tree(flat.unflatten(), oxtree.graph_unflatten(graphdef, leaves))


def test_options_reach_the_walk() -> None:
    tree = {"a": [1, 2], "b": None, "c": Point(3, 4)}
    kwargs: dict[str, Any]
    for kwargs in ({"is_leaf": lambda x: isinstance(x, list)}, {"none_is_leaf": True}):
        leaves, treedef = oxtree.tree_flatten(tree, **kwargs)
        flat = FlatTree.flatten(tree, **kwargs)
        assert list(flat.leaves) == leaves
        assert flat.treedef == treedef
        leaves, graphdef = oxtree.graph_flatten(tree, **kwargs)
        graph = FlatTree.from_graph(tree, **kwargs)
        assert list(graph.leaves) == leaves
        assert graph.treedef == graphdef
    # is_leaf positional, as tree_flatten takes it
    assert FlatTree.flatten(tree, lambda x: isinstance(x, list)).leaves[0] == [1, 2]


def test_namespace_reaches_the_walk() -> None:
    class Boxed:
        def __init__(self, v: Any) -> None:
            self.v = v

    oxtree.register_pytree_node(
        Boxed, lambda b: ((b.v,), None), lambda _, c: Boxed(*c), namespace="flat-tests"
    )
    try:
        tree = [Boxed(1), Boxed(2)]
        assert len(FlatTree.flatten(tree).leaves) == 2  # leaves outside the namespace
        flat = FlatTree.flatten(tree, namespace="flat-tests")
        assert flat.leaves == (1, 2)
        assert FlatTree.from_graph(tree, namespace="flat-tests").leaves == (1, 2)
        target = [Boxed(1), Boxed(2)]
        flat.map(lambda x: x * 10).write_back(target)  # the target is read in the namespace
        assert [b.v for b in target] == [10, 20]
    finally:
        oxtree.unregister_pytree_node(Boxed, namespace="flat-tests")


def test_graph_of_several_roots() -> None:
    shared = [1.0, 2.0]
    a, b = {"x": shared}, {"y": shared, "z": 3.0}
    flat = FlatTree.from_graph(a, b)
    leaves, graphdef = oxtree.graph_flatten(a, b)
    assert list(flat.leaves) == leaves
    assert flat.treedef == graphdef
    ra, rb = flat.map(lambda v: v * 2).unflatten()
    assert ra == {"x": [2.0, 4.0]}
    assert rb["y"] is ra["x"]
    assert rb["z"] == 6.0


def test_the_constructor_is_not_public() -> None:
    with pytest.raises(TypeError, match=r"FlatTree is made by FlatTree.flatten\(tree\)"):
        FlatTree((), ())


def test_repr_paths_treedef() -> None:
    flat = FlatTree.flatten({"b": [1, 2], "a": 3})
    assert repr(flat) == "FlatTree(PyTreeSpec({'a': *, 'b': [*, *]}), leaves=(3, 1, 2))"
    assert [oxtree.keystr(p) for p in flat.paths()] == ["['a']", "['b'][0]", "['b'][1]"]
    part = flat.filter([False, True, False])
    assert repr(part) == ("FlatTree(PyTreeSpec({'a': *, 'b': [*, *]}), selected=(1,), leaves=(1,))")
    assert [oxtree.keystr(p) for p in part.paths()] == ["['b'][0]"]
    assert part.treedef is flat.treedef
    graph = FlatTree.from_graph(Point([1], 2))
    assert graph.paths() == oxtree.graph_flatten(Point([1], 2))[1].paths()


# --------------------------------------------------------------------------------------------
# map, zip, unzip, reduce: the same as list code over the leaves


@parametrize(tree=TREES)
def test_map_is_tree_map(tree: Any) -> None:
    flat = FlatTree.flatten(tree)
    mapped = flat.map(repr)
    assert mapped.leaves == tuple(repr(x) for x in flat.leaves)
    assert mapped._def is flat._def
    rebuilt, expected = mapped.unflatten(), oxtree.tree_map(repr, tree)
    assert oxtree.tree_leaves(rebuilt) == oxtree.tree_leaves(expected)
    assert oxtree.tree_structure(rebuilt) == oxtree.tree_structure(expected) == flat.treedef


def test_map_of_several_matches_a_comprehension() -> None:
    tree = {"w": [1.0, 2.0], "b": 3.0}
    p = FlatTree.flatten(tree)
    g = p.map(lambda x: x / 2)
    m = p.map(lambda x: -x)
    out = p.map(lambda a, b, c: a - b + c, g, m)
    expected = [a - b + c for a, b, c in zip(p.leaves, g.leaves, m.leaves, strict=True)]
    assert list(out.leaves) == expected
    assert out.unflatten() == oxtree.tree_map(
        lambda a, b, c: a - b + c, tree, g.unflatten(), m.unflatten()
    )


def test_zip_and_unzip_are_each_others_inverse() -> None:
    flat = FlatTree.flatten({"a": 1, "b": [2, 3]})
    doubled = flat.map(lambda x: x * 2)
    zipped = flat.zip(doubled, flat)
    assert zipped.leaves == ((1, 2, 1), (2, 4, 2), (3, 6, 3))
    a, b, c = zipped.unzip()
    assert a.leaves == flat.leaves
    assert b.leaves == doubled.leaves
    assert c.leaves == flat.leaves
    assert a._def is b._def is flat._def
    assert flat.zip().leaves == ((1,), (2,), (3,))


def test_unzip_obeys_the_functor_law() -> None:
    # JAX's FlatTree rule: the first of a pair-returning map is the map of the first function.
    flat = FlatTree.flatten([(1, 2), {"x": 3}])
    f, g = (lambda x: x + 1), str
    first, second = flat.map(lambda x: (f(x), g(x))).unzip()
    assert first.leaves == flat.map(f).leaves
    assert second.leaves == flat.map(g).leaves
    assert first.unflatten() == [(2, 3), {"x": 4}]
    # tree_map cannot: the tuples become part of the structure
    assert oxtree.tree_structure(oxtree.tree_map(lambda x: (f(x), g(x)), [(1, 2), {"x": 3}])) != (
        flat.treedef
    )


def test_unzip_of_namedtuples_and_empty_trees() -> None:
    flat = FlatTree.flatten([1, 2]).map(lambda x: Point(x, -x))
    xs, ys = flat.unzip()
    assert xs.leaves == (1, 2)
    assert ys.leaves == (-1, -2)
    empty = FlatTree.flatten({})
    a, b, c = empty.unzip(3)
    assert a.leaves == b.leaves == c.leaves == ()
    assert a._def is empty._def
    assert FlatTree.flatten([1]).map(lambda _: ()).unzip() == ()
    assert FlatTree.flatten([1]).map(lambda x: (x, x)).unzip(2)[1].leaves == (1,)


@pytest.mark.parametrize("initial", [None, 100])
def test_reduce_is_functools_reduce(initial: Any) -> None:
    flat = FlatTree.flatten({"a": [1, 2], "b": 3, "c": (4,)})
    if initial is None:
        assert flat.reduce(operator.sub) == functools.reduce(operator.sub, [1, 2, 3, 4])
        assert flat.reduce(operator.add) == oxtree.tree_reduce(operator.add, flat.unflatten())
    else:
        assert flat.reduce(operator.sub, initial) == functools.reduce(
            operator.sub, [1, 2, 3, 4], initial
        )
    assert FlatTree.flatten([]).reduce(operator.add, 7) == 7


def test_with_leaves() -> None:
    flat = FlatTree.flatten({"a": 1, "b": 2})
    new = flat.with_leaves(iter([5, 6]))
    assert new.leaves == (5, 6)
    assert new._def is flat._def
    assert new.unflatten() == {"a": 5, "b": 6}


# --------------------------------------------------------------------------------------------
# filter, partition, merge


def test_filter_by_predicate_mask_and_flat_mask_agree() -> None:
    flat = FlatTree.flatten({"a": 1, "b": "x", "c": [2.0, "y"]})
    keep = [isinstance(x, int | float) for x in flat.leaves]
    by_pred = flat.filter(lambda x: isinstance(x, int | float))
    by_list = flat.filter(keep)
    by_tuple = flat.filter(tuple(keep))
    by_flat = flat.filter(flat.map(lambda x: isinstance(x, int | float)))
    by_numpy = flat.filter([np.bool_(k) for k in keep])
    for part in (by_pred, by_list, by_tuple, by_flat, by_numpy):
        assert part.leaves == (1, 2.0)
        assert part.indices == (0, 2)
        assert part.treedef is flat.treedef
        assert part._def == by_pred._def
    assert by_pred.unflatten() == {"a": 1, "b": None, "c": [2.0, None]}


def test_filter_of_a_filter_composes() -> None:
    flat = FlatTree.flatten(list(range(6)))
    evens = flat.filter(lambda x: x % 2 == 0)
    big = evens.filter(lambda x: x > 0)
    assert big.leaves == (2, 4)
    assert big.indices == (2, 4)
    assert big._def.whole is flat._def
    assert evens.filter(lambda _: True)._def is evens._def  # everything kept: the same structure


def test_partition_and_merge_give_the_flat_tree_back() -> None:
    tree = {"w": 1.0, "n": 3, "b": 0.5, "name": "layer"}
    flat = FlatTree.flatten(tree)
    floats, rest = flat.partition(lambda x: isinstance(x, float))
    assert floats.leaves == (0.5, 1.0)
    assert rest.leaves == (3, "layer")
    back = floats.merge(rest)
    assert back.leaves == flat.leaves
    assert back._def is flat._def  # the whole structure object, so O(1) against the original
    assert rest.merge(floats)._def is flat._def
    stepped = flat.merge(floats.map(lambda p: p * 2))
    assert stepped.unflatten() == {"w": 2.0, "n": 3, "b": 1.0, "name": "layer"}


def test_merge_lets_the_last_part_win_and_keeps_partial_selections() -> None:
    flat = FlatTree.flatten([0, 1, 2, 3])
    a = flat.filter([True, True, False, False]).map(lambda x: x + 10)
    b = flat.filter([False, True, True, False]).map(lambda x: x + 20)
    ab = a.merge(b)
    assert ab.leaves == (10, 21, 22)
    assert ab.indices == (0, 1, 2)
    assert b.merge(a).leaves == (10, 11, 22)
    assert a.merge(a)._def is a._def  # the same selection: the same structure object
    assert flat.merge(a, b).leaves == (10, 21, 22, 3)
    assert a.merge(flat).leaves == flat.leaves  # a whole part replaces everything before it
    assert a.merge() is a


# --------------------------------------------------------------------------------------------
# O(1) structure checks: flat trees that share their structure object never compare treedefs


class Touchy:
    """Aux data whose == raises: comparing two treedefs holding it fails."""

    def __eq__(self, other: object) -> bool:
        raise AssertionError("the treedef was compared")

    __hash__ = object.__hash__


class Holder:
    def __init__(self, v: Any) -> None:
        self.v = v


oxtree.register_pytree_node(Holder, lambda h: ((h.v,), Touchy()), lambda _, c: Holder(*c))


def test_structure_checks_between_mapped_flat_trees_are_identity_tests() -> None:
    flat = FlatTree.flatten([Holder(1.0), Holder(2.0)])
    other = flat.map(lambda x: x + 1)
    # map, zip, filter with a flat mask and merge never compare the treedef with ==
    assert flat.map(operator.add, other).leaves == (3.0, 5.0)
    assert flat.zip(other).unzip()[1].leaves == other.leaves
    part = flat.filter(flat.map(lambda x: x > 1))
    assert flat.merge(part).leaves == flat.leaves
    assert part.map(operator.add, part).leaves == (4.0,)
    # as oxtree's tree functions see a flat tree: one node, its structure as aux data
    assert oxtree.tree_map(operator.add, flat, other).leaves == (3.0, 5.0)
    # a flat tree made by another flatten has an equal structure, compared once with ==
    with pytest.raises(AssertionError, match=r"the treedef was compared"):
        flat.map(operator.add, FlatTree.flatten([Holder(1.0), Holder(2.0)]))


def test_jax_compares_flat_trees_of_one_structure_by_identity() -> None:
    # JAX's tree_map, optax and jax.jit compare aux data with == after an identity test
    jax = pytest.importorskip("jax")
    optax = pytest.importorskip("optax")
    jnp = jax.numpy
    flat = FlatTree.flatten([Holder(jnp.ones(2)), Holder(jnp.zeros(2))])
    grads = flat.map(jnp.ones_like)
    assert jax.tree.map(operator.add, flat, grads).leaves[1].tolist() == [1.0, 1.0]
    opt = optax.adam(0.1)
    state = opt.init(flat)
    updates, state = opt.update(grads, state, flat)
    stepped = optax.apply_updates(flat, updates)
    assert stepped._def is flat._def
    out = jax.jit(lambda a, b: jax.tree.map(operator.sub, a, b))(stepped, flat)
    assert out._def is flat._def


def test_a_flat_tree_is_an_oxtree_node() -> None:
    flat = FlatTree.flatten({"a": 1, "b": [2, 3]})
    assert oxtree.tree_leaves(flat) == [1, 2, 3]
    assert oxtree.tree_leaves([flat, 4]) == [1, 2, 3, 4]
    doubled = oxtree.tree_map(lambda x: x * 2, flat)
    assert type(doubled) is FlatTree
    assert doubled._def is flat._def
    assert doubled.unflatten() == {"a": 2, "b": [4, 6]}
    assert oxtree.tree_structure(flat) == oxtree.tree_structure(doubled)


def test_copy_and_pickle() -> None:
    flat = FlatTree.flatten({"a": 1, "b": [2, 3]})
    for other in (copy.copy(flat), copy.deepcopy(flat), pickle.loads(pickle.dumps(flat))):
        assert other.leaves == flat.leaves
        assert other.unflatten() == {"a": 1, "b": [2, 3]}
        assert other._def == flat._def
    assert copy.copy(flat)._def is flat._def


def test_importing_oxtree_does_not_load_flat() -> None:
    code = "import sys, oxtree; print('oxtree.flat' in sys.modules); oxtree.FlatTree; print('oxtree.flat' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["False", "True"]
    assert "FlatTree" in oxtree.__all__
    assert "FlatTree" in dir(oxtree)


# --------------------------------------------------------------------------------------------
# write_back: filter_jit's rules, reused


class Linear(Module):
    def __init__(self, i: int) -> None:
        self.register_parameter("w", np.full(2, float(i)))
        self.register_parameter("b", np.zeros(2))
        self.register_state("steps", 0)
        self.act = "relu"


class Net(Module):
    def __init__(self) -> None:
        self.layers = [Linear(1), Linear(2)]
        self.tied = self.layers[0]
        self.sizes = [2, 2]


def test_write_back_into_a_module_keeps_identities_and_ties() -> None:
    net = Net()
    layers, first, w0 = net.layers, net.layers[0], net.layers[0].w
    flat = FlatTree.from_graph(net)
    assert len(flat.leaves) == 6  # the tied layer once
    flat.map(lambda x: x + 1).write_back(net)
    assert net.layers is layers
    assert net.layers[0] is first
    assert net.tied is first
    np.testing.assert_array_equal(net.layers[0].w, w0 + 1)
    assert net.layers[1].steps == 1
    assert net.sizes == [2, 2]
    assert net.layers[0].act == "relu"
    # the same objects a hand-written loop would leave
    expected = Net()
    for layer in expected.layers:
        layer.w, layer.b, layer.steps = layer.w + 1, layer.b + 1, layer.steps + 1
    for got, want in zip(
        oxtree.graph_flatten(net)[0], oxtree.graph_flatten(expected)[0], strict=True
    ):
        np.testing.assert_array_equal(got, want)


def test_write_back_of_a_filtered_flat_tree_writes_only_its_leaves() -> None:
    net = Net()
    flat = FlatTree.from_graph(net)
    params = flat.filter(lambda x: isinstance(x, np.ndarray))
    steps_before = [layer.steps for layer in net.layers]
    params.map(lambda p: p * 0).write_back(net)
    assert [layer.steps for layer in net.layers] == steps_before
    assert all(not layer.w.any() for layer in net.layers)
    # leaves changed elsewhere since (the counters) are kept: only the selected ones are written
    net.layers[0].steps = 7
    params.write_back(net)
    assert net.layers[0].steps == 7


def test_write_back_into_dicts_lists_and_dataclasses() -> None:
    @dataclasses.dataclass
    class Config:
        lr: float
        betas: tuple[float, float]

    oxtree.register_dataclass(Config, data_fields=["lr", "betas"], meta_fields=[])
    try:
        target = {"opt": Config(0.1, (0.9, 0.99)), "layers": [[1.0], OrderedDict(a=2.0)]}
        opt, layers = target["opt"], target["layers"]
        FlatTree.flatten(target).map(lambda x: x * 2).write_back(target)
        assert target["opt"] is opt
        assert target["layers"] is layers
        assert opt == Config(0.2, (1.8, 1.98))
        assert layers == [[2.0], OrderedDict(a=4.0)]
    finally:
        oxtree.unregister_pytree_node(Config)


def test_write_back_to_several_roots() -> None:
    a, b = {"x": 1}, [2, 3]
    FlatTree.from_graph(a, b).map(lambda v: -v).write_back(a, b)
    assert a == {"x": -1}
    assert b == [-2, -3]


def test_write_back_of_unchanged_leaves_touches_nothing() -> None:
    class Watched(dict):  # type: ignore[type-arg]
        def clear(self) -> None:
            raise AssertionError("written")

    target = Watched(a=1, b=2)
    oxtree.register_pytree_node(
        Watched,
        lambda d: (list(d.values()), list(d)),
        lambda k, v: Watched(zip(k, v, strict=False)),
    )
    try:
        FlatTree.flatten(target).write_back(target)
        FlatTree.flatten(target).map(lambda x: x).write_back(target)
    finally:
        oxtree.unregister_pytree_node(Watched)


def test_write_back_of_container_leaves_places_the_new_objects() -> None:
    inner = [1, 2]
    target = {"a": inner, "b": [3]}
    is_leaf = lambda x: isinstance(x, list)  # noqa: E731
    flat = FlatTree.flatten(target, is_leaf=is_leaf)
    new = flat.map(lambda v: [*v, 0])
    new.write_back(target)
    assert target == {"a": [1, 2, 0], "b": [3, 0]}
    assert target["a"] is new.leaves[0]
    assert inner == [1, 2]
    FlatTree.flatten(target, is_leaf=is_leaf).map(len).write_back(target)
    assert target == {"a": 3, "b": 2}


# the errors: what is wrong, and the target untouched


def test_write_back_refuses_a_change_inside_a_tuple_as_filter_jit_does() -> None:
    target = (1.0, [2.0])
    with pytest.raises(ValueError, match="cannot be written back") as info:
        FlatTree.flatten(target).map(lambda x: x * 2).write_back(target)
    message = str(info.value)
    assert message.startswith("FlatTree.write_back: the leaf at [0] changed")
    assert REFUSED in message
    assert target == (1.0, [2.0])
    # all or nothing: the list's change, which could be written, is not
    net = Net()
    w = net.layers[0].w
    pair = (net, 1.0)
    with pytest.raises(ValueError, match=r"the leaf at \[1\] changed"):
        FlatTree.from_graph(pair).map(lambda x: x + 1).write_back(pair)
    assert net.layers[0].w is w
    # the rest of the tuple can be written back alone
    FlatTree.from_graph(pair).filter(lambda x: isinstance(x, np.ndarray)).map(
        lambda x: x + 1
    ).write_back(pair)
    np.testing.assert_array_equal(net.layers[0].w, w + 1)


def test_write_back_names_the_same_refusal_as_filter_jit() -> None:
    pytest.importorskip("jax")
    import jax.numpy as jnp
    import oxtree.jax as oxjax

    class Slot:
        __slots__ = ("a",)

        def __init__(self, a: Any) -> None:
            self.a = a

    oxtree.register_pytree_node(Slot, lambda s: ((s.a,), None), lambda _, c: Slot(*c))
    try:
        s = Slot(jnp.ones(2))

        def f(s: Slot) -> None:
            s.a = s.a * 2

        with pytest.raises(
            ValueError, match=r"filter_jit: the function changed args\[0\]"
        ) as jit_info:
            oxjax.filter_jit(f)(s)
        with pytest.raises(
            ValueError, match=r"FlatTree.write_back: the leaf at \[<flat index 0>\] changed"
        ) as flat_info:
            FlatTree.from_graph(s).map(lambda a: a * 2).write_back(s)
        assert REFUSED in str(jit_info.value)
        assert REFUSED in str(flat_info.value)
    finally:
        oxtree.unregister_pytree_node(Slot)


def test_write_back_refuses_shared_objects_in_a_tree_flat_tree() -> None:
    shared = [1, 2]
    target = {"a": shared, "b": shared}
    with pytest.raises(ValueError, match=r"make it with FlatTree.from_graph"):
        FlatTree.flatten(target).map(lambda x: x * 10).write_back(target)
    assert shared == [1, 2]
    assert target["a"] is target["b"]
    FlatTree.from_graph(target).map(lambda x: x * 10).write_back(target)
    assert target == {"a": [10, 20], "b": [10, 20]}
    assert target["a"] is shared


def test_write_back_refuses_a_target_of_another_structure() -> None:
    flat = FlatTree.flatten({"a": 1})
    target = {"b": 1}
    with pytest.raises(ValueError, match=r"the target's structure is not the flat tree's: dict"):
        flat.write_back(target)
    assert target == {"b": 1}
    with pytest.raises(
        ValueError, match=r"expected PyTreeSpec\(\[\*\]\), got PyTreeSpec\(\[\[\*, \*\]\]\)"
    ):
        FlatTree.flatten([1]).write_back([[1, 2]])
    shared = [1]
    graph = FlatTree.from_graph({"a": shared, "b": shared})
    with pytest.raises(ValueError, match=r"expected GraphDef"):
        graph.write_back({"a": [1], "b": [1]})  # the same tree, not the same sharing
    with pytest.raises(ValueError, match=r"list arity mismatch"):
        FlatTree.from_graph([1], {"x": 2}).write_back([1, 2], {"x": 2})


def test_write_back_refuses_a_new_leaf_that_is_no_leaf() -> None:
    target = {"a": 1, "b": 2}
    for new in ([2], None, (1, 2)):
        with pytest.raises(ValueError, match=r"the new leaf at \['b'\] \(a \w+\) is not a leaf"):
            FlatTree.flatten(target).map(lambda v, new=new: new if v == 2 else v).write_back(target)
        assert target == {"a": 1, "b": 2}


def test_write_back_names_what_the_write_back_rule_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    # the rule's answer "their structure differs" (the targets put back): no input of a graph
    # flat tree is known to reach it, so the rule is made to answer it
    import oxtree._write_back as rule

    target = {"a": [1]}
    flat = FlatTree.from_graph(target).map(lambda x: x + 1)
    monkeypatch.setattr(rule, "write_leaves", lambda *args, **kwargs: 1)
    with pytest.raises(ValueError, match=r"the targets' structure changed, and the change"):
        flat.write_back(target)
    assert target == {"a": [1]}


def test_write_back_takes_as_many_targets_as_roots() -> None:
    with pytest.raises(
        TypeError, match=r"the tree of 1 root\(s\), so it takes 1 target\(s\), got 2"
    ):
        FlatTree.flatten([1]).write_back([1], [2])
    with pytest.raises(
        TypeError, match=r"the graph of 2 root\(s\), so it takes 2 target\(s\), got 1"
    ):
        FlatTree.from_graph([1], [2]).write_back([1])
    with pytest.raises(TypeError, match=r"got 0"):
        FlatTree.flatten([1]).write_back()


# --------------------------------------------------------------------------------------------
# Bad input: a clear error naming what was wrong


def test_map_errors() -> None:
    flat = FlatTree.flatten([1, 2])
    with pytest.raises(TypeError, match=r"FlatTree.map expects a callable, got int"):
        flat.map(3)
    with pytest.raises(TypeError, match=r"FlatTree.map expects flat trees, got list at position 0"):
        flat.map(operator.add, [1, 2])
    with pytest.raises(
        ValueError,
        match=r"flat tree 1 has another structure than this one: PyTreeSpec\(\(\*, \*\)\) != PyTreeSpec\(\[\*, \*\]\)",
    ):
        flat.map(lambda *a: 0, flat, FlatTree.flatten((1, 2)))
    with pytest.raises(ValueError, match=r"it holds 1 of the treedef's leaves, this one 2"):
        flat.map(operator.add, flat.filter([True, False]))
    with pytest.raises(ValueError, match=r"flat tree 0 has another structure"):
        flat.filter([True, False]).map(operator.add, flat.filter([False, True]))


def test_zip_unzip_reduce_errors() -> None:
    flat = FlatTree.flatten([1, 2])
    with pytest.raises(TypeError, match=r"FlatTree.zip expects flat trees"):
        flat.zip((1, 2))
    with pytest.raises(ValueError, match=r"FlatTree.zip: flat tree 0 has another structure"):
        flat.zip(FlatTree.flatten([1]))
    with pytest.raises(
        TypeError, match=r"every leaf must be a tuple, but the leaf at \[0\] is a int: 1"
    ):
        flat.unzip()
    with pytest.raises(TypeError, match=r"the leaf at \[1\] is a list: \[2, 2\]"):
        flat.map(lambda x: (x, x) if x == 1 else [x, x]).unzip()
    with pytest.raises(
        ValueError, match=r"a tuple of 2 items, but the leaf at \[1\] has 3: \(2, 2, 2\)"
    ):
        flat.map(lambda x: (x,) * (x + 1)).unzip()
    with pytest.raises(ValueError, match=r"a tuple of 3 items, but the leaf at \[0\] has 2"):
        flat.map(lambda x: (x, x)).unzip(3)
    with pytest.raises(ValueError, match=r"no leaves to take the tuples' length from; pass n"):
        FlatTree.flatten([]).unzip()
    for n in (-1, 1.0, "2"):
        with pytest.raises(TypeError, match=r"FlatTree.unzip: n must be an int >= 0"):
            flat.map(lambda x: (x,)).unzip(n)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"FlatTree.reduce expects a callable, got str"):
        flat.reduce("+")  # type: ignore[arg-type]
    with pytest.raises(
        TypeError, match=r"FlatTree.reduce: the flat tree has no leaves and no initial value"
    ):
        FlatTree.flatten({}).reduce(operator.add)


def test_filter_merge_with_leaves_errors() -> None:
    flat = FlatTree.flatten({"a": 1, "b": 2})
    with pytest.raises(
        TypeError,
        match=r"FlatTree.filter takes a function of a leaf, a sequence of bools or a flat tree of bools, got int",
    ):
        flat.filter(1)
    with pytest.raises(
        ValueError,
        match=r"FlatTree.partition: the mask has 3 entries, but the flat tree has 2 leaves",
    ):
        flat.partition([True, False, True])
    with pytest.raises(
        TypeError,
        match=r"the mask must give a bool for every leaf, got int 1 for the leaf at \['b'\]",
    ):
        flat.filter([True, 1])
    with pytest.raises(TypeError, match=r"got int 1 for the leaf at \['a'\]"):
        flat.filter(lambda x: x)
    with pytest.raises(ValueError, match=r"FlatTree.filter: flat tree 0 has another structure"):
        flat.filter(FlatTree.flatten([True, False]))
    with pytest.raises(TypeError, match=r"FlatTree.merge expects flat trees, got dict"):
        flat.merge({"a": 1})
    with pytest.raises(
        ValueError,
        match=r"FlatTree.merge: part 0 has another treedef than the flat tree: PyTreeSpec\(\[\*, \*\]\) != PyTreeSpec",
    ):
        flat.merge(FlatTree.flatten([1, 2]))
    with pytest.raises(
        ValueError, match=r"FlatTree.with_leaves: the flat tree has 2 leaves, got 3"
    ):
        flat.with_leaves([1, 2, 3])


def test_bad_options_are_the_walks_errors() -> None:
    with pytest.raises(TypeError):
        FlatTree.flatten([1], is_leaf=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        FlatTree.from_graph([1], namespace=3)  # type: ignore[arg-type]
    loop: list[Any] = [1]
    loop.append(loop)
    with pytest.raises(RecursionError):
        FlatTree.flatten(loop)
    assert FlatTree.from_graph(loop).leaves == (1,)  # a graph may be cyclic


def test_pairs_and_points_round_trip() -> None:
    tree = [Pair(1, Point(2, 3)), {"k": (4,)}]
    flat = FlatTree.flatten(tree)
    assert flat.map(lambda x: x).unflatten() == tree
