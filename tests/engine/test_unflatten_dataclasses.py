"""Dataclasses rebuilt by unflatten.

A registered dataclass whose metaclass is `type`, whose `__new__` is object's and whose `__init__`
is a Python function is rebuilt with `object.__new__` and a vectorcall of `__init__` with the field
names as keywords, with no keyword dict (see `init_directly` in
`crates/oxtree/src/treespec/custom.rs`). Every other class is called with a keyword dict. These
tests check that both ways give what calling the class gives, errors included.
"""

from __future__ import annotations

import abc
import dataclasses
import gc
import sys
from typing import Any

import jax.tree_util as jtu
import oxtree
import oxtree.tree_util as otu
import pytest


def _register(cls: type, namespace: str, **kwargs: Any) -> type:
    return oxtree.register_dataclass(cls, namespace=namespace, **kwargs)


@dataclasses.dataclass
class Plain:
    x: Any
    y: Any


@dataclasses.dataclass(frozen=True)
class Frozen:
    x: Any
    y: Any


@dataclasses.dataclass(slots=True)
class Slotted:
    x: Any
    y: Any


@dataclasses.dataclass
class PostInit:
    x: Any
    y: Any
    total: Any = dataclasses.field(init=False, default=None)

    def __post_init__(self) -> None:
        self.total = (self.x, self.y)


@dataclasses.dataclass(kw_only=True)
class KwOnly:
    x: Any
    y: Any = 0


@dataclasses.dataclass
class Defaults:
    x: Any
    y: Any = "d"


@dataclasses.dataclass
class WithMeta(metaclass=abc.ABCMeta):
    x: Any
    y: Any


@pytest.mark.parametrize(
    "cls", [Plain, Frozen, Slotted, PostInit, KwOnly, Defaults, WithMeta], ids=lambda c: c.__name__
)
def test_rebuilds_equal_calling_the_class(cls: type) -> None:
    ns = f"dc-{cls.__name__}"
    _register(cls, ns)
    items = [object(), object()]
    want = cls(x=items[0], y=items[1])
    for _ in range(3):
        leaves, spec = oxtree.tree_flatten([want], namespace=ns)
        got = oxtree.tree_unflatten(spec, leaves)[0]
        assert got is not want
        assert type(got) is cls
        assert got == want
        assert got.x is items[0]
        assert got.y is items[1]
        assert gc.is_tracked(got) == gc.is_tracked(want)
    if cls is PostInit:
        assert got.total == (items[0], items[1])


def test_meta_fields_are_passed_by_name() -> None:
    @dataclasses.dataclass
    class Mixed:
        a: Any
        tag: str
        b: Any

    oxtree.register_dataclass(
        Mixed, data_fields=["a", "b"], meta_fields=["tag"], namespace="dc-mixed"
    )
    tree = Mixed(1, "t", 2.5)
    leaves, spec = oxtree.tree_flatten(tree, namespace="dc-mixed")
    assert leaves == [1, 2.5]
    assert oxtree.tree_unflatten(spec, [3, 4]) == Mixed(3, "t", 4)


def test_jax_face_matches_jax() -> None:
    @dataclasses.dataclass
    class Point:
        x: Any
        y: Any

    # JAX first: a registration through oxtree.tree_util reaches JAX too (JAX refuses a type
    # twice; one it has already is left alone).
    jtu.register_dataclass(Point, data_fields=["x", "y"], meta_fields=[])
    otu.register_dataclass(Point, data_fields=["x", "y"], meta_fields=[])
    tree = {"p": Point(1, 2.0)}
    leaves, treedef = otu.tree_flatten(tree)
    jleaves, jtreedef = jtu.tree_flatten(tree)
    assert leaves == jleaves
    assert otu.tree_unflatten(treedef, [5, 6]) == jtu.tree_unflatten(jtreedef, [5, 6])


def test_references_are_released() -> None:
    _register(Plain, "dc-refs")
    items = [object(), object()]
    spec = oxtree.tree_structure(Plain(*items), namespace="dc-refs")
    before = [sys.getrefcount(i) for i in items]
    for _ in range(100):
        spec.unflatten(items)
    assert [sys.getrefcount(i) for i in items] == before


def test_init_errors_propagate_and_nothing_leaks() -> None:
    @dataclasses.dataclass
    class Checked:
        x: Any
        y: Any

        def __post_init__(self) -> None:
            if self.x == "bad":
                raise ValueError("bad x")

    _register(Checked, "dc-err")
    spec = oxtree.tree_structure(Checked(1, 2), namespace="dc-err")
    item = object()
    before = sys.getrefcount(item)
    with pytest.raises(ValueError, match="bad x"):
        spec.unflatten(["bad", item])
    assert sys.getrefcount(item) == before


def test_init_that_returns_a_value_is_a_type_error() -> None:
    @dataclasses.dataclass(init=False)
    class Returns:
        x: Any

        def __init__(self, x: Any) -> None:
            self.x = x
            return 5  # type: ignore[return-value]

    _register(Returns, "dc-ret")
    obj = object.__new__(Returns)
    obj.x = 1
    spec = oxtree.tree_structure(obj, namespace="dc-ret")
    with pytest.raises(TypeError) as direct:
        spec.unflatten([1])
    with pytest.raises(TypeError) as called:
        Returns(1)
    assert str(direct.value) == str(called.value)


def _one_field_class(namespace: str) -> tuple[Any, Any]:
    """A new registered dataclass of one field, and the treespec of an instance, checked once."""

    @dataclasses.dataclass
    class One:
        x: Any

    _register(One, namespace)
    spec = oxtree.tree_structure(One(1), namespace=namespace)
    assert spec.unflatten([2]) == One(2)
    return One, spec


def test_a_class_made_abstract_cannot_be_rebuilt() -> None:
    Later, spec = _one_field_class("dc-abs")
    # Setting __abstractmethods__ makes a class of metaclass `type` abstract.
    Later.__abstractmethods__ = frozenset({"f"})  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match="abstract") as direct:
        spec.unflatten([3])
    with pytest.raises(TypeError) as called:
        Later(3)
    assert str(direct.value) == str(called.value)


class Log:
    calls: list[str] = []  # noqa: RUF012


@dataclasses.dataclass
class OwnNew:
    x: Any

    def __new__(cls, *args: Any, **kwargs: Any) -> OwnNew:
        Log.calls.append("new")
        return super().__new__(cls)


class Meta(type):
    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        Log.calls.append("meta")
        return super().__call__(*args, **kwargs)


@dataclasses.dataclass
class MetaCall(metaclass=Meta):
    x: Any


@pytest.mark.parametrize(("cls", "expected"), [(OwnNew, "new"), (MetaCall, "meta")])
def test_classes_that_do_more_are_called(cls: type, expected: str) -> None:
    ns = f"dc-more-{cls.__name__}"
    _register(cls, ns)
    spec = oxtree.tree_structure(cls(1), namespace=ns)
    Log.calls.clear()
    for i in range(3):
        assert spec.unflatten([i]).x == i
    assert Log.calls == [expected] * 3


def test_a_changed_init_is_called() -> None:
    Changing, spec = _one_field_class("dc-changing")
    calls: list[Any] = []
    original = Changing.__init__

    def init(self: Any, x: Any) -> None:
        calls.append(x)
        original(self, x)

    Changing.__init__ = init  # type: ignore[method-assign]
    assert spec.unflatten([3]).x == 3
    assert calls == [3]


def test_many_fields_use_a_dict() -> None:
    names = [f"f{i}" for i in range(40)]
    cls = dataclasses.make_dataclass("Wide", names)
    _register(cls, "dc-wide")
    values = list(range(40))
    spec = oxtree.tree_structure(cls(*values), namespace="dc-wide")
    got = spec.unflatten([v * 2 for v in values])
    assert got == cls(*[v * 2 for v in values])
