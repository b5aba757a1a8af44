"""Dataclasses that are pytrees, as ``optree.dataclasses`` offers them.

``dataclass`` is :func:`dataclasses.dataclass` plus registration in a namespace;
``field(pytree_node=False)`` marks a field as metadata kept in the treedef instead of a child.
Every other name is :mod:`dataclasses`' own. A registered class records its children and
metadata fields in its attribute ``__optree_dataclass_fields__``, as optree's do.

>>> import oxtree
>>> from oxtree import dataclasses as odc
>>> @odc.dataclass(namespace='doc-layer')
... class Layer:
...     weight: list
...     name: str = odc.field(default='dense', pytree_node=False)
>>> oxtree.tree_map(lambda x: x * 10, Layer([1, 2]), namespace='doc-layer')
Layer(weight=[10, 20], name='dense')
>>> oxtree.tree_leaves(Layer([1, 2]))  # a node only in calls that pass its namespace
[Layer(weight=[1, 2], name='dense')]
"""

from __future__ import annotations

import dataclasses as _dc
import sys as _sys
from dataclasses import (
    MISSING,
)

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing at run time
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from typing import Any, TypeVar

    _T = TypeVar("_T", bound=type)

__all__ = [
    "DataclassEntry",  # noqa: F822 (served by __getattr__)
    "register_node",
    *_dc.__all__,
]

# The attribute in which a class registered here records (children, metadata) fields.
_FIELDS = "__optree_dataclass_fields__"
# The module's name in its messages: optree's texts, which users' code matches.
_OWNER = "optree.dataclasses"


def field(
    *,
    default: Any = MISSING,
    default_factory: Any = MISSING,
    init: bool = True,
    repr: bool = True,
    hash: bool | None = None,
    compare: bool = True,
    metadata: Any = None,
    kw_only: Any = MISSING,
    doc: str | None = None,
    pytree_node: bool | None = None,
) -> Any:
    """:func:`dataclasses.field` with ``pytree_node``: False makes the field metadata.

    ``pytree_node=None`` takes ``metadata['pytree_node']`` (default True); the value is stored
    there. A child field must be an ``__init__`` parameter, so ``init=False`` needs
    ``pytree_node=False``. ``doc`` is passed on where :mod:`dataclasses` takes it (3.14+).

    >>> f = field(default=3, pytree_node=False)
    >>> f.metadata['pytree_node']
    False
    """
    metadata = dict(metadata or {})
    if pytree_node is None:
        pytree_node = metadata.get("pytree_node", True)
    metadata["pytree_node"] = pytree_node
    options: dict[str, Any] = {"kw_only": kw_only}
    if _sys.version_info >= (3, 14):
        options["doc"] = doc
    elif doc is not None:
        raise TypeError("field() got an unexpected keyword argument 'doc'")
    if not init and pytree_node:
        raise TypeError(
            "`pytree_node=True` is not allowed for non-init fields. "
            f"Please explicitly set `{_OWNER}.field(init=False, pytree_node=False)`."
        )
    return _dc.field(
        default=default,
        default_factory=default_factory,
        init=init,
        repr=repr,
        hash=hash,
        compare=compare,
        metadata=metadata,
        **options,
    )


def dataclass(
    cls: _T | None = None,
    /,
    *,
    init: bool = True,
    repr: bool = True,
    eq: bool = True,
    order: bool = False,
    unsafe_hash: bool = False,
    frozen: bool = False,
    match_args: bool = True,
    kw_only: bool = False,
    slots: bool = False,
    weakref_slot: bool = False,
    init_on_unflatten: bool = True,
    namespace: str,
) -> Any:
    """:func:`dataclasses.dataclass` that also registers the class as a pytree node.

    Fields are children unless declared with ``field(pytree_node=False)``; see
    :func:`register_node`. ``namespace=''`` registers in the global namespace.
    ``init_on_unflatten=False`` rebuilds instances without calling ``__init__`` or
    ``__post_init__`` (oxtree's addition).

    >>> import oxtree
    >>> @dataclass(frozen=True, namespace='doc-pair')
    ... class Pair:
    ...     a: int
    ...     b: int
    >>> oxtree.tree_structure(Pair(1, 2), namespace='doc-pair')
    PyTreeSpec(CustomTreeNode(Pair[()], [*, *]), namespace='doc-pair')
    """
    options = {
        "init": init,
        "repr": repr,
        "eq": eq,
        "order": order,
        "unsafe_hash": unsafe_hash,
        "frozen": frozen,
        "match_args": match_args,
        "kw_only": kw_only,
        "slots": slots,
        "weakref_slot": weakref_slot,
    }

    def wrap(c: _T) -> _T:
        if not isinstance(c, type):
            raise TypeError(f"@{_OWNER}.dataclass() can only be used with classes, not {c!r}.")
        if _FIELDS in c.__dict__:
            raise TypeError(
                f"@{_OWNER}.dataclass() cannot be applied to {c.__name__} more than once."
            )
        _check_namespace(namespace)
        made = _dc.dataclass(c, **options)  # type: ignore[call-overload]
        return _register(made, namespace, init_on_unflatten)  # type: ignore[no-any-return]

    return wrap if cls is None else wrap(cls)


def make_dataclass(
    cls_name: str,
    fields: Iterable[Any],
    *,
    bases: tuple[type, ...] = (),
    ns: dict[str, Any] | None = None,
    init: bool = True,
    repr: bool = True,
    eq: bool = True,
    order: bool = False,
    unsafe_hash: bool = False,
    frozen: bool = False,
    match_args: bool = True,
    kw_only: bool = False,
    slots: bool = False,
    weakref_slot: bool = False,
    module: str | None = None,
    decorator: Callable[..., Any] = _dc.dataclass,
    init_on_unflatten: bool = True,
    namespace: str,
) -> type:
    """:func:`dataclasses.make_dataclass` that also registers the new class as a pytree node.

    ``namespace`` is the registry namespace; the class body's namespace, which
    :func:`dataclasses.make_dataclass` calls ``namespace``, is ``ns`` here. ``module``
    (3.12+) and ``decorator`` (3.14+) are passed on where :mod:`dataclasses` takes them.

    >>> import oxtree
    >>> P = make_dataclass(
    ...     'P', ['x', ('y', int, field(default=0, pytree_node=False))], namespace='doc-make')
    >>> oxtree.tree_leaves(P(1, 2), namespace='doc-make')
    [1]
    """
    if namespace is None or isinstance(namespace, dict):  # type: ignore[unreachable]
        # The dataclasses-style call `namespace={...}` (the class body) with the registry
        # namespace given as `ns`: take each for what it is.
        if ns is None:  # type: ignore[unreachable]
            raise TypeError("make_dataclass() missing 1 required keyword-only argument: 'ns'")
        if isinstance(ns, str):
            ns, namespace = namespace, ns
    _check_namespace(namespace)
    options: dict[str, Any] = {
        "bases": bases,
        "namespace": ns,
        "init": init,
        "repr": repr,
        "eq": eq,
        "order": order,
        "unsafe_hash": unsafe_hash,
        "frozen": frozen,
        "match_args": match_args,
        "kw_only": kw_only,
        "slots": slots,
        "weakref_slot": weakref_slot,
    }
    if _sys.version_info >= (3, 12):
        # dataclasses names the caller's module, which would be this one.
        options["module"] = module if module is not None else _caller_module()
    elif module is not None:
        raise TypeError("make_dataclass() got an unexpected keyword argument 'module'")
    if _sys.version_info >= (3, 14):
        options["decorator"] = decorator
    elif decorator is not _dc.dataclass:
        raise TypeError("make_dataclass() got an unexpected keyword argument 'decorator'")
    cls = _dc.make_dataclass(cls_name, fields, **options)
    return _register(cls, namespace, init_on_unflatten)


def _caller_module() -> str:
    frame = _sys._getframe(2)
    return frame.f_globals.get("__name__", "__main__")  # type: ignore[no-any-return]


def register_node(cls: _T | str | None = None, /, *, namespace: str | None = None) -> Any:
    """Registers an existing dataclass as a pytree node (a decorator, or called on the class).

    Fields are children unless their ``metadata['pytree_node']`` is False; ``__init__``
    fields that are not children are metadata, kept in the treedef. Instances are rebuilt
    with ``cls(**fields)``, so the round trip is exact when ``__init__`` and
    ``__post_init__`` store the values they are given. A child field must be an
    ``__init__`` parameter, and ``InitVar`` fields cannot be restored: register such a class
    with :func:`~oxtree.register_pytree_node`. ``@register_node('ns')`` registers in
    namespace ``'ns'``; ``namespace=''`` in the global one. A class is registered here once.

    >>> import dataclasses, oxtree
    >>> @register_node(namespace='doc-register-node')
    ... @dataclasses.dataclass
    ... class Pair:
    ...     a: int
    ...     b: int
    >>> oxtree.tree_leaves(Pair(1, 2), namespace='doc-register-node')
    [1, 2]
    """
    cls, namespace = _node_arguments(cls, namespace, _dc.is_dataclass, "is not a dataclass")
    if cls is None:
        return lambda c: register_node(c, namespace=namespace)
    return _register(cls, namespace, True)


def _register(cls: Any, namespace: str, call_init: bool) -> Any:
    """Registers the dataclass ``cls`` as its fields' ``pytree_node`` flags say."""
    if _FIELDS in cls.__dict__:
        raise TypeError(_twice(cls, "register_node", _OWNER))
    if call_init:
        if not cls.__dataclass_params__.init:
            # The user's frame is above this one and register_node (or the decorator).
            _warn_no_init(
                f"Dataclass {cls.__name__!r} was defined with `init=False`.", _OWNER, stacklevel=3
            )
        init_vars = [
            name
            for name, f in cls.__dataclass_fields__.items()
            if f._field_type is _dc._FIELD_INITVAR  # type: ignore[attr-defined]
        ]
        if init_vars:
            raise TypeError(
                f"Dataclass {cls.__name__!r} has `InitVar` field(s) {init_vars!r}, which the "
                "auto-generated flatten/unflatten functions cannot round-trip "
                f"(`{_OWNER}.register_node()` reconstructs instances with `cls(**kwargs)` "
                "and cannot restore `InitVar` values). Use `optree.register_pytree_node()` or "
                "`optree.register_pytree_node_class()` with explicit flatten/unflatten "
                "functions instead."
            )
    return register_fields(
        cls, _dc.fields(cls), marker=_FIELDS, call_init=call_init, namespace=namespace, owner=_OWNER
    )


# What the dataclasses and attrs integrations share.


def _node_arguments(
    cls: Any, namespace: Any, accepts: Callable[[type], bool], refusal: str
) -> tuple[Any, str]:
    """``register_node``'s arguments, checked: ``(cls, namespace)``, with ``cls`` None when
    only a namespace is given (``register_node('ns')``, a decorator). ``accepts(cls)`` says
    whether the class is of the kind the caller registers; if not, ``refusal`` says why."""
    if isinstance(cls, str):
        if namespace is not None:
            raise ValueError("Cannot specify `namespace` when the first argument is a string.")
        if cls == "":
            raise ValueError("The namespace cannot be an empty string.")
        return None, cls
    if namespace is None:
        raise ValueError("Must specify `namespace` when the first argument is a class.")
    if cls is None:
        return None, namespace
    if not isinstance(cls, type):
        raise TypeError(f"Expected a class, got {cls!r}.")
    if not accepts(cls):
        raise TypeError(f"{cls!r} {refusal}.")
    _check_namespace(namespace)
    return cls, namespace


def _check_namespace(namespace: Any) -> None:
    if not isinstance(namespace, str):
        raise TypeError(f"The namespace must be a string, got {namespace!r}.")


def _twice(cls: type, function: str, owner: str) -> str:
    return (
        f"Cannot register {cls.__name__} as a pytree node more than once with "
        f"`{owner}.{function}()`. "
        "Use `optree.register_pytree_node()` or `optree.register_pytree_node_class()` "
        "with explicit flatten/unflatten functions to register it in a different namespace."
    )


def _warn_no_init(what: str, owner: str, *, stacklevel: int) -> None:
    """Warns that instances, rebuilt by calling the class, may not come back."""
    import warnings

    warnings.warn(
        f"{what} `tree_unflatten()` may fail because "
        f"`{owner}.register_node()` reconstructs instances with `cls(**kwargs)`.",
        UserWarning,
        stacklevel=stacklevel + 1,
    )


def register_fields(
    cls: Any,
    fields: Iterable[Any],
    *,
    marker: str,
    call_init: bool,
    namespace: str,
    owner: str,
    keyword: str = "name",
    path_entry_type: type | None = None,
) -> Any:
    """Registers ``cls`` as a native dataclass node from its field objects.

    Each field (a :class:`dataclasses.Field` or an ``attrs.Attribute``) has ``name``, ``init``
    and ``metadata``, and is passed to ``__init__`` under its attribute ``keyword``. A field
    is a child unless ``metadata['pytree_node']`` is False, and a child must be an
    ``__init__`` parameter; ``__init__`` fields that are not children are metadata (every
    non-child field when ``call_init`` is False: instances are then rebuilt field by field).
    The registration and ``cls.<marker>`` (the children and metadata fields, each a mapping
    from name to field) are made together: if setting the marker fails, the registration is
    undone.
    """
    from types import MappingProxyType

    from oxtree._core import _register_dataclass_fields, unregister_pytree_node

    children: dict[str, Any] = {}
    metadata: dict[str, Any] = {}
    keywords: dict[str, str] = {}
    for f in fields:
        if f.metadata.get("pytree_node", True):
            if not f.init and call_init:
                raise TypeError(
                    f"PyTree node field {f.name!r} must be included in `__init__()`. "
                    f"Or you can explicitly set `{owner}.field(init=False, pytree_node=False)`."
                )
            children[f.name] = f
        elif f.init or not call_init:
            metadata[f.name] = f
        keywords[f.name] = getattr(f, keyword)
    data, meta_names = list(children), list(metadata)
    _register_dataclass_fields(
        cls,
        data,
        meta_names,
        call_init=call_init,
        path_entry_type=path_entry_type,
        namespace=namespace,
        init_names=[keywords[n] for n in data + meta_names],
    )
    try:
        setattr(cls, marker, (MappingProxyType(children), MappingProxyType(metadata)))
    except BaseException:
        unregister_pytree_node(cls, namespace=namespace)
        raise
    return cls


# Any name dataclasses exports that is not imported above (one a newer Python adds).
for _name in _dc.__all__:
    globals().setdefault(_name, getattr(_dc, _name))
del _name


def __getattr__(name: str) -> Any:
    if name == "DataclassEntry":  # loaded on first use: accessors are not needed to register
        from oxtree.accessors import DataclassEntry

        return DataclassEntry
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
