"""One table of oxtree's speed against jax per Python version, from bench.py's JSON files.

``make bench-matrix`` runs ``benchmarks/bench.py --json target/bench-3.X.json`` on every
Python version found (tools/matrix.sh), then this script::

    python benchmarks/bench_versions.py target/bench-3.11.json target/bench-3.12.json ...

For each file it prints the geometric mean over the workloads of oxtree's time divided by
jax's, per op, and checks the targets: flatten, leaves and structure at most 0.25x, unflatten
at most 0.45x, map over one and over two trees at most 0.35x, flatten_with_path at most 0.3x;
and per cell: none above 0.8x, the custom-node and dataclass workloads at most 0.6x on every
op, the 3-leaf tuple at most 0.5x. A miss is marked with "!" (a cell's in the last column) and
makes the exit status 1; so does a result that failed its correctness check.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench

# The most oxtree/jax may be, per op (geometric mean over the workloads).
TARGETS: dict[str, float] = {
    "flatten": 0.25,
    "leaves": 0.25,
    "structure": 0.25,
    "unflatten": 0.45,
    "map1": 0.35,
    "map2": 0.35,
    "flatten_with_path": 0.3,
}

# The most one (workload, op) cell may be: every cell, then the workloads with their own bound.
CELL_TARGET = 0.8
WORKLOAD_TARGETS: dict[str, float] = {"custom1k": 0.6, "dataclass1k": 0.6, "tuple3": 0.5}


def summarize(paths: Sequence[str]) -> tuple[str, bool]:
    """The markdown table for the result files `paths`, and whether every target was met."""
    ops = list(TARGETS)
    header = [
        "Python",
        "jax",
        *(f"{op} (<= {TARGETS[op]}x)" for op in ops),
        "cells over their bound",
        "slower than jax",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    met = True
    for path in paths:
        results = json.loads(Path(path).read_text())
        meta = results["meta"]
        ratios: dict[str, list[float]] = {}
        slower: list[str] = []
        over: list[str] = []
        for row in results["rows"]:
            if any(e.get("correct") is False for e in row["libs"].values()):
                met = False
                slower.append(f"{row['workload']} {row['op']}: wrong result")
            value = bench._ratio(row, "oxtree", "jax")
            if value is None:
                continue
            ratios.setdefault(row["op"], []).append(value)
            bound = WORKLOAD_TARGETS.get(row["workload"], CELL_TARGET)
            if value > bound and row["op"] in TARGETS:
                over.append(f"{row['workload']} {row['op']} {value:.2f}x (<= {bound}x) !")
            if value > 1.0:
                slower.append(f"{row['workload']} {row['op']} {value:.2f}x")
        cells = [meta["python"].split()[0], meta["libs"].get("jax", "-")]
        for op in ops:
            gm = bench._geomean(ratios.get(op, []))
            if gm is None:
                cells.append("-")
                continue
            ok = gm <= TARGETS[op]
            met = met and ok
            cells.append(bench._fmt_ratio(gm) + ("" if ok else " !"))
        met = met and not slower and not over
        cells.append(", ".join(over) or "none")
        cells.append(", ".join(slower) or "none")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines), met


def main(argv: Sequence[str] | None = None) -> int:
    paths = list(sys.argv[1:] if argv is None else argv)
    if not paths:
        print(__doc__, file=sys.stderr)
        return 2
    table, met = summarize(paths)
    print(table)
    print("every target met" if met else "targets missed: marked ! above")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
