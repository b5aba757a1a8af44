"""Modules in real training code: tied weights through JAX transforms and optax, mutations
inside filtered transforms, PRNG keys as leaves, back-references, and the module toolkit
(kinds, filters, checked updates, state dicts)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax
import oxtree.jax as oxjax
import pytest
from oxtree import Module, Parameter
from oxtree.module import ModulePath

# --------------------------------------------------------------------------------------------
# Tied weights


class Dense(Module):
    w: Parameter

    def __init__(self, key: Any, n: int = 3) -> None:
        self.w = jax.random.normal(key, (n, n)) * 0.3

    def __call__(self, x: Any) -> Any:
        return x @ self.w


class AutoEncoder(Module):
    def __init__(self) -> None:
        self.enc = Dense(jax.random.PRNGKey(0))
        self.dec = self.enc  # tied: one module, two attributes

    def __call__(self, x: Any) -> Any:
        return self.dec(jnp.tanh(self.enc(x)))


X = jnp.linspace(-1.0, 1.0, 12).reshape(4, 3)
Y = jnp.zeros((4, 3))


def mse(model: Any, x: Any, y: Any) -> Any:
    return jnp.mean((model(x) - y) ** 2)


def plain_jax_losses(steps: int, lr: float) -> list[float]:
    """The same math on one weight matrix, in plain JAX."""
    w = AutoEncoder().enc.w

    def loss(w: Any) -> Any:
        return jnp.mean((jnp.tanh(X @ w) @ w - Y) ** 2)

    out = []
    for _ in range(steps):
        value, g = jax.value_and_grad(loss)(w)
        out.append(float(value))
        w = w - lr * g
    out.append(float(loss(w)))
    return out


def test_tied_weights_survive_optax_inside_filter_jit() -> None:
    opt = optax.sgd(0.1)
    model = AutoEncoder()
    state = opt.init(model)

    @oxjax.filter_jit
    def step(m: AutoEncoder, state: Any, x: Any, y: Any) -> Any:
        loss, grads = oxjax.filter_value_and_grad(mse)(m, x, y)
        assert grads.enc is grads.dec
        updates, state = opt.update(grads, state, m)
        return optax.apply_updates(m, updates), state, loss

    losses = []
    for _ in range(3):
        model, state, loss = step(model, state, X, Y)
        losses.append(float(loss))
        assert model.enc is model.dec
    losses.append(float(mse(model, X, Y)))
    assert losses == pytest.approx(plain_jax_losses(3, 0.1), rel=1e-5)


def test_tied_weights_survive_jax_grad_and_optax_outside_jit() -> None:
    opt = optax.adam(1e-2)
    model = AutoEncoder()
    state = opt.init(model)
    assert state[0].mu.enc is state[0].mu.dec
    grads = jax.grad(mse)(model, X, Y)
    assert grads.enc is grads.dec
    updates, state = opt.update(grads, state, model)
    new = optax.apply_updates(model, updates)
    assert new.enc is new.dec
    assert not jnp.allclose(new.enc.w, model.enc.w)


def test_jax_grad_sums_a_shared_parameter_once() -> None:
    model = AutoEncoder()
    grads = jax.grad(mse)(model, X, Y)
    w = model.enc.w
    expected = jax.grad(lambda w: jnp.mean((jnp.tanh(X @ w) @ w - Y) ** 2))(w)
    assert jnp.allclose(grads.enc.w, expected)
    assert len(jax.tree_util.tree_leaves(model)) == 1  # the shared weight, once


def test_documented_pattern_grad_over_parameters_then_update() -> None:
    model = AutoEncoder()

    def loss(params: AutoEncoder) -> Any:
        return mse(model.update(params), X, Y)

    grads = jax.jit(jax.grad(loss))(model.parameters())
    assert grads.enc is grads.dec
    new = model.update(jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, model.parameters(), grads))
    assert new.enc is new.dec
    assert float(mse(new, X, Y)) == pytest.approx(plain_jax_losses(1, 0.1)[-1], rel=1e-5)


def test_jax_sees_a_module_as_one_node_keyed_by_paths() -> None:
    class Net(Module):
        def __init__(self) -> None:
            self.layers = [Dense(jax.random.PRNGKey(1), 2), Dense(jax.random.PRNGKey(2), 2)]
            self.register_state("steps", 0)

    paths = [p for p, _ in jax.tree_util.tree_flatten_with_path(Net())[0]]
    assert [jax.tree_util.keystr(p) for p in paths] == [
        ".layers[0].w",
        ".layers[1].w",
        ".steps",
    ]
    assert type(paths[0][0]) is ModulePath
    assert type(paths[2][0]) is jax.tree_util.GetAttrKey
    assert paths[0][0] == ModulePath(paths[0][0].path)
    assert hash(paths[0][0]) == hash(ModulePath(paths[0][0].path))
    assert repr(paths[0][0]) == "ModulePath('.layers[0].w')"


def test_tree_map_with_none_gradients_keeps_model_structure() -> None:
    class WithCount(Module):
        def __init__(self) -> None:
            self.register_parameter("w", jnp.ones(2))
            self.register_state("n", jnp.zeros((), jnp.int32))

    m = WithCount()
    grads = oxjax.filter_grad(lambda m: jnp.sum(m.w * 2.0))(m)
    assert grads.n is None
    out = jax.tree_util.tree_map(lambda p, g: p if g is None else p - g, m, grads)
    assert jnp.allclose(out.w, -1.0)
    assert int(out.n) == 0
