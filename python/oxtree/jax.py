"""JAX integration: oxtree's types inside JAX transforms, and filtered transforms on graphs.

``import oxtree`` never imports JAX; ``import oxtree.jax`` does. This module offers two
things.

Mirroring. :func:`register` makes a type registered in oxtree (a custom node, a dataclass,
a static type) a pytree node to JAX as well, with the same children, the same aux data and
the same keys, so ``jax.jit``, ``jax.vmap``, ``jax.grad`` and
``jax.tree_util.tree_flatten_with_path`` see it as oxtree does. :func:`register_namespace`
mirrors every type registered in a namespace at once.

Filtered transforms. :func:`filter_jit` flattens its arguments as a graph
(:func:`oxtree.graph_flatten`): array leaves are traced, every other leaf is static (part of
the compilation cache key), and objects shared between or inside the arguments, or within
the result, stay shared; cycles are allowed. :func:`filter_grad` and
:func:`filter_value_and_grad` differentiate with respect to the floating-point array leaves
of the first argument. :func:`partition` and :func:`combine` split a tree by a filter such as
:func:`is_array` and put it back together.

>>> import jax.numpy as jnp
>>> import oxtree.jax as oxjax
>>> @oxjax.filter_jit
... def scale(params, factor, *, name):
...     return {name: params['w'] * factor}
>>> scale({'w': jnp.arange(3.0)}, 2, name='out')
{'out': Array([0., 2., 4.], dtype=float32)}
"""

from __future__ import annotations

import functools
import operator
import re
import threading
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypeVar, overload

import jax
import jax.tree_util as jtu
import numpy as np

from oxtree import _core, _jax_hook
from oxtree import module as _module
from oxtree._core import (
    DictKey,
    FlattenedIndexKey,
    GetAttrKey,
    PathPattern,
    SequenceKey,
    _FilterJitCore,
    _flatten_one_level,
    keystr,
    registered_types,
)
from oxtree._jit_options import JitOptions
from oxtree._write_back import REFUSED, write_leaves
from oxtree._write_back import walk as _walk
from oxtree.graph import GraphDef, graph_unflatten
from oxtree.graph import _graph_flatten_jax as graph_flatten
from oxtree.registry import _jax_functions

__all__ = [
    "register",
    "register_namespace",
    "mirrored_types",
    "filter_jit",
    "filter_grad",
    "filter_value_and_grad",
    "filter_vmap",
    "filter_scan",
    "filter_remat",
    "filter_eval_shape",
    "StateAxes",
    "Carry",
    "partition",
    "combine",
    "is_array",
    "is_inexact_array",
]

_C = TypeVar("_C", bound=type)
_F = TypeVar("_F", bound=Callable[..., Any])

# ---------------------------------------------------------------------------------------------
# Mirroring oxtree registrations into JAX's registry
# ---------------------------------------------------------------------------------------------

# type -> the oxtree namespace whose rule was mirrored ("" for the global one). JAX has one
# registry, so a type is mirrored from one namespace only.
_MIRRORED: dict[type, str] = {}
_MIRROR_LOCK = threading.Lock()

# oxtree's key classes -> JAX's. FlattenedIndexKey is only converted for int keys (JAX's takes
# nothing else); an optree-style entry such as 'a' keeps oxtree's key, which prints the same.
_JAX_KEYS: dict[type, Callable[[Any], Any]] = {
    SequenceKey: lambda k: jtu.SequenceKey(k.idx),
    DictKey: lambda k: jtu.DictKey(k.key),
    GetAttrKey: lambda k: jtu.GetAttrKey(k.name),
    FlattenedIndexKey: lambda k: jtu.FlattenedIndexKey(k.key) if type(k.key) is int else k,
}


class _KnownToJax(ValueError):
    """Raised by :func:`register` for a type JAX already has from other code."""


def _jax_key(key: Any) -> Any:
    convert = _JAX_KEYS.get(type(key))
    return key if convert is None else convert(key)


def _namespace_label(namespace: str) -> str:
    return "the global namespace" if not namespace else f"namespace {namespace!r}"


def _home_namespace(cls: type, namespace: str) -> str | None:
    """The namespace whose registration of ``cls`` oxtree uses in calls with ``namespace``:
    ``namespace`` itself when ``cls`` is registered there, else "" when it is registered
    globally, else None."""
    in_global = cls in registered_types()
    if namespace:
        # `registered_types(namespace=ns)` lists the global types and then ns's own, so a type
        # registered in both appears twice.
        count = registered_types(namespace=namespace).count(cls)
        if count > int(in_global):
            return namespace
    return "" if in_global else None


def _mirror_functions(
    namespace: str,
) -> tuple[Callable[[Any], Any], Callable[[Any], Any], Callable[[Any, Any], Any]]:
    """JAX's flatten, flatten-with-keys and unflatten for a type, built on oxtree's one-level
    flatten: the aux data is the node's one-level treespec (it holds oxtree's aux data, a
    dataclass's meta fields or a static value, compares and hashes as they do) and
    unflattening is that treespec's own, so every kind of oxtree registration mirrors alike.
    The walks are the JAX face's, since JAX flattens the type: aux data need not be hashable
    (JAX compares it when it must, a static dict for one)."""

    def flatten(obj: Any) -> tuple[list[Any], Any]:
        return _flatten_one_level(obj, namespace=namespace, jax=True)

    def flatten_with_keys(obj: Any) -> tuple[list[tuple[Any, Any]], Any]:
        # Everything below `obj` is a leaf: one level, with the keys oxtree's JAX face gives
        # (a registered flatten_with_keys's keys, GetAttrKey for dataclass fields, ...).
        pairs, spec = _core.jax_face._flatten_with_path_in(
            obj, functools.partial(operator.is_not, obj), namespace=namespace
        )
        return [(_jax_key(path[0]), child) for path, child in pairs], spec

    def unflatten(spec: Any, children: Any) -> Any:
        return spec.unflatten(children)

    return flatten, flatten_with_keys, unflatten


def register(cls: _C, namespace: str = "") -> _C:
    """Makes ``cls``, registered in oxtree, a pytree node to JAX too; returns ``cls``.

    JAX then flattens it as oxtree does in calls with ``namespace=namespace``: the same
    children in the same order, the same aux data (so treedefs compare as oxtree's treespecs
    do) and the same keys in ``jax.tree_util.tree_flatten_with_path``. Mirroring a type again
    from the same namespace does nothing. JAX has one registry, so mirroring a type from a
    second namespace with a different rule raises ValueError, as does a type JAX already
    knows from elsewhere. A class rebuilt attribute by attribute (:func:`oxtree.register_object`,
    a dataclass registered with ``init_on_unflatten=False``) is given to JAX with functions
    compiled for its attributes, the tuple of its static values as aux data; any other rule
    with functions over oxtree's one-level flatten, the node's treespec as aux data.

    A type registered through ``oxtree.tree_util`` (JAX's face) needs no mirroring: it is
    registered with JAX by that call, with its own functions, and ``register`` leaves it as
    it is (as it does a Module class). Only a rule of another namespace raises, as above.

    >>> import dataclasses, jax, oxtree
    >>> @dataclasses.dataclass
    ... class Scaled:
    ...     value: jax.Array
    ...     scale: float = dataclasses.field(default=2.0, metadata={'static': True})
    >>> _ = oxtree.register_dataclass(Scaled)
    >>> _ = register(Scaled)
    >>> jax.jit(lambda s: s.value * s.scale)(Scaled(jax.numpy.ones(2)))
    Array([2., 2.], dtype=float32)
    >>> jax.tree_util.tree_flatten_with_path(Scaled(1.0))[0]
    [((GetAttrKey(name='value'),), 1.0)]
    """
    if not isinstance(cls, type):
        raise TypeError(f"oxtree.jax.register expects a class, got {cls!r}")
    if not isinstance(namespace, str):
        raise TypeError(f"namespace must be a str, got {type(namespace).__name__}")
    if issubclass(cls, _module.Module):
        # Modules register themselves with JAX (with their GetAttrKey keys) once jax is
        # imported; mirroring one again is the harmless no-op it is for any mirrored type.
        _jax_hook.flush()
        return cls
    home = _home_namespace(cls, namespace)
    if home is None:
        raise ValueError(
            f"{cls.__qualname__} is not registered in oxtree ({_namespace_label(namespace)}); "
            "register it with oxtree.register_pytree_node, register_dataclass or "
            "register_static first"
        )
    _jax_hook.flush()  # registrations made while jax was half imported, if any
    if _jax_hook.reached_jax(cls):
        # Registered through oxtree.tree_util, which registered it with JAX (globally).
        if home == "":
            return cls
        raise ValueError(
            f"{cls.__qualname__} is registered with JAX through oxtree.tree_util (the rule of "
            f"the global namespace); JAX has a single registry, so it cannot also follow the "
            f"rule of {_namespace_label(home)}"
        )
    with _MIRROR_LOCK:
        done = _MIRRORED.get(cls)
        if done is not None:
            if done == home:
                return cls
            raise ValueError(
                f"{cls.__qualname__} is already mirrored to JAX from {_namespace_label(done)}; "
                f"JAX has a single registry, so it cannot also follow the rule of "
                f"{_namespace_label(home)}"
            )
        fields = _core._attribute_fields(cls, namespace=home)
        if fields is not None:
            # Rebuilt by attributes (register_object): functions made for them, as
            # oxtree.tree_util.register_object gives JAX.
            flatten_with_keys, unflatten, flatten = _jax_functions(cls, *fields, jtu.GetAttrKey)
        else:
            flatten, flatten_with_keys, unflatten = _mirror_functions(home)
        try:
            jtu.register_pytree_with_keys(cls, flatten_with_keys, unflatten, flatten)
        except ValueError as err:
            raise _KnownToJax(
                f"{cls.__qualname__} is already registered as a pytree node in JAX by other "
                "code, so oxtree cannot mirror it"
            ) from err
        _MIRRORED[cls] = home
    return cls


def register_namespace(namespace: str = "") -> list[type]:
    """Mirrors (see :func:`register`) every type oxtree has registered in ``namespace`` itself
    (the global namespace by default); returns the types this call mirrored. Types mirrored
    before, types JAX already has from other code, and types registered with JAX by
    ``oxtree.tree_util`` or as Module classes are left as they are, so calling it again after
    new registrations mirrors just those.

    >>> import oxtree
    >>> class Box:
    ...     def __init__(self, x): self.x = x
    >>> _ = oxtree.register_pytree_node(
    ...     Box, lambda b: ((b.x,), None), lambda _, c: Box(*c), namespace='boxes')
    >>> register_namespace('boxes') == [Box]
    True
    >>> register_namespace('boxes')
    []
    >>> jax.tree_util.tree_leaves([Box(1), Box(2)])
    [1, 2]
    """
    if not isinstance(namespace, str):
        raise TypeError(f"namespace must be a str, got {type(namespace).__name__}")
    listed = registered_types(namespace=namespace)
    # The global types come first in a namespace's listing; the namespace's own follow.
    own = listed[len(registered_types()) :] if namespace else listed
    new = []
    for cls in own:
        if cls in _MIRRORED or _jax_hook.reached_jax(cls):
            continue
        try:
            register(cls, namespace)
        except _KnownToJax:
            continue
        new.append(cls)
    return new


def mirrored_types() -> dict[type, str]:
    """The types mirrored to JAX so far, each with the oxtree namespace its rule comes from.

    These are the types :func:`register` and :func:`register_namespace` registered with JAX
    (with oxtree's rule). Types registered through ``oxtree.tree_util``, which that call
    registered with JAX with their own functions, and Module classes are not listed.

    >>> isinstance(mirrored_types(), dict)
    True
    """
    with _MIRROR_LOCK:
        return dict(_MIRRORED)


# ---------------------------------------------------------------------------------------------
# Leaf filters
# ---------------------------------------------------------------------------------------------

# What counts as an array leaf: traced by filter_jit, differentiable by filter_grad when
# floating. Tracers pass `isinstance(x, jax.Array)` but are no subclasses of it, so they are
# listed too: a filtered transform nests in another.
_ARRAY_TYPES = (jax.Array, jax.core.Tracer, np.ndarray, np.generic)
_IS_ARRAY_TYPE: dict[type, bool] = {}


def _is_array_type(ty: type) -> bool:
    found = _IS_ARRAY_TYPE.get(ty)
    if found is None:
        # NumPy's str_, bytes_ and void scalars (np.flexible) and object scalars hold no
        # number: they stay static.
        found = _IS_ARRAY_TYPE[ty] = issubclass(ty, _ARRAY_TYPES) and not issubclass(
            ty, (np.flexible, np.object_)
        )
    return found


def is_array(x: Any) -> bool:
    """Whether ``x`` is an array leaf: a JAX array (tracers included), a NumPy array or a
    NumPy scalar of a number or bool type (a ``np.str_`` is no array).

    >>> import jax.numpy as jnp, numpy as np
    >>> is_array(jnp.ones(2)), is_array(np.float32(1.0)), is_array(1.0), is_array('a')
    (True, True, False, False)
    """
    return _is_array_type(type(x))


def is_inexact_array(x: Any) -> bool:
    """Whether ``x`` is an array leaf (see :func:`is_array`) of floating or complex dtype.

    >>> import jax.numpy as jnp
    >>> is_inexact_array(jnp.ones(2)), is_inexact_array(jnp.arange(2)), is_inexact_array(1.0)
    (True, False, False)
    >>> is_inexact_array(jax.random.key(0)), is_inexact_array(jax.random.PRNGKey(0))
    (False, False)
    """
    # JAX's issubdtype knows extended dtypes (a typed PRNG key's key<fry> is no number);
    # NumPy's raises on them.
    return is_array(x) and bool(jax.dtypes.issubdtype(x.dtype, np.inexact))


# ---------------------------------------------------------------------------------------------
# filter_jit
# ---------------------------------------------------------------------------------------------


def _getter(indices: Sequence[int]) -> Callable[[Sequence[Any]], tuple[Any, ...]]:
    """A C-speed function picking ``indices`` out of a sequence, always as a tuple."""
    if not indices:
        return lambda _: ()
    if len(indices) == 1:
        (i,) = indices
        return lambda seq: (seq[i],)
    return operator.itemgetter(*indices)


def _merger(order: Sequence[int]) -> Callable[[tuple[Any, ...]], tuple[Any, ...]]:
    """For ``order``, the leaf index of each item of a concatenation of leaf groups (arrays,
    then statics): a C-speed function putting such a concatenation back in leaf order."""
    if all(i == j for j, i in enumerate(order)):
        return lambda items: items
    where = [0] * len(order)
    for j, i in enumerate(order):
        where[i] = j
    return _getter(where)


def _split(mask: Sequence[bool]) -> tuple[list[int], list[int]]:
    """The indices of the array leaves and of the static leaves, for a mask (True = array)."""
    return [i for i, m in enumerate(mask) if m], [i for i, m in enumerate(mask) if not m]


class _Out:
    """What the traced function returns besides its array outputs: the output's graphdef,
    its static leaves and how to merge them, and what the function changed in its arguments
    (None when nothing). A JAX node with no children whose aux data is itself, so `jax.jit`
    hands it back unchanged after every call."""

    __slots__ = ("arrays_of", "changes", "direct", "graphdef", "merge", "statics")

    def __init__(
        self, leaves: list[Any], graphdef: GraphDef, changes: _Changes | None = None
    ) -> None:
        arrays, statics = _split([_is_array_type(type(x)) for x in leaves])
        self.graphdef = graphdef
        # None when the leaves are the arrays, in order: the warm path then skips merging.
        self.merge = None if not statics else _merger(arrays + statics)
        self.statics = _getter(statics)(leaves)
        self.arrays_of = _getter(arrays)
        self.changes = changes
        # The graphdef when the result is rebuilt straight from the compiled arrays (nothing
        # to write back, no statics to merge): the warm path's one test.
        self.direct = graphdef if changes is None and self.merge is None else None

    def rebuild(self, arrays: tuple[Any, ...]) -> Any:
        merge = self.merge
        return graph_unflatten(
            self.graphdef, arrays if merge is None else merge(arrays + self.statics)
        )

    def finish(self, arrays: tuple[Any, ...], leaves: list[Any], roots: tuple[Any, ...]) -> Any:
        """The call's result from the compiled function's arrays, after writing what the
        function changed in its arguments back to the caller's ``roots``."""
        changes = self.changes
        if changes is not None:
            arrays, changed = changes.split(arrays)
            changes.write_back(roots, leaves, changed)
        return self.rebuild(arrays)


class _Changes:
    """What a traced function changed in its arguments (assigned attributes, new or deleted
    ones, list and dict contents): the arguments' new graphdef and, for each of their new
    leaves, where it comes from: the caller's leaf ``i`` (unchanged), the ``j``-th changed
    array the compiled function returns, or a static value."""

    __slots__ = ("count", "graphdef", "name", "namespace", "origin", "sources", "where")

    def __init__(
        self,
        before: list[Any],
        after: list[Any],
        graphdef: GraphDef,
        namespace: str,
        name: str,
        where: Callable[[tuple[Any, ...]], str],
        origin: tuple[int, ...],
    ) -> None:
        self.origin = origin
        index = {id(leaf): i for i, leaf in enumerate(before)}
        sources: list[tuple[int, Any]] = []
        self.count = 0
        for leaf in after:
            i = index.get(id(leaf))
            if i is not None:
                sources.append((0, i))
            elif _is_array_type(type(leaf)):
                sources.append((1, self.count))
                self.count += 1
            else:
                sources.append((2, leaf))
        self.sources = sources
        self.graphdef = graphdef
        self.namespace = namespace
        self.name = name
        self.where = where

    @staticmethod
    def of(
        roots: tuple[Any, ...],
        before: Sequence[Any],
        graphdef: GraphDef,
        namespace: str,
        name: str,
        where: Callable[[tuple[Any, ...]], str],
        objects: dict[int, int],
    ) -> tuple[_Changes | None, list[Any]]:
        """The changes a function made to ``roots`` (rebuilt from ``before`` and
        ``graphdef``; ``objects`` numbers their writable objects as ``_walk`` found them before
        the call), and the new array leaves to return; (None, []) when nothing changed.
        ``name`` and ``where`` (a leaf path as the user knows it) word the errors."""
        after, after_gd = graph_flatten(*roots, namespace=namespace)
        if after_gd == graphdef and all(map(operator.is_, after, before)):
            return None, []
        origin = tuple(objects.get(id(x), -1) for x in _walk(roots))
        changes = _Changes(list(before), after, after_gd, namespace, name, where, origin)
        arrays = [leaf for (kind, _), leaf in zip(changes.sources, after, strict=True) if kind == 1]
        return changes, arrays

    def changed_paths(self, entry: _Entry) -> list[tuple[Any, ...]]:
        """The paths, in ``(args, kwargs)`` form, of the changed arrays (in their order)."""
        paths = self.graphdef.paths()
        return [
            entry.as_args_kwargs(paths[n]) for n, (kind, _) in enumerate(self.sources) if kind == 1
        ]

    def split(self, arrays: tuple[Any, ...]) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        cut = len(arrays) - self.count
        return arrays[:cut], arrays[cut:]

    def write_back(self, roots: tuple[Any, ...], leaves: list[Any], changed: Sequence[Any]) -> None:
        new = [
            leaves[v] if kind == 0 else (changed[v] if kind == 1 else v) for kind, v in self.sources
        ]
        fresh = graph_unflatten(self.graphdef, new)
        at = write_leaves(
            roots,
            fresh if len(roots) != 1 else (fresh,),
            new,
            self.graphdef,
            functools.partial(graph_flatten, namespace=self.namespace),
            self.origin,
        )
        if at is None:
            return
        # Whatever the caller's objects could not take (a change inside a tuple or another
        # object rebuilt from its children, at the top of an argument) is reported; the
        # caller's objects are as they were.
        paths = self.graphdef.paths()
        where = self.where(paths[at]) if at < len(paths) else "the arguments' structure"
        raise ValueError(
            f"{self.name}: the function changed {where} in its arguments, and the change cannot "
            f"be written back to the caller's objects: {REFUSED}; return the new value instead"
        )


jtu.register_pytree_node(_Out, lambda out: ((), out), lambda out, _: out)
jtu.register_pytree_node(_Changes, lambda c: ((), c), lambda c, _: c)


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
        "kept",
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
        # The arrays go to the compiled function one argument each (`kept` None: the core
        # passes them so); the options say which are donated and how each is laid out.
        self.kept: int | None = None
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


def _where(path: tuple[Any, ...]) -> str:
    """A leaf path of filter_jit's two roots ``(args, kwargs)``, as ``args[0]['a']``."""
    root = "args" if path[0] == SequenceKey(0) else "kwargs"
    return root + keystr(path[1:])


def _numbered(roots: tuple[Any, ...]) -> dict[int, int]:
    """``id -> index`` of the writable objects of ``roots``, in ``_walk``'s order."""
    return {id(x): k for k, x in enumerate(_walk(roots))}


def _where_first(path: tuple[Any, ...]) -> str:
    """A leaf path of a filtered gradient's first argument, as ``args[0].w``."""
    return "args[0]" + keystr(path)


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

    def __new__(cls, fn: Callable[..., Any], options: JitOptions, namespace: str) -> _FilterJit:
        return super().__new__(cls, namespace, _IS_ARRAY_TYPE, _is_array_type)

    def __init__(self, fn: Callable[..., Any], options: JitOptions, namespace: str) -> None:
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
                graphdef, [_is_array_type(ty) for ty in types], self._options, has_kwargs
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
                changed = options.constrain_changed(changed, changes.changed_paths(entry), _where)
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


# ---------------------------------------------------------------------------------------------
# filter_grad and filter_value_and_grad
# ---------------------------------------------------------------------------------------------


def _check_fn(fn: Any, name: str) -> None:
    if not callable(fn):
        raise TypeError(f"{name} expects a callable, got {type(fn).__name__}")


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


# ---------------------------------------------------------------------------------------------
# partition and combine
# ---------------------------------------------------------------------------------------------


def partition(
    tree: Any,
    filter_spec: Any,
    /,
    replace: Any = None,
    *,
    is_leaf: Callable[[Any], bool] | None = None,
    namespace: str = "",
) -> tuple[Any, Any]:
    """Splits ``tree`` in two trees of its structure: the leaves ``filter_spec`` selects, with
    ``replace`` (None) in the other places, and the rest, with ``replace`` in the selected
    places. :func:`combine` puts them back together.

    ``filter_spec`` is a function of a leaf returning a bool (:func:`is_array`,
    :func:`is_inexact_array`, ...), a bool, a tree prefix of ``tree`` holding such
    functions and bools, or an :class:`oxtree.PathPattern` (globs over the leaf's
    ``keystr``; see docs/key-paths.md), which selects the leaves whose key path matches.
    With a function, a bool or a pattern the tree is flattened as a graph, so shared
    objects and cycles are kept.

    >>> import jax.numpy as jnp
    >>> arrays, rest = partition({'w': jnp.ones(2), 'act': 'relu'}, is_array)
    >>> arrays
    {'w': Array([1., 1.], dtype=float32), 'act': None}
    >>> rest
    {'w': None, 'act': 'relu'}
    >>> from oxtree import PathPattern
    >>> tree = {'enc': {'w': 1.0}, 'head': {'w': 2.0}}
    >>> frozen, trained = partition(tree, PathPattern("['enc']**"))
    >>> frozen, trained
    ({'enc': {'w': 1.0}, 'head': {'w': None}}, {'enc': {'w': None}, 'head': {'w': 2.0}})
    """
    unflatten: Callable[[list[Any]], Any]
    if isinstance(filter_spec, PathPattern):
        leaves, graphdef = graph_flatten(tree, is_leaf=is_leaf, namespace=namespace)
        mask = filter_spec._leaf_mask(graphdef)
        unflatten = functools.partial(graph_unflatten, graphdef)
    else:
        if callable(filter_spec) or isinstance(filter_spec, bool):
            leaves, graphdef = graph_flatten(tree, is_leaf=is_leaf, namespace=namespace)
            specs = [filter_spec] * len(leaves)
            unflatten = functools.partial(graph_unflatten, graphdef)
        else:
            leaves, treespec = _core._tree_flatten_jax_registry(tree, is_leaf, namespace=namespace)
            specs = _core._broadcast_prefix(
                filter_spec, tree, is_leaf, namespace=namespace, leaves=True, jax_registry=True
            )
            unflatten = treespec.unflatten
        mask = [_select(spec, leaf) for spec, leaf in zip(specs, leaves, strict=True)]
    return (
        unflatten([leaf if m else replace for leaf, m in zip(leaves, mask, strict=True)]),
        unflatten([replace if m else leaf for leaf, m in zip(leaves, mask, strict=True)]),
    )


def _select(spec: Any, leaf: Any) -> bool:
    if isinstance(spec, bool):
        return spec
    if not callable(spec):
        note = (
            " (a PathPattern is a whole filter spec, never a part of one)"
            if isinstance(spec, PathPattern)
            else f"; for a path pattern write PathPattern({spec!r})"
            if isinstance(spec, str | re.Pattern)
            else ""
        )
        raise TypeError(
            "partition: a filter spec holds bools and functions of a leaf, "
            f"got {type(spec).__name__}{note}"
        )
    return _check_bool(spec(leaf))


def _check_bool(value: Any) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"partition: a filter must return a bool, got {type(value).__name__}")
    return bool(value)


def combine(*trees: Any, is_leaf: Callable[[Any], bool] | None = None, namespace: str = "") -> Any:
    """Merges trees of one structure, taking at each leaf the first value that is not None:
    the inverse of :func:`partition`. When the trees share objects alike (as
    :func:`partition`'s two halves do), shared objects and cycles are kept; otherwise they are
    merged as trees, like the first tree's structure.

    >>> import jax.numpy as jnp
    >>> tree = {'w': jnp.ones(2), 'act': 'relu'}
    >>> combine(*partition(tree, is_array))
    {'w': Array([1., 1.], dtype=float32), 'act': 'relu'}
    """
    if not trees:
        raise TypeError("combine expects at least one tree")

    def leaf_or_none(x: Any) -> bool:
        return x is None or (is_leaf is not None and is_leaf(x))

    graphs = [graph_flatten(t, is_leaf=leaf_or_none, namespace=namespace) for t in trees]
    columns = [leaves for leaves, _ in graphs]
    unflatten: Callable[[list[Any]], Any] = functools.partial(graph_unflatten, graphs[0][1])
    if any(graphdef != graphs[0][1] for _, graphdef in graphs[1:]):
        # The same tree structure may still differ in what is shared (a tree_map result shares
        # nothing; a constant tuple written twice is one object): merge as trees then.
        flats = [
            _core._tree_flatten_jax_registry(t, leaf_or_none, namespace=namespace) for t in trees
        ]
        for i, (_, spec) in enumerate(flats[1:], 1):
            if spec != flats[0][1]:
                raise ValueError(
                    f"combine: tree {i} has another structure than tree 0: {spec} != {flats[0][1]}"
                )
        columns = [leaves for leaves, _ in flats]
        unflatten = flats[0][1].unflatten
    merged = [
        next((v for v in column if v is not None), None) for column in zip(*columns, strict=True)
    ]
    return unflatten(merged)


# Registrations waiting for JAX are made once `import jax` finishes (oxtree._jax_hook); this
# catches those made while jax was half imported.
_jax_hook.flush()

# The lifted transforms live in their own module, built on the helpers above.
from oxtree._lifted import (  # noqa: E402
    Carry,
    StateAxes,
    filter_eval_shape,
    filter_remat,
    filter_scan,
    filter_vmap,
)
