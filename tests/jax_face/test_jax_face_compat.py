"""The JAX face where JAX's own test suite holds it to JAX's behaviour, with jax as the oracle.

Broadcasting a flattened prefix, keys of `register_pytree_with_keys` nodes kept as given, the
messages for a registered flatten function's bad result and for `register_dataclass`'s field
lists, `Partial`'s equality, hash and repr, and the registries.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import re
from typing import Any

import jax.tree_util as jtu
import oxtree.functools
import oxtree.tree_util as otu
import pytest
from jax._src.tree_util import broadcast_flattened_prefix_with_treedef as jax_broadcast_flat

FACES = pytest.mark.parametrize("tu", [jtu, otu], ids=["jax", "oxtree"])


def run(fn: Any) -> tuple[str, Any]:
    """What `fn()` gives: ("ok", value) or ("raise", exception type, message)."""
    try:
        return ("ok", fn())
    except Exception as e:
        return ("raise", (type(e), str(e)))


# ------------------------------------------------------------------------------------------
# broadcast_flattened_prefix_with_treedef and tree_broadcast

BROADCASTS = [
    ((1, 2), ([3, 4], {"a": 5, "b": [6, 7]})),
    (0, {"x": [1, 2], "y": (3,)}),
    ((None, 0), (None, {"k1": 1, "k2": 2})),
    ([1, {"a": 2}], [(0, 0, 0), {"a": [0, 0]}]),
    ({"b": 1, "a": 2}, {"a": [0, 0], "b": (0,)}),
    ((1, 2), ((), [])),  # prefix leaves over empty subtrees
    (collections.OrderedDict(z=1, y=2), collections.OrderedDict(z=[0, 0], y=0)),
]


@pytest.mark.parametrize(("prefix", "full"), BROADCASTS)
def test_broadcast_flattened_prefix_matches_jax(prefix: Any, full: Any) -> None:
    expected = jax_broadcast_flat(*jtu.tree_flatten(prefix), jtu.tree_structure(full))
    actual = otu.broadcast_flattened_prefix_with_treedef(
        *otu.tree_flatten(prefix), otu.tree_structure(full)
    )
    assert actual == expected
    assert otu.tree_broadcast(prefix, full) == jtu.tree_broadcast(prefix, full)


def test_broadcast_repeats_the_same_objects() -> None:
    leaf = object()
    out = otu.broadcast_flattened_prefix_with_treedef(
        [leaf], otu.tree_structure(0), otu.tree_structure([0, (0, 0)])
    )
    assert len(out) == 3
    assert all(x is leaf for x in out)


@pytest.mark.parametrize(
    ("prefix", "full"),
    [
        ((1, 2, 3), (0, {"a": 0, "b": 0})),
        ((1, 2), (0, {"a": 0, "b": 0}, (0, 0))),
        ((1, {"a": 0}), (0, {"a": 0, "b": 0})),
        ([1], (1,)),
        ((1, None), (1, 2)),
    ],
)
def test_broadcast_of_a_non_prefix_raises_value_error(prefix: Any, full: Any) -> None:
    leaves, prefix_def = otu.tree_flatten(prefix)
    with pytest.raises(ValueError, match="`prefix_treedef` is not a prefix of `full_treedef`"):
        otu.broadcast_flattened_prefix_with_treedef(leaves, prefix_def, otu.tree_structure(full))
    with pytest.raises(ValueError, match=r"expected|not a prefix|zip\(\)"):
        jax_broadcast_flat(*jtu.tree_flatten(prefix), jtu.tree_structure(full))
    with pytest.raises(ValueError, match=r"(?i)mismatch|structure error|not a prefix"):
        otu.tree_broadcast(prefix, full)
    assert leaves == otu.tree_leaves(prefix)  # arguments untouched


def test_broadcast_checks_the_leaf_count_and_argument_types() -> None:
    spec = otu.tree_structure((0, 0))
    with pytest.raises(ValueError, match="3 prefix leaves for a prefix treedef of 2 leaves"):
        otu.broadcast_flattened_prefix_with_treedef([1, 2, 3], spec, spec)
    with pytest.raises(TypeError, match="not iterable"):
        otu.broadcast_flattened_prefix_with_treedef(7, spec, spec)
    with pytest.raises(TypeError, match="full_treedef"):
        otu.broadcast_flattened_prefix_with_treedef([1, 2], spec, (0, 0))


def test_broadcast_wants_treedefs_of_one_face() -> None:
    import oxtree

    with pytest.raises(ValueError, match="not a prefix"):
        otu.broadcast_flattened_prefix_with_treedef(
            [1], otu.tree_structure(0), oxtree.tree_structure([0])
        )


def test_tree_broadcast_is_leaf_applies_to_the_prefix() -> None:
    prefix, full = ([1, 2], 3), ([0, 0], ([0], 0))
    is_leaf = lambda x: isinstance(x, list)  # noqa: E731
    assert otu.tree_broadcast(prefix, full, is_leaf) == jtu.tree_broadcast(prefix, full, is_leaf)


# ------------------------------------------------------------------------------------------
# Keys of nodes registered with flatten_with_keys: kept as given


def make_keyed(tu: Any) -> type:
    class Keyed:
        def __init__(self, x: Any, y: Any) -> None:
            self.x, self.y = x, y

    tu.register_pytree_with_keys(
        Keyed,
        lambda o: ((("x", o.x), (7, o.y)), None),
        lambda _, xy: Keyed(*xy),
    )
    return Keyed


@FACES
def test_raw_keys_of_flatten_with_keys_stay_as_given(tu: Any) -> None:
    keyed = make_keyed(tu)
    tree = [keyed(1, {"k": 2})]
    paths = [path for path, _ in tu.tree_flatten_with_path(tree)[0]]
    assert paths == [
        (tu.SequenceKey(0), "x"),
        (tu.SequenceKey(0), 7, tu.DictKey("k")),
    ]
    pairs, aux = tu.flatten_one_level_with_keys(keyed(1, 2))
    assert list(pairs) == [("x", 1), (7, 2)]
    assert aux is None
    assert [tu.keystr(p) for p, _ in tu.tree_leaves_with_path(tree)] == ["[0]x", "[0]7['k']"]


# ------------------------------------------------------------------------------------------
# A registered flatten function's bad result


@pytest.mark.parametrize(
    ("result", "where_iterable"),
    [("hello", False), ((2, 3, 4), False), ((7, 7), True), ([1, 2], False), ((1,), False)],
)
def test_bad_flatten_result_is_reported_in_jax_words(result: Any, where_iterable: bool) -> None:
    outcomes = []
    for tu in (jtu, otu):

        class Bad:
            pass

        tu.register_pytree_node(Bad, lambda o: result, lambda aux, c: Bad())
        outcomes.append(run(lambda tu=tu, cls=Bad: tu.tree_flatten([cls()])))
    theirs, ours = outcomes
    assert ours[0] == theirs[0] == "raise"
    assert ours[1][0] is theirs[1][0] is ValueError
    expected = (
        "The to_iterable function for a custom PyTree node should return a (children, "
        f"aux_data) tuple{' where' if where_iterable else ','}"
    )
    assert ours[1][1].startswith(expected)
    assert ours[1][1] == theirs[1][1]


def test_optree_entries_still_flatten_in_the_jax_face() -> None:
    import oxtree

    class WithEntries:
        def __init__(self, a: Any) -> None:
            self.a = a

    oxtree.register_pytree_node(
        WithEntries, lambda o: ((o.a,), None, ("a",)), lambda _, c: WithEntries(*c)
    )
    try:
        assert otu.tree_leaves(WithEntries(5)) == [5]
        ((path, _),) = otu.tree_leaves_with_path(WithEntries(5))
        assert path == (otu.FlattenedIndexKey("a"),)
    finally:
        oxtree.unregister_pytree_node(WithEntries)


def test_bad_flatten_result_in_the_main_face_keeps_its_message() -> None:
    """The main face speaks optree's words for a bad flatten result, not JAX's."""
    import optree
    import oxtree

    class Bad:
        pass

    oxtree.register_pytree_node(Bad, lambda o: "hello", lambda aux, c: Bad())
    optree.register_pytree_node(Bad, lambda o: "hello", lambda aux, c: Bad(), namespace="bad")
    try:
        with pytest.raises(RuntimeError) as peer:
            optree.tree_flatten(Bad(), namespace="bad")
        with pytest.raises(RuntimeError) as ours:
            oxtree.tree_flatten(Bad())
        assert str(ours.value).startswith(str(peer.value))
        assert "to_iterable" not in str(ours.value)
    finally:
        oxtree.unregister_pytree_node(Bad)
        optree.unregister_pytree_node(Bad, namespace="bad")


# ------------------------------------------------------------------------------------------
# register_dataclass


def dataclass_outcome(tu: Any, make: Any, **kwargs: Any) -> tuple[str, Any]:
    outcome = run(lambda: tu.register_dataclass(make(), **kwargs))
    if outcome[0] == "raise":
        typ, msg = outcome[1]
        return ("raise", (typ, re.sub(r"<locals>\.|\bat 0x[0-9a-f]+", "", msg)))
    return ("ok", None)


def plain() -> type:
    class Foo:
        x: int
        y: int

    return Foo


def dc_init_false() -> type:
    @dataclasses.dataclass
    class Foo:
        x: int
        y: int = 1
        z: int = dataclasses.field(default=2, init=False)

    return Foo


def dc_xy() -> type:
    @dataclasses.dataclass
    class Foo:
        x: int
        y: float

    return Foo


@pytest.mark.parametrize(
    ("make", "kwargs"),
    [
        (plain, {}),
        (plain, {"data_fields": ["x"]}),
        (plain, {"meta_fields": ["y"]}),
        (plain, {"data_fields": ["x"], "meta_fields": []}),
        (dc_init_false, {}),
        (dc_init_false, {"data_fields": ["x"], "meta_fields": []}),
        (dc_xy, {"data_fields": ["x"], "meta_fields": ["y", "z"]}),
        (dc_xy, {"data_fields": ["x", "y"], "meta_fields": ["x"]}),
        (dc_xy, {"data_fields": ["x"], "meta_fields": ["y"]}),
    ],
)
def test_register_dataclass_matches_jax(make: Any, kwargs: dict[str, Any]) -> None:
    assert dataclass_outcome(otu, make, **kwargs) == dataclass_outcome(jtu, make, **kwargs)


@pytest.mark.parametrize("drop", ["z", ["z"]])
def test_register_dataclass_infers_fields_less_drop_fields(drop: Any) -> None:
    # As the newest JAX does (jax 0.10.2 still inferred dropped fields, then refused them).
    foo = dc_init_false()
    assert otu.register_dataclass(foo, drop_fields=drop) is foo
    assert otu.tree_leaves(foo(1, 2)) == [1, 2]


def test_register_dataclass_registers_with_jax_rules() -> None:
    @dataclasses.dataclass
    class Op:
        x: float
        name: str = dataclasses.field(default="add", metadata={"static": True})

    assert otu.register_dataclass(Op) is Op
    leaves, treedef = otu.tree_flatten(Op(1.0))
    assert leaves == [1.0]
    assert repr(treedef) == "PyTreeDef(CustomNode(Op[('add',)], [*]))"
    assert otu.tree_unflatten(treedef, [2.0]) == Op(2.0)


# ------------------------------------------------------------------------------------------
# Partial


def test_partial_func_of_a_partial_equals_and_hashes_as_jax() -> None:
    fun = functools.partial(print, 1)
    for tu in (jtu, otu):
        p1, p2 = tu.Partial(fun, 2), tu.Partial(fun, 2)
        assert fun == p1.func
        assert p1.func == fun
        assert p1.func == p2.func
        assert hash(p1.func) == hash(p2.func) == hash(fun)
        assert p1.func != functools.partial(print, 2)
        assert p1.args == (2,)
        assert tu.tree_structure(p1) == tu.tree_structure(p2)


def named(x: Any, y: Any = 0) -> Any:
    return x + y


@pytest.mark.parametrize(
    "make",
    [
        lambda tu: tu.Partial(named, 1),
        lambda tu: tu.Partial(named, y=2),
        lambda tu: tu.Partial(functools.partial(named, 1), y=2),
        lambda tu: tu.Partial(tu.Partial(named), 3),
    ],
)
def test_partial_repr_is_jax_s(make: Any) -> None:
    assert repr(make(otu)) == repr(make(jtu))
    assert repr(otu.tree_structure(make(otu))) == repr(jtu.tree_structure(make(jtu)))


def test_partial_subclass_repr_is_its_own() -> None:
    class Mine(oxtree.functools.Partial):
        pass

    assert "jax.tree_util" not in repr(Mine(named))


# ------------------------------------------------------------------------------------------
# Registries and is_tree_node


def test_dispatch_registry_flattens_as_the_default_one() -> None:
    class Box:
        def __init__(self, x: Any) -> None:
            self.x = x

    otu.register_pytree_node(Box, lambda o: ((o.x,), None), lambda _, xs: Box(xs[0]))
    leaves1, treedef1 = otu.default_registry.flatten(Box(1))
    leaves2, treedef2 = otu.dispatch_registry.flatten(Box(1))
    assert (leaves1, treedef1) == (leaves2, treedef2) == ([1], otu.tree_structure(Box(1)))
    assert otu.dispatch_registry.is_node(Box)


@pytest.mark.parametrize(
    "typ",
    [
        object,
        int,
        str,
        list,
        tuple,
        dict,
        type(None),
        collections.OrderedDict,
        collections.defaultdict,
        collections.deque,
        collections.namedtuple("NT", "a"),
    ],
)
def test_is_tree_node_matches_jax(typ: type) -> None:
    assert otu.is_tree_node(typ) == jtu.is_tree_node(typ)


# ------------------------------------------------------------------------------------------
# PyTreeDef.serialize_using_proto / deserialize_using_proto / from_iterable_tree

PROTO_TREES = [
    1,
    None,
    (),
    [],
    {},
    [1, [2], (3,), {"a": 4, "b": 5}],
    {"z": None, "y": [{"z": 1, "q": (2, None)}], "x": {}},
    ((((1,),),), [[[]]]),
    {"ü": 1, "a b": [2, 3]},
]


@pytest.mark.parametrize("tree", PROTO_TREES)
def test_proto_bytes_are_jax_s(tree: Any) -> None:
    ours = otu.tree_structure(tree)
    theirs = jtu.tree_structure(tree)
    data = ours.serialize_using_proto()
    assert data == theirs.serialize_using_proto()
    back = otu.PyTreeDef.deserialize_using_proto(otu.default_registry, data)
    assert back == ours
    assert repr(back) == repr(ours)
    assert repr(jtu.PyTreeDef.deserialize_using_proto(jtu.default_registry, data)) == repr(theirs)


@pytest.mark.parametrize(
    ("tree", "message"),
    [
        ({1: 2}, "Only string keys are supported in proto pytree serialization."),
        (otu.Partial(print, 1), "User-defined nodes are not supported"),
        (collections.OrderedDict(a=1), "User-defined nodes are not supported"),
        (collections.namedtuple("P", "x")(1), "User-defined nodes are not supported"),
    ],
)
def test_proto_refuses_what_jax_refuses(tree: Any, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        otu.tree_structure(tree).serialize_using_proto()


def test_proto_of_a_main_face_treespec_is_refused() -> None:
    import oxtree

    with pytest.raises(ValueError, match="only treedefs of the JAX face"):
        oxtree.tree_structure([1]).serialize_using_proto()


@pytest.mark.parametrize(
    "data",
    [
        b"\x0a",  # truncated length
        b"\x0a\x05\x10\x01",  # field longer than the data
        b"\x0a\x02\x10\x09",  # unknown node type
        b"\x0a\x02\x10\x05\x0a\x06\x08\x01\x10\x05\x1a\x00",  # dict of 1 child, no key
        b"\x0a\x02\x10\x01\x0a\x09\x08\x01\x10\x05\x1a\x03\x0a\x01\x07",  # key id out of range
        b"\x0a\x04\x08\x02\x10\x02",  # a list of 2 children, none before it
        b"\x0a\x02\x10\x01\x0a\x02\x10\x01",  # two roots
        b"",  # no nodes
        b"\x0b",  # unknown wire type
        b"\x0a\x02\x10\x01\x12\x01\xff",  # an interned string that is not UTF-8
    ],
)
def test_malformed_proto_bytes_raise_value_error(data: bytes) -> None:
    with pytest.raises(ValueError, match="Could not deserialize PyTreeDefProto"):
        otu.PyTreeDef.deserialize_using_proto(otu.default_registry, data)


def test_from_iterable_tree_matches_jax() -> None:
    tree = {"b": [1, (2, 3)], "a": None}
    iterable = [[], [1, [2, 3]]]  # dict children in sorted key order
    ours = otu.tree_structure(tree).from_iterable_tree(iterable)
    theirs = jtu.tree_structure(tree).from_iterable_tree(iterable)
    assert ours == theirs == {"a": None, "b": [1, (2, 3)]}
    leaf = object()
    assert otu.tree_structure(0).from_iterable_tree(leaf) is leaf


def test_from_iterable_tree_checks_each_node() -> None:
    treedef = otu.tree_structure([1, (2, 3)])
    with pytest.raises(ValueError, match="Arity mismatch between trees"):
        treedef.from_iterable_tree([1, (2, 3, 4)])
    with pytest.raises(TypeError, match="not iterable"):
        treedef.from_iterable_tree([1, 5])


# ------------------------------------------------------------------------------------------
# Treedef equality over aux data whose == raises


class Unequal:
    def __eq__(self, other: object) -> bool:
        raise RuntimeError("no comparing")

    __hash__ = object.__hash__


def test_treedef_equality_error_names_the_type_as_jax_does() -> None:
    outcomes = []
    for tu in (jtu, otu):

        class MetadataBox:
            def __init__(self, x: Any) -> None:
                self.x = x

        tu.register_pytree_node(
            MetadataBox, lambda o: ((), (o.x,)), lambda aux, _: MetadataBox(aux[0])
        )
        a = tu.tree_structure(MetadataBox(Unequal()))
        b = tu.tree_structure(MetadataBox(Unequal()))
        hash(a)
        with pytest.raises(ValueError, match="Exception raised while checking equality") as info:
            a == b  # noqa: B015 - the comparison raises
        assert isinstance(info.value.__cause__, RuntimeError)
        outcomes.append(str(info.value))
    theirs, ours = outcomes
    # Newer JAX names the type (jax 0.10.2 does not yet): "... of pytree node of type <class
    # '...MetadataBox'>. Make sure ...".
    assert re.fullmatch(
        re.escape(theirs).replace(
            r"pytree\.", r"pytree node of type <class '[\w.<>]*MetadataBox'>\."
        ),
        ours,
    ), ours


# ------------------------------------------------------------------------------------------
# Mirrored registrations take any aux data, as JAX does


def test_mirrored_static_type_with_unhashable_value_traces_once_per_value() -> None:
    import jax
    import oxtree.jax as oxjax

    @otu.register_static
    class StaticMap(dict):  # unhashable: JAX compares it, never hashes it
        pass

    assert oxjax.register(StaticMap) is StaticMap
    calls = []

    @jax.jit
    def fn(x: Any, static: Any) -> Any:
        calls.append(1)
        return x + static["k"]

    assert int(fn(1, StaticMap(k=2))) == 3
    assert int(fn(5, StaticMap(k=2))) == 7
    assert len(calls) == 1
    assert int(fn(1, StaticMap(k=4))) == 5
    assert len(calls) == 2
    ((path, leaf),) = jtu.tree_leaves_with_path([StaticMap(k=1), 3])
    assert (path, leaf) == ((jtu.SequenceKey(1),), 3)
