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

from collections.abc import Callable, Iterator
from typing import Any

from oxtree import dataclasses, tree, tree_util
from oxtree import types as types
from oxtree._core import (
    GLOBAL_NAMESPACE,
    MAX_RECURSION_DEPTH,
    NONE_IS_LEAF,
    NONE_IS_NODE,
    DictKey,
    FlattenedIndexKey,
    GetAttrKey,
    PyTreeKind,
    PyTreeSpec,
    SequenceKey,
    all_leaves,
    keystr,
    tree_flatten,
    tree_flatten_with_path,
    tree_is_leaf,
    tree_leaves,
    tree_leaves_with_path,
    tree_map,
    tree_map_,
    tree_map_with_path,
    tree_paths,
    tree_structure,
    tree_unflatten,
)
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
from oxtree.functools import Partial
from oxtree.ops import (
    FlattenOneLevelOutput,
    broadcast_common,
    broadcast_prefix,
    prefix_errors,
    tree_all,
    tree_any,
    tree_broadcast_common,
    tree_broadcast_map,
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
    tree_transpose_map_with_path,
)
from oxtree.registry import (
    register_dataclass,
    register_pytree_node,
    register_pytree_node_class,
    register_static,
    registered_types,
    unregister_pytree_node,
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
]

# Feature modules, each adding its public names to __all__ (one section each).
# -- graphs --
from oxtree import graph as _graph  # noqa: E402
from oxtree.graph import *  # noqa: E402, F403

__all__ += _graph.__all__
# -- pretty --
from oxtree.pretty import pformat, pprint, summary, tree_diff, view  # noqa: E402

__all__ += ["pformat", "pprint", "summary", "tree_diff", "view"]
# -- modules --
from oxtree import module as _module  # noqa: E402
from oxtree.module import *  # noqa: E402, F403

__all__ += _module.__all__

# Last: it re-exports the names above under short names.
from oxtree import pytree  # noqa: E402
