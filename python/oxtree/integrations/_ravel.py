"""``tree_ravel`` once, for every array library: each integration passes its array ops."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from oxtree._core import PyTreeSpec, tree_flatten


@dataclass(frozen=True)
class ArrayOps:
    """What raveling needs from an array library."""

    dtype: Callable[[Any], Any]  # the dtype of a leaf
    result_type: Callable[..., Any]  # the promoted dtype of several dtypes
    size: Callable[[Any], int]
    shape: Callable[[Any], tuple[int, ...]]
    ravel: Callable[[Any], Any]
    concatenate: Callable[[list[Any]], Any]
    split: Callable[[Any, tuple[int, ...]], list[Any]]  # at the given indices
    astype: Callable[[Any, Any], Any]  # converts without a warning
    empty: Callable[[], Any]  # a 1-D empty array of the default dtype
    partial: Callable[..., Callable[..., Any]] = functools.partial


def tree_ravel(
    ops: ArrayOps,
    tree: Any,
    is_leaf: Callable[[Any], bool] | None,
    none_is_leaf: bool,
    namespace: str,
) -> tuple[Any, Callable[[Any], Any]]:
    """``(flat, unravel)``: the leaves raveled and concatenated, and the inverse."""
    leaves, treespec = tree_flatten(tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)
    flat, unravel_leaves = _ravel_leaves(ops, leaves)
    return flat, ops.partial(_tree_unravel, treespec, unravel_leaves)


def _tree_unravel(
    treespec: PyTreeSpec, unravel_leaves: Callable[[Any], list[Any]], flat: Any, /
) -> Any:
    return treespec.unflatten(unravel_leaves(flat))


def _ravel_leaves(ops: ArrayOps, leaves: list[Any]) -> tuple[Any, Callable[[Any], list[Any]]]:
    if not leaves:
        return ops.empty(), ops.partial(_unravel_empty, ops)
    from_dtypes = tuple(ops.dtype(leaf) for leaf in leaves)
    to_dtype = ops.result_type(*from_dtypes)
    shapes = tuple(ops.shape(leaf) for leaf in leaves)
    indices = tuple(itertools.accumulate(ops.size(leaf) for leaf in leaves))
    if all(dtype == to_dtype for dtype in from_dtypes):
        flat = ops.concatenate([ops.ravel(leaf) for leaf in leaves])
        return flat, ops.partial(_unravel_leaves, ops, indices, shapes, None, to_dtype)
    flat = ops.concatenate([ops.ravel(ops.astype(leaf, to_dtype)) for leaf in leaves])
    return flat, ops.partial(_unravel_leaves, ops, indices, shapes, from_dtypes, to_dtype)


def _check_shape(ops: ArrayOps, flat: Any, expected: tuple[int, ...]) -> None:
    if ops.shape(flat) != expected:
        raise ValueError(
            f"The unravel function expected an array of shape {expected}, "
            f"got shape {ops.shape(flat)}."
        )


def _unravel_empty(ops: ArrayOps, flat: Any, /) -> list[Any]:
    _check_shape(ops, flat, (0,))
    return []


def _unravel_leaves(
    ops: ArrayOps,
    indices: tuple[int, ...],
    shapes: tuple[tuple[int, ...], ...],
    from_dtypes: tuple[Any, ...] | None,
    to_dtype: Any,
    flat: Any,
    /,
) -> list[Any]:
    _check_shape(ops, flat, (indices[-1],))
    chunks = ops.split(flat, indices[:-1])
    if from_dtypes is None:  # every leaf had the flat array's dtype
        return [chunk.reshape(shape) for chunk, shape in zip(chunks, shapes, strict=True)]
    dtype = ops.dtype(flat)
    if dtype != to_dtype:
        raise ValueError(
            f"The unravel function expected an array of dtype {to_dtype}, got dtype {dtype}."
        )
    return [
        ops.astype(chunk.reshape(shape), leaf_dtype)
        for chunk, shape, leaf_dtype in zip(chunks, shapes, from_dtypes, strict=True)
    ]
