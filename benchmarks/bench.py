"""Side-by-side pytree benchmark: oxtree vs optree vs jax.tree_util vs dm-tree.

All libraries are timed in one process on the same trees. For every (workload, op)
pair the libraries are interleaved repeat by repeat, so machine noise hits them all
alike. Each repeat runs enough inner loops to take about 30 ms (timeit-style, with
the garbage collector off); the reported number is the median per-call time over
the repeats. Before timing, every library's result is checked once against a
pure-Python reference; a failed check puts a "!" next to the time.

Usage (from the repository root)::

    .venv/bin/python benchmarks/bench.py                    # everything, 7 repeats
    .venv/bin/python benchmarks/bench.py --quick            # a short subset, 3 repeats
    .venv/bin/python benchmarks/bench.py --libs oxtree,jax --workloads mixed1k,gpt2
    .venv/bin/python benchmarks/bench.py --ops flatten,map2 --repeats 11 --json out.json
    .venv/bin/python benchmarks/bench.py --face jax         # oxtree through oxtree.tree_util
    .venv/bin/python benchmarks/bench.py --stat best --repeats 21 --target-ms 3  # busy machine
    .venv/bin/python benchmarks/bench.py --list             # names of workloads and ops
    .venv/bin/python benchmarks/bench.py --workloads jax-registered  # only the group below

Libraries: ``oxtree``, ``optree``, ``jax`` (``jax.tree_util``), ``dmtree`` (``import tree``).
A library that cannot be imported is skipped with a note.

Faces: by default (``--face optree``) the oxtree column calls the optree-compatible functions
of the main package (``oxtree.tree_flatten`` ...). With ``--face jax`` it calls
``oxtree.tree_util`` for every op instead, so the comparison with ``jax.tree_util`` is like for
like (JAX's treedefs, dicts rebuilt in sorted key order). The path ops always use oxtree's
JAX-style ``oxtree.tree_util`` functions, in both faces.

Workloads:

* ``tuple3``    a 3-leaf tuple
* ``dict10``    a dict of 10 str keys -> ints
* ``mixed1k``   ~1,000 leaves nested ~6 deep in lists, tuples, dicts, namedtuples and
  None (seeded, so the same tree every run)
* ``list100k``  a list of 100,000 ints
* ``dict10k``   a dict of 10,000 str keys
* ``chain500``  ``[[[...[0]...]]]``, 500 nested one-element lists
* ``resnet50``  a ResNet-50 parameter dict: stem, 4 stages x (3, 4, 6, 3) bottleneck blocks,
  each conv with its batchnorm (scale, bias, mean, var), and the classifier head;
  267 float32 arrays with the real shapes (~100 MB)
* ``gpt2``      a GPT-2 parameter dict: wte, wpe, h.0..h.23 (ln_1, attn.c_attn, attn.c_proj,
  ln_2, mlp.c_fc, mlp.c_proj, each with weight and bias), ln_f; 292 float32 arrays.
  24 blocks (the GPT-2 medium layout) give the ~290 arrays of a real checkpoint; the
  widths are divided by 4 to keep memory low (the arrays' contents never matter here).
* ``custom1k``  a list of 1,000 instances of a registered custom class with 2 children (an int
  and a float) each. Every library gets its own identical class, registered with
  ``oxtree.register_pytree_node``, ``jax.tree_util.register_pytree_node`` and
  ``optree.register_pytree_node(..., namespace="oxtree-bench")`` (optree is then called with
  ``namespace=``). n/a for dm-tree, which has no custom nodes.
* ``dataclass1k`` a list of 1,000 dataclass instances with 2 data fields each, registered with
  ``oxtree.register_dataclass``, ``jax.tree_util.register_dataclass`` and
  ``optree.dataclasses.dataclass(namespace="oxtree-bench")``. n/a for dm-tree.

The "jax-registered" group (``jax_registered.py``): trees of types registered with JAX itself,
``eqx_mlp``, ``eqx_stack100`` (equinox), ``flax_struct1k`` and ``nnx_state`` (flax). Only
``oxtree.tree_util`` (whatever ``--face`` says) and ``jax.tree_util`` are timed, on flatten,
unflatten and map1, and ``jax.tree_util``'s answers are the reference. The group is printed
in a section of its own after the targets, with its own geometric means: it never enters the
table, the geometric means or the targets above it, nor the JSON's ``rows`` (it is under
``jax_registered``). A full run includes it; ``--quick`` does not, unless ``--workloads``
names it (``jax-registered`` names all four). A workload whose library is not installed is
skipped with a line saying so.

The "select" group (``select_group.py``): selecting leaves by key-path pattern (``tree_mask``
with a glob or a regex, ``tree_labels``, ``tree_set_matching``) on ``module300``, a
Module-like nested dict of 293 arrays, against the same written by hand with
``jax.tree_util.tree_map_with_path`` and ``fnmatch`` (or the regex's ``fullmatch``) on
``keystr`` of each path, which is also the reference. Only oxtree (``oxtree.tree_util``, or the
main package with ``--face optree``) and jax are timed, on the group's own ops (``--ops`` does
not filter them). Like the jax-registered group it has its own section and geometric mean,
outside the table, its geomeans and targets, and the JSON's ``rows`` (it is under
``select``); a full run includes it, ``--quick`` only when ``--workloads`` names it
(``select`` or ``module300``).

The "object" group, workload ``object1k``: a list of 1,000 instances of ``Node2``'s shape (a
slotted class with attributes ``a`` and ``b``) registered with ``oxtree.register_object``, which
oxtree walks and rebuilds with no Python call per node. It is timed on flatten, unflatten and
map1 against the same number of objects registered other ways, each with its own class:
oxtree's ``dataclass1k`` workload (``dataclass``), ``custom1k`` with jax's
``register_pytree_node`` and Python functions (``jax``) and with optree's
``register_pytree_node`` (``optree``), and, for JAX's side of the registration,
``jax.tree_util`` on a class registered with ``oxtree.tree_util.register_object`` (``jax
mirror``: JAX calls the functions oxtree compiled for the attributes). The oxtree column calls
the face ``--face`` names. Its targets: oxtree no slower than ``dataclass`` and at most half
of ``jax``. Like the jax-registered group it has a section of its own and never enters the
main table, its geometric means or the JSON's ``rows`` (it is under ``object_registered``); a
full run includes it, ``--quick`` only when ``--workloads`` names ``object1k``.

Ops:

* ``flatten``    ``tree_flatten(tree)``; dm-tree: ``tree.flatten(tree)`` (it returns only leaves)
* ``unflatten``  ``tree_unflatten(spec, leaves)``; dm-tree: ``tree.unflatten_as(tree, leaves)``
* ``leaves``     ``tree_leaves(tree)``; dm-tree: ``tree.flatten(tree)``
* ``structure``  ``tree_structure(tree)``; n/a for dm-tree (it has no treedef)
* ``map1``       ``tree_map(lambda x: x, tree)``; dm-tree: ``tree.map_structure``
* ``map2``       ``tree_map(lambda x, y: x, tree, other)`` with ``other`` a separately built
  copy of ``tree``
* ``eq``         ``spec == other_spec`` for two equal treedefs of distinct trees; n/a for dm-tree
* ``hash``       ``hash(spec)``; n/a for dm-tree
* ``flatten_with_path``  oxtree and jax: ``tree_util.tree_flatten_with_path(tree)`` (key paths
  of ``DictKey``/``SequenceKey``/... objects); optree: ``optree.tree_flatten_with_path(tree)``
  (raw paths such as ``('a', 0)``: different but comparable work); dm-tree:
  ``tree.flatten_with_path(tree)``
* ``map_with_path``  ``tree_map_with_path(lambda path, x: x, tree)`` from the same modules;
  dm-tree: ``tree.map_structure_with_path``
* ``broadcast``  a prefix (the root's children replaced by 0, or 0 for a root that is no
  tuple, list or dict) broadcast over the tree: optree's ``tree_broadcast_prefix``, jax's
  ``tree_util.tree_broadcast``; n/a for dm-tree

Columns ``ox/jax`` and ``ox/optree`` are oxtree's time divided by the other's time, so a
value below 1.00 means oxtree is faster. The summary after the table is the geometric mean of
those ratios per op over the workloads shown; the "targets" section at the very end repeats
the ox/jax geometric mean per op and lists every workload where oxtree is slower than jax.

As a module::

    import bench
    results = bench.run(workloads=["mixed1k"], ops=["flatten"], quick=True)
    print(bench.format_table(results))
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import functools
import importlib
import importlib.metadata
import json
import math
import platform
import random
import statistics
import sys
import timeit
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import jax_registered
import numpy as np
import select_group

# --------------------------------------------------------------------------------------
# Workloads
# --------------------------------------------------------------------------------------

# Two namedtuple types used inside `mixed1k`. They live at module level so that every
# library sees a proper, importable class.
Pair = collections.namedtuple("Pair", ["first", "second"])
Triple = collections.namedtuple("Triple", ["x", "y", "z"])


def make_tuple3() -> Any:
    return (1, 2.0, "three")


def make_dict10() -> Any:
    return {f"key{i:02d}": i for i in range(10)}


def make_mixed1k(seed: int = 0, target_leaves: int = 1000, max_depth: int = 6) -> Any:
    """A deterministic heterogeneous tree of roughly `target_leaves` leaves."""
    rng = random.Random(seed)
    count = 0

    def leaf() -> Any:
        nonlocal count
        count += 1
        kind = rng.random()
        if kind < 0.6:
            return rng.randrange(1000)
        if kind < 0.9:
            return round(rng.random(), 3)
        return f"s{rng.randrange(100)}"

    def node(depth: int) -> Any:
        r = rng.random()
        if depth >= max_depth or r < 0.25:
            return leaf()
        if r < 0.30:
            return None
        width = rng.randint(2, 5)
        r = rng.random()
        if r < 0.30:
            return [node(depth + 1) for _ in range(width)]
        if r < 0.50:
            return tuple(node(depth + 1) for _ in range(width))
        if r < 0.80:
            keys = rng.sample(range(100), width)
            return {f"k{k}": node(depth + 1) for k in keys}
        if r < 0.90:
            return Pair(node(depth + 1), node(depth + 1))
        return Triple(node(depth + 1), node(depth + 1), node(depth + 1))

    top: list[Any] = []
    while count < target_leaves:
        top.append(node(1))
    return top


def make_list100k() -> Any:
    return list(range(100_000))


def make_dict10k() -> Any:
    return {f"key{i:05d}": i for i in range(10_000)}


def make_chain500(depth: int = 500) -> Any:
    tree: Any = 0
    for _ in range(depth):
        tree = [tree]
    return tree


def _zeros(*shape: int) -> np.ndarray:
    # np.zeros gets its memory from calloc, so large arrays cost address space but almost
    # no resident memory until written -- and no benchmarked op ever reads or writes them.
    return np.zeros(shape, dtype=np.float32)


def _batchnorm(channels: int) -> dict[str, np.ndarray]:
    return {
        "scale": _zeros(channels),
        "bias": _zeros(channels),
        "mean": _zeros(channels),
        "var": _zeros(channels),
    }


def make_resnet50() -> Any:
    """A ResNet-50 parameter dict, nested the way a Flax/Haiku-style checkpoint is."""
    params: dict[str, Any] = {
        "stem": {"conv": {"kernel": _zeros(7, 7, 3, 64)}, "bn": _batchnorm(64)},
    }
    in_ch = 64
    for stage, (blocks, width) in enumerate([(3, 64), (4, 128), (6, 256), (3, 512)], start=1):
        stage_params: dict[str, Any] = {}
        out_ch = width * 4
        for b in range(blocks):
            block: dict[str, Any] = {
                "conv1": {"kernel": _zeros(1, 1, in_ch, width)},
                "bn1": _batchnorm(width),
                "conv2": {"kernel": _zeros(3, 3, width, width)},
                "bn2": _batchnorm(width),
                "conv3": {"kernel": _zeros(1, 1, width, out_ch)},
                "bn3": _batchnorm(out_ch),
            }
            if b == 0:
                block["proj_conv"] = {"kernel": _zeros(1, 1, in_ch, out_ch)}
                block["proj_bn"] = _batchnorm(out_ch)
            stage_params[f"block{b}"] = block
            in_ch = out_ch
        params[f"stage{stage}"] = stage_params
    params["head"] = {"kernel": _zeros(in_ch, 1000), "bias": _zeros(1000)}
    return params


def make_gpt2(n_layer: int = 24, d_model: int = 1024 // 4, vocab: int = 50257 // 4) -> Any:
    """A GPT-2 parameter dict (GPT-2 medium layout, widths shrunk by `make_gpt2`'s defaults)."""

    def linear(d_in: int, d_out: int) -> dict[str, np.ndarray]:
        return {"weight": _zeros(d_in, d_out), "bias": _zeros(d_out)}

    def layernorm() -> dict[str, np.ndarray]:
        return {"weight": _zeros(d_model), "bias": _zeros(d_model)}

    blocks = {
        str(i): {
            "ln_1": layernorm(),
            "attn": {
                "c_attn": linear(d_model, 3 * d_model),
                "c_proj": linear(d_model, d_model),
            },
            "ln_2": layernorm(),
            "mlp": {
                "c_fc": linear(d_model, 4 * d_model),
                "c_proj": linear(4 * d_model, d_model),
            },
        }
        for i in range(n_layer)
    }
    return {
        "wte": _zeros(vocab, d_model),
        "wpe": _zeros(1024, d_model),
        "h": blocks,
        "ln_f": layernorm(),
    }


class Node2:
    """A plain class with two children, `a` and `b`. Unregistered, it is a leaf to every
    library; `custom1k` uses one identical subclass per library, registered there."""

    __slots__ = ("a", "b")

    def __init__(self, a: Any, b: Any) -> None:
        self.a = a
        self.b = b

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.a!r}, {self.b!r})"


@dataclasses.dataclass
class Data2:
    """A dataclass with two data fields. `dataclass1k` uses one identical dataclass per
    library, registered there (this unregistered one is a leaf to every library)."""

    x: Any
    y: Any


def make_custom1k(node_class: type = Node2, n: int = 1000) -> Any:
    return [node_class(i, i + 0.5) for i in range(n)]


def make_dataclass1k(data_class: type = Data2, n: int = 1000) -> Any:
    return [data_class(i, i + 0.5) for i in range(n)]


WORKLOADS: dict[str, Callable[..., Any]] = {
    "tuple3": make_tuple3,
    "dict10": make_dict10,
    "mixed1k": make_mixed1k,
    "list100k": make_list100k,
    "dict10k": make_dict10k,
    "chain500": make_chain500,
    "resnet50": make_resnet50,
    "gpt2": make_gpt2,
    "custom1k": make_custom1k,
    "dataclass1k": make_dataclass1k,
}

#: Workloads built from a per-library registered class: workload -> kind of class. Their
#: builders take that class as their only argument.
CUSTOM_WORKLOADS: dict[str, str] = {"custom1k": "node", "dataclass1k": "dataclass"}

#: The optree namespace the custom classes are registered in (optree has no global one).
BENCH_NAMESPACE = "oxtree-bench"

PATH_OPS: tuple[str, ...] = ("flatten_with_path", "map_with_path")

OPS: tuple[str, ...] = (
    "flatten",
    "unflatten",
    "leaves",
    "structure",
    "map1",
    "map2",
    "eq",
    "hash",
    "broadcast",
    *PATH_OPS,
)

LIBS: tuple[str, ...] = ("oxtree", "optree", "jax", "dmtree")

#: What the oxtree column calls: the optree-compatible main package, or oxtree.tree_util.
FACES: tuple[str, ...] = ("optree", "jax")

#: What each timing reports: the median repeat, or the best (fastest) one.
STATS: tuple[str, ...] = ("median", "best")

QUICK_WORKLOADS: tuple[str, ...] = (
    "tuple3",
    "mixed1k",
    "dict10k",
    "resnet50",
    "custom1k",
    "dataclass1k",
)
QUICK_OPS: tuple[str, ...] = ("flatten", "unflatten", "map1", "map2", "eq")

#: The name that stands for every workload of the "jax-registered" group in `--workloads`.
JAX_GROUP = "jax-registered"

#: The object group's one workload (see the module docstring), its ops and its columns:
#: (column, library, kind of registered class for `_custom_class`), the first one timed
#: through `--face`.
OBJECT_WORKLOAD = "object1k"
OBJECT_OPS: tuple[str, ...] = ("flatten", "unflatten", "map1")
OBJECT_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("oxtree", "oxtree", "object"),
    ("dataclass", "oxtree", "dataclass"),
    ("jax", "jax", "node"),
    ("optree", "optree", "node"),
    ("jax mirror", "jax", "object"),
)
#: The object group's targets: oxtree's time over each column's, at most this much.
OBJECT_TARGETS: dict[str, float] = {"dataclass": 1.0, "jax": 0.5}

# --------------------------------------------------------------------------------------
# Per-library custom classes (custom1k, dataclass1k)
# --------------------------------------------------------------------------------------

#: (library, kind) -> the class made and registered for that library.
_CUSTOM_CLASSES: dict[tuple[str, str], type] = {}

#: Registered class -> (its child attributes, whether key paths name them). The pure-Python
#: reference below treats these classes as nodes.
_REF_NODES: dict[type, tuple[tuple[str, ...], bool]] = {}


def _node_flatten(node: Any) -> tuple[tuple[Any, Any], None]:
    return (node.a, node.b), None


def _make_node_unflatten(cls: type) -> Callable[[Any, Any], Any]:
    def unflatten(aux: Any, children: Any) -> Any:
        return cls(*children)

    return unflatten


def _custom_class(lib: str, mod: Any, kind: str) -> type | None:
    """The class of `kind` ("node", "dataclass" or "object") registered for `lib`, made on
    first use; None for dm-tree, which cannot have custom nodes."""
    key = (lib, kind)
    if key in _CUSTOM_CLASSES:
        return _CUSTOM_CLASSES[key]
    if lib == "dmtree":
        return None
    name = f"{lib.capitalize()}{'Node2' if kind == 'node' else 'Data2'}"
    name = name.replace("Data2", "Object2") if kind == "object" else name
    attrs: dict[str, Any] = {"__module__": __name__, "__qualname__": name}
    if kind == "node":
        cls: type = type(name, (Node2,), {**attrs, "__slots__": ()})
        flatten, unflatten = _node_flatten, _make_node_unflatten(cls)
        if lib == "oxtree":
            mod.register_pytree_node(cls, flatten, unflatten)
        elif lib == "jax":
            mod.tree_util.register_pytree_node(cls, flatten, unflatten)
        elif lib == "optree":
            mod.register_pytree_node(cls, flatten, unflatten, namespace=BENCH_NAMESPACE)
        else:
            raise ValueError(lib)
        _REF_NODES[cls] = (("a", "b"), False)
    elif kind == "dataclass":
        cls = type(name, (), {**attrs, "__annotations__": {"x": "Any", "y": "Any"}})
        if lib == "oxtree":
            cls = mod.register_dataclass(dataclasses.dataclass(cls))
        elif lib == "jax":
            cls = mod.tree_util.register_dataclass(dataclasses.dataclass(cls))
        elif lib == "optree":
            cls = mod.dataclasses.dataclass(cls, namespace=BENCH_NAMESPACE)
        else:
            raise ValueError(lib)
        _REF_NODES[cls] = (("x", "y"), True)
    elif kind == "object":
        # Node2's attributes, declared by its __slots__, registered by name: with
        # oxtree.register_object for oxtree, and for jax through oxtree.tree_util's, which
        # registers the class with JAX too (the "jax mirror" column).
        cls = type(name, (Node2,), {**attrs, "__slots__": ()})
        if lib == "oxtree":
            mod.register_object(cls)
        elif lib == "jax":
            importlib.import_module("oxtree.tree_util").register_object(cls)
        else:
            raise ValueError(lib)
        _REF_NODES[cls] = (("a", "b"), True)
    else:
        raise ValueError(kind)
    _CUSTOM_CLASSES[key] = cls
    return cls


# --------------------------------------------------------------------------------------
# Pure-Python reference, used only to check each library's answers once
# --------------------------------------------------------------------------------------


def _is_namedtuple(node: Any) -> bool:
    return isinstance(node, tuple) and hasattr(type(node), "_fields")


def _children(node: Any) -> list[Any] | None:
    """Children in flattening order (dicts by sorted key), or None for a leaf."""
    custom = _REF_NODES.get(type(node))
    if custom is not None:
        return [getattr(node, name) for name in custom[0]]
    if isinstance(node, dict):
        return [node[k] for k in sorted(node)]
    if isinstance(node, list | tuple):
        return list(node)
    return None


def _entries(node: Any) -> list[tuple[tuple[Any, ...], Any]] | None:
    """Like `_children`, with each child's path entry: a tuple of the raw entries a library
    may use (a namedtuple field is its index to optree and its name to JAX and dm-tree)."""
    custom = _REF_NODES.get(type(node))
    if custom is not None:
        names, named = custom
        return [((n if named else i,), getattr(node, n)) for i, n in enumerate(names)]
    if isinstance(node, dict):
        return [((k,), node[k]) for k in sorted(node)]
    if _is_namedtuple(node):
        return [((i, f), c) for i, (f, c) in enumerate(zip(node._fields, node, strict=True))]
    if isinstance(node, list | tuple):
        return [((i,), c) for i, c in enumerate(node)]
    return None


def ref_leaves(tree: Any, none_is_leaf: bool = False) -> list[Any]:
    out: list[Any] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        if node is None and not none_is_leaf:
            continue
        kids = _children(node)
        if kids is None:
            out.append(node)
        else:
            stack.extend(reversed(kids))
    return out


def ref_paths(tree: Any, none_is_leaf: bool = False) -> list[tuple[tuple[Any, ...], ...]]:
    """Every leaf's path, as one tuple of acceptable raw entries per level (see `_entries`)."""
    out: list[tuple[tuple[Any, ...], ...]] = []
    stack: list[tuple[Any, tuple[tuple[Any, ...], ...]]] = [(tree, ())]
    while stack:
        node, path = stack.pop()
        if node is None and not none_is_leaf:
            continue
        entries = _entries(node)
        if entries is None:
            out.append(path)
        else:
            stack.extend((child, (*path, entry)) for entry, child in reversed(entries))
    return out


def _raw_key(entry: Any) -> Any:
    """The raw value inside one of JAX's key entries (DictKey, SequenceKey, GetAttrKey,
    FlattenedIndexKey -- jax's or oxtree's)."""
    for attr in ("key", "idx", "name"):
        if hasattr(entry, attr):
            return getattr(entry, attr)
    return entry


def _paths_match(
    paths: Sequence[Sequence[Any]],
    expected: Sequence[tuple[tuple[Any, ...], ...]],
    raw: Callable[[Any], Any] | None = None,
) -> bool:
    """Whether `paths` (a library's, entries turned raw by `raw`) are the reference paths."""
    if len(paths) != len(expected):
        return False
    for path, ref in zip(paths, expected, strict=True):
        if len(path) != len(ref):
            return False
        for entry, allowed in zip(path, ref, strict=True):
            if (raw(entry) if raw is not None else entry) not in allowed:
                return False
    return True


def ref_skeleton(tree: Any) -> Any:
    """A hashable description of the containers of `tree` (leaves become '*')."""
    if tree is None:
        return None
    if type(tree) in _REF_NODES:
        return (type(tree), tuple(ref_skeleton(c) for c in _children(tree) or ()))
    if isinstance(tree, dict):
        return (dict, tuple((k, ref_skeleton(tree[k])) for k in sorted(tree)))
    if isinstance(tree, list | tuple):
        kind = type(tree) if _is_namedtuple(tree) else (list if isinstance(tree, list) else tuple)
        return (kind, tuple(ref_skeleton(c) for c in tree))
    return "*"


def rebuild(tree: Any) -> Any:
    """A copy of `tree` with new containers but the very same leaf objects."""
    if type(tree) in _REF_NODES:
        return type(tree)(*(rebuild(c) for c in _children(tree) or ()))
    if isinstance(tree, dict):
        return {k: rebuild(v) for k, v in tree.items()}
    if _is_namedtuple(tree):
        return type(tree)(*(rebuild(c) for c in tree))
    if isinstance(tree, tuple):
        return tuple(rebuild(c) for c in tree)
    if isinstance(tree, list):
        return [rebuild(c) for c in tree]
    return tree


@contextlib.contextmanager
def _recursion_limit(limit: int) -> Iterator[None]:
    """The reference helpers recurse once per level; `chain500` needs more than 1,000 frames."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, limit))
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


def _rebuilt(result: Any, tree: Any) -> bool:
    """Whether no non-empty container of `tree` reappears, as the same object, at its place in
    `result` (which must have `tree`'s skeleton)."""
    stack = [(result, tree)]
    while stack:
        new, old = stack.pop()
        kids = _children(old)
        if not kids:
            continue
        if new is old:
            return False
        stack.extend(zip(_children(new) or (), kids, strict=True))
    return True


def _same_objects(a: Sequence[Any], b: Sequence[Any]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


# --------------------------------------------------------------------------------------
# Library adapters
# --------------------------------------------------------------------------------------


class Case:
    """Everything needed to time one (library, workload, op): a statement, its globals,
    and a predicate that accepts the statement's result when it is correct."""

    def __init__(self, stmt: str, namespace: dict[str, Any], check: Callable[[Any], bool]):
        self.stmt = stmt
        self.namespace = namespace
        self.check = check

    def call(self) -> Any:
        return eval(self.stmt, self.namespace)


class Workload:
    """One tree of a workload with its reference answers. `namespace` is the optree namespace
    to pass when calling optree on it ("" for none)."""

    def __init__(self, name: str, builder: Callable[[], Any], namespace: str = ""):
        self.name = name
        self.namespace = namespace
        self.tree = builder()
        self.other = rebuild(self.tree)
        self.skeleton = ref_skeleton(self.tree)
        self.leaves = ref_leaves(self.tree)
        self.leaves_none = ref_leaves(self.tree, none_is_leaf=True)

    @functools.cached_property
    def paths(self) -> list[tuple[tuple[Any, ...], ...]]:
        return ref_paths(self.tree)

    @functools.cached_property
    def paths_none(self) -> list[tuple[tuple[Any, ...], ...]]:
        return ref_paths(self.tree, none_is_leaf=True)

    def is_tree_like_input(self, result: Any, none_is_leaf: bool = False) -> bool:
        """Same containers and the same leaf objects as the input, in freshly built containers
        (so a library that took a node for a leaf and passed it through whole fails)."""
        expected = self.leaves_none if none_is_leaf else self.leaves
        return (
            ref_skeleton(result) == self.skeleton
            and _same_objects(ref_leaves(result, none_is_leaf), expected)
            and _rebuilt(result, self.tree)
        )


def _identity(x: Any) -> Any:
    return x


def _first(x: Any, y: Any) -> Any:
    return x


def _leaf_of(path: Any, x: Any) -> Any:
    return x


def _prefix_of(tree: Any) -> Any:
    """A prefix of `tree` for the broadcast op: its root with every child replaced by 0."""
    if type(tree) is dict:
        return dict.fromkeys(tree, 0)
    if type(tree) in (list, tuple):
        return type(tree)(0 for _ in tree)
    return 0


def _optree_style_cases(mod: Any, w: Workload, op: str) -> Case | None:
    """oxtree's main package and optree share one API. Path ops here are optree's (raw
    paths); the oxtree adapter never sends them here."""
    tree, expected = w.tree, w.leaves

    def stmt(args: str) -> str:
        # Only workloads of registered classes need optree's namespace; the others are
        # called exactly as before.
        return f"f({args}, namespace=ns)" if w.namespace else f"f({args})"

    ns_kw = {"namespace": w.namespace} if w.namespace else {}
    if op == "flatten":
        return Case(
            stmt("t"),
            {"f": mod.tree_flatten, "t": tree, "ns": w.namespace},
            lambda r: _same_objects(r[0], expected) and r[1].num_leaves == len(expected),
        )
    if op == "unflatten":
        _, spec = mod.tree_flatten(tree, **ns_kw)
        return Case(
            "f(s, v)",
            {"f": mod.tree_unflatten, "s": spec, "v": list(expected)},
            w.is_tree_like_input,
        )
    if op == "leaves":
        return Case(
            stmt("t"),
            {"f": mod.tree_leaves, "t": tree, "ns": w.namespace},
            lambda r: _same_objects(r, expected),
        )
    if op == "structure":
        return Case(
            stmt("t"),
            {"f": mod.tree_structure, "t": tree, "ns": w.namespace},
            lambda r: r.num_leaves == len(expected),
        )
    if op == "map1":
        return Case(
            stmt("g, t"),
            {"f": mod.tree_map, "g": _identity, "t": tree, "ns": w.namespace},
            w.is_tree_like_input,
        )
    if op == "map2":
        return Case(
            stmt("g, t, u"),
            {"f": mod.tree_map, "g": _first, "t": tree, "u": w.other, "ns": w.namespace},
            w.is_tree_like_input,
        )
    if op == "eq":
        a, b = mod.tree_structure(tree, **ns_kw), mod.tree_structure(w.other, **ns_kw)
        return Case("a == b", {"a": a, "b": b}, lambda r: r is True)
    if op == "hash":
        # A library may cache a treedef's hash after the first call; we time `hash(spec)`
        # exactly as each library exposes it, caching included.
        a, b = mod.tree_structure(tree, **ns_kw), mod.tree_structure(w.other, **ns_kw)
        return Case("h(a)", {"h": hash, "a": a}, lambda r: isinstance(r, int) and r == hash(b))
    if op == "flatten_with_path":
        # optree returns (paths, leaves, spec) with raw paths such as ('a', 0).
        return Case(
            stmt("t"),
            {"f": mod.tree_flatten_with_path, "t": tree, "ns": w.namespace},
            lambda r: (
                _same_objects(r[1], expected)
                and _paths_match(r[0], w.paths)
                and r[2].num_leaves == len(expected)
            ),
        )
    if op == "map_with_path":
        return Case(
            stmt("g, t"),
            {"f": mod.tree_map_with_path, "g": _leaf_of, "t": tree, "ns": w.namespace},
            w.is_tree_like_input,
        )
    if op == "broadcast":
        return Case(
            stmt("p, t"),
            {"f": mod.tree_broadcast_prefix, "p": _prefix_of(tree), "t": tree, "ns": w.namespace},
            lambda r: len(mod.tree_leaves(r, **ns_kw)) == len(expected),
        )
    raise ValueError(op)


def _jax_style_cases(tu: Any, w: Workload, op: str) -> Case | None:
    """`jax.tree_util` and `oxtree.tree_util` share one API (no namespaces: the custom
    classes are registered globally)."""
    tree, expected = w.tree, w.leaves
    if op == "flatten":
        return Case(
            "f(t)",
            {"f": tu.tree_flatten, "t": tree},
            lambda r: _same_objects(r[0], expected) and r[1].num_leaves == len(expected),
        )
    if op == "unflatten":
        _, treedef = tu.tree_flatten(tree)
        return Case(
            "f(s, v)",
            {"f": tu.tree_unflatten, "s": treedef, "v": list(expected)},
            w.is_tree_like_input,
        )
    if op == "leaves":
        return Case("f(t)", {"f": tu.tree_leaves, "t": tree}, lambda r: _same_objects(r, expected))
    if op == "structure":
        return Case(
            "f(t)",
            {"f": tu.tree_structure, "t": tree},
            lambda r: r.num_leaves == len(expected),
        )
    if op == "map1":
        return Case("f(g, t)", {"f": tu.tree_map, "g": _identity, "t": tree}, w.is_tree_like_input)
    if op == "map2":
        return Case(
            "f(g, t, u)",
            {"f": tu.tree_map, "g": _first, "t": tree, "u": w.other},
            w.is_tree_like_input,
        )
    if op == "eq":
        a, b = tu.tree_structure(tree), tu.tree_structure(w.other)
        return Case("a == b", {"a": a, "b": b}, lambda r: r is True)
    if op == "hash":
        # See the note in _optree_style_cases about cached hashes.
        a, b = tu.tree_structure(tree), tu.tree_structure(w.other)
        return Case("h(a)", {"h": hash, "a": a}, lambda r: isinstance(r, int) and r == hash(b))
    if op == "flatten_with_path":
        # ([(key_path, leaf), ...], treedef), the keys being DictKey, SequenceKey, ...
        return Case(
            "f(t)",
            {"f": tu.tree_flatten_with_path, "t": tree},
            lambda r: (
                _same_objects([x for _, x in r[0]], expected)
                and _paths_match([p for p, _ in r[0]], w.paths, _raw_key)
                and r[1].num_leaves == len(expected)
            ),
        )
    if op == "map_with_path":
        return Case(
            "f(g, t)",
            {"f": tu.tree_map_with_path, "g": _leaf_of, "t": tree},
            w.is_tree_like_input,
        )
    if op == "broadcast":
        return Case(
            "f(p, t)",
            {"f": tu.tree_broadcast, "p": _prefix_of(tree), "t": tree},
            lambda r: len(tu.tree_leaves(r)) == len(expected),
        )
    raise ValueError(op)


def _oxtree_cases(mod: Any, w: Workload, op: str, face: str) -> Case | None:
    if face == "jax" or op in PATH_OPS:
        return _jax_style_cases(mod.tree_util, w, op)
    return _optree_style_cases(mod, w, op)


def _optree_cases(mod: Any, w: Workload, op: str, face: str) -> Case | None:
    return _optree_style_cases(mod, w, op)


def _jax_cases(mod: Any, w: Workload, op: str, face: str) -> Case | None:
    return _jax_style_cases(mod.tree_util, w, op)


def _dmtree_cases(mod: Any, w: Workload, op: str, face: str) -> Case | None:
    # dm-tree treats None as a leaf and has no treedef object.
    tree, expected = w.tree, w.leaves_none

    def like_input(r: Any) -> bool:
        return w.is_tree_like_input(r, none_is_leaf=True)

    if op in ("flatten", "leaves"):
        return Case("f(t)", {"f": mod.flatten, "t": tree}, lambda r: _same_objects(r, expected))
    if op == "unflatten":
        return Case("f(t, v)", {"f": mod.unflatten_as, "t": tree, "v": list(expected)}, like_input)
    if op == "map1":
        return Case("f(g, t)", {"f": mod.map_structure, "g": _identity, "t": tree}, like_input)
    if op == "map2":
        return Case(
            "f(g, t, u)",
            {"f": mod.map_structure, "g": _first, "t": tree, "u": w.other},
            like_input,
        )
    if op in ("structure", "eq", "hash", "broadcast"):
        return None
    if op == "flatten_with_path":
        if not hasattr(mod, "flatten_with_path"):
            return None
        return Case(
            "f(t)",
            {"f": mod.flatten_with_path, "t": tree},
            lambda r: (
                _same_objects([x for _, x in r], expected)
                and _paths_match([p for p, _ in r], w.paths_none)
            ),
        )
    if op == "map_with_path":
        if not hasattr(mod, "map_structure_with_path"):
            return None
        return Case(
            "f(g, t)", {"f": mod.map_structure_with_path, "g": _leaf_of, "t": tree}, like_input
        )
    raise ValueError(op)


_ADAPTERS: dict[str, tuple[str, Callable[[Any, Workload, str, str], Case | None]]] = {
    "oxtree": ("oxtree", _oxtree_cases),
    "optree": ("optree", _optree_cases),
    "jax": ("jax", _jax_cases),
    "dmtree": ("tree", _dmtree_cases),
}

_DISTRIBUTIONS = {"oxtree": "oxtree", "optree": "optree", "jax": "jax", "dmtree": "dm-tree"}


def load_libs(names: Iterable[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """Import the requested libraries; return (loaded modules, {name: reason skipped})."""
    loaded: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    for name in names:
        module_name = _ADAPTERS[name][0]
        try:
            loaded[name] = importlib.import_module(module_name)
        except Exception as e:
            skipped[name] = f"{type(e).__name__}: {e}"
    return loaded, skipped


def _version(name: str, mod: Any) -> str:
    try:
        return importlib.metadata.version(_DISTRIBUTIONS[name])
    except importlib.metadata.PackageNotFoundError:
        return str(getattr(mod, "__version__", "?"))


# --------------------------------------------------------------------------------------
# Timing
# --------------------------------------------------------------------------------------


def _calibrate(timer: timeit.Timer, target: float) -> int:
    """The number of inner loops that makes one repeat last about `target` seconds."""
    number = 1
    while True:
        elapsed = timer.timeit(number)
        if elapsed >= target / 5 or number >= 10**8:
            break
        number *= 10
    return max(1, round(number * target / max(elapsed, 1e-9)))


def _bench_pair(
    cases: dict[str, Case], repeats: int, target: float, stat: str = "median"
) -> dict[str, dict[str, Any]]:
    """Time several libraries on one (workload, op), interleaved repeat by repeat. Each
    entry's "ns" is the median or the best (fastest) repeat, as `stat` says."""
    out: dict[str, dict[str, Any]] = {}
    timers: dict[str, tuple[timeit.Timer, int]] = {}
    for lib, case in cases.items():
        try:
            correct = bool(case.check(case.call()))
        except Exception as e:
            out[lib] = {"error": f"{type(e).__name__}: {e}"[:300], "correct": False}
            continue
        timer = timeit.Timer(case.stmt, globals=case.namespace)
        timers[lib] = (timer, _calibrate(timer, target))
        out[lib] = {"correct": correct, "number": timers[lib][1], "times_ns": []}
    order = list(timers)
    for r in range(repeats):
        # Rotate the order each repeat so no library always runs first or last.
        shift = r % len(order) if order else 0
        for lib in order[shift:] + order[:shift]:
            timer, number = timers[lib]
            out[lib]["times_ns"].append(timer.timeit(number) / number * 1e9)
    for lib in timers:
        out[lib]["median_ns"] = statistics.median(out[lib]["times_ns"])
        out[lib]["best_ns"] = min(out[lib]["times_ns"])
        out[lib]["ns"] = out[lib][f"{stat}_ns"]
    return out


def _parse_list(value: str | Sequence[str] | None, allowed: Sequence[str], what: str) -> list[str]:
    if value is None:
        return list(allowed)
    items = [v.strip() for v in value.split(",")] if isinstance(value, str) else list(value)
    items = [v for v in items if v]
    unknown = [v for v in items if v not in allowed]
    if unknown:
        raise ValueError(f"unknown {what}: {', '.join(unknown)}; choose from {', '.join(allowed)}")
    return items


def run(
    workloads: str | Sequence[str] | None = None,
    ops: str | Sequence[str] | None = None,
    libs: str | Sequence[str] | None = None,
    repeats: int | None = None,
    quick: bool = False,
    target: float | None = None,
    progress: Callable[[str], None] | None = None,
    face: str = "optree",
    stat: str = "median",
) -> dict[str, Any]:
    """Run the benchmark and return a JSON-serialisable dict of results.

    `workloads`, `ops` and `libs` take a list or a comma-separated string; None means all
    (or, with `quick=True`, a short subset of workloads and ops). `repeats` defaults to 7
    (3 when quick). `target` is the length of one repeat in seconds (default 0.03; 0.01
    when quick). `progress`, when given, is called with a short line per (workload, op).
    `face` is what the oxtree column calls: "optree" (the main package) or "jax"
    (`oxtree.tree_util`). `stat` is what each timing reports: "median" of the repeats, or
    "best" (the fastest; steadier on a loaded machine, with short repeats).

    Workloads of the jax-registered group (`jax_registered.WORKLOADS`, or `JAX_GROUP` for all
    of them) go to the result's "jax_registered" entry (see `_run_jax_registered`), never to
    its "rows"; the entry is there only when such a workload was asked for (a full run asks
    for all of them). Likewise the select group's (`select_group.WORKLOADS`, or
    `select_group.GROUP`) go to its "select" entry (see `_run_select`), and `OBJECT_WORKLOAD`
    to "object_registered" (`_run_object_group`).
    """
    workload_names, jax_names, select_names, object_names = _split_workloads(workloads, quick)
    op_names = _parse_list(ops if ops is not None or not quick else QUICK_OPS, OPS, "op")
    lib_names = _parse_list(libs, LIBS, "library")
    repeats = repeats if repeats is not None else (3 if quick else 7)
    target = target if target is not None else (0.01 if quick else 0.03)
    if repeats < 1:
        raise ValueError("repeats must be at least 1")
    if face not in FACES:
        raise ValueError(f"unknown face: {face}; choose from {', '.join(FACES)}")
    if stat not in STATS:
        raise ValueError(f"unknown stat: {stat}; choose from {', '.join(STATS)}")

    modules, skipped = load_libs(lib_names)
    with _recursion_limit(10_000):
        rows = _run_rows(workload_names, op_names, modules, repeats, target, progress, face, stat)
    extra: dict[str, Any] = {}
    if jax_names:
        extra["jax_registered"] = _run_jax_registered(
            jax_names, op_names, modules, repeats, target, progress, stat
        )
    if select_names:
        extra["select"] = _run_select(select_names, modules, repeats, target, progress, face, stat)
    if object_names:
        extra["object_registered"] = _run_object_group(
            op_names, modules, repeats, target, progress, face, stat
        )
    return {
        "meta": {
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "repeats": repeats,
            "target_s": target,
            "face": face,
            "stat": stat,
            "libs": {lib: _version(lib, mod) for lib, mod in modules.items()},
            "skipped": skipped,
        },
        "rows": rows,
        **extra,
    }


def _split_workloads(
    workloads: str | Sequence[str] | None, quick: bool
) -> tuple[list[str], list[str], list[str], list[str]]:
    """The workloads asked for: (those of the main table, those of the jax-registered group,
    those of the select group, the object group's). None means every workload of all four
    (with `quick`: `QUICK_WORKLOADS`, none of the groups')."""
    if workloads is None:
        if quick:
            return list(QUICK_WORKLOADS), [], [], []
        return (
            list(WORKLOADS),
            list(jax_registered.WORKLOADS),
            list(select_group.WORKLOADS),
            [OBJECT_WORKLOAD],
        )
    groups = {JAX_GROUP: jax_registered.WORKLOADS, select_group.GROUP: select_group.WORKLOADS}
    allowed = [
        *WORKLOADS,
        *jax_registered.WORKLOADS,
        *select_group.WORKLOADS,
        *groups,
        OBJECT_WORKLOAD,
    ]
    names: list[str] = []
    for name in _parse_list(workloads, allowed, "workload"):
        for n in groups.get(name, [name]):
            if n not in names:
                names.append(n)
    return (
        [n for n in names if n in WORKLOADS],
        [n for n in names if n in jax_registered.WORKLOADS],
        [n for n in names if n in select_group.WORKLOADS],
        [n for n in names if n == OBJECT_WORKLOAD],
    )


def _workloads_for(
    wname: str, modules: dict[str, Any]
) -> tuple[dict[str, Workload | None], dict[str, str]]:
    """Each library's tree for workload `wname` (None: n/a), and {lib: error} for libraries
    whose custom class could not be made or registered.

    Ordinary workloads build one tree shared by all libraries; `CUSTOM_WORKLOADS` build one
    per library, from that library's registered class.
    """
    kind = CUSTOM_WORKLOADS.get(wname)
    if kind is None:
        shared = Workload(wname, WORKLOADS[wname])
        return dict.fromkeys(modules, shared), {}
    per_lib: dict[str, Workload | None] = {}
    errors: dict[str, str] = {}
    for lib, mod in modules.items():
        try:
            cls = _custom_class(lib, mod, kind)
        except Exception as e:
            errors[lib] = f"registering the {kind} class: {type(e).__name__}: {e}"[:300]
            continue
        if cls is None:
            per_lib[lib] = None
            continue
        namespace = BENCH_NAMESPACE if lib == "optree" else ""
        per_lib[lib] = Workload(wname, functools.partial(WORKLOADS[wname], cls), namespace)
    return per_lib, errors


def _run_rows(
    workload_names: list[str],
    op_names: list[str],
    modules: dict[str, Any],
    repeats: int,
    target: float,
    progress: Callable[[str], None] | None,
    face: str = "optree",
    stat: str = "median",
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for wname in workload_names:
        per_lib, errors = _workloads_for(wname, modules)
        for op in op_names:
            cases: dict[str, Case] = {}
            row: dict[str, Any] = {"workload": wname, "op": op, "libs": {}}
            for lib, mod in modules.items():
                if lib in errors:
                    row["libs"][lib] = {"error": errors[lib], "correct": False}
                    continue
                w = per_lib[lib]
                try:
                    case = None if w is None else _ADAPTERS[lib][1](mod, w, op, face)
                except Exception as e:  # e.g. building the treedef for eq/hash failed
                    row["libs"][lib] = {"error": f"{type(e).__name__}: {e}"[:300], "correct": False}
                    continue
                if case is None:
                    row["libs"][lib] = {"na": True}
                else:
                    cases[lib] = case
            row["libs"].update(_bench_pair(cases, repeats, target, stat))
            row["libs"] = {lib: row["libs"][lib] for lib in modules if lib in row["libs"]}
            rows.append(row)
            if progress is not None:
                progress(f"{wname:>11} {op:<17} done")
        del per_lib
    return rows


def _run_jax_registered(
    workload_names: list[str],
    op_names: list[str],
    modules: dict[str, Any],
    repeats: int,
    target: float,
    progress: Callable[[str], None] | None,
    stat: str = "median",
) -> dict[str, Any]:
    """Time the jax-registered group: `oxtree.tree_util` and `jax.tree_util` (those of the two
    in `modules`) on the ops of `jax_registered.OPS` that `op_names` has, interleaved as in
    the main table. Rows have the main table's form plus "leaves" (jax's leaf count) and, per
    library, "num_leaves" (its own count); workloads that cannot be built are in "skipped"."""
    libs = [lib for lib in ("oxtree", "jax") if lib in modules]
    ops = [op for op in jax_registered.OPS if op in op_names]
    out: dict[str, Any] = {
        "libs": libs,
        "ops": ops,
        "versions": jax_registered.versions(),
        "skipped": {},
        "rows": [],
    }
    if not libs or not ops:
        why = "neither oxtree nor jax is run" if not libs else "none of its ops is asked for"
        out["skipped"] = dict.fromkeys(
            workload_names, f"{why} (ops: {', '.join(jax_registered.OPS)})"
        )
        return out
    try:
        jtu = importlib.import_module("jax.tree_util")  # the reference, even when not timed
    except Exception as e:
        out["skipped"] = dict.fromkeys(workload_names, f"jax, the reference, failed to import: {e}")
        return out
    tree_utils = {lib: modules[lib].tree_util for lib in libs}
    for wname in workload_names:
        why = jax_registered.missing(wname)
        if why is not None:
            out["skipped"][wname] = why
            continue
        try:
            w = jax_registered.JaxTree(wname, jtu)
        except Exception as e:
            out["skipped"][wname] = f"building it failed: {type(e).__name__}: {e}"[:300]
            continue
        counts: dict[str, int | str] = {}
        for lib, tu in tree_utils.items():
            try:
                counts[lib] = len(tu.tree_leaves(w.tree))
            except Exception as e:
                counts[lib] = f"{type(e).__name__}: {e}"[:300]
        for op in ops:
            row: dict[str, Any] = {"workload": wname, "op": op, "leaves": len(w.leaves), "libs": {}}
            cases: dict[str, Case] = {}
            for lib, tu in tree_utils.items():
                try:
                    cases[lib] = Case(*jax_registered.case(tu, w, op))
                except Exception as e:  # e.g. building the treedef for unflatten failed
                    row["libs"][lib] = {"error": f"{type(e).__name__}: {e}"[:300], "correct": False}
            row["libs"].update(_bench_pair(cases, repeats, target, stat))
            for lib in libs:
                row["libs"][lib]["num_leaves"] = counts[lib]
            row["libs"] = {lib: row["libs"][lib] for lib in libs}
            out["rows"].append(row)
            if progress is not None:
                progress(f"{wname:>13} {op:<17} done")
        del w
    return out


def _run_select(
    workload_names: list[str],
    modules: dict[str, Any],
    repeats: int,
    target: float,
    progress: Callable[[str], None] | None,
    face: str = "optree",
    stat: str = "median",
) -> dict[str, Any]:
    """Time the select group: oxtree and jax (by hand: `tree_map_with_path` and `fnmatch`),
    those of the two in `modules`, on every op of `select_group.OPS`, interleaved as in the
    main table; jax.tree_util's hand-written answer is the reference (even when jax is not
    timed)."""
    libs = [lib for lib in ("oxtree", "jax") if lib in modules]
    out: dict[str, Any] = {"libs": libs, "ops": list(select_group.OPS), "rows": []}
    if not libs:
        out["skipped"] = "neither oxtree nor jax is run"
        return out
    jtu = importlib.import_module("jax.tree_util")
    for wname in workload_names:
        tree = select_group.WORKLOADS[wname]()
        for op in select_group.OPS:
            expected = select_group.reference(jtu, tree, op)
            row: dict[str, Any] = {"workload": wname, "op": op, "leaves": len(expected), "libs": {}}
            cases = {
                lib: Case(*select_group.case(lib, modules[lib], tree, op, face, expected, jtu))
                for lib in libs
            }
            row["libs"].update(_bench_pair(cases, repeats, target, stat))
            out["rows"].append(row)
            if progress is not None:
                progress(f"{wname:>11} {op:<17} done")
    return out


def _run_object_group(
    op_names: list[str],
    modules: dict[str, Any],
    repeats: int,
    target: float,
    progress: Callable[[str], None] | None,
    face: str = "optree",
    stat: str = "median",
) -> dict[str, Any]:
    """Time the object group (`OBJECT_COLUMNS` on the ops of `OBJECT_OPS` that `op_names`
    has), every column interleaved as in the main table. Rows have the main table's form,
    keyed by column; columns whose library is not in `modules` are left out, and a class
    that cannot be made or registered becomes that column's error."""
    ops = [op for op in OBJECT_OPS if op in op_names]
    columns = [(col, lib, kind) for col, lib, kind in OBJECT_COLUMNS if lib in modules]
    out: dict[str, Any] = {"columns": [col for col, _, _ in columns], "ops": ops, "rows": []}
    if not ops:
        return out
    trees: dict[str, Workload] = {}
    errors: dict[str, str] = {}
    for col, lib, kind in columns:
        try:
            cls = _custom_class(lib, modules[lib], kind)
            namespace = BENCH_NAMESPACE if lib == "optree" else ""
            trees[col] = Workload(OBJECT_WORKLOAD, functools.partial(make_custom1k, cls), namespace)
        except Exception as e:
            errors[col] = f"registering the {kind} class: {type(e).__name__}: {e}"[:300]
    for op in ops:
        row: dict[str, Any] = {"workload": OBJECT_WORKLOAD, "op": op, "libs": {}}
        cases: dict[str, Case] = {}
        for col, lib, _ in columns:
            if col in errors:
                row["libs"][col] = {"error": errors[col], "correct": False}
                continue
            try:
                case = _ADAPTERS[lib][1](modules[lib], trees[col], op, face)
            except Exception as e:
                row["libs"][col] = {"error": f"{type(e).__name__}: {e}"[:300], "correct": False}
                continue
            if case is not None:
                cases[col] = case
        row["libs"].update(_bench_pair(cases, repeats, target, stat))
        row["libs"] = {col: row["libs"][col] for col in out["columns"] if col in row["libs"]}
        out["rows"].append(row)
        if progress is not None:
            progress(f"{OBJECT_WORKLOAD:>11} {op:<17} done")
    return out


# --------------------------------------------------------------------------------------
# Reporting
# --------------------------------------------------------------------------------------


def format_time(ns: float) -> str:
    """Three significant digits in the largest unit that keeps the value at least 1."""
    scale, unit = next(
        ((scale, unit) for scale, unit in ((1e9, "s"), (1e6, "ms"), (1e3, "µs")) if ns >= scale),
        (1.0, "ns"),
    )
    value = ns / scale
    decimals = 0 if value >= 100 or unit == "ns" else 1 if value >= 10 else 2
    return f"{value:.{decimals}f} {unit}"


def _cell(entry: dict[str, Any] | None) -> str:
    if entry is None:
        return "-"
    if entry.get("na"):
        return "n/a"
    if "error" in entry:
        return "error!"
    mark = "" if entry["correct"] else " !"
    return format_time(_ns(entry)) + mark


def _ns(entry: dict[str, Any]) -> float:
    """The timing an entry reports (files written before `stat` existed have medians)."""
    return entry["ns"] if "ns" in entry else entry["median_ns"]


def _ratio(row: dict[str, Any], a: str, b: str) -> float | None:
    ea, eb = row["libs"].get(a), row["libs"].get(b)
    if not ea or not eb or "median_ns" not in ea or "median_ns" not in eb:
        return None
    return _ns(ea) / _ns(eb)


def _fmt_ratio(value: float | None) -> str:
    if value is None:
        return "-"
    # Two decimals, or two significant digits for tiny ratios (e.g. cached hashes).
    if value >= 0.095:
        return f"{value:.2f}x"
    return f"{value:.2g}x" if value >= 0.001 else "<0.001x"


def _render(header: list[str], body: list[list[str]], left: int) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        parts = [
            c.ljust(widths[i]) if i < left else c.rjust(widths[i]) for i, c in enumerate(cells)
        ]
        return "  ".join(parts).rstrip()

    return [line(header), "  ".join("-" * w for w in widths), *map(line, body)]


def format_table(results: dict[str, Any], summary: bool = True) -> str:
    """Render `run()`'s results as a plain-text table (plus per-op geometric means)."""
    meta, rows = results["meta"], results["rows"]
    libs = list(meta["libs"])
    ratio_pairs = [(o, f"ox/{o}") for o in ("jax", "optree") if "oxtree" in libs and o in libs]

    header = ["workload", "op", *libs, *(title for _, title in ratio_pairs)]
    body = []
    for row in rows:
        cells = [row["workload"], row["op"], *(_cell(row["libs"].get(lib)) for lib in libs)]
        cells += [_fmt_ratio(_ratio(row, "oxtree", o)) for o, _ in ratio_pairs]
        body.append(cells)
    lines = _render(header, body, left=2)

    notes = []
    if any(
        "error" in e or not e.get("correct", True) for row in rows for e in row["libs"].values()
    ):
        notes.append("'!' marks a result that failed the correctness check (or raised).")
        for row in rows:
            for lib, e in row["libs"].items():
                if "error" in e:
                    notes.append(f"  {row['workload']}/{row['op']}/{lib}: {e['error']}")
    for lib, why in meta["skipped"].items():
        notes.append(f"{lib} skipped: {why}")
    if "oxtree" in libs:
        if meta.get("face", "optree") == "jax":
            notes.append("oxtree face: jax -- the oxtree column calls oxtree.tree_util.")
        elif any(row["op"] in PATH_OPS for row in rows):
            notes.append(
                "oxtree face: optree -- the oxtree column calls oxtree.tree_* (the optree "
                "drop-in), except for the path ops, which use oxtree.tree_util's."
            )
        else:
            notes.append("oxtree face: optree -- the oxtree column calls oxtree.tree_*.")
    if any(row["op"] in PATH_OPS for row in rows) and "optree" in libs:
        notes.append(
            "optree's path ops return raw paths ('a', 0); oxtree's and jax's build key "
            "objects (DictKey('a'), SequenceKey(0)): different but comparable work."
        )
    if ratio_pairs:
        notes.append("ox/X = oxtree time / X time (below 1.00x: oxtree is faster).")
    if any(row["op"] == "hash" for row in rows):
        notes.append(
            "hash times hash(spec) called again and again on one spec, so a library that "
            "caches the hash pays for computing it only once."
        )

    if summary and ratio_pairs:
        by_op: dict[str, dict[str, list[float]]] = {}
        for row in rows:
            for o, _ in ratio_pairs:
                value = _ratio(row, "oxtree", o)
                if value is not None:
                    by_op.setdefault(row["op"], {}).setdefault(o, []).append(value)
        if by_op:
            sheader = ["geomean", *(title for _, title in ratio_pairs)]
            sbody = []
            for op in (op for op in OPS if op in by_op):
                cells = [op]
                for o, _ in ratio_pairs:
                    cells.append(_fmt_ratio(_geomean(by_op[op].get(o, []))))
                sbody.append(cells)
            lines += ["", *_render(sheader, sbody, left=1)]

    versions = ", ".join(f"{lib} {v}" for lib, v in meta["libs"].items())
    lines += [
        "",
        f"{meta.get('stat', 'median')} of {meta['repeats']} repeats; Python {meta['python']}; {versions}",
        *notes,
    ]
    return "\n".join(lines)


def _geomean(values: Sequence[float]) -> float | None:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def format_targets(results: dict[str, Any]) -> str:
    """The targets against jax: per op, the geometric mean of ox/jax over the workloads
    shown and every workload where oxtree is slower than jax (ox/jax > 1.00). Empty when
    oxtree or jax was not run."""
    rows = results["rows"]
    ratios: dict[str, list[tuple[str, float]]] = {}
    for row in rows:
        value = _ratio(row, "oxtree", "jax")
        if value is not None:
            ratios.setdefault(row["op"], []).append((row["workload"], value))
    if not ratios:
        return ""
    body: list[list[str]] = []
    lists: list[str] = []
    slower_rows = 0
    for op in (op for op in OPS if op in ratios):
        slower = [(wname, value) for wname, value in ratios[op] if value > 1.0]
        slower_rows += len(slower)
        listed = ", ".join(
            # Three decimals where two would round a loss to "1.00x".
            f"{wname} {value:.3f}x" if value < 1.005 else f"{wname} {value:.2f}x"
            for wname, value in slower
        )
        gm = _geomean([value for _, value in ratios[op]])
        body.append([op, _fmt_ratio(gm), "yes" if slower else "no"])
        lists.append(listed)
    table = _render(["op", "geomean ox/jax", "slower than jax?"], body, left=1)
    # The list of workloads goes flush left after the table (_render right-aligns).
    table = [
        f"{line}  {extra}".rstrip() for line, extra in zip(table, ["", "", *lists], strict=True)
    ]
    face = results["meta"].get("face", "optree")
    total = sum(len(v) for v in ratios.values())
    return "\n".join(
        [
            f"targets (oxtree, {face} face, vs jax.tree_util; slower = ox/jax > 1.00)",
            *table,
            f"{slower_rows} of {total} (workload, op) pairs slower than jax.",
        ]
    )


def _wrong(entry: dict[str, Any] | None) -> bool:
    return entry is not None and not entry.get("na") and not entry.get("correct", True)


def format_jax_registered(results: dict[str, Any]) -> str:
    """The jax-registered group's section: its table, per-op geometric means of ox/jax over
    the rows where both results are correct, its target (ox/jax <= 1.00x) and notes. Empty
    when the run did not ask for the group."""
    group = results.get("jax_registered")
    if group is None:
        return ""
    libs, rows = group["libs"], group["rows"]
    both = libs == ["oxtree", "jax"]
    lines = [
        "jax-registered trees: oxtree.tree_util vs jax.tree_util (a group of its own, never "
        "part of the main table's geomeans or targets)"
    ]
    notes: list[str] = []
    if rows:
        header = ["workload", "op", f"leaves ({'/'.join(libs)})", *libs]
        header += ["ox/jax"] if both else []
        body = []
        for row in rows:
            entries = [row["libs"].get(lib) for lib in libs]
            cells = [row["workload"], row["op"], " / ".join(map(_leaf_count, entries))]
            cells += [_cell(e) for e in entries]
            if both:
                value = _fmt_ratio(_ratio(row, "oxtree", "jax"))
                cells.append(value + (" !" if value != "-" and any(map(_wrong, entries)) else ""))
            body.append(cells)
        lines += _render(header, body, left=2)

    if rows and both:
        by_op: dict[str, list[dict[str, Any]]] = {}
        for row in rows:
            by_op.setdefault(row["op"], []).append(row)
        sbody = []
        lists = []
        wrong_total = slower_total = 0
        missed: list[str] = []
        for op, op_rows in by_op.items():
            wrong = [r["workload"] for r in op_rows if any(map(_wrong, r["libs"].values()))]
            ratios = [
                (r["workload"], value)
                for r in op_rows
                if r["workload"] not in wrong and (value := _ratio(r, "oxtree", "jax")) is not None
            ]
            slower = [(wname, value) for wname, value in ratios if value > 1.0]
            gm = _geomean([value for _, value in ratios])
            # Three decimals where two would round a miss to "1.00x".
            gm_text = f"{gm:.3f}x" if gm is not None and 0.995 <= gm < 1.005 else _fmt_ratio(gm)
            if gm is not None and gm > 1.0:
                missed.append(f"{op} {gm_text}")
            wrong_total += len(wrong)
            slower_total += len(slower)
            sbody.append(
                [
                    op,
                    gm_text,
                    f"{len(wrong)} of {len(op_rows)}",
                    "yes" if slower else "no" if ratios else "-",
                ]
            )
            listed = [f"{wname} {value:.3f}x" for wname, value in slower]
            listed += [f"wrong: {', '.join(wrong)}"] if wrong else []
            lists.append("; ".join(listed))
        table = _render(["op", "geomean ox/jax", "wrong", "slower than jax?"], sbody, left=1)
        table = [
            f"{line}  {extra}".rstrip() for line, extra in zip(table, ["", "", *lists], strict=True)
        ]
        lines += ["", *table]
        if wrong_total:
            verdict = (
                f"not met: {wrong_total} of {len(rows)} rows have a wrong result; the geomeans "
                "leave them out"
            )
        elif missed:
            verdict = f"missed: {', '.join(missed)}"
        else:
            verdict = "met" + (f" ({slower_total} rows slower than jax)" if slower_total else "")
        lines.append(f"target (geomean ox/jax <= 1.00x per op, every result correct): {verdict}")

    if any(_wrong(e) for row in rows for e in row["libs"].values()):
        notes.append(
            "'!' marks a result that failed the correctness check: leaves not the very objects "
            "jax.tree_util returns, or a rebuilt tree (flatten's round trip, unflatten, map) "
            "that jax.tree_util does not find equal to the input; ox/jax of such a row is "
            "left out of the geomeans."
        )
    seen: set[str] = set()
    for row in rows:
        if row["workload"] in seen:
            continue
        seen.add(row["workload"])
        counts = {lib: e.get("num_leaves") for lib, e in row["libs"].items()}
        ox = counts.get("oxtree")
        if isinstance(ox, int) and ox != row["leaves"]:
            noun = "leaf" if ox == 1 else "leaves"
            notes.append(
                f"  {row['workload']}: oxtree.tree_util sees {ox} {noun} where jax.tree_util "
                f"sees {row['leaves']}"
            )
        elif isinstance(ox, str):
            notes.append(f"  {row['workload']}: oxtree.tree_util.tree_leaves raised {ox}")
    for row in rows:
        for lib, e in row["libs"].items():
            if "error" in e:
                notes.append(f"  {row['workload']}/{row['op']}/{lib}: {e['error']}")
    by_why: dict[str, list[str]] = {}
    for wname, why in group["skipped"].items():
        by_why.setdefault(why, []).append(wname)
    notes += [f"{', '.join(names)} skipped: {why}" for why, names in by_why.items()]
    if rows:
        notes.append(
            "The oxtree column calls oxtree.tree_util whatever --face says; jax.tree_util's "
            "answers are the reference."
        )
    meta = results["meta"]
    versions = ", ".join(
        f"{lib} {v}"
        for lib, v in [*((lib, meta["libs"][lib]) for lib in libs), *group["versions"].items()]
    )
    lines += ["", f"{meta.get('stat', 'median')} of {meta['repeats']} repeats; {versions}", *notes]
    return "\n".join(lines)


def format_select(results: dict[str, Any]) -> str:
    """The select group's section: its table and the geometric mean of ox/jax over its rows
    whose results are both correct. Empty when the run did not ask for the group."""
    group = results.get("select")
    if group is None:
        return ""
    libs, rows = group["libs"], group["rows"]
    face = results["meta"].get("face", "optree")
    ox = "oxtree.tree_util" if face == "jax" else "oxtree"
    lines = [
        f"select by key-path pattern: {ox} vs jax.tree_util.tree_map_with_path + fnmatch on "
        "keystr (a group of its own, never part of the main table's geomeans or targets)"
    ]
    if "skipped" in group:
        return "\n".join([*lines, f"skipped: {group['skipped']}"])
    both = libs == ["oxtree", "jax"]
    header = ["workload", "op", "leaves", *(("oxtree", "by hand (jax)") if both else libs)]
    header += ["ox/jax"] if both else []
    body = []
    ratios = []
    for row in rows:
        entries = [row["libs"].get(lib) for lib in libs]
        cells = [row["workload"], row["op"], str(row["leaves"]), *map(_cell, entries)]
        if both:
            value = _ratio(row, "oxtree", "jax")
            wrong = any(map(_wrong, entries))
            cells.append(_fmt_ratio(value) + (" !" if wrong else ""))
            if value is not None and not wrong:
                ratios.append(value)
        body.append(cells)
    lines += _render(header, body, left=2)
    if both:
        lines.append(f"geomean ox/jax: {_fmt_ratio(_geomean(ratios))}")
    if any(_wrong(e) for row in rows for e in row["libs"].values()):
        lines.append(
            "'!' marks a result that differs from the hand-written one; its row is left out of "
            "the geomean."
        )
    for row in rows:
        for lib, e in row["libs"].items():
            if "error" in e:
                lines.append(f"  {row['workload']}/{row['op']}/{lib}: {e['error']}")
    meta = results["meta"]
    lines.append(f"{meta.get('stat', 'median')} of {meta['repeats']} repeats")
    return "\n".join(lines)


def format_object_group(results: dict[str, Any]) -> str:
    """The object group's section: its table, oxtree's time over each other column's, and
    whether `OBJECT_TARGETS` are met on every op. Empty when the run did not ask for it."""
    group = results.get("object_registered")
    if group is None or not group["rows"]:
        return ""
    columns, rows = group["columns"], group["rows"]
    others = [c for c in columns if c not in ("oxtree", "jax mirror")]
    face = results["meta"].get("face", "optree")
    header = ["workload", "op", *columns, *(f"ox/{c}" for c in others)]
    mirror = "jax mirror" in columns and "jax" in columns
    header += ["mirror/jax"] if mirror else []
    body = []
    for row in rows:
        cells = [row["workload"], row["op"], *(_cell(row["libs"].get(c)) for c in columns)]
        cells += [_fmt_ratio(_ratio(row, "oxtree", c)) for c in others]
        cells += [_fmt_ratio(_ratio(row, "jax mirror", "jax"))] if mirror else []
        body.append(cells)
    lines = [
        "objects registered by attributes: oxtree.register_object vs other registrations "
        "(a group of its own, never part of the main table's geomeans or targets)",
        *_render(header, body, left=2),
    ]
    verdicts = []
    for col, limit in OBJECT_TARGETS.items():
        ratios = [(row["op"], _ratio(row, "oxtree", col)) for row in rows]
        if any(value is None for _, value in ratios) or any(
            _wrong(row["libs"].get(c)) for row in rows for c in ("oxtree", col)
        ):
            verdicts.append(f"ox/{col} <= {limit:.2f}x: not measured (or a wrong result)")
            continue
        missed = [f"{op} {value:.3f}x" for op, value in ratios if value > limit]  # type: ignore[operator]
        verdict = f"missed: {', '.join(missed)}" if missed else "met"
        verdicts.append(f"ox/{col} <= {limit:.2f}x on every op: {verdict}")
    meta = results["meta"]
    notes = [
        f"The oxtree column calls the {face} face; 'dataclass' is oxtree's dataclass1k, "
        "'jax' and 'optree' custom1k with Python flatten/unflatten functions, 'jax mirror' "
        "jax.tree_util on a class registered with oxtree.tree_util.register_object.",
    ]
    for row in rows:
        for col, e in row["libs"].items():
            if "error" in e:
                notes.append(f"  {row['workload']}/{row['op']}/{col}: {e['error']}")
    if any(_wrong(e) for row in rows for e in row["libs"].values()):
        notes.append("'!' marks a result that failed the correctness check (or raised).")
    lines += ["", *(f"target {v}" for v in verdicts)]
    lines += ["", f"{meta.get('stat', 'median')} of {meta['repeats']} repeats", *notes]
    return "\n".join(lines)


def _leaf_count(entry: dict[str, Any] | None) -> str:
    n = entry.get("num_leaves") if entry else None
    return str(n) if isinstance(n, int) else "error"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Time oxtree, optree, jax.tree_util and dm-tree side by side."
    )
    parser.add_argument("--libs", help=f"comma-separated subset of: {','.join(LIBS)}")
    parser.add_argument(
        "--workloads",
        help=f"comma-separated subset of: {','.join(WORKLOADS)}; and of the jax-registered "
        f"group: {','.join(jax_registered.WORKLOADS)} ({JAX_GROUP}: all four); of the "
        f"select group: {','.join(select_group.WORKLOADS)} ({select_group.GROUP}: all); and "
        f"{OBJECT_WORKLOAD}, the object group",
    )
    parser.add_argument("--ops", help=f"comma-separated subset of: {','.join(OPS)}")
    parser.add_argument("--repeats", type=int, help="repeats per timing (default 7; quick: 3)")
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"3 repeats of ~10 ms on workloads {','.join(QUICK_WORKLOADS)} "
        f"and ops {','.join(QUICK_OPS)} (unless given explicitly)",
    )
    parser.add_argument(
        "--face",
        choices=FACES,
        default="optree",
        help="what the oxtree column calls: the optree-compatible main package (default) "
        "or oxtree.tree_util (jax), for a like-for-like comparison with jax.tree_util",
    )
    parser.add_argument(
        "--stat",
        choices=STATS,
        default="median",
        help="what each timing reports: the median repeat (default) or the best (fastest), "
        "steadier on a loaded machine",
    )
    parser.add_argument(
        "--target-ms",
        type=float,
        help="length of one repeat in milliseconds (default 30; quick: 10)",
    )
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument("--list", action="store_true", help="list workloads, ops and libs")
    parser.add_argument("-q", "--no-progress", action="store_true", help="no progress lines")
    args = parser.parse_args(argv)

    if args.list:
        print("workloads:", ", ".join(WORKLOADS))
        print(f"{JAX_GROUP}:", ", ".join(jax_registered.WORKLOADS))
        print(
            f"{select_group.GROUP}:",
            ", ".join(select_group.WORKLOADS),
            "ops:",
            ", ".join(select_group.OPS),
        )
        print("object group:", OBJECT_WORKLOAD)
        print("ops:      ", ", ".join(OPS))
        print("libs:     ", ", ".join(LIBS))
        print("faces:    ", ", ".join(FACES))
        return 0

    def progress(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    try:
        results = run(
            workloads=args.workloads,
            ops=args.ops,
            libs=args.libs,
            repeats=args.repeats,
            quick=args.quick,
            progress=None if args.no_progress else progress,
            face=args.face,
            stat=args.stat,
            target=None if args.target_ms is None else args.target_ms / 1000,
        )
    except ValueError as e:
        parser.error(str(e))
    sections = [format_table(results)] if results["rows"] else []
    sections += filter(
        None,
        [
            format_targets(results),
            format_jax_registered(results),
            format_select(results),
            format_object_group(results),
        ],
    )
    print("\n\n".join(sections))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
            f.write("\n")
        print(f"results written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
