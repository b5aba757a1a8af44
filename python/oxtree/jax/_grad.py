"""filter_grad and filter_value_and_grad: gradients with respect to the floating-point array
leaves of the first argument, a graph of Python objects."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax

from oxtree.graph import _graph_flatten_jax as graph_flatten
from oxtree.graph import graph_unflatten
from oxtree.jax._arrays import is_inexact_array
from oxtree.jax._machinery import _Changes, _check_fn, _numbered, _where_first


def filter_value_and_grad(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    has_aux: bool = False,
    namespace: str = "",
) -> Any:
    """``fn`` transformed to return ``(value, grads)``, the gradient taken with respect to the
    floating-point array leaves (:func:`is_inexact_array`) of its first argument only.

    ``grads`` has the structure of the first argument (shared objects and cycles kept), with
    the gradient at each differentiated leaf and None at every other. With ``has_aux``, ``fn``
    returns ``(value, aux)`` and the result is ``((value, aux), grads)``. ``fn`` works on a
    copy of the first argument; what it changes there (running statistics, a counter) is
    written back to the caller's objects as values, never differentiated (see
    :func:`filter_jit`).

    >>> import jax.numpy as jnp
    >>> loss = lambda p, x: jnp.sum(p['w'] * x) + p['n']
    >>> value, grads = filter_value_and_grad(loss)({'w': jnp.ones(2), 'n': 3}, 2.0)
    >>> value, grads
    (Array(7., dtype=float32), {'w': Array([2., 2.], dtype=float32), 'n': None})
    """
    if fn is None:
        return lambda f: filter_value_and_grad(f, has_aux=has_aux, namespace=namespace)
    _check_fn(fn, "filter_value_and_grad")
    name = "filter_value_and_grad"

    @functools.wraps(fn)
    def value_and_grad(first: Any, /, *args: Any, **kwargs: Any) -> Any:
        leaves, graphdef = graph_flatten(first, namespace=namespace)
        where = [i for i, leaf in enumerate(leaves) if is_inexact_array(leaf)]

        def differentiable(diff: list[Any]) -> Any:
            rebuilt = list(leaves)
            for i, d in zip(where, diff, strict=True):
                rebuilt[i] = d
            copy = graph_unflatten(graphdef, rebuilt)
            objects = _numbered((copy,))
            out = fn(copy, *args, **kwargs)
            # What fn changed in its first argument goes back to the caller, undifferentiated.
            changes, changed = _Changes.of(
                (copy,), rebuilt, graphdef, namespace, name, _where_first, objects
            )
            changed = [jax.lax.stop_gradient(c) for c in changed]
            if has_aux:
                if not (isinstance(out, tuple | list) and len(out) == 2):
                    raise TypeError(
                        f"{name} with has_aux=True expects fn to return a pair (value, aux), "
                        f"got {type(out).__name__}"
                        + (f" of length {len(out)}" if isinstance(out, tuple | list) else "")
                    )
                return out[0], (out[1], changes, changed)
            return out, (None, changes, changed)

        (value, (aux, changes, changed)), diff_grads = jax.value_and_grad(
            differentiable, has_aux=True
        )([leaves[i] for i in where])
        if changes is not None:
            changes.write_back((first,), leaves, changed)
        grads: list[Any] = [None] * len(leaves)
        for i, g in zip(where, diff_grads, strict=True):
            grads[i] = g
        return ((value, aux) if has_aux else value), graph_unflatten(graphdef, grads)

    return value_and_grad


def filter_grad(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    has_aux: bool = False,
    namespace: str = "",
) -> Any:
    """``fn`` transformed to return the gradient with respect to the floating-point array
    leaves of its first argument (see :func:`filter_value_and_grad`); with ``has_aux``,
    ``(grads, aux)``.

    >>> import jax.numpy as jnp
    >>> filter_grad(lambda p: jnp.sum(p[0] ** 2))((jnp.arange(3.0), 'static'))
    (Array([0., 2., 4.], dtype=float32), None)
    """
    if fn is None:
        return lambda f: filter_grad(f, has_aux=has_aux, namespace=namespace)
    _check_fn(fn, "filter_grad")
    value_and_grad = filter_value_and_grad(fn, has_aux=has_aux, namespace=namespace)

    @functools.wraps(fn)
    def grad(first: Any, /, *args: Any, **kwargs: Any) -> Any:
        value, grads = value_and_grad(first, *args, **kwargs)
        return (grads, value[1]) if has_aux else grads

    return grad
