"""How oxtree finds the types JAX knows: live, oxtree's registrations first, per face.

- Live: a class registered with JAX after oxtree has flattened it (as a leaf) is a node at the
  next call; a class redefined under the same name and registered differently follows its new
  rule (no stale cache, even when the old class is gone and the new one may reuse its memory);
  JAX imported after oxtree (a fresh interpreter) is seen once it is there.
- A type registered in both registries follows oxtree's rule in oxtree (JAX's in JAX).
- The main `oxtree` face (optree's) keeps JAX's types as leaves, as optree does, unless
  `oxtree.use_jax_registry(True)` switches JAX's registry on.
- Without JAX (a fresh interpreter in which `import jax` fails), the JAX face works on
  builtin trees.
"""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import jax.tree_util as jtu
import oxtree
import oxtree.jax as oxjax
import oxtree.tree_util as otu
import pytest
from ecosystem_oracle import (
    ARRAYS,
    assert_identical,
    check_flatten,
    check_paths,
    check_tree,
    import_or_skip,
)
from subprocess_runs import op_result, run_script

A, B, C, D = ARRAYS


@contextmanager
def jax_registry(on: bool) -> Iterator[bool]:
    """`oxtree.use_jax_registry(on)` for the block, the previous setting restored after."""
    previous = oxtree.use_jax_registry(on)
    try:
        yield previous
    finally:
        oxtree.use_jax_registry(previous)


# --------------------------------------------------------------------------------------------------
# Live registration.


def test_a_class_registered_with_jax_after_a_flatten_is_a_node_at_once() -> None:
    class Late:
        def __init__(self, a: Any, b: Any) -> None:
            self.a, self.b = a, b

    late = Late(A, [B])
    assert_identical(otu.tree_leaves([late]), [late])  # unregistered: a leaf, as in JAX
    check_flatten([late])
    jtu.register_pytree_node(Late, lambda x: ((x.a, x.b), None), lambda _, c: Late(*c))
    assert_identical(otu.tree_leaves([late]), [A, B])
    check_tree({"late": late, "other": Late(None, C)})


def test_register_dataclass_inside_a_test_is_a_node_at_once() -> None:
    @jtu.register_dataclass
    @dataclasses.dataclass
    class Point:
        x: Any
        y: Any
        unit: str = dataclasses.field(default="m", metadata={"static": True})

    assert_identical(otu.tree_leaves(Point(A, B)), [A, B])
    check_tree([Point(A, {"k": B}), Point(None, C, unit="s")])


def test_register_static_and_keyed_classes_inside_a_test_are_nodes_at_once() -> None:
    @jtu.register_static
    class Tag:
        def __init__(self, name: str) -> None:
            self.name = name

        def __eq__(self, other: object) -> bool:
            return type(other) is Tag and other.name == self.name

        def __hash__(self) -> int:
            return hash(self.name)

    @jtu.register_pytree_with_keys_class
    class Named:
        def __init__(self, value: Any) -> None:
            self.value = value

        def tree_flatten_with_keys(self) -> Any:
            return ((jtu.GetAttrKey("value"), self.value),), None

        @classmethod
        def tree_unflatten(cls, _: None, children: Any) -> Any:
            return cls(*children)

    assert otu.tree_leaves([Tag("t"), A]) == [A]
    check_tree([Tag("t"), Named({"a": A}), Named(Tag("u"))])


# Each way `make_thing` defines a class named Thing: unregistered, or registered with JAX by
# one of several rules.
THING_RULES = ["leaf", "both_children", "second_only", "keyed", "static"]


def make_thing(rule: str) -> Callable[[Any, Any], Any]:
    class Thing:
        def __init__(self, a: Any, b: Any) -> None:
            self.a, self.b = a, b

        def __eq__(self, other: object) -> bool:
            return type(other) is type(self)

        def __hash__(self) -> int:
            return 0

    if rule == "both_children":
        jtu.register_pytree_node(Thing, lambda t: ((t.a, t.b), "ab"), lambda _, c: Thing(*c))
    elif rule == "second_only":
        jtu.register_pytree_node(Thing, lambda t: ((t.b,), t.a), lambda a, c: Thing(a, *c))
    elif rule == "keyed":
        jtu.register_pytree_with_keys(
            Thing,
            lambda t: (((jtu.DictKey("b"), t.b), (jtu.DictKey("a"), t.a)), None),
            lambda _, c: Thing(c[1], c[0]),
        )
    elif rule == "static":
        jtu.register_static(Thing)
    return Thing


def test_a_class_redefined_under_the_same_name_follows_its_own_rule() -> None:
    """Classes named Thing, made and dropped in turn, each registered by its own rule (or not
    at all): every one is flattened as JAX flattens it. A dropped class's memory may be reused
    by the next one, so a cache keyed by the type's address would go stale."""
    for round_ in range(4):
        for rule in THING_RULES:
            thing = make_thing(rule)
            tree = [thing(A, {"k": B}), thing(round_, None)]
            check_flatten(tree)
            check_paths(tree)
            del thing, tree
            gc.collect()


# --------------------------------------------------------------------------------------------------
# A type registered in both registries.


class BothJaxFirst:
    def __init__(self, a: Any, b: Any) -> None:
        self.a, self.b = a, b


class BothOxtreeFirst:
    def __init__(self, a: Any, b: Any) -> None:
        self.a, self.b = a, b


@pytest.fixture(scope="module")
def both_registered() -> Iterator[list[type]]:
    """BothJaxFirst: JAX's rule, then oxtree's (through oxtree.tree_util, which leaves JAX's
    rule to JAX); BothOxtreeFirst: oxtree's (the main face's function), then JAX's. oxtree's
    rule keeps `a` only; JAX's keeps both."""
    jtu.register_pytree_node(
        BothJaxFirst, lambda x: ((x.a, x.b), "jax"), lambda _, c: BothJaxFirst(*c)
    )
    otu.register_pytree_node(
        BothJaxFirst, lambda x: ((x.a,), "oxtree"), lambda _, c: BothJaxFirst(c[0], None)
    )
    oxtree.register_pytree_node(
        BothOxtreeFirst, lambda x: ((x.a,), "oxtree"), lambda _, c: BothOxtreeFirst(c[0], None)
    )
    jtu.register_pytree_node(
        BothOxtreeFirst, lambda x: ((x.a, x.b), "jax"), lambda _, c: BothOxtreeFirst(*c)
    )
    classes = [BothJaxFirst, BothOxtreeFirst]
    yield classes
    for cls in classes:
        oxtree.unregister_pytree_node(cls)


@pytest.mark.parametrize("which", [0, 1], ids=["jax_first", "oxtree_first"])
def test_oxtree_registration_wins_in_oxtree(both_registered: list[type], which: int) -> None:
    cls = both_registered[which]
    obj = cls(A, B)
    assert_identical(jtu.tree_leaves(obj), [A, B])  # JAX keeps its own rule
    assert_identical(otu.tree_leaves(obj), [A])
    assert otu.tree_structure(obj).node_data() == (cls, "oxtree")
    rebuilt = otu.tree_map(lambda x: x, obj)
    assert type(rebuilt) is cls
    assert rebuilt.a is A
    assert rebuilt.b is None
    assert_identical(oxtree.tree_leaves(obj), [A])
    params, _ = oxjax.partition(obj, oxjax.is_array)
    assert params.a is A
    assert params.b is None


@pytest.mark.parametrize("which", [0, 1], ids=["jax_first", "oxtree_first"])
def test_oxtree_registration_wins_on_the_main_face_with_the_jax_registry(
    both_registered: list[type], which: int
) -> None:
    cls = both_registered[which]
    with jax_registry(True):
        assert_identical(oxtree.tree_leaves(cls(A, B)), [A])


# --------------------------------------------------------------------------------------------------
# The main face.


def add(a: Any, b: Any) -> Any:
    return a + b


@jtu.register_dataclass
@dataclasses.dataclass
class Dense:
    w: Any
    b: Any
    act: str = dataclasses.field(default="relu", metadata={"static": True})


def _equinox() -> Any:
    eqx = import_or_skip("equinox")
    import jax

    return eqx.nn.MLP(2, 1, 3, 1, key=jax.random.key(0))


def _flax_struct() -> Any:
    struct = import_or_skip("flax.struct")

    @struct.dataclass
    class Params:
        w: Any
        b: Any
        name: str = struct.field(pytree_node=False, default="p")

    return Params(A, {"k": B})


def _nnx_state() -> Any:
    nnx = import_or_skip("flax.nnx")
    return nnx.State({"b": nnx.Param(A), "a": {"c": B}})


def _chex() -> Any:
    chex = import_or_skip("chex")

    @chex.dataclass
    class State:
        params: Any
        step: Any

    return State(params={"w": A}, step=B)


JAX_OBJECTS: dict[str, Callable[[], Any]] = {
    "register_dataclass": lambda: Dense(A, [B, None]),
    "partial": lambda: jtu.Partial(add, A, b=B),
    "equinox": _equinox,
    "flax_struct": _flax_struct,
    "nnx_state": _nnx_state,
    "chex": _chex,
}


@pytest.mark.parametrize("name", list(JAX_OBJECTS))
def test_main_face_keeps_jax_types_as_leaves_by_default(name: str) -> None:
    obj = JAX_OBJECTS[name]()
    assert_identical(oxtree.tree_leaves(obj), [obj])
    assert oxtree.tree_structure(obj).num_leaves == 1
    assert oxtree.tree_map(lambda x: x, [obj])[0] is obj


def test_use_jax_registry_returns_the_previous_setting() -> None:
    previous = oxtree.use_jax_registry(True)
    try:
        assert previous is False
        assert oxtree.use_jax_registry(True) is True
        assert oxtree.use_jax_registry(False) is True
        assert oxtree.use_jax_registry(False) is False
    finally:
        oxtree.use_jax_registry(previous)


@pytest.mark.parametrize("name", list(JAX_OBJECTS))
def test_main_face_with_the_jax_registry_flattens_like_jax(name: str) -> None:
    obj = JAX_OBJECTS[name]()
    theirs = jtu.tree_leaves(obj)
    with jax_registry(True):
        assert_identical(oxtree.tree_leaves(obj), theirs)
        spec = oxtree.tree_structure(obj)
        assert spec.num_leaves == len(theirs)
        rebuilt = oxtree.tree_unflatten(spec, theirs)
        assert type(rebuilt) is type(obj)
        assert jtu.tree_structure(rebuilt) == jtu.tree_structure(obj)
        mapped = oxtree.tree_map(lambda x: x, obj)
        assert type(mapped) is type(obj)
        assert_identical(jtu.tree_leaves(mapped), theirs)
        leaves, graphdef = oxtree.graph_flatten([obj, obj])
        assert_identical(leaves, theirs)
        out = oxtree.graph_unflatten(graphdef, leaves)
        assert type(out[0]) is type(obj)
        assert out[1] is out[0]
    # Switched back off: a leaf again.
    assert_identical(oxtree.tree_leaves(obj), [obj])


# --------------------------------------------------------------------------------------------------
# Fresh interpreters: without JAX, and with JAX imported after oxtree.

WITHOUT_JAX = r"""
import sys
sys.modules["jax"] = None  # `import jax` raises ImportError from here on
import oxtree
import oxtree.tree
import oxtree.tree_util as tu


class Opaque:
    pass


LEAF = Opaque()
TREE = {"b": [1, (2, None)], "a": LEAF}


def paths():
    pairs, _ = tu.tree_flatten_with_path(TREE)
    return [tu.keystr(p) for p, _ in pairs] == ["['a']", "['b'][0]", "['b'][1][0]"]


def treedef_ops():
    spec = tu.tree_structure(TREE)
    return (
        spec.num_leaves == 3
        and len(spec.children()) == 2
        and spec.flatten_up_to({"a": 1, "b": [2, (3, None)]}) == [1, 2, 3]
        and spec.compose(tu.tree_structure((0, 0))).num_leaves == 6
        and tu.tree_unflatten(spec, [7, 8, 9]) == {"a": 7, "b": [8, (9, None)]}
    )


def registered():
    class Box:
        def __init__(self, v):
            self.v = v

    tu.register_pytree_node(Box, lambda b: ((b.v,), None), lambda _, c: Box(*c))
    return tu.tree_leaves([Box(1), Box((2, 3))]) == [1, 2, 3]


def with_registry():
    previous = oxtree.use_jax_registry(True)
    try:
        return oxtree.tree_leaves(TREE) == [LEAF, 1, 2] and tu.tree_leaves([LEAF]) == [LEAF]
    finally:
        oxtree.use_jax_registry(previous)


def no_oxtree_jax():
    try:
        import oxtree.jax  # noqa: F401
    except ImportError:
        return True
    return "imported"


run("flatten", lambda: tu.tree_flatten(TREE)[0] == [LEAF, 1, 2])
run("leaves", lambda: tu.tree_leaves(TREE)[0] is LEAF and oxtree.tree.leaves([1, [2]]) == [1, 2])
run("paths", paths)
run("map", lambda: tu.tree_map(str, TREE) == {"a": str(LEAF), "b": ["1", ("2", None)]})
run("treedef_ops", treedef_ops)
run("registered", registered)
run("main_face", lambda: oxtree.tree_leaves(TREE) == [LEAF, 1, 2])
run("use_jax_registry", with_registry)
run("oxtree_jax_needs_jax", no_oxtree_jax)
run("jax_never_imported", lambda: sys.modules["jax"] is None and "jaxlib" not in sys.modules)
emit("finished")
"""

WITHOUT_JAX_OPS = [
    "flatten",
    "leaves",
    "paths",
    "map",
    "treedef_ops",
    "registered",
    "main_face",
    "use_jax_registry",
    "oxtree_jax_needs_jax",
    "jax_never_imported",
]


@pytest.mark.parametrize("op", WITHOUT_JAX_OPS)
def test_the_jax_face_works_without_jax(op: str) -> None:
    result = op_result(run_script(WITHOUT_JAX), op)
    assert result[:2] == ["ok", True], result


JAX_AFTER_OXTREE = r"""
import sys
import oxtree
import oxtree.tree_util as tu


class Early:
    def __init__(self, v):
        self.v = v


EARLY = Early(5)
run("oxtree_first", lambda: "jax" not in sys.modules and tu.tree_leaves([EARLY, 1]) == [EARLY, 1])

import jax.tree_util as jtu

jtu.register_pytree_node(Early, lambda e: ((e.v,), None), lambda _, c: Early(*c))
run("registered_after_import", lambda: tu.tree_leaves([EARLY, 1]) == [5, 1])
run("partial", lambda: tu.tree_leaves(jtu.Partial(print, 2, sep=3)) == [2, 3])
run("main_face_still_leaf", lambda: oxtree.tree_leaves([EARLY]) == [EARLY])
emit("finished")
"""


@pytest.mark.parametrize(
    "op", ["oxtree_first", "registered_after_import", "partial", "main_face_still_leaf"]
)
def test_jax_imported_after_oxtree_is_seen(op: str) -> None:
    result = op_result(run_script(JAX_AFTER_OXTREE), op)
    assert result[:2] == ["ok", True], result
