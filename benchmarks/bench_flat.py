"""Tree overhead of an optimizer step: ``oxtree.FlatTree`` against ``jax.tree.map`` / optax on
the Module itself and against ``nnx.split`` / ``nnx.update`` on the same model in Flax NNX.

The model: ``n`` parameters (300 and 3,000 float32 arrays of shape (4,)) held by ``n / 2``
linear layers (a weight, a bias and a configuration string each) in a list held by a network
module, written once as an ``oxtree.Module`` and once as an ``nnx.Module``: bench_jit.py's
models, imported from it. The gradients are a fixed tree of the same structure.
A step starts from the same parameters (and optimizer state) every time, so every repeat
does the same work.

Three tables, each for SGD and Adam:

* ``by hand``: the update written as a function of one leaf (SGD ``p - lr * g``; Adam's
  moments and update, returning a tuple), compiled once with ``jax.jit`` so that each leaf
  costs one dispatch. ``floor`` is that function over the leaves in a Python list
  comprehension (Adam's tuples transposed with ``zip``): touching each leaf once, with no
  tree at all. ``FlatTree`` is ``params.map(f, grads)`` (Adam: ``.map(f, grads, mu,
  nu).unzip()``); ``Module`` is ``jax.tree.map`` over the Modules (Adam: then
  ``jax.tree.transpose``); ``nnx`` is ``nnx.split``, the same ``jax.tree.map`` over its
  state, and ``nnx.update`` of the model.
* ``optax``: ``opt.update`` then ``optax.apply_updates`` (``optax.sgd``, ``optax.adam``),
  outside ``jax.jit``. ``floor`` runs them on plain lists of the leaves, JAX's cheapest
  pytree, so what is left is the cost of the tree each library gives optax. ``FlatTree``
  gives it flat trees; ``+write_back`` also writes the new parameters into the live Module
  every step (what ``nnx.update`` does); ``Module`` gives it the Module; ``nnx`` splits the
  model, gives optax the state and updates the model.
* ``jitted``: the same optax step compiled with ``jax.jit`` and called on each library's
  trees (``nnx``: ``nnx.split`` and ``nnx.update`` around the compiled call): the call's
  dispatch, where trees are flattened and rebuilt in JAX's C++ and the libraries' flatten
  functions.

Each cell is the median per-step time over the repeats; ``+lib`` columns are that library's
time less the floor, the tree overhead of a step. Libraries are interleaved repeat by
repeat, with the collector off; every library's new parameters are checked against the
floor's before timing. ``--clock cpu --stat best`` times the thread's CPU time and keeps the
fastest repeat, for a loaded machine.

Usage (from the repository root; optax, equinox and flax come with requirements-dev.txt)::

    .venv/bin/python benchmarks/bench_flat.py
    .venv/bin/python benchmarks/bench_flat.py --repeats 9 --sizes 300
"""

from __future__ import annotations

import argparse
import gc
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import oxtree
from bench_jit import CLOCKS, STATS, OxNet, _nnx_model, nnx  # the same models as bench_jit
from oxtree import FlatTree

LR, B1, B2, EPS = 0.01, 0.9, 0.999, 1e-8


# -- the update of one leaf, compiled once: one dispatch per leaf -----------------------------


@jax.jit
def sgd_leaf(p: Any, g: Any) -> Any:
    return p - LR * g


@jax.jit
def adam_leaf(p: Any, g: Any, m: Any, v: Any) -> tuple[Any, Any, Any]:
    m = B1 * m + (1 - B1) * g
    v = B2 * v + (1 - B2) * g * g
    return p - LR * m / (jnp.sqrt(v) + EPS), m, v


def _leaves(x: Any) -> list[Any]:
    """The parameter arrays of anything a step returns, in order."""
    if isinstance(x, FlatTree):
        return list(x.leaves)
    if nnx is not None and isinstance(x, nnx.Module):
        # NNX orders a layer's leaves by name (bias, weight); the others by registration
        return [v[...] for layer in x.layers for v in (layer.weight, layer.bias)]
    return jax.tree.leaves(x)


# -- the steps ---------------------------------------------------------------------------------


def hand_steps(n: int, optimizer: str) -> dict[str, Callable[[], Any]]:
    model = OxNet(n)
    params = jax.tree.leaves(model)
    grads = [jnp.full_like(p, 0.5) for p in params]
    zeros = [jnp.zeros_like(p) for p in params]
    flat = FlatTree.from_graph(model)
    g_flat = flat.with_leaves(grads)
    z_flat = flat.with_leaves(zeros)
    g_model = jax.tree.unflatten(jax.tree.structure(model), grads)
    z_model = jax.tree.unflatten(jax.tree.structure(model), zeros)
    steps: dict[str, Callable[[], Any]]
    if optimizer == "sgd":
        steps = {
            "floor": lambda: [sgd_leaf(p, g) for p, g in zip(params, grads, strict=True)],
            "FlatTree": lambda: flat.map(sgd_leaf, g_flat),
            "Module": lambda: jax.tree.map(sgd_leaf, model, g_model),
        }
    else:
        outer, inner = jax.tree.structure(model), jax.tree.structure((0, 0, 0))

        def floor_adam() -> Any:
            out = [
                adam_leaf(p, g, m, v)
                for p, g, m, v in zip(params, grads, zeros, zeros, strict=True)
            ]
            new_p, _, _ = zip(*out, strict=True)
            return new_p

        def module_adam() -> Any:
            out = jax.tree.map(adam_leaf, model, g_model, z_model, z_model)
            return jax.tree.transpose(outer, inner, out)[0]

        steps = {
            "floor": floor_adam,
            "FlatTree": lambda: flat.map(adam_leaf, g_flat, z_flat, z_flat).unzip()[0],
            "Module": module_adam,
        }
    if nnx is not None:
        m = _nnx_model(n)
        _, state = nnx.split(m)
        structure = jax.tree.structure(state)
        g_state = jax.tree.unflatten(structure, grads)
        z_state = jax.tree.unflatten(structure, zeros)

        def nnx_step() -> Any:
            _, state = nnx.split(m)
            if optimizer == "sgd":
                new = jax.tree.map(sgd_leaf, state, g_state)
            else:
                out = jax.tree.map(adam_leaf, state, g_state, z_state, z_state)
                new = jax.tree.transpose(
                    jax.tree.structure(state), jax.tree.structure((0, 0, 0)), out
                )[0]
            nnx.update(m, new)
            return m

        steps["nnx"] = nnx_step
    return steps


def _optax(optimizer: str) -> Any:
    return optax.sgd(LR) if optimizer == "sgd" else optax.adam(LR, b1=B1, b2=B2, eps=EPS)


def optax_steps(n: int, optimizer: str, jitted: bool) -> dict[str, Callable[[], Any]]:
    opt = _optax(optimizer)

    def step(params: Any, grads: Any, state: Any) -> Any:
        updates, state = opt.update(grads, state, params)
        return optax.apply_updates(params, updates), state

    run = jax.jit(step) if jitted else step
    model = OxNet(n)
    params = jax.tree.leaves(model)
    grads = [jnp.full_like(p, 0.5) for p in params]
    flat = FlatTree.from_graph(model)
    g_flat = flat.with_leaves(grads)
    g_model = jax.tree.unflatten(jax.tree.structure(model), grads)
    s_list, s_flat, s_model = opt.init(params), opt.init(flat), opt.init(model)
    target = OxNet(n)

    def flat_write_back() -> Any:
        new, _ = run(flat, g_flat, s_flat)
        new.write_back(target)
        return target

    steps: dict[str, Callable[[], Any]] = {
        "floor": lambda: run(params, grads, s_list)[0],
        "FlatTree": lambda: run(flat, g_flat, s_flat)[0],
        "+write_back": flat_write_back,
        "Module": lambda: run(model, g_model, s_model)[0],
    }
    if nnx is not None:
        m = _nnx_model(n)
        _, state = nnx.split(m)
        g_state = jax.tree.unflatten(jax.tree.structure(state), grads)
        s_nnx = opt.init(state)

        def nnx_step() -> Any:
            _, state = nnx.split(m)
            new, _ = run(state, g_state, s_nnx)
            nnx.update(m, new)
            return m

        steps["nnx"] = nnx_step
    return steps


# -- timing ------------------------------------------------------------------------------------

clock = CLOCKS["wall"]
stat = STATS["median"]


def _time_one(step: Callable[[], Any], budget: float) -> float:
    """Per-step seconds, over as many steps as fit in about `budget` (one at least)."""
    n = 1
    while True:
        start = clock()
        for _ in range(n):
            out = step()
        jax.block_until_ready(_leaves(out))
        elapsed = clock() - start
        if elapsed >= budget or n >= 1 << 20:
            return elapsed / n
        n = max(n * 2, int(n * budget / max(elapsed, 1e-9)) + 1)


def _check(steps: dict[str, Callable[[], Any]], what: str) -> None:
    want = _leaves(steps["floor"]())
    for name, step in steps.items():
        got = _leaves(step())
        if len(got) != len(want) or not all(
            np.allclose(np.asarray(a), np.asarray(b), rtol=1e-5)
            for a, b in zip(got, want, strict=True)
        ):
            raise AssertionError(f"{name} gave other parameters than the floor in {what}")


def measure(
    steps: dict[str, Callable[[], Any]], what: str, repeats: int, budget: float
) -> dict[str, float]:
    _check(steps, what)
    samples: dict[str, list[float]] = {name: [] for name in steps}
    gc.collect()
    gc.disable()
    try:
        for _ in range(repeats):
            for name, step in steps.items():
                samples[name].append(_time_one(step, budget))
    finally:
        gc.enable()
    return {name: stat(times) for name, times in samples.items()}


# -- tables ------------------------------------------------------------------------------------


def _ms(seconds: float | None) -> str:
    return f"{'n/a':>10}" if seconds is None else f"{seconds * 1e3:>8.2f}ms"


def format_table(title: str, rows: dict[tuple[str, int], dict[str, float]]) -> str:
    libs = list(next(iter(rows.values())))
    others = [lib for lib in libs if lib != "floor"]
    head = f"{'step':<11}" + "".join(f"{lib:>12}" for lib in libs) + " |"
    head += "".join(f"{'+' + lib:>13}" for lib in others)
    lines = [title, head, "-" * len(head)]
    for (opt, n), row in rows.items():
        cells = "".join(f"{_ms(row.get(lib)):>12}" for lib in libs) + " |"
        cells += "".join(f"{_ms(row[lib] - row['floor']):>13}" for lib in others)
        lines.append(f"{f'{opt} {n}':<11}{cells}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--budget", type=float, default=0.2, help="seconds per repeat")
    parser.add_argument("--sizes", default="300,3000", help="parameter counts, comma-separated")
    parser.add_argument(
        "--only", choices=("hand", "optax", "jitted"), default=None, help="run one table"
    )
    parser.add_argument("--clock", choices=tuple(CLOCKS), default="wall")
    parser.add_argument("--stat", choices=tuple(STATS), default="median")
    args = parser.parse_args()
    global clock, stat
    clock, stat = CLOCKS[args.clock], STATS[args.stat]
    sizes = [int(s) for s in args.sizes.split(",")]
    flax_version = "not installed"
    if nnx is not None:
        import flax

        flax_version = flax.__version__
    print(
        f"jax {jax.__version__}, optax {optax.__version__}, flax {flax_version}, oxtree "
        f"{oxtree.__version__}; {args.stat} per-step {args.clock} times over {args.repeats} "
        "repeats"
    )
    tables = {
        "hand": (
            "By hand (one jitted leaf function per leaf; floor: a list comprehension)",
            lambda n, o: hand_steps(n, o),
        ),
        "optax": (
            "optax outside jit (floor: optax on lists of the leaves)",
            lambda n, o: optax_steps(n, o, jitted=False),
        ),
        "jitted": (
            "optax step under jax.jit (floor: the compiled step on lists of the leaves)",
            lambda n, o: optax_steps(n, o, jitted=True),
        ),
    }
    for key, (title, make) in tables.items():
        if args.only not in (None, key):
            continue
        rows = {
            (opt, n): measure(make(n, opt), f"{key} {opt} {n}", args.repeats, args.budget)
            for opt in ("sgd", "adam")
            for n in sizes
        }
        print()
        print(format_table(title, rows))


if __name__ == "__main__":
    main()
