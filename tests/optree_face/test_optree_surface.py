"""optree 0.20's surface beyond the tree functions: `path_entry_type`, the registry view,
`dict_insertion_ordered`, the namedtuple/struct-sequence predicates, `typing`, `utils`,
`integrations` and the one-level output, each compared with optree where it applies, and every
error path by hand.
"""

from __future__ import annotations

import collections
import re
import sys
import time

import numpy as np
import optree
import oxtree
import pytest
from helpers import TREES, assert_same_leaves, assert_same_tree
from oxtree import _core


class _Pair:
    def __init__(self, a, b):
        self.a, self.b = a, b

    def __eq__(self, other):
        return isinstance(other, _Pair) and (self.a, self.b) == (other.a, other.b)

    __hash__ = None


def _pair_flatten(p):
    return (p.a, p.b), None, ("a", "b")


def _pair_unflatten(_, children):
    return _Pair(*children)


@pytest.fixture
def pair_namespace():
    name = "test-optree-surface"
    yield name
    for registered in oxtree.registered_types(namespace=name):
        if registered is _Pair:
            oxtree.unregister_pytree_node(_Pair, namespace=name)


def test_path_entry_type_picks_the_accessor_entries(pair_namespace):
    oxtree.register_pytree_node(
        _Pair,
        _pair_flatten,
        _pair_unflatten,
        path_entry_type=oxtree.GetAttrEntry,
        namespace=pair_namespace,
    )
    tree = [_Pair(1, {"k": 2})]
    accessors = oxtree.tree_accessors(tree, namespace=pair_namespace)
    assert [a.codify("t") for a in accessors] == ["t[0].a", "t[0].b['k']"]
    assert [type(a[1]) for a in accessors] == [oxtree.GetAttrEntry, oxtree.GetAttrEntry]
    assert [a(tree) for a in accessors] == [1, 2]
    entry = oxtree.register_pytree_node.get(_Pair, namespace=pair_namespace)
    assert entry.path_entry_type is oxtree.GetAttrEntry
    assert entry.kind == oxtree.PyTreeKind.CUSTOM
    assert entry.flatten_func is _pair_flatten
    assert oxtree.register_pytree_node.get(_Pair) is None


def test_path_entry_type_must_be_an_entry_class(pair_namespace):
    with pytest.raises(TypeError, match="Expected a subclass of PyTreeEntry, got <class 'int'>"):
        oxtree.register_pytree_node(
            _Pair, _pair_flatten, _pair_unflatten, path_entry_type=int, namespace=pair_namespace
        )
    assert _Pair not in oxtree.registered_types(namespace=pair_namespace)


def test_register_pytree_node_class_takes_optree_forms():
    @oxtree.register_pytree_node_class("test-surface-class")
    class Box:
        TREE_PATH_ENTRY_TYPE = oxtree.GetItemEntry

        def __init__(self, items):
            self.items = items

        def __getitem__(self, i):
            return self.items[i]

        def tree_flatten(self):
            return tuple(self.items), None

        @classmethod
        def tree_unflatten(cls, _, children):
            return cls(list(children))

    try:
        (accessor,) = oxtree.tree_accessors(Box([5]), namespace="test-surface-class")
        assert type(accessor[0]) is oxtree.GetItemEntry
        assert accessor(Box([5])) == 5
    finally:
        oxtree.unregister_pytree_node(Box, namespace="test-surface-class")
    with pytest.raises(ValueError, match="Cannot specify `namespace`"):
        oxtree.register_pytree_node_class("a", namespace="b")
    with pytest.raises(ValueError, match="cannot be an empty string"):
        oxtree.register_pytree_node_class("")


def test_registry_view_matches_optree():
    ours = oxtree.register_pytree_node.get()
    theirs = optree.register_pytree_node.get(namespace="")
    for cls in (type(None), tuple, list, dict, collections.OrderedDict, collections.deque):
        assert ours[cls].kind == theirs[cls].kind
        assert ours[cls].path_entry_type.__name__ == theirs[cls].path_entry_type.__name__
    assert oxtree.register_pytree_node.get(list) is ours[list]
    assert oxtree.register_pytree_node.get(set) is None
    nt = collections.namedtuple("nt", "x")
    assert oxtree.register_pytree_node.get(nt).kind == oxtree.PyTreeKind.NAMEDTUPLE
    assert oxtree.register_pytree_node.get(time.struct_time).kind == (
        oxtree.PyTreeKind.STRUCTSEQUENCE
    )
    unflatten = oxtree.register_pytree_node.get(collections.deque).unflatten_func
    assert unflatten(3, [1, 2]) == collections.deque([1, 2], maxlen=3)
    with pytest.raises(TypeError, match="Expected a class or None, got 1"):
        oxtree.register_pytree_node.get(1)
    with pytest.raises(TypeError, match="The namespace must be a string"):
        oxtree.register_pytree_node.get(list, namespace=1)


def test_registry_size_counts_registrations(pair_namespace):
    before = _core.get_registry_size()
    before_ns = _core.get_registry_size(namespace=pair_namespace)
    assert before_ns == _core.get_registry_size(namespace="") >= 7
    oxtree.register_pytree_node(_Pair, _pair_flatten, _pair_unflatten, namespace=pair_namespace)
    assert _core.get_registry_size() == before + 1
    assert _core.get_registry_size(namespace=pair_namespace) == before_ns + 1
    assert _core.get_registry_size(namespace="") == before_ns
    from oxtree.registry import _NODETYPE_REGISTRY

    assert (pair_namespace, _Pair) in _NODETYPE_REGISTRY
    assert len(_NODETYPE_REGISTRY) == _core.get_registry_size() + 2


@pytest.mark.parametrize("tree", TREES, ids=repr)
def test_dict_insertion_ordered_matches_optree(tree):
    with (
        oxtree.dict_insertion_ordered(True, namespace=""),
        optree.dict_insertion_ordered(True, namespace=optree.registry.__GLOBAL_NAMESPACE),
    ):
        try:
            expected = optree.tree_leaves(tree, namespace="")
        except Exception:  # trees optree itself cannot flatten are not compared
            return
        leaves, spec = oxtree.tree_flatten(tree)
        assert_same_leaves(leaves, expected)
        assert_same_tree(spec.unflatten(leaves), tree)


def test_dict_insertion_ordered_is_scoped():
    tree = {"b": 1, "a": 2}
    with oxtree.dict_insertion_ordered(True, namespace="only-here"):
        assert oxtree.tree_leaves(tree, namespace="only-here") == [1, 2]
        assert oxtree.tree_leaves(tree) == [2, 1]
        assert _core.is_dict_insertion_ordered("only-here")
        with oxtree.dict_insertion_ordered(False, namespace="only-here"):
            assert oxtree.tree_leaves(tree, namespace="only-here") == [2, 1]
        assert oxtree.tree_leaves(tree, namespace="only-here") == [1, 2]
    assert not _core.is_dict_insertion_ordered("only-here")
    # The JAX face always sorts.
    with oxtree.dict_insertion_ordered(True):
        assert oxtree.tree_util.tree_leaves(tree) == [2, 1]
    with (
        pytest.raises(TypeError, match="The namespace must be a string"),
        oxtree.dict_insertion_ordered(True, namespace=1),
    ):
        pass


@pytest.mark.parametrize(
    "obj",
    [
        collections.namedtuple("P", "x y"),
        collections.namedtuple("P", "x y")(1, 2),
        time.struct_time,
        time.gmtime(0),
        type(sys.float_info),
        (1, 2),
        tuple,
        int,
        1,
    ],
    ids=repr,
)
def test_tuple_predicates_match_optree(obj):
    for name in (
        "is_namedtuple",
        "is_namedtuple_class",
        "is_namedtuple_instance",
        "is_structseq",
        "is_structseq_class",
        "is_structseq_instance",
    ):
        assert getattr(oxtree, name)(obj) == getattr(optree, name)(obj), name
    for name in ("namedtuple_fields", "structseq_fields"):
        try:
            expected = getattr(optree, name)(obj)
        except TypeError as ex:
            with pytest.raises(TypeError, match=re.escape(str(ex))):
                getattr(oxtree, name)(obj)
        else:
            assert getattr(oxtree, name)(obj) == expected


def test_typing_pytree():
    from oxtree.typing import PyTree, PyTreeTypeVar, StructSequence

    assert PyTree[int] is PyTree[int]
    assert PyTree[PyTree[int]] is PyTree[int]
    assert PyTreeTypeVar("IntTree", int) == PyTree[int, "IntTree"]
    assert isinstance(time.gmtime(0), StructSequence)
    assert not isinstance((1,), StructSequence)
    with pytest.raises(TypeError, match="only supports a tuple of 2 items"):
        _ = PyTree[int, 1]
    with pytest.raises(TypeError, match="Cannot instantiate"):
        PyTree()
    with pytest.raises(TypeError, match="only supports a string of type name"):
        PyTreeTypeVar(1, int)


def test_utils_match_optree():
    from optree import utils as theirs
    from oxtree import utils as ours

    for items in ([3, 1, 2], [1, "b", 2.5, "a"], [object(), object()]):
        assert ours.total_order_sorted(items) == theirs.total_order_sorted(items)
    assert ours.total_order_sorted([1, 3, 2], reverse=True) == [3, 2, 1]
    assert list(ours.safe_zip([1, 2], "ab")) == [(1, "a"), (2, "b")]
    assert ours.unzip2([(1, "a")]) == ((1,), ("a",))
    with pytest.raises(ValueError, match="length mismatch"):
        ours.safe_zip([1], [1, 2])


def test_numpy_tree_ravel_matches_optree():
    from optree.integrations import numpy as theirs
    from oxtree.integrations import numpy as ours

    tree = {"b": np.arange(3, dtype=np.float32), "a": [np.ones((2, 2), dtype=np.int32), 1.5]}
    flat, unravel = ours.tree_ravel(tree)
    expected, _ = theirs.tree_ravel(tree)
    np.testing.assert_array_equal(flat, expected)
    assert flat.dtype == expected.dtype
    back = unravel(flat)
    assert back["a"][0].dtype == np.int32
    np.testing.assert_array_equal(back["b"], tree["b"])
    empty, unravel_empty = ours.tree_ravel({})
    assert empty.shape == (0,)
    assert unravel_empty(empty) == {}
    with pytest.raises(ValueError, match=r"expected an array of shape \(8,\)"):
        unravel(np.zeros(3))
    with pytest.raises(ValueError, match="expected an array of dtype float64"):
        unravel(np.zeros(8, dtype=np.float32))
    with pytest.raises(AttributeError):
        _ = oxtree.integrations.nothing


def test_flatten_one_level_reports_type_kind_and_entry_type():
    out = oxtree.tree_flatten_one_level(collections.OrderedDict(b=1, a=2))
    theirs = optree.tree_flatten_one_level(collections.OrderedDict(b=1, a=2))
    assert out.type is theirs.type
    assert int(out.kind) == int(theirs.kind)
    assert out.path_entry_type.__name__ == theirs.path_entry_type.__name__
    assert list(out.children) == list(theirs.children)


def test_treespec_frozendict_is_unsupported():
    with pytest.raises(RuntimeError, match=r"requires Python 3\.15\+"):
        oxtree.treespec_frozendict()


def test_treespec_child_and_entry_errors_speak_optree():
    spec = oxtree.tree_structure((1, 2))
    with pytest.raises(IndexError, match=r"^PyTreeSpec::Child\(\) index out of range\."):
        spec.child(2)
    with pytest.raises(IndexError, match=r"^PyTreeSpec::Entry\(\) index out of range\."):
        spec.entry(-3)


def test_from_collection_warns_on_a_leaf():
    with pytest.warns(UserWarning, match=r"MakeFromCollection\(\) is called on a leaf"):
        assert oxtree.treespec_from_collection(1) == oxtree.treespec_leaf()


def test_jax_tree_ravel_round_trips():
    import jax.numpy as jnp
    from oxtree.integrations import jax as ours

    tree = {"a": jnp.ones(2, dtype=jnp.int32), "b": (jnp.float32(1.5),)}
    flat, unravel = ours.tree_ravel(tree)
    assert flat.shape == (3,)
    assert flat.dtype == jnp.float32
    back = unravel(flat)
    assert back["a"].dtype == jnp.int32
    assert back["b"][0] == 1.5
    assert unravel == ours.tree_ravel(tree)[1]  # hashable: a static argument of jax.jit
    with pytest.raises(ValueError, match=r"expected an array of shape \(3,\)"):
        unravel(jnp.zeros(2))


def test_treespec_namedtuple_needs_a_namedtuple():
    with pytest.raises(
        ValueError, match=r"^Expected a namedtuple of PyTreeSpec\(s\), got \(1,\)\."
    ):
        oxtree.treespec_namedtuple((1,))
    with pytest.raises(ValueError, match=r"^Expected a PyStructSequence of PyTreeSpec\(s\)"):
        oxtree.treespec_structseq((1,))


def test_none_unflatten_takes_no_children():
    out = oxtree.tree_flatten_one_level(None)
    assert out.unflatten_func(out.metadata, []) is None
    with pytest.raises(ValueError, match=r"^Expected no children\.$"):
        out.unflatten_func(out.metadata, range(1))
