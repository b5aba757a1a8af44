"""Graph flattening: shared and cyclic references survive flatten/unflatten.

The central helper is `signature`, a canonical description of an object graph's identity
structure: every container is numbered in the order a breadth-first walk first meets it and
described by its type, options and children, a child being either a container's number or a
leaf's value. Two object graphs have equal signatures exactly when they are isomorphic (same
types, keys, leaf values, and the same pattern of sharing and cycles), so comparing the input's
signature with the rebuilt object's checks identity, not just shape.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import doctest
import gc
import os
import pickle
import subprocess
import sys
import textwrap
import time
import weakref
from collections import OrderedDict, defaultdict, deque
from pathlib import Path
from typing import Any, NamedTuple

import oxtree
import pytest
from helpers import (
    CORPUS,
    TREES,
    assert_same_leaves,
    assert_same_tree,
    is_namedtuple_instance,
    is_structseq_instance,
    parametrize,
    trees,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from nodes import Point, make_default
from oxtree import (
    DictKey,
    GraphDef,
    GraphPath,
    GraphRef,
    SequenceKey,
    graph_flatten,
    graph_from_dict,
    graph_to_dict,
    graph_unflatten,
)
from oxtree._core import _rebuild_graphdef

# --------------------------------------------------------------------------------------------------
# Node classes (module level, so graphdefs holding them pickle).


class Box:
    """A registered class with two children, `a` and `b`; its aux data is `tag`."""

    def __init__(self, a: Any, b: Any, tag: Any = "box") -> None:
        self.a, self.b, self.tag = a, b, tag

    def __repr__(self) -> str:
        return f"Box({self.a!r}, {self.b!r})"


oxtree.register_pytree_node(
    Box, lambda x: ((x.a, x.b), x.tag), lambda tag, children: Box(*children, tag=tag)
)


class Local:
    """Registered in the "graph-tests" namespace only: a leaf everywhere else."""

    def __init__(self, x: Any) -> None:
        self.x = x


oxtree.register_pytree_node(
    Local, lambda x: ((x.x,), None), lambda _, c: Local(c[0]), namespace="graph-tests"
)


@dataclasses.dataclass
class Pair:
    """Registered with `oxtree.register_dataclass`: both fields are children."""

    left: Any
    right: Any


oxtree.register_dataclass(Pair)


@oxtree.dataclasses.dataclass(namespace="")
class Layer:
    """Made with `oxtree.dataclasses`: `name` is static metadata."""

    weight: Any
    name: str = oxtree.dataclasses.field(default="dense", pytree_node=False)


class Vec(NamedTuple):
    x: Any
    y: Any


Swapped = collections.namedtuple("Swapped", "x y")
# A namedtuple class registered as a custom node: the registration wins over the namedtuple
# kind, and the children come in the registered order (y before x). optree warns about such an
# override in a namespace; so does oxtree.
with pytest.warns(UserWarning, match="Override it with custom flatten/unflatten functions"):
    oxtree.register_pytree_node(
        Swapped,
        lambda s: ((s.y, s.x), "swapped"),
        lambda _, c: Swapped(c[1], c[0]),
        namespace="graph-tests",
    )

# --------------------------------------------------------------------------------------------------
# The identity signature.


def _parts(obj: Any) -> tuple[type, Any, list[tuple[Any, Any]]] | None:
    """(type, options, [(key, child), ...]) of a container, in its own order; None for a leaf."""
    cls = type(obj)
    if cls in (dict, OrderedDict):
        return cls, None, list(obj.items())
    if cls is defaultdict:
        return cls, obj.default_factory, list(obj.items())
    if cls is deque:
        return cls, obj.maxlen, list(enumerate(obj))
    if cls in (list, tuple) or is_namedtuple_instance(obj):
        return cls, None, list(enumerate(obj))
    if is_structseq_instance(obj):
        return cls, None, list(enumerate(obj[: cls.n_sequence_fields]))
    if cls is Box:
        return cls, obj.tag, [("a", obj.a), ("b", obj.b)]
    if cls is Local:
        return cls, None, [("x", obj.x)]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return cls, None, [(f.name, getattr(obj, f.name)) for f in dataclasses.fields(obj)]
    return None


def signature(*roots: Any) -> tuple[Any, ...]:
    """The canonical identity structure of the object graph reachable from `roots`.

    Returns (root descriptors, node descriptions): a descriptor is ("node", n) for the n-th
    container met (breadth first, children in each container's own order) or ("leaf", type,
    value); a node description is (type, options, ((key, descriptor), ...)).
    """
    number: dict[int, int] = {}
    queue: collections.deque[Any] = collections.deque()
    nodes: list[tuple[Any, ...]] = []

    def describe(obj: Any) -> tuple[Any, ...]:
        if _parts(obj) is None:
            return ("leaf", type(obj), obj)
        if id(obj) not in number:
            number[id(obj)] = len(number)
            queue.append(obj)
        return ("node", number[id(obj)])

    head = tuple(describe(r) for r in roots)
    while queue:
        parts = _parts(queue.popleft())
        assert parts is not None
        cls, options, items = parts
        nodes.append((cls, options, tuple((k, describe(v)) for k, v in items)))
    return head, tuple(nodes)


def as_roots(result: Any, n: int) -> tuple[Any, ...]:
    """`graph_unflatten`'s result as a tuple of roots (it returns a lone root bare)."""
    return (result,) if n == 1 else result


def round_trip(*roots: Any, **options: Any) -> Any:
    leaves, gd = graph_flatten(*roots, **options)
    return graph_unflatten(gd, leaves)


def assert_same_graph(rebuilt: tuple[Any, ...], original: tuple[Any, ...]) -> None:
    assert signature(*rebuilt) == signature(*original)


def test_signature_tells_sharing_apart() -> None:
    a = [1]
    assert signature([a, a]) == signature(copy.deepcopy([a, a]))
    assert signature([a, a]) != signature([a, [1]])
    assert signature([a, [1]]) == signature([[1], [1]])
    x: list[Any] = [1]
    x.append(x)
    y: list[Any] = [1]
    y.append([1, y])
    assert signature(x) == signature(copy.deepcopy(x))
    assert signature(x) != signature(y)
    assert signature({"a": 1, "b": 2}) != signature({"b": 2, "a": 1})  # insertion order counts


# --------------------------------------------------------------------------------------------------
# FlareJax's examples of graph flattening: a shared list and a cyclic list.


def test_flarejax_shared_list() -> None:
    x = [1, 2]
    y1 = {"a": x, "b": x}
    # Tree flattening copies the shared list ...
    leaves, spec = oxtree.tree_flatten(y1)
    assert leaves == [1, 2, 1, 2]
    y2 = oxtree.tree_unflatten(spec, leaves)
    y2["a"][0] = 3
    assert y2 == {"a": [3, 2], "b": [1, 2]}
    # ... graph flattening keeps it shared.
    leaves, gd = graph_flatten(y1)
    assert leaves == [1, 2]
    assert repr(gd) == "GraphDef({'a': [*, *], 'b': <ref obj['a']>})"
    y2 = graph_unflatten(gd, leaves)
    y2["a"][0] = 4
    assert y2 == {"a": [4, 2], "b": [4, 2]}
    assert y1 == {"a": [1, 2], "b": [1, 2]}


def test_flarejax_shared_list_dict_view() -> None:
    x = [1, 2]
    y1 = {"a": x, "b": x}
    view = graph_to_dict(y1)
    # FlareJax's entries, in our key format, with the reference as a GraphRef.
    assert {str(k): v for k, v in view.items()} == {
        "obj['a'][1]": 2,
        "obj['b']": GraphRef((DictKey("a"),)),
        "obj['a'].__class__": list,
        "obj['a'][0]": 1,
        "obj.__class__": dict,
    }
    assert str(view[GraphPath((DictKey("b"),))]) == "obj['a']"
    y2 = graph_from_dict(view)
    y2["a"][0] = 4
    assert y2 == {"a": [4, 2], "b": [4, 2]}


def test_flarejax_cyclic_list() -> None:
    x: list[Any] = [1, 2]
    x.append(x)
    with pytest.raises(RecursionError, match="cycle"):
        oxtree.tree_flatten(x)
    view = graph_to_dict(x)
    assert {str(k): v for k, v in view.items()} == {
        "obj[2]": GraphRef(()),
        "obj[1]": 2,
        "obj[0]": 1,
        "obj.__class__": list,
    }
    y = graph_from_dict(view)
    assert repr(y) == "[1, 2, [...]]"
    assert y[2] is y
    z = round_trip(x)
    assert repr(z) == "[1, 2, [...]]"
    assert z[2] is z
    assert z is not x


def test_new_leaves_keep_sharing() -> None:
    """The data flow of filter_jit: flatten, compute new leaves, rebuild."""
    x = [0.0]
    y = {"a": x, "b": x}
    leaves, gd = graph_flatten(y)
    out = graph_unflatten(gd, [v + 1 for v in leaves])
    assert out == {"a": [1.0], "b": [1.0]}
    out["a"][0] += 1
    assert out == {"a": [2.0], "b": [2.0]}
    assert out["a"] is out["b"]


# --------------------------------------------------------------------------------------------------
# Sharing, cycles and roots.


def test_sharing_at_different_depths() -> None:
    deep = {"w": [1, 2]}
    mid = [deep, (deep["w"], 3)]
    obj = {"top": deep, "mid": mid, "deeper": {"x": {"y": mid}}, "w": deep["w"]}
    leaves, gd = graph_flatten(obj)
    assert leaves == [1, 2, 3]
    assert gd.num_refs == 4
    out = graph_unflatten(gd, leaves)
    assert_same_graph((out,), (obj,))
    assert out["deeper"]["x"]["y"] is out["mid"]
    assert out["mid"][1][0] is out["w"] is out["top"]["w"]


def test_self_referencing_dict() -> None:
    d: dict[str, Any] = {"x": 1}
    d["self"] = d
    d["nested"] = {"up": d}
    leaves, gd = graph_flatten(d)
    assert leaves == [1]
    assert repr(gd) == "GraphDef({'nested': {'up': <ref obj>}, 'self': <ref obj>, 'x': *})"
    out = graph_unflatten(gd, leaves)
    assert out["self"] is out
    assert out["nested"]["up"] is out
    assert list(out) == ["x", "self", "nested"]
    assert_same_graph((out,), (d,))


def test_sharing_across_roots() -> None:
    shared = [1]
    a = {"s": shared}
    b = (shared, a)
    leaves, gd = graph_flatten(a, b, a)
    assert leaves == [1]
    assert gd.num_roots == 3
    assert (
        repr(gd) == "GraphDef(roots=({'s': [*]}, (<ref obj[0]['s']>, <ref obj[0]>), <ref obj[0]>))"
    )
    out = graph_unflatten(gd, leaves)
    assert type(out) is tuple
    assert len(out) == 3
    assert out[2] is out[0]
    assert out[1][1] is out[0]
    assert out[1][0] is out[0]["s"]
    assert_same_graph(out, (a, b, a))
    # Paths of several roots start with the root's index.
    assert gd.paths() == [(SequenceKey(0), DictKey("s"), SequenceKey(0))]


def test_no_roots() -> None:
    leaves, gd = graph_flatten()
    assert leaves == []
    assert gd.num_roots == 0
    assert repr(gd) == "GraphDef(roots=())"
    assert graph_unflatten(gd, []) == ()


def test_one_tuple_root_differs_from_two_roots() -> None:
    a, b = [1], [2]
    one = graph_flatten((a, b))[1]
    two = graph_flatten(a, b)[1]
    assert one != two
    assert one.num_roots == 1
    assert two.num_roots == 2
    assert graph_unflatten(one, [1, 2]) == ([1], [2])
    assert graph_unflatten(two, [1, 2]) == ([1], [2])


@pytest.mark.parametrize("leaf", [5, "s", 2.5, object(), Box, None])
def test_bare_leaf_root(leaf: Any) -> None:
    view = graph_to_dict(leaf)
    assert view == {GraphPath(()): leaf}
    assert graph_from_dict(view) is leaf
    leaves, gd = graph_flatten(leaf)
    if leaf is None:
        assert leaves == []
        assert repr(gd) == "GraphDef(None)"
        assert graph_unflatten(gd, []) is None
        return
    assert leaves == [leaf]
    assert repr(gd) == "GraphDef(*)"
    assert gd.num_refs == 0
    assert graph_unflatten(gd, leaves) is leaf
    assert graph_unflatten(gd, ["new"]) == "new"


def test_leaves_are_never_references() -> None:
    leaf = object()
    big = 10**30
    leaves, gd = graph_flatten([leaf, leaf, (big, big)], leaf)
    assert leaves == [leaf, leaf, big, big, leaf]
    assert gd.num_refs == 0
    assert gd.num_leaves == 5


def test_cycles_through_tuples_keep_identity() -> None:
    # A tuple whose list child holds the tuple: rooted at the tuple ...
    lst: list[Any] = []
    tup = (lst, 1)
    lst.append(tup)
    out = round_trip(tup)
    assert type(out) is tuple
    assert out[0][0] is out
    assert_same_graph((out,), (tup,))
    # ... and at the list.
    out = round_trip(lst)
    assert out[0][0] is out
    assert_same_graph((out,), (lst,))
    # Through a namedtuple, a registered class and a dataclass, closed by a dict.
    d: dict[str, Any] = {}
    chain = Vec(Box(Pair(d, 2), 3), 4)
    d["back"] = chain
    d["mid"] = chain.x
    out = round_trip(chain)
    assert out.x.a.left["back"] is out
    assert out.x.a.left["mid"] is out.x
    assert_same_graph((out,), (chain,))


def test_shared_tuples() -> None:
    t = (1, [2])
    obj = [t, {"t": t}, (t, t)]
    leaves, gd = graph_flatten(obj)
    assert leaves == [1, 2]
    out = graph_unflatten(gd, leaves)
    assert out[0] is out[1]["t"] is out[2][0] is out[2][1]
    assert_same_graph((out,), (obj,))


def test_shared_empty_containers() -> None:
    e_list: list[Any] = []
    e_dict: dict[str, Any] = {}
    obj = [e_list, e_dict, {"l": e_list, "d": e_dict}]
    leaves, gd = graph_flatten(obj)
    assert leaves == []
    assert gd.num_refs == 2
    out = graph_unflatten(gd, leaves)
    assert out[2]["l"] is out[0]
    assert out[2]["d"] is out[1]


# --------------------------------------------------------------------------------------------------
# Every node type.


def _every_node_type() -> dict[str, Any]:
    """name -> a graph in which that node type is shared and sits on a cycle (where it can)."""
    out: dict[str, Any] = {}
    shared_list = [1, 2]
    out["list"] = [shared_list, shared_list]
    d: dict[str, Any] = {"b": 1, "a": shared_list}
    d["self"] = d
    out["dict"] = [d, shared_list]
    t = (shared_list, 3)
    out["tuple"] = {"x": t, "y": t}
    od = OrderedDict([("z", 1), ("a", shared_list)])
    od["self"] = od
    out["ordereddict"] = od
    dd: defaultdict[Any, Any] = defaultdict(make_default, {"k": shared_list, "j": 2})
    dd["self"] = dd
    out["defaultdict"] = [dd, shared_list]
    dq: deque[Any] = deque([1, shared_list], maxlen=5)
    dq.append(dq)
    out["deque"] = dq
    p = Point([1], 2)
    p.x.append(p)
    out["namedtuple"] = [p, p]
    v = Vec(shared_list, {"v": shared_list})
    out["typed_namedtuple"] = (v, v)
    st_shared = time.struct_time((2020, 1, 2, 3, 4, 5, 3, 2, 0))
    holder: list[Any] = [st_shared]
    out["struct_time"] = [holder, st_shared, holder]
    b = Box(shared_list, None)
    b.b = [b]
    out["registered"] = [b, shared_list]
    pair = Pair(shared_list, {"back": None})
    pair.right["back"] = pair
    out["register_dataclass"] = [pair, pair.right]
    layer = Layer([shared_list], name="l1")
    out["oxtree_dataclasses"] = {"l": layer, "again": layer, "w": layer.weight}
    return out


NODE_GRAPHS = _every_node_type()


@pytest.mark.parametrize("name", list(NODE_GRAPHS))
def test_every_node_type_round_trips(name: str) -> None:
    obj = NODE_GRAPHS[name]
    before = signature(obj)
    leaves, gd = graph_flatten(obj)
    assert gd.num_refs > 0
    out = graph_unflatten(gd, leaves)
    assert signature(obj) == before  # the input is not modified
    assert signature(out) == before
    # Flattening the rebuilt object gives the same graphdef and the same leaves.
    leaves2, gd2 = graph_flatten(out)
    assert gd2 == gd
    assert hash(gd2) == hash(gd)
    assert leaves2 == leaves


@pytest.mark.parametrize("name", list(NODE_GRAPHS))
def test_every_node_type_dict_view_round_trips(name: str) -> None:
    obj = NODE_GRAPHS[name]
    view = graph_to_dict(obj)
    assert all(isinstance(k, GraphPath) for k in view)
    assert view[GraphPath((oxtree.GetAttrKey("__class__"),))] is type(obj)
    out = graph_from_dict(view)
    assert signature(out) == signature(obj)


def test_defaultdict_and_deque_options_survive() -> None:
    dd = NODE_GRAPHS["defaultdict"][0]
    out = round_trip(dd)
    assert out.default_factory is make_default
    assert out["missing"] == "made"
    dq = NODE_GRAPHS["deque"]
    out = round_trip(dq)
    assert out.maxlen == 5
    assert out[2] is out
    view = graph_to_dict(dq)
    assert view[GraphPath((oxtree.GetAttrKey("__data__"),))] == 5


def test_struct_sequence_shared() -> None:
    stat = os.stat(".")
    out = round_trip([stat, stat])
    assert type(out[0]) is os.stat_result
    assert out[0] is out[1]
    assert tuple(out[0]) == tuple(stat)


def test_registered_node_in_namespace() -> None:
    inner = [1]
    obj = [Local(inner), inner]
    leaves, gd = graph_flatten(obj)  # a leaf outside its namespace
    assert leaves == [obj[0], inner[0]]
    leaves, gd = graph_flatten(obj, namespace="graph-tests")
    assert leaves == [1]
    assert "namespace='graph-tests'" in repr(gd)
    out = graph_unflatten(gd, leaves)
    assert out[0].x is out[1]
    out = graph_from_dict(graph_to_dict(obj, namespace="graph-tests"), namespace="graph-tests")
    assert type(out[0]) is Local
    assert out[0].x is out[1]


def test_registered_namedtuple_dict_view_round_trips() -> None:
    """A namedtuple class registered as a custom node rebuilds as one from the dict view."""
    s = Swapped(1, [2])
    obj = [s, s]
    out = round_trip(obj, namespace="graph-tests")
    assert out[0] == Swapped(1, [2])
    view = graph_to_dict(obj, namespace="graph-tests")
    out = graph_from_dict(view, namespace="graph-tests")
    assert out[0] is out[1]
    assert out[0] == Swapped(1, [2])


@parametrize(tree=TREES)
def test_corpus_round_trips(tree: Any) -> None:
    """Every corpus tree: the graph round trip rebuilds the tree with the very same leaves."""
    leaves, gd = graph_flatten(tree)
    assert gd.num_leaves == len(leaves) == len(gd)
    if gd.num_refs == 0:
        # Without sharing, the graph is the tree.
        assert_same_leaves(leaves, oxtree.tree_leaves(tree))
        assert gd.treespec == oxtree.tree_structure(tree)
    out = graph_unflatten(gd, leaves)
    assert_same_tree(out, tree)
    assert_same_graph((out,), (tree,))


@parametrize(tree=TREES)
def test_corpus_dict_view_round_trips(tree: Any) -> None:
    out = graph_from_dict(graph_to_dict(tree))
    assert_same_graph((out,), (tree,))


# --------------------------------------------------------------------------------------------------
# Order and keys.


def test_dict_insertion_order_preserved() -> None:
    """FlareJax rebuilds dicts in hash order; oxtree keeps each dict's insertion order."""
    inner = {"zeta": 1, "alpha": 2, "mu": 3}
    obj = {"b": inner, "a": [inner], "c": {"y": 1, "x": 2}}
    for out in (round_trip(obj), graph_from_dict(graph_to_dict(obj))):
        assert list(out) == ["b", "a", "c"]
        assert list(out["b"]) == ["zeta", "alpha", "mu"]
        assert list(out["c"]) == ["y", "x"]
        assert out["a"][0] is out["b"]


def test_ordereddict_and_namedtuple_rebuild() -> None:
    """FlareJax cannot rebuild either; oxtree rebuilds them with their types and order."""
    od = OrderedDict([("z", [1]), ("a", 2)])
    p = Point(od, od["z"])
    for out in (round_trip(p), graph_from_dict(graph_to_dict(p))):
        assert type(out) is Point
        assert type(out.x) is OrderedDict
        assert list(out.x) == ["z", "a"]
        assert out.y is out.x["z"]


def test_int_and_str_keys_are_distinct() -> None:
    obj = {1: "int", "1": "str", 2: [0]}
    obj["2"] = obj[2]
    leaves, gd = graph_flatten(obj)
    paths = gd.paths()
    assert (DictKey(1),) in paths
    assert (DictKey("1"),) in paths
    assert len(set(paths)) == len(paths)
    view = graph_to_dict(obj)
    assert view[GraphPath((DictKey(1),))] == "int"
    assert view[GraphPath((DictKey("1"),))] == "str"
    assert view[GraphPath((DictKey("2"),))] == GraphRef((DictKey(2),))
    for out in (graph_unflatten(gd, leaves), graph_from_dict(view)):
        assert out[1] == "int"
        assert out["1"] == "str"
        assert out["2"] is out[2]
        assert list(out) == [1, "1", 2, "2"]


def test_dict_keys_named_like_view_entries() -> None:
    """Dict keys "__class__" and "__data__" are keys, not the view's class/data entries."""
    obj = {"__class__": 1, "__data__": [2]}
    out = graph_from_dict(graph_to_dict(obj))
    assert out == obj
    assert list(out) == ["__class__", "__data__"]


def test_determinism_across_hash_seeds() -> None:
    script = textwrap.dedent(
        """
        import oxtree
        shared = {"w": [1, 2], "b": "bias"}
        cyc = {"zeta": shared, "alpha": 3, "mu": {"k": shared, "j": "x"}}
        cyc["self"] = cyc
        obj = {"net": cyc, "again": shared, "list": [shared, cyc, ("t", shared)]}
        leaves, gd = oxtree.graph_flatten(obj, {"other": shared})
        print(leaves)
        print(repr(gd))
        print(gd.references())
        print(oxtree.graph_to_dict(obj))
        """
    )
    outputs = []
    for seed in ("0", "1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        proc = subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=True,
        )
        outputs.append(proc.stdout)
    assert "'self': <ref obj[0]['list'][1]>" in outputs[0]
    assert outputs[0] == outputs[1] == outputs[2]


# --------------------------------------------------------------------------------------------------
# The GraphDef object.


def test_graphdef_properties() -> None:
    x = [1, 2]
    _, gd = graph_flatten({"a": x, "b": x})
    assert isinstance(gd, GraphDef)
    assert gd.num_leaves == 2
    assert len(gd) == 2
    assert gd.num_nodes == 4  # the dict, the list and two leaves
    assert gd.num_roots == 1
    assert gd.num_refs == 1
    assert gd.treespec == oxtree.tree_structure({"a": [0, 0], "b": 0})
    assert gd.references() == [(2, (DictKey("a"),))]
    assert gd.paths() == [(DictKey("a"), SequenceKey(0)), (DictKey("a"), SequenceKey(1))]
    assert gd.unflatten([5, 6]) == {"a": [5, 6], "b": [5, 6]}


def test_graphdef_is_immutable() -> None:
    _, gd = graph_flatten([[1], 2])
    with pytest.raises(AttributeError):
        gd.num_leaves = 3  # type: ignore[misc]
    with pytest.raises(AttributeError):
        gd.anything = 1  # type: ignore[attr-defined]
    assert copy.copy(gd) is gd
    assert copy.deepcopy(gd) is gd


def test_graphdef_equality_and_hash() -> None:
    a, b = [1], [2]
    gd_shared = graph_flatten([a, a])[1]
    # Equal graphs from equal-shaped inputs compare and hash equal.
    c = ["other leaf"]
    same = graph_flatten([c, c])[1]
    assert gd_shared == same
    assert hash(gd_shared) == hash(same)
    assert len({gd_shared, same}) == 1
    # Different sharing compares unequal.
    assert gd_shared != graph_flatten([a, [1]])[1]
    assert graph_flatten([a, a, b])[1] != graph_flatten([a, b, b])[1]
    x: list[Any] = [1]
    x.append(x)
    y: list[Any] = [1]
    y.append([1, y])
    assert graph_flatten(x)[1] != graph_flatten([1, [1, 2]])[1]
    assert graph_flatten(x)[1] == graph_flatten(copy.deepcopy(x))[1]
    # Options count; a GraphDef never equals a treespec.
    assert graph_flatten([a, None])[1] != graph_flatten([a, None], none_is_leaf=True)[1]
    gd_plain = graph_flatten([1, [2]])[1]
    assert gd_plain != oxtree.tree_structure([1, [2]])
    assert gd_plain != "GraphDef([*, [*]])"
    assert (gd_plain == gd_plain.treespec) is False


def _pickle_cases() -> list[Any]:
    x: list[Any] = [1]
    x.append(x)
    shared = [1, 2]
    return [
        {"a": shared, "b": shared},
        x,
        (Box(shared, 2), shared),
        [Pair(shared, 1), Layer(shared)],
        [Point(shared, 1), Vec(1, shared)],
        [defaultdict(make_default, {"k": shared}), deque([shared], maxlen=3), shared],
        [time.gmtime(0), None],
    ]


@pytest.mark.parametrize("obj", _pickle_cases(), ids=range(len(_pickle_cases())))
def test_graphdef_pickles(obj: Any) -> None:
    leaves, gd = graph_flatten(obj, obj)
    again = pickle.loads(pickle.dumps(gd))
    assert again == gd
    assert hash(again) == hash(gd)
    assert repr(again) == repr(gd)
    assert_same_graph(graph_unflatten(again, leaves), (obj, obj))


def test_repr_marks_references() -> None:
    x: list[Any] = [1, 2]
    x.append(x)
    assert repr(graph_flatten(x)[1]) == "GraphDef([*, *, <ref obj>])"
    assert repr(graph_flatten([x, x])[1]) == "GraphDef([[*, *, <ref obj[0]>], <ref obj[0]>])"
    assert repr(graph_flatten([1, None], none_is_leaf=True)[1]) == "GraphDef([*, *], NoneIsLeaf)"
    d = {"k": [1]}
    gd = graph_flatten({"p": Point(d, d["k"])})[1]
    assert repr(gd) == "GraphDef({'p': Point(x={'k': [*]}, y=<ref obj['p'].x['k']>)})"
    assert "<ref" not in repr(graph_flatten([[1], [1]])[1])


# --------------------------------------------------------------------------------------------------
# Options.


def test_is_leaf() -> None:
    a = [1, 2]
    obj = {"x": a, "y": a, "z": [a]}
    leaves, gd = graph_flatten(obj, is_leaf=lambda v: v is a)
    assert leaves == [a, a, a]  # a leaf met three times, never a reference
    assert gd.num_refs == 0
    out = graph_unflatten(gd, leaves)
    assert out["x"] is out["y"] is out["z"][0] is a
    leaves, gd = graph_flatten(obj, is_leaf=lambda v: isinstance(v, dict) and "x" not in v)
    assert leaves == [1, 2]
    assert gd.num_refs == 2


def test_none_is_leaf() -> None:
    a: list[Any] = [None]
    obj = [a, a, None]
    leaves, gd = graph_flatten(obj)
    assert leaves == []
    assert graph_unflatten(gd, []) == [[None], [None], None]
    leaves, gd = graph_flatten(obj, none_is_leaf=True)
    assert leaves == [None, None]
    out = graph_unflatten(gd, [1, 2])
    assert out == [[1], [1], 2]
    assert out[0] is out[1]
    view = graph_to_dict(obj, none_is_leaf=True)
    out = graph_from_dict(view, none_is_leaf=True)
    assert out == obj
    assert out[0] is out[1]


# --------------------------------------------------------------------------------------------------
# Errors.


def test_wrong_leaf_count_names_both_counts() -> None:
    _, gd = graph_flatten({"a": [1, 2], "b": 3})
    with pytest.raises(ValueError, match=r"expected: 3, got: 2"):
        graph_unflatten(gd, [1, 2])
    with pytest.raises(ValueError, match=r"expected: 3\. Got: 4"):
        gd.unflatten([1, 2, 3, 4])


def test_first_argument_must_be_a_graphdef() -> None:
    spec = oxtree.tree_structure([1])
    with pytest.raises(TypeError, match=r"GraphDef.*got PyTreeSpec"):
        graph_unflatten(spec, [1])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="GraphDef"):
        graph_unflatten(None, [])  # type: ignore[arg-type]
    _, gd = graph_flatten([1])
    with pytest.raises(TypeError, match="iterable"):
        graph_unflatten(gd, 5)  # type: ignore[arg-type]


def test_bad_is_leaf() -> None:
    with pytest.raises(TypeError, match="is_leaf"):
        graph_flatten([1], is_leaf=3)  # type: ignore[arg-type]

    def boom(_: Any) -> bool:
        raise KeyError("from is_leaf")

    with pytest.raises(KeyError, match="from is_leaf"):
        graph_flatten([1], is_leaf=boom)


class Faulty:
    """Registered in "graph-faulty": flattening or unflattening raises when told to."""

    def __init__(self, child: Any, fail_flatten: bool = False) -> None:
        self.child, self.fail_flatten = child, fail_flatten


def _faulty_flatten(f: Faulty) -> tuple[tuple[Any], None]:
    if f.fail_flatten:
        raise KeyError("from flatten")
    return (f.child,), None


def _faulty_unflatten(_: Any, children: Any) -> Faulty:
    raise LookupError("from unflatten")


oxtree.register_pytree_node(Faulty, _faulty_flatten, _faulty_unflatten, namespace="graph-faulty")


def test_errors_of_registered_functions_propagate() -> None:
    shared = [1]
    with pytest.raises(KeyError, match="from flatten"):
        graph_flatten([shared, Faulty(1, fail_flatten=True), shared], namespace="graph-faulty")
    leaves, gd = graph_flatten([Faulty(shared), shared], namespace="graph-faulty")
    assert gd.num_refs == 1
    with pytest.raises(LookupError, match="from unflatten"):
        graph_unflatten(gd, leaves)


def test_cycle_through_registered_classes_only() -> None:
    b = Box(None, 1)
    b.a = Box(b, 2)
    leaves, gd = graph_flatten(b)
    assert (
        repr(gd)
        == "GraphDef(CustomTreeNode(Box['box'], [CustomTreeNode(Box['box'], [<ref obj>, *]), *]))"
    )
    with pytest.raises(ValueError, match=r"cannot rebuild the Box at obj.*reference cycle"):
        graph_unflatten(gd, leaves)
    with pytest.raises(ValueError, match="cycle"):
        graph_from_dict(graph_to_dict(b))


def test_graph_from_dict_errors() -> None:
    view = graph_to_dict({"a": [1], "b": 2})
    dangling = dict(view)
    dangling[GraphPath((DictKey("b"),))] = GraphRef((DictKey("nowhere"),))
    with pytest.raises(ValueError, match=r"GraphRef points to obj\['nowhere'\]"):
        graph_from_dict(dangling)
    # A reference to a leaf is dangling too: only containers can be referred to.
    to_leaf = dict(view)
    to_leaf[GraphPath((DictKey("b"),))] = GraphRef((DictKey("a"), SequenceKey(0)))
    with pytest.raises(ValueError, match="not a container"):
        graph_from_dict(to_leaf)
    no_class = {k: v for k, v in view.items() if str(k) != "obj['a'].__class__"}
    with pytest.raises(ValueError, match=r"obj\['a'\] has children but no obj\['a'\]\.__class__"):
        graph_from_dict(no_class)
    with pytest.raises(ValueError, match="no entry for the root"):
        graph_from_dict({})
    bad_order = dict(graph_to_dict({"b": 1, "a": 2}))
    bad_order[GraphPath((oxtree.GetAttrKey("__data__"),))] = ("b", "zzz")
    with pytest.raises(ValueError, match="insertion keys"):
        graph_from_dict(bad_order)


class _Forged:
    """Pickles as a call to `_rebuild_graphdef` with whatever state it is given."""

    def __init__(self, *state: Any) -> None:
        self.state = state

    def __reduce__(self) -> tuple[Any, ...]:
        return _rebuild_graphdef, self.state


def _shared_pair_state() -> tuple[Any, ...]:
    """`__reduce__`'s state of the graphdef of `[a, a]`: (skeleton, num_roots, refs)."""
    a = [1]
    func, state = graph_flatten([a, a])[1].__reduce__()
    assert func is _rebuild_graphdef
    return state


def test_forged_pickle_of_a_valid_state() -> None:
    a = [1]
    assert pickle.loads(pickle.dumps(_Forged(*_shared_pair_state()))) == graph_flatten([a, a])[1]


@pytest.mark.parametrize(
    ("num_roots", "refs"),
    [(1, ((9, 0),)), (1, ((1, 99),)), (1, ((1, 0),)), (2, ((1, 1),)), (1, ((1, 1), (0, 1)))],
    ids=[
        "leaf-out-of-range",
        "target-out-of-range",
        "target-is-a-leaf",
        "roots-without-tuple",
        "refs-out-of-order",
    ],
)
def test_corrupted_pickle_state(num_roots: int, refs: tuple[tuple[int, int], ...]) -> None:
    skeleton = _shared_pair_state()[0]
    data = pickle.dumps(_Forged(skeleton, num_roots, refs))
    with pytest.raises(ValueError, match="invalid GraphDef state"):
        pickle.loads(data)


def test_corrupted_pickle_skeleton() -> None:
    with pytest.raises(TypeError, match="PyTreeSpec"):
        pickle.loads(pickle.dumps(_Forged("not a treespec", 1, ())))


# --------------------------------------------------------------------------------------------------
# Random graphs.

_LEAF_VALUES = st.one_of(st.integers(-3, 3), st.text(alphabet="ab", max_size=2), st.none())
_KINDS = ("list", "dict", "tuple", "ordereddict", "deque")
_IMMUTABLE = ("tuple",)


@st.composite
def object_graphs(draw: st.DrawFn) -> tuple[list[Any], list[int]]:
    """Objects built from a random edge list: (all the objects, indices of the roots).

    Nodes are lists, dicts, tuples, OrderedDicts and deques; every edge is allowed except a
    tuple -> tuple edge that does not go to a lower index, so cycles may pass through tuples
    but always through a mutable container too (as Python requires). Some tuple <-> mutable
    cycles are added on purpose.
    """
    n = draw(st.integers(1, 7))
    kinds = draw(st.lists(st.sampled_from(_KINDS), min_size=n, max_size=n))
    child = st.one_of(
        st.integers(0, n - 1).map(lambda j: ("node", j)),
        _LEAF_VALUES.map(lambda v: ("leaf", v)),
    )
    edges: list[list[tuple[str, Any]]] = []
    for i in range(n):
        items = draw(st.lists(child, max_size=4))
        edges.append(
            [
                (what, j)
                for what, j in items
                if not (
                    what == "node" and kinds[i] in _IMMUTABLE and kinds[j] in _IMMUTABLE and j >= i
                )
            ]
        )
    # Close some cycles through a tuple and a mutable container on purpose: random edges
    # alone rarely do.
    for i, j in draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=3)):
        if kinds[i] in _IMMUTABLE and kinds[j] not in _IMMUTABLE:
            edges[i].append(("node", j))
            edges[j].append(("node", i))
    keys = [
        draw(
            st.lists(
                st.one_of(st.text(alphabet="xyz", max_size=2), st.integers(0, 4)),
                min_size=len(e),
                max_size=len(e),
                unique=True,
            )
        )
        for e in edges
    ]
    roots = draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=3))
    return _build(kinds, edges, keys), roots


def _build(
    kinds: list[str], edges: list[list[tuple[str, Any]]], keys: list[list[Any]]
) -> list[Any]:
    empty = {"list": list, "dict": dict, "ordereddict": OrderedDict, "deque": deque}
    objs: list[Any] = [empty[k]() if k in empty else None for k in kinds]

    def value(item: tuple[str, Any]) -> Any:
        what, v = item
        return objs[v] if what == "node" else v

    # Tuples in index order: a tuple's tuple children have lower indices, so they exist.
    for i, kind in enumerate(kinds):
        if kind == "tuple":
            objs[i] = tuple(value(it) for it in edges[i])
    for i, kind in enumerate(kinds):
        if kind in ("dict", "ordereddict"):
            for key, it in zip(keys[i], edges[i], strict=True):
                objs[i][key] = value(it)
        elif kind in ("list", "deque"):
            objs[i].extend(value(it) for it in edges[i])
    return objs


@settings(max_examples=150, deadline=None)
@given(object_graphs())
def test_random_graphs_round_trip(graph: tuple[list[Any], list[int]]) -> None:
    objs, root_ids = graph
    roots = tuple(objs[i] for i in root_ids)
    before = signature(*roots)
    leaves, gd = graph_flatten(*roots)
    assert signature(*roots) == before  # the input is not modified
    out = as_roots(graph_unflatten(gd, leaves), len(roots))
    assert signature(*out) == before
    # Rebuilt containers are new objects; the leaves are the very same ones.
    assert all(o is not r for o, r in zip(out, roots, strict=True) if r != ())
    leaves2, gd2 = graph_flatten(*out)
    assert gd2 == gd
    assert hash(gd2) == hash(gd)
    assert_same_leaves(leaves2, leaves)
    # The pickled graphdef and the dict view rebuild the same graph.
    again = as_roots(graph_unflatten(pickle.loads(pickle.dumps(gd)), leaves), len(roots))
    assert signature(*again) == before
    view_out = graph_from_dict(graph_to_dict(roots[0]))
    assert signature(view_out) == signature(roots[0])
    # A deep copy has the same identity structure, hence the same graphdef.
    assert graph_flatten(*copy.deepcopy(roots))[1] == gd


@settings(max_examples=60, deadline=None)
@given(trees())
def test_random_trees_match_tree_flatten(tree: Any) -> None:
    leaves, gd = graph_flatten(tree)
    assert_same_leaves(leaves, oxtree.tree_leaves(tree))
    out = graph_unflatten(gd, leaves)
    assert_same_tree(out, tree)
    assert signature(out) == signature(tree)
    if gd.num_refs == 0:
        assert gd.treespec == oxtree.tree_structure(tree)


# --------------------------------------------------------------------------------------------------
# Depth.


def _chain(depth: int, wrap: Any) -> Any:
    obj: Any = 0
    for _ in range(depth):
        obj = wrap(obj)
    return obj


_LINKS = {
    # name: (wrap one level, unwrap one level)
    "list": (lambda x: [x], lambda n: n[0]),
    "dict": (lambda x: {"k": x}, lambda n: n["k"]),
    "tuple": (lambda x: (x,), lambda n: n[0]),
    "registered": (lambda x: Box(x, None), lambda n: n.a),
}


@pytest.mark.parametrize("link", list(_LINKS))
def test_deep_chain(link: str) -> None:
    wrap, unwrap = _LINKS[link]
    depth = 10_000
    obj = _chain(depth, wrap)
    leaves, gd = graph_flatten(obj, obj)
    assert leaves == [0]
    assert gd.num_refs == 1
    first, second = graph_unflatten(gd, [7])
    assert second is first
    node = first
    for _ in range(depth):
        assert type(node) is type(obj)
        node = unwrap(node)
    assert node == 7


def test_deep_cycle() -> None:
    """A 10,000-long ring of lists, each holding the next; the last holds the first."""
    ring: list[list[Any]] = [[i] for i in range(10_000)]
    for node, nxt in zip(ring, ring[1:] + ring[:1], strict=True):
        node.append(nxt)
    head = ring[0]
    leaves, gd = graph_flatten(head)
    assert leaves == list(range(10_000))
    assert gd.num_refs == 1
    out = graph_unflatten(gd, leaves)
    node = out
    for i in range(10_000):
        assert node[0] == i
        node = node[1]
    assert node is out


def _parent_linked_chain(depth: int, wrap_parent: bool) -> Box:
    """Registered nodes each holding a list of its child and its parent, directly (then every
    node but the root waits for its parent, an ancestor, to be built) or wrapped in a
    one-element list (then only those lists wait)."""
    root = Box([], None)
    node = root
    for _ in range(depth):
        child = Box([], [node] if wrap_parent else node)
        node.a.append(child)
        node = child
    return root


def _rebuild_steps(obj: Any) -> int:
    """How many node builds and fills rebuilding ``obj`` takes (the core counts them)."""
    leaves, gd = graph_flatten(obj)
    before = oxtree._core._graph_rebuild_steps()
    out = graph_unflatten(gd, leaves)
    steps = oxtree._core._graph_rebuild_steps() - before
    assert out.a[0].b in (out, [out])
    return steps


def test_rebuild_of_nodes_waiting_on_ancestors_is_linear() -> None:
    """Nodes that each wait on their parent are retried a bounded number of times each (as
    lists that do, which are created empty up front): not once per pass over the waiting
    nodes, which would make the step count grow with the square of the depth."""
    for wrap_parent in (True, False):
        steps = {n: _rebuild_steps(_parent_linked_chain(n, wrap_parent)) for n in (500, 4_000)}
        # Per level: a Box and its list of children, each tried at most twice (once in
        # post-order, once when what it waits for exists).
        for n, count in steps.items():
            assert count <= 4 * (n + 1), (n, count)
        assert steps[4_000] <= 8 * steps[500] + 8, steps


def test_deep_dict_view() -> None:
    # The view holds one full path per node, so its size grows with depth squared: keep it
    # to a depth where that is cheap.
    obj = _chain(1_000, lambda x: [x])
    view = graph_to_dict(obj)
    assert len(view) == 1_001
    out = graph_from_dict(view)
    assert signature(out) == signature(obj)


def test_very_deep_chain_in_subprocess() -> None:
    """A 100,000-deep list chain (with a cycle at the bottom) either works or raises
    RecursionError; it never crashes."""
    script = textwrap.dedent(
        """
        import oxtree
        head = [0]
        obj = head
        for _ in range(100_000):
            obj = [obj]
        head.append(obj)
        try:
            leaves, gd = oxtree.graph_flatten(obj)
            out = gd.unflatten(leaves)
        except RecursionError:
            print("RecursionError")
        else:
            node = out
            for _ in range(100_000):
                node = node[0]
            print("ok", gd.num_refs, node[1] is out)
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() in ("ok 1 True", "RecursionError")


# --------------------------------------------------------------------------------------------------
# Memory.


def test_leaf_refcounts_unchanged() -> None:
    leaves_in = [object(), object(), 10**40]
    shared: list[Any] = [leaves_in[0]]
    obj: dict[str, Any] = {"a": shared, "b": (shared, leaves_in[1]), "c": leaves_in[2]}
    obj["self"] = obj
    before = [sys.getrefcount(x) for x in leaves_in]
    for _ in range(100_000):
        leaves, gd = graph_flatten(obj)
        graph_unflatten(gd, leaves)
    del leaves, gd
    gc.collect()
    assert [sys.getrefcount(x) for x in leaves_in] == before


class _Holder:
    """Weakref-able aux data / factory that can point back at a GraphDef."""

    gd: Any = None

    def __call__(self) -> int:
        return 0


def test_graphdef_in_a_reference_cycle_is_collected() -> None:
    # GraphDef does not support weak references itself ...
    _, gd = graph_flatten([1])
    with pytest.raises(TypeError):
        weakref.ref(gd)
    del gd

    # ... so each cycle runs through a weak-referenceable object that only the GraphDef
    # (through its aux data, factory or namedtuple class) keeps alive.
    def through_aux() -> weakref.ref[Any]:
        holder = _Holder()
        shared = [1]
        _, g = graph_flatten([Box(shared, 2, tag=holder), shared])
        holder.gd = g
        return weakref.ref(holder)

    def through_factory() -> weakref.ref[Any]:
        holder = _Holder()
        dd: defaultdict[str, Any] = defaultdict(holder, {"a": 1})
        dd["self"] = dd
        _, g = graph_flatten(dd)
        holder.gd = g
        return weakref.ref(holder)

    def through_class() -> weakref.ref[Any]:
        cls = collections.namedtuple("Tmp", "a b")
        _, g = graph_flatten(cls(1, 2))
        cls.gd = g  # type: ignore[attr-defined]
        return weakref.ref(cls)

    def count() -> int:
        return sum(type(o) is GraphDef for o in gc.get_objects())

    gc.collect()
    baseline = count()
    refs = [make() for make in (through_aux, through_factory, through_class)]
    assert count() == baseline + 3
    gc.collect()
    assert [r() for r in refs] == [None, None, None]
    assert count() == baseline


def test_unflatten_error_leaks_nothing() -> None:
    leaf = object()
    b = Box(None, leaf)
    b.a = b
    leaves, gd = graph_flatten(b)
    before = sys.getrefcount(leaf)
    for _ in range(1_000):
        with pytest.raises(ValueError, match="cycle"):
            graph_unflatten(gd, leaves)
    gc.collect()
    assert sys.getrefcount(leaf) == before


def test_corpus_ids_cover_shared_trees() -> None:
    """The shared corpus has DAG trees; graph flattening turns their sharing into references."""
    assert graph_flatten(CORPUS["shared_subtree"])[1].num_refs == 2
    assert graph_flatten(CORPUS["shared_leaf"])[1].num_refs == 0


# --------------------------------------------------------------------------------------------------
# The docs.


def test_docs_examples() -> None:
    """Every example of docs/graphs.md runs and prints what the page says."""
    path = Path(__file__).resolve().parents[2] / "docs" / "graphs.md"
    result = doctest.testfile(
        str(path), module_relative=False, optionflags=doctest.ELLIPSIS, verbose=False
    )
    assert result.attempted > 50
    assert result.failed == 0, f"{result.failed} example(s) of docs/graphs.md failed"
