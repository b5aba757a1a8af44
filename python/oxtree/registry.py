"""Registering custom pytree node types.

Every registration lives in one registry shared by both faces (``oxtree`` and
``oxtree.tree_util``). A type registered in a namespace is a node only in calls that pass
that namespace (``namespace=...``); the empty namespace is the global one, seen by all calls.
"""

from __future__ import annotations

import functools

from oxtree._core import (
    GLOBAL_NAMESPACE,
    _register_dataclass_fields,
    register_pytree_node,
    register_static,
    registered_types,
    unregister_pytree_node,
)

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing at run time
if TYPE_CHECKING:
    import dataclasses
    from collections.abc import Iterable
    from typing import Any, TypeVar

    _C = TypeVar("_C", bound=type)

__all__ = [
    "GLOBAL_NAMESPACE",
    "register_dataclass",
    "register_pytree_node",
    "register_pytree_node_class",
    "register_static",
    "registered_types",
    "unregister_pytree_node",
]


def register_pytree_node_class(
    cls: _C | str | None = None, /, *, namespace: str | None = None
) -> Any:
    """A class decorator registering ``cls`` with its own flatten and unflatten methods.

    ``obj.__tree_flatten__()`` returns ``(children, metadata)`` or ``(children, metadata,
    entries)``; the classmethod ``cls.__tree_unflatten__(metadata, children)`` rebuilds an
    instance. A class that defines only the older pair, ``tree_flatten`` and ``tree_unflatten``
    (JAX's names), is registered with those, and gets ``__tree_flatten__`` and
    ``__tree_unflatten__`` calling them, as optree does. Returns the class. The namespace may be
    given as the only argument: ``@register_pytree_node_class('my-namespace')``; without one,
    the class is registered in the global namespace.

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
        cls, namespace = None, cls
    if namespace is None:
        namespace = GLOBAL_NAMESPACE
    elif not isinstance(namespace, str):
        raise TypeError(f"The namespace must be a string, got {namespace!r}")
    if cls is None:
        return lambda c: register_pytree_node_class(c, namespace=namespace)
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
    register_pytree_node(cls, flatten, unflatten, namespace=namespace)
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
