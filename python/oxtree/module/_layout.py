"""The static part of a module: its kinds (:class:`Kind`, the ``Parameter`` and ``State``
annotations), its layout (which attribute has which kind) and its configuration, together its
aux data (:class:`_ModuleDef`). Both are immutable and shared between a module and its
tree_map copies; a module holds its aux data in one slot."""

from __future__ import annotations

import enum
import re
import sys
import typing
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import Annotated, Any, Self, TypeVar

from oxtree import _core
from oxtree._arrays import is_array, is_shaped
from oxtree._core import GetAttrKey
from oxtree.module._axes import Axes

_T = TypeVar("_T")


class Kind(enum.Enum):
    """The kind of a module attribute.

    ``PARAMETER`` (trainable) and ``STATE`` (not trainable) attributes hold leaves,
    ``MODULE`` attributes hold submodules, ``OTHERS`` (the default for anything unregistered)
    is static configuration kept in the treedef.

    Kinds are open: :meth:`define` makes a new one (batch statistics, a cache, ...) whose
    attributes hold leaves, as ``STATE``'s do; register them with :meth:`Module.register_kind`
    or annotate them ``Annotated[T, kind]``, and pick them out with :meth:`Module.select`.

    >>> Kind.PARAMETER, Kind('state')
    (<Kind.PARAMETER: 'parameter'>, <Kind.STATE: 'state'>)
    >>> Kind.define('batch_stats'), Kind('batch_stats') is Kind.define('batch_stats')
    (<Kind.BATCH_STATS: 'batch_stats'>, True)
    """

    PARAMETER = "parameter"
    STATE = "state"
    MODULE = "module"
    OTHERS = "others"

    @classmethod
    def define(cls, name: str) -> Kind:
        """The kind named ``name`` (an identifier), made on first use; ``Kind(name)`` finds
        it afterwards (and in a pickle's loading process once defined there)."""
        if not isinstance(name, str) or not name.isidentifier():
            raise TypeError(f"Kind.define expects an identifier, got {name!r}")
        known = cls._value2member_map_.get(name)
        if known is not None:
            return known  # type: ignore[return-value]
        kind = object.__new__(cls)
        kind._value_ = name
        kind._name_ = name.upper()
        kind._sort_order_ = len(cls._value2member_map_)  # type: ignore[attr-defined]
        cls._value2member_map_[name] = kind
        return kind


# Annotation markers. An alias has no docstring syntax, so each gets its ``__doc__`` set, and
# its ``__module__`` (from 3.12 on an alias says ``typing``; documentation tools, doctest
# included, then skip it as not defined here).
Parameter = Annotated[_T, Kind.PARAMETER]

Parameter.__doc__ = """Marks a parameter field: ``weight: Parameter`` or ``Parameter[float]``.

A parameter (trainable) attribute holds leaves, as if set with ``register_parameter``.

>>> import oxtree
>>> class Scale(Module):
...     factor: Parameter[float]
...     def __init__(self, factor):
...         self.factor = factor
>>> s = Scale(2.0)
>>> dict(s.name_to_kind), oxtree.tree_leaves(s)
({'factor': <Kind.PARAMETER: 'parameter'>}, [2.0])
"""

Parameter.__module__ = "oxtree.module"  # its public home

State = Annotated[_T, Kind.STATE]

State.__doc__ = """Marks a state field: ``count: State`` or ``State[int]``.

A state (not trainable) attribute holds leaves, as if set with ``register_state``.

>>> import oxtree
>>> class Counter(Module):
...     count: State[int]
...     def __init__(self):
...         self.count = 0
>>> c = Counter()
>>> dict(c.name_to_kind), oxtree.tree_map(lambda n: n + 1, c).count
({'count': <Kind.STATE: 'state'>}, 1)
"""

State.__module__ = "oxtree.module"


class _Layout:
    """The tree attributes of a module, in registration order, with their kinds and the
    :class:`Axes` (sharding annotation) of those that have one."""

    __slots__ = (
        "_hash",
        "keys",
        "kinds",
        "name_to_axes",
        "name_to_kind",
        "names",
        "stale",
    )

    def __init__(
        self, items: tuple[tuple[str, Kind], ...], axes: Mapping[str, Axes] | None = None
    ) -> None:
        self.names: tuple[str, ...] = tuple(n for n, _ in items)
        self.kinds: tuple[Kind, ...] = tuple(k for _, k in items)
        self.name_to_kind: Mapping[str, Kind] = MappingProxyType(dict(items))
        # Only annotated attributes, in registration order.
        self.name_to_axes: Mapping[str, Axes] = MappingProxyType(
            {n: axes[n] for n in self.names if n in axes} if axes else {}
        )
        self.keys = tuple(GetAttrKey(n) for n in self.names)
        self._hash = hash((self.names, self.kinds, tuple(self.name_to_axes.items())))
        # The aux data of a module with this layout whose configuration must be read again.
        self.stale = _ModuleDef(self, None)

    def with_kind(self, name: str, kind: Kind, axes: Axes | None = None) -> _Layout:
        more = {name: axes} if axes is not None else {}
        return _Layout((*self.items(), (name, kind)), {**self.name_to_axes, **more})

    def without(self, name: str) -> _Layout:
        return _Layout(tuple(item for item in self.items() if item[0] != name), self.name_to_axes)

    def items(self) -> Iterator[tuple[str, Kind]]:
        return zip(self.names, self.kinds, strict=True)

    def __eq__(self, other: object) -> bool:
        return self is other or (
            isinstance(other, _Layout)
            and self.names == other.names
            and self.kinds == other.kinds
            and self.name_to_axes == other.name_to_axes
        )

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple[Any, ...]:
        return (_Layout, (tuple(self.items()), dict(self.name_to_axes)))

    def __repr__(self) -> str:
        axes = self.name_to_axes
        return ", ".join(
            f"{n}: {k.name}" + (f" {axes[n]!r}" if n in axes else "") for n, k in self.items()
        )


class _Identity:
    """An unhashable configuration value, compared by identity."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Identity) and self.value is other.value

    def __hash__(self) -> int:
        return id(self.value)


def _static_key(value: Any, where: Callable[[], str]) -> Any:
    """A hashable stand-in for a configuration value, equal for equal configurations.

    Hashable values stand for themselves; lists, tuples, dicts and sets holding unhashable
    values compare by content; arrays are refused (they belong in the leaves); anything else
    compares by identity.
    """
    try:
        hash(value)
    except TypeError:
        pass
    else:
        return value
    if isinstance(value, list | tuple):
        return (type(value), tuple(_static_key(v, where) for v in value))
    if isinstance(value, dict):
        return (type(value), tuple((k, _static_key(v, where)) for k, v in value.items()))
    if isinstance(value, set):
        return (set, frozenset(value))
    if is_array(value):
        raise TypeError(
            f"{where()} holds an array ({value.dtype}{list(value.shape)}) but is not registered, "
            "so it would be static configuration in the treedef. Register it with "
            "register_parameter or register_state (or annotate it Parameter or State)."
        )
    return _Identity(value)


class _ModuleDef(_core._ModuleDef):
    """A module's aux data: its layout and its configuration, the ``OTHERS`` attributes
    sorted by name (None in a layout's ``stale`` instance: read them from the module).

    The core holds it and walks modules by it (``oxtree._core._ModuleDef``); this class makes
    the configuration's hashable stand-in (``_static_key``) that equality and the hash read.
    """

    __slots__ = ()

    def __new__(cls, layout: _Layout, others: dict[str, Any] | None, owner: str = "module") -> Self:
        key = (
            None
            if others is None
            else tuple(
                (n, _static_key(v, lambda n=n: f"{owner}.{n}"))  # type: ignore[misc]
                for n, v in others.items()
            )
        )
        return super().__new__(cls, layout, layout.names, layout.kinds, layout.keys, others, key)

    def __repr__(self) -> str:
        config = ", ".join(f"{n}={_short_repr(v)}" for n, v in (self.others or {}).items())
        return f"<{self.layout}; {config}>" if self.names else f"<{config}>"


_EMPTY = _Layout(())

_MISSING = object()

_ANNOTATION_STRING = re.compile(r"^\s*(?:\w+\.)*(Parameter|State)\b")


def _globals_of(klass: type) -> dict[str, Any]:
    """The globals of the first function defined in ``klass`` (empty when it has none)."""
    for value in vars(klass).values():
        names = getattr(value, "__globals__", None)
        if isinstance(names, dict):
            return dict(names)
    return {}


def _annotation_kind(klass: type, name: str, ann: Any) -> tuple[Kind | None, Axes | None]:
    """The kind an annotation gives, and the :class:`Axes` it carries (if any)."""
    if isinstance(ann, str):
        module = sys.modules.get(klass.__module__)
        # A module loaded from a file without a sys.modules entry: its functions' globals.
        found = dict(vars(module)) if module else _globals_of(klass)
        try:
            ann = eval(ann, found, dict(vars(klass)))
        except Exception:
            match = _ANNOTATION_STRING.match(ann)
            return (
                Kind.PARAMETER
                if match and match[1] == "Parameter"
                else (Kind.STATE if match else None)
            ), None
    if typing.get_origin(ann) is not Annotated:
        return None, None
    kinds = [m for m in ann.__metadata__ if isinstance(m, Kind)]
    if not kinds:
        return None, None
    axes = [m for m in ann.__metadata__ if isinstance(m, Axes)]
    if len(axes) > 1:
        raise TypeError(
            f"{klass.__qualname__}.{name}: an annotation may carry one Axes, got {axes}"
        )
    if len(kinds) > 1 or kinds[0] is Kind.OTHERS:
        raise TypeError(
            f"{klass.__qualname__}.{name}: an annotation may carry one of PARAMETER, STATE, "
            "MODULE or a kind made by Kind.define (OTHERS is the default: leave the "
            f"annotation plain), got {kinds}"
        )
    if axes and kinds[0] is Kind.MODULE:
        _checked_axes(axes[0], Kind.MODULE, None, f"{klass.__qualname__}.{name}")
    return kinds[0], (axes[0] if axes else None)


def _checked_axes(sharding: Any, kind: Kind, value: Any, where: str) -> Axes:
    """``sharding`` as an :class:`Axes` for an attribute of kind ``kind`` holding ``value``
    (checked against it when it is an array or an abstract one)."""
    if kind is Kind.MODULE:
        raise TypeError(
            f"{where}: a sharding lays out the arrays of a PARAMETER, STATE or user-defined "
            "kind; a MODULE's own attributes carry theirs"
        )
    axes = Axes.of(sharding, where)
    if is_shaped(value):
        axes.check_rank(len(value.shape), where)
    return axes


def _short_repr(value: Any) -> str:
    """A configuration value in a treedef's repr: functions by name, not by address."""
    text = repr(value)
    name = getattr(value, "__qualname__", None) or getattr(value, "__name__", None)
    if text.startswith("<") and callable(value) and isinstance(name, str):
        return name
    return text
