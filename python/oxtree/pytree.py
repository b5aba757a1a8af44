"""The tree functions under short names (``pytree.flatten``, ``pytree.map``, ...), and
:func:`reexport`, which makes a copy of this module bound to a registry namespace.

>>> from oxtree import pytree
>>> pytree.map(lambda x: x + 1, {'a': (1, 2)})
{'a': (2, 3)}

A library gives itself tree utilities bound to its own registry namespace:

>>> mylib = pytree.reexport(namespace='mylib', module='mylib.pytree')
>>> @mylib.dataclasses.dataclass
... class Pair:
...     a: int
...     b: int
>>> mylib.leaves([Pair(1, 2)]), pytree.leaves([Pair(1, 2)])
([1, 2], [Pair(a=1, b=2)])
"""

from __future__ import annotations

import functools as _functools
import inspect
import sys
import types
from collections.abc import Callable
from typing import Any

import oxtree as _ox

__all__ = [
    "PyTreeAccessor",
    "PyTreeEntry",
    "PyTreeKind",
    "PyTreeSpec",
    "accessors",
    "all",
    "any",
    "broadcast_common",
    "broadcast_map",
    "broadcast_map_with_accessor",
    "broadcast_map_with_path",
    "broadcast_prefix",
    "combine",
    "dataclasses",
    "dict_insertion_ordered",
    "flatten",
    "flatten_one_level",
    "flatten_with_accessor",
    "flatten_with_path",
    "functools",
    "is_leaf",
    "iter",
    "leaves",
    "map",
    "map_",
    "map_with_accessor",
    "map_with_accessor_",
    "map_with_path",
    "map_with_path_",
    "max",
    "min",
    "partition",
    "paths",
    "reduce",
    "reexport",
    "register_node",
    "register_node_class",
    "replace_nones",
    "set",
    "structure",
    "sum",
    "transpose",
    "transpose_map",
    "transpose_map_with_accessor",
    "transpose_map_with_path",
    "unflatten",
    "unregister_node",
]


PyTreeAccessor = _ox.PyTreeAccessor
PyTreeEntry = _ox.PyTreeEntry
PyTreeKind = _ox.PyTreeKind
PyTreeSpec = _ox.PyTreeSpec
dataclasses = _ox.dataclasses
functools = types.SimpleNamespace(
    partial=_ox.Partial,
    reduce=_ox.tree_reduce,
    __doc__="Partial and reduce, as optree.pytree.functools offers them.",
)

accessors = _ox.tree_accessors
all = _ox.tree_all
any = _ox.tree_any
broadcast_common = _ox.tree_broadcast_common
broadcast_map = _ox.tree_broadcast_map
broadcast_map_with_accessor = _ox.tree_broadcast_map_with_accessor
broadcast_map_with_path = _ox.tree_broadcast_map_with_path
dict_insertion_ordered = _ox.dict_insertion_ordered
broadcast_prefix = _ox.tree_broadcast_prefix
combine = _ox.tree_combine
flatten = _ox.tree_flatten
flatten_one_level = _ox.tree_flatten_one_level
flatten_with_accessor = _ox.tree_flatten_with_accessor
flatten_with_path = _ox.tree_flatten_with_path
is_leaf = _ox.tree_is_leaf
iter = _ox.tree_iter
leaves = _ox.tree_leaves
map = _ox.tree_map
map_ = _ox.tree_map_
map_with_accessor = _ox.tree_map_with_accessor
map_with_accessor_ = _ox.tree_map_with_accessor_
map_with_path = _ox.tree_map_with_path
map_with_path_ = _ox.tree_map_with_path_
max = _ox.tree_max
min = _ox.tree_min
partition = _ox.tree_partition
paths = _ox.tree_paths
reduce = _ox.tree_reduce
register_node = _ox.register_pytree_node
register_node_class = _ox.register_pytree_node_class
replace_nones = _ox.tree_replace_nones
set = _ox.tree_set
structure = _ox.tree_structure
sum = _ox.tree_sum
transpose = _ox.tree_transpose
transpose_map = _ox.tree_transpose_map
transpose_map_with_accessor = _ox.tree_transpose_map_with_accessor
transpose_map_with_path = _ox.tree_transpose_map_with_path
unflatten = _ox.tree_unflatten
unregister_node = _ox.unregister_pytree_node


def _takes_namespace(func: Callable[..., Any]) -> bool:
    try:
        return "namespace" in inspect.signature(func).parameters
    except (TypeError, ValueError):
        return False


def _bind(func: Callable[..., Any], namespace: str) -> Callable[..., Any]:
    if not _takes_namespace(func):
        return func

    @_functools.wraps(func)
    def bound(*args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("namespace", namespace)
        return func(*args, **kwargs)

    return bound


def reexport(*, namespace: str, module: str | None = None) -> types.ModuleType:
    """A module with this module's functions, each defaulting to ``namespace``.

    Its ``dataclasses.dataclass``, ``register_node`` and ``register_node_class`` register in
    that namespace; its tree functions look types up there (then in the global namespace).
    ``module`` names the new module (default: ``<caller's module>.pytree``); it is added to
    ``sys.modules``.
    """
    if not isinstance(namespace, str) or not namespace:
        raise ValueError("reexport needs a non-empty namespace")
    if module is None:
        caller = inspect.currentframe()
        caller_name = (
            caller.f_back.f_globals.get("__name__", "__main__")
            if caller and caller.f_back
            else "__main__"
        )
        module = f"{caller_name}.pytree"
    mod = types.ModuleType(module, f"oxtree's tree utilities bound to namespace {namespace!r}.")
    for name in __all__:
        if name in ("reexport", "dataclasses", "functools"):
            continue
        value = globals()[name]
        setattr(
            mod,
            name,
            _bind(value, namespace) if callable(value) and not isinstance(value, type) else value,
        )
    mod.dataclasses = types.SimpleNamespace(  # type: ignore[attr-defined]
        **{n: getattr(_ox.dataclasses, n) for n in _ox.dataclasses.__all__},
    )
    mod.dataclasses.dataclass = _bind(_ox.dataclasses.dataclass, namespace)  # type: ignore[attr-defined]
    mod.dataclasses.make_dataclass = _bind(_ox.dataclasses.make_dataclass, namespace)  # type: ignore[attr-defined]
    mod.functools = types.SimpleNamespace(  # type: ignore[attr-defined]
        partial=_ox.Partial, reduce=_bind(_ox.tree_reduce, namespace)
    )
    mod.namespace = namespace  # type: ignore[attr-defined]
    mod.__all__ = [n for n in __all__ if n != "reexport"]  # type: ignore[attr-defined]
    sys.modules[module] = mod
    return mod
