"""Shared helpers of the `test_paths_*` modules (this module holds no tests).

- `to_jax` / `to_oxtree` translate key objects between `jax.tree_util` and oxtree;
- `JAX_TREES` is the part of the corpus that jax flattens with the same semantics as oxtree;
- `Hit` is a leaf that records what a mapped function was called with.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from typing import Any

import jax.tree_util as jtu
import oxtree
from helpers import CORPUS, is_namedtuple_instance, is_structseq_instance


def to_jax(key: Any) -> Any:
    """The jax key equal in meaning to an oxtree key (other objects pass through)."""
    match key:
        case oxtree.SequenceKey(idx):
            return jtu.SequenceKey(idx)
        case oxtree.DictKey(k):
            return jtu.DictKey(k)
        case oxtree.GetAttrKey(name):
            return jtu.GetAttrKey(name)
        case oxtree.FlattenedIndexKey(k):
            return jtu.FlattenedIndexKey(k)
    return key


def to_oxtree(key: Any) -> Any:
    """The oxtree key equal in meaning to a jax key (other objects pass through)."""
    match key:
        case jtu.SequenceKey(idx):
            return oxtree.SequenceKey(idx)
        case jtu.DictKey(k):
            return oxtree.DictKey(k)
        case jtu.GetAttrKey(name):
            return oxtree.GetAttrKey(name)
        case jtu.FlattenedIndexKey(k):
            return oxtree.FlattenedIndexKey(k)
    return key


def jax_path(path: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(map(to_jax, path))


def _jax_nodes(tree: Any) -> Iterator[Any]:
    """Every node-or-leaf under `tree` as oxtree (and optree) see them, iteratively."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        cls = type(node)
        if cls in (list, tuple) or is_namedtuple_instance(node):
            stack.extend(node)
        elif cls is dict:
            stack.extend(node.values())


def _sortable(keys: list[Any]) -> bool:
    try:
        sorted(keys)
    except TypeError:
        return False
    return True


def jax_compatible(tree: Any) -> bool:
    """Whether jax flattens `tree` exactly as oxtree does (same nodes, same dict order).

    jax treats deques and struct sequences as leaves, keeps OrderedDict insertion order, and
    refuses dicts whose keys do not sort: trees holding any of those are left out.
    """
    from collections import OrderedDict, defaultdict, deque

    for node in _jax_nodes(tree):
        cls = type(node)
        if cls in (deque, OrderedDict, defaultdict) or is_structseq_instance(node):
            return False
        if cls is dict and not _sortable(list(node)):
            return False
    return True


JAX_TREES: dict[str, Any] = {name: tree for name, tree in CORPUS.items() if jax_compatible(tree)}


class Hit:
    """A mapped function's result: the path (or accessor) and the leaves it was called with."""

    __slots__ = ("args", "where")

    def __init__(self, where: Any, *args: Any) -> None:
        self.where = where
        self.args = args

    def __repr__(self) -> str:
        return f"Hit({self.where!r}, *{self.args!r})"

    def same_as(self, other: Hit, *, convert: Any = None) -> bool:
        where = self.where if convert is None else convert(self.where)
        return (
            where == other.where
            and len(self.args) == len(other.args)
            and all(a is b for a, b in zip(self.args, other.args, strict=True))
        )


def shape_trees() -> list[Any]:
    """Trees of one shape (node kinds and arities) whose paths differ: by dict keys (other
    objects, other values, other types), namedtuple types and their fields, a plain tuple in
    a namedtuple's place. Each is walked again right after itself."""
    pair = collections.namedtuple("pair", "x y")
    other = collections.namedtuple("other", "p q")
    big = {f"k{i}": i for i in range(40)}
    trees = [
        {"a": [1, pair(2, 3)], "b": 4},
        {"a": [1, pair(2, 3)], "c": 4},
        {"a": [1, other(2, 3)], "c": 4},
        {"a": [1, (2, 3)], "c": 4},
        {1: [1, pair(2, 3)], 2: 4},
        {("a",): [1, pair(2, 3)], ("b",): 4},
        big,
        {f"k{i}": i for i in range(40)},
        {f"k{i}" if i != 7 else "z": i for i in range(40)},
        [big, big],
    ]
    return [tree for tree in trees for _ in range(2)]
