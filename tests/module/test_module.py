"""oxtree.Module: attribute kinds, flattening, functional updates, the declarative style,
sharing through graphs and filter_jit, JAX transforms, display, errors, and examples/mlp.py."""

from __future__ import annotations

import copy
import dataclasses
import doctest
import pickle
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from types import MappingProxyType
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import oxtree
import oxtree.jax as oxjax
import pytest
from helpers import HYPOTHESIS_SETTINGS, trees
from hypothesis import given
from hypothesis import strategies as st
from oxtree import GetAttrKey, Kind, Module, Parameter, State
from oxtree import tree_util as jtu

ROOT = Path(__file__).resolve().parents[2]

# --------------------------------------------------------------------------------------------
# Module-level classes (so that pickles of their instances and treedefs load).


class Counter(Module):
    """A counter: one STATE."""

    def __init__(self) -> None:
        self.register_state("count", 0)

    def step(self) -> None:
        self.count = self.count + 1


class CounterWithBias(Module):
    """Parameters and states side by side."""

    def __init__(self) -> None:
        self.register_state("count", 0)
        self.register_parameter("bias", 0.0)

    def step(self) -> None:
        self.count = self.count + 1


class Linear(Module):
    """The imperative style: registration calls and configuration."""

    def __init__(self, n_in: int, n_out: int, *, scale: float = 1.0) -> None:
        self.register_parameter("weight", np.full((n_in, n_out), scale, np.float32))
        self.register_parameter("bias", np.zeros(n_out, np.float32))
        self.features = (n_in, n_out)

    def __call__(self, x: Any) -> Any:
        return x @ self.weight + self.bias


class Declared(Module):
    """The declarative style: kinds from annotations, in declaration order."""

    bias: Parameter
    weight: Parameter[np.ndarray]
    count: State[int] = 0
    note: str = "static"

    def __init__(self, w: Any, b: Any) -> None:
        self.weight, self.bias = w, b


class Stack(Module):
    """A parent with child modules in a list, a dict and a tuple, and a state."""

    def __init__(self) -> None:
        self.layers = [Linear(2, 3), Linear(3, 1, scale=0.5)]
        self.heads = {"b": Linear(1, 1), "a": Linear(1, 2)}
        self.pair = (Linear(1, 1), Linear(1, 1))
        self.register_state("steps", np.int32(0))
        self.name = "stack"


class Holder(Module):
    """Any values as a parameter and a state, and configuration."""

    def __init__(self, p: Any, s: Any, n: int, label: str) -> None:
        self.register_parameter("p", p)
        self.register_state("s", s)
        self.n = n
        self.label = label


class Tied(Module):
    """One submodule under two attributes."""

    def __init__(self) -> None:
        self.enc = Linear(2, 2)
        self.dec = self.enc
        self.register_state("calls", 0)


# --------------------------------------------------------------------------------------------
# PAX-style modules: states, parameters, submodules


def test_counter_flatten_and_unflatten() -> None:
    counter = Counter()
    counter.step()
    assert counter.count == 1
    leaves, treedef = oxtree.tree_flatten(counter)
    assert leaves == [1]
    new = oxtree.tree_unflatten(treedef, leaves)
    assert type(new) is Counter
    assert new.count == 1
    assert new is not counter
    assert new.training is True


def test_parameter_and_state() -> None:
    counter = CounterWithBias()
    counter.step()
    leaves, treedef = jtu.tree_flatten(counter)
    assert leaves == [1, 0.0]  # registration order: count, then bias
    assert counter.name_to_kind == {"count": Kind.STATE, "bias": Kind.PARAMETER}
    assert list(counter.name_to_kind) == ["count", "bias"]
    new = jtu.tree_unflatten(treedef, [5, 2.5])
    assert (type(new), new.count, new.bias) == (CounterWithBias, 5, 2.5)
    assert new.name_to_kind == counter.name_to_kind


def test_submodule_assignment_becomes_module() -> None:
    class Parent(Module):
        def __init__(self) -> None:
            self.child = Counter()
            self.children = [Counter(), Counter()]
            self.by_name = {"x": Counter()}
            self.pair = (Counter(),)
            self.plain = [1, 2]
            self.empty: list[Module] = []

    p = Parent()
    kinds = p.name_to_kind
    assert kinds == dict.fromkeys(["child", "children", "by_name", "pair"], Kind.MODULE)
    assert "plain" not in kinds
    assert "empty" not in kinds
    assert oxtree.tree_leaves(p) == [0, 0, 0, 0, 0]


def test_configuration_turning_into_a_module() -> None:
    class M(Module):
        def __init__(self) -> None:
            self.sub = None
            self.sub = Counter()

    m = M()
    assert m.name_to_kind == {"sub": Kind.MODULE}
    assert oxtree.tree_leaves(m) == [0]


# --------------------------------------------------------------------------------------------
# Parents with children: leaves, keys in both faces


def test_parent_with_child_modules_leaves_and_paths() -> None:
    s = Stack()
    assert s.name_to_kind == {
        "layers": Kind.MODULE,
        "heads": Kind.MODULE,
        "pair": Kind.MODULE,
        "steps": Kind.STATE,
    }
    assert len(oxtree.tree_leaves(s)) == 2 * 6 + 1
    expected = [
        ".layers[0].weight",
        ".layers[0].bias",
        ".layers[1].weight",
        ".layers[1].bias",
        ".heads['a'].weight",  # dict keys sorted, as everywhere
        ".heads['a'].bias",
        ".heads['b'].weight",
        ".heads['b'].bias",
        ".pair[0].weight",
        ".pair[0].bias",
        ".pair[1].weight",
        ".pair[1].bias",
        ".steps",
    ]
    jax_paths = [oxtree.keystr(p) for p, _ in jtu.tree_flatten_with_path(s)[0]]
    assert jax_paths == expected
    # The optree face: GetAttrKey entries for modules, raw entries for builtin containers.
    paths = oxtree.tree_paths(s)
    assert paths[0] == (GetAttrKey("layers"), 0, GetAttrKey("weight"))
    assert paths[-1] == (GetAttrKey("steps"),)
    assert oxtree.keystr(oxtree.tree_flatten_with_path(Counter())[0][0]) == ".count"


def test_tree_map_keeps_class_kinds_and_configuration_without_init() -> None:
    calls = []

    class Tracked(Module):
        def __init__(self) -> None:
            calls.append(1)
            self.register_parameter("w", 1.0)
            self.register_state("n", 2)
            self.lr = 0.1
            self.sub = Counter()

    t = Tracked()
    for face in (oxtree, jtu):
        out = face.tree_map(lambda x: x * 10, t)
        assert type(out) is Tracked
        assert type(out.sub) is Counter
        assert (out.w, out.n, out.lr, out.sub.count) == (10.0, 20, 0.1, 0)
        assert out.name_to_kind == t.name_to_kind
        assert out.training is True
        assert face.tree_structure(out) == face.tree_structure(t)
    assert calls == [1]
    assert (t.w, t.n) == (1.0, 2)  # the original is untouched


def test_configuration_is_in_the_treedef() -> None:
    a, b, c = Linear(2, 3), Linear(2, 3, scale=2.0), Linear(3, 2)
    spec_a, spec_b, spec_c = (oxtree.tree_structure(m) for m in (a, b, c))
    assert spec_a == spec_b  # scale only set the weights (leaves)
    assert hash(spec_a) == hash(spec_b)
    assert spec_a != spec_c  # features differ
    a.features = (3, 2)
    assert oxtree.tree_structure(a) == spec_c  # a changed configuration is seen
    assert "features=(2, 3)" in repr(spec_b)
    assert "weight: PARAMETER" in repr(spec_b)


def test_unhashable_configuration_compares_by_content_or_identity() -> None:
    class Cfg(Module):
        def __init__(self, sizes: Any, extra: Any = None) -> None:
            self.register_parameter("w", 1.0)
            self.sizes = sizes
            self.extra = extra

    # lists, dicts and sets (nested too) compare by content
    assert oxtree.tree_structure(Cfg([1, [2]])) == oxtree.tree_structure(Cfg([1, [2]]))
    assert oxtree.tree_structure(Cfg([1, 2])) != oxtree.tree_structure(Cfg([1, 3]))
    assert oxtree.tree_structure(Cfg({"a": [1]})) == oxtree.tree_structure(Cfg({"a": [1]}))
    assert oxtree.tree_structure(Cfg({1, 2})) == oxtree.tree_structure(Cfg({2, 1}))
    assert oxtree.tree_structure(Cfg([1], {"a": {1}})) != oxtree.tree_structure(Cfg([1]))
    hash(oxtree.tree_structure(Cfg([1, {"x": [2]}])))  # hashable all the same

    class Unhashable:
        __hash__ = None  # type: ignore[assignment]

    u = Unhashable()
    assert oxtree.tree_structure(Cfg(1, u)) == oxtree.tree_structure(Cfg(1, u))
    assert oxtree.tree_structure(Cfg(1, u)) != oxtree.tree_structure(Cfg(1, Unhashable()))
    out = oxtree.tree_map(lambda x: x, Cfg(1, u))
    assert out.extra is u


def test_treedef_and_module_pickle_and_copy() -> None:
    s = Stack()
    spec = oxtree.tree_structure(s)
    assert pickle.loads(pickle.dumps(spec)) == spec
    for clone in (pickle.loads(pickle.dumps(s)), copy.deepcopy(s), copy.copy(s)):
        assert type(clone) is Stack
        assert clone.name_to_kind == s.name_to_kind
        assert oxtree.tree_structure(clone) == spec
        assert clone.name == "stack"
    assert copy.copy(s).layers is s.layers
    assert copy.deepcopy(s).layers is not s.layers


def test_del_attribute_drops_its_kind() -> None:
    m = CounterWithBias()
    del m.bias
    assert m.name_to_kind == {"count": Kind.STATE}
    assert oxtree.tree_leaves(m) == [0]
    m.register_parameter("bias", 3.0)  # may be registered again
    assert oxtree.tree_leaves(m) == [0, 3.0]


def test_submodules_lists_each_direct_child_once() -> None:
    s = Stack()
    subs = list(s.submodules())
    assert subs == [*s.layers, s.heads["a"], s.heads["b"], *s.pair]
    t = Tied()
    assert list(t.submodules()) == [t.enc]


# --------------------------------------------------------------------------------------------
# parameters(), states(), update(), replace(), train(), eval()


def test_parameters_and_states_recursively() -> None:
    s = Stack()
    params = s.parameters()
    states = s.states()
    assert type(params) is Stack
    assert type(states) is Stack
    assert params.steps is None
    assert states.steps == 0
    assert params.layers[0].weight is s.layers[0].weight
    assert states.layers[0].weight is None
    assert states.heads["a"].bias is None
    assert oxtree.tree_leaves(params) == oxtree.tree_leaves(s)[:-1]
    assert oxtree.tree_leaves(states) == [0]
    # same structure once None counts as a leaf, so the two combine
    specs = {oxtree.tree_structure(t, none_is_leaf=True) for t in (s, params, states)}
    assert len(specs) == 1
    assert s.steps == 0  # untouched
    assert s.layers[0].weight is not None


def test_filtering_keeps_container_structure_inside_an_attribute() -> None:
    class M(Module):
        def __init__(self) -> None:
            self.register_parameter("w", {"a": [1.0, 2.0], "b": None})
            self.register_state("s", (3, [4]))

    p = M().parameters()
    st_ = M().states()
    assert p.s == (None, [None])
    assert st_.w == {"a": [None, None], "b": None}


def test_update_combines_and_leaves_originals_alone() -> None:
    s = Stack()
    params = oxtree.tree_map(lambda x: x + 1, s.parameters())
    states = oxtree.tree_map(lambda x: x + 5, s.states())
    new = s.update(params)
    assert new is not s
    assert np.array_equal(new.layers[0].weight, s.layers[0].weight + 1)
    assert new.steps == 0
    both = new.update(states)
    assert both.steps == 5
    assert np.array_equal(both.layers[1].bias, s.layers[1].bias + 1)
    assert s.steps == 0
    assert np.array_equal(s.layers[0].weight, np.ones((2, 3)))
    assert params.steps is None


def test_update_errors() -> None:
    with pytest.raises(TypeError, match=r"Stack\.update expects a Stack, got Linear"):
        Stack().update(Linear(1, 1))  # type: ignore[arg-type]
    other = Stack()
    other.layers = [Linear(2, 3)]
    with pytest.raises(ValueError, match=r"layers"):
        Stack().update(other)
    untied = Tied()
    untied.dec = Linear(2, 2)
    with pytest.raises(ValueError, match="share submodules differently"):
        Tied().update(untied)


def test_replace() -> None:
    c = CounterWithBias()
    new = c.replace(count=3, bias=1.5)
    assert (new.count, new.bias, c.count, c.bias) == (3, 1.5, 0, 0.0)
    assert new.name_to_kind == c.name_to_kind
    s = Stack()
    s2 = s.replace(name="other", layers=[Linear(1, 1)])
    assert s2.name == "other"
    assert s.name == "stack"
    assert len(s2.layers) == 1
    assert len(s.layers) == 2
    assert oxtree.tree_structure(s2) != oxtree.tree_structure(s)
    with pytest.raises(TypeError, match=r"Counter\.replace: no attribute 'cnt'.*'count'"):
        Counter().replace(cnt=1)


def test_training_is_static_and_train_eval_recurse() -> None:
    s = Stack()
    assert s.training is True
    ev = s.eval()
    assert ev.training is False
    assert all(m.training is False for m in [*ev.layers, *ev.heads.values(), *ev.pair])
    assert s.training is True
    assert s.layers[0].training is True
    assert oxtree.tree_leaves(ev) == oxtree.tree_leaves(s)
    assert oxtree.tree_structure(ev) != oxtree.tree_structure(s)
    back = ev.train()
    assert back.layers[1].training is True
    assert oxtree.tree_structure(back) == oxtree.tree_structure(s)
    assert ev.layers[0].weight is s.layers[0].weight  # leaves are not copied


# --------------------------------------------------------------------------------------------
# The declarative style


def test_declarative_kinds_order_and_defaults() -> None:
    d = Declared(np.ones(2), 0.5)
    assert d.name_to_kind == {"bias": Kind.PARAMETER, "weight": Kind.PARAMETER, "count": Kind.STATE}
    leaves = oxtree.tree_leaves(d)
    assert leaves[0] == 0.5
    assert np.array_equal(leaves[1], np.ones(2))
    assert leaves[2] == 0  # the class default, a leaf of the instance
    assert d.note == "static"  # a class attribute, not configuration of the instance
    assert "note" not in vars(d)
    assert d.parameters().count is None


def test_declarative_inheritance_and_unresolvable_string_annotations() -> None:
    class Sub(Declared):
        extra: Parameter[NotDefinedAnywhere]  # type: ignore[name-defined]  # noqa: F821
        plain: int

        def __init__(self) -> None:
            super().__init__(1.0, 2.0)
            self.extra = 3.0
            self.plain = 4

    s = Sub()
    assert list(s.name_to_kind) == ["bias", "weight", "count", "extra"]
    assert oxtree.tree_leaves(s) == [2.0, 1.0, 0, 3.0]
    assert s.plain == 4


def test_declarative_annotation_objects() -> None:
    # Without `from __future__ import annotations`: the annotations are objects.
    namespace: dict[str, Any] = {"Module": Module, "Parameter": Parameter, "State": State}
    exec(
        textwrap.dedent(
            """
            from typing import Annotated
            import oxtree
            class Obj(Module):
                a: Parameter[float]
                b: State
                c: Annotated[list, oxtree.Kind.MODULE]
                d: int
            """
        ),
        namespace,
    )
    obj = namespace["Obj"]()
    obj.a, obj.b, obj.c, obj.d = 1.0, 2, [Counter()], 4
    assert obj.name_to_kind == {"a": Kind.PARAMETER, "b": Kind.STATE, "c": Kind.MODULE}
    assert oxtree.tree_leaves(obj) == [1.0, 2, 0]


def test_declarative_with_dataclass() -> None:
    @dataclasses.dataclass(eq=False, repr=False)
    class DC(Module):
        weight: Parameter
        count: State = 0
        size: int = 3

    d = DC(1.5)
    assert oxtree.tree_leaves(d) == [1.5, 0]
    assert d.name_to_kind == {"weight": Kind.PARAMETER, "count": Kind.STATE}
    out = oxtree.tree_map(lambda x: x * 2, d)
    assert (out.weight, out.count, out.size) == (3.0, 0, 3)
    assert oxtree.tree_structure(DC(1.0, size=4)) != oxtree.tree_structure(d)


# --------------------------------------------------------------------------------------------
# Errors


def test_registering_a_name_twice_names_it() -> None:
    c = CounterWithBias()
    with pytest.raises(ValueError, match=r"'count' is already registered \(as STATE\)"):
        c.register_parameter("count", 1)
    with pytest.raises(ValueError, match=r"'weight' is already registered \(as PARAMETER\)"):
        Declared(1.0, 2.0).register_state("weight", 0)


def test_registering_an_existing_plain_attribute() -> None:
    s = Stack()
    with pytest.raises(ValueError, match=r"'name' already exists as OTHERS"):
        s.register_parameter("name", 1.0)


@pytest.mark.parametrize("name", ["training", "parameters", "name_to_kind", "_oxtree_def"])
def test_reserved_names(name: str) -> None:
    with pytest.raises(ValueError, match=f"'{name}' is reserved"):
        Module().register_state(name, 0)


@pytest.mark.parametrize("name", ["not an identifier", 3, ""])
def test_names_must_be_identifiers(name: Any) -> None:
    with pytest.raises(TypeError, match="attribute names must be identifiers"):
        Module().register_parameter(name, 0)


@pytest.mark.parametrize("value", [3, [Counter(), 1], {"a": 1}, "x"])
def test_register_module_wants_modules(value: Any) -> None:
    with pytest.raises(TypeError, match=r"register_module\('m', \.\.\.\) expects a Module"):
        Module().register_module("m", value)


def test_register_module_accepts_empty_containers() -> None:
    m = Module()
    m.register_module("blocks", [])
    assert m.name_to_kind == {"blocks": Kind.MODULE}
    m.blocks = [Counter()]
    assert oxtree.tree_leaves(m) == [0]


def test_name_to_kind_is_read_only() -> None:
    c = CounterWithBias()
    assert isinstance(c.name_to_kind, MappingProxyType)
    with pytest.raises(TypeError):
        c.name_to_kind["x"] = Kind.STATE  # type: ignore[index]
    with pytest.raises(AttributeError):
        c.name_to_kind = {}  # type: ignore[misc]


def test_array_as_configuration_is_refused() -> None:
    m = Module()
    with pytest.raises(TypeError, match=r"Module\.w holds an array \(float32\[3\]\).*register_"):
        m.w = np.zeros(3, np.float32)
    m.cfg = [1, 2]
    m.cfg.append(np.zeros(2))  # mutated in place: caught when flattened
    with pytest.raises(TypeError, match=r"Module\.cfg holds an array"):
        oxtree.tree_structure(m)
    m2 = Module()
    m2.scalar = np.float32(1.0)  # numpy scalars are hashable: fine
    assert oxtree.tree_leaves(m2) == []


def test_declared_but_unassigned_field() -> None:
    class Lazy(Module):
        w: Parameter

    with pytest.raises(AttributeError, match=r"Lazy\.w \(PARAMETER\) .* never assigned"):
        oxtree.tree_leaves(Lazy())
    with pytest.raises(AttributeError, match=r"Lazy\.w \(PARAMETER\)"):
        jtu.tree_flatten_with_path(Lazy())


def test_others_annotation_is_refused() -> None:
    from typing import Annotated

    bad = type("Bad", (Module,), {"__annotations__": {"x": Annotated[int, Kind.OTHERS]}})
    with pytest.raises(TypeError, match=r"Bad\.x: .*OTHERS is the default"):
        bad()


def test_module_takes_no_constructor_arguments() -> None:
    with pytest.raises(TypeError):
        Module(1)  # type: ignore[call-arg]


# --------------------------------------------------------------------------------------------
# Property: any trees as parameter and state values


@HYPOTHESIS_SETTINGS
@given(trees(max_leaves=8), trees(max_leaves=8), st.integers(), st.text(max_size=3))
def test_roundtrip_any_values(p: Any, s: Any, n: int, label: str) -> None:
    h = Holder(p, s, n, label)
    leaves, spec = oxtree.tree_flatten(h)
    assert len(leaves) == len(oxtree.tree_leaves(p)) + len(oxtree.tree_leaves(s))
    out = oxtree.tree_unflatten(spec, leaves)
    assert oxtree.tree_structure(out) == spec
    assert (out.n, out.label) == (n, label)
    assert oxtree.tree_leaves(out.parameters()) == oxtree.tree_leaves(p)
    assert oxtree.tree_leaves(out.states()) == oxtree.tree_leaves(s)


# --------------------------------------------------------------------------------------------
# Sharing: graph_flatten, parameters(), update(), filter_jit


def test_shared_submodule_through_graph_flatten() -> None:
    t = Tied()
    leaves, gd = oxtree.graph_flatten(t)
    assert len(leaves) == 3  # enc's two leaves once, and calls
    assert [oxtree.keystr(p) for p in gd.paths()] == [".enc.weight", ".enc.bias", ".calls"]
    out = oxtree.graph_unflatten(gd, leaves)
    assert type(out) is Tied
    assert out.enc is out.dec
    assert out.enc is not t.enc
    assert len(oxtree.tree_leaves(t)) == 5  # a tree walk sees the shared module twice


def test_functional_updates_keep_sharing() -> None:
    t = Tied()
    for out in (t.parameters(), t.states(), t.eval(), t.update(t.parameters())):
        assert out.enc is out.dec
        assert out.enc is not t.enc
    assert t.replace(calls=1).enc is t.enc


class JLinear(Module):
    weight: Parameter
    bias: Parameter

    def __init__(self, n_in: int, n_out: int) -> None:
        self.weight = jnp.ones((n_in, n_out)) / n_in
        self.bias = jnp.zeros(n_out)
        self.act = "tanh"

    def __call__(self, x: Any) -> Any:
        return x @ self.weight + self.bias


class JTied(Module):
    def __init__(self) -> None:
        self.enc = JLinear(3, 3)
        self.dec = self.enc
        self.register_state("calls", jnp.zeros((), jnp.int32))

    def __call__(self, x: Any) -> Any:
        return self.dec(jnp.tanh(self.enc(x)))


def test_filter_jit_keeps_shared_submodules() -> None:
    seen = []

    @oxjax.filter_jit
    def step(model: JTied, x: Any) -> tuple[JTied, Any]:
        seen.append(model.enc is model.dec)
        return model.replace(calls=model.calls + 1), model(x)

    m = JTied()
    out, y = step(m, jnp.ones((2, 3)))
    assert seen == [True]
    assert type(out) is JTied
    assert out.enc is out.dec
    assert int(out.calls) == 1
    assert y.shape == (2, 3)
    out2, _ = step(out, jnp.ones((2, 3)))  # same structure and configuration: no retrace
    assert seen == [True]
    assert int(out2.calls) == 2
    step(m.eval(), jnp.ones((2, 3)))  # the configuration changed: traced again
    assert seen == [True, True]


def test_filter_grad_over_parameters_keeps_sharing() -> None:
    m = JTied()

    def loss(params: JTied, model: JTied, x: Any) -> Any:
        return jnp.sum(model.update(params)(x) ** 2)

    grads = oxjax.filter_grad(loss)(m.parameters(), m, jnp.ones((2, 3)))
    assert grads.enc is grads.dec
    assert grads.calls is None
    assert grads.enc.weight.shape == (3, 3)
    new = m.update(grads)
    assert new.enc is new.dec


def test_jax_grad_over_parameters() -> None:
    model = JLinear(2, 1)
    x = jnp.ones((4, 2))

    def loss(params: JLinear) -> Any:
        return jnp.mean(model.update(params)(x) ** 2)

    grads = jax.grad(loss)(model.parameters())
    assert type(grads) is JLinear
    assert grads.act == "tanh"
    assert grads.weight.shape == (2, 1)
    assert float(jnp.abs(grads.weight).sum()) > 0
    paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(model)[0]]
    assert paths == [".weight", ".bias"]
    assert isinstance(
        jax.tree_util.tree_flatten_with_path(model)[0][0][0][0], jax.tree_util.GetAttrKey
    )


def test_jax_jit_caches_on_configuration() -> None:
    traces = []

    @jax.jit
    def f(m: JLinear, x: Any) -> Any:
        traces.append(m.act)
        return m(x)

    m = JLinear(2, 2)
    f(m, jnp.ones(2))
    f(jax.tree_util.tree_map(lambda a: a + 1, m), jnp.ones(2))
    assert traces == ["tanh"]
    f(m.replace(act="relu"), jnp.ones(2))
    assert traces == ["tanh", "relu"]


def test_registered_with_jax_when_jax_comes_later() -> None:
    script = textwrap.dedent(
        """
        import sys
        import oxtree
        class M(oxtree.Module):
            def __init__(self):
                self.register_parameter('w', 1.0)
        assert 'jax' not in sys.modules   # oxtree and the class did not import it
        import jax
        print(jax.tree_util.tree_leaves(M()))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[1.0]"


# --------------------------------------------------------------------------------------------
# Display


def test_repr_shows_arrays_by_dtype_and_shape() -> None:
    text = repr(Stack())
    assert text.startswith("Stack(")
    assert "weight=f32[2,3]" in text
    assert "bias=f32[1]" in text
    assert "\n  " in text  # indented when it does not fit one line
    assert repr(JTied()).count("<ref") == 1  # the shared submodule is shown once


def test_repr_html() -> None:
    html = Stack()._repr_html_()
    assert "<details" in html
    assert "Stack" in html


# --------------------------------------------------------------------------------------------
# docs/modules.md and examples/mlp.py


def test_docs_examples_run() -> None:
    result = doctest.testfile(
        str(ROOT / "docs" / "modules.md"),
        module_relative=False,
        optionflags=doctest.ELLIPSIS,
        verbose=False,
    )
    assert result.attempted > 40
    assert result.failed == 0


def test_mlp_example_learns() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "mlp.py"), "--steps", "300"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    match = re.search(r"loss ratio: ([0-9.]+)", out.stdout)
    assert match, out.stdout
    assert float(match[1]) >= 10.0
    assert ".layers[0].weight" in out.stdout
