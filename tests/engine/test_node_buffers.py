"""Treespecs made in node buffers that earlier treespecs gave back as they died.

A dying treespec gives its node buffer to its thread's next walk (see `give_back_nodes` in
`crates/oxtree/src/treespec/flatten.rs`). These tests flatten trees of many shapes in turn,
each treespec dropped before the next walk, so that every walk writes into a buffer left by
a tree of another size, and check every answer against optree's.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, namedtuple
from typing import Any

import optree
import oxtree

Pair = namedtuple("Pair", ["first", "second"])

SHAPES: list[Any] = [
    {"b": [1, 2], "a": (3, None)},
    [[[[0]]]],
    {f"k{i:02d}": i for i in reversed(range(12))},
    [*range(40), {"x": 1, "y": [2, 3]}],
    (1, 2.0, "three"),
    Pair({"z": 1, "a": 2}, [None, (4,)]),
    OrderedDict([("q", 1), ("p", [2, 3])]),
    {"wide": list(range(300))},
    [],
]


def check_each_shape(rounds: int) -> None:
    for _ in range(rounds):
        for tree in SHAPES:
            leaves, spec = oxtree.tree_flatten(tree)
            assert leaves == optree.tree_leaves(tree)
            assert repr(spec) == repr(optree.tree_structure(tree))
            assert spec.num_nodes == optree.tree_structure(tree).num_nodes
            assert spec.unflatten(leaves) == tree
            assert repr(oxtree.tree_structure(tree)) == repr(spec)
            del spec


def test_walks_in_buffers_of_dead_treespecs_of_other_shapes() -> None:
    check_each_shape(20)


def test_walks_in_buffers_of_dead_treespecs_on_several_threads() -> None:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            check_each_shape(10)
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


class Box:
    def __init__(self, value: Any) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Box) and other.value == self.value

    __hash__ = None  # type: ignore[assignment]


def test_a_treespec_dying_inside_a_walk() -> None:
    # The flatten function makes and drops treespecs while the outer walk holds its buffer.
    def flatten(box: Box) -> tuple[tuple[Any], None]:
        for tree in SHAPES:
            assert repr(oxtree.tree_structure(tree)) == repr(optree.tree_structure(tree))
        return (box.value,), None

    oxtree.register_pytree_node(Box, flatten, lambda _, c: Box(*c), namespace="node-buffers")
    try:
        tree = [Box(1), {"k": Box([2, 3])}, (4, Box(None))]
        for _ in range(5):
            leaves, spec = oxtree.tree_flatten(tree, namespace="node-buffers")
            assert leaves == [1, 2, 3, 4]
            assert spec.num_nodes == 12
            assert spec.unflatten(leaves) == tree
    finally:
        oxtree.unregister_pytree_node(Box, namespace="node-buffers")
