"""`register_object`: classes registered by their attribute names, walked and rebuilt natively.

The oracles: a hand-written registration of the same rule (`register_pytree_node` with
functions that read the attributes and rebuild by `object.__new__` and `object.__setattr__`)
in oxtree and in optree, and the same rule registered with `jax.tree_util` directly
(`register_pytree_with_keys` with `GetAttrKey`s). Then inference from `__slots__` and
annotations, every error (each leaving the registry and the arguments as they were), the
rebuild of slotted, frozen-style, dataclass and subclassed classes, treespecs (repr, pickle,
equality, accessors), and the JAX side: the JAX face registers with JAX, `oxtree.jax.register`
mirrors a main-face registration, and a registration made before `import jax` waits for it.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import pickle
from collections.abc import Iterator
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import optree
import oxtree
import oxtree.jax as oxjax
import oxtree.tree_util as otu
import pytest
from subprocess_runs import op_result, run_script

NS = "register-object"


@pytest.fixture
def made() -> Iterator[list[tuple[type, str]]]:
    """Classes registered by the test, as (class, namespace): unregistered from oxtree at the
    end (JAX never forgets a registration; those tests use fresh classes)."""
    registered: list[tuple[type, str]] = []
    yield registered
    for cls, namespace in registered:
        with contextlib.suppress(ValueError):  # not registered (any more)
            oxtree.unregister_pytree_node(cls, namespace=namespace)


def register(made: list[tuple[type, str]], cls: type, *args: Any, namespace: str = "") -> type:
    out = oxtree.register_object(cls, *args, namespace=namespace)
    assert out is cls
    made.append((cls, namespace))
    return cls


def slotted(name: str = "Dense") -> type:
    """A fresh slotted class: `w` and `b` children, `act` static by the tests' choice."""

    class Dense:
        __slots__ = ("w", "b", "act")  # noqa: RUF023 (their order is the children's)

        def __init__(self, w: Any, b: Any, act: str = "relu") -> None:
            self.w, self.b, self.act = w, b, act

        def __repr__(self) -> str:
            return f"{type(self).__name__}({self.w!r}, {self.b!r}, {self.act!r})"

        def __eq__(self, other: object) -> bool:
            return type(other) is type(self) and (other.w, other.b, other.act) == (  # type: ignore[attr-defined]
                self.w,
                self.b,
                self.act,
            )

    Dense.__name__ = Dense.__qualname__ = name
    return Dense


def plain(name: str = "Plain") -> type:
    """A fresh class that declares nothing: attributes set by `__init__` only."""

    class Plain:
        def __init__(self, w: Any, b: Any, act: str = "relu") -> None:
            self.w, self.b, self.act = w, b, act

        def __repr__(self) -> str:
            return f"{type(self).__name__}({self.w!r}, {self.b!r}, {self.act!r})"

    Plain.__name__ = Plain.__qualname__ = name
    return Plain


def state(obj: Any) -> dict[str, Any]:
    """What an instance holds, slots and `__dict__` alike."""
    names = [n for k in type(obj).__mro__ for n in k.__dict__.get("__slots__", ())]
    names = [n for n in names if n not in ("__dict__", "__weakref__")]
    out = {n: getattr(obj, n) for n in names if hasattr(obj, n)}
    out.update(getattr(obj, "__dict__", {}))
    return out


def by_hand(cls: type, children: list[str], static: list[str]) -> tuple[Any, Any]:
    """The rule written out: what `register_object` does, as flatten/unflatten functions."""

    def flatten(obj: Any) -> tuple[tuple[Any, ...], tuple[Any, ...], tuple[str, ...]]:
        return (
            tuple(getattr(obj, n) for n in children),
            tuple(getattr(obj, n) for n in static),
            tuple(children),
        )

    def unflatten(aux: Any, values: Any) -> Any:
        obj = object.__new__(cls)
        for n, v in [*zip(children, values, strict=True), *zip(static, aux, strict=True)]:
            object.__setattr__(obj, n, v)
        return obj

    return flatten, unflatten


# ------------------------------------------------------------------------------------------
# Against the hand-written rule, in oxtree and in optree


TREES = [
    lambda c: c([1.0, 2.0], 0.5),
    lambda c: [c({"k": (1, None)}, c(2, 3, "tanh")), 4],
    lambda c: c(None, [], "id"),
    lambda c: {"layer": c((1,), [2, [3]]), "n": 5},
]


@pytest.mark.parametrize("make", TREES)
@pytest.mark.parametrize("face", ["optree", "jax"])
def test_it_walks_as_the_same_rule_written_by_hand(
    made: list[tuple[type, str]], make: Any, face: str
) -> None:
    ours, theirs = slotted("Dense"), slotted("Dense")
    register(made, ours, ["w", "b"], ["act"])
    flatten, unflatten = by_hand(theirs, ["w", "b"], ["act"])
    oxtree.register_pytree_node(theirs, flatten, unflatten)
    made.append((theirs, ""))
    mine, twin = make(ours), make(theirs)
    tu: Any = oxtree if face == "optree" else otu
    assert tu.tree_leaves(mine) == tu.tree_leaves(twin)
    assert tu.tree_structure(mine).num_nodes == tu.tree_structure(twin).num_nodes
    if face == "optree":
        assert oxtree.tree_paths(mine) == oxtree.tree_paths(twin)
    leaves, spec = tu.tree_flatten(mine)
    rebuilt = tu.tree_unflatten(spec, leaves)
    assert repr(rebuilt) == repr(mine)
    mapped = tu.tree_map(lambda x: ("new", x), mine)
    assert repr(mapped) == repr(tu.tree_map(lambda x: ("new", x), twin))


@pytest.mark.parametrize("make", TREES)
def test_leaves_and_paths_match_optree_with_the_rule_by_hand(
    made: list[tuple[type, str]], make: Any
) -> None:
    ours, theirs = slotted(), slotted()
    register(made, ours, ["w", "b"], ["act"], namespace=NS)
    optree.register_pytree_node(theirs, *by_hand(theirs, ["w", "b"], ["act"]), namespace=NS)
    try:
        mine, twin = make(ours), make(theirs)
        assert oxtree.tree_leaves(mine, namespace=NS) == optree.tree_leaves(twin, namespace=NS)
        assert oxtree.tree_paths(mine, namespace=NS) == optree.tree_paths(twin, namespace=NS)
        mapped = oxtree.tree_map(lambda x: [x], mine, namespace=NS)
        expected = optree.tree_map(lambda x: [x], twin, namespace=NS)
        assert oxtree.tree_leaves(mapped, namespace=NS) == optree.tree_leaves(
            expected, namespace=NS
        )
    finally:
        optree.unregister_pytree_node(theirs, namespace=NS)


def test_the_jax_face_matches_jax_with_the_rule_by_hand() -> None:
    ours, theirs = slotted("Twin"), slotted("Twin")
    otu.register_object(ours, ["w", "b"], ["act"])

    def flatten_with_keys(d: Any) -> Any:
        return ((jtu.GetAttrKey("w"), d.w), (jtu.GetAttrKey("b"), d.b)), (d.act,)

    def unflatten(aux: Any, children: Any) -> Any:
        obj = object.__new__(theirs)
        obj.w, obj.b = children
        (obj.act,) = aux
        return obj

    jtu.register_pytree_with_keys(theirs, flatten_with_keys, unflatten)
    try:
        for make in TREES:
            mine, twin = make(ours), make(theirs)
            # oxtree's JAX face, and JAX itself on the registration it was given.
            for tu in (otu, jtu):
                assert tu.tree_leaves(mine) == jtu.tree_leaves(twin)
                assert repr(tu.tree_structure(mine)) == repr(jtu.tree_structure(twin))
                assert [jtu.keystr(p) for p, _ in tu.tree_flatten_with_path(mine)[0]] == [
                    jtu.keystr(p) for p, _ in jtu.tree_flatten_with_path(twin)[0]
                ]
                assert repr(tu.tree_map(lambda x: x, mine)) == repr(make(ours))
    finally:
        oxtree.unregister_pytree_node(ours)


# ------------------------------------------------------------------------------------------
# What is declared: __slots__ and annotations


def test_children_default_to_the_slots(made: list[tuple[type, str]]) -> None:
    cls = register(made, slotted(), None, ["act"])
    assert oxtree.tree_leaves(cls(1, 2, "tanh")) == [1, 2]
    assert oxtree.tree_paths(cls(1, 2)) == [("w",), ("b",)]


def test_children_default_to_the_annotations_without_classvars(
    made: list[tuple[type, str]],
) -> None:
    class Point:
        x: float
        y: float
        dims: ClassVar[int] = 2
        label: ClassVar[str] = "p"

        def __init__(self, x: float, y: float) -> None:
            self.x, self.y = x, y

    register(made, Point)
    assert oxtree.tree_leaves(Point(1.0, 2.0)) == [1.0, 2.0]
    assert oxtree.tree_paths(Point(1.0, 2.0)) == [("x",), ("y",)]


def test_declared_attributes_come_base_first_slots_then_annotations(
    made: list[tuple[type, str]],
) -> None:
    class Base:
        __slots__ = ("a", "__dict__")  # noqa: RUF023
        z: int

    class Child(Base):
        __slots__ = "b"
        c: int

    obj = object.__new__(Child)
    for n, v in {"a": 1, "z": 2, "b": 3, "c": 4}.items():
        setattr(obj, n, v)
    register(made, Child)
    assert oxtree.tree_paths(obj) == [("a",), ("z",), ("b",), ("c",)]
    assert oxtree.tree_leaves(obj) == [1, 2, 3, 4]
    back = oxtree.tree_map(lambda v: v * 10, obj)
    assert state(back) == {"a": 10, "z": 20, "b": 30, "c": 40}


def test_private_slots_and_annotations_are_their_mangled_names(
    made: list[tuple[type, str]],
) -> None:
    class _Secret:
        __slots__ = ("__key", "__dunder__")  # noqa: RUF023

        def __init__(self) -> None:
            self.__key, self.__dunder__ = 1, 2

    class Noted:
        __note: int

        def __init__(self) -> None:
            self.__note = 3

    register(made, _Secret, None, ["__dunder__"])
    assert oxtree.tree_paths(_Secret()) == [("_Secret__key",)]
    assert oxtree.tree_map(lambda v: v + 1, _Secret())._Secret__key == 2
    register(made, Noted)
    assert oxtree.tree_paths(Noted()) == [("_Noted__note",)]


def test_a_dataclass_is_rebuilt_without_init_or_post_init(made: list[tuple[type, str]]) -> None:
    calls = []

    @dataclasses.dataclass(frozen=True)
    class Config:
        lr: float
        name: str = "adam"

        def __post_init__(self) -> None:
            calls.append(self.lr)
            if self.lr <= 0:
                raise ValueError("lr must be positive")

    register(made, Config, None, ["name"])
    out = oxtree.tree_map(lambda x: -x, Config(0.1))  # __post_init__ would refuse -0.1
    assert (out.lr, out.name, calls) == (-0.1, "adam", [0.1])


# ------------------------------------------------------------------------------------------
# Rebuilding


def test_init_and_new_do_not_run_on_rebuild(made: list[tuple[type, str]]) -> None:
    seen = []

    class Converting:
        def __new__(cls, *args: Any) -> Any:
            seen.append("new")
            return super().__new__(cls)

        def __init__(self, value: Any) -> None:
            seen.append("init")
            self.value = float(value)

    register(made, Converting, ["value"])
    out = oxtree.tree_map(lambda v: str(v), Converting(1))
    assert (out.value, seen) == ("1.0", ["new", "init"])


def test_a_class_that_forbids_assignment_is_rebuilt_all_the_same(
    made: list[tuple[type, str]],
) -> None:
    class Frozen:
        __slots__ = ("a", "b")

        def __init__(self, a: Any, b: Any) -> None:
            object.__setattr__(self, "a", a)
            object.__setattr__(self, "b", b)

        def __setattr__(self, name: str, value: Any) -> None:
            raise AttributeError(f"{type(self).__name__} is frozen")

    register(made, Frozen)
    out = oxtree.tree_map(lambda v: v * 2, Frozen(1, [2]))
    assert (out.a, out.b) == (2, [4])
    with pytest.raises(AttributeError, match="frozen"):
        out.a = 0


def test_unset_slots_stay_unset_and_extra_attributes_are_not_kept(
    made: list[tuple[type, str]],
) -> None:
    cls = plain()
    register(made, cls, ["w", "b"], ["act"])
    obj = cls(1, 2)
    obj.cache = "not registered"
    out = oxtree.tree_map(lambda v: v, obj)
    assert state(out) == {"w": 1, "b": 2, "act": "relu"}


def test_a_subclass_is_a_leaf_until_registered_itself(made: list[tuple[type, str]]) -> None:
    base = register(made, slotted(), ["w", "b"], ["act"])
    sub = type("Sub", (base,), {"__slots__": ()})
    assert oxtree.tree_leaves(sub(1, 2)) == [sub(1, 2)]
    assert otu.tree_leaves(sub(1, 2)) == [sub(1, 2)]
    register(made, sub, ["w", "b"], ["act"])
    out = oxtree.tree_map(lambda v: v + 1, sub(1, 2))
    assert type(out) is sub
    assert out == sub(2, 3)


def test_every_rebuilding_walk_uses_the_rule(made: list[tuple[type, str]]) -> None:
    cls = register(made, slotted(), ["w", "b"], ["act"])
    obj = cls([1, 2], 3, "gelu")
    leaves, spec = oxtree.tree_flatten(obj)
    assert spec.unflatten(leaves) == obj
    assert spec.traverse(leaves) == obj
    assert spec.walk(leaves) == obj
    children, _one = oxtree.tree_flatten_one_level(obj)[:2]
    assert children == [[1, 2], 3]
    # A graph: one shared instance comes back shared.
    leaves, graphdef = oxtree.graph_flatten([obj, obj])
    back = oxtree.graph_unflatten(graphdef, leaves)
    assert back[0] is back[1]
    assert back[0] == obj


# ------------------------------------------------------------------------------------------
# Treespecs


def test_reprs_in_each_face(made: list[tuple[type, str]]) -> None:
    cls = register(made, slotted("Dense"), ["w", "b"], ["act"])
    assert (
        repr(oxtree.tree_structure(cls(1, [2])))
        == "PyTreeSpec(CustomTreeNode(Dense[(('act', 'relu'),)], [*, [*]]))"
    )
    assert (
        repr(otu.tree_structure(cls(1, [2]))) == "PyTreeDef(CustomNode(Dense[('relu',)], [*, [*]]))"
    )
    cls2 = register(made, slotted("Dense"), ["w", "b"], ["act"], namespace=NS)
    assert repr(oxtree.tree_structure(cls2(1, 2), namespace=NS)).endswith(f"namespace={NS!r})")


def test_static_values_are_compared_and_may_be_unhashable(made: list[tuple[type, str]]) -> None:
    cls = register(made, slotted(), ["w", "b"], ["act"])
    a, b, c = (oxtree.tree_structure(cls(1, 2, act)) for act in (["x"], ["x"], ["y"]))
    assert a == b
    assert a != c
    assert hash(a) == hash(b)
    with pytest.raises(ValueError, match="Mismatch"):
        oxtree.tree_map(lambda x, y: x, cls(1, 2, "relu"), cls(1, 2, "tanh"))


def test_pickle_copy_and_unregistering_leave_treespecs_working(
    made: list[tuple[type, str]],
) -> None:
    cls = register(made, slotted("PickledDense"), ["w", "b"], ["act"])
    globals()["PickledDense"] = cls  # so that pickle finds the class
    try:
        spec = oxtree.tree_structure(cls(1, 2))
        loaded = pickle.loads(pickle.dumps(spec))
        assert loaded == spec
        assert copy.deepcopy(spec) is spec
        assert loaded.unflatten([3, 4]) == cls(3, 4)
        oxtree.unregister_pytree_node(cls)
        assert spec.unflatten([5, 6]) == cls(5, 6)
        assert oxtree.tree_leaves(cls(1, 2)) == [cls(1, 2)]
    finally:
        del globals()["PickledDense"]


def test_a_pickle_of_another_shape_is_refused(made: list[tuple[type, str]]) -> None:
    cls = register(made, slotted("ShapedDense"), ["w", "b"], ["act"])
    globals()["ShapedDense"] = cls
    try:
        data = pickle.dumps(oxtree.tree_structure(cls(1, 2)))
        oxtree.unregister_pytree_node(cls)
        register(made, cls, ["w"], ["b", "act"])
        with pytest.raises(ValueError, match=r"registered with 1 data fields, not 2"):
            pickle.loads(data)
    finally:
        del globals()["ShapedDense"]


def test_accessors_are_attribute_entries(made: list[tuple[type, str]]) -> None:
    cls = register(made, slotted(), ["w", "b"], ["act"])
    tree = {"layer": cls([1, 2], 3)}
    accessors = oxtree.tree_accessors(tree)
    assert [a.codify("t") for a in accessors] == [
        "t['layer'].w[0]",
        "t['layer'].w[1]",
        "t['layer'].b",
    ]
    assert [a(tree) for a in accessors] == [1, 2, 3]
    assert type(accessors[2][1]) is oxtree.GetAttrEntry
    entry = oxtree.register_pytree_node.get(cls)
    assert (entry.type, entry.path_entry_type, entry.flatten_func) == (
        cls,
        oxtree.GetAttrEntry,
        None,
    )


def test_key_paths_in_the_jax_face_are_getattr_keys(made: list[tuple[type, str]]) -> None:
    cls = register(made, slotted(), ["w", "b"], ["act"])
    paths = [p for p, _ in otu.tree_flatten_with_path([cls([1], 2)])[0]]
    assert [otu.keystr(p) for p in paths] == ["[0].w[0]", "[0].b"]
    assert paths[1][1] == otu.GetAttrKey("b")


# ------------------------------------------------------------------------------------------
# Errors: each names what is wrong and changes nothing


def bad(
    made: list[tuple[type, str]], error: type, match: str, cls: Any, *args: Any, **kw: Any
) -> None:
    """`register_object(cls, *args, **kw)` raises `error` and registers nothing."""
    namespace = kw.get("namespace", "")
    namespace = namespace if isinstance(namespace, str) else ""
    if isinstance(cls, type):
        made.append((cls, namespace))  # unregistered after the test, should it get through
    before = oxtree.registered_types(namespace=namespace)
    copies = copy.deepcopy(args)
    with pytest.raises(error, match=match):
        oxtree.register_object(cls, *args, **kw)
    assert oxtree.registered_types(namespace=namespace) == before
    assert args == copies  # the arguments are left as they were


class Annotated:
    x: int
    y: int

    def __init__(self) -> None:
        self.x, self.y, self.z = 1, 2, 3

    @property
    def area(self) -> int:
        return self.x * self.y

    def method(self) -> None:
        pass

    @staticmethod
    def helper() -> None:
        pass


class Items(list):  # type: ignore[type-arg]
    pass


class Failure(ValueError):
    pass


# Each refused registration: (error, message pattern, class, then register_object's arguments).
REFUSED = {
    "not a class": (TypeError, r"register_object expects a class, got 5", 5),
    "a list of names for a class": (TypeError, r"expects a class, got \['x'\]", ["x"]),
    "a namespace not a str": (
        TypeError,
        r"The namespace must be a string, got 1",
        Annotated,
        {"namespace": 1},
    ),
    "built on list": (
        TypeError,
        r"Items is built on list, whose instances object.__new__ cannot make",
        Items,
        ["x"],
    ),
    "built on an exception": (TypeError, r"Failure is built on ValueError", Failure, ["x"]),
    "list itself": (TypeError, r"list is built on list", list, ["x"]),
    "nothing declared": (TypeError, r"Plain declares no attributes .*children=\[", plain()),
    "children a str": (
        TypeError,
        r"children must be a sequence of attribute names, not a single str \('x'\); "
        r"write \['x'\]",
        Annotated,
        "x",
    ),
    "static a str": (
        TypeError,
        r"static must be a sequence of attribute names, not a single str",
        Annotated,
        ["x"],
        "y",
    ),
    "children not iterable": (
        TypeError,
        r"children must be a sequence of attribute names, got 3",
        Annotated,
        3,
    ),
    "a name not a str": (
        TypeError,
        r"children must hold attribute names \(str\), got 1",
        Annotated,
        ["x", 1],
    ),
    "not an identifier": (
        ValueError,
        r"'x-y' in children is not an attribute name",
        Annotated,
        ["x-y"],
    ),
    "a keyword": (
        ValueError,
        r"'class' in static is not an attribute name",
        Annotated,
        ["x", "y"],
        ["class"],
    ),
    "twice in children": (
        ValueError,
        r"\['x'\] named more than once in children and static of Annotated",
        Annotated,
        ["x", "x", "y"],
    ),
    "in children and static": (
        ValueError,
        r"\['y'\] named more than once",
        Annotated,
        ["x", "y"],
        ["y"],
    ),
    "declared, neither": (
        ValueError,
        r"Annotated declares attributes that are neither children nor static: \['y'\]",
        Annotated,
        ["x"],
    ),
    "static undeclared, children inferred": (
        ValueError,
        r"Annotated does not declare \['z'\]",
        Annotated,
        None,
        ["z"],
    ),
    "a property": (
        TypeError,
        r"Annotated.area is a property, not an attribute instances store",
        Annotated,
        ["x", "y", "area"],
    ),
    "a method": (TypeError, r"Annotated.method is a method", Annotated, ["x", "y"], ["method"]),
    "a staticmethod": (TypeError, r"Annotated.helper is a method", Annotated, ["x", "y", "helper"]),
    "__dict__": (
        TypeError,
        r"Annotated.__dict__ is a data descriptor \(getset_descriptor\)",
        Annotated,
        ["x", "y", "__dict__"],
    ),
    "__class__": (
        TypeError,
        r"Annotated.__class__ is a data descriptor",
        Annotated,
        ["x", "y", "__class__"],
    ),
    "no such slot": (
        TypeError,
        r"Dense has __slots__ and no __dict__, and 'bias' is not one of its slots "
        r"\['w', 'b', 'act'\]",
        slotted(),
        ["w", "bias"],
        ["act"],
    ),
}


@pytest.mark.parametrize("case", REFUSED)
def test_refused(made: list[tuple[type, str]], case: str) -> None:
    error, match, cls, *args = REFUSED[case]
    kw = args.pop() if args and isinstance(args[-1], dict) else {}
    bad(made, error, match, cls, *args, **kw)


def test_a_decorator_with_a_namespace_not_a_str() -> None:
    with pytest.raises(TypeError, match="The namespace must be a string"):
        oxtree.register_object(namespace=b"ns")  # type: ignore[arg-type]


def test_an_undeclared_attribute_may_be_static_when_the_children_are_named(
    made: list[tuple[type, str]],
) -> None:
    # With the children named, an undeclared attribute (set by __init__) may be static.
    register(made, Annotated, ["x", "y"], ["z"])
    assert oxtree.tree_structure(Annotated()).num_leaves == 2


def test_twice_in_one_namespace(made: list[tuple[type, str]]) -> None:
    cls = register(made, slotted(), None, ["act"], namespace=NS)
    bad(
        made, ValueError, r"is already registered in namespace 'register-object'", cls, namespace=NS
    )
    register(made, cls, None, ["act"])  # another namespace: fine


def test_a_missing_attribute_when_flattening_names_the_registration(
    made: list[tuple[type, str]],
) -> None:
    cls = register(made, plain("Sparse"), ["w", "b", "gain"], ["act"])
    obj = cls(1, 2)
    with pytest.raises(AttributeError, match="'Sparse' object has no attribute 'gain'") as info:
        oxtree.tree_leaves([obj])
    assert info.value.__notes__ == [
        "Sparse is registered as a pytree node with the attribute 'gain'"
    ]
    with pytest.raises(AttributeError, match="'gain'"):
        otu.tree_flatten(obj)
    assert state(obj) == {"w": 1, "b": 2, "act": "relu"}


# ------------------------------------------------------------------------------------------
# Decorator forms


def test_decorator_forms(made: list[tuple[type, str]]) -> None:
    @oxtree.register_object
    class Bare:
        __slots__ = ("v",)

        def __init__(self, v: Any) -> None:
            self.v = v

    @oxtree.register_object(static=["tag"], namespace=NS)
    class Tagged:
        v: Any
        tag: str

        def __init__(self, v: Any, tag: str) -> None:
            self.v, self.tag = v, tag

    made += [(Bare, ""), (Tagged, NS)]
    assert isinstance(Bare, type)
    assert isinstance(Tagged, type)
    assert oxtree.tree_leaves([Bare(1), Tagged(2, "t")], namespace=NS) == [1, 2]
    tagged = Tagged(2, "t")
    assert oxtree.tree_leaves(tagged) == [tagged]  # a node only in its namespace


def test_decorator_form_of_the_jax_face() -> None:
    @otu.register_object(static=["tag"])
    class FaceTagged:
        v: Any
        tag: str

        def __init__(self, v: Any, tag: str) -> None:
            self.v, self.tag = v, tag

    try:
        assert otu.tree_leaves(FaceTagged(1, "t")) == jtu.tree_leaves(FaceTagged(1, "t")) == [1]
    finally:
        oxtree.unregister_pytree_node(FaceTagged)


# ------------------------------------------------------------------------------------------
# JAX


def test_the_jax_face_registers_with_jax_for_its_transforms() -> None:
    @otu.register_object(static=["act"])
    class Layer:
        __slots__ = ("w", "b", "act")  # noqa: RUF023

        def __init__(self, w: Any, b: Any, act: str = "relu") -> None:
            # Converting in __init__, which a rebuild by attributes never runs.
            for name, value in (("w", jnp.asarray(w)), ("b", jnp.asarray(b)), ("act", act)):
                object.__setattr__(self, name, value)

        def __setattr__(self, name: str, value: Any) -> None:
            raise AttributeError("frozen")

    try:
        layer = Layer([1.0, 2.0], 0.5)
        assert repr(jtu.tree_structure(layer)) == repr(otu.tree_structure(layer))
        assert repr(jtu.tree_structure(layer)) == "PyTreeDef(CustomNode(Layer[('relu',)], [*, *]))"
        assert [jtu.keystr(p) for p, _ in jtu.tree_flatten_with_path(layer)[0]] == [".w", ".b"]
        assert jtu.tree_flatten_with_path(layer)[0][0][0] == (jtu.GetAttrKey("w"),)

        def loss(lay: Any) -> Any:
            return jnp.sum(lay.w**2) + lay.b

        assert float(jax.jit(loss)(layer)) == 5.5
        grads = jax.grad(loss)(layer)
        assert type(grads) is Layer
        assert grads.act == "relu"
        assert grads.w.tolist() == [2.0, 4.0]
        assert float(grads.b) == 1.0
        batch = Layer(jnp.ones((3, 2)), jnp.arange(3.0))
        assert jax.vmap(loss)(batch).tolist() == [2.0, 3.0, 4.0]
    finally:
        oxtree.unregister_pytree_node(Layer)


def test_jax_refusing_the_class_undoes_the_registration() -> None:
    class Unhashable(type):
        def __hash__(cls) -> int:
            raise TypeError("unhashable class")

    class Refused(metaclass=Unhashable):
        __slots__ = ("v",)

    with pytest.raises(TypeError, match=r"JAX refused to register .*Refused; its registration"):
        otu.register_object(Refused)
    assert Refused not in oxtree.registered_types()


def test_a_class_jax_already_has_keeps_jaxs_rule_in_jax() -> None:
    class Known:
        __slots__ = ("a", "b")

        def __init__(self, a: Any, b: Any) -> None:
            self.a, self.b = a, b

    jtu.register_pytree_node(Known, lambda k: ((k.a,), k.b), lambda b, c: Known(c[0], b))
    otu.register_object(Known)
    try:
        assert otu.tree_leaves(Known(1, 2)) == [1, 2]  # oxtree's rule in oxtree
        assert jtu.tree_leaves(Known(1, 2)) == [1]  # JAX's in JAX
    finally:
        oxtree.unregister_pytree_node(Known)


def test_the_core_reports_the_attributes_of_such_a_rule(made: list[tuple[type, str]]) -> None:
    cls = register(made, slotted(), ["w", "b"], ["act"], namespace=NS)
    assert oxtree._core._attribute_fields(cls, namespace=NS) == (["w", "b"], ["act"])
    assert oxtree._core._attribute_fields(cls) is None  # not registered globally
    other = plain()
    oxtree.register_pytree_node(other, lambda p: ((p.w,), None), lambda _, c: other(c[0], 0))
    made.append((other, ""))
    assert oxtree._core._attribute_fields(other) is None  # another rule
    with pytest.raises(TypeError, match="Expected a class, got 5"):
        oxtree._core._attribute_fields(5)  # type: ignore[arg-type]


def test_oxtree_jax_register_mirrors_it_with_the_same_rule(made: list[tuple[type, str]]) -> None:
    cls = register(made, slotted("Mirrored"), ["w", "b"], ["act"], namespace=NS)
    assert oxjax.register(cls, NS) is cls
    obj = cls(1.0, [2.0], "tanh")
    assert jtu.tree_leaves(obj) == oxtree.tree_leaves(obj, namespace=NS) == [1.0, 2.0]
    # JAX's aux data is the tuple of static values (no treespec), as the JAX face shows it.
    assert repr(jtu.tree_structure(obj)) == "PyTreeDef(CustomNode(Mirrored[('tanh',)], [*, [*]]))"
    assert [jtu.keystr(p) for p, _ in jtu.tree_flatten_with_path(obj)[0]] == [".w", ".b[0]"]
    assert jtu.tree_map(lambda v: v * 2, obj) == cls(2.0, [4.0], "tanh")
    assert oxjax.mirrored_types()[cls] == NS


def test_a_dataclass_rebuilt_by_attributes_mirrors_the_same_way(
    made: list[tuple[type, str]],
) -> None:
    @dataclasses.dataclass
    class Fields:
        a: Any
        tag: str = dataclasses.field(default="t", metadata={"static": True})

        def __post_init__(self) -> None:
            self.a = ("converted", self.a)

    oxtree.register_dataclass(Fields, init_on_unflatten=False)
    made.append((Fields, ""))
    oxjax.register(Fields)
    out = jtu.tree_map(lambda v: v, Fields(1))
    assert out.a == ("converted", 1)  # __post_init__ did not run again
    assert repr(jtu.tree_structure(Fields(1))) == "PyTreeDef(CustomNode(Fields[('t',)], [(*, *)]))"


def test_generated_functions_take_names_that_are_no_identifiers() -> None:
    from oxtree.registry import _jax_functions

    class Odd:
        pass

    fwk, unflatten, flatten = _jax_functions(Odd, ["a-b", "c"], ["class"], jtu.GetAttrKey)
    obj = object.__new__(Odd)
    setattr(obj, "a-b", 1)
    obj.c = 2
    setattr(obj, "class", "k")
    assert flatten(obj) == ((1, 2), ("k",))
    assert fwk(obj) == (((jtu.GetAttrKey("a-b"), 1), (jtu.GetAttrKey("c"), 2)), ("k",))
    back = unflatten(("k2",), (3, 4))
    assert (getattr(back, "a-b"), back.c, getattr(back, "class")) == (3, 4, "k2")


# A registration made before `import jax` waits for it, then works in JAX's transforms.
BEFORE_JAX = r"""
import oxtree.tree_util as otu
from oxtree._jax_hook import PENDING

before = len(PENDING)  # oxtree's own (functools.Partial)

@otu.register_object(static=["unit"])
class Reading:
    __slots__ = ("value", "unit")

    def __init__(self, value, unit):
        self.value, self.unit = value, unit


run("waiting", lambda: ("jax" not in sys.modules and len(PENDING) == before + 1) or PENDING)
import jax
import jax.numpy as jnp
import jax.tree_util as jtu

r = Reading(jnp.ones(2), "m")
run("made", lambda: len(PENDING) == 0 or PENDING)
run("treedef", lambda: repr(jtu.tree_structure(r)) == "PyTreeDef(CustomNode(Reading[('m',)], [*]))" or repr(jtu.tree_structure(r)))
run("keys", lambda: jtu.tree_flatten_with_path(r)[0][0][0] == (jtu.GetAttrKey("value"),))
run("jit", lambda: jax.jit(lambda x: x.value * 2)(r).tolist() == [2.0, 2.0])
run("rebuilt", lambda: jtu.tree_map(lambda v: v + 1, r).unit == "m")
emit("finished")
"""


@pytest.mark.parametrize("name", ["waiting", "made", "treedef", "keys", "jit", "rebuilt"])
def test_a_registration_before_import_jax_waits_for_it(name: str) -> None:
    assert op_result(run_script(BEFORE_JAX), name)[:2] == ["ok", True]
