"""attrs classes that are pytrees, as ``optree.integrations.attrs`` offers them.

:func:`define`, :func:`frozen`, :func:`mutable` and :func:`make_class` are attrs' own, plus
registration in a namespace; :func:`field` takes ``pytree_node`` (False makes the field
metadata kept in the treedef instead of a child); :func:`register_node` registers an existing
attrs class. The registration is the one :func:`oxtree.dataclasses.register_node` makes for a
dataclass: the walks read the fields natively and rebuild an instance with
``cls(**fields)``, each field passed under its ``__init__`` name (its attrs alias). A
registered class records its children and metadata fields in its attribute
``__optree_attrs_fields__``. The rest of attrs' commonly used names are re-exported.
Importing this module needs attrs installed.

>>> import oxtree
>>> from oxtree.integrations import attrs
>>> @attrs.define(namespace='doc-attrs')
... class Point:
...     x: float
...     y: float
...     label: str = attrs.field(default='p', pytree_node=False)
>>> oxtree.tree_flatten(Point(1.0, 2.0), namespace='doc-attrs')[0]
[1.0, 2.0]
>>> oxtree.tree_map(lambda v: v * 2, Point(1.0, 2.0), namespace='doc-attrs')
Point(x=2.0, y=4.0, label='p')
"""

from __future__ import annotations

import attrs
from attrs import (
    NOTHING,
    Attribute,
    Factory,
    asdict,
    astuple,
    cmp_using,
    converters,
    evolve,
    exceptions,
    fields,
    fields_dict,
    filters,
    has,
    resolve_types,
    setters,
    validate,
    validators,
)

from oxtree.accessors import _FieldEntry
from oxtree.dataclasses import (
    _node_arguments,
    _twice,
    _warn_no_init,
    register_fields,
)

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing at run time
if TYPE_CHECKING:
    from typing import Any, TypeVar

    _T = TypeVar("_T", bound=type)

__all__ = [
    "AttrsEntry",
    "field",
    "define",
    "frozen",
    "mutable",
    "make_class",
    "register_node",
    "NOTHING",
    "Attribute",
    "Factory",
    "asdict",
    "astuple",
    "cmp_using",
    "converters",
    "evolve",
    "exceptions",
    "fields",
    "fields_dict",
    "filters",
    "has",
    "resolve_types",
    "setters",
    "validate",
    "validators",
]

# The attribute in which a class registered here records (children, metadata) fields.
_FIELDS = "__optree_attrs_fields__"
# The module's name in its messages: optree's texts, which users' code matches.
_OWNER = "optree.integrations.attrs"


class AttrsEntry(_FieldEntry):
    """A field of a registered attrs class (the entry is its name, or a child's position).

    >>> from oxtree import PyTreeKind
    >>> @define(namespace='doc-attrs-entry')
    ... class Pair:
    ...     a: int
    ...     b: int
    >>> e = AttrsEntry(1, Pair, PyTreeKind.CUSTOM)
    >>> e, e.fields, e(Pair(1, 2)), e.codify('p')
    (AttrsEntry(field='b', type=<class '...Pair'>), ('a', 'b'), 2, 'p.b')
    """

    __slots__ = ()
    _MARKER = _FIELDS

    def _declared(self) -> list[tuple[str, bool]]:
        return [(a.name, a.init) for a in attrs.fields(self.type)]


def field(**kwargs: Any) -> Any:
    """:func:`attrs.field` with ``pytree_node``: False makes the field metadata.

    ``pytree_node=None`` (or absent) takes ``metadata['pytree_node']`` (default True); the
    value is stored there. A child field must be an ``__init__`` parameter, so
    ``init=False`` needs ``pytree_node=False``.

    >>> field(default=0, pytree_node=False).metadata['pytree_node']
    False
    """
    pytree_node = kwargs.pop("pytree_node", None)
    metadata = dict(kwargs.pop("metadata", None) or {})
    if pytree_node is None:
        pytree_node = metadata.get("pytree_node", True)
    metadata["pytree_node"] = pytree_node
    if not kwargs.get("init", True) and pytree_node:
        raise TypeError(
            "`pytree_node=True` is not allowed for non-init fields. "
            f"Please explicitly set `{_OWNER}.field(init=False, pytree_node=False)`."
        )
    return attrs.field(metadata=metadata, **kwargs)


def define(cls: _T | None = None, /, *, namespace: str, **kwargs: Any) -> Any:
    """:func:`attrs.define` that also registers the class as a pytree node.

    ``kwargs`` go to :func:`attrs.define`; ``namespace=''`` registers in the global
    namespace. Fields are children unless declared with ``field(pytree_node=False)``; see
    :func:`register_node`.
    """

    def wrap(c: _T) -> _T:
        if not isinstance(c, type):
            raise TypeError(f"@{_OWNER}.define() can only be used with classes, not {c!r}.")
        return register_node(attrs.define(c, **kwargs), namespace=namespace)  # type: ignore[no-any-return]

    return wrap if cls is None else wrap(cls)


mutable = define


def frozen(cls: _T | None = None, /, *, namespace: str, **kwargs: Any) -> Any:
    """:func:`define` with ``frozen=True`` (instances cannot be changed), as
    :func:`attrs.frozen` is."""
    kwargs.setdefault("frozen", True)
    kwargs.setdefault("on_setattr", None)
    return define(cls, namespace=namespace, **kwargs)


def make_class(name: str, attrs: Any, /, *, namespace: str, **kwargs: Any) -> type:
    """:func:`attrs.make_class` that also registers the new class as a pytree node.

    >>> import oxtree
    >>> P = make_class('P', ['x', 'y'], namespace='doc-attrs-make')
    >>> oxtree.tree_leaves(P(1, 2), namespace='doc-attrs-make')
    [1, 2]
    """
    return register_node(_attrs_make_class(name, attrs, **kwargs), namespace=namespace)  # type: ignore[no-any-return]


def register_node(cls: _T | str | None = None, /, *, namespace: str | None = None) -> Any:
    """Registers an existing attrs class as a pytree node (a decorator, or called on it).

    Fields are children unless their ``metadata['pytree_node']`` is False; ``__init__``
    fields that are not children are metadata. Instances are rebuilt with
    ``cls(**fields)``, which runs attrs' ``__init__`` again (converters, validators,
    ``__attrs_post_init__``): the round trip is exact when ``__init__`` stores the values it
    is given. Register any other class with :func:`~oxtree.register_pytree_node`.
    ``@register_node('ns')`` registers in namespace ``'ns'``; ``namespace=''`` in the global
    one. A class is registered here once.

    >>> import attrs as real_attrs, oxtree
    >>> @register_node(namespace='doc-attrs-register')
    ... @real_attrs.define
    ... class Pair:
    ...     a: int
    ...     b: int
    >>> oxtree.tree_leaves(Pair(1, 2), namespace='doc-attrs-register')
    [1, 2]
    """
    cls, namespace = _node_arguments(cls, namespace, attrs.has, "is not an attrs-decorated class")
    if cls is None:
        return lambda c: register_node(c, namespace=namespace)
    if _FIELDS in cls.__dict__:
        raise TypeError(_twice(cls, "register_node", _OWNER))
    if not getattr(getattr(cls, "__attrs_props__", None), "added_init", True):
        _warn_no_init(
            f"Attrs class {cls.__name__!r} does not use an attrs-generated `__init__` "
            "(for example, `init=False`).",
            _OWNER,
            stacklevel=2,
        )
    return register_fields(
        cls,
        attrs.fields(cls),
        marker=_FIELDS,
        call_init=True,
        namespace=namespace,
        owner=_OWNER,
        keyword="alias",
        path_entry_type=AttrsEntry,
    )


_attrs_make_class = attrs.make_class
