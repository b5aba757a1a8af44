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

from oxtree import module as _module

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing at run time
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

__all__ = ["REFUSED", "Saved", "transplant", "walk", "writable", "write_leaves"]

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


def writable(x: Any) -> bool:
    """Whether write-back updates ``x`` in place: a list, a dict, a Module or a dataclass
    instance (its ``__dict__``)."""
    return isinstance(x, list | dict | _module.Module) or (
        dataclasses.is_dataclass(x) and not isinstance(x, type) and hasattr(x, "__dict__")
    )


def walk(roots: tuple[Any, ...]) -> list[Any]:
    """The writable objects reachable from ``roots`` through tuples and writable objects,
    each once, in a fixed order (attributes by name) that two graphs of one structure share."""
    found: list[Any] = []
    seen: set[int] = set()
    stack = [roots]
    while stack:
        x = stack.pop()
        if type(x) is tuple or (isinstance(x, tuple) and hasattr(x, "_fields")):
            stack.extend(reversed(x))
            continue
        if not writable(x) or id(x) in seen:
            continue
        seen.add(id(x))
        found.append(x)
        if isinstance(x, list):
            stack.extend(reversed(x))
        elif isinstance(x, dict):
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
) -> None:
    """Makes the caller's objects ``orig`` hold what ``fresh`` holds. ``origin`` gives, for
    each object of ``walk(fresh)`` (``theirs``, when the caller has it), the index in
    ``walk(orig)`` (``mine``, likewise) of the caller's object it was rebuilt from (-1 for an
    object the function made); each
    fresh object with an origin is replaced by it, so the caller's objects keep their
    identities, and sharing and cycles among them are as the function left them."""
    if mine is None:
        mine = walk(orig)
    if theirs is None:
        theirs = walk(fresh)
    pairs: dict[int, tuple[Any, Any]] = {}
    for k, f in zip(origin, theirs, strict=True):
        if k >= 0 and type(mine[k]) is type(f):
            pairs[id(f)] = (mine[k], f)
    done: set[int] = set()

    def remap(v: Any) -> Any:
        pair = pairs.get(id(v))
        if pair is not None:
            return pair[0]
        if writable(v):
            fill(v, v)  # an object the function made: it may hold rebuilt ones
        elif type(v) is tuple:
            return tuple(map(remap, v))
        elif isinstance(v, tuple) and hasattr(v, "_fields"):
            return type(v)(*map(remap, v))
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


def write_leaves(
    roots: tuple[Any, ...],
    fresh: tuple[Any, ...],
    new: Sequence[Any],
    treedef: Any,
    reflatten: Callable[..., tuple[list[Any], Any]],
    origin: Sequence[int] | None = None,
) -> int | None:
    """Makes ``roots`` hold ``fresh`` (their copy rebuilt from ``treedef`` and the leaves
    ``new``), all or nothing. ``origin`` is as :func:`transplant` takes it; None when
    ``fresh`` has the roots' own structure, writable object for writable object.
    ``reflatten(*roots)`` flattens the roots as ``treedef`` was made.

    Returns None when the roots now flatten to ``treedef`` and exactly ``new``. Otherwise the
    roots are put back as they were (or never touched) and the result is the index of the
    first leaf they could not take, or ``len(new)`` when what differs is their structure
    (with ``origin`` None: ``fresh`` has other writable objects than the roots)."""
    mine = walk(roots)
    theirs = walk(fresh)
    if origin is None:
        origin = range(len(mine))
        if len(theirs) != len(mine):
            return len(new)
    saved = [Saved(x) for x in mine]
    transplant(roots, fresh, origin, mine, theirs)
    now, now_def = reflatten(*roots)
    if now_def == treedef and all(map(operator.is_, now, new)):
        return None
    for state in saved:
        state.restore()
    return next(
        (i for i, (a, b) in enumerate(zip(now, new, strict=False)) if a is not b),
        min(len(now), len(new)),
    )
