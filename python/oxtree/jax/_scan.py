"""filter_scan: ``jax.lax.scan`` over graphs of Python objects."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from oxtree._arrays import is_array
from oxtree._core import keystr
from oxtree._write_back import transplant, walk
from oxtree.graph import GraphDef, graph_unflatten
from oxtree.graph import _graph_flatten_jax as graph_flatten
from oxtree.jax._axes import Carry, _agreed_size, _axes_of, _check_spec, _normalized
from oxtree.jax._machinery import (
    _Box,
    _Changes,
    _check_fn,
    _Flat,
    _numbered,
    _Out,
    _split_moved,
    _where_in,
)


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
    carry_flat = _Flat((init,), namespace, is_array)
    xs_flat = _Flat((xs,), namespace, is_array)
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
    positions = [i for i, x in enumerate(leaves) if is_array(x)]
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


def _check_same_array(new: Any, ref: Any, found: str, where: str, rule: str) -> None:
    """Raises a TypeError (``found`` what at ``where`` what) unless ``new``, the value a step
    left in a carried place, is an array of ``ref``'s shape and dtype."""
    if not is_array(new):
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
