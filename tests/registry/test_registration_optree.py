"""Registered nodes against optree and jax: treespec reprs, unhashable metadata, the
``__tree_flatten__`` protocol and the texts of registration errors.

Each library gets its own classes (a type registered with one library is unknown to the other),
built by the same factory, so results compare across libraries.
"""

from __future__ import annotations

import pickle
import re
import sys
import time
import warnings
from collections import OrderedDict, defaultdict, deque, namedtuple
from collections.abc import Callable, Iterator
from typing import Any

import jax.tree_util as jtu
import optree
import optree.dataclasses
import oxtree
import oxtree.dataclasses
import oxtree.tree_util as otu
import pytest
from helpers import HYPOTHESIS_SETTINGS, trees
from hypothesis import given
from hypothesis import strategies as st
from test_registry_diff import _box_class

NS = "registration-optree"
LIBS = {"optree": optree, "oxtree": oxtree}


def _classes(tag: str) -> dict[str, type]:
    """Fresh node classes (unregistered), named alike for every library (`tag` aside)."""
    box = _box_class("Box")
    named = type("Named", (box,), {"__qualname__": "Named", "__module__": box.__module__})
    return {"Box": box, "Named": named}


def _register(mod: Any, classes: dict[str, type], namespace: str = NS) -> None:
    box, named = classes["Box"], classes["Named"]
    mod.register_pytree_node(
        box, lambda b: (b.children, b.meta), lambda m, c: box(*c, meta=m), namespace=namespace
    )
    mod.register_pytree_node(
        named,
        lambda b: (b.children, b.meta, tuple(f"c{i}" for i in range(len(b.children)))),
        lambda m, c: named(*c, meta=m),
        namespace=namespace,
    )


@pytest.fixture
def kits() -> Iterator[dict[str, dict[str, Any]]]:
    """Per library: registered Box and Named classes and two dataclasses."""
    out: dict[str, dict[str, Any]] = {}
    for name, mod in LIBS.items():
        classes = _classes(name)
        _register(mod, classes)
        dc = mod.dataclasses

        @dc.dataclass(namespace=NS)
        class Model:
            w: Any
            b: Any = 0
            name: Any = dc.field(default="net", pytree_node=False)
            sizes: Any = dc.field(default=(1,), pytree_node=False)

        @dc.dataclass(namespace=NS)
        class Plain:
            a: Any

        out[name] = {**classes, "Model": Model, "Plain": Plain}
    yield out
    for name, mod in LIBS.items():
        for cls in (out[name]["Box"], out[name]["Named"]):
            mod.unregister_pytree_node(cls, namespace=NS)


def _realize(kit: dict[str, Any], blueprint: Any) -> Any:
    """A tree from a blueprint: ("Box", meta, *children) and friends become kit objects."""
    if isinstance(blueprint, list):
        return [_realize(kit, b) for b in blueprint]
    if isinstance(blueprint, tuple) and blueprint and blueprint[0] in ("Box", "Named"):
        _, meta, *children = blueprint
        return kit[blueprint[0]](*(_realize(kit, c) for c in children), meta=meta)
    if isinstance(blueprint, tuple) and blueprint and blueprint[0] == "Model":
        _, w, name = blueprint
        return kit["Model"](_realize(kit, w), name=name)
    if isinstance(blueprint, tuple) and blueprint and blueprint[0] == "Plain":
        return kit["Plain"](_realize(kit, blueprint[1]))
    if isinstance(blueprint, dict):
        return {k: _realize(kit, v) for k, v in blueprint.items()}
    return blueprint


Point = namedtuple("Point", ["x", "y"])

BLUEPRINTS = [
    ("Box", None, 1, 2),
    ("Box", "m"),
    ("Box", ["a", "list"], 1),
    ("Box", {"k": [1]}, ("Box", (1, "a"), None)),
    ("Named", ("x",), 1, [2, 3]),
    ("Named", None),
    ("Model", 1, "net"),
    ("Model", [1, 2], ["unhashable"]),
    ("Plain", ("Plain", None)),
    [("Model", ("Plain", 1), "n"), {"b": ("Box", 0, 1), "a": None}],
    [Point(1, ("Box", None, 2)), OrderedDict(z=deque([1], maxlen=2)), defaultdict(int, a=1)],
    [time.gmtime(0), sys.float_info, deque(), OrderedDict(), defaultdict(list)],
]


@pytest.mark.parametrize("blueprint", BLUEPRINTS, ids=range(len(BLUEPRINTS)))
@pytest.mark.parametrize("none_is_leaf", [False, True])
@pytest.mark.parametrize("namespace", ["", NS])
def test_repr_is_optrees(
    kits: dict[str, dict[str, Any]], blueprint: Any, none_is_leaf: bool, namespace: str
) -> None:
    specs = {
        name: mod.tree_structure(
            _realize(kits[name], blueprint), none_is_leaf=none_is_leaf, namespace=namespace
        )
        for name, mod in LIBS.items()
    }
    assert repr(specs["oxtree"]) == repr(specs["optree"])
    assert str(specs["oxtree"]) == str(specs["optree"])


@given(tree=trees(max_leaves=12), meta=st.sampled_from([None, "m", ("t", 1), ["l"], {"d": 1}]))
@HYPOTHESIS_SETTINGS
def test_repr_is_optrees_for_random_trees_under_custom_nodes(tree: Any, meta: Any) -> None:
    classes = {name: _classes(name) for name in LIBS}
    for name, mod in LIBS.items():
        _register(mod, classes[name], namespace=NS + "-random")
    try:
        for none_is_leaf in (False, True):
            reprs = {
                name: repr(
                    mod.tree_structure(
                        [classes[name]["Named"](tree, meta=meta), classes[name]["Box"](tree)],
                        none_is_leaf=none_is_leaf,
                        namespace=NS + "-random",
                    )
                )
                for name, mod in LIBS.items()
            }
            assert reprs["oxtree"] == reprs["optree"]
    finally:
        for name, mod in LIBS.items():
            for cls in classes[name].values():
                mod.unregister_pytree_node(cls, namespace=NS + "-random")


def test_dataclass_metadata_is_optrees(kits: dict[str, dict[str, Any]]) -> None:
    outs = {
        name: mod.tree_flatten_one_level(kits[name]["Model"](1, name="n"), namespace=NS)
        for name, mod in LIBS.items()
    }
    assert outs["oxtree"].metadata == outs["optree"].metadata == (("name", "n"), ("sizes", (1,)))
    assert tuple(outs["oxtree"].entries) == tuple(outs["optree"].entries) == ("w", "b")
    spec = oxtree.tree_structure(kits["oxtree"]["Model"](1, name="n"), namespace=NS)
    assert spec.node_data() == (("name", "n"), ("sizes", (1,)))


# --------------------------------------------------------------------------------------------------
# Unhashable node metadata.

UNHASHABLE = [["a", "list"], {"k": [1]}, {1, 2}, ("t", [1])]


@pytest.mark.parametrize("meta", UNHASHABLE, ids=repr)
def test_unhashable_metadata_like_optree(kits: dict[str, dict[str, Any]], meta: Any) -> None:
    results = {}
    for name, mod in LIBS.items():
        box = kits[name]["Box"]
        tree = {"b": box(1, [2], meta=meta)}
        leaves, spec = mod.tree_flatten(tree, namespace=NS)
        rebuilt = mod.tree_unflatten(spec, [10, 20])["b"]
        other = mod.tree_structure({"b": box(3, [4], meta=type(meta)(meta))}, namespace=NS)
        different = mod.tree_structure({"b": box(3, [4], meta="other")}, namespace=NS)
        results[name] = (
            leaves,
            repr(spec),
            rebuilt.children,
            rebuilt.meta,
            spec == other,
            hash(spec) == hash(other),
            spec == different,
        )
        assert tree["b"].meta == meta  # untouched
        hash(different)
    assert results["oxtree"] == results["optree"]
    assert results["oxtree"][4:6] == (True, True)
    assert results["oxtree"][6] is False


class KeyedBox:
    """A node class importable by pickle, registered with both libraries by `keyed_box`."""

    def __init__(self, *children: Any, keys: Any = None) -> None:
        self.children = children
        self.keys = keys


@pytest.fixture
def keyed_box() -> Iterator[type]:
    for mod in LIBS.values():
        mod.register_pytree_node(
            KeyedBox,
            lambda b: (b.children, b.keys),
            lambda k, c: KeyedBox(*c, keys=k),
            namespace=NS,
        )
    yield KeyedBox
    for mod in LIBS.values():
        mod.unregister_pytree_node(KeyedBox, namespace=NS)


@pytest.mark.parametrize("meta", UNHASHABLE, ids=repr)
def test_unhashable_metadata_pickles_like_optree(keyed_box: type, meta: Any) -> None:
    results = {}
    for name, mod in LIBS.items():
        spec = mod.tree_structure([keyed_box(1, keys=meta)], namespace=NS)
        clone = pickle.loads(pickle.dumps(spec))
        results[name] = (clone == spec, repr(clone), mod.tree_unflatten(clone, [2])[0].keys)
    assert results["oxtree"] == results["optree"]
    assert results["oxtree"][0] is True


def test_unhashable_dataclass_meta_field_like_optree(kits: dict[str, dict[str, Any]]) -> None:
    for name, mod in LIBS.items():
        model = kits[name]["Model"]
        spec = mod.tree_structure(model(1, name=["x"]), namespace=NS)
        assert spec == mod.tree_structure(model(2, name=["x"]), namespace=NS)
        assert spec != mod.tree_structure(model(2, name=["y"]), namespace=NS)
        assert hash(spec) == hash(mod.tree_structure(model(2, name=["x"]), namespace=NS))
        assert mod.tree_unflatten(spec, [5, 6]) == model(5, 6, name=["x"])


@pytest.mark.parametrize("meta", UNHASHABLE, ids=repr)
def test_unhashable_metadata_like_jax(meta: Any) -> None:
    results = {}
    for name, tu in (("jax", jtu), ("oxtree", otu)):
        # JAX's registry is global and permanent: a fresh class per library and per case.
        box = _classes(name)["Box"]
        tu.register_pytree_node(
            box, lambda b: (b.children, b.meta), lambda m, c, box=box: box(*c, meta=m)
        )
        leaves, spec = tu.tree_flatten([box(1, meta=meta)])
        other = tu.tree_structure([box(2, meta=type(meta)(meta))])
        results[name] = (
            leaves,
            repr(spec),
            tu.tree_unflatten(spec, [3])[0].meta,
            spec == other,
            hash(spec) == hash(other),
            spec == tu.tree_structure([box(2, meta="x")]),
        )
    assert results["oxtree"] == results["jax"]


def test_unhashable_static_instance_is_kept() -> None:
    class Unhashable:
        __hash__ = None  # type: ignore[assignment]

    oxtree.register_static(Unhashable, namespace=NS)
    try:
        u = Unhashable()
        spec = oxtree.tree_structure([u, 1], namespace=NS)
        assert spec.num_leaves == 1
        assert oxtree.tree_unflatten(spec, [2])[0] is u
        assert spec == oxtree.tree_structure([u, 3], namespace=NS)
        assert spec != oxtree.tree_structure([Unhashable(), 3], namespace=NS)
        hash(spec)
    finally:
        oxtree.unregister_pytree_node(Unhashable, namespace=NS)


# --------------------------------------------------------------------------------------------------
# The __tree_flatten__ / __tree_unflatten__ protocol.


def _protocol_class(dunder: bool, legacy: bool) -> type:
    body: dict[str, Any] = {
        "__init__": lambda self, *c: setattr(self, "c", c),
        "__eq__": lambda self, o: type(o) is type(self) and o.c == self.c,
        "__hash__": None,
    }
    if dunder:
        body["__tree_flatten__"] = lambda self: (
            self.c,
            "dunder",
            [f"d{i}" for i in range(len(self.c))],
        )
        body["__tree_unflatten__"] = classmethod(lambda cls, meta, children: cls(*children))
    if legacy:
        body["tree_flatten"] = lambda self: (tuple(reversed(self.c)), "legacy")
        body["tree_unflatten"] = classmethod(lambda cls, meta, children: cls(*reversed(children)))
    return type("Proto", (), body)


@pytest.mark.parametrize(("dunder", "legacy"), [(True, False), (False, True), (True, True)])
def test_tree_flatten_protocol_like_optree(dunder: bool, legacy: bool) -> None:
    results = {}
    for name, mod in LIBS.items():
        cls = _protocol_class(dunder, legacy)
        assert mod.register_pytree_node_class(cls, namespace=NS) is cls
        try:
            tree = cls(1, [2])
            leaves, spec = mod.tree_flatten(tree, namespace=NS)
            results[name] = (
                leaves,
                repr(spec),
                mod.tree_paths(tree, namespace=NS),
                mod.tree_unflatten(spec, leaves) == tree,
                callable(getattr(cls, "__tree_flatten__", None)),
                cls(3, 4).__tree_flatten__()[:2],
                cls.__tree_unflatten__(None, (5, 6)) == cls(5, 6),
            )
        finally:
            mod.unregister_pytree_node(cls, namespace=NS)
    assert results["oxtree"] == results["optree"]
    # The protocol's names win over the older ones.
    assert results["oxtree"][1].count("'dunder'" if dunder else "'legacy'") == 1


def test_register_pytree_node_class_takes_the_namespace_as_its_argument() -> None:
    for mod in LIBS.values():
        cls = _protocol_class(True, False)
        assert mod.register_pytree_node_class(NS)(cls) is cls
        try:
            assert mod.tree_leaves(cls(1, 2), namespace=NS) == [1, 2]
        finally:
            mod.unregister_pytree_node(cls, namespace=NS)


def test_register_pytree_node_class_default_namespace_is_global() -> None:
    # optree insists on a namespace; oxtree takes the global one when none is given.
    cls = _protocol_class(True, False)
    oxtree.register_pytree_node_class(cls)
    try:
        assert oxtree.tree_leaves([cls(1)]) == [1]
    finally:
        oxtree.unregister_pytree_node(cls)


# --------------------------------------------------------------------------------------------------
# Registration errors: optree's exception type and text, our detail after it.


def _outcome(call: Callable[[], Any]) -> tuple[str, str]:
    try:
        call()
    except Exception as e:
        return type(e).__name__, str(e)
    return "ok", ""


def _flatten_returning(mod: Any, result: Any, tag: str) -> Callable[[], Any]:
    def call() -> Any:
        cls = type(tag, (), {})
        mod.register_pytree_node(cls, lambda _: result, lambda m, c: cls(), namespace=NS)
        try:
            return mod.tree_leaves([cls()], namespace=NS)
        finally:
            mod.unregister_pytree_node(cls, namespace=NS)

    return call


FLATTEN_RESULTS = {
    "four-tuple": ((1,), None, None, None),
    "one-tuple": ((1,),),
    "entries-mismatch": ((1, 2), None, ["x"]),
    "not-iterable": 5,
    "list": [[1], None],
    "str": "ab",
}


@pytest.mark.parametrize("case", list(FLATTEN_RESULTS))
def test_bad_flatten_result_like_optree(case: str) -> None:
    outcomes = {
        name: _outcome(_flatten_returning(mod, FLATTEN_RESULTS[case], f"Bad_{case}"))
        for name, mod in LIBS.items()
    }
    (ours_type, ours), (theirs_type, theirs) = outcomes["oxtree"], outcomes["optree"]
    assert ours_type == theirs_type
    assert ours.startswith(theirs)


def _registry_calls(mod: Any) -> dict[str, Callable[[], Any]]:
    class Once:
        pass

    class Never:
        pass

    pair = namedtuple("pair", "a b")
    flat = (lambda o: ((), None), lambda m, c: None)

    def twice() -> Any:
        mod.register_pytree_node(Once, *flat, namespace=NS)
        try:
            return mod.register_pytree_node(Once, *flat, namespace=NS)
        finally:
            mod.unregister_pytree_node(Once, namespace=NS)

    class NoMethods:
        def tree_flatten(self) -> Any:
            return (), None

    return {
        "duplicate": twice,
        "unregister-unknown": lambda: mod.unregister_pytree_node(Never, namespace=NS),
        "unregister-namedtuple": lambda: mod.unregister_pytree_node(pair, namespace=NS),
        "unregister-structseq": lambda: mod.unregister_pytree_node(time.struct_time, namespace=NS),
        "unregister-builtin": lambda: mod.unregister_pytree_node(list, namespace=NS),
        "register-builtin": lambda: mod.register_pytree_node(type(None), *flat, namespace=NS),
        "register-builtin-dict": lambda: mod.register_pytree_node(OrderedDict, *flat, namespace=NS),
        "register-non-class": lambda: mod.register_pytree_node(1, *flat, namespace=NS),
        "unregister-non-class": lambda: mod.unregister_pytree_node(1, namespace=NS),
        "register-namespace-int": lambda: mod.register_pytree_node(Never, *flat, namespace=1),
        "unregister-namespace-int": lambda: mod.unregister_pytree_node(Never, namespace=1),
        "class-decorator-non-class": lambda: mod.register_pytree_node_class(1, namespace=NS),
        "class-decorator-namespace-int": lambda: mod.register_pytree_node_class(
            NoMethods, namespace=1
        ),
        "class-decorator-no-methods": lambda: mod.register_pytree_node_class(
            NoMethods, namespace=NS
        ),
        "class-decorator-two-namespaces": lambda: mod.register_pytree_node_class(NS, namespace=NS),
    }


@pytest.mark.parametrize("case", list(_registry_calls(oxtree)))
def test_registry_error_like_optree(case: str) -> None:
    outcomes = {name: _outcome(_registry_calls(mod)[case]) for name, mod in LIBS.items()}
    (ours_type, ours), (theirs_type, theirs) = outcomes["oxtree"], outcomes["optree"]
    assert theirs_type != "ok"
    assert ours_type == theirs_type
    assert ours.startswith(theirs), (ours, theirs)


def test_registry_errors_leave_the_registry_as_it_was() -> None:
    class Once:
        pass

    flat = (lambda o: ((o.x,), None), lambda m, c: Once())
    oxtree.register_pytree_node(Once, *flat, namespace=NS)
    try:
        with pytest.raises(ValueError, match=re.escape("is already registered in namespace")):
            oxtree.register_pytree_node(Once, lambda o: ((), None), flat[1], namespace=NS)
        obj = Once()
        obj.x = 7
        assert oxtree.tree_leaves(obj, namespace=NS) == [7]
    finally:
        oxtree.unregister_pytree_node(Once, namespace=NS)
    with pytest.raises(ValueError, match=re.escape("is not registered in namespace")):
        oxtree.unregister_pytree_node(Once, namespace=NS)


def test_flatten_error_names_the_result() -> None:
    outcome = _outcome(_flatten_returning(oxtree, ((1,), None, None, None), "Detail"))
    assert outcome[0] == "RuntimeError"
    assert outcome[1].endswith("It returned: ((1,), None, None, None)")
    kind, text = _outcome(_flatten_returning(oxtree, 5, "NotIterable"))
    assert kind == "TypeError"
    assert "flatten function registered for NotIterable" in text


def test_namedtuple_fields_changed_after_the_treespec_like_optree() -> None:
    texts = {}
    for name, mod in LIBS.items():
        pt = namedtuple("pt", ("x", "y"))
        spec = mod.tree_structure(pt(1, 2))
        assert repr(spec) == "PyTreeSpec(pt(x=*, y=*))"
        pt._fields = ("x", "y", "z")
        with pytest.raises(ValueError, match="does not match the arity") as info:
            repr(spec)
        texts[name] = str(info.value)
    assert texts["oxtree"] == texts["optree"]


@pytest.mark.parametrize("kind", ["namedtuple", "structseq"])
def test_overriding_a_namedtuple_in_a_namespace_warns_like_optree(kind: str) -> None:
    messages = {}
    for name, mod in LIBS.items():
        cls = namedtuple("over", "a b") if kind == "namedtuple" else time.struct_time
        flat = (lambda t: (tuple(t), None), lambda m, c: None)
        with pytest.warns(UserWarning, match="which is already registered") as caught:
            mod.register_pytree_node(cls, *flat, namespace=NS)
        try:
            messages[name] = [str(w.message) for w in caught]
        finally:
            mod.unregister_pytree_node(cls, namespace=NS)
    assert messages["oxtree"] == messages["optree"]
    assert (
        "Override it with custom flatten/unflatten functions in namespace" in messages["oxtree"][0]
    )


def test_override_warning_as_error_leaves_no_registration() -> None:
    over = namedtuple("over", "a b")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(
            UserWarning, match=re.escape("is a subclass of `collections.namedtuple`")
        ):
            oxtree.register_pytree_node(over, lambda t: ((), None), lambda m, c: None, namespace=NS)
    assert over not in oxtree.registered_types(namespace=NS)
    assert oxtree.tree_leaves(over(1, 2), namespace=NS) == [1, 2]


def test_registering_a_namedtuple_globally_does_not_warn() -> None:
    # The JAX face registers in the global namespace, where JAX does not warn.
    over = namedtuple("over", "a b")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        otu.register_pytree_node(over, lambda t: ((t.a,), t.b), lambda b, c: over(c[0], b))
    try:
        assert otu.tree_leaves(over(1, 2)) == [1]
    finally:
        oxtree.unregister_pytree_node(over)
