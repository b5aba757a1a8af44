"""Every treespec state that loads re-flattens to itself.

The states of treespecs holding each kind of node (dict, OrderedDict, defaultdict, deque,
namedtuple, None, a custom node) on both faces are mutated one field and two fields at a time,
and nodes are dropped, repeated and swapped. Each mutated state either raises ValueError or
TypeError on load, or loads to a treespec whose rebuilt tree flattens back to the same state:
in optree's `dict_insertion_ordered` mode where its dicts keep their insertion order, else
outside it. A custom node's data and key entries are what its registered flatten function
returns; loading runs none of the type's code, so those two fields are left unmutated here
(loading checks their shape: tests/treespec/test_treespec_ops_serialization.py).

The same nodes given as `_Node`s to `PyTreeSpec._from_nodes` meet the same check: the same
treespec, or the same error.
"""

from __future__ import annotations

import itertools
import random
import re
from collections import OrderedDict, defaultdict, deque, namedtuple
from collections.abc import Callable, Iterator
from typing import Any

import oxtree
import oxtree.tree_util
import pytest
from oxtree._core import PyTreeSpec, _Node, _rebuild_treespec

NAMESPACE = "test_pickle_state_mutations"
Pair = namedtuple("Pair", "a b")


class Box:
    def __init__(self, a: Any, b: Any) -> None:
        self.a, self.b = a, b


class JaxBox(Box):
    pass


oxtree.register_pytree_node(
    Box,
    lambda b: ((b.a, b.b), "meta", ("a", "b")),
    lambda _, children: Box(*children),
    namespace=NAMESPACE,
)
oxtree.tree_util.register_pytree_node(
    JaxBox, lambda b: ((b.a, b.b), "meta"), lambda _, children: JaxBox(*children)
)


def _trees() -> Iterator[tuple[str, Callable[[Any], Any]]]:
    counts: defaultdict[Any, int] = defaultdict(list)  # type: ignore[arg-type]
    counts["z"], counts["a"] = 1, 2
    common = {
        "b": 1,
        "a": [2, (3, None)],
        "c": OrderedDict([("y", 4), ("x", 5)]),
        "d": counts,
        "f": Pair(8, 9),
    }
    optree_tree = dict(common, e=deque([6, 7], maxlen=4), g=Box(10, {"q": 1, "p": 2}))
    yield "optree", oxtree.tree_structure(optree_tree, namespace=NAMESPACE)
    yield (
        "optree-none-is-leaf",
        oxtree.tree_structure(optree_tree, none_is_leaf=True, namespace=NAMESPACE),
    )
    yield "jax", oxtree.tree_util.tree_structure(dict(common, g=JaxBox(10, {"q": 1, "p": 2})))


def _variants(value: Any) -> list[Any]:
    out: list[Any] = [None, 0, 1, -1, 2, 5, "x", (), True]
    if isinstance(value, tuple) and value:
        out += [value[:-1], value[1:], (*value, value[-1]), (*value, "new"), value[::-1]]
        if len(value) >= 2:
            out.append((value[1], value[0], *value[2:]))
    if isinstance(value, int) and not isinstance(value, bool):
        out += [value - 1, value + 1, value + 2]
    return out


def _mutations(nodes: tuple[Any, ...], rng: random.Random) -> Iterator[tuple[Any, ...]]:
    for i, node in enumerate(nodes):
        custom = node[5] is not None
        fields = [
            (j, v)
            for j, field in enumerate(node)
            if not (custom and j in (2, 6))
            for v in _variants(field)
        ]
        for j, v in fields:
            yield (*nodes[:i], (*node[:j], v, *node[j + 1 :]), *nodes[i + 1 :])
        pairs = [(a, b) for a, b in itertools.combinations(fields, 2) if a[0] != b[0]]
        for (j1, v1), (j2, v2) in rng.sample(pairs, min(len(pairs), 120)):
            mutated = list(node)
            mutated[j1], mutated[j2] = v1, v2
            yield (*nodes[:i], tuple(mutated), *nodes[i + 1 :])
        yield nodes[:i] + nodes[i + 1 :]
        yield (*nodes[:i], node, *nodes[i:])
        if i + 1 < len(nodes):
            yield (*nodes[:i], nodes[i + 1], node, *nodes[i + 2 :])


def _reflattened(spec: Any, face: str, insertion_ordered: bool) -> Any:
    tree = spec.unflatten(range(spec.num_leaves))
    if face == "jax":
        return oxtree.tree_util.tree_structure(tree)
    with oxtree.dict_insertion_ordered(insertion_ordered, namespace=spec.namespace):
        return oxtree.tree_structure(tree, none_is_leaf=spec.none_is_leaf, namespace=spec.namespace)


def _outcome(load: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, ...]:
    """The state of what ``load(*args, **kwargs)`` builds, or its error: its type, the node
    it names (-1 for none) and its text with the node's name made uniform."""
    try:
        return ("loaded", load(*args, **kwargs).__reduce__()[1][0])
    except (ValueError, TypeError) as e:
        at = re.search(r"\bnode (\d+)\b", str(e))
        text = re.sub(r"\bnode \d+\b|\b_Node\b", "node", str(e))
        return (type(e), int(at[1]) if at else -1, text)


@pytest.mark.parametrize(("name", "spec"), [pytest.param(*t, id=t[0]) for t in _trees()])
def test_nodes_are_checked_as_a_state_is(name: str, spec: Any) -> None:
    rng = random.Random(name)
    _, (state,) = spec.__reduce__()
    assert (
        tuple(
            (int(n.kind), n.arity, n.data, n.keys, n.insertion, n.custom_type, n.entries)
            for n in spec._nodes()
        )
        == state[3]
    )
    refused = made = 0
    for nodes in _mutations(state[3], rng):
        typed_nodes = []
        for i, n in enumerate(nodes):
            try:
                typed_nodes.append(_Node(*n))
                continue
            except ValueError as e:
                words = re.sub(r"\b_Node\b", "node", str(e))
            # A node whose fields have the wrong types: no `_Node` holds them, and a state
            # holding them is refused there with the same words, or at a node before it.
            for face in ("optree", "jax"):
                pickled = _outcome(_rebuild_treespec, (*state[:3], nodes, face))
                assert pickled[0] is ValueError, (name, nodes)
                assert pickled[1] < i or pickled[2] == words, (name, nodes, pickled, words)
            break
        else:
            made += 1
            for face in ("optree", "jax"):
                pickled = _outcome(_rebuild_treespec, (*state[:3], nodes, face))
                typed = _outcome(
                    PyTreeSpec._from_nodes,
                    typed_nodes,
                    none_is_leaf=state[1],
                    namespace=state[2],
                    face=face,
                )
                assert typed == pickled, (name, face, nodes)
                refused += pickled[0] != "loaded"
    assert made > 1000
    assert refused > 500


@pytest.mark.parametrize(("name", "spec"), [pytest.param(*t, id=t[0]) for t in _trees()])
def test_a_state_that_loads_reflattens_to_itself(name: str, spec: Any) -> None:
    rng = random.Random(name)
    _, (state,) = spec.__reduce__()
    loaded = tried = 0
    for nodes in _mutations(state[3], rng):
        for face in ("optree", "jax"):
            mutated = (*state[:3], nodes, face)
            tried += 1
            try:
                back = _rebuild_treespec(mutated)
            except (ValueError, TypeError):
                continue
            loaded += 1
            modes = (False,) if face == "jax" else (False, True)
            again = [_reflattened(back, face, mode).__reduce__()[1][0] for mode in modes]
            assert mutated in again, (name, face, nodes)
    # The mutations reach states that load, not only ones that are refused.
    assert tried > 1000
    assert loaded > 50
