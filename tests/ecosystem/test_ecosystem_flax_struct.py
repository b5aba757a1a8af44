"""flax.struct dataclasses through oxtree's JAX face and oxtree.jax.

`flax.struct.dataclass` (and `flax.struct.PyTreeNode`, whose subclasses it decorates) makes a
frozen dataclass and registers it with `jax.tree_util.register_dataclass(cls, data_fields,
meta_fields)`: fields with `pytree_node=False` go to the aux data, the others are children
keyed by `jax.tree_util.GetAttrKey`. oxtree must see them exactly as JAX does.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
import oxtree
import oxtree.jax as oxjax
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

struct = import_or_skip("flax.struct")

A, B, C, D = ARRAYS


@struct.dataclass
class Pair:
    a: Any
    b: Any
    name: str = struct.field(pytree_node=False, default="p")


class Node(struct.PyTreeNode):
    """A PyTreeNode subclass: the same registration, through `__init_subclass__`."""

    x: Any
    meta: int = struct.field(pytree_node=False, default=0)


@struct.dataclass
class Empty:
    """Only a meta field: a node without children."""

    tag: str = struct.field(pytree_node=False, default="e")


@struct.dataclass
class Dense:
    w: jax.Array
    b: jax.Array
    act: str = struct.field(pytree_node=False, default="tanh")

    def __call__(self, x: jax.Array) -> jax.Array:
        h = x @ self.w + self.b
        return jnp.tanh(h) if self.act == "tanh" else h


class Model(struct.PyTreeNode):
    layers: tuple[Dense, ...]
    scale: float = struct.field(pytree_node=False, default=1.0)

    def __call__(self, x: jax.Array) -> jax.Array:
        for layer in self.layers:
            x = layer(x)
        return x * self.scale


def make_model(key: jax.Array) -> Model:
    k1, k2 = jax.random.split(key)
    return Model(
        (
            Dense(jax.random.normal(k1, (2, 3)) * 0.5, jnp.zeros(3)),
            Dense(jax.random.normal(k2, (3, 1)) * 0.5, jnp.zeros(1), act="linear"),
        )
    )


MODEL = make_model(jax.random.key(0))
X = jnp.linspace(-1.0, 1.0, 8).reshape(4, 2)
Y = jnp.cos(X[:, :1])

TREES: dict[str, Any] = {
    "pair": Pair(A, [B, None]),
    "pair_named": Pair(A, B, name="q"),
    "node": Node({"k": A}, meta=3),
    "empty": Empty(),
    "nested": Pair(Node(Pair(A, None)), (Empty(), Node(B))),
    "model": MODEL,
    "replaced": MODEL.replace(scale=2.0),
    "in_containers": {"params": MODEL, "opt": [Pair(C, D), None]},
}


@pytest.mark.parametrize("name", list(TREES))
def test_flax_structs_match_jax(name: str) -> None:
    check_tree(TREES[name])


def is_pair(x: Any) -> bool:
    return isinstance(x, Pair)


@pytest.mark.parametrize("name", ["pair", "nested", "in_containers"])
def test_is_leaf_stops_at_structs_like_jax(name: str) -> None:
    check_tree(TREES[name], is_pair)


def test_field_keys_are_jax_getattr_keys() -> None:
    ours = otu.tree_flatten_with_path(Pair(A, B))[0]
    theirs = jtu.tree_flatten_with_path(Pair(A, B))[0]
    assert [path for path, _ in ours] == [path for path, _ in theirs]
    assert [type(path[0]) for path, _ in ours] == [jtu.GetAttrKey, jtu.GetAttrKey]


def test_unflatten_and_map_rebuild_the_struct() -> None:
    doubled = otu.tree_map(lambda x: x * 2, MODEL.replace(scale=3.0))
    assert type(doubled) is Model
    assert doubled.scale == 3.0
    assert doubled.layers[1].act == "linear"
    np.testing.assert_allclose(doubled.layers[0].w, MODEL.layers[0].w * 2)


def test_treedef_equality_follows_jax() -> None:
    check_equalities(
        [
            Pair(A, B),
            Pair(B, A),
            Pair(A, B, name="q"),
            Pair(A, (B,)),
            Node(A),
            Node(B),
            Node(A, meta=1),
            Empty(),
            Empty(),
            Empty("f"),
            MODEL,
            make_model(jax.random.key(1)),
            MODEL.replace(scale=2.0),
            (A, B),
        ]
    )


MISMATCHES = {
    "meta_field": (Pair(A, B), Pair(A, B, name="q")),
    "struct_vs_tuple": ([0, Pair(A, B)], [0, (A, B)]),
    "struct_types": (Node(A), Pair(A, None)),
    "inner": ({"m": Node([A])}, {"m": Node((A,))}),
    "model_scale": (MODEL, MODEL.replace(scale=2.0)),
}


@pytest.mark.parametrize("name", list(MISMATCHES))
def test_structure_mismatches_raise_where_jax_raises(name: str) -> None:
    check_mismatch(*MISMATCHES[name])


BUILDERS = [
    lambda ch: st.builds(Pair, ch, ch, st.sampled_from(["p", "q"])),
    lambda ch: st.builds(Node, ch, st.integers(0, 1)),
]


@HYPOTHESIS_SETTINGS
@given(tree=nestings(BUILDERS, fixed=[Empty(), MODEL]))
def test_random_nestings_of_structs_match_jax(tree: Any) -> None:
    check_tree(tree)


@HYPOTHESIS_SETTINGS
@given(trees=st.lists(nestings(BUILDERS, fixed=[Empty()], max_leaves=3), min_size=2, max_size=4))
def test_random_treedef_equalities_follow_jax(trees: list[Any]) -> None:
    check_equalities(trees)


def test_a_struct_defined_inside_a_test_is_a_node_at_once() -> None:
    @struct.dataclass
    class Local:
        u: Any
        v: Any = None
        label: str = struct.field(pytree_node=False, default="l")

    local = Local(A, {"w": B}, label="m")
    assert_identical(otu.tree_leaves(local), [A, B])
    check_tree(Pair(local, Local(C)))


# --------------------------------------------------------------------------------------------------
# oxtree.jax on flax-struct models.

LR = 0.1


def mse(model: Model, x: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.mean((model(x) - y) ** 2)


def sgd(model: Any, grads: Any) -> Any:
    return jax.tree.map(lambda p, g: p - LR * g, model, grads)


def test_filter_jit_trains_a_struct_model_like_jax_jit() -> None:
    @jax.jit
    def jax_step(model: Model, x: jax.Array, y: jax.Array) -> tuple[Model, jax.Array]:
        loss, grads = jax.value_and_grad(mse)(model, x, y)
        return sgd(model, grads), loss

    @oxjax.filter_jit
    def ox_step(model: Model, x: jax.Array, y: jax.Array) -> tuple[Model, jax.Array]:
        loss, grads = oxjax.filter_value_and_grad(mse)(model, x, y)
        return sgd(model, grads), loss

    theirs = ours = MODEL
    their_losses, our_losses = [], []
    for _ in range(3):
        theirs, their_loss = jax_step(theirs, X, Y)
        ours, our_loss = ox_step(ours, X, Y)
        their_losses.append(their_loss)
        our_losses.append(our_loss)
    np.testing.assert_allclose(our_losses, their_losses, rtol=1e-5)
    assert our_losses[-1] < our_losses[0]
    assert type(ours) is Model
    assert type(ours.layers[0]) is Dense
    for our_leaf, their_leaf in zip(jtu.tree_leaves(ours), jtu.tree_leaves(theirs), strict=True):
        np.testing.assert_allclose(our_leaf, their_leaf, rtol=1e-5)


def test_filter_grad_matches_jax_grad() -> None:
    theirs = jax.grad(mse)(MODEL, X, Y)
    ours = oxjax.filter_grad(mse)(MODEL, X, Y)
    assert jtu.tree_structure(ours) == jtu.tree_structure(theirs)
    for our_leaf, their_leaf in zip(jtu.tree_leaves(ours), jtu.tree_leaves(theirs), strict=True):
        np.testing.assert_allclose(our_leaf, their_leaf, rtol=1e-5)


def test_partition_and_combine_round_trip() -> None:
    tree = {"model": MODEL, "pair": Pair(A, "label")}
    params, static = oxjax.partition(tree, oxjax.is_array)
    assert_identical(jtu.tree_leaves(params), [*jtu.tree_leaves(MODEL), A])
    assert type(params["model"]) is Model
    assert params["pair"].b is None
    assert static["pair"].b == "label"
    assert static["pair"].a is None
    combined = oxjax.combine(params, static)
    assert jtu.tree_structure(combined) == jtu.tree_structure(tree)
    assert_identical(jtu.tree_leaves(combined), jtu.tree_leaves(tree))


def test_filter_vmap_over_stacked_structs_matches_jax_vmap() -> None:
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), MODEL, make_model(jax.random.key(1)))
    theirs = jax.vmap(lambda m, x: m(x), in_axes=(0, None))(stacked, X)
    ours = oxjax.filter_vmap(lambda m, x: m(x), in_axes=(0, None))(stacked, X)
    assert ours.shape == (2, 4, 1)
    np.testing.assert_allclose(ours, theirs, rtol=1e-6)


class Holder(oxtree.Module):
    """An oxtree Module whose parameter is a flax struct."""

    def __init__(self, model: Model) -> None:
        self.register_parameter("model", model)


def test_oxtree_module_with_a_struct_attribute_through_filter_jit() -> None:
    holder = Holder(MODEL)
    traces = []

    @oxjax.filter_jit
    def step(h: Holder, x: jax.Array, y: jax.Array) -> jax.Array:
        traces.append(1)
        loss, grads = jax.value_and_grad(mse)(h.model, x, y)
        h.model = sgd(h.model, grads)
        return loss

    first = step(holder, X, Y)
    second = step(holder, X, Y)
    assert len(traces) == 1
    assert second < first
    assert type(holder.model) is Model
    expected = MODEL
    for _ in range(2):
        expected = sgd(expected, jax.grad(mse)(expected, X, Y))
    np.testing.assert_allclose(holder.model.layers[0].w, expected.layers[0].w, rtol=1e-5)


def test_graph_flatten_in_oxtree_jax_sees_struct_fields_and_keeps_sharing() -> None:
    layer = MODEL.layers[0]
    leaves, graphdef = oxjax.graph_flatten({"a": layer, "b": [layer]})
    assert_identical(leaves, jtu.tree_leaves(layer))
    out = oxjax.graph_unflatten(graphdef, leaves)
    assert type(out["a"]) is Dense
    assert out["b"][0] is out["a"]
