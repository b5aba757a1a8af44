"""Namedtuples rebuilt by unflatten.

A namedtuple class exactly as `collections.namedtuple` or `typing.NamedTuple` made it is rebuilt
with `tuple.__new__(cls, items)`, which is all its generated `__new__` does (see
`new_namedtuple` in `crates/oxtree/src/types.rs`). Every class that could behave otherwise (its own
`__new__` or `__init__`, a metaclass, a class changed after its first rebuild) must still be
called. These tests compare each rebuild with calling the class, in both faces.
"""

from __future__ import annotations

import collections
import gc
import sys
import typing
from typing import Any

import jax.tree_util as jtu
import optree
import oxtree
import oxtree.tree_util as otu
import pytest

Plain = collections.namedtuple("Plain", ["x", "y"])
WithDefaults = collections.namedtuple("WithDefaults", "a b c", defaults=(1, 2))
Renamed = collections.namedtuple("Renamed", ["ok", "def", "ok"], rename=True)
Empty = collections.namedtuple("Empty", [])


class Typed(typing.NamedTuple):
    a: int
    b: str = "b"

    def total(self) -> str:
        return f"{self.a}{self.b}"


class Sub(Plain):
    __slots__ = ()


class WithDict(Plain):
    pass


CLASSES = [Plain, WithDefaults, Renamed, Empty, Typed, Sub, WithDict]


def _spec(cls: type, face: str, items: list[Any]) -> Any:
    """The treespec (checked against optree's or jax's) of a list of two instances."""
    tree = [cls(*items), (cls(*items),)]
    if face == "optree":
        spec = oxtree.tree_structure(tree)
        assert repr(spec) == repr(optree.tree_structure(tree))
        return spec
    treedef = otu.tree_structure(tree)
    assert repr(treedef) == repr(jtu.tree_structure(tree))
    return treedef


def _rebuilt(spec: Any, items: list[Any]) -> Any:
    return oxtree.tree_unflatten(spec, list(items) * 2)


@pytest.mark.parametrize("face", ["optree", "jax"])
@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_rebuilds_equal_calling_the_class(cls: type, face: str) -> None:
    items = [object() for _ in cls._fields]  # type: ignore[attr-defined]
    want = cls(*items)
    spec = _spec(cls, face, items)
    for _ in range(3):
        got = _rebuilt(spec, items)
        for one in (got[0], got[1][0]):
            assert type(one) is cls
            assert len(one) == len(want)
            assert all(a is b for a, b in zip(one, want, strict=True))
            assert gc.is_tracked(one) == gc.is_tracked(want)
            if cls is WithDict:
                one.extra = 1  # instances of the subclass keep their own __dict__
                assert one.extra == 1


def test_typing_namedtuple_methods_survive() -> None:
    got = oxtree.tree_unflatten(oxtree.tree_structure(Typed(1)), [5, "x"])
    assert got.total() == "5x"
    assert got._asdict() == {"a": 5, "b": "x"}


def test_references_are_released() -> None:
    items = [object(), object()]
    spec = oxtree.tree_structure(Plain(*items))
    before = [sys.getrefcount(i) for i in items]
    for _ in range(100):
        spec.unflatten(items)
    assert [sys.getrefcount(i) for i in items] == before


class Calls:
    """Records the calls of the class methods below."""

    log: typing.ClassVar[list[str]] = []


class OwnInit(Plain):
    def __init__(self, *args: Any) -> None:
        Calls.log.append("init")


class OwnNew(Plain):
    def __new__(cls, x: Any, y: Any) -> OwnNew:
        Calls.log.append("new")
        return super().__new__(cls, x, y)


class Meta(type):
    def __call__(cls, *args: Any) -> Any:
        Calls.log.append("meta")
        return super().__call__(*args)


class WithMeta(Plain, metaclass=Meta):
    pass


@pytest.mark.parametrize("face", ["optree", "jax"])
@pytest.mark.parametrize(
    ("cls", "expected"),
    [(OwnInit, "init"), (OwnNew, "new"), (WithMeta, "meta")],
    ids=["own_init", "own_new", "metaclass"],
)
def test_classes_that_do_more_are_called(cls: type, expected: str, face: str) -> None:
    instance = cls(1, 2)
    spec = _spec(cls, face, [1, 2])
    Calls.log.clear()
    for _ in range(3):
        got = _rebuilt(spec, [3, 4])
        assert type(got[0]) is cls
        assert tuple(got[0]) == (3, 4)
    # Two instances per rebuild, each made by calling the class.
    assert Calls.log == [expected] * 6
    assert instance == (1, 2)


def test_a_class_changed_after_its_first_rebuild_is_called() -> None:
    Changing = collections.namedtuple("Changing", "x y")
    spec = oxtree.tree_structure(Changing(1, 2))
    assert spec.unflatten([3, 4]) == Changing(3, 4)
    calls: list[tuple[Any, ...]] = []

    def init(self: Any, *args: Any) -> None:
        calls.append(args)

    Changing.__init__ = init  # type: ignore[misc]
    assert spec.unflatten([5, 6]) == (5, 6)
    assert calls == [(5, 6)]

    def new(cls: type, x: Any, y: Any) -> Any:
        calls.append(("new", x, y))
        return tuple.__new__(cls, (y, x))

    Changing.__new__ = new  # type: ignore[assignment]
    assert spec.unflatten([7, 8]) == (8, 7)
    assert calls[-2:] == [("new", 7, 8), (7, 8)]


def test_a_new_that_takes_other_arguments_is_called() -> None:
    Odd = collections.namedtuple("Odd", "x y")
    spec = oxtree.tree_structure(Odd(1, 2))

    def new(cls: type, *args: Any) -> Any:
        return tuple.__new__(cls, tuple(reversed(args)))

    Odd.__new__ = new  # type: ignore[assignment]
    assert tuple(spec.unflatten([1, 2])) == (2, 1)
