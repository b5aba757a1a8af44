"""One of two processes joined by ``jax.distributed`` on 127.0.0.1, each with 4 host CPU
devices: a model-and-data-parallel filter_jit training step on global arrays.

Run by tests/sharding/test_sharding.py: ``two_processes.py PORT PROCESS_ID``; prints
``["loss", process_id, [losses...], layout kept]`` as JSON. Process id -1 is the reference:
one process, one device, the whole batch.
"""

from __future__ import annotations

import json
import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P
from oxtree import Module, Rngs
from oxtree.jax import filter_jit, filter_value_and_grad
from oxtree.sharding import init_sharded, logical_axis_rules, named_shardings

port, process_id = int(sys.argv[1]), int(sys.argv[2])
if process_id >= 0:
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=f"127.0.0.1:{port}",
        num_processes=2,
        process_id=process_id,
        initialization_timeout=60,
    )


class Dense(Module):
    def __init__(self, rngs: Rngs) -> None:
        w = jax.random.normal(rngs.params(), (16, 32)) / 4.0
        self.register_parameter("w", w, sharding=("embed", "mlp"))
        self.register_parameter("v", jnp.zeros((32, 16)), sharding=("mlp", "embed"))

    def __call__(self, x: jax.Array) -> jax.Array:
        return jnp.tanh(x @ self.w) @ self.v


shape = (2, 4) if process_id >= 0 else (1, 1)
devices = None if process_id >= 0 else jax.devices()[:1]
mesh = jax.make_mesh(shape, ("data", "model"), axis_types=(AxisType.Auto,) * 2, devices=devices)
with logical_axis_rules([("embed", None), ("mlp", "model")]):
    model = init_sharded(Dense, mesh, Rngs(0))
    layout = named_shardings(model, mesh)
batch = NamedSharding(mesh, P("data"))
# Each process holds its half of the global batch.
rng = np.random.default_rng(0)
x_all = rng.normal(size=(16, 16)).astype(np.float32)
y_all = rng.normal(size=(16, 16)).astype(np.float32)
half = slice(8 * process_id, 8 * (process_id + 1)) if process_id >= 0 else slice(None)
x = jax.make_array_from_process_local_data(batch, x_all[half])
y = jax.make_array_from_process_local_data(batch, y_all[half])


@filter_jit(in_shardings=(layout, batch, batch), out_shardings=None)
def step(model: Dense, x: jax.Array, y: jax.Array) -> jax.Array:
    loss, grads = filter_value_and_grad(lambda m: jnp.mean((m(x) - y) ** 2))(model)
    model.w = model.w - 0.1 * grads.w
    model.v = model.v - 0.1 * grads.v
    return loss


losses = [float(step(model, x, y)) for _ in range(3)]
same_layout = model.w.sharding.is_equivalent_to(layout.w, 2)
print(json.dumps(["loss", process_id, losses, bool(same_layout)]), flush=True)
if process_id >= 0:
    jax.distributed.shutdown()
