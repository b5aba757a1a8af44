"""Sharded Modules and filtered transforms on 8 host CPU devices.

Run by tests/sharding/test_sharding.py in a subprocess (XLA's device count must be set before
JAX is imported); prints one JSON record per check: ``[name, ok, detail]``.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import traceback

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"

from typing import Annotated, Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P
from oxtree import Axes, Module, Parameter, Rngs
from oxtree.jax import filter_eval_shape, filter_jit, filter_value_and_grad
from oxtree.sharding import (
    abstract_sharded,
    filter_shard,
    init_sharded,
    logical_axis_rules,
    named_shardings,
    partition_specs,
)


def emit(name: str, ok: bool, detail: Any = "") -> None:
    print(json.dumps([name, bool(ok), str(detail)[:500]]), flush=True)


def check(fn: Any) -> Any:
    try:
        ok, detail = fn()
    except Exception:
        ok, detail = False, traceback.format_exc()[-1500:]
    emit(fn.__name__, ok, detail)
    return fn


class Dense(Module):
    w: Annotated[Parameter[jax.Array], Axes("embed", "mlp")]
    b: Annotated[Parameter[jax.Array], Axes("mlp")]

    def __init__(self, rngs: Rngs, n_in: int, n_out: int) -> None:
        self.w = jax.random.normal(rngs.params(), (n_in, n_out)) / n_in**0.5
        self.b = jnp.zeros(n_out)

    def __call__(self, x: jax.Array) -> jax.Array:
        return x @ self.w + self.b


class Out(Module):
    def __init__(self, rngs: Rngs, n_in: int, n_out: int) -> None:
        w = jax.random.normal(rngs.params(), (n_in, n_out)) / n_in**0.5
        self.register_parameter("w", w, sharding=("mlp", "embed"))

    def __call__(self, x: jax.Array) -> jax.Array:
        return x @ self.w


class MLP(Module):
    def __init__(self, rngs: Rngs) -> None:
        self.up = Dense(rngs, 16, 32)
        self.down = Out(rngs, 32, 16)
        self.tied = self.up  # a shared submodule
        self.register_state("steps", jnp.zeros((), jnp.int32))

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.down(jax.nn.relu(self.tied(x)))


def loss_fn(model: MLP, x: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.mean((model(x) - y) ** 2)


def data() -> tuple[jax.Array, jax.Array]:
    k1, k2 = jax.random.split(jax.random.key(1))
    return jax.random.normal(k1, (32, 16)), jax.random.normal(k2, (32, 16))


def train(model: MLP, x: jax.Array, y: jax.Array, steps: int, **jit: Any) -> list[float]:
    opt = optax.adam(1e-2)
    opt_state = opt.init(model.parameters())

    @filter_jit(**jit)
    def step(model: MLP, opt_state: Any, x: jax.Array, y: jax.Array) -> tuple[Any, Any]:
        value, grads = filter_value_and_grad(loss_fn)(model, x, y)
        updates, opt_state = opt.update(grads.parameters(), opt_state, model.parameters())
        new = optax.apply_updates(model.parameters(), updates)
        trained = model.update(new)
        model.up, model.down, model.tied = trained.up, trained.down, trained.tied
        model.steps = model.steps + 1
        return value, opt_state

    losses = []
    for _ in range(steps):
        value, opt_state = step(model, opt_state, x, y)
        losses.append(float(value))
    return losses


def same_layout(a: Any, b: Any) -> bool:
    """Whether two trees' arrays are laid out alike (``P('m', None)`` is ``P('m')``)."""
    pairs = zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True)
    return all(x.sharding.is_equivalent_to(y.sharding, x.ndim) for x, y in pairs)


def spec_of(x: jax.Array) -> Any:
    """``x``'s PartitionSpec with one entry per dimension."""
    spec = tuple(x.sharding.spec)
    return P(*spec, *([None] * (x.ndim - len(spec))))


def auto_mesh(shape: tuple[int, ...], names: tuple[str, ...]) -> Any:
    return jax.make_mesh(shape, names, axis_types=(AxisType.Auto,) * len(shape))


RULES = [("batch", "data"), ("embed", None), ("mlp", "model")]
x, y = data()
reference = train(MLP(Rngs(0)), x, y, 5)


@check
def annotations_in_treedef() -> tuple[bool, Any]:
    m = MLP(Rngs(0))
    specs = partition_specs(m)
    text = repr(jax.tree_util.tree_structure(m)) + repr(m)
    return (
        specs.up.w == P("embed", "mlp")
        and specs.down.w == P("mlp", "embed")
        and specs.steps == P()
        and specs.tied is specs.up
        and "Axes('embed', 'mlp')" in text,
        (specs, text),
    )


@check
def data_parallel() -> tuple[bool, Any]:
    mesh = auto_mesh((8,), ("data",))
    model = filter_shard(MLP(Rngs(0)), NamedSharding(mesh, P()))
    batch = NamedSharding(mesh, P("data"))
    xs, ys = jax.device_put(x, batch), jax.device_put(y, batch)
    losses = train(model, xs, ys, 5)
    ok = np.allclose(losses, reference, rtol=1e-5, atol=1e-6)
    ok &= model.up.w.sharding.spec == P() and model.tied is model.up
    return ok, (losses, reference)


@check
def model_parallel() -> tuple[bool, Any]:
    mesh = auto_mesh((8,), ("model",))
    with logical_axis_rules([("embed", None), ("mlp", "model")]):
        shardings = named_shardings(MLP(Rngs(0)), mesh)
        model = filter_shard(MLP(Rngs(0)), mesh)
    before = jax.tree_util.tree_map(lambda a: a, model)
    losses = train(
        model, x, y, 5, in_shardings=(shardings, None, None, None), donate_argnames="opt_state"
    )
    ok = np.allclose(losses, reference, rtol=1e-5, atol=1e-6)
    ok &= spec_of(model.up.w) == P(None, "model") and same_layout(before, model)
    ok &= model.tied is model.up
    return ok, (losses, reference, {k: spec_of(v) for k, v in model.state_dict().items()})


@check
def data_and_model_parallel() -> tuple[bool, Any]:
    mesh = auto_mesh((2, 4), ("data", "model"))
    with logical_axis_rules(RULES):
        model = init_sharded(MLP, mesh, Rngs(0))
        shardings = named_shardings(model, mesh)
    before = jax.tree_util.tree_map(lambda a: a, model)
    batch = NamedSharding(mesh, P("data"))
    xs, ys = jax.device_put(x, batch), jax.device_put(y, batch)
    losses = train(model, xs, ys, 5, in_shardings=(shardings, None, batch, batch))
    ok = np.allclose(losses, reference, rtol=1e-5, atol=1e-6)
    ok &= spec_of(model.down.w) == P("model", None) and same_layout(before, model)
    ok &= spec_of(model.up.b) == P("model") and model.tied is model.up
    return ok, (losses, reference, model.down.w.sharding)


@check
def out_shardings_and_write_back() -> tuple[bool, Any]:
    mesh = auto_mesh((2, 4), ("data", "model"))
    with logical_axis_rules(RULES):
        abstract = filter_eval_shape(MLP, Rngs(0))
        shardings = named_shardings(abstract, mesh)
    model = filter_jit(MLP, out_shardings=shardings)(Rngs(0))
    specs = {k: spec_of(v) for k, v in model.state_dict().items()}

    @filter_jit
    def bump(m: MLP) -> None:  # write-back only
        m.up.w = m.up.w * 2.0
        m.steps = m.steps + 1

    bump(model)
    kept = {k: spec_of(v) for k, v in model.state_dict().items()}
    return specs == kept and specs["up.w"] == P(None, "model"), (specs, kept)


@check
def shared_parameter_sharded_once() -> tuple[bool, Any]:
    mesh = auto_mesh((8,), ("model",))
    s = NamedSharding(mesh, P("model"))
    w = jnp.ones((8, 8))
    m = MLP(Rngs(0))
    with logical_axis_rules(RULES):
        layout = named_shardings(m, mesh)
    tree = {"a": w, "b": w, "m": m, "n": m}
    out = filter_shard(tree, {"a": s, "b": s, "m": layout, "n": layout})
    ok = out["a"] is out["b"] and out["m"] is out["n"] and out["m"].tied is out["m"].up
    ok &= spec_of(out["a"]) == P("model", None) and spec_of(out["m"].up.w) == P(None, "model")
    return ok, (out["a"].sharding, out["m"].up.w.sharding)


@check
def filter_shard_in_trace() -> tuple[bool, Any]:
    mesh = auto_mesh((8,), ("model",))
    s = NamedSharding(mesh, P(None, "model"))
    out = jax.jit(lambda t: filter_shard(t, s))({"w": jnp.ones((4, 8)), "n": jnp.ones((2, 8))})
    return out["w"].sharding.spec == P(None, "model"), out["w"].sharding


@check
def explicit_mesh() -> tuple[bool, Any]:
    mesh = jax.make_mesh((2, 4), ("data", "model"))  # Explicit axes by default
    with logical_axis_rules(RULES):
        shardings = named_shardings(filter_eval_shape(MLP, Rngs(0)), mesh)
        model = filter_jit(MLP, out_shardings=shardings)(Rngs(0))
    return model.up.w.sharding.spec == P(None, "model"), model.up.w.sharding


@check
def rank_mismatch_error() -> tuple[bool, Any]:
    class Bad(Module):
        w: Annotated[Parameter[jax.Array], Axes("embed")]

        def __init__(self) -> None:
            self.w = jnp.ones((2, 2))

    try:
        partition_specs({"bad": Bad()})
    except ValueError as e:
        return "Bad.w" in str(e) and "['bad'].w" in str(e), e
    return False, "no error"


@check
def prefix_error_names_path() -> tuple[bool, Any]:
    mesh = auto_mesh((8,), ("d",))
    s = NamedSharding(mesh, P())
    f = filter_jit(lambda a, b: a["x"] + b, in_shardings=({"y": s}, s))
    try:
        f({"x": jnp.ones(8)}, jnp.ones(8))
    except ValueError as e:
        return "args[0]['x']" in str(e) and "in_shardings" in str(e), e
    return False, "no error"


@check
def checkpoint_reshard() -> tuple[bool, Any]:
    with logical_axis_rules(RULES):
        model = init_sharded(MLP, auto_mesh((8,), ("model",)), Rngs(0))
        with tempfile.TemporaryDirectory() as tmp, ocp.StandardCheckpointer() as ckpt:
            ckpt.save(f"{tmp}/step", model)
            ckpt.wait_until_finished()
            mesh = auto_mesh((2, 4), ("data", "model"))
            target = abstract_sharded(filter_eval_shape(MLP, Rngs(0)), mesh)
            restored = ckpt.restore(f"{tmp}/step", target)
    same = all(
        np.array_equal(a, b)
        for a, b in zip(
            jax.tree_util.tree_leaves(model), jax.tree_util.tree_leaves(restored), strict=True
        )
    )
    ok = same and restored.up.w.sharding.mesh.shape == {"data": 2, "model": 4}
    ok &= restored.up.w.sharding.spec == P(None, "model") and restored.tied is restored.up
    return ok, restored.up.w.sharding


@check
def static_and_donate_argnums() -> tuple[bool, Any]:
    traces = []

    @filter_jit(static_argnums=1, donate_argnums=0)
    def scale(a: jax.Array, mode: str) -> jax.Array:
        traces.append(mode)
        return a * (2.0 if mode == "double" else 3.0)

    a = jnp.ones(4)
    r1 = scale(a, "double")
    deleted = a.is_deleted()
    r2 = scale(jnp.ones(4), mode="triple")
    r3 = scale(jnp.ones(4), "double")
    ok = float(r1[0]) == 2.0 and float(r2[0]) == 3.0 and float(r3[0]) == 2.0
    return ok and deleted and traces == ["double", "triple"], (traces, deleted)


emit("finished", True)
sys.exit(0)
