"""The transformer of examples/transformer.py trained data- and model-parallel on 8 host CPU
devices: laid out by its own annotations, built directly sharded, trained with optax under
``filter_jit`` with ``in_shardings`` / ``out_shardings``, checkpointed with orbax and
restored onto a mesh of another shape.

    .venv/bin/python examples/sharded_transformer.py            # 20 steps
    .venv/bin/python examples/sharded_transformer.py --steps 10

Needs jax, optax and orbax-checkpoint. It sets ``XLA_FLAGS`` to make 8 host devices before
JAX starts (docs/sharding.md walks through it). It prints the loss next to that of the same
training on one device.
"""

from __future__ import annotations

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

import jax
import numpy as np
import optax
import orbax.checkpoint as ocp
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P
from oxtree import Kind
from oxtree.jax import filter_eval_shape, filter_jit, filter_value_and_grad
from oxtree.sharding import (
    abstract_sharded,
    init_sharded,
    logical_axis_rules,
    named_shardings,
)

sys.path.insert(0, str(Path(__file__).parent))
from transformer import TinyLM, batches, loss_fn

# Logical axis names (the model's annotations) -> mesh axes.
RULES = [("batch", "data"), ("mlp", "model"), ("heads", "model"), ("embed", None), ("vocab", None)]


def make_step(opt: optax.GradientTransformation, layout: Any, batch: Any) -> Any:
    """A training step whose model comes in and goes out laid out by ``layout``, and whose
    batch is split over the ``data`` axis; the optimizer state follows the parameters."""

    @filter_jit(in_shardings=(layout, None, batch), out_shardings=(layout, None, None))
    def train_step(model: TinyLM, opt_state: Any, ids: jax.Array) -> Any:
        loss, grads = filter_value_and_grad(loss_fn)(model, ids)
        params = model.parameters()
        updates, opt_state = opt.update(grads.select(Kind.PARAMETER), opt_state, params)
        return model.update(optax.apply_updates(params, updates)), opt_state, loss

    return train_step


def train(steps: int, mesh: Any) -> tuple[list[float], TinyLM]:
    opt = optax.adam(3e-2)
    with logical_axis_rules(RULES):
        model = init_sharded(TinyLM, mesh)  # every device computes its own part only
        layout = named_shardings(model, mesh)
    batch = NamedSharding(mesh, P("data"))
    step = make_step(opt, layout, batch)
    opt_state = opt.init(model.parameters())
    data = batches(0)
    losses = []
    for _ in range(steps):
        ids = jax.device_put(next(data), batch)
        model, opt_state, loss = step(model, opt_state, ids)
        losses.append(float(loss))
    return losses, model


def mesh_of(shape: tuple[int, ...], names: tuple[str, ...]) -> Any:
    """A mesh of the first devices, its axes Auto (laid out by the shardings given)."""
    devices = jax.devices()[: int(np.prod(shape))]
    return jax.make_mesh(shape, names, axis_types=(AxisType.Auto,) * len(shape), devices=devices)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    print(f"{len(jax.devices())} devices")

    reference, _ = train(args.steps, mesh_of((1, 1), ("data", "model")))
    losses, model = train(args.steps, mesh_of((2, 4), ("data", "model")))
    for i in range(0, args.steps, max(1, args.steps // 4)):
        print(f"step {i:4d}  loss {losses[i]:.4f}  (one device: {reference[i]:.4f})")
    print(f"max difference from one device: {np.max(np.abs(np.subtract(losses, reference))):.2e}")
    print("block.up.w laid out as", model.block.up.w.sharding.spec)

    # Save on the (2, 4) mesh, restore onto an (8,) mesh: orbax reshards to the target's
    # layout, which the model's own annotations give.
    with tempfile.TemporaryDirectory() as tmp, ocp.StandardCheckpointer() as ckpt:
        ckpt.save(f"{tmp}/model", model)
        ckpt.wait_until_finished()
        with logical_axis_rules([*RULES[1:]]):  # no data axis on this mesh
            target = abstract_sharded(filter_eval_shape(TinyLM), mesh_of((8,), ("model",)))
        restored = ckpt.restore(f"{tmp}/model", target)
    same = all(
        np.array_equal(a, b)
        for a, b in zip(jax.tree.leaves(model), jax.tree.leaves(restored), strict=True)
    )
    print(
        f"restored on {dict(restored.block.up.w.sharding.mesh.shape)}: equal {same}, "
        f"tied {restored.head is restored.embed}, block.up.w laid out as "
        f"{restored.block.up.w.sharding.spec}"
    )


if __name__ == "__main__":
    main()
