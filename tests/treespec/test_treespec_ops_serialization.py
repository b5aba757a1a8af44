"""Treespec serialization: pickling, versioned JSON, and validation of what is loaded.

Every corpus treespec survives pickling with every protocol (equal, same repr, still
unflattens). Treespecs made of builtin nodes whose classes import by name, with dict keys of
str/int/float/bool/None, survive `to_json` -> `json.dumps` -> `treespec_from_json`; anything else
makes `to_json` raise ValueError. Corrupted JSON documents and hand-made bad pickle states raise
ValueError, never anything else.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import pickle
import time
import typing
from collections import OrderedDict, defaultdict, deque, namedtuple
from collections.abc import Callable
from typing import Any

import optree
import oxtree
import oxtree.tree_util
import pytest
from helpers import (
    NONE_IS_LEAF_OPTIONS,
    TREE_IDS,
    TREES,
    assert_same_tree,
    iter_subtrees,
    parametrize,
)
from nodes import Point, make_default
from oxtree._core import _Node, _rebuild_treespec

# --------------------------------------------------------------------------------------------------
# Module-level node classes: they import by name, so treespecs holding them have a JSON form.

Coord = namedtuple("Coord", ["lat", "lon"])


class Span(typing.NamedTuple):
    start: Any
    stop: Any = None


# A namedtuple whose class name is not the name it is bound to: it cannot be imported by name.
Misnamed = namedtuple("NotMisnamed", ["a"])

NAMESPACE = "test_treespec_ops_serialization"


class Crate:
    """A custom node, registered in this module's namespace only."""

    def __init__(self, *items: Any) -> None:
        self.items = items


class Unregistered:
    """Never registered as a node."""


oxtree.register_pytree_node(
    Crate,
    lambda c: (c.items, len(c.items), None),
    lambda _, items: Crate(*items),
    namespace=NAMESPACE,
)

JSON_KEY_TYPES = (str, int, float, bool, type(None))
PROTOCOLS = range(pickle.HIGHEST_PROTOCOL + 1)


def has_json_form(tree: Any) -> bool:
    """Every dict key of `tree` is a str/int/float/bool/None (its nodes are all builtin)."""
    return all(
        all(type(key) in JSON_KEY_TYPES for key in sub)
        for sub in iter_subtrees(tree)
        if type(sub) in (dict, OrderedDict, defaultdict)
    )


def known(tree: Any) -> dict[str, Any]:
    """The allow-list a reader of `tree`'s JSON passes: its namedtuple classes and factories."""
    types, factories = set(), set()
    for sub in iter_subtrees(tree):
        if isinstance(sub, tuple) and hasattr(type(sub), "_fields"):
            types.add(type(sub))
        elif type(sub) is defaultdict and sub.default_factory is not None:
            factories.add(sub.default_factory)
    return {"types": types, "factories": factories}


def raised(func: Callable[[], Any]) -> type[BaseException] | None:
    """The type of exception `func()` raises, or None."""
    try:
        func()
    except Exception as error:
        return type(error)
    return None


def fresh_leaves(spec: oxtree.PyTreeSpec) -> list[Any]:
    return [object() for _ in range(spec.num_leaves)]


def assert_same_spec(loaded: oxtree.PyTreeSpec, spec: oxtree.PyTreeSpec) -> None:
    """`loaded` is a faithful copy of `spec`: equal, same repr and hash, same rebuilt trees."""
    assert type(loaded) is oxtree.PyTreeSpec
    assert loaded == spec
    assert repr(loaded) == repr(spec)
    assert hash(loaded) == hash(spec)
    assert loaded.none_is_leaf is spec.none_is_leaf
    assert loaded.namespace == spec.namespace
    assert loaded.num_leaves == spec.num_leaves
    assert loaded.num_nodes == spec.num_nodes
    leaves = fresh_leaves(spec)
    assert_same_tree(loaded.unflatten(leaves), spec.unflatten(leaves), copied_keys=True)


# Trees beyond the corpus: this module's namedtuples, all the JSON key types, custom nodes.
EXTRA_TREES: dict[str, Any] = {
    "module_namedtuple": Coord(1, [2, None]),
    "module_typed_namedtuple": Span({"b": 1, "a": Coord(2, 3)}),
    "key_types": {True: 1, 2: 2, 1.5: 3, None: 4, "s": 5, -7: 6, 0.0: 7},
    "bool_and_int_keys_apart": [{True: 1}, {1: 1}, {1.0: 1}, {"1": 1}],
    "insertion_order": {"z": 1, "a": {"y": 2, "b": 3}, "m": defaultdict(int, {3: 4, 1: 5})},
    "deques": [deque([1], maxlen=1), deque(), deque([None, [2]], maxlen=9)],
    "structseqs": (time.gmtime(0), os.stat("."), [time.gmtime(0)]),
    "factories": [defaultdict(make_default, a=1), defaultdict(list), defaultdict(None, k=[])],
}


def all_trees() -> list[tuple[str, Any]]:
    return [*zip(TREE_IDS, TREES, strict=True), *EXTRA_TREES.items()]


# --------------------------------------------------------------------------------------------------
# Pickle.


@pytest.mark.parametrize(("name", "tree"), all_trees(), ids=[n for n, _ in all_trees()])
def test_pickle_round_trip(name: str, tree: Any) -> None:
    for none_is_leaf in NONE_IS_LEAF_OPTIONS:
        spec = oxtree.tree_structure(tree, none_is_leaf=none_is_leaf)
        for protocol in PROTOCOLS:
            loaded = pickle.loads(pickle.dumps(spec, protocol=protocol))
            assert_same_spec(loaded, spec)
        assert_same_spec(copy.copy(spec), spec)
        assert_same_spec(copy.deepcopy(spec), spec)
        # The state is a plain, versioned tuple that _rebuild_treespec takes back.
        rebuild, (state,) = spec.__reduce__()
        assert rebuild is _rebuild_treespec
        assert type(state) is tuple
        assert_same_spec(_rebuild_treespec(state), spec)


@pytest.mark.parametrize(("name", "tree"), all_trees(), ids=[n for n, _ in all_trees()])
def test_nodes_round_trip(name: str, tree: Any) -> None:
    specs = [oxtree.tree_structure(tree, none_is_leaf=n) for n in NONE_IS_LEAF_OPTIONS]
    with contextlib.suppress(ValueError):  # JAX's face refuses dict keys that do not sort
        specs.append(oxtree.tree_util.tree_structure(tree))
    for spec in specs:
        nodes = spec._nodes()
        assert type(nodes) is tuple
        assert all(type(n) is _Node and type(n.kind) is oxtree.PyTreeKind for n in nodes)
        assert [n.kind for n in nodes[-1:]] == [spec.kind]
        assert sum(n.kind == oxtree.PyTreeKind.LEAF for n in nodes) == spec.num_leaves
        back = oxtree.PyTreeSpec._from_nodes(
            nodes, none_is_leaf=spec.none_is_leaf, namespace=spec.namespace, face=spec._face
        )
        assert_same_spec(back, spec)
        assert back._face == spec._face


def test_node_fields_and_defaults() -> None:
    counts = defaultdict(list, {"b": 1, "a": 2})
    spec = oxtree.tree_structure([counts, deque([3], maxlen=2), Point(4, 5)])
    by_kind = {n.kind: n for n in spec._nodes()}
    dd = by_kind[oxtree.PyTreeKind.DEFAULTDICT]
    assert (dd.arity, dd.data, dd.keys, dd.insertion) == (2, list, ("a", "b"), (1, 0))
    assert by_kind[oxtree.PyTreeKind.DEQUE].data == 2
    assert by_kind[oxtree.PyTreeKind.NAMEDTUPLE].data is Point
    assert repr(dd) == (
        "_Node(kind=DEFAULTDICT, arity=2, data=<class 'list'>, keys=('a', 'b'), insertion=(1, 0))"
    )
    # The defaults: None is no leaf, the global namespace, optree's face.
    leaf = oxtree.PyTreeSpec._from_nodes([_Node(oxtree.PyTreeKind.LEAF, 0)])
    assert leaf == oxtree.tree_structure(1)
    assert (leaf.none_is_leaf, leaf.namespace, leaf._face) == (False, "", "optree")
    with pytest.raises(ValueError, match="_Node: keys must be a tuple"):
        _Node(oxtree.PyTreeKind.DICT, 1, keys=["a"])
    with pytest.raises(ValueError, match="_Node: unknown kind 42"):
        _Node(42, 0)
    with pytest.raises(ValueError, match="node 1 is not a _Node"):
        oxtree.PyTreeSpec._from_nodes([_Node(1, 0), (1, 0)])
    with pytest.raises(ValueError, match="none_is_leaf must be a bool"):
        oxtree.PyTreeSpec._from_nodes([_Node(1, 0)], none_is_leaf=None)
    with pytest.raises(ValueError, match="the face must be 'optree' or 'jax'"):
        oxtree.PyTreeSpec._from_nodes([_Node(1, 0)], face="flax")


def test_pickle_round_trip_custom_and_namespaced() -> None:
    tree = [Crate(1, {"b": None, "a": Crate()}), (2,)]
    for none_is_leaf in NONE_IS_LEAF_OPTIONS:
        spec = oxtree.tree_structure(tree, none_is_leaf=none_is_leaf, namespace=NAMESPACE)
        assert spec.namespace == NAMESPACE
        for protocol in PROTOCOLS:
            loaded = pickle.loads(pickle.dumps(spec, protocol=protocol))
            assert loaded == spec
            assert repr(loaded) == repr(spec)
            rebuilt = loaded.unflatten(range(spec.num_leaves))
            assert type(rebuilt[0]) is Crate
            assert (
                oxtree.tree_structure(rebuilt, none_is_leaf=none_is_leaf, namespace=NAMESPACE)
                == spec
            )


def test_pickle_round_trip_jax_face() -> None:
    spec = oxtree.tree_util.tree_structure([1, {"b": (2, None), "a": 3}])
    for protocol in PROTOCOLS:
        loaded = pickle.loads(pickle.dumps(spec, protocol=protocol))
        assert loaded == spec
        assert repr(loaded) == repr(spec)
        assert type(loaded) is type(spec)


@parametrize(tree=TREES)
def test_pickle_matches_optree_structure(tree: Any) -> None:
    """A reloaded treespec describes what optree's describes."""
    for none_is_leaf in NONE_IS_LEAF_OPTIONS:
        loaded = pickle.loads(pickle.dumps(oxtree.tree_structure(tree, none_is_leaf=none_is_leaf)))
        assert repr(loaded) == repr(optree.tree_structure(tree, none_is_leaf=none_is_leaf))


# --------------------------------------------------------------------------------------------------
# JSON round trip.


@pytest.mark.parametrize(("name", "tree"), all_trees(), ids=[n for n, _ in all_trees()])
def test_json_round_trip_or_value_error(name: str, tree: Any) -> None:
    for none_is_leaf in NONE_IS_LEAF_OPTIONS:
        spec = oxtree.tree_structure(tree, none_is_leaf=none_is_leaf)
        if not has_json_form(tree):
            with pytest.raises(ValueError, match="key"):
                spec.to_json()
            with pytest.raises(ValueError, match="key"):
                oxtree.treespec_to_json(spec)
            continue
        doc = spec.to_json()
        assert doc == oxtree.treespec_to_json(spec)
        text = json.dumps(doc, allow_nan=False)
        assert json.loads(text) == doc
        for source in (text, text.encode(), json.loads(text)):
            loaded = oxtree.treespec_from_json(source, **known(tree))
            assert_same_spec(loaded, spec)
        # Key types survive: 1, 1.0, True and "1" stay apart.
        leaves = fresh_leaves(spec)
        original = spec.unflatten(leaves)
        rebuilt = oxtree.treespec_from_json(text, **known(tree)).unflatten(leaves)
        for a, b in zip(iter_subtrees(rebuilt), iter_subtrees(original), strict=True):
            if type(b) in (dict, OrderedDict, defaultdict):
                assert [(type(k), k) for k in a] == [(type(k), k) for k in b]


def test_json_document_shape() -> None:
    spec = oxtree.tree_structure({"b": [1, None], "a": Coord(1, 2)}, none_is_leaf=True)
    doc = spec.to_json()
    assert doc["format"] == "oxtree.treespec"
    assert doc["version"] == 1
    assert doc["none_is_leaf"] is True
    assert doc["namespace"] == ""
    assert isinstance(doc["nodes"], list)
    assert len(doc["nodes"]) == spec.num_nodes
    assert json.loads(json.dumps(doc)) == doc


def local_factory() -> list[Any]:
    return []


def test_to_json_rejects_what_cannot_be_named() -> None:
    def nested_factory() -> int:
        return 0

    Local = namedtuple("Local", ["a"])

    class LocalTyped(typing.NamedTuple):
        a: Any

    unnameable = {
        "custom-node": oxtree.tree_structure(Crate(1, 2), namespace=NAMESPACE),
        "custom-node-deep": oxtree.tree_structure([{"k": Crate()}], namespace=NAMESPACE),
        "local-namedtuple": oxtree.tree_structure(Local(1)),
        "local-typed-namedtuple": oxtree.tree_structure([LocalTyped(1)]),
        "misnamed-namedtuple": oxtree.tree_structure(Misnamed(1)),
        "lambda-factory": oxtree.tree_structure(defaultdict(lambda: 0, a=1)),
        "local-factory": oxtree.tree_structure(defaultdict(nested_factory, a=1)),
        "tuple-key": oxtree.tree_structure({(1,): 1}),
        "bytes-key": oxtree.tree_structure({b"k": 1}),
        "object-key": oxtree.tree_structure({Point: 1}),
        "jax-face": oxtree.tree_util.tree_structure([1]),
    }
    not_rejected = {name: raised(spec.to_json) for name, spec in unnameable.items()}
    assert {k: v for k, v in not_rejected.items() if v is not ValueError} == {}
    # A module-level function is fine as a factory.
    spec = oxtree.tree_structure(defaultdict(local_factory, a=1))
    assert oxtree.treespec_from_json(json.dumps(spec.to_json()), factories=[local_factory]) == spec


# --------------------------------------------------------------------------------------------------
# Corrupted JSON documents.

BASE_TREE = {
    "b": [1, None],
    "a": OrderedDict(z=1, y=2),
    3: defaultdict(list, {"k": 1, "c": 2}),
    "d": deque([1], maxlen=3),
    "p": Coord(1, 2),
    "t": time.gmtime(0),
}
BASE_DOC = oxtree.tree_structure(BASE_TREE).to_json()


def node_of(doc: dict[str, Any], kind: str) -> list[Any]:
    """The first node of `kind` in `doc` (which is a deep copy of the base document)."""
    return next(node for node in doc["nodes"] if node[0] == kind)


def corrupt(change: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
    doc = copy.deepcopy(BASE_DOC)
    change(doc)
    return doc


def set_node(kind: str, index: int, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        node_of(doc, kind)[index] = value

    return change


def cut_node(kind: str, length: int) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        del node_of(doc, kind)[length:]

    return change


def set_field(field: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda doc: doc.__setitem__(field, value)


CORRUPTED_DOCS: dict[str, Any] = {
    # Header.
    "version-2": corrupt(set_field("version", 2)),
    "version-0": corrupt(set_field("version", 0)),
    "version-string": corrupt(set_field("version", "1")),
    "version-null": corrupt(set_field("version", None)),
    "version-missing": corrupt(lambda d: d.pop("version")),
    "format-wrong": corrupt(set_field("format", "optree.treespec")),
    "format-missing": corrupt(lambda d: d.pop("format")),
    "none-is-leaf-string": corrupt(set_field("none_is_leaf", "false")),
    "none-is-leaf-null": corrupt(set_field("none_is_leaf", None)),
    "none-is-leaf-missing": corrupt(lambda d: d.pop("none_is_leaf")),
    "namespace-number": corrupt(set_field("namespace", 5)),
    "namespace-list": corrupt(set_field("namespace", ["x"])),
    "nodes-missing": corrupt(lambda d: d.pop("nodes")),
    "nodes-object": corrupt(set_field("nodes", {"0": ["leaf", 0]})),
    "nodes-string": corrupt(set_field("nodes", "leaf")),
    "nodes-empty": corrupt(set_field("nodes", [])),
    # Bad kinds.
    "kind-unknown": corrupt(set_node("list", 0, "banana")),
    "kind-number": corrupt(set_node("list", 0, 4)),
    "kind-null": corrupt(set_node("leaf", 0, None)),
    "kind-uppercase": corrupt(set_node("list", 0, "LIST")),
    "kind-custom": corrupt(lambda d: d.__setitem__("nodes", [["custom", 0]])),
    "node-not-a-list": corrupt(lambda d: d["nodes"].__setitem__(0, "leaf")),
    "node-empty": corrupt(lambda d: d["nodes"].__setitem__(0, [])),
    "node-kind-only": corrupt(lambda d: d["nodes"].__setitem__(0, ["leaf"])),
    # Arity lies.
    "leaf-arity-1": corrupt(set_node("leaf", 1, 1)),
    "none-arity-1": corrupt(set_node("none", 1, 1)),
    "list-arity-too-big": corrupt(set_node("list", 1, 3)),
    "root-arity-too-big": corrupt(lambda d: d["nodes"][-1].__setitem__(1, 99)),
    "root-arity-too-small": corrupt(lambda d: d["nodes"][-1].__setitem__(1, 5)),
    "arity-negative": corrupt(set_node("list", 1, -1)),
    "arity-string": corrupt(set_node("list", 1, "2")),
    "arity-float": corrupt(set_node("list", 1, 2.0)),
    "arity-null": corrupt(set_node("list", 1, None)),
    "arity-huge": corrupt(set_node("list", 1, 10**30)),
    "only-leaves": corrupt(lambda d: d.__setitem__("nodes", [["leaf", 0], ["leaf", 0]])),
    "namedtuple-arity": corrupt(set_node("namedtuple", 1, 1)),
    "structseq-arity": corrupt(set_node("structsequence", 1, 8)),
    # Missing or wrong keys.
    "dict-keys-missing": corrupt(lambda d: d["nodes"].__setitem__(-1, ["dict", 6])),
    "dict-insertion-missing": corrupt(cut_node("dict", 3)),
    "ordereddict-keys-missing": corrupt(cut_node("ordereddict", 2)),
    "defaultdict-factory-missing": corrupt(cut_node("defaultdict", 4)),
    "namedtuple-type-missing": corrupt(cut_node("namedtuple", 2)),
    "structseq-type-missing": corrupt(cut_node("structsequence", 2)),
    "deque-maxlen-missing": corrupt(cut_node("deque", 2)),
    "dict-keys-too-few": corrupt(lambda d: d["nodes"][-1][2].pop()),
    "dict-keys-too-many": corrupt(lambda d: d["nodes"][-1][2].append("extra")),
    "ordereddict-keys-too-few": corrupt(lambda d: node_of(d, "ordereddict")[2].pop()),
    "defaultdict-keys-too-many": corrupt(lambda d: node_of(d, "defaultdict")[2].append("x")),
    "dict-keys-repeated": corrupt(lambda d: d["nodes"][-1][2].__setitem__(1, "b")),
    "ordereddict-keys-repeated": corrupt(set_node("ordereddict", 2, ["z", "z"])),
    "dict-keys-string": corrupt(set_node("ordereddict", 2, "zy")),
    "dict-keys-object": corrupt(set_node("ordereddict", 2, {"z": 0, "y": 1})),
    "dict-keys-number": corrupt(set_node("ordereddict", 2, 2)),
    "dict-key-bad-tag": corrupt(lambda d: d["nodes"][-1][2].__setitem__(0, {"complex": 3})),
    "dict-key-two-tags": corrupt(
        lambda d: d["nodes"][-1][2].__setitem__(0, {"int": 3, "float": 3.0})
    ),
    "dict-key-int-string": corrupt(lambda d: d["nodes"][-1][2].__setitem__(0, {"int": "3"})),
    "dict-key-int-fraction": corrupt(lambda d: d["nodes"][-1][2].__setitem__(0, {"int": 3.5})),
    "dict-key-bool-number": corrupt(lambda d: d["nodes"][-1][2].__setitem__(0, {"bool": 3})),
    "dict-key-none-value": corrupt(lambda d: d["nodes"][-1][2].__setitem__(0, {"none": 0})),
    "dict-key-list": corrupt(lambda d: d["nodes"][-1][2].__setitem__(0, [3])),
    "dict-key-null": corrupt(lambda d: d["nodes"][-1][2].__setitem__(0, None)),
    # Insertion orders that are not permutations.
    "insertion-repeats": corrupt(lambda d: d["nodes"][-1].__setitem__(3, [0, 0, 1, 2, 3, 4])),
    "insertion-short": corrupt(lambda d: d["nodes"][-1].__setitem__(3, [0, 1, 2])),
    "insertion-long": corrupt(lambda d: d["nodes"][-1].__setitem__(3, list(range(7)))),
    "insertion-out-of-range": corrupt(lambda d: d["nodes"][-1].__setitem__(3, [0, 1, 2, 3, 4, 6])),
    "insertion-negative": corrupt(lambda d: d["nodes"][-1].__setitem__(3, [-1, 0, 1, 2, 3, 4])),
    "insertion-strings": corrupt(lambda d: d["nodes"][-1].__setitem__(3, list("012345"))),
    "insertion-string": corrupt(lambda d: d["nodes"][-1].__setitem__(3, "012345")),
    "insertion-number": corrupt(lambda d: d["nodes"][-1].__setitem__(3, 5)),
    "defaultdict-insertion-bad": corrupt(set_node("defaultdict", 3, [1, 1])),
    # Unknown or wrong type names.
    "namedtuple-unknown-module": corrupt(set_node("namedtuple", 2, "no_such_module_xyz:Coord")),
    "namedtuple-unknown-name": corrupt(set_node("namedtuple", 2, "collections:NoSuchThing")),
    "namedtuple-not-namedtuple": corrupt(set_node("namedtuple", 2, "builtins:tuple")),
    "namedtuple-not-a-type": corrupt(set_node("namedtuple", 2, "os:getcwd")),
    "namedtuple-is-structseq": corrupt(set_node("namedtuple", 2, "os:terminal_size")),
    "namedtuple-no-colon": corrupt(set_node("namedtuple", 2, "collections.OrderedDict")),
    "namedtuple-two-colons": corrupt(set_node("namedtuple", 2, "a:b:c")),
    "namedtuple-empty-name": corrupt(set_node("namedtuple", 2, "")),
    "namedtuple-name-number": corrupt(set_node("namedtuple", 2, 5)),
    "namedtuple-name-null": corrupt(set_node("namedtuple", 2, None)),
    "structseq-is-namedtuple": corrupt(set_node("structsequence", 2, "nodes:Triple")),
    "structseq-unknown": corrupt(set_node("structsequence", 2, "time:no_such_struct")),
    "structseq-plain-class": corrupt(set_node("structsequence", 2, "builtins:object")),
    "factory-not-callable": corrupt(set_node("defaultdict", 4, "math:pi")),
    "factory-unknown": corrupt(set_node("defaultdict", 4, "no_such_module_xyz:f")),
    "factory-number": corrupt(set_node("defaultdict", 4, 7)),
    # Deque maxlen.
    "deque-maxlen-negative": corrupt(set_node("deque", 2, -1)),
    "deque-maxlen-too-small": corrupt(set_node("deque", 2, 0)),
    "deque-maxlen-string": corrupt(set_node("deque", 2, "3")),
    "deque-maxlen-float": corrupt(set_node("deque", 2, 1.5)),
    "deque-maxlen-list": corrupt(set_node("deque", 2, [3])),
    # Not a document, or not JSON at all.
    "list": [],
    "number": 1,
    "null-object": None,
    "text-empty": "",
    "text-truncated": json.dumps(BASE_DOC)[:-5],
    "text-words": "not json at all",
    "text-list": "[]",
    "text-null": "null",
    "text-number": "1",
    "text-string": '"oxtree.treespec"',
    "text-header-only": '{"format": "oxtree.treespec", "version": 1}',
    "text-nan": '{"format": "oxtree.treespec", "version": NaN}',
    "bytes-not-utf8": b"\xff\xfe\x00",
    "bytes-garbage": bytes(range(256)),
    "text-deeply-nested": "[" * 100_000,
    "text-deeply-nested-closed": "[" * 50_000 + "]" * 50_000,
}


@pytest.mark.parametrize("doc", CORRUPTED_DOCS.values(), ids=CORRUPTED_DOCS)
def test_corrupted_json_raises_value_error(doc: Any) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - any ValueError will do, nothing else
        oxtree.treespec_from_json(doc, types=[Coord])
    if isinstance(doc, dict):
        with pytest.raises(ValueError):  # noqa: PT011
            oxtree.treespec_from_json(json.dumps(doc), types=[Coord])


@pytest.mark.parametrize("name", ["insertion-negative", "insertion-strings", "arity-negative"])
def test_json_errors_name_the_node(name: str) -> None:
    """A node that fails its own field check is named by its position, as every other
    node error of the loader is."""
    if name == "arity-negative":
        doc = copy.deepcopy(BASE_DOC)
        doc["nodes"][0][1] = -1
        at = 0
    else:
        doc = CORRUPTED_DOCS[name]
        at = len(doc["nodes"]) - 1
    with pytest.raises(ValueError, match=rf"^invalid PyTreeSpec state: node {at}: ") as info:
        oxtree.treespec_from_json(doc, types=[Coord])
    assert "_Node" not in str(info.value)


def test_base_document_is_valid() -> None:
    """The corrupted documents above differ from a good one in one place each."""
    spec = oxtree.treespec_from_json(json.dumps(BASE_DOC), types=[Coord])
    assert spec == oxtree.tree_structure(BASE_TREE)
    assert_same_tree(
        spec.unflatten(range(spec.num_leaves)),
        optree.tree_unflatten(optree.tree_structure(BASE_TREE), range(spec.num_leaves)),
        copied_keys=True,
    )
    texts = {repr(doc) for doc in CORRUPTED_DOCS.values()}
    assert repr(BASE_DOC) not in texts
    assert len(texts) == len(CORRUPTED_DOCS)


# --------------------------------------------------------------------------------------------------
# Bad pickle states.

L = (1, 0, None, None, None, None, None)  # a leaf
N = (2, 0, None, None, None, None, None)  # None


def node(
    kind: int,
    arity: int,
    data: Any = None,
    keys: Any = None,
    insertion: Any = None,
    custom: Any = None,
    entries: Any = None,
) -> tuple[Any, ...]:
    return (kind, arity, data, keys, insertion, custom, entries)


def state(*nodes: Any, none_is_leaf: Any = False, namespace: Any = "", face: Any = "optree") -> Any:
    return (1, none_is_leaf, namespace, tuple(nodes), face)


GOOD_STATE = state(L, N, node(3, 2))

BAD_STATES: dict[str, Any] = {
    # The outer tuple.
    "not-a-tuple": list(GOOD_STATE),
    "none": None,
    "empty": (),
    "three-fields": GOOD_STATE[:3],
    "six-fields": (*GOOD_STATE, "extra"),
    "version-0": (0, *GOOD_STATE[1:]),
    "version-2": (2, *GOOD_STATE[1:]),
    "version-string": ("1", *GOOD_STATE[1:]),
    "version-negative": (-1, *GOOD_STATE[1:]),
    "none-is-leaf-int": state(L, none_is_leaf=1),
    "none-is-leaf-none": state(L, none_is_leaf=None),
    "namespace-none": state(L, namespace=None),
    "namespace-int": state(L, namespace=5),
    "nodes-list": (1, False, "", [L], "optree"),
    "nodes-empty": state(),
    "face-unknown": state(L, face="numpy"),
    "face-none": state(L, face=None),
    # Single nodes.
    "node-not-a-tuple": state(list(L)),
    "node-six-fields": state(L[:6]),
    "node-eight-fields": state((*L, None)),
    "kind-11": state(node(11, 0)),
    "kind-255": state(node(255, 0)),
    "kind-negative": state(node(-1, 0)),
    "kind-string": state(node("leaf", 0)),
    "kind-none": state(node(None, 0)),
    "arity-negative": state(L, node(3, -1)),
    "arity-string": state(L, node(3, "1")),
    "arity-float": state(L, node(3, 1.0)),
    "arity-huge": state(L, node(3, 2**70)),
    # Arity against the stack.
    "arity-larger-than-stack": state(L, node(3, 2)),
    "first-node-has-children": state(node(4, 1), L),
    "two-roots": state(L, L),
    "three-roots": state(L, N, node(3, 1), L),
    "leaf-with-children": state(L, node(1, 1)),
    "none-with-children": state(L, node(2, 1)),
    # Data and keys where they do not belong.
    "leaf-with-data": state(node(1, 0, data=5)),
    "tuple-with-data": state(L, node(3, 1, data=5)),
    "list-with-keys": state(L, node(4, 1, keys=("a",))),
    "tuple-with-insertion": state(L, node(3, 1, insertion=(0,))),
    "entries-on-a-tuple": state(L, node(3, 1, entries=("a",))),
    "dict-with-data": state(L, node(5, 1, data=list, keys=("a",))),
    # Mappings.
    "dict-without-keys": state(L, node(5, 1)),
    "dict-keys-count-short": state(L, L, node(5, 2, keys=("a",))),
    "dict-keys-count-long": state(L, L, node(5, 2, keys=("a", "b", "c"))),
    "dict-keys-a-list": state(L, node(5, 1, keys=["a"])),
    "dict-keys-a-string": state(L, L, node(5, 2, keys="ab")),
    "dict-keys-repeated": state(L, L, node(5, 2, keys=("a", "a"))),
    "dict-keys-equal-across-types": state(L, L, node(5, 2, keys=(1, 1.0))),
    "dict-key-unhashable": state(L, node(5, 1, keys=([1],))),
    "ordereddict-keys-repeated": state(L, L, node(7, 2, keys=("a", "a"))),
    "defaultdict-keys-repeated": state(L, L, node(8, 2, data=list, keys=("k", "k"))),
    "ordereddict-without-keys": state(L, node(7, 1)),
    "insertion-repeats": state(L, L, node(5, 2, keys=("a", "b"), insertion=(0, 0))),
    "insertion-short": state(L, L, node(5, 2, keys=("a", "b"), insertion=(0,))),
    "insertion-long": state(L, L, node(5, 2, keys=("a", "b"), insertion=(0, 1, 2))),
    "insertion-out-of-range": state(L, L, node(5, 2, keys=("a", "b"), insertion=(0, 2))),
    "insertion-negative": state(L, L, node(5, 2, keys=("a", "b"), insertion=(-1, 0))),
    "insertion-strings": state(L, L, node(5, 2, keys=("a", "b"), insertion=("a", "b"))),
    "insertion-on-ordereddict": state(L, L, node(7, 2, keys=("a", "b"), insertion=(1, 0))),
    # Keys out of sorted order with a separate insertion order, or in a JAX treedef.
    "insertion-with-unsorted-keys": state(L, L, node(5, 2, keys=("b", "a"), insertion=(1, 0))),
    "jax-face-unsorted-keys": state(L, L, node(5, 2, keys=("b", "a")), face="jax"),
    "defaultdict-factory-not-callable": state(L, node(8, 1, data=5, keys=("a",))),
    # Namedtuples and struct sequences.
    "namedtuple-data-not-a-type": state(L, L, node(6, 2, data="Point")),
    "namedtuple-data-none": state(L, L, node(6, 2)),
    "namedtuple-of-tuple": state(L, L, node(6, 2, data=tuple)),
    "namedtuple-of-int": state(node(6, 0, data=int)),
    "namedtuple-of-list": state(L, node(6, 1, data=list)),
    "namedtuple-of-structseq": state(*[L] * 9, node(6, 9, data=time.struct_time)),
    "namedtuple-arity-short": state(L, node(6, 1, data=Coord)),
    "namedtuple-arity-long": state(L, L, L, node(6, 3, data=Coord)),
    "namedtuple-an-instance": state(L, L, node(6, 2, data=Coord(1, 2))),
    "structseq-of-namedtuple": state(L, L, node(10, 2, data=Coord)),
    "structseq-of-tuple": state(L, node(10, 1, data=tuple)),
    "structseq-arity": state(L, L, node(10, 2, data=time.struct_time)),
    "structseq-data-none": state(L, node(10, 1)),
    # Deques.
    "deque-maxlen-negative": state(node(9, 0, data=-1)),
    "deque-maxlen-too-small": state(L, L, node(9, 2, data=1)),
    "deque-maxlen-string": state(L, node(9, 1, data="3")),
    "deque-maxlen-float": state(L, node(9, 1, data=2.0)),
    # Fields a node of its kind does not have.
    "deque-with-keys": state(L, node(9, 1, keys=("a",))),
    "namedtuple-with-keys": state(L, L, node(6, 2, data=Coord, keys=("x", "y"))),
    "tuple-naming-a-type": state(L, node(3, 1, custom=tuple)),
    "dict-naming-a-type": state(L, node(5, 1, keys=("a",), custom=dict)),
    # Dict key orders no walk makes: an insertion order equal to the sorted one (a walk
    # records none), one on a JAX treedef (JAX sorts), and a walk in and out of optree's
    # dict_insertion_ordered mode at once (keys kept unsorted beside keys sorted apart).
    "dict-identity-insertion": state(L, L, node(5, 2, keys=("a", "b"), insertion=(0, 1))),
    "jax-face-dict-insertion": state(
        L, L, node(5, 2, keys=("a", "b"), insertion=(1, 0)), face="jax"
    ),
    "dict-modes-mixed": state(
        L,
        L,
        node(5, 2, keys=("b", "a")),
        L,
        L,
        node(5, 2, keys=("a", "b"), insertion=(1, 0)),
        node(3, 2),
    ),
    # Custom nodes.
    "custom-without-type": state(node(0, 0)),
    "custom-type-not-a-type": state(node(0, 0, custom="Crate")),
    "custom-unregistered": state(node(0, 0, custom=Unregistered)),
    "custom-other-namespace": state(L, node(0, 1, data=1, custom=Crate), namespace=""),
    "custom-entries-wrong-length": state(
        L, node(0, 1, data=1, custom=Crate, entries=(0, 1)), namespace=NAMESPACE
    ),
    "custom-entries-not-a-tuple": state(
        L, node(0, 1, data=1, custom=Crate, entries=[0]), namespace=NAMESPACE
    ),
    # Faces and none_is_leaf.
    "jax-face-none-is-leaf": state(L, none_is_leaf=True, face="jax"),
    "jax-face-deque": state(L, node(9, 1), face="jax"),
    "jax-face-structseq": state(*[L] * 9, node(10, 9, data=time.struct_time), face="jax"),
    "none-node-when-none-is-leaf": state(N, none_is_leaf=True),
    "none-child-when-none-is-leaf": state(L, N, node(3, 2), none_is_leaf=True),
}


@pytest.mark.parametrize("bad", BAD_STATES.values(), ids=BAD_STATES)
def test_bad_pickle_state_raises_value_error(bad: Any) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - any ValueError will do, nothing else
        _rebuild_treespec(bad)


def test_good_states_load() -> None:
    """The bad states above are near misses of states like these."""
    good = {
        "tuple": (GOOD_STATE, (1, None)),
        "four-fields": (GOOD_STATE[:4], (1, None)),
        "dict": (state(L, L, node(5, 2, keys=("a", "b"), insertion=(1, 0))), {"b": 2, "a": 1}),
        "ordereddict": (state(L, L, node(7, 2, keys=("b", "a"))), OrderedDict(b=1, a=2)),
        "defaultdict": (state(L, node(8, 1, data=list, keys=("k",))), defaultdict(list, k=1)),
        "namedtuple": (state(L, L, node(6, 2, data=Coord)), Coord(1, 2)),
        "deque": (state(L, node(9, 1, data=1)), deque([1], maxlen=1)),
        "custom": (
            state(L, node(0, 1, data=1, custom=Crate), namespace=NAMESPACE),
            None,
        ),
        "none-is-leaf": (state(L, L, node(4, 2), none_is_leaf=True), [1, 2]),
    }
    for name, (good_state, tree) in good.items():
        spec = _rebuild_treespec(good_state)
        assert type(spec) is oxtree.PyTreeSpec, name
        if tree is not None:
            nil = good_state[1]
            assert spec == oxtree.tree_structure(tree, none_is_leaf=nil), name
            assert repr(spec) == repr(optree.tree_structure(tree, none_is_leaf=nil)), name


# States that might be accepted, but then must describe a treespec that flattening could have
# produced: the structure of what it unflattens to is the treespec itself.
DOUBTFUL_STATES: dict[str, Any] = {
    "deque-maxlen-bool": state(L, node(9, 1, data=True)),
    "arity-bool": state(L, node(3, True)),
    "version-bool": (True, *GOOD_STATE[1:]),
    "insertion-bools": state(L, L, node(5, 2, keys=("a", "b"), insertion=(True, False))),
}


@pytest.mark.parametrize("doubtful", DOUBTFUL_STATES.values(), ids=DOUBTFUL_STATES)
def test_accepted_states_are_self_consistent(doubtful: Any) -> None:
    try:
        spec = _rebuild_treespec(doubtful)
    except ValueError as error:  # rejecting is fine
        message = str(error)
    else:
        message = None
    if message is not None:
        assert "invalid PyTreeSpec state" in message
        return
    tree = spec.unflatten(range(spec.num_leaves))
    again = oxtree.tree_structure(tree, none_is_leaf=spec.none_is_leaf)
    assert again == spec, (spec, again)
    assert repr(again) == repr(spec)
    assert pickle.loads(pickle.dumps(spec)) == spec


# Keys out of sorted order and no separate insertion order: what a walk in optree's
# `dict_insertion_ordered` mode makes. Such states load, and describe what that walk makes.
UNSORTED_STATES: dict[str, tuple[Any, Any]] = {
    "dict": (state(L, L, node(5, 2, keys=("b", "a"))), {"b": 0, "a": 1}),
    "defaultdict": (
        state(L, L, node(8, 2, data=int, keys=(2, 1))),
        defaultdict(int, {2: 0, 1: 1}),
    ),
}


@pytest.mark.parametrize(("unsorted", "tree"), UNSORTED_STATES.values(), ids=UNSORTED_STATES)
def test_insertion_ordered_states_load(unsorted: Any, tree: Any) -> None:
    spec = _rebuild_treespec(unsorted)
    assert spec.unflatten(range(spec.num_leaves)) == tree
    assert list(spec.unflatten(range(spec.num_leaves))) == list(tree)
    with oxtree.dict_insertion_ordered(True):
        assert oxtree.tree_structure(tree) == spec
    assert oxtree.tree_structure(tree) != spec


@pytest.mark.parametrize("namespace", ["", NAMESPACE])
@pytest.mark.parametrize(
    "tree", [{"b": (2, 3), "a": 1, "d": {"f": 4, "e": None}}, {"a": {"c": 1, "b": 2}}]
)
def test_pickle_round_trip_insertion_ordered(namespace: str, tree: Any) -> None:
    """Treespecs made in `dict_insertion_ordered` mode load back, as optree's do."""
    with oxtree.dict_insertion_ordered(True, namespace=namespace):
        spec = oxtree.tree_structure(tree, namespace=namespace)
    with optree.dict_insertion_ordered(
        True, namespace=namespace or optree.registry.__GLOBAL_NAMESPACE
    ):
        expected = optree.tree_structure(tree, namespace=namespace)
    loaded = pickle.loads(pickle.dumps(spec))
    assert loaded == spec
    assert repr(loaded) == repr(spec)
    rebuilt = loaded.unflatten(range(loaded.num_leaves))
    assert rebuilt == expected.unflatten(range(expected.num_leaves))
    assert list(rebuilt) == list(expected.unflatten(range(expected.num_leaves)))
