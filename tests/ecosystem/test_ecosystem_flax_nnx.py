"""Flax NNX Modules, Variables and State through oxtree's JAX face and oxtree.jax.

Flax NNX registers with JAX:
- every `nnx.Module` (an `nnx.Pytree`) subclass, in `__init_subclass__`, with
  `register_pytree_with_keys`: the data attributes are the children (GetAttrKey, sorted by
  name, a `PytreeState` node first), the static ones and a mapping of which is which go to the
  aux data;
- every `nnx.Variable` subclass (`Param`, `BatchStat`, the Rngs' `RngKey`...) with
  `register_pytree_with_keys`: one child, the value, at GetAttrKey('value'), the metadata in
  the aux data;
- `nnx.State` with `register_pytree_with_keys`: a mapping, keyed by DictKey in sorted order;
- `nnx.split`'s GraphDef with `register_static`; `PytreeState` with `register_pytree_node`.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
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

nnx = import_or_skip("flax.nnx")

A, B, C, D = ARRAYS


class Block(nnx.Module):
    """A submodule, a data attribute that is a plain array, and static configuration."""

    def __init__(self, rngs: Any) -> None:
        self.dense = nnx.Linear(2, 3, rngs=rngs)
        self.norm = nnx.BatchNorm(3, rngs=rngs)
        self.scale = nnx.Param(jnp.ones(()))
        self.label = "block"

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.norm(self.dense(x)) * self.scale


LINEAR = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
BLOCK = Block(nnx.Rngs(1))
GRAPHDEF, STATE = nnx.split(LINEAR)
X = jnp.linspace(-1.0, 1.0, 8).reshape(4, 2)
Y = jnp.sin(X[:, :1]) * jnp.ones((1, 3))

TREES: dict[str, Any] = {
    "param": nnx.Param(A),
    "param_of_none": nnx.Param(None),
    "param_of_tree": nnx.Param([A, {"k": B}]),
    "batch_stat": nnx.BatchStat({"mean": C}),
    "linear": LINEAR,
    "block": BLOCK,
    "rngs": nnx.Rngs(0),
    "state": STATE,
    "state_of_block": nnx.state(BLOCK),
    "params_only": nnx.state(BLOCK, nnx.Param),
    "split": (GRAPHDEF, STATE),
    "plain_state": nnx.State({"b": nnx.Param(A), "a": {"c": B, "d": None}}),
    "in_containers": {"model": LINEAR, "states": [STATE, None], "x": D},
}


@pytest.mark.parametrize("name", list(TREES))
def test_nnx_objects_match_jax(name: str) -> None:
    check_tree(TREES[name])


def is_variable(x: Any) -> bool:
    return isinstance(x, nnx.Variable)


@pytest.mark.parametrize("name", ["linear", "block", "state_of_block"])
def test_is_leaf_stops_at_variables_like_jax(name: str) -> None:
    check_tree(TREES[name], is_variable)


def test_keys_are_jax_key_objects() -> None:
    """Modules and Variables key their children by GetAttrKey, State by DictKey: JAX's."""
    for tree in (LINEAR, STATE):
        ours = otu.tree_flatten_with_path(tree)[0]
        theirs = jtu.tree_flatten_with_path(tree)[0]
        assert [path for path, _ in ours] == [path for path, _ in theirs]
        assert [tuple(map(type, path)) for path, _ in ours] == [
            tuple(map(type, path)) for path, _ in theirs
        ]
    assert [otu.keystr(path) for path, _ in otu.tree_flatten_with_path(LINEAR)[0]] == [
        ".bias.value",
        ".kernel.value",
    ]


def test_merge_of_a_state_rebuilt_by_oxtree() -> None:
    """A State rebuilt by oxtree's tree_map merges back into a working Module."""
    doubled = otu.tree_map(lambda x: x * 2, STATE)
    assert type(doubled) is nnx.State
    model = nnx.merge(GRAPHDEF, doubled)
    np.testing.assert_allclose(model.kernel[...], LINEAR.kernel[...] * 2)


def test_treedef_equality_follows_jax() -> None:
    check_equalities(
        [
            nnx.Param(A),
            nnx.Param(B),
            nnx.BatchStat(A),
            nnx.Param((A,)),
            LINEAR,
            nnx.Linear(2, 3, rngs=nnx.Rngs(5)),
            nnx.Linear(3, 2, rngs=nnx.Rngs(0)),
            nnx.Linear(2, 3, use_bias=False, rngs=nnx.Rngs(0)),
            STATE,
            nnx.state(nnx.Linear(2, 3, rngs=nnx.Rngs(5))),
            nnx.State({"a": A}),
            nnx.State({"b": A}),
            {"a": A},
            GRAPHDEF,
            nnx.split(nnx.Linear(2, 3, rngs=nnx.Rngs(5)))[0],
            nnx.split(nnx.Linear(3, 2, rngs=nnx.Rngs(5)))[0],
        ]
    )


MISMATCHES = {
    "variable_types": (nnx.Param(A), nnx.BatchStat(A)),
    "state_keys": (nnx.State({"a": A}), nnx.State({"b": A})),
    "state_vs_dict": ([nnx.State({"a": A})], [{"a": A}]),
    "module_sizes": (LINEAR, nnx.Linear(3, 2, rngs=nnx.Rngs(0))),
    "graphdefs": (GRAPHDEF, nnx.split(nnx.Linear(3, 2, rngs=nnx.Rngs(0)))[0]),
}


@pytest.mark.parametrize("name", list(MISMATCHES))
def test_structure_mismatches_raise_where_jax_raises(name: str) -> None:
    check_mismatch(*MISMATCHES[name])


BUILDERS = [
    lambda ch: st.builds(nnx.Param, ch),
    lambda ch: st.builds(nnx.BatchStat, ch),
    lambda ch: st.dictionaries(st.sampled_from(["p", "q"]), ch, max_size=2).map(nnx.State),
]


@HYPOTHESIS_SETTINGS
@given(tree=nestings(BUILDERS, fixed=[LINEAR, GRAPHDEF]))
def test_random_nestings_of_nnx_objects_match_jax(tree: Any) -> None:
    check_tree(tree)


@HYPOTHESIS_SETTINGS
@given(trees=st.lists(nestings(BUILDERS, max_leaves=3), min_size=2, max_size=4))
def test_random_treedef_equalities_follow_jax(trees: list[Any]) -> None:
    check_equalities(trees)


def test_a_module_class_made_inside_a_test_is_a_node_at_once() -> None:
    class Fresh(nnx.Module):
        def __init__(self) -> None:
            self.w = nnx.Param(jnp.ones(2))
            self.extra = nnx.BatchStat(jnp.zeros(1))
            self.name = "fresh"

    fresh = Fresh()
    assert_identical(otu.tree_leaves(fresh), jtu.tree_leaves(fresh))
    assert len(otu.tree_leaves(fresh)) == 2
    check_tree({"fresh": fresh, "linear": LINEAR})


# --------------------------------------------------------------------------------------------------
# oxtree.jax on NNX models.


def test_filter_jit_runs_a_module_like_jax_jit() -> None:
    """The Module's arrays are traced: another Module of the same structure reuses the
    trace (a static Module would be part of the cache key, and trace again)."""
    traces = []

    def apply(m: Any, x: jax.Array) -> jax.Array:
        traces.append(1)
        return m(x)

    other = nnx.Linear(2, 3, rngs=nnx.Rngs(7))
    ox_apply = oxjax.filter_jit(apply)
    for model in (LINEAR, other):
        theirs = jax.jit(lambda m, x: m(x))(model, X)
        np.testing.assert_allclose(ox_apply(model, X), theirs, rtol=1e-6)
    assert len(traces) == 1


def mse(params: Any, graphdef: Any, x: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.mean((nnx.merge(graphdef, params)(x) - y) ** 2)


def test_filter_jit_trains_the_split_state_like_jax_jit() -> None:
    """The functional API: a GraphDef (a static node) and a State of Params."""

    def update(params: Any, grads: Any) -> Any:
        return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)

    @jax.jit
    def jax_step(params: Any, graphdef: Any, x: jax.Array, y: jax.Array) -> Any:
        loss, grads = jax.value_and_grad(mse)(params, graphdef, x, y)
        return update(params, grads), loss

    @oxjax.filter_jit
    def ox_step(params: Any, graphdef: Any, x: jax.Array, y: jax.Array) -> Any:
        loss, grads = oxjax.filter_value_and_grad(mse)(params, graphdef, x, y)
        return update(params, grads), loss

    theirs = ours = STATE
    their_losses, our_losses = [], []
    for _ in range(3):
        theirs, their_loss = jax_step(theirs, GRAPHDEF, X, Y)
        ours, our_loss = ox_step(ours, GRAPHDEF, X, Y)
        their_losses.append(their_loss)
        our_losses.append(our_loss)
    np.testing.assert_allclose(our_losses, their_losses, rtol=1e-5)
    assert our_losses[-1] < our_losses[0]
    assert type(ours) is nnx.State
    assert jtu.tree_structure(ours) == jtu.tree_structure(theirs)


def test_partition_of_a_state_keeps_its_variables() -> None:
    params, rest = oxjax.partition(STATE, oxjax.is_array)
    assert type(params) is nnx.State
    assert_identical(jtu.tree_leaves(params), jtu.tree_leaves(STATE))
    assert jtu.tree_leaves(rest) == []
    combined = oxjax.combine(params, rest)
    assert jtu.tree_structure(combined) == jtu.tree_structure(STATE)
