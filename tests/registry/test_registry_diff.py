"""The registry checked against optree and jax.tree_util.

Each test builds a fresh "kit" per library: a custom node class (`Box`), a dataclass (`DC`) and
a static type (`Unit`), each registered the library's own way. optree needs a namespace; JAX's
registry is global and permanent, so the JAX kit's classes are never shared with the others.
Trees are described by blueprints (plain nested tuples) and realized with each kit, so results can
be compared across libraries even though the classes differ.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable, Iterator
from typing import Any

import jax.tree_util as jtu
import numpy as np
import optree
import optree.functools
import optree.registry
import oxtree
import pytest
from helpers import HYPOTHESIS_SETTINGS
from hypothesis import given
from hypothesis import strategies as st
from oxtree import dataclasses as odc

NS = "registry-diff"
OPTREE_GLOBAL = getattr(optree.registry, "__GLOBAL_NAMESPACE")


# --------------------------------------------------------------------------------------------------
# Kits: the same three node kinds, registered with each library.


def _box_class(name: str) -> type:
    class Box:
        __hash__ = None  # type: ignore[assignment]

        def __init__(self, *children: Any, meta: Any = "m") -> None:
            self.children = children
            self.meta = meta

        def __eq__(self, other: object) -> bool:
            return type(other) is type(self) and (other.children, other.meta) == (
                self.children,
                self.meta,
            )

        def __repr__(self) -> str:
            return f"{type(self).__name__}{self.children!r}[{self.meta!r}]"

        @staticmethod
        def flatten(box: Any) -> tuple[Any, Any]:
            return box.children, box.meta

        @classmethod
        def unflatten(cls, meta: Any, children: Any) -> Any:
            return cls(*children, meta=meta)

    Box.__name__ = Box.__qualname__ = name
    return Box


def _unit_class(name: str) -> type:
    class Unit:
        def __init__(self, symbol: str) -> None:
            self.symbol = symbol

        def __eq__(self, other: object) -> bool:
            return type(other) is type(self) and other.symbol == self.symbol

        def __hash__(self) -> int:
            return hash(self.symbol)

        def __repr__(self) -> str:
            return f"Unit({self.symbol!r})"

    Unit.__name__ = Unit.__qualname__ = name
    return Unit


def _dc_class(decorator: Callable[[type], type], field: Callable[..., Any]) -> type:
    class DC:
        x: Any
        y: Any
        tag: str = field(default="t")

    return decorator(DC)


class Kit:
    """One library's functions and node classes."""

    def __init__(self, name: str, namespace: str | None) -> None:
        self.name = name
        self.namespace = namespace
        self.Box = _box_class("Box")
        self.Unit = _unit_class("Unit")
        self.DC: type = type(None)
        self.cleanups: list[Callable[[], None]] = []

    def _kw(self) -> dict[str, Any]:
        return {} if self.namespace is None else {"namespace": self.namespace}

    @property
    def lib(self) -> Any:
        return jtu if self.name == "jax" else (optree if self.name == "optree" else oxtree)

    def leaves(self, tree: Any, **kw: Any) -> list[Any]:
        return self.lib.tree_leaves(tree, **kw, **self._kw())

    def structure(self, tree: Any, **kw: Any) -> Any:
        return self.lib.tree_structure(tree, **kw, **self._kw())

    def flatten(self, tree: Any, **kw: Any) -> tuple[list[Any], Any]:
        return self.lib.tree_flatten(tree, **kw, **self._kw())

    def map(self, f: Callable[..., Any], tree: Any, *rest: Any, **kw: Any) -> Any:
        return self.lib.tree_map(f, tree, *rest, **kw, **self._kw())

    def unflatten(self, spec: Any, leaves: list[Any]) -> Any:
        return self.lib.tree_unflatten(spec, leaves)

    def cleanup(self) -> None:
        for undo in reversed(self.cleanups):
            with contextlib.suppress(ValueError):
                undo()


def oxtree_kit(namespace: str = "") -> Kit:
    kit = Kit("oxtree", namespace)
    oxtree.register_pytree_node(kit.Box, kit.Box.flatten, kit.Box.unflatten, namespace=namespace)
    oxtree.register_static(kit.Unit, namespace=namespace)
    kit.DC = _dc_class(
        odc.dataclass(namespace=namespace),
        functools.partial(odc.field, pytree_node=False),
    )
    for cls in (kit.Box, kit.Unit, kit.DC):
        kit.cleanups.append(
            functools.partial(oxtree.unregister_pytree_node, cls, namespace=namespace)
        )
    return kit


def optree_kit(namespace: str = NS) -> Kit:
    kit = Kit("optree", namespace)
    optree.register_pytree_node(kit.Box, kit.Box.flatten, kit.Box.unflatten, namespace=namespace)
    optree.register_pytree_node(kit.Unit, lambda u: ((), u), lambda u, _: u, namespace=namespace)
    kit.DC = _dc_class(
        optree.dataclasses.dataclass(namespace=namespace),
        functools.partial(optree.dataclasses.field, pytree_node=False),
    )
    for cls in (kit.Box, kit.Unit, kit.DC):
        kit.cleanups.append(
            functools.partial(optree.unregister_pytree_node, cls, namespace=namespace)
        )
    return kit


def jax_kit() -> Kit:
    kit = Kit("jax", None)
    jtu.register_pytree_node(kit.Box, kit.Box.flatten, kit.Box.unflatten)
    jtu.register_static(kit.Unit)
    kit.DC = jtu.register_dataclass(
        _dc_class(dataclasses.dataclass, dataclasses.field),
        data_fields=["x", "y"],
        meta_fields=["tag"],
    )
    return kit


@contextlib.contextmanager
def all_kits() -> Iterator[list[Kit]]:
    kits = [oxtree_kit(""), oxtree_kit(NS), optree_kit(), jax_kit()]
    try:
        yield kits
    finally:
        for kit in kits:
            kit.cleanup()


@pytest.fixture
def kits() -> Iterator[list[Kit]]:
    with all_kits() as made:
        yield made


# --------------------------------------------------------------------------------------------------
# Blueprints: ("list", [...]), ("tuple", [...]), ("dict", [(key, child), ...]), ("box", meta,
# [...]), ("dc", x, y, tag), ("unit", symbol), None, or an int leaf.


def realize(bp: Any, kit: Kit) -> Any:
    if bp is None or isinstance(bp, int):
        return bp
    kind = bp[0]
    if kind == "list":
        return [realize(c, kit) for c in bp[1]]
    if kind == "tuple":
        return tuple(realize(c, kit) for c in bp[1])
    if kind == "dict":
        return {k: realize(c, kit) for k, c in bp[1]}
    if kind == "box":
        return kit.Box(*(realize(c, kit) for c in bp[2]), meta=bp[1])
    if kind == "dc":
        return kit.DC(realize(bp[1], kit), realize(bp[2], kit), tag=bp[3])
    assert kind == "unit"
    return kit.Unit(bp[1])


def to_blueprint(obj: Any, kit: Kit) -> Any:
    """The inverse of `realize` (dicts compared in key order: JAX sorts them when rebuilding)."""
    if obj is None or type(obj) is int:
        return obj
    if type(obj) is list:
        return ("list", [to_blueprint(c, kit) for c in obj])
    if type(obj) is tuple:
        return ("tuple", [to_blueprint(c, kit) for c in obj])
    if type(obj) is dict:
        return ("dict", sorted((k, to_blueprint(c, kit)) for k, c in obj.items()))
    if type(obj) is kit.Box:
        return ("box", obj.meta, [to_blueprint(c, kit) for c in obj.children])
    if type(obj) is kit.DC:
        return ("dc", to_blueprint(obj.x, kit), to_blueprint(obj.y, kit), obj.tag)
    if type(obj) is kit.Unit:
        return ("unit", obj.symbol)
    raise AssertionError(f"unexpected object in {kit.name}'s result: {obj!r}")


def sort_dicts(bp: Any) -> Any:
    """A blueprint with its dict items sorted, to compare with `to_blueprint`."""
    if bp is None or isinstance(bp, int):
        return bp
    kind = bp[0]
    if kind in ("list", "tuple"):
        return (kind, [sort_dicts(c) for c in bp[1]])
    if kind == "dict":
        return ("dict", sorted((k, sort_dicts(c)) for k, c in bp[1]))
    if kind == "box":
        return ("box", bp[1], [sort_dicts(c) for c in bp[2]])
    if kind == "dc":
        return ("dc", sort_dicts(bp[1]), sort_dicts(bp[2]), bp[3])
    return bp


def map_leaves(bp: Any, f: Callable[[int], int]) -> Any:
    if bp is None:
        return None
    if isinstance(bp, int):
        return f(bp)
    kind = bp[0]
    if kind in ("list", "tuple"):
        return (kind, [map_leaves(c, f) for c in bp[1]])
    if kind == "dict":
        return ("dict", [(k, map_leaves(c, f)) for k, c in bp[1]])
    if kind == "box":
        return ("box", bp[1], [map_leaves(c, f) for c in bp[2]])
    if kind == "dc":
        return ("dc", map_leaves(bp[1], f), map_leaves(bp[2], f), bp[3])
    return bp


def mutate_meta(bp: Any) -> Any:
    """The blueprint with the first aux datum (box meta, dataclass tag, unit) changed."""
    done = [False]

    def go(b: Any) -> Any:
        if done[0] or b is None or isinstance(b, int):
            return b
        kind = b[0]
        if kind == "box":
            done[0] = True
            return ("box", ("other", b[1]), b[2])
        if kind == "dc":
            done[0] = True
            return ("dc", b[1], b[2], b[3] + "!")
        if kind == "unit":
            done[0] = True
            return ("unit", b[1] + "!")
        if kind in ("list", "tuple"):
            return (kind, [go(c) for c in b[1]])
        if kind == "dict":
            return ("dict", [(k, go(c)) for k, c in b[1]])
        raise AssertionError(kind)

    return go(bp)


_METAS = st.sampled_from(["m", "n", None, ("k", 1), 3])


def blueprints(max_leaves: int = 16) -> st.SearchStrategy[Any]:
    leaves = st.one_of(st.integers(-5, 5), st.none())

    def extend(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        lists = st.lists(children, max_size=3)
        return st.one_of(
            lists.map(lambda cs: ("list", cs)),
            lists.map(lambda cs: ("tuple", cs)),
            st.dictionaries(st.sampled_from("abcd"), children, max_size=3).map(
                lambda d: ("dict", list(d.items()))
            ),
            st.tuples(_METAS, lists).map(lambda t: ("box", t[0], t[1])),
            st.tuples(children, children, st.sampled_from(["t", "u"])).map(
                lambda t: ("dc", t[0], t[1], t[2])
            ),
            st.sampled_from(["m", "s"]).map(lambda s: ("unit", s)),
        )

    return st.recursive(leaves, extend, max_leaves=max_leaves)


# --------------------------------------------------------------------------------------------------
# Random trees: leaves, maps, round trips and structure equality agree across the libraries.


def test_random_trees_agree() -> None:
    with all_kits() as kits:

        @HYPOTHESIS_SETTINGS
        @given(bp=blueprints(), none_is_leaf=st.booleans())
        def check(bp: Any, none_is_leaf: bool) -> None:
            results = {}
            for kit in kits:
                kw = {} if kit.name == "jax" else {"none_is_leaf": none_is_leaf}
                if kit.name == "jax" and none_is_leaf:
                    continue  # JAX has no none_is_leaf
                tree = realize(bp, kit)
                leaves, spec = kit.flatten(tree, **kw)
                assert to_blueprint(kit.unflatten(spec, leaves), kit) == sort_dicts(bp)
                mapped = kit.map(lambda v: v * 10 if v is not None else "none", tree, **kw)
                mapped_bp = to_blueprint(mapped, kit) if not none_is_leaf else None
                results[f"{kit.name}{kit.namespace}"] = (
                    leaves,
                    mapped_bp,
                    spec.num_leaves,
                    spec.num_nodes if kit.name != "jax" else None,
                )
            base = results.pop("oxtree")
            for name, other in results.items():
                assert other[0] == base[0], name
                assert other[1] == base[1], name
                assert other[2] == base[2], name
                if other[3] is not None:
                    assert other[3] == base[3], name
            if not none_is_leaf:
                assert base[1] == sort_dicts(map_leaves(bp, lambda v: v * 10))

        check()


def test_random_structure_equality_agrees() -> None:
    with all_kits() as kits:

        @HYPOTHESIS_SETTINGS
        @given(bp=blueprints(), how=st.sampled_from(["relabel", "mutate", "other"]), data=st.data())
        def check(bp: Any, how: str, data: st.DataObject) -> None:
            if how == "relabel":
                bp2 = map_leaves(bp, lambda v: v + 100)
            elif how == "mutate":
                bp2 = mutate_meta(bp)
            else:
                bp2 = data.draw(blueprints(8))
            verdicts = {}
            for kit in kits:
                a, b = kit.structure(realize(bp, kit)), kit.structure(realize(bp2, kit))
                verdicts[f"{kit.name}{kit.namespace}"] = a == b
                if a == b:
                    assert hash(a) == hash(b), kit.name
                assert (a != b) is not (a == b)
            assert len(set(verdicts.values())) == 1, verdicts
            if how == "relabel":
                assert verdicts["oxtree"] is True

        check()


# --------------------------------------------------------------------------------------------------
# Fixed cases.


def test_custom_node_leaves_map_and_unflatten(kits: list[Kit]) -> None:
    seen = []
    for kit in kits:
        tree = {"b": kit.Box(1, [2, kit.Box(3, meta="inner")], meta=("k", 1)), "a": (4, None)}
        leaves, spec = kit.flatten(tree)
        mapped = kit.map(lambda v: v + 1, tree)
        seen.append(
            (
                leaves,
                to_blueprint(mapped, kit),
                to_blueprint(kit.unflatten(spec, [v * 2 for v in leaves]), kit),
                spec.num_leaves,
            )
        )
    assert all(s == seen[0] for s in seen), seen
    assert seen[0][0] == [4, 1, 2, 3]


def test_custom_node_reprs_match_optree(kits: list[Kit]) -> None:
    ox_global, ox_ns, opt = kits[0], kits[1], kits[2]
    for tree in (
        lambda k: k.Box(1, 2, meta="m"),
        lambda k: [k.Box(1, (2, None), meta=("a", 1)), {"z": k.Box(meta=None)}],
        lambda k: (k.Unit("m"), k.Box(k.Unit("s"), meta=3)),
    ):
        expected = repr(opt.structure(tree(opt)))
        assert repr(ox_ns.structure(tree(ox_ns))) == expected
        assert expected.endswith(f", namespace='{NS}')")
        assert repr(ox_global.structure(tree(ox_global))) == expected.replace(
            f", namespace='{NS}')", ")"
        )
        with_none = repr(opt.structure(tree(opt), none_is_leaf=True))
        assert repr(ox_ns.structure(tree(ox_ns), none_is_leaf=True)) == with_none
    assert repr(ox_global.structure(ox_global.Box(1, 2))) == (
        "PyTreeSpec(CustomTreeNode(Box['m'], [*, *]))"
    )


def test_custom_node_spec_properties_match_optree(kits: list[Kit]) -> None:
    ox, opt = kits[1], kits[2]
    make = lambda k: k.Box(1, k.Box(2, 3, meta="i"), (4,), meta="o")  # noqa: E731
    a, b = ox.structure(make(ox)), opt.structure(make(opt))
    assert (a.num_leaves, a.num_nodes, a.num_children) == (
        b.num_leaves,
        b.num_nodes,
        b.num_children,
    )
    assert int(a.kind) == int(b.kind)
    assert a.type is ox.Box
    assert b.type is opt.Box
    assert a.namespace == b.namespace == NS
    assert [repr(c) for c in a.children()] == [repr(c) for c in b.children()]


def test_dataclass_nodes_agree(kits: list[Kit]) -> None:
    seen = []
    for kit in kits:
        tree = [kit.DC([1, 2], {"q": 3}, tag="u"), kit.DC(4, None)]
        leaves, spec = kit.flatten(tree)
        same = kit.structure([kit.DC([0, 0], {"q": 0}, tag="u"), kit.DC(0, None)])
        differ = kit.structure([kit.DC([0, 0], {"q": 0}, tag="t"), kit.DC(0, None)])
        seen.append(
            (
                leaves,
                to_blueprint(kit.map(lambda v: -v, tree), kit),
                spec == same,
                spec == differ,
                to_blueprint(kit.unflatten(spec, leaves), kit),
            )
        )
    assert all(s == seen[0] for s in seen), seen
    assert seen[0][:1] == ([1, 2, 3, 4],)
    assert seen[0][2:4] == (True, False)


def test_static_nodes_agree(kits: list[Kit]) -> None:
    seen = []
    for kit in kits:
        metre = kit.Unit("m")
        tree = {"len": (2.5, metre), "u": kit.Unit("s")}
        leaves, spec = kit.flatten(tree)
        rebuilt = kit.unflatten(spec, [7.5])
        seen.append(
            (
                leaves,
                spec.num_leaves,
                spec == kit.structure({"len": (0, kit.Unit("m")), "u": kit.Unit("s")}),
                spec == kit.structure({"len": (0, kit.Unit("km")), "u": kit.Unit("s")}),
                rebuilt["len"][0],
                rebuilt["len"][1] == metre,
                kit.map(lambda v: v * 2, tree)["len"][0],
            )
        )
    assert all(s == seen[0] for s in seen), seen
    assert seen[0] == ([2.5], 1, True, False, 7.5, True, 5.0)


def test_mismatched_custom_nodes_are_value_errors(kits: list[Kit]) -> None:
    for kit in kits:
        cases = [
            ([kit.Box(1, meta="m")], [kit.Box(1, meta="n")]),
            ([kit.Box(1, 2)], [kit.Box(1, 2, 3)]),
            ([kit.Box(1)], [kit.DC(1, 2)]),
            ([kit.DC(1, 2, tag="t")], [kit.DC(1, 2, tag="u")]),
            ([kit.Unit("m")], [kit.Unit("s")]),
            ([kit.Box(1, 2)], [(1, 2)]),
        ]
        for first, second in cases:
            with pytest.raises(ValueError, match=r".") as info:
                kit.map(lambda a, b: a, first, second)
            if kit.name == "oxtree":
                assert "tree[0]" in str(info.value)


def test_subclass_of_registered_class_is_a_leaf_everywhere(kits: list[Kit]) -> None:
    for kit in kits:
        Sub = type("Sub", (kit.Box,), {})
        sub = Sub(1, 2)
        assert kit.leaves([kit.Box(0), sub]) == [0, sub], kit.name


def test_is_leaf_on_custom_nodes_agrees(kits: list[Kit]) -> None:
    seen = []
    for kit in kits:
        tree = [kit.Box(1, kit.DC(2, 3)), kit.DC(kit.Box(4), 5)]
        leaves = kit.leaves(tree, is_leaf=lambda x, k=kit: isinstance(x, k.DC))
        seen.append([to_blueprint(x, kit) for x in leaves])
    assert all(s == seen[0] for s in seen), seen
    assert seen[0] == [1, ("dc", 2, 3, "t"), ("dc", ("box", "m", [4]), 5, "t")]


def test_none_children_agree_with_optree(kits: list[Kit]) -> None:
    ox, opt = kits[1], kits[2]
    for none_is_leaf in (False, True):
        a, b = (k.Box(None, 1, k.DC(None, 2)) for k in (ox, opt))
        assert ox.leaves(a, none_is_leaf=none_is_leaf) == opt.leaves(b, none_is_leaf=none_is_leaf)
        sa, sb = (
            ox.structure(a, none_is_leaf=none_is_leaf),
            opt.structure(b, none_is_leaf=none_is_leaf),
        )
        assert (sa.num_leaves, sa.num_nodes) == (sb.num_leaves, sb.num_nodes)
        assert sa.none_is_leaf is sb.none_is_leaf is none_is_leaf
        fa = ox.map(repr, a, none_is_leaf=none_is_leaf)
        fb = opt.map(repr, b, none_is_leaf=none_is_leaf)
        assert (fa.children[0], fa.children[1], fa.children[2].x) == (
            fb.children[0],
            fb.children[1],
            fb.children[2].x,
        )


def test_aux_equality_semantics_agree_with_optree(kits: list[Kit]) -> None:
    ox, opt = kits[1], kits[2]
    nan = float("nan")
    pairs = [(1, 1.0), (1, True), (0, False), ("a", "a"), ((1, "x"), (1, "x")), (nan, nan)]
    for a, b in pairs:
        verdict_ox = ox.structure(ox.Box(meta=a)) == ox.structure(ox.Box(meta=b))
        verdict_opt = opt.structure(opt.Box(meta=a)) == opt.structure(opt.Box(meta=b))
        assert verdict_ox is verdict_opt, (a, b)
    spec = ox.structure(ox.Box(meta=nan))
    assert spec == spec
    assert (spec == ox.structure(ox.Box(meta=float("nan")))) is (
        opt.structure(opt.Box(meta=nan)) == opt.structure(opt.Box(meta=float("nan")))
    )


def test_flatten_up_to_and_compose_with_custom_nodes_agree(kits: list[Kit]) -> None:
    ox, opt = kits[1], kits[2]
    results = []
    for kit in (ox, opt):
        spec = kit.structure([kit.Box(1, 2), kit.Unit("m"), 3])
        wide = [kit.Box((1, 2), {"a": 3}), kit.Unit("m"), [4]]
        results.append(
            (
                spec.flatten_up_to(wide),
                repr(spec.compose(kit.structure((0, 0)))),
                spec.compose(kit.structure((0, 0))).num_leaves,
            )
        )
        for bad in (
            [kit.Box(1, 2, meta="x"), kit.Unit("m"), 3],
            [kit.Box(1, 2), kit.Unit("s"), 3],
            [kit.Box(1), kit.Unit("m"), 3],
            [(1, 2), kit.Unit("m"), 3],
        ):
            with pytest.raises(ValueError, match=r"."):
                spec.flatten_up_to(bad)
    assert results[0] == results[1]


def test_custom_node_paths_agree() -> None:
    # optree's third flatten result (entries) and JAX's flatten_with_keys both name children.
    OxE, OptE = _box_class("E"), _box_class("E")

    def with_entries(b: Any) -> tuple[Any, Any, Any]:
        return b.children, b.meta, tuple(f"e{i}" for i in range(len(b.children)))

    oxtree.register_pytree_node(OxE, with_entries, OxE.unflatten, namespace=NS)
    optree.register_pytree_node(OptE, with_entries, OptE.unflatten, namespace=NS)
    OxK, JxK, OxN, JxN = (_box_class(n) for n in ("K", "K", "N", "N"))
    oxtree.register_pytree_node(
        OxK,
        OxK.flatten,
        OxK.unflatten,
        flatten_with_keys_func=lambda b: (
            [(oxtree.GetAttrKey(f"f{i}"), c) for i, c in enumerate(b.children)],
            b.meta,
        ),
    )
    jtu.register_pytree_with_keys(
        JxK,
        lambda b: ([(jtu.GetAttrKey(f"f{i}"), c) for i, c in enumerate(b.children)], b.meta),
        JxK.unflatten,
        JxK.flatten,
    )
    oxtree.register_pytree_node(OxN, OxN.flatten, OxN.unflatten)
    jtu.register_pytree_node(JxN, JxN.flatten, JxN.unflatten)
    try:
        a, b = {"k": [OxE(1, (2, 3))]}, {"k": [OptE(1, (2, 3))]}
        assert oxtree.tree_paths(a, namespace=NS) == optree.tree_paths(b, namespace=NS)
        assert oxtree.tree_paths(a, namespace=NS)[0] == ("k", 0, "e0")
        ox_acc = [str(x) for x in oxtree.tree_accessors(a, namespace=NS)]
        opt_acc = [str(x) for x in optree.tree_accessors(b, namespace=NS)]
        assert ox_acc == opt_acc
        for ox_cls, jx_cls in ((OxK, JxK), (OxN, JxN)):
            ox_paths = [
                (oxtree.keystr(p), leaf)
                for p, leaf in oxtree.tree_leaves_with_path({"k": [ox_cls(1, (2, 3))]})
            ]
            jx_paths = [
                (jtu.keystr(p), leaf)
                for p, leaf in jtu.tree_leaves_with_path({"k": [jx_cls(1, (2, 3))]})
            ]
            assert ox_paths == jx_paths
        assert oxtree.keystr(oxtree.tree_leaves_with_path(OxK(1))[0][0]) == ".f0"
    finally:
        oxtree.unregister_pytree_node(OxE, namespace=NS)
        optree.unregister_pytree_node(OptE, namespace=NS)
        oxtree.unregister_pytree_node(OxK)
        oxtree.unregister_pytree_node(OxN)


def test_dataclass_paths_agree_with_jax() -> None:
    Ox, Jx = _make_dc(), _make_dc()
    oxtree.register_dataclass(Ox, data_fields=["c", "a"], meta_fields=["b", "s"])
    jtu.register_dataclass(Jx, data_fields=["c", "a"], meta_fields=["b", "s"])
    try:
        ox = [(oxtree.keystr(p), v) for p, v in oxtree.tree_leaves_with_path([Ox(1, 2, (3,))])]
        jx = [(jtu.keystr(p), v) for p, v in jtu.tree_leaves_with_path([Jx(1, 2, (3,))])]
        assert ox == jx == [("[0].c[0]", 3), ("[0].a", 1)]
    finally:
        oxtree.unregister_pytree_node(Ox)


# --------------------------------------------------------------------------------------------------
# register_pytree_node flavours, against JAX and optree.


def _special(name: str) -> type:
    class Special:
        def __init__(self, x: Any, y: Any) -> None:
            self.x, self.y = x, y

        def tree_flatten(self) -> tuple[tuple[Any, Any], str]:
            return (self.x, self.y), "aux"

        @classmethod
        def tree_unflatten(cls, aux: str, children: tuple[Any, Any]) -> Any:
            assert aux == "aux"
            return cls(*children)

    Special.__name__ = Special.__qualname__ = name
    return Special


def test_register_pytree_node_class_agrees_with_jax_and_optree() -> None:
    OxS, JaxS, OptS = _special("S"), _special("S"), _special("S")
    assert oxtree.register_pytree_node_class(OxS) is OxS
    assert jtu.register_pytree_node_class(JaxS) is JaxS
    assert optree.register_pytree_node_class(OptS, namespace=NS) is OptS
    try:
        results = []
        for lib, cls, kw in ((oxtree, OxS, {}), (jtu, JaxS, {}), (optree, OptS, {"namespace": NS})):
            tree = [cls(1, (2, 3)), cls("a", None)]
            mapped = lib.tree_map(lambda v: v * 2, tree, **kw)
            results.append(
                (
                    lib.tree_leaves(tree, **kw),
                    [(type(m).__name__, m.x, m.y) for m in mapped],
                    lib.tree_structure(tree, **kw) == lib.tree_structure(mapped, **kw),
                )
            )
        assert results[0] == results[1] == results[2]
        assert repr(oxtree.tree_structure(OxS(1, 2))) == repr(
            optree.tree_structure(OptS(1, 2), namespace=NS)
        ).replace(f", namespace='{NS}')", ")")
    finally:
        oxtree.unregister_pytree_node(OxS)
        optree.unregister_pytree_node(OptS, namespace=NS)


def test_optree_style_entries_agree_with_optree() -> None:
    Ox, Opt = _box_class("E"), _box_class("E")

    def flatten(b: Any) -> tuple[Any, Any, Any]:
        return b.children, b.meta, tuple(f"c{i}" for i in range(len(b.children)))

    oxtree.register_pytree_node(Ox, flatten, Ox.unflatten, namespace=NS)
    optree.register_pytree_node(Opt, flatten, Opt.unflatten, namespace=NS)
    try:
        a = [Ox(1, Ox(2, 3, meta="i"), meta="o")]
        b = [Opt(1, Opt(2, 3, meta="i"), meta="o")]
        assert oxtree.tree_leaves(a, namespace=NS) == optree.tree_leaves(b, namespace=NS)
        assert repr(oxtree.tree_structure(a, namespace=NS)) == repr(
            optree.tree_structure(b, namespace=NS)
        )
        out = oxtree.tree_map(str, a, namespace=NS)
        assert out == [Ox("1", Ox("2", "3", meta="i"), meta="o")]
    finally:
        oxtree.unregister_pytree_node(Ox, namespace=NS)
        optree.unregister_pytree_node(Opt, namespace=NS)


def test_namespaces_agree_with_optree() -> None:
    # Global registrations: oxtree's "" and optree's private global sentinel.
    OxG, OxL, OptG, OptL = (_box_class(n) for n in ("G", "L", "G", "L"))
    oxtree.register_pytree_node(OxG, OxG.flatten, OxG.unflatten)
    oxtree.register_pytree_node(OxL, OxL.flatten, OxL.unflatten, namespace=NS)
    optree.register_pytree_node(OptG, OptG.flatten, OptG.unflatten, namespace=OPTREE_GLOBAL)
    optree.register_pytree_node(OptL, OptL.flatten, OptL.unflatten, namespace=NS)
    try:
        for namespace in ("", NS, "elsewhere"):
            ox_kw = {"namespace": namespace}
            opt_kw = {"namespace": namespace} if namespace else {}
            ox_tree = [OxG(1, OxL(2)), OxL(OxG(3))]
            opt_tree = [OptG(1, OptL(2)), OptL(OptG(3))]
            ox_leaves = oxtree.tree_leaves(ox_tree, **ox_kw)
            opt_leaves = optree.tree_leaves(opt_tree, **opt_kw)
            assert [repr(x) for x in ox_leaves] == [repr(x) for x in opt_leaves], namespace
            ox_spec = oxtree.tree_structure(ox_tree, **ox_kw)
            opt_spec = optree.tree_structure(opt_tree, **opt_kw)
            assert ox_spec.num_leaves == opt_spec.num_leaves
            if namespace == NS:
                assert repr(ox_spec) == repr(opt_spec)
                assert ox_spec.namespace == opt_spec.namespace == NS
        # A namespace's own rules win over the global ones, in both libraries.
        oxtree.register_pytree_node(
            OxG, lambda b: ((), b.meta), lambda m, _: OxG(meta=m), namespace=NS
        )
        optree.register_pytree_node(
            OptG, lambda b: ((), b.meta), lambda m, _: OptG(meta=m), namespace=NS
        )
        assert (
            oxtree.tree_leaves(OxG(1, 2), namespace=NS)
            == optree.tree_leaves(OptG(1, 2), namespace=NS)
            == []
        )
        assert oxtree.tree_leaves(OxG(1, 2)) == optree.tree_leaves(OptG(1, 2)) == [1, 2]
    finally:
        for cls, ns in ((OxG, ""), (OxL, NS), (OxG, NS)):
            with contextlib.suppress(ValueError):
                oxtree.unregister_pytree_node(cls, namespace=ns)
        for cls, ns in ((OptG, OPTREE_GLOBAL), (OptL, NS), (OptG, NS)):
            with contextlib.suppress(ValueError):
                optree.unregister_pytree_node(cls, namespace=ns)


# --------------------------------------------------------------------------------------------------
# register_dataclass against JAX.


def _make_dc() -> type:
    @dataclasses.dataclass
    class D:
        a: Any
        b: Any
        c: Any
        s: Any = dataclasses.field(default="s", metadata={"static": True})

    return D


def test_register_dataclass_explicit_order_agrees_with_jax() -> None:
    Ox, Jx = _make_dc(), _make_dc()
    oxtree.register_dataclass(Ox, data_fields=["c", "a"], meta_fields=["b", "s"])
    jtu.register_dataclass(Jx, data_fields=["c", "a"], meta_fields=["b", "s"])
    try:
        results = []
        for lib, cls in ((oxtree, Ox), (jtu, Jx)):
            tree = [cls(1, 2, [3, 4]), cls(5, 6, 7, s="t")]
            leaves, spec = lib.tree_flatten(tree)
            mapped = lib.tree_map(lambda v: v * 10, tree)
            results.append(
                (
                    leaves,
                    [dataclasses.astuple(m) for m in mapped],
                    spec == lib.tree_structure([cls(0, 2, [0, 0]), cls(0, 6, 0, s="t")]),
                    spec == lib.tree_structure([cls(0, 3, [0, 0]), cls(0, 6, 0, s="t")]),
                    [dataclasses.astuple(m) for m in lib.tree_unflatten(spec, leaves)],
                )
            )
        assert results[0] == results[1]
        assert results[0][0] == [3, 4, 1, 7, 5]
    finally:
        oxtree.unregister_pytree_node(Ox)


def test_register_dataclass_inferred_agrees_with_jax() -> None:
    Ox, Jx = _make_dc(), _make_dc()
    oxtree.register_dataclass(Ox)
    jtu.register_dataclass(Jx)
    try:
        assert oxtree.tree_leaves(Ox(1, 2, 3, s="q")) == jtu.tree_leaves(Jx(1, 2, 3, s="q"))
        ox_eq = oxtree.tree_structure(Ox(1, 2, 3)) == oxtree.tree_structure(Ox(0, 0, 0, s="x"))
        jx_eq = jtu.tree_structure(Jx(1, 2, 3)) == jtu.tree_structure(Jx(0, 0, 0, s="x"))
        assert ox_eq is jx_eq is False
        assert dataclasses.astuple(oxtree.tree_map(str, Ox(1, 2, 3))) == dataclasses.astuple(
            jtu.tree_map(str, Jx(1, 2, 3))
        )
    finally:
        oxtree.unregister_pytree_node(Ox)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"data_fields": ["a"], "meta_fields": ["s"]},  # missing b, c
        {"data_fields": ["a", "b", "c", "q"], "meta_fields": ["s"]},  # unexpected q
        {"data_fields": ["a", "b", "c"], "meta_fields": ["c", "s"]},  # overlap c
        {"data_fields": ["a", "b", "c"]},  # only one list
        {"meta_fields": ["s"]},  # only one list
        {"data_fields": ["a", "b"], "meta_fields": ["s"], "drop_fields": ["c"]},  # fine
    ],
    ids=["missing", "unexpected", "overlap", "only_data", "only_meta", "drop"],
)
def test_register_dataclass_errors_agree_with_jax(kwargs: dict[str, Any]) -> None:
    Ox, Jx = _make_dc(), _make_dc()
    outcomes = []
    for register, cls in ((oxtree.register_dataclass, Ox), (jtu.register_dataclass, Jx)):
        try:
            register(cls, **kwargs)
        except (TypeError, ValueError) as exc:
            outcomes.append(type(exc))
        else:
            outcomes.append(None)
    if outcomes[0] is None:
        oxtree.unregister_pytree_node(Ox)
    assert outcomes[0] is outcomes[1]


def test_register_dataclass_non_dataclass_agrees_with_jax() -> None:
    def plain() -> type:
        class Plain:
            def __init__(self, a: Any, n: Any) -> None:
                self.a, self.n = a, n

        return Plain

    Ox, Jx = plain(), plain()
    with pytest.raises(TypeError, match="dataclass"):
        oxtree.register_dataclass(Ox)
    with pytest.raises(TypeError, match="dataclass"):
        jtu.register_dataclass(Jx)
    oxtree.register_dataclass(Ox, data_fields=["a"], meta_fields=["n"])
    jtu.register_dataclass(Jx, data_fields=["a"], meta_fields=["n"])
    try:
        assert oxtree.tree_leaves(Ox([1, 2], "n")) == jtu.tree_leaves(Jx([1, 2], "n")) == [1, 2]
        ox_out, jx_out = oxtree.tree_map(str, Ox(1, "n")), jtu.tree_map(str, Jx(1, "n"))
        assert (ox_out.a, ox_out.n) == (jx_out.a, jx_out.n) == ("1", "n")
    finally:
        oxtree.unregister_pytree_node(Ox)


def test_oxtree_and_optree_dataclasses_agree() -> None:
    def body(deco: Callable[[type], type], field: Callable[..., Any]) -> type:
        class Layer:
            weight: Any
            shape: tuple[int, ...] = field(pytree_node=False)
            bias: Any = field(default=0.0)
            dtype: str = field(default="float32", pytree_node=False)

        return deco(Layer)

    Ox = body(odc.dataclass(namespace=NS), odc.field)
    Opt = body(optree.dataclasses.dataclass(namespace=NS), optree.dataclasses.field)
    try:
        for make in (
            lambda c: c([1.0, 2.0], (2,)),
            lambda c: c({"w": 1}, (1,), bias=None, dtype="int8"),
        ):
            a, b = make(Ox), make(Opt)
            assert oxtree.tree_leaves(a, namespace=NS) == optree.tree_leaves(b, namespace=NS)
            assert oxtree.tree_leaves(a) == [a]
            assert optree.tree_leaves(b) == [b]
            ox_out = oxtree.tree_map(lambda v: v * 2, a, namespace=NS)
            opt_out = optree.tree_map(lambda v: v * 2, b, namespace=NS)
            assert dataclasses.astuple(ox_out) == dataclasses.astuple(opt_out)
            ox_spec, opt_spec = (
                oxtree.tree_structure(a, namespace=NS),
                optree.tree_structure(b, namespace=NS),
            )
            assert ox_spec.namespace == opt_spec.namespace == NS
            assert ox_spec.num_leaves == opt_spec.num_leaves
            assert (ox_spec == oxtree.tree_structure(make(Ox), namespace=NS)) is (
                opt_spec == optree.tree_structure(make(Opt), namespace=NS)
            )
        diff_ox = oxtree.tree_structure(Ox(1, (2,)), namespace=NS) == oxtree.tree_structure(
            Ox(1, (3,)), namespace=NS
        )
        diff_opt = optree.tree_structure(Opt(1, (2,)), namespace=NS) == optree.tree_structure(
            Opt(1, (3,)), namespace=NS
        )
        assert diff_ox is diff_opt is False
    finally:
        oxtree.unregister_pytree_node(Ox, namespace=NS)
        optree.unregister_pytree_node(Opt, namespace=NS)


def test_oxtree_dataclass_registered_over_an_optree_one() -> None:
    # The same class, made by optree's decorator, registered with oxtree too: field(
    # pytree_node=False) from optree is understood by oxtree's inference.
    @optree.dataclasses.dataclass(namespace=NS)
    class State:
        topic: str
        draft: str
        model: str = optree.dataclasses.field(default="m1", pytree_node=False)

    oxtree.register_dataclass(State, namespace=NS)
    try:
        state = State("dna", "short")
        assert oxtree.tree_leaves(state, namespace=NS) == optree.tree_leaves(state, namespace=NS)
        assert oxtree.tree_map(str.upper, state, namespace=NS) == optree.tree_map(
            str.upper, state, namespace=NS
        )
        assert oxtree.tree_map(str.upper, state, namespace=NS) == State("DNA", "SHORT")
    finally:
        oxtree.unregister_pytree_node(State, namespace=NS)
        optree.unregister_pytree_node(State, namespace=NS)


# --------------------------------------------------------------------------------------------------
# register_static against JAX.


def test_register_static_agrees_with_jax() -> None:
    Ox, Jx = _unit_class("U"), _unit_class("U")
    oxtree.register_static(Ox)
    jtu.register_static(Jx)
    try:
        results = []
        for lib, cls in ((oxtree, Ox), (jtu, Jx)):
            tree = [cls("m"), (1, cls("s")), {"k": cls("m")}]
            leaves, spec = lib.tree_flatten(tree)
            rebuilt = lib.tree_unflatten(spec, [9])
            results.append(
                (
                    leaves,
                    spec.num_leaves,
                    spec == lib.tree_structure([cls("m"), (0, cls("s")), {"k": cls("m")}]),
                    spec == lib.tree_structure([cls("m"), (0, cls("m")), {"k": cls("m")}]),
                    repr(rebuilt),
                    lib.tree_leaves(cls("x")),
                )
            )
        assert results[0] == results[1]
        assert results[0][0] == [1]
    finally:
        oxtree.unregister_pytree_node(Ox)


# --------------------------------------------------------------------------------------------------
# Partial against jax.tree_util.Partial and optree.functools.partial.


def add3(x: Any, y: Any, z: Any) -> Any:
    return x + y + z


PARTIALS = {
    "oxtree": (oxtree, oxtree.Partial),
    "jax": (jtu, jtu.Partial),
    "optree": (optree, optree.functools.partial),
}


def _partial_facts(lib: Any, make: Callable[..., Any]) -> tuple[Any, ...]:
    p = make(add3, 1, z=np.arange(3))
    mapped = lib.tree_map(lambda v: v * 10, p)
    same = lib.tree_structure(p) == lib.tree_structure(make(add3, "a", z="b"))
    other_func = lib.tree_structure(p) == lib.tree_structure(make(max, 1, z=2))
    other_kw = lib.tree_structure(p) == lib.tree_structure(make(add3, 1, y=2))
    return (
        [np.asarray(leaf).tolist() for leaf in lib.tree_leaves(p)],
        mapped(2).tolist(),
        type(mapped) is type(p),
        same,
        other_func,
        other_kw,
        lib.tree_leaves(make(add3)),
    )


def test_partial_agrees() -> None:
    facts = {name: _partial_facts(lib, make) for name, (lib, make) in PARTIALS.items()}
    assert facts["oxtree"] == facts["jax"] == facts["optree"], facts
    assert facts["oxtree"][0] == [1, [0, 1, 2]]
    assert facts["oxtree"][1] == [12, 22, 32]


def test_partial_around_functools_partial_agrees() -> None:
    inner = functools.partial(add3, 100)
    facts = {}
    for name, (lib, make) in PARTIALS.items():
        p = make(inner, 1)
        facts[name] = (
            lib.tree_leaves(p),
            p(z=2),
            lib.tree_map(lambda v: v * 2, p)(z=2),
            lib.tree_structure(p) == lib.tree_structure(make(inner, 5)),
        )
    assert facts["oxtree"] == facts["jax"] == facts["optree"], facts


def test_partial_of_partial_agrees() -> None:
    facts = {}
    for name, (lib, make) in PARTIALS.items():
        p = make(make(add3, 1), 2)
        facts[name] = (lib.tree_leaves(p), p(3), lib.tree_map(lambda v: v * 10, p)(3))
    assert facts["oxtree"] == facts["jax"] == facts["optree"], facts


def test_partial_in_a_bigger_tree_agrees() -> None:
    facts = {}
    for name, (lib, make) in PARTIALS.items():
        tree = {"f": make(add3, 1, z=2), "g": [make(add3, 3, 4), 5]}
        mapped = lib.tree_map(lambda v: v + 1, tree)
        facts[name] = (lib.tree_leaves(tree), mapped["f"](0), mapped["g"][0](0), mapped["g"][1])
    assert facts["oxtree"] == facts["jax"] == facts["optree"], facts
    assert facts["oxtree"] == ([1, 2, 3, 4, 5], 5, 9, 6)


# --------------------------------------------------------------------------------------------------
# JAX's "Custom pytree nodes" examples run with each library.


def test_custom_nodes_page_special_with_each_library() -> None:
    def make() -> type:
        class RegisteredSpecial:
            def __init__(self, x: Any, y: Any) -> None:
                self.x, self.y = x, y

            def __repr__(self) -> str:
                return f"RegisteredSpecial(x={self.x}, y={self.y})"

        return RegisteredSpecial

    outputs = []
    registered = []
    for lib, kw in ((oxtree, {}), (jtu, {}), (optree, {"namespace": NS})):
        cls = make()
        lib.register_pytree_node(
            cls, lambda v: ((v.x, v.y), None), lambda _, c, cls=cls: cls(*c), **kw
        )
        if lib is not jtu:
            registered.append((lib, cls, kw))
        out = lib.tree_map(lambda x: x + 1, [cls(0, 1), cls(2, 4)], **kw)
        outputs.append(repr(out))
    for lib, cls, kw in registered:
        lib.unregister_pytree_node(cls, **kw)
    assert outputs == ["[RegisteredSpecial(x=1, y=2), RegisteredSpecial(x=3, y=5)]"] * 3


def test_custom_nodes_page_dataclass_container_with_jax() -> None:
    def make(register: Callable[..., Any]) -> type:
        @functools.partial(register, data_fields=["a", "b", "c"], meta_fields=["name"])
        @dataclasses.dataclass
        class MyDataclassContainer:
            name: str
            a: Any
            b: Any
            c: Any

        return MyDataclassContainer

    Ox, Jx = make(oxtree.register_dataclass), make(jtu.register_dataclass)
    try:
        zeros, pair = np.zeros([4]), np.array([3, 4])
        ox = oxtree.tree_leaves([Ox("apple", 5.3, 1.2, zeros), Ox("banana", pair, -1.0, 0.0)])
        jx = jtu.tree_leaves([Jx("apple", 5.3, 1.2, zeros), Jx("banana", pair, -1.0, 0.0)])
        assert len(ox) == len(jx) == 6
        assert all(a is b for a, b in zip(ox, jx, strict=True))
    finally:
        oxtree.unregister_pytree_node(Ox)
