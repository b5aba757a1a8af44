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
    from collections.abc import Callable, Iterable, Iterator, Sequence
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
    "register_object",
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
    if not isinstance(cls, type):
        raise TypeError(f"register_dataclass expects a class, got {cls!r}")
    data, meta = _dataclass_fields(
        cls,
        _field_names(data_fields, "data_fields"),
        _field_names(meta_fields, "meta_fields"),
        _field_names(drop_fields, "drop_fields") or (),
        init_only=init_on_unflatten,
    )
    return _register_dataclass_fields(
        cls, data, meta, call_init=init_on_unflatten, namespace=namespace
    )


def _dataclass_fields(
    cls: type,
    data_fields: Iterable[str] | None,
    meta_fields: Iterable[str] | None,
    drop_fields: Iterable[str],
    *,
    init_only: bool = True,
    jax: bool = False,
) -> tuple[list[str], list[str]]:
    """``register_dataclass``'s data and meta field lists, inferred and checked once for both
    faces: optree's rules and words, or JAX's (``jax=True``, ``oxtree.tree_util``).

    Without the lists they are read off a dataclass's fields less ``drop_fields``: meta where
    ``metadata['static']`` is true (optree's face also takes ``pytree_node=False``), and on
    optree's face only ``__init__`` fields unless ``init_only`` is false. For a dataclass the
    two lists must name exactly those fields (``__init__`` ones when ``init_only``, less
    ``drop_fields``); they must not overlap.
    """
    import dataclasses  # here: importing it costs more than the rest of `import oxtree`

    if (data_fields is None) != (meta_fields is None):
        if jax:
            raise TypeError(
                "register_dataclass: data_fields and meta_fields must both be specified when "
                f"either is specified. Got {data_fields=} {meta_fields=}."
            )
        raise TypeError(
            "register_dataclass: give both data_fields and meta_fields, or neither "
            f"(got data_fields={data_fields!r}, meta_fields={meta_fields!r})"
        )
    is_dc = dataclasses.is_dataclass(cls)
    drop = set(drop_fields)
    if data_fields is None or meta_fields is None:
        if not is_dc:
            if jax:
                raise TypeError(
                    "register_dataclass: data_fields and meta_fields are required when "
                    f"nodetype is not a dataclass. Got nodetype={cls!r}."
                )
            raise TypeError(
                f"register_dataclass: {cls.__qualname__} is not a dataclass, so data_fields "
                "and meta_fields are required"
            )
        static = _is_jax_static if jax else _is_static
        # JAX reads every field but the dropped ones (and then refuses non-__init__ ones).
        fields = [
            f
            for f in dataclasses.fields(cls)
            if f.name not in drop and (jax or f.init or not init_only)
        ]
        meta = [f.name for f in fields if static(f)]
        data = [f.name for f in fields if not static(f)]
    else:
        data, meta = list(data_fields), list(meta_fields)
    overlap = set(data) & set(meta)
    if overlap and not jax:
        raise ValueError(
            f"register_dataclass: data_fields and meta_fields overlap for {cls.__qualname__}: "
            f"{sorted(overlap)}"
        )
    if is_dc:
        expected = {f.name for f in dataclasses.fields(cls) if f.init or not init_only} - drop
        given = {*data, *meta}
        if given != expected:
            missing, unexpected = expected - given, given - expected
            if jax:
                msg = (
                    "data_fields and meta_fields must include all dataclass fields with "
                    "``init=True`` and only them."
                )
                if missing:
                    msg += (
                        f" Missing fields: {missing}. Add them to drop_fields to suppress this "
                        "error."
                    )
                if unexpected:
                    msg += f" Unexpected fields: {unexpected}."
                raise ValueError(msg)
            which = "__init__ field" if init_only else "field"
            parts = [
                f"register_dataclass: data_fields and meta_fields must list every {which} "
                f"of {cls.__qualname__} (less drop_fields) and nothing else."
            ]
            if missing:
                parts.append(
                    f"Missing: {sorted(missing)} (add them to drop_fields to leave them out)."
                )
            if unexpected:
                parts.append(f"Unexpected: {sorted(unexpected)}.")
            raise ValueError(" ".join(parts))
    if overlap:
        raise ValueError(
            f"data_fields and meta_fields must not overlap. Overlapping fields: {overlap}."
        )
    return data, meta


def _is_jax_static(f: dataclasses.Field[Any]) -> bool:
    return bool(f.metadata.get("static", False))


def _is_static(f: dataclasses.Field[Any]) -> bool:
    md = f.metadata
    return bool(md.get("static", False)) or md.get("pytree_node", True) is False


def register_object(
    cls: _C | None = None,
    /,
    children: Iterable[str] | None = None,
    static: Iterable[str] | None = None,
    *,
    namespace: str = GLOBAL_NAMESPACE,
) -> Any:
    """Registers a class as a pytree node by its attributes, taken apart and rebuilt natively.

    ``children`` names the attributes that are the node's children; ``static`` the attributes
    kept in the treespec instead (compared with ``==``, never mapped over). Without
    ``children``, the children are the attributes the class declares, through ``__slots__``
    or class annotations (``ClassVar`` ones left out), base classes first, less ``static``.
    Every declared attribute must be a child or static: an instance is rebuilt from those
    alone. Names are as stored: a private ``__x`` of class ``C`` is ``_C__x``.

    Flattening reads each attribute as ``getattr`` does. Unflattening makes the instance with
    ``object.__new__(cls)`` and stores each attribute with ``object.__setattr__``, as the
    default pickle does: neither ``__init__`` (nor ``__post_init__``) nor the class's own
    ``__new__`` or ``__setattr__`` runs, so a class that validates its arguments, converts
    them, or forbids assignment after ``__init__`` comes back exactly as flattened. No Python
    function runs per node. Registration is by exact type: a subclass is a leaf until it is
    registered itself. Key paths name the attributes (``tree_paths`` gives ``('w',)``,
    accessors are :class:`~oxtree.GetAttrEntry`, the JAX face's keys ``GetAttrKey('w')``).
    Returns ``cls``; without it, a decorator: ``@register_object(static=['name'])``.
    ``oxtree.tree_util.register_object`` registers in the global namespace and with JAX;
    ``oxtree.jax.register`` mirrors a registration made here to JAX.

    >>> import oxtree
    >>> @register_object(static=['act'])
    ... class Dense:
    ...     __slots__ = ('w', 'b', 'act')
    ...     def __init__(self, w, b, act='relu'):
    ...         self.w, self.b, self.act = list(w), b, act
    >>> layer = Dense([1.0, 2.0], 0.5)
    >>> oxtree.tree_flatten(layer)
    ([1.0, 2.0, 0.5], PyTreeSpec(CustomTreeNode(Dense[(('act', 'relu'),)], [[*, *], *])))
    >>> oxtree.tree_map(lambda x: x * 10, layer).w
    [10.0, 20.0]
    """
    if cls is None:
        _check_namespace(namespace)
        return lambda c: register_object(c, children, static, namespace=namespace)
    _register_object(cls, children, static, namespace)
    return cls


def _register_object(
    cls: object, children: Iterable[str] | None, static: Iterable[str] | None, namespace: object
) -> tuple[list[str], list[str]]:
    """The one registration by attributes (both faces): checks the names, registers the
    core's rule (a dataclass rule that sets attributes, with ``GetAttrEntry`` accessors) and
    returns the child and static attribute names."""
    data, meta = _object_attributes(cls, children, static, namespace)
    from oxtree.accessors import GetAttrEntry

    _register_dataclass_fields(
        cls, data, meta, call_init=False, path_entry_type=GetAttrEntry, namespace=namespace
    )
    return data, meta


def _check_namespace(namespace: object) -> None:
    if not isinstance(namespace, str):
        raise TypeError(f"The namespace must be a string, got {namespace!r}.")


def _object_attributes(
    cls: object, children: Iterable[str] | None, static: Iterable[str] | None, namespace: object
) -> tuple[list[str], list[str]]:
    """``register_object``'s child and static attribute names for ``cls``, checked (both
    faces); the arguments are left as they are."""
    if not isinstance(cls, type):
        raise TypeError(f"register_object expects a class, got {cls!r}")
    _check_namespace(namespace)
    name = cls.__qualname__
    _check_object_new(cls)
    declared = _declared_attributes(cls)
    meta = _attribute_names(static, "static") or []
    data = _attribute_names(children, "children")
    if data is None:
        if not declared:
            raise TypeError(
                f"register_object: {name} declares no attributes (no __slots__, no class "
                "annotations); name its child attributes with children=[...]"
            )
        if undeclared := [n for n in meta if n not in declared]:
            raise ValueError(
                f"register_object: {name} does not declare {undeclared} (through __slots__ "
                "or class annotations); name its child attributes with children=[...] to "
                "register attributes it does not declare"
            )
        data = [n for n in declared if n not in meta]
    repeated = sorted({n for n in [*data, *meta] if [*data, *meta].count(n) > 1})
    if repeated:
        raise ValueError(
            f"register_object: {repeated} named more than once in children and static of {name}"
        )
    for attr in [*data, *meta]:
        _check_attribute(cls, attr)
    if left := [n for n in declared if n not in data and n not in meta]:
        raise ValueError(
            f"register_object: {name} declares attributes that are neither children nor "
            f"static: {left}; a rebuilt instance would lack them, so list each in children or "
            "static"
        )
    return data, meta


def _attribute_names(names: Iterable[str] | None, what: str) -> list[str] | None:
    if names is None:
        return None
    if isinstance(names, str):
        raise TypeError(
            f"register_object: {what} must be a sequence of attribute names, not a single str "
            f"({names!r}); write [{names!r}]"
        )
    try:
        listed = list(names)
    except TypeError:
        raise TypeError(
            f"register_object: {what} must be a sequence of attribute names, got {names!r}"
        ) from None
    import keyword

    for n in listed:
        if not isinstance(n, str):
            raise TypeError(f"register_object: {what} must hold attribute names (str), got {n!r}")
        if not n.isidentifier() or keyword.iskeyword(n):
            raise ValueError(
                f"register_object: {n!r} in {what} is not an attribute name (an identifier "
                "that is not a keyword)"
            )
    return listed


def _check_object_new(cls: type) -> None:
    """Refuses a class whose instances ``object.__new__`` cannot make (one built on ``list``,
    ``int``, an extension type...): ``object.__new__`` allows a class whose first base with a
    ``__new__`` written in C, past those with a Python ``__new__``, has object's."""
    import types

    base = cls
    while isinstance(base.__new__, types.FunctionType) and base.__base__ is not None:
        base = base.__base__
    if base.__new__ is not object.__new__:
        # The first class written in C along the MRO names what the instances are made of.
        builtin = next(k for k in cls.__mro__ if not k.__flags__ & _HEAP_TYPE)
        raise TypeError(
            f"register_object: {cls.__qualname__} is built on {builtin.__qualname__}, whose "
            "instances object.__new__ cannot make; register it with register_pytree_node"
        )


# Py_TPFLAGS_HEAPTYPE: set for classes made by a class statement (or `type(...)`).
_HEAP_TYPE = 1 << 9


def _mangled(cls: type, name: str) -> str:
    """``name`` as a class body of ``cls`` stores it: a private ``__x`` becomes ``_C__x``."""
    if not name.startswith("__") or name.endswith("__"):
        return name
    owner = cls.__name__.lstrip("_")
    return f"_{owner}{name}" if owner else name


def _declared_attributes(cls: type) -> list[str]:
    """The attributes ``cls`` declares, base classes first: each class's ``__slots__``
    (``__dict__`` and ``__weakref__`` left out), then its annotations that are not
    ``ClassVar``."""
    names: dict[str, None] = {}
    for klass in reversed(cls.__mro__[:-1]):
        slots = klass.__dict__.get("__slots__", ())
        for slot in (slots,) if isinstance(slots, str) else slots:
            if isinstance(slot, str) and slot not in ("__dict__", "__weakref__"):
                names[_mangled(klass, slot)] = None
        for attr, annotation in _own_annotations(klass).items():
            if not _is_classvar(annotation):
                names[attr] = None
    return list(names)


def _own_annotations(klass: type) -> dict[str, Any]:
    """The annotations written in ``klass``'s own body (not its bases')."""
    import sys

    if sys.version_info >= (3, 14):
        import annotationlib

        return dict(annotationlib.get_annotations(klass, format=annotationlib.Format.FORWARDREF))
    import inspect

    return dict(inspect.get_annotations(klass))


def _is_classvar(annotation: Any) -> bool:
    if isinstance(annotation, str):
        import re

        # A quoted annotation under `from __future__ import annotations` is quoted twice.
        annotation = annotation.strip().strip("'\"")
        return re.match(r"^\s*(?:\w+\s*\.\s*)*ClassVar\b", annotation) is not None
    import typing

    return annotation is typing.ClassVar or typing.get_origin(annotation) is typing.ClassVar


def _check_attribute(cls: type, attr: str) -> None:
    """Refuses an attribute name that instances of ``cls`` cannot hold as a plain attribute:
    a property or other data descriptor (but a slot), a method, or, for a class with
    ``__slots__`` and no ``__dict__``, a name that is not one of its slots."""
    import types

    found = _class_attribute(cls, attr)
    where = f"{cls.__qualname__}.{attr}"
    if isinstance(found, types.MemberDescriptorType):
        return
    if isinstance(found, property):
        raise TypeError(
            f"register_object: {where} is a property, not an attribute instances store; "
            "name the attribute it reads"
        )
    kind = type(found)
    if hasattr(kind, "__set__") or hasattr(kind, "__delete__"):
        raise TypeError(
            f"register_object: {where} is a data descriptor ({kind.__qualname__}), not an "
            "attribute instances store"
        )
    if isinstance(found, (types.FunctionType, staticmethod, classmethod)):
        raise TypeError(f"register_object: {where} is a method, not an attribute")
    if cls.__dictoffset__ == 0:
        slots = [
            n
            for n in _declared_attributes(cls)
            if isinstance(_class_attribute(cls, n), types.MemberDescriptorType)
        ]
        raise TypeError(
            f"register_object: {cls.__qualname__} has __slots__ and no __dict__, and {attr!r} "
            f"is not one of its slots {slots}"
        )


def _class_attribute(cls: type, attr: str) -> Any:
    """What ``attr`` names in the class dicts along ``cls.__mro__`` (None when nothing)."""
    return next((k.__dict__[attr] for k in cls.__mro__ if attr in k.__dict__), None)


def _jax_functions(
    cls: type, children: Sequence[str], static: Sequence[str], key_class: Callable[[str], Any]
) -> tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any]]:
    """JAX's ``flatten_with_keys``, ``unflatten`` and ``flatten`` for a class registered by its
    attributes (``register_pytree_with_keys``'s arguments), doing what the core's rule does:
    getattr to flatten, ``object.__new__`` and ``object.__setattr__`` to rebuild, the static
    values' tuple as aux data, ``key_class(name)`` (JAX's ``GetAttrKey``) as keys.

    They are compiled from source written for these names: attribute loads and, for a class
    that keeps object's ``__setattr__`` (whose stores then are ``object.__setattr__``'s),
    attribute stores in the bytecode itself, which the interpreter specialises for slots and
    instance dicts. A name that is no identifier (possible in a dataclass rule) is read and
    stored by ``getattr`` and ``object.__setattr__`` calls. See docs/registration.md for what
    this saves over calling ``object.__setattr__`` per attribute.
    """
    import keyword

    def plain(name: str) -> bool:
        return name.isidentifier() and not keyword.iskeyword(name)

    def load(name: str) -> str:
        return f"obj.{name}" if plain(name) else f"_get(obj, {name!r})"

    def loads(names: Sequence[str]) -> str:
        return "".join(f"{load(n)}, " for n in names)

    pairs = "".join(f"(_k{i}, {load(n)}), " for i, n in enumerate(children))
    lines = [
        "def flatten(obj):",
        f"    return ({loads(children)}), ({loads(static)})",
        "def flatten_with_keys(obj):",
        f"    return ({pairs}), ({loads(static)})",
        "def unflatten(aux, children):",
        "    obj = _new(_cls)",
    ]
    # Decided now: a class given its own __setattr__ after registration would have it run by
    # these stores (the core never runs it); such a class is to be registered afterwards.
    stores = cls.__setattr__ is object.__setattr__
    for source, names in (("children", children), ("aux", static)):
        if not names:
            continue
        if stores and all(map(plain, names)):
            lines.append(f"    {loads(names)}= {source}")
        else:
            lines += [f"    _set(obj, {n!r}, {source}[{i}])" for i, n in enumerate(names)]
    lines.append("    return obj")
    scope: dict[str, Any] = {
        "_new": object.__new__,
        "_get": getattr,
        "_set": object.__setattr__,
        "_cls": cls,
        **{f"_k{i}": key_class(n) for i, n in enumerate(children)},
    }
    exec(compile("\n".join(lines), f"<oxtree attributes of {cls.__qualname__}>", "exec"), scope)
    return scope["flatten_with_keys"], scope["unflatten"], scope["flatten"]


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
