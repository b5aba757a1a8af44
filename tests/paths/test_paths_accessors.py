"""Accessors: `tree_accessors`, `tree_flatten_with_accessor`, `tree_map_with_accessor`,
`PyTreeSpec.accessors()` and the `PyTreeAccessor` / `PyTreeEntry` classes, compared with optree
over the corpus, plus the properties every accessor must have: called on the tree it returns the
very leaf, and its `codify()` source evaluates to that leaf.
"""

from __future__ import annotations

import copy
import itertools
import pickle
from collections import OrderedDict, defaultdict, deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import optree
import oxtree
import pytest
from helpers import (
    CORPUS,
    HYPOTHESIS_SETTINGS,
    NONE_IS_LEAF_OPTIONS,
    TREES,
    assert_same_leaves,
    assert_same_tree,
    parametrize,
    trees,
)
from hypothesis import given
from hypothesis import strategies as st
from nodes import Opaque, Point, Rec

ENTRY_CLASS_NAMES = (
    "PyTreeEntry",
    "GetItemEntry",
    "SequenceEntry",
    "MappingEntry",
    "NamedTupleEntry",
    "StructSequenceEntry",
    "GetAttrEntry",
    "DataclassEntry",
    "FlattenedEntry",
    "AutoEntry",
)
ENTRY_CLASSES = tuple(getattr(oxtree, name) for name in ENTRY_CLASS_NAMES)

_counter = itertools.count()


def assert_entry_matches_optree(ours: Any, theirs: Any) -> None:
    assert isinstance(ours, oxtree.PyTreeEntry)
    assert type(ours).__name__ == type(theirs).__name__, (ours, theirs)
    assert type(ours) is getattr(oxtree, type(theirs).__name__)
    assert ours.entry is theirs.entry or (
        type(ours.entry) is type(theirs.entry) and ours.entry == theirs.entry
    )
    assert ours.type is theirs.type
    assert ours.kind.name == theirs.kind.name
    assert int(ours.kind) == int(theirs.kind)
    assert repr(ours) == repr(theirs)
    assert ours.codify("node") == theirs.codify("node")
    for attr in ("index", "key", "field", "name"):
        if hasattr(theirs, attr):
            assert getattr(ours, attr) == getattr(theirs, attr), attr


def assert_accessors_match_optree(ours: Any, theirs: list[Any]) -> None:
    assert type(ours) is list
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs, strict=True):
        assert type(a) is oxtree.PyTreeAccessor
        assert repr(a) == repr(b)
        assert a.codify() == b.codify()
        assert a.codify("obj") == b.codify("obj")
        assert a.codify("") == b.codify("")
        assert a.path == b.path
        assert [type(x) for x in a.path] == [type(x) for x in b.path]
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert_entry_matches_optree(x, y)


# --------------------------------------------------------------------------------------------------
# The corpus, against optree.


@parametrize(tree=TREES, none_is_leaf=NONE_IS_LEAF_OPTIONS)
def test_accessors_match_optree(tree: Any, none_is_leaf: bool) -> None:
    accessors, leaves, spec = oxtree.tree_flatten_with_accessor(tree, none_is_leaf=none_is_leaf)
    their_accessors, their_leaves, their_spec = optree.tree_flatten_with_accessor(
        tree, none_is_leaf=none_is_leaf
    )
    assert_accessors_match_optree(accessors, their_accessors)
    assert_same_leaves(leaves, their_leaves)
    assert repr(spec) == repr(their_spec)
    assert_accessors_match_optree(
        oxtree.tree_accessors(tree, none_is_leaf=none_is_leaf), their_accessors
    )
    assert_accessors_match_optree(spec.accessors(), their_spec.accessors())
    assert [a.path for a in accessors] == oxtree.tree_paths(tree, none_is_leaf=none_is_leaf)


@parametrize(tree=TREES, none_is_leaf=NONE_IS_LEAF_OPTIONS)
def test_tree_map_with_accessor_matches_optree(tree: Any, none_is_leaf: bool) -> None:
    ours_seen: list[str] = []
    their_seen: list[str] = []

    def recorder(seen: list[str]) -> Callable[..., Rec]:
        def func(accessor: Any, *xs: Any) -> Rec:
            seen.append(repr(accessor))
            return Rec(*xs)

        return func

    rest = optree.tree_map(lambda x: Opaque("rest"), tree, none_is_leaf=none_is_leaf)
    ours = oxtree.tree_map_with_accessor(recorder(ours_seen), tree, rest, none_is_leaf=none_is_leaf)
    theirs = optree.tree_map_with_accessor(
        recorder(their_seen), tree, rest, none_is_leaf=none_is_leaf
    )
    assert_same_tree(ours, theirs)
    assert ours_seen == their_seen


def test_examples() -> None:
    tree = {"b": [1, Point(x=2, y=(3,))], "a": None}
    accessors = oxtree.tree_accessors(tree)
    assert [a.codify("t") for a in accessors] == ["t['b'][0]", "t['b'][1].x", "t['b'][1].y[0]"]
    assert [a.path for a in accessors] == [("b", 0), ("b", 1, 0), ("b", 1, 1, 0)]
    assert repr(accessors[1]) == (
        "PyTreeAccessor(*['b'][1].x, (MappingEntry(key='b', type=<class 'dict'>), "
        "SequenceEntry(index=1, type=<class 'list'>), "
        "NamedTupleEntry(field='x', type=<class 'nodes.Point'>)))"
    )
    assert oxtree.tree_accessors(5) == [oxtree.PyTreeAccessor()]
    assert repr(oxtree.tree_accessors(5)[0]) == "PyTreeAccessor(*, ())"
    assert oxtree.tree_accessors(None) == []
    assert oxtree.tree_accessors(None, none_is_leaf=True)[0].path == ()
    assert oxtree.tree_accessors(tree, none_is_leaf=True)[0].codify() == "*['a']"


def test_is_leaf_accessors_match_optree() -> None:
    tree = {"a": [(1, 2), [3, (4, 5)]], "b": Point((6,), None)}

    def is_leaf(x: Any) -> bool:
        return type(x) is tuple

    for none_is_leaf in NONE_IS_LEAF_OPTIONS:
        ours = oxtree.tree_accessors(tree, is_leaf, none_is_leaf=none_is_leaf)
        theirs = optree.tree_accessors(tree, is_leaf, none_is_leaf=none_is_leaf)
        assert_accessors_match_optree(ours, theirs)
        assert all(a(tree) is b(tree) for a, b in zip(ours, theirs, strict=True))


@HYPOTHESIS_SETTINGS
@given(tree=trees(), none_is_leaf=st.booleans())
def test_random_trees_accessors_match_optree(tree: Any, none_is_leaf: bool) -> None:
    ours = oxtree.tree_accessors(tree, none_is_leaf=none_is_leaf)
    theirs = optree.tree_accessors(tree, none_is_leaf=none_is_leaf)
    assert_accessors_match_optree(ours, theirs)


# --------------------------------------------------------------------------------------------------
# Properties: an accessor fetches its leaf, and its code does too.


def assert_accessors_fetch_leaves(tree: Any, none_is_leaf: bool, namespace: str = "") -> None:
    accessors, leaves, _ = oxtree.tree_flatten_with_accessor(
        tree, none_is_leaf=none_is_leaf, namespace=namespace
    )
    assert len(accessors) == len(leaves)
    for accessor, leaf in zip(accessors, leaves, strict=True):
        assert accessor(tree) is leaf, accessor


# Globals that the reprs of corpus dict keys need when their code is evaluated.
EVAL_GLOBALS = {"Opaque": Opaque}


def assert_code_fetches_leaves(tree: Any, none_is_leaf: bool) -> None:
    accessors, leaves, _ = oxtree.tree_flatten_with_accessor(tree, none_is_leaf=none_is_leaf)
    for accessor, leaf in zip(accessors, leaves, strict=True):
        code = accessor.codify("obj")
        assert eval(code, {**EVAL_GLOBALS, "obj": tree}) is leaf, code


@parametrize(tree=TREES, none_is_leaf=NONE_IS_LEAF_OPTIONS)
def test_accessor_fetches_its_leaf(tree: Any, none_is_leaf: bool) -> None:
    assert_accessors_fetch_leaves(tree, none_is_leaf)


@parametrize(tree=TREES)
def test_accessors_pickle_and_copy(tree: Any) -> None:
    accessors = oxtree.tree_accessors(tree, none_is_leaf=True)
    for clone in (pickle.loads(pickle.dumps(accessors)), copy.deepcopy(accessors)):
        assert clone == accessors
        assert [repr(a) for a in clone] == [repr(a) for a in accessors]
        assert all(type(a) is oxtree.PyTreeAccessor for a in clone)
        assert [hash(a) for a in clone] == [hash(a) for a in accessors]


@parametrize(tree=TREES, none_is_leaf=NONE_IS_LEAF_OPTIONS)
def test_codified_accessor_fetches_its_leaf(tree: Any, none_is_leaf: bool) -> None:
    assert_code_fetches_leaves(tree, none_is_leaf)


@HYPOTHESIS_SETTINGS
@given(tree=trees(), none_is_leaf=st.booleans())
def test_random_trees_accessors_and_code_fetch_leaves(tree: Any, none_is_leaf: bool) -> None:
    assert_accessors_fetch_leaves(tree, none_is_leaf)
    assert_code_fetches_leaves(tree, none_is_leaf)


@pytest.mark.parametrize("name", ["struct_time", "stat_result", "stat_in_list", "mixed"])
def test_struct_sequence_fields_are_codified_like_optree(name: str) -> None:
    tree = CORPUS[name]
    ours = [a.codify("obj") for a in oxtree.tree_accessors(tree)]
    theirs = [a.codify("obj") for a in optree.tree_accessors(tree)]
    assert ours == theirs
    assert any(".tm_" in code or ".st_" in code for code in ours)


# --------------------------------------------------------------------------------------------------
# Registered classes.


class Registry:
    """Registrations in a namespace of this test's own, removed again when the test ends."""

    def __init__(self) -> None:
        self.namespace = f"oxtree-accessors-{next(_counter)}"
        self.made: list[tuple[Any, type]] = []

    def node(self, lib: Any, cls: type, *args: Any, **kwargs: Any) -> type:
        lib.register_pytree_node(cls, *args, namespace=self.namespace, **kwargs)
        return self.track(lib, cls)

    def track(self, lib: Any, cls: type) -> type:
        self.made.append((lib, cls))
        return cls

    def cleanup(self) -> None:
        for lib, cls in reversed(self.made):
            lib.unregister_pytree_node(cls, namespace=self.namespace)


@pytest.fixture
def registry() -> Iterator[Registry]:
    made = Registry()
    yield made
    made.cleanup()


def make_node_class() -> type:
    class Node:
        def __init__(self, a: Any, b: Any) -> None:
            self.a, self.b = a, b

    return Node


def make_mapping_class() -> type:
    class Table(Mapping):
        def __init__(self, data: dict[Any, Any]) -> None:
            self.data = data

        def __getitem__(self, key: Any) -> Any:
            return self.data[key]

        def __iter__(self) -> Iterator[Any]:
            return iter(self.data)

        def __len__(self) -> int:
            return len(self.data)

    return Table


def make_sequence_class() -> type:
    class Row(Sequence):
        def __init__(self, *items: Any) -> None:
            self.items = items

        def __getitem__(self, index: Any) -> Any:
            return self.items[index]

        def __len__(self) -> int:
            return len(self.items)

    return Row


def test_registered_node_gets_flattened_entries(registry: Registry) -> None:
    cls = make_node_class()
    for lib in (oxtree, optree):
        registry.node(lib, cls, lambda n: ((n.a, n.b), None), lambda aux, ch: cls(*ch))
    tree = {"n": cls(1, [cls(2, 3)])}
    ns = registry.namespace
    ours = oxtree.tree_accessors(tree, namespace=ns)
    assert_accessors_match_optree(ours, optree.tree_accessors(tree, namespace=ns))
    assert ours[0].codify("t") == "t['n'][<flat index 0>]"
    assert type(ours[0][1]) is oxtree.FlattenedEntry


def test_registered_node_with_entries(registry: Registry) -> None:
    cls = make_node_class()
    for lib in (oxtree, optree):
        registry.node(
            lib, cls, lambda n: ((n.a, n.b), None, ("left", "right")), lambda aux, ch: cls(*ch)
        )
    tree = [cls({"k": 1}, 2)]
    ns = registry.namespace
    ours = oxtree.tree_accessors(tree, namespace=ns)
    assert_accessors_match_optree(ours, optree.tree_accessors(tree, namespace=ns))
    assert [a.path for a in ours] == [(0, "left", "k"), (0, "right")]


def test_accessor_of_a_namespaced_node_fetches_its_leaf(registry: Registry) -> None:
    cls = make_node_class()
    registry.node(oxtree, cls, lambda n: ((n.a, n.b), None), lambda aux, ch: cls(*ch))
    assert_accessors_fetch_leaves([cls(1, {"k": cls(2, None)})], False, registry.namespace)


def test_accessor_of_a_global_node_fetches_its_leaf() -> None:
    cls = make_node_class()
    oxtree.register_pytree_node(cls, lambda n: ((n.a, n.b), None), lambda aux, ch: cls(*ch))
    try:
        tree = [cls(1, {"k": cls(2, (3,))})]
        assert_accessors_fetch_leaves(tree, False)
        assert_accessors_fetch_leaves(tree, True)
    finally:
        oxtree.unregister_pytree_node(cls)


def test_registered_mapping_gets_mapping_entries_like_optree(registry: Registry) -> None:
    cls = make_mapping_class()
    for lib in (oxtree, optree):
        registry.node(
            lib,
            cls,
            lambda m: (list(m.data.values()), tuple(m.data), tuple(m.data)),
            lambda keys, ch: cls(dict(zip(keys, ch, strict=True))),
        )
    tree = cls({"u": 1, "v": [2]})
    ns = registry.namespace
    assert_accessors_match_optree(
        oxtree.tree_accessors(tree, namespace=ns), optree.tree_accessors(tree, namespace=ns)
    )
    assert_accessors_fetch_leaves(tree, False, ns)


def test_registered_sequence_gets_sequence_entries_like_optree(registry: Registry) -> None:
    cls = make_sequence_class()
    for lib in (oxtree, optree):
        registry.node(lib, cls, lambda r: (r.items, None), lambda aux, ch: cls(*ch))
    tree = cls(1, [2])
    ns = registry.namespace
    assert_accessors_match_optree(
        oxtree.tree_accessors(tree, namespace=ns), optree.tree_accessors(tree, namespace=ns)
    )
    assert_accessors_fetch_leaves(tree, False, ns)


def make_dataclass_in(lib: Any, namespace: str) -> type:
    @lib.dataclasses.dataclass(namespace=namespace)
    class Data:
        weight: Any
        name: str = lib.dataclasses.field(default="d", pytree_node=False)
        bias: Any = None

    return Data


@parametrize(none_is_leaf=NONE_IS_LEAF_OPTIONS)
def test_dataclass_entries_match_optree(none_is_leaf: bool, registry: Registry) -> None:
    ns = registry.namespace
    ours_cls = registry.track(oxtree, make_dataclass_in(oxtree, ns))
    their_cls = registry.track(optree, make_dataclass_in(optree, ns))

    def build(cls: type) -> Any:
        return {"layer": cls(weight=[1, 2], bias=cls(weight=None)), "rest": (cls(3, bias=4),)}

    ours = oxtree.tree_accessors(build(ours_cls), none_is_leaf=none_is_leaf, namespace=ns)
    theirs = optree.tree_accessors(build(their_cls), none_is_leaf=none_is_leaf, namespace=ns)
    # Both classes are `make_dataclass_in.<locals>.Data`: their reprs agree too.
    assert [repr(a) for a in ours] == [repr(a) for a in theirs]
    assert [a.codify("o") for a in ours] == [a.codify("o") for a in theirs]
    for a, b in zip(ours, theirs, strict=True):
        assert [type(e).__name__ for e in a] == [type(e).__name__ for e in b]
        assert a.path == b.path
    assert "o['layer'].bias.weight" in [a.codify("o") for a in ours] or none_is_leaf is False
    assert any(type(e) is oxtree.DataclassEntry for a in ours for e in a)
    assert_accessors_fetch_leaves(build(ours_cls), none_is_leaf, ns)
    tree = build(ours_cls)
    for accessor in oxtree.tree_accessors(tree, none_is_leaf=none_is_leaf, namespace=ns):
        assert eval(accessor.codify("obj"), {"obj": tree}) is accessor(tree)


def test_register_dataclass_gets_dataclass_entries() -> None:
    import dataclasses

    @dataclasses.dataclass
    class Plain:
        second: Any
        first: Any

    oxtree.register_dataclass(Plain)
    try:
        accessors = oxtree.tree_accessors([Plain(1, (2,))])
        assert [a.codify("o") for a in accessors] == ["o[0].second", "o[0].first[0]"]
        assert type(accessors[0][1]) is oxtree.DataclassEntry
        assert accessors[0][1].field == "second"
        assert repr(accessors[0][1]).startswith("DataclassEntry(field='second', type=<class ")
    finally:
        oxtree.unregister_pytree_node(Plain)


# --------------------------------------------------------------------------------------------------
# The classes themselves.


def test_entry_class_hierarchy_matches_optree() -> None:
    for a, b in itertools.product(ENTRY_CLASS_NAMES, repeat=2):
        assert issubclass(getattr(oxtree, a), getattr(oxtree, b)) == issubclass(
            getattr(optree, a), getattr(optree, b)
        ), (a, b)
    assert oxtree.accessors.PyTreeAccessor is oxtree.PyTreeAccessor
    assert issubclass(oxtree.PyTreeAccessor, tuple)


ENTRY_SAMPLES = [
    ("SequenceEntry", 1, list, "LIST"),
    ("SequenceEntry", 0, tuple, "TUPLE"),
    ("SequenceEntry", 2, deque, "DEQUE"),
    ("MappingEntry", "k", dict, "DICT"),
    ("MappingEntry", (1, "z"), OrderedDict, "ORDEREDDICT"),
    ("MappingEntry", None, defaultdict, "DEFAULTDICT"),
    ("NamedTupleEntry", 1, Point, "NAMEDTUPLE"),
    ("GetAttrEntry", "attr", object, "CUSTOM"),
    ("FlattenedEntry", 3, object, "CUSTOM"),
    ("GetItemEntry", "g", dict, "DICT"),
]


@pytest.mark.parametrize(("name", "entry", "typ", "kind"), ENTRY_SAMPLES)
def test_entries_built_by_hand_match_optree(name: str, entry: Any, typ: type, kind: str) -> None:
    ours = getattr(oxtree, name)(entry, typ, oxtree.PyTreeKind[kind])
    theirs = getattr(optree, name)(entry, typ, optree.PyTreeKind[kind])
    assert_entry_matches_optree(ours, theirs)
    assert ours == getattr(oxtree, name)(entry, typ, oxtree.PyTreeKind[kind])
    assert hash(ours) == hash(getattr(oxtree, name)(entry, typ, oxtree.PyTreeKind[kind]))
    back = pickle.loads(pickle.dumps(ours))
    assert type(back) is type(ours)
    assert back == ours
    assert copy.deepcopy(ours) == ours
    with pytest.raises(AttributeError):
        ours.entry = "other"


def test_entries_of_different_classes_differ() -> None:
    seq = oxtree.SequenceEntry(0, list, oxtree.PyTreeKind.LIST)
    item = oxtree.GetItemEntry(0, list, oxtree.PyTreeKind.LIST)
    assert seq != item
    assert seq != oxtree.SequenceEntry(1, list, oxtree.PyTreeKind.LIST)
    assert seq != oxtree.SequenceEntry(0, tuple, oxtree.PyTreeKind.TUPLE)
    assert seq([5, 6]) == item([5, 6]) == 5


def test_auto_entry_for_custom_nodes_matches_optree() -> None:
    import dataclasses

    @dataclasses.dataclass
    class DC:
        x: Any

    Row = make_sequence_class()
    Table = make_mapping_class()
    for entry, typ in [
        ("x", DC),
        (0, Row),
        ("k", Table),
        (0, object),
        (1, Point),
        (0, type(CORPUS["struct_time"])),
    ]:
        ours = oxtree.AutoEntry(entry, typ, oxtree.PyTreeKind.CUSTOM)
        theirs = optree.AutoEntry(entry, typ, optree.PyTreeKind.CUSTOM)
        assert type(ours).__name__ == type(theirs).__name__, typ
        assert repr(ours) == repr(theirs)


def test_accessor_construction_and_tuple_behaviour() -> None:
    tree = {"a": [1, (2, 3)]}
    acc = oxtree.tree_accessors(tree)[2]
    assert isinstance(acc, tuple)
    assert len(acc) == 3
    assert type(acc[0]) is oxtree.MappingEntry
    assert type(acc[-1]) is oxtree.SequenceEntry
    head = acc[:2]
    assert type(head) is oxtree.PyTreeAccessor
    assert head(tree) is tree["a"][1]
    assert head.codify() == "*['a'][1]"
    joined = head + acc[2]
    assert type(joined) is oxtree.PyTreeAccessor
    assert joined == acc
    assert hash(joined) == hash(acc)
    assert oxtree.PyTreeAccessor(list(acc)) == acc
    assert oxtree.PyTreeAccessor()(tree) is tree
    assert pickle.loads(pickle.dumps(acc)) == acc
    assert type(pickle.loads(pickle.dumps(acc))) is oxtree.PyTreeAccessor
    assert copy.deepcopy(acc) == acc
    with pytest.raises(TypeError):
        oxtree.PyTreeAccessor([("a",)])
    with pytest.raises(TypeError):
        optree.PyTreeAccessor([("a",)])


# API details where optree defines the behaviour of a drop-in.


def test_accessor_repetition_is_an_accessor_like_optree() -> None:
    acc = oxtree.tree_accessors([[1]])[0][:1]
    theirs = optree.tree_accessors([[1]])[0][:1]
    assert type(theirs * 2) is optree.PyTreeAccessor
    assert type(acc * 2) is oxtree.PyTreeAccessor
    assert type(2 * acc) is oxtree.PyTreeAccessor
    assert (acc * 2)([[1]]) == 1
    assert repr(acc * 2) == repr(theirs * 2)


def test_entry_plus_entry_is_an_accessor_like_optree() -> None:
    first = oxtree.MappingEntry("a", dict, oxtree.PyTreeKind.DICT)
    second = oxtree.SequenceEntry(0, list, oxtree.PyTreeKind.LIST)
    their_first = optree.MappingEntry("a", dict, optree.PyTreeKind.DICT)
    their_second = optree.SequenceEntry(0, list, optree.PyTreeKind.LIST)
    assert (
        repr(their_first + their_second)
        == "PyTreeAccessor(*['a'][0], (MappingEntry(key='a', type=<class 'dict'>), SequenceEntry(index=0, type=<class 'list'>)))"
    )
    joined = first + second
    assert type(joined) is oxtree.PyTreeAccessor
    assert repr(joined) == repr(their_first + their_second)
    assert repr(first + oxtree.PyTreeAccessor((second,))) == repr(
        their_first + optree.PyTreeAccessor((their_second,))
    )
    assert joined({"a": [7]}) == 7


def test_accessor_is_not_equal_to_a_plain_tuple_like_optree() -> None:
    acc = oxtree.tree_accessors({"a": 1})[0]
    theirs = optree.tree_accessors({"a": 1})[0]
    assert theirs != tuple(theirs)
    assert acc != tuple(acc)
    assert oxtree.PyTreeAccessor() != ()


@pytest.mark.parametrize("kind", ["LEAF", "NONE"])
def test_entries_for_leaves_and_none_are_refused_like_optree(kind: str) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 (optree's messages are not part of the API)
        optree.SequenceEntry(0, list, optree.PyTreeKind[kind])
    with pytest.raises(ValueError):  # noqa: PT011
        oxtree.SequenceEntry(0, list, oxtree.PyTreeKind[kind])
