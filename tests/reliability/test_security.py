"""Untrusted input never runs code, never aborts, never loads as a different tree.

- JSON documents are data: loading one imports no module and calls nothing it names; classes
  and default factories come from an allow-list (builtins plus what the caller passes).
- Sizes that come from the input are checked: a composition too large to allocate raises
  MemoryError (each probe that could abort runs in a subprocess).
- Constructors reject impossible treespecs (None with children, repeated keys, wrong counts).
- A pickled state is checked against the current registration of each type: a state that
  loads flattens back to the same treespec (hand-made cases and a hypothesis property).
- Rebuilding a namedtuple is what calling its class does, even after its ``__new__`` changed
  in place.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import pickle
import subprocess
import sys
import textwrap
from collections import OrderedDict, defaultdict, deque
from typing import Any

import optree
import oxtree
import oxtree.tree_util as jtu
import pytest
from helpers import trees
from hypothesis import given, settings
from hypothesis import strategies as st
from nodes import Point
from oxtree._core import _rebuild_treespec

NAMESPACE = "test_security"


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    """Runs `code` in a fresh interpreter: a probe that could abort cannot take pytest down."""
    return subprocess.run(
        [sys.executable, "-X", "dev", "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def assert_clean_exit(proc: subprocess.CompletedProcess[str], expected: str) -> None:
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "PanicException" not in proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == expected, proc.stdout + proc.stderr[-2000:]


# --------------------------------------------------------------------------------------------------
# JSON: data only.


def json_doc(*nodes: list[Any], namespace: str = "") -> dict[str, Any]:
    return {
        "format": "oxtree.treespec",
        "version": 1,
        "none_is_leaf": False,
        "namespace": namespace,
        "nodes": list(nodes),
    }


HOSTILE_NAMES = [
    "os:abort",
    "os:getpid",
    "os:system",
    "builtins:print",
    "builtins:eval",
    "this:s",
    "antigravity:geohash",
    "subprocess:Popen",
    "collections:namedtuple",
    "oxtree._core:_rebuild_treespec",
    "nodes.do_not_import:X",
]


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_json_names_are_never_imported_or_called(name: str) -> None:
    """Every place a document names an object; run where importing would show."""
    proc = run_python(
        f"""
        import sys, oxtree, oxtree.serialization
        name = {name!r}
        docs = [
            {{"nodes": [["leaf", 0], ["defaultdict", 1, ["a"], None, name]]}},
            {{"nodes": [["leaf", 0], ["leaf", 0], ["namedtuple", 2, name]]}},
            {{"nodes": [["leaf", 0], ["structsequence", 1, name]]}},
            {{"nodes": [["defaultdict", 0, [], None, name]]}},
        ]
        load = oxtree.treespec_from_json  # the lazy attribute imports importlib
        before = set(sys.modules)
        outcomes = []
        for doc in docs:
            doc.update(format="oxtree.treespec", version=1, none_is_leaf=False, namespace="")
            try:
                spec = load(doc)
                spec.unflatten([0] * spec.num_leaves)["missing"]
                outcomes.append("loaded")
            except ValueError as e:
                outcomes.append("ValueError" if repr(name) in str(e) else str(e))
        new = sorted(set(sys.modules) - before)
        print(new)
        print(outcomes)
        """
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    new_modules, outcomes = proc.stdout.strip().splitlines()[-2:]
    assert new_modules == "[]"
    assert outcomes == str(["ValueError"] * 4)


def test_json_allow_list_from_the_caller() -> None:
    tree = {"p": Point(1, 2), "d": defaultdict(make_zero, a=1), "l": defaultdict(list)}
    spec = oxtree.tree_structure(tree)
    text = json.dumps(spec.to_json())
    with pytest.raises(ValueError, match=r"is not a known"):
        oxtree.treespec_from_json(text)
    with pytest.raises(ValueError, match=r"'test_security:make_zero' is not a known default"):
        oxtree.treespec_from_json(text, types=[Point])
    with pytest.raises(ValueError, match=r"'nodes:Point' is not a known namedtuple class"):
        oxtree.treespec_from_json(text, factories=[make_zero])
    # Objects matched by their own names, or a mapping from names to objects.
    assert oxtree.treespec_from_json(text, types=[Point], factories=[make_zero]) == spec
    loaded = oxtree.treespec_from_json(
        text, types={"nodes:Point": Point}, factories={"test_security:make_zero": make_zero}
    )
    assert loaded == spec
    assert loaded.unflatten([1, 2, 3])["d"].default_factory is make_zero


def test_json_builtin_allow_list() -> None:
    """Builtin factories and the standard library's struct sequences need no allow-list."""
    import time

    for factory in (list, dict, set, int, float, str, tuple, frozenset, bytes, bool):
        spec = oxtree.tree_structure([defaultdict(factory, a=1), time.gmtime(0)])
        assert oxtree.treespec_from_json(json.dumps(spec.to_json())) == spec


def test_json_allow_list_arguments_are_checked() -> None:
    doc = json_doc(["leaf", 0])
    with pytest.raises(TypeError, match="types must be an iterable or a mapping"):
        oxtree.treespec_from_json(doc, types=5)
    with pytest.raises(TypeError, match="types must be an iterable or a mapping"):
        oxtree.treespec_from_json(doc, types="nodes:Point")
    with pytest.raises(TypeError, match="has no name to match"):
        oxtree.treespec_from_json(doc, factories=[lambda: 0])
    with pytest.raises(TypeError, match="names in factories must be str"):
        oxtree.treespec_from_json(doc, factories={1: list})


def test_json_allowed_type_must_still_fit() -> None:
    """An allowed class is checked like a pickled one: the arity, the kind."""
    doc = json_doc(["leaf", 0], ["namedtuple", 1, "nodes:Point"])
    with pytest.raises(ValueError, match="does not fit a NamedTuple node of arity 1"):
        oxtree.treespec_from_json(doc, types=[Point])
    doc = json_doc(["leaf", 0], ["defaultdict", 1, ["a"], None, "m:f"])
    with pytest.raises(ValueError, match="factory must be callable"):
        oxtree.treespec_from_json(doc, factories={"m:f": 5})


def make_zero() -> int:
    return 0


# --------------------------------------------------------------------------------------------------
# Sizes from the input.


@pytest.mark.parametrize(
    "code",
    [
        "a = oxtree.tree_structure([0] * 200_000)\na.compose(a)",
        "a = oxtree.tree_structure([0, 0])\nfor _ in range(8): a = a.compose(a)",
        "a = oxtree.tree_util.tree_structure([0] * 200_000)\na.compose(a)",
        "a = oxtree.tree_structure([0] * 100_000)\n"
        "oxtree.tree_structure([0] * 100_000)._graft([a] * 100_000)",
        "a = oxtree.tree_structure([0] * 100_000)\noxtree.treespec_list([a] * 100_000)",
    ],
    ids=["compose", "compose-squared", "compose-jax", "graft", "treespec_list"],
)
def test_huge_results_raise_memory_error(code: str) -> None:
    body = textwrap.indent(code, "    ")
    proc = run_python(
        f"import oxtree, oxtree.tree_util\ntry:\n{body}\n    print('built')\n"
        "except MemoryError as e:\n    print('MemoryError' if 'nodes' in str(e) else e)\n"
    )
    assert_clean_exit(proc, "MemoryError")


def test_compose_still_composes() -> None:
    outer = oxtree.tree_structure([0, (0, None)])
    inner = oxtree.tree_structure({"a": 0, "b": [0]})
    got = outer.compose(inner)
    expected = optree.tree_structure([0, (0, None)]).compose(
        optree.tree_structure({"a": 0, "b": [0]})
    )
    assert repr(got) == repr(expected)
    assert got.num_leaves == expected.num_leaves == 4
    assert got.num_nodes == expected.num_nodes


# --------------------------------------------------------------------------------------------------
# Constructors reject impossible treespecs.

LEAF = jtu.tree_structure(1)


@pytest.mark.parametrize(
    ("node_data", "arity", "message"),
    [
        ((type(None), None), 2, "None has no children, got 2"),
        ((type(None), None), 1, "None has no children, got 1"),
        ((OrderedDict, ["a", "a"]), 2, "repeated dict keys"),
        ((dict, ["a", "a"]), 2, "repeated dict keys"),
        ((defaultdict, (list, ["a", "a"])), 2, "repeated dict keys"),
        ((OrderedDict, [1, True]), 2, "repeated dict keys"),
        ((OrderedDict, [[1], 2]), 2, "dict keys must be hashable"),
        ((Point, None), 1, "Point has 2 fields, got 1 children"),
        ((Point, None), 3, "Point has 2 fields, got 3 children"),
        ((dict, ["a"]), 2, "1 keys for 2 children"),
    ],
)
def test_from_node_data_and_children_rejects_impossible_nodes(
    node_data: Any, arity: int, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        jtu.PyTreeDef.from_node_data_and_children(None, node_data, [LEAF] * arity)


def test_from_node_data_and_children_checks_registered_types() -> None:
    @dataclasses.dataclass
    class DC:
        x: Any
        y: Any
        m: Any = dataclasses.field(default=0, metadata={"static": True})

    class Units:
        def __init__(self, name: str) -> None:
            self.name = name

        def __eq__(self, other: object) -> bool:
            return isinstance(other, Units) and other.name == self.name

        def __hash__(self) -> int:
            return hash(self.name)

    oxtree.register_dataclass(DC, data_fields=["x", "y"], meta_fields=["m"])
    jtu.register_static(Units)
    try:
        make = jtu.PyTreeDef.from_node_data_and_children
        good = make(None, (DC, (0,)), [LEAF, LEAF])
        assert good.unflatten([1, 2]) == DC(1, 2, 0)
        with pytest.raises(ValueError, match="DC is registered with 2 data fields, not 1"):
            make(None, (DC, (0,)), [LEAF])
        with pytest.raises(ValueError, match="DC is registered with 1 meta fields"):
            make(None, (DC, (0, 1)), [LEAF, LEAF])
        with pytest.raises(ValueError, match="DC is registered with 1 meta fields"):
            make(None, (DC, 0), [LEAF, LEAF])
        assert make(None, (Units, Units("m")), []).unflatten([]) == Units("m")
        with pytest.raises(ValueError, match="Units is registered as static: it has no children"):
            make(None, (Units, Units("m")), [LEAF])
        with pytest.raises(ValueError, match="its value must be a Units"):
            make(None, (Units, "m"), [])
    finally:
        oxtree.unregister_pytree_node(DC)
        oxtree.unregister_pytree_node(Units)


def test_impossible_constructor_probe_never_panics() -> None:
    """The probe that built a treespec whose unflatten panicked."""
    proc = run_python(
        """
        import oxtree.tree_util as jtu
        leaf = jtu.tree_structure(1)
        try:
            spec = jtu.PyTreeDef.from_node_data_and_children(None, (type(None), None), [leaf, leaf])
            print(spec.unflatten(list(range(spec.num_leaves))))
        except ValueError:
            print("ValueError")
        """
    )
    assert_clean_exit(proc, "ValueError")


# --------------------------------------------------------------------------------------------------
# Pickles are checked against the current registrations.


class Pair:
    def __init__(self, a: Any, b: Any) -> None:
        self.a, self.b = a, b

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Pair) and (self.a, self.b) == (other.a, other.b)

    def __hash__(self) -> int:
        return hash((self.a, self.b))


def register_pair_as_node(namespace: str) -> None:
    oxtree.register_pytree_node(
        Pair, lambda p: ((p.a, p.b), None), lambda _, ch: Pair(*ch), namespace=namespace
    )


@pytest.mark.parametrize("again", ["static", "dataclass-one-field", "dataclass-meta"])
def test_pickle_of_a_reregistered_type_is_rejected(again: str) -> None:
    namespace = f"{NAMESPACE}-{again}"
    register_pair_as_node(namespace)
    spec = oxtree.tree_structure([Pair(1, 2)], namespace=namespace)
    data = pickle.dumps(spec)
    del spec  # the old registration goes for good
    oxtree.unregister_pytree_node(Pair, namespace=namespace)
    if again == "static":
        oxtree.register_static(Pair, namespace=namespace)
        message = "node 2: Pair is registered as static: it has no children, not 2"
    elif again == "dataclass-one-field":
        oxtree.register_dataclass(Pair, data_fields=["a"], meta_fields=[], namespace=namespace)
        message = "node 2: Pair is registered with 1 data fields, not 2"
    else:
        oxtree.register_dataclass(Pair, data_fields=["a", "b"], meta_fields=[], namespace=namespace)
        message = "node 2: Pair is registered with 0 meta fields"
    try:
        with pytest.raises(ValueError, match=message):
            pickle.loads(data)
    finally:
        oxtree.unregister_pytree_node(Pair, namespace=namespace)


@dataclasses.dataclass
class Forged:
    x: Any
    tag: str = "t"


oxtree.register_dataclass(Forged, data_fields=["x"], meta_fields=["tag"], namespace=NAMESPACE)


@pytest.mark.parametrize(
    ("aux", "entries", "arity", "message"),
    [
        (("t", "extra"), None, 1, "registered with 1 meta fields"),
        ((), None, 1, "registered with 1 meta fields"),
        ("t", None, 1, "registered with 1 meta fields"),
        (["t"], None, 1, "registered with 1 meta fields"),
        (("t",), None, 2, "registered with 1 data fields, not 2"),
        (("t",), ("x",), 1, "its children have no stored keys"),
    ],
)
def test_forged_dataclass_state_is_rejected(
    aux: Any, entries: Any, arity: int, message: str
) -> None:
    spec = oxtree.tree_structure(
        Forged([1, 2]) if arity == 1 else Forged((1, 2)), namespace=NAMESPACE
    )
    _, (state,) = spec.__reduce__()
    nodes = list(state[3])
    root = list(nodes[-1])
    assert root[5] is Forged
    root[1], root[2], root[6] = arity, aux, entries
    nodes[-1] = tuple(root)
    if arity == 2:
        nodes[-1:] = [nodes[0], nodes[-1]]  # one more leaf child
        nodes = [n for n in nodes if n[0] in (0, 1)]
    forged = (*state[:3], tuple(nodes), *state[4:])
    with pytest.raises(ValueError, match=message):
        _rebuild_treespec(forged)
    assert _rebuild_treespec(state) == spec


def test_pickled_namedtuple_later_registered_is_rejected() -> None:
    Later = collections.namedtuple("Later", "a b")
    spec = oxtree.tree_structure(Later(1, 2))
    _, (state,) = spec.__reduce__()
    oxtree.register_pytree_node(Later, lambda t: (list(t), None), lambda _, ch: Later(*ch))
    try:
        with pytest.raises(ValueError, match="node 2: Later is registered as a pytree node type"):
            _rebuild_treespec(state)
    finally:
        oxtree.unregister_pytree_node(Later)
    assert _rebuild_treespec(state) == spec


# Registrations the property below draws from: every kind of rule whose arity the registry
# knows (dataclasses, static values).


@dataclasses.dataclass
class DC2:
    a: Any
    b: Any
    m: Any = 0


class Unit:
    def __init__(self, name: str) -> None:
        self.name = name

    def __eq__(self, other: object) -> bool:
        return type(other) is Unit and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)


oxtree.register_dataclass(DC2, data_fields=["a", "b"], meta_fields=["m"], namespace=NAMESPACE)
oxtree.register_static(Unit, namespace=NAMESPACE)

_SPEC_TREES = st.recursive(
    trees(max_leaves=8),
    lambda children: st.one_of(
        st.builds(DC2, children, children, st.sampled_from([0, "m"])),
        st.builds(lambda c: [c, Unit("u")], children),
    ),
    max_leaves=12,
)

_REPLACEMENTS = [
    None,
    0,
    1,
    2,
    3,
    -1,
    (),
    ("m",),
    (0, 0),
    "x",
    ("a", "a"),
    (1, True),
    Point,
    DC2,
    Unit,
    Unit("v"),
    list,
    int,
    0.5,
    True,
]


def tamper(data: st.DataObject, state: Any, depth: int = 0) -> Any:
    """A copy of a nested tuple with one element replaced, dropped, repeated or swapped."""
    if type(state) is not tuple or not state or (depth and data.draw(st.booleans())):
        if type(state) is int and data.draw(st.booleans()):
            return state + data.draw(st.sampled_from([-1, 1, 2]))
        return data.draw(st.sampled_from(_REPLACEMENTS))
    i = data.draw(st.integers(0, len(state) - 1))
    how = data.draw(st.sampled_from(["replace", "replace", "replace", "drop", "repeat", "swap"]))
    if how == "drop":
        return state[:i] + state[i + 1 :]
    if how == "repeat":
        return (*state[:i], state[i], *state[i:])
    if how == "swap":
        j = data.draw(st.integers(0, len(state) - 1))
        items = list(state)
        items[i], items[j] = items[j], items[i]
        return tuple(items)
    return (*state[:i], tamper(data, state[i], depth + 1), *state[i + 1 :])


@settings(max_examples=400, deadline=None)
@given(tree=_SPEC_TREES, none_is_leaf=st.booleans(), data=st.data())
def test_a_state_that_loads_flattens_back_to_its_spec(
    tree: Any, none_is_leaf: bool, data: st.DataObject
) -> None:
    spec = oxtree.tree_structure(tree, none_is_leaf=none_is_leaf, namespace=NAMESPACE)
    _, (state,) = spec.__reduce__()
    for _ in range(data.draw(st.integers(1, 3))):
        state = tamper(data, state)
    try:
        loaded = _rebuild_treespec(state)
    except (ValueError, TypeError):
        return
    leaves = [object() for _ in range(loaded.num_leaves)]
    rebuilt = loaded.unflatten(leaves)
    again, spec_again = oxtree.tree_flatten(
        rebuilt, none_is_leaf=loaded.none_is_leaf, namespace=loaded.namespace
    )
    assert spec_again == loaded
    assert len(again) == len(leaves)
    assert all(a is b for a, b in zip(again, leaves, strict=True))


# --------------------------------------------------------------------------------------------------
# Namedtuples are rebuilt as calling the class does.


def rebuild_after_change(lib: Any, change: str) -> Any:
    """What `lib` rebuilds from a namedtuple treespec after the class's constructor changed
    in place, once its first (cached) rebuild has happened."""
    P = collections.namedtuple("P", "x y")
    spec = lib.tree_structure([P(1, 2), P(3, 4)])
    assert spec.unflatten([1, 2, 3, 4]) == [P(1, 2), P(3, 4)]
    if change == "code":

        def scaled(_cls, x, y):
            return _tuple_new(_cls, (x * 10, y))  # noqa: F821 - the namedtuple's global

        P.__new__.__code__ = scaled.__code__
    elif change == "globals":
        P.__new__.__globals__["_tuple_new"] = lambda c, t: tuple.__new__(c, (t[0] * 10, t[1]))
    elif change == "setattr":
        old = P.__new__
        P.__new__ = lambda c, x, y: old(c, x * 10, y)
    else:
        called = []

        class Meta(type):
            def __call__(cls, *args: Any) -> Any:
                called.append(args)
                return super().__call__(*args)

        Q = Meta("Q", (P,), {"__slots__": ()})
        lib.tree_structure([Q(1, 2)]).unflatten([1, 2])
        return len(called)
    return spec.unflatten([1, 2, 3, 4])


@pytest.mark.parametrize("change", ["code", "globals", "setattr", "metaclass-call"])
def test_namedtuple_rebuild_follows_a_changed_constructor(change: str) -> None:
    theirs, ours = rebuild_after_change(optree, change), rebuild_after_change(oxtree, change)
    assert ours == theirs
    if change != "metaclass-call":
        assert ours[0] == (10, 2)


def test_namedtuple_rebuild_is_still_plain() -> None:
    rebuilt = oxtree.tree_structure([Point(1, 2)] * 3).unflatten(range(6))
    assert rebuilt == [Point(0, 1), Point(2, 3), Point(4, 5)]
    assert all(type(p) is Point for p in rebuilt)


def test_deque_and_other_round_trips_unchanged() -> None:
    tree = [deque([1], maxlen=2), OrderedDict(b=1, a=2), defaultdict(list, {"k": [1]})]
    spec = oxtree.tree_structure(tree)
    assert pickle.loads(pickle.dumps(spec)) == spec
    assert oxtree.treespec_from_json(json.dumps(spec.to_json())) == spec
