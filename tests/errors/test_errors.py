"""Every error path of the tree engine: exception types, message contents, and no side effects.

oxtree's messages are meant to be better than optree's: structure mismatches name the key path
where the trees part (in keystr form, rooted at `tree`) and both node types; unflatten names both
leaf counts; cycles are reported as such instead of as a plain recursion overflow.
"""

from __future__ import annotations

import copy
import re
import time
from collections import OrderedDict, defaultdict, deque
from typing import Any

import optree
import oxtree
import pytest
from helpers import GMTIME, STAT, assert_same_leaves, parametrize
from nodes import Pair, Point
from subprocess_runs import DEEP_OPS, DEEP_SCRIPT, DEPTH, op_result, run_script

# --------------------------------------------------------------------------------------------------
# Helpers.


def mentions_path(message: str, path: str) -> bool:
    """`path` occurs in `message` as a whole path (not as a prefix of a longer path)."""
    if path == "tree":
        return re.search(r"(?<![\w.\]'])tree(?![\w\[]|\.\w)", message) is not None
    return re.search(re.escape(path) + r"(?![\w\[]|\.\w)", message) is not None


def mentions_number(message: str, number: int) -> bool:
    return re.search(rf"(?<![\w.]){number}(?![\w.]|\.\d)", message) is not None


def snapshot(obj: Any) -> tuple[str, Any]:
    """Something to compare an argument with after a failing call (repr keeps dict order)."""
    return repr(obj), copy.deepcopy(obj)


def assert_unchanged(obj: Any, before: tuple[str, Any]) -> None:
    text, clone = before
    assert repr(obj) == text
    assert obj == clone


# --------------------------------------------------------------------------------------------------
# Structure mismatches: tree_map with several trees, tree_map_, PyTreeSpec.flatten_up_to.

MISMATCHES: dict[str, tuple[Any, Any, str, list[str], bool]] = {
    # name: (first, other, path where they part, words the message must contain, none_is_leaf)
    "issue_example": (
        (1, {"a": 1, "b": (1, 2)}),
        (1, {"a": 1, "b": [1, 2]}),
        "tree[1]['b']",
        ["tuple", "list"],
        False,
    ),
    "root_tuple_vs_list": ((1, 2), [1, 2], "tree", ["tuple", "list"], False),
    "root_dict_vs_list": ({"a": 1}, [1], "tree", ["dict", "list"], False),
    "root_tuple_arity": ((0,) * 4, (0,) * 7, "tree", ["4", "7"], False),
    "list_arity": ([[0] * 4], [[0] * 7], "tree[0]", ["4", "7"], False),
    "deque_arity": ({"q": deque([0] * 4)}, {"q": deque([0] * 7)}, "tree['q']", ["4", "7"], False),
    "namedtuple_vs_tuple": ([Point(1, 2)], [(1, 2)], "tree[0]", ["Point", "tuple"], False),
    "tuple_vs_namedtuple": ([(1, 2)], [Point(1, 2)], "tree[0]", ["Point", "tuple"], False),
    "two_namedtuple_classes": ([Point(1, 2)], [Pair(1, 2)], "tree[0]", ["Point", "Pair"], False),
    "namedtuple_field": (
        Point(x=1, y=(1, 2)),
        Point(x=1, y=[1, 2]),
        "tree.y",
        ["tuple", "list"],
        False,
    ),
    "struct_time_vs_tuple": ([GMTIME], [tuple(GMTIME)], "tree[0]", ["struct_time", "tuple"], False),
    "struct_time_field": (
        time.struct_time(((1,), 0, 0, 0, 0, 0, 0, 0, 0)),
        time.struct_time(([1], 0, 0, 0, 0, 0, 0, 0, 0)),
        "tree.tm_year",
        ["tuple", "list"],
        False,
    ),
    "deque_vs_list": ({"q": deque([1, 2])}, {"q": [1, 2]}, "tree['q']", ["deque", "list"], False),
    "ordereddict_value": (
        OrderedDict(k=(1,)),
        OrderedDict(k=[1]),
        "tree['k']",
        ["tuple", "list"],
        False,
    ),
    "defaultdict_value": (
        defaultdict(list, k=(1,)),
        defaultdict(list, k=[1]),
        "tree['k']",
        ["tuple", "list"],
        False,
    ),
    "int_key_path": ({1: (0,), 2: 0}, {1: [0], 2: 0}, "tree[1]", ["tuple", "list"], False),
    "deep_path": ([[[(1,)]]], [[[[1]]]], "tree[0][0][0]", ["tuple", "list"], False),
    "deep_dict_path": (
        {"a": {"b": {"c": (1,)}}},
        {"a": {"b": {"c": {"d": 1}}}},
        "tree['a']['b']['c']",
        ["tuple", "dict"],
        False,
    ),
    "node_vs_leaf": ((1, (2, 3)), (1, 5), "tree[1]", ["tuple"], False),
    "quoted_str_key": ({"it's": (1,)}, {"it's": [1]}, 'tree["it\'s"]', ["tuple", "list"], False),
    "tuple_key": ({(1, "a"): (1,)}, {(1, "a"): [1]}, "tree[(1, 'a')]", ["tuple", "list"], False),
    "none_key": ({None: (1,), 0: 0}, {None: [1], 0: 0}, "tree[None]", ["tuple", "list"], False),
    "stat_result_vs_tuple": (
        {"s": STAT},
        {"s": tuple(range(10))},
        "tree['s']",
        ["stat_result", "tuple"],
        False,
    ),
    "none_vs_leaf": ((1, None), (1, 3), "tree[1]", ["None"], False),
    "none_vs_node": ([None], [(1,)], "tree[0]", ["None", "tuple"], False),
    "node_vs_none": ([[1]], [None], "tree[0]", ["list", "None"], False),
    "node_vs_none_leaf": ([[1]], [None], "tree[0]", ["list", "None"], True),
    "mismatch_with_none_leaves": (
        (None, (None,)),
        (None, [None]),
        "tree[1]",
        ["tuple", "list"],
        True,
    ),
    "dict_keys_differ": (
        {"x": {"alpha": 1, "beta": 2}},
        {"x": {"alpha": 1, "gamma": 2}},
        "tree['x']",
        ["beta", "gamma"],
        False,
    ),
    "dict_key_missing": ([{"alpha": 1, "beta": 2}], [{"alpha": 1}], "tree[0]", ["beta"], False),
    "dict_key_extra": ([{"alpha": 1}], [{"alpha": 1, "beta": 2}], "tree[0]", ["beta"], False),
    "ordereddict_keys_differ": (
        OrderedDict(alpha=1),
        OrderedDict(gamma=1),
        "tree",
        ["alpha", "gamma"],
        False,
    ),
    "defaultdict_keys_differ": (
        [defaultdict(int, alpha=1)],
        [defaultdict(int, gamma=1)],
        "tree[0]",
        ["alpha", "gamma"],
        False,
    ),
}

VIAS = ["tree_map", "tree_map_third", "tree_map_", "flatten_up_to"]


def _call_mismatch(via: str, first: Any, other: Any, none_is_leaf: bool, lib: Any = oxtree) -> None:
    def func(*args):
        return None

    if via == "tree_map":
        lib.tree_map(func, first, other, none_is_leaf=none_is_leaf)
    elif via == "tree_map_third":
        lib.tree_map(func, first, first, other, none_is_leaf=none_is_leaf)
    elif via == "tree_map_":
        lib.tree_map_(func, first, other, none_is_leaf=none_is_leaf)
    else:
        lib.tree_structure(first, none_is_leaf=none_is_leaf).flatten_up_to(other)


@parametrize(case=list(MISMATCHES), via=VIAS)
def test_structure_mismatch_message(case, via):
    first, other, path, _words, none_is_leaf = MISMATCHES[case]
    # The oracle agrees that these trees do not match.
    with pytest.raises(ValueError) as theirs:  # noqa: PT011
        _call_mismatch(via, first, other, none_is_leaf, optree)

    before = snapshot(first), snapshot(other)
    with pytest.raises(ValueError) as excinfo:  # noqa: PT011
        _call_mismatch(via, first, other, none_is_leaf)
    message = str(excinfo.value)
    # optree's words first, unchanged; then where the trees part (and, for the other trees of
    # a map, which one).
    assert message.startswith(str(theirs.value)), f"{message!r} vs optree's {theirs.value!r}"
    detail = message[len(str(theirs.value)) :]
    assert mentions_path(detail, path), f"path {path!r} not in: {message}"
    assert ("(in rests[" in detail) == (via != "flatten_up_to")
    if path == "tree":
        assert "tree[" not in detail
        assert re.search(r"tree\.\w", detail) is None
    # Failing calls leave their arguments alone.
    assert_unchanged(first, before[0])
    assert_unchanged(other, before[1])


def test_mismatch_in_rests_does_not_blame_matching_tree():
    good = {"a": (1, 2), "b": [3]}
    bad = {"a": (1, 2), "b": (3,)}
    with pytest.raises(ValueError, match=r"tree\['b'\]"):
        oxtree.tree_map(lambda *a: None, good, good, good, bad)


@pytest.mark.parametrize("mapper", [oxtree.tree_map, oxtree.tree_map_])
def test_mismatch_is_found_before_func_is_called(mapper):
    # Like optree: all trees are matched up first, so a mismatch means no side effects at all.
    calls = []
    with pytest.raises(ValueError, match=r"tree\[2\]"):
        mapper(lambda *a: calls.append(a), [1, 2, (3,), 4], [1, 2, [3], 4])
    assert calls == []


def test_flatten_up_to_does_not_grow_defaultdicts():
    spec = oxtree.tree_structure({"a": 1, "b": 2})
    target = defaultdict(list, a=1)
    with pytest.raises(ValueError, match="b"):
        spec.flatten_up_to(target)
    assert dict(target) == {"a": 1}
    with pytest.raises(ValueError, match="b"):
        oxtree.tree_map(lambda x, y: x, {"a": 1, "b": 2}, target)
    assert dict(target) == {"a": 1}


def test_accepted_rests_are_not_errors():
    # Things optree accepts must not raise: dict-likes are matched by key, maxlen is ignored.
    result = oxtree.tree_map(
        lambda x, y: y,
        ({"a": 1, "b": 2}, OrderedDict(x=1), deque([1], maxlen=2)),
        (OrderedDict(b=3, a=4), {"x": 5}, deque([6])),
    )
    assert result == ({"a": 4, "b": 3}, OrderedDict(x=5), deque([6], maxlen=2))


# --------------------------------------------------------------------------------------------------
# Wrong number of leaves.

UNFLATTENERS = {
    "tree_unflatten": oxtree.tree_unflatten,
    "spec.unflatten": lambda spec, leaves: spec.unflatten(leaves),
}

UNFLATTEN_COUNTS = {
    "too_few": (("a", ["b", "c"]), 3, 1),
    "too_many": (("a", ["b", "c"]), 3, 5),
    "none_given": (("a", ["b", "c"]), 3, 0),
    "empty_spec": ((), 0, 1),
    "leaf_spec_none_given": ("x", 1, 0),
    "leaf_spec_two_given": ("x", 1, 2),
    "dict_spec": ({"k": "a", "j": {"i": "b"}}, 2, 4),
}


@parametrize(case=list(UNFLATTEN_COUNTS), method=["tree_unflatten", "spec.unflatten"])
def test_unflatten_wrong_leaf_count(case, method):
    tree, expected, given = UNFLATTEN_COUNTS[case]
    spec = oxtree.tree_structure(tree)
    assert spec.num_leaves == expected
    leaves = ["v"] * given
    with pytest.raises(ValueError) as excinfo:  # noqa: PT011
        UNFLATTENERS[method](spec, leaves)
    message = str(excinfo.value)
    with pytest.raises(ValueError) as theirs:  # noqa: PT011
        optree.tree_unflatten(optree.tree_structure(tree), leaves)
    assert message.startswith(str(theirs.value))
    # Both counts, where optree's "Too many leaves" names only the expected one.
    assert re.search(rf"expected: {expected}\b", message), message
    assert re.search(rf"[Gg]ot: {given}\b", message), message
    assert leaves == ["v"] * given


def test_unflatten_wrong_count_from_iterator():
    spec = oxtree.tree_structure((0, 0, 0))
    with pytest.raises(ValueError, match=r"3"):
        oxtree.tree_unflatten(spec, iter(["v"]))
    with pytest.raises(ValueError, match=r"3"):
        oxtree.tree_unflatten(spec, (x for x in "vvvvv"))


# --------------------------------------------------------------------------------------------------
# Cycles.


def _list_cycle():
    x = [1]
    x.append(x)
    return x, "tree[1]"


def _dict_cycle():
    d = {"a": 1}
    d["b"] = d
    return d, "tree['b']"


def _nested_cycle():
    a = [0, [1]]
    a[1].append(a)
    return a, "tree[1][1]"


def _tuple_cycle():
    t = ([],)
    t[0].append(t)
    return t, "tree[0][0]"


def _deque_cycle():
    q = deque([1])
    q.append(q)
    return q, "tree[1]"


def _ordereddict_cycle():
    od = OrderedDict(a=1)
    od["z"] = [od]
    return od, "tree['z'][0]"


def _inner_cycle():
    # The cycle does not pass through the root: it closes where `a` reappears below itself.
    a = [0]
    b = [a]
    a.append(b)
    return {"k": [a]}, "tree['k'][0][1][0]"


CYCLES = {
    "list": _list_cycle,
    "dict": _dict_cycle,
    "nested": _nested_cycle,
    "tuple": _tuple_cycle,
    "deque": _deque_cycle,
    "ordereddict": _ordereddict_cycle,
    "inner": _inner_cycle,
}

CYCLE_CALLS = {
    "tree_flatten": lambda t, nil: oxtree.tree_flatten(t, none_is_leaf=nil),
    "tree_leaves": lambda t, nil: oxtree.tree_leaves(t, none_is_leaf=nil),
    "tree_structure": lambda t, nil: oxtree.tree_structure(t, none_is_leaf=nil),
    "tree_iter": lambda t, nil: list(oxtree.tree_iter(t, none_is_leaf=nil)),
    "tree_map": lambda t, nil: oxtree.tree_map(lambda x: x, t, none_is_leaf=nil),
    "tree_map_": lambda t, nil: oxtree.tree_map_(lambda x: x, t, none_is_leaf=nil),
}


@parametrize(cycle=list(CYCLES), call=list(CYCLE_CALLS), none_is_leaf=[False, True])
def test_cycle_is_reported(cycle, call, none_is_leaf):
    tree, path = CYCLES[cycle]()
    before = repr(tree)
    with pytest.raises(RecursionError) as excinfo:
        CYCLE_CALLS[call](tree, none_is_leaf)
    message = str(excinfo.value)
    assert "cycle" in message.lower(), message
    assert mentions_path(message, path), f"{path!r} not in: {message}"
    assert repr(tree) == before


def test_cycle_cut_by_is_leaf_is_fine():
    x = [1]
    x.append(x)
    visits = []

    def second_visit_is_leaf(node):
        if node is x:
            visits.append(node)
            return len(visits) > 1
        return False

    leaves = oxtree.tree_leaves(x, is_leaf=second_visit_is_leaf)
    assert_same_leaves(leaves, [1, x])


def test_cyclic_rest_with_finite_spec_is_fine():
    x = [1]
    x.append(x)
    result = oxtree.tree_map(lambda a, b: b, [0, [0, 0]], x)
    assert result[0] == 1
    assert result[1][0] == 1
    assert result[1][1] is x
    assert_same_leaves(oxtree.tree_structure([0, [0, 0]]).flatten_up_to(x), [1, 1, x])


# --------------------------------------------------------------------------------------------------
# Very deep trees: run in a subprocess so that a crash (stack overflow) fails the test instead of
# killing the test run. Each recursion limit runs one subprocess that reports every operation
# (the script and its operations: subprocess_runs.py).

# 0 leaves the default limit alone; 50 is tiny; 10**6 lets a recursion guarded only by the
# interpreter's limit overflow the C stack.
RECURSION_LIMITS = [0, 50, 1_000_000]


def _run_deep(limit: int) -> dict[str, Any]:
    return run_script(DEEP_SCRIPT, str(limit), str(DEPTH))


@parametrize(limit=RECURSION_LIMITS, op=DEEP_OPS)
def test_deep_chain_never_crashes(limit, op):
    outcome, _, detail = op_result(_run_deep(limit), op)
    assert outcome in ("ok", "RecursionError"), f"{op}: {outcome}: {detail}"


@parametrize(limit=RECURSION_LIMITS)
def test_deep_subprocess_exits_cleanly(limit):
    run = _run_deep(limit)
    assert run["finished"], run["stderr"]
    assert run["returncode"] == 0, run["stderr"]


def test_a_tree_past_the_depth_limit_is_named_in_a_short_message():
    # A path 200,000 steps deep is shown by its two ends and the count between, not spelled
    # out (a message of megabytes); the tree is left as it was.
    tree: Any = 0
    for _ in range(200_001):
        tree = [tree]
    for call in (oxtree.tree_flatten, oxtree.tree_flatten_with_path, oxtree.tree_structure):
        with pytest.raises(RecursionError) as excinfo:
            call(tree)
        message = str(excinfo.value)
        assert len(message) < 400, message[:400]
        assert re.fullmatch(
            r"maximum tree depth \(200000\) exceeded at tree(\[0\]){16}\.\.\.<\d+ steps>\.\.\."
            r"(\[0\]){16} while walking the tree",
            message,
        ), message
    assert type(tree) is list
    assert len(tree) == 1


def test_moderately_deep_trees_work():
    # Well below any recursion limit: no RecursionError allowed, and results match optree.
    tree = 0
    for _ in range(200):
        tree = [tree, {"k": None}]
    leaves, spec = oxtree.tree_flatten(tree)
    expected_leaves, expected_spec = optree.tree_flatten(tree)
    assert leaves == expected_leaves
    assert repr(spec) == repr(expected_spec)
    assert spec.unflatten(leaves) == tree
    assert oxtree.tree_map(lambda x: x, tree) == tree


# --------------------------------------------------------------------------------------------------
# Hostile user code: callbacks that mutate the tree being traversed, keys with nasty dunder
# methods, classes that refuse to be built. Any result or any ordinary exception is fine; a crash,
# a Rust panic or a SystemError is not. Run in a subprocess, like the deep trees.

HOSTILE_SCRIPT = r"""
import gc
from collections import OrderedDict, defaultdict, deque, namedtuple
import oxtree


class Boom(Exception):
    pass


def mutating_predicate(tree, mutate, limit=50):
    calls = []

    def is_leaf(x):
        calls.append(1)
        if len(calls) <= limit:
            mutate(tree, x)
        return False

    return is_leaf


def list_cleared():
    tree = [[1, 2, 3], [4, [5, 6]], 7]
    def mutate(t, x):
        if x == 2:
            t[0].clear()
            t[1][1].clear()
            t.clear()
            gc.collect()
    oxtree.tree_flatten(tree, is_leaf=mutating_predicate(tree, mutate))
    return True


def list_grown():
    tree = [[1], [2]]
    def mutate(t, x):
        t.append([x])
        t[0].append(x)
    oxtree.tree_leaves(tree, is_leaf=mutating_predicate(tree, mutate))
    return True


def list_items_replaced():
    tree = [[object()], [object()], [object()]]
    def mutate(t, x):
        for i in range(len(t)):
            t[i] = [object(), object()]
        gc.collect()
    oxtree.tree_flatten(tree, is_leaf=mutating_predicate(tree, mutate))
    return True


def dict_mutated():
    tree = {"a": [1], "b": [2], "c": {"d": [3]}}
    def mutate(t, x):
        t.pop("b", None)
        t["z" + str(len(t))] = [0]
        t["c"].clear()
        gc.collect()
    oxtree.tree_flatten(tree, is_leaf=mutating_predicate(tree, mutate))
    return True


def ordereddict_mutated():
    tree = OrderedDict(a=[1], b=[2], c=[3])
    def mutate(t, x):
        if t:
            t.popitem(last=False)
        t.move_to_end(next(iter(t))) if t else None
        gc.collect()
    oxtree.tree_flatten(tree, is_leaf=mutating_predicate(tree, mutate))
    return True


def defaultdict_mutated():
    tree = defaultdict(list, a=[1], b=[2])
    def mutate(t, x):
        t["new" + str(len(t))]  # __missing__ inserts
        t.pop("a", None)
    oxtree.tree_flatten(tree, is_leaf=mutating_predicate(tree, mutate))
    return True


def deque_mutated():
    tree = deque([[1], [2], [3]], maxlen=5)
    def mutate(t, x):
        t.rotate(1)
        t.append([9])
        if len(t) > 3:
            t.popleft()
    oxtree.tree_flatten(tree, is_leaf=mutating_predicate(tree, mutate))
    return True


class MeddlingKey:
    # Orders like its value, but every comparison mutates the dict it lives in.
    target = None

    def __init__(self, v):
        self.v = v

    def __lt__(self, other):
        if MeddlingKey.target is not None and len(MeddlingKey.target) < 40:
            MeddlingKey.target[MeddlingKey(len(MeddlingKey.target) + 100)] = "added"
            MeddlingKey.target.pop(MeddlingKey(0), None)
        return self.v < other.v if isinstance(other, MeddlingKey) else NotImplemented

    def __hash__(self):
        return hash(self.v)

    def __eq__(self, other):
        return isinstance(other, MeddlingKey) and self.v == other.v

    def __repr__(self):
        return f"MeddlingKey({self.v})"


def sort_mutates_dict():
    tree = {MeddlingKey(i): i for i in (3, 0, 2, 1, 5, 4)}
    MeddlingKey.target = tree
    try:
        leaves, spec = oxtree.tree_flatten(tree)
        spec.unflatten(leaves)
        repr(spec)
    finally:
        MeddlingKey.target = None
    return True


class CollidingKey:
    # Every instance hashes alike, so lookups call __eq__, which mutates the dict looked in.
    target = None

    def __init__(self, v):
        self.v = v

    def __hash__(self):
        return 7

    def __eq__(self, other):
        target, CollidingKey.target = CollidingKey.target, None  # no re-entry from the insert
        if target is not None:
            if len(target) < 30:
                target[CollidingKey(len(target) + 50)] = [0]
            CollidingKey.target = target
        return isinstance(other, CollidingKey) and self.v == other.v

    def __lt__(self, other):
        return self.v < other.v

    def __repr__(self):
        return f"CollidingKey({self.v})"


def lookup_mutates_target():
    spec = oxtree.tree_structure({CollidingKey(i): 0 for i in range(4)})
    target = {CollidingKey(i): [i] for i in range(4)}
    CollidingKey.target = target
    try:
        spec.flatten_up_to(target)
    except ValueError:
        pass
    try:
        oxtree.tree_map(lambda a, b: b, {CollidingKey(i): 0 for i in range(4)}, target)
    except ValueError:
        pass
    finally:
        CollidingKey.target = None
    return True


class HashBomb:
    armed = False

    def __init__(self, v):
        self.v = v

    def __hash__(self):
        if HashBomb.armed:
            raise Boom("hash")
        return hash(self.v)

    def __eq__(self, other):
        return isinstance(other, HashBomb) and self.v == other.v

    def __lt__(self, other):
        return self.v < other.v


def hash_raises_during_lookup():
    tree = {HashBomb(1): 0, HashBomb(2): 0}
    spec = oxtree.tree_structure(tree)
    HashBomb.armed = True
    try:
        spec.flatten_up_to(tree)
    except Boom:
        return True
    finally:
        HashBomb.armed = False
    return "flatten_up_to did not need the hash"  # not an error either


class ReprBomb:
    def __repr__(self):
        raise Boom("repr")


class NotAStrRepr:
    def __repr__(self):
        return 5


def repr_raises():
    spec = oxtree.tree_structure({ReprBomb(): 1})
    try:
        repr(spec)
    except Boom:
        return True
    return "repr(spec) swallowed the key's exception"


def repr_not_str():
    spec = oxtree.tree_structure({NotAStrRepr(): 1})
    try:
        repr(spec)
    except TypeError:
        return True
    return "repr(spec) accepted a non-str key repr"


def mismatch_message_with_bad_repr():
    key = ReprBomb()
    try:
        oxtree.tree_map(lambda a, b: b, {key: (1,)}, {key: [1]})
    except (ValueError, Boom):
        return True
    return "no error"


class BadBool:
    def __bool__(self):
        raise Boom("bool")


def predicate_result_bool_raises():
    try:
        oxtree.tree_leaves([1, [2]], is_leaf=lambda x: BadBool())
    except Boom:
        return True
    return "no error"


Refuses = namedtuple("Refuses", "a b")


def namedtuple_constructor_raises():
    spec = oxtree.tree_structure([Refuses(1, 2)])
    Refuses.__new__ = lambda cls, *a: (_ for _ in ()).throw(Boom("new"))
    try:
        spec.unflatten([1, 2])
    except Boom:
        return True
    except TypeError:
        return True
    return "unflatten did not call the class"


class Meta(type):
    def __getattr__(cls, name):
        raise Boom(name)


class TupleWithHostileMeta(tuple, metaclass=Meta):
    pass


def hostile_metaclass():
    oxtree.tree_leaves([TupleWithHostileMeta((1, 2))])
    return True


def reentrant_callbacks():
    tree = {"a": [1, (2, 3)], "b": None}
    spec = oxtree.tree_structure(tree)

    def func(x):
        oxtree.tree_map(lambda y: y, tree)
        spec.unflatten(oxtree.tree_leaves(tree))
        return x

    def leaves():
        for leaf in oxtree.tree_leaves(tree):
            spec.unflatten(oxtree.tree_leaves(tree))
            yield leaf

    oxtree.tree_map(func, tree)
    spec.unflatten(leaves())
    oxtree.tree_leaves(tree, is_leaf=lambda x: oxtree.tree_structure(tree) is None)
    return True


def map_mutates_inputs():
    first = {"a": [1, 2], "b": (3, [4])}
    second = {"a": [10, 20], "b": (30, [40])}

    def func(x, y):
        first["a"].clear()
        if "b" in second:
            second["b"][1].clear()
        second.clear()
        gc.collect()
        return x

    try:
        oxtree.tree_map(func, first, second)
    except ValueError:
        pass
    return True


def leaves_iterator_mutates_list():
    spec = oxtree.tree_structure([0, 0, 0])
    source = [1, 2, 3]

    def leaves():
        for x in list(source):
            source.clear()
            gc.collect()
            yield x

    spec.unflatten(leaves())
    return True


for name in sys.argv[1:]:
    run(name, globals()[name])
emit("finished")
"""

HOSTILE_OPS = [
    "list_cleared",
    "list_grown",
    "list_items_replaced",
    "dict_mutated",
    "ordereddict_mutated",
    "defaultdict_mutated",
    "deque_mutated",
    "sort_mutates_dict",
    "lookup_mutates_target",
    "hash_raises_during_lookup",
    "repr_raises",
    "repr_not_str",
    "mismatch_message_with_bad_repr",
    "predicate_result_bool_raises",
    "namedtuple_constructor_raises",
    "hostile_metaclass",
    "reentrant_callbacks",
    "map_mutates_inputs",
    "leaves_iterator_mutates_list",
]
# Scenarios that must end in exactly the user's exception (or an explicit refusal).
HOSTILE_STRICT = {
    "repr_raises",
    "repr_not_str",
    "predicate_result_bool_raises",
    "mismatch_message_with_bad_repr",
    "namedtuple_constructor_raises",
}


@parametrize(op=HOSTILE_OPS)
def test_hostile_user_code_never_crashes(op):
    outcome, benign, detail = op_result(run_script(HOSTILE_SCRIPT, *HOSTILE_OPS), op)
    assert benign, f"{op}: {outcome}: {detail}"
    if op in HOSTILE_STRICT:
        assert outcome == "ok", f"{op}: {outcome}: {detail}"


def test_hostile_subprocess_exits_cleanly():
    run = run_script(HOSTILE_SCRIPT, *HOSTILE_OPS)
    assert run["finished"], run["stderr"]
    assert run["returncode"] == 0, run["stderr"]
    assert set(run["done"]) == set(HOSTILE_OPS)


# --------------------------------------------------------------------------------------------------
# Corrupted pickles: every small corruption of a treedef's pickled state must either load into a
# treedef that works, or raise an ordinary exception; never crash or panic.

CORRUPT_PICKLE_SCRIPT = r"""
import copy, pickle
from collections import OrderedDict, defaultdict, deque, namedtuple
import oxtree

Pt = namedtuple("Pt", "x y")
TREES = [
    {"b": [1, None], "a": (Pt(1, 2), deque([3], maxlen=4))},
    OrderedDict(z=1, a=defaultdict(list, {2: "x", 1: "y"})),
    (None, [], {}, ()),
]


def corruptions(value):
    # Yields (description, corrupted copy) for small corruptions anywhere in a nested state.
    if isinstance(value, bool):
        yield "flip", (not value)
        yield "bool->int", 2
    elif isinstance(value, int):
        for other in (-1, 0, value + 1, value - 1, 2**31, 2**64, "1"):
            if other != value:
                yield f"int->{other!r}", other
    elif isinstance(value, str):
        yield "str->int", 5
        yield "str->other", value + "x"
    elif value is None:
        yield "None->0", 0
        yield "None->tuple", ()
        yield "None->obj", object()
    elif isinstance(value, tuple):
        yield "drop-last", value[:-1]
        yield "add", value + (0,)
        yield "list", list(value)
        if len(value) > 1:
            yield "reverse", value[::-1]
            yield "dup", (value[0],) + value[:-1]
        for i, item in enumerate(value):
            for desc, bad in corruptions(item):
                yield f"[{i}]{desc}", value[:i] + (bad,) + value[i + 1 :]
    else:
        yield "obj->None", None
        yield "obj->int", 3


def exercise(spec):
    repr(spec)
    hash(spec)
    spec == spec
    n = spec.num_leaves
    spec.num_nodes
    len(spec)
    for child in spec.children():
        repr(child)
    tree = spec.unflatten(list(range(n)))
    leaves, again = oxtree.tree_flatten(tree, none_is_leaf=spec.none_is_leaf)
    spec.flatten_up_to(tree)
    pickle.loads(pickle.dumps(spec))
    copy.deepcopy(spec)
    spec.compose(oxtree.tree_structure((0, 0)))


for t_index, tree in enumerate(TREES):
    for none_is_leaf in (False, True):
        spec = oxtree.tree_structure(tree, none_is_leaf=none_is_leaf)
        rebuild, args = spec.__reduce__()[:2]
        state = args[0]
        for c_index, (desc, bad_state) in enumerate(corruptions(state)):
            def attempt(bad_state=bad_state):
                try:
                    loaded = rebuild(bad_state)
                except (ValueError, TypeError):
                    return True
                try:
                    exercise(loaded)
                except Exception:
                    pass
                return True
            run(f"{t_index}/{none_is_leaf}/{c_index}/{desc}", attempt)
emit("finished")
"""


def test_corrupted_pickles_never_crash():
    run = run_script(CORRUPT_PICKLE_SCRIPT)
    if not run["finished"]:
        pytest.fail(
            f"the subprocess died (returncode {run['returncode']}) during "
            f"{run['last_started']!r}\n{run['stderr']}"
        )
    assert len(run["done"]) > 100
    bad = {op: r for op, r in run["done"].items() if not r[1]}
    assert not bad, "\n".join(f"{op}: {r}" for op, r in list(bad.items())[:10])
    assert run["returncode"] == 0


# --------------------------------------------------------------------------------------------------
# Bad arguments.

NOT_CALLABLE = 5
IS_LEAF_CALLS = {
    "tree_flatten": lambda t, p: oxtree.tree_flatten(t, is_leaf=p),
    "tree_flatten_positional": lambda t, p: oxtree.tree_flatten(t, p),
    "tree_leaves": lambda t, p: oxtree.tree_leaves(t, is_leaf=p),
    "tree_structure": lambda t, p: oxtree.tree_structure(t, is_leaf=p),
    "tree_iter": lambda t, p: list(oxtree.tree_iter(t, is_leaf=p)),
    "tree_is_leaf": lambda t, p: oxtree.tree_is_leaf(t, is_leaf=p),
    "all_leaves": lambda t, p: oxtree.all_leaves([t], is_leaf=p),
    "tree_map": lambda t, p: oxtree.tree_map(str, t, is_leaf=p),
    "tree_map_": lambda t, p: oxtree.tree_map_(str, t, is_leaf=p),
}


@parametrize(call=list(IS_LEAF_CALLS), predicate=[NOT_CALLABLE, "is_leaf", [len]])
def test_non_callable_is_leaf(call, predicate):
    with pytest.raises(TypeError, match="is_leaf"):
        IS_LEAF_CALLS[call]([1, (2,)], predicate)


@parametrize(call=list(IS_LEAF_CALLS), tree=[[], 1, None])
def test_non_callable_is_leaf_is_refused_before_traversal(call, tree):
    # Refused even when the predicate would never (or only once) be asked anything.
    with pytest.raises(TypeError, match="is_leaf"):
        IS_LEAF_CALLS[call](tree, NOT_CALLABLE)


def test_treespec_cannot_be_constructed_directly():
    with pytest.raises(TypeError):
        oxtree.PyTreeSpec()


def test_unflatten_leaves_not_iterable():
    spec = oxtree.tree_structure((1, 2))
    with pytest.raises(TypeError):
        oxtree.tree_unflatten(spec, 5)
    with pytest.raises(TypeError):
        spec.unflatten(None)


@pytest.mark.parametrize(
    "not_a_spec",
    [5, None, (1, 2), "PyTreeSpec(*)", optree.tree_structure((1, 2))],
    ids=["int", "None", "tuple", "str", "optree_spec"],
)
def test_unflatten_not_a_spec(not_a_spec):
    with pytest.raises(TypeError):
        oxtree.tree_unflatten(not_a_spec, [1, 2])


@pytest.mark.parametrize("tree", [[1, (2,)], {"a": 1}, 3, [], None])
def test_tree_map_non_callable_func(tree):
    with pytest.raises(TypeError):
        oxtree.tree_map(5, tree)
    with pytest.raises(TypeError):
        oxtree.tree_map_("f", tree)


def test_argument_kinds():
    # tree is positional-only, none_is_leaf and namespace are keyword-only.
    with pytest.raises(TypeError):
        oxtree.tree_flatten(tree=[1])
    with pytest.raises(TypeError):
        oxtree.tree_leaves([1], None, True)
    with pytest.raises(TypeError):
        oxtree.tree_structure([1], None, False, "")
    with pytest.raises(TypeError):
        oxtree.tree_map(str)
    assert oxtree.tree_leaves([None], None, none_is_leaf=True) == [None]
    assert oxtree.tree_map(str, [1], is_leaf=None, none_is_leaf=False, namespace="") == ["1"]


def test_child_index_out_of_range():
    spec = oxtree.tree_structure((1, [2]))
    assert spec.child(-2) == oxtree.tree_structure(1)
    for index in (2, -3, 100):
        with pytest.raises(IndexError):
            spec.child(index)
    with pytest.raises(IndexError):
        oxtree.tree_structure(1).child(0)


def test_compose_bad_arguments():
    spec = oxtree.tree_structure((1, None))
    with pytest.raises(TypeError):
        spec.compose(5)
    with pytest.raises(ValueError, match="none_is_leaf"):
        spec.compose(oxtree.tree_structure(1, none_is_leaf=True))


# --------------------------------------------------------------------------------------------------
# Exceptions raised by user code propagate unchanged.


class Boom(Exception):
    pass


class BaseBoom(BaseException):
    pass


RAISERS = {
    "tree_flatten": lambda t, p: oxtree.tree_flatten(t, is_leaf=p),
    "tree_leaves": lambda t, p: oxtree.tree_leaves(t, is_leaf=p),
    "tree_structure": lambda t, p: oxtree.tree_structure(t, is_leaf=p),
    "tree_iter": lambda t, p: list(oxtree.tree_iter(t, is_leaf=p)),
    "tree_is_leaf": lambda t, p: oxtree.tree_is_leaf(t, is_leaf=p),
    "all_leaves": lambda t, p: oxtree.all_leaves([t], is_leaf=p),
    "tree_map_is_leaf": lambda t, p: oxtree.tree_map(lambda x: x, t, is_leaf=p),
    "tree_map_func": lambda t, p: oxtree.tree_map(p, t),
    "tree_map_func_two": lambda t, p: oxtree.tree_map(lambda x, y: p(x), t, t),
    "tree_map__func": lambda t, p: oxtree.tree_map_(p, t),
}


# tree_is_leaf and all_leaves only ask is_leaf about the objects they are given.
SHALLOW_CALLS = ("tree_is_leaf", "all_leaves")
RAISER_CASES = [(call, 1) for call in RAISERS] + [
    (call, 3) for call in RAISERS if call not in SHALLOW_CALLS
]


@parametrize(case=RAISER_CASES, exc_type=[Boom, BaseBoom, KeyError])
def test_user_exception_propagates_unchanged(case, exc_type):
    call, on_call = case
    tree = {"b": [1, (2, None)], "a": 3}
    before = snapshot(tree)
    raised = exc_type("from user code")
    counter = []

    def raiser(x):
        counter.append(x)
        if len(counter) >= on_call:
            raise raised
        return False

    with pytest.raises(exc_type) as excinfo:
        RAISERS[call](tree, raiser)
    assert excinfo.value is raised
    assert_unchanged(tree, before)


@pytest.mark.parametrize("method", list(UNFLATTENERS))
def test_exception_from_leaves_iterator_propagates(method):
    spec = oxtree.tree_structure((0, [0, 0]))
    raised = Boom("iterator")

    def leaves():
        yield 1
        raise raised

    with pytest.raises(Boom) as excinfo:
        UNFLATTENERS[method](spec, leaves())
    assert excinfo.value is raised


# --------------------------------------------------------------------------------------------------
# Dict keys that cannot be sorted.


class MyTypeError(TypeError):
    pass


class MyError(ArithmeticError):
    pass


class Unorderable:
    """A dict key whose `<` raises `error`."""

    error: type[BaseException] = MyTypeError

    def __init__(self, value: int) -> None:
        self.value = value

    def __lt__(self, other: object) -> bool:
        raise self.error(f"cannot order {self!r}")

    __gt__ = __lt__

    def __hash__(self) -> int:
        return hash(self.value)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.value == self.value

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.value})"


class UnorderableOther(Unorderable):
    error = MyError


SORT_CASES = {
    "same_type": lambda cls: {cls(2): "b", cls(1): "a", cls(3): "c"},
    "with_ints": lambda cls: {cls(2): "x", 5: "five", cls(1): "y", 1: "one"},
    "with_str": lambda cls: {"s": 0, cls(2): 1},
    "single": lambda cls: {cls(1): "only"},
}


@parametrize(case=list(SORT_CASES), key_type=[Unorderable, UnorderableOther])
def test_unsortable_keys_like_optree(case, key_type):
    tree = SORT_CASES[case](key_type)
    order_before = list(tree)
    try:
        expected_leaves, expected_spec = optree.tree_flatten(tree)
    except Exception as expected_exc:
        with pytest.raises(type(expected_exc)):
            oxtree.tree_flatten(tree)
    else:
        leaves, spec = oxtree.tree_flatten(tree)
        assert leaves == expected_leaves
        assert repr(spec) == repr(expected_spec)
        rebuilt = spec.unflatten(leaves)
        assert list(rebuilt) == order_before
        assert rebuilt == tree
    assert list(tree) == order_before


def test_unsortable_type_error_keys_keep_insertion_order():
    tree = {Unorderable(2): "b", Unorderable(1): "a", Unorderable(3): "c"}
    leaves, spec = oxtree.tree_flatten(tree)
    assert leaves == ["b", "a", "c"]
    assert repr(spec) == "PyTreeSpec({Unorderable(2): *, Unorderable(1): *, Unorderable(3): *})"
    assert list(spec.unflatten(leaves)) == list(tree)


def test_mixed_key_types_sort_by_type_name_then_value():
    tree = {"b": 1, 2: 2, "a": 3, 1: 4}
    leaves, spec = oxtree.tree_flatten(tree)
    assert leaves == [4, 2, 3, 1]
    assert repr(spec) == "PyTreeSpec({1: *, 2: *, 'a': *, 'b': *})"
    assert list(spec.unflatten(leaves)) == ["b", 2, "a", 1]
