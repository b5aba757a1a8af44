"""Predicates on the builtin node types: namedtuples and struct sequences.

Each asks the core, which classifies tuple subclasses for the walk (``_tuple_kind``) and
names their fields (``_tuple_fields``), so these answers are the walk's own.
"""

from __future__ import annotations

from oxtree._core import PyTreeKind, _tuple_fields, _tuple_kind

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


def is_namedtuple_class(cls: Any, /) -> bool:
    """Whether ``cls`` is a namedtuple class (a tuple subclass with ``_fields`` and ``_make``).

    >>> import collections
    >>> is_namedtuple_class(collections.namedtuple('P', 'x')), is_namedtuple_class(tuple)
    (True, False)
    """
    return _tuple_kind(cls) is PyTreeKind.NAMEDTUPLE


def is_namedtuple_instance(obj: Any, /) -> bool:
    """Whether ``obj`` is an instance of a namedtuple class.

    >>> import collections
    >>> P = collections.namedtuple('P', 'x')
    >>> is_namedtuple_instance(P(1)), is_namedtuple_instance(P)
    (True, False)
    """
    return _tuple_kind(type(obj)) is PyTreeKind.NAMEDTUPLE


def is_namedtuple(obj: Any, /) -> bool:
    """Whether ``obj`` is a namedtuple class or instance.

    >>> import collections
    >>> P = collections.namedtuple('P', 'x')
    >>> is_namedtuple(P), is_namedtuple(P(1)), is_namedtuple((1,))
    (True, True, False)
    """
    return is_namedtuple_class(obj if isinstance(obj, type) else type(obj))


def namedtuple_fields(obj: Any, /) -> tuple[str, ...]:
    """The field names of a namedtuple class or instance.

    >>> import collections
    >>> namedtuple_fields(collections.namedtuple('P', 'x y'))
    ('x', 'y')
    """
    cls = obj if isinstance(obj, type) else type(obj)
    if not is_namedtuple_class(cls):
        if isinstance(obj, type):
            raise TypeError(f"Expected a collections.namedtuple type, got {obj!r}.")
        raise TypeError(f"Expected an instance of collections.namedtuple type, got {obj!r}.")
    return tuple(_tuple_fields(cls))


def is_structseq_class(cls: Any, /) -> bool:
    """Whether ``cls`` is a struct sequence class such as ``time.struct_time``.

    >>> import time
    >>> is_structseq_class(time.struct_time)
    True
    """
    return _tuple_kind(cls) is PyTreeKind.STRUCTSEQUENCE


def is_structseq_instance(obj: Any, /) -> bool:
    """Whether ``obj`` is a struct sequence.

    >>> import time
    >>> is_structseq_instance(time.gmtime(0)), is_structseq_instance(time.struct_time)
    (True, False)
    """
    return _tuple_kind(type(obj)) is PyTreeKind.STRUCTSEQUENCE


def is_structseq(obj: Any, /) -> bool:
    """Whether ``obj`` is a struct sequence class or instance.

    >>> import time
    >>> is_structseq(time.struct_time), is_structseq(time.gmtime(0)), is_structseq((1,))
    (True, True, False)
    """
    return is_structseq_class(obj if isinstance(obj, type) else type(obj))


# What CPython (and optree) call a struct sequence field that has no name.
PyStructSequence_UnnamedField = "unnamed field"


def structseq_fields(obj: Any, /) -> tuple[str, ...]:
    """The names of a struct sequence's visible fields, one per item of an instance.

    An unnamed field (``os.stat_result``'s integer times) is :data:`PyStructSequence_UnnamedField`.

    >>> import os, time
    >>> structseq_fields(time.struct_time)[:2]
    ('tm_year', 'tm_mon')
    >>> structseq_fields(os.stat_result)[6:8]
    ('st_size', 'unnamed field')
    """
    cls = obj if isinstance(obj, type) else type(obj)
    if not is_structseq_class(cls):
        if isinstance(obj, type):
            raise TypeError(f"Expected a PyStructSequence type, got {obj!r}.")
        raise TypeError(f"Expected an instance of PyStructSequence type, got {obj!r}.")
    return tuple(
        PyStructSequence_UnnamedField if name is None else name
        for name in _tuple_fields(cls, unnamed=True)
    )


# optree keeps a C++ and a Python implementation of each predicate and exposes both; oxtree
# has one (the core's), reachable under both names.
for _f in (
    is_namedtuple,
    is_namedtuple_class,
    is_namedtuple_instance,
    namedtuple_fields,
    is_structseq,
    is_structseq_class,
    is_structseq_instance,
    structseq_fields,
):
    _f.__cxx_implementation__ = _f.__python_implementation__ = _f  # type: ignore[attr-defined]
del _f
