"""How JAX sees a Module: one node whose children are the leaves of its graph, keyed by
:class:`ModulePath`; and which attribute values are pytrees JAX registers and oxtree does not
(they make an attribute a ``PARAMETER`` by itself). Never imports JAX itself."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from oxtree._core import (
    GetAttrKey,
    _jax_only_node,
    _tree_flatten_jax_registry,
    graph_flatten,
    graph_unflatten,
    keystr,
)

TYPE_CHECKING = False
if TYPE_CHECKING:  # the Module's module imports this one; the reverse is for type checkers
    from oxtree.module._module import Module


def _module_path_type() -> type:
    """The class ``ModulePath``, made the first time it is asked for (JAX imported by then):
    it subclasses JAX's ``GetAttrKey``, which this module cannot name before JAX is loaded."""
    cached = globals().get("ModulePath")
    if cached is not None:
        return cached  # type: ignore[no-any-return]
    import jax

    class ModulePath(jax.tree_util.GetAttrKey):  # type: ignore[misc]
        """One key in JAX's view of a Module: the whole key path of a leaf below the module.

        To JAX, a Module is one node whose children are the leaves of its graph
        (:func:`oxtree.graph_flatten`): a submodule reached twice (tied weights) gives its
        leaves once, so ``jax.grad`` sums its gradient and ``jax.tree_util.tree_map`` (optax's
        ``apply_updates``, say) keeps it shared. Each leaf's key is a ``ModulePath``: a JAX
        ``GetAttrKey`` whose name is the path as :meth:`Module.state_dict` names it
        (``layers[0].weight``), so it prints as ``keystr`` prints the path
        (``.layers[0].weight``), and tools that know JAX's key types (orbax, say) take a
        module whole. ``path`` holds the path's entries.

        >>> import jax
        >>> from oxtree import GetAttrKey, SequenceKey
        >>> k = ModulePath((GetAttrKey('layers'), SequenceKey(0), GetAttrKey('weight')))
        >>> k, str(k), k.name, k.path[-1]
        (ModulePath('.layers[0].weight'), '.layers[0].weight', 'layers[0].weight', GetAttrKey(name='weight'))
        >>> isinstance(k, jax.tree_util.GetAttrKey), k == jax.tree_util.GetAttrKey(k.name)
        (True, True)
        """

        __slots__ = ("path",)

        def __init__(self, path: tuple[Any, ...]) -> None:
            path = tuple(path)
            text = keystr(path)
            if not path or type(path[0]) is not GetAttrKey:
                raise ValueError(
                    f"ModulePath: a module's path starts at one of its attributes (a "
                    f"GetAttrKey), got {text or '()'}"
                )
            super().__init__(text[1:])
            self.path = path

        def __repr__(self) -> str:
            return f"ModulePath({str(self)!r})"

        # Equality and hashing are GetAttrKey's (by name): a ModulePath equals the
        # GetAttrKey that a tool rebuilds from its name.

    ModulePath.__module__ = "oxtree.module"  # its public home (`oxtree.module.ModulePath`)
    ModulePath.__qualname__ = "ModulePath"
    globals()["ModulePath"] = ModulePath
    return ModulePath


# What JAX calls to flatten a module: its graph, with None as a leaf so that a module and its
# gradient (None where nothing is differentiated) have equal aux data; JAX then sees each None
# child as its own None. The graph reads JAX's registry, so the arrays of an equinox module or
# a flax struct held by the module are its children and a tie inside one is kept. A partial of
# the core function: no Python frame per call.
_graph_children: Callable[[Module], tuple[list[Any], Any]] = functools.partial(
    graph_flatten, none_is_leaf=True, jax_registry=True
)

# How a module's own methods (update, select, state_dict, load_state_dict) see its graph: as
# JAX sees it, so their leaves and key paths are those of JAX's transforms and of orbax.
_module_graph: Callable[[Any], tuple[list[Any], Any]] = _graph_children

# The same graph with each registered node asked for its keys (an equinox module's
# flatten_with_keys): its `paths()` name every leaf as JAX's key paths do (`.lin.weight`).
_keyed_graph: Callable[[Any], tuple[list[Any], Any]] = functools.partial(
    graph_flatten, none_is_leaf=True, jax_registry=True, with_keys=True
)


def _graph_children_with_keys(m: Module) -> tuple[list[tuple[Any, Any]], Any]:
    leaves, gd = _keyed_graph(m)
    # Every key is a ModulePath, a one-step path too: tools that rebuild a tree from its key
    # paths (orbax) expect the children of one node to have keys of one type.
    module_path = _module_path_type()
    return [(module_path(p), leaf) for p, leaf in zip(gd.paths(), leaves, strict=True)], gd


# What JAX calls to rebuild one: the core's graph_unflatten(graphdef, children) as it is.
_graph_rebuild: Callable[[Any, Any], Any] = graph_unflatten


def _holds_jax_nodes(value: Any) -> bool:
    """A node that JAX registers and oxtree does not (an equinox module, a flax.struct
    dataclass, an NNX State, a ``jax.tree_util.Partial``: the core's ``_jax_only_node``), or
    a non-empty list, tuple or dict of them: what an attribute holds that becomes a
    ``PARAMETER`` by itself."""
    if isinstance(value, list | tuple):
        items: Any = value
    elif isinstance(value, dict):
        items = value.values()
    else:
        return _jax_only_node(value)
    # A container of plain values (sizes, names) is answered by its first item.
    return bool(items) and all(map(_jax_only_node, items))


def _nones(value: Any) -> Any:
    """``value`` with every leaf None, its structure kept: JAX's registered nodes (an equinox
    module, a flax struct) included, as the module's graph sees them."""
    leaves, spec = _tree_flatten_jax_registry(value)
    return spec.unflatten([None] * len(leaves))
