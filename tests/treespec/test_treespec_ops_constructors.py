"""The `treespec_*` constructors and function forms, differentially against optree 0.20.

Each constructor is called the same way on both libraries (with both `none_is_leaf` values):
the reprs agree, the spec equals the structure of the tree it describes, and unflattening it
gives the same tree (dicts in the order given). Bad arguments raise the exception type optree
raises; mixing `none_is_leaf` values (or namespaces) raises ValueError. The function forms
(`treespec_paths`, `treespec_is_prefix`, ...) agree with the methods and with optree's.
"""

from __future__ import annotations

import inspect
import time
from collections import OrderedDict, defaultdict, deque
from collections.abc import Callable
from typing import Any

import optree
import oxtree
import pytest
from helpers import NONE_IS_LEAF_OPTIONS, TREES, assert_same_tree, parametrize
from nodes import EmptyNamedTuple, Point, TupleSubclass, Vector, make_default

# --------------------------------------------------------------------------------------------------
# Helpers.


def outcome(func: Callable[..., Any], *args: Any) -> tuple[str, Any]:
    """`("ok", func(*args))` or `("error", exception type)`: messages differ by design."""
    try:
        return "ok", func(*args)
    except Exception as error:
        return "error", type(error)


NAMESPACE = "test_treespec_ops_constructors"


class Pod:
    """A custom node registered (in both libraries) in this module's namespace only."""

    def __init__(self, *items: Any) -> None:
        self.items = items

    def __repr__(self) -> str:
        return f"Pod{self.items!r}"


for _lib in (optree, oxtree):
    _lib.register_pytree_node(
        Pod, lambda pod: (pod.items, None, None), lambda _, items: Pod(*items), namespace=NAMESPACE
    )


class Build:
    """How to build one treespec with a library `m` (optree or oxtree) and `none_is_leaf`."""

    def __init__(self, m: Any, none_is_leaf: bool) -> None:
        self.m = m
        self.nil = none_is_leaf

    def leaf(self) -> Any:
        return self.m.treespec_leaf(none_is_leaf=self.nil)

    def none(self) -> Any:
        return self.m.treespec_none(none_is_leaf=self.nil)

    def of(self, tree: Any) -> Any:
        return self.m.tree_structure(tree, none_is_leaf=self.nil)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        """`b.tuple(...)` is `m.treespec_tuple(..., none_is_leaf=nil)`."""
        func = getattr(self.m, f"treespec_{name}")
        return lambda *args, **kwargs: func(*args, none_is_leaf=self.nil, **kwargs)


# name -> (how to build the spec, the tree it describes with 0 for leaves, or None to skip).
CONSTRUCTED: dict[str, tuple[Callable[[Build], Any], Any]] = {
    "leaf": (lambda b: b.leaf(), 0),
    "none": (lambda b: b.none(), None),
    "tuple-empty": (lambda b: b.tuple(), ()),
    "tuple": (lambda b: b.tuple([b.leaf(), b.none(), b.tuple()]), (0, None, ())),
    "tuple-from-generator": (lambda b: b.tuple(b.leaf() for _ in range(3)), (0, 0, 0)),
    "tuple-nested": (lambda b: b.tuple([b.of([0, {"a": None}])]), ([0, {"a": None}],)),
    "list-empty": (lambda b: b.list(), []),
    "list": (lambda b: b.list([b.leaf(), b.list([b.none()])]), [0, [None]]),
    "dict-mapping": (lambda b: b.dict({"b": b.leaf(), "a": b.none()}), {"b": 0, "a": None}),
    "dict-kwargs": (lambda b: b.dict(b=b.leaf(), a=b.none()), {"b": 0, "a": None}),
    "dict-mapping-and-kwargs": (
        lambda b: b.dict({"c": b.leaf()}, b=b.list(), a=b.none()),
        {"c": 0, "b": [], "a": None},
    ),
    "dict-items": (lambda b: b.dict([(2, b.leaf()), (1, b.list())]), {2: 0, 1: []}),
    "dict-mixed-keys": (lambda b: b.dict({1: b.leaf(), "a": b.leaf()}), {1: 0, "a": 0}),
    "dict-empty": (lambda b: b.dict(), {}),
    "dict-repeated-key": (
        lambda b: b.dict([("a", b.leaf()), ("b", b.leaf()), ("a", b.none())]),
        {"a": None, "b": 0},
    ),
    "ordereddict": (
        lambda b: b.ordereddict({"b": b.leaf(), "a": b.none()}),
        OrderedDict(b=0, a=None),
    ),
    "ordereddict-kwargs": (
        lambda b: b.ordereddict(z=b.leaf(), a=b.tuple()),
        OrderedDict(z=0, a=()),
    ),
    "ordereddict-items": (
        lambda b: b.ordereddict([(2, b.leaf()), ("x", b.leaf())]),
        OrderedDict([(2, 0), ("x", 0)]),
    ),
    "defaultdict": (
        lambda b: b.defaultdict(list, {"b": b.leaf(), "a": b.none()}),
        defaultdict(list, {"b": 0, "a": None}),
    ),
    "defaultdict-kwargs": (
        lambda b: b.defaultdict(make_default, z=b.leaf(), y=b.leaf()),
        defaultdict(make_default, {"z": 0, "y": 0}),
    ),
    "defaultdict-no-factory": (lambda b: b.defaultdict(), defaultdict(None)),
    "defaultdict-none-factory-items": (
        lambda b: b.defaultdict(None, [(3, b.leaf()), (1, b.none())]),
        defaultdict(None, {3: 0, 1: None}),
    ),
    "deque": (lambda b: b.deque([b.leaf(), b.none()]), deque([0, None])),
    "deque-maxlen": (lambda b: b.deque([b.leaf()] * 2, maxlen=4), deque([0, 0], maxlen=4)),
    "deque-maxlen-positional": (lambda b: b.deque([b.leaf()] * 2, 2), deque([0, 0], maxlen=2)),
    "deque-maxlen-zero": (lambda b: b.deque([], maxlen=0), deque(maxlen=0)),
    "deque-maxlen-truncates": (
        # A deque keeps its last maxlen items, and optree builds the spec of that deque.
        lambda b: b.deque([b.leaf(), b.none()], maxlen=1),
        deque([None], maxlen=1),
    ),
    "namedtuple": (lambda b: b.namedtuple(Point(b.leaf(), b.none())), Point(0, None)),
    "namedtuple-typed": (lambda b: b.namedtuple(Vector(b.leaf(), b.list())), Vector(0, [])),
    "namedtuple-empty": (lambda b: b.namedtuple(EmptyNamedTuple()), EmptyNamedTuple()),
    "structseq": (
        lambda b: b.structseq(time.struct_time([b.leaf()] * 8 + [b.none()])),
        time.struct_time([0] * 8 + [None]),
    ),
    "from-collection-list": (
        lambda b: b.from_collection([b.leaf(), b.none()]),
        [0, None],
    ),
    "from-collection-dict": (
        lambda b: b.from_collection({"b": b.leaf(), "a": b.tuple()}),
        {"b": 0, "a": ()},
    ),
    "from-collection-tuple-empty": (lambda b: b.from_collection(()), ()),
    "from-collection-namedtuple": (
        lambda b: b.from_collection(Point(b.leaf(), b.none())),
        Point(0, None),
    ),
    "from-collection-ordereddict": (
        lambda b: b.from_collection(OrderedDict(b=b.leaf(), a=b.leaf())),
        OrderedDict(b=0, a=0),
    ),
    "from-collection-defaultdict": (
        lambda b: b.from_collection(defaultdict(int, {"x": b.leaf()})),
        defaultdict(int, {"x": 0}),
    ),
    "from-collection-deque": (
        lambda b: b.from_collection(deque([b.leaf()], maxlen=3)),
        deque([0], maxlen=3),
    ),
    "from-collection-structseq": (
        lambda b: b.from_collection(time.struct_time([b.leaf()] * 9)),
        time.struct_time([0] * 9),
    ),
}


@pytest.mark.parametrize("name", CONSTRUCTED)
@pytest.mark.parametrize("none_is_leaf", NONE_IS_LEAF_OPTIONS)
def test_constructor_matches_optree(name: str, none_is_leaf: bool) -> None:
    build, tree = CONSTRUCTED[name]
    ours = build(Build(oxtree, none_is_leaf))
    theirs = build(Build(optree, none_is_leaf))
    assert type(ours) is oxtree.PyTreeSpec
    assert repr(ours) == repr(theirs)
    assert ours.none_is_leaf is none_is_leaf
    assert ours.num_leaves == theirs.num_leaves
    assert ours.num_nodes == theirs.num_nodes
    assert ours == oxtree.tree_structure(tree, none_is_leaf=none_is_leaf)
    assert hash(ours) == hash(oxtree.tree_structure(tree, none_is_leaf=none_is_leaf))
    # Unflattening gives the described tree: same node types, dicts in the order given.
    leaves = [object() for _ in range(ours.num_leaves)]
    rebuilt = ours.unflatten(leaves)
    assert repr(rebuilt) == repr(theirs.unflatten(leaves))
    expected = optree.tree_unflatten(optree.tree_structure(tree, none_is_leaf=none_is_leaf), leaves)
    assert_same_tree(rebuilt, expected, copied_keys=True)


def test_dict_constructor_keeps_insertion_order_on_unflatten() -> None:
    leaf = oxtree.treespec_leaf()
    spec = oxtree.treespec_dict({"z": leaf, "a": leaf}, m=leaf, b=oxtree.treespec_none())
    assert repr(spec) == "PyTreeSpec({'a': *, 'b': None, 'm': *, 'z': *})"
    # Leaves go in sorted-key order, the rebuilt dict keeps the order given.
    rebuilt = spec.unflatten([1, 2, 3])
    assert list(rebuilt) == ["z", "a", "m", "b"]
    assert rebuilt == {"a": 1, "m": 2, "z": 3, "b": None}
    theirs = optree.treespec_dict(
        {"z": optree.treespec_leaf(), "a": optree.treespec_leaf()},
        m=optree.treespec_leaf(),
        b=optree.treespec_none(),
    )
    assert list(theirs.unflatten([1, 2, 3])) == list(rebuilt)
    defaults = oxtree.treespec_defaultdict(int, [(3, leaf), (1, leaf)]).unflatten("xy")
    assert list(defaults) == [3, 1]
    assert defaults == {1: "x", 3: "y"}


# --------------------------------------------------------------------------------------------------
# Bad arguments: the exception type optree raises.

BAD_CONSTRUCTIONS: dict[str, Callable[[Build], Any]] = {
    "tuple-mixed-none-is-leaf": lambda b: b.tuple(
        [b.m.treespec_leaf(none_is_leaf=not b.nil), b.leaf()]
    ),
    "list-mixed-none-is-leaf": lambda b: b.list([b.m.treespec_none(none_is_leaf=not b.nil)]),
    "dict-mixed-none-is-leaf": lambda b: b.dict(a=b.m.treespec_leaf(none_is_leaf=not b.nil)),
    "ordereddict-mixed-none-is-leaf": lambda b: b.ordereddict(
        [("a", b.leaf()), ("b", b.m.treespec_tuple(none_is_leaf=not b.nil))]
    ),
    "defaultdict-mixed-none-is-leaf": lambda b: b.defaultdict(
        list, a=b.m.treespec_leaf(none_is_leaf=not b.nil)
    ),
    "deque-mixed-none-is-leaf": lambda b: b.deque([b.m.treespec_leaf(none_is_leaf=not b.nil)]),
    "namedtuple-mixed-none-is-leaf": lambda b: b.namedtuple(
        Point(b.leaf(), b.m.treespec_leaf(none_is_leaf=not b.nil))
    ),
    "structseq-mixed-none-is-leaf": lambda b: b.structseq(
        time.struct_time([b.m.treespec_leaf(none_is_leaf=not b.nil)] * 9)
    ),
    "from-collection-mixed-none-is-leaf": lambda b: b.from_collection(
        [b.m.treespec_leaf(none_is_leaf=not b.nil)]
    ),
    "tuple-of-non-specs": lambda b: b.tuple([1]),
    "dict-of-non-specs": lambda b: b.dict(a=1),
    "from-collection-nested": lambda b: b.from_collection({"b": [b.leaf()]}),
    "namedtuple-of-plain-tuple": lambda b: b.namedtuple((b.leaf(),)),
    "namedtuple-of-class": lambda b: b.namedtuple(Point),
    "namedtuple-of-structseq": lambda b: b.namedtuple(time.struct_time([b.leaf()] * 9)),
    "structseq-of-plain-tuple": lambda b: b.structseq((b.leaf(),)),
    "structseq-of-namedtuple": lambda b: b.structseq(Point(b.leaf(), b.leaf())),
    "defaultdict-bad-factory": lambda b: b.defaultdict(5),
    "deque-negative-maxlen": lambda b: b.deque([], maxlen=-1),
    "dict-unhashable-key": lambda b: b.dict([([1], b.leaf())]),
}


@pytest.mark.parametrize("name", BAD_CONSTRUCTIONS)
@pytest.mark.parametrize("none_is_leaf", NONE_IS_LEAF_OPTIONS)
def test_bad_constructions_raise_like_optree(name: str, none_is_leaf: bool) -> None:
    build = BAD_CONSTRUCTIONS[name]
    theirs = outcome(lambda: build(Build(optree, none_is_leaf)))
    assert theirs[0] == "error"  # the case is bad for optree too
    ours = outcome(lambda: build(Build(oxtree, none_is_leaf)))
    assert ours == theirs


@pytest.mark.parametrize("none_is_leaf", NONE_IS_LEAF_OPTIONS)
def test_mixing_none_is_leaf_is_value_error(none_is_leaf: bool) -> None:
    other = oxtree.treespec_leaf(none_is_leaf=not none_is_leaf)
    same = oxtree.treespec_leaf(none_is_leaf=none_is_leaf)
    for make in (oxtree.treespec_tuple, oxtree.treespec_list, oxtree.treespec_deque):
        with pytest.raises(ValueError, match="none_is_leaf"):
            make([same, other], none_is_leaf=none_is_leaf)
    for make in (oxtree.treespec_dict, oxtree.treespec_ordereddict):
        with pytest.raises(ValueError, match="none_is_leaf"):
            make(a=same, b=other, none_is_leaf=none_is_leaf)
    with pytest.raises(ValueError, match="none_is_leaf"):
        oxtree.treespec_from_collection([other], none_is_leaf=none_is_leaf)


@pytest.mark.parametrize("none_is_leaf", NONE_IS_LEAF_OPTIONS)
def test_from_collection_of_none(none_is_leaf: bool) -> None:
    if none_is_leaf:
        # None is a leaf then, and both warn that they made a treespec from a leaf.
        with pytest.warns(UserWarning, match="called on a leaf"):
            ours = oxtree.treespec_from_collection(None, none_is_leaf=True)
        with pytest.warns(UserWarning, match="called on a leaf"):
            theirs = optree.treespec_from_collection(None, none_is_leaf=True)
    else:
        ours = oxtree.treespec_from_collection(None)
        theirs = optree.treespec_from_collection(None)
    assert ours == oxtree.treespec_none(none_is_leaf=none_is_leaf)
    assert repr(ours) == repr(theirs)


@pytest.mark.parametrize(
    "collection", [1, "text", TupleSubclass((0,)), None], ids=["int", "str", "subclass", "spec"]
)
def test_from_collection_of_a_leaf_matches_optree(collection: Any) -> None:
    """optree warns and returns the leaf treespec when given a leaf (not a container); so
    does oxtree, with the same warning."""
    if collection is None:
        ours_arg, their_arg = oxtree.treespec_leaf(), optree.treespec_leaf()
    else:
        ours_arg = their_arg = collection
    with pytest.warns(UserWarning, match="called on a leaf"):
        theirs = optree.treespec_from_collection(their_arg)
    with pytest.warns(UserWarning, match="called on a leaf"):
        mine = outcome(lambda: repr(oxtree.treespec_from_collection(ours_arg)))
    assert mine == ("ok", repr(theirs))


# --------------------------------------------------------------------------------------------------
# Namespaces.


@pytest.mark.parametrize("none_is_leaf", NONE_IS_LEAF_OPTIONS)
def test_namespaced_children(none_is_leaf: bool) -> None:
    ours_child = oxtree.tree_structure(Pod(1, None), none_is_leaf=none_is_leaf, namespace=NAMESPACE)
    their_child = optree.tree_structure(
        Pod(1, None), none_is_leaf=none_is_leaf, namespace=NAMESPACE
    )
    assert ours_child.namespace == NAMESPACE
    for namespace in ("", NAMESPACE):
        ours = oxtree.treespec_tuple([ours_child], none_is_leaf=none_is_leaf, namespace=namespace)
        theirs = optree.treespec_tuple(
            [their_child], none_is_leaf=none_is_leaf, namespace=namespace
        )
        assert repr(ours) == repr(theirs)
        assert ours.namespace == theirs.namespace == NAMESPACE
        assert ours == oxtree.tree_structure(
            (Pod(1, None),), none_is_leaf=none_is_leaf, namespace=NAMESPACE
        )
    mine = outcome(
        lambda: oxtree.treespec_list([ours_child], none_is_leaf=none_is_leaf, namespace="elsewhere")
    )
    ref = outcome(
        lambda: optree.treespec_list(
            [their_child], none_is_leaf=none_is_leaf, namespace="elsewhere"
        )
    )
    assert ref == ("error", ValueError)
    assert mine == ref


def test_from_collection_with_a_custom_node() -> None:
    ours = oxtree.treespec_from_collection(
        Pod(oxtree.treespec_leaf(), oxtree.treespec_none()), namespace=NAMESPACE
    )
    theirs = optree.treespec_from_collection(
        Pod(optree.treespec_leaf(), optree.treespec_none()), namespace=NAMESPACE
    )
    assert repr(ours) == repr(theirs)
    assert ours == oxtree.tree_structure(Pod(0, None), namespace=NAMESPACE)


@pytest.mark.parametrize("none_is_leaf", NONE_IS_LEAF_OPTIONS)
def test_leaf_and_none_take_a_namespace(none_is_leaf: bool) -> None:
    for name in ("treespec_leaf", "treespec_none"):
        ours = getattr(oxtree, name)(none_is_leaf=none_is_leaf, namespace=NAMESPACE)
        theirs = getattr(optree, name)(none_is_leaf=none_is_leaf, namespace=NAMESPACE)
        assert repr(ours) == repr(theirs)
        assert ours.namespace == theirs.namespace
        assert ours == getattr(oxtree, name)(none_is_leaf=none_is_leaf)


# --------------------------------------------------------------------------------------------------
# Function forms.

FUNCTION_FORMS = [
    "treespec_paths",
    "treespec_entries",
    "treespec_children",
    "treespec_one_level",
    "treespec_is_leaf",
    "treespec_is_strict_leaf",
    "treespec_is_one_level",
]

CONSTRUCTORS = [
    "treespec_leaf",
    "treespec_none",
    "treespec_tuple",
    "treespec_list",
    "treespec_dict",
    "treespec_namedtuple",
    "treespec_ordereddict",
    "treespec_defaultdict",
    "treespec_deque",
    "treespec_structseq",
    "treespec_from_collection",
]


def parameters(func: Callable[..., Any]) -> list[tuple[str, Any, str]]:
    return [
        (p.name, p.kind, "<none>" if p.default is p.empty else repr(p.default))
        for p in inspect.signature(func).parameters.values()
    ]


@pytest.mark.parametrize(
    "name",
    [
        *FUNCTION_FORMS,
        *CONSTRUCTORS,
        "treespec_entry",
        "treespec_child",
        "treespec_transform",
        "treespec_is_prefix",
        "treespec_is_suffix",
    ],
)
def test_function_signatures_match_optree(name: str) -> None:
    assert name in oxtree.__all__
    assert parameters(getattr(oxtree, name)) == parameters(getattr(optree, name))


@parametrize(tree=TREES)
def test_function_forms_match_methods_and_optree(tree: Any) -> None:
    for nil in NONE_IS_LEAF_OPTIONS:
        ours = oxtree.tree_structure(tree, none_is_leaf=nil)
        theirs = optree.tree_structure(tree, none_is_leaf=nil)
        for name in FUNCTION_FORMS:
            mine = getattr(oxtree, name)(ours)
            ref = getattr(optree, name)(theirs)
            if name in ("treespec_children", "treespec_one_level"):
                mine, ref = repr(mine), repr(ref)
            assert mine == ref, (name, repr(theirs))
        assert oxtree.treespec_paths(ours) == ours.paths()
        assert oxtree.treespec_entries(ours) == ours.entries()
        assert oxtree.treespec_children(ours) == ours.children()
        assert oxtree.treespec_one_level(ours) == ours.one_level()
        assert oxtree.treespec_is_leaf(ours) is ours.is_leaf()
        assert oxtree.treespec_is_leaf(ours, strict=False) is ours.is_leaf(strict=False)
        assert oxtree.treespec_is_leaf(ours, strict=False) is optree.treespec_is_leaf(
            theirs, strict=False
        )
        assert oxtree.treespec_is_strict_leaf(ours) is ours.is_leaf(strict=True)
        assert oxtree.treespec_is_one_level(ours) is ours.is_one_level()
        n = ours.num_children
        for i in (-n - 1, -n, -1, 0, n - 1, n):
            for name in ("treespec_child", "treespec_entry"):
                mine = outcome(lambda f, *a: repr(f(*a)), getattr(oxtree, name), ours, i)
                ref = outcome(lambda f, *a: repr(f(*a)), getattr(optree, name), theirs, i)
                assert mine == ref, (name, i, repr(theirs))
        leaf = oxtree.treespec_leaf(none_is_leaf=nil)
        assert oxtree.treespec_transform(ours) == ours
        assert oxtree.treespec_transform(ours, None, lambda _, leaf=leaf: leaf) == ours
        for a, b in ((leaf, ours), (ours, leaf), (ours, ours)):
            for strict in (False, True):
                assert oxtree.treespec_is_prefix(a, b, strict=strict) is a.is_prefix(
                    b, strict=strict
                )
                assert oxtree.treespec_is_suffix(a, b, strict=strict) is a.is_suffix(
                    b, strict=strict
                )


def test_function_forms_reject_non_specs() -> None:
    for name in (*FUNCTION_FORMS, "treespec_transform"):
        with pytest.raises(TypeError):
            getattr(oxtree, name)((1, 2))
    with pytest.raises(TypeError):
        oxtree.treespec_child([1], 0)
    with pytest.raises(TypeError):
        oxtree.treespec_is_prefix(oxtree.treespec_leaf(), 1)
    with pytest.raises(TypeError):
        oxtree.treespec_is_suffix(1, oxtree.treespec_leaf())
