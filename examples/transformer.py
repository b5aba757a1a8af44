"""A one-block causal transformer built from oxtree modules, trained with optax to continue a
synthetic token sequence, checkpointed with orbax and reloaded.

    .venv/bin/python examples/transformer.py              # 150 steps, prints the loss
    .venv/bin/python examples/transformer.py --steps 60

What it shows (docs/examples-transformer.md walks through it):

- tied embeddings: the output head *is* the input embedding (``self.head = self.embed``),
  one module reached through two attributes, so one table gets one summed gradient;
- a user-defined kind: batch-norm running statistics are ``Kind.define("batch_stats")``
  leaves, updated in place by the forward pass;
- dropout with a PRNG key held as a STATE leaf, split in place at every call;
- a training step under ``oxtree.jax.filter_jit`` with ``filter_value_and_grad`` and
  optax: the in-place changes (statistics, key) reach the caller's model by write-back;
- a checkpoint with orbax (the model's ``state_dict()`` and the optimizer's leaves) reloaded
  into a fresh model that trains on identically.

Needs optax and orbax-checkpoint (both in requirements-dev.txt).
"""

from __future__ import annotations

import argparse
import tempfile
from typing import Annotated, Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from oxtree import Axes, Kind, Module, Parameter, State
from oxtree.jax import filter_jit, filter_value_and_grad

BatchStats = Kind.define("batch_stats")


class Linear(Module):
    """``x @ w + b``; ``axes`` names the dimensions of ``w`` (its layout on a device mesh,
    see examples/sharded_transformer.py; metadata on one device)."""

    def __init__(
        self, rng: np.random.Generator, n_in: int, n_out: int, axes: tuple[Any, Any] = (None, None)
    ) -> None:
        w = jnp.asarray(rng.normal(size=(n_in, n_out)) / n_in**0.5, jnp.float32)
        self.register_parameter("w", w, sharding=axes)
        self.register_parameter("b", jnp.zeros(n_out, jnp.float32), sharding=axes[1:])

    def __call__(self, x: jax.Array) -> jax.Array:
        return x @ self.w + self.b


class Embedding(Module):
    """A token table: rows for the input, its transpose for the output logits."""

    table: Annotated[Parameter[jax.Array], Axes("vocab", "embed")]

    def __init__(self, rng: np.random.Generator, vocab: int, dim: int) -> None:
        self.table = jnp.asarray(rng.normal(size=(vocab, dim)) * 0.5, jnp.float32)

    def __call__(self, ids: jax.Array) -> jax.Array:
        return self.table[ids]

    def attend(self, x: jax.Array) -> jax.Array:
        return x @ self.table.T


class BatchNorm(Module):
    """Normalizes features by the batch's statistics while training (updating running
    averages, leaves of the user-defined kind BatchStats) and by the running averages in
    eval mode."""

    scale: Annotated[Parameter[jax.Array], Axes("mlp")]
    bias: Annotated[Parameter[jax.Array], Axes("mlp")]

    def __init__(self, dim: int, momentum: float = 0.9, eps: float = 1e-5) -> None:
        self.scale = jnp.ones(dim, jnp.float32)
        self.bias = jnp.zeros(dim, jnp.float32)
        self.register_kind("mean", jnp.zeros(dim, jnp.float32), BatchStats, sharding=("mlp",))
        self.register_kind("var", jnp.ones(dim, jnp.float32), BatchStats, sharding=("mlp",))
        self.momentum, self.eps = momentum, eps

    def __call__(self, x: jax.Array) -> jax.Array:
        if self.training:
            flat = x.reshape(-1, x.shape[-1])
            mean, var = flat.mean(0), flat.var(0)
            m = self.momentum
            self.mean = m * self.mean + (1 - m) * mean  # in place: written back
            self.var = m * self.var + (1 - m) * var
        else:
            mean, var = self.mean, self.var
        return (x - mean) / jnp.sqrt(var + self.eps) * self.scale + self.bias


class Dropout(Module):
    """Zeroes a fraction ``rate`` of its input while training; its key is a STATE leaf."""

    key: State[jax.Array]

    def __init__(self, rate: float, key: jax.Array) -> None:
        self.rate = rate
        self.key = key

    def __call__(self, x: jax.Array) -> jax.Array:
        if not self.training or self.rate == 0.0:
            return x
        self.key, sub = jax.random.split(self.key)  # in place: written back
        keep = jax.random.bernoulli(sub, 1.0 - self.rate, x.shape)
        return jnp.where(keep, x / (1.0 - self.rate), 0.0)


class Attention(Module):
    """Single-head causal self-attention."""

    def __init__(self, rng: np.random.Generator, dim: int) -> None:
        self.q, self.k, self.v = (Linear(rng, dim, dim, ("embed", "heads")) for _ in range(3))
        self.o = Linear(rng, dim, dim, ("heads", "embed"))

    def __call__(self, x: jax.Array) -> jax.Array:
        q, k, v = self.q(x), self.k(x), self.v(x)
        scores = q @ jnp.swapaxes(k, -1, -2) / q.shape[-1] ** 0.5
        causal = jnp.tril(jnp.ones(scores.shape[-2:], bool))
        scores = jnp.where(causal, scores, -1e9)
        return self.o(jax.nn.softmax(scores, axis=-1) @ v)


class Block(Module):
    """Attention, then a batch-normalized MLP with dropout, each with a residual."""

    def __init__(self, rng: np.random.Generator, dim: int, hidden: int, key: jax.Array) -> None:
        self.attn = Attention(rng, dim)
        self.up = Linear(rng, dim, hidden, ("embed", "mlp"))
        self.norm = BatchNorm(hidden)
        self.down = Linear(rng, hidden, dim, ("mlp", "embed"))
        self.drop = Dropout(0.1, key)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = x + self.attn(x)
        return x + self.drop(self.down(jax.nn.gelu(self.norm(self.up(x)))))


class TinyLM(Module):
    """Token and position embeddings, one block, and logits through the tied embedding."""

    pos: Annotated[Parameter[jax.Array], Axes(None, "embed")]

    def __init__(
        self, seed: int = 0, vocab: int = 16, dim: int = 16, hidden: int = 32, length: int = 8
    ) -> None:
        rng = np.random.default_rng(seed)
        self.embed = Embedding(rng, vocab, dim)
        self.pos = jnp.asarray(rng.normal(size=(length, dim)) * 0.1, jnp.float32)
        self.block = Block(rng, dim, hidden, jax.random.PRNGKey(seed))
        self.head = self.embed  # tied: the same module

    def __call__(self, ids: jax.Array) -> jax.Array:
        x = self.embed(ids) + self.pos[: ids.shape[-1]]
        return self.head.attend(self.block(x))


def loss_fn(model: TinyLM, ids: jax.Array) -> jax.Array:
    """Next-token cross entropy."""
    logits = model(ids[:, :-1])
    return optax.softmax_cross_entropy_with_integer_labels(logits, ids[:, 1:]).mean()


def make_step(opt: optax.GradientTransformation) -> Any:
    """The training step: gradients of every float leaf of the model, of which the optimizer
    takes the parameters; the forward pass's in-place changes are written back."""

    @filter_jit
    def train_step(model: TinyLM, opt_state: Any, ids: jax.Array) -> Any:
        loss, grads = filter_value_and_grad(loss_fn)(model, ids)
        params = model.parameters()
        updates, opt_state = opt.update(grads.select(Kind.PARAMETER), opt_state, params)
        return model.update(optax.apply_updates(params, updates)), opt_state, loss

    return train_step


def batches(seed: int, vocab: int = 16, length: int = 8, size: int = 32) -> Any:
    """Sequences that count up by a step of 1 to 3 modulo ``vocab``: the step is read from
    the first two tokens, so a model must look back to continue one."""
    rng = np.random.default_rng(seed)
    while True:
        start = rng.integers(0, vocab, size=(size, 1))
        step = rng.integers(1, 4, size=(size, 1))
        yield jnp.asarray((start + step * np.arange(length)) % vocab, jnp.int32)


def save(path: str, model: TinyLM, opt_state: Any) -> None:
    """Writes the model's leaves by path and the optimizer's leaves with orbax."""
    import orbax.checkpoint as ocp

    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(
            path, {"model": model.state_dict(), "opt": jax.tree_util.tree_leaves(opt_state)}
        )


def load(path: str, opt: optax.GradientTransformation) -> tuple[TinyLM, Any]:
    """A fresh model and optimizer state, read back from a checkpoint written by
    :func:`save` (the tie between embedding and head holds: it is the module's own)."""
    import orbax.checkpoint as ocp

    with ocp.StandardCheckpointer() as checkpointer:
        saved = checkpointer.restore(path)
    model = TinyLM(seed=1).load_state_dict(saved["model"])  # another seed: all overwritten
    structure = jax.tree_util.tree_structure(opt.init(model.parameters()))
    return model, jax.tree_util.tree_unflatten(structure, saved["opt"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=150)
    args = parser.parse_args()

    opt = optax.adam(3e-2)
    model = TinyLM()
    opt_state = opt.init(model.parameters())
    train_step = make_step(opt)
    data = batches(0)
    half = args.steps // 2
    losses = []
    for step in range(args.steps):
        if step == half:
            with tempfile.TemporaryDirectory() as tmp:
                save(f"{tmp}/ckpt", model, opt_state)
                model, opt_state = load(f"{tmp}/ckpt", opt)
            print(
                f"step {step:4d}  reloaded from the checkpoint; tied: {model.head is model.embed}"
            )
        model, opt_state, loss = train_step(model, opt_state, next(data))
        losses.append(float(loss))
        if step % 25 == 0 or step == args.steps - 1:
            print(f"step {step:4d}  loss {losses[-1]:.4f}")
    test = next(batches(1))
    print(f"eval loss {float(loss_fn(model.eval(), test)):.4f}")
    print(f"loss ratio: {losses[0] / losses[-1]:.1f}")


if __name__ == "__main__":
    main()
