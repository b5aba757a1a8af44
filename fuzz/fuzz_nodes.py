"""The fuzzer's own classes and registrations; the plain ones it shares with the tests (the
namedtuples, `Key`, `Leaf`, `Rec`, the defaultdict factory) are in tests/nodes.py.

Everything lives at module level so that treedefs holding these classes pickle and so that
`treespec_to_json` can name them. Two namespaces are used:

- ``"fuzz"``: well-behaved custom nodes, registered identically in oxtree and optree, so
  results can be compared one to one;
- ``"hostile"``: the same classes plus nodes whose flatten functions mutate the tree, return
  garbage or raise (oxtree only; there is no oracle for them beyond "a result that is
  consistent with itself, or a clean exception").

Hostile objects raise only :class:`FuzzError` (or the exception type a protocol requires),
so any other exception escaping oxtree is oxtree's.
"""

from __future__ import annotations

import gc
import os
import sys
import time
from collections import OrderedDict, defaultdict, deque
from pathlib import Path
from typing import Any

import optree
import optree.dataclasses as optree_dataclasses
import oxtree

# The classes the tests share with the fuzzer (Point, Key, Leaf, ...) live in tests/nodes.py.
TESTS = str(Path(__file__).resolve().parents[1] / "tests")
if TESTS not in sys.path:
    sys.path.append(TESTS)
from nodes import Key, Leaf, make_default  # noqa: E402

NAMESPACE = "fuzz"
HOSTILE = "hostile"
# Known oxtree bugs the run should not trigger again (fuzz.py --avoid): "sort-uaf" keeps
# BadKey.__lt__ from mutating containers (a dict emptied by a failing key comparison is
# read after free; tests/reliability/test_reliability.py has the reproducer).
AVOID = set(filter(None, os.environ.get("OXTREE_FUZZ_AVOID", "").split(",")))


class FuzzError(Exception):
    """The only exception hostile user code raises on its own account."""


# --------------------------------------------------------------------------------------------------
# Built-in node types.

STRUCTSEQS = (time.struct_time, os.terminal_size)
FACTORIES = (None, list, int, make_default)


class TouchyLeaf:
    """A leaf whose comparisons, truth value and hash all raise: flatten must not call them."""

    def __eq__(self, other: object) -> bool:
        raise FuzzError("TouchyLeaf.__eq__")

    def __ne__(self, other: object) -> bool:
        raise FuzzError("TouchyLeaf.__ne__")

    def __bool__(self) -> bool:
        raise FuzzError("TouchyLeaf.__bool__")

    def __hash__(self) -> int:
        raise FuzzError("TouchyLeaf.__hash__")

    def __len__(self) -> int:
        raise FuzzError("TouchyLeaf.__len__")

    def __repr__(self) -> str:
        return "TouchyLeaf()"


# --------------------------------------------------------------------------------------------------
# Well-behaved custom nodes (namespace "fuzz" in both libraries, and "hostile" in oxtree).


class Box:
    """optree-style flatten: (children, aux, keys)."""

    __slots__ = ("a", "b")

    def __init__(self, a: Any, b: Any) -> None:
        self.a, self.b = a, b

    def children(self) -> list[Any]:
        return [self.a, self.b]


def _box_flatten(box: Box) -> tuple[Any, ...]:
    return (box.a, box.b), None, ("a", "b")


def _box_unflatten(aux: Any, children: Any) -> Box:
    return Box(*children)


class Bag:
    """JAX-style flatten: (children, aux) with a hashable tag as aux data."""

    __slots__ = ("items", "tag")

    def __init__(self, items: list[Any], tag: Any) -> None:
        self.items, self.tag = items, tag

    def children(self) -> list[Any]:
        return list(self.items)


def _bag_flatten(bag: Bag) -> tuple[Any, ...]:
    return list(bag.items), bag.tag


def _bag_unflatten(tag: Any, children: Any) -> Bag:
    return Bag(list(children), tag)


@optree_dataclasses.dataclass(namespace=NAMESPACE)
class DC:
    """A dataclass node with one meta field."""

    x: Any
    y: Any
    m: str = optree_dataclasses.field(default="m", pytree_node=False)

    def children(self) -> list[Any]:
        return [self.x, self.y]


class St:
    """A static node: no children, the instance is its own aux data."""

    __slots__ = ("v",)

    def __init__(self, v: int) -> None:
        self.v = v

    def __eq__(self, other: object) -> bool:
        return type(other) is St and other.v == self.v

    def __hash__(self) -> int:
        return hash(("St", self.v))

    def __repr__(self) -> str:
        return f"St({self.v})"

    def children(self) -> list[Any]:
        return []


CUSTOM_TYPES = (Box, Bag, DC, St)

for _ns in (NAMESPACE, HOSTILE):
    oxtree.register_pytree_node(Box, _box_flatten, _box_unflatten, namespace=_ns)
    oxtree.register_pytree_node(Bag, _bag_flatten, _bag_unflatten, namespace=_ns)
    oxtree.register_dataclass(DC, data_fields=["x", "y"], meta_fields=["m"], namespace=_ns)
    oxtree.register_static(St, namespace=_ns)
optree.register_pytree_node(Box, _box_flatten, _box_unflatten, namespace=NAMESPACE)
optree.register_pytree_node(Bag, _bag_flatten, _bag_unflatten, namespace=NAMESPACE)
optree.register_pytree_node(St, lambda s: ((), s), lambda s, _: s, namespace=NAMESPACE)


# --------------------------------------------------------------------------------------------------
# Chaos: the mutations hostile callbacks perform on the tree being walked.


class Chaos:
    """Random mutations of a case's containers, triggered from inside callbacks.

    `poke()` is called from `is_leaf`, flatten functions, key dunders, mapped functions and
    leaf iterators; each call may mutate a container, arm the hostile keys, change the
    registry, run the garbage collector or raise FuzzError.
    """

    current: Chaos | None = None  # the active instance (None: hostile objects behave)

    def __init__(self, rng: Any, containers: list[Any], budget: int) -> None:
        self.rng = rng
        self.containers = containers
        self.budget = budget
        self.armed = False

    def poke(self, in_eq: bool = False) -> None:
        if self.budget <= 0:
            return
        self.budget -= 1
        rng = self.rng
        roll = rng.random()
        if roll < 0.04:
            raise FuzzError("chaos")
        if roll < 0.10:
            self.armed = not self.armed
            return
        if roll < 0.13:
            gc.collect(rng.choice([0, 0, 1, 2]))
            return
        if roll < 0.16:
            # Change the registry mid-walk: a walk must keep the rules it started with.
            oxtree.unregister_pytree_node(Box, namespace=HOSTILE)
            oxtree.register_pytree_node(Box, _box_flatten, _box_unflatten, namespace=HOSTILE)
            return
        target = rng.choice(self.containers) if self.containers else None
        # CPython 3.11 itself reads freed memory when a key's __eq__ mutates an OrderedDict
        # that is being iterated (odictiter_iternext), or clears a list while repr() is
        # printing one of its items (list_repr and structseq_repr hold no reference to it;
        # see docs/reliability.md, findings 7 and 10), so __eq__ mutates only plain dicts,
        # whose iteration and repr CPython guards.
        if target is None or (in_eq and type(target) not in (dict, defaultdict)):
            return
        mutate(rng, target)


def mutate(rng: Any, obj: Any) -> None:
    """One random in-place change of a container."""
    new: Any = rng.choice([0, [1, 2], {"n": 3}, (4,), None, Leaf("new")])
    cls = type(obj)
    choice = rng.randrange(6)
    if cls is list:
        if choice == 0:
            obj.clear()
        elif choice == 1:
            obj.append(new)
        elif choice == 2 and obj:
            obj.pop(rng.randrange(len(obj)))
        elif choice == 3 and obj:
            obj[rng.randrange(len(obj))] = new
        elif choice == 4:
            obj.insert(0, new)
        else:
            obj.extend([new] * rng.randrange(5))
    elif cls in (dict, OrderedDict, defaultdict):
        if choice == 0:
            obj.clear()
        elif choice in (1, 4):
            obj[rng.choice(["a", "zz", 7, Key(rng.randrange(9))])] = new
        elif choice == 2 and obj:
            obj.pop(next(iter(obj)))
        elif choice == 3 and cls is OrderedDict and obj:
            obj.move_to_end(next(iter(obj)))
        elif choice == 5 and cls is defaultdict and obj.default_factory is not None:
            obj["missing" + str(rng.randrange(3))]  # __missing__ inserts
    elif cls is deque:
        if choice == 0:
            obj.clear()
        elif choice == 1:
            obj.rotate(1)
        elif choice == 2 and obj:
            obj.popleft()
        else:
            obj.append(new)
    elif cls is MutBox:
        obj.items = [new] * rng.randrange(4)


def poke(in_eq: bool = False) -> None:
    chaos = Chaos.current
    if chaos is not None:
        chaos.poke(in_eq)


def armed() -> bool:
    chaos = Chaos.current
    return chaos is not None and chaos.armed


# --------------------------------------------------------------------------------------------------
# Hostile keys and nodes (namespace "hostile", oxtree only).


class BadKey:
    """A dict key whose dunders poke the chaos and, once armed, raise."""

    __slots__ = ("v",)

    def __init__(self, v: int) -> None:
        self.v = v

    def __hash__(self) -> int:
        if armed():
            raise FuzzError("BadKey.__hash__")
        return self.v % 3  # collisions: lookups call __eq__

    def __eq__(self, other: object) -> bool:
        poke(in_eq=True)
        if armed():
            raise FuzzError("BadKey.__eq__")
        return type(other) is BadKey and other.v == self.v

    def __lt__(self, other: object) -> bool:
        if "sort-uaf" not in AVOID:
            poke()
        if armed():
            raise FuzzError("BadKey.__lt__")
        if type(other) is not BadKey:
            return NotImplemented
        return self.v < other.v

    def __repr__(self) -> str:
        if armed():
            raise FuzzError("BadKey.__repr__")
        return f"BadKey({self.v})"


class OddDict(dict):  # type: ignore[type-arg]
    """A dict subclass whose views lie: keys() and iteration disagree with the items stored."""

    def keys(self):  # type: ignore[override]
        poke()
        return ["lie", *dict.keys(self)]

    def __iter__(self):  # type: ignore[override]
        poke()
        return iter(["phantom", *dict.keys(self)])

    def __len__(self) -> int:
        return dict.__len__(self) + 1

    def __getitem__(self, key: Any) -> Any:
        poke()
        if key in ("lie", "phantom"):
            raise KeyError(key)
        return dict.__getitem__(self, key)

    def items(self):  # type: ignore[override]
        poke()
        return [("phantom", None), *dict.items(self)]

    def values(self):  # type: ignore[override]
        return [None, *dict.values(self)]


def _odd_flatten(d: OddDict) -> tuple[Any, ...]:
    # Reads through the lying views on purpose.
    keys = list(d.keys())
    return [d.get(k) for k in keys], tuple(keys[: len(keys) // 2 + 1])


def _odd_unflatten(keys: Any, children: Any) -> OddDict:
    return OddDict(zip(keys, children, strict=False))


class MutBox:
    """A node whose flatten function mutates the tree being walked."""

    __slots__ = ("items",)

    def __init__(self, items: list[Any]) -> None:
        self.items = items

    def children(self) -> list[Any]:
        return list(self.items)


def _mut_flatten(box: MutBox) -> tuple[Any, ...]:
    poke()
    items = list(box.items)
    poke()
    return items, len(items)


def _mut_unflatten(aux: Any, children: Any) -> MutBox:
    poke()
    return MutBox(list(children))


class GarbageBox:
    """A node whose flatten function returns a malformed result, chosen by `mode`."""

    __slots__ = ("mode", "payload")

    def __init__(self, mode: int, payload: Any) -> None:
        self.mode, self.payload = mode, payload


class Unhashable:
    __hash__ = None  # type: ignore[assignment]

    def __eq__(self, other: object) -> bool:
        return self is other


class HashBomb:
    """Aux data whose hash and equality raise."""

    def __hash__(self) -> int:
        raise FuzzError("HashBomb.__hash__")

    def __eq__(self, other: object) -> bool:
        raise FuzzError("HashBomb.__eq__")


class LyingLen:
    """An iterable of children whose __len__ disagrees with its iteration."""

    def __init__(self, items: list[Any], claimed: int) -> None:
        self.items, self.claimed = items, claimed

    def __len__(self) -> int:
        return self.claimed

    def __iter__(self) -> Any:
        return iter(self.items)

    def __getitem__(self, i: int) -> Any:
        return self.items[i]


def _raising_iter(items: list[Any]) -> Any:
    yield from items[:1]
    raise FuzzError("children iterator")


def _poking_iter(items: list[Any]) -> Any:
    for item in items:
        poke()
        yield item


def garbage_result(box: GarbageBox) -> Any:
    """The catalogue of malformed flatten results."""
    p = box.payload
    mode = box.mode % 24
    results = {
        0: lambda: None,
        1: lambda: 5,
        2: lambda: (),
        3: lambda: (p,),
        4: lambda: ([p], None, ["k"], "extra"),
        5: lambda: (5, None),
        6: lambda: ("ab", None),  # a str is iterable: children 'a', 'b'
        7: lambda: ({"k": p}, None),  # a dict: its keys are the children
        8: lambda: (iter([p, p]), None),
        9: lambda: (_raising_iter([p, p]), None),
        10: lambda: ([p], Unhashable()),
        11: lambda: ([p], HashBomb()),
        12: lambda: ([p, p], None, ["only-one-key"]),
        13: lambda: ([p], None, 5),
        14: lambda: ([p], None, iter(["k"])),
        15: lambda: (LyingLen([p, p], 5), None),
        16: lambda: (LyingLen([p], -1), None),
        17: lambda: ([box], None),  # itself as a child: an infinite tree
        18: lambda: ([p], None, None),
        19: lambda: [[p], None],  # a list, not a tuple
        20: lambda: (_poking_iter([p, p, p]), None),
        21: lambda: ((p, p), None, [HashBomb(), "k"]),
        22: lambda: ([p] * 1000, None),
        23: lambda: (GarbageBox(box.mode + 1, p),),
    }
    return results[mode]()


def _garbage_flatten(box: GarbageBox) -> Any:
    poke()
    return garbage_result(box)


def _garbage_unflatten(aux: Any, children: Any) -> Any:
    if armed():
        raise FuzzError("unflatten")
    return ("garbage", aux, list(children))


class RaisingBox:
    """A node whose flatten raises, or (with `on_unflatten`) whose unflatten raises."""

    __slots__ = ("on_unflatten", "payload")

    def __init__(self, payload: Any, on_unflatten: bool) -> None:
        self.payload, self.on_unflatten = payload, on_unflatten


def _raising_flatten(box: RaisingBox) -> Any:
    if not box.on_unflatten:
        raise FuzzError("flatten")
    return [box.payload], True


def _raising_unflatten(aux: Any, children: Any) -> Any:
    raise FuzzError("unflatten")


class LyingClass:
    """An object claiming, through __class__, to be a dict."""

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        return dict


class FakeNamedTuple(tuple):  # type: ignore[type-arg]
    """A tuple subclass that looks like a namedtuple to a careless check."""

    _fields = ("a", 5)
    _make = None


class FakeNamedTuple2(tuple):  # type: ignore[type-arg]
    _fields = "ab"

    @classmethod
    def _make(cls, iterable: Any) -> Any:
        raise FuzzError("_make")

    def _asdict(self) -> Any:
        raise FuzzError("_asdict")


class ListSub(list):  # type: ignore[type-arg]
    """A list subclass with a lying iteration (a leaf, unless something treats it as a list)."""

    def __iter__(self) -> Any:
        raise FuzzError("ListSub.__iter__")

    def __len__(self) -> int:
        return -1 if armed() else 3


HOSTILE_TYPES = (MutBox, GarbageBox, RaisingBox, OddDict)

oxtree.register_pytree_node(MutBox, _mut_flatten, _mut_unflatten, namespace=HOSTILE)
oxtree.register_pytree_node(GarbageBox, _garbage_flatten, _garbage_unflatten, namespace=HOSTILE)
oxtree.register_pytree_node(RaisingBox, _raising_flatten, _raising_unflatten, namespace=HOSTILE)
oxtree.register_pytree_node(OddDict, _odd_flatten, _odd_unflatten, namespace=HOSTILE)
