"""Filters: predicates on ``(path, kind, leaf)`` that pick leaves of a module's graph, for
:meth:`Module.select`, :meth:`Module.state_dict` and :class:`oxtree.jax.StateAxes`."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from oxtree._core import PathPattern
from oxtree.module._layout import Kind

_T = TypeVar("_T")


class _Leaves:
    """The leaves of a module's graph as filters see them, each column made when first asked
    for: a path pattern needs neither the paths nor the kinds. ``kinds_of(root, graphdef)``
    gives the kinds (the Module's own function, ``_leaf_kinds``: the filters know no Module)."""

    __slots__ = ("_kinds", "_paths", "graphdef", "kinds_of", "leaves", "root")

    def __init__(
        self,
        root: Any,
        graphdef: Any,
        leaves: list[Any],
        kinds_of: Callable[[Any, Any], list[Kind | None]],
    ) -> None:
        self.root, self.graphdef, self.leaves = root, graphdef, leaves
        self.kinds_of = kinds_of
        self._paths: list[tuple[Any, ...]] | None = None
        self._kinds: list[Kind | None] | None = None

    @property
    def paths(self) -> list[tuple[Any, ...]]:
        if self._paths is None:
            self._paths = self.graphdef.paths()
        return self._paths

    @property
    def kinds(self) -> list[Kind | None]:
        if self._kinds is None:
            self._kinds = self.kinds_of(self.root, self.graphdef)
        return self._kinds


def _mask_of(f: Any, at: _Leaves, ask: list[bool]) -> list[bool]:
    """Whether filter ``f`` accepts each leaf of ``at`` where ``ask`` says to ask it (False
    elsewhere, without asking): filters joined by All, AnyOf and Not are asked about the
    leaves the ones before them left open, as ``all`` and ``any`` would, so a filter after
    ``OfType(jax.Array)`` sees arrays only."""
    if isinstance(f, _Filter):
        return f._mask(at, ask)
    return [
        a and bool(f(path, kind, leaf))
        for a, path, kind, leaf in zip(ask, at.paths, at.kinds, at.leaves, strict=True)
    ]


class _Filter:
    __slots__ = ()

    def __call__(self, path: tuple[Any, ...], kind: Kind | None, leaf: Any) -> bool:
        raise NotImplementedError

    def _mask(self, at: _Leaves, ask: list[bool]) -> list[bool]:
        """Whether this filter accepts each leaf of ``at`` where ``ask`` is true (see
        ``_mask_of``); one call per leaf unless a subclass knows better."""
        return [
            a and bool(self(path, kind, leaf))
            for a, path, kind, leaf in zip(ask, at.paths, at.kinds, at.leaves, strict=True)
        ]

    def __repr__(self) -> str:
        args = ", ".join(repr(getattr(self, n)) for n in self.__slots__)
        return f"{type(self).__name__}({args})"


def _as_filter(f: Any) -> Callable[[tuple[Any, ...], Kind | None, Any], bool]:
    if isinstance(f, _Filter):
        return f
    if isinstance(f, Kind):
        return OfKind(f)
    if isinstance(f, bool):
        return lambda path, kind, leaf: f
    if isinstance(f, type):
        return OfType(f)
    if callable(f):
        return f  # type: ignore[no-any-return]
    if isinstance(f, PathPattern):
        return _Matches(f)
    hint = f"; for a path pattern write PathPattern({f!r})" if isinstance(f, str) else ""
    raise TypeError(
        "a module filter is a Kind, a type, a bool, a function of (path, kind, leaf), a "
        "PathPattern or a filter such as OfKind or PathContains, got "
        f"{type(f).__name__}: {f!r}{hint}"
    )


class _Matches(_Filter):
    """Accepts the leaves whose key path matches a :class:`oxtree.PathPattern`; a module's
    leaves are matched all at once by the core (``PathPattern._leaf_mask``)."""

    __slots__ = ("pattern",)

    def __init__(self, pattern: PathPattern) -> None:
        self.pattern = pattern

    def __call__(self, path: tuple[Any, ...], kind: Kind | None, leaf: Any) -> bool:
        return self.pattern.match(path)

    def _mask(self, at: _Leaves, ask: list[bool]) -> list[bool]:
        matched = self.pattern._leaf_mask(at.graphdef)
        return [a and m for a, m in zip(ask, matched, strict=True)]

    def __repr__(self) -> str:
        return repr(self.pattern)


def _all_of(items: tuple[_T, ...], cls: type, message: str) -> tuple[_T, ...]:
    for x in items:
        if not isinstance(x, cls):
            raise TypeError(f"{message}, got {type(x).__name__}: {x!r}")
    return items


class OfKind(_Filter):
    """Accepts the leaves held by attributes of any of ``kinds``.

    >>> OfKind(Kind.STATE)((), Kind.STATE, 0), OfKind(Kind.STATE)((), Kind.PARAMETER, 0)
    (True, False)
    """

    __slots__ = ("kinds",)

    def __init__(self, *kinds: Kind) -> None:
        self.kinds = frozenset(_all_of(kinds, Kind, "OfKind expects Kinds"))

    def __call__(self, path: tuple[Any, ...], kind: Kind | None, leaf: Any) -> bool:
        return kind in self.kinds

    def __repr__(self) -> str:
        return f"OfKind({', '.join(sorted(k.name for k in self.kinds))})"


class OfType(_Filter):
    """Accepts the leaves that are instances of any of ``types``.

    >>> OfType(float)((), None, 1.0), OfType(float)((), None, 1)
    (True, False)
    """

    __slots__ = ("types",)

    def __init__(self, *types: type) -> None:
        self.types = _all_of(types, type, "OfType expects types")

    def __call__(self, path: tuple[Any, ...], kind: Kind | None, leaf: Any) -> bool:
        return isinstance(leaf, self.types)


class PathContains(_Filter):
    """Accepts the leaves whose key path has an entry named ``key`` (an attribute name, a
    dict key or a sequence index).

    >>> from oxtree import GetAttrKey, SequenceKey
    >>> PathContains('enc')((GetAttrKey('enc'), SequenceKey(0)), None, 1.0)
    True
    """

    __slots__ = ("key",)

    def __init__(self, key: Any) -> None:
        self.key = key

    def __call__(self, path: tuple[Any, ...], kind: Kind | None, leaf: Any) -> bool:
        key = self.key
        for entry in path:
            value = getattr(entry, "name", getattr(entry, "key", getattr(entry, "idx", entry)))
            if type(value) is type(key) and value == key:
                return True
        return False


class _Combined(_Filter):
    """Filters joined by ``_join`` (``all`` or ``any``)."""

    __slots__ = ("filters",)
    _join: Callable[[Iterator[bool]], bool]

    def __init__(self, *filters: Any) -> None:
        self.filters = tuple(map(_as_filter, filters))

    def __call__(self, path: tuple[Any, ...], kind: Kind | None, leaf: Any) -> bool:
        return type(self)._join(f(path, kind, leaf) for f in self.filters)

    def _mask(self, at: _Leaves, ask: list[bool]) -> list[bool]:
        if type(self)._join is all:  # each filter asked where all before it accepted
            for f in self.filters:
                ask = _mask_of(f, at, ask)
            return ask
        accepted = [False] * len(ask)  # any: each filter asked where none before accepted
        for f in self.filters:
            hit = _mask_of(f, at, ask)
            accepted = [a or h for a, h in zip(accepted, hit, strict=True)]
            ask = [a and not h for a, h in zip(ask, hit, strict=True)]
        return accepted


class All(_Combined):
    """Accepts the leaves every one of ``filters`` accepts (all leaves when none is given).

    >>> All(Kind.PARAMETER, float)((), Kind.PARAMETER, 1.0)
    True
    """

    __slots__ = ()
    _join = all


class AnyOf(_Combined):
    """Accepts the leaves at least one of ``filters`` accepts.

    >>> AnyOf(Kind.PARAMETER, Kind.STATE)((), Kind.STATE, 0)
    True
    """

    __slots__ = ()
    _join = any


class Not(_Filter):
    """Accepts the leaves ``filter`` rejects.

    >>> Not(Kind.PARAMETER)((), Kind.STATE, 0)
    True
    """

    __slots__ = ("filter",)

    def __init__(self, filter: Any) -> None:
        self.filter = _as_filter(filter)

    def __call__(self, path: tuple[Any, ...], kind: Kind | None, leaf: Any) -> bool:
        return not self.filter(path, kind, leaf)

    def _mask(self, at: _Leaves, ask: list[bool]) -> list[bool]:
        inner = _mask_of(self.filter, at, ask)
        return [a and not m for a, m in zip(ask, inner, strict=True)]
