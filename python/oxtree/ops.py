"""The tree algebra: prefix broadcasting, transposition, reductions, partition and friends.

optree's signatures and semantics plus JAX's extras (``inner_treespec=None`` in
:func:`tree_transpose`, :func:`tree_reduce_associative`). The operations the JAX face offers
too (broadcasting a prefix, transposing, the reductions) are one core function each, which
both faces call with their own options; the rest is written on the core's walks.

>>> tree_broadcast_prefix((None, 0), (1, {'k1': 2, 'k2': 3}), none_is_leaf=True)
(None, {'k1': 0, 'k2': 0})
>>> tree_combine(*tree_partition(lambda x: x > 1, (1, [2, None], {'a': 3})))
(1, [2, None], {'a': 3})
"""

from __future__ import annotations

import functools
from collections import OrderedDict, defaultdict, deque
from collections.abc import Callable
from typing import Any, NamedTuple

from oxtree import _core
from oxtree._core import (
    DictKey,
    FlattenedIndexKey,
    GetAttrKey,
    PyTreeKind,
    PyTreeSpec,
    SequenceKey,
    _broadcast_common,
    _broadcast_prefix,
    _tree_all,
    _tree_reduce,
    _tree_reduce_associative,
    _tree_transpose,
    _unflatten_node,
    keystr,
    tree_flatten,
    tree_leaves,
    tree_map,
    tree_map_with_path,
    tree_structure,
)
from oxtree.accessors import tree_map_with_accessor
from oxtree.registry import DictMetaData

#: The dict types that are builtin node kinds (optree's name).
STANDARD_DICT_TYPES: frozenset[type] = frozenset({dict, OrderedDict, defaultdict})

__all__ = [
    # Prefix trees and broadcasting.
    "tree_broadcast_prefix",
    "broadcast_prefix",
    "tree_broadcast_common",
    "broadcast_common",
    "tree_broadcast_map",
    "tree_broadcast_map_with_path",
    "tree_broadcast_map_with_accessor",
    "prefix_errors",
    # Transposition.
    "tree_transpose",
    "tree_transpose_map",
    "tree_transpose_map_with_path",
    "tree_transpose_map_with_accessor",
    # Reductions.
    "tree_reduce",
    "tree_reduce_associative",
    "tree_sum",
    "tree_max",
    "tree_min",
    "tree_all",
    "tree_any",
    # Partition and combine.
    "tree_partition",
    "tree_combine",
    # Odds and ends.
    "FlattenOneLevelOutput",
    "tree_flatten_one_level",
    "tree_replace_nones",
    "tree_map_with_path_",
    "tree_map_with_accessor_",
]


class _Missing:
    """The type of :data:`MISSING`, the default of arguments that may legitimately be None."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<MISSING>"

    def __reduce__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


# --------------------------------------------------------------------------------------------------
# Helpers: one-level views of nodes, describing and comparing nodes, an iterative zip-walk.


def _one_level_spec(obj: Any, none_is_leaf: bool, namespace: str) -> PyTreeSpec:
    """The treespec of ``obj``'s root node alone (a leaf spec when ``obj`` is a leaf)."""
    return _core._flatten_one_level(obj, none_is_leaf=none_is_leaf, namespace=namespace)[1]


_KEY_TYPES = (SequenceKey, DictKey, GetAttrKey, FlattenedIndexKey)


def _path_str(path: tuple[Any, ...]) -> str:
    """``path`` in keystr form; a custom node's raw entries show as flat indices."""
    return keystr(key if isinstance(key, _KEY_TYPES) else FlattenedIndexKey(key) for key in path)


# A key path under construction: None at the root, else ``(parent's trail, keys)``. A child's
# trail shares its parent's, so walking a tree 100,000 deep costs linear time and memory (a
# tuple per level, copied from the parent's, would be quadratic); `_trail_str` renders one.
_Trail = tuple[Any, tuple[Any, ...]] | None


def _trail_str(trail: _Trail) -> str:
    """``trail`` in keystr form, as :func:`_path_str` renders paths."""
    parts: list[tuple[Any, ...]] = []
    while trail is not None:
        trail, keys = trail
        parts.append(keys)
    return _path_str(tuple(key for keys in reversed(parts) for key in keys))


def _type_name(cls: type | None) -> str:
    return "None" if cls is None or cls is type(None) else cls.__qualname__


def _zip_walk(root: Any, expand: Callable[[Any], tuple[bool, Any, Any]]) -> Any:
    """Build a result bottom-up without recursion.

    ``expand(item)`` returns ``(True, value, None)`` when ``item`` is finished, or
    ``(False, rebuild, child_items)`` where ``rebuild(child_results)`` makes the item's value.
    """
    done, value, items = expand(root)
    if done:
        return value
    stack: list[tuple[Callable[[list[Any]], Any], list[Any], list[Any]]] = [(value, items, [])]
    while True:
        rebuild, items, results = stack[-1]
        if len(results) == len(items):
            stack.pop()
            value = rebuild(results)
            if not stack:
                return value
            stack[-1][2].append(value)
            continue
        done, value, child_items = expand(items[len(results)])
        if done:
            results.append(value)
        else:
            stack.append((value, child_items, []))


# --------------------------------------------------------------------------------------------------
# Prefix trees and broadcasting.


def tree_broadcast_prefix(
    prefix_tree: Any,
    full_tree: Any,
    /,
    is_leaf: Callable[[Any], bool] | None = None,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> Any:
    """``prefix_tree`` with each leaf repeated over the subtree of ``full_tree`` under it.

    ``prefix_tree`` must be a prefix of ``full_tree`` (as ``vmap``'s ``in_axes`` is of the
    arguments); the nodes above its leaves are kept as they are in ``prefix_tree``. A mismatch
    raises ValueError naming the key path.

    >>> tree_broadcast_prefix((None, 0), (1, {'k1': 2, 'k2': 3}), none_is_leaf=True)
    (None, {'k1': 0, 'k2': 0})
    >>> tree_broadcast_prefix(7, [1, (2, None)])
    [7, (7, None)]
    """
    return _broadcast_prefix(
        prefix_tree, full_tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace
    )


def broadcast_prefix(
    prefix_tree: Any,
    full_tree: Any,
    /,
    is_leaf: Callable[[Any], bool] | None = None,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> list[Any]:
    """The leaves of :func:`tree_broadcast_prefix`: each prefix leaf once per leaf under it.

    >>> broadcast_prefix((1, 2), ([3, 4], {'a': 5}))
    [1, 1, 2]
    """
    return _broadcast_prefix(
        prefix_tree, full_tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace, leaves=True
    )


def tree_broadcast_common(
    tree: Any,
    other_tree: Any,
    /,
    is_leaf: Callable[[Any], bool] | None = None,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> tuple[Any, Any]:
    """Both trees broadcast to their common suffix structure.

    Wherever one tree has a leaf and the other a subtree, the leaf is repeated over that
    subtree's structure; each tree keeps its own nodes.

    >>> tree_broadcast_common((1, {'a': 2}), ((3, 4), 5))
    (((1, 1), {'a': 2}), ((3, 4), {'a': 5}))
    """
    first, second = _broadcast_common(
        (tree, other_tree), is_leaf, none_is_leaf=none_is_leaf, namespace=namespace
    )
    return first, second


def broadcast_common(
    tree: Any,
    other_tree: Any,
    /,
    is_leaf: Callable[[Any], bool] | None = None,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> tuple[list[Any], list[Any]]:
    """The leaves of :func:`tree_broadcast_common`'s two trees.

    >>> broadcast_common((1, {'a': 2}), ((3, 4), 5))
    ([1, 1, 2], [3, 4, 5])
    """
    first, second = _broadcast_common(
        (tree, other_tree), is_leaf, none_is_leaf=none_is_leaf, namespace=namespace, leaves=True
    )
    return first, second


def tree_broadcast_map(
    func: Callable[..., Any],
    tree: Any,
    /,
    *rests: Any,
    is_leaf: Callable[[Any], bool] | None = None,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> Any:
    """:func:`tree_map` after broadcasting all the trees to their common suffix structure.

    >>> tree_broadcast_map(lambda x, y: x + y, (1, {'a': 2}), ([10, 20], 30))
    ([11, 21], {'a': 32})
    """
    return _broadcast_map(tree_map, func, (tree, *rests), 0, is_leaf, none_is_leaf, namespace)


def tree_broadcast_map_with_path(
    func: Callable[..., Any],
    tree: Any,
    /,
    *rests: Any,
    is_leaf: Callable[[Any], bool] | None = None,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> Any:
    """:func:`tree_broadcast_map` with the path of each leaf (in the common structure) as
    ``func``'s first argument.

    >>> tree_broadcast_map_with_path(lambda p, x, y: (p, x + y), {'a': 1}, {'a': [2, 3]})
    {'a': [(('a', 0), 3), (('a', 1), 4)]}
    """
    trees = (tree, *rests)
    return _broadcast_map(tree_map_with_path, func, trees, 1, is_leaf, none_is_leaf, namespace)


def _broadcast_map(
    mapper: Callable[..., Any],
    func: Callable[..., Any],
    trees: tuple[Any, ...],
    leading: int,
    is_leaf: Callable[[Any], bool] | None,
    none_is_leaf: bool,
    namespace: str,
) -> Any:
    """`mapper` (tree_map or a variant that passes `leading` extra arguments first: a path, an
    accessor) of `func` over `trees` broadcast to their common suffix structure."""
    if len(trees) == 1:
        # Nothing to broadcast against: the mapper itself, which flattens the tree once.
        return mapper(
            func, trees[0], is_leaf=is_leaf, none_is_leaf=none_is_leaf, namespace=namespace
        )
    # Each tree broadcast with the position of its leaf at every leaf (ints are leaves,
    # whatever `is_leaf` says), and each tree's leaves.
    index_trees, values = _broadcast_common(
        trees, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace, indices=True
    )

    def call(*args: Any) -> Any:
        indices = args[leading:]
        leaves = (column[i] for column, i in zip(values, indices, strict=True))
        return func(*args[:leading], *leaves)

    return mapper(call, *index_trees, none_is_leaf=none_is_leaf, namespace=namespace)


def tree_broadcast_map_with_accessor(
    func: Callable[..., Any],
    tree: Any,
    /,
    *rests: Any,
    is_leaf: Callable[[Any], bool] | None = None,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> Any:
    """:func:`tree_broadcast_map` with the accessor of each leaf (in the common structure) as
    ``func``'s first argument.

    >>> tree_broadcast_map_with_accessor(lambda a, x, y: (a.codify('t'), x + y), {'a': 1},
    ...                                  {'a': [2, 3]})
    {'a': [("t['a'][0]", 3), ("t['a'][1]", 4)]}
    """
    trees = (tree, *rests)
    return _broadcast_map(tree_map_with_accessor, func, trees, 1, is_leaf, none_is_leaf, namespace)


def _shorten(obj: Any, limit: int = 200) -> str:
    text = repr(obj)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def prefix_errors(
    prefix_tree: Any,
    full_tree: Any,
    /,
    is_leaf: Callable[[Any], bool] | None = None,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> list[Callable[[str], ValueError]]:
    """Every place where ``prefix_tree`` is not a prefix of ``full_tree``, left to right.

    Each error is a callable taking the prefix tree's name (as in ``in_axes``) and returning a
    ValueError whose message names the key path of the mismatch. An empty list means
    ``prefix_tree`` is a prefix of ``full_tree``.

    >>> for make_error in prefix_errors((None, {'k': (0, 1)}), (1, {'k': [2, 3]})):
    ...     print(make_error('in_axes'))
    pytree structure error: different types at key path
        in_axes[0]
    At that key path, the prefix pytree in_axes has a subtree of type
        <class 'NoneType'>
    but at the same key path the full pytree has a subtree of different type
        <class 'int'>.
    pytree structure error: different types at key path
        in_axes[1]['k']
    At that key path, the prefix pytree in_axes has a subtree of type
        <class 'tuple'>
    but at the same key path the full pytree has a subtree of different type
        <class 'list'>.
    >>> prefix_errors((None, 0), (None, {'k': [2, 3]}))
    []
    """
    return _core._prefix_errors(
        prefix_tree, full_tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace
    )


# --------------------------------------------------------------------------------------------------
# Transposition.


def tree_transpose(
    outer_treespec: PyTreeSpec,
    inner_treespec: PyTreeSpec | None,
    tree: Any,
    /,
    is_leaf: Callable[[Any], bool] | None = None,
) -> Any:
    """Turn a tree of structure ``outer`` of trees of structure ``inner`` inside out.

    ``inner_treespec=None`` (JAX's convenience) takes the inner structure from the subtree
    under the first leaf of ``outer_treespec``. As in optree and JAX, only the total number of
    leaves is checked against the two structures (TypeError when it is wrong).

    >>> outer = tree_structure([0, 0])
    >>> inner = tree_structure({'a': 0, 'b': 0})
    >>> tree_transpose(outer, inner, [{'a': 1, 'b': 2}, {'a': 3, 'b': 4}])
    {'a': [1, 3], 'b': [2, 4]}
    >>> tree_transpose(outer, None, [(1, 2), (3, 4)])
    ([1, 3], [2, 4])
    """
    return _tree_transpose(outer_treespec, inner_treespec, tree, is_leaf)


def tree_transpose_map(
    func: Callable[..., Any],
    tree: Any,
    /,
    *rests: Any,
    inner_treespec: PyTreeSpec | None = None,
    is_leaf: Callable[[Any], bool] | None = None,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> Any:
    """Map ``func`` (which returns a tree) over the leaves, then transpose: the result has the
    outputs' structure outside and the input's inside.

    The inner structure is ``inner_treespec``, or that of the first output; every output must
    match it (ValueError naming the key path otherwise).

    >>> tree_transpose_map(lambda x: {'id': x, 'sq': x * x}, [1, (2, 3)])
    {'id': [1, (2, 3)], 'sq': [1, (4, 9)]}
    """
    trees = (tree, *rests)
    return _transpose_map(tree_map, func, trees, inner_treespec, is_leaf, none_is_leaf, namespace)


def tree_transpose_map_with_path(
    func: Callable[..., Any],
    tree: Any,
    /,
    *rests: Any,
    inner_treespec: PyTreeSpec | None = None,
    is_leaf: Callable[[Any], bool] | None = None,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> Any:
    """:func:`tree_transpose_map` with each leaf's path as ``func``'s first argument.

    >>> tree_transpose_map_with_path(lambda p, x: {'path': p, 'x': x}, {'a': 1, 'b': 2},
    ...                              inner_treespec=tree_structure({'path': 0, 'x': 0}))
    {'path': {'a': ('a',), 'b': ('b',)}, 'x': {'a': 1, 'b': 2}}
    """
    trees = (tree, *rests)
    return _transpose_map(
        tree_map_with_path, func, trees, inner_treespec, is_leaf, none_is_leaf, namespace
    )


def _transpose_map(
    mapper: Callable[..., Any],
    func: Callable[..., Any],
    trees: tuple[Any, ...],
    inner_treespec: PyTreeSpec | None,
    is_leaf: Callable[[Any], bool] | None,
    none_is_leaf: bool,
    namespace: str,
) -> Any:
    """`mapper` (tree_map or a variant) of `func` over `trees`, outputs transposed."""
    outer = tree_structure(trees[0], is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)
    mapped = mapper(func, *trees, is_leaf=is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)
    outputs = outer.flatten_up_to(mapped)
    return _core._transpose_outputs(
        outer, outputs, inner_treespec, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace
    )


def tree_transpose_map_with_accessor(
    func: Callable[..., Any],
    tree: Any,
    /,
    *rests: Any,
    inner_treespec: PyTreeSpec | None = None,
    is_leaf: Callable[[Any], bool] | None = None,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> Any:
    """:func:`tree_transpose_map` with each leaf's accessor as ``func``'s first argument.

    >>> tree_transpose_map_with_accessor(
    ...     lambda a, x: {'code': a.codify('t'), 'x': x}, {'a': 1, 'b': 2},
    ...     inner_treespec=tree_structure({'code': 0, 'x': 0}))
    {'code': {'a': "t['a']", 'b': "t['b']"}, 'x': {'a': 1, 'b': 2}}
    """
    trees = (tree, *rests)
    return _transpose_map(
        tree_map_with_accessor, func, trees, inner_treespec, is_leaf, none_is_leaf, namespace
    )


# --------------------------------------------------------------------------------------------------
# Reductions.


def tree_reduce(
    func: Callable[[Any, Any], Any],
    tree: Any,
    /,
    initial: Any = MISSING,
    *,
    is_leaf: Callable[[Any], bool] | None = None,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> Any:
    """Fold ``func`` over the leaves from left to right, starting from ``initial`` if given.

    An empty tree without ``initial`` raises TypeError (as :func:`functools.reduce` does).

    >>> tree_reduce(lambda a, b: a * b, [2, (3, None), {'x': 4}])
    24
    >>> tree_reduce(lambda a, b: a + b, (), 'start')
    'start'
    """
    initials = () if initial is MISSING else (initial,)
    return _tree_reduce(
        func, tree, *initials, is_leaf=is_leaf, none_is_leaf=none_is_leaf, namespace=namespace
    )


def tree_reduce_associative(
    operation: Callable[[Any, Any], Any],
    tree: Any,
    *,
    identity: Any = MISSING,
    is_leaf: Callable[[Any], bool] | None = None,
) -> Any:
    """Reduce the leaves with an associative ``operation``, pairwise (a balanced tree of calls,
    as ``jax.tree_util.tree_reduce_associative`` does).

    ``identity`` is returned for an empty tree (TypeError without it) and is otherwise unused.

    >>> tree_reduce_associative(lambda a, b: f'({a}+{b})', [1, 2, (3, 4, 5)])
    '((1+2)+(3+(4+5)))'
    >>> tree_reduce_associative(lambda a, b: a + b, {}, identity=0)
    0
    """
    identities = () if identity is MISSING else (identity,)
    return _tree_reduce_associative(operation, tree, *identities, is_leaf=is_leaf)


def tree_sum(
    tree: Any,
    /,
    start: Any = 0,
    *,
    is_leaf: Callable[[Any], bool] | None = None,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> Any:
    """The sum of the leaves, added to ``start`` (like :func:`sum`).

    >>> tree_sum({'a': 1, 'b': (2, None, 3)})
    6
    >>> tree_sum([[1], [2, 3]], start=[], is_leaf=lambda x: x and type(x[0]) is int)
    [1, 2, 3]
    >>> tree_sum({'x': 'a', 'y': ('b', None)}, start='>')
    '>ab'
    """
    leaves = tree_leaves(tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)
    # sum() refuses a str, bytes or bytearray start: those are joined (as optree joins them).
    for text in (str, bytes, bytearray):
        if isinstance(start, text):
            return text().join([start, *leaves])
    return sum(leaves, start)


def tree_max(
    tree: Any,
    /,
    *,
    default: Any = MISSING,
    key: Callable[[Any], Any] | None = None,
    is_leaf: Callable[[Any], bool] | None = None,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> Any:
    """The largest leaf (like :func:`max`: ``default`` for an empty tree, else ValueError).

    >>> tree_max({'a': 1, 'b': (5, None, 3)})
    5
    >>> tree_max((), default=-1)
    -1
    """
    leaves = tree_leaves(tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)
    if default is MISSING:
        return max(leaves, key=key)
    return max(leaves, default=default, key=key)


def tree_min(
    tree: Any,
    /,
    *,
    default: Any = MISSING,
    key: Callable[[Any], Any] | None = None,
    is_leaf: Callable[[Any], bool] | None = None,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> Any:
    """The smallest leaf (like :func:`min`: ``default`` for an empty tree, else ValueError).

    >>> tree_min({'a': 4, 'b': (5, None, 3)})
    3
    >>> tree_min([-2, 1], key=abs)
    1
    """
    leaves = tree_leaves(tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)
    if default is MISSING:
        return min(leaves, key=key)
    return min(leaves, default=default, key=key)


def tree_all(
    tree: Any,
    /,
    *,
    is_leaf: Callable[[Any], bool] | None = None,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> bool:
    """Whether every leaf is truthy (True for a tree without leaves).

    >>> tree_all([1, (True, None)]), tree_all({'a': 0}), tree_all([])
    (True, False, True)
    """
    return _tree_all(tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)


def tree_any(
    tree: Any,
    /,
    *,
    is_leaf: Callable[[Any], bool] | None = None,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> bool:
    """Whether some leaf is truthy (False for a tree without leaves).

    >>> tree_any([0, (False, None)]), tree_any({'a': 0, 'b': 'x'}), tree_any([])
    (False, True, False)
    """
    return _tree_all(tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace, any=True)


# --------------------------------------------------------------------------------------------------
# Partition and combine.


def tree_partition(
    predicate: Callable[[Any], bool],
    tree: Any,
    /,
    is_leaf: Callable[[Any], bool] | None = None,
    *,
    fillvalue: Any = None,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> tuple[Any, Any]:
    """Split ``tree`` into two trees of its structure: a leaf goes left where ``predicate`` is
    truthy and right otherwise, with ``fillvalue`` in its place on the other side.

    ``predicate`` is called once per leaf. :func:`tree_combine` undoes the split.

    >>> tree_partition(lambda x: x > 1, (1, [2, None], {'a': 3}))
    ((None, [2, None], {'a': 3}), (1, [None, None], {'a': None}))
    """
    leaves, spec = tree_flatten(tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)
    flags = [bool(predicate(leaf)) for leaf in leaves]
    left = [leaf if flag else fillvalue for leaf, flag in zip(leaves, flags, strict=True)]
    right = [fillvalue if flag else leaf for leaf, flag in zip(leaves, flags, strict=True)]
    return spec.unflatten(left), spec.unflatten(right)


def tree_combine(
    *trees: Any,
    fillvalue: Any = None,
    is_leaf: Callable[[Any], bool] | None = None,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> Any:
    """Merge trees that hold ``fillvalue`` wherever they hold nothing (the inverse of
    :func:`tree_partition`).

    At each position the one value that is not ``fillvalue`` (compared by identity) is taken,
    whole: a ``fillvalue`` may stand for a subtree of another tree. Where several trees hold a
    value, they must all be nodes of the same structure, merged child by child; two values at
    the same leaf raise ValueError naming the key path. Node types and dict key order come from
    the first tree with a value there.

    >>> tree_combine((None, [2, None], {'a': 3}), (1, [None, None], {'a': None}))
    (1, [2, None], {'a': 3})
    >>> tree_combine([0, [0, 5]], [[1, 2], 0], fillvalue=0)
    [[1, 2], [0, 5]]
    """
    if not trees:
        raise TypeError("tree_combine() needs at least one tree")

    def expand(item: tuple[list[Any], _Trail]) -> tuple[bool, Any, Any]:
        values, path = item
        present = [value for value in values if value is not fillvalue]
        if not present:
            return True, fillvalue, None
        if len(present) == 1:
            return True, present[0], None
        first = present[0]
        if is_leaf is not None and is_leaf(first):
            node = None
        else:
            node = _one_level_spec(first, none_is_leaf, namespace).one_level()
        if node is None:
            raise ValueError(
                f"tree_combine: {len(present)} trees hold a value at tree{_trail_str(path)} "
                f"(expected at most one that is not the fillvalue {fillvalue!r}): "
                f"{_shorten(present)}"
            )
        rows = []
        for value in present:
            try:
                rows.append(node.flatten_up_to(value))
            except ValueError as error:
                raise ValueError(
                    f"tree_combine: the trees differ at tree{_trail_str(path)}: {error}"
                ) from None
        keys = node.key_paths()
        items = [([row[i] for row in rows], (path, keys[i])) for i in range(len(keys))]
        return False, node.unflatten, items

    return _zip_walk((list(trees), None), expand)


# --------------------------------------------------------------------------------------------------
# One-level flattening, None replacement, side-effect maps.


class FlattenOneLevelOutput(NamedTuple):
    """What :func:`tree_flatten_one_level` returns: a named tuple of four fields.

    >>> out = tree_flatten_one_level([1, (2, 3)])
    >>> out.children, out.metadata, out.entries
    ([1, (2, 3)], None, (0, 1))
    >>> out.unflatten_func(out.metadata, ['a', 'b'])
    ['a', 'b']
    """

    children: list[Any]
    metadata: Any
    entries: tuple[Any, ...]
    unflatten_func: Callable[[Any, list[Any]], Any]


class FlattenOneLevelOutputEx(FlattenOneLevelOutput):
    """:class:`FlattenOneLevelOutput` with the node's ``type``, ``kind`` and
    ``path_entry_type`` as attributes (what optree's :func:`tree_flatten_one_level` returns).

    >>> out = tree_flatten_one_level({'a': 1})
    >>> out.type, out.kind, out.path_entry_type.__name__
    (<class 'dict'>, <PyTreeKind.DICT: 5>, 'MappingEntry')
    """

    type: Any
    kind: PyTreeKind
    path_entry_type: Any


def _dict_from(keys: Any, children: list[Any]) -> dict[Any, Any]:
    mapping = dict(zip(keys, children, strict=True))
    if isinstance(keys, DictMetaData) and set(keys.original_keys) == set(mapping):
        return {key: mapping[key] for key in keys.original_keys}
    return mapping


def _unflatten_none(metadata: Any, children: Any) -> None:
    if any(True for _ in children):
        raise ValueError("Expected no children.")
    return None


def _unflatten_tuple(metadata: Any, children: list[Any]) -> tuple[Any, ...]:
    return tuple(children)


def _unflatten_list(metadata: Any, children: list[Any]) -> list[Any]:
    return list(children)


def _unflatten_dict(metadata: Any, children: list[Any]) -> dict[Any, Any]:
    return _dict_from(metadata, children)


def _unflatten_namedtuple(metadata: Any, children: list[Any]) -> Any:
    return metadata(*children)


def _unflatten_ordereddict(metadata: Any, children: list[Any]) -> OrderedDict[Any, Any]:
    return OrderedDict(zip(metadata, children, strict=True))


def _unflatten_defaultdict(metadata: Any, children: list[Any]) -> defaultdict[Any, Any]:
    factory, keys = metadata
    return defaultdict(factory, _dict_from(keys, children))


def _unflatten_deque(metadata: Any, children: list[Any]) -> deque[Any]:
    return deque(children, maxlen=metadata)


def _unflatten_structseq(metadata: Any, children: list[Any]) -> Any:
    return metadata(children)


_UNFLATTEN_BY_KIND: dict[PyTreeKind, Callable[[Any, list[Any]], Any]] = {
    PyTreeKind.NONE: _unflatten_none,
    PyTreeKind.TUPLE: _unflatten_tuple,
    PyTreeKind.LIST: _unflatten_list,
    PyTreeKind.DICT: _unflatten_dict,
    PyTreeKind.NAMEDTUPLE: _unflatten_namedtuple,
    PyTreeKind.ORDEREDDICT: _unflatten_ordereddict,
    PyTreeKind.DEFAULTDICT: _unflatten_defaultdict,
    PyTreeKind.DEQUE: _unflatten_deque,
    PyTreeKind.STRUCTSEQUENCE: _unflatten_structseq,
}


def tree_flatten_one_level(
    tree: Any,
    /,
    is_leaf: Callable[[Any], bool] | None = None,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> FlattenOneLevelOutput:
    """Flatten the root node only: ``(children, metadata, entries, unflatten_func)``, where
    ``unflatten_func(metadata, children)`` rebuilds the node. A leaf raises ValueError.

    >>> children, metadata, entries, unflatten = tree_flatten_one_level({'b': 1, 'a': (2, 3)})
    >>> children, metadata, entries
    ([(2, 3), 1], ['a', 'b'], ('a', 'b'))
    >>> unflatten(metadata, [20, 10])
    {'b': 10, 'a': 20}
    """
    if is_leaf is not None and is_leaf(tree):
        raise ValueError(f"Cannot flatten leaf-type: {type(tree)} (node: {_shorten(tree)}).")
    children, spec = _core._flatten_one_level(tree, none_is_leaf=none_is_leaf, namespace=namespace)
    node = spec.one_level()
    if node is None:
        raise ValueError(f"Cannot flatten leaf-type: {type(tree)} (node: {_shorten(tree)}).")
    kind = spec.kind
    metadata = spec.node_data()
    if kind == PyTreeKind.DICT:
        metadata = DictMetaData(metadata, original_keys=tree)
    elif kind == PyTreeKind.DEFAULTDICT:
        factory, keys = metadata
        metadata = (factory, DictMetaData(keys, original_keys=tree))
    # A registered node is rebuilt through its registration, from any metadata.
    unflatten = _UNFLATTEN_BY_KIND.get(kind) or functools.partial(_unflatten_node, node)
    out = FlattenOneLevelOutputEx(children, metadata, tuple(spec.entries()), unflatten)
    out.type = spec.type
    out.kind = PyTreeKind(kind)
    from oxtree.registry import register_pytree_node

    entry = register_pytree_node.get(spec.type, namespace=namespace)  # type: ignore[attr-defined]
    out.path_entry_type = entry.path_entry_type
    return out


def tree_replace_nones(sentinel: Any, tree: Any, /, namespace: str = "") -> Any:
    """``tree`` with every None (a node by default) replaced by ``sentinel``.

    >>> tree_replace_nones(0, (1, None, [None, {'a': None}]))
    (1, 0, [0, {'a': 0}])
    """
    return tree_map(
        lambda x: sentinel if x is None else x, tree, none_is_leaf=True, namespace=namespace
    )


def tree_map_with_path_(
    func: Callable[..., Any],
    tree: Any,
    /,
    *rests: Any,
    is_leaf: Callable[[Any], bool] | None = None,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> Any:
    """Call ``func(path, leaf, *rest_leaves)`` for its side effects; return ``tree`` itself.

    >>> seen = []
    >>> tree_map_with_path_(lambda p, x: seen.append((p, x)), {'b': [1], 'a': 2})
    {'b': [1], 'a': 2}
    >>> seen
    [(('a',), 2), (('b', 0), 1)]
    """
    tree_map_with_path(
        func, tree, *rests, is_leaf=is_leaf, none_is_leaf=none_is_leaf, namespace=namespace
    )
    return tree


def tree_map_with_accessor_(
    func: Callable[..., Any],
    tree: Any,
    /,
    *rests: Any,
    is_leaf: Callable[[Any], bool] | None = None,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> Any:
    """Call ``func(accessor, leaf, *rest_leaves)`` for its side effects; return ``tree`` itself.

    >>> seen = []
    >>> tree_map_with_accessor_(lambda a, x: seen.append(a.codify('t')), {'x': [5, 6]})
    {'x': [5, 6]}
    >>> seen
    ["t['x'][0]", "t['x'][1]"]
    """
    tree_map_with_accessor(
        func, tree, *rests, is_leaf=is_leaf, none_is_leaf=none_is_leaf, namespace=namespace
    )
    return tree


# optree.ops also holds the core functions, the treespec constructors and the accessor
# functions; they are served from the package (not imported here: that would be circular).
_FROM_PACKAGE = frozenset(
    {
        "MAX_RECURSION_DEPTH",
        "NONE_IS_LEAF",
        "NONE_IS_NODE",
        "all_leaves",
        "tree_accessors",
        "tree_flatten",
        "tree_flatten_with_accessor",
        "tree_flatten_with_path",
        "tree_is_leaf",
        "tree_iter",
        "tree_leaves",
        "tree_map",
        "tree_map_",
        "tree_map_with_path",
        "tree_paths",
        "tree_structure",
        "tree_unflatten",
    }
)


def __getattr__(name: str) -> Any:
    if name in _FROM_PACKAGE or name.startswith("treespec_"):
        import oxtree

        if hasattr(oxtree, name):
            return getattr(oxtree, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
