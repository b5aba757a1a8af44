"""Modules with the tools around JAX: treescope renders them natively (named submodules,
leaf counts by kind, shared submodules marked), and orbax checkpoints save and restore them
directly or through their state dicts, ties kept."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
import oxtree.jax as oxjax
import pytest
import treescope
from oxtree import Kind, Module, Parameter

Stats = Kind.define("running_stats")


class Linear(Module):
    w: Parameter
    b: Parameter

    def __init__(self, key: Any, n_in: int, n_out: int) -> None:
        self.w = jax.random.normal(key, (n_in, n_out)) * 0.5
        self.b = jnp.zeros(n_out)
        self.n_out = n_out

    def __call__(self, x: Any) -> Any:
        return x @ self.w + self.b


class Net(Module):
    def __init__(self, key: Any) -> None:
        k1, k2 = jax.random.split(key)
        self.enc = Linear(k1, 3, 3)
        self.dec = self.enc  # tied
        self.layers = [Linear(k2, 3, 2)]
        self.register_state("steps", jnp.zeros((), jnp.int32))
        self.register_kind("mean", jnp.zeros(2), Stats)

    def __call__(self, x: Any) -> Any:
        h = self.layers[0](jnp.tanh(self.dec(jnp.tanh(self.enc(x)))))
        self.mean = 0.9 * self.mean + 0.1 * h.mean(0)
        self.steps = self.steps + 1
        return h


# --------------------------------------------------------------------------------------------
# treescope


def test_treescope_renders_a_module_in_constructor_form_with_counts() -> None:
    net = Net(jax.random.PRNGKey(0))
    text = treescope.render_to_text(net)
    lines = text.splitlines()
    # The whole graph's leaves by kind, the shared table once: 9 + 3 + 6 + 2 parameters.
    assert lines[0] == "Net(  # Param: 20 (80 B), State: 1 (4 B), Running Stats: 2 (8 B)"
    assert lines[1] == "  enc=Linear(  # Param: 12 (48 B)"
    # Tree attributes in registration order, then configuration.
    top = [line[2:].split("=")[0] for line in lines if re.match(r"^  \w+=", line)]
    assert top == ["enc", "dec", "layers", "steps", "mean", "training"]
    assert "n_out=3," in text


def test_treescope_marks_a_shared_submodule_at_each_place() -> None:
    net = Net(jax.random.PRNGKey(0))
    text = treescope.render_to_text(net)
    marks = [line for line in text.splitlines() if "# Repeated python obj at" in line]
    assert len(marks) == 2  # enc and dec are one object: marked at both places
    assert marks[0].startswith("  ),")  # unfolded at its first place (enc) ...
    assert marks[1].startswith("  dec=Linear(w=")  # ... and folded to one line at the next
    assert all(f"0x{id(net.enc):x}" in line for line in marks)
    unshared = treescope.render_to_text(net.layers[0])
    assert "Repeated" not in unshared


def test_treescope_paths_are_real_attributes_and_html_renders() -> None:
    net = Net(jax.random.PRNGKey(0))
    html = treescope.render_to_html(net, roundtrip_mode=False)
    assert html.startswith("<script>")
    assert "treescope-container" in html
    # A module with no array leaves has no count line; abstract leaves are counted.
    assert treescope.render_to_text(Module()) == "Module(training=True)"
    abstract = oxjax.filter_eval_shape(Net, jax.random.PRNGKey(0))
    assert "# Param: 20 (80 B)" in treescope.render_to_text(abstract).splitlines()[0]


# --------------------------------------------------------------------------------------------
# orbax


def train(net: Net, steps: int) -> Net:
    opt = optax.adam(1e-2)
    state = opt.init(net.parameters())
    x = jnp.linspace(-1.0, 1.0, 12).reshape(4, 3)

    @oxjax.filter_jit
    def step(net: Net, state: Any) -> Any:
        grads = oxjax.filter_grad(lambda m: jnp.mean(m(x) ** 2))(net)
        params = net.parameters()
        updates, state = opt.update(grads.select(Kind.PARAMETER), state, params)
        return net.update(optax.apply_updates(params, updates)), state

    for _ in range(steps):
        net, state = step(net, state)
    return net


def test_orbax_saves_a_trained_state_dict_and_restores_it_into_a_fresh_module(
    tmp_path: Path,
) -> None:
    trained = train(Net(jax.random.PRNGKey(0)), 3)
    assert int(trained.steps) == 3
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(tmp_path / "ckpt", trained.state_dict())
    fresh = Net(jax.random.PRNGKey(1))
    target = jax.tree_util.tree_map(ocp.utils.to_shape_dtype_struct, fresh.state_dict())
    with ocp.StandardCheckpointer() as checkpointer:
        restored = checkpointer.restore(tmp_path / "ckpt", target)
    loaded = fresh.load_state_dict(restored)
    assert loaded.enc is loaded.dec  # the tie is the module's own, not the checkpoint's
    assert set(restored) == set(trained.state_dict())
    for key, value in trained.state_dict().items():
        got = loaded.state_dict()[key]
        assert got.dtype == value.dtype, key
        np.testing.assert_array_equal(got, value, err_msg=key)
    # Training goes on from the restored module as from the original.
    np.testing.assert_allclose(train(loaded, 2).enc.w, train(trained, 2).enc.w, rtol=1e-6)


def test_orbax_restores_with_a_mismatched_target_only_through_a_clear_error(
    tmp_path: Path,
) -> None:
    trained = train(Net(jax.random.PRNGKey(0)), 1)
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(tmp_path / "ckpt", trained.state_dict(Kind.PARAMETER))
        restored = checkpointer.restore(tmp_path / "ckpt")
    fresh = Net(jax.random.PRNGKey(1))
    with pytest.raises(ValueError, match=r"Net.load_state_dict: missing keys \['steps', 'mean'\]"):
        fresh.load_state_dict(restored)
    partial = fresh.load_state_dict(restored, strict=False)
    np.testing.assert_array_equal(partial.enc.w, trained.enc.w)
    assert int(partial.steps) == 0


def _same_leaves(got: Module, want: Module) -> None:
    assert list(got.state_dict()) == list(want.state_dict())
    for key, value in want.state_dict().items():
        assert got.state_dict()[key].dtype == value.dtype, key
        np.testing.assert_array_equal(got.state_dict()[key], value, err_msg=key)


def test_orbax_saves_a_module_and_restores_it_into_its_abstract_version(tmp_path: Path) -> None:
    trained = train(Net(jax.random.PRNGKey(0)), 3)
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(tmp_path / "ckpt", trained)
    # The checkpoint names each leaf by its state-dict key, a tied one once.
    with ocp.StandardCheckpointer() as checkpointer:
        tree = checkpointer.metadata(tmp_path / "ckpt").item_metadata.tree
    assert sorted(tree) == sorted(trained.state_dict())
    assert "dec.w" not in tree
    assert tree["enc.w"].shape == (3, 3)
    abstract = oxjax.filter_eval_shape(Net, jax.random.PRNGKey(1))
    assert isinstance(abstract.enc.w, jax.ShapeDtypeStruct)
    with ocp.StandardCheckpointer() as checkpointer:
        restored = checkpointer.restore(tmp_path / "ckpt", abstract)
    assert type(restored) is Net
    assert type(restored.enc) is Linear
    assert restored.enc is restored.dec  # the tie comes back as one submodule
    assert restored.layers[0].n_out == 2  # configuration kept
    assert restored.training
    assert dict(restored.name_to_kind) == dict(trained.name_to_kind)
    _same_leaves(restored, trained)
    assert int(restored.steps) == 3
    # Training goes on from the restored module as from the original.
    np.testing.assert_allclose(train(restored, 2).enc.w, train(trained, 2).enc.w, rtol=1e-6)


def test_orbax_restores_a_module_into_a_concrete_module_and_its_state_dict(
    tmp_path: Path,
) -> None:
    trained = train(Net(jax.random.PRNGKey(0)), 2)
    fresh = Net(jax.random.PRNGKey(1))
    before = fresh.state_dict()
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(tmp_path / "module", trained)
        checkpointer.save(tmp_path / "dict", trained.state_dict())
    with ocp.StandardCheckpointer() as checkpointer:
        restored = checkpointer.restore(tmp_path / "module", fresh)
        # A module's checkpoint and its state dict's are one layout: each restores as the other.
        as_dict = checkpointer.restore(tmp_path / "module", fresh.state_dict())
        from_dict = checkpointer.restore(tmp_path / "dict", fresh)
    assert restored.enc is restored.dec
    assert from_dict.enc is from_dict.dec
    _same_leaves(restored, trained)
    _same_leaves(from_dict, trained)
    _same_leaves(fresh.load_state_dict(as_dict), trained)
    for key, value in before.items():  # the target is untouched
        np.testing.assert_array_equal(fresh.state_dict()[key], value, err_msg=key)


def test_orbax_refuses_a_mismatched_module_target_naming_the_keys(tmp_path: Path) -> None:
    # In a fresh interpreter: a restore orbax refuses halfway leaves its pending reads
    # (coroutines of an event loop it has closed) to be freed seconds later, each reporting
    # "Event loop is closed" as an unraisable exception that pytest pins on whichever test
    # is running then.
    here = Path(__file__).resolve().parent
    code = (
        f"import sys; sys.path[:0] = [{str(here)!r}, {str(here.parent)!r}]\n"
        "from pathlib import Path\n"
        "import test_module_tools\n"
        f"test_module_tools._check_orbax_refusals(Path({str(tmp_path)!r}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]


def _check_orbax_refusals(tmp_path: Path) -> None:
    trained = Net(jax.random.PRNGKey(0))
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(tmp_path / "ckpt", trained)
    untied = Net(jax.random.PRNGKey(1))
    untied.dec = Linear(jax.random.PRNGKey(2), 3, 3)  # the checkpoint has no dec.w of its own
    with (
        ocp.StandardCheckpointer() as checkpointer,
        pytest.raises(ValueError, match="structures do not match") as info,
    ):
        checkpointer.restore(tmp_path / "ckpt", untied)
    assert "dec.w" in str(info.value)
    assert "dec.b" in str(info.value)
    wider = Net(jax.random.PRNGKey(1))
    wider.layers = [Linear(jax.random.PRNGKey(2), 3, 4)]
    with ocp.StandardCheckpointer() as checkpointer, pytest.raises(ValueError, match="shape"):
        checkpointer.restore(tmp_path / "ckpt", wider)
    assert wider.layers[0].w.shape == (3, 4)
