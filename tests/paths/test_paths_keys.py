"""JAX-style key classes (`SequenceKey`, `DictKey`, `GetAttrKey`, `FlattenedIndexKey`) and `keystr`.

Every observable of the four key classes is checked against `jax.tree_util`'s classes built from
the same values: attributes, `__match_args__`, pattern matching, repr, str, equality, hashing,
pickling and copying. `keystr` is compared with jax's on key paths made by both libraries.
"""

from __future__ import annotations

import copy
import operator
import pickle
from typing import Any

import jax.tree_util as jtu
import oxtree
import pytest
from helpers import CORPUS, OPAQUE_KEY_1, TREES, parametrize
from paths_helpers import JAX_TREES, to_jax, to_oxtree

KEY_CLASS_NAMES = ("SequenceKey", "DictKey", "GetAttrKey", "FlattenedIndexKey")

# (class name, constructor argument): values each class accepts in jax as well as in oxtree.
KEY_VALUES: list[tuple[str, Any]] = [
    ("SequenceKey", 0),
    ("SequenceKey", 7),
    ("SequenceKey", -1),
    ("SequenceKey", 2**31 - 1),
    ("DictKey", "a"),
    ("DictKey", ""),
    ("DictKey", "it's"),
    ("DictKey", 'say "hi"'),
    ("DictKey", 1),
    ("DictKey", -2.5),
    ("DictKey", None),
    ("DictKey", b"raw"),
    ("DictKey", (1, "z")),
    ("DictKey", frozenset()),
    ("DictKey", OPAQUE_KEY_1),
    ("GetAttrKey", "x"),
    ("GetAttrKey", "tm_year"),
    ("GetAttrKey", "_private"),
    ("FlattenedIndexKey", 0),
    ("FlattenedIndexKey", 3),
]
KEY_IDS = [f"{name}({value!r})" for name, value in KEY_VALUES]

ATTRIBUTE = {
    "SequenceKey": "idx",
    "DictKey": "key",
    "GetAttrKey": "name",
    "FlattenedIndexKey": "key",
}


def make(module: Any, name: str, value: Any) -> Any:
    return getattr(module, name)(value)


# --------------------------------------------------------------------------------------------------
# Construction, attributes and pattern matching.


@pytest.mark.parametrize(("name", "value"), KEY_VALUES, ids=KEY_IDS)
def test_attribute_holds_the_value(name: str, value: Any) -> None:
    key = make(oxtree, name, value)
    same = operator.eq if isinstance(value, int) else operator.is_
    assert same(getattr(key, ATTRIBUTE[name]), value)
    assert type(getattr(key, ATTRIBUTE[name])) is type(value)
    by_keyword = getattr(oxtree, name)(**{ATTRIBUTE[name]: value})
    assert same(getattr(by_keyword, ATTRIBUTE[name]), value)
    assert by_keyword == key


@pytest.mark.parametrize("name", KEY_CLASS_NAMES)
def test_match_args_are_jax_s(name: str) -> None:
    cls = getattr(oxtree, name)
    assert cls.__match_args__ == getattr(jtu, name).__match_args__ == (ATTRIBUTE[name],)
    assert cls.__name__ == name


def describe(key: Any) -> tuple[str, Any]:
    match key:
        case oxtree.SequenceKey(i):
            return ("seq", i)
        case oxtree.DictKey(key=k):
            return ("dict", k)
        case oxtree.GetAttrKey(n):
            return ("attr", n)
        case oxtree.FlattenedIndexKey(k):
            return ("flat", k)
        case _:
            return ("other", key)


@pytest.mark.parametrize(("name", "value"), KEY_VALUES, ids=KEY_IDS)
def test_pattern_matching(name: str, value: Any) -> None:
    kind = {"SequenceKey": "seq", "DictKey": "dict", "GetAttrKey": "attr"}.get(name, "flat")
    tag, got = describe(make(oxtree, name, value))
    assert tag == kind
    assert got == value
    assert type(got) is type(value)
    # The jax class of the same name does not match an oxtree class pattern.
    assert describe(make(jtu, name, value)) == ("other", make(jtu, name, value))


def test_pattern_matching_with_literal_subpatterns() -> None:
    def first_field(path: tuple[Any, ...]) -> str:
        match path:
            case (oxtree.DictKey("params"), oxtree.GetAttrKey(name=n), *_):
                return f"param {n}"
            case (oxtree.SequenceKey(0), *_):
                return "head"
            case ():
                return "root"
            case _:
                return "other"

    assert first_field((oxtree.DictKey("params"), oxtree.GetAttrKey("w"))) == "param w"
    assert first_field((oxtree.SequenceKey(0), oxtree.DictKey("x"))) == "head"
    assert first_field((oxtree.SequenceKey(1),)) == "other"
    assert first_field((oxtree.DictKey(0),)) == "other"
    assert first_field(()) == "root"


@pytest.mark.parametrize(
    ("name", "bad"),
    [("SequenceKey", "a"), ("SequenceKey", 1.0), ("SequenceKey", None), ("GetAttrKey", 1)],
)
def test_wrongly_typed_values_are_rejected_like_jax(name: str, bad: Any) -> None:
    with pytest.raises(TypeError):
        make(jtu, name, bad)
    with pytest.raises(TypeError):
        make(oxtree, name, bad)


@pytest.mark.parametrize("name", KEY_CLASS_NAMES)
def test_keys_are_immutable(name: str) -> None:
    key = make(oxtree, name, "x" if name in ("DictKey", "GetAttrKey") else 1)
    with pytest.raises(AttributeError):
        setattr(key, ATTRIBUTE[name], 2)
    assert getattr(key, ATTRIBUTE[name]) in ("x", 1)


# --------------------------------------------------------------------------------------------------
# repr and str.


@pytest.mark.parametrize(("name", "value"), KEY_VALUES, ids=KEY_IDS)
def test_repr_and_str_are_jax_s(name: str, value: Any) -> None:
    ours, theirs = make(oxtree, name, value), make(jtu, name, value)
    assert repr(ours) == repr(theirs)
    assert str(ours) == str(theirs)


def test_repr_and_str_examples() -> None:
    assert (repr(oxtree.SequenceKey(0)), str(oxtree.SequenceKey(0))) == (
        "SequenceKey(idx=0)",
        "[0]",
    )
    assert (repr(oxtree.DictKey("a")), str(oxtree.DictKey("a"))) == ("DictKey(key='a')", "['a']")
    assert (repr(oxtree.GetAttrKey("x")), str(oxtree.GetAttrKey("x"))) == (
        "GetAttrKey(name='x')",
        ".x",
    )
    assert (repr(oxtree.FlattenedIndexKey(0)), str(oxtree.FlattenedIndexKey(0))) == (
        "FlattenedIndexKey(key=0)",
        "[<flat index 0>]",
    )


# --------------------------------------------------------------------------------------------------
# Equality and hashing.


@pytest.mark.parametrize(("name", "value"), KEY_VALUES, ids=KEY_IDS)
def test_equal_and_same_hash_for_same_class_and_value(name: str, value: Any) -> None:
    a, b = make(oxtree, name, value), make(oxtree, name, copy.deepcopy(value))
    assert a is not b
    assert a == b
    assert not a != b  # noqa: SIM202 (the != operator itself is under test)
    assert hash(a) == hash(b)
    assert len({a, b}) == 1
    assert {a: 1}[b] == 1


@pytest.mark.parametrize(("name", "value"), KEY_VALUES, ids=KEY_IDS)
def test_never_equal_to_other_key_classes_or_raw_values(name: str, value: Any) -> None:
    key = make(oxtree, name, value)
    for other in KEY_CLASS_NAMES:
        if other == name:
            continue
        try:
            different = make(oxtree, other, value)
        except TypeError:
            continue
        assert key != different
        assert not key == different  # noqa: SIM201 (the == operator itself is under test)
    assert key != value
    assert value != key
    assert key != (value,)
    # jax's own key of the same name and value is a different class: not equal either.
    assert key != make(jtu, name, value)


def test_equality_follows_the_value() -> None:
    assert oxtree.SequenceKey(0) != oxtree.SequenceKey(1)
    assert oxtree.DictKey("a") != oxtree.DictKey("b")
    assert oxtree.DictKey(1) != oxtree.DictKey("1")
    assert oxtree.GetAttrKey("x") != oxtree.GetAttrKey("y")
    assert oxtree.FlattenedIndexKey(0) != oxtree.FlattenedIndexKey(1)
    # Values that are equal in Python make equal keys, as in jax.
    assert oxtree.DictKey(1) == oxtree.DictKey(1.0) == oxtree.DictKey(True)
    assert jtu.DictKey(1) == jtu.DictKey(1.0) == jtu.DictKey(True)
    assert hash(oxtree.DictKey(1)) == hash(oxtree.DictKey(1.0)) == hash(oxtree.DictKey(True))
    assert oxtree.SequenceKey(True) == oxtree.SequenceKey(1)
    assert oxtree.SequenceKey(0) != oxtree.FlattenedIndexKey(0)
    assert oxtree.DictKey(0) != oxtree.SequenceKey(0)
    assert oxtree.DictKey(0) != 0


def test_distinct_keys_in_a_set() -> None:
    keys = [make(oxtree, name, value) for name, value in KEY_VALUES]
    keys += [make(oxtree, name, value) for name, value in KEY_VALUES]
    assert len(set(keys)) == len(KEY_VALUES)


def test_unhashable_dict_key_value_is_unhashable_like_jax() -> None:
    with pytest.raises(TypeError):
        hash(jtu.DictKey([1]))
    key = oxtree.DictKey([1])
    with pytest.raises(TypeError):
        hash(key)
    assert key == oxtree.DictKey([1])


def test_keys_are_not_ordered() -> None:
    with pytest.raises(TypeError):
        oxtree.SequenceKey(0) < oxtree.SequenceKey(1)  # noqa: B015
    assert sorted([oxtree.SequenceKey(1), oxtree.SequenceKey(0)], key=lambda k: k.idx)[0].idx == 0


# --------------------------------------------------------------------------------------------------
# Pickling and copying.


@pytest.mark.parametrize(("name", "value"), KEY_VALUES, ids=KEY_IDS)
@pytest.mark.parametrize("protocol", [0, 2, pickle.HIGHEST_PROTOCOL])
def test_pickle_round_trip(name: str, value: Any, protocol: int) -> None:
    key = make(oxtree, name, value)
    back = pickle.loads(pickle.dumps(key, protocol=protocol))
    assert type(back) is type(key)
    assert back == key
    assert hash(back) == hash(key)
    assert repr(back) == repr(key)


@pytest.mark.parametrize(("name", "value"), KEY_VALUES, ids=KEY_IDS)
def test_copy_and_deepcopy(name: str, value: Any) -> None:
    key = make(oxtree, name, value)
    for clone in (copy.copy(key), copy.deepcopy(key)):
        assert type(clone) is type(key)
        assert clone == key
        assert hash(clone) == hash(key)


@parametrize(tree=TREES)
def test_pickle_the_key_paths_of_the_corpus(tree: Any) -> None:
    paths = [path for path, _ in oxtree.tree_leaves_with_path(tree, none_is_leaf=True)]
    for clone in (pickle.loads(pickle.dumps(paths)), copy.deepcopy(paths)):
        assert clone == paths
        assert [hash(p) for p in clone] == [hash(p) for p in paths]
        assert [oxtree.keystr(p) for p in clone] == [oxtree.keystr(p) for p in paths]


# --------------------------------------------------------------------------------------------------
# keystr.

KEYSTR_OPTIONS = [
    {},
    {"simple": True},
    {"separator": "/"},
    {"simple": True, "separator": "/"},
    {"simple": False, "separator": " -> "},
]


@parametrize(options=KEYSTR_OPTIONS)
def test_keystr_on_jax_paths_matches_jax(options: dict[str, Any]) -> None:
    checked = 0
    for tree in JAX_TREES.values():
        for path, _ in jtu.tree_leaves_with_path(tree):
            expected = jtu.keystr(path, **options)
            assert oxtree.keystr(tuple(map(to_oxtree, path)), **options) == expected, path
            # jax's own key objects, as a tuple or a list: printed as jax prints them.
            assert oxtree.keystr(path, **options) == expected, path
            assert oxtree.keystr(list(path), **options) == expected, path
            checked += 1
    assert checked > 500


@parametrize(options=KEYSTR_OPTIONS)
def test_keystr_on_oxtree_paths_matches_jax(options: dict[str, Any]) -> None:
    checked = 0
    for tree in CORPUS.values():
        for path, _ in oxtree.tree_leaves_with_path(tree):
            assert oxtree.keystr(path, **options) == jtu.keystr(
                tuple(map(to_jax, path)), **options
            ), path
            checked += 1
    assert checked > 500


@parametrize(options=KEYSTR_OPTIONS)
def test_keystr_mixed_and_unusual_entries(options: dict[str, Any]) -> None:
    paths: list[tuple[Any, ...]] = [
        (),
        (oxtree.SequenceKey(0),),
        (oxtree.GetAttrKey("a"), oxtree.FlattenedIndexKey(2), oxtree.DictKey((1, "q"))),
        (oxtree.DictKey(""), oxtree.DictKey("a/b"), oxtree.DictKey(None), oxtree.DictKey(b"x")),
        # Anything else is printed with str(), in both libraries.
        ("raw", 3, None),
        (oxtree.DictKey("k"), "loose", oxtree.SequenceKey(-1)),
    ]
    for path in paths:
        assert oxtree.keystr(path, **options) == jtu.keystr(tuple(map(to_jax, path)), **options)


def test_keystr_examples() -> None:
    path = (oxtree.DictKey("foo"), oxtree.GetAttrKey("bar"), oxtree.SequenceKey(1))
    assert oxtree.keystr(path) == "['foo'].bar[1]"
    assert oxtree.keystr(path, simple=True, separator="/") == "foo/bar/1"
    assert oxtree.keystr(()) == ""
    assert oxtree.keystr((oxtree.FlattenedIndexKey(0),)) == "[<flat index 0>]"
    assert oxtree.keystr((oxtree.FlattenedIndexKey(0),), simple=True) == "0"


def test_keystr_options_are_keyword_only() -> None:
    path = (oxtree.SequenceKey(0),)
    with pytest.raises(TypeError):
        oxtree.keystr(path, True)  # type: ignore[misc]
    assert oxtree.keystr(keys=path) == "[0]"
