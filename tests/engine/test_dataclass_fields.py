"""Dataclass fields read by every walk.

A registered dataclass's fields are read straight from the instance where generic attribute
lookup would find them there (its inline values, or a ``__slots__`` member), planned once per
version of the class, and with ``getattr`` otherwise (see ``ffi/instance_fields.rs``). These
tests check that every walk (flatten, leaves, structure, the path walks, ``flatten_up_to``)
gives what ``getattr`` gives, errors included, whatever the class does and however it changes.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

import jax.tree_util as jtu
import oxtree
import oxtree.tree_util as otu
import pytest

_NAMES = (f"dc-fields-{i}" for i in itertools.count())


def _register(cls: type, data: tuple[str, ...], meta: tuple[str, ...] = ()) -> str:
    """Registers `cls` in a namespace of its own (returned) and in the global one (the JAX
    face's registration reaches JAX too, whose walks then serve as the oracle)."""
    ns = next(_NAMES)
    oxtree.register_dataclass(cls, data_fields=list(data), meta_fields=list(meta), namespace=ns)
    otu.register_dataclass(cls, data_fields=list(data), meta_fields=list(meta))
    return ns


def _check(obj: Any, data: tuple[str, ...], ns: str, meta: tuple[str, ...] = ()) -> None:
    """Every walk of `obj` (alone and twice in a list) finds what `getattr` finds."""
    want = [getattr(obj, name) for name in data]
    want_meta = tuple(getattr(obj, name) for name in meta)
    for tree, expected in ((obj, want), ([obj, 1, obj], [*want, 1, *want])):
        assert oxtree.tree_leaves(tree, namespace=ns) == expected
        leaves, spec = oxtree.tree_flatten(tree, namespace=ns)
        assert leaves == expected
        assert oxtree.tree_structure(tree, namespace=ns) == spec
        assert spec.flatten_up_to(tree) == expected
        _, path_leaves, path_spec = oxtree.tree_flatten_with_path(tree, namespace=ns)
        assert path_leaves == expected
        assert path_spec == spec
        jax_pairs, _ = otu.tree_flatten_with_path(tree)
        assert [leaf for _, leaf in jax_pairs] == expected
        assert otu.tree_leaves(tree) == expected
        assert jtu.tree_leaves(tree) == expected
    if meta:
        node = oxtree.tree_structure(obj, namespace=ns)
        assert node.node_data() == tuple(zip(meta, want_meta, strict=True))


@dataclasses.dataclass
class _Plain:
    x: Any
    y: Any


@dataclasses.dataclass(frozen=True)
class _Frozen:
    x: Any
    y: Any


@dataclasses.dataclass(slots=True)
class _Slotted:
    x: Any
    y: Any


@dataclasses.dataclass(slots=True, frozen=True)
class _SlottedFrozen:
    x: Any
    y: Any


@dataclasses.dataclass
class _Defaults:
    x: Any = 0
    y: Any = dataclasses.field(default_factory=list)
    z: Any = None


@pytest.mark.parametrize("cls", [_Plain, _Frozen, _Slotted, _SlottedFrozen, _Defaults])
def test_fields_as_getattr_and_jax_find_them(cls: type) -> None:
    names = tuple(f.name for f in dataclasses.fields(cls))
    ns = _register(cls, names)
    for obj in (cls(*range(len(names))), cls(*["a", 2.5, "c"][: len(names)])):
        _check(obj, names, ns)


def test_defaults_and_meta_fields() -> None:
    @dataclasses.dataclass
    class WithMeta:
        x: Any
        tag: str = "t"
        y: Any = 5

    ns = _register(WithMeta, ("x", "y"), ("tag",))
    _check(WithMeta(1), ("x", "y"), ns, ("tag",))
    _check(WithMeta(1, "u", 2.5), ("x", "y"), ns, ("tag",))
    obj = WithMeta(1, "u", 2)
    del obj.y  # now the class default
    del obj.tag
    _check(obj, ("x", "y"), ns, ("tag",))


def test_deleted_field_raises_getattrs_error_with_a_note() -> None:
    for kwargs in ({}, {"slots": True}):

        @dataclasses.dataclass(**kwargs)
        class Gone:
            x: Any
            y: Any

        ns = _register(Gone, ("x", "y"))
        obj = Gone(1, 2)
        _check(obj, ("x", "y"), ns)
        del obj.y
        with pytest.raises(AttributeError) as direct:
            obj.y
        for walk in (oxtree.tree_leaves, oxtree.tree_flatten, oxtree.tree_structure):
            with pytest.raises(AttributeError) as raised:
                walk([obj], namespace=ns)
            assert str(raised.value) == str(direct.value)
            assert raised.value.__notes__ == [
                "Gone is registered as a pytree node with the attribute 'y'"
            ]
        obj.y = 3
        _check(obj, ("x", "y"), ns)


def test_property_shadowing_a_field() -> None:
    @dataclasses.dataclass
    class Base:
        x: Any
        y: Any

    class Shadowed(Base):
        @property
        def y(self) -> Any:
            return f"from property: {self.__dict__.get('_y')}"

        @y.setter
        def y(self, value: Any) -> None:
            self.__dict__["_y"] = value

    ns = _register(Shadowed, ("x", "y"))
    obj = Shadowed(1, 2)
    obj.__dict__["y"] = "in the dict"  # the property still wins
    _check(obj, ("x", "y"), ns)
    assert oxtree.tree_leaves(obj, namespace=ns) == [1, "from property: 2"]


def test_subclass_with_more_fields() -> None:
    @dataclasses.dataclass
    class Parent:
        x: Any

    @dataclasses.dataclass
    class Child(Parent):
        y: Any = 0

    ns_parent = _register(Parent, ("x",))
    ns_child = _register(Child, ("x", "y"))
    _check(Parent(1), ("x",), ns_parent)
    _check(Child(1, 2), ("x", "y"), ns_child)
    _check(Parent(3), ("x",), ns_parent)


def test_getattr_and_getattribute_hooks() -> None:
    @dataclasses.dataclass
    class Fallback:
        x: Any
        y: Any

        def __getattr__(self, name: str) -> Any:
            return f"missing {name}"

    @dataclasses.dataclass
    class Intercepted:
        x: Any
        y: Any

        def __getattribute__(self, name: str) -> Any:
            value = object.__getattribute__(self, name)
            return f"seen {value}" if name in ("x", "y") else value

    ns = _register(Fallback, ("x", "y"))
    obj = Fallback(1, 2)
    _check(obj, ("x", "y"), ns)
    del obj.y
    _check(obj, ("x", "y"), ns)
    assert oxtree.tree_leaves(obj, namespace=ns) == [1, "missing y"]
    ns = _register(Intercepted, ("x", "y"))
    _check(Intercepted(1, 2), ("x", "y"), ns)
    assert oxtree.tree_leaves(Intercepted(1, 2), namespace=ns) == ["seen 1", "seen 2"]


def test_class_changed_after_registration() -> None:
    @dataclasses.dataclass
    class Mutable:
        x: Any
        y: Any

    ns = _register(Mutable, ("x", "y"))
    obj = Mutable(1, 2)
    _check(obj, ("x", "y"), ns)
    Mutable.y = property(lambda self: "property")  # type: ignore[assignment]
    _check(obj, ("x", "y"), ns)
    assert oxtree.tree_leaves(obj, namespace=ns) == [1, "property"]
    del Mutable.y
    _check(obj, ("x", "y"), ns)
    Mutable.__getattribute__ = lambda self, name: "hooked"  # type: ignore[method-assign]
    assert oxtree.tree_leaves(obj, namespace=ns) == ["hooked", "hooked"]
    del Mutable.__getattribute__
    _check(obj, ("x", "y"), ns)
    for i in range(1100):  # past the versions CPython 3.12+ gives one class
        Mutable.counter = i  # type: ignore[attr-defined]
        if i % 250 == 0:
            _check(obj, ("x", "y"), ns)
    _check(obj, ("x", "y"), ns)
    Mutable.y = property(lambda self: "late property")  # type: ignore[assignment]
    assert oxtree.tree_leaves(obj, namespace=ns) == [1, "late property"]


def test_default_whose_class_becomes_a_data_descriptor() -> None:
    class Marker:
        pass

    @dataclasses.dataclass
    class Holder:
        x: Any
        y: Any = dataclasses.field(default=Marker())

    ns = _register(Holder, ("x", "y"))
    obj = Holder(1, 2)
    _check(obj, ("x", "y"), ns)
    Marker.__get__ = lambda self, inst, owner=None: "descriptor"  # type: ignore[attr-defined]
    Marker.__set__ = lambda self, inst, value: None  # type: ignore[attr-defined]
    _check(obj, ("x", "y"), ns)
    assert oxtree.tree_leaves(obj, namespace=ns) == [1, "descriptor"]


def test_method_named_like_a_field_loses_to_the_instance_value() -> None:
    @dataclasses.dataclass
    class Methods:
        x: Any
        y: Any

    Methods.y = lambda self: "method"  # type: ignore[assignment,method-assign]
    ns = _register(Methods, ("x", "y"))
    _check(Methods(1, 2), ("x", "y"), ns)
    assert oxtree.tree_leaves(Methods(1, 2), namespace=ns) == [1, 2]


def test_instances_with_a_dict_or_another_class() -> None:
    @dataclasses.dataclass
    class Plain:
        x: Any
        y: Any

    @dataclasses.dataclass
    class Other:
        x: Any
        y: Any

    ns = _register(Plain, ("x", "y"))
    _register(Other, ("x", "y"))
    with_dict = Plain(1, 2)
    vars(with_dict)["y"] = "via the dict"
    _check(with_dict, ("x", "y"), ns)
    assert oxtree.tree_leaves(with_dict, namespace=ns) == [1, "via the dict"]
    crowded = Plain(3, 4)
    for i in range(40):  # more attributes than a class's shared keys hold
        setattr(crowded, f"extra{i}", i)
    _check(crowded, ("x", "y"), ns)
    late = Plain(5, 6)
    late.__class__ = Other
    _check(late, ("x", "y"), ns)
    reordered = object.__new__(Plain)
    reordered.y = "y first"
    reordered.x = "x second"
    _check(reordered, ("x", "y"), ns)
    _check(Plain(7, 8), ("x", "y"), ns)


def test_plain_class_registered_by_attribute_names() -> None:
    class NotADataclass:
        __slots__ = ("__dict__", "a")

        def __init__(self, a: Any, b: Any) -> None:
            self.a = a
            self.b = b

    ns = _register(NotADataclass, ("a", "b"))
    _check(NotADataclass(1, 2.5), ("a", "b"), ns)
