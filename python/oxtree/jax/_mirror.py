"""Mirroring: oxtree's registrations made known to JAX's one registry (:func:`register`,
:func:`register_namespace`, :func:`mirrored_types`)."""

from __future__ import annotations

import functools
import operator
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import jax.tree_util as jtu

from oxtree import _core, _jax_hook
from oxtree._core import (
    DictKey,
    FlattenedIndexKey,
    GetAttrKey,
    SequenceKey,
    _flatten_one_level,
    registered_types,
)
from oxtree.module._module import Module
from oxtree.registry import _jax_functions

_C = TypeVar("_C", bound=type)


# type -> the oxtree namespace whose rule was mirrored ("" for the global one). JAX has one
# registry, so a type is mirrored from one namespace only.
_MIRRORED: dict[type, str] = {}

_MIRROR_LOCK = threading.Lock()

# oxtree's key classes -> JAX's. FlattenedIndexKey is only converted for int keys (JAX's takes
# nothing else); an optree-style entry such as 'a' keeps oxtree's key, which prints the same.
_JAX_KEYS: dict[type, Callable[[Any], Any]] = {
    SequenceKey: lambda k: jtu.SequenceKey(k.idx),
    DictKey: lambda k: jtu.DictKey(k.key),
    GetAttrKey: lambda k: jtu.GetAttrKey(k.name),
    FlattenedIndexKey: lambda k: jtu.FlattenedIndexKey(k.key) if type(k.key) is int else k,
}


class _KnownToJax(ValueError):
    """Raised by :func:`register` for a type JAX already has from other code."""


def _jax_key(key: Any) -> Any:
    convert = _JAX_KEYS.get(type(key))
    return key if convert is None else convert(key)


def _namespace_label(namespace: str) -> str:
    return "the global namespace" if not namespace else f"namespace {namespace!r}"


def _home_namespace(cls: type, namespace: str) -> str | None:
    """The namespace whose registration of ``cls`` oxtree uses in calls with ``namespace``:
    ``namespace`` itself when ``cls`` is registered there, else "" when it is registered
    globally, else None."""
    in_global = cls in registered_types()
    if namespace:
        # `registered_types(namespace=ns)` lists the global types and then ns's own, so a type
        # registered in both appears twice.
        count = registered_types(namespace=namespace).count(cls)
        if count > int(in_global):
            return namespace
    return "" if in_global else None


def _mirror_functions(
    namespace: str,
) -> tuple[Callable[[Any], Any], Callable[[Any], Any], Callable[[Any, Any], Any]]:
    """JAX's flatten, flatten-with-keys and unflatten for a type, built on oxtree's one-level
    flatten: the aux data is the node's one-level treespec (it holds oxtree's aux data, a
    dataclass's meta fields or a static value, compares and hashes as they do) and
    unflattening is that treespec's own, so every kind of oxtree registration mirrors alike.
    The walks are the JAX face's, since JAX flattens the type: aux data need not be hashable
    (JAX compares it when it must, a static dict for one)."""

    def flatten(obj: Any) -> tuple[list[Any], Any]:
        return _flatten_one_level(obj, namespace=namespace, jax=True)

    def flatten_with_keys(obj: Any) -> tuple[list[tuple[Any, Any]], Any]:
        # Everything below `obj` is a leaf: one level, with the keys oxtree's JAX face gives
        # (a registered flatten_with_keys's keys, GetAttrKey for dataclass fields, ...).
        pairs, spec = _core.jax_face._flatten_with_path_in(
            obj, functools.partial(operator.is_not, obj), namespace=namespace
        )
        return [(_jax_key(path[0]), child) for path, child in pairs], spec

    def unflatten(spec: Any, children: Any) -> Any:
        return spec.unflatten(children)

    return flatten, flatten_with_keys, unflatten


def register(cls: _C, namespace: str = "") -> _C:
    """Makes ``cls``, registered in oxtree, a pytree node to JAX too; returns ``cls``.

    JAX then flattens it as oxtree does in calls with ``namespace=namespace``: the same
    children in the same order, the same aux data (so treedefs compare as oxtree's treespecs
    do) and the same keys in ``jax.tree_util.tree_flatten_with_path``. Mirroring a type again
    from the same namespace does nothing. JAX has one registry, so mirroring a type from a
    second namespace with a different rule raises ValueError, as does a type JAX already
    knows from elsewhere. A class rebuilt attribute by attribute (:func:`oxtree.register_object`,
    a dataclass registered with ``init_on_unflatten=False``) is given to JAX with functions
    compiled for its attributes, the tuple of its static values as aux data; any other rule
    with functions over oxtree's one-level flatten, the node's treespec as aux data.

    A type registered through ``oxtree.tree_util`` (JAX's face) needs no mirroring: it is
    registered with JAX by that call, with its own functions, and ``register`` leaves it as
    it is (as it does a Module class). Only a rule of another namespace raises, as above.

    >>> import dataclasses, jax, oxtree
    >>> @dataclasses.dataclass
    ... class Scaled:
    ...     value: jax.Array
    ...     scale: float = dataclasses.field(default=2.0, metadata={'static': True})
    >>> _ = oxtree.register_dataclass(Scaled)
    >>> _ = register(Scaled)
    >>> jax.jit(lambda s: s.value * s.scale)(Scaled(jax.numpy.ones(2)))
    Array([2., 2.], dtype=float32)
    >>> jax.tree_util.tree_flatten_with_path(Scaled(1.0))[0]
    [((GetAttrKey(name='value'),), 1.0)]
    """
    if not isinstance(cls, type):
        raise TypeError(f"oxtree.jax.register expects a class, got {cls!r}")
    if not isinstance(namespace, str):
        raise TypeError(f"namespace must be a str, got {type(namespace).__name__}")
    if issubclass(cls, Module):
        # Modules register themselves with JAX (with their GetAttrKey keys) once jax is
        # imported; mirroring one again is the harmless no-op it is for any mirrored type.
        _jax_hook.flush()
        return cls
    home = _home_namespace(cls, namespace)
    if home is None:
        raise ValueError(
            f"{cls.__qualname__} is not registered in oxtree ({_namespace_label(namespace)}); "
            "register it with oxtree.register_pytree_node, register_dataclass or "
            "register_static first"
        )
    _jax_hook.flush()  # registrations made while jax was half imported, if any
    if _jax_hook.reached_jax(cls):
        # Registered through oxtree.tree_util, which registered it with JAX (globally).
        if home == "":
            return cls
        raise ValueError(
            f"{cls.__qualname__} is registered with JAX through oxtree.tree_util (the rule of "
            f"the global namespace); JAX has a single registry, so it cannot also follow the "
            f"rule of {_namespace_label(home)}"
        )
    with _MIRROR_LOCK:
        done = _MIRRORED.get(cls)
        if done is not None:
            if done == home:
                return cls
            raise ValueError(
                f"{cls.__qualname__} is already mirrored to JAX from {_namespace_label(done)}; "
                f"JAX has a single registry, so it cannot also follow the rule of "
                f"{_namespace_label(home)}"
            )
        fields = _core._attribute_fields(cls, namespace=home)
        if fields is not None:
            # Rebuilt by attributes (register_object): functions made for them, as
            # oxtree.tree_util.register_object gives JAX.
            flatten_with_keys, unflatten, flatten = _jax_functions(cls, *fields, jtu.GetAttrKey)
        else:
            flatten, flatten_with_keys, unflatten = _mirror_functions(home)
        try:
            jtu.register_pytree_with_keys(cls, flatten_with_keys, unflatten, flatten)
        except ValueError as err:
            raise _KnownToJax(
                f"{cls.__qualname__} is already registered as a pytree node in JAX by other "
                "code, so oxtree cannot mirror it"
            ) from err
        _MIRRORED[cls] = home
    return cls


def register_namespace(namespace: str = "") -> list[type]:
    """Mirrors (see :func:`register`) every type oxtree has registered in ``namespace`` itself
    (the global namespace by default); returns the types this call mirrored. Types mirrored
    before, types JAX already has from other code, and types registered with JAX by
    ``oxtree.tree_util`` or as Module classes are left as they are, so calling it again after
    new registrations mirrors just those.

    >>> import jax, oxtree
    >>> class Box:
    ...     def __init__(self, x): self.x = x
    >>> _ = oxtree.register_pytree_node(
    ...     Box, lambda b: ((b.x,), None), lambda _, c: Box(*c), namespace='boxes')
    >>> register_namespace('boxes') == [Box]
    True
    >>> register_namespace('boxes')
    []
    >>> jax.tree_util.tree_leaves([Box(1), Box(2)])
    [1, 2]
    """
    if not isinstance(namespace, str):
        raise TypeError(f"namespace must be a str, got {type(namespace).__name__}")
    listed = registered_types(namespace=namespace)
    # The global types come first in a namespace's listing; the namespace's own follow.
    own = listed[len(registered_types()) :] if namespace else listed
    new = []
    for cls in own:
        if cls in _MIRRORED or _jax_hook.reached_jax(cls):
            continue
        try:
            register(cls, namespace)
        except _KnownToJax:
            continue
        new.append(cls)
    return new


def mirrored_types() -> dict[type, str]:
    """The types mirrored to JAX so far, each with the oxtree namespace its rule comes from.

    These are the types :func:`register` and :func:`register_namespace` registered with JAX
    (with oxtree's rule). Types registered through ``oxtree.tree_util``, which that call
    registered with JAX with their own functions, and Module classes are not listed.

    >>> isinstance(mirrored_types(), dict)
    True
    """
    with _MIRROR_LOCK:
        return dict(_MIRRORED)
