"""chex dataclasses through oxtree's JAX face and oxtree.jax.

`chex.dataclass` registers the class with `jax.tree_util.register_pytree_with_keys` (when the
class is defined outside `__main__`, and again, idempotently, on every construction): the
children are the instance's `__dict__` values in sorted name order, keyed by
`jax.tree_util.GetAttrKey`, the aux data is the tuple of names. By default the class is also a
`collections.abc.Mapping` (`mappable_dataclass=True`), which must not make it a dict to oxtree.
"""

from __future__ import annotations

from collections.abc import Mapping
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

chex = import_or_skip("chex")

A, B, C, D = ARRAYS


@chex.dataclass
class Pair:
    # Declared out of alphabetical order: chex flattens in sorted order, JAX follows chex.
    second: Any
    first: Any = None


@chex.dataclass(frozen=True)
class Frozen:
    value: Any
    note: Any = "n"


@chex.dataclass(mappable_dataclass=False)
class Plain:
    x: Any


@chex.dataclass
class TrainState:
    params: Any
    step: Any


TREES: dict[str, Any] = {
    "pair": Pair(second=A, first=[B, None]),
    "pair_default": Pair(second=A),
    "frozen": Frozen(value={"k": A}),
    "plain": Plain(x=(A, B)),
    "nested": Pair(second=Frozen(value=Plain(x=A)), first={"p": Pair(second=None)}),
    "train_state": TrainState(params={"w": jnp.ones((2, 2)), "b": jnp.zeros(2)}, step=0),
    "in_containers": [Pair(second=A), {"s": Frozen(value=B)}, None],
}


@pytest.mark.parametrize("name", list(TREES))
def test_chex_dataclasses_match_jax(name: str) -> None:
    check_tree(TREES[name])


def is_pair(x: Any) -> bool:
    return isinstance(x, Pair)


@pytest.mark.parametrize("name", ["pair", "nested", "in_containers"])
def test_is_leaf_stops_at_dataclasses_like_jax(name: str) -> None:
    check_tree(TREES[name], is_pair)


def test_fields_come_in_sorted_order_keyed_like_jax() -> None:
    ours = otu.tree_flatten_with_path(Pair(second=A, first=B))[0]
    theirs = jtu.tree_flatten_with_path(Pair(second=A, first=B))[0]
    assert [path for path, _ in ours] == [path for path, _ in theirs]
    assert [type(path[0]) for path, _ in ours] == [jtu.GetAttrKey, jtu.GetAttrKey]
    assert [otu.keystr(path) for path, _ in ours] == [".first", ".second"]
    assert_identical([leaf for _, leaf in ours], [B, A])


def test_a_mappable_dataclass_is_not_a_dict() -> None:
    pair = Pair(second=A, first=B)
    assert isinstance(pair, Mapping)
    assert not isinstance(pair, dict)
    assert_identical(otu.tree_leaves(pair), [B, A])
    rebuilt = otu.tree_map(lambda x: x, pair)
    assert rebuilt is not pair
    assert type(rebuilt) is Pair
    assert rebuilt.second is A


def test_treedef_equality_follows_jax() -> None:
    check_equalities(
        [
            Pair(second=A, first=B),
            Pair(second=B, first=A),
            Pair(second=A),
            Pair(second=A, first=(B,)),
            Frozen(value=A),
            Frozen(value=A, note="m"),  # a data field: equal treedefs
            Plain(x=A),
            Plain(x=B),
            TrainState(params=A, step=0),
            {"first": B, "second": A},
            (A, B),
        ]
    )


MISMATCHES = {
    "types": (Pair(second=A, first=B), TrainState(params=A, step=B)),
    "dataclass_vs_dict": ([Plain(x=A)], [{"x": A}]),
    "inner": (Pair(second=[A], first=None), Pair(second=(A,), first=None)),
    "frozen_vs_plain": (Frozen(value=A, note=B), Plain(x=A)),
}


@pytest.mark.parametrize("name", list(MISMATCHES))
def test_structure_mismatches_raise_where_jax_raises(name: str) -> None:
    check_mismatch(*MISMATCHES[name])


BUILDERS = [
    lambda ch: st.builds(lambda s, f: Pair(second=s, first=f), ch, ch),
    lambda ch: st.builds(lambda v: Frozen(value=v), ch),
    lambda ch: st.builds(lambda x: Plain(x=x), ch),
]


@HYPOTHESIS_SETTINGS
@given(tree=nestings(BUILDERS))
def test_random_nestings_of_dataclasses_match_jax(tree: Any) -> None:
    check_tree(tree)


@HYPOTHESIS_SETTINGS
@given(trees=st.lists(nestings(BUILDERS, max_leaves=3), min_size=2, max_size=4))
def test_random_treedef_equalities_follow_jax(trees: list[Any]) -> None:
    check_equalities(trees)


def test_a_dataclass_defined_inside_a_test_is_a_node_at_once() -> None:
    @chex.dataclass
    class Local:
        b: Any
        a: Any

    local = Local(b=A, a={"z": B})
    assert_identical(otu.tree_leaves(local), [B, A])
    check_tree([local, Pair(second=Local(b=None, a=C))])


# --------------------------------------------------------------------------------------------------
# oxtree.jax on chex dataclasses.


def loss(state: TrainState, x: jax.Array) -> jax.Array:
    return jnp.sum((x @ state.params["w"] + state.params["b"]) ** 2)


def test_filter_jit_steps_a_train_state_like_jax_jit() -> None:
    def step(state: TrainState, x: jax.Array) -> tuple[TrainState, jax.Array]:
        value, grads = jax.value_and_grad(lambda p: loss(state.replace(params=p), x))(state.params)
        params = jax.tree.map(lambda p, g: p - 0.05 * g, state.params, grads)
        return state.replace(params=params, step=state.step + 1), value

    jax_step, ox_step = jax.jit(step), oxjax.filter_jit(step)
    x = jnp.array([[1.0, -0.5]])
    state = TrainState(params={"w": jnp.eye(2), "b": jnp.ones(2)}, step=jnp.zeros((), jnp.int32))
    theirs = ours = state
    for _ in range(3):
        theirs, their_value = jax_step(theirs, x)
        ours, our_value = ox_step(ours, x)
        np.testing.assert_allclose(our_value, their_value, rtol=1e-6)
    assert type(ours) is TrainState
    assert int(ours.step) == 3
    np.testing.assert_allclose(ours.params["w"], theirs.params["w"], rtol=1e-6)


def test_filter_grad_matches_jax_grad() -> None:
    state = TrainState(params={"w": jnp.eye(2), "b": jnp.ones(2)}, step=jnp.zeros((), jnp.int32))
    x = jnp.array([[1.0, -0.5]])
    ours = oxjax.filter_grad(loss)(state, x)
    assert type(ours) is TrainState
    assert ours.step is None  # an integer array: not differentiated
    theirs = jax.grad(lambda p: loss(state.replace(params=p), x))(state.params)
    np.testing.assert_allclose(ours.params["w"], theirs["w"], rtol=1e-6)
    np.testing.assert_allclose(ours.params["b"], theirs["b"], rtol=1e-6)
