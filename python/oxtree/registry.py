"""Registering custom pytree node types.

Every registration lives in one registry shared by both faces (``oxtree`` and
``oxtree.tree_util``). A type registered in a namespace is a node only in calls that pass
that namespace (``namespace=...``); the empty namespace is the global one, seen by all calls.
"""

from __future__ import annotations

import contextlib
import functools
import threading

from oxtree import _core
from oxtree._core import (
    GLOBAL_NAMESPACE,
    _register_dataclass_fields,
    register_static,
    registered_types,
    unregister_pytree_node,
)

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing at run time
if TYPE_CHECKING:
    import dataclasses
    from collections.abc import Callable, Iterable, Iterator
    from typing import Any, TypeVar

    _C = TypeVar("_C", bound=type)

# optree's module-level name for the global namespace (its tests import it).
__GLOBAL_NAMESPACE = GLOBAL_NAMESPACE

__all__ = [
    "GLOBAL_NAMESPACE",
    "PyTreeNodeRegistryEntry",
    "dict_insertion_ordered",
    "register_dataclass",
    "register_pytree_node",
    "register_pytree_node_class",
    "register_static",
    "registered_types",
    "unregister_pytree_node",
    "use_jax_registry",
]


def register_pytree_node(
    cls: type,
    /,
    flatten_func: Callable[..., Any],
    unflatten_func: Callable[..., Any],
    *,
    path_entry_type: type | None = None,
    flatten_with_keys_func: Callable[..., Any] | None = None,
    namespace: str = GLOBAL_NAMESPACE,
) -> type:
    """Registers ``cls`` as a pytree node with user flatten and unflatten functions.

    ``flatten_func(obj)`` returns ``(children, aux_data)`` (JAX) or ``(children, aux_data,
    entries)`` (optree); ``unflatten_func(aux_data, children)`` rebuilds the object.
    ``path_entry_type`` (a :class:`~oxtree.PyTreeEntry` subclass) is the entry class of the
    accessors of its children; by default it is chosen from what ``cls`` is, as
    :class:`~oxtree.AutoEntry` does. The empty namespace is the global one. Returns ``cls``.
    ``register_pytree_node.get(cls, namespace=...)`` looks a registration up.

    >>> class Pair:
    ...     def __init__(self, a, b): self.a, self.b = a, b
    >>> _ = register_pytree_node(
    ...     Pair, lambda p: ((p.a, p.b), None, ('a', 'b')), lambda _, c: Pair(*c), namespace='doc')
    >>> register_pytree_node.get(Pair, namespace='doc').namespace
    'doc'
    """
    return _core.register_pytree_node(
        cls,
        flatten_func,
        unflatten_func,
        path_entry_type=path_entry_type,
        flatten_with_keys_func=flatten_with_keys_func,
        namespace=namespace,
    )


def register_pytree_node_class(
    cls: _C | str | None = None,
    /,
    *,
    path_entry_type: type | None = None,
    namespace: str | None = None,
) -> Any:
    """A class decorator registering ``cls`` with its own flatten and unflatten methods.

    ``obj.__tree_flatten__()`` returns ``(children, metadata)`` or ``(children, metadata,
    entries)``; the classmethod ``cls.__tree_unflatten__(metadata, children)`` rebuilds an
    instance. A class that defines only the older pair, ``tree_flatten`` and ``tree_unflatten``
    (JAX's names), is registered with those, and gets ``__tree_flatten__`` and
    ``__tree_unflatten__`` calling them, as optree does. Returns the class.
    ``path_entry_type`` defaults to the class attribute ``TREE_PATH_ENTRY_TYPE`` when it has
    one. The namespace may be given as the only argument:
    ``@register_pytree_node_class('my-namespace')``; without one, the class is registered in
    the global namespace.

    >>> import oxtree
    >>> @register_pytree_node_class(namespace='pairs')
    ... class Pair:
    ...     def __init__(self, a, b): self.a, self.b = a, b
    ...     def __tree_flatten__(self): return (self.a, self.b), None, ('a', 'b')
    ...     @classmethod
    ...     def __tree_unflatten__(cls, metadata, children): return cls(*children)
    >>> oxtree.tree_leaves([Pair(1, 2), 3], namespace='pairs')
    [1, 2, 3]
    """
    if isinstance(cls, str):
        if namespace is not None:
            raise ValueError("Cannot specify `namespace` when the first argument is a string.")
        if cls == "":
            raise ValueError("The namespace cannot be an empty string.")
        cls, namespace = None, cls
    if namespace is None:
        namespace = GLOBAL_NAMESPACE
    elif not isinstance(namespace, str):
        raise TypeError(f"The namespace must be a string, got {namespace!r}")
    if cls is None:
        return lambda c: register_pytree_node_class(
            c, path_entry_type=path_entry_type, namespace=namespace
        )
    if not isinstance(cls, type):
        raise TypeError(f"Expected a class, got {cls!r}.")
    if _defines(cls, "__tree_flatten__", "__tree_unflatten__"):
        flatten, unflatten = cls.__tree_flatten__, cls.__tree_unflatten__  # type: ignore[attr-defined]
    elif _defines(cls, "tree_flatten", "tree_unflatten"):
        # The older names are registered as they are (no wrapper call per node); the class
        # gets the new names too, as optree gives it them.
        flatten, unflatten = cls.tree_flatten, cls.tree_unflatten  # type: ignore[attr-defined]
        _add_dunder_methods(cls)
    else:
        raise TypeError(
            f"{cls!r} must define both `__tree_flatten__` and `__tree_unflatten__` methods "
            "for registration as a pytree node."
        )
    if path_entry_type is None:
        path_entry_type = getattr(cls, "TREE_PATH_ENTRY_TYPE", None)
    register_pytree_node(
        cls, flatten, unflatten, path_entry_type=path_entry_type, namespace=namespace
    )
    return cls


def _defines(cls: type, flatten: str, unflatten: str) -> bool:
    return callable(getattr(cls, flatten, None)) and callable(getattr(cls, unflatten, None))


def _add_dunder_methods(cls: Any) -> None:
    """Gives a class registered by ``tree_flatten``/``tree_unflatten`` the protocol's names."""

    def __tree_flatten__(self: Any, /) -> Any:
        return self.tree_flatten()

    def __tree_unflatten__(klass: Any, metadata: Any, children: Any, /) -> Any:
        return klass.tree_unflatten(metadata, children)

    functools.update_wrapper(__tree_flatten__, cls.tree_flatten)
    functools.update_wrapper(
        __tree_unflatten__, getattr(cls.tree_unflatten, "__func__", cls.tree_unflatten)
    )
    cls.__tree_flatten__ = __tree_flatten__
    cls.__tree_unflatten__ = classmethod(__tree_unflatten__)


def _field_names(fields: Iterable[str] | None, what: str) -> list[str] | None:
    if fields is None:
        return None
    if isinstance(fields, str):
        raise TypeError(f"{what} must be a sequence of field names, not a single str")
    names = list(fields)
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"{what} must contain field names (str), got {name!r}")
    return names


def register_dataclass(
    cls: _C,
    data_fields: Iterable[str] | None = None,
    meta_fields: Iterable[str] | None = None,
    drop_fields: Iterable[str] = (),
    *,
    init_on_unflatten: bool = True,
    namespace: str = GLOBAL_NAMESPACE,
) -> _C:
    """Registers a dataclass (or any class with attributes) as a pytree node.

    Data fields are children; meta fields are static and kept in the treedef. When neither list
    is given they are inferred from a dataclass: fields marked
    ``field(metadata={"static": True})`` (or ``pytree_node=False``) are meta, the rest data.
    The two lists must cover the ``__init__`` fields (less ``drop_fields``) without overlap.

    Unflattening calls ``cls(**fields)``, as JAX and optree do. With
    ``init_on_unflatten=False`` instances are rebuilt without calling ``__init__`` or
    ``__post_init__`` (for classes that validate or convert their input), which also works for
    frozen dataclasses and restores fields that are not ``__init__`` parameters; then the lists
    must cover every field.

    >>> import dataclasses, oxtree
    >>> @dataclasses.dataclass
    ... class Point:
    ...     x: float
    ...     y: float
    ...     name: str = dataclasses.field(default='p', metadata={'static': True})
    >>> _ = register_dataclass(Point)
    >>> oxtree.tree_leaves(Point(1.0, 2.0))
    [1.0, 2.0]
    """
    import dataclasses  # here: importing it costs more than the rest of `import oxtree`

    if not isinstance(cls, type):
        raise TypeError(f"register_dataclass expects a class, got {cls!r}")
    data = _field_names(data_fields, "data_fields")
    meta = _field_names(meta_fields, "meta_fields")
    drop = set(_field_names(drop_fields, "drop_fields") or ())
    if (data is None) != (meta is None):
        raise TypeError(
            "register_dataclass: give both data_fields and meta_fields, or neither "
            f"(got data_fields={data!r}, meta_fields={meta!r})"
        )
    is_dc = dataclasses.is_dataclass(cls)
    if data is None or meta is None:
        if not is_dc:
            raise TypeError(
                f"register_dataclass: {cls.__qualname__} is not a dataclass, so data_fields "
                "and meta_fields are required"
            )
        fields = [
            f
            for f in dataclasses.fields(cls)
            if f.name not in drop and (f.init or not init_on_unflatten)
        ]
        meta = [f.name for f in fields if _is_static(f)]
        data = [f.name for f in fields if not _is_static(f)]
    if overlap := sorted(set(data) & set(meta)):
        raise ValueError(
            f"register_dataclass: data_fields and meta_fields overlap for {cls.__qualname__}: "
            f"{overlap}"
        )
    if is_dc:
        expected = {
            f.name for f in dataclasses.fields(cls) if f.init or not init_on_unflatten
        } - drop
        given = set(data) | set(meta)
        if given != expected:
            which = "__init__ fields" if init_on_unflatten else "fields"
            parts = [
                f"register_dataclass: data_fields and meta_fields must list every {which[:-1]} "
                f"of {cls.__qualname__} (less drop_fields) and nothing else."
            ]
            if missing := sorted(expected - given):
                parts.append(f"Missing: {missing} (add them to drop_fields to leave them out).")
            if unexpected := sorted(given - expected):
                parts.append(f"Unexpected: {unexpected}.")
            raise ValueError(" ".join(parts))
    return _register_dataclass_fields(
        cls, data, meta, call_init=init_on_unflatten, namespace=namespace
    )


def _is_static(f: dataclasses.Field[Any]) -> bool:
    md = f.metadata
    return bool(md.get("static", False)) or md.get("pytree_node", True) is False


class PyTreeNodeRegistryEntry:
    """One registration, as ``register_pytree_node.get`` reports it (optree's record).

    ``flatten_func`` and ``unflatten_func`` are None for types walked natively (registered
    dataclasses, static types); ``kind`` is a :class:`~oxtree.PyTreeKind`.
    """

    __slots__ = ("flatten_func", "kind", "namespace", "path_entry_type", "type", "unflatten_func")

    def __init__(
        self,
        type: type,
        flatten_func: Any,
        unflatten_func: Any,
        *,
        path_entry_type: type | None = None,
        kind: Any = None,
        namespace: str = "",
    ) -> None:
        from oxtree.accessors import AutoEntry

        self.type = type
        self.flatten_func = flatten_func
        self.unflatten_func = unflatten_func
        self.path_entry_type = AutoEntry if path_entry_type is None else path_entry_type
        self.kind = _core.PyTreeKind.CUSTOM if kind is None else kind
        self.namespace = namespace

    def _astuple(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in _ENTRY_FIELDS)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PyTreeNodeRegistryEntry):
            return NotImplemented
        return self._astuple() == other._astuple()

    def __hash__(self) -> int:
        return hash(self._astuple())

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in _ENTRY_FIELDS)
        return f"{type(self).__name__}({fields})"


_ENTRY_FIELDS = ("type", "flatten_func", "unflatten_func", "path_entry_type", "kind", "namespace")

# One entry object per live registration, so that repeated look-ups return the same object.
_ENTRIES: dict[tuple[Any, ...], PyTreeNodeRegistryEntry] = {}


def _entry(row: tuple[Any, ...]) -> PyTreeNodeRegistryEntry:
    cls, namespace, flatten, unflatten, path_entry_type = row
    key = (cls, namespace, id(flatten), id(unflatten), path_entry_type)
    entry = _ENTRIES.get(key)
    if entry is None or entry.flatten_func is not flatten:
        entry = PyTreeNodeRegistryEntry(
            cls, flatten, unflatten, path_entry_type=path_entry_type, namespace=namespace
        )
        _ENTRIES[key] = entry
    return entry


class _RegistryView:
    """The registry as optree's ``_NODETYPE_REGISTRY`` shows it, read-only and live.

    Keys are the builtin node types, then ``cls`` for a global registration and
    ``(namespace, cls)`` for a namespaced one; values are :class:`PyTreeNodeRegistryEntry`.
    """

    def _items(self) -> list[tuple[Any, PyTreeNodeRegistryEntry]]:
        items: list[tuple[Any, PyTreeNodeRegistryEntry]] = list(_builtin_entries().items())
        for row in _core._registrations():
            entry = _entry(row)
            items.append(
                (entry.type if not entry.namespace else (entry.namespace, entry.type), entry)
            )
        return items

    def __len__(self) -> int:
        return len(self._items())

    def __iter__(self) -> Iterator[Any]:
        return iter([key for key, _ in self._items()])

    def __contains__(self, key: object) -> bool:
        return any(k == key for k, _ in self._items())

    def __getitem__(self, key: Any) -> PyTreeNodeRegistryEntry:
        for k, entry in self._items():
            if k == key:
                return entry
        raise KeyError(key)

    def get(self, key: Any, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default

    def keys(self) -> list[Any]:
        return [k for k, _ in self._items()]

    def values(self) -> list[PyTreeNodeRegistryEntry]:
        return [e for _, e in self._items()]

    def items(self) -> list[tuple[Any, PyTreeNodeRegistryEntry]]:
        return self._items()

    def __repr__(self) -> str:
        return repr(dict(self._items()))


_NODETYPE_REGISTRY = _RegistryView()


def _builtin_entries() -> dict[Any, PyTreeNodeRegistryEntry]:
    """The builtin node types' entries (made once), keyed as optree keys them."""
    global _BUILTINS
    if _BUILTINS is None:
        _BUILTINS = _make_builtin_entries()
    return _BUILTINS


_BUILTINS: dict[Any, PyTreeNodeRegistryEntry] | None = None


def _make_builtin_entries() -> dict[Any, PyTreeNodeRegistryEntry]:
    import collections

    from oxtree import accessors as acc

    kinds = _core.PyTreeKind
    rows = [
        (type(None), acc.PyTreeEntry, kinds.NONE),
        (tuple, acc.SequenceEntry, kinds.TUPLE),
        (list, acc.SequenceEntry, kinds.LIST),
        (dict, acc.MappingEntry, kinds.DICT),
        (collections.namedtuple, acc.NamedTupleEntry, kinds.NAMEDTUPLE),
        (collections.OrderedDict, acc.MappingEntry, kinds.ORDEREDDICT),
        (collections.defaultdict, acc.MappingEntry, kinds.DEFAULTDICT),
        (collections.deque, acc.SequenceEntry, kinds.DEQUE),
        (_StructSequence, acc.StructSequenceEntry, kinds.STRUCTSEQUENCE),
    ]
    return {
        cls: PyTreeNodeRegistryEntry(
            cls,  # type: ignore[arg-type]
            _flatten_builtin,
            _unflatten_builtin(kind),
            path_entry_type=entry_type,
            kind=kind,
        )
        for cls, entry_type, kind in rows
    }


class _StructSequence(tuple):  # type: ignore[type-arg]
    """Stands for every struct sequence type in the registry view, as optree's does."""

    __slots__ = ()


def _flatten_builtin(obj: Any, /) -> tuple[list[Any], Any, tuple[Any, ...]]:
    """optree's ``flatten_func`` of a builtin node: ``(children, metadata, entries)``."""
    from oxtree.ops import tree_flatten_one_level

    out = tree_flatten_one_level(obj)
    return out.children, out.metadata, out.entries


def _unflatten_builtin(kind: Any) -> Callable[[Any, Any], Any]:
    """optree's ``unflatten_func(metadata, children)`` of a builtin node kind."""
    from oxtree.ops import _UNFLATTEN_BY_KIND

    return _UNFLATTEN_BY_KIND[kind]


def _registry_get(
    cls: type | None = None, /, *, namespace: str = GLOBAL_NAMESPACE
) -> dict[type, PyTreeNodeRegistryEntry] | PyTreeNodeRegistryEntry | None:
    """The registration of ``cls`` as seen from ``namespace``, or all of them (``cls=None``).

    With ``cls=None`` returns a dict from type to :class:`PyTreeNodeRegistryEntry` holding the
    builtin node types, the global registrations and those of ``namespace``. Otherwise the
    entry ``cls`` flattens by, or None for a leaf type.
    """
    import collections
    import inspect

    if cls is not None and cls is not collections.namedtuple and not inspect.isclass(cls):
        raise TypeError(f"Expected a class or None, got {cls!r}.")
    if not isinstance(namespace, str):
        raise TypeError(f"The namespace must be a string, got {namespace!r}.")
    builtins = _builtin_entries()
    rows = [_entry(row) for row in _core._registrations()]
    if cls is None:
        found: dict[type, PyTreeNodeRegistryEntry] = dict(builtins)
        found.update((e.type, e) for e in rows if e.namespace == "")
        if namespace:
            found.update((e.type, e) for e in rows if e.namespace == namespace)
        return found
    for ns in (namespace, "") if namespace else ("",):
        for e in rows:
            if e.type is cls and e.namespace == ns:
                return e
    if cls in builtins:
        return builtins[cls]
    from oxtree.types import is_namedtuple_class, is_structseq_class

    if is_structseq_class(cls):
        return builtins[_StructSequence]
    if is_namedtuple_class(cls):
        return builtins[collections.namedtuple]
    return None


register_pytree_node.get = _registry_get  # type: ignore[attr-defined]


class DictMetaData(list):  # type: ignore[type-arg]
    """optree's record of a dict node's keys (``tree_flatten_one_level``'s metadata): a list
    of the keys in traversal order, with ``original_keys`` (a dict from key to None) in the
    dict's insertion order, which unflattening restores.

    >>> DictMetaData(['a', 'b'], original_keys=['b', 'a']).original_keys
    {'b': None, 'a': None}
    """

    __slots__ = ("original_keys",)

    def __init__(
        self,
        keys: Iterable[Any] = (),
        /,
        *,
        original_keys: Iterable[Any] | None = None,
        check_keys_consistency: bool = True,
    ) -> None:
        super().__init__(keys)
        self.original_keys = dict.fromkeys(self if original_keys is None else original_keys)
        if len(self.original_keys) != len(self):
            raise ValueError(
                f"`original_keys` must have the same length as `keys`, "
                f"got {len(self.original_keys)} != {len(self)}."
            )
        if check_keys_consistency and set(self.original_keys) != set(self):
            raise ValueError(
                "`original_keys` must have the same keys as `keys`, "
                f"got {set(self.original_keys)} != {set(self)}."
            )

    def __getnewargs_ex__(self) -> tuple[tuple[list[Any]], dict[str, Any]]:
        return (list(self),), {
            "original_keys": list(self.original_keys),
            "check_keys_consistency": False,
        }


@contextlib.contextmanager
def dict_insertion_ordered(mode: bool, /, *, namespace: str = GLOBAL_NAMESPACE) -> Iterator[None]:
    """Within the block, dicts and defaultdicts flatten in insertion order, not sorted.

    The mode applies to walks in ``namespace``; in the global namespace (``''``) it applies
    to every walk of the optree face. Leaves, treespecs and paths then follow each dict's own
    key order, as they do for an ``OrderedDict``. The previous mode comes back on exit.

    >>> import oxtree
    >>> with dict_insertion_ordered(True):
    ...     oxtree.tree_flatten({'b': 1, 'a': 2})
    ([1, 2], PyTreeSpec({'b': *, 'a': *}))
    >>> oxtree.tree_leaves({'b': 1, 'a': 2})
    [2, 1]
    """
    if not isinstance(namespace, str):
        raise TypeError(f"The namespace must be a string, got {namespace!r}.")
    with _MODE_LOCK:
        previous = _core.is_dict_insertion_ordered(namespace, inherit_global_namespace=False)
        _core.set_dict_insertion_ordered(bool(mode), namespace)
    try:
        yield
    finally:
        with _MODE_LOCK:
            _core.set_dict_insertion_ordered(previous, namespace)


# Makes reading the previous mode and setting the new one one step for each thread.
_MODE_LOCK = threading.Lock()


def use_jax_registry(mode: bool = True, /) -> bool:
    """Makes the main face read JAX's registry too (``mode=True``) or not; returns the
    previous setting.

    The main face follows optree: a type registered with JAX alone (an equinox module, a
    ``flax.struct`` dataclass, ``jax.tree_util.Partial``) is a leaf to it, as to optree. With
    the switch on, such a type is a node to every call of the main face, with JAX's children,
    aux data and keys, as it always is to ``oxtree.tree_util``, ``oxtree.tree`` and
    ``oxtree.jax``. oxtree's own registrations still come first. The setting is
    process-wide; JAX is never imported because of it.

    >>> import oxtree
    >>> previous = use_jax_registry(True)
    >>> use_jax_registry(previous)
    True
    """
    if not isinstance(mode, bool):
        raise TypeError(f"use_jax_registry expects a bool, got {type(mode).__name__}")
    return _core._use_jax_registry(mode)
