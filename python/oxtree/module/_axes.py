"""How a Module attribute's arrays are laid out on a device mesh: :class:`Axes`.

The annotation itself, with no JAX in sight: a module's layout (``_layout._Layout``, its aux
data) keeps one per annotated attribute, and :mod:`oxtree.sharding` turns it into
``jax.sharding.PartitionSpec``s and ``NamedSharding``s. Public as ``oxtree.module.Axes`` and
``oxtree.Axes`` (the package sets its ``__module__``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

__all__ = ["Axes"]

# What one dimension may be given: replicated (None), one axis name, or several names (the
# dimension split over several mesh axes, as in ``PartitionSpec(('data', 'model'))``).
AxisEntry = str | tuple[str, ...] | None


def _entry(value: Any, where: str) -> AxisEntry:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, tuple | list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise TypeError(
        f"{where}: each dimension's entry is None (replicated), an axis name (a str) or a "
        f"tuple of axis names, got {type(value).__name__}: {value!r}"
    )


def _is_partition_spec(value: Any) -> bool:
    """Whether ``value`` is a ``jax.sharding.PartitionSpec`` (``jax.P``), without importing
    JAX."""
    cls = type(value)
    return cls.__name__ in ("PartitionSpec", "P") and cls.__module__.partition(".")[0] == "jax"


class Axes:
    """The axis names of an attribute's array dimensions: where each dimension is laid out.

    One entry per dimension: an axis name (a str), a tuple of names (the dimension is split
    over several mesh axes), or None (replicated). Names are *logical* (``"embed"``,
    ``"mlp"``, ``"batch"``): :func:`oxtree.sharding.logical_axis_rules` maps them to mesh
    axes, and a name no rule maps is taken as a mesh axis's own name, as Flax NNX does.

    Give it to an attribute when registering it (``register_parameter('w', value,
    sharding=('embed', 'mlp'))``; a tuple, a ``jax.sharding.PartitionSpec`` or an ``Axes``)
    or in its annotation (``w: Annotated[jax.Array, Kind.PARAMETER, Axes('embed', 'mlp')]``,
    or ``Annotated[Parameter[jax.Array], Axes('embed', 'mlp')]``). It is part of the
    module's treedef: two modules laid out differently have different treedefs.

    >>> Axes('embed', None), Axes('embed', ('data', 'model')).entries
    (Axes('embed', None), ('embed', ('data', 'model')))
    >>> Axes('embed', None) == Axes.of(['embed', None], 'w')
    True
    """

    __slots__ = ("_hash", "entries")

    def __init__(self, *entries: AxisEntry) -> None:
        self.entries: tuple[AxisEntry, ...] = tuple(
            _entry(e, f"Axes(...)[{i}]") for i, e in enumerate(entries)
        )
        self._hash = hash(self.entries)

    @classmethod
    def of(cls, value: Any, where: str) -> Axes:
        """``value`` as an ``Axes``: an ``Axes``, a ``jax.sharding.PartitionSpec``, or a tuple
        or list of entries. ``where`` names the attribute in errors."""
        if isinstance(value, Axes):
            return value
        if isinstance(value, str):
            raise TypeError(
                f"{where}: sharding takes one entry per dimension (a tuple such as "
                f"({value!r},)), got the str {value!r}"
            )
        if _is_partition_spec(value) or isinstance(value, tuple | list):
            return cls(*(_entry(e, f"{where}: sharding[{i}]") for i, e in enumerate(value)))
        raise TypeError(
            f"{where}: sharding is a tuple of axis names (None for a replicated dimension), an "
            f"oxtree.Axes or a jax.sharding.PartitionSpec, got {type(value).__name__}: {value!r}"
        )

    def __len__(self) -> int:
        return len(self.entries)

    def __iter__(self) -> Iterator[AxisEntry]:
        return iter(self.entries)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Axes) and self.entries == other.entries

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple[Any, ...]:
        return (Axes, self.entries)

    def __repr__(self) -> str:
        return f"Axes({', '.join(map(repr, self.entries))})"

    def check_rank(self, ndim: int, where: str) -> None:
        """Raises a ValueError naming ``where`` unless there is one entry per dimension."""
        if ndim != len(self.entries):
            raise ValueError(
                f"{where}: the sharding {self!r} has {len(self.entries)} entries, but the array "
                f"there has {ndim} dimensions; give one entry per dimension (None for a "
                "replicated one)"
            )
