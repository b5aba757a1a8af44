"""Layout annotations, oxtree.sharding and filter_jit's jax.jit options.

The checks on 8 host devices run in a subprocess (XLA's device count is read when JAX
starts): eight_devices.py, one record per check. Two processes joined by jax.distributed run
two_processes.py. The rest runs here, on this process's devices.
"""

from __future__ import annotations

import json
import operator
import os
import pickle
import socket
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any

import jax
import jax.numpy as jnp
import numpy as np
import oxtree
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from oxtree import Axes, Kind, Module, Parameter, State
from oxtree.jax import filter_jit
from oxtree.sharding import (
    current_axis_rules,
    filter_shard,
    logical_axis_rules,
    named_shardings,
    partition_specs,
)

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
EIGHT_CHECKS = [
    "annotations_in_treedef",
    "data_parallel",
    "model_parallel",
    "data_and_model_parallel",
    "out_shardings_and_write_back",
    "shared_parameter_sharded_once",
    "filter_shard_in_trace",
    "explicit_mesh",
    "rank_mismatch_error",
    "prefix_error_names_path",
    "checkpoint_reshard",
    "static_and_donate_argnums",
]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "python"), env.get("PYTHONPATH", "")])
    return env


_EIGHT: dict[str, Any] = {}


def _eight_device_records() -> dict[str, Any]:
    if not _EIGHT:
        proc = subprocess.run(
            [sys.executable, str(HERE / "eight_devices.py")],
            capture_output=True,
            text=True,
            timeout=240,
            env=_env(),
            check=False,
        )
        records = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("[")]
        _EIGHT.update({name: (ok, detail) for name, ok, detail in records})
        _EIGHT["_stderr"] = proc.stderr[-3000:]
    return _EIGHT


@pytest.mark.parametrize("check", EIGHT_CHECKS)
def test_on_eight_devices(check: str) -> None:
    records = _eight_device_records()
    if check not in records:
        pytest.fail(f"{check} did not run; the subprocess said:\n{records['_stderr']}")
    ok, detail = records[check]
    assert ok, detail


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_two_processes_train_on_global_arrays() -> None:
    port = _free_port()
    script = str(HERE / "two_processes.py")
    procs = [
        subprocess.Popen(
            [sys.executable, script, str(port), str(i)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(),
        )
        for i in (0, 1)
    ]
    try:
        outputs = [p.communicate(timeout=180) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    reference = subprocess.run(
        [sys.executable, script, "0", "-1"],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(),
        check=False,
    )
    records = {}
    for out, err in [*outputs, (reference.stdout, reference.stderr)]:
        found = [json.loads(line) for line in out.splitlines() if line.startswith('["loss"')]
        assert found, err[-2000:]
        records[found[0][1]] = found[0][2:]
    (loss0, kept0), (loss1, kept1), (single, _) = records[0], records[1], records[-1]
    assert loss0 == loss1
    assert kept0
    assert kept1
    np.testing.assert_allclose(loss0, single, rtol=1e-5)
    assert loss0[-1] < loss0[0]


# ---------------------------------------------------------------------------------------------
# On this process's devices
# ---------------------------------------------------------------------------------------------


class Dense(Module):
    w: Annotated[Parameter[jax.Array], Axes("embed", "mlp")]
    count: State[jax.Array]

    def __init__(self) -> None:
        self.w = jnp.ones((2, 4))
        self.count = jnp.zeros((), jnp.int32)
        self.register_parameter("b", jnp.zeros(4), sharding=P("mlp"))


def _mesh() -> Any:
    return jax.make_mesh((1,), ("mlp",), devices=jax.devices()[:1])


def test_axes_are_in_the_treedef() -> None:
    d = Dense()
    assert d.name_to_axes == {"w": Axes("embed", "mlp"), "b": Axes("mlp")}
    spec = oxtree.tree_structure(d)
    assert "w: PARAMETER Axes('embed', 'mlp')" in repr(spec)
    other = Dense()
    other._register_kind("extra", jnp.ones(3), Kind.PARAMETER)
    plain = Dense()
    plain._register_kind("extra", jnp.ones(3), Kind.PARAMETER, sharding=(None,))
    assert oxtree.tree_structure(other) != oxtree.tree_structure(plain)
    assert hash(oxtree.tree_structure(Dense())) == hash(spec)
    assert pickle.loads(pickle.dumps(spec)) == spec
    # tree_map and jax.jit keep the annotations
    assert oxtree.tree_map(lambda x: x, d).name_to_axes == d.name_to_axes
    assert jax.jit(lambda m: m)(d).name_to_axes == d.name_to_axes
    assert "w=f32[2,4]@('embed', 'mlp')" in repr(d)
    assert "f32[2,4]@('embed', 'mlp')" in oxtree.pretty.summary(d)


def test_partition_specs_and_rules() -> None:
    d = Dense()
    specs = partition_specs({"d": d, "step": 3})
    assert specs["d"].w == P("embed", "mlp")
    assert specs["d"].b == P("mlp")
    assert specs["d"].count == P()
    assert specs["step"] is None
    rules = [("embed", None), ("mlp", "model"), ("mlp", None)]
    with logical_axis_rules(rules):
        assert current_axis_rules() == tuple(rules)
        assert partition_specs(d).w == P(None, "model")
    assert current_axis_rules() == ()
    # the first rule whose mesh axis is still free
    tied = Axes("mlp", "mlp")
    m = Module()
    m.register_parameter("w", jnp.ones((2, 2)), sharding=tied)
    assert partition_specs(m, rules=rules).w == P("model", None)
    assert partition_specs(m, rules=[("mlp", ("a", "b"))]).w == P(("a", "b"), None)


class _StrSharding(Module):
    def __init__(self) -> None:
        self.register_parameter("w", jnp.ones(2), sharding="embed")


class _LongSharding(Module):
    def __init__(self) -> None:
        self.register_parameter("w", jnp.ones(2), sharding=("a", "b"))


class _ModuleSharding(Module):
    def __init__(self) -> None:
        self.register_kind("sub", Dense(), Kind.MODULE, sharding=("a",))


def test_bad_annotations() -> None:
    with pytest.raises(TypeError, match=r"_StrSharding\.w: sharding takes one entry per dimension"):
        _StrSharding()
    with pytest.raises(ValueError, match=r"_LongSharding\.w: the sharding Axes\('a', 'b'\) has 2"):
        _LongSharding()
    with pytest.raises(TypeError, match="each dimension's entry"):
        Axes(1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="MODULE's own attributes"):
        _ModuleSharding()


def test_named_shardings_errors_name_the_path() -> None:
    with pytest.raises(ValueError, match=r"tree\['d'\]\.w: the mesh has no axis 'embed'"):
        named_shardings({"d": Dense()}, _mesh())
    mesh = jax.make_mesh((1,), ("embed",), devices=jax.devices()[:1])
    with logical_axis_rules([("mlp", None)]):
        assert named_shardings(Dense(), mesh).w.spec == P("embed", None)
    with pytest.raises(TypeError, match=r"mesh must be a jax\.sharding\.Mesh"):
        named_shardings(Dense(), "mesh")


def test_filter_shard_outside_and_inside_a_trace() -> None:
    s = NamedSharding(_mesh(), P())
    tree = {"w": np.ones(3, np.float32), "name": "x", "n": None}
    out = filter_shard(tree, s)
    assert isinstance(out["w"], jax.Array)
    assert out["name"] == "x"
    assert out["n"] is None
    assert filter_jit(lambda t: filter_shard(t, {"w": s, "name": None, "n": None}))(tree)["w"].shape
    with pytest.raises(TypeError, match=r"shardings\['w'\]: a shardings tree holds"):
        filter_shard(tree, {"w": 3, "name": None, "n": None})


def test_filter_jit_static_argnames_and_errors() -> None:
    traces = []

    def f(x: jax.Array, *, scale: float) -> jax.Array:
        traces.append(scale)
        return x * scale

    g = filter_jit(f, static_argnames="scale")
    assert float(g(jnp.ones(()), scale=2.0)) == 2.0
    assert float(g(jnp.ones(()), scale=2.0)) == 2.0
    assert float(g(jnp.ones(()), scale=3.0)) == 3.0
    assert traces == [2.0, 3.0]
    with pytest.raises(TypeError, match=r"static argument kwargs\['scale'\] .* unhashable list"):
        g(jnp.ones(()), scale=[1.0])
    assert (
        pickle.loads(pickle.dumps(filter_jit(operator.mul, static_argnums=1)))(jnp.ones(1), 2.0)[0]
        == 2
    )
    with pytest.raises(ValueError, match="both static and donated"):
        filter_jit(f, static_argnums=0, donate_argnums=0)
    with pytest.raises(ValueError, match="not both"):
        filter_jit(f, donate="all", donate_argnums=0)
    with pytest.raises(TypeError, match="static_argnums must be an int"):
        filter_jit(f, static_argnums="x")


def test_filter_jit_donate_argnames_and_in_shardings_length() -> None:
    s = NamedSharding(_mesh(), P())

    @filter_jit(donate_argnames="b", in_shardings=(s, s))
    def add(a: jax.Array, b: jax.Array) -> jax.Array:
        return a + b

    a, b = jnp.ones(3), jnp.ones(3)
    assert float(add(a, b)[0]) == 2.0
    assert b.is_deleted()
    assert not a.is_deleted()
    with pytest.raises(ValueError, match="one entry per positional argument"):
        filter_jit(lambda a: a, in_shardings=(s, s))(jnp.ones(2))


def test_filter_jit_keep_unused_and_out_shardings_prefix_error() -> None:
    s = NamedSharding(_mesh(), P())
    f = filter_jit(lambda a, b: a, keep_unused=True)
    assert float(f(jnp.ones(()), jnp.ones(()))) == 1.0
    g = filter_jit(lambda a: {"x": a}, out_shardings={"x": {"y": s}})
    with pytest.raises(ValueError, match=r"out_shardings is no prefix"):
        g(jnp.ones(()))


def test_the_worked_example_runs() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "sharded_transformer.py"), "--steps", "4"],
        capture_output=True,
        text=True,
        timeout=240,
        env=_env(),
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0] == "8 devices"
    difference = float(next(x for x in lines if x.startswith("max difference")).split()[-1])
    assert difference < 1e-4
    assert "equal True, tied True" in lines[-1]
