"""oxtree: fast, complete pytrees with a Rust core.

The main package is a drop-in for optree: the same names, signatures and treespec reprs
(``PyTreeSpec(...)``), dicts rebuilt in insertion order, and errors that name the key path
where two trees part.

>>> import oxtree
>>> leaves, spec = oxtree.tree_flatten({'b': 1, 'a': (2, None)})
>>> leaves, spec
([2, 1], PyTreeSpec({'a': (*, None), 'b': *}))
>>> oxtree.tree_unflatten(spec, [20, 10])
{'b': 10, 'a': (20, None)}
"""

from __future__ import annotations

# The core's names are imported here (cheap: one extension module); every other public name
# comes from a Python submodule that is imported on first use (PEP 562 `__getattr__` below),
# so `import oxtree` stays fast: between them the submodules pull in typing, dataclasses,
# inspect, json, re... A name registered in `_LAZY` is also in `__all__` and `dir(oxtree)`.
from oxtree._core import (
    GLOBAL_NAMESPACE,
    MAX_RECURSION_DEPTH,
    NONE_IS_LEAF,
    NONE_IS_NODE,
    DictKey,
    FlattenedIndexKey,
    GetAttrKey,
    PathPattern,
    PyTreeKind,
    PyTreeSpec,
    SequenceKey,
    all_leaves,
    keystr,
    register_static,
    registered_types,
    tree_flatten,
    tree_flatten_with_path,
    tree_is_leaf,
    tree_labels,
    tree_leaves,
    tree_leaves_with_path,
    tree_map,
    tree_map_,
    tree_map_with_path,
    tree_mask,
    tree_paths,
    tree_set_matching,
    tree_structure,
    tree_unflatten,
    unregister_pytree_node,
)

# Imported now, since importing it registers Partial as a node: `registered_types()` lists
# Partial from the start, as it always has.
from oxtree.functools import Partial

# `typing.TYPE_CHECKING` without importing typing; type checkers treat the name as true.
TYPE_CHECKING = False
if TYPE_CHECKING:  # what the lazily loaded names are, for type checkers
    from collections.abc import Callable, Iterator
    from typing import Any

    from oxtree import dataclasses, pytree, tree, tree_util
    from oxtree.accessors import (
        AutoEntry,
        DataclassEntry,
        FlattenedEntry,
        GetAttrEntry,
        GetItemEntry,
        MappingEntry,
        NamedTupleEntry,
        PyTreeAccessor,
        PyTreeEntry,
        SequenceEntry,
        StructSequenceEntry,
        tree_accessors,
        tree_flatten_with_accessor,
        tree_map_with_accessor,
        tree_set,
    )
    from oxtree.ops import (
        FlattenOneLevelOutput,
        broadcast_common,
        broadcast_prefix,
        prefix_errors,
        tree_all,
        tree_any,
        tree_broadcast_common,
        tree_broadcast_map,
        tree_broadcast_map_with_accessor,
        tree_broadcast_map_with_path,
        tree_broadcast_prefix,
        tree_combine,
        tree_flatten_one_level,
        tree_map_with_accessor_,
        tree_map_with_path_,
        tree_max,
        tree_min,
        tree_partition,
        tree_reduce,
        tree_reduce_associative,
        tree_replace_nones,
        tree_sum,
        tree_transpose,
        tree_transpose_map,
        tree_transpose_map_with_accessor,
        tree_transpose_map_with_path,
    )
    from oxtree.registry import (
        dict_insertion_ordered,
        register_dataclass,
        register_object,
        register_pytree_node,
        register_pytree_node_class,
        use_jax_registry,
    )
    from oxtree.serialization import treespec_from_json, treespec_to_json
    from oxtree.treespec import (
        treespec_accessors,
        treespec_child,
        treespec_children,
        treespec_defaultdict,
        treespec_deque,
        treespec_dict,
        treespec_entries,
        treespec_entry,
        treespec_from_collection,
        treespec_frozendict,
        treespec_is_leaf,
        treespec_is_one_level,
        treespec_is_prefix,
        treespec_is_strict_leaf,
        treespec_is_suffix,
        treespec_leaf,
        treespec_list,
        treespec_namedtuple,
        treespec_none,
        treespec_one_level,
        treespec_ordereddict,
        treespec_paths,
        treespec_structseq,
        treespec_transform,
        treespec_tuple,
    )
    from oxtree.types import (
        is_namedtuple,
        is_namedtuple_class,
        is_namedtuple_instance,
        is_structseq,
        is_structseq_class,
        is_structseq_instance,
        namedtuple_fields,
        structseq_fields,
    )
    from oxtree.typing import CustomTreeNode, FlattenFunc, PyTree, PyTreeTypeVar, UnflattenFunc

# The submodules, each loaded on first use of `oxtree.<submodule>` (or an import of it).
_SUBMODULES = frozenset(
    {
        "accessors",
        "dataclasses",
        "flat",
        "functools",
        "graph",
        "module",
        "ops",
        "pretty",
        "pytree",
        "registry",
        "rngs",
        "serialization",
        "tree",
        "tree_util",
        "treespec",
        "types",
        "typing",
        "utils",
        "integrations",
        "version",
    }
)

# Each lazily loaded name -> the submodule defining it.
_LAZY: dict[str, str] = {}


def _lazy(module: str, names: str) -> list[str]:
    """Registers the space-separated ``names`` as loaded from ``oxtree.<module>``; lists them."""
    listed = names.split()
    _LAZY.update(dict.fromkeys(listed, module))
    return listed


_lazy(
    "accessors",
    "AutoEntry DataclassEntry FlattenedEntry GetAttrEntry GetItemEntry MappingEntry "
    "NamedTupleEntry PyTreeAccessor PyTreeEntry SequenceEntry StructSequenceEntry tree_accessors "
    "tree_flatten_with_accessor tree_map_with_accessor tree_set",
)
_lazy(
    "ops",
    "FlattenOneLevelOutput broadcast_common broadcast_prefix prefix_errors tree_all tree_any "
    "tree_broadcast_common tree_broadcast_map tree_broadcast_map_with_path "
    "tree_broadcast_map_with_accessor tree_broadcast_prefix tree_combine tree_flatten_one_level tree_map_with_accessor_ "
    "tree_map_with_path_ tree_max tree_min tree_partition tree_reduce tree_reduce_associative "
    "tree_replace_nones tree_sum tree_transpose tree_transpose_map tree_transpose_map_with_accessor "
    "tree_transpose_map_with_path",
)
_lazy(
    "registry",
    "dict_insertion_ordered register_dataclass register_object register_pytree_node "
    "register_pytree_node_class use_jax_registry",
)
_lazy(
    "types",
    "is_namedtuple is_namedtuple_class is_namedtuple_instance is_structseq is_structseq_class "
    "is_structseq_instance namedtuple_fields structseq_fields",
)
_lazy("typing", "CustomTreeNode FlattenFunc PyTree PyTreeTypeVar UnflattenFunc")
_lazy("serialization", "treespec_from_json treespec_to_json")
_lazy(
    "treespec",
    "treespec_accessors treespec_child treespec_children treespec_defaultdict treespec_deque "
    "treespec_dict treespec_entries treespec_entry treespec_from_collection treespec_frozendict "
    "treespec_is_leaf "
    "treespec_is_one_level treespec_is_prefix treespec_is_strict_leaf treespec_is_suffix "
    "treespec_leaf treespec_list treespec_namedtuple treespec_none treespec_one_level "
    "treespec_ordereddict treespec_paths treespec_structseq treespec_transform treespec_tuple",
)

__version__ = "0.1.0"

#: optree's and JAX's other name for a treespec.
PyTreeDef = PyTreeSpec


def tree_iter(
    tree: Any,
    /,
    is_leaf: Callable[[Any], bool] | None = None,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> Iterator[Any]:
    """An iterator over the leaves of ``tree``, left to right.

    >>> list(tree_iter({'b': 2, 'a': [1, None]}))
    [1, 2]
    """
    return iter(tree_leaves(tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace))


__all__ = [
    "AutoEntry",
    "DataclassEntry",
    "DictKey",
    "FlattenedEntry",
    "FlattenedIndexKey",
    "GetAttrEntry",
    "GetAttrKey",
    "GetItemEntry",
    "MappingEntry",
    "NamedTupleEntry",
    "PyTreeAccessor",
    "PyTreeEntry",
    "SequenceEntry",
    "SequenceKey",
    "StructSequenceEntry",
    "keystr",
    "tree_accessors",
    "tree_flatten_with_accessor",
    "tree_flatten_with_path",
    "tree_leaves_with_path",
    "tree_map_with_accessor",
    "tree_map_with_path",
    "tree_paths",
    "tree_set",
    "PathPattern",
    "tree_mask",
    "tree_labels",
    "tree_set_matching",
    "tree_broadcast_prefix",
    "broadcast_prefix",
    "tree_broadcast_common",
    "broadcast_common",
    "tree_broadcast_map",
    "tree_broadcast_map_with_path",
    "prefix_errors",
    "tree_transpose",
    "tree_transpose_map",
    "tree_transpose_map_with_path",
    "tree_reduce",
    "tree_reduce_associative",
    "tree_sum",
    "tree_max",
    "tree_min",
    "tree_all",
    "tree_any",
    "tree_partition",
    "tree_combine",
    "FlattenOneLevelOutput",
    "tree_flatten_one_level",
    "tree_replace_nones",
    "tree_map_with_path_",
    "tree_map_with_accessor_",
    "treespec_accessors",
    "treespec_child",
    "treespec_children",
    "treespec_defaultdict",
    "treespec_deque",
    "treespec_dict",
    "treespec_entries",
    "treespec_entry",
    "treespec_from_collection",
    "treespec_from_json",
    "treespec_to_json",
    "treespec_is_leaf",
    "treespec_is_one_level",
    "treespec_is_prefix",
    "treespec_is_strict_leaf",
    "treespec_is_suffix",
    "treespec_leaf",
    "treespec_list",
    "treespec_namedtuple",
    "treespec_none",
    "treespec_one_level",
    "treespec_ordereddict",
    "treespec_paths",
    "treespec_structseq",
    "treespec_transform",
    "treespec_tuple",
    "GLOBAL_NAMESPACE",
    "MAX_RECURSION_DEPTH",
    "NONE_IS_LEAF",
    "NONE_IS_NODE",
    "PyTreeDef",
    "PyTreeKind",
    "PyTreeSpec",
    "Partial",
    "dataclasses",
    "pytree",
    "tree",
    "tree_util",
    "register_dataclass",
    "register_object",
    "register_pytree_node",
    "register_pytree_node_class",
    "register_static",
    "registered_types",
    "unregister_pytree_node",
    "all_leaves",
    "tree_flatten",
    "tree_is_leaf",
    "tree_iter",
    "tree_leaves",
    "tree_map",
    "tree_map_",
    "tree_structure",
    "tree_unflatten",
    "dict_insertion_ordered",
    "use_jax_registry",
    "tree_broadcast_map_with_accessor",
    "tree_transpose_map_with_accessor",
    "treespec_frozendict",
    "is_namedtuple",
    "is_namedtuple_class",
    "is_namedtuple_instance",
    "is_structseq",
    "is_structseq_class",
    "is_structseq_instance",
    "namedtuple_fields",
    "structseq_fields",
    "CustomTreeNode",
    "FlattenFunc",
    "PyTree",
    "PyTreeTypeVar",
    "UnflattenFunc",
]

if not TYPE_CHECKING:  # hidden from type checkers, which would accept any attribute through it

    def __getattr__(name: str) -> object:
        """Imports a lazily loaded name's submodule on first use (PEP 562)."""
        module = _LAZY.get(name)
        if module is None:
            if name not in _SUBMODULES:
                raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
            module = name
        from importlib import import_module

        value = import_module(f"{__name__}.{module}")  # also sets oxtree.<module>
        if module != name:
            value = getattr(value, name)
            globals()[name] = value
        return value


def __dir__() -> list[str]:
    """The module's names, the not yet loaded ones included."""
    return sorted({*globals(), *_LAZY, *_SUBMODULES})


# Feature modules, each adding its public names to __all__ (one section each), loaded on first
# use: `_lazy(module, names)` for the run time, and the same names imported for type checkers.
# -- graphs --
if TYPE_CHECKING:
    from oxtree import graph as _graph
    from oxtree.graph import *  # noqa: F403

    __all__ += _graph.__all__
else:
    __all__ += _lazy(
        "graph",
        "GraphDef GraphPath GraphRef graph_flatten graph_from_dict graph_to_dict graph_unflatten",
    )
# -- pretty --
if TYPE_CHECKING:
    from oxtree.pretty import pformat, pprint, summary, tree_diff, view

    __all__ += ["pformat", "pprint", "summary", "tree_diff", "view"]
else:
    __all__ += _lazy("pretty", "pformat pprint summary tree_diff view")
# -- modules --
if TYPE_CHECKING:
    from oxtree import module as _module
    from oxtree.module import *  # noqa: F403

    __all__ += _module.__all__
else:
    __all__ += _lazy("module", "Axes Kind Module Parameter State")
# -- flat trees --
if TYPE_CHECKING:
    from oxtree.flat import FlatTree

    __all__ += ["FlatTree"]
else:
    __all__ += _lazy("flat", "FlatTree")
# -- random-number streams --
if TYPE_CHECKING:
    from oxtree.rngs import Rngs, RngStream

    __all__ += ["RngStream", "Rngs"]
else:
    __all__ += _lazy("rngs", "RngStream Rngs")
