"""How JAX's own registry takes a type apart: what the core asks, once per type, when a walk
that reads JAX's registry (the JAX face, ``oxtree.jax``, the main face after
:func:`oxtree.use_jax_registry`) meets a type oxtree does not register.

Nothing here imports JAX: the core calls :func:`describe` only once ``jax._src.tree_util`` is
in ``sys.modules``. The answer reads JAX's public registry (``default_registry.is_node``) and
the table JAX keeps beside it of every type registered through its API, with the functions
each was registered with.
"""

from __future__ import annotations

import sys
from collections import OrderedDict, defaultdict
from typing import Any

# Types JAX registers that oxtree's walks know natively (as nodes of their own kinds).
_NATIVE = (OrderedDict, defaultdict)


def describe(cls: type) -> tuple[Any, ...] | None:
    """JAX's rule for instances of ``cls``, or None when JAX does not make them custom
    nodes (JAX not imported, a leaf, a builtin container or namedtuple).

    ``("dataclass", data_fields, meta_fields, keys)`` for a class registered with
    ``jax.tree_util.register_dataclass`` (flax.struct, chex): walked natively, rebuilt by
    calling the class with keyword arguments as JAX does, keyed by JAX's ``GetAttrKey``.
    ``("custom", flatten, unflatten, flatten_with_keys)`` for every other registration: the
    functions it was registered with, and a keyed flatten that gives JAX's own keys (those of
    its ``flatten_with_keys``, or ``FlattenedIndexKey`` where it has none).
    """
    tu = sys.modules.get("jax._src.tree_util")
    if tu is None or cls in _NATIVE:
        return None
    registry = tu.default_registry
    if not registry.is_node(cls):
        return None
    try:
        entry = tu._registry.get(cls)
    except TypeError:  # a class whose metaclass makes it unhashable: not in JAX's table
        entry = None
    if entry is None:
        # A builtin kind of JAX's (tuple, list, dict, None, a namedtuple), or a type
        # registered with JAX's C++ registry directly, bypassing its Python API.
        if issubclass(cls, tuple) and hasattr(cls, "_fields"):
            return None
        if cls in (tuple, list, dict, type(None)):
            return None
        return (
            "custom",
            registry.flatten_one_level,
            _unflatten_through(tu, cls),
            registry.flatten_one_level_with_keys,
        )
    fields = _dataclass_fields(entry.to_iter, cls)
    if fields is not None:
        data, meta = fields
        return ("dataclass", data, meta, tuple(tu.GetAttrKey(name) for name in data))
    return ("custom", entry.to_iter, entry.from_iter, registry.flatten_one_level_with_keys)


def _dataclass_fields(flatten: Any, cls: type) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """The data and meta field names of a ``register_dataclass`` registration, read from the
    flatten function JAX made for it (its closure holds both tuples); None for any other
    function, which is then called as it is."""
    code = getattr(flatten, "__code__", None)
    closure = getattr(flatten, "__closure__", None)
    qualname = getattr(flatten, "__qualname__", "")
    module = getattr(flatten, "__module__", "")
    if (
        code is None
        or closure is None
        or module != "jax._src.tree_util"
        # jax 0.10 makes it in register_dataclass, jax 0.12 in its helper _register_dataclass.
        or qualname.partition(".<locals>.")[::2]
        not in (("register_dataclass", "flatten_func"), ("_register_dataclass", "flatten_func"))
    ):
        return None
    cells = dict(zip(code.co_freevars, closure, strict=True))
    try:
        data = tuple(cells["data_fields"].cell_contents)
        meta = tuple(cells["meta_fields"].cell_contents)
    except (KeyError, ValueError, TypeError):
        return None
    if not all(type(name) is str for name in (*data, *meta)):
        return None
    return data, meta


def _unflatten_through(tu: Any, cls: type) -> Any:
    """An unflatten function for a type JAX's C++ registry knows without its Python table:
    one node of JAX's own treedef, rebuilt by JAX."""
    leaf = tu.default_registry.flatten(0)[1]
    make = tu.PyTreeDef.from_node_data_and_children

    def unflatten(aux: Any, children: Any) -> Any:
        children = list(children)
        treedef = make(tu.default_registry, (cls, aux), [leaf] * len(children))
        return treedef.unflatten(children)

    unflatten.__qualname__ = f"{cls.__qualname__}.<unflatten through JAX>"
    return unflatten
