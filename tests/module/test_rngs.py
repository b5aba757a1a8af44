"""oxtree.Rngs: named PRNG key streams as a Module, under eager calls and the filtered
transforms (write-back of the counters, never differentiated, split for filter_vmap)."""

from __future__ import annotations

import copy
import pickle
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import oxtree
import oxtree.jax as oxjax
import pytest
from oxtree import Kind, Module, Parameter, Rngs, RngStream
from oxtree.module import Not, OfKind
from oxtree.rngs import RNG


def data(key: Any) -> np.ndarray:
    """The bits of a key, typed or raw, as a NumPy array (to compare keys)."""
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jax.random.key_data(key)
    return np.asarray(key)


def same(a: Any, b: Any) -> bool:
    return bool(np.array_equal(data(a), data(b)))


# --------------------------------------------------------------------------------------------
# Streams: determinism, independence, counters


def test_same_seed_same_keys_and_each_call_a_new_key() -> None:
    a, b = Rngs(0, dropout=1), Rngs(0, dropout=1)
    first = [a.dropout() for _ in range(3)]
    assert all(same(x, b.dropout()) for x in first)
    assert not same(first[0], first[1])
    assert not same(first[1], first[2])
    assert int(a.dropout.count) == 3
    assert int(a.default.count) == 0
    # the key is fold_in(seed key, count), as Flax NNX's streams make it
    assert same(first[2], jax.random.fold_in(jax.random.key(1), 2))


def test_streams_are_independent() -> None:
    a, b = Rngs(0, dropout=1), Rngs(0, dropout=1)
    for _ in range(5):
        a()  # advancing the default stream leaves dropout's keys alone
    assert same(a.dropout(), b.dropout())
    assert not same(Rngs(params=0).params(), Rngs(params=1).params())
    assert not same(a.dropout(), a())


def test_typed_and_raw_keys() -> None:
    typed = Rngs(jax.random.key(3))
    raw = Rngs(jax.random.PRNGKey(3))
    kt, kr = typed(), raw()
    assert jax.dtypes.issubdtype(kt.dtype, jax.dtypes.prng_key)
    assert kt.shape == ()
    assert kr.dtype == jnp.uint32
    assert kr.shape == (2,)
    assert same(kt, kr)  # the same bits: both are fold_in of the same key
    assert same(Rngs(3)(), kt)  # an int seed is jax.random.key(seed)
    assert same(Rngs(np.int64(3))(), kt)
    assert same(Rngs(jnp.int32(3))(), kt)
    assert same(Rngs(np.asarray(jax.random.PRNGKey(3)))(), kr)  # a NumPy raw key
    assert jax.random.normal(kr, (2,)).shape == (2,)


def test_mapping_and_stream_seeds() -> None:
    rngs = Rngs({"params": 0, "dropout": 1}, extra=2)
    assert list(rngs) == ["params", "dropout", "extra"]
    assert len(rngs) == 3
    assert "params" in rngs
    assert "default" not in rngs
    assert [n for n, _ in rngs.items()] == list(rngs)
    again = Rngs(params=rngs.params)  # a stream gives its key; its counter starts afresh
    rngs.params()
    assert same(again.params(), Rngs(params=0).params())
    assert Rngs(default=5).default is not None  # default by keyword


def test_indexing_and_default_fallback() -> None:
    rngs = Rngs(0, params=1)
    assert rngs["params"] is rngs.params
    assert rngs.dropout is rngs.default
    assert rngs["dropout"] is rngs.default
    assert same(Rngs(0).dropout(), Rngs(0)())


def test_fork_and_split() -> None:
    rngs = Rngs(0, params=1)
    forked = rngs.fork()
    assert int(rngs.params.count) == 1
    assert int(forked.params.count) == 0
    assert not same(forked.params(), Rngs(0, params=1).params())
    split = Rngs(0, params=1).split(4)
    assert split.params.key.shape == (4,)
    assert split.params.count.shape == (4,)
    keys = split.params()  # one key per element, each its own
    assert keys.shape == (4,)
    assert len({tuple(data(k)) for k in keys}) == 4
    assert split.params.count.tolist() == [1, 1, 1, 1]
    assert Rngs(jax.random.PRNGKey(0)).split((2, 3)).default().shape == (2, 3, 2)
    assert Rngs(0).split(2).split(3).default.key.shape == (2, 3)


def test_a_stream_alone() -> None:
    s = RngStream(7)
    assert same(s(), jax.random.fold_in(jax.random.key(7), 0))
    assert int(s.count) == 1
    assert s.fork().count.shape == ()
    assert s.split(2).key.shape == (2,)
    with pytest.raises(TypeError, match=r"RngStream expects an int seed.*got str: 'a'"):
        RngStream("a")


# --------------------------------------------------------------------------------------------
# As a Module: kinds, leaves, copies


def test_keys_and_counters_are_leaves_of_the_rng_kind() -> None:
    rngs = Rngs(0, dropout=1)
    assert RNG is Kind("rng")
    assert dict(rngs.name_to_kind) == {"default": Kind.MODULE, "dropout": Kind.MODULE}
    assert dict(rngs.dropout.name_to_kind) == {"key": RNG, "count": RNG}
    paths = [oxtree.keystr(p) for p, _ in oxtree.tree_util.tree_flatten_with_path(rngs)[0]]
    assert paths == [".default.key", ".default.count", ".dropout.key", ".dropout.count"]
    assert oxtree.tree_leaves(rngs.parameters()) == []
    assert oxtree.tree_leaves(rngs.states()) == []
    assert len(oxtree.tree_leaves(rngs.select(RNG))) == 4
    assert oxtree.tree_leaves(rngs.select(Not(OfKind(RNG)))) == []
    assert repr(rngs) == (
        "Rngs(default=RngStream(key=key<fry>[], count=u32[]), "
        "dropout=RngStream(key=key<fry>[], count=u32[]))"
    )


def test_copies_and_pickles() -> None:
    rngs = Rngs(0, dropout=1)
    rngs.dropout()
    for other in (copy.deepcopy(rngs), pickle.loads(pickle.dumps(rngs))):
        assert list(other) == ["default", "dropout"]
        assert same(other.dropout(), jax.random.fold_in(jax.random.key(1), 1))
    mapped = oxtree.tree_map(lambda x: x, rngs)
    assert type(mapped) is Rngs
    assert mapped.dropout is not rngs.dropout


# --------------------------------------------------------------------------------------------
# Under the filtered transforms


def test_counters_advance_across_filter_jit_calls_as_eagerly() -> None:
    jitted, eager = Rngs(0, dropout=1), Rngs(0, dropout=1)

    @oxjax.filter_jit
    def draw(rngs: Rngs) -> Any:
        return jax.random.normal(rngs.dropout(), (2,)), rngs()

    for _ in range(3):
        out, key = draw(jitted)
        assert jnp.allclose(out, jax.random.normal(eager.dropout(), (2,)))
        assert same(key, eager())
    assert int(jitted.dropout.count) == 3
    assert int(jitted.default.count) == 3


def test_raw_keys_through_filter_jit() -> None:
    rngs = Rngs(jax.random.PRNGKey(0))
    k1 = oxjax.filter_jit(lambda r: r())(rngs)
    k2 = oxjax.filter_jit(lambda r: r())(rngs)
    assert k1.dtype == jnp.uint32
    assert not same(k1, k2)
    assert same(k2, jax.random.fold_in(jax.random.PRNGKey(0), 1))
    assert int(rngs.default.count) == 2


class Dropout(Module):
    def __init__(self, rate: float, rngs: Rngs) -> None:
        self.rate = rate
        self.rngs = rngs

    def __call__(self, x: Any) -> Any:
        keep = jax.random.bernoulli(self.rngs.dropout(), 1.0 - self.rate, x.shape)
        return jnp.where(keep, x / (1.0 - self.rate), 0.0)


class Net(Module):
    w: Parameter

    def __init__(self, rngs: Rngs) -> None:
        self.w = jax.random.normal(rngs.params(), (4, 4)) * 0.5
        self.drop = Dropout(0.5, rngs)

    def __call__(self, x: Any) -> Any:
        return self.drop(x @ self.w)


@pytest.mark.parametrize(
    "seed", [lambda: 1, lambda: jax.random.key(1), lambda: jax.random.PRNGKey(1)]
)
def test_dropout_training_under_filter_jit_and_value_and_grad(seed: Any) -> None:
    net = Net(Rngs(0, dropout=seed()))
    x, y = jnp.ones((8, 4)), jnp.zeros((8, 4))
    opt = optax.sgd(0.1)
    state = opt.init(net.parameters())

    def loss(net: Net) -> Any:
        return jnp.mean((net(x) - y) ** 2)

    @oxjax.filter_jit
    def step(net: Net, state: Any) -> Any:
        value, grads = oxjax.filter_value_and_grad(loss)(net)
        assert grads.drop.rngs.dropout.key is None
        assert grads.drop.rngs.dropout.count is None
        updates, state = opt.update(grads.parameters(), state)
        new = optax.apply_updates(net.parameters(), updates)
        return value, net.update(new), state

    values = []
    for _ in range(3):
        value, trained, state = step(net, state)
        net.w = trained.w
        values.append(float(value))
    # the dropout stream advanced once per step on the caller's object; params did not
    assert int(net.drop.rngs.dropout.count) == 3
    assert int(net.drop.rngs.params.count) == 1
    assert all(np.isfinite(values))
    grads = oxjax.filter_grad(loss)(net)
    assert grads.w.shape == (4, 4)
    assert grads.drop.rngs.default.key is None
    assert int(net.drop.rngs.dropout.count) == 4  # filter_grad writes back too


def test_split_rngs_build_an_ensemble_under_filter_vmap() -> None:
    class Linear(Module):
        w: Parameter

        def __init__(self, rngs: Rngs) -> None:
            self.w = jax.random.normal(rngs.params(), (3,))

    rngs = Rngs(params=0).split(4)
    ensemble = oxjax.filter_vmap(Linear)(rngs)
    assert ensemble.w.shape == (4, 3)
    assert len({tuple(np.asarray(w).tolist()) for w in ensemble.w}) == 4
    assert rngs.params.count.tolist() == [1, 1, 1, 1]  # written back per element


# --------------------------------------------------------------------------------------------
# Errors


def test_unknown_stream_names_the_streams() -> None:
    rngs = Rngs(params=0, dropout=1)
    with pytest.raises(
        AttributeError,
        match=r"Rngs has no stream 'noise' \(its streams: 'params', 'dropout'\); name it, "
        r"as in Rngs\(noise=0\), or give a default stream",
    ):
        rngs.noise()
    with pytest.raises(KeyError, match="Rngs has no stream 'noise'"):
        rngs["noise"]
    with pytest.raises(AttributeError, match="Rngs has no stream 'default'"):
        rngs()
    with pytest.raises(AttributeError, match=r"its streams: none"):
        Rngs().params
    assert not hasattr(rngs, "noise")
    # private and special names never fall back to the default stream
    with pytest.raises(AttributeError, match="'Rngs' object has no attribute '_private'"):
        Rngs(0)._private


@pytest.mark.parametrize(
    ("seed", "error", "match"),
    [
        (True, TypeError, r"Rngs: stream 'default' expects an int seed.*got bool: True"),
        (1.5, TypeError, r"got float: 1.5"),
        ("0", TypeError, r"got str: '0'"),
        (None, None, None),
        (np.ones(2, np.float32), TypeError, r"got an array of float32\[2\]"),
        (np.zeros((), np.float32), TypeError, r"got an array of float32\[\]"),
        (np.zeros(2, np.int32), TypeError, r"got an array of int32\[2\]"),
        (np.zeros(3, np.uint32), ValueError, r"a raw key is a uint32 array of shape \(\.\.\., 2\)"),
        (2**70, ValueError, r"Rngs: stream 'default': 1180591620717411303424 is not a valid seed"),
    ],
)
def test_bad_seeds(seed: Any, error: Any, match: str) -> None:
    if error is None:  # None is no stream at all
        assert len(Rngs(seed)) == 0
        return
    with pytest.raises(error, match=match):
        Rngs(seed)
    with pytest.raises(error):
        Rngs(noise=seed)


def test_bad_stream_names() -> None:
    with pytest.raises(ValueError, match="'fork' is the name of an Rngs attribute"):
        Rngs(fork=0)
    with pytest.raises(ValueError, match="'parameters' is the name of an Rngs attribute"):
        Rngs(parameters=0)
    with pytest.raises(TypeError, match=r"stream names are identifiers.*got 'a b'"):
        Rngs({"a b": 0})
    with pytest.raises(TypeError, match=r"stream names are identifiers.*got 1"):
        Rngs({1: 0})
    with pytest.raises(TypeError, match=r"stream names are identifiers.*got '_x'"):
        Rngs(_x=0)
    with pytest.raises(TypeError, match="the default stream is given twice"):
        Rngs(0, default=1)
