"""``Partial``: a :func:`functools.partial` that is a pytree.

The function is static (kept in the treedef); the bound arguments and keywords are children,
so a ``Partial`` can be passed through ``tree_map`` and JAX transformations.
"""

from __future__ import annotations

import functools

from oxtree._core import register_pytree_node

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing at run time
if TYPE_CHECKING:
    from typing import Any

__all__ = ["Partial", "partial", "reduce"]  # noqa: F822 (reduce: by __getattr__)


class Partial(functools.partial):
    """A :func:`functools.partial` whose arguments are pytree children.

    >>> import oxtree
    >>> p = Partial(lambda x, y, *, z: x + y + z, 1, z=3)
    >>> oxtree.tree_leaves(p)
    [1, 3]
    >>> oxtree.tree_map(lambda v: v * 10, p)(2)
    42
    """

    def __new__(cls, func: Any, *args: Any, **kw: Any) -> Partial:
        # An inner partial (plain or ours) is kept whole as the static function, behind a shim
        # that compares and hashes as the inner partial does, so two Partials around the same
        # inner partial have equal treedefs (and share a jit cache entry).
        if isinstance(func, functools.partial):
            func = _HashableCallableShim(func)
        return super().__new__(cls, func, *args, **kw)

    def __repr__(self) -> str:
        # JAX's repr on every Python version: 3.13 put the class's module into partial's repr,
        # where JAX's Partial says `jax.tree_util.Partial(...)`; before it, `Partial(...)`.
        text = super().__repr__()
        if type(self) is Partial and text.startswith(_OWN_PREFIX):
            return _JAX_PREFIX + text[len(_OWN_PREFIX) :]
        return text


_OWN_PREFIX = f"{__name__}.Partial("
_JAX_PREFIX = "jax.tree_util.Partial("


class _HashableCallableShim:
    """Wraps a callable so functools.partial does not merge it; equal when the wrapped are."""

    __slots__ = ("args", "func", "keywords", "wrapped")

    def __init__(self, wrapped: functools.partial) -> None:  # type: ignore[type-arg]
        self.wrapped = wrapped
        self.func, self.args, self.keywords = wrapped.func, wrapped.args, wrapped.keywords

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.wrapped(*args, **kwargs)

    def __eq__(self, other: object) -> bool:
        # Equal to the wrapped partial itself too, as JAX's shim is: `p.func == inner`.
        if isinstance(other, _HashableCallableShim):
            return bool(self.wrapped == other.wrapped)
        return bool(self.wrapped == other)

    def __hash__(self) -> int:
        return hash(self.wrapped)

    def __repr__(self) -> str:
        # The name and form jax.tree_util.Partial's treedefs print, so reprs match JAX's.
        return f"_HashableCallableShim({self.wrapped!r})"


#: optree's name for it.
partial = Partial


def _flatten(p: Partial) -> tuple[tuple[Any, Any], Any]:
    return (p.args, p.keywords), p.func


def _unflatten(func: Any, children: tuple[Any, Any]) -> Partial:
    args, keywords = children
    return Partial(func, *args, **keywords)


register_pytree_node(Partial, _flatten, _unflatten)


def __getattr__(name: str) -> Any:
    if name == "reduce":  # optree.functools.reduce is tree_reduce; ops loads on first use
        from oxtree.ops import tree_reduce

        return tree_reduce
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
