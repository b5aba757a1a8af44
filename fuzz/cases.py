"""Random and hostile fuzz cases for oxtree, each checked against an oracle.

A case is fully determined by ``(seed, index)``. Its kind is drawn first:

- ``tree``: a random tree of every node type, flattened, rebuilt, mapped, walked with
  ``flatten_up_to``, pickled, turned into JSON, given key paths and accessors, and compared one
  to one with optree 0.20 (and with jax.tree_util for trees JAX treats alike);
- ``hostile``: a tree holding keys whose dunders raise, dict subclasses whose views lie,
  registered nodes whose flatten functions mutate the tree or return garbage, walked with an
  ``is_leaf`` that mutates the tree; the result must be consistent with itself or a clean
  exception;
- ``pickle`` / ``state`` / ``json``: treedefs loaded from mutated pickle bytes, mutated pickle
  states and mutated JSON documents: a working treedef or a clean exception;
- ``graph``: random object graphs with sharing and cycles through ``graph_flatten`` and
  ``graph_unflatten`` (rebuilt graph isomorphic to the original), benign or hostile;
- ``big``: very wide or very deep trees (rare).

Clean exceptions are TypeError, ValueError, KeyError, IndexError, RecursionError and
RuntimeError, plus the user's own exception (``FuzzError``) propagated unchanged. Anything else,
or a result that disagrees with the oracle, is a *finding*; a crash is caught by the driver
(``fuzz.py``), which runs cases in subprocesses.
"""

from __future__ import annotations

import copy
import gc
import inspect
import io
import json
import math
import os
import pickle
import pickletools
import random
import sys
import traceback
from collections import OrderedDict, defaultdict, deque
from collections.abc import Callable
from typing import Any

import numpy as np
import optree
import oxtree
import oxtree.tree_util as oxtu
from fuzz_nodes import (
    DC,
    FACTORIES,
    HOSTILE,
    NAMESPACE,
    STRUCTSEQS,
    BadKey,
    Bag,
    Box,
    Chaos,
    FakeNamedTuple,
    FakeNamedTuple2,
    FuzzError,
    GarbageBox,
    ListSub,
    LyingClass,
    MutBox,
    OddDict,
    RaisingBox,
    St,
    TouchyLeaf,
    poke,
)

# fuzz_nodes has put tests/ on sys.path: the classes shared with the tests.
from nodes import EmptyNamedTuple, Key, Leaf, Point, Rec, Triple

# OXTREE_FUZZ_NO_JAX=1 skips the comparisons with jax (valgrind runs: XLA is slow there).
NO_JAX = bool(os.environ.get("OXTREE_FUZZ_NO_JAX"))
ALLOWED = (
    TypeError,
    ValueError,
    KeyError,
    IndexError,
    RecursionError,
    RuntimeError,
    MemoryError,  # a result sized by the input that cannot be allocated
    FuzzError,
)

# --------------------------------------------------------------------------------------------------
# Pools.

NAN = float("nan")
ARRAY = np.arange(3)
OPAQUE = [Leaf(str(i)) for i in range(4)]
TOUCHY = TouchyLeaf()
LEAF_POOL: list[Any] = [
    0,
    1,
    -7,
    10**30,
    2.5,
    NAN,
    True,
    "s",
    "",
    b"b",
    1j,
    ARRAY,
    TOUCHY,
    Ellipsis,
    frozenset({1}),
    *OPAQUE,
]
# Keys of every kind: orderable together or not, equal across types (1, 1.0, True), partially
# ordered (frozensets), never equal to themselves (NaN), compared by identity (Leaf).
KEY_POOL: list[Any] = [
    "a",
    "b",
    "zz",
    "",
    0,
    1,
    -1,
    2,
    1.5,
    1.0,
    True,
    NAN,
    None,
    (1,),
    (1, "a"),
    (),
    b"k",
    frozenset({1}),
    frozenset({2}),
    frozenset(),
    1j,
    OPAQUE[0],
    OPAQUE[1],
    Key(1),
    Key(2),
]
VALUE_KEY_TYPES = (str, int, float, bool, bytes, tuple, frozenset, complex, Key, type(None))
JSON_KEY_TYPES = (str, int, float, bool, type(None))

NODE_KINDS = [
    "tuple",
    "list",
    "dict",
    "dict",
    "ordereddict",
    "defaultdict",
    "deque",
    "namedtuple",
    "structseq",
    "none",
    "box",
    "bag",
    "dc",
    "static",
]
HOSTILE_KINDS = [*NODE_KINDS, "mutbox", "garbage", "raising", "odddict", "oddleaf", "badkeys"]


def _is_single_tuple(x: Any) -> bool:
    return type(x) is tuple and len(x) == 1


def _is_long_list(x: Any) -> bool:
    return type(x) is list and len(x) > 2


def _is_none(x: Any) -> bool:
    return x is None


def _is_box(x: Any) -> bool:
    return type(x) is Box


PREDICATES: list[Callable[[Any], bool] | None] = [
    None,
    None,
    None,
    _is_single_tuple,
    _is_long_list,
    _is_none,
    _is_box,
]


# --------------------------------------------------------------------------------------------------
# Generation.


class Gen:
    """Random trees from one case's generator; remembers the containers it made."""

    def __init__(self, rng: random.Random, hostile: bool) -> None:
        self.rng = rng
        self.hostile = hostile
        self.containers: list[Any] = []
        self.budget = rng.choice([4, 12, 40, 80])
        self.kinds = HOSTILE_KINDS if hostile else NODE_KINDS

    def leaf(self) -> Any:
        rng = self.rng
        if rng.random() < 0.08:
            return Leaf(f"fresh{rng.randrange(100)}")
        if self.hostile and rng.random() < 0.05:
            return rng.choice(
                [LyingClass(), FakeNamedTuple((1, 2)), FakeNamedTuple2((3,)), ListSub()]
            )
        return rng.choice(LEAF_POOL)

    def key(self) -> Any:
        if self.hostile and self.rng.random() < 0.3:
            return BadKey(self.rng.randrange(6))
        return self.rng.choice(KEY_POOL)

    def tree(self, depth: int) -> Any:
        rng = self.rng
        if depth <= 0 or self.budget <= 0 or rng.random() < 0.3:
            return None if rng.random() < 0.1 else self.leaf()
        self.budget -= 1
        kind = rng.choice(self.kinds)
        n = rng.choice([0, 1, 2, 2, 3, 3, 4, 5])

        def kids(count: int = n) -> list[Any]:
            return [self.tree(depth - 1) for _ in range(count)]

        def items(count: int = n) -> list[tuple[Any, Any]]:
            return [(self.key(), self.tree(depth - 1)) for _ in range(count)]

        node: Any
        if kind == "tuple":
            node = tuple(kids())
        elif kind == "list":
            node = kids()
        elif kind == "dict":
            node = dict(items())
        elif kind == "ordereddict":
            node = OrderedDict(items())
        elif kind == "defaultdict":
            node = defaultdict(rng.choice(FACTORIES), items())
        elif kind == "deque":
            children = kids()
            extra = rng.choice([None, 0, 1, 3])
            node = deque(children, None if extra is None else len(children) + extra)
        elif kind == "namedtuple":
            cls = rng.choice([Point, Triple, EmptyNamedTuple])
            node = cls(*kids(len(cls._fields)))
        elif kind == "structseq":
            cls = rng.choice(STRUCTSEQS)
            node = cls(kids(cls.n_sequence_fields))
        elif kind == "none":
            node = None
        elif kind == "box":
            node = Box(*kids(2))
        elif kind == "bag":
            node = Bag(kids(), rng.choice(["t", 1, None, (2, "x")]))
        elif kind == "dc":
            node = DC(*kids(2), m=rng.choice(["m", "n"]))
        elif kind == "static":
            node = St(rng.randrange(3))
        elif kind == "mutbox":
            node = MutBox(kids())
        elif kind == "garbage":
            node = GarbageBox(rng.randrange(24), self.tree(depth - 1))
        elif kind == "raising":
            node = RaisingBox(self.tree(depth - 1), rng.random() < 0.5)
        elif kind == "odddict":
            node = OddDict(items())
        elif kind == "oddleaf":
            node = rng.choice([LyingClass(), FakeNamedTuple((1, 2)), FakeNamedTuple2((3,))])
        else:  # "badkeys": a dict of colliding keys whose dunders turn hostile once armed
            node = {BadKey(rng.randrange(9)): self.tree(depth - 1) for _ in range(n)}
        if type(node) in (list, dict, OrderedDict, defaultdict, deque, MutBox, OddDict):
            self.containers.append(node)
        return node

    def predicate(self) -> Callable[[Any], bool] | None:
        return self.rng.choice(PREDICATES)


def uses_only(tree: Any, allowed: tuple[type, ...]) -> bool:
    """Whether every node of `tree` (by the optree face's rules) has a type in `allowed`."""
    stack = [tree]
    while stack:
        node = stack.pop()
        kids = children_of(node)
        if kids is None:
            continue
        if type(node) not in allowed and not (
            tuple in allowed and type(node) in (Point, Triple, EmptyNamedTuple, *STRUCTSEQS)
        ):
            return False
        stack.extend(kids[1])
    return True


def keys_of_types(tree: Any, types: tuple[type, ...]) -> bool:
    """Whether every dict key of `tree` has one of `types` (and is not NaN)."""
    for node in walk(tree):
        if type(node) in (dict, OrderedDict, defaultdict):
            for key in node:
                if type(key) not in types or (type(key) is float and math.isnan(key)):
                    return False
                if type(key) in (tuple, frozenset) and not all(type(k) in (int, str) for k in key):
                    return False
    return True


def value_keys_only(tree: Any) -> bool:
    """Whether every dict key survives pickling as an equal value."""
    return keys_of_types(tree, VALUE_KEY_TYPES)


# --------------------------------------------------------------------------------------------------
# The structural oracle.


def children_of(x: Any) -> tuple[Any, list[Any]] | None:
    """(what must match besides children, children) for a node; None for a leaf."""
    cls = type(x)
    if cls is tuple or cls is list:
        return cls, list(x)
    if cls is dict or cls is OrderedDict:
        return (cls, list(x)), list(x.values())
    if cls is defaultdict:
        return (cls, list(x), x.default_factory), list(x.values())
    if cls is deque:
        return (cls, x.maxlen), list(x)
    if cls in (Point, Triple, EmptyNamedTuple) or cls in STRUCTSEQS:
        return cls, list(x)
    if cls is Box:
        return cls, [x.a, x.b]
    if cls is Bag:
        return (cls, x.tag), list(x.items)
    if cls is DC:
        return (cls, x.m), [x.x, x.y]
    if cls is St:
        return (cls, x.v), []
    return None


def _same_meta(a: Any, b: Any) -> bool:
    if type(a) is tuple and type(b) is tuple:
        return len(a) == len(b) and all(_same_meta(p, q) for p, q in zip(a, b, strict=True))
    if type(a) is list and type(b) is list:  # dict keys: the very same objects, same order
        return len(a) == len(b) and all(p is q for p, q in zip(a, b, strict=True))
    return a is b or (type(a) is type(b) and type(a) in (int, str) and a == b)


def same_leaf(a: Any, b: Any) -> bool:
    return a is b or (type(a) is Rec and a == b)


def tree_diff(a: Any, b: Any) -> str | None:
    """None when `a` and `b` have the same structure, keys and (identical) leaves."""
    stack = [(a, b, "tree")]
    while stack:
        x, y, path = stack.pop()
        cx, cy = children_of(x), children_of(y)
        if cx is None or cy is None:
            if cx is not None or cy is not None or not same_leaf(x, y):
                return f"{path}: {x!r:.80} vs {y!r:.80}"
            continue
        if not _same_meta(cx[0], cy[0]) or len(cx[1]) != len(cy[1]):
            return f"{path}: node {cx[0]!r:.80} vs {cy[0]!r:.80}"
        stack.extend(
            (p, q, f"{path}[{i}]") for i, (p, q) in enumerate(zip(cx[1], cy[1], strict=True))
        )
    return None


def leaves_diff(a: list[Any], b: list[Any]) -> str | None:
    if type(a) is not list:
        return f"leaves are a {type(a).__name__}"
    if len(a) != len(b):
        return f"{len(a)} leaves vs {len(b)}"
    for i, (p, q) in enumerate(zip(a, b, strict=True)):
        if not same_leaf(p, q):
            return f"leaf {i}: {p!r:.80} vs {q!r:.80}"
    return None


def graph_diff(original: Any, rebuilt: Any) -> str | None:
    """None when `rebuilt` is isomorphic to `original`, sharing and cycles included."""
    seen: dict[int, Any] = {}
    keep: list[Any] = []  # ids stay valid while the objects live
    stack = [(original, rebuilt, "obj")]
    while stack:
        x, y, path = stack.pop()
        cx = children_of(x)
        if cx is None:
            if not (x is y or (x is None and y is None)):
                return f"{path}: leaf {x!r:.60} vs {y!r:.60}"
            continue
        if id(x) in seen:
            if seen[id(x)] is not y:
                return f"{path}: sharing lost (a copy where the original repeats an object)"
            continue
        seen[id(x)] = y
        keep.append(x)
        cy = children_of(y)
        if cy is None or not _same_meta(cx[0], cy[0]) or len(cx[1]) != len(cy[1]):
            return f"{path}: node {cx[0]!r:.60} vs {(cy or [y])[0]!r:.60}"
        stack.extend(
            (p, q, f"{path}[{i}]") for i, (p, q) in enumerate(zip(cx[1], cy[1], strict=True))
        )
    # No two distinct originals may map to one rebuilt object.
    if len({id(v) for v in seen.values()}) != len(seen):
        return "two distinct objects were merged into one"
    return None


# --------------------------------------------------------------------------------------------------
# Running one case.


class Finding(Exception):
    """Raised inside a check to end the case with a recorded finding."""


class Case:
    """One case's bookkeeping: calls made, findings recorded."""

    def __init__(self, seed: int, index: int, findings: list[dict[str, Any]]) -> None:
        self.seed, self.index = seed, index
        self.rng = random.Random(seed * 1_000_000_007 + index)
        self.findings = findings
        self.calls = 0
        self.kind = ""

    def record(self, what: str, op: str, detail: str) -> None:
        self.findings.append(
            {
                "seed": self.seed,
                "index": self.index,
                "kind": self.kind,
                "what": what,
                "op": op,
                "detail": detail[:600],
            }
        )

    def call(self, op: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[bool, Any]:
        """(True, result) or (False, exception); records exceptions that are not clean."""
        self.calls += 1
        try:
            return True, fn(*args, **kwargs)
        except ALLOWED as exc:
            return False, exc
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:  # a Rust panic is a BaseException
            tb = "".join(traceback.format_exception(exc, limit=-3))
            what = "panic" if not isinstance(exc, Exception) else "bad-exception"
            self.record(what, op, f"{type(exc).__module__}.{type(exc).__name__}: {exc}\n{tb}")
            return False, exc

    def check(self, op: str, problem: str | None) -> None:
        if problem is not None:
            self.record("wrong-result", op, problem)
            raise Finding

    def both(
        self, op: str, ours: Callable[[], Any], theirs: Callable[[], Any]
    ) -> tuple[Any, Any] | None:
        """Runs oxtree's and the reference's version; (ours, theirs) when both succeed."""
        ok, got = self.call(op, ours)
        try:
            want = theirs()
            ref_ok = True
        except Exception as exc:
            want, ref_ok = exc, False
        if ok and ref_ok:
            return got, want
        if ok != ref_ok:
            detail = f"oxtree: {got!r:.200}; reference: {want!r:.200}"
            self.record("divergence", op, detail)
            raise Finding
        return None


# (cumulative probability, kind): the first draw of a case picks its kind.
KIND_ODDS = [
    (0.0006, "big"),
    (0.02, "attack"),
    (0.50, "tree"),
    (0.72, "hostile"),
    (0.78, "pickle"),
    (0.84, "state"),
    (0.90, "json"),
    (1.01, "graph"),
]


def run_case(seed: int, index: int, findings: list[dict[str, Any]]) -> int:
    """Runs case `index` of `seed`; returns the number of library calls it made."""
    case = Case(seed, index, findings)
    roll = case.rng.random()
    case.kind = next(kind for limit, kind in KIND_ODDS if roll < limit)
    try:
        KINDS[case.kind](case)
    except Finding:
        pass
    finally:
        Chaos.current = None
    return case.calls


# --------------------------------------------------------------------------------------------------
# Benign trees against optree and jax.tree_util.


def check_tree(case: Case) -> None:
    rng = case.rng
    gen = Gen(rng, hostile=False)
    tree = gen.tree(rng.choice([2, 3, 4, 6]))
    none_is_leaf = rng.random() < 0.3
    namespace = NAMESPACE if rng.random() < 0.7 else ""
    pred = gen.predicate()
    opts = {"none_is_leaf": none_is_leaf, "namespace": namespace}
    # The tree is unchanged by every call, so optree sees exactly what oxtree saw.
    res = case.both(
        "tree_flatten",
        lambda: oxtree.tree_flatten(tree, pred, **opts),
        lambda: optree.tree_flatten(tree, pred, **opts),
    )
    if res is None:
        return
    (leaves, spec), (ref_leaves, ref_spec) = res
    case.check("tree_flatten leaves", leaves_diff(leaves, ref_leaves))
    has_dc = not uses_only(tree, (tuple, list, dict, OrderedDict, defaultdict, deque, Box, Bag, St))
    if not has_dc:
        case.check("repr", None if repr(spec) == repr(ref_spec) else f"{spec!r} vs {ref_spec!r}")
    case.check(
        "counts",
        None
        if (spec.num_leaves, spec.num_nodes, spec.num_children)
        == (ref_spec.num_leaves, ref_spec.num_nodes, ref_spec.num_children)
        else "num_leaves/num_nodes/num_children",
    )
    ok, leaves2 = case.call("tree_leaves", oxtree.tree_leaves, tree, pred, **opts)
    case.check("tree_leaves", leaves_diff(leaves2, leaves) if ok else repr(leaves2))
    ok, spec2 = case.call("tree_structure", oxtree.tree_structure, tree, pred, **opts)
    case.check(
        "tree_structure", None if ok and spec2 == spec and hash(spec2) == hash(spec) else "differs"
    )

    ok, rebuilt = case.call("unflatten", spec.unflatten, leaves)
    ref_rebuilt = optree.tree_unflatten(ref_spec, ref_leaves)
    case.check("unflatten", tree_diff(rebuilt, ref_rebuilt) if ok else repr(rebuilt))

    for op in rng.sample(TREE_OPS, rng.randrange(2, 5)):
        op(case, tree, pred, opts, spec, ref_spec, leaves)


def op_map(case: Case, tree, pred, opts, spec, ref_spec, leaves) -> None:
    res = case.both(
        "tree_map",
        lambda: oxtree.tree_map(Rec, tree, is_leaf=pred, **opts),
        lambda: optree.tree_map(Rec, tree, is_leaf=pred, **opts),
    )
    if res is not None:
        case.check("tree_map", tree_diff(*res))


def op_up_to(case: Case, tree, pred, opts, spec, ref_spec, leaves) -> None:
    rng = case.rng
    wide = optree.tree_map(lambda x: [x, {"k": x}], tree, is_leaf=pred, **opts)
    if rng.random() < 0.5:
        # Only containers the map made: the original tree's objects (leaf lists included)
        # stay untouched.
        wide = perturb(rng, wide, {id(x) for x in walk(tree)})
    res = case.both(
        "flatten_up_to",
        lambda: spec.flatten_up_to(wide),
        lambda: ref_spec.flatten_up_to(wide),
    )
    if res is not None:
        case.check("flatten_up_to", leaves_diff(*res))
    res = case.both(
        "tree_map_2",
        lambda: oxtree.tree_map(Rec, tree, wide, is_leaf=pred, **opts),
        lambda: optree.tree_map(Rec, tree, wide, is_leaf=pred, **opts),
    )
    if res is not None:
        case.check("tree_map_2", tree_diff(*res))


def perturb(rng: random.Random, tree: Any, keep: set[int]) -> Any:
    """`tree` with one random structural change in a container whose id is not in `keep`."""
    stack = [tree]
    spots = []
    while stack and len(spots) < 50:
        node = stack.pop()
        if id(node) in keep:
            continue
        if type(node) in (list, dict, OrderedDict, defaultdict):
            spots.append(node)
        kids = children_of(node)
        if kids is not None:
            stack.extend(kids[1])
    if not spots:
        return tree if rng.random() < 0.5 else (tree,)
    spot = rng.choice(spots)
    change = rng.randrange(4)
    if type(spot) is list:
        if change == 0:
            spot.append(0)
        elif change == 1 and spot:
            spot.pop()
        elif spot:
            spot[0] = rng.choice([(spot[0],), None, {"x": 1}, OrderedDict()])
    else:
        if change == 0:
            spot[rng.choice(KEY_POOL)] = 0
        elif change == 1 and spot:
            spot.pop(next(iter(spot)))
        elif spot:
            first = next(iter(spot))
            spot[first] = rng.choice([[spot[first]], None, ()])
    return tree


def op_pickle(case: Case, tree, pred, opts, spec, ref_spec, leaves) -> None:
    protocol = case.rng.choice([2, 3, 4, 5])
    ok, data = case.call("pickle.dumps", pickle.dumps, spec, protocol)
    if not ok:
        return
    ok, loaded = case.call("pickle.loads", pickle.loads, data)
    case.check("pickle.loads", None if ok else repr(loaded))
    if value_keys_only(tree):
        case.check(
            "pickle round trip",
            None if loaded == spec and hash(loaded) == hash(spec) else f"{loaded!r} != {spec!r}",
        )
        case.check("pickle repr", None if repr(loaded) == repr(spec) else f"{loaded!r} vs {spec!r}")
    case.check(
        "pickle counts",
        None
        if loaded.num_leaves == spec.num_leaves and loaded.num_nodes == spec.num_nodes
        else "counts",
    )
    ok, rebuilt = case.call("unflatten(loaded)", loaded.unflatten, leaves)
    case.check("unflatten(loaded)", None if ok else repr(rebuilt))
    case.check("copy", None if copy.deepcopy(spec) == spec else "deepcopy differs")


# What a reader of these treedefs' JSON passes to `treespec_from_json`: every namedtuple class
# and default factory the fuzz trees use (the loader imports nothing by name).
JSON_ALLOW: dict[str, Any] = {
    "types": [
        v
        for module in ("nodes", "fuzz_nodes")
        for v in vars(__import__(module)).values()
        if isinstance(v, type) and issubclass(v, tuple) and hasattr(v, "_fields")
    ]
    + list(STRUCTSEQS),
    "factories": [f for f in FACTORIES if f is not None],
}


def op_json(case: Case, tree, pred, opts, spec, ref_spec, leaves) -> None:
    ok, doc = case.call("treespec_to_json", oxtree.treespec_to_json, spec)
    if not ok:
        expected = not uses_only(
            tree, (tuple, list, dict, OrderedDict, defaultdict, deque)
        ) or not keys_of_types(tree, JSON_KEY_TYPES)
        if not isinstance(doc, ValueError) or not expected:
            case.record("wrong-result", "treespec_to_json", f"refused: {doc!r:.300}")
        return
    text = json.dumps(doc)
    ok, loaded = case.call("treespec_from_json", oxtree.treespec_from_json, text, **JSON_ALLOW)
    case.check("treespec_from_json", None if ok else repr(loaded))
    if keys_of_types(tree, JSON_KEY_TYPES):
        case.check("json round trip", None if loaded == spec else f"{loaded!r} != {spec!r}")


def op_paths(case: Case, tree, pred, opts, spec, ref_spec, leaves) -> None:
    res = case.both(
        "tree_flatten_with_path",
        lambda: oxtree.tree_flatten_with_path(tree, pred, **opts),
        lambda: optree.tree_flatten_with_path(tree, pred, **opts),
    )
    if res is None:
        return
    (paths, leaves2, _), (ref_paths, ref_leaves, _) = res
    case.check("paths", None if paths == ref_paths else f"{paths!r:.200} vs {ref_paths!r:.200}")
    case.check("paths leaves", leaves_diff(leaves2, ref_leaves))
    case.check("spec.paths", None if spec.paths() == ref_paths else "spec.paths() differs")
    ok, accessors = case.call("tree_accessors", oxtree.tree_accessors, tree, pred, **opts)
    ref_accessors = optree.tree_accessors(tree, pred, **opts)
    case.check(
        "accessors",
        None if ok and list(map(repr, accessors)) == list(map(repr, ref_accessors)) else "differ",
    )
    for accessor, leaf in zip(accessors, leaves, strict=True):
        ok, got = case.call("accessor(tree)", accessor, tree)
        case.check("accessor(tree)", None if ok and got is leaf else f"{accessor!r}: {got!r:.100}")


def op_jax(case: Case, tree, pred, opts, spec, ref_spec, leaves) -> None:
    if opts["none_is_leaf"] or NO_JAX:
        return
    import jax.tree_util as jtu

    # NaN and frozenset keys have no total order: sorting them depends on the algorithm
    # (jaxlib's differs from list.sort, which oxtree and optree use).
    if any(
        type(key) is frozenset or (type(key) is float and math.isnan(key))
        for node in walk(tree)
        if type(node) in (dict, OrderedDict, defaultdict)
        for key in node
    ):
        return
    res = case.both(
        "jax tree_flatten",
        lambda: oxtu.tree_flatten(tree, pred),
        lambda: jtu.tree_flatten(tree, pred),
    )
    if res is None:
        return
    (leaves, treedef), (ref_leaves, ref_treedef) = res
    case.check("jax leaves", leaves_diff(leaves, ref_leaves))
    if uses_only(tree, (tuple, list, dict)):
        case.check(
            "jax repr",
            None if repr(treedef) == repr(ref_treedef) else f"{treedef!r} vs {ref_treedef!r}",
        )
        ok, rebuilt = case.call("jax unflatten", oxtu.tree_unflatten, treedef, leaves)
        case.check(
            "jax unflatten",
            tree_diff(rebuilt, jtu.tree_unflatten(ref_treedef, ref_leaves))
            if ok
            else repr(rebuilt),
        )
        res = case.both(
            "jax paths",
            lambda: oxtu.tree_flatten_with_path(tree, pred)[0],
            lambda: jtu.tree_flatten_with_path(tree, pred)[0],
        )
        if res is not None:
            ours, theirs = res
            case.check(
                "jax keystr",
                None
                if [oxtu.keystr(p) for p, _ in ours] == [jtu.keystr(p) for p, _ in theirs]
                else "keystr differs",
            )


def op_graph_of_tree(case: Case, tree, pred, opts, spec, ref_spec, leaves) -> None:
    ok, out = case.call("graph_flatten(tree)", oxtree.graph_flatten, tree, is_leaf=pred, **opts)
    if not ok:
        case.record("wrong-result", "graph_flatten(tree)", f"a tree failed: {out!r:.300}")
        return
    g_leaves, gd = out
    if gd.num_refs == 0:
        case.check(
            "graph treespec", None if gd.treespec == spec else f"{gd.treespec!r} vs {spec!r}"
        )
        case.check("graph leaves", leaves_diff(g_leaves, leaves))
    ok, rebuilt = case.call("graph_unflatten(tree)", oxtree.graph_unflatten, gd, g_leaves)
    case.check("graph_unflatten(tree)", graph_diff(tree, rebuilt) if ok else repr(rebuilt))


TREE_OPS = [op_map, op_up_to, op_pickle, op_json, op_paths, op_jax, op_graph_of_tree]


# --------------------------------------------------------------------------------------------------
# Hostile trees: no oracle but self-consistency.


def check_hostile(case: Case) -> None:
    rng = case.rng
    gen = Gen(rng, hostile=True)
    tree = gen.tree(rng.choice([2, 3, 4, 5]))
    if rng.random() < 0.3 and gen.containers:  # a cycle
        mutate_in(rng, rng.choice(gen.containers), tree)
    chaos = Chaos(rng, gen.containers, rng.choice([0, 2, 10, 40]))
    Chaos.current = chaos
    none_is_leaf = rng.random() < 0.3
    namespace = rng.choice([HOSTILE, HOSTILE, NAMESPACE, ""])
    opts = {"none_is_leaf": none_is_leaf, "namespace": namespace}

    def is_leaf(x: Any) -> Any:
        poke()
        roll = rng.random()
        if roll < 0.02:
            return BadBool()
        return roll < 0.15

    pred = is_leaf if rng.random() < 0.7 else None
    ops = rng.sample(HOSTILE_OPS, rng.randrange(1, 4))
    for op in ops:
        op(case, tree, pred, opts)
    Chaos.current = None
    # Whatever happened, the (possibly mutated) tree still flattens consistently once calm.
    ok, out = case.call("calm flatten", oxtree.tree_flatten, tree, None, **opts)
    if ok:
        leaves, spec = out
        case.check("calm consistency", consistent(case, tree, leaves, spec, opts))


class BadBool:
    def __bool__(self) -> bool:
        raise FuzzError("BadBool.__bool__")


def mutate_in(rng: random.Random, holder: Any, value: Any) -> None:
    if type(holder) is list:
        holder.append(value)
    elif type(holder) in (dict, OrderedDict, defaultdict, OddDict):
        holder[rng.choice(["cyc", 9])] = value
    elif type(holder) is deque and holder.maxlen != 0:
        holder.append(value)
    elif type(holder) is MutBox:
        holder.items.append(value)


def consistent(
    case: Case, tree: Any, leaves: list[Any], spec: Any, opts: dict[str, Any]
) -> str | None:
    """A flatten result agrees with itself: counts, rebuild, re-flatten."""
    if type(leaves) is not list or len(leaves) != spec.num_leaves:
        return f"{len(leaves)} leaves for a treedef of {spec.num_leaves}"
    ok, rebuilt = case.call("unflatten", spec.unflatten, leaves)
    if not ok:
        return None  # a hostile unflatten function may refuse
    ok, again = case.call("re-flatten", oxtree.tree_flatten, rebuilt, None, **opts)
    if not ok:
        return None  # a rebuilt hostile node may flatten differently
    # Hostile nodes rebuild as something else; other trees must come back exactly.
    if not any(isinstance(x, GarbageBox | MutBox | OddDict | RaisingBox) for x in walk(tree)):
        if again[1] != spec:
            return f"re-flatten: {again[1]!r:.200} != {spec!r:.200}"
        return leaves_diff(again[0], leaves)
    return None


def walk(tree: Any) -> list[Any]:
    """Every node of `tree` once (it may be a graph), up to 10,000."""
    out, stack, seen = [], [tree], set()
    while stack and len(out) < 10_000:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        out.append(node)
        kids = children_of(node)
        if kids is not None:
            stack.extend(kids[1])
    return out


def hop_flatten(case: Case, tree, pred, opts) -> None:
    ok, out = case.call("hostile tree_flatten", oxtree.tree_flatten, tree, pred, **opts)
    if ok:
        leaves, spec = out
        case.check("hostile counts", None if len(leaves) == spec.num_leaves else "count mismatch")
        for op, fn in (
            ("repr", repr),
            ("hash", hash),
            ("eq", lambda s: s == s),
            ("paths", lambda s: s.paths()),
            ("accessors", lambda s: s.accessors()),
            ("children", lambda s: s.children()),
            ("pickle", lambda s: pickle.loads(pickle.dumps(s))),
            ("to_json", oxtree.treespec_to_json),
        ):
            case.call(f"hostile spec.{op}", fn, spec)
        case.call("hostile unflatten", spec.unflatten, _poking_leaves(leaves))


def _poking_leaves(leaves: list[Any]) -> Any:
    for leaf in leaves:
        poke()
        yield leaf


def hop_map(case: Case, tree, pred, opts) -> None:
    def func(*xs: Any) -> Any:
        poke()
        return Rec(*xs)

    rests = [tree] if case.rng.random() < 0.5 else []
    case.call("hostile tree_map", oxtree.tree_map, func, tree, *rests, is_leaf=pred, **opts)


def hop_up_to(case: Case, tree, pred, opts) -> None:
    Chaos.current, saved = None, Chaos.current
    ok, spec = case.call("structure", oxtree.tree_structure, tree, pred, **opts)
    Chaos.current = saved
    if ok:
        case.call("hostile flatten_up_to", spec.flatten_up_to, tree)
        ok, other = case.call("structure2", oxtree.tree_structure, tree, None, **opts)
        if ok:
            case.call("hostile eq", lambda: spec == other)
            case.call("hostile prefix", lambda: spec.is_prefix(other))


def hop_paths(case: Case, tree, pred, opts) -> None:
    case.call("hostile paths", oxtree.tree_flatten_with_path, tree, pred, **opts)
    case.call("hostile accessors", oxtree.tree_accessors, tree, pred, **opts)


def hop_jax(case: Case, tree, pred, opts) -> None:
    ok, out = case.call("hostile jax flatten", oxtu.tree_flatten, tree, pred)
    if ok:
        case.call("hostile jax unflatten", oxtu.tree_unflatten, out[1], out[0])
    case.call("hostile jax paths", oxtu.tree_flatten_with_path, tree, pred)


def hop_graph(case: Case, tree, pred, opts) -> None:
    ok, out = case.call(
        "hostile graph_flatten", oxtree.graph_flatten, tree, tree, is_leaf=pred, **opts
    )
    if ok:
        leaves, gd = out
        case.call("hostile graph_unflatten", oxtree.graph_unflatten, gd, _poking_leaves(leaves))
        case.call("hostile graphdef repr", repr, gd)


def hop_ops(case: Case, tree, pred, opts) -> None:
    rng = case.rng
    calm = Chaos.current
    Chaos.current = None
    ok, spec = case.call("structure", oxtree.tree_structure, tree, **opts)
    ok2, accessors = case.call("accessors", oxtree.tree_accessors, tree, **opts)
    Chaos.current = calm
    if not (ok and ok2):
        return
    name, fn = rng.choice(
        [
            (
                "tree_transpose",
                lambda: oxtree.tree_transpose(oxtree.tree_structure([0, 0]), spec, [tree, tree]),
            ),
            ("tree_broadcast_prefix", lambda: oxtree.tree_broadcast_prefix(tree, tree, **opts)),
            ("prefix_errors", lambda: oxtree.prefix_errors(tree, tree, **opts)),
            ("tree_set", lambda: oxtree.tree_set(tree, rng.choice(accessors or [()]), 5, **opts)),
            (
                "tree_replace_nones",
                lambda: oxtree.tree_replace_nones(0, tree, namespace=opts["namespace"]),
            ),
            (
                "tree_partition",
                lambda: oxtree.tree_partition(lambda x: rng.random() < 0.5, tree, **opts),
            ),
            ("tree_flatten_one_level", lambda: oxtree.tree_flatten_one_level(tree, **opts)),
            ("graph_to_dict", lambda: oxtree.graph_to_dict(tree, **opts)),
        ]
    )
    case.call(f"hostile {name}", fn)


HOSTILE_OPS = [hop_flatten, hop_flatten, hop_map, hop_up_to, hop_paths, hop_jax, hop_graph, hop_ops]


# --------------------------------------------------------------------------------------------------
# Treedefs from mutated pickles, pickle states and JSON documents.


class RebuildFailed(Exception):
    """Carries an exception raised inside oxtree's rebuild function out of pickle.loads."""

    def __init__(self, original: BaseException) -> None:
        super().__init__(repr(original))
        self.original = original


def _guard(fn: Callable[..., Any]) -> Callable[..., Any]:
    def guarded(*args: Any) -> Any:
        try:
            return fn(*args)
        except BaseException as exc:
            raise RebuildFailed(exc) from None

    return guarded


SAFE_GLOBALS: dict[tuple[str, str], Any] = {
    ("oxtree._core", "_rebuild_treespec"): _guard(oxtree._core._rebuild_treespec),
    ("oxtree._core", "_rebuild_graphdef"): _guard(oxtree._core._rebuild_graphdef),
    **{
        ("collections", n): getattr(__import__("collections"), n)
        for n in ("OrderedDict", "defaultdict", "deque")
    },
    **{
        (m, n): __builtins__[n] if isinstance(__builtins__, dict) else getattr(__builtins__, n)
        for m in ("builtins", "__builtin__")
        for n in ("frozenset", "list", "int", "tuple", "dict", "float", "complex")
    },
    ("_codecs", "encode"): __import__("_codecs").encode,
    ("time", "struct_time"): STRUCTSEQS[0],
    ("os", "terminal_size"): STRUCTSEQS[1],
    **{
        ("nodes", n): getattr(__import__("nodes"), n)
        for n in ("Point", "Triple", "EmptyNamedTuple", "make_default", "Key", "Leaf")
    },
    **{("fuzz_nodes", n): getattr(__import__("fuzz_nodes"), n) for n in ("Box", "Bag", "DC", "St")},
}


class SafeUnpickler(pickle.Unpickler):
    """Resolves only the globals a treedef pickle needs (mutated bytes run no other code)."""

    def find_class(self, module: str, name: str) -> Any:
        try:
            return SAFE_GLOBALS[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"global {module}.{name} is not allowed") from None


# Mutated bytes can still BUILD (setattr) on an allowed class or function, e.g. replace
# St's slot descriptor or Point.__new__: the attributes of each are put back after every load,
# so one case cannot change what later cases run.
_MUTABLE_GLOBALS = [
    obj
    for obj in SAFE_GLOBALS.values()
    if getattr(obj, "__module__", None) in ("nodes", "fuzz_nodes")
]
_SNAPSHOTS = [(obj, dict(vars(obj))) for obj in _MUTABLE_GLOBALS]


_FUNCTION_SLOTS = ("__defaults__", "__kwdefaults__", "__code__", "__name__", "__qualname__")
_FUNCTION_SNAPSHOTS = [
    (obj, {k: getattr(obj, k) for k in _FUNCTION_SLOTS})
    for obj in _MUTABLE_GLOBALS
    if inspect.isfunction(obj)
]


def restore_globals() -> None:
    for obj, fields in _FUNCTION_SNAPSHOTS:
        for key, value in fields.items():
            if getattr(obj, key) is not value:
                setattr(obj, key, value)
    for obj, saved in _SNAPSHOTS:
        current = vars(obj)
        if current.keys() == saved.keys() and all(current[k] is v for k, v in saved.items()):
            continue
        for key in [k for k in current if k not in saved]:
            delattr(obj, key)
        for key, value in saved.items():
            if current.get(key, _MISSING) is not value:
                setattr(obj, key, value)


_MISSING = object()


def safe_to_load(data: bytes) -> bool:
    """Rejects streams that would make the unpickler allocate huge memos."""
    try:
        for opcode, arg, _ in pickletools.genops(data):
            memo = opcode.name in ("PUT", "BINPUT", "LONG_BINPUT", "GET", "BINGET", "LONG_BINGET")
            if memo and (not isinstance(arg, int) or arg > 100_000):
                return False
    except Exception:
        return False
    return True


def random_spec(case: Case) -> tuple[Any, Any]:
    gen = Gen(case.rng, hostile=False)
    tree = gen.tree(case.rng.choice([2, 3, 4]))
    none_is_leaf = case.rng.random() < 0.3
    namespace = NAMESPACE if case.rng.random() < 0.6 else ""
    return tree, oxtree.tree_structure(tree, none_is_leaf=none_is_leaf, namespace=namespace)


def exercise(case: Case, spec: Any, what: str) -> None:
    """Everything a loaded treedef must survive; a valid one must also round-trip."""
    for op, fn in (
        ("repr", repr),
        ("hash", hash),
        ("eq", lambda s: s == s),
        ("len", len),
        ("children", lambda s: [repr(c) for c in s.children()]),
        ("paths", lambda s: s.paths()),
        ("accessors", lambda s: s.accessors()),
        ("pickle", lambda s: pickle.loads(pickle.dumps(s))),
        ("to_json", oxtree.treespec_to_json),
        ("compose", lambda s: s.compose(oxtree.tree_structure((0, 0)))),
        ("is_prefix", lambda s: s.is_prefix(s)),
        ("one_level", lambda s: s.one_level()),
    ):
        case.call(f"{what} {op}", fn, spec)
    ok, n = case.call(f"{what} num_leaves", lambda: spec.num_leaves)
    if not ok:
        return
    leaves = [Leaf(str(i)) for i in range(n)]
    ok, tree = case.call(f"{what} unflatten", spec.unflatten, leaves)
    if not ok:
        return
    if has_custom(spec):
        return  # a custom node's aux data is opaque: a corrupted one cannot be told apart
    ok, again = case.call(
        f"{what} re-flatten",
        oxtree.tree_flatten,
        tree,
        none_is_leaf=spec.none_is_leaf,
        namespace=spec.namespace,
    )
    if not ok:
        case.record("incoherent", f"{what} re-flatten", f"{spec!r:.200}: {again!r:.200}")
        return
    if leaves_diff(again[0], leaves) is not None or again[1].num_nodes != spec.num_nodes:
        case.record(
            "incoherent", f"{what} round trip", f"{spec!r:.200} rebuilt as {again[1]!r:.200}"
        )
    ok, up_to = case.call(f"{what} flatten_up_to", spec.flatten_up_to, tree)
    if not ok or leaves_diff(up_to, leaves) is not None:
        case.record("incoherent", f"{what} flatten_up_to", f"{spec!r:.200}: {up_to!r:.200}")


def has_custom(spec: Any) -> bool:
    """Whether a treedef has a custom (registered) node, read from its pickle state."""
    try:
        return any(node[0] == 0 for node in spec.__reduce__()[1][0][3])
    except Exception:
        return True


def mutate_bytes(rng: random.Random, data: bytes) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.choice([1, 1, 2, 3])):
        if not buf:
            break
        at = rng.randrange(len(buf))
        op = rng.randrange(7)
        if op == 0:
            buf[at] ^= 1 << rng.randrange(8)
        elif op == 1:
            buf[at] = rng.randrange(256)
        elif op == 2:
            del buf[at : at + rng.randrange(1, 4)]
        elif op == 3:
            buf[at:at] = buf[at : at + rng.randrange(1, 8)]
        elif op == 4:
            buf[at:at] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 4)))
        elif op == 5:
            del buf[at:]
        else:  # a small integer operand changed
            buf[at] = rng.choice([0, 1, 2, 5, 9, 0x7F, 0x80, 0xFF])
    return bytes(buf)


def check_pickle(case: Case) -> None:
    rng = case.rng
    if rng.random() < 0.25:
        roots = random_graph(Gen(rng, hostile=False))
        obj = oxtree.graph_flatten(*roots)[1]
    else:
        obj = random_spec(case)[1]
    data = mutate_bytes(rng, pickle.dumps(obj, rng.choice([2, 3, 4, 5])))
    if not safe_to_load(data):
        return
    case.calls += 1
    try:
        loaded = SafeUnpickler(io.BytesIO(data)).load()
    except RebuildFailed as exc:
        restore_globals()
        inner = exc.original
        if not isinstance(inner, ALLOWED):
            case.record(
                "bad-exception", "rebuild from mutated pickle", f"{type(inner).__name__}: {inner}"
            )
        return
    except Exception:
        restore_globals()
        return  # the unpickler's own complaint about the bytes
    restore_globals()
    if isinstance(loaded, oxtree.PyTreeSpec):
        exercise(case, loaded, "mutated pickle")
    elif isinstance(loaded, oxtree.GraphDef):
        exercise_graphdef(case, loaded, "mutated pickle")


STATE_VALUES: list[Any] = [
    None,
    0,
    1,
    -1,
    2,
    3,
    11,
    255,
    2**31,
    2**63,
    -(2**63),
    10**40,
    "",
    "fuzz",
    "optree",
    "jax",
    "hostile",
    (),
    (0,),
    (1, 0),
    ("a", "a"),
    (NAN,),
    [],
    {},
    True,
    Point,
    Triple,
    Box,
    DC,
    St(1),
    list,
    object(),
    Key(1),
    Leaf("state"),
    MutBox([]),
]


def mutate_state(rng: random.Random, state: Any, depth: int = 0) -> Any:
    """A copy of a nested tuple with one element replaced, dropped, duplicated or swapped."""
    if type(state) is not tuple or (depth > 0 and rng.random() < 0.25) or not state:
        if type(state) is tuple and state and rng.random() < 0.5:
            return state[::-1]
        if type(state) is int and rng.random() < 0.5:
            return state + rng.choice([-1, 1, 2])
        return rng.choice(STATE_VALUES)
    i = rng.randrange(len(state))
    roll = rng.random()
    if roll < 0.08:
        return state[:i] + state[i + 1 :]
    if roll < 0.14:
        return (*state[:i], state[i], *state[i:])
    if roll < 0.2 and len(state) > 1:
        j = rng.randrange(len(state))
        items = list(state)
        items[i], items[j] = items[j], items[i]
        return tuple(items)
    return (*state[:i], mutate_state(rng, state[i], depth + 1), *state[i + 1 :])


def check_state(case: Case) -> None:
    rng = case.rng
    graph = rng.random() < 0.2
    if graph:
        roots = random_graph(Gen(rng, hostile=False))
        rebuild, args = oxtree.graph_flatten(*roots)[1].__reduce__()[:2]
    else:
        rebuild, args = random_spec(case)[1].__reduce__()[:2]
    for _ in range(rng.choice([1, 1, 2, 3])):
        args = mutate_state(rng, args)
    if type(args) is not tuple:
        args = (args,)
    ok, loaded = case.call("rebuild from mutated state", rebuild, *args)
    if ok:
        if graph:
            exercise_graphdef(case, loaded, "mutated state")
        else:
            exercise(case, loaded, "mutated state")


TYPE_NAMES = [
    # Names a hostile document might use: loading must neither import nor call them.
    "os:abort",
    "os:_exit",
    "os:getpid",
    "builtins:exit",
    "builtins:breakpoint",
    "this:s",
    "antigravity:geohash",
    "faulthandler:_sigsegv",
    "ctypes:string_at",
    "fuzz_nodes:poke",
    "nodes:Point",
    "nodes:Triple",
    "nodes:EmptyNamedTuple",
    "nodes:make_default",
    "nodes:Key",
    "nodes:NoSuchThing",
    "nodes:Point.x",
    "nodes:Point._make",
    "collections:OrderedDict",
    "collections:deque",
    "builtins:int",
    "builtins:list",
    "builtins:print",
    "builtins:len",
    "time:struct_time",
    "os:terminal_size",
    "os:stat_result",
    "no_such_module_xyz:X",
    "a:b:c",
    ":",
    "",
]
JSON_VALUES: list[Any] = [
    None,
    0,
    1,
    -1,
    2,
    7,
    2**31,
    2**64,
    -(2**64),
    1.5,
    1e308,
    True,
    False,
    "leaf",
    "none",
    "tuple",
    "list",
    "dict",
    "ordereddict",
    "defaultdict",
    "deque",
    "namedtuple",
    "structsequence",
    "custom",
    "bogus",
    [],
    [0],
    [1, 0],
    ["a", "a"],
    {},
    {"int": 1},
    {"float": 1},
    {"bool": 1},
    {"none": None},
    {"str": "x"},
    {"int": 1, "x": 2},
]


def mutate_json(rng: random.Random, doc: Any, depth: int = 0) -> Any:
    """A copy of a JSON value with one random change somewhere inside."""
    if isinstance(doc, list) and doc and (depth == 0 or rng.random() < 0.75):
        i = rng.randrange(len(doc))
        roll = rng.random()
        if roll < 0.1:
            return doc[:i] + doc[i + 1 :]
        if roll < 0.18:
            return [*doc[:i], doc[i], *doc[i:]]
        return [*doc[:i], mutate_json(rng, doc[i], depth + 1), *doc[i + 1 :]]
    if isinstance(doc, dict) and doc and (depth == 0 or rng.random() < 0.75):
        key = rng.choice(list(doc))
        out = dict(doc)
        if rng.random() < 0.1:
            del out[key]
        else:
            out[key] = mutate_json(rng, doc[key], depth + 1)
        return out
    if isinstance(doc, str) and ":" in doc and rng.random() < 0.7:
        return rng.choice(TYPE_NAMES)
    return rng.choice([*JSON_VALUES, rng.choice(TYPE_NAMES)])


def check_json(case: Case) -> None:
    rng = case.rng
    _tree, spec = random_spec(case)
    try:
        doc = oxtree.treespec_to_json(spec)
    except ValueError:
        return
    roll = rng.random()
    arg: Any
    if roll < 0.6:
        for _ in range(rng.choice([1, 1, 2, 3])):
            doc = mutate_json(rng, doc)
        arg = doc if rng.random() < 0.5 else json.dumps(doc)
    else:
        text = mutate_bytes(rng, json.dumps(doc).encode())
        arg = text if rng.random() < 0.5 else text.decode("utf-8", "replace")
    allow = JSON_ALLOW if rng.random() < 0.8 else {}
    modules = len(sys.modules)
    ok, loaded = case.call("treespec_from_json(mutated)", oxtree.treespec_from_json, arg, **allow)
    if len(sys.modules) != modules:
        case.record("ran-code", "treespec_from_json(mutated)", f"imported a module: {arg!r:.300}")
    if ok:
        exercise(case, loaded, "mutated json")
    elif not isinstance(loaded, ValueError):
        # The documented contract: "Anything malformed raises ValueError".
        case.record("contract", "treespec_from_json(mutated)", f"{type(loaded).__name__}: {loaded}")


# --------------------------------------------------------------------------------------------------
# Graphs.


def random_graph(gen: Gen) -> list[Any]:
    """1-3 roots over a random graph of containers with sharing and cycles."""
    rng = gen.rng
    containers: list[Any] = []
    mutable: list[Any] = []
    for _ in range(rng.randrange(1, 9)):
        kind = rng.choice(
            ["list", "list", "dict", "ordereddict", "deque", "tuple", "pt", "box", "leafy"]
        )
        pick = [*containers, *[gen.leaf() for _ in range(2)], None]
        if kind == "list":
            node: Any = []
            mutable.append(node)
        elif kind == "dict":
            node = {}
            mutable.append(node)
        elif kind == "ordereddict":
            node = OrderedDict()
            mutable.append(node)
        elif kind == "deque":
            node = deque()
            mutable.append(node)
        elif kind == "tuple":
            node = tuple(rng.choice(pick) for _ in range(rng.randrange(4)))
        elif kind == "pt":
            node = Point(rng.choice(pick), rng.choice(pick))
        elif kind == "box":
            node = Box(rng.choice(pick), rng.choice(pick))
        else:
            node = gen.tree(2)
        containers.append(node)
    for node in mutable:  # filled last: any container, earlier or later, even itself
        for _ in range(rng.randrange(5)):
            value = rng.choice([*containers, gen.leaf(), None])
            if type(node) in (list, deque):
                node.append(value)
            else:
                node[gen.key()] = value
    gen.containers.extend(mutable)
    return [rng.choice([*containers, gen.leaf()]) for _ in range(rng.randrange(1, 4))]


def exercise_graphdef(case: Case, gd: Any, what: str) -> None:
    for op, fn in (
        ("repr", repr),
        ("hash", hash),
        ("eq", lambda g: g == g),
        ("treespec", lambda g: repr(g.treespec)),
        ("references", lambda g: g.references()),
        ("paths", lambda g: g.paths()),
        ("pickle", lambda g: pickle.loads(pickle.dumps(g))),
    ):
        case.call(f"{what} graphdef {op}", fn, gd)
    ok, n = case.call(f"{what} graphdef num_leaves", lambda: gd.num_leaves)
    if ok:
        leaves = [Leaf(str(i)) for i in range(n)]
        ok, obj = case.call(f"{what} graph_unflatten", oxtree.graph_unflatten, gd, leaves)
        if ok:
            roots = obj if gd.num_roots != 1 else (obj,)
            ok, again = case.call(f"{what} graph re-flatten", oxtree.graph_flatten, *roots)
            if ok and leaves_diff(again[0], leaves) is not None:
                case.record(
                    "incoherent", f"{what} graph round trip", f"{gd!r:.200} -> {again[1]!r:.200}"
                )


def check_graph(case: Case) -> None:
    rng = case.rng
    hostile = rng.random() < 0.3
    gen = Gen(rng, hostile=hostile)
    roots = random_graph(gen)
    namespace = NAMESPACE if not hostile else HOSTILE
    none_is_leaf = rng.random() < 0.2
    if hostile:
        Chaos.current = Chaos(rng, gen.containers, rng.choice([2, 10, 40]))

        def pred(x: Any) -> bool:
            poke()
            return rng.random() < 0.1

        ok, out = case.call(
            "hostile graph_flatten",
            oxtree.graph_flatten,
            *roots,
            is_leaf=pred,
            namespace=namespace,
            none_is_leaf=none_is_leaf,
        )
        if ok:
            case.call(
                "hostile graph_unflatten", oxtree.graph_unflatten, out[1], _poking_leaves(out[0])
            )
            case.call("hostile graph_to_dict", oxtree.graph_to_dict, roots[0], namespace=namespace)
        Chaos.current = None
        return
    ok, out = case.call(
        "graph_flatten",
        oxtree.graph_flatten,
        *roots,
        namespace=namespace,
        none_is_leaf=none_is_leaf,
    )
    if not ok:
        case.record("wrong-result", "graph_flatten", f"refused a graph: {out!r:.300}")
        return
    leaves, gd = out
    case.check(
        "graph counts",
        None if len(leaves) == gd.num_leaves and gd.num_roots == len(roots) else "counts",
    )
    ok, rebuilt = case.call("graph_unflatten", oxtree.graph_unflatten, gd, leaves)
    if not ok:
        case.record("wrong-result", "graph_unflatten", f"{gd!r:.200}: {rebuilt!r:.200}")
        return
    rebuilt_roots = list(rebuilt) if len(roots) != 1 else [rebuilt]
    case.check(
        "graph isomorphism",
        graph_diff(tuple(roots), tuple(rebuilt_roots)) if not none_is_leaf else None,
    )
    ok, again = case.call(
        "graph re-flatten",
        oxtree.graph_flatten,
        *rebuilt_roots,
        namespace=namespace,
        none_is_leaf=none_is_leaf,
    )
    case.check(
        "graph re-flatten",
        None
        if ok and again[1] == gd and hash(again[1]) == hash(gd)
        else f"{again!r:.300} vs {gd!r:.300}",
    )
    case.check("graph re-flatten leaves", leaves_diff(again[0], leaves))
    ok, loaded = case.call("graphdef pickle", lambda: pickle.loads(pickle.dumps(gd)))
    if ok and value_keys_only(rebuilt_roots):
        case.check("graphdef pickle", None if loaded == gd else f"{loaded!r:.200} != {gd!r:.200}")
    if len(roots) == 1 and not none_is_leaf:
        ok, view = case.call("graph_to_dict", oxtree.graph_to_dict, roots[0], namespace=namespace)
        if ok:
            ok, back = case.call(
                "graph_from_dict", oxtree.graph_from_dict, view, namespace=namespace
            )
            case.check("graph_from_dict", graph_diff(roots[0], back) if ok else repr(back))


# --------------------------------------------------------------------------------------------------
# Very wide and very deep trees.


def check_big(case: Case) -> None:
    rng = case.rng
    shape = rng.choice(
        ["wide_list", "wide_dict", "wide_mixed_keys", "deep", "deep_custom", "deep_graph"]
    )
    leaf = Leaf("big")
    if shape == "wide_list":
        tree: Any = [leaf] * rng.choice([10**5, 10**6])
    elif shape == "wide_dict":
        tree = {f"k{i}": leaf for i in range(10**5)}
    elif shape == "wide_mixed_keys":
        tree = {(i if i % 3 else str(i)) if i % 7 else Key(i): leaf for i in range(30_000)}
    else:
        wrappers: list[Callable[[Any], Any]] = [
            lambda x: [x],
            lambda x: (x, None),
            lambda x: {"k": x},
            lambda x: Point(x, 1),
            lambda x: OrderedDict(a=x),
            lambda x: deque([x]),
        ]
        if shape == "deep_custom":
            wrappers += [lambda x: Box(x, None), lambda x: DC(x, 0)]
        tree = leaf
        for level in range(rng.choice([10**4, 10**5])):
            tree = wrappers[level % len(wrappers)](tree)
    namespace = NAMESPACE
    ok, out = case.call(f"{shape} flatten", oxtree.tree_flatten, tree, namespace=namespace)
    if not ok:
        case.check(f"{shape} flatten", None if isinstance(out, RecursionError) else repr(out))
        return
    leaves, spec = out
    ok, rebuilt = case.call(f"{shape} unflatten", spec.unflatten, leaves)
    case.check(f"{shape} unflatten", None if ok else repr(rebuilt))
    ok, mapped = case.call(f"{shape} map", oxtree.tree_map, lambda x: x, tree, namespace=namespace)
    case.check(f"{shape} map", None if ok else repr(mapped))
    ok, up_to = case.call(f"{shape} flatten_up_to", spec.flatten_up_to, rebuilt)
    case.check(
        f"{shape} flatten_up_to", None if ok and len(up_to) == len(leaves) else repr(up_to)[:200]
    )
    ok, loaded = case.call(f"{shape} pickle", lambda: pickle.loads(pickle.dumps(spec)))
    case.check(f"{shape} pickle", None if not ok or loaded.num_nodes == spec.num_nodes else "nodes")
    if shape == "deep_graph":
        ok, out = case.call(f"{shape} graph", oxtree.graph_flatten, tree, namespace=namespace)
        if ok:
            case.call(f"{shape} graph_unflatten", oxtree.graph_unflatten, out[1], out[0])
    del tree, rebuilt, mapped
    gc.collect()


# --------------------------------------------------------------------------------------------------
# Attacks: hostile JSON documents, pickles of re-registered types, compositions too large to
# allocate, impossible constructor arguments.

HOSTILE_NAMES = ["os:abort", "os:_exit", "os:getpid", "builtins:exit", "this:s", "fuzz_nodes:poke"]
_ATTACK_NS = "fuzz-attack"


def attack_json(case: Case) -> None:
    """Every name in a document replaced by a hostile one: ValueError, nothing imported."""
    _tree, spec = random_spec(case)
    try:
        doc = oxtree.treespec_to_json(spec)
    except ValueError:
        return
    name = case.rng.choice(HOSTILE_NAMES)
    extra = case.rng.choice(
        [
            ["defaultdict", 0, [], None, name],
            ["namedtuple", 0, name],
            ["structsequence", 0, name],
        ]
    )
    nodes = [
        [*n[:-1], name] if n[0] in ("defaultdict", "namedtuple", "structsequence") else n
        for n in doc["nodes"]
    ]
    doc = {**doc, "nodes": [extra, *nodes[:-1], [*nodes[-1][:1], nodes[-1][1] + 1, *nodes[-1][2:]]]}
    modules = len(sys.modules)
    ok, out = case.call("treespec_from_json(hostile)", oxtree.treespec_from_json, doc, **JSON_ALLOW)
    if len(sys.modules) != modules:
        case.record("ran-code", "treespec_from_json(hostile)", f"imported a module for {name}")
    if ok:
        case.record("wrong-result", "treespec_from_json(hostile)", f"{name} loaded: {out!r:.200}")


def _fresh_class(rng: random.Random) -> type:
    name = "FreshNode"  # one name, bound to the newest: the treedefs made from it pickle
    cls = type(name, (), {"__init__": _fresh_init, "__eq__": _fresh_eq, "__module__": __name__})
    cls.__hash__ = lambda self: hash(tuple(vars(self).items()))  # type: ignore[method-assign]
    globals()[name] = cls
    return cls


def _fresh_init(self: Any, **fields: Any) -> None:
    vars(self).update(fields)


def _fresh_eq(self: Any, other: Any) -> bool:
    return type(other) is type(self) and vars(other) == vars(self)


def _register(cls: type, rule: tuple[str, int, int], namespace: str) -> None:
    """Registers `cls` as a dataclass of `rule`'s data and meta field counts, or as static."""
    kind, data, meta = rule
    if kind == "static":
        oxtree.register_static(cls, namespace=namespace)
        return
    names = [f"f{i}" for i in range(data + meta)]
    oxtree.register_dataclass(
        cls,
        data_fields=names[:data],
        meta_fields=names[data:],
        init_on_unflatten=False,
        namespace=namespace,
    )


def attack_reregistered(case: Case) -> None:
    """A pickle made under one registration, loaded under another: ValueError, or a treedef
    that flattens back to itself."""
    rng = case.rng
    rules = [("static", 0, 0)] + [("dataclass", d, m) for d in range(3) for m in range(2)]
    first, second = rng.choice(rules), rng.choice(rules)
    cls = _fresh_class(rng)
    namespace = f"{_ATTACK_NS}-{case.index}"
    _register(cls, first, namespace)
    try:
        fields = {f"f{i}": Leaf(str(i)) for i in range(first[1] + first[2])}
        obj = cls(**fields)
        spec = oxtree.tree_structure([obj, 1], namespace=namespace)
        # The state a pickle holds (the class is not importable, so not the pickle itself).
        rebuild, args = spec.__reduce__()[:2]
        del spec
    finally:
        oxtree.unregister_pytree_node(cls, namespace=namespace)
    _register(cls, second, namespace)
    try:
        ok, loaded = case.call("pickle.loads(re-registered)", rebuild, *args)
        if ok:
            exercise(case, loaded, "re-registered pickle")
            leaves = [Leaf(str(i)) for i in range(loaded.num_leaves)]
            ok, tree = case.call("unflatten(re-registered)", loaded.unflatten, leaves)
            if ok:
                ok, again = case.call(
                    "re-flatten(re-registered)", oxtree.tree_structure, tree, namespace=namespace
                )
                if ok and again != loaded:
                    case.record(
                        "incoherent",
                        "pickle.loads(re-registered)",
                        f"{first} -> {second}: {loaded!r:.200} flattens back as {again!r:.200}",
                    )
        elif not isinstance(loaded, ValueError):
            case.record("contract", "pickle.loads(re-registered)", repr(loaded))
    finally:
        oxtree.unregister_pytree_node(cls, namespace=namespace)


def attack_compose(case: Case) -> None:
    """Compositions whose size overflows or cannot be allocated: MemoryError, no abort."""
    rng = case.rng
    if rng.random() < 0.5:
        spec = oxtree.tree_structure([0] * rng.choice([70_000, 200_000]))
        ok, out = case.call("compose(huge)", spec.compose, spec)
    else:
        spec = oxtree.tree_structure(rng.choice([[0, 0], (0, 0, 0), {"a": 0, "b": [0, 0]}]))
        ok, out = True, spec
        for _ in range(8):
            ok, out = case.call("compose(squared)", out.compose, out)
            if not ok:
                break
    if ok or not isinstance(out, MemoryError):
        case.record("contract", "compose(huge)", f"expected MemoryError, got {out!r:.200}")


def attack_constructor(case: Case) -> None:
    """JAX's constructor from random node data: ValueError, or a treedef that round-trips."""
    rng = case.rng
    leaf = oxtu.tree_structure(1)
    arity = rng.randrange(4)
    keys = [rng.choice(["a", "b", 1, True, 1.0]) for _ in range(rng.choice([arity, arity + 1]))]
    node_data = rng.choice(
        [
            (type(None), None),
            (tuple, None),
            (list, None),
            (dict, sorted(set(map(str, keys)))[:arity] if rng.random() < 0.5 else keys),
            (OrderedDict, keys),
            (defaultdict, (list, keys)),
            (Point, None),
            (DC, (0,)),
            (DC, (0, 1)),
            (St, St(1)),
            (St, 1),
        ]
    )
    ok, spec = case.call(
        "from_node_data_and_children",
        oxtu.PyTreeDef.from_node_data_and_children,
        None,
        node_data,
        [leaf] * arity,
    )
    if not ok:
        return
    leaves = [Leaf(str(i)) for i in range(spec.num_leaves)]
    ok, tree = case.call("unflatten(constructed)", spec.unflatten, leaves)
    if not ok:
        case.record("incoherent", "unflatten(constructed)", f"{node_data!r:.200}: {tree!r:.200}")
        return
    ok, again = case.call("re-flatten(constructed)", oxtu.tree_flatten, tree)
    if ok and (again[1] != spec or leaves_diff(again[0], leaves) is not None):
        case.record(
            "incoherent", "from_node_data_and_children", f"{node_data!r:.200}: {spec!r:.200}"
        )


def check_attack(case: Case) -> None:
    case.rng.choice([attack_json, attack_reregistered, attack_compose, attack_constructor])(case)


KINDS: dict[str, Callable[[Case], None]] = {
    "tree": check_tree,
    "hostile": check_hostile,
    "pickle": check_pickle,
    "state": check_state,
    "json": check_json,
    "graph": check_graph,
    "big": check_big,
    "attack": check_attack,
}
