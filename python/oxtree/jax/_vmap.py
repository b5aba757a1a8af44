"""filter_vmap: ``jax.vmap`` over graphs of Python objects (Modules, shared submodules)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from oxtree._arrays import is_array
from oxtree._core import keystr
from oxtree.graph import _graph_flatten_jax as graph_flatten
from oxtree.jax._axes import _agreed_size, _axes_of, _check_spec, _kwargs_axes, _normalized
from oxtree.jax._machinery import (
    _Box,
    _Changes,
    _check_fn,
    _Flat,
    _Out,
    _run,
    _split_moved,
    _where,
)


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
        flat = _Flat(roots, self._namespace, is_array)
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
        array_positions = [i for i, x in enumerate(leaves) if is_array(x)]
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
