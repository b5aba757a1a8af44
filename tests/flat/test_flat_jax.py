"""oxtree.FlatTree as a JAX pytree: through jax.jit, jax.grad, jax.tree and optax, against the
same training steps on the Module itself and in plain JAX; and docs/flat.md's examples."""

from __future__ import annotations

import doctest
import operator
import subprocess
import sys
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import oxtree
import oxtree.jax as oxjax
import pytest
from oxtree import FlatTree, Module, Parameter, State

ROOT = Path(__file__).resolve().parents[2]


class Dense(Module):
    w: Parameter
    b: Parameter

    def __init__(self, key: Any, n_in: int, n_out: int) -> None:
        self.w = jax.random.normal(key, (n_in, n_out)) * 0.5
        self.b = jnp.zeros(n_out)

    def __call__(self, x: Any) -> Any:
        return x @ self.w + self.b


class MLP(Module):
    steps: State

    def __init__(self) -> None:
        k1, k2 = jax.random.split(jax.random.key(0))
        self.layers = [Dense(k1, 3, 4), Dense(k2, 4, 2)]
        self.head = self.layers[1]  # tied
        self.steps = jnp.zeros((), jnp.int32)

    def __call__(self, x: Any) -> Any:
        return self.head(jnp.tanh(self.layers[0](x)))


X = jnp.linspace(-1.0, 1.0, 12).reshape(4, 3)
Y = jnp.ones((4, 2))


def loss(model: Any) -> Any:
    return jnp.mean((model(X) - Y) ** 2)


def is_float(x: Any) -> bool:
    return bool(jnp.issubdtype(x.dtype, jnp.floating))


def test_jax_sees_the_leaves_and_one_structure() -> None:
    flat = FlatTree.from_graph(MLP())
    assert jax.tree.leaves(flat) == list(flat.leaves)
    other = flat.map(lambda x: x + 1)
    assert jax.tree.structure(other) == jax.tree.structure(flat)
    assert jax.tree.structure(flat).num_leaves == len(flat.leaves) == 5
    out = jax.tree.map(operator.add, flat, other)
    assert type(out) is FlatTree
    assert out._def is flat._def
    keys = [p for p, _ in jax.tree_util.tree_flatten_with_path(flat)[0]]
    assert keys == [(jax.tree_util.FlattenedIndexKey(i),) for i in range(5)]


def test_jit_passes_a_flat_tree_and_gives_one_back() -> None:
    model = MLP()
    flat = FlatTree.from_graph(model)
    traces = []

    @jax.jit
    def double(f: FlatTree) -> FlatTree:
        traces.append(1)
        return f.map(lambda x: x * 2)

    out = double(flat)
    out = double(out)
    assert len(traces) == 1
    assert out._def is flat._def
    for a, b in zip(out.leaves, flat.leaves, strict=True):
        np.testing.assert_allclose(a, b * 4)
    # unflatten inside a trace rebuilds the model: a forward pass on flat leaves
    value = jax.jit(lambda f: loss(f.unflatten()))(flat)
    np.testing.assert_allclose(value, loss(model), rtol=1e-6)


def test_grad_over_the_float_leaves_is_grad_over_the_parameters() -> None:
    model = MLP()
    flat = FlatTree.from_graph(model)
    params, rest = flat.partition(is_float)
    assert len(params.leaves) == 4
    grads = jax.grad(lambda p: loss(rest.merge(p).unflatten()))(params)
    assert type(grads) is FlatTree
    assert grads._def is params._def
    # the hand-written equivalent: jax.grad on the module's parameters
    expected = jax.grad(lambda p: loss(model.update(p)))(model.parameters())
    want = [g for g in oxtree.graph_flatten(expected)[0] if g is not None]
    for a, b in zip(grads.leaves, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)


@pytest.mark.parametrize("opt", [optax.sgd(0.1), optax.adam(0.05)], ids=["sgd", "adam"])
def test_optax_steps_on_a_flat_tree_equal_those_on_the_module(opt: Any) -> None:
    model = MLP()
    # the module itself through optax (a Module is a JAX pytree)
    reference = MLP()
    ref_params = reference.parameters()
    ref_state = opt.init(ref_params)
    for _ in range(3):
        g = jax.grad(lambda p, m: loss(m.update(p)))(ref_params, reference)
        updates, ref_state = opt.update(g, ref_state, ref_params)
        ref_params = optax.apply_updates(ref_params, updates)
        reference = reference.update(ref_params)
    # the flat tree: flattened once, written back once
    flat = FlatTree.from_graph(model)
    params, rest = flat.partition(is_float)
    state = opt.init(params)
    for _ in range(3):
        g = jax.grad(lambda p: loss(rest.merge(p).unflatten()))(params)
        updates, state = opt.update(g, state, params)
        params = optax.apply_updates(params, updates)
    layers = model.layers
    params.write_back(model)
    assert model.layers is layers
    assert model.head is model.layers[1]
    for a, b in zip(
        oxtree.graph_flatten(model)[0], oxtree.graph_flatten(reference)[0], strict=True
    ):
        np.testing.assert_allclose(a, b, rtol=1e-5)


def test_hand_written_adam_over_flat_leaves_matches_optax() -> None:
    flat = FlatTree.from_graph(MLP()).filter(is_float)
    grads = flat.map(lambda x: jnp.full_like(x, 0.5))
    b1, b2, eps, lr = 0.9, 0.999, 1e-8, 0.01

    def adam(p: Any, g: Any, m: Any, v: Any) -> tuple[Any, Any, Any]:
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        return p - lr * (m / (1 - b1)) / (jnp.sqrt(v / (1 - b2)) + eps), m, v

    zeros = flat.map(jnp.zeros_like)
    new, mu, _ = flat.map(adam, grads, zeros, zeros).unzip()
    opt = optax.adam(lr, b1=b1, b2=b2, eps=eps)
    updates, state = opt.update(grads, opt.init(flat), flat)
    expected = optax.apply_updates(flat, updates)
    for a, b in zip(new.leaves, expected.leaves, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5)
    for a, b in zip(mu.leaves, state[0].mu.leaves, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_filter_jit_takes_and_gives_flat_trees() -> None:
    flat = FlatTree.from_graph(MLP())

    @oxjax.filter_jit
    def step(f: FlatTree, lr: float) -> FlatTree:
        return f.map(lambda x: x - lr * x if is_float(x) else x)

    out = step(flat, 0.5)
    assert type(out) is FlatTree
    np.testing.assert_allclose(out.leaves[0], flat.leaves[0] * 0.5)


def test_jax_registry_reads_equinox_modules() -> None:
    eqx = pytest.importorskip("equinox")
    model = eqx.nn.Linear(2, 3, key=jax.random.key(0))
    flat = FlatTree.flatten(model, jax_registry=True)
    assert list(flat.leaves) == jax.tree.leaves(model)
    assert FlatTree.from_graph(model, jax_registry=True).leaves == flat.leaves
    rebuilt = flat.map(lambda x: x * 0).unflatten()
    assert type(rebuilt) is type(model)
    assert not rebuilt.weight.any()


def test_registered_with_jax_when_jax_comes_after() -> None:
    code = (
        "import sys, oxtree\n"
        "flat = oxtree.FlatTree.flatten({'a': 1.0, 'b': [2.0]})\n"
        "assert 'jax' not in sys.modules\n"
        "import jax\n"
        "print(jax.tree.leaves(flat), type(jax.tree.map(lambda x: x * 2, flat)).__name__)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.split("\n")[0] == "[1.0, 2.0] FlatTree"


def test_docs_examples_run() -> None:
    result = doctest.testfile(
        str(ROOT / "docs" / "flat.md"),
        module_relative=False,
        optionflags=doctest.ELLIPSIS,
        verbose=False,
    )
    assert result.attempted > 20
    assert result.failed == 0
