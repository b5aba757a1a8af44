"""The machinery filter_jit, the filtered gradients and the lifted transforms share.

Each transform flattens its arguments as a graph (:func:`oxtree.graph_flatten`), hands JAX
the array leaves, rebuilds the objects inside the transform and writes what the function
changed in them back to the caller's objects once the transform has run (all or nothing):
:class:`_Changes` finds and writes back the changes, :class:`_Out` carries the output's
structure and static leaves out of the transform, :class:`_Flat` is one call's arguments.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Sequence
from typing import Any

import jax.tree_util as jtu

from oxtree._arrays import is_array_type
from oxtree._core import SequenceKey, keystr
from oxtree._write_back import REFUSED, write_leaves
from oxtree._write_back import walk as _walk
from oxtree.graph import GraphDef, graph_unflatten
from oxtree.graph import _graph_flatten_jax as graph_flatten


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
        arrays, statics = _split([is_array_type(type(x)) for x in leaves])
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
            elif is_array_type(type(leaf)):
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

    def changed_paths(
        self, as_args_kwargs: Callable[[tuple[Any, ...]], tuple[Any, ...]]
    ) -> list[tuple[Any, ...]]:
        """The paths of the changed arrays (in their order), each mapped by
        ``as_args_kwargs`` (filter_jit's ``_Entry.as_args_kwargs``: the ``(args, kwargs)``
        form)."""
        paths = self.graphdef.paths()
        return [as_args_kwargs(paths[n]) for n, (kind, _) in enumerate(self.sources) if kind == 1]

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


def _where(path: tuple[Any, ...]) -> str:
    """A leaf path of filter_jit's two roots ``(args, kwargs)``, as ``args[0]['a']``."""
    root = "args" if path[0] == SequenceKey(0) else "kwargs"
    return root + keystr(path[1:])


def _numbered(roots: tuple[Any, ...]) -> dict[int, int]:
    """``id -> index`` of the writable objects of ``roots``, in ``_walk``'s order."""
    return {id(x): k for k, x in enumerate(_walk(roots))}


def _check_fn(fn: Any, name: str) -> None:
    if not callable(fn):
        raise TypeError(f"{name} expects a callable, got {type(fn).__name__}")


class _Box:
    """A JAX node with no children whose aux data is itself: carries what a traced function
    found (structures, static leaves, changes) out of the transform unchanged."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


jtu.register_pytree_node(_Box, lambda b: ((), b), lambda b, _: b)


class _Flat:
    """One call's arguments flattened as a graph: its leaves, which of them are dynamic
    (handed to JAX) and how to put a new set of dynamic values back."""

    __slots__ = ("dynamic", "graphdef", "leaves")

    def __init__(self, roots: tuple[Any, ...], namespace: str, dynamic: Callable[[Any], bool]):
        self.leaves, self.graphdef = graph_flatten(*roots, namespace=namespace)
        self.dynamic = [i for i, x in enumerate(self.leaves) if dynamic(x)]

    def values(self) -> list[Any]:
        return [self.leaves[i] for i in self.dynamic]

    def with_values(self, values: Sequence[Any]) -> list[Any]:
        leaves = list(self.leaves)
        for i, v in zip(self.dynamic, values, strict=True):
            leaves[i] = v
        return leaves


def _split_moved(
    flat: _Flat, before: list[Any], changes: _Changes | None, changed: list[Any]
) -> None:
    """Makes each place where the function put another array leaf of its arguments
    (``m.a = m.b``, or a new attribute holding one) a changed array of its own (appended to
    ``changed``). Under vmap and scan that leaf's value differs from element to element or
    from step to step, so the place must come back along its own axis (or be carried, as its
    own axis says), holding what a Python loop over the same objects would leave there, not
    the caller's leaf it was taken from."""
    if changes is None:
        return
    paths = flat.graphdef.paths()
    own = {paths[i]: i for i in flat.dynamic}
    dynamic = set(flat.dynamic)
    for n, ((kind, v), path) in enumerate(
        zip(changes.sources, changes.graphdef.paths(), strict=True)
    ):
        if kind != 0 or v not in dynamic:
            continue
        i = own.get(path)
        if i == v or (i is not None and before[v] is before[i]):
            continue
        changes.sources[n] = (1, changes.count)
        changes.count += 1
        changed.append(before[v])


def _run(
    fn: Callable[..., Any],
    flat: _Flat,
    values: Sequence[Any],
    namespace: str,
    name: str,
) -> tuple[Any, tuple[Any, Any], _Changes | None, list[Any]]:
    """Inside a transform: rebuilds ``(args, kwargs)`` with ``values`` at the dynamic leaves,
    calls ``fn`` and finds what it changed in them."""
    before = flat.with_values(values)
    args, kwargs = graph_unflatten(flat.graphdef, before)
    objects = _numbered((args, kwargs))
    out = fn(*args, **kwargs)
    changes, changed = _Changes.of(
        (args, kwargs), before, flat.graphdef, namespace, name, _where, objects
    )
    return out, (args, kwargs), changes, changed


def _traced_call(
    fn: Callable[..., Any], flat: _Flat, namespace: str, name: str
) -> Callable[[Sequence[Any]], Any]:
    """The function of the dynamic leaves that filter_remat and filter_eval_shape transform:
    its array results (output, then changed arguments) and an :class:`_Out` telling how to
    rebuild the output and write the changes back."""

    def traced(values: Sequence[Any]) -> Any:
        out, _, changes, changed = _run(fn, flat, values, namespace, name)
        leaves, graphdef = graph_flatten(out, namespace=namespace)
        result = _Out(leaves, graphdef, changes)
        return (*result.arrays_of(leaves), *changed), result

    return traced


def _where_in(root: str) -> Callable[[tuple[Any, ...]], str]:
    return lambda path: root + keystr(path)
