"""A guided tour of oxtree, printed section by section. This is what `make demo` runs.

    .venv/bin/python examples/tour.py              # everything, ending with a speed table
    .venv/bin/python examples/tour.py --no-bench   # skip the speed table
    .venv/bin/python examples/tour.py --only error # only sections whose title contains "error"

Each section is a function decorated with `@section(title)`; sections run in the order they
are defined, so a new feature gets its own function appended before the speed section.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import pickle
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import oxtree
from oxtree import dataclasses as odc

# --------------------------------------------------------------------------------------
# Tiny helpers
# --------------------------------------------------------------------------------------

SECTIONS: list[tuple[str, Callable[[], None]]] = []


def section(title: str) -> Callable[[Callable[[], None]], Callable[[], None]]:
    """Register a tour section; sections run in definition order."""

    def register(fn: Callable[[], None]) -> Callable[[], None]:
        SECTIONS.append((title, fn))
        return fn

    return register


def show(label: str, value: Any) -> None:
    print(f"  {label:<28} {value!r}")


def note(text: str) -> None:
    print(f"  # {text}")


def expect_error(label: str, fn: Callable[[], Any]) -> None:
    """Run `fn`, which should raise, and print the exception it raised."""
    try:
        result = fn()
    except Exception as e:  # RecursionError is an Exception too
        print(f"  {label}\n    -> {type(e).__name__}: {e}")
    else:
        print(f"  {label}\n    -> no error (returned {type(result).__name__})")


Point = collections.namedtuple("Point", ["x", "y"])


# --------------------------------------------------------------------------------------
# The tree engine
# --------------------------------------------------------------------------------------


@section("Flatten and unflatten")
def flatten_and_unflatten() -> None:
    tree = {"b": (1, [2, 3]), "a": {"y": 4, "x": 5}}
    leaves, spec = oxtree.tree_flatten(tree)
    show("tree", tree)
    show("leaves", leaves)
    print(f"  {'spec':<28} {spec}")
    note("dict keys are visited in sorted order, so 'a' (5, 4) comes before 'b' (1, 2, 3)")
    rebuilt = oxtree.tree_unflatten(spec, leaves)
    show("unflatten(spec, leaves)", rebuilt)
    show("same tree again?", rebuilt == tree)
    show("insertion order kept?", list(rebuilt) == list(tree))
    scaled = oxtree.tree_unflatten(spec, [x * 10 for x in leaves])
    show("unflatten(spec, leaves x 10)", scaled)


@section("None: an empty node, or a leaf on request")
def none_handling() -> None:
    tree = [1, None, {"a": None, "b": 2}]
    leaves, spec = oxtree.tree_flatten(tree)
    show("tree", tree)
    show("leaves (default)", leaves)
    print(f"  {'spec (default)':<28} {spec}")
    leaves, spec = oxtree.tree_flatten(tree, none_is_leaf=True)
    show("leaves (none_is_leaf=True)", leaves)
    print(f"  {'spec (none_is_leaf=True)':<28} {spec}")


@section("Built-in node types")
def node_types() -> None:
    examples = {
        "namedtuple": Point(x=1, y=(2, 3)),
        "OrderedDict": collections.OrderedDict([("z", 1), ("a", 2)]),
        "defaultdict": collections.defaultdict(list, {"b": 1, "a": 2}),
        "deque": collections.deque([1, 2, 3], maxlen=5),
        "struct sequence": time.gmtime(0),
    }
    failed = []
    for name, tree in examples.items():
        print(f"  {name}:")
        try:
            leaves, spec = oxtree.tree_flatten(tree)
            back = oxtree.tree_unflatten(spec, leaves)
        except Exception as e:
            # Show the remaining types anyway; the section is reported as failed at the end.
            print(f"    failed: {type(e).__name__}: {e}")
            failed.append(name)
            continue
        print(f"    leaves     {leaves!r}")
        print(f"    spec       {spec}")
        print(f"    round trip {type(back).__name__}, equal: {back == tree}")
    note("OrderedDict keeps its own key order; defaultdict keeps its default_factory;")
    note("deque keeps maxlen; struct sequences such as time.struct_time are nodes.")
    if failed:
        raise RuntimeError(f"node types that failed: {', '.join(failed)}")


@section("is_leaf: stop flattening early")
def is_leaf_demo() -> None:
    tree = {"pos": (1.0, 2.0), "vel": (0.5, -0.5), "ids": [7, 8]}
    show("tree", tree)
    show("leaves", oxtree.tree_leaves(tree))

    def is_pair(x: Any) -> bool:
        return isinstance(x, tuple)

    show("leaves, is_leaf=tuple", oxtree.tree_leaves(tree, is_leaf=is_pair))
    print(f"  {'spec, is_leaf=tuple':<28} {oxtree.tree_structure(tree, is_leaf=is_pair)}")


@section("tree_map, tree_map_, tree_leaves, tree_structure")
def mapping() -> None:
    params = {"w": [1.0, 2.0], "b": 0.5}
    grads = {"w": [0.1, 0.2], "b": 0.05}
    show("params", params)
    show("grads", grads)
    show("tree_map(x * 2, params)", oxtree.tree_map(lambda x: x * 2, params))
    step = oxtree.tree_map(lambda p, g: round(p - 0.1 * g, 3), params, grads)
    show("tree_map(p - .1g, p, g)", step)

    seen: list[float] = []
    returned = oxtree.tree_map_(seen.append, params)
    show("tree_map_(seen.append, .)", seen)
    show("returns the input itself?", returned is params)

    show("tree_leaves(params)", oxtree.tree_leaves(params))
    print(f"  {'tree_structure(params)':<28} {oxtree.tree_structure(params)}")


@section("tree_iter, tree_is_leaf, all_leaves, tree_map_with_path")
def iterating() -> None:
    tree = {"b": [1, 2], "a": (3, None)}
    show("tree", tree)
    show("tree_iter (lazy leaves)", list(oxtree.tree_iter(tree)))
    show("tree_is_leaf(tree)", oxtree.tree_is_leaf(tree))
    show("tree_is_leaf(3)", oxtree.tree_is_leaf(3))
    show("all_leaves([1, 'x'])", oxtree.all_leaves([1, "x"]))
    show("all_leaves([1, [2]])", oxtree.all_leaves([1, [2]]))
    tagged = oxtree.tree_map_with_path(lambda path, x: f"{path}={x}", tree)
    show("tree_map_with_path", tagged)

    def top_list(path: tuple[Any, ...], node: Any) -> bool:
        return len(path) == 1 and isinstance(node, list)

    whole_b = oxtree.tree_map_with_path(
        lambda path, x: f"{path}={x}", tree, is_leaf=top_list, is_leaf_takes_path=True
    )
    show("... is_leaf_takes_path=True", whole_b)
    note("is_leaf_takes_path: is_leaf gets each node's key path too, so it can stop by place")


@section("The treedef (PyTreeSpec)")
def treedef() -> None:
    spec = oxtree.tree_structure([1, {"a": 2, "b": (3, 4)}])
    print(f"  {'spec':<28} {spec}")
    show("num_leaves", spec.num_leaves)
    show("num_nodes", spec.num_nodes)
    print(f"  {'children()':<28} {spec.children()}")

    outer = oxtree.tree_structure((0, 0))
    inner = oxtree.tree_structure({"m": 0, "v": 0})
    print(f"  {'(*, *).compose({m, v})':<28} {outer.compose(inner)}")

    prefix = oxtree.tree_structure([0, {"a": 0, "b": 0}])
    full = [1, {"a": [2, 3], "b": {"deep": 4}}]
    show("flatten_up_to", prefix.flatten_up_to(full))
    note("flatten_up_to stops at the spec's leaves and returns the subtrees found there")

    again = oxtree.tree_structure([9, {"b": (8, 7), "a": 6}])
    show("== same structure", spec == again)
    show("== different structure", spec == oxtree.tree_structure([1, 2]))
    show("hash equal for equal specs", hash(spec) == hash(again))
    show("usable as dict key", {spec: "cached"}[again])

    restored = pickle.loads(pickle.dumps(spec))
    print(f"  {'pickle round trip':<28} {restored}")
    show("equal after pickling", restored == spec)


@section("Treespec walks: paths, accessors, walk, traverse, transform")
def treespec_walks() -> None:
    tree = {"a": 1, "b": (2, 3)}
    spec = oxtree.tree_structure(tree)
    print(f"  {'spec':<28} {spec}")
    show("paths()", spec.paths())
    show("accessors()", [a.codify("t") for a in spec.accessors()])
    counted = spec.walk([1, 2, 3], lambda kind, data, children: sum(children), None)
    show("walk: sum bottom up", counted)
    show("traverse: leaves * 10", spec.traverse([1, 2, 3], lambda node: node, lambda x: x * 10))
    pairs = spec.transform(None, lambda leaf: oxtree.tree_structure((0, 0)))
    print(f"  {'transform: leaf -> (*, *)':<28} {pairs}")
    other = oxtree.tree_structure({"a": [0, 0], "b": 0})
    common = spec.broadcast_to_common_suffix(other)
    print(f"  {'broadcast_to_common_suffix':<28} {common}")


# --------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------


@section("Clear errors")
def errors() -> None:
    a = {"layer1": {"w": 1, "b": 2}, "layer2": [3, 4]}
    b = {"layer1": {"w": 1, "b": 2}, "layer2": [3, 4, 5]}
    expect_error(
        "tree_map over trees that differ deep inside:",
        lambda: oxtree.tree_map(lambda x, y: x + y, a, b),
    )
    c = {"layer1": {"w": 1, "bias": 2}, "layer2": [3, 4]}
    expect_error(
        "tree_map over dicts with different keys:",
        lambda: oxtree.tree_map(lambda x, y: x + y, a, c),
    )

    spec = oxtree.tree_structure(a)
    expect_error(
        f"tree_unflatten with 3 leaves for a spec of {spec.num_leaves}:",
        lambda: oxtree.tree_unflatten(spec, [1, 2, 3]),
    )

    cyclic: list[Any] = [1, [2]]
    cyclic[1].append(cyclic)
    expect_error("flattening a list that contains itself:", lambda: oxtree.tree_leaves(cyclic))


@section("Deep trees")
def deep_trees() -> None:
    depth = 100_000
    chain: Any = "bottom"
    for _ in range(depth):
        chain = [chain]
    note(
        f"a chain of {depth:,} nested one-element lists (Python's recursion limit is "
        f"{sys.getrecursionlimit():,})"
    )
    try:
        start = time.perf_counter()
        leaves, spec = oxtree.tree_flatten(chain)
        back = oxtree.tree_unflatten(spec, ["new bottom"])
        mapped = oxtree.tree_map(str.upper, chain)
        elapsed = time.perf_counter() - start
    except Exception as e:
        print(f"  -> {type(e).__name__}: {e}")
        return
    show("leaves", leaves)
    show("num_nodes", spec.num_nodes)
    node = back
    for _ in range(depth):
        node = node[0]
    show("unflatten -> innermost", node)
    node = mapped
    for _ in range(depth):
        node = node[0]
    show("tree_map(upper) -> innermost", node)
    print(f"  {'flatten+unflatten+map took':<28} {elapsed * 1e3:.1f} ms")


# --------------------------------------------------------------------------------------
# Registering your own types
# --------------------------------------------------------------------------------------


class Vec2:
    """A plain class, made a pytree node below."""

    def __init__(self, x: Any, y: Any) -> None:
        self.x, self.y = x, y

    def __repr__(self) -> str:
        return f"Vec2({self.x!r}, {self.y!r})"


@section("Custom nodes: register_pytree_node")
def custom_nodes() -> None:
    oxtree.register_pytree_node(
        Vec2,
        lambda v: ((v.x, v.y), None),  # flatten: (children, aux_data)
        lambda aux, children: Vec2(*children),  # unflatten: (aux_data, children) -> node
    )
    state = {"pos": Vec2(1.0, 2.0), "vel": Vec2(0.5, -0.5)}
    show("state", state)
    show("tree_leaves(state)", oxtree.tree_leaves(state))
    print(f"  {'tree_structure(state)':<28} {oxtree.tree_structure(state)}")
    show("tree_map(x * 10, state)", oxtree.tree_map(lambda x: x * 10, state))


@oxtree.register_pytree_node_class
class Box:
    """A class that flattens itself: children are the items, the label is static."""

    def __init__(self, items: list[Any], label: str) -> None:
        self.items, self.label = items, label

    def __repr__(self) -> str:
        return f"Box({self.items!r}, label={self.label!r})"

    def tree_flatten(self) -> tuple[list[Any], str]:
        return self.items, self.label

    @classmethod
    def tree_unflatten(cls, label: str, items: Any) -> Box:
        return cls(list(items), label)


@section("register_pytree_node_class: a class that flattens itself")
def node_class() -> None:
    box = Box([1, 2, 3], "ids")
    show("box", box)
    print(f"  {'tree_structure(box)':<28} {oxtree.tree_structure(box)}")
    show("tree_map(str, box)", oxtree.tree_map(str, box))
    note("the label is aux data: it lives in the spec, so it is never mapped over")


@odc.dataclass(namespace="")
class Layer:
    weight: list[float]
    bias: float
    name: str = odc.field(default="dense", pytree_node=False)


@section("Dataclasses: oxtree.dataclasses.dataclass")
def dataclass_nodes() -> None:
    layer = Layer([1.0, 2.0], 0.5)
    show("layer", layer)
    show("tree_leaves(layer)", oxtree.tree_leaves(layer))
    print(f"  {'tree_structure(layer)':<28} {oxtree.tree_structure(layer)}")
    show("tree_map(x * 2, layer)", oxtree.tree_map(lambda x: x * 2, layer))
    note("field(pytree_node=False) makes `name` metadata kept in the spec, not a leaf")


@dataclasses.dataclass(frozen=True)
class Interval:
    lo: float
    hi: float

    def __post_init__(self) -> None:
        if not self.lo <= self.hi:
            raise ValueError(f"empty interval [{self.lo}, {self.hi}]")


@section("register_dataclass(init_on_unflatten=False)")
def dataclass_no_init() -> None:
    oxtree.register_dataclass(Interval, init_on_unflatten=False)
    interval = Interval(1.0, 2.0)
    show("interval", interval)
    show("tree_map(-x, interval)", oxtree.tree_map(lambda x: -x, interval))
    expect_error("whereas calling Interval(-1.0, -2.0):", lambda: Interval(-1.0, -2.0))
    note("unflattening skipped __init__/__post_init__ and its lo <= hi check: mapped trees")
    note("often hold values __init__ would refuse (tracers, None, placeholders)")


@dataclasses.dataclass(frozen=True)
class Config:
    activation: str
    depth: int


@section("register_static: hashable values kept in the spec")
def static_nodes() -> None:
    oxtree.register_static(Config)
    model = {"config": Config("relu", 3), "w": [1.0, 2.0]}
    show("model", model)
    show("tree_leaves(model)", oxtree.tree_leaves(model))
    print(f"  {'tree_structure(model)':<28} {oxtree.tree_structure(model)}")
    other = {"config": Config("gelu", 3), "w": [1.0, 2.0]}
    show("same spec with 'gelu'?", oxtree.tree_structure(model) == oxtree.tree_structure(other))
    note("a static node has no children: its value is part of the structure (think jit keys)")


class Meters:
    def __init__(self, value: float) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"Meters({self.value!r})"


@section("Namespaces: registrations that only some calls see")
def namespaces() -> None:
    oxtree.register_pytree_node(
        Meters, lambda m: ((m.value,), None), lambda _, c: Meters(*c), namespace="units"
    )
    tree = [Meters(3.0), Meters(4.0)]
    show("tree", tree)
    show("tree_leaves(tree)", oxtree.tree_leaves(tree))
    show("... namespace='units'", oxtree.tree_leaves(tree, namespace="units"))
    print(f"  {'spec, namespace=units':<28} {oxtree.tree_structure(tree, namespace='units')}")
    show("tree_map, namespace='units'", oxtree.tree_map(lambda x: x * 100, tree, namespace="units"))
    note("without the namespace a Meters is a leaf; libraries can register without clashing")


@section("register_pytree_with_keys and unregister_pytree_node")
def keyed_nodes() -> None:
    from oxtree import tree_util as jtu

    class Pair:
        def __init__(self, left: Any, right: Any) -> None:
            self.left, self.right = left, right

    jtu.register_pytree_with_keys(
        Pair,
        lambda p: (((jtu.GetAttrKey("left"), p.left), (jtu.GetAttrKey("right"), p.right)), None),
        lambda _, children: Pair(*children),
    )
    paths = [jtu.keystr(path) for path, _ in jtu.tree_leaves_with_path(Pair(1, [2]))]
    show("key paths of Pair(1, [2])", paths)
    note("the flatten function names each child's key: paths say .left, not [0]")
    oxtree.unregister_pytree_node(Pair)
    show("after unregister: a leaf?", oxtree.tree_is_leaf(Pair(1, [2])))


@section("oxtree.pytree: short names, and reexport for a library's namespace")
def reexport_demo() -> None:
    import oxtree.pytree

    mylib = oxtree.pytree.reexport(namespace="mylib", module="mylib.pytree")

    @mylib.dataclasses.dataclass
    class Config:
        rate: float
        name: str = oxtree.dataclasses.field(default="adam", pytree_node=False)

    show("mylib.leaves(Config(0.1))", mylib.leaves(Config(0.1)))
    show("oxtree.tree_leaves(same)", oxtree.tree_leaves(Config(0.1)))
    note("registered in the 'mylib' namespace: the library's functions see it, others do not")


@section("oxtree.Partial: a functools.partial that is a pytree")
def partial_demo() -> None:
    def affine(x: float, scale: float, *, shift: float) -> float:
        return x * scale + shift

    p = oxtree.Partial(affine, 2.0, shift=1.0)
    show("p(1.0)", p(1.0))
    show("tree_leaves(p)", oxtree.tree_leaves(p))
    q = oxtree.tree_map(lambda v: v * 10, p)
    show("type(q)", type(q))
    show("q(1.0)", q(1.0))
    note("the function is static (in the spec); bound arguments and keywords are leaves")


# --------------------------------------------------------------------------------------
# Key paths
# --------------------------------------------------------------------------------------


@section("Key paths: tree_leaves_with_path and keystr")
def key_paths() -> None:
    tree = {"layers": [Layer([1.0], 0.1), Layer([2.0], 0.2)], "step": Point(3, None)}
    for path, leaf in oxtree.tree_leaves_with_path(tree):
        print(f"  {oxtree.keystr(path):<28} {leaf!r}")
    path, _ = oxtree.tree_leaves_with_path(tree)[0]
    show("first path", path)
    note("JAX's key objects: DictKey, SequenceKey, GetAttrKey (namedtuples and dataclasses)")


@section("optree-style paths: tree_flatten_with_path")
def raw_paths() -> None:
    tree = {"b": [10, 20], "a": {"x": 30}}
    paths, leaves, spec = oxtree.tree_flatten_with_path(tree)
    show("paths", paths)
    show("leaves", leaves)
    print(f"  {'spec':<28} {spec}")
    note("optree's raw entries (dict keys, indices), returned with the leaves and the spec")


@section("Accessors: codify() and tree_set")
def accessors_demo() -> None:
    params = {"enc": {"w": [1, 2]}, "dec": (3, Point(4, 5))}
    accessors, leaves, _ = oxtree.tree_flatten_with_accessor(params)
    for accessor, leaf in zip(accessors, leaves, strict=True):
        print(f"  {accessor.codify('params'):<28} {leaf!r}   fetched again: {accessor(params)!r}")
    where = accessors[0]
    print(f"  {'where':<28} {where.codify('params')}")
    new = oxtree.tree_set(params, where, 100)
    show("tree_set(params, where, 100)", new)
    show("params itself unchanged", params)
    show("new['enc'] is params['enc']", new["enc"] is params["enc"])
    note("only the nodes on the path are copied; everything off it is shared")


# --------------------------------------------------------------------------------------
# Tree algebra
# --------------------------------------------------------------------------------------


@section("Prefixes: tree_broadcast_prefix and prefix_errors (vmap's in_axes)")
def prefixes() -> None:
    args = ("a1", {"k1": "a2", "k2": "a3"})
    in_axes = (None, 0)
    show("args", args)
    show("in_axes", in_axes)
    broadcast = oxtree.tree_broadcast_prefix(in_axes, args, none_is_leaf=True)
    show("broadcast in_axes", broadcast)
    note("none_is_leaf=True: None means 'do not map' here, a leaf rather than an empty node")
    bad = (None, [0, 1])
    show("bad in_axes", bad)
    for make_error in oxtree.prefix_errors(bad, args, none_is_leaf=True):
        print(f"    -> {make_error('in_axes')}")


@section("tree_transpose, tree_reduce, tree_sum")
def transpose_and_reduce() -> None:
    history = [{"loss": 0.9, "acc": 0.5}, {"loss": 0.6, "acc": 0.7}, {"loss": 0.4, "acc": 0.8}]
    outer = oxtree.tree_structure([0, 0, 0])
    inner = oxtree.tree_structure({"loss": 0, "acc": 0})
    show("history", history)
    show("tree_transpose(outer, inner)", oxtree.tree_transpose(outer, inner, history))
    counts = {"train": [3, 4], "eval": (5, None)}
    show("counts", counts)
    show("tree_reduce(max, counts)", oxtree.tree_reduce(max, counts))
    show("tree_sum(counts)", oxtree.tree_sum(counts))


@section("tree_partition and tree_combine")
def partition_combine() -> None:
    state = {"w": 0.5, "step": 3, "b": [0.1, 7]}
    floats, rest = oxtree.tree_partition(lambda x: isinstance(x, float), state)
    show("state", state)
    show("floats", floats)
    show("rest", rest)
    show("tree_combine(floats, rest)", oxtree.tree_combine(floats, rest))
    note("split what an optimizer updates from what it must not touch, then put it back")


@section("Treespecs: is_prefix, constructors, JSON")
def treespec_algebra() -> None:
    full = oxtree.tree_structure({"a": 1, "b": (2, 3)})
    prefix = oxtree.tree_structure({"a": 0, "b": 0})
    print(f"  {'full':<28} {full}")
    print(f"  {'prefix':<28} {prefix}")
    show("prefix.is_prefix(full)", prefix.is_prefix(full))
    show("full.is_prefix(prefix)", full.is_prefix(prefix))
    show("full.is_suffix(prefix)", full.is_suffix(prefix))
    show("prefix < full (ordering)", prefix < full)
    print(f"  {'full.child(1)':<28} {full.child(1)}")
    built = oxtree.treespec_dict(
        {"w": oxtree.treespec_leaf(), "b": oxtree.treespec_tuple([oxtree.treespec_leaf()] * 2)}
    )
    print(f"  {'treespec_dict(...)':<28} {built}")
    show("built.unflatten([1, 2, 3])", built.unflatten([1, 2, 3]))
    doc = built.to_json()
    text = json.dumps(doc)
    show("to_json() (nodes)", doc["nodes"])
    print(f"  {'treespec_from_json(text)':<28} {oxtree.treespec_from_json(text)}")
    show("round trip equal", oxtree.treespec_from_json(text) == built)
    note(f"{len(text)} bytes of JSON, no pickle: safe to load from untrusted storage")


# --------------------------------------------------------------------------------------
# The JAX face
# --------------------------------------------------------------------------------------


@section("The JAX face: oxtree.tree_util and oxtree.tree")
def jax_face() -> None:
    from oxtree import tree_util as jtu

    tree = {"b": 1, "a": (2, None)}
    leaves, treedef = jtu.tree_flatten(tree)
    show("leaves", leaves)
    print(f"  {'treedef':<28} {treedef}")
    show("jtu.tree_unflatten", jtu.tree_unflatten(treedef, leaves))
    note("JAX's rules: PyTreeDef(...) reprs and dicts rebuilt in sorted key order")
    leaves, spec = oxtree.tree_flatten(tree)
    show("oxtree.tree_unflatten", oxtree.tree_unflatten(spec, leaves))
    note("... while the optree face keeps insertion order")
    show("oxtree.tree.map(x * 2, tree)", oxtree.tree.map(lambda x: x * 2, tree))
    paths = [jtu.keystr(p) for p, _ in jtu.tree_leaves_with_path(tree)]
    show("keystr of each leaf's path", paths)
    note("registrations are shared: a type registered through either face is a node in both")
    print(f"  {'jtu.tree_structure(layer)':<28} {jtu.tree_structure(Layer([1.0], 0.5))}")


# --------------------------------------------------------------------------------------
@section("Graphs: shared and cyclic references")
def graphs() -> None:
    x = [1, 2]
    x.append(x)  # a cycle
    obj = {"a": x, "b": x}  # and sharing
    leaves, gd = oxtree.graph_flatten(obj)
    show("leaves", leaves)
    print(f"  {'graphdef':<28} {gd}")
    new = oxtree.graph_unflatten(gd, [10, 20])
    show("rebuilt", new)
    show("still shared? still cyclic?", (new["a"] is new["b"], new["a"][2] is new["a"]))
    view = oxtree.graph_to_dict(obj)
    show("path-keyed view", view)
    back = oxtree.graph_from_dict(view)
    show("graph_from_dict(view) shared?", back["a"] is back["b"])
    expect_error("tree_flatten(obj)", lambda: oxtree.tree_flatten(obj))


@section("Seeing trees: pprint, summary, tree_diff, view")
def seeing_trees() -> None:
    import numpy as np

    params = {
        "encoder": {"w": np.zeros((784, 256), np.float32), "b": np.zeros(256, np.float32)},
        "head": {"w": np.zeros((256, 10), np.float32), "b": np.zeros(10, np.float32)},
        "step": 0,
    }
    oxtree.pprint(params, width=60)  # arrays as dtype[shape]; breaks only what does not fit
    print(oxtree.summary(params, depth=1))  # leaves, elements and bytes per subtree
    changed = {**params, "head": {"w": params["head"]["w"], "b": [0.0] * 10}, "step": 1}
    print(oxtree.tree_diff(params, changed, leaves=True))  # the engine's words, by key path
    loop: dict[str, Any] = {"name": "loop"}
    loop["self"] = loop
    oxtree.pprint(loop)  # shared containers and cycles print as references
    html = oxtree.view(params)._repr_html_()  # what a notebook shows for view(params)
    show("view(params): HTML", f"{len(html):,} characters, collapsible, arrays as f32[784,256]")


@section("JAX: filter_jit keeps shared references; oxtree types in jax.grad")
def jax_integration() -> None:
    import jax
    import jax.numpy as jnp
    import oxtree.jax as oxjax  # `import oxtree` alone never imports JAX

    def bump(v: dict[str, Any]) -> dict[str, Any]:
        v["a"][0] += 1  # runs on the copy rebuilt inside the trace ...
        return v

    x = [jnp.zeros(())]
    out = oxjax.filter_jit(bump)({"a": x, "b": x})
    show('out["a"] is out["b"]', out["a"] is out["b"])
    show("out", out)
    show("the caller's x", x)
    note("... and what the function changed is written back to the caller's objects: x too")
    oxjax.register(Layer)  # mirror oxtree's registration of Layer into JAX's registry
    grads = jax.grad(lambda lay: jnp.sum(lay.weight**2) + lay.bias)(
        Layer(jnp.ones(2), jnp.float32(0.5))
    )
    show("jax.grad over a Layer", grads)
    note("arrays are traced, other leaves static: one trace per structure (see docs/jax.md)")
    model = {"w": jnp.arange(3.0), "name": "linear", "scale": 2}
    arrays, static = oxjax.partition(model, oxjax.is_array)
    show("partition: arrays", arrays)
    show("partition: the rest", static)
    show("combine(arrays, the rest)", oxjax.combine(arrays, static))
    grads = oxjax.filter_grad(lambda m: jnp.sum(m["w"] ** 2) * m["scale"])(model)
    show("filter_grad: grads", grads)
    note("filter_grad differentiates the float arrays only; str and int leaves pass through")


@section("Modules: oxtree.Module, pytrees with parameters, states and configuration")
def modules() -> None:
    class Linear(oxtree.Module):
        weight: oxtree.Parameter  # declared kinds; or self.register_parameter("weight", w)
        bias: oxtree.Parameter

        def __init__(self, w: float, n_out: int) -> None:
            self.weight, self.bias = w, 0.0
            self.n_out = n_out  # configuration: kept in the treedef

    class MLP(oxtree.Module):
        def __init__(self) -> None:
            self.layers = [Linear(1.0, 2), Linear(2.0, 1)]  # modules: a MODULE by themselves
            self.register_state("steps", 0)

    model = MLP()
    show("name_to_kind", dict(model.name_to_kind))
    show("leaves", oxtree.tree_leaves(model))
    show("paths", [oxtree.keystr(p) for p, _ in oxtree.tree_util.tree_leaves_with_path(model)])
    show("parameters() leaves", oxtree.tree_leaves(model.parameters(), none_is_leaf=True))
    show("eval().layers[0].training", model.eval().layers[0].training)
    same = oxtree.tree_structure(Linear(1.0, 2)) == oxtree.tree_structure(Linear(1.0, 3))
    show("configs differ: specs equal?", same)
    note("examples/mlp.py trains an MLP with jax.grad over parameters() under filter_jit")


# Speed (keep this section last)
# --------------------------------------------------------------------------------------


@section("Speed: oxtree vs jax.tree_util vs optree (quick run)")
def speed() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    import bench

    results = bench.run(
        workloads=["tuple3", "mixed1k", "dict10k", "resnet50", "custom1k", "dataclass1k"],
        ops=["flatten", "unflatten", "map1", "map2"],
        libs=["oxtree", "jax", "optree"],
        quick=True,
    )
    table = bench.format_table(results, summary=False)
    print("\n".join("  " + line if line else "" for line in table.splitlines()))
    note("per-call medians; full run with more workloads and ops: make bench")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-bench", action="store_true", help="skip the speed table")
    parser.add_argument("--only", metavar="TEXT", help="run sections whose title contains TEXT")
    args = parser.parse_args(argv)

    version = getattr(oxtree, "__version__", "?")
    print(f"oxtree {version} tour  (Python {sys.version.split()[0]})")
    failed = []
    number = 0
    for title, fn in SECTIONS:
        if args.no_bench and fn is speed:
            continue
        if args.only and args.only.lower() not in title.lower():
            continue
        number += 1
        print(f"\n== {number}. {title} ==")
        try:
            fn()
        except Exception:
            failed.append(title)
            traceback.print_exc(file=sys.stdout)
    if failed:
        print(f"\n{len(failed)} section(s) failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
