"""Graph flattening benchmark: oxtree's graph_flatten/graph_unflatten against oxtree's tree
functions and against FlareJax's flatten/unflatten.

Targets, on the acyclic workloads of ``bench.py`` (imported from there):

* ``graph_flatten`` costs at most 2x ``oxtree.tree_flatten`` on every workload;
* ``graph_flatten`` is at least 20x faster than ``flarejax.flatten`` on every workload.

``graph_unflatten`` against ``tree_unflatten`` and ``flarejax.unflatten`` is reported too, as are
``graph_to_dict``/``graph_from_dict`` (oxtree's path-keyed view, the same kind of output as
FlareJax's flatten). Two graph-only workloads follow, with sharing and a cycle, where tree
flattening does not apply:

* ``dag1k``   100 lists of 10 ints, each referred to three times: from a list, a dict and a tuple
* ``ring1k``  1,000 one-int lists, each holding the next, the last holding the first

Timing: every measurement is the best of ``--inner`` timeit calls (each about 20 ms long,
garbage collector off); the libraries are interleaved run by run, and the figure shown is the
median over ``--runs`` runs. Before timing, each result is checked once (same leaf objects,
same structure, or FlareJax's own round trip); a failed check puts "!" after the time, and a
call that raises shows "error" (FlareJax cannot rebuild namedtuples, so its unflatten of
``mixed1k`` fails: that is its behaviour, not a benchmark fault).

FlareJax is ``pip install flarejax`` (see requirements-bench.txt); for ``custom1k`` and
``dataclass1k`` it gets the same trees made of ``flarejax.Module`` subclasses with the same two
attributes (its only kind of custom node). Without FlareJax installed its columns are skipped.

Usage (from the repository root)::

    .venv/bin/python benchmarks/bench_graph.py                  # everything
    .venv/bin/python benchmarks/bench_graph.py --quick          # fewer runs, smaller workloads
    .venv/bin/python benchmarks/bench_graph.py --workloads mixed1k,gpt2 --runs 9
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import gc
import importlib.metadata
import json
import platform
import statistics
import sys
import timeit
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench
import oxtree

FLATTEN_LIMIT = 2.0  # graph_flatten / tree_flatten must not exceed this
FLAREJAX_FACTOR = 20.0  # flarejax.flatten / graph_flatten must reach this

TREE_WORKLOADS: tuple[str, ...] = tuple(bench.WORKLOADS)
GRAPH_WORKLOADS: tuple[str, ...] = ("dag1k", "ring1k")
QUICK_WORKLOADS: tuple[str, ...] = ("tuple3", "dict10", "mixed1k", "dict10k", "chain500", "gpt2")

# --------------------------------------------------------------------------------------------
# FlareJax


def load_flarejax() -> tuple[Any, str]:
    """(the flarejax module or None, its version or why it is missing)."""
    try:
        with warnings.catch_warnings():
            # beartype warns at import about flarejax's typing.Hashable hints.
            warnings.simplefilter("ignore")
            import flarejax
    except Exception as e:
        return None, f"{type(e).__name__}: {e}"
    return flarejax, importlib.metadata.version("flarejax")


@functools.cache
def _flarejax_classes(flr: Any) -> dict[str, type]:
    """FlareJax Module subclasses with the attributes of bench's Node2 and Data2."""

    class FlrNode2(flr.Module):  # type: ignore[misc, name-defined]
        def __init__(self, a: Any, b: Any) -> None:
            self.a = a
            self.b = b

    class FlrData2(flr.Module):  # type: ignore[misc, name-defined]
        def __init__(self, x: Any, y: Any) -> None:
            self.x = x
            self.y = y

    return {"node": FlrNode2, "dataclass": FlrData2}


def _flr_leaf_count(flat: dict[Any, Any]) -> int:
    """Entries of FlareJax's view that hold a value (not a class, not a reference)."""
    return sum(
        1
        for key, value in flat.items()
        if key.path[-1].key != "__class__" and not _is_flr_ref(value)
    )


def _same_view(a: dict[Any, Any], b: dict[Any, Any]) -> bool:
    """Two path-keyed views (oxtree's or FlareJax's) with the same paths and, at each, the
    very same object or an equal reference/options entry (leaves may be numpy arrays, so
    values are never compared with == unless they are of those small kinds)."""
    small = (oxtree.GraphRef, tuple, int, str)
    return a.keys() == b.keys() and all(
        a[k] is b[k]
        or (
            type(a[k]) is type(b[k])
            and (isinstance(a[k], small) or _is_flr_ref(a[k]))
            and a[k] == b[k]
        )
        for k in a
    )


def _is_flr_ref(value: Any) -> bool:
    return type(value).__name__ == "PathLookup"


# --------------------------------------------------------------------------------------------
# Workloads


def make_dag1k() -> Any:
    blocks = [list(range(i * 10, i * 10 + 10)) for i in range(100)]
    return {
        "list": blocks,
        "dict": {f"b{i:03d}": b for i, b in enumerate(blocks)},
        "tuple": tuple(blocks),
    }


def make_ring1k() -> Any:
    ring: list[list[Any]] = [[i] for i in range(1000)]
    for node, nxt in zip(ring, ring[1:] + ring[:1], strict=True):
        node.append(nxt)
    return ring[0]


GRAPH_BUILDERS: dict[str, Callable[[], Any]] = {"dag1k": make_dag1k, "ring1k": make_ring1k}


@dataclasses.dataclass
class Trees:
    """One workload's tree for oxtree and for FlareJax, with oxtree's reference answers."""

    name: str
    tree: Any
    flr_tree: Any  # None when FlareJax is not measured
    workload: bench.Workload | None  # bench's reference answers (tree workloads only)


def _trees(name: str, flr: Any) -> Trees:
    if name in GRAPH_BUILDERS:
        tree = GRAPH_BUILDERS[name]()
        return Trees(name, tree, GRAPH_BUILDERS[name]() if flr else None, None)
    kind = bench.CUSTOM_WORKLOADS.get(name)
    builder = bench.WORKLOADS[name]
    if kind is None:
        w = bench.Workload(name, builder)
        return Trees(name, w.tree, w.tree if flr else None, w)
    cls = bench._custom_class("oxtree", oxtree, kind)
    w = bench.Workload(name, functools.partial(builder, cls))
    flr_tree = builder(_flarejax_classes(flr)[kind]) if flr else None
    return Trees(name, w.tree, flr_tree, w)


# --------------------------------------------------------------------------------------------
# Cases: (statement, globals, check) per column, built like bench.Case.

FLATTEN_COLS = ("tree_flatten", "graph_flatten", "graph_to_dict", "flarejax.flatten")
UNFLATTEN_COLS = ("tree_unflatten", "graph_unflatten", "graph_from_dict", "flarejax.unflatten")


def _cases(t: Trees, flr: Any) -> dict[str, bench.Case]:
    cases: dict[str, bench.Case] = {}
    w = t.workload
    g_leaves, gd = oxtree.graph_flatten(t.tree)
    view = oxtree.graph_to_dict(t.tree)

    def flat_ok(r: Any) -> bool:
        """Tree workloads: the tree's leaves, no references, the tree's structure; graph
        workloads: the leaves and graphdef of a first call."""
        if w is None:
            return r[1] == gd and bench._same_objects(r[0], g_leaves)
        spec = oxtree.tree_structure(t.tree)
        return bench._same_objects(r[0], w.leaves) and r[1].num_refs == 0 and r[1].treespec == spec

    def unflat_ok(r: Any) -> bool:
        """A new object with the input's structure (and sharing) and the same leaf objects."""
        if w is not None:
            return w.is_tree_like_input(r)
        leaves, again = oxtree.graph_flatten(r)
        return r is not t.tree and again == gd and bench._same_objects(leaves, g_leaves)

    if w is not None:
        leaves, spec = oxtree.tree_flatten(t.tree)
        cases["tree_flatten"] = bench.Case(
            "f(t)",
            {"f": oxtree.tree_flatten, "t": t.tree},
            lambda r: bench._same_objects(r[0], w.leaves),
        )
        cases["tree_unflatten"] = bench.Case(
            "f(s, v)", {"f": oxtree.tree_unflatten, "s": spec, "v": leaves}, w.is_tree_like_input
        )
    cases["graph_flatten"] = bench.Case("f(t)", {"f": oxtree.graph_flatten, "t": t.tree}, flat_ok)
    cases["graph_to_dict"] = bench.Case(
        "f(t)", {"f": oxtree.graph_to_dict, "t": t.tree}, lambda r: _same_view(r, view)
    )
    cases["graph_unflatten"] = bench.Case(
        "f(s, v)", {"f": oxtree.graph_unflatten, "s": gd, "v": g_leaves}, unflat_ok
    )
    cases["graph_from_dict"] = bench.Case(
        "f(d)", {"f": oxtree.graph_from_dict, "d": view}, unflat_ok
    )
    if flr is not None:
        flat = flr.flatten(t.flr_tree)
        n_values = len(w.leaves_none) if w is not None else None
        cases["flarejax.flatten"] = bench.Case(
            "f(t)",
            {"f": flr.flatten, "t": t.flr_tree},
            lambda r: _same_view(r, flat) and (n_values is None or _flr_leaf_count(r) == n_values),
        )
        cases["flarejax.unflatten"] = bench.Case(
            "f(d)",
            {"f": flr.unflatten, "d": flat},
            lambda r: r is not t.flr_tree and _same_view(flr.flatten(r), flat),
        )
    return cases


# --------------------------------------------------------------------------------------------
# Timing


def _time(cases: dict[str, bench.Case], runs: int, inner: int, target: float) -> dict[str, Any]:
    """{column: {"median_ns", "runs_ns", "correct"} or {"error"}}, columns interleaved."""
    out: dict[str, Any] = {}
    timers: dict[str, tuple[timeit.Timer, int]] = {}
    for col, case in cases.items():
        try:
            correct = bool(case.check(case.call()))
        except Exception as e:
            out[col] = {"error": f"{type(e).__name__}: {e}"[:200]}
            continue
        timer = timeit.Timer(case.stmt, globals=case.namespace)
        timers[col] = (timer, bench._calibrate(timer, target))
        out[col] = {"correct": correct, "runs_ns": []}
    order = list(timers)
    for r in range(runs):
        shift = r % len(order) if order else 0
        for col in order[shift:] + order[:shift]:
            timer, number = timers[col]
            best = min(timer.repeat(repeat=inner, number=number)) / number
            out[col]["runs_ns"].append(best * 1e9)
    for col in timers:
        out[col]["median_ns"] = statistics.median(out[col]["runs_ns"])
    return out


def run(
    workloads: Sequence[str], runs: int, inner: int, target: float, use_flarejax: bool = True
) -> dict[str, Any]:
    flr, flr_version = load_flarejax() if use_flarejax else (None, "not requested")
    rows = []
    with bench._recursion_limit(20_000):  # FlareJax recurses (twice) per level of chain500
        for name in workloads:
            t = _trees(name, flr)
            gc.collect()
            rows.append({"workload": name, "cols": _time(_cases(t, flr), runs, inner, target)})
            print(f"{name:>11} done", file=sys.stderr, flush=True)
            del t
    return {
        "meta": {
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "runs": runs,
            "inner": inner,
            "oxtree": importlib.metadata.version("oxtree"),
            "flarejax": flr_version if flr is not None else None,
            "flarejax_missing": None if flr is not None else flr_version,
        },
        "rows": rows,
    }


# --------------------------------------------------------------------------------------------
# Reporting


def _ns(row: dict[str, Any], col: str) -> float | None:
    entry = row["cols"].get(col)
    return entry.get("median_ns") if entry else None


def _cell(row: dict[str, Any], col: str) -> str:
    entry = row["cols"].get(col)
    if entry is None:
        return "-"
    if "error" in entry:
        return "error"
    return bench.format_time(entry["median_ns"]) + ("" if entry["correct"] else " !")


def _ratio(row: dict[str, Any], num: str, den: str) -> float | None:
    a, b = _ns(row, num), _ns(row, den)
    return None if a is None or b is None else a / b


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}x" if value < 100 else f"{value:.0f}x"


def format_report(results: dict[str, Any]) -> str:
    rows = results["rows"]
    meta = results["meta"]
    lines: list[str] = []
    for title, cols, ratios in (
        (
            "flatten",
            FLATTEN_COLS,
            [
                ("graph/tree", "graph_flatten", "tree_flatten"),
                ("flr/graph", "flarejax.flatten", "graph_flatten"),
                ("flr/to_dict", "flarejax.flatten", "graph_to_dict"),
            ],
        ),
        (
            "unflatten",
            UNFLATTEN_COLS,
            [
                ("graph/tree", "graph_unflatten", "tree_unflatten"),
                ("flr/graph", "flarejax.unflatten", "graph_unflatten"),
                ("flr/from_dict", "flarejax.unflatten", "graph_from_dict"),
            ],
        ),
    ):
        header = ["workload", *cols, *(r[0] for r in ratios)]
        body = [
            [
                row["workload"],
                *(_cell(row, c) for c in cols),
                *(_fmt(_ratio(row, n, d)) for _, n, d in ratios),
            ]
            for row in rows
        ]
        lines += [f"== {title} (median of {meta['runs']} runs, each the best of {meta['inner']})"]
        lines += bench._render(header, body, left=1)
        lines.append("")
    for row in rows:
        for col, entry in row["cols"].items():
            if "error" in entry:
                lines.append(f"error: {row['workload']} / {col}: {entry['error']}")
    if any(not e.get("correct", True) for row in rows for e in row["cols"].values()):
        lines.append("'!' marks a result that failed its correctness check.")
    lines.append(
        f"Python {meta['python']}; oxtree {meta['oxtree']}; "
        + (
            f"flarejax {meta['flarejax']}"
            if meta["flarejax"]
            else f"flarejax skipped ({meta['flarejax_missing']})"
        )
    )
    lines += ["", format_targets(results)]
    return "\n".join(lines)


def format_targets(results: dict[str, Any]) -> str:
    """Pass/fail of the two targets, over the tree workloads (the graph-only ones have no
    tree_flatten to compare with)."""
    rows = [r for r in results["rows"] if r["workload"] in TREE_WORKLOADS]
    cost = [(r["workload"], _ratio(r, "graph_flatten", "tree_flatten")) for r in rows]
    cost = [(w, v) for w, v in cost if v is not None]
    speed = [(r["workload"], _ratio(r, "flarejax.flatten", "graph_flatten")) for r in rows]
    speed = [(w, v) for w, v in speed if v is not None]
    lines = ["targets (tree workloads)"]
    if cost:
        worst = max(cost, key=lambda x: x[1])
        ok = worst[1] <= FLATTEN_LIMIT
        gm = bench._geomean([v for _, v in cost])
        lines.append(
            f"  graph_flatten <= {FLATTEN_LIMIT:g}x tree_flatten:  {'PASS' if ok else 'FAIL'}"
            f"  (worst {worst[0]} {worst[1]:.2f}x, geomean {gm:.2f}x)"
        )
    if speed:
        worst = min(speed, key=lambda x: x[1])
        ok = worst[1] >= FLAREJAX_FACTOR
        gm = bench._geomean([v for _, v in speed])
        lines.append(
            f"  graph_flatten >= {FLAREJAX_FACTOR:g}x faster than flarejax.flatten:  "
            f"{'PASS' if ok else 'FAIL'}  (worst {worst[0]} {worst[1]:.0f}x, geomean {gm:.0f}x)"
        )
    else:
        why = results["meta"]["flarejax_missing"] or "no workload measured"
        lines.append(f"  flarejax target: not measured (flarejax: {why})")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    all_names = (*TREE_WORKLOADS, *GRAPH_WORKLOADS)
    parser.add_argument("--workloads", help=f"comma-separated subset of: {','.join(all_names)}")
    parser.add_argument("--runs", type=int, help="runs per measurement (default 5; quick: 3)")
    parser.add_argument("--inner", type=int, default=3, help="timeit calls per run (best taken)")
    parser.add_argument(
        "--quick", action="store_true", help=f"3 runs over {','.join(QUICK_WORKLOADS)}"
    )
    parser.add_argument("--no-flarejax", action="store_true", help="skip FlareJax")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args(argv)
    default = (*QUICK_WORKLOADS, *GRAPH_WORKLOADS) if args.quick else all_names
    try:
        names = bench._parse_list(args.workloads or list(default), all_names, "workload")
    except ValueError as e:
        parser.error(str(e))
    runs = args.runs or (3 if args.quick else 5)
    if runs < 1 or args.inner < 1:
        parser.error("--runs and --inner must be at least 1")
    results = run(names, runs, args.inner, 0.01 if args.quick else 0.02, not args.no_flarejax)
    print(format_report(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
        print(f"results written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
