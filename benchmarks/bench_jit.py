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

A second table times the same identity on a *model*: ``n`` parameters (10, 300, 3,000
float32 arrays of shape (4,)) held by ``n / 2`` linear layers (a weight, a bias and a
configuration string each) in a list held by a network module. The same model is written
for each library: an ``oxtree.Module`` called through ``jax.jit`` (to which a Module is one
node) and through ``oxtree.jax.filter_jit``, a Flax NNX ``nnx.Module`` through ``nnx.jit``,
and an ``equinox.Module`` through ``equinox.filter_jit``. ``fj/jit`` is filter_jit's time
over jax.jit's on the same Module. Its last columns time ``oxtree.graph_flatten`` and
``oxtree.tree_flatten`` of the oxtree Module (``graph/tree``: their ratio).

A third table (``--only sharded``) times the same Module with its shardings
(``oxtree.sharding.named_shardings`` on a mesh of the process's devices) as ``in_shardings``
and ``out_shardings``, through ``jax.jit`` and ``filter_jit``; run it with
``XLA_FLAGS=--xla_force_host_platform_device_count=8`` for a mesh of 8 host devices.

The libraries are interleaved repeat by repeat, so machine noise hits them alike; each
repeat times enough calls to take about 50 ms (garbage collector off); the figure is the
median per-call time over the repeats. Before timing, every library's result is checked
against the input tree. On a loaded machine, ``--clock cpu --stat best`` times the calling
thread's CPU time and keeps the fastest repeat: what other processes take is left out, so
small differences (a few tenths of a microsecond a call) stand out of the noise.

Usage (from the repository root; equinox and flax come from ``requirements-bench.txt``)::

    .venv/bin/python benchmarks/bench_jit.py              # 9 repeats
    .venv/bin/python benchmarks/bench_jit.py --repeats 21
    .venv/bin/python benchmarks/bench_jit.py --only models --clock cpu --stat best --repeats 31
"""

from __future__ import annotations

import argparse
import functools
import gc
import statistics
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import oxtree
import oxtree.jax as oxjax
from oxtree.module import Module, Parameter

try:
    import equinox as eqx
except ImportError:  # a benchmark-only dependency: skip its column without it
    eqx = None  # type: ignore[assignment]
try:
    from flax import nnx
except ImportError:  # likewise
    nnx = None  # type: ignore[assignment]


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


# How a repeat is timed and how repeats are summed up (set from the command line).
CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.thread_time}
STATS: dict[str, Callable[[list[float]], float]] = {"median": statistics.median, "best": min}
clock = CLOCKS["wall"]
stat = STATS["median"]


def _time_one(call: Callable[[Any], Any], tree: Any, budget: float) -> float:
    """Per-call seconds of `call(tree)`, over as many calls as fit in about `budget`."""
    n = 1
    while True:
        start = clock()
        for _ in range(n):
            out = call(tree)
        jax.block_until_ready(out)
        elapsed = clock() - start
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
            row[lname] = stat(times)
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


# ---------------------------------------------------------------------------------------------
# Models: one network written for each library
# ---------------------------------------------------------------------------------------------

MODEL_SIZES = (10, 300, 3000)


def _array(i: int) -> Any:
    return jnp.full((4,), float(i), dtype=jnp.float32)


class OxLinear(Module):
    weight: Parameter
    bias: Parameter

    def __init__(self, i: int) -> None:
        self.weight = _array(i)
        self.bias = _array(-i)
        self.act = "relu"


class OxNet(Module):
    def __init__(self, n: int) -> None:
        self.layers = [OxLinear(i) for i in range(n // 2)]
        self.name = "net"


def _nnx_model(n: int) -> Any:
    class Linear(nnx.Module):  # type: ignore[misc,name-defined]
        def __init__(self, i: int) -> None:
            self.weight = nnx.Param(_array(i))
            self.bias = nnx.Param(_array(-i))
            self.act = "relu"

    class Net(nnx.Module):  # type: ignore[misc,name-defined]
        def __init__(self, n: int) -> None:
            self.layers = nnx.List([Linear(i) for i in range(n // 2)])
            self.name = "net"

    return Net(n)


def _eqx_model(n: int) -> Any:
    class Linear(eqx.Module):  # type: ignore[misc,name-defined]
        weight: jax.Array
        bias: jax.Array
        act: str = eqx.field(static=True)

    class Net(eqx.Module):  # type: ignore[misc,name-defined]
        layers: list[Any]
        name: str = eqx.field(static=True)

    return Net([Linear(_array(i), _array(-i), "relu") for i in range(n // 2)], "net")


def _arrays_of(model: Any) -> list[Any]:
    """A model's parameter arrays in order, whatever library made it."""
    if nnx is not None and isinstance(model, nnx.Module):
        model = nnx.state(model)
    return [x for x in jax.tree_util.tree_leaves(model) if isinstance(x, jax.Array)]


MODEL_LIBS = ("floor", "jax.jit", "filter_jit", "nnx.jit", "eqx")


def _model_callers(n: int) -> dict[str, tuple[Callable[[Any], Any], Any]]:
    """Each library's compiled identity and the model it is called on."""
    ox = OxNet(n)
    callers: dict[str, tuple[Callable[[Any], Any], Any]] = {
        "floor": (make_floor(ox), ox),
        "jax.jit": (jax.jit(_body), ox),
        "filter_jit": (oxjax.filter_jit(_body), ox),
    }
    if nnx is not None:
        callers["nnx.jit"] = (nnx.jit(_body), _nnx_model(n))
    if eqx is not None:
        callers["eqx"] = (eqx.filter_jit(_body), _eqx_model(n))
    return callers


SHARDED_LIBS = ("jax.jit", "filter_jit")


def run_sharded(repeats: int = 9, budget: float = 0.05) -> dict[int, dict[str, float | None]]:
    """Median per-call seconds of the identity on the model, compiled with its shardings
    (``oxtree.sharding.named_shardings`` on a mesh of this process's devices) as
    ``in_shardings`` and ``out_shardings``, by ``jax.jit`` and by ``filter_jit``."""
    from oxtree.sharding import filter_shard, named_shardings

    mesh = jax.make_mesh((len(jax.devices()),), ("d",))
    results: dict[int, dict[str, float | None]] = {}
    for n in MODEL_SIZES:
        model = OxNet(n)
        shardings = named_shardings(model, mesh)
        model = filter_shard(model, shardings)
        callers = {
            "jax.jit": jax.jit(_body, in_shardings=(shardings,), out_shardings=shardings),
            "filter_jit": oxjax.filter_jit(
                _body, in_shardings=(shardings,), out_shardings=shardings
            ),
        }
        for lname, call in callers.items():
            out = call(model)
            if not all(
                np.array_equal(np.asarray(a), np.asarray(b))
                for a, b in zip(_arrays_of(out), _arrays_of(model), strict=True)
            ):
                raise AssertionError(f"{lname} gave a wrong result on the {n}-parameter model")
        samples: dict[str, list[float]] = {name: [] for name in callers}
        gc.disable()
        try:
            for _ in range(repeats):
                for name, call in callers.items():
                    samples[name].append(_time_one(call, model, budget))
        finally:
            gc.enable()
        results[n] = {name: stat(times) for name, times in samples.items()}
    return results


def format_sharded_table(results: dict[int, dict[str, float | None]]) -> str:
    head = f"{'params':<8}" + "".join(f"{lib:>12}" for lib in SHARDED_LIBS) + f"{'fj/jit':>9}"
    lines = [head, "-" * len(head)]
    for n, row in results.items():
        cells = "".join(f" {_us(row[lib])}" for lib in SHARDED_LIBS)
        lines.append(f"{n:<8}{cells}{_ratio(row['filter_jit'], row['jax.jit'])}")
    return "\n".join(lines)


def _time_flatten(fn: Callable[[], Any], budget: float) -> float:
    return _time_one(lambda _: fn(), None, budget)


def run_models(repeats: int = 9, budget: float = 0.05) -> dict[int, dict[str, float | None]]:
    """Median per-call seconds by model size and library, and of the oxtree Module's graph
    and tree flatten ("graph", "tree")."""
    results: dict[int, dict[str, float | None]] = {}
    for n in MODEL_SIZES:
        row = results[n] = dict.fromkeys((*MODEL_LIBS, "graph", "tree"))
        callers = _model_callers(n)
        ox = callers["jax.jit"][1]
        for lname, (call, model) in callers.items():
            out = call(model)  # compiles
            if lname != "floor" and not all(
                np.array_equal(np.asarray(a), np.asarray(b))
                for a, b in zip(_arrays_of(out), _arrays_of(model), strict=True)
            ):
                raise AssertionError(f"{lname} gave a wrong result on the {n}-parameter model")
        timed: dict[str, Callable[[], float]] = {
            lname: (lambda call=call, model=model: _time_one(call, model, budget))
            for lname, (call, model) in callers.items()
        }
        timed["graph"] = functools.partial(
            _time_flatten, functools.partial(oxtree.graph_flatten, ox), budget
        )
        timed["tree"] = functools.partial(
            _time_flatten, functools.partial(oxtree.tree_flatten, ox), budget
        )
        samples: dict[str, list[float]] = {name: [] for name in timed}
        gc.disable()
        try:
            for _ in range(repeats):
                for name, time_it in timed.items():
                    samples[name].append(time_it())
        finally:
            gc.enable()
        for name, times in samples.items():
            row[name] = stat(times)
    return results


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:>9.2f}" if a is not None and b else f"{'n/a':>9}"


def format_models_table(results: dict[int, dict[str, float | None]]) -> str:
    head = f"{'params':<8}" + "".join(f"{lib:>12}" for lib in MODEL_LIBS) + f"{'fj/jit':>9}"
    head += " |" + f"{'graph':>11}{'tree':>11}{'graph/tree':>11}"
    lines = [head, "-" * len(head)]
    for n, row in results.items():
        cells = "".join(f" {_us(row[lib])}" for lib in MODEL_LIBS)
        cells += _ratio(row["filter_jit"], row["jax.jit"]) + " |"
        cells += _us(row["graph"]) + _us(row["tree"]) + f"{_ratio(row['graph'], row['tree']):>11}"
        lines.append(f"{n:<8}{cells}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--budget", type=float, default=0.05, help="seconds per repeat")
    parser.add_argument(
        "--only",
        choices=("trees", "models", "sharded"),
        default=None,
        help="run one of the tables",
    )
    parser.add_argument(
        "--clock", choices=tuple(CLOCKS), default="wall", help="wall time or the thread's CPU time"
    )
    parser.add_argument(
        "--stat", choices=tuple(STATS), default="median", help="the median or fastest repeat"
    )
    args = parser.parse_args()
    global clock, stat
    clock, stat = CLOCKS[args.clock], STATS[args.stat]
    flax_version = "not installed"
    if nnx is not None:
        import flax

        flax_version = flax.__version__
    print(
        f"jax {jax.__version__}, equinox {getattr(eqx, '__version__', 'not installed')}, "
        f"flax {flax_version}"
    )
    if args.only in (None, "trees"):
        print(format_table(run(args.repeats, args.budget)))
    if args.only in (None, "sharded"):
        print(
            f"Sharded models ({args.stat} per-call {args.clock} times; in_shardings and "
            f"out_shardings from the model's layout on {len(jax.devices())} device(s))"
        )
        print(format_sharded_table(run_sharded(args.repeats, args.budget)))
        print()
    if args.only in (None, "models"):
        if args.only is None:
            print()
        print(
            f"Models ({args.stat} per-call {args.clock} times; floor: jax.jit on the tuple of "
            "the model's arrays)"
        )
        print(format_models_table(run_models(args.repeats, args.budget)))


if __name__ == "__main__":
    main()
