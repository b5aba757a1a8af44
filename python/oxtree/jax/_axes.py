"""Axes: which leaves a lifted transform maps over or carries, and along which axis
(:class:`StateAxes`, :class:`Carry`, and the prefix specifications of ``in_axes`` and
``out_axes``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from oxtree._core import DictKey, SequenceKey
from oxtree.graph import GraphDef
from oxtree.module._filters import _as_filter
from oxtree.module._module import Module, _kind_at


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
            (lambda path, kind, leaf: True) if k is ... else _as_filter(k) for k in axes
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
            if not isinstance(node, Module):
                raise ValueError(
                    f"{what}: a StateAxes applies to a Module, but it is given for a "
                    f"{type(node).__name__} (at {where})"
                )
            rest = path[depth:]
            axis = spec.axis_for(rest, _kind_at(node, rest), leaf)
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


def _normalized(axis: int, ndim: int) -> int | None:
    return axis + ndim if -ndim <= axis < 0 else (axis if 0 <= axis < ndim else None)


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
