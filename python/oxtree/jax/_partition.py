"""partition and combine: a tree split in two by a filter, and put back together."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from oxtree import _core
from oxtree._core import PathPattern
from oxtree.graph import _graph_flatten_jax as graph_flatten
from oxtree.graph import graph_unflatten


def partition(
    tree: Any,
    filter_spec: Any,
    /,
    replace: Any = None,
    *,
    is_leaf: Callable[[Any], bool] | None = None,
    namespace: str = "",
) -> tuple[Any, Any]:
    """Splits ``tree`` in two trees of its structure: the leaves ``filter_spec`` selects, with
    ``replace`` (None) in the other places, and the rest, with ``replace`` in the selected
    places. :func:`combine` puts them back together.

    ``filter_spec`` is a function of a leaf returning a bool (:func:`is_array`,
    :func:`is_inexact_array`, ...), a bool, a tree prefix of ``tree`` holding such
    functions and bools, or an :class:`oxtree.PathPattern` (globs over the leaf's
    ``keystr``; see docs/key-paths.md), which selects the leaves whose key path matches.
    With a function, a bool or a pattern the tree is flattened as a graph, so shared
    objects and cycles are kept.

    >>> import jax.numpy as jnp
    >>> arrays, rest = partition({'w': jnp.ones(2), 'act': 'relu'}, is_array)
    >>> arrays
    {'w': Array([1., 1.], dtype=float32), 'act': None}
    >>> rest
    {'w': None, 'act': 'relu'}
    >>> from oxtree import PathPattern
    >>> tree = {'enc': {'w': 1.0}, 'head': {'w': 2.0}}
    >>> frozen, trained = partition(tree, PathPattern("['enc']**"))
    >>> frozen, trained
    ({'enc': {'w': 1.0}, 'head': {'w': None}}, {'enc': {'w': None}, 'head': {'w': 2.0}})
    """
    unflatten: Callable[[list[Any]], Any]
    if isinstance(filter_spec, PathPattern):
        leaves, graphdef = graph_flatten(tree, is_leaf=is_leaf, namespace=namespace)
        mask = filter_spec._leaf_mask(graphdef)
        unflatten = functools.partial(graph_unflatten, graphdef)
    else:
        if callable(filter_spec) or isinstance(filter_spec, bool):
            leaves, graphdef = graph_flatten(tree, is_leaf=is_leaf, namespace=namespace)
            specs = [filter_spec] * len(leaves)
            unflatten = functools.partial(graph_unflatten, graphdef)
        else:
            leaves, treespec = _core._tree_flatten_jax_registry(tree, is_leaf, namespace=namespace)
            specs = _core._broadcast_prefix(
                filter_spec, tree, is_leaf, namespace=namespace, leaves=True, jax_registry=True
            )
            unflatten = treespec.unflatten
        mask = [_select(spec, leaf) for spec, leaf in zip(specs, leaves, strict=True)]
    return (
        unflatten([leaf if m else replace for leaf, m in zip(leaves, mask, strict=True)]),
        unflatten([replace if m else leaf for leaf, m in zip(leaves, mask, strict=True)]),
    )


def _select(spec: Any, leaf: Any) -> bool:
    if isinstance(spec, bool):
        return spec
    if not callable(spec):
        note = (
            " (a PathPattern is a whole filter spec, never a part of one)"
            if isinstance(spec, PathPattern)
            else f"; for a path pattern write PathPattern({spec!r})"
            if isinstance(spec, str | re.Pattern)
            else ""
        )
        raise TypeError(
            "partition: a filter spec holds bools and functions of a leaf, "
            f"got {type(spec).__name__}{note}"
        )
    return _check_bool(spec(leaf))


def _check_bool(value: Any) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"partition: a filter must return a bool, got {type(value).__name__}")
    return bool(value)


def combine(*trees: Any, is_leaf: Callable[[Any], bool] | None = None, namespace: str = "") -> Any:
    """Merges trees of one structure, taking at each leaf the first value that is not None:
    the inverse of :func:`partition`. When the trees share objects alike (as
    :func:`partition`'s two halves do), shared objects and cycles are kept; otherwise they are
    merged as trees, like the first tree's structure.

    >>> import jax.numpy as jnp
    >>> tree = {'w': jnp.ones(2), 'act': 'relu'}
    >>> combine(*partition(tree, is_array))
    {'w': Array([1., 1.], dtype=float32), 'act': 'relu'}
    """
    if not trees:
        raise TypeError("combine expects at least one tree")

    def leaf_or_none(x: Any) -> bool:
        return x is None or (is_leaf is not None and is_leaf(x))

    graphs = [graph_flatten(t, is_leaf=leaf_or_none, namespace=namespace) for t in trees]
    columns = [leaves for leaves, _ in graphs]
    unflatten: Callable[[list[Any]], Any] = functools.partial(graph_unflatten, graphs[0][1])
    if any(graphdef != graphs[0][1] for _, graphdef in graphs[1:]):
        # The same tree structure may still differ in what is shared (a tree_map result shares
        # nothing; a constant tuple written twice is one object): merge as trees then.
        flats = [
            _core._tree_flatten_jax_registry(t, leaf_or_none, namespace=namespace) for t in trees
        ]
        for i, (_, spec) in enumerate(flats[1:], 1):
            if spec != flats[0][1]:
                raise ValueError(
                    f"combine: tree {i} has another structure than tree 0: {spec} != {flats[0][1]}"
                )
        columns = [leaves for leaves, _ in flats]
        unflatten = flats[0][1].unflatten
    merged = [
        next((v for v in column if v is not None), None) for column in zip(*columns, strict=True)
    ]
    return unflatten(merged)
