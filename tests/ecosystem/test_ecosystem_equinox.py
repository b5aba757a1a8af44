"""equinox Modules through oxtree's JAX face and oxtree.jax.

equinox registers every `eqx.Module` subclass with `jax.tree_util.register_pytree_with_keys`
when the class is created (its metaclass): the dynamic fields are the children, keyed by
`jax.tree_util.GetAttrKey`, and the aux data is a tuple of the static fields' values after a
`Missing` sentinel (a pytree node registered with `register_pytree_node`) standing for extra
instance attributes. oxtree must see them exactly as JAX does, and `filter_jit`,
`filter_grad`, `filter_vmap`, `partition`, `graph_flatten` and the pretty-printer must see
their arrays.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
import oxtree
import oxtree.jax as oxjax
import oxtree.pretty
import oxtree.tree_util as otu
import pytest
from ecosystem_oracle import (
    ARRAYS,
    HYPOTHESIS_SETTINGS,
    assert_identical,
    check_equalities,
    check_mismatch,
    check_tree,
    import_or_skip,
    nestings,
)
from hypothesis import given
from hypothesis import strategies as st

eqx = import_or_skip("equinox")

A, B, C, D = ARRAYS
KEYS = jax.random.split(jax.random.key(0), 4)


class Node(eqx.Module):
    """Two dynamic fields and a static one."""

    left: Any
    right: Any
    tag: str = eqx.field(static=True, default="n")


class OnlyStatic(eqx.Module):
    """No dynamic field: a node without children."""

    name: str = eqx.field(static=True)


class Tiny(eqx.Module):
    """A two-layer network whose every leaf is an array (so `jax.jit` takes it as it is)."""

    w1: jax.Array
    b1: jax.Array
    w2: jax.Array
    act: str = eqx.field(static=True, default="tanh")

    def __call__(self, x: jax.Array) -> jax.Array:
        h = x @ self.w1 + self.b1
        h = jnp.tanh(h) if self.act == "tanh" else jax.nn.relu(h)
        return h @ self.w2


def make_tiny(key: jax.Array, act: str = "tanh") -> Tiny:
    k1, k2 = jax.random.split(key)
    return Tiny(
        jax.random.normal(k1, (2, 3)) * 0.5, jnp.zeros(3), jax.random.normal(k2, (3, 1)) * 0.5, act
    )


def add(a: Any, b: Any) -> Any:
    return a + b


MLP = eqx.nn.MLP(2, 1, 3, 1, key=KEYS[0])
LINEAR = eqx.nn.Linear(2, 3, key=KEYS[1])
LINEAR_NO_BIAS = eqx.nn.Linear(3, 2, use_bias=False, key=KEYS[2])
SEQUENTIAL = eqx.nn.Sequential([eqx.nn.Linear(2, 2, key=KEYS[3]), eqx.nn.Lambda(jnp.tanh)])
TINY = make_tiny(KEYS[0])
X = jnp.linspace(-1.0, 1.0, 8).reshape(4, 2)
Y = jnp.sin(X[:, :1] * 2.0)

TREES: dict[str, Any] = {
    "mlp": MLP,
    "linear": LINEAR,
    "linear_no_bias": LINEAR_NO_BIAS,
    "sequential": SEQUENTIAL,
    "tiny": TINY,
    "node": Node(A, [B, None], tag="t"),
    "node_of_nodes": Node(Node(A, B), {"k": Node(None, C)}),
    "only_static": OnlyStatic("s"),
    "partial": eqx.Partial(add, A),
    "in_containers": {"model": MLP, "layers": [LINEAR, LINEAR_NO_BIAS], "opt": (None, A)},
}


@pytest.mark.parametrize("name", list(TREES))
def test_equinox_modules_match_jax(name: str) -> None:
    check_tree(TREES[name])


def is_module(x: Any) -> bool:
    return isinstance(x, eqx.Module)


@pytest.mark.parametrize("name", ["mlp", "node_of_nodes", "in_containers"])
def test_is_leaf_stops_at_modules_like_jax(name: str) -> None:
    check_tree(TREES[name], is_module)


def test_field_keys_are_jax_getattr_keys() -> None:
    ours = otu.tree_flatten_with_path(LINEAR)[0]
    theirs = jtu.tree_flatten_with_path(LINEAR)[0]
    assert [path for path, _ in ours] == [path for path, _ in theirs]
    assert [type(path[0]) for path, _ in ours] == [jtu.GetAttrKey, jtu.GetAttrKey]
    assert [otu.keystr(path) for path, _ in otu.tree_flatten_with_path(MLP)[0]] == [
        ".layers[0].weight",
        ".layers[0].bias",
        ".layers[1].weight",
        ".layers[1].bias",
        ".activation",
        ".final_activation",
    ]


def test_unflatten_rebuilds_the_module() -> None:
    leaves, treedef = otu.tree_flatten(MLP)
    doubled = otu.tree_unflatten(treedef, [x * 2 if eqx.is_array(x) else x for x in leaves])
    assert type(doubled) is eqx.nn.MLP
    assert type(doubled.layers[0]) is eqx.nn.Linear
    assert doubled.width_size == 3
    assert doubled.activation is MLP.activation
    np.testing.assert_allclose(doubled.layers[1].weight, MLP.layers[1].weight * 2)


def test_treedef_equality_follows_jax() -> None:
    check_equalities(
        [
            LINEAR,
            eqx.nn.Linear(2, 3, key=KEYS[3]),  # other weights: equal treedefs
            eqx.nn.Linear(3, 2, key=KEYS[1]),  # other sizes (static fields)
            eqx.nn.Linear(2, 3, use_bias=False, key=KEYS[1]),
            TINY,
            make_tiny(KEYS[1]),
            make_tiny(KEYS[0], act="relu"),
            MLP,
            eqx.nn.MLP(2, 1, 4, 1, key=KEYS[0]),
            Node(A, B),
            Node(B, A),
            Node(A, B, tag="u"),
            Node(A, (B,)),
            OnlyStatic("s"),
            OnlyStatic("s"),
            OnlyStatic("t"),
            (A, B),
            [LINEAR, None],
            [LINEAR, ()],
        ]
    )


MISMATCHES = {
    "static_field": (TINY, make_tiny(KEYS[1], act="relu")),
    "sizes": (LINEAR, LINEAR_NO_BIAS),
    "module_vs_tuple": ([0, Node(A, B)], [0, (A, B)]),
    "module_vs_other_module": (Node(A, B), OnlyStatic("s")),
    "inner": ({"m": Node(A, [B])}, {"m": Node(A, (B,))}),
}


@pytest.mark.parametrize("name", list(MISMATCHES))
def test_structure_mismatches_raise_where_jax_raises(name: str) -> None:
    check_mismatch(*MISMATCHES[name])


BUILDERS = [
    lambda ch: st.builds(Node, ch, ch, st.sampled_from(["n", "t"])),
    lambda ch: st.builds(lambda c: eqx.Partial(add, c), ch),
]


@HYPOTHESIS_SETTINGS
@given(tree=nestings(BUILDERS, fixed=[LINEAR, OnlyStatic("s"), TINY]))
def test_random_nestings_of_modules_match_jax(tree: Any) -> None:
    check_tree(tree)


@HYPOTHESIS_SETTINGS
@given(
    trees=st.lists(
        nestings(BUILDERS, fixed=[OnlyStatic("s")], max_leaves=3), min_size=2, max_size=4
    )
)
def test_random_treedef_equalities_follow_jax(trees: list[Any]) -> None:
    check_equalities(trees)


def test_a_module_class_made_inside_a_test_is_a_node_at_once() -> None:
    """equinox registers a Module subclass with JAX when the class is created: oxtree sees it
    at the next call, with no step in between."""

    class Fresh(eqx.Module):
        a: Any
        b: Any
        label: str = eqx.field(static=True, default="f")

    fresh = Fresh(A, {"x": B})
    assert_identical(otu.tree_leaves(fresh), [A, B])
    check_tree(Node(fresh, Fresh(None, C, label="g")))


# --------------------------------------------------------------------------------------------------
# oxtree.jax on equinox models.

LR = 0.1


def mse(model: Any, x: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.mean((jax.vmap(model)(x) - y) ** 2)


def sgd(model: Any, grads: Any) -> Any:
    return jax.tree.map(lambda p, g: p if g is None else p - LR * g, model, grads)


def test_filter_jit_trains_a_module_like_jax_jit() -> None:
    """Three SGD steps on a Module whose leaves are all arrays: the same losses and
    parameters as `jax.jit` over `jax.value_and_grad`."""

    @jax.jit
    def jax_step(model: Tiny, x: jax.Array, y: jax.Array) -> tuple[Tiny, jax.Array]:
        loss, grads = jax.value_and_grad(mse)(model, x, y)
        return sgd(model, grads), loss

    @oxjax.filter_jit
    def ox_step(model: Tiny, x: jax.Array, y: jax.Array) -> tuple[Tiny, jax.Array]:
        loss, grads = oxjax.filter_value_and_grad(mse)(model, x, y)
        return sgd(model, grads), loss

    theirs = ours = TINY
    their_losses, our_losses = [], []
    for _ in range(3):
        theirs, their_loss = jax_step(theirs, X, Y)
        ours, our_loss = ox_step(ours, X, Y)
        their_losses.append(their_loss)
        our_losses.append(our_loss)
    np.testing.assert_allclose(our_losses, their_losses, rtol=1e-5)
    assert our_losses[-1] < our_losses[0]
    assert type(ours) is Tiny
    assert ours.act == "tanh"
    for our_leaf, their_leaf in zip(jtu.tree_leaves(ours), jtu.tree_leaves(theirs), strict=True):
        np.testing.assert_allclose(our_leaf, their_leaf, rtol=1e-5)


def test_filter_jit_trains_an_mlp_like_jax_jit() -> None:
    """eqx.nn.MLP holds functions (its activations) among its leaves: `jax.jit` gets the
    arrays through `eqx.partition`, `filter_jit` takes the model as it is."""
    params, static = eqx.partition(MLP, eqx.is_array)

    @jax.jit
    def jax_step(params: Any, x: jax.Array, y: jax.Array) -> tuple[Any, jax.Array]:
        loss, grads = jax.value_and_grad(lambda p: mse(eqx.combine(p, static), x, y))(params)
        return jax.tree.map(lambda p, g: p - LR * g, params, grads), loss

    @oxjax.filter_jit
    def ox_step(model: Any, x: jax.Array, y: jax.Array) -> tuple[Any, jax.Array]:
        loss, grads = oxjax.filter_value_and_grad(mse)(model, x, y)
        return sgd(model, grads), loss

    model = MLP
    their_losses, our_losses = [], []
    for _ in range(3):
        params, their_loss = jax_step(params, X, Y)
        model, our_loss = ox_step(model, X, Y)
        their_losses.append(their_loss)
        our_losses.append(our_loss)
    np.testing.assert_allclose(our_losses, their_losses, rtol=1e-5)
    assert type(model) is eqx.nn.MLP
    assert model.activation is MLP.activation
    np.testing.assert_allclose(model.layers[0].weight, params.layers[0].weight, rtol=1e-5)


def test_filter_grad_and_value_and_grad_match_equinox() -> None:
    """Gradients have the model's structure, None at the non-array leaves, as equinox's."""
    their_grads = eqx.filter_grad(mse)(MLP, X, Y)
    our_grads = oxjax.filter_grad(mse)(MLP, X, Y)
    assert jtu.tree_structure(our_grads) == jtu.tree_structure(their_grads)
    assert our_grads.activation is None
    for ours, theirs in zip(jtu.tree_leaves(our_grads), jtu.tree_leaves(their_grads), strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5)
    their_value, their_grads = eqx.filter_value_and_grad(mse)(MLP, X, Y)
    our_value, our_grads = oxjax.filter_value_and_grad(mse)(MLP, X, Y)
    np.testing.assert_allclose(our_value, their_value, rtol=1e-6)
    assert jtu.tree_structure(our_grads) == jtu.tree_structure(their_grads)


def test_partition_and_combine_match_equinox() -> None:
    ours = oxjax.partition(MLP, oxjax.is_array)
    theirs = eqx.partition(MLP, eqx.is_array)
    for our_part, their_part in zip(ours, theirs, strict=True):
        assert jtu.tree_structure(our_part) == jtu.tree_structure(their_part)
        assert_identical(jtu.tree_leaves(our_part), jtu.tree_leaves(their_part))
    combined = oxjax.combine(*ours)
    assert type(combined) is eqx.nn.MLP
    assert jtu.tree_structure(combined) == jtu.tree_structure(MLP)
    assert_identical(jtu.tree_leaves(combined), jtu.tree_leaves(MLP))


def test_filter_vmap_over_a_stacked_module_matches_jax_vmap() -> None:
    """An ensemble built by vmapping the constructor, then run member by member."""
    keys = jax.random.split(KEYS[1], 3)
    theirs = jax.vmap(make_tiny)(keys)
    ours = oxjax.filter_vmap(make_tiny)(keys)
    assert type(ours) is Tiny
    assert jtu.tree_structure(ours) == jtu.tree_structure(theirs)
    for our_leaf, their_leaf in zip(jtu.tree_leaves(ours), jtu.tree_leaves(theirs), strict=True):
        np.testing.assert_allclose(our_leaf, their_leaf, rtol=1e-6)
    x = jnp.ones((1, 2))
    their_out = jax.vmap(lambda m, x: m(x), in_axes=(0, None))(theirs, x)
    our_out = oxjax.filter_vmap(lambda m, x: m(x), in_axes=(0, None))(theirs, x)
    assert our_out.shape == (3, 1, 1)
    np.testing.assert_allclose(our_out, their_out, rtol=1e-6)


class Holder(oxtree.Module):
    """An oxtree Module whose parameter is an equinox Module."""

    def __init__(self, inner: Tiny) -> None:
        self.register_parameter("inner", inner)
        self.register_state("steps", jnp.zeros((), jnp.int32))


def test_oxtree_module_with_an_equinox_submodule_through_filter_jit() -> None:
    """The equinox Module's arrays are traced (one trace for two calls) and its replacement is
    written back to the caller's Module."""
    holder = Holder(TINY)
    traces = []

    @oxjax.filter_jit
    def double(h: Holder, x: jax.Array) -> jax.Array:
        traces.append(1)
        h.inner = jax.tree.map(lambda p: p * 2, h.inner)
        h.steps = h.steps + 1
        return h.inner(x)

    double(holder, X)
    out = double(holder, X)
    assert len(traces) == 1
    assert type(holder.inner) is Tiny
    assert holder.inner.act == "tanh"
    np.testing.assert_allclose(holder.inner.w1, TINY.w1 * 4, rtol=1e-6)
    assert int(holder.steps) == 2
    np.testing.assert_allclose(out, holder.inner(X), rtol=1e-5)
    assert [otu.keystr(path) for path, _ in otu.tree_flatten_with_path(holder)[0]] == [
        ".inner.w1",
        ".inner.b1",
        ".inner.w2",
        ".steps",
    ]


def test_graph_flatten_in_oxtree_jax_sees_module_fields_and_keeps_sharing() -> None:
    """`oxtree.jax.graph_flatten` (what filter_jit flattens with) sees an equinox Module's
    leaves, and a Module met twice is one object after the round trip."""
    tree = {"a": LINEAR, "b": [LINEAR], "c": MLP}
    leaves, graphdef = oxjax.graph_flatten(tree)
    assert_identical(leaves, jtu.tree_leaves([LINEAR, MLP]))
    out = oxjax.graph_unflatten(graphdef, leaves)
    assert type(out["a"]) is eqx.nn.Linear
    assert out["b"][0] is out["a"]
    assert jtu.tree_structure(out["c"]) == jtu.tree_structure(MLP)


class Opaque(eqx.Module):
    """A Module whose own repr shows nothing: what the pretty-printer shows is its own walk."""

    weight: jax.Array
    bias: jax.Array

    def __repr__(self) -> str:
        return "<opaque>"


def test_pretty_shows_module_fields_and_array_shapes() -> None:
    text = oxtree.pretty.pformat({"layer": Opaque(jnp.ones((2, 3)), jnp.zeros(3))})
    assert "weight=f32[2,3]" in text
    assert "bias=f32[3]" in text
    text = oxtree.pretty.pformat(MLP)
    assert "layers" in text
    assert "f32[3,2]" in text


def test_summary_lists_module_fields_and_array_shapes() -> None:
    text = oxtree.pretty.summary(MLP, depth=None)
    assert ".layers[0].weight" in text
    assert "f32[3,2]" in text
    total = next(line for line in text.splitlines() if line.startswith("total")).split()
    assert int(total[1]) == len(jtu.tree_leaves(MLP))
