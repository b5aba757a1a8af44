"""Lifted transforms: ``jax.vmap``, ``jax.lax.scan``, ``jax.checkpoint`` and ``jax.eval_shape``
over arguments that are graphs of Python objects (Modules, shared submodules, cycles).

Re-exported by :mod:`oxtree.jax`, which documents them. Each one flattens its arguments as a
graph (:func:`oxtree.graph_flatten`), hands JAX only the array leaves, rebuilds the objects
inside the transform and, as :func:`oxtree.jax.filter_jit` does, writes what the function
changed in them back to the caller's objects once the transform has run (all or nothing).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import jax.tree_util as jtu

from oxtree import module as _module
from oxtree._core import DictKey, SequenceKey, keystr
from oxtree._write_back import transplant, walk
from oxtree.graph import GraphDef, graph_unflatten
from oxtree.graph import _graph_flatten_jax as graph_flatten
from oxtree.jax import (
    _Changes,
    _is_array_type,
    _numbered,
    _Out,
    _where,
)

__all__ = ["Carry", "StateAxes", "filter_eval_shape", "filter_remat", "filter_scan", "filter_vmap"]


class _Box:
    """A JAX node with no children whose aux data is itself: carries what a traced function
    found (structures, static leaves, changes) out of the transform unchanged."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


jtu.register_pytree_node(_Box, lambda b: ((), b), lambda b, _: b)


def _check_fn(fn: Any, name: str) -> None:
    if not callable(fn):
        raise TypeError(f"{name} expects a callable, got {type(fn).__name__}")


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


# ---------------------------------------------------------------------------------------------
# filter_eval_shape and filter_remat
# ---------------------------------------------------------------------------------------------


def _is_shaped(x: Any) -> bool:
    return _is_array_type(type(x)) or isinstance(x, jax.ShapeDtypeStruct)


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
    flat = _Flat((args, kwargs), "", _is_shaped)
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
        flat = _Flat((args, kwargs), namespace, _is_array)
        traced = _traced_call(fn, flat, namespace, "filter_remat")
        arrays, out = jax.checkpoint(traced, prevent_cse=prevent_cse, policy=policy)(flat.values())
        return out.finish(tuple(arrays), flat.leaves, (args, kwargs))

    return remat


def _is_array(x: Any) -> bool:
    return _is_array_type(type(x))


# ---------------------------------------------------------------------------------------------
# Axes: which leaves a transform maps over, and along which axis
# ---------------------------------------------------------------------------------------------


class _CarryType(type):
    def __repr__(cls) -> str:
        return "Carry"


class Carry(metaclass=_CarryType):
    """The axis that marks a leaf of :func:`filter_scan`'s ``xs`` as carried, as Flax NNX's
    ``nnx.Carry`` does: each step sees the value the step before left there, and the caller's
    object ends up holding the last one. Give it as an ``in_axes`` entry or in a
    :class:`StateAxes` (``StateAxes({BatchStats: Carry, ...: 0})``); the class itself is the
    marker.

    >>> import jax.numpy as jnp
    >>> from oxtree import Module
    >>> class Counter(Module):
    ...     def __init__(self):
    ...         self.register_state('n', jnp.zeros((), jnp.int32))
    >>> def bump(total, pair):
    ...     x, counter = pair
    ...     counter.n = counter.n + 1
    ...     return total + x * counter.n, None
    >>> c = Counter()
    >>> total, _ = filter_scan(bump, jnp.zeros(()), (jnp.ones(3), c), in_axes=(0, Carry))
    >>> total, c.n
    (Array(6., dtype=float32), Array(3, dtype=int32))
    """

    def __init__(self) -> None:
        raise TypeError("Carry is a marker: give the class itself as an axis, Carry, not Carry()")


class StateAxes:
    """Axes for the leaves of a Module by filter: ``StateAxes({Kind.PARAMETER: 0, ...: None})``
    maps the parameters along axis 0 and broadcasts everything else.

    Use it where :func:`filter_vmap` takes an axis (an entry of ``in_axes`` or ``out_axes``)
    or :func:`filter_scan` does (``in_axes``), and the value there is a Module. Each leaf of
    the module gets the axis (an int, None for "not mapped", or, in filter_scan, ``Carry``)
    of the first filter that accepts it; a filter is anything :meth:`oxtree.Module.select`
    takes (a Kind, a type, a function of ``(path, kind, leaf)``, ``OfKind``,
    ``PathContains``, ...), or ``...`` for every leaf. A leaf no filter accepts is an error.

    >>> from oxtree import Kind
    >>> StateAxes({Kind.PARAMETER: 0, ...: None})
    StateAxes({OfKind(PARAMETER): 0, Ellipsis: None})
    >>> StateAxes({Kind.STATE: Carry, ...: 0})
    StateAxes({OfKind(STATE): Carry, Ellipsis: 0})
    """

    __slots__ = ("axes", "filters", "keys")

    def __init__(self, axes: Mapping[Any, int | type[Carry] | None]) -> None:
        if not isinstance(axes, Mapping) or not axes:
            raise TypeError(
                "StateAxes expects a non-empty mapping from filters to axes (an int, None or "
                f"Carry), got {axes!r}"
            )
        for key, axis in axes.items():
            _check_axis(axis, f"StateAxes entry {key!r}", carry=True)
        self.keys = tuple(axes)
        self.filters = tuple(
            (lambda path, kind, leaf: True) if k is ... else _module._as_filter(k) for k in axes
        )
        self.axes = tuple(axes.values())

    def axis_for(
        self, path: tuple[Any, ...], kind: Any, leaf: Any
    ) -> int | type[Carry] | _NoMatch | None:
        for test, axis in zip(self.filters, self.axes, strict=True):
            if test(path, kind, leaf):
                return axis
        return _NO_MATCH

    def __repr__(self) -> str:
        items = ", ".join(
            f"{'Ellipsis' if k is ... else f}: {a!r}"
            for k, f, a in zip(self.keys, self.filters, self.axes, strict=True)
        )
        return f"StateAxes({{{items}}})"


class _NoMatch:
    pass


_NO_MATCH = _NoMatch()


def _check_axis(axis: Any, what: str, *, carry: bool) -> None:
    if axis is Carry:
        if carry:
            return
        raise ValueError(
            f"{what}: Carry marks a leaf that filter_scan carries from step to step; here an "
            "axis is an int or None"
        )
    if axis is not None and (type(axis) is not int):
        allowed = "an int or None (or Carry, in filter_scan)" if carry else "an int or None"
        raise TypeError(f"{what}: an axis is {allowed}, got {type(axis).__name__}: {axis!r}")


def _check_spec(spec: Any, what: str, *, carry: bool = False) -> None:
    """Checks an axes specification: ints, None and StateAxes (and Carry where ``carry``) in
    tuples, lists and dicts."""
    if spec is None or type(spec) is int or (carry and spec is Carry):
        return
    if isinstance(spec, StateAxes):
        for key, axis in zip(spec.keys, spec.axes, strict=True):
            _check_axis(axis, f"{what}: {spec!r} entry {key!r}", carry=carry)
    elif isinstance(spec, tuple | list):
        for i, s in enumerate(spec):
            _check_spec(s, f"{what}[{i}]", carry=carry)
    elif isinstance(spec, dict):
        for k, s in spec.items():
            _check_spec(s, f"{what}[{k!r}]", carry=carry)
    elif spec is Carry:
        _check_axis(spec, what, carry=False)
    else:
        axes = "an int, None, Carry, a StateAxes" if carry else "an int, None, a StateAxes"
        raise TypeError(
            f"{what}: axes are given by {axes}, or a tuple, list or dict "
            f"of them (a prefix of the arguments), got {type(spec).__name__}: {spec!r}"
        )


def _axis_at(spec: Any, root: Any, path: tuple[Any, ...], leaf: Any, what: str, where: str) -> Any:
    """The axis (an int, None or Carry) that ``spec`` (a prefix of ``root``) gives the leaf at
    ``path`` below ``root``."""
    node = root
    for depth in range(len(path) + 1):
        if spec is None or type(spec) is int or spec is Carry:
            return spec  # type: ignore[no-any-return]
        if isinstance(spec, StateAxes):
            if not isinstance(node, _module.Module):
                raise ValueError(
                    f"{what}: a StateAxes applies to a Module, but it is given for a "
                    f"{type(node).__name__} (at {where})"
                )
            rest = path[depth:]
            axis = spec.axis_for(rest, _module._kind_at(node, rest), leaf)
            if axis is _NO_MATCH:
                raise ValueError(f"{what}: no filter of {spec!r} accepts {where}")
            return axis  # type: ignore[return-value]
        entry = path[depth] if depth < len(path) else None
        if isinstance(spec, tuple | list):
            matches = type(entry) is SequenceKey and entry.idx < len(spec)
            key = entry.idx if matches else None
        else:  # a dict (checked by _check_spec)
            matches = type(entry) is DictKey and entry.key in spec
            key = entry.key if matches else None
        if not matches:
            held = "a leaf" if entry is None else f"a {type(node).__name__}"
            raise ValueError(
                f"{what}: the axes {spec!r} are no prefix of the arguments at {where} "
                f"({held} is there)"
            )
        spec = spec[key]
        try:
            node = node[key]
        except Exception:  # a registered node: no StateAxes can apply below it
            node = None
    raise AssertionError("unreachable")  # pragma: no cover


def _check_prefix(
    spec: Any, node: Any, path: tuple[Any, ...], what: str, where: Callable[[tuple[Any, ...]], str]
) -> None:
    """Raises a ValueError where a tuple, list or dict of ``spec`` has other entries than the
    tuple, list or dict of ``node`` it stands for (a longer tuple, a key the dict lacks)."""
    if isinstance(spec, tuple | list) and isinstance(node, tuple | list):
        if len(spec) != len(node):
            raise ValueError(
                f"{what}: the axes {spec!r} are no prefix of the arguments at {where(path)}: "
                f"{len(spec)} entries for a {type(node).__name__} of {len(node)}"
            )
        for i, (s, n) in enumerate(zip(spec, node, strict=True)):
            _check_prefix(s, n, (*path, SequenceKey(i)), what, where)
    elif isinstance(spec, dict) and isinstance(node, dict):
        extra = [k for k in spec if k not in node]
        missing = [k for k in node if k not in spec]
        if extra or missing:
            wrong = f"keys {extra!r} the dict there lacks" if extra else ""
            wrong += "; " if extra and missing else ""
            wrong += f"no entry for its keys {missing!r}" if missing else ""
            raise ValueError(
                f"{what}: the axes {spec!r} are no prefix of the arguments at "
                f"{where(path)}: {wrong}"
            )
        for k, s in spec.items():
            _check_prefix(s, node[k], (*path, DictKey(k)), what, where)


def _axes_of(
    spec: Any,
    roots: tuple[Any, ...],
    graphdef: GraphDef,
    leaves: Sequence[Any],
    which: Sequence[int],
    what: str,
    where: Callable[[tuple[Any, ...]], str],
    *,
    whole: bool = True,
) -> list[Any]:
    """The axis of each leaf in ``which`` of a graph of ``roots`` (paths start with the root's
    index when there are several), ``spec`` holding one prefix per root. With ``whole``, the
    tuples, lists and dicts of ``spec`` must match those of the roots entry for entry, as
    ``jax.vmap`` demands, even where no array leaf lies below them."""
    if whole:
        if len(roots) > 1:
            for r, root in enumerate(roots):
                _check_prefix(spec[r], root, (SequenceKey(r),), what, where)
        else:
            _check_prefix(spec, roots[0], (), what, where)
    paths = graphdef.paths()
    axes = []
    for i in which:
        path = paths[i]
        if len(roots) > 1:
            r = path[0].idx
            root, sub, root_spec = roots[r], path[1:], spec[r]
        else:
            root, sub, root_spec = roots[0], path, spec
        axes.append(_axis_at(root_spec, root, sub, leaves[i], what, where(path)))
    return axes


def _kwargs_axes(kwargs: dict[str, Any]) -> dict[str, int]:
    return dict.fromkeys(kwargs, 0)


# ---------------------------------------------------------------------------------------------
# filter_vmap
# ---------------------------------------------------------------------------------------------


def _normalized(axis: int, ndim: int) -> int | None:
    return axis + ndim if -ndim <= axis < 0 else (axis if 0 <= axis < ndim else None)


def filter_vmap(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    in_axes: Any = 0,
    out_axes: Any = 0,
    axis_name: Any = None,
    axis_size: int | None = None,
    namespace: str = "",
) -> Any:
    """``fn`` vectorized with ``jax.vmap`` over the array leaves of its arguments, which may
    be Modules and any other objects (flattened as a graph: shared objects stay shared).

    ``in_axes`` says along which axis each array leaf of the positional arguments is
    mapped: an int, None (not mapped: the same value for every element), a
    :class:`StateAxes` for a Module (axes by kind or another filter), or a tuple with one
    such entry per positional argument, each entry a prefix of its argument (tuples, lists
    and dicts of axes). Keyword arguments are mapped along axis 0, as ``jax.vmap`` does.
    Every other leaf (str, int, float, a function, ...) is passed to every element as it is.
    ``out_axes`` places the output's array leaves the same way (a leaf given None must not
    depend on the mapped axis). ``axis_name`` and ``axis_size`` are ``jax.vmap``'s.

    What ``fn`` changes in its arguments is written back to the caller's objects, as
    :func:`filter_jit` does: a changed array leaf comes back along the axis ``in_axes`` gives
    its place (so a change to a mapped module is one value per element), a new attribute
    included. A change to a place given None that differs between elements is an error
    naming it, and nothing is written back.

    An ensemble: a vmapped constructor stacks the parameters of several modules, and a
    vmapped call runs each on the same input.

    >>> import jax, jax.numpy as jnp
    >>> from oxtree import Module
    >>> class Linear(Module):
    ...     def __init__(self, key):
    ...         self.register_parameter('w', jax.random.normal(key, (2,)))
    ...     def __call__(self, x):
    ...         return x @ self.w
    >>> ensemble = filter_vmap(Linear)(jax.random.split(jax.random.key(0), 3))
    >>> ensemble.w.shape
    (3, 2)
    >>> filter_vmap(lambda m, x: m(x), in_axes=(0, None))(ensemble, jnp.ones(2)).shape
    (3,)
    """
    if fn is None:
        return lambda f: filter_vmap(
            f,
            in_axes=in_axes,
            out_axes=out_axes,
            axis_name=axis_name,
            axis_size=axis_size,
            namespace=namespace,
        )
    _check_fn(fn, "filter_vmap")
    _check_spec(in_axes, "filter_vmap: in_axes")
    _check_spec(out_axes, "filter_vmap: out_axes")
    if axis_size is not None and (type(axis_size) is not int or axis_size < 0):
        raise TypeError(f"filter_vmap: axis_size must be an int >= 0, got {axis_size!r}")
    return functools.wraps(fn)(_Vmapped(fn, in_axes, out_axes, axis_name, axis_size, namespace))


class _Vmapped:
    """A function vectorized by :func:`filter_vmap`."""

    def __init__(
        self,
        fn: Callable[..., Any],
        in_axes: Any,
        out_axes: Any,
        axis_name: Any,
        axis_size: int | None,
        namespace: str,
    ) -> None:
        self._fn = fn
        self._in_axes = in_axes
        self._out_axes = out_axes
        self._axis_name = axis_name
        self._axis_size = axis_size
        self._namespace = namespace

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        return self if instance is None else functools.partial(self, instance)

    def _arg_spec(self, args: tuple[Any, ...]) -> tuple[Any, ...]:
        spec = self._in_axes
        if isinstance(spec, tuple | list):
            if len(spec) != len(args):
                raise ValueError(
                    f"filter_vmap: in_axes has {len(spec)} entries but the function was called "
                    f"with {len(args)} positional arguments; give one entry per positional "
                    "argument, or a single axis for all"
                )
            return tuple(spec)
        return (spec,) * len(args)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        name = "filter_vmap"
        spec = (self._arg_spec(args), _kwargs_axes(kwargs))
        roots = (args, kwargs)
        flat = _Flat(roots, self._namespace, _is_array)
        axes = _axes_of(
            spec, roots, flat.graphdef, flat.leaves, flat.dynamic, f"{name}: in_axes", _where
        )
        paths = flat.graphdef.paths()
        size = self._axis_size
        sizes: list[tuple[str, int]] = []
        for i, axis in zip(flat.dynamic, axes, strict=True):
            if axis is None:
                continue
            shape = flat.leaves[i].shape
            at = _normalized(axis, len(shape))
            if at is None:
                raise ValueError(
                    f"{name}: in_axes gives axis {axis} for {_where(paths[i])}, an array of "
                    f"shape {tuple(shape)} (rank {len(shape)})"
                )
            sizes.append((_where(paths[i]), shape[at]))
        expected = _agreed_size(
            name,
            sizes,
            size,
            "axis_size",
            "the mapped axes have different sizes",
            "no array is mapped (in_axes maps none of the arguments' array leaves), so the "
            "axis size is unknown; pass axis_size",
        )
        mapped = [i for i, a in zip(flat.dynamic, axes, strict=True) if a is not None]
        mapped_axes = [a for a in axes if a is not None]
        kept = [i for i, a in zip(flat.dynamic, axes, strict=True) if a is None]
        # Where each dynamic leaf sits in (mapped values + kept values).
        at = {i: k for k, i in enumerate(mapped + kept)}
        gather = [at[i] for i in flat.dynamic]
        found: list[_Result] = []

        def traced(mapped_values: list[Any], kept_values: list[Any]) -> Any:
            joined = [*mapped_values, *kept_values]
            values = [joined[k] for k in gather]
            out, new_roots, changes, changed = _run(self._fn, flat, values, self._namespace, name)
            _split_moved(flat, flat.with_values(values), changes, changed)
            result = _Result.of(out, self._out_axes, new_roots, changes, changed, spec, self)
            found[:] = [result]
            return result.mapped, result.kept, _Box(result)

        try:
            out_mapped, out_kept, box = jax.vmap(
                traced,
                in_axes=(mapped_axes, None),
                out_axes=(0, None, None),
                axis_name=self._axis_name,
                axis_size=expected,
            )([flat.leaves[i] for i in mapped], [flat.leaves[i] for i in kept])
        except ValueError as e:
            if "out_axes" in str(e) and found:
                self._explain_unmapped(traced, mapped, kept, flat, mapped_axes, expected, found[0])
            raise
        return box.value.finish(out_mapped, out_kept, flat.leaves, roots)

    def _explain_unmapped(
        self,
        traced: Callable[..., Any],
        mapped: list[int],
        kept: list[int],
        flat: _Flat,
        mapped_axes: list[int],
        size: int,
        result: _Result,
    ) -> None:
        """After JAX refused an output that depends on the mapped axis where the axes say
        None: finds which one (tracing once more per candidate) and names it."""
        for j, label in enumerate(result.kept_labels):

            def one(m: list[Any], k: list[Any], j: int = j) -> Any:
                return traced(m, k)[1][j]

            try:
                jax.eval_shape(
                    jax.vmap(
                        one,
                        in_axes=(mapped_axes, None),
                        out_axes=None,
                        axis_name=self._axis_name,
                        axis_size=size,
                    ),
                    [flat.leaves[i] for i in mapped],
                    [flat.leaves[i] for i in kept],
                )
            except ValueError:
                raise ValueError(
                    f"filter_vmap: {label} is not mapped (its axis is None) but its new value "
                    "differs between the mapped elements; give it an axis (in_axes for an "
                    "argument, out_axes for the output), or keep it the same for every element"
                ) from None


class _Result:
    """What a vmapped call returned and changed, split into what is mapped (returned along
    axis 0, moved to its axis afterwards) and what is not."""

    __slots__ = (
        "changes",
        "kept",
        "kept_labels",
        "mapped",
        "mapped_axes",
        "out",
        "slots",
    )

    @staticmethod
    def of(
        out: Any,
        out_axes: Any,
        roots: tuple[Any, Any],
        changes: _Changes | None,
        changed: list[Any],
        in_spec: Any,
        vmapped: _Vmapped,
    ) -> _Result:
        r = _Result()
        name = "filter_vmap"
        leaves, graphdef = graph_flatten(out, namespace=vmapped._namespace)
        r.out = _Out(leaves, graphdef)
        out_arrays = r.out.arrays_of(leaves)
        array_positions = [i for i, x in enumerate(leaves) if _is_array(x)]
        axes = _axes_of(
            out_axes,
            (out,),
            graphdef,
            leaves,
            array_positions,
            f"{name}: out_axes",
            lambda p: "output" + keystr(p),
        )
        labels = ["output" + keystr(p) for p in graphdef.paths()]
        labels = [labels[i] for i in array_positions]
        values = list(out_arrays)
        r.changes = changes
        if changes is not None:
            # The changed leaves keep the axes their places have in in_axes.
            after, after_gd = graph_flatten(*roots, namespace=vmapped._namespace)
            positions = [i for i, (kind, _) in enumerate(changes.sources) if kind == 1]
            axes += _axes_of(
                in_spec, roots, after_gd, after, positions, f"{name}: in_axes", _where, whole=False
            )
            paths = after_gd.paths()
            labels += [_where(paths[i]) for i in positions]
            values += changed
        # slots[k] = (mapped?, index in its group, axis) for the k-th array.
        r.slots = []
        r.mapped, r.kept, r.kept_labels, r.mapped_axes = [], [], [], []
        for value, axis, label in zip(values, axes, labels, strict=True):
            if axis is None:
                r.slots.append((False, len(r.kept)))
                r.kept.append(value)
                r.kept_labels.append(label)
            else:
                r.slots.append((True, len(r.mapped)))
                r.mapped.append(value)
                r.mapped_axes.append(axis)
        return r

    def finish(
        self, mapped: Sequence[Any], kept: Sequence[Any], leaves: list[Any], roots: Any
    ) -> Any:
        moved = [
            x if axis == 0 else jnp.moveaxis(x, 0, axis)
            for x, axis in zip(mapped, self.mapped_axes, strict=True)
        ]
        arrays = tuple(moved[k] if is_mapped else kept[k] for is_mapped, k in self.slots)
        self.out.changes = self.changes
        return self.out.finish(arrays, leaves, roots)


# ---------------------------------------------------------------------------------------------
# filter_scan
# ---------------------------------------------------------------------------------------------


def _where_in(root: str) -> Callable[[tuple[Any, ...]], str]:
    return lambda path: root + keystr(path)


def filter_scan(
    f: Callable[[Any, Any], tuple[Any, Any]],
    init: Any,
    xs: Any = None,
    length: int | None = None,
    *,
    in_axes: Any = 0,
    out_axes: Any = 0,
    reverse: bool = False,
    unroll: int | bool = 1,
    namespace: str = "",
) -> tuple[Any, Any]:
    """``jax.lax.scan`` over objects: ``f(carry, x) -> (carry, y)`` runs once per slice of
    ``xs``, and the result is ``(final carry, stacked ys)``.

    ``init`` and ``xs`` are flattened as graphs (Modules, shared submodules). Each array leaf
    of ``xs`` is scanned along its leading axis, so a Module whose parameters are stacked
    (one slice per layer, as :func:`filter_vmap` builds them) is seen by ``f`` one layer at a
    time; every other leaf of ``xs`` is the same at every step. The array leaves of the
    carry are carried; its other leaves, and its graph, must be the same in what ``f``
    returns. ``length``, ``reverse`` and ``unroll`` are ``jax.lax.scan``'s.

    ``in_axes`` says how each array leaf of ``xs`` enters ``f``, as ``nnx.scan``'s
    ``in_axes`` does: an int (scanned along that axis; 0 by default), None (broadcast: the
    same whole value at every step), :class:`Carry` (carried: each step sees what the step
    before left there), a :class:`StateAxes` for a Module (``StateAxes({BatchStats: Carry,
    ...: 0})`` scans the stacked parameters and carries the statistics through the layers),
    or a tuple, list or dict of them, a prefix of ``xs``. ``out_axes`` says along which axis
    each array leaf of the ``ys`` is stacked: an int (0 by default, as ``jax.lax.scan``
    stacks them), or a tuple, list or dict of ints (or a :class:`StateAxes` of ints for a
    Module), a prefix of ``y``.

    What ``f`` changes in place in the slices of ``xs`` (a layer's counter, new attributes)
    is written back to the caller's ``xs`` objects, stacked along the axis its place is
    scanned along (a new leaf along the leading axis); a carried leaf ends up holding its last
    value; changing a broadcast leaf is an error. When ``f`` changes its carry in place, the
    caller's ``init`` objects end up holding the final carry, as in a Python loop over one
    object. Nothing is written back when ``f`` or the axes fail.

    >>> import jax, jax.numpy as jnp
    >>> from oxtree import Module
    >>> class Layer(Module):
    ...     def __init__(self, key):
    ...         self.register_parameter('w', jax.random.normal(key, (2, 2)))
    ...     def __call__(self, x):
    ...         return jnp.tanh(x @ self.w)
    >>> layers = filter_vmap(Layer)(jax.random.split(jax.random.key(0), 4))
    >>> x, _ = filter_scan(lambda x, layer: (layer(x), None), jnp.ones(2), layers)
    >>> x.shape, layers.w.shape
    ((2,), (4, 2, 2))
    """
    name = "filter_scan"
    _check_fn(f, name)
    _check_spec(in_axes, f"{name}: in_axes", carry=True)
    _check_spec(out_axes, f"{name}: out_axes")
    carry_flat = _Flat((init,), namespace, _is_array)
    xs_flat = _Flat((xs,), namespace, _is_array)
    both, _ = graph_flatten(init, xs, namespace=namespace)
    if len(both) != len(carry_flat.leaves) + len(xs_flat.leaves):
        raise ValueError(
            f"{name}: init and xs share an object; an object is either carried or scanned, "
            "so pass it in one of them"
        )
    roles = _ScanRoles(xs, xs_flat, in_axes, name)
    n = _scan_length(xs_flat, roles, length, name)
    carry_paths = carry_flat.graphdef.paths()
    found: list[Any] = []

    def body(carry: tuple[list[Any], list[Any]], x: list[Any]) -> Any:
        carry_values, carried_values = carry
        c_before = carry_flat.with_values(carry_values)
        x_before = xs_flat.with_values(roles.values_of(x, carried_values))
        c_obj = graph_unflatten(carry_flat.graphdef, c_before)
        x_obj = graph_unflatten(xs_flat.graphdef, x_before)
        c_objects = _numbered((c_obj,))
        x_objects = _numbered((x_obj,))
        result = f(c_obj, x_obj)
        if not (isinstance(result, tuple | list) and len(result) == 2):
            raise TypeError(
                f"{name} expects f to return a pair (carry, y), got {type(result).__name__}"
            )
        new_carry, y = result
        c_changes, _ = _Changes.of(
            (c_obj,), c_before, carry_flat.graphdef, namespace, name, _where_in("init"), c_objects
        )
        x_changes, x_changed = _Changes.of(
            (x_obj,), x_before, xs_flat.graphdef, namespace, name, _where_in("xs"), x_objects
        )
        _split_moved(xs_flat, x_before, x_changes, x_changed)
        new_carried, stacked = roles.after_step(x_before, x_changes, x_changed, carried_values)
        new_leaves, new_gd = graph_flatten(new_carry, namespace=namespace)
        _check_carry(new_leaves, new_gd, carry_flat, carry_values, carry_paths, name)
        y_leaves, y_gd = graph_flatten(y, namespace=namespace)
        y_out = _Out(y_leaves, y_gd, x_changes)
        y_axes = _stack_axes(out_axes, y, y_leaves, y_gd, name)
        found[:] = [c_changes is not None]
        new_values = [new_leaves[i] for i in carry_flat.dynamic]
        return (new_values, new_carried), (
            [*y_out.arrays_of(y_leaves), *[x_changed[j] for j, _ in stacked]],
            _Box((y_out, stacked, y_axes)),
        )

    (final, final_carried), (ys, box) = jax.lax.scan(
        body,
        (carry_flat.values(), roles.carried_values()),
        roles.scanned_values(),
        length=n,
        reverse=reverse,
        unroll=unroll,
    )
    y_out, stacked, y_axes = box.value
    ys = tuple(ys)
    if y_out.changes is not None:
        cut = len(ys) - len(stacked)
        ys, x_stacked = ys[:cut], ys[cut:]
        changed = list(roles.carried_changes(y_out.changes, final_carried))
        for (j, axis), value in zip(stacked, x_stacked, strict=True):
            changed[j] = value if axis == 0 else jnp.moveaxis(value, 0, axis)
        y_out.changes.write_back((xs,), xs_flat.leaves, changed)
    carry_out = graph_unflatten(carry_flat.graphdef, carry_flat.with_values(final))
    if found and found[0]:
        count = len(walk((init,)))
        transplant((init,), (carry_out,), tuple(range(count)))
        carry_out = graph_unflatten(carry_flat.graphdef, carry_flat.with_values(final))
    if y_axes is not None:
        ys = tuple(y if a == 0 else jnp.moveaxis(y, 0, a) for y, a in zip(ys, y_axes, strict=True))
    return carry_out, y_out.rebuild(ys)


def _stack_axes(
    out_axes: Any, y: Any, leaves: list[Any], graphdef: GraphDef, name: str
) -> list[int] | None:
    """The axis ``out_axes`` (a prefix of ``y``) stacks each array leaf of ``y`` along, or
    None when every one is stacked along axis 0."""
    if type(out_axes) is int and out_axes == 0:
        return None
    positions = [i for i, x in enumerate(leaves) if _is_array(x)]
    where = _where_in("y")
    axes = _axes_of(out_axes, (y,), graphdef, leaves, positions, f"{name}: out_axes", where)
    paths = graphdef.paths()
    for i, axis in zip(positions, axes, strict=True):
        ndim = jnp.ndim(leaves[i]) + 1
        if axis is None:
            raise ValueError(
                f"{name}: out_axes gives None for {where(paths[i])}, but every array leaf of "
                "y is stacked, one slice per step: give it an int axis"
            )
        if _normalized(axis, ndim) is None:
            raise ValueError(
                f"{name}: out_axes gives axis {axis} for {where(paths[i])}, whose stacked "
                f"ys have rank {ndim}"
            )
    return axes


class _ScanRoles:
    """How each array leaf of filter_scan's ``xs`` enters ``f``, as ``in_axes`` says: scanned
    along an axis, carried from step to step, or broadcast (the same at every step)."""

    __slots__ = ("axes", "broadcast", "carried", "flat", "name", "paths", "place", "scanned")

    def __init__(self, xs: Any, flat: _Flat, in_axes: Any, name: str) -> None:
        self.flat = flat
        self.name = name
        self.paths = flat.graphdef.paths()
        if type(in_axes) is int and in_axes == 0:  # the default: every array leaf scanned
            axes: list[Any] = [0] * len(flat.dynamic)
        else:
            axes = _axes_of(
                in_axes,
                (xs,),
                flat.graphdef,
                flat.leaves,
                flat.dynamic,
                f"{name}: in_axes",
                _where_in("xs"),
            )
        self.axes = dict(zip(flat.dynamic, axes, strict=True))
        self.scanned = [i for i, a in self.axes.items() if type(a) is int]
        self.carried = [i for i, a in self.axes.items() if a is Carry]
        self.broadcast = [i for i, a in self.axes.items() if a is None]
        # Where each dynamic leaf's value comes from in a step: (0, k) the k-th scanned
        # slice, (1, k) the k-th carried value, (2, i) the caller's leaf i.
        place = {i: (0, k) for k, i in enumerate(self.scanned)}
        place.update({i: (1, k) for k, i in enumerate(self.carried)})
        place.update({i: (2, i) for i in self.broadcast})
        self.place = [place[i] for i in flat.dynamic]

    def where(self, i: int) -> str:
        return "xs" + keystr(self.paths[i])

    def scanned_values(self) -> list[Any]:
        """The scanned leaves, each with its scanned axis moved to the front."""
        out = []
        for i in self.scanned:
            axis = self.axes[i]
            x = self.flat.leaves[i]
            out.append(x if axis == 0 else jnp.moveaxis(x, axis, 0))
        return out

    def carried_values(self) -> list[Any]:
        return [self.flat.leaves[i] for i in self.carried]

    def values_of(self, x: Sequence[Any], carried: Sequence[Any]) -> list[Any]:
        """One step's values of the dynamic leaves, in their order."""
        groups = (x, carried, self.flat.leaves)
        return [groups[g][k] for g, k in self.place]

    def after_step(
        self,
        before: list[Any],
        changes: _Changes | None,
        changed: list[Any],
        carried: list[Any],
    ) -> tuple[list[Any], list[tuple[int, int]]]:
        """After ``f`` ran one step: the carried leaves' new values, and which changed arrays
        are stacked (``(j, axis)``: the ``j``-th changed array, placed along ``axis``). A
        broadcast leaf that changed, or a carried one that is gone or changed its shape or
        dtype, raises."""
        if changes is None:
            return list(carried), []
        role = {self.paths[i]: i for i in self.flat.dynamic}
        after_paths = changes.graphdef.paths()
        after = {}
        stacked = []
        for (kind, v), path in zip(changes.sources, after_paths, strict=True):
            value = after[path] = before[v] if kind == 0 else (changed[v] if kind == 1 else v)
            i = role.get(path)
            axis = 0 if i is None else self.axes[i]
            if axis is None and value is not before[i]:
                raise self._broadcast_changed(i)
            if kind == 1 and axis is not Carry:
                stacked.append((v, axis))
        gone = [i for i in self.broadcast if self.paths[i] not in after]
        if gone:
            raise self._broadcast_changed(gone[0])
        new = []
        for k, i in enumerate(self.carried):
            where = self.where(i)
            if self.paths[i] not in after:
                raise ValueError(
                    f"{self.name}: f removed {where}, which in_axes carries (Carry); a carried "
                    "leaf stays from step to step"
                )
            value = after[self.paths[i]]
            _check_same_array(
                value,
                carried[k],
                f"{self.name}: f left",
                f"{where} (carried: Carry in in_axes), where xs holds",
                "a carried leaf keeps its shape and dtype",
            )
            new.append(value)
        return new, stacked

    def _broadcast_changed(self, i: int) -> ValueError:
        return ValueError(
            f"{self.name}: f changed {self.where(i)}, which in_axes broadcasts (None): every "
            "step sees the same value, so the change cannot be kept; carry it (Carry) or scan "
            "it (an int axis)"
        )

    def carried_changes(self, changes: _Changes, final: Sequence[Any]) -> list[Any]:
        """The changed arrays to write back, with each carried leaf's final value in its
        place (the stacked ones are filled in by the caller)."""
        out: list[Any] = [None] * changes.count
        at = {self.paths[i]: k for k, i in enumerate(self.carried)}
        for (kind, v), path in zip(changes.sources, changes.graphdef.paths(), strict=True):
            k = at.get(path)
            if kind == 1 and k is not None:
                out[v] = final[k]
        return out


def _scan_length(xs_flat: _Flat, roles: _ScanRoles, length: int | None, name: str) -> int:
    if length is not None and (type(length) is not int or length < 0):
        raise TypeError(f"{name}: length must be an int >= 0, got {length!r}")
    sizes = []
    for i in roles.scanned:
        shape = xs_flat.leaves[i].shape
        axis = roles.axes[i]
        where = roles.where(i)
        if not shape:
            raise ValueError(
                f"{name}: {where} is a scalar array; every array leaf of xs that is scanned "
                "is scanned along an axis (give it None to broadcast it, or Carry to carry it)"
            )
        at = _normalized(axis, len(shape))
        if at is None:
            raise ValueError(
                f"{name}: in_axes gives axis {axis} for {where}, an array of shape "
                f"{tuple(shape)} (rank {len(shape)})"
            )
        sizes.append((where, shape[at]))
    return _agreed_size(
        name,
        sizes,
        length,
        "length",
        "the leading axes of xs have different lengths"
        if all(roles.axes[i] == 0 for i in roles.scanned)
        else "the scanned axes of xs have different lengths",
        "xs holds no array, so pass length"
        if not roles.axes
        else "in_axes scans none of the arrays of xs, so pass length",
    )


def _agreed_size(
    name: str,
    sizes: list[tuple[str, int]],
    given: int | None,
    option: str,
    what: str,
    unknown: str,
) -> int:
    """The one size that the ``(place, size)`` pairs and the size ``given`` (by the option
    named ``option``) agree on; a ValueError listing the places that disagree otherwise."""
    if given is None and not sizes:
        raise ValueError(f"{name}: {unknown}")
    expected = given if given is not None else sizes[0][1]
    wrong = [(w, n) for w, n in sizes if n != expected]
    if wrong:
        source = option if given is not None else sizes[0][0]
        listing = "; ".join(f"{w}: {n}" for w, n in wrong[:8])
        raise ValueError(f"{name}: {what}: {source} has {expected}, but {listing}")
    return expected


def _check_same_array(new: Any, ref: Any, found: str, where: str, rule: str) -> None:
    """Raises a TypeError (``found`` what at ``where`` what) unless ``new``, the value a step
    left in a carried place, is an array of ``ref``'s shape and dtype."""
    if not _is_array(new):
        raise TypeError(f"{found} a {type(new).__name__} at {where} an array")
    if jnp.shape(new) != jnp.shape(ref) or jnp.result_type(new) != jnp.result_type(ref):
        raise TypeError(
            f"{found} {jnp.result_type(new)}{list(jnp.shape(new))} at {where} "
            f"{jnp.result_type(ref)}{list(jnp.shape(ref))}; {rule}"
        )


def _check_carry(
    leaves: list[Any],
    graphdef: GraphDef,
    flat: _Flat,
    carry: list[Any],
    paths: list[tuple[Any, ...]],
    name: str,
) -> None:
    """Raises a TypeError naming where the carry ``f`` returned differs from ``init``."""
    if graphdef != flat.graphdef:
        raise TypeError(
            f"{name}: f must return a carry of init's structure; init is "
            f"{flat.graphdef}, f returned {graphdef}"
        )
    dynamic = dict(zip(flat.dynamic, carry, strict=True))
    for i, (old, new) in enumerate(zip(flat.leaves, leaves, strict=True)):
        where = "init" + keystr(paths[i])
        if i in dynamic:
            _check_same_array(
                new,
                dynamic[i],
                f"{name}: the carry f returned holds",
                f"{where}, where init holds",
                "the carry keeps its shapes and dtypes",
            )
        elif new is not old and not (type(new) is type(old) and new == old):
            raise TypeError(
                f"{name}: the carry f returned holds {new!r} at {where}, where init holds "
                f"{old!r}; only array leaves of the carry may change from step to step (to "
                "carry a number, pass it as an array: jnp.asarray(0))"
            )


# Their public home: reprs, pickles and documentation name them there.
for _public in (Carry, StateAxes, filter_eval_shape, filter_remat, filter_scan, filter_vmap):
    _public.__module__ = "oxtree.jax"
