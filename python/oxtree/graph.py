"""Graphs: flattening objects with shared and cyclic references.

Tree flattening treats ``{'a': x, 'b': x}`` as two copies of ``x`` and a list that contains
itself as an error. :func:`graph_flatten` keeps identity: every container that occurs more
than once (through any number of roots) is flattened once and *referred to* afterwards, and
:func:`graph_unflatten` builds each shared object once and wires every reference to it,
cycles included.

>>> x = [1, 2]
>>> y = {'a': x, 'b': x}
>>> leaves, gd = graph_flatten(y)
>>> gd
GraphDef({'a': [*, *], 'b': <ref obj['a']>})
>>> out = graph_unflatten(gd, leaves)
>>> out['a'] is out['b']
True

The path-keyed view (as FlareJax, a JAX library of graph-shaped pytrees, shows it) names every value by its key path, each
container's class by ``<path>.__class__``, and a repeated container by a :class:`GraphRef`
to its first occurrence:

>>> graph_to_dict(y)
{obj.__class__: <class 'dict'>, obj['a'].__class__: <class 'list'>, obj['a'][0]: 1, obj['a'][1]: 2, obj['b']: GraphRef(obj['a'])}
>>> z = graph_from_dict(graph_to_dict(y))
>>> z, z['a'] is z['b']
({'a': [1, 2], 'b': [1, 2]}, True)

Order follows the tree engine (dict keys sorted), never ``hash()`` order, so the result is
the same under any ``PYTHONHASHSEED``.
"""

from __future__ import annotations

import functools

from oxtree._core import (
    GetAttrKey,
    GraphDef,
    PyTreeKind,
    PyTreeSpec,
    _Node,
    _node_kind,
    _rebuild_graphdef,
    graph_flatten,
    graph_unflatten,
    keystr,
)

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing at run time
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any

__all__ = [
    "GraphDef",
    "GraphPath",
    "GraphRef",
    "graph_flatten",
    "graph_from_dict",
    "graph_to_dict",
    "graph_unflatten",
]

# `graph_flatten` for `oxtree.jax`, which reads JAX's registry as well as oxtree's: an equinox
# module or a flax struct in a filtered transform's arguments is a node, as it is to JAX.
_graph_flatten_jax = functools.partial(graph_flatten, jax_registry=True)

_CLASS = GetAttrKey("__class__")
_DATA = GetAttrKey("__data__")
_SPECIAL = (_CLASS, _DATA)


class GraphPath(tuple):  # type: ignore[type-arg]
    """A key path (a tuple of JAX-style keys) that prints in ``keystr`` form after ``obj``.

    >>> from oxtree import DictKey, SequenceKey
    >>> p = GraphPath((DictKey('a'), SequenceKey(1)))
    >>> p, str(p), p == (DictKey('a'), SequenceKey(1))
    (obj['a'][1], "obj['a'][1]", True)
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return "obj" + keystr(tuple(self))

    __str__ = __repr__


class GraphRef:
    """A reference, in :func:`graph_to_dict`'s view, to the first occurrence of a container.

    Its ``str`` is that occurrence's path.

    >>> from oxtree import DictKey
    >>> r = GraphRef(GraphPath((DictKey('a'),)))
    >>> r, str(r)
    (GraphRef(obj['a']), "obj['a']")
    """

    __slots__ = ("path",)

    def __init__(self, path: tuple[Any, ...]) -> None:
        self.path = GraphPath(path)

    def __repr__(self) -> str:
        return f"GraphRef({self.path})"

    def __str__(self) -> str:
        return str(self.path)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GraphRef) and self.path == other.path

    def __hash__(self) -> int:
        return hash((GraphRef, self.path))


def graph_to_dict(
    obj: Any,
    *,
    is_leaf: Callable[[Any], bool] | None = None,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> dict[GraphPath, Any]:
    """The path-keyed view of ``obj``: a dict from :class:`GraphPath` to value.

    Each container at path ``p`` has an entry ``p.__class__`` (its type) and, when a rebuild
    needs more than the type and children, ``p.__data__``: a registered node's aux data, a
    deque's ``maxlen``, a defaultdict's ``(factory, keys)``, and a dict's keys in insertion
    order when that differs from the sorted order its children are listed in. A container
    met again is a :class:`GraphRef` to its first occurrence; leaves are values (a leaf met
    twice is listed twice, never as a reference); None is the value None.

    >>> x = [1, 2]
    >>> x.append(x)
    >>> graph_to_dict(x)
    {obj.__class__: <class 'list'>, obj[0]: 1, obj[1]: 2, obj[2]: GraphRef(obj)}
    """
    leaves, gd = graph_flatten(obj, is_leaf=is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)
    records = gd._layout()
    out: dict[GraphPath, Any] = {}
    leaf_iter = iter(leaves)
    leaf_kind = int(PyTreeKind.LEAF)
    none_kind = int(PyTreeKind.NONE)
    for path, kind, ty, data, target in records:
        gp = GraphPath(path)
        if target >= 0:
            out[gp] = GraphRef(records[target][0])
        elif kind == leaf_kind:
            out[gp] = next(leaf_iter)
        elif kind == none_kind:
            out[gp] = None
        else:
            out[GraphPath((*path, _CLASS))] = ty
            if data is not None:
                out[GraphPath((*path, _DATA))] = data
    return out


def _kind_of(ty: type, namespace: str) -> PyTreeKind:
    """The kind a container class rebuilds as: the walk's own answer (a class that is no node
    is taken for a registered one, for the rebuild to report)."""
    kind = _node_kind(ty, namespace=namespace)
    return PyTreeKind.CUSTOM if kind is PyTreeKind.LEAF else kind


def graph_from_dict(
    d: Mapping[tuple[Any, ...], Any], *, none_is_leaf: bool = False, namespace: str = ""
) -> Any:
    """Rebuilds the object described by :func:`graph_to_dict`'s view, with its sharing.

    Values may have been replaced (new leaves); the paths, classes and references say how
    they fit together. Entries may come in any order; children are placed in the order
    their parent lists them in ``d``.

    >>> shared = {'w': 1}
    >>> view = graph_to_dict([shared, shared])
    >>> view[GraphPath((SequenceKey(0), DictKey('w')))] = 5
    >>> out = graph_from_dict(view)
    >>> out, out[0] is out[1]
    ([{'w': 5}, {'w': 5}], True)
    """
    classes: dict[tuple[Any, ...], type] = {}
    data: dict[tuple[Any, ...], Any] = {}
    values: dict[tuple[Any, ...], Any] = {}
    # Each parent's children, in the order they first appear in `d`.
    children: dict[tuple[Any, ...], list[tuple[Any, ...]]] = {}
    for key, value in d.items():
        path = tuple(key)
        if path and path[-1] in _SPECIAL:
            path = path[:-1]
            if key[-1] == _CLASS:
                classes[path] = value
            else:
                data[path] = value
        else:
            values[path] = value
        _register(children, path)
    root: tuple[Any, ...] = ()
    if root not in classes and root not in values:
        raise ValueError("graph_from_dict: the view has no entry for the root (obj)")
    for parent in children:
        if children[parent] and parent not in classes:
            raise ValueError(
                f"graph_from_dict: {GraphPath(parent)} has children but no "
                f"{GraphPath((*parent, _CLASS))} entry"
            )

    nodes: list[_Node] = []
    position: dict[tuple[Any, ...], int] = {}
    leaves: list[Any] = []
    refs: list[tuple[tuple[Any, ...], int]] = []  # (target path, skeleton leaf index)
    leaf_count = 0
    # Post-order without recursion: (path, expanded?) tasks.
    tasks: list[tuple[tuple[Any, ...], bool]] = [(root, False)]
    while tasks:
        path, expanded = tasks.pop()
        if path not in classes:
            value = values[path]
            if isinstance(value, GraphRef):
                refs.append((tuple(value.path), leaf_count))
                nodes.append(_LEAF)
                leaf_count += 1
            elif value is None and not none_is_leaf:
                nodes.append(_NONE)
            else:
                leaves.append(value)
                nodes.append(_LEAF)
                leaf_count += 1
            continue
        kids = children.get(path, [])
        if not expanded:
            tasks.append((path, True))
            tasks.extend((k, False) for k in reversed(kids))
            continue
        position[path] = len(nodes)
        nodes.append(_node(path, classes[path], data.get(path), kids, namespace))
    skeleton = PyTreeSpec._from_nodes(nodes, none_is_leaf=none_is_leaf, namespace=namespace)
    ref_pairs = []
    for target, leaf in refs:
        if target not in position:
            raise ValueError(
                f"graph_from_dict: a GraphRef points to {GraphPath(target)}, "
                "which is not a container of the view"
            )
        ref_pairs.append((leaf, position[target]))
    return graph_unflatten(_rebuild_graphdef(skeleton, 1, ref_pairs), leaves)


def _register(
    children: dict[tuple[Any, ...], list[tuple[Any, ...]]], path: tuple[Any, ...]
) -> None:
    """Adds `path`, and each ancestor not met yet, to its parent's children."""
    chain = []
    while path not in children:
        chain.append(path)
        if not path:
            break
        path = path[:-1]
    for p in reversed(chain):
        children[p] = []
        if p:
            children[p[:-1]].append(p)


def _node(
    path: tuple[Any, ...],
    ty: type,
    data: Any,
    kids: list[tuple[Any, ...]],
    namespace: str,
) -> _Node:
    """The treespec node of the container of class ``ty`` at ``path``."""
    arity = len(kids)
    keys = tuple(getattr(k[-1], "key", None) for k in kids)
    kind = _kind_of(ty, namespace)
    if kind in (PyTreeKind.DICT, PyTreeKind.DEFAULTDICT):
        ordered = data[1] if kind == PyTreeKind.DEFAULTDICT else data
        insertion = None
        if ordered is not None:
            at = {id(k): i for i, k in enumerate(keys)}
            by_value = {k: i for i, k in enumerate(keys)}
            insertion = tuple(at.get(id(k), by_value.get(k)) for k in ordered)
            if None in insertion or sorted(insertion) != list(range(arity)):
                raise ValueError(
                    f"graph_from_dict: the insertion keys of {GraphPath(path)} "
                    "do not match its children"
                )
        factory = data[0] if kind == PyTreeKind.DEFAULTDICT else None
        return _Node(kind, arity, factory, keys, insertion)
    if kind == PyTreeKind.ORDEREDDICT:
        return _Node(kind, arity, keys=keys)
    if kind in (PyTreeKind.NAMEDTUPLE, PyTreeKind.STRUCTSEQUENCE):
        return _Node(kind, arity, ty)
    if kind == PyTreeKind.DEQUE:
        return _Node(kind, arity, data)
    if kind == PyTreeKind.CUSTOM:
        return _Node(kind, arity, data, custom_type=ty)
    return _Node(kind, arity)


_LEAF = _Node(PyTreeKind.LEAF, 0)
_NONE = _Node(PyTreeKind.NONE, 0)
