"""Types registered through `oxtree.tree_util` are pytrees to JAX's transforms, with no mirroring.

Each registration function of the JAX face registers the type with JAX too, by JAX's function
of the same name with the user's functions: `jax.jit`, `jax.vmap`, `jax.grad` and
`jax.tree_util` then see it exactly as they see a fresh twin class registered with
`jax.tree_util` directly (leaves, treedef, key paths). Registrations made before `import jax`
wait for it (checked in fresh interpreters: the finder that waits is in `sys.meta_path` only
while something waits); a type JAX already has keeps JAX's rule in JAX; one JAX refuses is
registered nowhere; `import oxtree.tree_util` imports no JAX.
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
from subprocess_runs import op_result, run_script

# The classes each registration function registers, as source: the fresh interpreters below
# run it before JAX is imported. `make(tu, kind, meta)` defines a new class (of metaclass
# `meta`) and registers it by `kind` through `tu` (oxtree.tree_util or jax.tree_util); it
# returns `build(w, b)`, which makes a tree of that class whose leaves are `w` and `b`. Twins
# made by two calls have the same name, so their treedefs print alike. Keys are oxtree's
# GetAttrKey in both: the same user functions go to JAX either way.
KINDS_SOURCE = r"""
import dataclasses

import oxtree.tree_util

KINDS = [
    "register_pytree_node",
    "register_pytree_node+keys",
    "register_pytree_node_class",
    "register_pytree_with_keys",
    "register_pytree_with_keys_class",
    "register_dataclass",
    "register_dataclass+fields",
    "register_static",
    "default_registry.register_node",
    "default_registry.register_dataclass_node",
]
Key = oxtree.tree_util.GetAttrKey


def _plain(meta):
    class Node(metaclass=meta):
        def __init__(self, w, b, tag="t"):
            self.w, self.b, self.tag = w, b, tag

        def tree_flatten(self):
            return (self.w, self.b), self.tag

        def tree_flatten_with_keys(self):
            return ((Key("w"), self.w), (Key("b"), self.b)), self.tag

        @classmethod
        def tree_unflatten(cls, tag, children):
            return cls(*children, tag)

    return Node


def _dataclass(meta, drop):
    @dataclasses.dataclass
    class Data(metaclass=meta):
        w: object
        b: object
        tag: str = dataclasses.field(default="t", metadata={"static": True})

    if not drop:
        return Data

    @dataclasses.dataclass
    class Data(metaclass=meta):  # a field left out of __init__, dropped
        w: object
        b: object
        tag: str = dataclasses.field(default="t", metadata={"static": True})
        cache: object = dataclasses.field(default=None, init=False)

    return Data


def make(tu, kind, meta=type):
    if kind == "register_static":
        class Tag(metaclass=meta):
            def __init__(self, name):
                self.name = name

            def __eq__(self, other):
                return type(other) is Tag and other.name == self.name

            def __hash__(self):
                return hash(self.name)

            def __repr__(self):
                return f"Tag({self.name!r})"

        tu.register_static(Tag)
        return lambda w, b: (w, Tag("t"), b)
    if kind.startswith(("register_dataclass", "default_registry.register_dataclass")):
        cls = _dataclass(meta, drop=kind == "register_dataclass+fields")
        if kind == "register_dataclass":
            tu.register_dataclass(cls)
        elif kind == "register_dataclass+fields":
            tu.register_dataclass(cls, ["w", "b"], ["tag"], drop_fields=["cache"])
        else:
            tu.default_registry.register_dataclass_node(cls, ["w", "b"], ["tag"])
        return cls
    cls = _plain(meta)
    flatten, unflatten = cls.tree_flatten, cls.tree_unflatten
    with_keys = cls.tree_flatten_with_keys
    if kind == "register_pytree_node":
        tu.register_pytree_node(cls, flatten, unflatten)
    elif kind == "register_pytree_node+keys":
        tu.register_pytree_node(cls, flatten, unflatten, with_keys)
    elif kind == "register_pytree_node_class":
        tu.register_pytree_node_class(cls)
    elif kind == "register_pytree_with_keys":
        tu.register_pytree_with_keys(cls, with_keys, unflatten)
    elif kind == "register_pytree_with_keys_class":
        tu.register_pytree_with_keys_class(cls)
    else:
        tu.default_registry.register_node(cls, flatten, unflatten)
    return cls
"""

_kinds: dict[str, Any] = {"__name__": __name__}
exec(KINDS_SOURCE, _kinds)
KINDS: list[str] = _kinds["KINDS"]
make = _kinds["make"]


def twins(kind: str) -> tuple[Any, Any]:
    """Two fresh classes registered by `kind`: through oxtree.tree_util, through JAX."""
    return make(otu, kind), make(jtu, kind)


def paths(tree: Any) -> list[Any]:
    return [path for path, _ in jtu.tree_flatten_with_path(tree)[0]]


def loss(tree: Any) -> Any:
    return sum(jnp.sum(leaf**2) for leaf in jtu.tree_leaves(tree))


# ------------------------------------------------------------------------------------------
# Each registration function, with JAX loaded


@pytest.mark.parametrize("kind", KINDS)
def test_jax_tree_util_sees_it_as_the_same_registration_made_with_jax(kind: str) -> None:
    ours, theirs = twins(kind)
    mine, twin = ours(1.0, [2.0, 3.0]), theirs(1.0, [2.0, 3.0])
    assert jtu.tree_leaves(mine) == jtu.tree_leaves(twin) == [1.0, 2.0, 3.0]
    assert repr(jtu.tree_structure(mine)) == repr(jtu.tree_structure(twin))
    assert "CustomNode(" in repr(jtu.tree_structure(mine))
    assert paths(mine) == paths(twin)
    assert jtu.tree_leaves(jtu.tree_map(lambda x: x * 10, mine)) == [10.0, 20.0, 30.0]
    # ... and it is a node to oxtree, with the same leaves.
    assert otu.tree_leaves(mine) == [1.0, 2.0, 3.0]


@pytest.mark.parametrize("kind", KINDS)
def test_jit_vmap_and_grad_take_it(kind: str) -> None:
    build = make(otu, kind)
    tree = build(jnp.array([1.0, 2.0]), jnp.array([0.5, -1.0]))
    out = jax.jit(lambda t: jtu.tree_map(lambda x: x * 2, t))(tree)
    assert type(out) is type(tree)
    assert [np.asarray(x).tolist() for x in jtu.tree_leaves(out)] == [[2.0, 4.0], [1.0, -2.0]]
    assert jtu.tree_structure(out) == jtu.tree_structure(tree)
    assert jax.jit(loss)(tree) == pytest.approx(6.25)
    batch = build(jnp.ones((3, 2)), jnp.arange(6.0).reshape(3, 2))
    assert jax.vmap(loss)(batch).tolist() == [3.0, 15.0, 43.0]
    grads = jax.grad(loss)(tree)
    assert type(grads) is type(tree)
    assert [np.asarray(g).tolist() for g in jtu.tree_leaves(grads)] == [[2.0, 4.0], [1.0, -2.0]]


def test_keys_given_by_the_user_reach_jax() -> None:
    ours, theirs = twins("register_pytree_with_keys")
    keys = [(otu.GetAttrKey("w"),), (otu.GetAttrKey("b"),)]
    assert paths(ours(1, 2)) == paths(theirs(1, 2)) == keys
    assert [jtu.keystr(p) for p in paths([ours(1, 2)])] == ["[0].w", "[0].b"]


def test_static_aux_data_stays_in_jaxs_treedef() -> None:
    # JAX holds the user's aux data, not an oxtree treespec of it (as mirroring would).
    ours, _ = twins("register_pytree_node")
    assert repr(jtu.tree_structure(ours(1, 2))) == "PyTreeDef(CustomNode(Node[t], [*, *]))"
    traces = []

    @jax.jit
    def tagged(t: Any) -> Any:
        traces.append(t.tag)
        return t.w + t.b

    assert tagged(ours(1.0, 2.0, "a")) == 3.0
    assert tagged(ours(5.0, 2.0, "a")) == 7.0
    assert tagged(ours(1.0, 2.0, "b")) == 3.0
    assert traces == ["a", "b"]


def test_a_static_type_is_static_under_jit() -> None:
    build = make(otu, "register_static")
    tag = type(build(0, 0)[1])
    out = jax.jit(lambda t: t)(build(jnp.ones(1), jnp.zeros(1)))
    assert out[1] == tag("t")
    assert jtu.tree_leaves(tag("t")) == []
    assert jtu.tree_structure(tag("t")) != jtu.tree_structure(tag("u"))


# ------------------------------------------------------------------------------------------
# oxtree.jax.register and mirrored_types on such types


@pytest.mark.parametrize("kind", ["register_pytree_node", "register_dataclass", "register_static"])
def test_mirroring_it_again_is_a_no_op(kind: str) -> None:
    build = make(otu, kind)
    tree = build(1.0, 2.0)
    cls = type(tree[1]) if kind == "register_static" else type(tree)
    before = repr(jtu.tree_structure(tree))
    assert oxjax.register(cls) is cls
    assert oxjax.register(cls) is cls
    assert repr(jtu.tree_structure(tree)) == before  # JAX keeps the user's functions
    assert cls not in oxjax.mirrored_types()


def test_mirroring_it_from_a_namespace_with_another_rule_raises() -> None:
    build = make(otu, "register_pytree_node")
    cls = type(build(1, 2))
    oxtree.register_pytree_node(
        cls, lambda n: ((), n.tag), lambda tag, _: cls(0, 0, tag), namespace="reach-jax"
    )
    with pytest.raises(ValueError, match=r"through oxtree.tree_util .* namespace 'reach-jax'"):
        oxjax.register(cls, namespace="reach-jax")
    assert jtu.tree_leaves(build(1, 2)) == [1, 2]


# ------------------------------------------------------------------------------------------
# A type JAX already has, a registration JAX refuses


def test_a_type_jax_already_has_keeps_each_registrys_rule() -> None:
    class Known:
        def __init__(self, a: Any, b: Any) -> None:
            self.a, self.b = a, b

    jtu.register_pytree_node(Known, lambda k: ((k.a,), k.b), lambda b, c: Known(c[0], b))
    otu.register_pytree_node(Known, lambda k: ((k.a, k.b), None), lambda _, c: Known(*c))
    assert otu.tree_leaves(Known(1, 2)) == [1, 2]  # oxtree's rule in oxtree
    assert jtu.tree_leaves(Known(1, 2)) == [1]  # JAX's in JAX
    assert jax.jit(lambda k: k.a + 1)(Known(1, "static")) == 2
    assert Known in oxtree.registered_types()
    # oxtree did not register it with JAX, so there is nothing to leave alone: as before.
    with pytest.raises(ValueError, match=r"Known is already registered as a pytree node in JAX"):
        oxjax.register(Known)


class Unhashable(type):
    """A metaclass whose classes do not hash while `refuse` is set: JAX's registry refuses
    them then, oxtree's does not. (Hashable again afterwards, for whatever hashes JAX's or
    oxtree's registrations later in the session.)"""

    refuse = False

    def __hash__(cls) -> int:
        if Unhashable.refuse:
            raise TypeError(f"unhashable class {cls.__name__}")
        return type.__hash__(cls)

    def __eq__(cls, other: object) -> bool:
        return cls is other


@pytest.fixture
def refusing() -> Any:
    Unhashable.refuse = True
    yield
    Unhashable.refuse = False


@pytest.mark.usefixtures("refusing")
@pytest.mark.parametrize("kind", KINDS)
def test_a_registration_jax_refuses_raises_and_registers_nothing(kind: str) -> None:
    before = oxtree.registered_types()
    with pytest.raises(TypeError) as info:
        make(otu, kind, Unhashable)
    message = str(info.value)
    # JAX's message first, then which type and what became of it.
    assert message.startswith("unhashable class ")
    assert "(JAX refused to register " in message
    assert message.endswith("; its registration with oxtree was undone)")
    assert type(info.value.__cause__) is TypeError
    # Nothing was added (by identity: the refused class is unhashable). Types registered by
    # earlier tests may have been collected meanwhile, so the lists need not be equal.
    added = [t for t in oxtree.registered_types() if not any(t is b for b in before)]
    assert added == []


@pytest.mark.usefixtures("refusing")
def test_a_refused_type_stays_a_leaf_to_oxtree() -> None:
    class Cls(metaclass=Unhashable):
        def __init__(self, x: Any) -> None:
            self.x = x

    with pytest.raises(TypeError, match=r"JAX refused to register .*Cls"):
        otu.register_pytree_node(Cls, lambda c: ((c.x,), None), lambda _, c: Cls(*c))
    obj = Cls(1)
    assert oxtree.tree_leaves(obj) == [obj]
    # JAX's native registry kept its half of the refused registration (JAX's own state): the
    # JAX face reads JAX's registry, so it sees what JAX sees.
    assert otu.tree_leaves(obj) == jtu.tree_leaves(obj)
    # Nothing of it is left in oxtree: the optree face (which never reaches JAX) takes it anew.
    oxtree.register_pytree_node(Cls, lambda c: ((c.x, c.x), None), lambda _, c: Cls(c[0]))
    try:
        assert otu.tree_leaves(obj) == [1, 1]
    finally:
        oxtree.unregister_pytree_node(Cls)


# ------------------------------------------------------------------------------------------
# Before `import jax`: fresh interpreters (each check a `run(name, fn)` of subprocess_runs)

# What the scripts share: the classes, and `hooks()`, the number of waiting finders.
FRESH = (
    KINDS_SOURCE
    + r"""
import oxtree
import oxtree.tree_util as otu
from oxtree import Module, Parameter
from oxtree._jax_hook import PENDING, _JaxImportHook


def hooks():
    return sum(isinstance(f, _JaxImportHook) for f in sys.meta_path)


class Net(Module):
    w: Parameter

    def __init__(self, w):
        self.w = w


builds = {kind: make(otu, kind) for kind in KINDS}
"""
)

BEFORE_JAX = (
    FRESH
    + r"""
import warnings


class Unhashable(type):
    def __hash__(cls):
        raise TypeError("unhashable class")


class Refused(metaclass=Unhashable):
    pass


otu.register_pytree_node(Refused, lambda r: ((), None), lambda _, c: Refused())
waiting = ("jax" in sys.modules, hooks(), len(PENDING))
run("waiting", lambda: waiting == (False, 1, len(KINDS) + 3) or waiting)

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import jax
import jax.numpy as jnp
import jax.tree_util as jtu

imported = (hooks(), len(PENDING), "jax" in sys.modules)
run("imported", lambda: imported == (0, 0, True) or imported)
warned = [(w.category.__name__, str(w.message)) for w in caught if "oxtree" in str(w.message)]
run(
    "refused",
    lambda: (
        len(warned) == 1
        and warned[0][0] == "RuntimeWarning"
        and "Refused with JAX when jax was imported (TypeError: unhashable class)" in warned[0][1]
        and Refused in oxtree.registered_types()
    )
    or warned,
)


def loss(tree):
    return sum(jnp.sum(leaf**2) for leaf in jtu.tree_leaves(tree))


def works(kind):
    build = builds[kind]
    mine, twin = build(1.0, [2.0, 3.0]), make(jtu, kind)(1.0, [2.0, 3.0])
    same = (
        jtu.tree_leaves(mine) == jtu.tree_leaves(twin) == [1.0, 2.0, 3.0]
        and repr(jtu.tree_structure(mine)) == repr(jtu.tree_structure(twin))
        and jtu.tree_flatten_with_path(mine)[0] == jtu.tree_flatten_with_path(twin)[0]
    )
    tree = build(jnp.array([1.0, 2.0]), jnp.array([0.5, -1.0]))
    batch = build(jnp.ones((3, 2)), jnp.arange(6.0).reshape(3, 2))
    jit = float(jax.jit(loss)(tree)) == 6.25
    vmap = jax.vmap(loss)(batch).tolist() == [3.0, 15.0, 43.0]
    grads = jax.grad(loss)(tree)
    grad = type(grads) is type(tree) and float(loss(grads)) == 25.0
    return [same, jit, vmap, grad] == [True] * 4 or [same, jit, vmap, grad]


for kind in KINDS:
    run(kind, lambda: works(kind))
run("Module", lambda: jtu.tree_leaves(jax.jit(lambda n: n)(Net(jnp.ones(2))))[0].tolist() == [1.0, 1.0])


def not_mirrored():
    # oxtree.jax.register leaves them as they are; register_namespace skips them.
    import oxtree.jax as oxjax

    classes = [type(builds[k](1, 2)) for k in KINDS if k != "register_static"]
    classes += [type(builds["register_static"](1, 2)[1]), Net]
    oxtree.unregister_pytree_node(Refused)  # JAX cannot take it (above), mirrored or not
    mirrored = oxjax.register_namespace()
    return (
        all(oxjax.register(c) is c for c in classes)
        and not set(classes) & set(mirrored)
        and not set(classes) & set(oxjax.mirrored_types())
        and repr(jtu.tree_structure(builds["register_pytree_node"](1, 2))) == "PyTreeDef(CustomNode(Node[t], [*, *]))"
    ) or mirrored


run("not_mirrored", not_mirrored)


def later():
    build = make(otu, "register_pytree_node")  # JAX is loaded: registered at once
    return (hooks(), len(PENDING), jtu.tree_leaves(build(1, 2))) == (0, 0, [1, 2])


run("later", later)
emit("finished")
"""
)

# Threads register while the main thread imports jax: each registration is made once, at
# once or when the import finishes, and nothing is left waiting.
THREADED = (
    FRESH
    + r"""
import threading

made, go = [], threading.Barrier(5)


def work():
    go.wait()
    for _ in range(25):
        made.append(make(otu, "register_pytree_node"))


threads = [threading.Thread(target=work) for _ in range(4)]
for t in threads:
    t.start()
go.wait()
import jax
import jax.tree_util as jtu

for t in threads:
    t.join()
run("all", lambda: len(made) == 100 and all(jtu.tree_leaves(b(1, 2)) == [1, 2] for b in made))
run("none_waits", lambda: (hooks(), len(PENDING)) == (0, 0))
emit("finished")
"""
)

# Without JAX (site-packages off sys.path once oxtree is loaded): oxtree works as ever, the
# registrations wait, and `import jax` fails as it would without oxtree.
WITHOUT_JAX = (
    r"""
import sys
import oxtree.tree_util

sys.path[:] = [p for p in sys.path if "site-packages" not in p]
"""
    + FRESH
    + r"""
run("oxtree", lambda: all(otu.tree_leaves(b(1, 2)) == [1, 2] for b in builds.values()))
run("module", lambda: otu.tree_leaves(Net(1.0)) == [1.0])


def no_jax():
    try:
        import jax  # noqa: F401
    except ModuleNotFoundError as e:
        return str(e) == "No module named 'jax'"
    return "imported"


run("no_jax", no_jax)
state = (hooks(), len(PENDING), "jax" in sys.modules)
run("waiting", lambda: state == (1, len(KINDS) + 2, False) or state)
emit("finished")
"""
)


@pytest.fixture(scope="module")
def before_jax() -> dict[str, Any]:
    return run_script(BEFORE_JAX)


def test_registrations_wait_for_jax_without_importing_it(before_jax: dict[str, Any]) -> None:
    # Every kind, a Module class and a class JAX will refuse wait; jax is not imported by
    # `import oxtree.tree_util` nor by registering; one finder waits.
    assert op_result(before_jax, "waiting")[:2] == ["ok", True]


def test_import_jax_makes_them_and_removes_the_finder(before_jax: dict[str, Any]) -> None:
    assert op_result(before_jax, "imported")[:2] == ["ok", True]
    assert op_result(before_jax, "later")[:2] == ["ok", True]


def test_oxtree_jax_does_not_mirror_them(before_jax: dict[str, Any]) -> None:
    assert op_result(before_jax, "not_mirrored")[:2] == ["ok", True]


@pytest.mark.parametrize("kind", [*KINDS, "Module"])
def test_a_type_registered_before_import_jax_works_after_it(
    before_jax: dict[str, Any], kind: str
) -> None:
    assert op_result(before_jax, kind)[:2] == ["ok", True]


def test_a_registration_jax_refuses_at_import_warns_and_imports(
    before_jax: dict[str, Any],
) -> None:
    assert op_result(before_jax, "refused")[:2] == ["ok", True]
    assert before_jax["finished"], before_jax["stderr"]


@pytest.mark.parametrize("op", ["oxtree", "module", "no_jax", "waiting"])
def test_without_jax_oxtree_behaves_as_ever(op: str) -> None:
    run = run_script(WITHOUT_JAX)
    assert op_result(run, op)[:2] == ["ok", True]
    assert run["finished"], run["stderr"]


@pytest.mark.parametrize("op", ["all", "none_waits"])
def test_threads_registering_while_jax_is_imported(op: str) -> None:
    run = run_script(THREADED)
    assert op_result(run, op)[:2] == ["ok", True]
