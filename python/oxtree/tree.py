"""A drop-in for ``jax.tree``: the short names over :mod:`oxtree.tree_util`.

>>> from oxtree import tree
>>> tree.map(lambda x: x * 2, {'a': [1, 2]})
{'a': [2, 4]}
"""

from __future__ import annotations

from typing import Any

from oxtree.tree_util import (
    tree_all,
    tree_broadcast,
    tree_flatten,
    tree_flatten_with_path,
    tree_labels,
    tree_leaves,
    tree_leaves_with_path,
    tree_map,
    tree_map_with_path,
    tree_mask,
    tree_reduce,
    tree_reduce_associative,
    tree_set_matching,
    tree_structure,
    tree_transpose,
    tree_unflatten,
)

all = tree_all
broadcast = tree_broadcast
flatten = tree_flatten
flatten_with_path = tree_flatten_with_path
labels = tree_labels
leaves = tree_leaves
leaves_with_path = tree_leaves_with_path
map = tree_map
map_with_path = tree_map_with_path
mask = tree_mask
reduce = tree_reduce
reduce_associative = tree_reduce_associative
set_matching = tree_set_matching
structure = tree_structure
transpose = tree_transpose
unflatten = tree_unflatten


def static(**kwargs: Any) -> Any:
    """A dataclass field marked static (``metadata={'static': True}``), as JAX's is.

    Arguments are those of :func:`dataclasses.field`.

    >>> import dataclasses
    >>> from oxtree.tree_util import register_dataclass
    >>> @register_dataclass
    ... @dataclasses.dataclass
    ... class Op:
    ...     x: float
    ...     op: str = static(default='add')
    >>> flatten(Op(1.0))
    ([1.0], PyTreeDef(CustomNode(Op[('add',)], [*])))
    """
    import dataclasses  # here: importing it costs more than the rest of `import oxtree`

    metadata = {"static": True, **(kwargs.pop("metadata", None) or {})}
    return dataclasses.field(metadata=metadata, **kwargs)


__all__ = [
    "all",
    "broadcast",
    "flatten",
    "flatten_with_path",
    "labels",
    "leaves",
    "leaves_with_path",
    "map",
    "map_with_path",
    "mask",
    "reduce",
    "reduce_associative",
    "set_matching",
    "static",
    "structure",
    "transpose",
    "unflatten",
]
