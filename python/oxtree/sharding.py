"""Modules on many devices: from a model's layout annotations to JAX shardings.

A Module attribute may say how its arrays are laid out on a device mesh, one entry per
dimension (an :class:`~oxtree.Axes`: ``register_parameter('w', value, sharding=('embed',
'mlp'))``, or ``Axes('embed', 'mlp')`` in its annotation). This module turns those
annotations into JAX's shardings for a whole graph of modules and containers:

- :func:`partition_specs` gives the tree of ``jax.sharding.PartitionSpec`` (an array with no
  annotation is replicated, ``PartitionSpec()``; a leaf that is no array gets None), and
  :func:`named_shardings` the tree of ``NamedSharding`` on a mesh: either tree is a valid
  ``in_shardings`` / ``out_shardings`` prefix for :func:`oxtree.jax.filter_jit`.
- :func:`logical_axis_rules` maps logical axis names to mesh axes, as a context manager
  (or pass ``rules=``), as Flax does.
- :func:`filter_shard` lays the array leaves of a tree out by shardings (or by the tree's
  own annotations on a mesh): ``jax.lax.with_sharding_constraint`` inside a trace,
  ``jax.device_put`` outside it.
- :func:`abstract_sharded` gives the model's shapes with their shardings (an orbax restore
  target on a mesh) and :func:`init_sharded` builds a model directly sharded.

>>> import jax, numpy as np
>>> from oxtree import Module
>>> class Dense(Module):
...     def __init__(self):
...         self.register_parameter('w', np.ones((4, 8), np.float32), sharding=('embed', 'mlp'))
...         self.register_parameter('b', np.zeros(8, np.float32))
>>> specs = partition_specs(Dense())
>>> specs.w, specs.b
(P('embed', 'mlp'), P())
>>> with logical_axis_rules([('embed', None), ('mlp', 'model')]):
...     partition_specs(Dense()).w
P(None, 'model')
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from oxtree._arrays import is_shaped
from oxtree._core import GetAttrKey, keystr
from oxtree.graph import _graph_flatten_jax as graph_flatten
from oxtree.graph import graph_unflatten
from oxtree.jax._jit import filter_jit
from oxtree.jax._jit_options import PrefixShardings
from oxtree.jax._shape import filter_eval_shape
from oxtree.module._axes import Axes, AxisEntry
from oxtree.module._module import Module, _child_at

__all__ = [
    "Axes",
    "logical_axis_rules",
    "current_axis_rules",
    "partition_specs",
    "named_shardings",
    "filter_shard",
    "abstract_sharded",
    "init_sharded",
]

Rules = Sequence[tuple[str, "str | tuple[str, ...] | None"]]

_RULES: contextvars.ContextVar[tuple[tuple[str, Any], ...]] = contextvars.ContextVar(
    "oxtree_logical_axis_rules", default=()
)


def _checked_rules(rules: Any) -> tuple[tuple[str, Any], ...]:
    try:
        pairs = tuple((name, axes) for name, axes in rules)
    except (TypeError, ValueError):
        raise TypeError(
            "logical axis rules are a sequence of (logical name, mesh axis or None) pairs, "
            f"got {rules!r}"
        ) from None
    for name, axes in pairs:
        ok = axes is None or isinstance(axes, str)
        ok = ok or (isinstance(axes, tuple) and all(isinstance(a, str) for a in axes))
        if not isinstance(name, str) or not ok:
            raise TypeError(
                "a logical axis rule is a pair (logical name: str, mesh axis: a str, a tuple "
                f"of str or None), got {(name, axes)!r}"
            )
    return pairs


@contextlib.contextmanager
def logical_axis_rules(rules: Rules) -> Iterator[None]:
    """Within the ``with`` block, logical axis names map to mesh axes by ``rules``: a
    sequence of ``(logical name, mesh axis)`` pairs, the mesh axis a name, a tuple of names
    or None (replicated). Nested blocks replace the outer rules; the functions of this module
    that take ``rules=`` use these when given none.

    A dimension takes the first rule for its name whose mesh axes no earlier dimension of the
    same array uses (so ``[('embed', 'model'), ('embed', None)]`` falls back to replicated);
    a name no rule mentions is a mesh axis's own name, as in Flax NNX.

    >>> with logical_axis_rules([('batch', 'data')]):
    ...     current_axis_rules()
    (('batch', 'data'),)
    >>> current_axis_rules()
    ()
    """
    token = _RULES.set(_checked_rules(rules))
    try:
        yield
    finally:
        _RULES.reset(token)


def current_axis_rules() -> tuple[tuple[str, Any], ...]:
    """The rules of the innermost :func:`logical_axis_rules` block (``()`` outside any)."""
    return _RULES.get()


def _mesh_axes(axes: Axes, rules: tuple[tuple[str, Any], ...]) -> PartitionSpec:
    """``axes`` (logical names) as a PartitionSpec of mesh axes, by ``rules``."""
    if not rules:
        return PartitionSpec(*axes.entries)
    used: set[str] = set()
    out: list[AxisEntry] = []
    for entry in axes.entries:
        names = (entry,) if isinstance(entry, str) else (entry or ())
        mapped: list[str] = []
        for name in names:
            candidates = [m for n, m in rules if n == name]
            if not candidates:
                candidates = [name]
            for mesh in candidates:
                parts = (mesh,) if isinstance(mesh, str) else (mesh or ())
                if not used.intersection(parts):
                    mapped.extend(parts)
                    used.update(parts)
                    break
        out.append(None if not mapped else mapped[0] if len(mapped) == 1 else tuple(mapped))
    return PartitionSpec(*out)


def _axes_at(root: Any, path: tuple[Any, ...]) -> tuple[Axes | None, str]:
    """The annotation that applies to the leaf at ``path`` below ``root`` (that of the
    innermost Module attribute above it carrying one) and the attribute's name, for errors."""
    node, found, where = root, None, ""
    for depth, entry in enumerate(path):
        if isinstance(node, Module) and type(entry) is GetAttrKey:
            axes = node.name_to_axes.get(entry.name)
            if axes is not None:
                found, where = axes, f"{type(node).__qualname__}.{entry.name}"
        if depth < len(path) - 1:
            try:
                node = _child_at(node, entry)
            except Exception:  # inside a node JAX flattens (an equinox module): no Module below
                break
    return found, where


def _specs(tree: Any, rules: Any, what: str) -> tuple[list[Any], list[Any], Any]:
    """The leaves of ``tree``'s graph, the PartitionSpec of each (None for leaves that are no
    arrays) and the graphdef."""
    rules = _RULES.get() if rules is None else _checked_rules(rules)
    leaves, graphdef = graph_flatten(tree)
    specs: list[Any] = []
    for path, leaf in zip(graphdef.paths(), leaves, strict=True):
        if not is_shaped(leaf):
            specs.append(None)
            continue
        axes, attr = _axes_at(tree, path)
        if axes is None:
            specs.append(PartitionSpec())
            continue
        axes.check_rank(len(leaf.shape), f"{what}: {attr} (at tree{keystr(path)})")
        specs.append(_mesh_axes(axes, rules))
    return leaves, specs, graphdef


def partition_specs(tree: Any, /, *, rules: Rules | None = None) -> Any:
    """The tree of ``jax.sharding.PartitionSpec`` of ``tree``'s array leaves, by their
    Modules' sharding annotations mapped through ``rules`` (the current
    :func:`logical_axis_rules` when None): ``tree``'s structure (its classes, sharing and
    cycles kept), a ``PartitionSpec`` at each array leaf (``PartitionSpec()``, replicated,
    where no annotation applies) and None at every other leaf.

    ``tree`` is any graph of Modules and containers; abstract leaves
    (``jax.ShapeDtypeStruct``, as :func:`oxtree.jax.filter_eval_shape` gives) count as
    arrays. An annotation whose length differs from its array's rank raises a ValueError
    naming the attribute and the path.

    >>> import numpy as np
    >>> from oxtree import Module
    >>> class Proj(Module):
    ...     def __init__(self):
    ...         self.register_parameter('w', np.ones((2, 3)), sharding=(None, 'mlp'))
    ...         self.n = 3
    >>> partition_specs({'proj': Proj(), 'step': 0})
    {'proj': Proj(w=P(None, 'mlp')), 'step': None}
    """
    _, specs, graphdef = _specs(tree, rules, "partition_specs")
    return graph_unflatten(graphdef, specs)


def _check_on_mesh(spec: PartitionSpec, leaf: Any, mesh: Any, where: str) -> None:
    sizes = dict(zip(mesh.axis_names, mesh.axis_sizes, strict=True))
    for dim, entry in enumerate(spec):
        names = (entry,) if isinstance(entry, str) else (entry or ())
        for name in names:
            if name not in sizes:
                raise ValueError(
                    f"{where}: the mesh has no axis {name!r} (its axes: {tuple(sizes)}); map "
                    "the logical name to a mesh axis with logical_axis_rules"
                )
        count = math.prod(sizes[n] for n in names)
        if leaf.shape[dim] % count:
            raise ValueError(
                f"{where}: dimension {dim} (size {leaf.shape[dim]}) of "
                f"{leaf.dtype}{list(leaf.shape)} is not divisible by the {count} devices of "
                f"mesh axes {names} that {spec} lays it out on"
            )


def _named(tree: Any, mesh: Any, rules: Any, what: str) -> tuple[list[Any], list[Any], Any]:
    if not isinstance(mesh, Mesh | jax.sharding.AbstractMesh):
        raise TypeError(f"{what}: mesh must be a jax.sharding.Mesh, got {type(mesh).__name__}")
    leaves, specs, graphdef = _specs(tree, rules, what)
    paths = graphdef.paths()
    out: list[Any] = []
    for path, leaf, spec in zip(paths, leaves, specs, strict=True):
        if spec is not None:
            _check_on_mesh(spec, leaf, mesh, f"{what}: tree{keystr(path)}")
            spec = NamedSharding(mesh, spec)
        out.append(spec)
    return leaves, out, graphdef


def named_shardings(tree: Any, mesh: Mesh, /, *, rules: Rules | None = None) -> Any:
    """The tree of ``jax.sharding.NamedSharding`` on ``mesh`` of ``tree``'s array leaves (see
    :func:`partition_specs`; None at leaves that are no arrays). A mesh axis the mesh lacks,
    or a dimension its mesh axes do not divide, raises a ValueError naming the path.

    The result is a valid ``in_shardings`` / ``out_shardings`` prefix for
    :func:`oxtree.jax.filter_jit` and ``shardings`` for :func:`filter_shard`.

    >>> import jax, numpy as np
    >>> from oxtree import Module
    >>> class Proj(Module):
    ...     def __init__(self):
    ...         self.register_parameter('w', np.ones((2, 8)), sharding=(None, 'model'))
    >>> mesh = jax.make_mesh((1,), ('model',), devices=jax.devices()[:1])
    >>> named_shardings(Proj(), mesh).w.spec
    P(None, 'model')
    """
    _, out, graphdef = _named(tree, mesh, rules, "named_shardings")
    return graph_unflatten(graphdef, out)


def abstract_sharded(tree: Any, mesh: Mesh, /, *, rules: Rules | None = None) -> Any:
    """``tree`` with each array leaf (or ``ShapeDtypeStruct``) replaced by a
    ``jax.ShapeDtypeStruct`` carrying its ``NamedSharding`` on ``mesh`` (see
    :func:`named_shardings`): the model's shapes laid out on the mesh, which orbax restores
    onto (``checkpointer.restore(path, abstract_sharded(abstract_model, mesh))``), on a mesh
    of any shape.

    >>> import jax, numpy as np
    >>> from oxtree import Module
    >>> class Proj(Module):
    ...     def __init__(self):
    ...         self.register_parameter('w', np.ones((2, 8), np.float32), sharding=(None, 'm'))
    >>> mesh = jax.make_mesh((1,), ('m',), devices=jax.devices()[:1])
    >>> abstract_sharded(Proj(), mesh).w.sharding.spec
    P(None, 'm')
    """
    leaves, shardings, graphdef = _named(tree, mesh, rules, "abstract_sharded")
    return graph_unflatten(
        graphdef,
        [
            leaf if s is None else jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=s)
            for leaf, s in zip(leaves, shardings, strict=True)
        ],
    )


def _in_trace(x: Any) -> bool:
    return isinstance(x, jax.core.Tracer)


def filter_shard(tree: Any, shardings: Any, /, *, rules: Rules | None = None) -> Any:
    """``tree`` with its array leaves laid out by ``shardings``: inside a trace (``jax.jit``,
    :func:`oxtree.jax.filter_jit`) each gets ``jax.lax.with_sharding_constraint``, outside one
    ``jax.device_put``. Other leaves are left as they are, as ``equinox.filter_shard`` does.

    ``shardings`` is a ``jax.sharding.Sharding`` (or ``PartitionSpec``, under
    ``jax.set_mesh``) for every array, a prefix tree of them (None: leave that part as it
    is), such as :func:`named_shardings` gives, or a ``jax.sharding.Mesh``: the tree's own
    annotations on that mesh (``rules`` as :func:`partition_specs` takes them).

    ``tree`` is flattened as a graph: a shared submodule is laid out once and stays shared,
    and an array reached through several leaves is placed once.

    >>> import jax, numpy as np
    >>> from oxtree import Module
    >>> class Proj(Module):
    ...     def __init__(self):
    ...         self.register_parameter('w', np.ones((2, 8), np.float32), sharding=(None, 'm'))
    >>> mesh = jax.make_mesh((1,), ('m',), devices=jax.devices()[:1])
    >>> filter_shard(Proj(), mesh).w.sharding.spec
    P(None, 'm')
    """
    if isinstance(shardings, Mesh):
        leaves, per_leaf, graphdef = _named(tree, shardings, rules, "filter_shard")
    else:
        leaves, graphdef = graph_flatten(tree)
        prefix = PrefixShardings(shardings, "shardings")
        paths = graphdef.paths()
        per_leaf = [
            prefix.at(path, lambda path=path: f"tree{keystr(path)}")  # type: ignore[misc]
            for path in paths
        ]
        prefix.check_all_used("the tree")
    placed: dict[int, Any] = {}
    out = []
    for leaf, sharding in zip(leaves, per_leaf, strict=True):
        if sharding is None or not is_shaped(leaf) or isinstance(leaf, jax.ShapeDtypeStruct):
            out.append(leaf)
            continue
        new = placed.get(id(leaf))
        if new is None:
            if _in_trace(leaf):
                new = jax.lax.with_sharding_constraint(leaf, sharding)
            else:
                new = jax.device_put(leaf, sharding)
            placed[id(leaf)] = new
        out.append(new)
    return graph_unflatten(graphdef, out)


def init_sharded(
    fn: Callable[..., Any], mesh: Mesh, /, *args: Any, rules: Rules | None = None, **kwargs: Any
) -> Any:
    """``fn(*args, **kwargs)`` (a model's constructor) computed directly sharded on ``mesh``:
    its shapes are found without computing (:func:`oxtree.jax.filter_eval_shape`), their
    shardings from the model's own annotations (:func:`named_shardings`), and ``fn`` is
    compiled with those as ``out_shardings``, so each device computes only its own part of
    every parameter and no full copy is ever made. What ``fn`` changes in its arguments (an
    ``Rngs``' counters) is written back, as :func:`oxtree.jax.filter_jit` does. It reads as

        abstract = filter_eval_shape(fn, *args, **kwargs)
        filter_jit(fn, out_shardings=named_shardings(abstract, mesh))(*args, **kwargs)

    >>> import jax, jax.numpy as jnp
    >>> from oxtree import Module, Rngs
    >>> class Proj(Module):
    ...     def __init__(self, rngs):
    ...         w = jax.random.normal(rngs.params(), (2, 8))
    ...         self.register_parameter('w', w, sharding=(None, 'm'))
    >>> mesh = jax.make_mesh((1,), ('m',), devices=jax.devices()[:1])
    >>> init_sharded(Proj, mesh, Rngs(0)).w.sharding.spec
    P(None, 'm')
    """
    abstract = filter_eval_shape(fn, *args, **kwargs)
    out_shardings = named_shardings(abstract, mesh, rules=rules)
    return filter_jit(fn, out_shardings=out_shardings)(*args, **kwargs)
