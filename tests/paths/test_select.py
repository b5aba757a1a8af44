"""Selecting leaves by key-path pattern: `PathPattern`, `tree_mask`, `tree_labels`,
`tree_set_matching` on both faces, `oxtree.jax.partition` and `Module.select` with a pattern.

Every result is checked against a reference written here in Python: the glob grammar parsed
with one regular expression and matched key by key, recursively, over the pieces `str(key)`
gives for each key of `tree_leaves_with_path` (a str dict key by the string itself), and a
regular expression's `fullmatch` over `keystr(path)`; every malformed pattern and bad argument
has its own case.
"""

from __future__ import annotations

import copy
import functools
import pickle
import re
from collections import OrderedDict
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import oxtree
import oxtree.jax as oxjax
import pytest
from helpers import HYPOTHESIS_SETTINGS, NONE_IS_LEAF_OPTIONS, TREES, parametrize, trees
from hypothesis import given
from hypothesis import strategies as st
from oxtree import (
    DictKey,
    FlattenedIndexKey,
    GetAttrKey,
    Kind,
    Module,
    PathPattern,
    SequenceKey,
    keystr,
)
from oxtree import tree_util as tu
from oxtree.module import All, AnyOf, Not, OfType

# --------------------------------------------------------------------------------------------------
# The reference matcher.

_STEP = re.compile(
    r"""
    (?P<any>\.?\*\*)(?=[.\[]|$)
  | \.?(?P<attr>(?:\\.|[^.\[\]\\])+)
  | \[(?P<q>['"])(?P<str>(?:\\.|(?!(?P=q))[^\\])*)(?P=q)\]
  | \[(?P<item>(?:\\.|[^\]\\])+)\]
    """,
    re.X,
)


def _glob(body: str) -> re.Pattern[str]:
    out, i = [], 0
    while i < len(body):
        c = body[i]
        if c == "\\":
            out.append(re.escape(body[i + 1]))
            i += 2
            continue
        out.append(".*" if c == "*" else "." if c == "?" else re.escape(c))
        i += 1
    return re.compile("".join(out), re.DOTALL)


def ref_steps(pattern: str) -> list[tuple[str, re.Pattern[str] | None]]:
    """The keys of a well-formed glob: ('any', None), ('attr'|'item'|'str', regex)."""
    steps: list[tuple[str, re.Pattern[str] | None]] = []
    pos = 0
    while pos < len(pattern):
        m = _STEP.match(pattern, pos)
        assert m is not None, (pattern, pos)
        assert m.end() > pos, (pattern, pos)
        pos = m.end()
        if m["any"] is not None:
            steps.append(("any", None))
        else:
            kind = next(k for k in ("attr", "str", "item") if m[k] is not None)
            steps.append((kind, _glob(m[kind])))
    return steps


def piece(key: Any) -> tuple[str, str, str | None]:
    """What the patterns see of one key: its kind ('attr', 'item', 'other'), the text
    `keystr` writes for it (without the '.' or brackets), and a str dict key's string."""
    text = str(key)
    if isinstance(key, DictKey | jax.tree_util.DictKey) and isinstance(key.key, str):
        return "item", text[1:-1], key.key
    if text.startswith("."):
        return "attr", text[1:], None
    if text.startswith("[") and text.endswith("]"):
        return "item", text[1:-1], None
    return "other", text, None


def ref_match(pattern: Any, path: tuple[Any, ...]) -> bool:
    """Whether a key path matches a glob (str), a compiled regex or a list of them."""
    if isinstance(pattern, list | tuple):
        return any(ref_match(p, path) for p in pattern)
    if isinstance(pattern, re.Pattern):
        return pattern.fullmatch(keystr(path)) is not None
    steps = ref_steps(pattern)
    pieces = [piece(k) for k in path]

    @functools.cache
    def match(i: int, j: int) -> bool:
        if i == len(steps):
            return j == len(pieces)
        kind, rx = steps[i]
        if kind == "any":
            return match(i + 1, j) or (j < len(pieces) and match(i, j + 1))
        if j == len(pieces):
            return False
        got, text, string = pieces[j]
        assert rx is not None
        if kind == "str":
            ok = string is not None and rx.fullmatch(string) is not None
        else:
            ok = got == kind and rx.fullmatch(text) is not None
        return ok and match(i + 1, j + 1)

    return match(0, 0)


def expected_mask(leaves_with_path: list[tuple[Any, Any]], patterns: list[Any]) -> list[bool]:
    return [ref_match(list(patterns), path) for path, _ in leaves_with_path]


# --------------------------------------------------------------------------------------------------
# Patterns made from a path, so that random trees get matches.


def _escape(text: str, special: str) -> str:
    return "".join("\\" + c if c in special + "\\*?" else c for c in text)


def render(path: tuple[Any, ...], choices: list[int]) -> str:
    """A glob for `path`: each key written exactly, as a wildcard, or folded into `**`."""
    out = []
    for i, key in enumerate(path):
        kind, text, string = piece(key)
        choice = choices[i % len(choices)] if choices else 0
        if choice == 4:
            if not out or out[-1] != ".**":
                out.append(".**")
            continue
        if kind == "attr":
            out.append("." + ("*" if choice == 1 else _escape(text, ".[]")))
            if choice == 2 and text:
                out[-1] = "." + _escape(text[0], ".[]") + "*"
        elif string is not None and choice in (0, 2):
            body = _escape(string, "'") if choice == 0 else _escape(string[:1], "'") + "*"
            out.append(f"['{body}']")
        elif kind == "item":
            body = "*" if choice == 1 else "?" * len(text) if choice == 3 else _escape(text, "[]")
            out.append(f"[{body}]" if body else "[*]")
        else:
            out.append(".**")
    text = "".join(out)
    return (
        text[1:]
        if text.startswith(".") and not text.startswith(".**") and choices[:1] == [2]
        else text
    )


FIXED_PATTERNS = [
    "**",
    "",
    "[*]",
    "[0]",
    "[1]**",
    "**[0]",
    "**['a']",
    "**.x",
    "*",
    ".*",
    "['a']**",
    "**['k']**",
    "[*][*]",
    "**[?]",
    "['*']",
    "**.y.**",
    "**[<flat index *>]",
    re.compile(r".*\['a'\].*"),
    re.compile(r"\[\d+\]"),
]


# --------------------------------------------------------------------------------------------------
# tree_mask against the reference.


@parametrize(tree=TREES, none_is_leaf=NONE_IS_LEAF_OPTIONS)
def test_mask_matches_the_reference_on_the_corpus(tree: Any, none_is_leaf: bool) -> None:
    pairs = oxtree.tree_leaves_with_path(tree, none_is_leaf=none_is_leaf)
    spec = oxtree.tree_structure(tree, none_is_leaf=none_is_leaf)
    patterns = [*FIXED_PATTERNS, *(render(path, [0]) for path, _ in pairs[:3])]
    for pattern in patterns:
        mask = oxtree.tree_mask(tree, pattern, none_is_leaf=none_is_leaf)
        assert oxtree.tree_structure(mask, none_is_leaf=none_is_leaf) == spec
        got = oxtree.tree_leaves(mask, none_is_leaf=none_is_leaf)
        assert got == expected_mask(pairs, [pattern]), pattern
    # Several patterns: any of them.
    mask = oxtree.tree_mask(tree, *patterns[:4], none_is_leaf=none_is_leaf)
    assert oxtree.tree_leaves(mask, none_is_leaf=none_is_leaf) == expected_mask(pairs, patterns[:4])


@parametrize(tree=TREES)
def test_jax_face_mask_matches_the_reference(tree: Any) -> None:
    try:
        pairs = tu.tree_leaves_with_path(tree)
    except Exception as e:  # a dict whose keys do not sort: the JAX face refuses it
        with pytest.raises(type(e)):
            tu.tree_mask(tree, "**")
        return
    for pattern in FIXED_PATTERNS:
        mask = tu.tree_mask(tree, pattern)
        assert tu.tree_structure(mask) == tu.tree_structure(tree)
        assert tu.tree_leaves(mask) == expected_mask(pairs, [pattern]), pattern
        assert oxtree.tree.mask(tree, pattern) == mask


@given(tree=trees(), data=st.data())
@HYPOTHESIS_SETTINGS
def test_random_patterns_on_random_trees(tree: Any, data: st.DataObject) -> None:
    pairs = oxtree.tree_leaves_with_path(tree)
    patterns: list[Any] = []
    for _ in range(3):
        if pairs:
            path = data.draw(st.sampled_from(pairs))[0]
            choices = data.draw(st.lists(st.integers(0, 4), min_size=1, max_size=4))
            patterns.append(render(path, choices))
    patterns.append(data.draw(st.sampled_from(FIXED_PATTERNS)))
    for pattern in patterns:
        got = oxtree.tree_leaves(oxtree.tree_mask(tree, pattern))
        assert got == expected_mask(pairs, [pattern]), pattern
        compiled = PathPattern(pattern)
        assert [compiled.match(path) for path, _ in pairs] == got
    if pairs:  # a pattern made from a path matches it
        path = pairs[0][0]
        assert PathPattern(render(path, [0])).match(path)


def test_each_kind_of_key_is_written_as_keystr_writes_it() -> None:
    tree = {"a": [10, {"b": (20, 30)}], 3: "int-key", "it's": 40, "x.y": 50, "*": 60}
    cases = {
        "['a'][0]": [10],
        "['a'][1]['b'][1]": [30],
        '["a"][*]': [10],
        "[3]": ["int-key"],
        "[*]": ["int-key", 40, 50, 60],
        "['it\\'s']": [40],
        '["it\'s"]': [40],
        "['x.y']": [50],
        "['\\*']": [60],
        "['*']": [40, 50, 60],
        "[\"'*'\"]": [],  # a str key matched by the string, never by its repr
        "['a']**": [10, 20, 30],
        "**[1]": [30],
        "['a'].**[1]": [30],
        "['a']**[0]": [10, 20],
        "['?']": [60],
    }
    for pattern, expected in cases.items():
        mask = oxtree.tree_mask(tree, pattern)
        picked = [
            leaf
            for leaf, hit in zip(oxtree.tree_leaves(tree), oxtree.tree_leaves(mask), strict=True)
            if hit
        ]
        assert sorted(picked, key=str) == sorted(expected, key=str), pattern


class Layer(Module):
    def __init__(self, n: int) -> None:
        self.register_parameter("w", float(n))
        self.register_parameter("bias", 0.5)
        self.register_state("count", n)


class Net(Module):
    def __init__(self) -> None:
        self.layers = [Layer(1), Layer(2)]
        self.head = Layer(3)
        self.name = "net"


def test_attributes_namedtuples_and_registered_nodes() -> None:
    net = Net()
    mask = oxtree.tree_mask(net, "layers[*].w", "**.bias")
    assert [m.w for m in mask.layers] == [True, True]
    assert [m.bias for m in mask.layers] == [True, True]
    assert (mask.head.w, mask.head.bias, mask.layers[0].count) == (False, True, False)
    # The leading '.' of the first key may be written or not; `*` stays within one key.
    assert oxtree.tree_leaves(oxtree.tree_mask(net, ".layers[*].w")) == oxtree.tree_leaves(
        oxtree.tree_mask(net, "layers[*].w")
    )
    one_key = oxtree.tree_mask(net, "*.w")  # head.w; never layers[0].w
    assert (one_key.head.w, one_key.layers[0].w) == (True, False)
    pairs = oxtree.tree_leaves_with_path(net)
    for pattern in ("layers[*].w", ".layers[*].w", "*.w", "*[0].*", "**.w", "head.*"):
        got = oxtree.tree_leaves(oxtree.tree_mask(net, pattern))
        assert got == expected_mask(pairs, [pattern]), pattern


def test_custom_node_keys() -> None:
    class Flat:
        def __init__(self, a: Any, b: Any) -> None:
            self.a, self.b = a, b

    class Named(Flat):
        pass

    class Keyed(Flat):
        pass

    ns = "test-select-custom"
    oxtree.register_pytree_node(
        Flat, lambda p: ((p.a, p.b), None), lambda _, c: Flat(*c), namespace=ns
    )
    oxtree.register_pytree_node(
        Named, lambda p: ((p.a, p.b), None, ("a", "b")), lambda _, c: Named(*c), namespace=ns
    )
    oxtree.register_pytree_node(
        Keyed,
        lambda p: ((p.a, p.b), None),
        lambda _, c: Keyed(*c),
        flatten_with_keys_func=lambda p: (
            ((GetAttrKey("a"), p.a), (DictKey("b"), p.b)),
            None,
        ),
        namespace=ns,
    )
    try:
        tree = [Flat(1, 2), Named(3, 4), Keyed(5, 6)]
        pairs = oxtree.tree_leaves_with_path(tree, namespace=ns)
        assert [keystr(p) for p, _ in pairs] == [
            "[0][<flat index 0>]",
            "[0][<flat index 1>]",
            "[1][<flat index a>]",
            "[1][<flat index b>]",
            "[2].a",
            "[2]['b']",
        ]
        for pattern in ("**[<flat index 1>]", "[1][<flat index ?>]", "**.a", "[2]['b']", "**"):
            got = oxtree.tree_leaves(oxtree.tree_mask(tree, pattern, namespace=ns), namespace=ns)
            assert got == expected_mask(pairs, [pattern]), pattern
        assert oxtree.tree_leaves(oxtree.tree_mask(tree, "**.a")) == [False] * 3
    finally:
        for cls in (Flat, Named, Keyed):
            oxtree.unregister_pytree_node(cls, namespace=ns)


def test_is_leaf_and_none_is_leaf() -> None:
    tree = {"a": [1, None], "b": (2, 3)}
    mask = oxtree.tree_mask(tree, "['b']", is_leaf=lambda x: isinstance(x, tuple))
    assert mask == {"a": [False, None], "b": True}
    assert oxtree.tree_mask(tree, "**[1]", none_is_leaf=True) == {
        "a": [False, True],
        "b": (False, True),
    }
    assert tu.tree_mask(tree, "['b']", is_leaf=lambda x: isinstance(x, tuple)) == mask


def test_regular_expressions_match_the_whole_keystr() -> None:
    tree = {"enc": {"w": 1, "bias": 2}, "dec": {"bias": 3}}
    pairs = oxtree.tree_leaves_with_path(tree)
    for regex in (
        re.compile(r".*bias.*"),
        re.compile(r"bias"),  # fullmatch: no match
        re.compile(r"\['(enc|dec)'\]\['bias'\]"),
        re.compile(r"\['ENC'\].*", re.IGNORECASE),
        re.compile(r"(?!\['dec'\]).*"),  # lookahead: Python's semantics, as it is
    ):
        got = oxtree.tree_leaves(oxtree.tree_mask(tree, regex))
        assert got == [regex.fullmatch(keystr(p)) is not None for p, _ in pairs], regex
    # Globs and regular expressions together.
    mask = oxtree.tree_mask(tree, "['dec']**", re.compile(r".*'w'.*"))
    assert mask == {"enc": {"w": True, "bias": False}, "dec": {"bias": True}}


def test_no_pattern_matches_nothing() -> None:
    assert oxtree.tree_mask({"a": 1}) == {"a": False}
    assert PathPattern().match(()) is False


def test_root_leaf_has_the_empty_path() -> None:
    assert oxtree.tree_mask(5, "") is True
    assert oxtree.tree_mask(5, "**") is True
    assert oxtree.tree_mask(5, "*") is False
    assert oxtree.tree_mask(5, re.compile("")) is True


# --------------------------------------------------------------------------------------------------
# tree_labels


def test_labels_take_the_first_rule_that_matches() -> None:
    tree = {"enc": {"w": 1, "bias": 2}, "head": {"w": 3, "bias": 4}}
    rules = {"**['bias']": "no_decay", "['head']**": "head", "**": "decay"}
    got = oxtree.tree_labels(tree, rules)
    assert got == {
        "enc": {"w": "decay", "bias": "no_decay"},
        "head": {"w": "head", "bias": "no_decay"},
    }
    pairs = oxtree.tree_leaves_with_path(tree)
    expected = [
        next(label for p, label in rules.items() if ref_match(p, path)) for path, _ in pairs
    ]
    assert oxtree.tree_leaves(got) == expected
    # A sequence of pairs, a PathPattern as a rule, a regex, a default.
    seq = [(PathPattern("**['w']", "x"), 1), (re.compile(r".*bias.*"), 2)]
    assert oxtree.tree_labels(tree, seq) == {
        "enc": {"w": 1, "bias": 2},
        "head": {"w": 1, "bias": 2},
    }
    assert oxtree.tree_labels(tree, {"['enc']**": "e"}, "other")["head"] == {
        "w": "other",
        "bias": "other",
    }
    assert oxtree.tree_labels(tree, {}, default=None) == {
        "enc": {"w": None, "bias": None},
        "head": {"w": None, "bias": None},
    }
    assert tu.tree_labels(tree, rules) == got
    assert oxtree.tree.labels(tree, rules) == got


def test_labels_feed_optax_multi_transform() -> None:
    params = {"enc": {"w": jnp.ones(2)}, "head": {"w": jnp.ones(2)}}
    labels = oxtree.tree_labels(params, {"['enc']**": "frozen"}, default="trained")
    tx = optax.multi_transform({"frozen": optax.set_to_zero(), "trained": optax.sgd(1.0)}, labels)
    updates, _ = tx.update(params, tx.init(params), params)
    assert np.allclose(updates["enc"]["w"], 0.0)
    assert np.allclose(updates["head"]["w"], -1.0)


def test_mask_feeds_optax_masked() -> None:
    params = {"w": jnp.ones(2), "bias": jnp.ones(2)}
    tx = optax.masked(optax.scale(-2.0), oxtree.tree_mask(params, "['bias']"))
    updates, _ = tx.update(params, tx.init(params))
    assert np.allclose(updates["bias"], -2.0)
    assert np.allclose(updates["w"], 1.0)


# --------------------------------------------------------------------------------------------------
# tree_set_matching


@parametrize(tree=TREES)
def test_set_matching_replaces_exactly_the_matches(tree: Any) -> None:
    before = repr(copy.deepcopy(tree))
    pairs = oxtree.tree_leaves_with_path(tree)
    for pattern in FIXED_PATTERNS[:8]:
        hits = expected_mask(pairs, [pattern])
        out = oxtree.tree_set_matching(tree, pattern, "NEW")
        assert oxtree.tree_structure(out) == oxtree.tree_structure(tree)
        got = oxtree.tree_leaves(out)
        assert len(got) == len(pairs)
        for x, hit, (_, leaf) in zip(got, hits, pairs, strict=True):
            assert x == "NEW" if hit else x is leaf, pattern
        seen: list[Any] = []

        def record(path: Any, leaf: Any, seen: list[Any] = seen) -> Any:
            seen.append((path, leaf))
            return leaf

        oxtree.tree_set_matching(tree, pattern, func=record)
        assert seen == [pair for pair, h in zip(pairs, hits, strict=True) if h]
    assert repr(tree) == before


def test_set_matching_by_value_or_function_on_both_faces() -> None:
    tree = {"enc": [1, 2], "dec": [3]}
    assert oxtree.tree_set_matching(tree, "['enc'][*]", None) == {"enc": [None, None], "dec": [3]}
    assert oxtree.tree_set_matching(tree, "**", func=lambda p, x: keystr(p)) == {
        "enc": ["['enc'][0]", "['enc'][1]"],
        "dec": ["['dec'][0]"],
    }
    jax_out = tu.tree_set_matching(tree, PathPattern("['dec']**"), 0)
    assert list(jax_out) == ["dec", "enc"]  # the JAX face rebuilds dicts sorted
    assert jax_out == {"enc": [1, 2], "dec": [0]}
    assert tu.tree_set_matching(tree, "**[0]", func=lambda p, x: -x) == {
        "enc": [-1, 2],
        "dec": [-3],
    }
    assert oxtree.tree.set_matching(tree, "**[1]", 9) == {"enc": [1, 9], "dec": [3]}
    assert tree == {"enc": [1, 2], "dec": [3]}


# --------------------------------------------------------------------------------------------------
# PathPattern


def test_path_pattern_object() -> None:
    regex = re.compile(r".*w")
    p = PathPattern("a.*", PathPattern("b", regex))
    assert p.patterns == ("a.*", "b", regex)
    assert repr(p) == "PathPattern('a.*', 'b', re.compile('.*w'))"
    assert p == PathPattern("a.*", "b", regex)
    assert hash(p) == hash(PathPattern("a.*", "b", regex))
    assert p != PathPattern("a.*")
    assert p != "a.*"
    assert pickle.loads(pickle.dumps(p)) == p
    # A PathPattern given alone is used as compiled; with others, its patterns join theirs.
    tree = {"a": {"z": 1, "w": 2}, "b": 3, "xw": 4}
    assert oxtree.tree_mask(tree, p) == oxtree.tree_mask(tree, *p.patterns)
    assert oxtree.tree_mask(tree, p) == {"a": {"z": False, "w": False}, "b": False, "xw": False}
    assert oxtree.tree_mask(tree, p, "['b']")["b"] is True
    # The regex sees the keystr, quotes and brackets included.
    assert oxtree.tree_mask(tree, PathPattern(re.compile(r".*w'\]")))["a"] == {
        "z": False,
        "w": True,
    }
    assert p.match([GetAttrKey("a"), GetAttrKey("z")])
    assert p.match((DictKey("x"), GetAttrKey("w")))  # the regex
    assert not p.match((GetAttrKey("a"),))
    # JAX's own key objects, a ModulePath (a module's key in JAX's view) and other objects.
    jkeys = (
        jax.tree_util.DictKey("a"),
        jax.tree_util.SequenceKey(0),
        jax.tree_util.GetAttrKey("w"),
    )
    assert PathPattern("['a'][0].w").match(jkeys)
    assert PathPattern("[<flat index 2>]").match((jax.tree_util.FlattenedIndexKey(2),))
    from oxtree.module import ModulePath

    mp = ModulePath((GetAttrKey("layers"), SequenceKey(0), GetAttrKey("w")))
    assert PathPattern("layers[*].w").match((mp,))

    class Odd:
        def __str__(self) -> str:
            return "<odd>"

    assert PathPattern("**").match((Odd(),))
    assert not PathPattern("*").match((Odd(),))
    assert PathPattern("[3]").match((DictKey(3),))
    assert PathPattern("[3]").match((SequenceKey(3),))
    assert PathPattern("[<flat index a>]").match((FlattenedIndexKey("a"),))


def test_path_pattern_leaf_mask_of_treespecs_and_graphdefs() -> None:
    shared = [1.0, 2.0]
    tree = {"a": shared, "b": shared}
    p = PathPattern("['b'][1]", "['a'][0]")
    _leaves, spec = oxtree.tree_flatten(tree)
    assert p._leaf_mask(spec) == [True, False, False, True]
    _, gd = oxtree.graph_flatten(tree)
    # A shared leaf is matched by the path of its first occurrence.
    assert p._leaf_mask(gd) == [True, False]
    with pytest.raises(TypeError, match="_leaf_mask expects a treespec or a graphdef, got dict"):
        p._leaf_mask(tree)


# --------------------------------------------------------------------------------------------------
# Filters: oxtree.jax.partition and Module.select


def test_partition_by_pattern() -> None:
    tree = {"enc": {"w": jnp.ones(2), "b": 1.0}, "head": {"w": jnp.zeros(2)}}
    p = PathPattern("['enc']**")
    left, right = oxjax.partition(tree, p)
    mask_left, _mask_right = oxjax.partition(tree, oxtree.tree_mask(tree, p))
    assert oxtree.tree_structure(left) == oxtree.tree_structure(mask_left)
    assert left["enc"]["b"] == 1.0
    assert left["head"]["w"] is None
    assert right["enc"]["w"] is None
    assert right["head"]["w"] is tree["head"]["w"]
    assert oxjax.combine(left, right)["enc"]["w"] is tree["enc"]["w"]
    # Shared objects stay shared, as with a function filter.
    shared = {"w": 1.0}
    left, _ = oxjax.partition({"x": shared, "y": shared}, PathPattern("**"))
    assert left["x"] is left["y"]
    with pytest.raises(TypeError, match=r"got str; for a path pattern write PathPattern\('\*\*'\)"):
        oxjax.partition(tree, "**")
    with pytest.raises(TypeError, match="a PathPattern is a whole filter spec"):
        oxjax.partition(tree, {"enc": p, "head": True})


def test_module_select_by_pattern() -> None:
    net = Net()
    leaves, gd = oxtree.graph_flatten(net, none_is_leaf=True)
    for pattern in ("layers[*].w", "**.bias", "head.*", "**", "layers[1]**"):
        picked = net.select(PathPattern(pattern)).state_dict()
        expected = {
            keystr(path).removeprefix("."): leaf
            for path, leaf in zip(gd.paths(), leaves, strict=True)
            if leaf is not None and ref_match(pattern, path)
        }
        assert picked == expected, pattern
    # With the other filters and combinators.
    assert net.select(Kind.STATE, PathPattern("layers.**")).state_dict() == {
        "layers[0].count": 1,
        "layers[1].count": 2,
    }
    assert net.select(Not(PathPattern("**.bias")), Kind.PARAMETER).state_dict() == {
        "layers[0].w": 1.0,
        "layers[1].w": 2.0,
        "head.w": 3.0,
    }
    assert set(net.select(AnyOf(PathPattern("head.w"), OfType(int))).state_dict()) == {
        "head.w",
        "layers[0].count",
        "layers[1].count",
        "head.count",
    }
    # One at a time, as filter_vmap's StateAxes asks.
    from oxtree.module._filters import _as_filter

    assert repr(_as_filter(PathPattern("a"))) == "PathPattern('a')"
    assert net.select(All(PathPattern("head.w"))).state_dict() == {"head.w": 3.0}

    test = _as_filter(PathPattern("head.*"))
    assert test((GetAttrKey("head"), GetAttrKey("w")), Kind.PARAMETER, 1.0) is True
    with pytest.raises(TypeError, match=r"for a path pattern write PathPattern\('head'\)"):
        net.select("head")


class Mixed(Module):
    def __init__(self) -> None:
        self.register_parameter("w", 2.0)
        self.register_state("tag", "abc")
        self.register_state("n", -1)


def test_module_filters_after_a_rejection_are_not_asked() -> None:
    # Module.select asks its filters column by column now; each is still asked only about
    # the leaves the ones before it left open, as all() and any() did leaf by leaf.
    m = Mixed()

    def positive(path: Any, kind: Any, leaf: Any) -> bool:
        return leaf > 0  # raises on the str leaf

    with pytest.raises(TypeError):
        m.select(positive)
    assert m.select(OfType(float, int), positive).state_dict() == {"w": 2.0}
    assert m.select(AnyOf(OfType(str), positive)).state_dict() == {"w": 2.0, "tag": "abc"}
    assert m.select(Not(OfType(str)), positive).state_dict() == {"w": 2.0}
    assert m.select(PathPattern("w", "n"), positive).state_dict() == {"w": 2.0}


# --------------------------------------------------------------------------------------------------
# Errors: every malformed pattern and bad argument, naming what and where.

MALFORMED = [
    ("layers[*.w", 6, "unclosed '['"),
    ("a[", 1, "unclosed '['"),
    ("a]", 1, "unmatched ']'"),
    ("[0]]", 3, "expected '.', '[' or '**' after ']', got ']'"),
    ("a..b", 1, "empty key after '.'"),
    ("a.", 1, "empty key after '.'"),
    (".", 0, "empty key after '.'"),
    ("a.[0]", 1, "empty key after '.'"),
    ("[]", 0, "empty key '[]'"),
    ("['a]", 1, "unterminated string: no closing '"),
    ("['a'x]", 4, "expected ']' after the string, got 'x'"),
    ("['a'", 0, "unclosed '['"),
    ("[0]a", 3, "expected '.', '[' or '**' after ']', got 'a'"),
    ("[0]*", 3, "expected '.', '[' or '**' after ']', got '*'"),
    ("a**", 1, "'**' inside a key"),
    ("[a**]", 2, "'**' inside a key"),
    ("***", 0, "'***' is not a key"),
    ("**a", 0, "'**' stands for whole keys"),
    ("a\\", 1, "dangling '\\' at the end of the pattern"),
    ("[a[b]", 2, "'[' inside bracketed key"),
]


@pytest.mark.parametrize(("pattern", "at", "what"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_patterns_say_what_and_where(pattern: str, at: int, what: str) -> None:
    tree = {"a": [1, 2]}
    before = copy.deepcopy(tree)
    for call, caller in (
        (lambda: PathPattern(pattern), "PathPattern"),
        (lambda: oxtree.tree_mask(tree, "**", pattern), "tree_mask"),
        (lambda: tu.tree_mask(tree, pattern), "tree_mask"),
        (lambda: oxtree.tree_labels(tree, {pattern: 1}), "tree_labels"),
        (lambda: oxtree.tree_set_matching(tree, pattern, 0), "tree_set_matching"),
    ):
        with pytest.raises(ValueError, match="invalid path pattern") as info:
            call()
        message = str(info.value)
        head = f"{caller}: invalid path pattern {pattern!r} at position {at}: "
        assert message.startswith(head), message
        assert what in message.splitlines()[0], message
        # The pattern and a caret under the character.
        assert message.splitlines()[1:] == [f"    {pattern}", "    " + " " * at + "^"]
    assert tree == before


def test_bad_arguments() -> None:
    tree = {"a": [1, 2]}
    before = copy.deepcopy(tree)
    with pytest.raises(
        TypeError,
        match=r"^tree_mask: a path pattern is a str \(a glob over keystr\), a compiled "
        r"re.Pattern or a PathPattern, got int: 5$",
    ):
        oxtree.tree_mask(tree, 5)
    with pytest.raises(TypeError, match=r"PathPattern: a path pattern is a str.*got tuple"):
        PathPattern(("a", "b"))
    with pytest.raises(TypeError, match=r"tree_set_matching: a path pattern .* got list"):
        oxtree.tree_set_matching(tree, ["a"], 0)
    with pytest.raises(TypeError, match="a bytes regular expression cannot match key paths"):
        oxtree.tree_mask(tree, re.compile(b"a"))
    with pytest.raises(TypeError, match="is_leaf must be a callable or None, got int"):
        oxtree.tree_mask(tree, "**", is_leaf=1)
    with pytest.raises(TypeError, match="give either value or func, not both"):
        oxtree.tree_set_matching(tree, "**", 0, func=lambda p, x: x)
    with pytest.raises(TypeError, match="give the value to put at the matching leaves, or func"):
        oxtree.tree_set_matching(tree, "**")
    with pytest.raises(TypeError, match="func must be callable, got int"):
        tu.tree_set_matching(tree, "**", func=3)
    for rules, what in (
        ("**", "got str: '\\*\\*'"),
        (5, "got int: 5"),
        ([("**", 1, 2)], r"got the item \('\*\*', 1, 2\) \(not a pair\)"),
        (["**"], r"got the item '\*\*' \(not a pair\)"),
    ):
        with pytest.raises(TypeError, match=f"tree_labels: rules is a mapping .*, {what}"):
            oxtree.tree_labels(tree, rules)
    with pytest.raises(
        ValueError,
        match=r"tree_labels: no rule matches the leaf at \['a'\]\[1\] \(1 of 2 leaves match "
        r"none\); add a rule for it or give a default",
    ):
        tu.tree_labels(tree, {"**[0]": "x"})
    with pytest.raises(ValueError, match=r"no rule matches the leaf at \(\)"):
        oxtree.tree_labels(1, {"[0]": "x"})
    assert tree == before


def test_errors_from_user_code_propagate() -> None:
    class BadRegex:
        """Looks like a compiled re.Pattern to nobody: a TypeError."""

    with pytest.raises(TypeError, match="got BadRegex"):
        oxtree.tree_mask([1], BadRegex())

    def boom(path: Any, leaf: Any) -> Any:
        raise KeyError("from func")

    with pytest.raises(KeyError, match="from func"):
        oxtree.tree_set_matching([1], "**", func=boom)

    class BadKey(str):
        def __repr__(self) -> str:
            raise RuntimeError("no repr")

    # A str key's repr is only made when a pattern asks for it (an unquoted bracket glob).
    tree = {BadKey("k"): 1}
    assert oxtree.tree_mask(tree, "['k']") == {"k": True}
    with pytest.raises(RuntimeError, match="no repr"):
        oxtree.tree_mask(tree, "[?k?]")


def test_ordered_containers_and_sorted_dicts() -> None:
    tree = OrderedDict([("z", 1), ("a", 2)])
    assert list(oxtree.tree_mask(tree, "['z']").items()) == [("z", True), ("a", False)]
    tree2 = {"z": 1, "a": 2}
    assert list(oxtree.tree_mask(tree2, "['z']")) == ["z", "a"]  # optree: insertion order
    assert list(tu.tree_mask(tree2, "['z']")) == ["a", "z"]  # JAX: sorted


def test_keystr_of_str_keys_is_pythons_repr() -> None:
    # A regular expression sees the keystr `keystr` prints: the core writes plain str keys'
    # reprs itself and leaves every other one to Python; both must agree with repr().
    class Sub(str):
        def __repr__(self) -> str:
            return "Sub!"

    keys = ["it's", 'say "hi"', "both '\"", "back\\slash", "tab\t", "é", "", " ", "~", Sub("s")]
    tree = {k: i for i, k in enumerate(keys)}
    for path, _ in oxtree.tree_leaves_with_path(tree):
        exact = re.compile(re.escape(keystr(path)))
        assert PathPattern(exact).match(path), keystr(path)
        assert oxtree.tree_leaves(oxtree.tree_mask(tree, exact)).count(True) == 1
        assert PathPattern("[*]", exact).match(path)
    assert oxtree.tree_mask(tree, "[Sub!]")[Sub("s")] is True


# --------------------------------------------------------------------------------------------------
# References and threads.


def test_refcounts_unchanged_after_many_calls_and_errors() -> None:
    import gc
    import sys

    class Leaf:
        pass

    leaves = [Leaf() for _ in range(4)]
    key, label, value = "only-here", Leaf(), Leaf()
    regex = re.compile(r".*'only-here'.*")
    tree = {key: [leaves[0], (leaves[1], {"x": leaves[2]})], "b": leaves[3]}
    compiled = PathPattern("**['x']", regex)
    _, spec = oxtree.tree_flatten(tree)

    class Stop(Exception):
        pass

    def stop(path: Any, leaf: Any) -> Any:
        raise Stop

    def round_of_calls() -> None:
        oxtree.tree_mask(tree, compiled, "[*]")
        tu.tree_mask(tree, regex)
        oxtree.tree_labels(tree, {compiled: label}, value)
        oxtree.tree_set_matching(tree, "**", value)
        tu.tree_set_matching(tree, regex, func=lambda p, x: value)
        compiled.match((DictKey(key), SequenceKey(0)))
        compiled._leaf_mask(spec)
        for call, exc in (
            (lambda: oxtree.tree_mask(tree, "[only-here"), ValueError),
            (lambda: oxtree.tree_labels(tree, {"['b']": label}), ValueError),
            (lambda: oxtree.tree_set_matching(tree, regex, func=stop), Stop),
            (lambda: oxtree.tree_mask(tree, 5), TypeError),
        ):
            with pytest.raises(exc):
                call()

    watched = [*leaves, key, label, value, regex, tree, compiled, spec]
    for _ in range(3):
        round_of_calls()
    gc.collect()
    before = [sys.getrefcount(o) for o in watched]
    for _ in range(500):
        round_of_calls()
    gc.collect()
    assert [sys.getrefcount(o) for o in watched] == before


def test_threads_share_one_pattern() -> None:
    import threading

    tree = {f"block_{i}": {"w": i, "b": -i, "sub": [i, {"w": i}]} for i in range(30)}
    pattern = PathPattern("['block_1*']**['w']", re.compile(r".*\['b'\]"))
    expected = oxtree.tree_mask(tree, pattern)
    results: list[Any] = []
    go = threading.Barrier(8)

    def work() -> None:
        go.wait()
        results.extend(oxtree.tree_mask(tree, pattern) for _ in range(200))

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 1600
    assert all(r == expected for r in results)
