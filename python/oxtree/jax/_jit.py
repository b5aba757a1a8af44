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
from oxtree.jax._jit_options import JitOptions
from oxtree.jax._machinery import _Changes, _getter, _merger, _numbered, _Out, _split, _where

_F = TypeVar("_F", bound=Callable[..., Any])


class _Entry:
    """Everything filter_jit knows about one input structure (graphdef, leaf types and whether
    there are keyword arguments): how to put the leaves back in order, and a compiled function
    per distinct tuple of static leaves. The graph's roots are the positional arguments, then
    the keyword arguments' dict when there are keyword arguments; the arrays (and the statics)
    come in leaf order (see `_FilterJitCore`)."""

    __slots__ = (
        "aliased",
        "compiled",
        "donated",
        "graphdef",
        "has_kwargs",
        "in_shardings",
        "merge",
        "nargs",
        "static_at",
    )

    def __init__(
        self, graphdef: GraphDef, mask: Sequence[bool], options: JitOptions, has_kwargs: bool
    ) -> None:
        arrays, statics = _split(mask)
        self.graphdef = graphdef
        self.has_kwargs = has_kwargs
        self.nargs = graphdef.num_roots - has_kwargs
        # The arrays go to the compiled function one argument each (the core passes them
        # so); the options say which are donated and how each is laid out.
        paths = [self.as_args_kwargs(p) for p in graphdef.paths()]
        self.donated, self.in_shardings = options.plan(arrays, paths, _where, self.nargs)
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

    def __new__(
        cls, fn: Callable[..., Any], options: JitOptions | str, namespace: str
    ) -> _FilterJit:
        return super().__new__(cls, namespace, _IS_ARRAY_TYPE, is_array_type)

    def __init__(self, fn: Callable[..., Any], options: JitOptions | str, namespace: str) -> None:
        if isinstance(options, str):
            # A pickle made when filter_jit took only `donate`: it names this class with
            # (fn, donate, namespace); later ones name `_rebuilt`.
            options = JitOptions(fn, donate=options)
        self._fn = fn
        self._options = options
        self._namespace = namespace
        self._entries: dict[tuple[GraphDef, tuple[type, ...], bool], _Entry] = {}
        functools.update_wrapper(self, fn)

    def __repr__(self) -> str:
        return f"<filter_jit of {self._fn!r}>"

    def __reduce__(self) -> tuple[Any, ...]:
        # Copies and pickles are made anew from the function and options (the core's fields
        # are no attributes), with the attributes set since; the compiled functions are not
        # copied.
        state = {k: v for k, v in vars(self).items() if k not in ("_entries", "_options")}
        return _rebuilt, (self._fn, self._options.raw, self._namespace), state

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
                graphdef, [is_array_type(ty) for ty in types], self._options, has_kwargs
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
        out_arrays, out = compiled(*unique)
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
        options = self._options
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
            out_leaves = options.constrain_out(out_leaves, out_graphdef.paths())
            changes, changed = _Changes.of(
                roots, before, graphdef, namespace, "filter_jit", entry.where, objects
            )
            if changes is not None and options.in_shardings is not None:
                changed = options.constrain_changed(
                    changed, changes.changed_paths(entry.as_args_kwargs), _where
                )
            out = _Out(out_leaves, out_graphdef, changes)
            return (*out.arrays_of(out_leaves), *changed), out

        donated, shardings = entry.donated, entry.in_shardings
        if pattern is not None:
            donated, shardings = _deduplicated(pattern, donated, shardings)
        jit_kwargs = options.jit_kwargs()
        if shardings is not None:
            jit_kwargs["in_shardings"] = shardings
        return jax.jit(lambda *arrays: traced(arrays), donate_argnums=donated, **jit_kwargs)


def _deduplicated(
    pattern: tuple[int, ...], donated: tuple[int, ...], shardings: tuple[Any, ...] | None
) -> tuple[tuple[int, ...], tuple[Any, ...] | None]:
    """The donation and shardings of a call's distinct array objects (``pattern`` gives each
    array's object): an object is donated when every leaf it fills is, and laid out as the
    first leaf it fills that has a sharding."""
    count = max(pattern, default=-1) + 1
    kept = {pattern[j] for j in range(len(pattern)) if j not in set(donated)}
    unique_donated = tuple(u for u in range(count) if u not in kept)
    if shardings is None:
        return unique_donated, None
    unique: list[Any] = [None] * count
    for u, s in zip(pattern, shardings, strict=True):
        if unique[u] is None:
            unique[u] = s
    return unique_donated, tuple(unique)


@overload
def filter_jit(
    fn: None = None,
    /,
    *,
    donate: Literal["none", "all", "all-except-first"] = "none",
    namespace: str = "",
    in_shardings: Any = None,
    out_shardings: Any = None,
    static_argnums: int | Sequence[int] | None = None,
    static_argnames: str | Sequence[str] | None = None,
    donate_argnums: int | Sequence[int] | None = None,
    donate_argnames: str | Sequence[str] | None = None,
    keep_unused: bool = False,
    device: Any = None,
    backend: str | None = None,
    compiler_options: dict[str, Any] | None = None,
) -> Callable[[_F], _F]: ...


@overload
def filter_jit(
    fn: _F,
    /,
    *,
    donate: Literal["none", "all", "all-except-first"] = "none",
    namespace: str = "",
    in_shardings: Any = None,
    out_shardings: Any = None,
    static_argnums: int | Sequence[int] | None = None,
    static_argnames: str | Sequence[str] | None = None,
    donate_argnums: int | Sequence[int] | None = None,
    donate_argnames: str | Sequence[str] | None = None,
    keep_unused: bool = False,
    device: Any = None,
    backend: str | None = None,
    compiler_options: dict[str, Any] | None = None,
) -> _F: ...


def filter_jit(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    donate: Literal["none", "all", "all-except-first"] = "none",
    namespace: str = "",
    in_shardings: Any = None,
    out_shardings: Any = None,
    static_argnums: int | Sequence[int] | None = None,
    static_argnames: str | Sequence[str] | None = None,
    donate_argnums: int | Sequence[int] | None = None,
    donate_argnames: str | Sequence[str] | None = None,
    keep_unused: bool = False,
    device: Any = None,
    backend: str | None = None,
    compiler_options: dict[str, Any] | None = None,
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

    ``in_shardings``, ``out_shardings``, ``static_argnums``, ``static_argnames``,
    ``donate_argnums``, ``donate_argnames``, ``keep_unused``, ``device``, ``backend`` and
    ``compiler_options`` are ``jax.jit``'s, with its meanings. A shardings tree is a prefix of
    the arguments (``in_shardings``: one entry per positional argument that is not static, or
    one sharding for all) or of the result, read by key path, so a Module laid out by its own
    annotations (:func:`oxtree.sharding.named_shardings`) is one; what ``fn`` writes back into
    an argument keeps that argument's ``in_shardings``. Static arguments are passed whole and
    must be hashable; ``donate`` and ``donate_argnums`` / ``donate_argnames`` exclude each
    other.

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
    if not isinstance(namespace, str):
        raise TypeError(f"filter_jit: namespace must be a str, got {type(namespace).__name__}")
    options = {
        "donate": donate,
        "in_shardings": in_shardings,
        "out_shardings": out_shardings,
        "static_argnums": static_argnums,
        "static_argnames": static_argnames,
        "donate_argnums": donate_argnums,
        "donate_argnames": donate_argnames,
        "keep_unused": keep_unused,
        "device": device,
        "backend": backend,
        "compiler_options": compiler_options,
    }
    if fn is None:
        return lambda f: filter_jit(f, namespace=namespace, **options)
    if not callable(fn):
        raise TypeError(f"filter_jit expects a callable, got {type(fn).__name__}")
    return _rebuilt(fn, options, namespace)


def _rebuilt(fn: Callable[..., Any], raw: dict[str, Any], namespace: str) -> Any:
    """``filter_jit(fn, namespace=namespace, **raw)`` (options checked): what a copy or a
    pickle of a compiled function is made anew from."""
    options = JitOptions(fn, **raw)
    if options.has_statics:
        return _WithStatics(fn, options, _FilterJit(options.join_statics(fn), options, namespace))
    return _FilterJit(fn, options, namespace)


class _WithStatics:
    """A function compiled by :func:`filter_jit` with static arguments: each call's static
    arguments become one static leaf in front of the others (see ``_jit_options``)."""

    def __init__(self, fn: Callable[..., Any], options: JitOptions, jitted: _FilterJit) -> None:
        self._fn = fn
        self._options = options
        self._jitted = jitted
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        args, kwargs = self._options.split_statics(args, kwargs)
        return self._jitted(*args, **kwargs)

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return self
        return functools.partial(self, instance)

    def __repr__(self) -> str:
        return f"<filter_jit of {self._fn!r}>"

    def __reduce__(self) -> tuple[Any, ...]:
        return _rebuilt, (self._fn, self._options.raw, self._jitted._namespace)
