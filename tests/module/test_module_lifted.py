"""Lifted transforms over Modules: oxtree.jax.filter_vmap, filter_scan, filter_remat and
filter_eval_shape. Results are checked against JAX's own transforms (or a Python loop) on
the same math; ties survive; what the function changes in its arguments is written back to
the caller's objects, and bad input raises an error naming what was wrong, touching
nothing."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import oxtree
import oxtree.jax as oxjax
import pytest
from oxtree import Kind, Module, Parameter, State
from oxtree.jax import (
    Carry,
    StateAxes,
    filter_eval_shape,
    filter_remat,
    filter_scan,
    filter_vmap,
)
from oxtree.module import PathContains


class Linear(Module):
    w: Parameter
    b: Parameter
    calls: State

    def __init__(self, key: Any, n: int = 2) -> None:
        self.w = jax.random.normal(key, (n, n))
        self.b = jnp.zeros(n)
        self.calls = jnp.zeros((), jnp.int32)
        self.act = "tanh"

    def __call__(self, x: Any) -> Any:
        self.calls = self.calls + 1
        y = x @ self.w + self.b
        return jnp.tanh(y) if self.act == "tanh" else y


class Tied(Module):
    def __init__(self, key: Any) -> None:
        self.enc = Linear(key)
        self.dec = self.enc

    def __call__(self, x: Any) -> Any:
        return self.dec(self.enc(x))


KEYS = jax.random.split(jax.random.PRNGKey(0), 3)
X = jnp.array([0.5, -1.0])


def ensemble() -> Linear:
    return filter_vmap(Linear)(KEYS)


# --------------------------------------------------------------------------------------------
# filter_vmap


def test_vmapped_constructor_stacks_an_ensemble() -> None:
    ens = ensemble()
    assert type(ens) is Linear
    assert ens.act == "tanh"
    assert ens.w.shape == (3, 2, 2)
    assert ens.calls.shape == (3,)
    for i, key in enumerate(KEYS):
        np.testing.assert_allclose(ens.w[i], Linear(key).w, rtol=1e-6)


def test_vmapped_call_matches_jax_vmap_and_writes_the_counters_back() -> None:
    ens = ensemble()
    out = filter_vmap(lambda m, x: m(x), in_axes=(0, None))(ens, X)
    expected = jax.vmap(lambda w, b: jnp.tanh(X @ w + b))(ens.w, ens.b)
    np.testing.assert_allclose(out, expected, rtol=1e-6)
    np.testing.assert_array_equal(ens.calls, [1, 1, 1])  # written back, one per member


def test_vmap_without_changes_leaves_the_caller_alone() -> None:
    ens = ensemble()
    w, calls = ens.w, ens.calls
    filter_vmap(lambda m, x: x @ m.w, in_axes=(0, None))(ens, X)
    assert ens.w is w
    assert ens.calls is calls


def test_vmap_keeps_ties_in_the_constructor_the_call_and_the_write_back() -> None:
    tied = filter_vmap(Tied)(KEYS)
    assert tied.enc is tied.dec
    out = filter_vmap(lambda m, x: m(x), in_axes=(0, None))(tied, X)
    assert out.shape == (3, 2)
    assert tied.enc is tied.dec
    np.testing.assert_array_equal(tied.enc.calls, [2, 2, 2])  # one module, called twice

    w = tied.enc.w
    expected = jax.vmap(lambda w: jnp.tanh(jnp.tanh(X @ w) @ w))(w)
    np.testing.assert_allclose(out, expected, rtol=1e-6)


def test_vmap_honours_new_attributes_and_rebinding() -> None:
    class Pair(Module):
        def __init__(self, key: Any) -> None:
            self.a = Linear(key)
            self.b = Linear(key)

    pair = filter_vmap(Pair)(KEYS)
    a = pair.a

    def f(p: Pair) -> None:
        p.register_state("norm", jnp.sum(p.a.w**2))
        p.b = p.a  # tie them

    filter_vmap(f)(pair)
    assert pair.norm.shape == (3,)
    assert pair.name_to_kind["norm"] is Kind.STATE
    assert pair.b is pair.a is a
    np.testing.assert_allclose(pair.norm, jnp.sum(a.w**2, axis=(1, 2)), rtol=1e-6)


def test_state_axes_map_parameters_and_broadcast_the_rest() -> None:
    ens = ensemble().replace(calls=jnp.zeros((), jnp.int32))
    axes = StateAxes({Kind.PARAMETER: 0, ...: None})
    out = filter_vmap(lambda m, x: m(x), in_axes=(axes, None))(ens, X)
    assert out.shape == (3, 2)
    # The same new count for every member: kept unmapped, written back as one value.
    assert ens.calls.shape == ()
    assert int(ens.calls) == 1


def test_a_mapped_change_to_an_unmapped_place_is_an_error_and_writes_nothing() -> None:
    ens = ensemble().replace(calls=jnp.zeros((), jnp.float32))
    calls = ens.calls
    axes = StateAxes({Kind.PARAMETER: 0, ...: None})

    def f(m: Linear) -> None:
        m.calls = m.calls + m.w.sum()
        m.act = "id"

    with pytest.raises(ValueError, match=r"filter_vmap: args\[0\]\.calls is not mapped"):
        filter_vmap(f, in_axes=axes)(ens)
    assert ens.calls is calls
    assert ens.act == "tanh"


def test_vmap_in_axes_along_another_axis_write_back_keeps_it() -> None:
    m = Linear(KEYS[0]).replace(w=jnp.ones((2, 4)), b=jnp.zeros(4), calls=jnp.zeros(4))
    axes = StateAxes({PathContains("w"): 1, ...: 0})

    def f(m: Linear) -> Any:
        m.w = m.w * 2
        m.calls = m.calls + 1.0
        return m.w.sum()

    out = filter_vmap(f, in_axes=axes)(m)
    np.testing.assert_allclose(out, [4.0, 4.0, 4.0, 4.0])
    assert m.w.shape == (2, 4)
    np.testing.assert_allclose(m.w, 2.0)
    np.testing.assert_allclose(m.calls, 1.0)


def test_vmap_out_axes() -> None:
    ens = ensemble()
    w = filter_vmap(lambda m: m.w, out_axes=2)(ens)
    np.testing.assert_allclose(w, jnp.moveaxis(ens.w, 0, 2))
    both = filter_vmap(lambda m, x: (m.w, x * 2), in_axes=(0, None), out_axes=(0, None))(ens, X)
    np.testing.assert_allclose(both[1], X * 2)
    assert both[0].shape == (3, 2, 2)
    # A StateAxes for a Module in the output; -1 counts from the end as jax.vmap does.
    out = filter_vmap(lambda m: m, out_axes=StateAxes({Kind.PARAMETER: -1, ...: 0}))(ens)
    assert out.w.shape == (2, 2, 3)
    assert out.calls.shape == (3,)
    with pytest.raises(ValueError, match=r"filter_vmap: output\[0\] is not mapped"):
        filter_vmap(lambda m: (m.w, 1), out_axes=None)(ens)


def test_vmap_keyword_arguments_are_mapped_along_axis_0_and_static_leaves_pass() -> None:
    f = filter_vmap(lambda x, *, scale, mode: x * scale if mode == "mul" else x, in_axes=None)
    out = f(jnp.ones(2), scale=jnp.arange(3.0), mode="mul")
    np.testing.assert_allclose(out, [[0, 0], [1, 1], [2, 2]])


def test_vmap_axis_size_without_mapped_arrays_and_decorator_forms() -> None:
    @filter_vmap(in_axes=None, axis_size=4)
    def const(x: Any) -> Any:
        return x + 1

    assert const(jnp.ones(2)).shape == (4, 2)

    class Holder(Module):
        def __init__(self) -> None:
            self.register_parameter("w", jnp.arange(3.0))

        @filter_vmap
        def double(self) -> Any:
            return self.w * 2

    np.testing.assert_allclose(Holder().double(), [0.0, 2.0, 4.0])


def test_vmap_composes_with_filter_jit_and_grad() -> None:
    ens = ensemble()

    @oxjax.filter_jit
    def loss(m: Linear, x: Any) -> Any:
        return filter_vmap(lambda m, x: m(x).sum(), in_axes=(0, None))(m, x).sum()

    value = loss(ens, X)
    np.testing.assert_array_equal(ens.calls, [1, 1, 1])
    grads = oxjax.filter_grad(lambda m: filter_vmap(lambda m: (m.w**2).sum())(m).sum())(ens)
    np.testing.assert_allclose(grads.w, 2 * ens.w, rtol=1e-6)
    expected = jax.vmap(lambda w, b: jnp.tanh(X @ w + b).sum())(ens.w, ens.b).sum()
    np.testing.assert_allclose(value, expected, rtol=1e-6)


@pytest.mark.parametrize(
    ("kwargs", "call", "error", "match"),
    [
        (
            {"in_axes": (0,)},
            "two",
            ValueError,
            r"in_axes has 1 entries but the function was called with 2 positional",
        ),
        ({"in_axes": (3, None)}, "two", ValueError, r"gives axis 3 for args\[0\]\.w, an array"),
        ({"in_axes": (-4, None)}, "two", ValueError, r"gives axis -4 for args\[0\]\.w"),
        (
            {"in_axes": (0, 0)},
            "mismatch",
            ValueError,
            r"mapped axes have different sizes: args\[0\]\.w has 3, but args\[1\]: 5",
        ),
        (
            {"in_axes": 0, "axis_size": 4},
            "two",
            ValueError,
            r"axis_size has 4, but args\[0\]\.w: 3",
        ),
        ({"in_axes": None}, "two", ValueError, r"no array is mapped .* pass axis_size"),
        (
            {"in_axes": ({"w": 0}, None)},
            "two",
            ValueError,
            r"are no prefix of the arguments at args\[0\]\.w \(a Linear is there\)",
        ),
        (
            {"in_axes": (StateAxes({Kind.STATE: 0}), None)},
            "two",
            ValueError,
            r"no filter of StateAxes\(\{OfKind\(STATE\): 0\}\) accepts args\[0\]\.w",
        ),
        (
            {"in_axes": (0, StateAxes({...: 0}))},
            "two",
            ValueError,
            r"a StateAxes applies to a Module, but it is given for a ArrayImpl \(at args\[1\]\)",
        ),
    ],
)
def test_vmap_bad_axes_name_the_place(kwargs: Any, call: str, error: type, match: str) -> None:
    ens = ensemble()
    before = dict(vars(ens))
    second = jnp.ones(5) if call == "mismatch" else X
    with pytest.raises(error, match=match):
        filter_vmap(lambda m, x: m(x), **kwargs)(ens, second)
    assert vars(ens) == before


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"in_axes": "0"}, r"in_axes: axes are given by an int, None, a StateAxes"),
        ({"in_axes": (0, 1.5)}, r"in_axes\[1\]: axes are given by"),
        ({"out_axes": {"a": [0, "x"]}}, r"out_axes\['a'\]\[1\]: axes are given by"),
        ({"axis_size": -1}, r"axis_size must be an int >= 0"),
    ],
)
def test_vmap_bad_options_are_type_errors(kwargs: Any, match: str) -> None:
    with pytest.raises(TypeError, match=match):
        filter_vmap(lambda x: x, **kwargs)


def test_bad_callables_and_state_axes() -> None:
    with pytest.raises(TypeError, match="filter_vmap expects a callable, got int"):
        filter_vmap(3)
    with pytest.raises(TypeError, match="StateAxes expects a non-empty mapping"):
        StateAxes({})
    with pytest.raises(TypeError, match=r"StateAxes entry .*: an axis is an int or None"):
        StateAxes({Kind.PARAMETER: "0"})
    with pytest.raises(TypeError, match=r"Carry is a marker: give the class itself"):
        Carry()
    with pytest.raises(TypeError, match="a module filter is"):
        StateAxes({3.5: 0})


# --------------------------------------------------------------------------------------------
# filter_scan


def layers(n: int = 4) -> Linear:
    return filter_vmap(Linear)(jax.random.split(jax.random.PRNGKey(1), n))


def test_layer_scan_over_a_stacked_module_matches_a_python_loop() -> None:
    stack = layers()
    x, ys = filter_scan(lambda x, layer: (layer(x), layer.w.sum()), X, stack)
    expected = X
    for i in range(4):
        expected = jnp.tanh(expected @ stack.w[i] + stack.b[i])
    np.testing.assert_allclose(x, expected, rtol=1e-6)
    np.testing.assert_allclose(ys, stack.w.sum(axis=(1, 2)), rtol=1e-6)
    np.testing.assert_array_equal(stack.calls, [1, 1, 1, 1])  # each layer's own counter


def test_scan_reverse_and_length_and_module_ys() -> None:
    stack = layers(3)
    order, _ = filter_scan(lambda c, layer: (c * 10 + layer.calls + 1, None), jnp.asarray(0), stack)
    assert int(order) == 111
    idx = jnp.arange(3)
    _, seen = filter_scan(lambda c, i: (c, i), 0, idx, reverse=True)
    np.testing.assert_array_equal(seen, [0, 1, 2])
    count, _ = filter_scan(lambda c, _: (c + 1, None), jnp.zeros(()), None, length=5)
    assert float(count) == 5.0
    # ys may be Modules: stacked along a new leading axis, ties kept.
    _, out = filter_scan(lambda c, k: (c, Tied(k)), 0, jax.random.split(KEYS[0], 2))
    assert out.enc is out.dec
    assert out.enc.w.shape == (2, 2, 2)


def test_scan_keeps_ties_inside_each_slice() -> None:
    stack = filter_vmap(Tied)(KEYS)
    x, _ = filter_scan(lambda x, t: (t(x), None), X, stack)
    expected = X
    for i in range(3):
        w = stack.enc.w[i]
        expected = jnp.tanh(jnp.tanh(expected @ w) @ w)
    np.testing.assert_allclose(x, expected, rtol=1e-6)
    assert stack.enc is stack.dec
    np.testing.assert_array_equal(stack.enc.calls, [2, 2, 2])


def test_scan_carry_changed_in_place_reaches_the_callers_init() -> None:
    class Acc(Module):
        def __init__(self) -> None:
            self.register_state("total", jnp.zeros(()))
            self.register_state("steps", jnp.zeros((), jnp.int32))

    acc = Acc()

    def body(a: Acc, layer: Linear) -> Any:
        a.total = a.total + layer.w.sum()
        a.steps = a.steps + 1
        return a, None

    stack = layers()
    final, _ = filter_scan(body, acc, stack)
    np.testing.assert_allclose(final.total, stack.w.sum(), rtol=1e-5)
    assert int(acc.steps) == 4
    assert float(acc.total) == float(final.total)


def test_scan_composes_with_grad_and_filter_jit() -> None:
    stack = layers()

    def loss(stack: Linear) -> Any:
        x, _ = filter_scan(lambda x, layer: (layer(x), None), X, stack)
        return jnp.sum(x**2)

    grads = oxjax.filter_grad(loss)(stack)

    def plain(w: Any, b: Any) -> Any:
        x, _ = jax.lax.scan(lambda x, wb: (jnp.tanh(x @ wb[0] + wb[1]), None), X, (w, b))
        return jnp.sum(x**2)

    gw, gb = jax.grad(plain, argnums=(0, 1))(stack.w, stack.b)
    np.testing.assert_allclose(grads.w, gw, rtol=1e-5)
    np.testing.assert_allclose(grads.b, gb, rtol=1e-5)
    value = oxjax.filter_jit(loss)(stack)
    np.testing.assert_allclose(value, plain(stack.w, stack.b), rtol=1e-6)


@pytest.mark.parametrize(
    ("f", "init", "xs", "kwargs", "error", "match"),
    [
        (
            lambda c, x: (c, None),
            0.0,
            {"a": jnp.ones(3), "b": jnp.ones(4)},
            {},
            ValueError,
            r"leading axes of xs have different lengths: xs\['a'\] has 3, but xs\['b'\]: 4",
        ),
        (
            lambda c, x: (c, None),
            0.0,
            {"a": jnp.ones(3)},
            {"length": 2},
            ValueError,
            r"length has 2, but xs\['a'\]: 3",
        ),
        (
            lambda c, x: (c, None),
            0.0,
            {"a": jnp.ones(())},
            {},
            ValueError,
            r"xs\['a'\] is a scalar array",
        ),
        (lambda c, x: (c, None), 0.0, None, {}, ValueError, "xs holds no array, so pass length"),
        (lambda c, x: (c, None), 0.0, None, {"length": 1.5}, TypeError, "length must be an int"),
        (lambda c, x: c, 0.0, jnp.ones(2), {}, TypeError, r"expects f to return a pair"),
        (
            lambda c, x: ({"w": c["w"].astype(jnp.int32)}, None),
            {"w": jnp.zeros(2)},
            jnp.ones(2),
            {},
            TypeError,
            r"holds int32\[2\] at init\['w'\], where init holds float32\[2\]",
        ),
        (
            lambda c, x: ((c, c), None),
            jnp.zeros(()),
            jnp.ones(2),
            {},
            TypeError,
            "f must return a carry of init's structure",
        ),
        (
            lambda c, x: ({"w": c["w"], "tag": "b"}, None),
            {"w": jnp.zeros(()), "tag": "a"},
            jnp.ones(2),
            {},
            TypeError,
            r"holds 'b' at init\['tag'\], where init holds 'a'",
        ),
        (
            lambda c, x: ({"w": 1.0}, None),
            {"w": jnp.zeros(())},
            jnp.ones(2),
            {},
            TypeError,
            r"holds a float at init\['w'\], where init holds an array",
        ),
        (3, 0.0, jnp.ones(2), {}, TypeError, "filter_scan expects a callable"),
    ],
)
def test_scan_errors_name_the_place(
    f: Any, init: Any, xs: Any, kwargs: Any, error: type, match: str
) -> None:
    with pytest.raises(error, match=match):
        filter_scan(f, init, xs, **kwargs)


def test_scan_refuses_an_object_in_both_carry_and_xs_and_touches_nothing() -> None:
    stack = layers()
    with pytest.raises(ValueError, match="init and xs share an object"):
        filter_scan(lambda c, x: (c, None), {"m": stack}, [stack])
    calls = stack.calls

    def body(c: Any, layer: Linear) -> Any:
        layer(c)
        return c.astype(jnp.int32), None

    with pytest.raises(TypeError, match="the carry keeps its shapes and dtypes"):
        filter_scan(body, X, stack)
    assert stack.calls is calls


# --------------------------------------------------------------------------------------------
# filter_scan with in_axes: scanned, carried (Carry) and broadcast (None) leaves of xs

Stats = Kind.define("scan_stats")


class Block(Module):
    """Stacked parameters (one slice per layer) and statistics that are one value for all."""

    w: Parameter
    b: Parameter

    def __init__(self, key: Any, n_layers: int = 4) -> None:
        k1, k2 = jax.random.split(key)
        self.w = jax.random.normal(k1, (n_layers, 2, 2))
        self.b = jax.random.normal(k2, (n_layers, 2)) * 0.1
        self.register_kind("mean", jnp.zeros(2), Stats)
        self.register_state("seen", jnp.zeros((), jnp.int32))
        self.register_state("scale", jnp.asarray(0.5))

    def __call__(self, x: Any) -> Any:
        h = jnp.tanh(x @ self.w + self.b) * (1.0 + self.scale)
        self.mean = 0.9 * self.mean + 0.1 * h
        self.seen = self.seen + 1
        return h


CARRY_STATS = StateAxes({Kind.PARAMETER: 0, Stats: Carry, PathContains("seen"): Carry, ...: None})


def plain_block_loop(block: Block, x: Any) -> tuple[Any, Any, Any]:
    """The same math as a plain jax.lax.scan over arrays: (x, mean, seen) carried."""

    def step(carry: Any, wb: Any) -> Any:
        x, mean, seen = carry
        h = jnp.tanh(x @ wb[0] + wb[1]) * (1.0 + block.scale)
        return (h, 0.9 * mean + 0.1 * h, seen + 1), h.sum()

    (x, mean, seen), sums = jax.lax.scan(step, (x, block.mean, block.seen), (block.w, block.b))
    return x, (mean, seen), sums


def test_scan_with_state_axes_scans_parameters_and_carries_statistics() -> None:
    block = Block(KEYS[0])
    w, scale = block.w, block.scale
    expected_x, (expected_mean, expected_seen), expected_sums = plain_block_loop(block, X)

    def body(x: Any, layer: Block) -> Any:
        assert layer.w.shape == (2, 2)  # one layer's slice ...
        assert layer.mean.shape == (2,)  # ... and the statistics whole
        h = layer(x)
        return h, h.sum()

    x, sums = filter_scan(body, X, block, in_axes=CARRY_STATS)
    np.testing.assert_allclose(x, expected_x, rtol=1e-6)
    np.testing.assert_allclose(sums, expected_sums, rtol=1e-6)
    # The carried leaves hold their last value; the scanned and broadcast ones are untouched.
    np.testing.assert_allclose(block.mean, expected_mean, rtol=1e-6)
    assert int(block.seen) == int(expected_seen) == 4
    assert block.w is w
    assert block.scale is scale


def test_scan_with_carried_state_composes_with_filter_jit_and_grad() -> None:
    block = Block(KEYS[1])

    @oxjax.filter_jit
    def run(block: Block, x: Any) -> Any:
        out, _ = filter_scan(lambda x, layer: (layer(x), None), x, block, in_axes=CARRY_STATS)
        return out

    expected_x, (expected_mean, _), _ = plain_block_loop(block, X)
    np.testing.assert_allclose(run(block, X), expected_x, rtol=1e-6)
    np.testing.assert_allclose(block.mean, expected_mean, rtol=1e-6)
    assert int(block.seen) == 4

    fresh = Block(KEYS[1])

    def loss(params: Block) -> Any:
        out, _ = filter_scan(
            lambda x, layer: (layer(x), None), X, fresh.update(params), in_axes=CARRY_STATS
        )
        return jnp.sum(out**2)

    grads = oxjax.filter_grad(loss)(fresh.parameters())

    def plain(w: Any, b: Any) -> Any:
        def step(x: Any, wb: Any) -> Any:
            return jnp.tanh(x @ wb[0] + wb[1]) * (1.0 + fresh.scale), None

        return jnp.sum(jax.lax.scan(step, X, (w, b))[0] ** 2)

    gw, gb = jax.grad(plain, argnums=(0, 1))(fresh.w, fresh.b)
    np.testing.assert_allclose(grads.w, gw, rtol=1e-5)
    np.testing.assert_allclose(grads.b, gb, rtol=1e-5)


def test_scan_in_axes_broadcast_and_another_axis_with_write_back() -> None:
    seq = jnp.arange(12.0).reshape(3, 4)  # scanned along axis 1: 4 steps of 3 values
    table = jnp.asarray([1.0, 10.0, 100.0])  # broadcast: the same at every step
    total, ys = filter_scan(
        lambda c, xt: (c + xt[0] @ xt[1], xt[0] * 2),
        jnp.zeros(()),
        (seq, table),
        in_axes=(1, None),
    )
    expected = sum(float(seq[:, i] @ table) for i in range(4))
    assert float(total) == pytest.approx(expected)
    np.testing.assert_array_equal(ys, (seq * 2).T)  # ys stack along the leading axis

    # A change to a leaf scanned along axis 1 comes back along axis 1.
    holder = {"v": seq}

    def bump(c: Any, h: dict[str, Any]) -> Any:
        h["v"] = h["v"] + c
        return c + 1.0, None

    filter_scan(bump, jnp.zeros(()), holder, in_axes={"v": -1})
    np.testing.assert_array_equal(holder["v"], seq + jnp.arange(4.0))


def test_scan_carry_marker_on_a_whole_part_of_xs() -> None:
    counter = {"n": jnp.zeros((), jnp.int32), "label": "steps"}

    def body(total: Any, pair: Any) -> Any:
        x, c = pair
        c["n"] = c["n"] + 1
        return total + x * c["n"], None

    total, _ = filter_scan(body, jnp.zeros(()), (jnp.ones(3), counter), in_axes=(0, Carry))
    assert float(total) == 6.0
    assert int(counter["n"]) == 3
    assert counter["label"] == "steps"
    assert repr(Carry) == "Carry"
    assert repr(StateAxes({Kind.STATE: Carry, ...: 0})) == (
        "StateAxes({OfKind(STATE): Carry, Ellipsis: 0})"
    )


@pytest.mark.parametrize(
    ("in_axes", "xs", "error", "match"),
    [
        (
            "0",
            jnp.ones(2),
            TypeError,
            r"filter_scan: in_axes: axes are given by an int, None, Carry",
        ),
        ((0, 1.5), (jnp.ones(2), jnp.ones(2)), TypeError, r"in_axes\[1\]: axes are given by"),
        (
            ({"a": 0}, 0),
            (jnp.ones(2), jnp.ones(2)),
            ValueError,
            r"no prefix of the arguments at xs\[0\]",
        ),
        (
            2,
            jnp.ones((2, 3)),
            ValueError,
            r"in_axes gives axis 2 for xs, an array of shape \(2, 3\)",
        ),
        (
            (1, 0),
            (jnp.ones((2, 3)), jnp.ones(2)),
            ValueError,
            "the scanned axes of xs have different",
        ),
        (None, jnp.ones(2), ValueError, "in_axes scans none of the arrays of xs, so pass length"),
        (
            StateAxes({Kind.PARAMETER: 0}),
            jnp.ones(2),
            ValueError,
            "a StateAxes applies to a Module",
        ),
    ],
)
def test_scan_bad_in_axes_name_the_place(in_axes: Any, xs: Any, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        filter_scan(lambda c, x: (c, None), jnp.zeros(()), xs, in_axes=in_axes)


def test_scan_state_axes_that_miss_a_leaf_or_a_kind_name_it() -> None:
    block = Block(KEYS[0])
    with pytest.raises(ValueError, match=r"no filter of StateAxes\(.*\) accepts xs.mean"):
        filter_scan(
            lambda c, b: (c, None), jnp.zeros(()), block, in_axes=StateAxes({Kind.PARAMETER: 0})
        )
    with pytest.raises(ValueError, match=r"Carry marks a leaf that filter_scan carries"):
        filter_vmap(lambda m: m, in_axes=StateAxes({Kind.PARAMETER: 0, ...: Carry}))
    with pytest.raises(ValueError, match=r"filter_vmap: out_axes: Carry marks"):
        filter_vmap(lambda m: m, out_axes=Carry)
    with pytest.raises(TypeError, match=r"StateAxes entry .*: an axis is an int or None"):
        StateAxes({Kind.PARAMETER: "0"})
    with pytest.raises(TypeError, match=r"Carry is a marker: give the class itself"):
        Carry()


def test_scan_changes_to_broadcast_or_carried_leaves_that_cannot_hold_touch_nothing() -> None:
    block = Block(KEYS[0])
    before = dict(block.state_dict())

    def rescale(x: Any, layer: Block) -> Any:
        layer.scale = layer.scale * 2  # broadcast (None): one value for every step
        return layer(x), None

    with pytest.raises(ValueError, match=r"f changed xs.scale, which in_axes broadcasts"):
        filter_scan(rescale, X, block, in_axes=CARRY_STATS)

    def widen(x: Any, layer: Block) -> Any:
        layer(x)
        layer.mean = jnp.concatenate([layer.mean, layer.mean])
        return x, None

    with pytest.raises(
        TypeError,
        match=r"f left float32\[4\] at xs.mean \(carried: Carry in in_axes\), where xs holds float32\[2\]",
    ):
        filter_scan(widen, X, block, in_axes=CARRY_STATS)

    def drop(x: Any, layer: Block) -> Any:
        layer(x)
        layer.mean = None
        return x, None

    with pytest.raises(ValueError, match=r"f removed xs.mean, which in_axes carries \(Carry\)"):
        filter_scan(drop, X, block, in_axes=CARRY_STATS)

    def label(x: Any, layer: Block) -> Any:
        layer(x)
        layer.mean = "mean"
        return x, None

    with pytest.raises(
        TypeError,
        match=r"f left a str at xs.mean \(carried: Carry in in_axes\), where xs holds an array",
    ):
        filter_scan(label, X, block, in_axes=CARRY_STATS)
    for key, value in before.items():
        assert block.state_dict()[key] is value, key


# --------------------------------------------------------------------------------------------
# filter_remat


def test_remat_gives_the_same_gradient_and_checkpoints() -> None:
    tied = Tied(KEYS[0])

    def loss(m: Tied) -> Any:
        return jnp.sum(filter_remat(lambda m, x: m(x))(m, X) ** 2)

    grads = oxjax.filter_grad(loss)(tied)
    plain = oxjax.filter_grad(lambda m: jnp.sum(m(X) ** 2))(Tied(KEYS[0]))
    assert grads.enc is grads.dec
    np.testing.assert_allclose(grads.enc.w, plain.enc.w, rtol=1e-6)
    jaxpr = str(jax.make_jaxpr(lambda w: filter_remat(lambda w: jnp.sin(w) * 2)(w))(1.0))
    assert "checkpoint" in jaxpr or "remat" in jaxpr


def test_remat_writes_changes_back_and_takes_jax_checkpoint_options() -> None:
    tied = Tied(KEYS[0])
    block = filter_remat(
        lambda m, x: m(x), policy=jax.checkpoint_policies.nothing_saveable, prevent_cse=False
    )
    out = block(tied, X)
    np.testing.assert_allclose(out, jnp.tanh(jnp.tanh(X @ tied.enc.w) @ tied.enc.w), rtol=1e-6)
    assert int(tied.enc.calls) == 2
    assert tied.enc is tied.dec

    @filter_remat
    def bad(d: dict[str, Any]) -> None:
        d["t"] = (d["t"][0] + 1,)  # fine: the dict takes it

    d = {"t": (jnp.ones(()),)}
    bad(d)
    assert float(d["t"][0]) == 2.0
    with pytest.raises(TypeError, match="filter_remat expects a callable"):
        filter_remat(None)(3)


# --------------------------------------------------------------------------------------------
# filter_eval_shape


def test_eval_shape_of_a_constructor_keeps_classes_ties_and_configuration() -> None:
    abstract = filter_eval_shape(Tied, KEYS[0])
    assert type(abstract) is Tied
    assert abstract.enc is abstract.dec
    assert abstract.enc.w == jax.ShapeDtypeStruct((2, 2), jnp.float32)
    assert abstract.enc.calls == jax.ShapeDtypeStruct((), jnp.int32)
    assert abstract.enc.act == "tanh"
    assert jax.tree_util.tree_structure(abstract) == jax.tree_util.tree_structure(Tied(KEYS[0]))


def test_eval_shape_runs_nothing_and_leaves_the_arguments_alone() -> None:
    ens = ensemble()
    before = dict(vars(ens))
    out = filter_eval_shape(lambda m, x: m(x), ens, jax.ShapeDtypeStruct((3, 2), jnp.float32))
    assert out == jax.ShapeDtypeStruct((3, 3, 2), jnp.float32)
    assert vars(ens) == before  # the counter change is dropped
    # kwargs, static leaves and non-array outputs pass through.
    shape = filter_eval_shape(lambda *, n, x: (x.reshape(n, -1), "tag"), n=2, x=jnp.ones(6))
    assert shape == (jax.ShapeDtypeStruct((2, 3), jnp.float32), "tag")
    with pytest.raises(TypeError, match="filter_eval_shape expects a callable"):
        filter_eval_shape(3)


# --------------------------------------------------------------------------------------------
# A change the caller's objects cannot take


class Box:
    """A node rebuilt from its children: a change to it cannot be written back in place."""

    def __init__(self, x: Any) -> None:
        self.x = x


oxtree.register_pytree_node(Box, lambda b: ((b.x,), None), lambda _, c: Box(*c))


@pytest.mark.parametrize("transform", ["vmap", "remat"])
def test_a_change_that_cannot_be_written_back_is_an_error_touching_nothing(
    transform: str,
) -> None:
    def f(m: Linear, box: Box) -> None:
        m.calls = m.calls + 1
        box.x = box.x * 2

    m, box = ensemble(), Box(jnp.ones(3))
    calls, x = m.calls, box.x
    lifted = filter_vmap(f) if transform == "vmap" else filter_remat(f)
    with pytest.raises(ValueError, match=rf"filter_{transform}: the function changed args\[1\]"):
        lifted(m, box)
    assert m.calls is calls
    assert box.x is x


def test_scan_change_to_xs_that_cannot_be_written_back_touches_nothing() -> None:
    def body(c: Any, pair: tuple[Any, Any]) -> Any:
        pair[0].calls = pair[0].calls + 1
        pair[1].x = pair[1].x + 1
        return c, None

    stack, box = layers(), Box(jnp.zeros(4))
    calls = stack.calls
    with pytest.raises(ValueError, match=r"filter_scan: the function changed xs\[1\]"):
        filter_scan(body, jnp.zeros(()), (stack, box))
    assert stack.calls is calls


def test_scan_a_broadcast_leaf_replaced_or_removed_is_an_error_touching_nothing() -> None:
    table = {"a": jnp.ones(2), "b": jnp.zeros(2)}
    a = table["a"]

    def relabel(c: Any, pair: Any) -> Any:
        _, t = pair
        t["a"] = t["b"]  # another leaf's value, not a new array
        return c, None

    def to_static(c: Any, pair: Any) -> Any:
        _, t = pair
        t["a"] = 1.0
        return c, None

    def drop(c: Any, pair: Any) -> Any:
        _, t = pair
        del t["a"]
        return c, None

    for body in (relabel, to_static, drop):
        with pytest.raises(ValueError, match=r"f changed xs\[1\]\['a'\], which in_axes broadcasts"):
            filter_scan(body, jnp.zeros(()), (jnp.ones(3), table), in_axes=(0, None))
        assert table["a"] is a


# --------------------------------------------------------------------------------------------
# Axes that are no prefix of the arguments, and leaves moved to another place


@pytest.mark.parametrize(
    ("in_axes", "xs", "match"),
    [
        ((0, 0, 0), (jnp.ones(3), jnp.ones(3)), r"at xs: 3 entries for a tuple of 2"),
        ((0, [0, 0]), (jnp.ones(3), [jnp.ones(3)]), r"at xs\[1\]: 2 entries for a list of 1"),
        ({"a": 0, "b": 0}, {"a": jnp.ones(3)}, r"at xs: keys \['b'\] the dict there lacks"),
        (
            {"a": 0},
            {"a": jnp.ones(3), "tag": "static"},
            r"at xs: no entry for its keys \['tag'\]",
        ),
    ],
)
def test_axes_with_more_or_other_entries_than_the_arguments_are_refused(
    in_axes: Any, xs: Any, match: str
) -> None:
    # jax.vmap refuses the same axes for the same value.
    with pytest.raises(ValueError, match="must be a tree prefix"):
        jax.vmap(lambda x: x, in_axes=(in_axes,))(xs)
    before = oxtree.tree_leaves(xs)
    with pytest.raises(
        ValueError, match=r"filter_scan: in_axes: the axes .* no prefix .* " + match
    ):
        filter_scan(lambda c, x: (c, None), jnp.zeros(()), xs, in_axes=in_axes)
    vmap_match = match.replace("at xs", r"at args\[0\]")
    with pytest.raises(ValueError, match=r"filter_vmap: in_axes: the axes .* " + vmap_match):
        filter_vmap(lambda x: x, in_axes=(in_axes,))(xs)
    with pytest.raises(ValueError, match=r"filter_vmap: out_axes: the axes .* no prefix"):
        filter_vmap(lambda x: (x, x), out_axes=(0, 0, 0))(jnp.ones(3))
    assert all(a is b for a, b in zip(oxtree.tree_leaves(xs), before, strict=True))


class Tracker(Module):
    def __init__(self) -> None:
        self.register_state("n", jnp.zeros(()))
        self.register_state("prev", jnp.zeros(()))


def test_scan_a_carried_place_pointed_at_another_leaf_ends_as_a_python_loop() -> None:
    xs = jnp.asarray([1.0, 2.0, 4.0])

    def step(t: Tracker, x: Any) -> None:
        t.prev = t.n  # the carried n of this step, not the caller's n
        t.n = t.n + x

    loop = Tracker()
    for x in xs:
        step(loop, x)

    def body(c: Any, pair: Any) -> Any:
        x, t = pair
        step(t, x)
        return c, None

    t = Tracker()
    filter_scan(body, jnp.zeros(()), (xs, t), in_axes=(0, Carry))
    assert (float(t.n), float(t.prev)) == (float(loop.n), float(loop.prev)) == (7.0, 3.0)
    (n, prev), _ = jax.lax.scan(lambda c, x: ((c[0] + x, c[0]), None), (0.0, 0.0), xs)
    assert (float(t.n), float(t.prev)) == (float(n), float(prev))

    # A carried place given a scanned leaf ends with its last slice; a new attribute given a
    # broadcast leaf is stacked like any new leaf, one copy per step.
    d = {"last": jnp.zeros(2), "seq": jnp.arange(6.0).reshape(3, 2), "table": jnp.ones(2)}
    seq, table = d["seq"], d["table"]

    def take(c: Any, d: dict[str, Any]) -> Any:
        d["last"] = d["seq"]
        d["copy"] = d["table"]
        return c, None

    filter_scan(take, jnp.zeros(()), d, in_axes={"last": Carry, "seq": 0, "table": None})
    np.testing.assert_array_equal(d["last"], seq[-1])
    np.testing.assert_array_equal(d["copy"], jnp.stack([table] * 3))
    assert d["seq"] is seq
    assert d["table"] is table


def test_vmap_a_place_pointed_at_another_leaf_comes_back_along_its_own_axis() -> None:
    d = {"a": jnp.zeros((3, 2)), "b": jnp.arange(6.0).reshape(2, 3), "t": jnp.ones(2)}
    b = d["b"]

    def f(d: dict[str, Any]) -> None:
        d["a"] = d["b"]

    filter_vmap(f, in_axes=({"a": 0, "b": 1, "t": None},))(d)
    np.testing.assert_array_equal(d["a"], jax.vmap(lambda x: x, in_axes=1)(b))
    assert d["b"] is b

    def g(d: dict[str, Any]) -> None:
        d["a"] = d["t"]

    filter_vmap(g, in_axes=({"a": 0, "b": 1, "t": None},))(d)
    np.testing.assert_array_equal(d["a"], jnp.ones((3, 2)))

    # An element's own value moved to a place that is not mapped cannot be kept.
    before = dict(d)

    def h(d: dict[str, Any]) -> None:
        d["t"] = d["a"]

    with pytest.raises(ValueError, match=r"args\[0\]\['t'\] is not mapped"):
        filter_vmap(h, in_axes=({"a": 0, "b": 1, "t": None},))(d)
    assert all(d[k] is v for k, v in before.items())


def test_scan_out_axes_stack_ys_along_the_given_axes() -> None:
    xs = jnp.arange(12.0).reshape(3, 2, 2)

    def step(c: Any, x: Any) -> Any:
        return c + x.sum(), {"m": x * 2, "s": x.sum(), "v": x[0]}

    zero = jnp.zeros(())
    _, plain = jax.lax.scan(step, zero, xs)
    total, ys = filter_scan(step, zero, xs, out_axes={"m": 2, "s": 0, "v": -1})
    np.testing.assert_array_equal(ys["m"], jnp.moveaxis(plain["m"], 0, 2))
    np.testing.assert_array_equal(ys["s"], plain["s"])
    np.testing.assert_array_equal(ys["v"], plain["v"].T)
    assert float(total) == float(xs.sum())
    _, ys = filter_scan(lambda c, x: (c, (x, x[0])), zero, xs, out_axes=1)
    np.testing.assert_array_equal(ys[0], jnp.moveaxis(xs, 0, 1))
    np.testing.assert_array_equal(ys[1], xs[:, 0].T)
    # A Module stacked along axis 1, and its static leaves kept.
    _, layers = filter_scan(
        lambda c, k: (c, Linear(k)), 0.0, KEYS, out_axes=StateAxes({Kind.PARAMETER: 1, ...: 0})
    )
    assert layers.w.shape == (2, 3, 2)
    assert layers.calls.shape == (3,)
    assert layers.act == "tanh"


@pytest.mark.parametrize(
    ("out_axes", "error", "match"),
    [
        ({"m": None, "s": 0}, ValueError, r"out_axes gives None for y\['m'\], but every array"),
        (3, ValueError, r"out_axes gives axis 3 for y\['m'\], whose stacked ys have rank 3"),
        ({"m": 0}, ValueError, r"out_axes: the axes \{'m': 0\} are no prefix .*no entry"),
        ((0, 1), ValueError, r"out_axes: the axes \(0, 1\) are no prefix .* at y\['m'\]"),
        ("0", TypeError, r"filter_scan: out_axes: axes are given by an int, None, a StateAxes"),
        (Carry, ValueError, r"filter_scan: out_axes: Carry marks"),
    ],
)
def test_scan_bad_out_axes_name_the_place_and_touch_nothing(
    out_axes: Any, error: type, match: str
) -> None:
    box = {"v": jnp.zeros(3)}
    v = box["v"]

    def step(c: Any, pair: Any) -> Any:
        x, b = pair
        b["v"] = b["v"] + 1.0
        return c, {"m": jnp.ones((2, 2)) * x, "s": x}

    with pytest.raises(error, match=match):
        filter_scan(step, 0.0, (jnp.ones(3), box), in_axes=(0, Carry), out_axes=out_axes)
    assert box["v"] is v
