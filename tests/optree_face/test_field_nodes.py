"""Classes registered from their declared fields: `oxtree.dataclasses` and
`oxtree.integrations.attrs`, compared with optree's modules of the same names, and every error
path by hand; the accessor entries of their fields (`DataclassEntry`, `AttrsEntry`).
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import sys
import warnings
from typing import Any

import optree
import oxtree
import pytest
from oxtree import dataclasses as odc

attrs = pytest.importorskip("attrs")
oattrs = pytest.importorskip("oxtree.integrations.attrs")

_COUNTER = iter(range(1_000_000))


def _ns(what: str) -> str:
    """A namespace no other test uses."""
    return f"test-field-nodes-{what}-{next(_COUNTER)}"


def _cleanup(cls: type, namespace: str) -> None:
    oxtree.unregister_pytree_node(cls, namespace=namespace)


# --------------------------------------------------------------------------------------------------
# oxtree.dataclasses against optree.dataclasses.


def _declare(lib: Any, namespace: str) -> type:
    @lib.dataclasses.dataclass(namespace=namespace)
    class Layer:
        w: Any
        name: str = lib.dataclasses.field(default="dense", pytree_node=False)
        scale: float = lib.dataclasses.field(default=1.0, init=False, pytree_node=False)
        b: Any = 0

        def __post_init__(self) -> None:
            self.scale = 2.0

    return Layer


def test_dataclass_flattens_and_rebuilds_as_optree_does() -> None:
    ns = _ns("dc")
    ox_cls, op_cls = _declare(oxtree, ns), _declare(optree, ns)
    ox_leaves, ox_spec = oxtree.tree_flatten([ox_cls([1, 2], "x", b=3)], namespace=ns)
    op_leaves, op_spec = optree.tree_flatten([op_cls([1, 2], "x", b=3)], namespace=ns)
    assert ox_leaves == op_leaves == [1, 2, 3]
    assert repr(ox_spec) == repr(op_spec)
    rebuilt = ox_spec.unflatten([4, 5, 6])
    assert rebuilt == [ox_cls([4, 5], "x", b=6)]
    # The class records its children and metadata fields as optree's do.
    children, metadata = ox_cls.__optree_dataclass_fields__
    assert (list(children), list(metadata)) == (["w", "b"], ["name"])
    assert all(isinstance(f, dataclasses.Field) for f in children.values())
    ox_acc = [a.codify("t") for a in oxtree.tree_accessors(ox_cls(1, b=2), namespace=ns)]
    op_acc = [a.codify("t") for a in optree.tree_accessors(op_cls(1, b=2), namespace=ns)]
    assert ox_acc == op_acc == ["t.w", "t.b"]
    assert oxtree.tree_leaves(ox_cls(1)) == [ox_cls(1)]  # a node only in its namespace
    _cleanup(ox_cls, ns)


def test_dataclass_signatures_follow_dataclasses() -> None:
    for ours, theirs in (
        (odc.field, dataclasses.field),
        (odc.dataclass, dataclasses.dataclass),
    ):
        mine = list(inspect.signature(ours).parameters.values())
        original = list(inspect.signature(theirs).parameters.values())
        assert [(p.name, p.kind, p.default) for p in mine[: len(original)]] == [
            (p.name, p.kind, p.default) for p in original
        ]
    assert list(inspect.signature(odc.field).parameters)[-1] == "pytree_node"
    assert list(inspect.signature(odc.dataclass).parameters)[-1] == "namespace"
    assert list(inspect.signature(odc.make_dataclass).parameters)[-1] == "namespace"
    assert odc.__all__ == ["DataclassEntry", "register_node", *dataclasses.__all__]
    assert odc.DataclassEntry is oxtree.DataclassEntry


@pytest.mark.parametrize("lib", [oxtree, optree], ids=["oxtree", "optree"])
def test_dataclass_namespace_is_required(lib: Any) -> None:
    with pytest.raises(
        TypeError, match=re.escape("missing 1 required keyword-only argument: 'namespace'")
    ):
        lib.dataclasses.dataclass()
    with pytest.raises(
        TypeError, match=re.escape("missing 1 required keyword-only argument: 'namespace'")
    ):
        lib.dataclasses.make_dataclass("P", ["x"])
    with pytest.raises(TypeError, match="The namespace must be a string"):
        lib.dataclasses.make_dataclass("P", ["x"], namespace=1)

    @dataclasses.dataclass
    class Plain:
        x: int

    with pytest.raises(ValueError, match=r"Must specify `namespace`"):
        lib.dataclasses.register_node(Plain)
    with pytest.raises(ValueError, match=r"Cannot specify `namespace` when the first"):
        lib.dataclasses.register_node("a", namespace="b")
    with pytest.raises(ValueError, match=r"The namespace cannot be an empty string\."):
        lib.dataclasses.register_node("")
    with pytest.raises(TypeError, match="The namespace must be a string"):
        lib.dataclasses.register_node(Plain, namespace=1)


def _message(call: Any) -> str:
    with pytest.raises(Exception) as info:  # noqa: PT011 (the type is compared by the caller)
        call()
    # Only the addresses in the reprs differ between the two libraries' objects.
    return re.sub(r"0x[0-9a-f]+", "0x", f"{type(info.value).__name__}: {info.value}")


def _assert_same_refusals(ours: list[Any], theirs: list[Any]) -> None:
    for mine, other in zip(ours, theirs, strict=True):
        assert _message(mine) == _message(other)


def _bad_classes(lib: Any) -> list[Any]:
    """Calls that each of the two libraries must refuse with the same words."""

    @dataclasses.dataclass
    class ChildNotInit:
        x: int = dataclasses.field(init=False, default=0)

    @dataclasses.dataclass
    class WithInitVar:
        x: int
        k: dataclasses.InitVar[int] = 0

    class NotADataclass:
        pass

    return [
        lambda: lib.dataclasses.field(init=False),
        lambda: lib.dataclasses.field(init=False, metadata={"pytree_node": True}),
        lambda: lib.dataclasses.field(doc="text"),
        lambda: lib.dataclasses.register_node(ChildNotInit, namespace="err"),
        lambda: lib.dataclasses.register_node(WithInitVar, namespace="err"),
        lambda: lib.dataclasses.register_node(NotADataclass, namespace="err"),
        lambda: lib.dataclasses.register_node(42, namespace="err"),
        lambda: lib.dataclasses.dataclass(lambda x: x, namespace="err"),
    ]


@pytest.mark.skipif(sys.version_info >= (3, 14), reason="field(doc=...) is valid on 3.14+")
def test_dataclass_refusals_match_optree() -> None:
    _assert_same_refusals(_bad_classes(oxtree), _bad_classes(optree))


def test_dataclass_registration_is_made_once() -> None:
    ns = _ns("once")

    @odc.dataclass(namespace=ns)
    class Once:
        x: int

    with pytest.raises(TypeError, match=r"cannot be applied to Once more than once"):
        odc.dataclass(Once, namespace=ns)
    with pytest.raises(TypeError, match=r"Cannot register Once as a pytree node more than once"):
        odc.register_node(Once, namespace=_ns("other"))
    # The generic registration still takes it, in another namespace.
    other = _ns("generic")
    oxtree.register_pytree_node(
        Once, lambda o: ((o.x,), None), lambda _, c: Once(*c), namespace=other
    )
    assert oxtree.tree_leaves(Once(5), namespace=other) == [5]
    _cleanup(Once, other)
    _cleanup(Once, ns)


def test_dataclass_failed_registration_leaves_the_class_untouched() -> None:
    ns = _ns("rollback")

    @dataclasses.dataclass
    class Taken:
        x: int

    oxtree.register_pytree_node(
        Taken, lambda t: ((t.x,), None), lambda _, c: Taken(*c), namespace=ns
    )
    with pytest.raises(ValueError, match="already registered"):
        odc.register_node(Taken, namespace=ns)
    assert "__optree_dataclass_fields__" not in Taken.__dict__
    _cleanup(Taken, ns)

    class RefuseOnce(type):
        refused = False

        def __setattr__(cls, name: str, value: Any) -> None:
            if name == "__optree_dataclass_fields__" and not RefuseOnce.refused:
                RefuseOnce.refused = True
                raise RuntimeError("no marker")
            super().__setattr__(name, value)

    @dataclasses.dataclass
    class Refusing(metaclass=RefuseOnce):
        x: int

    with pytest.raises(RuntimeError, match="no marker"):
        odc.register_node(Refusing, namespace=ns)
    assert Refusing not in oxtree.registered_types(namespace=ns)
    odc.register_node(Refusing, namespace=ns)  # the retry succeeds
    assert oxtree.tree_leaves(Refusing(1), namespace=ns) == [1]
    _cleanup(Refusing, ns)


def test_dataclass_init_false_class_warns() -> None:
    @dataclasses.dataclass(init=False)
    class NoInit:
        x: int

    ns = _ns("noinit")
    with pytest.warns(UserWarning, match=r"Dataclass 'NoInit' was defined with `init=False`\."):
        odc.register_node(NoInit, namespace=ns)
    _cleanup(NoInit, ns)


def test_dataclass_init_on_unflatten_false_keeps_non_init_fields() -> None:
    ns = _ns("noinit-unflatten")

    @odc.dataclass(init_on_unflatten=False, namespace=ns)
    class Derived:
        x: int
        double: int = odc.field(init=False, pytree_node=False, default=0)

        def __post_init__(self) -> None:
            self.double = 2 * self.x

    spec = oxtree.tree_structure(Derived(3), namespace=ns)
    rebuilt = spec.unflatten([10])
    assert (rebuilt.x, rebuilt.double) == (10, 6)  # __post_init__ is not run again
    _cleanup(Derived, ns)


def test_make_dataclass_takes_the_class_namespace_as_ns() -> None:
    ns = _ns("make")
    P = odc.make_dataclass("P", ["x"], ns={"double": lambda self: 2 * self.x}, namespace=ns)
    assert P(3).double() == 6
    assert oxtree.tree_leaves(P(3), namespace=ns) == [3]
    # dataclasses' own spelling: the class namespace as `namespace`, the registry's as `ns`.
    Q = odc.make_dataclass("Q", ["x"], namespace={"one": lambda self: 1}, ns=ns)  # type: ignore[arg-type]
    assert Q(0).one() == 1
    assert oxtree.tree_leaves(Q(4), namespace=ns) == [4]
    with pytest.raises(
        TypeError, match=re.escape("missing 1 required keyword-only argument: 'ns'")
    ):
        odc.make_dataclass("R", ["x"], namespace={})  # type: ignore[arg-type]
    _cleanup(P, ns)
    _cleanup(Q, ns)


# --------------------------------------------------------------------------------------------------
# Field entries.


def test_dataclass_entry_fields_and_integer_entries() -> None:
    ns = _ns("entry")

    @odc.register_node(namespace=ns)
    @dataclasses.dataclass
    class Foo:
        a: int
        b: int = odc.field(default=0, pytree_node=False)
        d: int = odc.field(init=False, default=0, pytree_node=False)
        c: int = 0

    for lib in (oxtree, optree):
        entry = lib.DataclassEntry(1, Foo, lib.PyTreeKind.CUSTOM)
        assert entry.fields == ("a", "b", "d", "c")
        assert entry.init_fields == ("a", "b", "c")
        assert entry.children_fields == ("a", "c")
        assert (entry.field, entry.codify("x"), entry(Foo(1, 2, 3))) == ("c", "x.c", 3)
    assert repr(oxtree.DataclassEntry(1, Foo, oxtree.PyTreeKind.CUSTOM)).startswith(
        "DataclassEntry(field='c', type=<class"
    )
    _cleanup(Foo, ns)


def test_dataclass_entry_of_a_generic_registration_counts_every_field() -> None:
    ns = _ns("entry-generic")

    @dataclasses.dataclass
    class Foo:
        a: int
        b: int = odc.field(default=0, pytree_node=False)

    oxtree.register_pytree_node(
        Foo, lambda f: ((f.a, f.b), None, None), lambda _, c: Foo(*c), namespace=ns
    )
    accessors = oxtree.tree_accessors(Foo(1, 2), namespace=ns)
    assert [type(a[0]) for a in accessors] == [oxtree.DataclassEntry] * 2
    assert [a.codify("x") for a in accessors] == ["x.a", "x.b"]
    assert [a(Foo(1, 2)) for a in accessors] == [1, 2]
    _cleanup(Foo, ns)


def test_entries_compare_by_what_they_do() -> None:
    class Same(oxtree.SequenceEntry):
        pass

    class Other(oxtree.SequenceEntry):
        def __call__(self, obj: Any) -> Any:
            return obj[-1]

    base = oxtree.SequenceEntry(0, list, oxtree.PyTreeKind.LIST)
    assert Same(0, list, oxtree.PyTreeKind.LIST) == base
    assert hash(Same(0, list, oxtree.PyTreeKind.LIST)) == hash(base)
    assert Other(0, list, oxtree.PyTreeKind.LIST) != base
    assert len({base, Other(0, list, oxtree.PyTreeKind.LIST)}) == 2


def test_getattr_entry_codify_escapes_what_is_no_identifier() -> None:
    for lib in (oxtree, optree):
        entry = lib.GetAttrEntry("a.x-y", object, lib.PyTreeKind.CUSTOM)
        assert entry.codify("n") == "getattr(n.a, 'x-y')"
        assert lib.GetAttrEntry("a.b", object, lib.PyTreeKind.CUSTOM).codify("n") == "n.a.b"

    class Node:
        pass

    node, inner = Node(), Node()
    node.a = inner  # type: ignore[attr-defined]
    setattr(inner, "x-y", 7)
    assert oxtree.GetAttrEntry("a.x-y", Node, oxtree.PyTreeKind.CUSTOM)(node) == 7


def test_entry_construction_errors_are_optrees() -> None:
    for lib in (oxtree, optree):
        with pytest.raises(ValueError, match=re.escape("Cannot create a leaf path entry.")):
            lib.PyTreeEntry(0, int, lib.PyTreeKind.LEAF)
        with pytest.raises(ValueError, match=re.escape("Cannot create a path entry for None.")):
            lib.SequenceEntry(None, type(None), lib.PyTreeKind.NONE)
        with pytest.raises(
            ValueError, match=r"Cannot create an automatic path entry for PyTreeKind"
        ):
            lib.AutoEntry(0, tuple, lib.PyTreeKind.TUPLE)
        with pytest.raises(TypeError, match=r"Expected a path of PyTreeEntry, got"):
            lib.PyTreeAccessor([lib.MappingEntry("a", dict, lib.PyTreeKind.DICT), "b"])
    assert type(oxtree.AutoEntry(0, list, oxtree.PyTreeKind.CUSTOM)) is oxtree.SequenceEntry


def test_structseq_fields_name_every_visible_field() -> None:
    import os

    ours = oxtree.structseq_fields(os.stat_result)
    assert ours == optree.structseq_fields(os.stat_result)
    assert len(ours) == os.stat_result.n_sequence_fields
    entries = [a[-1] for a in oxtree.tree_accessors(os.stat_result(range(os.stat_result.n_fields)))]
    unnamed = [e for e in entries if e.is_unnamed]
    assert unnamed
    assert all(e.field == "unnamed field" for e in unnamed)
    assert (
        repr(unnamed[0])
        == f"StructSequenceEntry(entry={unnamed[0].entry}, type={os.stat_result!r})"
    )
    with pytest.raises(NotImplementedError):
        oxtree.typing.StructSequence(range(1))


# --------------------------------------------------------------------------------------------------
# oxtree.integrations.attrs against optree.integrations.attrs.


def _attrs_point(module: Any, namespace: str) -> type:
    @module.define(namespace=namespace)
    class Point:
        x: float
        _y: float
        label: str = module.field(default="p", pytree_node=False)
        norm: float = module.field(default=0.0, init=False, pytree_node=False)

        def __attrs_post_init__(self) -> None:
            self.norm = abs(self.x) + abs(self._y)

    return Point


def test_attrs_define_flattens_and_rebuilds_as_optree_does() -> None:
    import optree.integrations.attrs as op_attrs

    ns = _ns("attrs")
    ox_cls, op_cls = _attrs_point(oattrs, ns), _attrs_point(op_attrs, ns)
    ox_leaves, ox_spec = oxtree.tree_flatten(ox_cls(1.0, y=-2.0, label="q"), namespace=ns)
    op_leaves, op_spec = optree.tree_flatten(op_cls(1.0, y=-2.0, label="q"), namespace=ns)
    assert ox_leaves == op_leaves == [1.0, -2.0]
    assert repr(ox_spec).replace("_y", "y") == repr(op_spec)  # optree keeps the alias
    rebuilt = ox_spec.unflatten([3.0, 4.0])
    assert (rebuilt.x, rebuilt._y, rebuilt.label, rebuilt.norm) == (3.0, 4.0, "q", 7.0)
    ox_acc = oxtree.tree_accessors(ox_cls(1.0, 2.0), namespace=ns)
    op_acc = optree.tree_accessors(op_cls(1.0, 2.0), namespace=ns)
    assert [a.codify("p") for a in ox_acc] == [a.codify("p") for a in op_acc] == ["p.x", "p._y"]
    assert [type(a[0]).__name__ for a in ox_acc] == ["AttrsEntry", "AttrsEntry"]
    children, metadata = ox_cls.__optree_attrs_fields__
    assert (list(children), list(metadata)) == (["x", "_y"], ["label"])
    assert oxtree.tree_leaves(ox_cls(1.0, 2.0)) == [ox_cls(1.0, 2.0)]
    _cleanup(ox_cls, ns)


def test_attrs_frozen_make_class_and_register_node() -> None:
    ns = _ns("attrs-more")

    @oattrs.frozen(namespace=ns)
    class Frozen:
        a: int

    assert oxtree.tree_map(lambda v: v + 1, Frozen(1), namespace=ns) == Frozen(2)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        Frozen(1).a = 2  # type: ignore[misc]
    Made = oattrs.make_class(
        "Made", {"a": attrs.field(), "b": oattrs.field(pytree_node=False)}, namespace=ns
    )
    assert oxtree.tree_leaves(Made(1, 2), namespace=ns) == [1]

    @oattrs.register_node(ns)
    @attrs.define
    class Existing:
        a: int

    assert oxtree.tree_leaves(Existing(5), namespace=ns) == [5]
    assert oattrs.mutable is oattrs.define
    entry = oattrs.AttrsEntry(0, Existing, oxtree.PyTreeKind.CUSTOM)
    assert (entry.field, entry.fields, entry.init_fields, entry.children_fields) == (
        "a",
        ("a",),
        ("a",),
        ("a",),
    )
    for cls in (Frozen, Made, Existing):
        _cleanup(cls, ns)


def _attrs_refusals(module: Any) -> list[Any]:
    @attrs.define
    class ChildNotInit:
        x: int = attrs.field(init=False, default=0)

    class Plain:
        pass

    return [
        lambda: module.field(init=False),
        lambda: module.register_node(ChildNotInit, namespace="err"),
        lambda: module.register_node(Plain, namespace="err"),
        lambda: module.register_node(42, namespace="err"),
        lambda: module.register_node(Plain),
        lambda: module.register_node("a", namespace="b"),
        lambda: module.register_node(""),
        lambda: module.define(lambda: None, namespace="err"),
        lambda: module.make_class("M", ["a"], namespace=1),
    ]


def test_attrs_refusals_match_optree() -> None:
    import optree.integrations.attrs as op_attrs

    _assert_same_refusals(_attrs_refusals(oattrs), _attrs_refusals(op_attrs))


def test_attrs_registration_is_made_once_and_rolls_back() -> None:
    ns = _ns("attrs-once")

    @oattrs.define(namespace=ns)
    class Once:
        x: int

    with pytest.raises(TypeError, match=r"Cannot register Once as a pytree node more than once"):
        oattrs.register_node(Once, namespace=_ns("other"))
    _cleanup(Once, ns)

    @attrs.define
    class Taken:
        x: int

    oxtree.register_pytree_node(
        Taken, lambda t: ((t.x,), None), lambda _, c: Taken(*c), namespace=ns
    )
    with pytest.raises(ValueError, match="already registered"):
        oattrs.register_node(Taken, namespace=ns)
    assert "__optree_attrs_fields__" not in Taken.__dict__
    _cleanup(Taken, ns)


def test_attrs_class_without_generated_init_warns() -> None:
    @attrs.define(init=False)
    class NoInit:
        x: int

    ns = _ns("attrs-noinit")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        oattrs.register_node(NoInit, namespace=ns)
    if getattr(NoInit, "__attrs_props__", None) is not None:  # attrs 25.4+ says so
        assert any("does not use an attrs-generated `__init__`" in str(w.message) for w in caught)
    _cleanup(NoInit, ns)


# --------------------------------------------------------------------------------------------------
# oxtree.pytree.reexport and the re-export lists.


def test_pytree_short_names_are_oxtrees_functions() -> None:
    from oxtree import pytree

    short = [n[len("tree_") :] for n in oxtree.__all__ if n.startswith("tree_")]
    assert pytree.__all__[:4] == ["reexport", "PyTreeSpec", "PyTreeKind", "PyTreeEntry"]
    assert pytree.__all__[4:-4] == short
    for name in short:
        assert getattr(pytree, name) is getattr(oxtree, f"tree_{name}")
    assert pytree.__version__ == oxtree.__version__
    for name in oxtree.treespec.__all__:
        assert getattr(oxtree.treespec, name) is getattr(oxtree, f"treespec_{name}")
    assert set(optree.treespec.__all__) == set(oxtree.treespec.__all__)


def test_pytree_reexport_binds_the_namespace() -> None:
    from oxtree import pytree

    ns = _ns("reexport")
    module = f"reexported_{ns.replace('-', '_')}.pytree"
    lib = pytree.reexport(namespace=ns, module=module)
    assert type(lib) is pytree.ReexportedModule
    assert sys.modules[module] is lib
    assert sys.modules[f"{module}.dataclasses"] is lib.dataclasses
    assert "dataclasses" in dir(lib)
    assert "dataclasses" not in lib.__all__
    assert "reexport" not in dir(lib)

    @lib.dataclasses.dataclass
    class Pair:
        a: int
        b: int

    assert lib.leaves(Pair(1, 2)) == [1, 2]
    assert lib.leaves(Pair(1, 2), namespace="") == [Pair(1, 2)]
    assert oxtree.tree_leaves(Pair(1, 2)) == [Pair(1, 2)]
    assert inspect.signature(lib.leaves).parameters["namespace"].default == ns
    assert lib.register_node.get(Pair) is not None
    assert lib.functools.reduce(lambda x, y: x + y, Pair(1, 2)) == 3
    with pytest.raises(ValueError, match=re.escape(f"module {module!r} already exists")):
        pytree.reexport(namespace="x", module=module)
    with pytest.raises(ValueError, match="invalid module name"):
        pytree.reexport(namespace="x", module="a.1b")
    with pytest.raises(TypeError, match="The namespace must be a string"):
        pytree.reexport(namespace=1)  # type: ignore[arg-type]
    with pytest.raises(AttributeError, match="has no attribute"):
        _ = lib.not_there
    _cleanup(Pair, ns)
    for name in (module, f"{module}.dataclasses", f"{module}.functools"):
        del sys.modules[name]


def test_attrs_aliases_rebuild_on_every_construction_path() -> None:
    import abc

    ns = _ns("attrs-alias")

    @oattrs.define(namespace=ns)
    class Plain:
        _x: int
        _tag: str = oattrs.field(default="t", pytree_node=False)

    # A metaclass other than `type`: rebuilt through a keyword dict, not the direct call.
    @oattrs.define(namespace=ns)
    class WithMeta(abc.ABC):
        _x: int
        _tag: str = oattrs.field(default="t", pytree_node=False)

    for cls in (Plain, WithMeta):
        spec = oxtree.tree_structure(cls(x=1, tag="u"), namespace=ns)
        rebuilt = spec.unflatten([5])
        assert (type(rebuilt), rebuilt._x, rebuilt._tag) == (cls, 5, "u")
        _cleanup(cls, ns)


def test_core_registration_checks_its_init_names() -> None:
    from oxtree import _core

    @dataclasses.dataclass
    class Two:
        a: int
        b: int

    with pytest.raises(ValueError, match=r"init_names must name every data and meta field"):
        _core._register_dataclass_fields(Two, ["a"], ["b"], init_names=["a"], namespace="x")
    assert Two not in oxtree.registered_types(namespace="x")
