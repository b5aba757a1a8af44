"""oxtree.pretty: pformat/pprint, summary, tree_diff and the HTML views.

Every corpus tree renders in every form; hand-picked cases pin the exact text; properties check
that width only changes where lines break; tree_diff's messages are checked word for word
against the engine's own mismatch errors; the HTML is checked for escaping and balance.
"""

from __future__ import annotations

import copy
import dataclasses
import doctest
import io
import math
import re
import subprocess
import sys
import time
from collections import OrderedDict, defaultdict, deque
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import oxtree
import pytest
from helpers import CORPUS, HYPOTHESIS_SETTINGS, TREES, chain, parametrize, trees
from hypothesis import given
from hypothesis import strategies as st
from nodes import Point, Vector, make_default
from oxtree import pretty
from oxtree._pretty_model import dtype_name

# --------------------------------------------------------------------------------------------------
# Node classes registered once for the whole module.


@oxtree.dataclasses.dataclass(namespace="")
class Layer:
    weight: Any
    bias: Any
    activation: str = oxtree.dataclasses.field(default="relu", pytree_node=False)


@oxtree.register_dataclass
@dataclasses.dataclass
class Pixel:
    x: Any
    y: Any


class Box:
    """A registered node with positional children and aux data."""

    def __init__(self, first: Any, second: Any, tag: str = "box") -> None:
        self.first, self.second, self.tag = first, second, tag

    def __repr__(self) -> str:
        return f"Box({self.first!r}, {self.second!r})"


oxtree.register_pytree_node(
    Box, lambda b: ((b.first, b.second), b.tag), lambda tag, children: Box(*children, tag)
)


class Named:
    """A node registered with optree-style entries (names, not JAX keys)."""

    def __init__(self, a: Any, b: Any) -> None:
        self.a, self.b = a, b


oxtree.register_pytree_node(
    Named, lambda n: ((n.a, n.b), None, ["a", "b c"]), lambda _, children: Named(*children)
)


class Keyed:
    """A node registered through the JAX face with its own keys."""

    def __init__(self, a: Any, b: Any) -> None:
        self.a, self.b = a, b


oxtree.tree_util.register_pytree_with_keys(
    Keyed,
    lambda k: (((oxtree.GetAttrKey("a"), k.a), (oxtree.DictKey("b"), k.b)), None),
    lambda _, children: Keyed(*children),
)


class Static:
    """A register_static type: part of the structure, never a leaf."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Static) and other.value == self.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        return f"Static({self.value!r})"


oxtree.register_static(Static)


class Hostile:
    """A leaf whose repr is markup."""

    def __repr__(self) -> str:
        return "<script>alert('x')</script>&amp;"


class BrokenRepr:
    def __repr__(self) -> str:
        raise RuntimeError("no repr for you")


class MultiLine:
    def __repr__(self) -> str:
        return "first\nsecond"


# --------------------------------------------------------------------------------------------------
# Every corpus tree, every form.


@parametrize(tree=TREES)
def test_every_corpus_tree_renders(tree: Any) -> None:
    text = pretty.pformat(tree)
    assert text
    assert pretty.pformat(tree, width=10**9, max_items=None).count("\n") == 0
    assert pretty.summary(tree, depth=None).splitlines()[-1].startswith("total")
    assert not pretty.tree_diff(tree, tree, leaves=True)
    html = pretty.view(tree)._repr_html_()
    assert_balanced(html)
    spec = oxtree.tree_structure(tree)
    assert_balanced(pretty.treespec_html(spec))
    assert repr(pretty.view(spec)).count("*") >= spec.num_leaves


@parametrize(tree=TREES)
def test_every_corpus_tree_equals_its_deep_copy(tree: Any) -> None:
    assert not pretty.tree_diff(tree, copy.deepcopy(tree), leaves=True)


@parametrize(tree=TREES)
def test_summary_totals_match_the_engine(tree: Any) -> None:
    total = pretty.summary(tree, depth=0).splitlines()[-1].split()
    # Shared subtrees count once in a summary; the corpus's only shared subtree is a list.
    shared = 2 * 2 if tree is CORPUS["shared_subtree"] else 0
    assert int(total[1].replace(",", "")) == len(oxtree.tree_leaves(tree)) - shared


# --------------------------------------------------------------------------------------------------
# pformat: exact text.


PFORMAT_CASES: list[tuple[Any, str]] = [
    (None, "None"),
    (1, "1"),
    ((), "()"),
    ([], "[]"),
    ({}, "{}"),
    ((1,), "(1,)"),
    ([1, (2, 3), {"b": None, "a": 4}], "[1, (2, 3), {'b': None, 'a': 4}]"),
    (Point(1, [2]), "Point(x=1, y=[2])"),
    (Vector(1), "Vector(dx=1, dy='default')"),
    (OrderedDict(z=1, a=2), "OrderedDict({'z': 1, 'a': 2})"),
    (OrderedDict(), "OrderedDict()"),
    (defaultdict(list, {"k": 1}), "defaultdict(list, {'k': 1})"),
    (defaultdict(None), "defaultdict(None, {})"),
    (defaultdict(make_default, a=1), "defaultdict(<function make_default>, {'a': 1})"),
    (deque([1, 2]), "deque([1, 2])"),
    (deque([1], maxlen=4), "deque([1], maxlen=4)"),
    (Pixel(1, (2,)), "Pixel(x=1, y=(2,))"),
    (Layer(1, None), "Layer(weight=1, bias=None, activation='relu')"),
    (Box(1, [2]), "Box(1, [2])"),
    (Named(1, 2), "Named(a=1, 'b c': 2)"),
    (Keyed(1, 2), "Keyed(a=1, 'b': 2)"),
    ([Static(3)], "[Static(3)]"),
    ({1: "a", (2,): "b"}, "{1: 'a', (2,): 'b'}"),
    ([len, make_default], "[<function len>, <function make_default>]"),
    ([BrokenRepr()], "[<BrokenRepr object (repr raised RuntimeError)>]"),
]


@pytest.mark.parametrize(
    ("tree", "expected"), PFORMAT_CASES, ids=[expected for _, expected in PFORMAT_CASES]
)
def test_pformat_exact(tree: Any, expected: str) -> None:
    assert pretty.pformat(tree) == expected


def test_struct_sequences_name_their_fields() -> None:
    text = pretty.pformat(time.gmtime(0), width=1000)
    assert text.startswith("time.struct_time(tm_year=1970, tm_mon=1, tm_mday=1,")
    assert text.endswith("tm_isdst=0)")


def test_dicts_print_in_their_own_order() -> None:
    tree = {"z": 1, "a": 2, "m": 3}
    assert pretty.pformat(tree) == "{'z': 1, 'a': 2, 'm': 3}"
    assert pretty.pformat(defaultdict(int, tree)) == "defaultdict(int, {'z': 1, 'a': 2, 'm': 3})"


def test_none_is_leaf_and_is_leaf_are_honoured() -> None:
    tree = {"a": (1, 2), "b": None}
    assert pretty.pformat(tree, none_is_leaf=True) == "{'a': (1, 2), 'b': None}"
    # With is_leaf, the tuple is a leaf: printed by repr (the same text here), never entered.
    assert pretty.pformat(tree, lambda x: isinstance(x, tuple)) == "{'a': (1, 2), 'b': None}"
    summary = pretty.summary(tree, lambda x: isinstance(x, tuple))
    assert "tree['a']  tuple" in summary
    assert summary.splitlines()[-1].split()[1] == "1"


def test_namespace_is_honoured() -> None:
    class Local:
        def __init__(self, v: Any) -> None:
            self.v = v

        def __repr__(self) -> str:
            return "Local(...)"

    oxtree.register_pytree_node(
        Local, lambda x: ((x.v,), None), lambda _, c: Local(*c), namespace="pretty-tests"
    )
    assert pretty.pformat([Local(1)]) == "[Local(...)]"
    assert pretty.pformat([Local(1)], namespace="pretty-tests") == "[Local(1)]"


def test_width_breaks_one_child_per_line() -> None:
    tree = {"alpha": [1, 2, 3], "beta": (Point(10, 20), "text")}
    assert pretty.pformat(tree) == "{'alpha': [1, 2, 3], 'beta': (Point(x=10, y=20), 'text')}"
    assert pretty.pformat(tree, width=40) == (
        "{\n  'alpha': [1, 2, 3],\n  'beta': (Point(x=10, y=20), 'text'),\n}"
    )
    assert pretty.pformat(tree, width=30) == (
        "{\n  'alpha': [1, 2, 3],\n  'beta': (\n    Point(x=10, y=20),\n    'text',\n  ),\n}"
    )
    assert pretty.pformat(tree, width=30, indent=4).splitlines()[2] == "    'beta': ("


def test_width_counts_the_line_exactly() -> None:
    tree = [1, 2, 3]  # '[1, 2, 3]' is 9 characters
    assert pretty.pformat(tree, width=9) == "[1, 2, 3]"
    assert pretty.pformat(tree, width=8) == "[\n  1,\n  2,\n  3,\n]"
    # Inside a parent, the indentation, the label and the trailing comma count too.
    parent = {"k": tree, "j": 0}  # "  'k': [1, 2, 3]," is 17 characters
    assert pretty.pformat(parent, width=17) == "{\n  'k': [1, 2, 3],\n  'j': 0,\n}"
    assert pretty.pformat(parent, width=16) == (
        "{\n  'k': [\n    1,\n    2,\n    3,\n  ],\n  'j': 0,\n}"
    )


def test_single_tuple_broken_keeps_its_comma() -> None:
    assert pretty.pformat(("long-string",), width=5) == "(\n  'long-string',\n)"


def test_long_and_multiline_leaves() -> None:
    assert pretty.pformat(["x" * 30], width=10) == "[\n  '" + "x" * 30 + "',\n]"
    assert pretty.pformat({"a": MultiLine()}) == "{\n  'a': first\n  second,\n}"


def test_arrays_print_as_dtype_and_shape() -> None:
    tree = {
        "f32": np.zeros((3, 4), np.float32),
        "f64": np.zeros(2),
        "f16": np.zeros(1, np.float16),
        "i32": np.zeros((2, 0), np.int32),
        "i64": np.zeros(5, np.int64),
        "u8": np.zeros(1, np.uint8),
        "bool": np.zeros(2, bool),
        "c64": np.zeros(2, np.complex64),
        "c128": np.zeros(2, np.complex128),
        "scalar": np.float32(1.5),
        "zero_d": np.array(3),
        "str": np.array(["ab", "c"]),
        "object": np.array([None]),
    }
    assert pretty.pformat(tree, width=1000) == (
        "{'f32': f32[3,4], 'f64': f64[2], 'f16': f16[1], 'i32': i32[2,0], 'i64': i64[5], "
        "'u8': u8[1], 'bool': bool[2], 'c64': c64[2], 'c128': c128[2], 'scalar': f32[], "
        "'zero_d': i64[], 'str': U2[2], 'object': object[1]}"
    )
    # The class itself is a leaf printed by repr, not an array.
    assert pretty.pformat([np.ndarray]) == "[<class 'numpy.ndarray'>]"


def test_dtype_names() -> None:
    class FakeDtype:
        def __init__(self, name: str) -> None:
            self.name = name

    names = {
        "bfloat16": "bf16",
        "float8_e4m3fn": "f8_e4m3fn",
        "int4": "i4",
        "uint16": "u16",
        "bool": "bool",
        "datetime64[ns]": "datetime64[ns]",
    }
    for name, short in names.items():
        assert dtype_name(FakeDtype(name)) == short
    assert dtype_name("torch.float32") == "f32"


def test_jax_arrays() -> None:
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    tree = {
        "w": jnp.zeros((2, 3), jnp.bfloat16),
        "n": jnp.arange(3),
        "s": jax.ShapeDtypeStruct((4,), jnp.complex64),
    }
    assert pretty.pformat(tree) == "{'w': bf16[2,3], 'n': i32[3], 's': c64[4]}"

    seen = []

    @jax.jit
    def f(x: Any) -> Any:
        seen.append(pretty.pformat(x))  # a tracer: shape and dtype, no values
        return x

    f({"x": jnp.ones((2, 2))})
    assert seen == ["{'x': f32[2,2]}"]
    assert "f32[2,2]" in pretty.summary({"x": jnp.ones((2, 2))})


# --------------------------------------------------------------------------------------------------
# pformat: elision, sharing, cycles, depth.


def test_max_items_elides_with_a_count() -> None:
    assert pretty.pformat(list(range(10)), max_items=3) == "[0, 1, 2, ... (7 more)]"
    assert pretty.pformat({"a": 1, "b": 2, "c": 3}, max_items=2) == "{'a': 1, 'b': 2, ... (1 more)}"
    assert pretty.pformat(list(range(10)), max_items=10) == str(list(range(10)))
    assert pretty.pformat(list(range(2000)), max_items=None, width=10**6) == str(list(range(2000)))
    assert pretty.pformat(list(range(1234)), width=10**6).endswith("99, ... (1,134 more)]")


def test_max_leaves_elides_the_rest() -> None:
    tree = [[1, 2, 3], [4, 5, 6], [7, 8]]
    assert pretty.pformat(tree, max_leaves=4) == "[[1, 2, 3], [4, ... (2 more)], ... (1 more)]"
    assert pretty.pformat(tree, max_leaves=4, max_items=1) == "[[1, ... (2 more)], ... (2 more)]"
    assert pretty.pformat(tree, max_leaves=8) == str(tree)


def test_shared_containers_print_as_references() -> None:
    shared = [1, 2]
    tree = {"a": shared, "b": (shared, {"c": shared})}
    assert pretty.pformat(tree) == "{'a': [1, 2], 'b': (<ref tree['a']>, {'c': <ref tree['a']>})}"
    layer = Layer(1, 2)
    assert pretty.pformat([layer, layer]) == (
        "[Layer(weight=1, bias=2, activation='relu'), <ref tree[0]>]"
    )


def test_shared_tuples_and_leaves_are_not_references() -> None:
    pair = (1, 2)  # CPython shares equal constant tuples: their identity means nothing
    leaf = Hostile()
    assert pretty.pformat([pair, pair]) == "[(1, 2), (1, 2)]"
    assert pretty.pformat([leaf, leaf]).count("<script>") == 2
    assert pretty.pformat([Static(1), Static(1)]) == "[Static(1), Static(1)]"


def test_cycles_end() -> None:
    loop: list[Any] = [1]
    loop.append(loop)
    assert pretty.pformat(loop) == "[1, <ref tree (cycle)>]"
    outer: dict[str, Any] = {"inner": {"x": [0]}}
    outer["inner"]["x"].append(outer["inner"])
    assert pretty.pformat(outer) == "{'inner': {'x': [0, <ref tree['inner'] (cycle)>]}}"
    # An object whose registered children lead back to it.
    box = Box(None, None)
    box.second = [box]
    assert pretty.pformat(box) == "Box(None, [<ref tree (cycle)>])"


def test_a_very_deep_tree_renders_without_recursion() -> None:
    depth = 20_000
    text = pretty.pformat(chain(depth, "end"), width=60)
    lines = text.splitlines()
    # A line per opening and per closing bracket, but for the innermost levels, which fit on
    # one line once the indentation stops growing (at half the width).
    assert 2 * depth - 60 < len(lines) < 2 * depth
    assert max(map(len, lines)) <= 60
    assert len(lines) % 2 == 1
    assert "'end'" in lines[len(lines) // 2]
    assert len(pretty.summary(chain(depth), depth=20).splitlines()) == 20 + 2


def test_infinite_generated_trees_raise() -> None:
    class Endless:
        pass

    oxtree.register_pytree_node(
        Endless, lambda e: ((Endless(),), None), lambda _, c: Endless(), namespace="endless"
    )
    with pytest.raises(RecursionError, match="maximum tree depth"):
        pretty.pformat(Endless(), namespace="endless")


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"width": 0}, ValueError, "width must be at least 1, got 0"),
        ({"width": "80"}, TypeError, "width must be an int, got str: '80'"),
        ({"width": True}, TypeError, "width must be an int, got bool"),
        ({"indent": -1}, ValueError, "indent must be at least 0"),
        ({"max_items": 0}, ValueError, "max_items must be at least 1"),
        ({"max_items": 2.5}, TypeError, "max_items must be an int or None, got float"),
        ({"max_leaves": 0}, ValueError, "max_leaves must be at least 1"),
    ],
)
def test_pformat_argument_errors(kwargs: dict[str, Any], error: type, message: str) -> None:
    with pytest.raises(error, match=re.escape(message)):
        pretty.pformat([1], **kwargs)
    with pytest.raises(error, match=re.escape(message)):
        pretty.pprint([1], **kwargs)


def test_pprint_writes_the_text() -> None:
    out = io.StringIO()
    pretty.pprint({"a": [1, 2]}, width=10, file=out)
    assert out.getvalue() == "{\n  'a': [\n    1,\n    2,\n  ],\n}\n"


def test_exported_from_the_package() -> None:
    for name in ("pformat", "pprint", "summary", "tree_diff", "view"):
        assert getattr(oxtree, name) is getattr(pretty, name)
        assert name in oxtree.__all__


def test_import_oxtree_imports_neither_numpy_nor_jax() -> None:
    code = "import sys, oxtree; print(sorted({'numpy', 'jax'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --------------------------------------------------------------------------------------------------
# pformat: properties.


def _normalized(text: str) -> str:
    """The text with all whitespace and the commas a broken layout adds removed."""
    return re.sub(r",([\]\)\}])", r"\1", re.sub(r"\s+", "", text))


@HYPOTHESIS_SETTINGS
@given(tree=trees(), width=st.integers(1, 60), indent=st.integers(0, 4))
def test_width_only_moves_line_breaks(tree: Any, width: int, indent: int) -> None:
    flat = pretty.pformat(tree, width=10**9)
    broken = pretty.pformat(tree, width=width, indent=indent)
    assert "\n" not in flat
    assert _normalized(broken) == _normalized(flat)
    if len(flat) <= width:
        assert broken == flat
    for line in broken.splitlines():
        assert line == line.rstrip()


# --------------------------------------------------------------------------------------------------
# summary.


def test_summary_table() -> None:
    tree = {
        "dense": Layer(np.ones((3, 4), np.float32), np.ones(4, np.float32)),
        "embed": np.zeros((100, 8), np.float64),
        "step": 3,
        "none": None,
    }
    assert pretty.summary(tree) == (
        "path                  type        leaves  elements  bytes\n"
        "tree['dense']         Layer            2        16     64\n"
        "tree['dense'].weight  f32[3,4]         1        12     48\n"
        "tree['dense'].bias    f32[4]           1         4     16\n"
        "tree['embed']         f64[100,8]       1       800  6,400\n"
        "tree['step']          int              1         1      0\n"
        "tree['none']          None             0         0      0\n"
        "total                                  4       817  6,464 (6.3 KiB)"
    )
    lines = pretty.summary(tree).splitlines()
    assert lines[0].split() == ["path", "type", "leaves", "elements", "bytes"]
    rows = {line.split()[0]: line.split()[1:] for line in lines[1:]}
    assert rows["tree['dense']"] == ["Layer", "2", "16", "64"]
    assert rows["tree['dense'].weight"] == ["f32[3,4]", "1", "12", "48"]
    assert rows["tree['dense'].bias"] == ["f32[4]", "1", "4", "16"]
    assert rows["tree['embed']"] == ["f64[100,8]", "1", "800", "6,400"]
    assert rows["tree['step']"] == ["int", "1", "1", "0"]
    assert rows["tree['none']"] == ["None", "0", "0", "0"]
    assert rows["total"] == ["4", "817", "6,464", "(6.3", "KiB)"]
    assert "activation" not in pretty.summary(tree)  # static fields are not in the tree


def test_summary_depth() -> None:
    tree = {"a": {"b": {"c": 1}}, "d": 2}

    def paths(depth: int | None) -> list[str]:
        return [line.split()[0] for line in pretty.summary(tree, depth=depth).splitlines()[1:]]

    assert paths(0) == ["total"]
    assert paths(1) == ["tree['a']", "tree['d']", "total"]
    assert paths(2) == ["tree['a']", "tree['a']['b']", "tree['d']", "total"]
    assert paths(None) == [
        "tree['a']",
        "tree['a']['b']",
        "tree['a']['b']['c']",
        "tree['d']",
        "total",
    ]
    assert paths(None) == paths(10)


def test_summary_counts_shared_containers_once() -> None:
    shared = Layer(np.zeros(10, np.float32), 0.0)
    lines = pretty.summary({"a": shared, "b": shared}).splitlines()
    assert lines[-1].split() == ["total", "2", "11", "40"]
    ref_row = next(line for line in lines if line.startswith("tree['b']"))
    assert ref_row.split() == ["tree['b']", "<ref", "tree['a']>", "-", "-", "-"]


def test_summary_of_a_leaf_and_of_a_cycle() -> None:
    assert pretty.summary(np.zeros(3)).splitlines()[-1].split() == ["total", "1", "3", "24"]
    loop: list[Any] = [1]
    loop.append(loop)
    assert pretty.summary(loop).splitlines()[-1].split() == ["total", "1", "1", "0"]


def test_summary_bytes_without_nbytes() -> None:
    class Shaped:  # a ShapeDtypeStruct-like leaf: shape and dtype, no nbytes
        shape = (4, 2)
        dtype = np.dtype(np.float16)

    class Symbolic:
        shape = ("batch", 3)
        dtype = np.dtype(np.float32)

    assert pretty.summary([Shaped()]).splitlines()[-1].split() == ["total", "1", "8", "16"]
    assert pretty.summary([Symbolic()]).splitlines()[1].split()[1:] == [
        "f32[batch,3]",
        "1",
        "0",
        "0",
    ]


@pytest.mark.parametrize(
    ("depth", "error", "message"),
    [
        (-1, ValueError, "depth must be at least 0, got -1"),
        ("2", TypeError, "depth must be an int or None, got str: '2'"),
    ],
)
def test_summary_argument_errors(depth: Any, error: type, message: str) -> None:
    with pytest.raises(error, match=re.escape(message)):
        pretty.summary([1], depth=depth)


# --------------------------------------------------------------------------------------------------
# tree_diff: structure, in the engine's words.


def _engine_path(a: Any, b: Any) -> str:
    """Where the engine says tree_map(f, a, b) fails (its message is optree's, then the path)."""
    with pytest.raises(ValueError, match="Mismatch at key path") as info:
        oxtree.tree_map(lambda x, y: x, a, b)
    match = re.search(r"\nMismatch at key path: (\S+) \(in rests\[0\]\)$", str(info.value))
    assert match is not None, str(info.value)
    return match.group(1)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ([1, {"b": (1, 2)}], [1, {"b": [1, 2]}]),
        ({"a": 1, "b": 2}, {"a": 1, "c": 2}),
        ({"a": 1}, {"a": 1, "b": 2}),
        ({"a": 1, "b": 2}, {"a": 1}),
        ([1, 2], [1, 2, 3]),
        ((1, (2,)), (1, 3)),
        (Point(1, 2), (1, 2)),
        ((1, 2), Point(1, 2)),
        (None, 1),
        ([None], [[]]),
        (deque([1, 2]), [1, 2]),
        ({"x": [1, (2, 3)]}, {"x": [1, (2, 3, 4)]}),
    ],
    ids=repr,
)
def test_structure_messages_match_the_engine(a: Any, b: Any) -> None:
    diff = pretty.tree_diff(a, b)
    assert len(diff) == 1, str(diff)
    assert diff[0].path == _engine_path(a, b)


def test_tree_diff_finds_every_difference() -> None:
    a = {"x": (1, 2), "y": [1, {"k": 1}], "z": 0, "w": Point(1, 2)}
    b = {"x": [1, 2], "y": [1, {"k": 1, "j": 2}, 3], "v": 0, "w": Point(1, (2,))}
    assert str(pretty.tree_diff(a, b)).splitlines()[1:] == [
        "tree['x']: expected tuple of length 2, got list of length 2: [1, 2]",
        "tree['y']: expected list of length 2, got list of length 3: [1, {'k': 1, 'j': 2}, 3]",
        "tree['y'][1]: expected dict with keys ['k'], got dict with keys ['k', 'j']: "
        "{'k': 1, 'j': 2}; extra keys ['j']",
        "tree['w'].y: expected a leaf of type int, got tuple of length 1: (2,)",
    ]
    top = pretty.tree_diff(a, b)[0]
    assert top.path == "tree"
    assert top.message == (
        "expected dict with keys ['w', 'x', 'y', 'z'], got dict with keys ['x', 'y', 'v', 'w']: "
        "{'x': [1, 2], 'y': [1, {'k': 1, 'j': 2}, 3], 'v': 0, 'w': Point(x=1, y=(2,))}; "
        "missing keys ['z']; extra keys ['v']"
    )
    long = pretty.tree_diff([1], (1,) * 100)[0].message
    assert long == "expected list of length 1, got tuple of length 100: " + (
        "(1, 1, 1, 1, 1, 1, 1, 1, ... (92 more))"
    )


def test_tree_diff_records() -> None:
    diff = pretty.tree_diff([1, (2,)], [1, [2]])
    assert isinstance(diff, tuple)
    assert diff == (
        pretty.Difference("tree[1]", "expected tuple of length 1, got list of length 1: [2]"),
    )
    path, message = diff[0]
    assert (path, message) == (diff[0].path, diff[0].message)
    assert repr(diff) == f"TreeDiff([{diff[0]!r}])"
    assert bool(diff)
    empty = pretty.tree_diff([1], [2])
    assert not empty
    assert str(empty) == "no differences"


def test_tree_diff_node_data() -> None:
    assert str(pretty.tree_diff(deque([1]), deque([1], maxlen=3))) == (
        "tree: expected deque of length 1, got deque of length 1: deque([1], maxlen=3); "
        "maxlen differs: expected None, got 3"
    )
    assert str(pretty.tree_diff(defaultdict(list, a=1), defaultdict(int, a=1))).endswith(
        "; default_factory differs: expected <class 'list'>, got <class 'int'>"
    )
    assert str(pretty.tree_diff(Box(1, 2, "a"), Box(1, 2, "b"))) == (
        "tree: expected Box with aux data 'a' and 2 children, "
        "got Box with aux data 'b' and 2 children: Box(1, 2)"
    )
    assert str(pretty.tree_diff(Layer(1, 2), Layer(1, 2, "gelu"))).startswith(
        "tree: expected Layer with aux data (('activation', 'relu'),) and 2 children"
    )
    assert str(pretty.tree_diff([Static(1)], [Static(2)])) == (
        "tree[0]: expected Static with aux data Static(1) and 0 children, "
        "got Static with aux data Static(2) and 0 children: Static(2)"
    )
    # Dict kinds differ, so their children are still compared key by key.
    assert str(pretty.tree_diff({"a": (1,)}, OrderedDict(a=[1]))).splitlines() == [
        "tree: expected dict with keys ['a'], got OrderedDict with keys ['a']: "
        "OrderedDict({'a': [1]})",
        "tree['a']: expected tuple of length 1, got list of length 1: [1]",
    ]


def test_tree_diff_arrays_in_messages_are_short() -> None:
    assert not pretty.tree_diff({"w": 1}, {"w": np.zeros((100, 100))})  # leaf against leaf
    diff = pretty.tree_diff({"w": 1}, {"w": [np.zeros((100, 100))]})
    assert str(diff) == (
        "tree['w']: expected a leaf of type int, got list of length 1: [f64[100,100]]"
    )
    diff = pretty.tree_diff((1,), [np.zeros((100, 100))])
    assert str(diff) == "tree: expected tuple of length 1, got list of length 1: [f64[100,100]]"


def test_tree_diff_with_cycles_and_sharing() -> None:
    a: list[Any] = [1]
    a.append(a)
    b: list[Any] = [2]
    b.append(b)
    assert str(pretty.tree_diff(a, b, leaves=True)) == "tree[0]: expected int: 1, got int: 2"
    shared = [1]
    assert not pretty.tree_diff([shared, shared], [[1], [1]], leaves=True)


# --------------------------------------------------------------------------------------------------
# tree_diff: leaf values.


def test_leaf_values() -> None:
    a = {"i": 1, "f": 1.0, "s": "x", "n": math.nan, "t": True, "o": Hostile()}
    b = {"i": 2, "f": 1.0, "s": "y", "n": math.nan, "t": 1, "o": Hostile()}
    assert not pretty.tree_diff(a, b)
    assert str(pretty.tree_diff(a, b, leaves=True)).splitlines() == [
        "tree['i']: expected int: 1, got int: 2",
        "tree['s']: expected str of length 1: 'x', got str of length 1: 'y'",
        "tree['t']: expected bool: True, got int: 1",
        "tree['o']: expected Hostile: <script>alert('x')</script>&amp;, "
        "got Hostile: <script>alert('x')</script>&amp;",
    ]


def test_leaf_tolerances() -> None:
    assert pretty.tree_diff([1.0], [1.05], leaves=True)
    assert not pretty.tree_diff([1.0], [1.05], leaves=True, atol=0.1)
    assert not pretty.tree_diff([100.0], [101.0], leaves=True, rtol=0.01)
    assert not pretty.tree_diff([10], [11], leaves=True, atol=1)
    assert not pretty.tree_diff([1j], [1.01j], leaves=True, atol=0.1)
    for bad in (-1, math.nan, "0.1", True):
        with pytest.raises(ValueError, match="rtol must be a non-negative number"):
            pretty.tree_diff([1], [1], rtol=bad)
    with pytest.raises(ValueError, match=re.escape("atol must be a non-negative number, got -0.5")):
        pretty.tree_diff([1], [1], atol=-0.5)


def test_array_values() -> None:
    x = np.array([[1.0, 2.0, np.nan], [4.0, 5.0, 6.0]])
    y = x.copy()
    assert not pretty.tree_diff(x, y, leaves=True)
    y[1, 1] = 5.5
    y[0, 0] = 1.25
    assert str(pretty.tree_diff({"x": x}, {"x": y}, leaves=True)) == (
        "tree['x']: f64[2,3] values differ in 2 of 6 elements; largest at [1, 1]: "
        "expected 5.0, got 5.5"
    )
    assert not pretty.tree_diff(x, y, leaves=True, atol=0.5)
    assert str(pretty.tree_diff(x, x.astype(np.float32), leaves=True)) == (
        "tree: expected f64[2,3], got f32[2,3]"
    )
    assert str(pretty.tree_diff(x, x[:1], leaves=True)) == "tree: expected f64[2,3], got f64[1,3]"
    assert str(pretty.tree_diff(x, 1.0, leaves=True)) == "tree: expected f64[2,3], got float: 1.0"
    assert str(pretty.tree_diff(np.array([True, False]), np.array([True, True]), leaves=True)) == (
        "tree: bool[2] values differ in 1 of 2 elements; first at [1]: expected False, got True"
    )
    assert str(pretty.tree_diff(np.uint8(3), np.uint8(250), leaves=True)) == (
        "tree: u8[] values differ in 1 of 1 elements; largest: expected 3, got 250"
    )
    nan_only = pretty.tree_diff(np.array([np.nan, 1.0]), np.array([0.0, 1.0]), leaves=True)
    assert str(nan_only) == (
        "tree: f64[2] values differ in 1 of 2 elements; first at [0]: expected nan, got 0.0"
    )


def test_jax_and_numpy_arrays_compare_by_value() -> None:
    jnp = pytest.importorskip("jax.numpy")
    assert not pretty.tree_diff([jnp.ones(3)], [np.ones(3, np.float32)], leaves=True)
    assert pretty.tree_diff([jnp.ones(3)], [np.zeros(3, np.float32)], leaves=True)


# --------------------------------------------------------------------------------------------------
# HTML.


class _Balance(HTMLParser):
    """Checks that every element is closed, in order."""

    VOID = frozenset({"br", "hr", "img", "meta", "input", "link"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.text: list[str] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        assert self.stack, tag
        assert self.stack[-1] == tag, (tag, self.stack)
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def assert_balanced(html: str) -> _Balance:
    parser = _Balance()
    parser.feed(html)
    parser.close()
    assert parser.stack == [], parser.stack
    assert set(parser.tags) <= {"div", "span", "details", "summary"}
    return parser


def test_html_escapes_hostile_keys_and_reprs() -> None:
    tree = {
        "<script>alert(1)</script>": Hostile(),
        "</details></div>": ['"quoted" & <b>'],
        "k": Layer(Hostile(), 0, activation="<i>static</i>"),
    }
    html = pretty.view(tree)._repr_html_()
    parser = assert_balanced(html)
    assert "<script" not in html
    assert "<b>" not in html
    assert "<i>" not in html
    text = "".join(parser.text)
    assert "['<script>alert(1)</script>']" in text
    assert "<script>alert('x')</script>&amp;" in text
    assert "['</details></div>']" in text
    assert "'\"quoted\" & <b>'" in text
    assert "'<i>static</i>'" in text


def test_html_structure() -> None:
    tree = {"a": [1, (2, None)], "b": [], "c": Layer(1, 2)}
    html = pretty.view(tree, open_depth=1)._repr_html_()
    assert html.startswith('<div class="oxtree-view" style="')
    assert html.count("<details") == 4  # the dict, the list, the tuple, the layer
    assert html.count("<details open>") == 1
    assert html.count("<summary") == 4
    assert "<style" not in html
    assert "http" not in html
    text = "".join(assert_balanced(html).text)
    for piece in ("dict", "3 items", "['a']", "list", "[1]", "tuple", "[]", ".weight", "(static)"):
        assert piece in text
    assert pretty.view(tree, open_depth=0)._repr_html_().count("<details open>") == 0
    assert pretty.view(tree, open_depth=9)._repr_html_().count("<details open>") == 4


def test_html_shows_references_and_elisions() -> None:
    shared: list[Any] = [1]
    shared.append(shared)
    tree = {"a": shared, "b": shared, "wide": list(range(50))}
    text = "".join(assert_balanced(pretty.view(tree, max_items=5)._repr_html_()).text)
    assert "<ref tree['a'] (cycle)>" in text
    assert "<ref tree['a']>" in text
    assert "... (45 more)" in text
    assert "50 items" in text


def test_html_of_a_leaf_and_of_a_registered_node() -> None:
    assert "f32[2]" in pretty.view(np.zeros(2, np.float32))._repr_html_()
    html = pretty.view(Keyed([1], {"z": 2}))._repr_html_()
    text = "".join(assert_balanced(html).text)
    assert "Keyed" in text
    assert ".a" in text
    assert "['b']" in text


def test_view_repr_is_the_text() -> None:
    tree = {"a": [1, 2]}
    assert repr(pretty.view(tree)) == pretty.pformat(tree)
    assert repr(pretty.view(oxtree.tree_structure(tree))) == "{'a': [*, *]}"


def test_treespec_html() -> None:
    spec = oxtree.tree_structure({"b": [1, Point(2, None)], "a": Box(3, 4)})
    html = pretty.treespec_html(spec, open_depth=1)
    parser = assert_balanced(html)
    text = "".join(parser.text)
    assert "PyTreeSpec, 4 leaves" in text
    assert text.count("*") == 4
    for piece in ("['a']", "Box", "['b']", "Point", ".x", ".y", "None"):
        assert piece in text
    assert html.count("<details open>") == 1
    assert pretty.treespec_html(oxtree.tree_structure(1)).count("<details") == 0
    with pytest.raises(TypeError, match="treespec_html expects a PyTreeSpec, got dict"):
        pretty.treespec_html({"a": 1})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="open_depth must be at least 0"):
        pretty.treespec_html(spec, open_depth=-1)


def test_treespec_html_of_the_jax_face() -> None:
    spec = oxtree.tree_util.tree_structure({"b": [1, 2], "a": (3,)})
    text = "".join(assert_balanced(pretty.treespec_html(spec)).text)
    assert text.count("*") == 3
    assert "PyTreeSpec, 3 leaves" in text


def test_view_argument_errors() -> None:
    with pytest.raises(ValueError, match="open_depth must be at least 0, got -1"):
        pretty.view([1], open_depth=-1)
    with pytest.raises(TypeError, match="max_items must be an int or None"):
        pretty.view([1], max_items="5")
    with pytest.raises(ValueError, match="max_leaves must be at least 1"):
        pretty.view([1], max_leaves=0)


# --------------------------------------------------------------------------------------------------
# The docs.

DOCS = ["getting-started.md", "migrating.md", "registration.md", "key-paths.md", "pretty.md"]


@pytest.mark.parametrize("name", DOCS)
def test_docs_examples(name: str) -> None:
    """Every example of the page runs and prints what the page says."""
    path = Path(__file__).resolve().parents[2] / "docs" / name
    result = doctest.testfile(
        str(path), module_relative=False, optionflags=doctest.ELLIPSIS, verbose=False
    )
    assert result.attempted >= 20
    assert result.failed == 0, f"{result.failed} example(s) of docs/{name} failed"
