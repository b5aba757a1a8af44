"""Dicts rebuilt again and again from one treedef.

Str-keyed dicts rebuilt a second time are copied from a per-thread template dict (see
`crates/oxtree/src/treespec/dict_template.rs`): these tests rebuild each dict several times
and check every copy against a dict built key by key, in both faces.
"""

from __future__ import annotations

import gc
import string
import sys
import threading
import weakref
from typing import Any

import jax.tree_util as jtu
import optree
import oxtree
import oxtree.tree_util as otu
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nodes import Key

REBUILDS = 4


def _keys(n: int, shuffled: bool) -> list[str]:
    keys = [f"k{i:06d}" for i in range(n)]
    return keys[::-1] if shuffled else keys


def _same_dict(got: Any, want: dict[str, Any]) -> None:
    assert type(got) is dict
    assert list(got) == list(want)
    assert all(got[k] is want[k] for k in want)
    assert gc.is_tracked(got) == gc.is_tracked(dict(want))


@pytest.mark.parametrize("n", [1, 2, 5, 6, 8, 9, 24, 32, 33, 100, 10_000])
@pytest.mark.parametrize("shuffled", [False, True])
def test_each_rebuild_is_a_fresh_dict_in_insertion_order(n: int, shuffled: bool) -> None:
    tree = {k: i for i, k in enumerate(_keys(n, shuffled))}
    leaves, spec = oxtree.tree_flatten(tree)
    seen = []
    for round_ in range(REBUILDS):
        values = [object() for _ in leaves]
        got = spec.unflatten(values)
        want = optree.tree_unflatten(optree.tree_structure(tree), values)
        _same_dict(got, want)
        # Each rebuild is its own dict: changing one changes no later one.
        got["extra"] = round_
        seen.append(got)
    assert len({id(d) for d in seen}) == REBUILDS
    assert all(d["extra"] == i for i, d in enumerate(seen))


@pytest.mark.parametrize("n", [1, 3, 8, 9, 32])
def test_jax_face_rebuilds_sorted(n: int) -> None:
    tree = {k: i for i, k in enumerate(_keys(n, True))}
    spec = otu.tree_structure(tree)
    jspec = jtu.tree_structure(tree)
    for _ in range(REBUILDS):
        values = [object() for _ in range(n)]
        _same_dict(otu.tree_unflatten(spec, values), jtu.tree_unflatten(jspec, values))


@pytest.mark.parametrize(
    "values",
    [
        [1, 2.0, "s"],
        [[1], 2, 3],
        [(1, 2), 3, 4],  # an untracked tuple: the dict stays untracked, as CPython's would
        [(1, [2]), 3, 4],
        [{"a": 1}, None, 2],
        [int, 1, 2],  # a type object is a GC object
    ],
)
def test_collector_tracking_matches_cpython(values: list[Any]) -> None:
    spec = oxtree.tree_structure({"c": 0, "a": 0, "b": 0})
    for _ in range(REBUILDS):
        got = spec.unflatten(values)
        # Leaf order is sorted: a, b, c.
        want = {"c": values[2], "a": values[0], "b": values[1]}
        # What CPython decides for the same dict built by inserting (tuples untrack lazily).
        gc.collect()
        _same_dict(got, want)


def test_rebuilds_leave_reference_counts_unchanged() -> None:
    values = [object(), object(), [1]]
    spec = oxtree.tree_structure({"b": 0, "a": 0, "c": 0})
    spec.unflatten(values)
    spec.unflatten(values)
    before = [sys.getrefcount(v) for v in values]
    none_before = sys.getrefcount(None)
    for _ in range(1000):
        d = spec.unflatten(values)
        del d
    assert [sys.getrefcount(v) for v in values] == before
    # The copies' references to the template's None placeholders are all given back.
    assert abs(sys.getrefcount(None) - none_before) < 100


def test_nested_and_repeated_key_lists() -> None:
    inner = {"y": 1, "x": 2}
    tree = {"b": [inner, dict(inner)], "a": {"y": {"q": 3}, "x": 4}}
    leaves, spec = oxtree.tree_flatten(tree)
    for _ in range(REBUILDS):
        assert spec.unflatten(leaves) == tree
        assert list(spec.unflatten(leaves)["b"][0]) == ["y", "x"]
        assert oxtree.tree_map(lambda v: v, tree) == tree


@pytest.mark.parametrize("count", [150, 3000])
def test_many_key_lists_share_the_template_slots(count: int) -> None:
    # More key lists (and orders) than the thread keeps templates for: key lists meet in a
    # slot pair, take each other's places, and every rebuild is still the right dict.
    tree = [
        {f"k{(i * 7 + j) % 53}": j for j in range(2 + i % 4)}
        | ({"a": -1, "Z": -2} if i % 3 else {"Z": -2, "a": -1})
        for i in range(count)
    ]
    leaves, spec = oxtree.tree_flatten(tree)
    structure = optree.tree_structure(tree)
    for _ in range(REBUILDS):
        values = [object() for _ in leaves]
        got = spec.unflatten(values)
        want = optree.tree_unflatten(structure, values)
        for g, w in zip(got, want, strict=True):
            _same_dict(g, w)


def test_large_dicts_past_the_thread_budget_rebuild_as_optree_does() -> None:
    # Large dicts get templates only up to a per-thread budget of keys (131,072): past it,
    # and for a dict larger than the whole budget, each is built key by key. Every rebuild
    # is the same dict either way, and templates evicted later release their share.
    sizes = [50_000, 60_000, 40_000, 140_000, 33]
    trees = [
        {k: i for i, k in enumerate(_keys(n, shuffled=i % 2 == 1))} for i, n in enumerate(sizes)
    ]
    specs = [(oxtree.tree_structure(t), optree.tree_structure(t)) for t in trees]
    for _ in range(3):
        for (spec, structure), tree in zip(specs, trees, strict=True):
            values = [object() for _ in tree]
            _same_dict(spec.unflatten(values), optree.tree_unflatten(structure, values))


@pytest.mark.parametrize("n", [33, 10_000])
def test_large_dicts_with_the_same_keys_share_a_template_across_treespecs(n: int) -> None:
    # Each flatten makes a new key list; a large dict's template is found by its keys, so a
    # new treespec of the same keys (every tree_map's) and a dict of the same key objects in
    # another order (its own template) both rebuild as optree does.
    tree = {k: i for i, k in enumerate(_keys(n, shuffled=True))}
    reordered = dict(sorted(tree.items()))
    for _ in range(REBUILDS):
        for t in (tree, reordered):
            values = [object() for _ in t]
            want = optree.tree_unflatten(optree.tree_structure(t), values)
            _same_dict(oxtree.tree_structure(t).unflatten(values), want)
            mapped = oxtree.tree_map(lambda v: v, t)
            _same_dict(mapped, t)


def test_non_str_and_mixed_keys_are_built_key_by_key() -> None:
    for tree in ({1: "a", 0: "b"}, {"a": 1, 2: "c"}, {(1,): 1, (0,): 2}):
        leaves, spec = oxtree.tree_flatten(tree)
        for _ in range(REBUILDS):
            assert list(spec.unflatten(leaves)) == list(tree)


def test_threads_rebuild_independently() -> None:
    spec = oxtree.tree_structure({"b": 0, "a": 0})
    errors: list[BaseException] = []

    def work(tag: int) -> None:
        try:
            for i in range(2000):
                d = spec.unflatten([tag, i])  # leaf order: a, b
                assert list(d) == ["b", "a"]
                assert (d["a"], d["b"]) == (tag, i)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


@settings(max_examples=150, deadline=None)
@given(
    st.dictionaries(
        st.text(string.ascii_letters, min_size=1, max_size=3),
        st.integers() | st.text(max_size=2) | st.none(),
        max_size=12,
    )
)
def test_random_dicts_rebuild_as_optree_does(tree: dict[str, Any]) -> None:
    leaves, spec = oxtree.tree_flatten(tree)
    ospec = optree.tree_structure(tree)
    for _ in range(3):
        values = [[v] for v in leaves]
        assert len(values) == len(tree) - sum(v is None for v in tree.values())
        _same_dict(spec.unflatten(values), optree.tree_unflatten(ospec, values))


def test_non_str_keys_are_not_kept_alive() -> None:
    key = Key("k")
    ref = weakref.ref(key)
    spec = oxtree.tree_structure({key: 0, Key("j"): 1})
    rebuilt = [spec.unflatten([1, 2]) for _ in range(REBUILDS)]
    assert all(d[key] == 2 for d in rebuilt)
    del spec, rebuilt, key
    gc.collect()
    assert ref() is None
