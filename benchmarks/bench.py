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
    .venv/bin/python benchmarks/bench.py --list             # names of workloads and ops

Libraries: ``oxtree``, ``optree``, ``jax`` (``jax.tree_util``), ``dmtree`` (``import tree``).
A library that cannot be imported is skipped with a note.

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

Columns ``ox/jax`` and ``ox/optree`` are oxtree's time divided by the other's time, so a
value below 1.00 means oxtree is faster. The summary at the end is the geometric mean of
those ratios per op over the workloads shown.

As a module::

    import bench
    results = bench.run(workloads=["mixed1k"], ops=["flatten"], quick=True)
    print(bench.format_table(results))
"""

from __future__ import annotations

import argparse
import collections
import contextlib
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

import numpy as np

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


WORKLOADS: dict[str, Callable[[], Any]] = {
    "tuple3": make_tuple3,
    "dict10": make_dict10,
    "mixed1k": make_mixed1k,
    "list100k": make_list100k,
    "dict10k": make_dict10k,
    "chain500": make_chain500,
    "resnet50": make_resnet50,
    "gpt2": make_gpt2,
}

OPS: tuple[str, ...] = ("flatten", "unflatten", "leaves", "structure", "map1", "map2", "eq", "hash")

LIBS: tuple[str, ...] = ("oxtree", "optree", "jax", "dmtree")

QUICK_WORKLOADS: tuple[str, ...] = ("tuple3", "mixed1k", "dict10k", "resnet50")
QUICK_OPS: tuple[str, ...] = ("flatten", "unflatten", "map1", "map2", "eq")

# --------------------------------------------------------------------------------------
# Pure-Python reference, used only to check each library's answers once
# --------------------------------------------------------------------------------------


def _is_namedtuple(node: Any) -> bool:
    return isinstance(node, tuple) and hasattr(type(node), "_fields")


def _children(node: Any) -> list[Any] | None:
    """Children in flattening order (dicts by sorted key), or None for a leaf."""
    if isinstance(node, dict):
        return [node[k] for k in sorted(node)]
    if isinstance(node, list | tuple):
        return list(node)
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


def ref_skeleton(tree: Any) -> Any:
    """A hashable description of the containers of `tree` (leaves become '*')."""
    if tree is None:
        return None
    if isinstance(tree, dict):
        return (dict, tuple((k, ref_skeleton(tree[k])) for k in sorted(tree)))
    if isinstance(tree, list | tuple):
        kind = type(tree) if _is_namedtuple(tree) else (list if isinstance(tree, list) else tuple)
        return (kind, tuple(ref_skeleton(c) for c in tree))
    return "*"


def rebuild(tree: Any) -> Any:
    """A copy of `tree` with new containers but the very same leaf objects."""
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
    def __init__(self, name: str, builder: Callable[[], Any]):
        self.name = name
        self.tree = builder()
        self.other = rebuild(self.tree)
        self.skeleton = ref_skeleton(self.tree)
        self.leaves = ref_leaves(self.tree)
        self.leaves_none = ref_leaves(self.tree, none_is_leaf=True)

    def is_tree_like_input(self, result: Any, none_is_leaf: bool = False) -> bool:
        expected = self.leaves_none if none_is_leaf else self.leaves
        return ref_skeleton(result) == self.skeleton and _same_objects(
            ref_leaves(result, none_is_leaf), expected
        )


def _identity(x: Any) -> Any:
    return x


def _first(x: Any, y: Any) -> Any:
    return x


def _optree_like_cases(mod: Any, w: Workload, op: str) -> Case | None:
    """oxtree and optree share one API."""
    tree, expected = w.tree, w.leaves
    if op == "flatten":
        return Case(
            "f(t)",
            {"f": mod.tree_flatten, "t": tree},
            lambda r: _same_objects(r[0], expected) and r[1].num_leaves == len(expected),
        )
    if op == "unflatten":
        _, spec = mod.tree_flatten(tree)
        return Case(
            "f(s, v)",
            {"f": mod.tree_unflatten, "s": spec, "v": list(expected)},
            w.is_tree_like_input,
        )
    if op == "leaves":
        return Case("f(t)", {"f": mod.tree_leaves, "t": tree}, lambda r: _same_objects(r, expected))
    if op == "structure":
        return Case(
            "f(t)",
            {"f": mod.tree_structure, "t": tree},
            lambda r: r.num_leaves == len(expected),
        )
    if op == "map1":
        return Case("f(g, t)", {"f": mod.tree_map, "g": _identity, "t": tree}, w.is_tree_like_input)
    if op == "map2":
        return Case(
            "f(g, t, u)",
            {"f": mod.tree_map, "g": _first, "t": tree, "u": w.other},
            w.is_tree_like_input,
        )
    if op == "eq":
        a, b = mod.tree_structure(tree), mod.tree_structure(w.other)
        return Case("a == b", {"a": a, "b": b}, lambda r: r is True)
    if op == "hash":
        # A library may cache a treedef's hash after the first call; we time `hash(spec)`
        # exactly as each library exposes it, caching included.
        a, b = mod.tree_structure(tree), mod.tree_structure(w.other)
        return Case("h(a)", {"h": hash, "a": a}, lambda r: isinstance(r, int) and r == hash(b))
    raise ValueError(op)


def _jax_cases(mod: Any, w: Workload, op: str) -> Case | None:
    tu = mod.tree_util
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
        # See the note in _optree_like_cases about cached hashes.
        a, b = tu.tree_structure(tree), tu.tree_structure(w.other)
        return Case("h(a)", {"h": hash, "a": a}, lambda r: isinstance(r, int) and r == hash(b))
    raise ValueError(op)


def _dmtree_cases(mod: Any, w: Workload, op: str) -> Case | None:
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
    if op in ("structure", "eq", "hash"):
        return None
    raise ValueError(op)


_ADAPTERS: dict[str, tuple[str, Callable[[Any, Workload, str], Case | None]]] = {
    "oxtree": ("oxtree", _optree_like_cases),
    "optree": ("optree", _optree_like_cases),
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


def _bench_pair(cases: dict[str, Case], repeats: int, target: float) -> dict[str, dict[str, Any]]:
    """Time several libraries on one (workload, op), interleaved repeat by repeat."""
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
) -> dict[str, Any]:
    """Run the benchmark and return a JSON-serialisable dict of results.

    `workloads`, `ops` and `libs` take a list or a comma-separated string; None means all
    (or, with `quick=True`, a short subset of workloads and ops). `repeats` defaults to 7
    (3 when quick). `target` is the length of one repeat in seconds (default 0.03; 0.01
    when quick). `progress`, when given, is called with a short line per (workload, op).
    """
    workload_names = _parse_list(
        workloads if workloads is not None or not quick else QUICK_WORKLOADS,
        list(WORKLOADS),
        "workload",
    )
    op_names = _parse_list(ops if ops is not None or not quick else QUICK_OPS, OPS, "op")
    lib_names = _parse_list(libs, LIBS, "library")
    repeats = repeats if repeats is not None else (3 if quick else 7)
    target = target if target is not None else (0.01 if quick else 0.03)
    if repeats < 1:
        raise ValueError("repeats must be at least 1")

    modules, skipped = load_libs(lib_names)
    with _recursion_limit(10_000):
        rows = _run_rows(workload_names, op_names, modules, repeats, target, progress)
    return {
        "meta": {
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "repeats": repeats,
            "target_s": target,
            "libs": {lib: _version(lib, mod) for lib, mod in modules.items()},
            "skipped": skipped,
        },
        "rows": rows,
    }


def _run_rows(
    workload_names: list[str],
    op_names: list[str],
    modules: dict[str, Any],
    repeats: int,
    target: float,
    progress: Callable[[str], None] | None,
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for wname in workload_names:
        w = Workload(wname, WORKLOADS[wname])
        for op in op_names:
            cases: dict[str, Case] = {}
            row: dict[str, Any] = {"workload": wname, "op": op, "libs": {}}
            for lib, mod in modules.items():
                try:
                    case = _ADAPTERS[lib][1](mod, w, op)
                except Exception as e:  # e.g. building the treedef for eq/hash failed
                    row["libs"][lib] = {"error": f"{type(e).__name__}: {e}"[:300], "correct": False}
                    continue
                if case is None:
                    row["libs"][lib] = {"na": True}
                else:
                    cases[lib] = case
            row["libs"].update(_bench_pair(cases, repeats, target))
            row["libs"] = {lib: row["libs"][lib] for lib in modules if lib in row["libs"]}
            rows.append(row)
            if progress is not None:
                progress(f"{wname:>9} {op:<9} done")
        del w
    return rows


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
    return format_time(entry["median_ns"]) + mark


def _ratio(row: dict[str, Any], a: str, b: str) -> float | None:
    ea, eb = row["libs"].get(a), row["libs"].get(b)
    if not ea or not eb or "median_ns" not in ea or "median_ns" not in eb:
        return None
    return ea["median_ns"] / eb["median_ns"]


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
                    values = by_op[op].get(o, [])
                    gm = math.exp(sum(map(math.log, values)) / len(values)) if values else None
                    cells.append(_fmt_ratio(gm))
                sbody.append(cells)
            lines += ["", *_render(sheader, sbody, left=1)]

    versions = ", ".join(f"{lib} {v}" for lib, v in meta["libs"].items())
    lines += [
        "",
        f"median of {meta['repeats']} repeats; Python {meta['python']}; {versions}",
        *notes,
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Time oxtree, optree, jax.tree_util and dm-tree side by side."
    )
    parser.add_argument("--libs", help=f"comma-separated subset of: {','.join(LIBS)}")
    parser.add_argument("--workloads", help=f"comma-separated subset of: {','.join(WORKLOADS)}")
    parser.add_argument("--ops", help=f"comma-separated subset of: {','.join(OPS)}")
    parser.add_argument("--repeats", type=int, help="repeats per timing (default 7; quick: 3)")
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"3 repeats of ~10 ms on workloads {','.join(QUICK_WORKLOADS)} "
        f"and ops {','.join(QUICK_OPS)} (unless given explicitly)",
    )
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument("--list", action="store_true", help="list workloads, ops and libs")
    parser.add_argument("-q", "--no-progress", action="store_true", help="no progress lines")
    args = parser.parse_args(argv)

    if args.list:
        print("workloads:", ", ".join(WORKLOADS))
        print("ops:      ", ", ".join(OPS))
        print("libs:     ", ", ".join(LIBS))
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
        )
    except ValueError as e:
        parser.error(str(e))
    print(format_table(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
            f.write("\n")
        print(f"results written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
