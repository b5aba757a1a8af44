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
of the first argument (or those ``argnums`` picks, as in ``jax.grad``). :func:`partition` and :func:`combine` split a tree by a filter such as
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

from oxtree import _jax_hook

# graph_flatten, graph_unflatten and GraphDef: what the transforms flatten with (the graph
# walk that reads JAX's registry), available here as they always were.
from oxtree.graph import GraphDef as GraphDef
from oxtree.graph import _graph_flatten_jax as graph_flatten  # noqa: F401
from oxtree.graph import graph_unflatten as graph_unflatten
from oxtree.jax._arrays import is_array, is_inexact_array
from oxtree.jax._axes import Carry, StateAxes
from oxtree.jax._grad import filter_grad, filter_value_and_grad
from oxtree.jax._jit import _FilterJit as _FilterJit
from oxtree.jax._jit import _rebuilt as _rebuilt  # what a pickled filter_jit names
from oxtree.jax._jit import _WithStatics as _WithStatics
from oxtree.jax._jit import filter_jit
from oxtree.jax._mirror import mirrored_types, register, register_namespace
from oxtree.jax._partition import combine, partition
from oxtree.jax._scan import filter_scan
from oxtree.jax._shape import filter_eval_shape, filter_remat
from oxtree.jax._vmap import filter_vmap

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

# Their public home: reprs, pickles and documentation name them here. `_FilterJit` and
# `_WithStatics` too, the classes of what filter_jit returns, and `_rebuilt`, which a pickled
# one names (`oxtree.jax._rebuilt`: it is made anew from the function and the options).
for _name in (*__all__, "_FilterJit", "_WithStatics", "_rebuilt"):
    globals()[_name].__module__ = __name__
del _name

# Registrations waiting for JAX are made once `import jax` finishes (oxtree._jax_hook); this
# catches those made while jax was half imported.
_jax_hook.flush()
