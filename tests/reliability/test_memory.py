"""Reference counting, garbage collection and thread safety of the tree engine."""

from __future__ import annotations

import copy
import gc
import pickle
import sys
import threading
import weakref
from collections import OrderedDict, defaultdict, deque, namedtuple
from typing import Any

import numpy as np
import optree
import oxtree
import pytest
from helpers import CORPUS, assert_same_leaves, assert_same_tree
from nodes import Key, Point, Vector

ITERATIONS = 100_000


class Leaf:
    """A leaf object nobody else refers to."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"Leaf({self.name!r})"


def fresh_tree() -> tuple[Any, list[Any]]:
    """A tree of every node type with private leaves, keys and node types; and those objects."""
    leaves = [Leaf(str(i)) for i in range(6)] + [np.arange(3), 10**30 + 7]
    keys = [Key("b"), Key("a")]
    local_nt = namedtuple("LocalNT", "p q")

    def factory():
        return 0

    tree = {
        keys[0]: [leaves[0], (leaves[1], Point(leaves[2], None))],
        keys[1]: OrderedDict(z=deque([leaves[3]], maxlen=4), y=local_nt(leaves[4], leaves[5])),
        Key("c"): defaultdict(factory, {Key("d"): leaves[6], Key("e"): Vector(leaves[7])}),
    }
    watched = [*leaves, *keys, local_nt, factory]
    return tree, watched


def refcounts(objects: list[Any]) -> list[int]:
    return [sys.getrefcount(o) for o in objects]


def test_refcounts_unchanged_after_many_calls():
    tree, watched = fresh_tree()

    def is_tuple(x):
        return isinstance(x, tuple) and not hasattr(x, "_fields")

    def round_of_calls():
        leaves, spec = oxtree.tree_flatten(tree)
        rebuilt = oxtree.tree_unflatten(spec, leaves)
        mapped = oxtree.tree_map(lambda x: x, tree)
        mapped2 = oxtree.tree_map(lambda x, y: y, tree, rebuilt)
        oxtree.tree_leaves(tree, is_leaf=is_tuple)
        spec.flatten_up_to(rebuilt)
        return mapped, mapped2

    round_of_calls()  # warm up any caches
    before = refcounts([*watched, tree, is_tuple])
    for _ in range(ITERATIONS // 4):
        round_of_calls()
    gc.collect()
    after = refcounts([*watched, tree, is_tuple])
    assert after == before


def test_refcounts_unchanged_by_treespec_methods():
    tree, watched = fresh_tree()
    spec = oxtree.tree_structure(tree)
    other = oxtree.tree_structure(tree)

    def round_of_calls():
        spec.children()
        spec.child(0)
        repr(spec)
        hash(spec)
        spec == other  # noqa: B015
        copy.copy(spec)
        copy.deepcopy(spec)
        spec.compose(oxtree.tree_structure((0, 0)))
        spec.type
        spec.kind

    round_of_calls()
    before = refcounts([*watched, spec])
    for _ in range(2_000):
        round_of_calls()
    gc.collect()
    after = refcounts([*watched, spec])
    assert after == before


def _swallow(call, exc_type):
    try:
        call()
    except exc_type:
        return True
    return False


def test_refcounts_unchanged_after_errors():
    tree, watched = fresh_tree()
    spec = oxtree.tree_structure(tree)
    bad = [tree[Key("b")], Leaf("x")]
    mismatched = {Key("b"): [Leaf("p"), [1, 2]], Key("a"): None, Key("c"): None}
    cyclic = [Leaf("cyc")]
    cyclic.append(cyclic)

    class Stop(Exception):
        pass

    def raising(x):
        raise Stop

    calls = [
        (lambda: oxtree.tree_map(lambda *a: None, tree, mismatched), ValueError),
        (lambda: spec.flatten_up_to(bad), ValueError),
        (lambda: oxtree.tree_unflatten(spec, watched[:3]), ValueError),
        (lambda: oxtree.tree_leaves(tree, is_leaf=raising), Stop),
        (lambda: oxtree.tree_map(raising, tree), Stop),
        (lambda: oxtree.tree_flatten(cyclic), RecursionError),
    ]
    for call, exc_type in calls:
        assert _swallow(call, exc_type)
    gc.collect()
    objects = [*watched, tree, spec, *bad, mismatched, cyclic]
    before = refcounts(objects)
    for _ in range(2_000):
        for call, exc_type in calls:
            _swallow(call, exc_type)
    gc.collect()
    assert refcounts(objects) == before


def test_refcounts_unchanged_by_abandoned_iterators():
    tree, watched = fresh_tree()
    next(iter(oxtree.tree_iter(tree)))
    before = refcounts(watched)
    for _ in range(10_000):
        iterator = oxtree.tree_iter(tree)
        next(iterator)
        del iterator
    gc.collect()
    assert refcounts(watched) == before


# --------------------------------------------------------------------------------------------------
# Garbage collection of treedefs caught in reference cycles.


def _collected(ref: weakref.ref) -> bool:
    for _ in range(3):
        gc.collect()
    return ref() is None


def test_namedtuple_type_collected_when_spec_dropped():
    local_nt = namedtuple("Ephemeral", "a b")
    spec = oxtree.tree_structure([local_nt(1, 2)])
    assert spec.child(0).type is local_nt
    ref = weakref.ref(local_nt)
    del local_nt, spec
    assert _collected(ref)


def test_namedtuple_type_collected_after_walks_with_paths():
    # Key paths may be kept for the next walk of a tree of the same shape: never the types.
    local_nt = namedtuple("WalkedWithPaths", "a b")
    tree = {"k": local_nt(1, [2])}
    for _ in range(2):
        oxtree.tree_util.tree_flatten_with_path(tree)
        oxtree.tree_flatten_with_path(tree)
    ref = weakref.ref(local_nt)
    del local_nt, tree
    assert _collected(ref)


def test_cycle_through_namedtuple_type_is_collected():
    local_nt = namedtuple("InCycle", "a b")
    local_nt.spec = oxtree.tree_structure({"k": local_nt(1, [2])})  # type -> spec -> type
    ref = weakref.ref(local_nt)
    del local_nt
    assert _collected(ref)


def test_cycle_through_dict_key_is_collected():
    key = Key("self")
    key.spec = oxtree.tree_structure({key: 1, Key("other"): (2,)})  # key -> spec -> key
    ref = weakref.ref(key)
    del key
    assert _collected(ref)


def test_cycle_through_default_factory_is_collected():
    class Factory:
        def __call__(self):
            return 0

    factory = Factory()
    factory.spec = oxtree.tree_structure([defaultdict(factory, a=1)])  # factory -> spec -> factory
    ref = weakref.ref(factory)
    del factory
    assert _collected(ref)


def test_cycle_through_leaf_holder_and_children_is_collected():
    local_nt = namedtuple("HeldByLeaf", "a")
    globals()["HeldByLeaf"] = local_nt  # so that pickle can find it

    class Holder:
        pass

    holder = Holder()
    spec = oxtree.tree_structure((holder, local_nt(holder)))
    holder.spec = spec  # holder -> spec -> local_nt -> (nothing); and a child spec on the type
    local_nt.child = spec.children()[1]  # local_nt -> child spec -> local_nt
    holder.copies = [copy.copy(spec), copy.deepcopy(spec), pickle.loads(pickle.dumps(spec))]
    holder_ref, nt_ref = weakref.ref(holder), weakref.ref(local_nt)
    del holder, spec, local_nt, globals()["HeldByLeaf"]
    assert _collected(holder_ref)
    assert _collected(nt_ref)


def test_spec_in_list_cycle_is_collected():
    local_nt = namedtuple("ListCycle", "a")
    box: list[Any] = [oxtree.tree_structure(local_nt(1))]
    box.append(box)
    ref = weakref.ref(local_nt)
    del local_nt, box
    assert _collected(ref)


def _reachable(root: Any, limit: int = 20_000) -> set[int]:
    """Ids of objects reachable from `root` through gc.get_referents (not through types)."""
    seen = {id(root)}
    stack = [root]
    while stack and len(seen) < limit:
        for ref in gc.get_referents(stack.pop()):
            if id(ref) not in seen:
                seen.add(id(ref))
                if not isinstance(ref, type):
                    stack.append(ref)
    return seen


def test_get_referents_reaches_held_objects():
    local_nt = namedtuple("Referenced", "a b")
    key_top, key_nested, od_key = Key("top"), Key("nested"), Key("od")

    class Factory:
        def __call__(self):
            return 0

    factory = Factory()
    tree = {
        key_top: local_nt(1, {key_nested: 2}),
        "x": [OrderedDict([(od_key, 3)]), defaultdict(factory, a=4)],
    }
    spec = oxtree.tree_structure(tree)
    direct = gc.get_referents(spec)
    assert direct, "a treedef holding Python objects must report them to the gc"
    reachable = _reachable(spec)
    for obj in (local_nt, key_top, key_nested, od_key, factory):
        assert id(obj) in reachable, obj
    assert gc.is_tracked(spec)


# --------------------------------------------------------------------------------------------------
# Threads.

THREADS = 8
THREAD_TREES = [
    CORPUS[name]
    for name in (
        "mixed",
        "none_nested",
        "dict_unsorted",
        "dict_mixed_keys_many",
        "ordereddict",
        "defaultdict_custom_factory",
        "deque_maxlen",
        "namedtuple_nested",
        "struct_time",
        "stat_result",
        "deep_chain_mixed",
        "wide_dict",
        "arrays",
        "empty_deque_maxlen0",
        "none",
    )
]


def test_threads_flatten_map_unflatten_concurrently():
    expected = []
    for tree in THREAD_TREES:
        for none_is_leaf in (False, True):
            leaves, spec = optree.tree_flatten(tree, none_is_leaf=none_is_leaf)
            expected.append((tree, none_is_leaf, leaves, repr(spec)))
    shared_specs = [oxtree.tree_structure(t, none_is_leaf=n) for t, n, _, _ in expected]
    barrier = threading.Barrier(THREADS)
    errors: list[BaseException] = []
    checks = [0] * THREADS

    def worker(index: int) -> None:
        try:
            barrier.wait()
            for round_ in range(40):
                for position, (tree, nil, leaves, spec_repr) in enumerate(expected):
                    if (position + round_ + index) % 3 == 0:
                        got_leaves, spec = oxtree.tree_flatten(tree, none_is_leaf=nil)
                        assert_same_leaves(got_leaves, leaves)
                        assert repr(spec) == spec_repr
                        assert spec == shared_specs[position]
                        assert hash(spec) == hash(shared_specs[position])
                    elif (position + round_ + index) % 3 == 1:
                        shared = shared_specs[position]
                        assert_same_tree(shared.unflatten(leaves), tree)
                        assert_same_leaves(shared.flatten_up_to(tree), leaves)
                        assert repr(pickle.loads(pickle.dumps(shared))) == spec_repr
                    else:
                        mapped = oxtree.tree_map(lambda x, y: y, tree, tree, none_is_leaf=nil)
                        assert_same_tree(mapped, tree)
                        assert_same_leaves(oxtree.tree_leaves(tree, none_is_leaf=nil), leaves)
                    checks[index] += 1
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads)
    if errors:
        raise errors[0]
    assert checks == [40 * len(expected)] * THREADS


@pytest.mark.parametrize("switch_interval", [1e-6, 5e-3])
def test_threads_share_one_spec(switch_interval):
    tree = CORPUS["mixed"]
    spec = oxtree.tree_structure(tree)
    leaves = oxtree.tree_leaves(tree)
    results: list[bool] = []
    old = sys.getswitchinterval()
    sys.setswitchinterval(switch_interval)
    try:

        def worker() -> None:
            ok = True
            for _ in range(300):
                ok &= spec.unflatten(leaves) is not None
                ok &= spec.num_leaves == len(leaves)
                ok &= len(spec.children()) == spec.num_children
            results.append(ok)

        threads = [threading.Thread(target=worker) for _ in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
    finally:
        sys.setswitchinterval(old)
    assert results == [True] * THREADS
