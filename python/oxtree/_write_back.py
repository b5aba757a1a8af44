"""Writing new leaves back into the caller's objects, in place: the one rule that
``oxtree.jax``'s filtered transforms and :meth:`oxtree.FlatTree.write_back` share.

New leaves become a fresh copy of the caller's objects (rebuilt from a treedef or a graphdef,
by the caller of :func:`write_leaves`), and the fresh copy is transplanted into the caller's
objects: each writable object (a list, a dict, a Module, a dataclass instance) takes the
contents of the fresh object rebuilt from it, so it keeps its identity; everything else (a
tuple, an object rebuilt from its children) is replaced inside its writable holder. What the
caller's objects cannot take (a change inside a tuple at the top of a root, say) is found by
flattening them again; they are then put back as they were, and the caller reports it.

No JAX here: a flat tree writes back without it.
"""

from __future__ import annotations

import dataclasses
import operator

from oxtree.module import _module

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing at run time
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence, Set
    from typing import Any

__all__ = [
    "REFUSED",
    "Saved",
    "container_leaves",
    "first_difference",
    "transplant",
    "walk",
    "writable",
    "write_leaves",
]

#: Why a change could not be written back, for the callers' messages.
REFUSED = (
    "only Modules, lists, dicts and dataclass instances are updated in place, and this change "
    "lies inside a tuple or another object that is rebuilt rather than mutated"
)


class Saved:
    """The contents of one writable object (and a Module's aux data), to put back."""

    __slots__ = ("aux", "contents", "obj")

    def __init__(self, obj: Any) -> None:
        self.obj = obj
        self.aux = obj._oxtree_def if isinstance(obj, _module.Module) else None
        if isinstance(obj, list):
            self.contents: Any = list(obj)
        else:
            self.contents = dict(obj if isinstance(obj, dict) else vars(obj))

    def restore(self) -> None:
        obj = self.obj
        if isinstance(obj, list):
            obj[:] = self.contents
            return
        target = obj if isinstance(obj, dict) else vars(obj)
        target.clear()
        target.update(self.contents)
        if self.aux is not None:
            _module._DEF_SLOT.__set__(obj, self.aux)


# How the write-back sees an object, by its type (the answer is cached per type: the walks
# visit every leaf, and a dict lookup is what a leaf should cost).
_OTHER, _SEQUENCE, _LIST, _DICT, _ATTRS = range(5)
_KINDS: dict[type, int] = {}


def _kind_of(ty: type) -> int:
    kind = _KINDS.get(ty)
    if kind is None:
        if ty is tuple or (issubclass(ty, tuple) and hasattr(ty, "_fields")):
            kind = _SEQUENCE  # walked through, rebuilt rather than mutated
        elif issubclass(ty, list):
            kind = _LIST
        elif issubclass(ty, dict):
            kind = _DICT
        elif issubclass(ty, _module.Module) or (
            dataclasses.is_dataclass(ty) and ty.__dictoffset__ != 0
        ):
            kind = _ATTRS  # its __dict__ is written
        else:
            kind = _OTHER
        _KINDS[ty] = kind
    return kind


def writable(x: Any) -> bool:
    """Whether write-back updates ``x`` in place: a list, a dict, a Module or a dataclass
    instance (its ``__dict__``)."""
    return _kind_of(type(x)) >= _LIST


def walk(roots: tuple[Any, ...], opaque: Set[int] = frozenset()) -> list[Any]:
    """The writable objects reachable from ``roots`` through tuples and writable objects,
    each once, in a fixed order (attributes by name) that two graphs of one structure share.
    Objects whose ids are in ``opaque`` (leaves) are neither taken nor walked through."""
    found: list[Any] = []
    seen: set[int] = set()
    stack = [roots]
    kinds = _KINDS
    while stack:
        x = stack.pop()
        kind = kinds.get(type(x))
        if kind is None:
            kind = _kind_of(type(x))
        if kind == _OTHER or (opaque and id(x) in opaque):
            continue
        if kind == _SEQUENCE:
            stack.extend(reversed(x))
            continue
        if id(x) in seen:
            continue
        seen.add(id(x))
        found.append(x)
        if kind == _LIST:
            stack.extend(reversed(x))
        elif kind == _DICT:
            stack.extend(reversed(list(x.values())))
        else:
            state = vars(x)
            stack.extend(state[k] for k in sorted(state, reverse=True))
    return found


def transplant(
    orig: tuple[Any, ...],
    fresh: tuple[Any, ...],
    origin: Sequence[int],
    mine: list[Any] | None = None,
    theirs: list[Any] | None = None,
    opaque: Set[int] = frozenset(),
) -> None:
    """Makes the caller's objects ``orig`` hold what ``fresh`` holds. ``origin`` gives, for
    each object of ``walk(fresh)`` (``theirs``, when the caller has it), the index in
    ``walk(orig)`` (``mine``, likewise) of the caller's object it was rebuilt from (-1 for an
    object the function made); each
    fresh object with an origin is replaced by it, so the caller's objects keep their
    identities, and sharing and cycles among them are as the function left them. Objects
    whose ids are in ``opaque`` (leaves: ``walk`` left them out) are placed as they are."""
    if mine is None:
        mine = walk(orig, opaque)
    if theirs is None:
        theirs = walk(fresh, opaque)
    pairs: dict[int, tuple[Any, Any]] = {}
    for k, f in zip(origin, theirs, strict=True):
        if k >= 0 and type(mine[k]) is type(f):
            pairs[id(f)] = (mine[k], f)
    done: set[int] = set()

    kinds = _KINDS

    def remap(v: Any) -> Any:
        pair = pairs.get(id(v))
        if pair is not None:
            return pair[0]
        if opaque and id(v) in opaque:
            return v
        kind = kinds.get(type(v))
        if kind is None:
            kind = _kind_of(type(v))
        if kind >= _LIST:
            fill(v, v)  # an object the function made: it may hold rebuilt ones
        elif kind == _SEQUENCE:
            return tuple(map(remap, v)) if type(v) is tuple else type(v)(*map(remap, v))
        return v

    def fill(target: Any, source: Any) -> None:
        if id(source) in done:
            return
        done.add(id(source))
        if isinstance(source, list):
            target[:] = [remap(x) for x in source]
        elif isinstance(source, dict):
            items = [(k, remap(x)) for k, x in source.items()]
            target.clear()
            target.update(items)
        else:
            contents = {k: remap(x) for k, x in vars(source).items()}
            if isinstance(source, _module.Module):
                _module._DEF_SLOT.__set__(target, source._oxtree_def)
            state = vars(target)
            state.clear()
            state.update(contents)

    for o, f in list(pairs.values()):
        fill(o, f)


def container_leaves(*leaf_lists: Sequence[Any]) -> set[int]:
    """The ids of the leaves that a walk would take or walk through (lists, tuples, ... that
    an ``is_leaf`` made leaves): they are values to place, not objects to update."""
    found: set[int] = set()
    for leaves in leaf_lists:
        if any(_kind_of(ty) != _OTHER for ty in set(map(type, leaves))):
            found.update(id(x) for x in leaves if _kind_of(type(x)) != _OTHER)
    return found


def write_leaves(
    roots: tuple[Any, ...],
    fresh: tuple[Any, ...],
    new: Sequence[Any],
    treedef: Any,
    reflatten: Callable[..., tuple[list[Any], Any]],
    origin: Sequence[int] | None = None,
    opaque: Set[int] = frozenset(),
) -> int | None:
    """Makes ``roots`` hold ``fresh`` (their copy rebuilt from ``treedef`` and the leaves
    ``new``), all or nothing. ``origin`` is as :func:`transplant` takes it; None when
    ``fresh`` has the roots' own structure, writable object for writable object.
    ``reflatten(*roots)`` flattens the roots as ``treedef`` was made. ``opaque`` holds the
    ids of leaves (old and new) that are containers (:func:`container_leaves`).

    Returns None when the roots now flatten to ``treedef`` and exactly ``new``. Otherwise the
    roots are put back as they were (or never touched) and the result is the index of the
    first leaf they could not take, or ``len(new)`` when what differs is their structure
    (with ``origin`` None: ``fresh`` has other writable objects than the roots)."""
    mine = walk(roots, opaque)
    theirs = walk(fresh, opaque)
    if origin is None:
        origin = range(len(mine))
        if len(theirs) != len(mine):
            return len(new)
    saved = [Saved(x) for x in mine]
    transplant(roots, fresh, origin, mine, theirs, opaque)
    now, now_def = reflatten(*roots)
    if now_def == treedef and all(map(operator.is_, now, new)):
        return None
    for state in saved:
        state.restore()
    return first_difference(now, new)


def first_difference(a: Sequence[Any], b: Sequence[Any]) -> int:
    """The first index at which ``a`` and ``b`` hold different objects (the shorter one's
    length when one is a prefix of the other)."""
    return next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x is not y), min(len(a), len(b))
    )
