"""NumPy integration: ``tree_ravel`` (also ``ravel_pytree``) over trees of arrays."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from oxtree.integrations._ravel import ArrayOps
from oxtree.integrations._ravel import tree_ravel as _tree_ravel
from oxtree.typing import PyTree

__all__ = ["ArrayLikeTree", "ArrayTree", "tree_ravel"]

ArrayLikeTree = PyTree[Any]
ArrayTree = PyTree[np.ndarray]


def _astype(array: Any, dtype: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a complex-to-real cast warns
        return np.asarray(array).astype(dtype)


_OPS = ArrayOps(
    dtype=np.result_type,
    result_type=np.result_type,
    size=np.size,
    shape=np.shape,
    ravel=np.ravel,
    concatenate=np.concatenate,
    split=np.split,
    astype=_astype,
    empty=lambda: np.zeros(0),
)


def tree_ravel(
    tree: Any,
    /,
    is_leaf: Callable[[Any], bool] | None = None,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> tuple[np.ndarray, Callable[[np.ndarray], Any]]:
    """Ravels a tree of arrays into one 1-D array; returns it and the function that undoes it.

    The array's dtype promotes the leaves' dtypes; unraveling restores each leaf's dtype and
    shape. A tree without leaves gives an empty array.

    >>> flat, unravel = tree_ravel({'a': np.ones(2), 'b': np.zeros((1, 1))})
    >>> flat, unravel(flat)['b'].shape
    (array([1., 1., 0.]), (1, 1))
    """
    return _tree_ravel(_OPS, tree, is_leaf, none_is_leaf, namespace)


ravel_pytree = tree_ravel
