"""JAX integration: ``tree_ravel`` (also ``ravel_pytree``) over trees of arrays.

The unravel function is a hashable partial, so it can be a static argument of ``jax.jit``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
from jax import Array, lax

from oxtree.integrations._ravel import ArrayOps
from oxtree.integrations._ravel import tree_ravel as _tree_ravel
from oxtree.typing import PyTree

__all__ = ["ArrayLikeTree", "ArrayTree", "tree_ravel"]

ArrayLikeTree = PyTree[Any]
ArrayTree = PyTree[Array]


class HashablePartial:
    """A partial application that compares and hashes by its function and arguments."""

    __slots__ = ("args", "func", "kwargs")

    def __init__(self, func: Callable[..., Any], /, *args: Any, **kwargs: Any) -> None:
        if isinstance(func, HashablePartial):
            self.func, self.args = func.func, func.args + args
            self.kwargs = {**func.kwargs, **kwargs}
        else:
            self.func, self.args, self.kwargs = func, args, kwargs

    def __eq__(self, other: object) -> bool:
        return (
            type(other) is HashablePartial
            and self.func.__code__ == other.func.__code__  # type: ignore[attr-defined]
            and (self.args, self.kwargs) == (other.args, other.kwargs)
        )

    def __hash__(self) -> int:
        return hash((self.func.__code__, self.args, tuple(sorted(self.kwargs.items()))))  # type: ignore[attr-defined]

    def __call__(self, /, *args: Any, **kwargs: Any) -> Any:
        return self.func(*self.args, *args, **self.kwargs, **kwargs)


def _astype(array: Any, dtype: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a complex-to-real cast warns
        return lax.convert_element_type(array, dtype)


_OPS = ArrayOps(
    dtype=jnp.result_type,
    result_type=jnp.result_type,
    size=jnp.size,
    shape=jnp.shape,
    ravel=jnp.ravel,
    concatenate=jnp.concatenate,
    split=jnp.split,
    astype=_astype,
    empty=lambda: jnp.zeros(0),
    partial=HashablePartial,
)


def tree_ravel(
    tree: Any,
    /,
    is_leaf: Callable[[Any], bool] | None = None,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> tuple[Array, Callable[[Array], Any]]:
    """Ravels a tree of arrays into one 1-D array; returns it and the function that undoes it.

    >>> flat, unravel = tree_ravel({'a': jnp.ones(2), 'b': jnp.zeros(1)})
    >>> flat.shape, unravel(flat)['a'].shape
    ((3,), (2,))
    """
    return _tree_ravel(_OPS, tree, is_leaf, none_is_leaf, namespace)


ravel_pytree = tree_ravel
