"""Dataclasses that are pytrees, as ``optree.dataclasses`` offers them.

``dataclass`` is :func:`dataclasses.dataclass` plus registration; ``field(pytree_node=False)``
marks a field as metadata kept in the treedef instead of a child.

>>> import oxtree
>>> from oxtree import dataclasses as odc
>>> @odc.dataclass
... class Layer:
...     weight: list
...     name: str = odc.field(default='dense', pytree_node=False)
>>> oxtree.tree_map(lambda x: x * 10, Layer([1, 2]))
Layer(weight=[10, 20], name='dense')
"""

from __future__ import annotations

import dataclasses as _dc
from dataclasses import (
    KW_ONLY,
    MISSING,
    Field,
    FrozenInstanceError,
    InitVar,
    asdict,
    astuple,
    fields,
    is_dataclass,
    replace,
)

from oxtree._core import GLOBAL_NAMESPACE
from oxtree.registry import register_dataclass

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing at run time
if TYPE_CHECKING:
    from typing import Any, TypeVar

    _T = TypeVar("_T", bound=type)

__all__ = [
    "KW_ONLY",
    "MISSING",
    "Field",
    "FrozenInstanceError",
    "InitVar",
    "asdict",
    "astuple",
    "dataclass",
    "field",
    "fields",
    "is_dataclass",
    "make_dataclass",
    "register_node",
    "replace",
    "DataclassEntry",  # noqa: F822 (served by __getattr__)
]


def field(*, pytree_node: bool = True, **field_options: Any) -> Any:
    """:func:`dataclasses.field` with ``pytree_node``: False makes the field static metadata.

    >>> f = field(default=3, pytree_node=False)
    >>> f.metadata['pytree_node']
    False
    """
    metadata = dict(field_options.pop("metadata", None) or {})
    metadata["pytree_node"] = bool(pytree_node)
    return _dc.field(metadata=metadata, **field_options)


def _register(cls: type, namespace: str, init_on_unflatten: bool) -> type:
    register_dataclass(cls, init_on_unflatten=init_on_unflatten, namespace=namespace)
    return cls


def dataclass(
    cls: _T | None = None,
    /,
    *,
    namespace: str = GLOBAL_NAMESPACE,
    init_on_unflatten: bool = True,
    **dataclass_options: Any,
) -> Any:
    """:func:`dataclasses.dataclass` that also registers the class as a pytree node.

    Fields are children unless declared with ``field(pytree_node=False)`` (or
    ``metadata={'static': True}``). ``init_on_unflatten=False`` rebuilds instances without
    calling ``__init__`` or ``__post_init__``.

    >>> import oxtree
    >>> @dataclass(frozen=True)
    ... class Pair:
    ...     a: int
    ...     b: int
    >>> oxtree.tree_structure(Pair(1, 2))
    PyTreeSpec(CustomTreeNode(Pair[()], [*, *]))
    """

    def wrap(c: _T) -> _T:
        made = _dc.dataclass(c, **dataclass_options)
        _register(made, namespace, init_on_unflatten)
        return made

    return wrap if cls is None else wrap(cls)


def make_dataclass(
    cls_name: str,
    fields: Any,
    *,
    namespace: str = GLOBAL_NAMESPACE,
    init_on_unflatten: bool = True,
    **options: Any,
) -> type:
    """:func:`dataclasses.make_dataclass` that also registers the new class as a pytree node.

    >>> import oxtree
    >>> P = make_dataclass('P', ['x', ('y', int, field(default=0, pytree_node=False))])
    >>> oxtree.tree_leaves(P(1, 2))
    [1]
    """
    cls = _dc.make_dataclass(cls_name, fields, **options)
    return _register(cls, namespace, init_on_unflatten)


def register_node(cls: _T | str | None = None, /, *, namespace: str | None = None) -> Any:
    """Registers an existing dataclass as a pytree node (a decorator, or called on the class).

    As :func:`dataclass` does for a class it makes: fields are children unless declared with
    ``field(pytree_node=False)``. ``@register_node('ns')`` registers in namespace ``'ns'``;
    without one the class is registered in the global namespace.

    >>> import dataclasses, oxtree
    >>> @register_node(namespace='doc-register-node')
    ... @dataclasses.dataclass
    ... class Pair:
    ...     a: int
    ...     b: int
    >>> oxtree.tree_leaves(Pair(1, 2), namespace='doc-register-node')
    [1, 2]
    """
    if isinstance(cls, str):
        if namespace is not None:
            raise ValueError("Cannot specify `namespace` when the first argument is a string.")
        cls, namespace = None, cls
    ns = GLOBAL_NAMESPACE if namespace is None else namespace
    if cls is None:
        return lambda c: register_node(c, namespace=ns)
    if not isinstance(cls, type) or not _dc.is_dataclass(cls):
        raise TypeError(f"@{__name__}.register_node() expects a dataclass, got {cls!r}.")
    return _register(cls, ns, True)


def __getattr__(name: str) -> Any:
    if name == "DataclassEntry":  # loaded on first use: accessors are not needed to register
        from oxtree.accessors import DataclassEntry

        return DataclassEntry
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
