"""How the JAX face reads JAX's own registry: per-type caching, liveness, precedence, the main
face's switch, and a process without JAX. The libraries' own pytrees (equinox, flax, chex)
are in tests/ecosystem/."""

from __future__ import annotations

import dataclasses
import gc
import operator
import pickle
import subprocess
import sys
import threading

import jax
import jax.numpy as jnp
import jax.tree_util as JTU
import numpy as np
import oxtree
import oxtree._jax_registry as jax_registry
import oxtree.jax as oxjax
import oxtree.tree_util as OTU
import pytest


@pytest.fixture
def describe_calls(monkeypatch: pytest.MonkeyPatch) -> list[type]:
    """Records every type the core asks JAX's registry about."""
    calls: list[type] = []
    real = jax_registry.describe

    def counting(cls: type) -> object:
        calls.append(cls)
        return real(cls)

    monkeypatch.setattr(jax_registry, "describe", counting)
    return calls


def test_a_leaf_type_is_asked_about_once(describe_calls: list[type]) -> None:
    class Opaque:
        pass

    trees = [[Opaque(), np.float32(1.0)], (Opaque(),), {"a": Opaque()}]
    for _ in range(50):
        for tree in trees:
            assert len(OTU.tree_leaves(tree)) == len(JTU.tree_leaves(tree))
    assert describe_calls.count(Opaque) == 1
    assert describe_calls.count(np.float32) <= 1


def test_registered_with_jax_after_being_a_leaf() -> None:
    class Later:
        def __init__(self, x: object) -> None:
            self.x = x

    obj = Later(1)
    assert OTU.tree_leaves([obj]) == [obj]
    JTU.register_pytree_node(Later, lambda o: ((o.x,), None), lambda _, c: Later(*c))
    # The size of JAX's registry changed: the cached "leaf" is stale at the next call.
    assert OTU.tree_leaves([obj]) == JTU.tree_leaves([obj]) == [1]
    assert OTU.tree_map(lambda v: v + 1, obj).x == 2


def test_class_defined_in_a_function_each_time() -> None:
    def make(static: bool) -> type:
        @dataclasses.dataclass
        class Box:
            a: object
            b: object

        if static:
            return JTU.register_dataclass(Box, data_fields=["a"], meta_fields=["b"])
        return JTU.register_dataclass(Box, data_fields=["a", "b"], meta_fields=[])

    for i in range(20):
        cls = make(static=i % 2 == 0)
        tree = cls(1, 2)
        assert OTU.tree_leaves(tree) == JTU.tree_leaves(tree)
        assert repr(OTU.tree_structure(tree)) == repr(JTU.tree_structure(tree))
        del cls, tree
        gc.collect()


def test_oxtree_registration_comes_first() -> None:
    class Both:
        def __init__(self, a: object, b: object) -> None:
            self.a, self.b = a, b

    JTU.register_pytree_node(Both, lambda o: ((o.a, o.b), None), lambda _, c: Both(*c))
    OTU.register_pytree_node(Both, lambda o: ((o.b,), o.a), lambda a, c: Both(a, *c))
    obj = Both(1, 2)
    assert JTU.tree_leaves(obj) == [1, 2]
    assert OTU.tree_leaves(obj) == [2]
    assert oxtree.tree_leaves(obj) == [2]


def test_main_face_keeps_jax_types_leaves_unless_switched_on() -> None:
    p = JTU.Partial(jnp.add, jnp.ones(2))
    assert oxtree.tree_leaves(p) == [p]
    assert oxtree.tree_leaves([p]) == [p]
    previous = oxtree.use_jax_registry(True)
    try:
        assert previous is False
        assert len(oxtree.tree_leaves(p)) == len(JTU.tree_leaves(p)) == 1
        assert oxtree.tree_leaves([p])[0] is JTU.tree_leaves(p)[0]
        assert oxtree.tree_structure(p).kind == oxtree.PyTreeKind.CUSTOM
    finally:
        assert oxtree.use_jax_registry(previous) is True
    assert oxtree.tree_leaves([p]) == [p]
    with pytest.raises(TypeError, match="expects a bool"):
        oxtree.use_jax_registry(1)  # type: ignore[arg-type]


def test_graph_flatten_and_partition_read_jax_registry() -> None:
    p = JTU.Partial(jnp.add, jnp.ones(2))
    shared = [p, p]
    leaves, gd = oxtree.graph_flatten(shared, jax_registry=True)
    assert len(leaves) == 1
    out = oxtree.graph_unflatten(gd, leaves)
    assert out[0] is out[1]
    assert isinstance(out[0], JTU.Partial)
    assert oxtree.graph_flatten(shared)[0] == [p, p]  # the main face: a leaf, met twice
    arrays, rest = oxjax.partition({"p": p, "n": 3}, oxjax.is_array)
    assert isinstance(arrays["p"], JTU.Partial)
    assert arrays["p"].args[0] is p.args[0]
    assert rest["n"] == 3
    assert rest["p"].args == (None,)
    masked, _ = oxjax.partition({"p": p, "n": 3}, {"p": True, "n": False})
    assert masked["n"] is None
    assert masked["p"].args[0] is p.args[0]


def test_one_registration_per_type_across_threads() -> None:
    @JTU.register_pytree_with_keys_class
    class Keyed:
        def __init__(self, x: object) -> None:
            self.x = x

        def tree_flatten_with_keys(self) -> tuple[object, object]:
            return ((JTU.GetAttrKey("x"), self.x),), None

        @classmethod
        def tree_unflatten(cls, aux: object, children: object) -> Keyed:
            return cls(*children)  # type: ignore[misc]

    specs: list[object] = []
    barrier = threading.Barrier(4)

    def work() -> None:
        barrier.wait()
        specs.append(OTU.tree_structure([Keyed(1)]))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(specs) == 4
    assert all(s == specs[0] for s in specs)
    assert OTU.tree_flatten_with_path(Keyed(1))[0] == [((JTU.GetAttrKey("x"),), 1)]


def test_registered_only_in_jaxs_native_registry() -> None:
    class Raw:
        def __init__(self, a: object) -> None:
            self.a = a

    # Registered with the native registry directly, bypassing jax.tree_util's Python table.
    JTU.default_registry.register_node(Raw, lambda r: ((r.a,), "aux"), lambda aux, c: Raw(*c))
    obj = Raw(5)
    assert OTU.tree_leaves(obj) == JTU.tree_leaves(obj) == [5]
    rebuilt = OTU.tree_map(lambda v: v * 2, obj)
    assert isinstance(rebuilt, Raw)
    assert rebuilt.a == 10
    assert repr(OTU.tree_structure(obj)) == repr(JTU.tree_structure(obj))


def test_treedef_pickles_and_rebuilds_from_node_data() -> None:
    p = JTU.Partial(operator.add, 1.0)
    spec = OTU.tree_structure({"p": p})
    assert pickle.loads(pickle.dumps(JTU.tree_structure({"p": p}))) == JTU.tree_structure({"p": p})
    assert pickle.loads(pickle.dumps(spec)) == spec
    node = OTU.tree_structure(p)
    data = node.node_data()
    assert data is not None
    assert data[0] is JTU.Partial
    again = OTU.PyTreeDef.from_node_data_and_children(OTU.default_registry, data, node.children())
    assert again == node


def test_filter_jit_traces_the_arrays_of_a_jax_node() -> None:
    @dataclasses.dataclass
    class Params:
        w: jax.Array
        act: str = dataclasses.field(default="relu", metadata={"static": True})

    JTU.register_dataclass(Params)
    traces: list[int] = []

    @oxjax.filter_jit
    def f(p: Params, x: jax.Array) -> jax.Array:
        traces.append(1)
        assert isinstance(p.w, jax.core.Tracer)
        return p.w * x

    out = f(Params(jnp.ones(2)), jnp.float32(2.0))
    np.testing.assert_allclose(out, [2.0, 2.0])
    f(Params(jnp.zeros(2)), jnp.float32(3.0))
    assert len(traces) == 1


def test_a_process_without_jax() -> None:
    script = """
import sys
sys.modules['jax'] = None
import oxtree, oxtree.tree_util as tu
class Opaque: pass
o = Opaque()
assert tu.tree_leaves([o, {'b': 1, 'a': 2}]) == [o, 2, 1]
assert oxtree.tree_leaves([o]) == [o]
assert 'jax._src.tree_util' not in sys.modules
print('ok')
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_a_registered_dataclass_is_walked_natively() -> None:
    @dataclasses.dataclass
    class Pair:
        a: object
        b: object = dataclasses.field(default=0, metadata={"static": True})

    JTU.register_dataclass(Pair)
    # JAX's field lists are read from its registration (on every jax release the suite runs
    # on), so no Python function is called per node.
    assert jax_registry.describe(Pair)[:3] == ("dataclass", ("a",), ("b",))
    assert OTU.tree_leaves(Pair(1, 2)) == JTU.tree_leaves(Pair(1, 2)) == [1]


def test_jax_only_node_names_what_jax_alone_registers() -> None:
    """`_jax_only_node`: a node JAX registers and oxtree's global namespace does not; the
    builtin node kinds (JAX registers OrderedDict and defaultdict too) and leaves are not."""
    import collections

    from jax.tree_util import Partial
    from oxtree._core import _jax_only_node

    class JaxOnly:
        def __init__(self, x: object) -> None:
            self.x = x

    class Both(JaxOnly):
        pass

    class InNamespace(JaxOnly):
        pass

    for cls in (JaxOnly, Both, InNamespace):
        JTU.register_pytree_node(cls, lambda o: ((o.x,), None), lambda _, c, cls=cls: cls(*c))
    oxtree.register_pytree_node(Both, lambda o: ((o.x,), None), lambda _, c: Both(*c), namespace="")
    oxtree.register_pytree_node(
        InNamespace, lambda o: ((o.x,), None), lambda _, c: InNamespace(*c), namespace="ns"
    )
    try:
        point = collections.namedtuple("point", "x y")
        expected = {
            "a class only JAX registers": (JaxOnly(1), True),
            "jax.tree_util.Partial": (Partial(print), True),
            "a class oxtree registers globally too": (Both(1), False),
            "a class oxtree registers in a namespace only": (InNamespace(1), True),
            "OrderedDict": (collections.OrderedDict(a=1), False),
            "defaultdict": (collections.defaultdict(int), False),
            "a namedtuple": (point(1, 2), False),
            "a tuple": ((1, 2), False),
            "None": (None, False),
            "an array": (jnp.ones(2), False),
            "a function": (print, False),
            "a type": (int, False),
        }
        got = {name: _jax_only_node(value) for name, (value, _) in expected.items()}
        assert got == {name: want for name, (_, want) in expected.items()}
        # What the JAX face's walk does with each: a JAX-only node is taken apart.
        assert OTU.tree_leaves(JaxOnly(7)) == [7]
    finally:
        oxtree.unregister_pytree_node(Both, namespace="")
        oxtree.unregister_pytree_node(InNamespace, namespace="ns")
