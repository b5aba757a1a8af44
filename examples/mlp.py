"""A multilayer perceptron built from oxtree modules, trained on a synthetic regression task.

    .venv/bin/python examples/mlp.py              # 300 steps, prints the loss as it falls
    .venv/bin/python examples/mlp.py --steps 100

The model is a pytree with no registration call: its weights and biases are PARAMETERs, a
step counter is a STATE, and the layer sizes and the activation are configuration (OTHERS),
kept in the treedef. The training step runs under ``oxtree.jax.filter_jit`` and takes the
gradient with ``jax.grad`` over ``model.parameters()``, the model with every non-parameter
leaf set to None; ``model.update(params)`` puts the new parameters back.

The last line reads ``loss ratio: R`` (first loss / last loss); tests/module/test_module.py runs this
script and checks that R is at least 10.
"""

from __future__ import annotations

import argparse
import itertools
import time
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import oxtree
from oxtree import Module, Parameter
from oxtree.jax import filter_jit


class Linear(Module):
    """``x @ weight + bias``; the sizes are configuration."""

    weight: Parameter[jax.Array]
    bias: Parameter[jax.Array]

    def __init__(self, rng: np.random.Generator, n_in: int, n_out: int) -> None:
        self.weight = jnp.asarray(rng.normal(size=(n_in, n_out)) / n_in**0.5, jnp.float32)
        self.bias = jnp.zeros(n_out)
        self.n_in, self.n_out = n_in, n_out

    def __call__(self, x: jax.Array) -> jax.Array:
        return x @ self.weight + self.bias


class MLP(Module):
    """Linear layers (a list of modules: a MODULE attribute by itself) with an activation
    between them, and a step counter (a STATE)."""

    def __init__(
        self,
        rng: np.random.Generator,
        sizes: Sequence[int],
        activation: Callable[[jax.Array], jax.Array] = jnp.tanh,
    ) -> None:
        self.layers = [Linear(rng, a, b) for a, b in itertools.pairwise(sizes)]
        self.activation = activation
        self.register_state("steps", jnp.zeros((), jnp.int32))

    def __call__(self, x: jax.Array) -> jax.Array:
        for layer in self.layers[:-1]:
            x = self.activation(layer(x))
        return self.layers[-1](x)[:, 0]


def loss_fn(params: MLP, model: MLP, x: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.mean((model.update(params)(x) - y) ** 2)


@filter_jit
def train_step(model: MLP, x: jax.Array, y: jax.Array, lr: float) -> tuple[MLP, jax.Array]:
    params = model.parameters()
    loss, grads = jax.value_and_grad(loss_fn)(params, model, x, y)
    params = oxtree.tree_map(lambda p, g: p - lr * g, params, grads)
    return model.update(params).replace(steps=model.steps + 1), loss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--lr", type=float, default=0.1)
    args = parser.parse_args()

    # NumPy makes the data and the initial weights: no JAX computation to compile before
    # the training step.
    rng = np.random.default_rng(0)
    xs = rng.uniform(-2.0, 2.0, size=(256, 2))
    ys = np.sin(xs[:, 0]) * np.cos(xs[:, 1]) + 0.25 * xs[:, 1]
    x, y = jnp.asarray(xs, jnp.float32), jnp.asarray(ys, jnp.float32)

    model = MLP(rng, [2, 32, 32, 1])
    print(model)
    print("paths:", [oxtree.keystr(p) for p, _ in oxtree.tree_util.tree_leaves_with_path(model)])

    start = time.perf_counter()
    losses = []
    for step in range(args.steps):
        model, loss = train_step(model, x, y, args.lr)
        losses.append(float(loss))
        if step % 100 == 0 or step == args.steps - 1:
            print(f"step {step:4d}  loss {losses[-1]:.5f}")
    print(f"{int(model.steps)} steps in {time.perf_counter() - start:.2f} s")
    print(f"loss ratio: {losses[0] / losses[-1]:.1f}")


if __name__ == "__main__":
    main()
