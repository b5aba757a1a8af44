"""The node classes, keys and leaves that the tests and the fuzzer (fuzz/) build trees from.

One module for both, so that each class is defined once. Tests import it as `nodes` (this
folder is on `sys.path`, see conftest.py); fuzz/fuzz_nodes.py and fuzz/soak.py put this folder
on theirs. Everything is at module level, so that treedefs holding these classes pickle and
`treespec_to_json` can name them (`nodes:Point`). Nothing here is registered: namedtuples and
the builtin containers are nodes by themselves, and the subclasses below are leaves. Classes
registered for one test file live in that file; the fuzzer's registered and hostile classes
live in fuzz/fuzz_nodes.py.
"""

from __future__ import annotations

import typing
from collections import OrderedDict, defaultdict, deque, namedtuple
from typing import Any

# --------------------------------------------------------------------------------------------------
# Namedtuple nodes.

Point = namedtuple("Point", ["x", "y"])
Triple = namedtuple("Triple", "first second third")
EmptyNamedTuple = namedtuple("EmptyNamedTuple", [])


class SubPoint(Point):
    """A subclass of a namedtuple class: still a namedtuple node for optree."""

    __slots__ = ()


class Vector(typing.NamedTuple):
    dx: Any
    dy: Any = "default"


class Pair(typing.NamedTuple):
    left: Any
    right: Any


class EmptyTyped(typing.NamedTuple):
    pass


# --------------------------------------------------------------------------------------------------
# Subclasses of the builtin containers are *not* nodes: they are leaves.


class TupleSubclass(tuple):
    __slots__ = ()


class ListSubclass(list):
    pass


class DictSubclass(dict):
    pass


class OrderedDictSubclass(OrderedDict):
    pass


class DefaultDictSubclass(defaultdict):
    pass


class DequeSubclass(deque):
    pass


def make_default() -> str:
    """A module-level defaultdict factory (picklable, and distinct from the builtins)."""
    return "made"


# --------------------------------------------------------------------------------------------------
# Leaves and dict keys.


class Opaque:
    """An arbitrary object: a leaf, or a dict key that is hashable and equal by name but not
    orderable (so it forces the insertion-order fallback when sorting dict keys)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __eq__(self, other: object) -> bool:
        return type(other) is Opaque and other.name == self.name

    def __hash__(self) -> int:
        return hash(("Opaque", self.name))

    def __repr__(self) -> str:
        return f"Opaque({self.name!r})"


class Leaf:
    """A leaf (or dict key) nobody else refers to, compared by identity, with a name for its
    repr; weakly referenceable, so a test can watch it being freed."""

    __slots__ = ("__weakref__", "name")

    def __init__(self, name: str = "") -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"Leaf({self.name!r})"


class Key:
    """A dict key nobody else refers to: hashable and equal by value, ordered among Keys (a
    comparison with anything else is NotImplemented, so a dict mixing it with other keys sorts
    by type name or keeps its insertion order), and pickled by value."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return type(other) is Key and other.value == self.value

    def __hash__(self) -> int:
        return hash(("Key", self.value))

    def __lt__(self, other: object) -> bool:
        if type(other) is not Key:
            return NotImplemented
        return bool(self.value < other.value)

    def __repr__(self) -> str:
        return f"Key({self.value!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Key, (self.value,))


class Rec:
    """The result of a mapped function: remembers the exact objects it was called with, and is
    equal to another Rec of the very same objects."""

    __slots__ = ("args",)
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, *args: Any) -> None:
        self.args = args

    def __eq__(self, other: object) -> bool:
        return (
            type(other) is Rec
            and len(self.args) == len(other.args)
            and all(a is b for a, b in zip(self.args, other.args, strict=True))
        )

    def __repr__(self) -> str:
        return f"Rec{self.args!r}"
