"""filter_eval_shape and filter_remat: ``jax.eval_shape`` and ``jax.checkpoint`` over graphs
of Python objects."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax

from oxtree._arrays import is_array, is_shaped
from oxtree.jax._machinery import _check_fn, _Flat, _traced_call


def filter_eval_shape(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """What ``fn(*args, **kwargs)`` would return, with each array leaf replaced by a
    ``jax.ShapeDtypeStruct``, computed without running it (``jax.eval_shape``).

    Arguments are flattened as a graph: array leaves and ``ShapeDtypeStruct`` leaves are
    abstract, every other leaf is passed as it is. The output keeps its classes, its other
    leaves and its sharing, so ``filter_eval_shape(Model, key)`` gives a Model whose
    parameters are shapes. The arguments are never changed: whatever ``fn`` changes in them
    would be shapes, so it is dropped.

    >>> import jax.numpy as jnp
    >>> from oxtree import Module
    >>> class Linear(Module):
    ...     def __init__(self, n):
    ...         self.register_parameter('w', jnp.zeros((n, n)))
    ...         self.n = n
    >>> abstract = filter_eval_shape(Linear, 3)
    >>> abstract.w, abstract.n
    (ShapeDtypeStruct(shape=(3, 3), dtype=float32), 3)
    """
    _check_fn(fn, "filter_eval_shape")
    flat = _Flat((args, kwargs), "", is_shaped)
    arrays, out = jax.eval_shape(_traced_call(fn, flat, "", "filter_eval_shape"), flat.values())
    if out.changes is not None:
        arrays, _ = out.changes.split(tuple(arrays))
    return out.rebuild(tuple(arrays))


def filter_remat(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    policy: Callable[..., bool] | None = None,
    prevent_cse: bool = True,
    namespace: str = "",
) -> Any:
    """``fn`` under ``jax.checkpoint`` (rematerialization): its intermediate values are
    recomputed on the backward pass instead of being stored.

    Arguments are flattened as a graph: array leaves go through ``jax.checkpoint``, every
    other leaf is passed as it is (as equinox's ``filter_checkpoint`` does). Shared objects
    stay shared, and what ``fn`` changes in its arguments is written back to the caller's
    objects, as :func:`filter_jit` does. ``policy`` and ``prevent_cse`` are
    ``jax.checkpoint``'s.

    >>> import jax, jax.numpy as jnp
    >>> block = filter_remat(lambda p, x: jnp.sin(x * p['w']))
    >>> jax.grad(lambda w: block({'w': w, 'act': 'sin'}, 2.0))(1.0)
    Array(-0.8322937, dtype=float32, weak_type=True)
    """
    if fn is None:
        return lambda f: filter_remat(
            f, policy=policy, prevent_cse=prevent_cse, namespace=namespace
        )
    _check_fn(fn, "filter_remat")

    @functools.wraps(fn)
    def remat(*args: Any, **kwargs: Any) -> Any:
        flat = _Flat((args, kwargs), namespace, is_array)
        traced = _traced_call(fn, flat, namespace, "filter_remat")
        arrays, out = jax.checkpoint(traced, prevent_cse=prevent_cse, policy=policy)(flat.values())
        return out.finish(tuple(arrays), flat.leaves, (args, kwargs))

    return remat
