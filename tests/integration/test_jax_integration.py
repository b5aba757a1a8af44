"""oxtree.jax: mirroring registrations into JAX, filter_jit, filter_grad, partition/combine."""

from __future__ import annotations

import copy
import dataclasses
import doctest
import operator
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
import oxtree
import oxtree.jax as oxjax
import pytest
from helpers import HYPOTHESIS_SETTINGS, assert_same_tree, trees
from hypothesis import given, settings
from hypothesis import strategies as st

# --------------------------------------------------------------------------------------------
# Node classes, registered in oxtree only (mirrored to JAX by the tests that need it).


class Pair:
    """A custom node with JAX-style flatten: keys are flat indices."""

    def __init__(self, a: Any, b: Any) -> None:
        self.a, self.b = a, b


oxtree.register_pytree_node(Pair, lambda p: ((p.a, p.b), "pair"), lambda _, c: Pair(*c))


class Named:
    """A custom node with flatten_with_keys: keys are attribute names."""

    def __init__(self, a: Any, b: Any) -> None:
        self.a, self.b = a, b


oxtree.register_pytree_node(
    Named,
    lambda n: ((n.a, n.b), None),
    lambda _, c: Named(*c),
    flatten_with_keys_func=lambda n: (
        ((oxtree.GetAttrKey("a"), n.a), (oxtree.GetAttrKey("b"), n.b)),
        None,
    ),
)


class Entries:
    """A custom node with optree-style entries."""

    def __init__(self, a: Any, b: Any) -> None:
        self.a, self.b = a, b


oxtree.register_pytree_node(
    Entries, lambda e: ((e.a, e.b), None, ("a", "b")), lambda _, c: Entries(*c)
)


@dataclasses.dataclass
class Linear:
    w: Any
    b: Any
    act: str = dataclasses.field(default="relu", metadata={"static": True})


oxtree.register_dataclass(Linear)


@dataclasses.dataclass(frozen=True)
class Checked:
    """Validates in __post_init__: rebuilt without __init__."""

    x: Any
    tag: str = dataclasses.field(default="t", metadata={"static": True})

    def __post_init__(self) -> None:
        if isinstance(self.x, (int, float)) and self.x < 0:
            raise ValueError("negative")


oxtree.register_dataclass(Checked, init_on_unflatten=False)


class Mode:
    """A static type: a leafless node whose value lives in the treedef."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mode) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)


oxtree.register_static(Mode)


class Local:
    """Registered in a namespace only."""

    def __init__(self, x: Any) -> None:
        self.x = x


oxtree.register_pytree_node(
    Local, lambda n: ((n.x,), None), lambda _, c: Local(*c), namespace="oxjax-local"
)


class Both:
    """Registered globally with one child and in a namespace with none."""

    def __init__(self, x: Any) -> None:
        self.x = x


oxtree.register_pytree_node(Both, lambda n: ((n.x,), None), lambda _, c: Both(*c))
oxtree.register_pytree_node(Both, lambda n: ((), n.x), lambda x, _: Both(x), namespace="oxjax-both")

for _cls in (Pair, Named, Entries, Linear, Checked, Mode):
    oxjax.register(_cls)
oxjax.register(Local, namespace="oxjax-local")


def jax_paths(tree: Any) -> list[str]:
    return [jtu.keystr(path) for path, _ in jtu.tree_flatten_with_path(tree)[0]]


def ox_paths(tree: Any) -> list[str]:
    return [oxtree.keystr(path) for path, _ in oxtree.tree_util.tree_flatten_with_path(tree)[0]]


def counted(fn: Any) -> tuple[Any, list[int]]:
    """`fn` and a one-item list counting its calls (filter_jit calls it once per trace)."""
    count = [0]

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        count[0] += 1
        return fn(*args, **kwargs)

    return wrapper, count


# --------------------------------------------------------------------------------------------
# Import hygiene


def test_import_oxtree_does_not_import_jax() -> None:
    code = (
        "import sys, oxtree; assert 'jax' not in sys.modules, 'jax imported'; "
        "import oxtree.jax; assert 'jax' in sys.modules; print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"


def test_oxtree_jax_is_not_in_the_package_namespace() -> None:
    assert "jax" not in oxtree.__all__


# --------------------------------------------------------------------------------------------
# Mirroring


@pytest.mark.parametrize(
    "tree",
    [
        Pair(1.0, (2.0, 3.0)),
        Named(1.0, [2.0]),
        Entries({"x": 1.0}, 2.0),
        Linear(1.0, 2.0, "tanh"),
        Checked(1.0, "c"),
        [Mode("fast"), 1.0],
        [Pair(None, 1.0), Named(None, None), Linear(None, 2.0)],
        {"deep": [Pair(Named(1.0, 2.0), Linear(3.0, Entries(4.0, 5.0)))]},
    ],
    ids=["custom", "with_keys", "entries", "dataclass", "no_init", "static", "nones", "nested"],
)
def test_mirrored_types_flatten_in_jax_as_in_oxtree(tree: Any) -> None:
    leaves, treedef = jtu.tree_flatten(tree)
    assert leaves == oxtree.tree_leaves(tree)
    assert jax_paths(tree) == ox_paths(tree)
    with_path_treedef = jtu.tree_flatten_with_path(tree)[1]
    assert with_path_treedef == treedef
    assert hash(with_path_treedef) == hash(treedef)
    rebuilt = jtu.tree_unflatten(treedef, leaves)
    assert jtu.tree_structure(rebuilt) == treedef
    assert oxtree.tree_structure(rebuilt) == oxtree.tree_structure(tree)


def test_mirrored_keys_are_jax_key_objects() -> None:
    (path_a, _), (path_b, _) = jtu.tree_flatten_with_path(Named(1, 2))[0]
    assert path_a == (jtu.GetAttrKey("a"),)
    assert path_b == (jtu.GetAttrKey("b"),)
    assert [p for p, _ in jtu.tree_flatten_with_path(Pair(1, 2))[0]] == [
        (jtu.FlattenedIndexKey(0),),
        (jtu.FlattenedIndexKey(1),),
    ]
    assert [p for p, _ in jtu.tree_flatten_with_path(Linear(1, 2))[0]] == [
        (jtu.GetAttrKey("w"),),
        (jtu.GetAttrKey("b"),),
    ]
    # An optree-style entry that is not an int keeps oxtree's key: it prints the same.
    ((key,), _), _ = jtu.tree_flatten_with_path(Entries(1, 2))[0]
    assert key == oxtree.FlattenedIndexKey("a")


def test_mirrored_aux_data_decides_treedef_equality() -> None:
    assert jtu.tree_structure(Linear(1, 2, "relu")) == jtu.tree_structure(Linear(3, 4, "relu"))
    assert jtu.tree_structure(Linear(1, 2, "relu")) != jtu.tree_structure(Linear(1, 2, "tanh"))
    assert jtu.tree_structure(Mode("a")) != jtu.tree_structure(Mode("b"))
    assert hash(jtu.tree_structure(Mode("a"))) == hash(jtu.tree_structure(Mode("a")))


def test_jit_over_mirrored_dataclass_and_custom_node() -> None:
    @jax.jit
    def apply(layer: Linear, x: Any) -> Any:
        y = layer.w * x.a + layer.b + x.b
        return jnp.tanh(y) if layer.act == "tanh" else jax.nn.relu(y)

    layer = Linear(jnp.array([1.0, -2.0]), jnp.array([0.5, 0.5]), "relu")
    out = apply(layer, Pair(jnp.ones(2), jnp.zeros(2)))
    np.testing.assert_allclose(out, [1.5, 0.0])
    tanh = apply(Linear(layer.w, layer.b, "tanh"), Pair(jnp.ones(2), jnp.zeros(2)))
    np.testing.assert_allclose(tanh, np.tanh([1.5, -1.5]), rtol=1e-6)


def test_vmap_over_mirrored_dataclass() -> None:
    layers = Linear(jnp.arange(6.0).reshape(3, 2), jnp.ones((3, 2)), "relu")
    out = jax.vmap(lambda layer: layer.w * 2 + layer.b)(layers)
    np.testing.assert_allclose(out, np.arange(6.0).reshape(3, 2) * 2 + 1)
    # vmap builds instances of the class with batched leaves and the same meta field
    mapped = jax.vmap(lambda layer: Linear(layer.w + 1, layer.b, layer.act))(layers)
    assert isinstance(mapped, Linear)
    assert mapped.act == "relu"
    np.testing.assert_allclose(mapped.w, np.arange(6.0).reshape(3, 2) + 1)


def test_vmap_over_mirrored_custom_node_with_in_axes_prefix() -> None:
    pair = Pair(jnp.arange(3.0), jnp.float32(10.0))
    out = jax.vmap(lambda p: p.a + p.b, in_axes=(Pair(0, None),))(pair)
    np.testing.assert_allclose(out, [10.0, 11.0, 12.0])


def test_grad_over_mirrored_types() -> None:
    def loss(tree: Any) -> Any:
        layer, named = tree
        return jnp.sum(layer.w**2) + jnp.sum(named.a * named.b)

    tree = (Linear(jnp.array([1.0, 2.0]), jnp.zeros(2)), Named(jnp.float32(3.0), jnp.float32(4.0)))
    grads = jax.grad(loss)(tree)
    assert isinstance(grads[0], Linear)
    assert isinstance(grads[1], Named)
    np.testing.assert_allclose(grads[0].w, [2.0, 4.0])
    np.testing.assert_allclose(grads[0].b, [0.0, 0.0])
    assert float(grads[1].a) == 4.0
    assert float(grads[1].b) == 3.0


def test_grad_over_dataclass_rebuilt_without_init() -> None:
    grads = jax.grad(lambda c: c.x**2)(Checked(jnp.float32(-3.0)))
    assert isinstance(grads, Checked)
    assert float(grads.x) == -6.0


def test_static_type_is_a_leafless_node_in_jax() -> None:
    leaves, treedef = jtu.tree_flatten({"mode": Mode("fast"), "x": 1.0})
    assert leaves == [1.0]
    assert jtu.tree_unflatten(treedef, [2.0])["mode"] == Mode("fast")

    @jax.jit
    def f(tree: Any) -> Any:
        return tree["x"] * (2 if tree["mode"].name == "fast" else 3)

    assert float(f({"mode": Mode("fast"), "x": 1.0})) == 2.0
    assert float(f({"mode": Mode("slow"), "x": 1.0})) == 3.0


def test_namespaced_type_mirrors_with_its_namespace() -> None:
    assert jtu.tree_leaves([Local(1), Local((2, 3))]) == [1, 2, 3]
    assert oxjax.mirrored_types()[Local] == "oxjax-local"


def test_register_twice_is_harmless() -> None:
    assert oxjax.register(Pair) is Pair
    assert oxjax.register(Local, namespace="oxjax-local") is Local
    assert jtu.tree_leaves(Pair(1, 2)) == [1, 2]


def test_register_a_global_type_through_a_namespace_is_the_same_mirror() -> None:
    # Pair is global: oxtree uses its global rule in every namespace, so this is no conflict.
    assert oxjax.register(Pair, namespace="elsewhere") is Pair
    assert oxjax.mirrored_types()[Pair] == ""


def test_register_errors() -> None:
    class Unregistered:
        pass

    with pytest.raises(ValueError, match=r"Unregistered is not registered in oxtree"):
        oxjax.register(Unregistered)
    with pytest.raises(ValueError, match=r"Local is not registered in oxtree \(the global"):
        oxjax.register(Local)
    with pytest.raises(TypeError, match=r"expects a class, got 3"):
        oxjax.register(3)  # type: ignore[type-var]
    with pytest.raises(TypeError, match=r"namespace must be a str"):
        oxjax.register(Pair, namespace=None)  # type: ignore[arg-type]


def test_register_conflicting_namespaces_raises() -> None:
    class Twice:
        def __init__(self, x: Any) -> None:
            self.x = x

    oxtree.register_pytree_node(Twice, lambda t: ((t.x,), None), lambda _, c: Twice(*c))
    oxtree.register_pytree_node(
        Twice, lambda t: ((), t.x), lambda x, _: Twice(x), namespace="oxjax-twice"
    )
    oxjax.register(Twice)
    with pytest.raises(ValueError, match=r"already mirrored to JAX from the global namespace"):
        oxjax.register(Twice, namespace="oxjax-twice")


def test_register_a_type_jax_already_knows_raises() -> None:
    class Known:
        def __init__(self, x: Any) -> None:
            self.x = x

    jtu.register_pytree_node(Known, lambda k: ((k.x,), None), lambda _, c: Known(*c))
    oxtree.register_pytree_node(Known, lambda k: ((k.x,), None), lambda _, c: Known(*c))
    with pytest.raises(ValueError, match=r"Known is already registered as a pytree node in JAX"):
        oxjax.register(Known)
    assert Known not in oxjax.mirrored_types()


def test_register_namespace_mirrors_the_namespace_own_types() -> None:
    class A:
        def __init__(self, x: Any) -> None:
            self.x = x

    class B(A):
        pass

    class Jaxed(A):
        pass

    ns = "oxjax-bulk"
    for cls in (A, B, Jaxed):
        oxtree.register_pytree_node(
            cls, lambda o: ((o.x,), None), lambda _, c, cls=cls: cls(*c), namespace=ns
        )
    jtu.register_pytree_node(Jaxed, lambda o: ((o.x,), None), lambda _, c: Jaxed(*c))
    assert sorted(oxjax.register_namespace(ns), key=lambda c: c.__name__) == [A, B]
    assert oxjax.register_namespace(ns) == []
    assert jtu.tree_leaves([A(1), B(2)]) == [1, 2]
    assert Pair not in oxjax.register_namespace(ns)  # global types are not this namespace's
    with pytest.raises(TypeError, match=r"namespace must be a str"):
        oxjax.register_namespace(1)  # type: ignore[arg-type]


def test_both_namespaces_of_a_type_resolve_to_their_own_rule() -> None:
    # Both is registered globally (one child) and in "oxjax-both" (none): mirroring from that
    # namespace takes its own rule.
    oxjax.register(Both, namespace="oxjax-both")
    assert jtu.tree_leaves([Both(5)]) == []
    assert jtu.tree_structure(Both(5)) != jtu.tree_structure(Both(6))
    with pytest.raises(ValueError, match=r"from namespace 'oxjax-both'"):
        oxjax.register(Both)


# --------------------------------------------------------------------------------------------
# filter_jit and jax.jit on a list shared by two keys


def bump_a(v: Any) -> Any:
    v["a"][0] += 1
    return v


def test_jax_jit_breaks_the_shared_reference() -> None:
    x = [jnp.zeros(())]
    out = jax.jit(bump_a)({"a": x, "b": x})
    assert float(out["a"][0]) == 1.0
    assert float(out["b"][0]) == 0.0
    assert out["a"] is not out["b"]


def test_filter_jit_keeps_the_shared_reference() -> None:
    x = [jnp.zeros(())]
    y = {"a": x, "b": x}
    out = oxjax.filter_jit(bump_a)(y)
    assert out["a"] is out["b"]
    assert float(out["a"][0]) == 1.0
    out["a"][0] += 1
    assert float(out["b"][0]) == 2.0
    # func mutated the rebuilt copy; the change is written back to the caller's objects
    # (as Flax NNX does), which keep their identities and their sharing
    assert y["a"] is x
    assert y["b"] is x
    assert float(x[0]) == 1.0
    assert len(x) == 1
    assert out["a"] is not x


def test_five_calls_trace_three_times() -> None:
    """The shared-list example run as a sequence: shared input, then the same structure with new
    values, then the two lists unshared (another graph), again with new values, then a Python
    float (a static leaf) in place of the array."""
    fn, traces = counted(bump_a)
    jitted = oxjax.filter_jit(fn)
    x = [jnp.zeros(())]
    y = jitted({"a": x, "b": x})  # 1: traces
    assert traces[0] == 1
    y = jitted(y)  # 2: the result is shared the same way: no trace
    assert traces[0] == 1
    assert float(y["a"][0]) == 2.0
    assert y["a"] is y["b"]
    z = jitted({"a": [jnp.zeros(())], "b": [jnp.ones(())]})  # 3: unshared: traces
    assert traces[0] == 2
    assert z["a"] is not z["b"]
    assert (float(z["a"][0]), float(z["b"][0])) == (1.0, 1.0)
    z = jitted({"a": [jnp.ones(())], "b": [jnp.ones(())]})  # 4: new values: no trace
    assert traces[0] == 2
    assert (float(z["a"][0]), float(z["b"][0])) == (2.0, 1.0)
    p = [0.0]
    w = jitted({"a": p, "b": p})  # 5: a static float: traces
    assert traces[0] == 3
    assert w["a"] is w["b"]
    assert w["a"][0] == 1.0
    assert type(w["a"][0]) is float  # a static output comes back as the Python object
    assert p == [1.0]  # the caller's list took the change


# --------------------------------------------------------------------------------------------
# filter_jit: sharing, cycles, mutation


def test_an_object_passed_twice_is_one_object_inside() -> None:
    seen = []

    def f(a: Any, b: Any, *, c: Any) -> Any:
        seen.append((a is b, a is c, a["k"] is b["k"]))
        return a["k"][0] + b["k"][0] + c["k"][0]

    d = {"k": [jnp.ones(2)]}
    out = oxjax.filter_jit(f)(d, d, c=d)
    np.testing.assert_allclose(out, [3.0, 3.0])
    assert seen == [(True, True, True)]


def test_an_array_passed_twice_is_one_tracer_inside() -> None:
    def f(a: Any, b: Any) -> Any:
        return {"same": a is b, "sum": a + b}

    fn, traces = counted(f)
    jitted = oxjax.filter_jit(fn)
    x, y = jnp.ones(2), jnp.zeros(2)
    assert jitted(x, x)["same"] is True
    assert jitted(y, y)["same"] is True  # the same aliasing: no new trace
    assert traces[0] == 1
    out = jitted(x, y)
    assert out["same"] is False
    np.testing.assert_allclose(out["sum"], [1.0, 1.0])
    assert traces[0] == 2
    shared_leaf = {"p": x, "q": [x, y, x]}
    inside = oxjax.filter_jit(lambda t: (t["p"] is t["q"][0] is t["q"][2], t["p"] is t["q"][1]))
    assert inside(shared_leaf) == (True, False)


def test_an_aliased_array_is_donated_once_and_kept_when_in_the_first_argument() -> None:
    f = oxjax.filter_jit(lambda a, b: (a + 1, b * 2), donate="all")
    x = jnp.ones(3)
    out = f(x, x)
    np.testing.assert_allclose(out[1], [2.0, 2.0, 2.0])
    assert x.is_deleted()
    g = oxjax.filter_jit(lambda a, b: (a + 1, b[0] * 2), donate="all-except-first")
    x, y = jnp.ones(3), jnp.ones(3)
    out = g(x, [x, y])
    np.testing.assert_allclose(out[0], [2.0, 2.0, 2.0])
    assert not x.is_deleted()
    assert not y.is_deleted()  # unused by the function: jax.jit drops it, donation included
    out = g(x, [y, x])
    np.testing.assert_allclose(out[1], [2.0, 2.0, 2.0])
    assert not x.is_deleted()
    assert y.is_deleted()


def test_sharing_inside_one_argument_and_in_the_result() -> None:
    inner = [jnp.ones(())]
    tree = {"x": inner, "y": (inner, inner)}

    def f(t: Any) -> Any:
        assert t["x"] is t["y"][0] is t["y"][1]
        return {"first": t["x"], "again": t["x"], "new": [t["x"][0] * 2]}

    out = oxjax.filter_jit(f)(tree)
    assert out["first"] is out["again"]
    assert out["first"] is not inner
    assert float(out["new"][0]) == 2.0


def test_cyclic_input_and_output() -> None:
    c: list[Any] = [jnp.ones(2), "tag"]
    c.append(c)

    def f(lst: Any) -> Any:
        assert lst[2] is lst
        lst[0] = lst[0] * 3
        return lst

    out = oxjax.filter_jit(f)(c)
    assert out[2] is out
    assert out is not c
    assert out[1] == "tag"
    np.testing.assert_allclose(out[0], [3.0, 3.0])
    # the change is written back, and the caller's list still contains itself
    np.testing.assert_allclose(c[0], [3.0, 3.0])
    assert c[2] is c


def test_cycle_through_registered_custom_nodes() -> None:
    node = Pair(jnp.ones(()), None)
    node.b = [node]

    def f(p: Any) -> Any:
        assert p.b[0] is p
        return Pair(p.a + 1, p)

    out = oxjax.filter_jit(f)(node)
    assert isinstance(out, Pair)
    assert float(out.a) == 2.0
    assert out.b.b[0] is out.b


def test_caller_containers_and_dataclasses_take_the_changes() -> None:
    layer = Linear([jnp.ones(2)], jnp.zeros(2))
    tree = {"layer": layer, "items": [1, 2]}

    def f(t: Any) -> Any:
        t["layer"].w.append(jnp.ones(1))
        t["items"].append(3)
        t["layer"].act = "changed"
        return len(t["items"])

    assert oxjax.filter_jit(f)(tree) == 3
    assert tree["layer"] is layer
    assert len(layer.w) == 2
    assert layer.w[1].shape == (1,)
    assert layer.act == "changed"
    assert tree["items"] == [1, 2, 3]


# --------------------------------------------------------------------------------------------
# filter_jit: static and traced leaves, the cache


def test_static_leaves_drive_python_control_flow() -> None:
    def f(x: Any, n: int, mode: str, scale: Any = None, op: Any = None) -> Any:
        for _ in range(n):
            x = x * 2 if mode == "double" else x + 1
        if scale is not None:
            x = x * scale
        return op(x) if op is not None else x

    fn, traces = counted(f)
    jitted = oxjax.filter_jit(fn)
    x = jnp.ones(2)
    np.testing.assert_allclose(jitted(x, 3, "double"), [8.0, 8.0])
    np.testing.assert_allclose(jitted(x, 3, "add"), [4.0, 4.0])
    np.testing.assert_allclose(jitted(x, 2, "add", scale=10), [30.0, 30.0])
    np.testing.assert_allclose(jitted(x, 1, "add", op=jnp.negative), [-2.0, -2.0])
    np.testing.assert_allclose(jitted(x + 5, 3, "double"), [48.0, 48.0])
    assert traces[0] == 4


def test_equal_static_values_of_different_types_do_not_share_a_trace() -> None:
    fn, traces = counted(lambda flag: type(flag).__name__)
    jitted = oxjax.filter_jit(fn)
    assert [jitted(1), jitted(True), jitted(1.0), jitted(1)] == ["int", "bool", "float", "int"]
    assert traces[0] == 3


def test_new_array_values_do_not_retrace_but_new_shapes_do() -> None:
    fn, traces = counted(lambda t: t["w"] @ t["x"])
    jitted = oxjax.filter_jit(fn)
    for i in range(4):
        jitted({"w": jnp.full((2, 2), i), "x": jnp.ones(2)})
    assert traces[0] == 1
    jitted({"w": jnp.ones((3, 3)), "x": jnp.ones(3)})  # jax.jit's own retrace per shape
    assert traces[0] == 2


def test_dicts_differing_in_key_order_share_a_trace() -> None:
    fn, traces = counted(lambda d: list(d))
    jitted = oxjax.filter_jit(fn)
    assert jitted({"a": jnp.ones(()), "b": 1}) == ["a", "b"]
    assert jitted({"b": 1, "a": jnp.ones(())}) == ["a", "b"]  # the tracing call's order
    assert traces[0] == 1


def test_numpy_arrays_and_scalars_are_traced() -> None:
    seen = []

    def f(a: Any, s: Any) -> Any:
        seen.append((isinstance(a, jax.core.Tracer), isinstance(s, jax.core.Tracer)))
        return a + s

    jitted = oxjax.filter_jit(f)
    np.testing.assert_allclose(jitted(np.ones(3), np.float32(2.0)), [3.0, 3.0, 3.0])
    np.testing.assert_allclose(jitted(np.zeros(3), np.float32(5.0)), [5.0, 5.0, 5.0])
    assert seen == [(True, True)]
    assert oxjax.filter_jit(lambda s: s + "!")(np.str_("a")) == "a!"  # a static NumPy str


def test_static_outputs_are_the_objects_returned() -> None:
    marker = object()

    def f(x: Any, m: Any) -> Any:
        return {"x": x + 1, "m": m, "s": "text", "fn": jnp.sin, "ty": int, "none": None}

    jitted = oxjax.filter_jit(f)
    for _ in range(2):
        out = jitted(jnp.zeros(()), marker)
        assert out["m"] is marker
        assert out["s"] == "text"
        assert out["fn"] is jnp.sin
        assert out["ty"] is int
        assert out["none"] is None
        assert float(out["x"]) == 1.0


def test_outputs_are_new_containers_every_call() -> None:
    jitted = oxjax.filter_jit(lambda x: [x])
    first, second = jitted(jnp.ones(())), jitted(jnp.ones(()))
    assert first is not second
    first.append("mutated")
    assert len(jitted(jnp.ones(()))) == 1


def test_registered_nodes_through_filter_jit_need_no_mirroring() -> None:
    class Unmirrored:
        def __init__(self, x: Any, label: str) -> None:
            self.x, self.label = x, label

    oxtree.register_pytree_node(
        Unmirrored, lambda u: ((u.x,), u.label), lambda label, c: Unmirrored(c[0], label)
    )
    fn, traces = counted(lambda u: Unmirrored(u.x * 2, u.label + "!"))
    jitted = oxjax.filter_jit(fn)
    out = jitted(Unmirrored(jnp.ones(2), "a"))
    assert isinstance(out, Unmirrored)
    assert out.label == "a!"
    np.testing.assert_allclose(out.x, [2.0, 2.0])
    jitted(Unmirrored(jnp.zeros(2), "a"))
    assert traces[0] == 1
    jitted(Unmirrored(jnp.zeros(2), "b"))  # aux data is part of the graphdef
    assert traces[0] == 2


def test_namespace_option() -> None:
    seen = []

    def f(node: Any) -> Any:
        seen.append(isinstance(node.x, jax.core.Tracer))
        return node.x

    out = oxjax.filter_jit(f, namespace="oxjax-local")(Local(jnp.ones(2)))
    np.testing.assert_allclose(out, [1.0, 1.0])
    assert seen == [True]


def test_results_equal_jax_jit() -> None:
    def mlp(params: Any, x: Any) -> Any:
        for layer in params:
            x = jnp.tanh(x @ layer["w"] + layer["b"])
        return {"out": x, "norm": jnp.sum(x**2)}

    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    params = [
        {"w": jax.random.normal(k, (4, 4)), "b": jnp.full((4,), 0.1 * i)}
        for i, k in enumerate(keys)
    ]
    x = jnp.linspace(-1.0, 1.0, 8).reshape(2, 4)
    expected = jax.jit(mlp)(params, x)
    actual = oxjax.filter_jit(mlp)(params, x)
    assert jtu.tree_structure(actual) == jtu.tree_structure(expected)
    for a, e in zip(jtu.tree_leaves(actual), jtu.tree_leaves(expected), strict=True):
        np.testing.assert_array_equal(a, e)
        assert a.dtype == e.dtype


def test_nested_inside_jax_transforms() -> None:
    inner = oxjax.filter_jit(lambda t, k: t["a"] * k)
    out = jax.jit(lambda a: inner({"a": a}, 3))(jnp.ones(2))
    np.testing.assert_allclose(out, [3.0, 3.0])
    batched = jax.vmap(lambda a: inner({"a": a}, 2))(jnp.arange(3.0))
    np.testing.assert_allclose(batched, [0.0, 2.0, 4.0])
    grad = jax.grad(lambda a: inner({"a": a}, 5))(jnp.float32(1.0))
    assert float(grad) == 5.0


def test_decorator_forms_and_methods() -> None:
    class Model:
        def __init__(self) -> None:
            self.scale = 3

        @oxjax.filter_jit
        def __call__(self, x: Any) -> Any:
            return x * self.scale

    np.testing.assert_allclose(Model()(jnp.ones(2)), [3.0, 3.0])

    @oxjax.filter_jit(donate="none")
    def add(a: Any, b: Any) -> Any:
        return a + b

    assert float(add(jnp.float32(1.0), b=jnp.float32(2.0))) == 3.0
    assert add.__name__ == "add"
    assert add.__wrapped__ is not None
    assert "filter_jit" in repr(add)
    assert isinstance(Model.__dict__["__call__"], type(add))


def test_donate_all_and_all_except_first() -> None:
    f = oxjax.filter_jit(lambda a, b: (a + 1, b * 2), donate="all")
    x, y = jnp.ones(3), jnp.ones(3)
    out = f(x, y)
    np.testing.assert_allclose(out[0], [2.0, 2.0, 2.0])
    assert x.is_deleted()
    assert y.is_deleted()
    g = oxjax.filter_jit(lambda a, b: (a["p"] + 1, b[0] * 2), donate="all-except-first")
    x, y = jnp.ones(3), jnp.ones(3)
    out = g({"p": x}, [y])
    np.testing.assert_allclose(out[1], [2.0, 2.0, 2.0])
    assert not x.is_deleted()
    assert y.is_deleted()


def test_keyword_arguments_are_not_a_positional_dict() -> None:
    # f(x, {'k': 1}) and f(x, k=1) flatten to one graph (the positional arguments, then the
    # keyword dict): they must still be told apart.
    f = oxjax.filter_jit(lambda *a, **k: (len(a), sorted(k)))
    x = jnp.ones(2)
    assert f(x, {"k": 1}) == (2, [])
    assert f(x, k=1) == (1, ["k"])
    assert f(x, {"k": 1}) == (2, [])
    assert f(x) == (1, [])  # an empty keyword dict is no keyword arguments
    assert f(k=x) == (0, ["k"])
    g = oxjax.filter_jit(lambda a, b: (a + 1, b[0] * 2), donate="all-except-first")
    y, z = jnp.ones(3), jnp.ones(3)
    out = g(y, b=[z])
    np.testing.assert_allclose(out[1], [2.0, 2.0, 2.0])
    assert not y.is_deleted()
    assert z.is_deleted()


def test_filter_jit_copies_and_pickles() -> None:
    f = oxjax.filter_jit(operator.neg, donate="all-except-first")
    f.note = "kept"  # type: ignore[attr-defined]
    x = jnp.ones(2)
    np.testing.assert_allclose(f(x), [-1.0, -1.0])
    for g in (copy.copy(f), copy.deepcopy(f), pickle.loads(pickle.dumps(f))):
        assert type(g) is type(f)
        assert g is not f
        assert repr(g) == repr(f)
        assert g.__wrapped__ is operator.neg
        assert g.note == "kept"
        np.testing.assert_allclose(g(x), [-1.0, -1.0])
        assert not x.is_deleted()  # the first argument is kept, as in `f`


def test_filter_jit_errors() -> None:
    jitted = oxjax.filter_jit(lambda *a, **k: 0)
    with pytest.raises(TypeError, match=r"static \(non-array\) leaf at args\[1\]\['s'\]"):
        jitted(jnp.ones(1), {"s": {1, 2}})
    with pytest.raises(TypeError, match=r"leaf at kwargs\['opt'\]\[0\] is an unhashable set"):
        jitted(opt=[{3}])

    class NoHash:
        __hash__ = None  # type: ignore[assignment]

    with pytest.raises(TypeError, match=r"leaf at args\[0\]\.w is an unhashable NoHash"):
        jitted(Linear(NoHash(), 1.0))
    with pytest.raises(ValueError, match=r"donate must be one of"):
        oxjax.filter_jit(lambda: 0, donate="some")  # type: ignore[call-overload]
    with pytest.raises(TypeError, match=r"filter_jit expects a callable, got int"):
        oxjax.filter_jit(3)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match=r"namespace must be a str"):
        oxjax.filter_jit(lambda: 0, namespace=3)  # type: ignore[call-overload]


def test_errors_inside_the_function_propagate() -> None:
    def f(x: Any) -> Any:
        raise KeyError("inside")

    with pytest.raises(KeyError, match="inside"):
        oxjax.filter_jit(f)(jnp.ones(1))


@settings(HYPOTHESIS_SETTINGS, max_examples=25)
@given(tree=trees(max_leaves=10))
def test_identity_round_trips_any_tree(tree: Any) -> None:
    out = oxjax.filter_jit(lambda t: t)(tree)
    assert_same_tree(out, tree)


@settings(HYPOTHESIS_SETTINGS, max_examples=20)
@given(tree=trees(max_leaves=10), data=st.data())
def test_array_leaves_are_traced_in_any_tree(tree: Any, data: Any) -> None:
    leaves, spec = oxtree.tree_flatten(tree)
    flags = data.draw(st.lists(st.booleans(), min_size=len(leaves), max_size=len(leaves)))
    mixed = [
        jnp.float32(i) if f else leaf for i, (leaf, f) in enumerate(zip(leaves, flags, strict=True))
    ]
    tree = oxtree.tree_unflatten(spec, mixed)
    out = oxjax.filter_jit(
        lambda t: oxtree.tree_map(lambda x: x * 2 if oxjax.is_array(x) else x, t)
    )(tree)
    out_leaves, out_spec = oxtree.tree_flatten(out)
    assert out_spec == spec
    for got, given_leaf in zip(out_leaves, mixed, strict=True):
        if oxjax.is_array(given_leaf):
            assert float(got) == 2 * float(given_leaf)
        else:
            assert got is given_leaf


# --------------------------------------------------------------------------------------------
# filter_grad, filter_value_and_grad


def test_filter_grad_differentiates_the_inexact_leaves_of_the_first_argument() -> None:
    def loss(model: Any, x: Any) -> Any:
        layer = model["layer"]
        y = layer.w * x + layer.b + model["count"] * 0
        return jnp.sum(y**2) * model["scale"]

    model = {
        "layer": Linear(jnp.array([1.0, 2.0]), jnp.array([0.5, 0.5])),
        "count": jnp.arange(2),
        "scale": 2.0,
        "name": "m",
    }
    x = jnp.array([1.0, -1.0])
    grads = oxjax.filter_grad(loss)(model, x)
    assert grads["count"] is None
    assert grads["scale"] is None
    assert grads["name"] is None
    assert isinstance(grads["layer"], Linear)
    expected = jax.grad(lambda w, b: jnp.sum((w * x + b) ** 2) * 2.0, argnums=(0, 1))(
        model["layer"].w, model["layer"].b
    )
    np.testing.assert_allclose(grads["layer"].w, expected[0])
    np.testing.assert_allclose(grads["layer"].b, expected[1])


def test_filter_value_and_grad_and_has_aux() -> None:
    def loss(p: Any, k: Any) -> Any:
        value = jnp.sum(p["w"] * k)
        return value, {"k": k}

    p = {"w": jnp.ones(3), "n": np.float64(2.0)}
    (value, aux), grads = oxjax.filter_value_and_grad(loss, has_aux=True)(p, jnp.arange(3.0))
    assert float(value) == 3.0
    np.testing.assert_allclose(aux["k"], [0.0, 1.0, 2.0])
    np.testing.assert_allclose(grads["w"], [0.0, 1.0, 2.0])
    assert float(grads["n"]) == 0.0  # a NumPy float scalar is an inexact array
    g, aux2 = oxjax.filter_grad(loss, has_aux=True)(p, jnp.arange(3.0))
    np.testing.assert_allclose(g["w"], [0.0, 1.0, 2.0])
    np.testing.assert_allclose(aux2["k"], aux["k"])


def test_filter_grad_only_the_first_argument() -> None:
    grads = oxjax.filter_grad(lambda a, b: jnp.sum(a * b))(jnp.ones(2), jnp.full(2, 3.0))
    np.testing.assert_allclose(grads, [3.0, 3.0])


def test_filter_grad_accumulates_over_shared_parameters() -> None:
    tied = [jnp.float32(2.0)]
    model = {"enc": tied, "dec": tied}
    grads = oxjax.filter_grad(lambda m: m["enc"][0] * m["dec"][0])(model)
    assert grads["enc"] is grads["dec"]
    assert float(grads["enc"][0]) == 4.0  # d(w*w)/dw


def test_filter_grad_works_on_a_copy_and_writes_changes_back() -> None:
    p = {"w": jnp.ones(())}
    w = p["w"]

    def loss(q: Any) -> Any:
        assert q is not p
        q["w"] = q["w"] * 2
        return q["w"]

    assert float(oxjax.filter_grad(loss)(p)["w"]) == 2.0
    # the change is written back (as Flax NNX does), as a value, not a tracer
    assert float(p["w"]) == 2.0
    assert p["w"] is not w
    assert not isinstance(p["w"], jax.core.Tracer)


def test_filter_grad_without_inexact_leaves() -> None:
    assert oxjax.filter_grad(lambda t: 0.0)({"i": jnp.arange(2), "s": "x"}) == {
        "i": None,
        "s": None,
    }


def test_filter_grad_composes_with_filter_jit() -> None:
    fn, traces = counted(oxjax.filter_grad(lambda layer, x: jnp.sum(layer.w * x)))
    step = oxjax.filter_jit(fn)
    for i in range(3):
        g = step(Linear(jnp.ones(2), "bias", "relu"), jnp.full(2, float(i)))
        np.testing.assert_allclose(g.w, [float(i)] * 2)
        assert g.b is None
    assert traces[0] == 1


def test_filter_grad_decorator_forms_and_errors() -> None:
    @oxjax.filter_grad(has_aux=False)
    def loss(x: Any) -> Any:
        return x**2

    assert float(loss(jnp.float32(3.0))) == 6.0
    assert loss.__name__ == "loss"
    with pytest.raises(TypeError, match=r"filter_grad expects a callable, got int"):
        oxjax.filter_grad(1)
    with pytest.raises(TypeError, match=r"filter_value_and_grad expects a callable, got str"):
        oxjax.filter_value_and_grad("f")


# --------------------------------------------------------------------------------------------
# partition, combine, filters


def test_is_array_and_is_inexact_array() -> None:
    cases = [
        (jnp.ones(2), True, True),
        (jnp.arange(2), True, False),
        (np.ones(2), True, True),
        (np.arange(2), True, False),
        (np.float32(1), True, True),
        (np.complex64(1j), True, True),
        (1.0, False, False),
        ("a", False, False),
        (None, False, False),
        (np.str_("a"), False, False),
        (np.bytes_(b"a"), False, False),
        (np.bool_(True), True, False),
    ]
    for value, array, inexact in cases:
        assert oxjax.is_array(value) is array, value
        assert oxjax.is_inexact_array(value) is inexact, value


def test_partition_and_combine_round_trip() -> None:
    model = {"layer": Linear(jnp.ones(2), jnp.arange(2)), "act": "relu", "n": 3, "none": None}
    arrays, rest = oxjax.partition(model, oxjax.is_array)
    assert arrays["act"] is None
    assert arrays["n"] is None
    assert rest["layer"].w is None
    assert rest["act"] == "relu"
    assert arrays["layer"].w is model["layer"].w
    back = oxjax.combine(arrays, rest)
    assert back["layer"].w is model["layer"].w
    assert back["layer"].b is model["layer"].b
    assert back["act"] == "relu"
    assert back["n"] == 3
    assert back["none"] is None
    floats, others = oxjax.partition(model, oxjax.is_inexact_array)
    assert floats["layer"].b is None
    assert others["layer"].b is model["layer"].b


def test_partition_keeps_sharing_and_cycles() -> None:
    shared = [jnp.ones(()), "s"]
    tree: list[Any] = [shared, shared]
    tree.append(tree)
    arrays, rest = oxjax.partition(tree, oxjax.is_array)
    assert arrays[0] is arrays[1]
    assert arrays[2] is arrays
    assert arrays[0][1] is None
    assert rest[0][0] is None
    back = oxjax.combine(arrays, rest)
    assert back[0] is back[1]
    assert back[2] is back
    assert back[0][1] == "s"


def test_partition_with_bool_and_prefix_specs() -> None:
    tree = {"a": [1, 2], "b": (3.0, "x")}
    everything, nothing = oxjax.partition(tree, True)
    assert everything == tree
    assert nothing == {"a": [None, None], "b": (None, None)}
    chosen, rest = oxjax.partition(tree, {"a": True, "b": lambda x: isinstance(x, float)})
    assert chosen == {"a": [1, 2], "b": (3.0, None)}
    assert rest == {"a": [None, None], "b": (None, "x")}
    marked, _ = oxjax.partition(tree, oxjax.is_array, replace="-")
    assert marked == {"a": ["-", "-"], "b": ("-", "-")}


def test_combine_takes_the_first_non_none() -> None:
    assert oxjax.combine([None, 2, None], [1, 5, None], [9, 9, 3]) == [1, 2, 3]
    assert oxjax.combine({"a": None}) == {"a": None}


def test_combine_trees_that_share_differently() -> None:
    pair = (None, None)
    holes = {"a": pair, "b": pair}  # one tuple object twice
    merged = oxjax.combine(holes, {"a": (1, 2), "b": (3, 4)})
    assert merged == {"a": (1, 2), "b": (3, 4)}
    filled = oxjax.combine(
        {"a": [1, None], "b": [None, 4]}, jtu.tree_map(lambda x: x, {"a": [0, 2], "b": [3, 0]})
    )
    assert filled == {"a": [1, 2], "b": [3, 4]}


def test_partition_combine_errors() -> None:
    with pytest.raises(TypeError, match=r"a filter must return a bool, got str"):
        oxjax.partition([1], lambda x: "yes")
    with pytest.raises(
        TypeError, match=r"a filter spec holds bools and functions of a leaf, got int"
    ):
        oxjax.partition([1, 2], [True, 3])
    with pytest.raises(ValueError, match=r"combine: tree 1 has another structure than tree 0"):
        oxjax.combine([1, None], [1, 2, 3])
    loop: list[Any] = [None]
    loop.append(loop)
    with pytest.raises(RecursionError, match=r"cycle detected"):
        oxjax.combine(loop, [1, [2, None]])
    with pytest.raises(TypeError, match=r"combine expects at least one tree"):
        oxjax.combine()


def test_partition_combine_over_filter_jit() -> None:
    model = {"w": jnp.ones(2), "act": "tanh", "depth": 2}
    params, static = oxjax.partition(model, oxjax.is_array)

    @oxjax.filter_jit
    def apply(params: Any, static: Any, x: Any) -> Any:
        m = oxjax.combine(params, static)
        for _ in range(m["depth"]):
            x = jnp.tanh(x * m["w"]) if m["act"] == "tanh" else x * m["w"]
        return x

    np.testing.assert_allclose(apply(params, static, jnp.ones(2)), np.tanh(np.tanh([1.0, 1.0])))


# --------------------------------------------------------------------------------------------
# The documentation's examples


def test_docs_examples_run() -> None:
    path = Path(__file__).resolve().parents[2] / "docs" / "jax.md"
    result = doctest.testfile(
        str(path), module_relative=False, optionflags=doctest.ELLIPSIS, verbose=False
    )
    assert result.attempted > 50
    assert result.failed == 0


def test_register_of_a_module_class_is_harmless() -> None:
    import jax.numpy as jnp

    class Scale(oxtree.Module):
        def __init__(self) -> None:
            self.register_parameter("w", jnp.ones(2))

    assert oxjax.register(Scale) is Scale
    assert oxjax.register(Scale) is Scale
    leaves = jax.tree_util.tree_leaves(Scale())
    assert len(leaves) == 1
