"""Modules in real training code: tied weights through JAX transforms and optax, mutations
inside filtered transforms, PRNG keys as leaves, back-references, and the module toolkit
(kinds, filters, checked updates, state dicts)."""

from __future__ import annotations

from typing import Annotated, Any

import jax
import jax.numpy as jnp
import optax
import oxtree
import oxtree.jax as oxjax
import pytest
from oxtree import GetAttrKey, Kind, Module, Parameter, SequenceKey
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
    # Every key is a ModulePath, a JAX GetAttrKey named by the state-dict key of its leaf.
    assert type(paths[2][0]) is ModulePath
    assert paths[2][0] == jax.tree_util.GetAttrKey("steps")
    assert paths[0][0] == jax.tree_util.GetAttrKey("layers[0].w")
    assert isinstance(paths[0][0], jax.tree_util.GetAttrKey)
    assert paths[0][0].path == (GetAttrKey("layers"), SequenceKey(0), GetAttrKey("w"))
    assert paths[0][0] == ModulePath(paths[0][0].path)
    assert hash(paths[0][0]) == hash(ModulePath(paths[0][0].path))
    assert repr(paths[0][0]) == "ModulePath('.layers[0].w')"


def test_a_module_path_starts_at_an_attribute() -> None:
    assert str(ModulePath((GetAttrKey("w"),))) == ".w"
    with pytest.raises(
        ValueError, match=r"starts at one of its attributes \(a GetAttrKey\), got \[0\]\.w"
    ):
        ModulePath((SequenceKey(0), GetAttrKey("w")))
    with pytest.raises(ValueError, match=r"got \(\)"):
        ModulePath(())


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


# --------------------------------------------------------------------------------------------
# Mutations inside filtered transforms are written back


class Scaled(Module):
    w: Parameter

    def __init__(self) -> None:
        self.w = jnp.ones(2)
        self.register_state("calls", jnp.zeros((), jnp.int32))


def test_filter_jit_writes_an_assigned_parameter_back() -> None:
    m = Scaled()

    @oxjax.filter_jit
    def halve(m: Scaled) -> None:
        m.w = m.w * 0.5
        m.calls = m.calls + 1

    halve(m)
    assert jnp.allclose(m.w, 0.5)
    assert int(m.calls) == 1
    halve(m)  # the compiled function is reused; the write-back happens every call
    assert jnp.allclose(m.w, 0.25)
    assert int(m.calls) == 2


def test_filter_jit_without_mutation_leaves_the_caller_alone() -> None:
    m = Scaled()
    w = m.w
    out = oxjax.filter_jit(lambda m: m.w * 2)(m)
    assert m.w is w
    assert jnp.allclose(out, 2.0)


def test_filter_jit_writes_new_attributes_deletions_and_rebinding_back() -> None:
    class Net(Module):
        def __init__(self) -> None:
            self.enc = Scaled()
            self.dec = Scaled()
            self.mode = "a"

    m = Net()
    enc = m.enc

    @oxjax.filter_jit
    def retie(m: Net) -> Any:
        m.dec = m.enc  # rebinding: tie the two
        m.mode = "b"  # configuration
        m.register_state("extra", jnp.full(2, 7.0))  # a new attribute
        m.enc.w = m.enc.w + 1.0
        return m.enc.w

    out = retie(m)
    assert jnp.allclose(out, 2.0)
    assert m.enc is enc  # the caller's submodule took the change in place
    assert m.dec is m.enc
    assert jnp.allclose(enc.w, 2.0)
    assert m.mode == "b"
    assert jnp.allclose(m.extra, 7.0)
    assert m.name_to_kind["extra"] is oxtree.Kind.STATE

    @oxjax.filter_jit
    def drop(m: Net) -> None:
        del m.extra

    drop(m)
    assert not hasattr(m, "extra")
    assert "extra" not in m.name_to_kind
    assert len(jax.tree_util.tree_leaves(m)) == 2  # enc's two leaves, once


def test_filter_jit_write_back_keeps_cycles_and_shared_updates() -> None:
    model = AutoEncoder()
    opt = optax.sgd(0.1)
    state = opt.init(model)

    @oxjax.filter_jit
    def step(m: AutoEncoder, state: Any) -> Any:
        loss, grads = oxjax.filter_value_and_grad(mse)(m, X, Y)
        updates, new_state = opt.update(grads, state, m)
        m.enc.w = optax.apply_updates(m.enc.w, updates.enc.w)  # in place, as with nnx
        return loss, new_state

    enc = model.enc
    losses = []
    for _ in range(3):
        loss, state = step(model, state)
        losses.append(float(loss))
    assert model.enc is enc
    assert model.dec is enc
    losses.append(float(mse(model, X, Y)))
    assert losses == pytest.approx(plain_jax_losses(3, 0.1), rel=1e-5)


class Slotted:
    __slots__ = ("a",)

    def __init__(self, a: Any) -> None:
        self.a = a


oxtree.register_pytree_node(Slotted, lambda s: ((s.a,), None), lambda _, c: Slotted(*c))


def test_filter_jit_names_a_change_it_cannot_write_back() -> None:
    s = Slotted(jnp.ones(2))
    a = s.a

    def f(s: Slotted) -> None:
        s.a = s.a * 2

    with pytest.raises(ValueError, match=r"filter_jit: the function changed args\[0\]") as info:
        oxjax.filter_jit(f)(s)
    assert "cannot be written back" in str(info.value)
    assert s.a is a

    # With a change that can be written back in the same call, nothing is: all or none.
    m = Scaled()
    w, calls = m.w, m.calls

    def g(m: Scaled, s: Slotted) -> None:
        m.w = m.w * 3
        m.register_state("extra", jnp.ones(1))
        s.a = s.a * 2

    with pytest.raises(ValueError, match="cannot be written back"):
        oxjax.filter_jit(g)(m, s)
    assert m.w is w
    assert m.calls is calls
    assert not hasattr(m, "extra")
    assert "extra" not in m.name_to_kind
    assert s.a is a


def test_filter_jit_new_unregistered_array_attribute_is_refused() -> None:
    m = Scaled()

    def f(m: Scaled) -> None:
        m.cache = m.w * 2

    with pytest.raises(TypeError, match=r"Scaled.cache holds an array"):
        oxjax.filter_jit(f)(m)
    assert not hasattr(m, "cache")


def test_filter_grad_writes_state_changes_back_undifferentiated() -> None:
    m = Scaled()

    def loss(m: Scaled) -> Any:
        m.calls = m.calls + 1
        return jnp.sum(m.w**2)

    grads = oxjax.filter_grad(loss)(m)
    assert jnp.allclose(grads.w, 2.0)
    assert int(m.calls) == 1
    assert not isinstance(m.calls, jax.core.Tracer)
    (value, aux), _ = oxjax.filter_value_and_grad(lambda m: (loss(m), "aux"), has_aux=True)(m)
    assert float(value) == 2.0
    assert aux == "aux"
    assert int(m.calls) == 2


# --------------------------------------------------------------------------------------------
# PRNG keys are leaves: never differentiated, never a crash


class Noisy(Module):
    def __init__(self) -> None:
        self.register_parameter("w", jnp.ones(2))
        self.register_state("key", jax.random.key(0))  # typed
        self.register_state("raw", jax.random.PRNGKey(1))  # raw uint32[2]


def test_filter_grad_skips_typed_and_raw_keys() -> None:
    m = Noisy()
    grads = oxjax.filter_grad(lambda m: jnp.sum(m.w * jax.random.normal(m.key, (2,))))(m)
    assert grads.w.shape == (2,)
    assert grads.key is None
    assert grads.raw is None
    assert oxjax.is_inexact_array(jax.random.key(0)) is False
    assert oxjax.is_inexact_array(jax.random.PRNGKey(0)) is False
    assert oxjax.is_array(jax.random.key(0)) is True


def test_partition_and_combine_with_keys() -> None:
    m = Noisy()
    params, rest = oxjax.partition(m, oxjax.is_inexact_array)
    assert params.key is None
    assert rest.key is m.key
    assert rest.raw is m.raw
    assert params.w is m.w
    back = oxjax.combine(params, rest)
    assert back.key is m.key


def test_keys_through_filter_jit_advance_by_write_back() -> None:
    m = Noisy()

    @oxjax.filter_jit
    def sample(m: Noisy) -> Any:
        m.key, sub = jax.random.split(m.key)
        return jax.random.normal(sub, (2,))

    first, second = sample(m), sample(m)
    assert not jnp.allclose(first, second)
    assert jax.dtypes.issubdtype(m.key.dtype, jax.dtypes.prng_key)
    assert repr(m) == "Noisy(w=f32[2], key=key<fry>[], raw=u32[2])"


def test_keys_through_jax_transforms_and_optax() -> None:
    m = Noisy()
    assert jax.jit(lambda m: m.w + 1)(m).shape == (2,)
    stacked = jax.tree_util.tree_map(lambda x: jnp.stack([x, x]), m)
    assert jax.vmap(lambda m: jax.random.normal(m.key, ()))(stacked).shape == (2,)
    opt = optax.sgd(0.5)
    params = m.parameters()
    grads = oxjax.filter_grad(lambda m: jnp.sum(m.w))(m).parameters()
    updates, _ = opt.update(grads, opt.init(params))
    assert jnp.allclose(m.update(optax.apply_updates(params, updates)).w, 0.5)


# --------------------------------------------------------------------------------------------
# Back-references and cycles through Modules


class Child(Module):
    def __init__(self, parent: Any) -> None:
        self.parent = parent  # a back-reference: the child holds its parent
        self.register_parameter("v", jnp.ones(2))


class Parent(Module):
    def __init__(self) -> None:
        self.register_parameter("w", jnp.full(2, 2.0))
        self.child = Child(self)


def test_back_reference_round_trips_through_graph_unflatten() -> None:
    p = Parent()
    leaves, gd = oxtree.graph_flatten(p)
    assert len(leaves) == 2
    q = oxtree.graph_unflatten(gd, leaves)
    assert type(q) is Parent
    assert type(q.child) is Child
    assert q.child.parent is q
    assert q is not p
    assert q.name_to_kind == p.name_to_kind
    assert q.child.name_to_kind == p.child.name_to_kind


def test_cycle_through_three_modules_and_a_list() -> None:
    a, b, c = Parent(), Parent(), Parent()
    a.peers = [b]
    b.peers = [c]
    c.peers = [a]
    leaves, gd = oxtree.graph_flatten(a)
    out = oxtree.graph_unflatten(gd, [x + 1 for x in leaves])
    assert out.peers[0].peers[0].peers[0] is out
    assert out.child.parent is out
    assert jnp.allclose(out.peers[0].w, 3.0)


def test_back_reference_through_filter_jit_and_jax_transforms() -> None:
    p = Parent()

    @oxjax.filter_jit
    def f(p: Parent) -> Parent:
        assert p.child.parent is p
        p.child.v = p.child.parent.w * 3
        return p

    out = f(p)
    assert out.child.parent is out
    assert p.child.parent is p  # written back in place, the cycle kept
    assert jnp.allclose(p.child.v, 6.0)
    jitted = jax.jit(lambda p: p)(p)
    assert jitted.child.parent is jitted
    grads = jax.grad(lambda p: jnp.sum(p.w * p.child.v * p.child.parent.w))(p)
    assert grads.child.parent is grads
    assert jnp.allclose(grads.w, 2 * 2.0 * 6.0)  # d/dw of w * v * w, both uses summed
    new = optax.apply_updates(p, jax.tree_util.tree_map(lambda g: -0.01 * g, grads))
    assert new.child.parent is new


def test_a_cycle_through_a_plain_registered_class_is_still_reported() -> None:
    class Holder:
        def __init__(self, x: Any) -> None:
            self.x = x

    oxtree.register_pytree_node(
        Holder, lambda h: ((h.x,), None), lambda _, c: Holder(*c), namespace="cyc"
    )
    h = Holder(None)
    h.x = (h,)
    leaves, gd = oxtree.graph_flatten(h, namespace="cyc")
    with pytest.raises(
        ValueError,
        match=r"cannot rebuild the tuple at obj\[<flat index 0>\]: it is on a reference cycle",
    ):
        oxtree.graph_unflatten(gd, leaves)


# --------------------------------------------------------------------------------------------
# tree_set with the key paths JAX makes


def test_tree_set_takes_jax_key_paths() -> None:
    import collections
    import dataclasses

    tree = {"a": [1, 2], "b": (3,)}
    path = (jax.tree_util.DictKey("a"), jax.tree_util.SequenceKey(1))
    assert oxtree.tree_set(tree, path, 20) == {"a": [1, 20], "b": (3,)}
    assert tree == {"a": [1, 2], "b": (3,)}

    @dataclasses.dataclass
    class P:
        x: int
        y: int

    oxtree.register_dataclass(P, namespace="jaxpaths")
    jax.tree_util.register_dataclass(P, data_fields=["x", "y"], meta_fields=[])
    (path, _), *_ = jax.tree_util.tree_flatten_with_path({"p": P(1, 2)})[0]
    assert oxtree.tree_set({"p": P(1, 2)}, path, 5, namespace="jaxpaths") == {"p": P(5, 2)}

    nt = collections.namedtuple("nt", "u v")
    paths = [p for p, _ in jax.tree_util.tree_flatten_with_path(nt(1, [2]))[0]]
    assert [oxtree.tree_set(nt(1, [2]), p, 9) for p in paths] == [nt(9, [2]), nt(1, [9])]
    with pytest.raises(KeyError, match="no subtree"):
        oxtree.tree_set(tree, (jax.tree_util.DictKey("zz"),), 0)
    with pytest.raises(IndexError, match="no subtree"):
        oxtree.tree_set(tree, (jax.tree_util.DictKey("a"), jax.tree_util.SequenceKey(5)), 0)


def test_tree_set_takes_a_module_path_from_jax() -> None:
    class Net(Module):
        def __init__(self) -> None:
            self.layers = [Scaled(), Scaled()]

    net = Net()
    (path, _), *_ = jax.tree_util.tree_flatten_with_path(net)[0]
    assert str(path[0]) == ".layers[0].w"
    new = oxtree.tree_set(net, path, jnp.zeros(2))
    assert jnp.allclose(new.layers[0].w, 0.0)
    assert jnp.allclose(net.layers[0].w, 1.0)
    assert new.layers[1] is net.layers[1]


# --------------------------------------------------------------------------------------------
# The toolkit: checked update, filters, state dicts, typed Self

from oxtree.module import All, AnyOf, Not, OfKind, OfType, PathContains  # noqa: E402


class Block(Module):
    def __init__(self) -> None:
        self.enc = Scaled()
        self.dec = self.enc
        self.head = Scaled()
        self.register_state("steps", 0)


def test_update_refuses_arrays_of_another_shape_or_dtype() -> None:
    b = Block()
    wrong = jax.tree_util.tree_map(lambda x: x, b.parameters())
    wrong.head.w = jnp.ones(3)
    with pytest.raises(
        ValueError,
        match=r"Block.update: arrays of another shape or dtype: "
        r"head.w: expected float32\[2\], got float32\[3\]",
    ):
        b.update(wrong)
    wrong.head.w = jnp.ones(2, jnp.int32)
    with pytest.raises(ValueError, match=r"head.w: expected float32\[2\], got int32\[2\]"):
        b.update(wrong)
    assert b.head.w.shape == (2,)  # untouched
    ok = b.update(jax.tree_util.tree_map(lambda x: x * 2, b.parameters()))
    assert jnp.allclose(ok.head.w, 2.0)
    assert ok.enc is ok.dec


def test_select_with_filter_combinators() -> None:
    b = Block()
    params = b.select(Kind.PARAMETER)
    assert params.enc.w is b.enc.w
    assert params.enc.calls is None
    assert params.steps is None
    assert params.enc is params.dec
    only_head = b.select(OfKind(Kind.PARAMETER), PathContains("head"))
    assert only_head.enc.w is None
    assert only_head.head.w is b.head.w
    not_head = b.select(Not(PathContains("head")), AnyOf(Kind.PARAMETER, Kind.STATE))
    assert not_head.head.w is None
    assert not_head.enc.calls is b.enc.calls
    assert not_head.steps == 0
    ints = b.select(OfType(int))
    assert ints.steps == 0
    assert ints.enc.w is None
    assert b.select(All()).head.w is b.head.w
    assert b.select(False).head.w is None
    assert b.select(lambda path, kind, leaf: len(path) == 1).steps == 0
    assert repr(OfKind(Kind.STATE, Kind.PARAMETER)) == "OfKind(PARAMETER, STATE)"
    assert repr(PathContains("head")) == "PathContains('head')"
    with pytest.raises(TypeError, match="a module filter is a Kind"):
        b.select("head")
    with pytest.raises(TypeError, match="OfKind expects Kinds"):
        OfKind("state")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="OfType expects types"):
        OfType(1)  # type: ignore[arg-type]


def test_state_dict_round_trip_and_errors() -> None:
    b = Block()
    sd = b.state_dict()
    assert list(sd) == ["enc.w", "enc.calls", "head.w", "head.calls", "steps"]
    assert b.state_dict(Kind.PARAMETER).keys() == {"enc.w", "head.w"}
    sd2 = {k: (v + 1 if k != "steps" else 7) for k, v in sd.items()}
    loaded = b.load_state_dict(sd2)
    assert loaded.enc is loaded.dec
    assert jnp.allclose(loaded.head.w, 2.0)
    assert loaded.steps == 7
    assert b.steps == 0
    partial = b.load_state_dict({"head.w": jnp.zeros(2)}, strict=False)
    assert jnp.allclose(partial.head.w, 0.0)
    assert partial.enc.w is b.enc.w
    with pytest.raises(
        ValueError,
        match=r"missing keys \['enc.calls', 'head.calls', 'steps'\]; "
        r"unknown keys \['dec.w'\]",
    ):
        b.load_state_dict({"enc.w": jnp.ones(2), "head.w": jnp.ones(2), "dec.w": 1})
    with pytest.raises(ValueError, match=r"head.w: expected float32\[2\], got float32\[2, 2\]"):
        b.load_state_dict({**sd, "head.w": jnp.ones((2, 2))})
    with pytest.raises(TypeError, match="expects a mapping"):
        b.load_state_dict([("steps", 1)])  # type: ignore[arg-type]


def test_new_is_typed_self() -> None:
    import inspect

    assert inspect.signature(Module.__new__).return_annotation == "Self"
    b: Block = Block()
    assert type(b) is Block


# --------------------------------------------------------------------------------------------
# Open kinds

BatchStats = Kind.define("batch_stats")


class Norm(Module):
    scale: Parameter
    var: Annotated[Any, BatchStats]

    def __init__(self) -> None:
        self.scale = jnp.ones(2)
        self.var = jnp.ones(2)
        self.register_kind("mean", jnp.zeros(2), BatchStats)


def test_defined_kinds_hold_leaves_and_select() -> None:
    import pickle

    assert Kind("batch_stats") is BatchStats
    assert Kind.define("batch_stats") is BatchStats
    assert Kind.define("state") is Kind.STATE
    assert repr(BatchStats) == "<Kind.BATCH_STATS: 'batch_stats'>"
    assert BatchStats.name == "BATCH_STATS"
    assert BatchStats.value == "batch_stats"
    n = Norm()
    assert dict(n.name_to_kind) == {"scale": Kind.PARAMETER, "var": BatchStats, "mean": BatchStats}
    assert len(jax.tree_util.tree_leaves(n)) == 3
    stats = n.select(BatchStats)
    assert stats.scale is None
    assert stats.mean is n.mean
    assert n.state_dict(BatchStats).keys() == {"var", "mean"}
    assert n.parameters().mean is None
    grads = oxjax.filter_grad(lambda p: jnp.sum(n.update(p).scale * n.mean))(
        n.select(Kind.PARAMETER)
    )
    assert grads.mean is None
    assert grads.scale is not None
    again = pickle.loads(pickle.dumps(n))
    assert again.name_to_kind["mean"] is BatchStats
    assert oxtree.tree_structure(again) == oxtree.tree_structure(n)


def test_defined_kind_errors() -> None:
    with pytest.raises(TypeError, match=r"Kind\.define expects an identifier"):
        Kind.define("not a name")
    with pytest.raises(ValueError, match="is not a valid Kind"):
        Kind("never_defined_kind")
    m = Module()
    with pytest.raises(TypeError, match=r"register_kind\('x', \.\.\.\): the kind must be a Kind"):
        m.register_kind("x", 1, Kind.OTHERS)
    with pytest.raises(TypeError, match="the kind must be a Kind"):
        m.register_kind("x", 1, "state")  # type: ignore[arg-type]
    m.register_kind("sub", Module(), Kind.MODULE)
    assert m.name_to_kind["sub"] is Kind.MODULE
    assert not hasattr(m, "x")


# --------------------------------------------------------------------------------------------
# JAX's transforms apply to modules directly, sharing kept


class Layer(Module):
    w: Parameter

    def __init__(self, key: Any) -> None:
        self.w = jax.random.normal(key, (3, 3)) * 0.1

    def __call__(self, x: Any) -> Any:
        return jnp.tanh(x @ self.w)


def test_vmap_over_an_ensemble_of_tied_modules() -> None:
    keys = jax.random.split(jax.random.PRNGKey(0), 4)

    def make(key: Any) -> AutoEncoder:
        m = AutoEncoder()
        m.enc.w = jax.random.normal(key, (3, 3))
        return m

    ensemble = jax.vmap(make)(keys)
    assert ensemble.enc is ensemble.dec
    assert ensemble.enc.w.shape == (4, 3, 3)
    out = jax.vmap(lambda m: m(X))(ensemble)
    assert out.shape == (4, 4, 3)
    np_first = make(keys[0])(X)
    assert jnp.allclose(out[0], np_first, atol=1e-5)


def test_scan_over_stacked_layers_and_checkpoint() -> None:
    layers = [Layer(k) for k in jax.random.split(jax.random.PRNGKey(1), 5)]
    stacked = jax.tree_util.tree_map(lambda *ws: jnp.stack(ws), *layers)
    assert type(stacked) is Layer
    assert stacked.w.shape == (5, 3, 3)

    def body(x: Any, layer: Layer) -> Any:
        return jax.checkpoint(lambda layer, x: layer(x))(layer, x), None

    y, _ = jax.lax.scan(body, X, stacked)
    expected = X
    for layer in layers:
        expected = layer(expected)
    assert jnp.allclose(y, expected, atol=1e-6)
    grads = jax.grad(lambda s: jnp.sum(jax.lax.scan(body, X, s)[0]))(stacked)
    assert grads.w.shape == (5, 3, 3)


def test_eval_shape_keeps_sharing_and_kinds() -> None:
    shapes = jax.eval_shape(AutoEncoder)
    assert shapes.enc is shapes.dec
    assert shapes.enc.w.shape == (3, 3)
    assert isinstance(shapes.enc.w, jax.ShapeDtypeStruct)
    assert shapes.enc.name_to_kind["w"] is Kind.PARAMETER


# --------------------------------------------------------------------------------------------
# The nnx style end to end: a jitted method that updates running statistics, a training step
# that updates them through the gradient and donates its buffers


class RunningNorm(Module):
    def __init__(self) -> None:
        self.register_parameter("scale", jnp.ones(3))
        self.register_kind("mean", jnp.zeros(3), BatchStats)
        self.register_state("count", jnp.zeros((), jnp.int32))

    @oxjax.filter_jit
    def __call__(self, x: Any) -> Any:
        self.mean = 0.9 * self.mean + 0.1 * x.mean(0)
        self.count = self.count + 1
        return (x - self.mean) * self.scale


def test_jitted_method_updates_running_statistics() -> None:
    norm = RunningNorm()
    norm(jnp.ones((4, 3)))
    norm(jnp.ones((4, 3)))
    assert jnp.allclose(norm.mean, 0.19)
    assert int(norm.count) == 2


def test_training_step_with_statistics_and_donation() -> None:
    class Model(Module):
        def __init__(self) -> None:
            self.norm = RunningNorm()
            self.register_parameter("w", jnp.eye(3))

    def loss(m: Model, x: Any) -> Any:
        h = x @ m.w
        m.norm.mean = 0.9 * m.norm.mean + 0.1 * h.mean(0)  # written back, not differentiated
        return jnp.mean(((h - m.norm.mean) * m.norm.scale) ** 2)

    opt = optax.adam(1e-2)
    m = Model()
    norm = m.norm
    state = opt.init(m.select(Kind.PARAMETER))

    x = jnp.arange(12.0).reshape(4, 3)

    @oxjax.filter_jit(donate="all-except-first")  # the optimizer state's buffers are reused
    def step(m: Model, state: Any) -> Any:
        value, grads = oxjax.filter_value_and_grad(loss)(m, x)
        assert grads.norm.mean is not None  # a float leaf: differentiated, then unused
        updates, state = opt.update(grads.select(Kind.PARAMETER), state)
        new = m.update(optax.apply_updates(m.select(Kind.PARAMETER), updates))
        m.w, m.norm.scale = new.w, new.norm.scale
        return value, state

    losses = []
    for _ in range(3):
        value, state = step(m, state)
        losses.append(float(value))
    assert m.norm is norm
    assert losses[2] < losses[0]
    assert jnp.allclose(m.norm.mean, 0.271 * x.mean(0), rtol=0.05)
    assert not jnp.allclose(m.w, jnp.eye(3))


def test_filter_value_and_grad_has_aux_expects_a_pair() -> None:
    m = Scaled()
    for bad in (lambda m: jnp.sum(m.w), lambda m: (jnp.sum(m.w), 1, 2)):
        with pytest.raises(TypeError, match=r"has_aux=True expects fn to return a pair"):
            oxjax.filter_value_and_grad(bad, has_aux=True)(m)
    assert int(m.calls) == 0
