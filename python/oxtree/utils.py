"""Small helpers, as ``optree.utils`` offers them."""

from __future__ import annotations

from operator import itemgetter

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing at run time
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from typing import Any, TypeVar

    T = TypeVar("T")
    S = TypeVar("S")

__all__ = ["safe_zip", "total_order_sorted", "unzip2"]


def total_order_sorted(
    iterable: Iterable[T],
    /,
    *,
    key: Callable[[T], Any] | None = None,
    reverse: bool = False,
) -> list[T]:
    """Sorts items that may not compare with each other, by the rule dict keys are sorted by.

    Items sort by ``<``; items of types that do not compare (a ``TypeError``) sort by the
    qualified name of their type, then by value; if even that fails, the input order is kept.
    ``key`` runs once per item.

    >>> total_order_sorted([2, 'b', 1, 'a'])
    [1, 2, 'a', 'b']
    """
    items = list(iterable)
    keys = items if key is None else [key(x) for x in items]
    pairs = list(zip(keys, items, strict=True))

    def by_type(pair: tuple[Any, T]) -> tuple[str, Any]:
        cls = type(pair[0])
        return (f"{cls.__module__}.{cls.__qualname__}", pair[0])

    # `sorted` on a copy: a comparison that raises leaves a list half-sorted.
    try:
        ordered = sorted(pairs, key=itemgetter(0), reverse=reverse)
    except TypeError:
        try:
            ordered = sorted(pairs, key=by_type, reverse=reverse)
        except TypeError:
            return items
    return [x for _, x in ordered]


def safe_zip(*args: Iterable[Any]) -> zip[tuple[Any, ...]]:
    """``zip`` of sequences that must have the same length (else ``ValueError``).

    >>> list(safe_zip([1, 2], 'ab'))
    [(1, 'a'), (2, 'b')]
    """
    sequences = [list(a) if not hasattr(a, "__len__") else a for a in args]
    if len({len(s) for s in sequences}) > 1:  # type: ignore[arg-type]
        lengths = ", ".join(str(len(s)) for s in sequences)  # type: ignore[arg-type]
        raise ValueError(f"length mismatch: {lengths}")
    return zip(*sequences, strict=True)


def unzip2(xys: Iterable[tuple[T, S]], /) -> tuple[tuple[T, ...], tuple[S, ...]]:
    """Splits pairs into two tuples.

    >>> unzip2([(1, 'a'), (2, 'b')])
    ((1, 2), ('a', 'b'))
    """
    xs: list[T] = []
    ys: list[S] = []
    for x, y in xys:
        xs.append(x)
        ys.append(y)
    return tuple(xs), tuple(ys)
