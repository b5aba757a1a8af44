"""Predicates on the builtin node types: namedtuples and struct sequences."""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing at run time
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "is_namedtuple",
    "is_namedtuple_class",
    "is_namedtuple_instance",
    "is_structseq",
    "is_structseq_class",
    "is_structseq_instance",
    "namedtuple_fields",
    "structseq_fields",
]


def is_namedtuple_class(cls: Any) -> bool:
    """Whether ``cls`` is a namedtuple class (a tuple subclass with ``_fields`` and ``_make``).

    >>> import collections
    >>> is_namedtuple_class(collections.namedtuple('P', 'x')), is_namedtuple_class(tuple)
    (True, False)
    """
    return (
        isinstance(cls, type)
        and issubclass(cls, tuple)
        and isinstance(getattr(cls, "_fields", None), tuple)
        and all(isinstance(f, str) for f in cls._fields)
        and callable(getattr(cls, "_make", None))
    )


def is_namedtuple_instance(obj: Any) -> bool:
    """Whether ``obj`` is an instance of a namedtuple class."""
    return is_namedtuple_class(type(obj))


def is_namedtuple(obj: Any) -> bool:
    """Whether ``obj`` is a namedtuple class or instance."""
    return is_namedtuple_class(obj if isinstance(obj, type) else type(obj))


def namedtuple_fields(obj: Any) -> tuple[str, ...]:
    """The field names of a namedtuple class or instance."""
    cls = obj if isinstance(obj, type) else type(obj)
    if not is_namedtuple_class(cls):
        raise TypeError(f"expected a namedtuple class or instance, got {obj!r}")
    return cls._fields  # type: ignore[no-any-return, attr-defined]


def is_structseq_class(cls: Any) -> bool:
    """Whether ``cls`` is a struct sequence class such as ``time.struct_time``.

    >>> import time
    >>> is_structseq_class(time.struct_time)
    True
    """
    return (
        isinstance(cls, type)
        and issubclass(cls, tuple)
        and not cls.__flags__ & (1 << 10)  # Py_TPFLAGS_BASETYPE: struct sequences are final
        and all(
            type(getattr(cls, name, None)) is int
            for name in ("n_fields", "n_sequence_fields", "n_unnamed_fields")
        )
    )


def is_structseq_instance(obj: Any) -> bool:
    """Whether ``obj`` is a struct sequence."""
    return is_structseq_class(type(obj))


def is_structseq(obj: Any) -> bool:
    """Whether ``obj`` is a struct sequence class or instance."""
    return is_structseq_class(obj if isinstance(obj, type) else type(obj))


def structseq_fields(obj: Any) -> tuple[str, ...]:
    """The visible field names of a struct sequence class or instance."""
    cls = obj if isinstance(obj, type) else type(obj)
    if not is_structseq_class(cls):
        raise TypeError(f"expected a struct sequence class or instance, got {obj!r}")
    return tuple(cls.__match_args__)  # type: ignore[attr-defined]
