"""Reliability: crash reproducers found by the fuzzer, depth through every public function,
collection of treedefs and graphdefs caught in reference cycles, and short memory checks.

The fuzzer itself (fuzz/fuzz.py) has a short run in tests/reliability/test_fuzz.py; the long runs, the
million-call soak and the figures are in docs/reliability.md. Reference counts and the thread
tests of the core engine are in test_memory.py and test_threads.py; deep trees through the core
walks are in test_errors.py. This file covers what those leave out.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import json
import os
import pickle
import subprocess
import sys
import weakref
from pathlib import Path
from typing import Any

import deep_ops
import oxtree
import oxtree.tree_util
import pytest
from subprocess_runs import DEEP_OPS as CORE_DEEP_OPS
from subprocess_runs import op_result, run_script

ROOT = Path(__file__).resolve().parents[2]
FUZZ = ROOT / "fuzz"


def run_python(code: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Runs `code` in a fresh interpreter with the system allocator, so freed memory is
    returned at once and a use-after-free shows up as a crash rather than as stale data."""
    env = dict(os.environ, PYTHONMALLOC="malloc")
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=env,
    )


# --------------------------------------------------------------------------------------------------
# Reproducers of bugs the fuzzer found. Each runs in a subprocess because the bug may crash it.

SORT_USE_AFTER_FREE = r"""
import oxtree

calls = 0


class K:
    def __init__(self, v):
        self.v = v

    def __hash__(self):
        return self.v

    def __lt__(self, other):
        global calls
        calls += 1
        if calls < 12:  # some successful comparisons: the sort permutes the key list
            return (self.v * 5) % 8 < (other.v * 5) % 8
        d.clear()  # now the key list holds the only reference to each key
        raise TypeError("not orderable")


d = {K(i): i for i in range(8)}
leaves, spec = oxtree.tree_flatten(d)
assert sorted(leaves) == list(range(8)), leaves
assert spec.num_leaves == 8
print("ok")
"""


def test_dict_emptied_by_failing_key_comparison_is_not_read_after_free():
    # A key's __lt__ empties the dict being flattened, then raises TypeError. After the failed
    # sort, flatten restores insertion order by writing `keys[i] = original[i]`; each write
    # drops the list's reference to the key it displaces, which (the dict having dropped
    # its own) frees that key while `original` still points at it. Found by fuzz/fuzz.py
    # (seed 0, cases 4742, 6587, 6848, ...): a segfault or garbage such as
    # "AttributeError: 'frame' object has no attribute '__module__'".
    proc = run_python(SORT_USE_AFTER_FREE)
    assert proc.returncode == 0, f"returncode {proc.returncode}\n{proc.stderr[-2000:]}"
    assert proc.stdout.strip() == "ok", proc.stderr[-2000:]


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(lambda sk, refs: (sk, -1, refs), id="negative-num-roots"),
        pytest.param(lambda sk, refs: (sk, 2**64, refs), id="huge-num-roots"),
        pytest.param(lambda sk, refs: (sk, 2, ((-1, 1),)), id="negative-ref-leaf"),
        pytest.param(lambda sk, refs: (sk, 2, ((1, -5),)), id="negative-ref-target"),
    ],
)
def test_corrupted_graphdef_state_raises_value_error(args):
    # A corrupted pickle of a GraphDef must be refused with ValueError (as treedef pickles
    # are), not OverflowError from an integer conversion. Found by the fuzzer (seed 0, case
    # 38134: "can't convert negative int to unsigned while processing 'num_roots'").
    x = [1]
    rebuild, (skeleton, _, refs) = oxtree.graph_flatten(x, x)[1].__reduce__()
    with pytest.raises((ValueError, TypeError)):
        rebuild(*args(skeleton, refs))


def test_graphdef_state_referring_to_the_roots_tuple_is_refused():
    # With several roots, the skeleton's root node is the tuple that holds them, which is no
    # object of the user's. A corrupted state whose reference targets it was accepted, and
    # graph_unflatten exposed that tuple inside the rebuilt graph (here a list holding the
    # tuple of roots, a cycle), which then flattens to a different GraphDef. Found by the
    # fuzzer (seed 11, cases 234660, 448343, 551637, ...).
    rebuild, (skeleton, num_roots, refs) = oxtree.graph_flatten([1], 5)[1].__reduce__()
    assert (num_roots, refs) == (2, ())
    root_tuple = skeleton.num_nodes - 1
    # Refused when loaded or when rebuilt; the message is the fix's to choose.
    with pytest.raises(ValueError):  # noqa: PT011, PT012
        bad = rebuild(skeleton, 2, ((0, root_tuple),))
        oxtree.graph_unflatten(bad, [5])


def test_graphdef_state_with_a_reference_before_its_target_is_refused():
    # A reference stands for an object met earlier in walk order. A corrupted state whose
    # reference (in the first root) targets a container that comes later (the second root)
    # was accepted; the rebuilt graph then flattens to a different GraphDef, the container's
    # first occurrence having moved to where the reference was. Found by the fuzzer (seed 12,
    # case 71396).
    rebuild, (skeleton, num_roots, refs) = oxtree.graph_flatten([0, 2], {"k": 1})[1].__reduce__()
    assert (num_roots, refs) == (2, ())
    # Post-order nodes: 0, 2, the list, 1, the dict, the tuple of roots.
    dict_node = skeleton.num_nodes - 2
    assert skeleton.children()[1].type is dict
    with pytest.raises(ValueError, match="reference at leaf 0 comes before its target 4"):
        rebuild(skeleton, 2, ((0, dict_node),))
    # A reference after its target is the legitimate form, and rebuilds the sharing.
    _, gd = oxtree.graph_flatten({"k": 1}, [0, 2])
    rebuild, (skeleton, _, _) = gd.__reduce__()
    shared = oxtree.graph_unflatten(rebuild(skeleton, 2, ((2, 1),)), [1, 0])
    assert shared[1][1] is shared[0]


@pytest.mark.parametrize(
    "node",
    [[{}, 0], [[], 0], [None, 0], ["leaf", {}]],
    ids=["dict-kind", "list-kind", "none-kind", "dict-arity"],
)
def test_malformed_json_node_raises_value_error(node):
    # treespec_from_json's contract: "Anything malformed raises ValueError". A kind that is
    # a JSON object made it raise TypeError (unhashable type: 'dict'). Found by the fuzzer
    # (seed 0, case 1147).
    doc = {
        "format": "oxtree.treespec",
        "version": 1,
        "none_is_leaf": False,
        "namespace": "",
        "nodes": [["leaf", 0], node],
    }
    for arg in (doc, json.dumps(doc)):
        with pytest.raises(ValueError, match=r"treespec_from_json|invalid PyTreeSpec state"):
            oxtree.treespec_from_json(arg)


# --------------------------------------------------------------------------------------------------
# Depth: every public function and treedef method on trees nested 100,000 deep.

DEPTH = 100_000
# Superlinear operations (see fuzz/deep_ops.py SLOW) run on a 5,000-deep chain here; `make
# fuzz` runs them at full depth and records their times in docs/reliability.md.
SLOW_DEPTH = 5_000

DEEP_OPS = list(deep_ops.ops(deep_ops.build(3)))


DEEP_SCRIPT = (FUZZ / "deep_ops.py").read_text()


def deep_run() -> dict[str, Any]:
    # One subprocess (cached), one JSON record per line.
    return run_script(DEEP_SCRIPT, f"--slow-depth={SLOW_DEPTH}", "0", str(DEPTH))


@pytest.mark.parametrize("op", DEEP_OPS)
def test_deep_chain_through_every_public_function(op):
    outcome, detail = op_result(deep_run(), op)[:2]
    assert outcome in ("ok", "RecursionError"), f"{op}: {outcome}: {detail}"


def test_deep_subprocess_exits_cleanly():
    run = deep_run()
    assert run["finished"], run["stderr"]
    assert run["returncode"] == 0, run["stderr"]


# The deep script of test_errors.py (subprocess_runs.DEEP_SCRIPT) covers the core walks and the
# treedef basics: its operations named after public functions or treedef methods count as
# covered.
COVERED_ELSEWHERE = {
    name if name.startswith("tree_") else f"PyTreeSpec.{name.removeprefix('spec.')}"
    for name in CORE_DEEP_OPS
}
TAKE_NO_TREE = {
    "dict_insertion_ordered",
    "use_jax_registry",
    "is_namedtuple",
    "is_namedtuple_class",
    "is_namedtuple_instance",
    "is_structseq",
    "is_structseq_class",
    "is_structseq_instance",
    "namedtuple_fields",
    "structseq_fields",
    "treespec_frozendict",
    "register_dataclass",
    "register_object",
    "register_pytree_node_class",
    "register_static",
    "registered_types",
    "unregister_pytree_node",
    "tree_util.register_dataclass",
    "tree_util.register_object",
    "tree_util.register_pytree_node",
    "tree_util.register_pytree_node_class",
    "tree_util.register_pytree_with_keys",
    "tree_util.register_pytree_with_keys_class",
    "tree_util.register_static",
    "tree_util.is_tree_node",
    "tree_util.default_registry",
    "tree.static",
}


def public_callables() -> set[str]:
    """Public functions of oxtree, oxtree.tree_util and oxtree.tree, and treedef methods."""
    import inspect

    names: set[str] = set()
    for prefix, module in (("", oxtree), ("tree_util.", oxtree.tree_util), ("tree.", oxtree.tree)):
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isfunction(obj) or inspect.isbuiltin(obj):
                # A re-export of a function of the main face is the same function.
                if prefix and getattr(oxtree, name, None) is obj:
                    continue
                names.add(prefix + name)
    for cls, label in ((oxtree.PyTreeSpec, "PyTreeSpec"), (oxtree.GraphDef, "GraphDef")):
        for name in dir(cls):
            if not name.startswith("__") or name in ("__lt__", "__eq__", "__hash__"):
                names.add(f"{label}.{name}")
    return names


def test_depth_checks_cover_every_public_function():
    covered = set(COVERED_ELSEWHERE) | TAKE_NO_TREE
    for names, _ in deep_ops.ops(deep_ops.build(3)).values():
        covered.update(names)
    # Treedef methods that only read a stored number or compare: covered by the basics.
    covered |= {
        "PyTreeSpec.num_leaves",
        "PyTreeSpec.num_children",
        "PyTreeSpec.__eq__",
        "PyTreeSpec.__hash__",
        "GraphDef.__lt__",
    }
    missing = sorted(public_callables() - covered)
    assert not missing, f"add these to fuzz/deep_ops.py (or an exemption list here): {missing}"


# --------------------------------------------------------------------------------------------------
# Garbage collection of treedefs, graphdefs and modules caught in reference cycles.


def collected(ref: weakref.ref[Any]) -> bool:
    for _ in range(3):
        gc.collect()
    return ref() is None


class Holder:
    """A plain object that can hold anything, including its own treedef."""

    def __init__(self, **kw: Any) -> None:
        self.__dict__.update(kw)

    def __hash__(self) -> int:
        return id(self)

    def __eq__(self, other: object) -> bool:
        return self is other


class Aux(Holder):
    """Aux data of a registered node."""


class Node:
    def __init__(self, child: Any, aux: Any) -> None:
        self.child, self.aux = child, aux


oxtree.register_pytree_node(
    Node, lambda n: ((n.child,), n.aux), lambda aux, c: Node(c[0], aux), namespace="reliability"
)


class Static(Holder):
    pass


oxtree.register_static(Static, namespace="reliability")


def test_cycle_through_custom_aux_data_is_collected():
    aux = Aux()
    aux.spec = oxtree.tree_structure([Node(1, aux)], namespace="reliability")  # aux -> spec -> aux
    ref = weakref.ref(aux)
    del aux
    assert collected(ref)


def test_cycle_through_static_node_is_collected():
    static = Static()
    static.spec = oxtree.tree_structure({"s": static}, namespace="reliability")
    ref = weakref.ref(static)
    del static
    assert collected(ref)


def test_cycle_through_jax_face_treedef_is_collected():
    aux = Aux()
    aux.treedef = oxtree.tree_util.tree_structure([Node(1, aux), {"k": aux}])
    aux.children = oxtree.tree_util.treedef_children(aux.treedef)
    ref = weakref.ref(aux)
    del aux
    assert collected(ref)


def test_cycle_through_keys_and_accessors_is_collected():
    key = Holder()
    tree = {key: [1, (2,)]}
    key.paths = oxtree.tree_util.tree_flatten_with_path(tree)[0]  # DictKey(key) -> key
    key.accessors = oxtree.tree_accessors(tree)
    key.spec_paths = oxtree.tree_structure(tree).paths()
    ref = weakref.ref(key)
    del key, tree
    assert collected(ref)


def test_cycle_through_pickled_and_copied_treedefs_is_collected():
    aux = Aux()
    spec = oxtree.tree_structure(Node([1], Static()), namespace="reliability")
    aux.copies = [copy.copy(spec), copy.deepcopy(spec), spec.children(), spec.one_level()]
    aux.copies.append(aux)
    ref = weakref.ref(aux)
    del aux, spec
    assert collected(ref)


def test_graphdef_in_cycle_is_collected():
    shared = Holder()
    tree = {"a": [shared], "b": Node(shared, Aux()), "c": {shared: 1}}
    leaves, gd = oxtree.graph_flatten(tree, tree, namespace="reliability")
    shared.graphdef = gd  # shared -> graphdef -> (dict key) shared
    shared.rebuilt = oxtree.graph_unflatten(gd, leaves)
    ref, gd_ref = weakref.ref(shared), None
    del shared, tree, leaves, gd
    assert collected(ref)
    assert gd_ref is None


def test_graph_of_cycles_and_its_graphdef_are_collected():
    a: list[Any] = []
    b = {"a": a}
    a.append(b)
    a.append(Node(a, Aux()))
    leaves, gd = oxtree.graph_flatten(a, namespace="reliability")
    rebuilt = oxtree.graph_unflatten(gd, leaves)
    rebuilt.append(gd)  # the rebuilt cycle holds the graphdef too
    a.append(pickle.loads(pickle.dumps(gd)))
    assert rebuilt[1].child is rebuilt
    assert rebuilt[0]["a"] is rebuilt
    watched = [weakref.ref(a[1].aux), weakref.ref(rebuilt[1].aux), weakref.ref(rebuilt[1])]
    del a, b, leaves, gd, rebuilt
    assert all(collected(r) for r in watched)


def test_unregistered_class_and_its_treedefs_are_collected():
    # A registration is kept only while a treedef needs it: once the type is unregistered and
    # its treedefs are gone, nothing keeps the class alive.
    cls = type("Ephemeral", (), {"__init__": lambda self, x: setattr(self, "x", x)})
    oxtree.register_pytree_node(
        cls, lambda o: ((o.x,), type(o)), lambda t, c: t(*c), namespace="reliability"
    )
    spec = oxtree.tree_structure([cls(1)], namespace="reliability")
    pickled = pickle.dumps(oxtree.tree_structure(1))
    oxtree.unregister_pytree_node(cls, namespace="reliability")
    assert spec.unflatten([2])[0].x == 2  # still works after unregistering
    ref = weakref.ref(cls)
    del cls, spec
    assert collected(ref)
    assert pickle.loads(pickled).num_leaves == 1


def test_module_holding_its_own_treedef_is_collected():
    module = pytest.importorskip("oxtree.module")

    class Layer(module.Module):
        def __init__(self, n: int) -> None:
            self.n = n
            self.register_parameter("w", [0.0] * n)

    layer = Layer(2)
    marker = Holder()
    layer.register_state("marker", marker)
    layer.spec = oxtree.tree_structure(layer)  # configuration: module -> treedef -> ...
    layer.graph = oxtree.graph_flatten(layer, layer)
    ref, marker_ref = weakref.ref(layer), weakref.ref(marker)
    del layer, marker
    assert collected(ref)
    assert collected(marker_ref)


# --------------------------------------------------------------------------------------------------
# Short memory checks (the million-call soak is fuzz/soak.py): operations test_memory.py does
# not count, run many times; leaf reference counts must not move and RSS must stay flat.

CALLS = 10_000
RSS_TOLERANCE = 4 << 20


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class Leaf:
    pass


def memory_tree() -> tuple[Any, list[Any]]:
    from collections import OrderedDict, deque

    leaves = [Leaf() for _ in range(6)]
    key = Holder()
    tree = {
        "a": [leaves[0], (leaves[1], None)],
        key: OrderedDict(z=deque([leaves[2]]), y=Node(leaves[3], Aux())),
        "s": {"x": leaves[4], "y": [leaves[5], Static()]},
    }
    return tree, [*leaves, key]


def memory_ops(tree: Any) -> dict[str, Any]:
    ns = {"namespace": "reliability"}
    spec = oxtree.tree_structure(tree, **ns)
    leaves = oxtree.tree_leaves(tree, **ns)
    plain = {"a": tree["a"], "s": tree["s"]}
    plain_spec = oxtree.tree_structure(plain)
    doc = oxtree.treespec_to_json(plain_spec)
    gd_leaves, gd = oxtree.graph_flatten(tree, tree, **ns)

    def raising(x: Any) -> Any:
        raise KeyError("x")

    def swallow(fn: Any, *exc: type[BaseException]) -> None:
        with contextlib.suppress(exc):
            fn()

    return {
        "paths": lambda: oxtree.tree_flatten_with_path(tree, **ns),
        "jax_paths": lambda: oxtree.tree_util.tree_flatten_with_path(plain),
        "accessors": lambda: [a(tree) for a in oxtree.tree_accessors(tree, **ns)],
        "pickle": lambda: pickle.loads(pickle.dumps(spec)).unflatten(leaves),
        "json": lambda: oxtree.treespec_from_json(json.dumps(doc)),
        "graph": lambda: oxtree.graph_unflatten(*oxtree.graph_flatten(tree, tree, **ns)[::-1]),
        "graphdef": lambda: (gd.unflatten(gd_leaves), gd.paths(), hash(gd), repr(gd)),
        "jax": lambda: oxtree.tree_util.tree_unflatten(*oxtree.tree_util.tree_flatten(plain)[::-1]),
        "spec_methods": lambda: (spec.paths(), spec.entries(), spec.is_prefix(spec), repr(spec)),
        "errors": lambda: (
            swallow(lambda: oxtree.tree_map(raising, tree, **ns), KeyError),
            swallow(lambda: spec.flatten_up_to([1]), ValueError),
            swallow(lambda: oxtree.tree_leaves(tree, raising, **ns), KeyError),
        ),
    }


@pytest.mark.parametrize("op", list(memory_ops(memory_tree()[0])))
def test_repeated_calls_keep_refcounts_and_rss_flat(op):
    tree, watched = memory_tree()
    call = memory_ops(tree)[op]
    for _ in range(CALLS // 10):  # warm up caches and allocator pools
        call()
    gc.collect()
    before_refs = [sys.getrefcount(x) for x in watched]
    before = rss()
    for _ in range(CALLS):
        call()
    gc.collect()
    grown = rss() - before
    assert [sys.getrefcount(x) for x in watched] == before_refs
    assert grown < RSS_TOLERANCE, f"{op}: RSS grew {grown / 1e6:.1f} MB over {CALLS} calls"
