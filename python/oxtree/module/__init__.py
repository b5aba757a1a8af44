"""Modules: classes whose instances are pytrees, with no registration call.

A :class:`Module` subclass is registered as a pytree node when it is defined. Each attribute
has a :class:`Kind`: ``PARAMETER`` and ``STATE`` attributes hold the leaves, ``MODULE``
attributes hold submodules (flattened in turn), and every other attribute (``OTHERS``) is
configuration kept in the treedef. Kinds come from ``register_parameter`` /
``register_state`` / ``register_module``, from annotations (``weight: Parameter``), or, for a
Module (or a list, tuple or dict of Modules) assigned to an attribute, by themselves; a pytree
that JAX registers and oxtree does not (an equinox module, a flax struct, an NNX State)
assigned to an attribute is a ``PARAMETER`` by itself, its arrays the module's leaves to JAX,
to ``oxtree.jax`` and to the module's methods.

>>> import oxtree
>>> class Counter(Module):
...     def __init__(self, step):
...         self.step = step                      # OTHERS: configuration
...         self.register_state('count', 0)
...         self.register_parameter('bias', 0.5)
>>> c = Counter(step=2)
>>> oxtree.tree_leaves(c)
[0, 0.5]
>>> dict(c.name_to_kind)
{'count': <Kind.STATE: 'state'>, 'bias': <Kind.PARAMETER: 'parameter'>}
>>> d = oxtree.tree_map(lambda x: x + 1, c)      # same class and config, no __init__ call
>>> type(d).__name__, d.count, d.bias, d.step
('Counter', 1, 1.5, 2)
>>> oxtree.tree_structure(Counter(2)) == oxtree.tree_structure(Counter(3))
False
"""

from __future__ import annotations

from typing import Any

from oxtree.module._axes import Axes
from oxtree.module._filters import All, AnyOf, Not, OfKind, OfType, PathContains
from oxtree.module._jax_view import _module_path_type
from oxtree.module._layout import Kind, Parameter, State, _Identity, _Layout, _ModuleDef
from oxtree.module._module import Module

# The names `oxtree` itself re-exports. ModulePath and the filters (OfKind, OfType,
# PathContains, All, AnyOf, Not) are public here, in `oxtree.module`, only. _Layout,
# _ModuleDef and _Identity are a module's aux data: pickles of treespecs name them here.
__all__ = ["Axes", "Kind", "Module", "Parameter", "State"]

# Their public home: reprs, pickles and documentation name them here.
for _cls in (Axes, Kind, Module, All, AnyOf, Not, OfKind, OfType, PathContains, _Identity, _Layout):
    _cls.__module__ = __name__
_ModuleDef.__module__ = __name__
del _cls


def __getattr__(name: str) -> Any:
    if name == "ModulePath":  # made on first use: it subclasses JAX's GetAttrKey
        return _module_path_type()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
