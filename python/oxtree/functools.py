"""``Partial``: a :func:`functools.partial` that is a pytree.

The function is static (kept in the treedef); the bound arguments and keywords are children,
so a ``Partial`` can be passed through ``tree_map`` and JAX transformations.
"""

from __future__ import annotations

import functools
from typing import Any

from oxtree._core import register_pytree_node

__all__ = ["Partial", "partial"]


class partial(functools.partial):
    """A :func:`functools.partial` whose arguments are pytree children.

    >>> import oxtree
    >>> p = partial(lambda x, y, *, z: x + y + z, 1, z=3)
    >>> oxtree.tree_leaves(p)
    [1, 3]
    >>> oxtree.tree_map(lambda v: v * 10, p)(2)
    42
    """

    def __new__(cls, func: Any, /, *args: Any, **keywords: Any) -> partial:
        # A Partial of a plain functools.partial keeps the inner function static as a whole,
        # instead of flattening (and so re-tracing) its bound arguments.
        if isinstance(func, functools.partial) and not isinstance(func, partial):
            original = func

            def func(*a: Any, **k: Any) -> Any:
                return original(*a, **k)

            func.__name__ = getattr(original.func, "__name__", "partial")
        return super().__new__(cls, func, *args, **keywords)


Partial = partial


def _flatten(p: partial) -> tuple[tuple[Any, Any], Any]:
    return (p.args, p.keywords), p.func


def _unflatten(func: Any, children: tuple[Any, Any]) -> partial:
    args, keywords = children
    return partial(func, *args, **keywords)


register_pytree_node(partial, _flatten, _unflatten)
