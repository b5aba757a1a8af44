"""filter_jit: ``jax.jit`` over graphs of Python objects, its warm path in the core
(``_FilterJitCore``)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypeVar, overload

import jax

from oxtree._arrays import _IS_ARRAY_TYPE, is_array_type
from oxtree._core import SequenceKey, _FilterJitCore
from oxtree.graph import GraphDef, graph_unflatten
from oxtree.graph import _graph_flatten_jax as graph_flatten
from oxtree.jax._machinery import _Changes, _getter, _merger, _numbered, _Out, _split, _where

_F = TypeVar("_F", bound=Callable[..., Any])


_DONATE = ("none", "all", "all-except-first")


class _Entry:
    """Everything filter_jit knows about one input structure (graphdef, leaf types and whether
    there are keyword arguments): how to put the leaves back in order, and a compiled function
    per distinct tuple of static leaves. The graph's roots are the positional arguments, then
    the keyword arguments' dict when there are keyword arguments; the arrays (and the statics)
    come in leaf order (see `_FilterJitCore`)."""

    __slots__ = (
        "aliased",
        "compiled",
        "graphdef",
        "has_kwargs",
        "kept",
        "merge",
        "nargs",
        "static_at",
    )

    def __init__(
        self, graphdef: GraphDef, mask: Sequence[bool], donate: str, has_kwargs: bool
    ) -> None:
        arrays, statics = _split(mask)
        self.graphdef = graphdef
        self.has_kwargs = has_kwargs
        self.nargs = graphdef.num_roots - has_kwargs
        # The arrays go to the compiled function as two tuples, those kept and those donated;
        # `kept` is how many come first (None without donation: all in one tuple). The first
        # argument's leaves come first in leaf order, so its arrays are a prefix of them.
        self.kept: int | None = None
        if donate == "all":
            self.kept = 0
        elif donate == "all-except-first":
            paths = graphdef.paths()
            self.kept = sum(1 for i in arrays if _in_first_arg(self.as_args_kwargs(paths[i])))
        self.merge = _merger(arrays + statics)
        self.static_at = statics  # the leaf index of each static leaf
        self.compiled: dict[tuple[Any, ...], Callable[..., Any]] = {}
        # For calls where one array object fills several leaves: by (statics, alias pattern).
        self.aliased: dict[tuple[Any, ...], Callable[..., Any]] = {}

    def as_args_kwargs(self, path: tuple[Any, ...]) -> tuple[Any, ...]:
        """A leaf path of the graph as a path of the two roots ``(args, kwargs)``."""
        if self.graphdef.num_roots == 1:  # a graph of one root has no root key in its paths
            path = (SequenceKey(0), *path)
        i = path[0].idx
        if i < self.nargs:
            return (SequenceKey(0), SequenceKey(i), *path[1:])
        return (SequenceKey(1), *path[1:])

    def where(self, path: tuple[Any, ...]) -> str:
        """A leaf path of the graph, as ``args[0]['a']``."""
        return _where(self.as_args_kwargs(path))

    def arguments(self, rebuilt: Any) -> tuple[tuple[Any, ...], tuple[Any, ...], dict[str, Any]]:
        """The roots, the positional and the keyword arguments, from what `graph_unflatten`
        rebuilt of the graph."""
        roots = (rebuilt,) if self.graphdef.num_roots == 1 else rebuilt
        return roots, roots[: self.nargs], roots[self.nargs] if self.has_kwargs else {}


def _in_first_arg(path: tuple[Any, ...]) -> bool:
    # Root 0 is the positional arguments' tuple: its child 0 is the first argument.
    return path[0] == SequenceKey(0) and len(path) > 1 and path[1] == SequenceKey(0)


def _dedupe(arrays: tuple[Any, ...]) -> tuple[tuple[int, ...], tuple[Any, ...]]:
    """The distinct objects among ``arrays`` (in order of first occurrence), and for each
    array the index of its object among them."""
    index: dict[int, int] = {}
    unique: list[Any] = []
    pattern = []
    for a in arrays:
        j = index.get(id(a))
        if j is None:
            j = index[id(a)] = len(unique)
            unique.append(a)
        pattern.append(j)
    return tuple(pattern), tuple(unique)


class _FilterJit(_FilterJitCore):
    """A function compiled by :func:`filter_jit`. A warm call runs in the core
    (``_FilterJitCore.__call__``: the graph of the arguments, the leaf split, the check
    against the previous call's structure, the compiled function and the rebuild of its
    result); it asks the methods below for what is rare: a new structure, new static leaves,
    an array object in several leaves."""

    def __new__(cls, fn: Callable[..., Any], donate: str, namespace: str) -> _FilterJit:
        return super().__new__(cls, namespace, _IS_ARRAY_TYPE, is_array_type)

    def __init__(self, fn: Callable[..., Any], donate: str, namespace: str) -> None:
        self._fn = fn
        self._donate = donate
        self._namespace = namespace
        self._entries: dict[tuple[GraphDef, tuple[type, ...], bool], _Entry] = {}
        functools.update_wrapper(self, fn)

    def __repr__(self) -> str:
        return f"<filter_jit of {self._fn!r}>"

    def __reduce__(self) -> tuple[Any, ...]:
        # Copies and pickles are made anew from the function and options (the core's fields
        # are no attributes), with the attributes set since; the compiled functions are not
        # copied.
        state = {k: v for k, v in vars(self).items() if k != "_entries"}
        return type(self), (self._fn, self._donate, self._namespace), state

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        # Decorating a method: the instance is the first argument, flattened like the rest.
        if instance is None:
            return self
        return functools.partial(self, instance)

    def _entry(self, graphdef: GraphDef, types: tuple[type, ...], has_kwargs: bool) -> _Entry:
        """The entry of a structure other than the last call's, made on its first call."""
        key = (graphdef, types, has_kwargs)
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = _Entry(
                graphdef, [is_array_type(ty) for ty in types], self._donate, has_kwargs
            )
        return entry

    def _compiled(self, entry: _Entry, statics: tuple[Any, ...]) -> Callable[..., Any]:
        """The compiled function for static leaves the core's lookup did not find (or could
        not hash), compiled on its first call."""
        try:
            compiled = entry.compiled.get(statics)
        except TypeError:
            self._raise_unhashable(entry, statics)
            raise
        if compiled is None:
            compiled = entry.compiled[statics] = self._compile(entry, statics, None)
        return compiled

    def _call_aliased(
        self,
        entry: _Entry,
        statics: tuple[Any, ...],
        arrays: tuple[Any, ...],
        leaves: list[Any],
        roots: tuple[Any, ...],
    ) -> Any:
        """A call where one array object fills several leaves: it is passed once, so it is one
        tracer inside (and one buffer, donated at most once)."""
        pattern, unique = _dedupe(arrays)
        try:
            compiled = entry.aliased.get((statics, pattern))
        except TypeError:
            self._raise_unhashable(entry, statics)
            raise
        if compiled is None:
            compiled = entry.aliased[(statics, pattern)] = self._compile(entry, statics, pattern)
        if entry.kept is None:
            out_arrays, out = compiled(*unique)
        else:
            # Objects first met among the kept arrays are kept: they come first in `unique`.
            kept = len(set(pattern[: entry.kept]))
            out_arrays, out = compiled(unique[:kept], unique[kept:])
        return out.finish(out_arrays, leaves, roots)

    def _raise_unhashable(self, entry: _Entry, statics: tuple[Any, ...]) -> None:
        paths = entry.graphdef.paths()
        for i, leaf in zip(entry.static_at, statics, strict=True):
            try:
                hash(leaf)
            except TypeError:
                raise TypeError(
                    f"filter_jit: the static (non-array) leaf at {entry.where(paths[i])} is an "
                    f"unhashable {type(leaf).__name__}; static leaves are part of the "
                    "compilation cache key, so they must be hashable (pass an array instead, "
                    "or a hashable value)"
                ) from None

    def _compile(
        self, entry: _Entry, statics: tuple[Any, ...], pattern: tuple[int, ...] | None
    ) -> Callable[..., Any]:
        fn = self._fn
        namespace = self._namespace
        graphdef = entry.graphdef
        merge = entry.merge
        expand = None if pattern is None else _getter(pattern)

        def traced(arrays: tuple[Any, ...]) -> Any:
            if expand is not None:
                arrays = expand(arrays)
            before = merge(arrays + statics)
            roots, args, kwargs = entry.arguments(graph_unflatten(graphdef, before))
            objects = _numbered(roots)
            out_leaves, out_graphdef = graph_flatten(fn(*args, **kwargs), namespace=namespace)
            changes, changed = _Changes.of(
                roots, before, graphdef, namespace, "filter_jit", entry.where, objects
            )
            out = _Out(out_leaves, out_graphdef, changes)
            return (*out.arrays_of(out_leaves), *changed), out

        if entry.kept is None:
            return jax.jit(lambda *arrays: traced(arrays))
        return jax.jit(
            lambda kept, donated: traced(tuple(kept) + tuple(donated)), donate_argnums=(1,)
        )


@overload
def filter_jit(
    fn: None = None,
    /,
    *,
    donate: Literal["none", "all", "all-except-first"] = "none",
    namespace: str = "",
) -> Callable[[_F], _F]: ...


@overload
def filter_jit(
    fn: _F,
    /,
    *,
    donate: Literal["none", "all", "all-except-first"] = "none",
    namespace: str = "",
) -> _F: ...


def filter_jit(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    donate: Literal["none", "all", "all-except-first"] = "none",
    namespace: str = "",
) -> Any:
    """Compiles ``fn`` with ``jax.jit``, tracing only the array leaves of its arguments.

    Positional and keyword arguments are flattened together as one graph
    (:func:`oxtree.graph_flatten`, in ``namespace``). JAX and NumPy array leaves are traced;
    every other leaf (str, int, float, None, a type, a function, ...) is static: it is part of
    the cache key, so Python control flow on it works, and it must be hashable. ``fn`` is
    traced once per distinct structure and static values; new array values (of the same
    shapes and dtypes) reuse the compiled function.

    References are kept: an object reached twice, within one argument or through two, is one
    object inside ``fn``, cycles included, and the same holds for the result. ``fn`` works on
    rebuilt copies; what it changes in them (attributes, list and dict contents) is written
    back to the caller's objects after every call, in place. Array leaves of the result come
    back as JAX arrays, any other leaf as the very object ``fn`` returned.

    ``donate`` hands the array arguments' buffers to XLA for reuse: ``"all"``, or
    ``"all-except-first"`` to keep those of the first positional argument.

    >>> import jax.numpy as jnp
    >>> @filter_jit
    ... def step(state, lr, *, mode):
    ...     if mode == 'sgd':  # a static leaf: ordinary Python control flow
    ...         state['w'] = state['w'] - lr * state['g']
    ...     return state
    >>> s = {'w': jnp.ones(2), 'g': jnp.ones(2)}
    >>> step(s, 0.5, mode='sgd')['w']
    Array([0.5, 0.5], dtype=float32)
    >>> s['w']  # the change is written back to the caller's dict
    Array([0.5, 0.5], dtype=float32)
    >>> x = [jnp.zeros(())]
    >>> out = filter_jit(lambda v: v)({'a': x, 'b': x})
    >>> out['a'] is out['b']
    True
    """
    if donate not in _DONATE:
        raise ValueError(f"filter_jit: donate must be one of {_DONATE}, got {donate!r}")
    if not isinstance(namespace, str):
        raise TypeError(f"filter_jit: namespace must be a str, got {type(namespace).__name__}")
    if fn is None:
        return lambda f: filter_jit(f, donate=donate, namespace=namespace)
    if not callable(fn):
        raise TypeError(f"filter_jit expects a callable, got {type(fn).__name__}")
    return _FilterJit(fn, donate, namespace)
