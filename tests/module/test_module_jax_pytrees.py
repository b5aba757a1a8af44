"""Modules holding pytrees that JAX registers and oxtree does not (equinox modules, flax.struct
dataclasses, NNX States, any class passed to jax.tree_util.register_*): such an attribute is a
PARAMETER by itself, its arrays are leaves of the module to JAX's transforms, to oxtree.jax's
filtered ones and to the module's own methods, and oxtree's main face keeps it one leaf."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

eqx = pytest.importorskip("equinox")
flax_struct = pytest.importorskip("flax.struct")
try:
    from flax import nnx
except (ImportError, AttributeError):  # flax 0.12.8's nnx does not import with jax 0.12
    nnx = None
# `make test-matrix` pairs the pinned flax with a newer jax, where `flax.nnx` fails to import.
needs_nnx = pytest.mark.skipif(nnx is None, reason="flax.nnx does not import with this jax")

import jax  # noqa: E402 (after the skips: a venv without equinox or flax skips this file)
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
import oxtree  # noqa: E402
import oxtree.jax as oxjax  # noqa: E402
from oxtree import Kind, Module, Parameter, State  # noqa: E402
from oxtree.module import PathContains  # noqa: E402


@flax_struct.dataclass
class Stats:
    mean: Any
    scale: Any
    label: str = flax_struct.field(pytree_node=False, default="stats")


class Box:
    """A mutable class registered with JAX's API (not with oxtree's)."""

    def __init__(self, v: Any) -> None:
        self.v = v


jax.tree_util.register_pytree_with_keys(
    Box,
    lambda b: (((jax.tree_util.GetAttrKey("v"), b.v),), None),
    lambda _, children: Box(*children),
    lambda b: ((b.v,), None),
)


def linear(n_in: int = 2, n_out: int = 3, seed: int = 0) -> Any:
    return eqx.nn.Linear(n_in, n_out, key=jax.random.PRNGKey(seed))


class Net(Module):
    """An oxtree module around an equinox layer, a flax struct and a state of its own."""

    w: Parameter
    steps: State

    def __init__(self) -> None:
        self.w = jnp.ones(2)
        self.lin = linear()
        self.stats = Stats(jnp.zeros(3), jnp.ones(3))
        self.steps = jnp.zeros((), jnp.int32)
        self.width = 3  # configuration

    def __call__(self, x: Any) -> Any:
        return (self.lin(x * self.w) - self.stats.mean) * self.stats.scale


def paths_of(tree: Any) -> list[str]:
    return [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(tree)[0]]


# --------------------------------------------------------------------------------------------
# Kinds


def test_jax_nodes_assigned_are_parameters() -> None:
    net = Net()
    assert dict(net.name_to_kind) == {
        "w": Kind.PARAMETER,
        "lin": Kind.PARAMETER,
        "stats": Kind.PARAMETER,
        "steps": Kind.STATE,
    }
    assert "width" not in net.name_to_kind


@needs_nnx
def test_containers_of_jax_nodes_and_other_jax_pytrees_are_parameters() -> None:
    m = Module()
    m.layers = [linear(seed=0), linear(seed=1)]
    m.by_name = {"a": linear()}
    m.state = nnx.state(nnx.Linear(2, 3, rngs=nnx.Rngs(0)))
    m.box = Box(jnp.zeros(2))
    m.mixed = [linear(), 1.0]  # not all JAX nodes: configuration, as before
    m.empty = []
    assert dict(m.name_to_kind) == dict.fromkeys(
        ["layers", "by_name", "state", "box"], Kind.PARAMETER
    )


def test_oxtree_registered_types_and_modules_keep_their_kinds() -> None:
    @oxtree.register_dataclass
    @dataclasses.dataclass
    class Own:
        x: Any

    m = Module()
    m.own = Own(1.0)  # oxtree registers it: configuration, as before
    m.sub = Module()
    assert dict(m.name_to_kind) == {"sub": Kind.MODULE}


def test_explicit_kind_wins() -> None:
    m = Module()
    m.register_state("lin", linear())
    m.lin = linear(seed=1)  # reassigning keeps the registered kind
    assert m.name_to_kind["lin"] is Kind.STATE
    assert m.select(Kind.STATE).lin.weight.shape == (3, 2)


# --------------------------------------------------------------------------------------------
# Leaves and keys, per face


def test_jax_sees_the_arrays_with_their_names() -> None:
    net = Net()
    # Declared fields first (registered when the instance is made), then assigned ones.
    assert paths_of(net) == [
        ".w",
        ".steps",
        ".lin.weight",
        ".lin.bias",
        ".stats.mean",
        ".stats.scale",
    ]
    leaves = oxtree.tree_util.tree_leaves(net)
    assert len(leaves) == 6
    assert leaves[2] is net.lin.weight


def test_main_face_keeps_them_leaves_unless_switched() -> None:
    net = Net()
    leaves = oxtree.tree_leaves(net)
    assert leaves[2] is net.lin
    assert leaves[3] is net.stats
    previous = oxtree.use_jax_registry(True)
    try:
        assert len(oxtree.tree_leaves(net)) == 6
    finally:
        oxtree.use_jax_registry(previous)


def test_configuration_is_static_and_fields_stay_out_of_it() -> None:
    a, b = Net(), Net()
    # The arrays are leaves, not configuration: two instances share a treedef.
    assert jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)
    b.lin = linear(3, 3)
    assert jax.tree_util.tree_structure(a) != jax.tree_util.tree_structure(b)


def test_state_dict_names_the_fields_and_loads_back() -> None:
    net = Net()
    sd = net.state_dict()
    assert list(sd) == ["w", "steps", "lin.weight", "lin.bias", "stats.mean", "stats.scale"]
    loaded = net.load_state_dict({**sd, "lin.bias": jnp.full(3, 7.0)})
    assert isinstance(loaded.lin, eqx.nn.Linear)
    np.testing.assert_array_equal(loaded.lin.bias, np.full(3, 7.0))
    assert loaded.stats.label == "stats"
    with pytest.raises(
        ValueError, match=r"lin\.weight: expected float32\[3, 2\], got float32\[2\]"
    ):
        net.load_state_dict({**sd, "lin.weight": jnp.ones(2)})


@needs_nnx
def test_nnx_state_attribute_keys() -> None:
    m = Module()
    m.state = nnx.state(nnx.Linear(2, 3, rngs=nnx.Rngs(0)))
    assert list(m.state_dict()) == ["state['bias'].value", "state['kernel'].value"]
    assert paths_of(m) == [".state['bias'].value", ".state['kernel'].value"]


# --------------------------------------------------------------------------------------------
# The module's own methods


def test_parameters_and_states_keep_the_structure_inside() -> None:
    net = Net()
    states = net.states()
    assert isinstance(states.lin, eqx.nn.Linear)
    assert states.lin.weight is None
    assert isinstance(states.stats, Stats)
    assert states.stats.mean is None
    assert states.stats.label == "stats"
    assert states.steps is net.steps
    params = net.parameters()
    assert params.lin is net.lin
    assert params.steps is None
    # update merges a partition back, leaf by leaf.
    doubled = jax.tree_util.tree_map(lambda p: p * 2, params)
    new = net.update(doubled)
    np.testing.assert_allclose(new.lin.weight, net.lin.weight * 2)
    assert new.steps is net.steps
    assert net.update(states).lin.weight is net.lin.weight


def test_select_by_path_inside_a_jax_node() -> None:
    s = Net().select(PathContains("weight"))
    assert s.lin.weight.shape == (3, 2)
    assert s.lin.bias is None
    assert s.w is None
    assert s.stats.mean is None


def test_kinds_of_a_module_inside_a_jax_node() -> None:
    class Inner(Module):
        count: State

        def __init__(self) -> None:
            self.count = jnp.zeros(())
            self.register_parameter("v", jnp.ones(2))

    class Wrapper(eqx.Module):
        inner: Any
        scale: Any

    outer = Module()
    outer.wrap = Wrapper(Inner(), jnp.ones(1))
    assert outer.name_to_kind["wrap"] is Kind.PARAMETER
    picked = outer.select(Kind.STATE)
    assert picked.wrap.inner.count is not None
    assert picked.wrap.inner.v is None
    assert picked.wrap.scale is None


# --------------------------------------------------------------------------------------------
# Transforms


def test_jax_grad_and_optax_through_the_module() -> None:
    net, x = Net(), jnp.arange(2.0)

    def loss(params: Any, model: Any) -> Any:
        return jnp.sum(model.update(params)(x) ** 2)

    grads = jax.grad(loss)(net.parameters(), net)
    expected = jax.grad(lambda lin: jnp.sum((lin(x) - 0.0) ** 2))(net.lin)
    np.testing.assert_allclose(grads.lin.weight, expected.weight, rtol=1e-6)
    opt = optax.sgd(0.1)
    updates, _ = opt.update(grads, opt.init(net.parameters()))
    new = net.update(optax.apply_updates(net.parameters(), updates))
    assert loss(new.parameters(), new) < loss(net.parameters(), net)


def test_filter_grad_differentiates_the_equinox_arrays() -> None:
    net, x = Net(), jnp.arange(2.0)
    grads = oxjax.filter_grad(lambda m: jnp.sum(m(x)))(net)
    np.testing.assert_allclose(grads.lin.bias, np.ones(3))
    np.testing.assert_allclose(grads.stats.mean, -np.ones(3))
    assert grads.steps is None  # an int array: not differentiated


def test_filter_jit_traces_the_arrays_once() -> None:
    traces = []

    @oxjax.filter_jit
    def apply(model: Any, x: Any) -> Any:
        traces.append(1)
        return model(x)

    net, x = Net(), jnp.ones(2)
    first = apply(net, x)
    other = net.load_state_dict({**net.state_dict(), "lin.bias": jnp.full(3, 5.0, jnp.float32)})
    second = apply(other, x)
    assert len(traces) == 1  # the equinox arrays are traced, not baked in as constants
    np.testing.assert_allclose(second - first, 5.0 - net.lin.bias, rtol=1e-6)


def test_filter_jit_writes_back_a_replaced_equinox_layer() -> None:
    net = Net()

    @oxjax.filter_jit
    def reset(model: Any) -> None:
        model.lin = eqx.tree_at(lambda lin: lin.weight, model.lin, jnp.zeros((3, 2)))
        model.steps = model.steps + 1

    reset(net)
    np.testing.assert_array_equal(net.lin.weight, np.zeros((3, 2)))
    assert isinstance(net.lin, eqx.nn.Linear)
    assert int(net.steps) == 1


@needs_nnx
def test_filter_jit_writes_back_a_mutated_registered_object() -> None:
    m = Module()
    m.box = Box(jnp.zeros(2))
    m.state = nnx.state(nnx.Linear(2, 3, rngs=nnx.Rngs(0)))
    kernel = m.state["kernel"][...]

    @oxjax.filter_jit
    def bump(model: Any) -> None:
        model.box.v = model.box.v + 3
        model.state["kernel"][...] = model.state["kernel"][...] + 1

    bump(m)
    # The module's attributes hold the rebuilt objects, with the change.
    np.testing.assert_array_equal(m.box.v, np.full(2, 3.0))
    np.testing.assert_allclose(m.state["kernel"][...], kernel + 1)


def test_jax_transforms_keep_a_tie_inside_the_module() -> None:
    m = Module()
    shared = eqx.nn.Linear(2, 2, use_bias=False, key=jax.random.PRNGKey(0))
    m.pair = (shared, shared)
    out = jax.jit(lambda m: m)(m)
    assert out.pair[0] is out.pair[1]
    assert len(jax.tree_util.tree_leaves(m)) == 1  # the tied weight once

    def loss(m: Any) -> Any:
        return jnp.sum(m.pair[1](m.pair[0](jnp.ones(2))))

    grads = jax.grad(loss)(m)
    assert grads.pair[0] is grads.pair[1]
    w = shared.weight
    expected = jax.grad(lambda w: jnp.sum(w @ (w @ jnp.ones(2))))(w)
    np.testing.assert_allclose(grads.pair[0].weight, expected, rtol=1e-6)


# --------------------------------------------------------------------------------------------
# graph_flatten


def test_graph_flatten_keeps_ties_in_an_equinox_model_when_asked() -> None:
    layer = linear(2, 2)
    model = eqx.nn.Sequential([layer, jax.nn.relu, layer])
    leaves, gd = oxtree.graph_flatten(model, jax_registry=True)
    assert len(leaves) == 3  # weight, bias (once) and the activation
    out = oxtree.graph_unflatten(gd, leaves)
    assert out.layers[0] is out.layers[2]
    # Without the flag, the main face's graph: the model is one leaf.
    leaves, gd = oxtree.graph_flatten(model)
    assert leaves == [model]
    assert gd.num_leaves == 1


# --------------------------------------------------------------------------------------------
# Display


def test_repr_shows_the_fields_and_arrays() -> None:
    m = Module()
    m.lin = linear()
    m.stats = Stats(jnp.zeros(3), 0)
    assert repr(m) == (
        "Module(\n"
        "  lin=Linear(weight=f32[3,2], bias=f32[3], in_features=2, out_features=3, use_bias=True),\n"
        "  stats=Stats(mean=f32[3], scale=0, label='stats'),\n"
        ")"
    )
