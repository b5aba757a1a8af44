"""Dispatch overhead of ``oxtree.jax.filter_jit`` against ``jax.jit`` and ``equinox.filter_jit``.

Every library compiles the same function, ``lambda tree: tree``, and is then called again and
again on an already-compiled signature, so what is timed is the cost of a call: flattening
the arguments, looking up the compiled executable, running it (the same XLA program for every
library, which does nothing) and rebuilding the result, every array of which is a new JAX
array. JAX dispatches asynchronously; each timed batch of calls ends by waiting for the last
result.

Workloads:

* ``arrays10``   a dict of 10 float32 arrays of shape (4,)
* ``arrays300``  a dict of 300 such arrays
* ``mixed300``   ``arrays300`` plus 60 static leaves (str, int, float, None) in nested
  dicts and lists: a model's hyperparameters. ``jax.jit`` cannot take it (its static
  leaves are not arrays), so that column is n/a.

The column ``floor`` is the least a call can cost: the same compiled identity called on the
tuple of the workload's arrays, flattened beforehand. A library's *overhead* (``+jax.jit``,
``+oxtree``, ``+equinox``) is its time less the floor: flattening, cache lookups and
rebuilding the result. ``ox/eqx`` is oxtree's overhead divided by equinox's.

The libraries are interleaved repeat by repeat, so machine noise hits them alike; each
repeat times enough calls to take about 50 ms (garbage collector off); the figure is the
median per-call time over the repeats. Before timing, every library's result is checked
against the input tree.

Usage (from the repository root; equinox comes from ``requirements-bench.txt``)::

    .venv/bin/python benchmarks/bench_jit.py              # 9 repeats
    .venv/bin/python benchmarks/bench_jit.py --repeats 21
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import oxtree.jax as oxjax

try:
    import equinox as eqx
except ImportError:  # a benchmark-only dependency: skip its column without it
    eqx = None  # type: ignore[assignment]


def _body(tree: Any) -> Any:
    return tree


def make_workloads() -> dict[str, Any]:
    def arrays(n: int) -> dict[str, Any]:
        return {f"w{i:03d}": jnp.full((4,), float(i), dtype=jnp.float32) for i in range(n)}

    hyper = {
        f"layer{i}": {"act": "relu", "width": 64 + i, "dropout": 0.1, "extra": [None, str(i)]}
        for i in range(15)
    }
    return {
        "arrays10": arrays(10),
        "arrays300": arrays(300),
        "mixed300": {"params": arrays(300), "config": hyper},
    }


def make_callers() -> dict[str, Callable[[Any], Any]]:
    callers: dict[str, Callable[[Any], Any]] = {
        "jax.jit": jax.jit(_body),
        "oxtree": oxjax.filter_jit(_body),
    }
    if eqx is not None:
        callers["equinox"] = eqx.filter_jit(_body)
    return callers


def make_floor(tree: Any) -> Callable[[Any], Any]:
    """The least a call can cost: a compiled identity on the tuple of the tree's arrays,
    flattened beforehand (the tree passed in is ignored)."""
    arrays = tuple(x for x in jax.tree_util.tree_leaves(tree) if isinstance(x, jax.Array))
    compiled = jax.jit(_body)
    return lambda _: compiled(arrays)


def _time_one(call: Callable[[Any], Any], tree: Any, budget: float) -> float:
    """Per-call seconds of `call(tree)`, over as many calls as fit in about `budget`."""
    n = 1
    while True:
        start = time.perf_counter()
        for _ in range(n):
            out = call(tree)
        jax.block_until_ready(out)
        elapsed = time.perf_counter() - start
        if elapsed >= budget:
            return elapsed / n
        n = max(n * 2, int(n * budget / max(elapsed, 1e-9)) + 1)


def _same(a: Any, b: Any) -> bool:
    la, ta = jax.tree_util.tree_flatten(a)
    lb, tb = jax.tree_util.tree_flatten(b)
    return str(ta) == str(tb) and all(
        np.array_equal(np.asarray(x), np.asarray(y)) if isinstance(x, jax.Array) else x == y
        for x, y in zip(la, lb, strict=True)
    )


LIBS = ("floor", "jax.jit", "oxtree", "equinox")


def run(repeats: int = 9, budget: float = 0.05) -> dict[str, dict[str, float | None]]:
    """Median per-call seconds, by workload and library (None where not applicable)."""
    workloads = make_workloads()
    callers = make_callers()
    results: dict[str, dict[str, float | None]] = {}
    for wname, tree in workloads.items():
        row = results[wname] = dict.fromkeys(LIBS)
        runnable = {"floor": make_floor(tree)}
        runnable["floor"](tree)  # compiles
        for lname, call in callers.items():
            try:
                out = call(tree)  # compiles
            except TypeError:
                continue  # jax.jit on static leaves
            if not _same(out, tree):
                raise AssertionError(f"{lname} gave a wrong result on {wname}")
            runnable[lname] = call
        samples: dict[str, list[float]] = {name: [] for name in runnable}
        gc.disable()
        try:
            for _ in range(repeats):
                for lname, call in runnable.items():
                    samples[lname].append(_time_one(call, tree, budget))
        finally:
            gc.enable()
        for lname, times in samples.items():
            row[lname] = statistics.median(times)
    return results


def _us(seconds: float | None) -> str:
    return f"{'n/a':>11}" if seconds is None else f"{seconds * 1e6:>9.1f}us"


def _less(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def format_table(results: dict[str, dict[str, float | None]]) -> str:
    """Times, then each library's overhead (its time less the floor's) and oxtree's overhead
    as a fraction of equinox's."""
    over = ("jax.jit", "oxtree", "equinox")
    head = f"{'workload':<10}" + "".join(f"{lib:>11}" for lib in LIBS)
    head += " |" + "".join(f"{'+' + lib:>11}" for lib in over) + f"{'ox/eqx':>8}"
    lines = [head, "-" * len(head)]
    for wname, row in results.items():
        floor = row["floor"]
        extra = {lib: _less(row[lib], floor) for lib in over}
        cells = "".join(_us(row[lib]) for lib in LIBS) + " |"
        cells += "".join(_us(extra[lib]) for lib in over)
        ox, eq = extra["oxtree"], extra["equinox"]
        cells += f"{ox / eq:>8.2f}" if ox is not None and eq else f"{'n/a':>8}"
        lines.append(f"{wname:<10}{cells}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--budget", type=float, default=0.05, help="seconds per repeat")
    args = parser.parse_args()
    print(f"jax {jax.__version__}, equinox {getattr(eqx, '__version__', 'not installed')}")
    print(format_table(run(args.repeats, args.budget)))


if __name__ == "__main__":
    main()
