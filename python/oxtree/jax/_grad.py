"""filter_grad and filter_value_and_grad: gradients with respect to the floating-point array
leaves of some positional arguments (the first by default), graphs of Python objects."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from oxtree._arrays import is_array
from oxtree._core import keystr
from oxtree.graph import _graph_flatten_jax as graph_flatten
from oxtree.graph import graph_unflatten
from oxtree.jax._arrays import is_inexact_array
from oxtree.jax._machinery import _Changes, _check_fn, _numbered


def _checked_argnums(argnums: Any, name: str) -> tuple[int, ...]:
    """``argnums`` (an int or a sequence of ints, as ``jax.grad`` takes it) as a tuple of
    positions."""
    many = not isinstance(argnums, int)
    try:
        nums = tuple(argnums) if many else (argnums,)
    except TypeError:
        nums = None
    if nums is None or not all(isinstance(i, int) and not isinstance(i, bool) for i in nums):
        raise TypeError(
            f"{name}: argnums must be an int or a sequence of ints (positions of positional "
            f"arguments), got {type(argnums).__name__}: {argnums!r}"
        )
    if not nums:
        raise ValueError(f"{name}: argnums={argnums!r} differentiates nothing; give a position")
    negative = [i for i in nums if i < 0]
    if negative:
        raise ValueError(
            f"{name}: argnums must be positions counted from the first positional argument "
            f"(0, 1, ...), got {negative[0]} in argnums={argnums!r}"
        )
    return nums


def _checked_flag(value: Any, what: str, name: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name}: {what} must be a bool, got {type(value).__name__}: {value!r}")
    return value


def _make_value_and_grad(
    fn: Callable[..., Any],
    name: str,
    argnums: int | Sequence[int],
    has_aux: bool,
    holomorphic: bool,
    allow_int: bool,
    namespace: str,
) -> Callable[..., tuple[Any, Any]]:
    """The function both filtered gradients are made of: it returns ``(value, grads)``
    (``((value, aux), grads)`` with ``has_aux``); ``name`` words the errors."""
    _check_fn(fn, name)
    nums = _checked_argnums(argnums, name)
    one = isinstance(argnums, int)
    for flag, what in (
        (has_aux, "has_aux"),
        (holomorphic, "holomorphic"),
        (allow_int, "allow_int"),
    ):
        _checked_flag(flag, what, name)
    if not isinstance(namespace, str):
        raise TypeError(f"{name}: namespace must be a str, got {type(namespace).__name__}")
    # allow_int differentiates integer and bool arrays too (their gradients are float0 zeros,
    # as in jax.grad); otherwise the floating-point and complex ones only.
    selected = is_array if allow_int else is_inexact_array

    def where(path: tuple[Any, ...]) -> str:
        """A leaf path of the differentiated arguments' graph, as ``args[0].w``."""
        if len(nums) == 1:  # a graph of one root has no root key in its paths
            return f"args[{nums[0]}]{keystr(path)}"
        return f"args[{nums[path[0].idx]}]{keystr(path[1:])}"

    @functools.wraps(fn)
    def value_and_grad(*args: Any, **kwargs: Any) -> Any:
        if max(nums) >= len(args):
            raise TypeError(
                f"{name}: differentiating with respect to argnums={argnums!r} needs at least "
                f"{max(nums) + 1} positional arguments, but the call passed {len(args)}"
            )
        roots = tuple(args[i] for i in nums)
        leaves, graphdef = graph_flatten(*roots, namespace=namespace)
        at = [i for i, leaf in enumerate(leaves) if selected(leaf)]
        if holomorphic:
            paths = graphdef.paths()
            for i in at:
                if not np.issubdtype(leaves[i].dtype, np.complexfloating):
                    raise TypeError(
                        f"{name} with holomorphic=True differentiates complex leaves only; the "
                        f"leaf at {where(paths[i])} is {leaves[i].dtype} (leave holomorphic "
                        "off, or pass it elsewhere than in argnums)"
                    )

        def differentiable(diff: list[Any]) -> Any:
            rebuilt = list(leaves)
            for i, d in zip(at, diff, strict=True):
                rebuilt[i] = d
            copies = graph_unflatten(graphdef, rebuilt)
            copies = (copies,) if len(nums) == 1 else copies
            objects = _numbered(copies)
            call = list(args)
            for i, copy in zip(nums, copies, strict=True):
                call[i] = copy
            out = fn(*call, **kwargs)
            # What fn changed in the differentiated arguments goes back to the caller,
            # undifferentiated.
            changes, changed = _Changes.of(
                copies, rebuilt, graphdef, namespace, name, where, objects
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
            differentiable, has_aux=True, holomorphic=holomorphic, allow_int=allow_int
        )([leaves[i] for i in at])
        if changes is not None:
            changes.write_back(roots, leaves, changed)
        grads: list[Any] = [None] * len(leaves)
        for i, g in zip(at, diff_grads, strict=True):
            grads[i] = g
        tree = graph_unflatten(graphdef, grads)
        grads_out = tree if one else ((tree,) if len(nums) == 1 else tuple(tree))
        return ((value, aux) if has_aux else value), grads_out

    return value_and_grad


def filter_value_and_grad(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    argnums: int | Sequence[int] = 0,
    has_aux: bool = False,
    holomorphic: bool = False,
    allow_int: bool = False,
    namespace: str = "",
) -> Any:
    """``fn`` transformed to return ``(value, grads)``, the gradient taken with respect to the
    floating-point array leaves (:func:`is_inexact_array`) of its first positional argument,
    or of those ``argnums`` names.

    ``grads`` has the structure of the differentiated argument (shared objects and cycles
    kept), with the gradient at each differentiated leaf and None at every other; with a
    sequence ``argnums``, a tuple of such trees, one per position, as ``jax.grad`` gives (the
    arguments are flattened together, so an object shared between them stays shared). With
    ``has_aux``, ``fn`` returns ``(value, aux)`` and the result is ``((value, aux), grads)``.
    ``fn`` works on copies of the differentiated arguments; what it changes there (running
    statistics, a counter) is written back to the caller's objects as values, never
    differentiated (see :func:`filter_jit`). The other arguments are passed as they are.

    ``holomorphic`` and ``allow_int`` are ``jax.grad``'s: with ``holomorphic`` every
    differentiated leaf must be complex (a TypeError names the one that is not); with
    ``allow_int`` the integer and bool array leaves are differentiated too, their gradients
    ``float0`` zeros.

    >>> import jax.numpy as jnp
    >>> loss = lambda p, x: jnp.sum(p['w'] * x) + p['n']
    >>> value, grads = filter_value_and_grad(loss)({'w': jnp.ones(2), 'n': 3}, 2.0)
    >>> value, grads
    (Array(7., dtype=float32), {'w': Array([2., 2.], dtype=float32), 'n': None})
    >>> _, (gp, gx) = filter_value_and_grad(loss, argnums=(0, 1))({'w': jnp.ones(2), 'n': 3},
    ...                                                            jnp.float32(2.0))
    >>> gp['w'], gx
    (Array([2., 2.], dtype=float32), Array(2., dtype=float32))
    """
    options = (argnums, has_aux, holomorphic, allow_int, namespace)
    if fn is None:
        return lambda f: _make_value_and_grad(f, "filter_value_and_grad", *options)
    return _make_value_and_grad(fn, "filter_value_and_grad", *options)


def filter_grad(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    argnums: int | Sequence[int] = 0,
    has_aux: bool = False,
    holomorphic: bool = False,
    allow_int: bool = False,
    namespace: str = "",
) -> Any:
    """``fn`` transformed to return the gradient with respect to the floating-point array
    leaves of its first positional argument, or of those ``argnums`` names (see
    :func:`filter_value_and_grad`, whose options it takes); with ``has_aux``,
    ``(grads, aux)``.

    >>> import jax.numpy as jnp
    >>> filter_grad(lambda p: jnp.sum(p[0] ** 2))((jnp.arange(3.0), 'static'))
    (Array([0., 2., 4.], dtype=float32), None)
    >>> filter_grad(lambda a, b: a * b, argnums=1)(jnp.float32(3.0), jnp.float32(2.0))
    Array(3., dtype=float32)
    """
    options = (argnums, has_aux, holomorphic, allow_int, namespace)
    if fn is None:
        return lambda f: _make_grad(f, *options)
    return _make_grad(fn, *options)


def _make_grad(
    fn: Callable[..., Any],
    argnums: int | Sequence[int],
    has_aux: bool,
    holomorphic: bool,
    allow_int: bool,
    namespace: str,
) -> Callable[..., Any]:
    value_and_grad = _make_value_and_grad(
        fn, "filter_grad", argnums, has_aux, holomorphic, allow_int, namespace
    )

    @functools.wraps(fn)
    def grad(*args: Any, **kwargs: Any) -> Any:
        value, grads = value_and_grad(*args, **kwargs)
        return (grads, value[1]) if has_aux else grads

    return grad
