"""A drop-in for ``jax.tree_util``: JAX's names, signatures and semantics on oxtree's engine.

Where optree and JAX differ this module does as JAX does: treedefs print in JAX's grammar
(``PyTreeDef([*, (*, *)])``), dicts are rebuilt in sorted key order, deques and struct
sequences are leaves, None is always a node without children. Registrations are shared with
the main ``oxtree`` package: a type registered through either is a node in both. A type
registered here is registered with JAX too, by JAX's function of the same name with the
user's own functions (a dataclass with its data and meta fields), so it is a pytree to
``jax.jit``, ``jax.vmap``, ``jax.grad`` and ``jax.tree_util`` as it would be had it been
registered with JAX directly: at once when JAX is loaded, else once ``jax`` is imported (this
module never imports it). A type JAX already has from other code keeps JAX's rule in JAX; a
registration JAX refuses raises and is not made in oxtree either.

>>> from oxtree import tree_util as jtu
>>> leaves, treedef = jtu.tree_flatten({'b': 1, 'a': (2, None)})
>>> leaves, treedef
([2, 1], PyTreeDef({'a': (*, None), 'b': *}))
>>> jtu.tree_unflatten(treedef, [20, 10])
{'a': (20, None), 'b': 10}
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any, TypeVar

from oxtree import _core, _jax_hook
from oxtree._core import (
    DictKey,
    FlattenedIndexKey,
    GetAttrKey,
    PathPattern,
    PyTreeKind,
    PyTreeSpec,
    SequenceKey,
    _register_dataclass_fields,
    keystr,
)
from oxtree._core import register_pytree_node as _register_node
from oxtree._core import register_static as _register_static
from oxtree.functools import Partial
from oxtree.registry import _dataclass_fields, _jax_functions, _register_object
from oxtree.types import is_namedtuple_class

_jax = _core.jax_face
broadcast_flattened_prefix_with_treedef = _jax.broadcast_flattened_prefix_with_treedef
tree_flatten = _jax.tree_flatten
tree_leaves = _jax.tree_leaves
tree_structure = _jax.tree_structure
tree_unflatten = _jax.tree_unflatten
tree_map = _jax.tree_map
all_leaves = _jax.all_leaves
tree_flatten_with_path = _jax.tree_flatten_with_path
tree_leaves_with_path = _jax.tree_leaves_with_path
tree_map_with_path = _jax.tree_map_with_path
tree_mask = _jax.tree_mask
tree_labels = _jax.tree_labels
tree_set_matching = _jax.tree_set_matching

#: JAX's treedef class (one class serves both faces; a treedef knows which it is).
PyTreeDef = PyTreeSpec

KeyEntry = TypeVar("KeyEntry", bound=Any)
KeyLeafPair = tuple[KeyEntry, Any]
KeyLeafPairs = Iterable[KeyLeafPair]
KeyPath = tuple[KeyEntry, ...]

_T = TypeVar("_T")
_C = TypeVar("_C", bound=type)


class Unspecified:
    """The default of arguments that may be given as None."""

    def __repr__(self) -> str:
        return "<unspecified>"


_UNSPECIFIED = Unspecified()


def _speak_loaded_jax(jtu: Any) -> None:
    """Tells the core the loaded JAX's version, whose words this face's prefix errors follow
    where JAX's releases differ (read once, when JAX is loaded; never imports it)."""
    import sys

    _core.jax_face._set_jax_version(getattr(sys.modules.get("jax"), "__version__", ""))


_jax_hook.when_jax_loaded(_speak_loaded_jax)


def _with_jax(nodetype: type, name: str, *args: Any) -> None:
    """Registers ``nodetype``, just registered with oxtree, with JAX too, by JAX's function
    ``name`` called with ``args``; if JAX refuses, oxtree's registration is undone and the
    error raised (see oxtree._jax_hook)."""
    _jax_hook.register_with_jax(
        nodetype, name, args, undo=lambda: _core.unregister_pytree_node(nodetype)
    )


def register_pytree_node(
    nodetype: type[_T],
    flatten_func: Callable[[_T], tuple[Iterable[Any], Hashable]],
    unflatten_func: Callable[[Hashable, Iterable[Any]], _T],
    flatten_with_keys_func: Callable[[_T], tuple[KeyLeafPairs, Hashable]] | None = None,
) -> None:
    """Registers ``nodetype`` as a pytree node, in the global namespace (JAX's signature).

    >>> class Pair:
    ...     def __init__(self, a, b): self.a, self.b = a, b
    >>> register_pytree_node(Pair, lambda p: ((p.a, p.b), None), lambda _, c: Pair(*c))
    >>> tree_structure(Pair(1, 2))
    PyTreeDef(CustomNode(Pair[None], [*, *]))
    """
    _register_node(
        nodetype, flatten_func, unflatten_func, flatten_with_keys_func=flatten_with_keys_func
    )
    _with_jax(
        nodetype,
        "register_pytree_node",
        nodetype,
        flatten_func,
        unflatten_func,
        flatten_with_keys_func,
    )


def register_pytree_node_class(cls: _C) -> _C:
    """Registers a class with ``tree_flatten`` and classmethod ``tree_unflatten``; returns it.

    >>> @register_pytree_node_class
    ... class Tagged:
    ...     def __init__(self, value, tag): self.value, self.tag = value, tag
    ...     def tree_flatten(self): return (self.value,), self.tag
    ...     @classmethod
    ...     def tree_unflatten(cls, tag, children): return cls(children[0], tag)
    >>> tree_structure(Tagged(1.5, 'm'))
    PyTreeDef(CustomNode(Tagged[m], [*]))
    >>> t = tree_map(lambda x: x * 2, Tagged(1.5, 'm'))
    >>> t.value, t.tag
    (3.0, 'm')
    """
    _register_node(cls, cls.tree_flatten, cls.tree_unflatten)  # type: ignore[attr-defined]
    _with_jax(cls, "register_pytree_node_class", cls)
    return cls


def register_pytree_with_keys(
    nodetype: type[_T],
    flatten_with_keys: Callable[[_T], tuple[KeyLeafPairs, Hashable]],
    unflatten_func: Callable[[Hashable, Iterable[Any]], _T],
    flatten_func: Callable[[_T], tuple[Iterable[Any], Hashable]] | None = None,
) -> None:
    """Registers ``nodetype`` with a flatten function that names each child's key.

    >>> class Box:
    ...     def __init__(self, v): self.v = v
    >>> register_pytree_with_keys(
    ...     Box, lambda b: (((GetAttrKey('v'), b.v),), None), lambda _, c: Box(*c))
    >>> keystr(tree_leaves_with_path(Box(1))[0][0])
    '.v'
    """
    _register_keyed(nodetype, flatten_with_keys, unflatten_func, flatten_func)
    _with_jax(
        nodetype,
        "register_pytree_with_keys",
        nodetype,
        flatten_with_keys,
        unflatten_func,
        flatten_func,
    )


def _register_keyed(
    nodetype: type,
    flatten_with_keys: Callable[[Any], tuple[KeyLeafPairs, Hashable]],
    unflatten_func: Callable[[Hashable, Iterable[Any]], Any],
    flatten_func: Callable[[Any], tuple[Iterable[Any], Hashable]] | None,
) -> None:
    """Registers with oxtree only; without ``flatten_func``, flattening drops the keys of
    ``flatten_with_keys``'s pairs, as JAX does."""
    if flatten_func is None:

        def flatten_func(obj: Any) -> tuple[list[Any], Hashable]:
            pairs, aux = flatten_with_keys(obj)
            return [child for _, child in pairs], aux

    _register_node(nodetype, flatten_func, unflatten_func, flatten_with_keys_func=flatten_with_keys)


def register_pytree_with_keys_class(cls: _C) -> _C:
    """Registers a class with ``tree_flatten_with_keys`` and ``tree_unflatten``; returns it.

    ``obj.tree_flatten_with_keys()`` returns ``(((key, child), ...), aux_data)``; a
    ``tree_flatten`` method, if the class has one, is used where keys are not needed.

    >>> @register_pytree_with_keys_class
    ... class Box:
    ...     def __init__(self, v, w): self.v, self.w = v, w
    ...     def tree_flatten_with_keys(self):
    ...         return ((GetAttrKey('v'), self.v), (GetAttrKey('w'), self.w)), None
    ...     @classmethod
    ...     def tree_unflatten(cls, aux, children): return cls(*children)
    >>> [keystr(path) for path, _ in tree_leaves_with_path(Box(1, [2]))]
    ['.v', '.w[0]']
    """
    _register_keyed(
        cls,
        cls.tree_flatten_with_keys,  # type: ignore[attr-defined]
        cls.tree_unflatten,  # type: ignore[attr-defined]
        getattr(cls, "tree_flatten", None),
    )
    _with_jax(cls, "register_pytree_with_keys_class", cls)
    return cls


def register_dataclass(
    nodetype: _C,
    data_fields: Sequence[str] | None = None,
    meta_fields: Sequence[str] | None = None,
    drop_fields: Sequence[str] = (),
) -> _C:
    """Registers a dataclass: data fields are children, meta fields static (JAX's rules).

    Without ``data_fields`` and ``meta_fields`` they are read off a dataclass's fields (those
    with ``metadata={'static': True}`` are meta). For a dataclass the two lists must name
    every ``__init__`` field (less ``drop_fields``) and nothing else; a plain class is taken
    at its word. Instances are rebuilt by ``nodetype(**fields)``.

    >>> import dataclasses
    >>> @dataclasses.dataclass
    ... class Point:
    ...     x: float
    ...     y: float
    ...     label: str
    >>> _ = register_dataclass(Point, data_fields=['x', 'y'], meta_fields=['label'])
    >>> tree_leaves(Point(1.0, 2.0, 'p'))
    [1.0, 2.0]
    >>> tree_map(lambda v: v * 10, Point(1.0, 2.0, 'p'))
    Point(x=10.0, y=20.0, label='p')
    """
    data, meta = _dataclass_fields(nodetype, data_fields, meta_fields, drop_fields, jax=True)
    _register_dataclass_fields(nodetype, data, meta)
    # With the fields as read here: jax 0.10.2 read dropped fields too, then refused them.
    _with_jax(nodetype, "register_dataclass", nodetype, data, meta, drop_fields)
    return nodetype


def register_object(
    nodetype: _C | None = None,
    /,
    children: Sequence[str] | None = None,
    static: Sequence[str] | None = None,
) -> Any:
    """Registers a class as a pytree node by its attributes, in oxtree's core and in JAX.

    :func:`oxtree.register_object` in the global namespace: ``children`` are the attributes
    that are children, ``static`` those kept in the treedef (by default the attributes the
    class declares through ``__slots__`` or annotations are children). Instances are rebuilt
    with ``object.__new__`` and ``object.__setattr__``, never ``__init__``, and no Python
    function runs per node in oxtree. JAX gets the same rule through
    ``register_pytree_with_keys``, with functions compiled for these attributes and
    ``GetAttrKey`` keys (JAX's ``register_dataclass`` would call ``__init__``). Returns
    ``nodetype``; without it, a decorator.

    >>> @register_object(static=['unit'])
    ... class Reading:
    ...     __slots__ = ('value', 'unit')
    ...     def __init__(self, value, unit):
    ...         self.value, self.unit = float(value), unit
    >>> leaves, treedef = tree_flatten(Reading(3, 'm'))
    >>> leaves, treedef
    ([3.0], PyTreeDef(CustomNode(Reading[('m',)], [*])))
    >>> [keystr(path) for path, _ in tree_leaves_with_path(Reading(3, 'm'))]
    ['.value']
    """
    if nodetype is None:
        return lambda c: register_object(c, children, static)
    data, meta = _register_object(nodetype, children, static, "")
    # The functions are made once JAX is there: their keys are JAX's GetAttrKey objects.
    _jax_hook.register_with_jax(
        nodetype,
        "register_pytree_with_keys",
        lambda jtu: (nodetype, *_jax_functions(nodetype, data, meta, jtu.GetAttrKey)),
        undo=lambda: _core.unregister_pytree_node(nodetype),
    )
    return nodetype


def register_static(cls: _C) -> _C:
    """Registers ``cls`` as a leafless node whose (hashable) instances live in the treedef.

    >>> class Units:
    ...     def __init__(self, name): self.name = name
    ...     def __eq__(self, other): return isinstance(other, Units) and other.name == self.name
    ...     def __hash__(self): return hash(self.name)
    >>> _ = register_static(Units)
    >>> tree_leaves([Units('m'), 1.5])
    [1.5]
    >>> tree_structure(Units('m')) == tree_structure(Units('s'))
    False
    """
    _register_static(cls)
    _with_jax(cls, "register_static", cls)
    return cls


def treedef_is_leaf(treedef: PyTreeDef) -> bool:
    """Whether the treedef is a single node (a leaf, or None).

    >>> treedef_is_leaf(tree_structure(1)), treedef_is_leaf(tree_structure(None))
    (True, True)
    >>> treedef_is_leaf(tree_structure([1]))
    False
    """
    return treedef.num_nodes == 1


def treedef_children(treedef: PyTreeDef) -> list[PyTreeDef]:
    """The treedefs of the root's children.

    >>> treedef_children(tree_structure((1, [2, 3])))
    [PyTreeDef(*), PyTreeDef([*, *])]
    """
    return treedef.children()


def treedef_tuple(treedefs: Iterable[PyTreeDef]) -> PyTreeDef:
    """The treedef of a tuple of the given treedefs.

    >>> treedef_tuple([tree_structure(1), tree_structure(None)])
    PyTreeDef((*, None))
    """
    children = list(treedefs)
    return PyTreeDef.from_node_data_and_children(default_registry, (tuple, None), children)


def tree_all(tree: Any, *, is_leaf: Callable[[Any], bool] | None = None) -> bool:
    """Whether every leaf is truthy.

    >>> tree_all([True, {'a': 1}]), tree_all([True, 0])
    (True, False)
    """
    return _core._tree_all(tree, is_leaf, jax=True)


def tree_reduce(
    function: Callable[[_T, Any], _T],
    tree: Any,
    initializer: Any = _UNSPECIFIED,
    is_leaf: Callable[[Any], bool] | None = None,
) -> _T:
    """``functools.reduce`` over the leaves.

    >>> tree_reduce(lambda a, b: a + b, [1, (2, 3)])
    6
    """
    initials = () if initializer is _UNSPECIFIED else (initializer,)
    return _core._tree_reduce(function, tree, *initials, is_leaf=is_leaf, jax=True)


def tree_reduce_associative(
    operation: Callable[[_T, _T], _T],
    tree: Any,
    *,
    identity: Any = _UNSPECIFIED,
    is_leaf: Callable[[Any], bool] | None = None,
) -> _T:
    """Reduces the leaves pairwise, in a balanced tree of calls (``operation`` associative).

    >>> tree_reduce_associative(lambda a, b: a + b, [1, 2, 3, 4])
    10
    """
    identities = () if identity is _UNSPECIFIED else (identity,)
    return _core._tree_reduce_associative(operation, tree, *identities, is_leaf=is_leaf, jax=True)


def tree_transpose(
    outer_treedef: PyTreeDef, inner_treedef: PyTreeDef | None, pytree_to_transpose: Any
) -> Any:
    """Turns a tree of trees (outer of inner) into a tree of trees (inner of outer).

    >>> tree_transpose(tree_structure([0, 0]), None, [(1, 2), (3, 4)])
    ([1, 3], [2, 4])
    """
    return _core._tree_transpose(outer_treedef, inner_treedef, pytree_to_transpose, jax=True)


def tree_broadcast(
    prefix_tree: Any, full_tree: Any, is_leaf: Callable[[Any], bool] | None = None
) -> Any:
    """Repeats each leaf of ``prefix_tree`` over the matching subtree of ``full_tree``.

    ``is_leaf`` applies to ``prefix_tree`` only, as in JAX.

    >>> tree_broadcast((None, 0), (None, {'k1': 1, 'k2': 2}))
    (None, {'k1': 0, 'k2': 0})
    """
    return _core._broadcast_prefix(prefix_tree, full_tree, is_leaf, jax=True)


def prefix_errors(
    prefix_tree: Any, full_tree: Any, is_leaf: Callable[[Any], bool] | None = None
) -> list[Callable[[str], ValueError]]:
    """Where ``prefix_tree`` is not a prefix of ``full_tree``, in JAX's words: callables
    that take the prefix tree's name and return the ValueError (JAX's private helper).

    >>> [e('in_axes').args[0].splitlines()[:2] for e in prefix_errors([1], [2, 3])]
    [['pytree structure error: different lengths of list at key path', '    in_axes']]
    """
    return _core._prefix_errors(prefix_tree, full_tree, is_leaf, jax=True)


def _one_level(tree: Any) -> tuple[list[Any], PyTreeDef]:
    children, treedef = _core._flatten_one_level(tree, jax=True)
    if treedef.num_nodes == 1 and treedef.num_leaves == 1:
        raise ValueError(f"can't tree-flatten type: {type(tree)}")
    return children, treedef


def _aux(treedef: PyTreeDef) -> Any:
    typ, data = treedef.node_data()
    if typ is dict:
        return tuple(data)
    if is_namedtuple_class(typ):
        return typ
    return data


def _as_jax_children(tree: Any, children: list[Any]) -> Any:
    # JAX hands back what the node's own flatten gives: the tuple itself, a tuple of a
    # mapping's values, () for None, a list otherwise.
    if tree is None:
        return ()
    if type(tree) in (tuple, dict):
        return tuple(children)
    return children


def flatten_one_level(tree: Any) -> tuple[Iterable[Any], Hashable]:
    """The children of the root and its aux data; ValueError for a leaf.

    >>> flatten_one_level({'b': 1, 'a': 2})
    ((2, 1), ('a', 'b'))
    """
    children, treedef = _one_level(tree)
    return _as_jax_children(tree, children), _aux(treedef)


def flatten_one_level_with_keys(tree: Any) -> tuple[Iterable[KeyLeafPair], Hashable]:
    """The ``(key, child)`` pairs of the root and its aux data.

    >>> flatten_one_level_with_keys([5])
    (((SequenceKey(idx=0), 5),), None)
    """
    pairs, treedef = tree_flatten_with_path(tree, lambda p, x: len(p) == 1, True)
    if treedef.num_nodes == 1 and treedef.num_leaves == 1:
        raise ValueError(f"can't tree-flatten type: {type(tree)}")
    keyed = [(path[0], child) for path, child in pairs]
    # JAX's builtin nodes give a tuple of pairs; its registered ones (OrderedDict,
    # defaultdict, user types) what their flatten gives, a list here.
    builtin = type(tree) in (tuple, list, dict) or tree is None or is_namedtuple_class(type(tree))
    return (tuple(keyed) if builtin else keyed), _aux(treedef.one_level() or treedef)


def is_tree_node(typ: type) -> bool:
    """Whether instances of ``typ`` are pytree nodes (not leaves) to JAX.

    >>> is_tree_node(list), is_tree_node(int)
    (True, False)
    """
    return _core._node_kind(typ, jax=True) is not PyTreeKind.LEAF


class PyTreeRegistry:
    """JAX's registry object; oxtree has one registry, shared by both faces.

    Its ``register_node`` and ``register_dataclass_node`` register in that one registry, so
    they are :func:`register_pytree_node` and :func:`register_dataclass`, and reach JAX through
    those (in JAX's registry for flattening, jit dispatch and ``none_is_leaf`` walks alike).
    """

    def flatten(
        self, tree: Any, leaf_predicate: Callable[[Any], bool] | None = None
    ) -> tuple[list[Any], PyTreeDef]:
        return tree_flatten(tree, leaf_predicate)

    def flatten_with_path(
        self, tree: Any, leaf_predicate: Callable[..., bool] | None = None
    ) -> tuple[list[tuple[KeyPath, Any]], PyTreeDef]:
        return tree_flatten_with_path(tree, leaf_predicate)

    def flatten_one_level(self, tree: Any) -> tuple[Iterable[Any], Hashable] | None:
        try:
            return flatten_one_level(tree)
        except ValueError:
            return None

    def flatten_one_level_with_keys(
        self, tree: Any
    ) -> tuple[Iterable[KeyLeafPair], Hashable] | None:
        try:
            return flatten_one_level_with_keys(tree)
        except ValueError:
            return None

    def is_node(self, typ: type) -> bool:
        return is_tree_node(typ)

    def register_node(
        self,
        nodetype: type,
        to_iterable: Callable[..., Any],
        from_iterable: Callable[..., Any],
        to_iterable_with_keys: Callable[..., Any] | None = None,
    ) -> None:
        """Registers ``nodetype`` as :func:`register_pytree_node` does (with JAX too)."""
        register_pytree_node(nodetype, to_iterable, from_iterable, to_iterable_with_keys)

    def register_dataclass_node(
        self, nodetype: type, data_fields: Sequence[str], meta_fields: Sequence[str]
    ) -> None:
        """Registers ``nodetype`` as :func:`register_dataclass` does (with JAX too)."""
        register_dataclass(nodetype, data_fields, meta_fields)


#: The registry the ``tree_*`` functions use.
default_registry = PyTreeRegistry()
#: JAX's registry for its dispatch path; oxtree's one registry serves it too.
dispatch_registry = PyTreeRegistry()

__all__ = [
    "DictKey",
    "FlattenedIndexKey",
    "GetAttrKey",
    "KeyEntry",
    "KeyPath",
    "Partial",
    "PathPattern",
    "PyTreeDef",
    "SequenceKey",
    "all_leaves",
    "default_registry",
    "flatten_one_level",
    "flatten_one_level_with_keys",
    "is_tree_node",
    "keystr",
    "register_dataclass",
    "register_object",
    "register_pytree_node",
    "register_pytree_node_class",
    "register_pytree_with_keys",
    "register_pytree_with_keys_class",
    "register_static",
    "tree_all",
    "tree_broadcast",
    "tree_flatten",
    "tree_flatten_with_path",
    "tree_labels",
    "tree_leaves",
    "tree_leaves_with_path",
    "tree_map",
    "tree_map_with_path",
    "tree_mask",
    "tree_reduce",
    "tree_reduce_associative",
    "tree_set_matching",
    "tree_structure",
    "tree_transpose",
    "tree_unflatten",
    "treedef_children",
    "treedef_is_leaf",
    "treedef_tuple",
]
