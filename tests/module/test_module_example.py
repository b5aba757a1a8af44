"""The worked example (examples/transformer.py, docs/examples-transformer.md): its training
losses, parameters, batch statistics and dropout key match the same math written in plain
JAX on a dict of parameters, step by step, across an orbax checkpoint reload."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from oxtree import Kind

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "transformer.py"
_spec = importlib.util.spec_from_file_location("oxtree_example_transformer", SCRIPT)
assert _spec is not None
assert _spec.loader is not None
ex = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ex)

BatchStats = Kind.define("batch_stats")
LR = 3e-2


# --------------------------------------------------------------------------------------------
# The reference: the model's math on a dict of arrays, with jax.jit


def ref_forward(p: dict[str, Any], s: dict[str, Any], ids: Any, training: bool) -> Any:
    def lin(x: Any, name: str) -> Any:
        return x @ p[f"{name}.w"] + p[f"{name}.b"]

    table = p["embed.table"]
    x = table[ids] + p["pos"][: ids.shape[-1]]
    q, k, v = (lin(x, f"block.attn.{n}") for n in "qkv")
    scores = q @ jnp.swapaxes(k, -1, -2) / q.shape[-1] ** 0.5
    scores = jnp.where(jnp.tril(jnp.ones(scores.shape[-2:], bool)), scores, -1e9)
    x = x + lin(jax.nn.softmax(scores, axis=-1) @ v, "block.attn.o")
    h = lin(x, "block.up")
    s = dict(s)
    if training:
        flat = h.reshape(-1, h.shape[-1])
        mean, var = flat.mean(0), flat.var(0)
        s["block.norm.mean"] = 0.9 * s["block.norm.mean"] + 0.1 * mean
        s["block.norm.var"] = 0.9 * s["block.norm.var"] + 0.1 * var
    else:
        mean, var = s["block.norm.mean"], s["block.norm.var"]
    h = (h - mean) / jnp.sqrt(var + 1e-5) * p["block.norm.scale"] + p["block.norm.bias"]
    h = lin(jax.nn.gelu(h), "block.down")
    if training:
        s["block.drop.key"], sub = jax.random.split(s["block.drop.key"])
        keep = jax.random.bernoulli(sub, 0.9, h.shape)
        h = jnp.where(keep, h / 0.9, 0.0)
    return (x + h) @ table.T, s


def ref_loss(p: dict[str, Any], s: dict[str, Any], ids: Any, training: bool = True) -> Any:
    logits, s = ref_forward(p, s, ids[:, :-1], training)
    return optax.softmax_cross_entropy_with_integer_labels(logits, ids[:, 1:]).mean(), s


def ref_run(model: Any, steps: int) -> tuple[list[float], dict[str, Any], dict[str, Any]]:
    opt = optax.adam(LR)
    p = model.state_dict(Kind.PARAMETER)
    s = {k: v for k, v in model.state_dict().items() if k not in p}
    opt_state = opt.init(p)

    @jax.jit
    def step(p: Any, s: Any, opt_state: Any, ids: Any) -> Any:
        (loss, s), g = jax.value_and_grad(ref_loss, has_aux=True)(p, s, ids)
        updates, opt_state = opt.update(g, opt_state, p)
        return optax.apply_updates(p, updates), s, opt_state, loss

    losses = []
    data = ex.batches(0)
    for _ in range(steps):
        p, s, opt_state, loss = step(p, s, opt_state, next(data))
        losses.append(float(loss))
    return losses, p, s


# --------------------------------------------------------------------------------------------


def test_the_reference_reads_every_leaf_of_the_model() -> None:
    model = ex.TinyLM()
    sd = model.state_dict()
    assert set(sd) == set(model.state_dict(Kind.PARAMETER)) | {
        "block.norm.mean",
        "block.norm.var",
        "block.drop.key",
    }
    assert "head.table" not in sd  # tied: the table is one leaf, listed once
    assert model.name_to_kind["block"] is Kind.MODULE
    assert model.block.norm.name_to_kind["mean"] is BatchStats


def test_training_matches_plain_jax_across_a_checkpoint_reload(tmp_path: Path) -> None:
    steps, reload_at = 6, 3
    expected, p_ref, s_ref = ref_run(ex.TinyLM(), steps)

    opt = optax.adam(LR)
    model = ex.TinyLM()
    opt_state = opt.init(model.parameters())
    train_step = ex.make_step(opt)
    data = ex.batches(0)
    losses = []
    for step in range(steps):
        if step == reload_at:
            ex.save(str(tmp_path / "ckpt"), model, opt_state)
            model, opt_state = ex.load(str(tmp_path / "ckpt"), opt)
            assert model.head is model.embed
        before = model.block.drop.key
        model, opt_state, loss = train_step(model, opt_state, next(data))
        assert not np.array_equal(model.block.drop.key, before)  # the key moved on
        assert model.head is model.embed
        losses.append(float(loss))

    assert losses == pytest.approx(expected, rel=2e-5, abs=1e-6)
    assert losses[-1] < losses[0]
    got = model.state_dict()
    for name, value in p_ref.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-4, atol=1e-5, err_msg=name)
    np.testing.assert_array_equal(got["block.drop.key"], s_ref["block.drop.key"])
    for name in ("block.norm.mean", "block.norm.var"):
        np.testing.assert_allclose(got[name], s_ref[name], rtol=1e-4, atol=1e-5, err_msg=name)

    ids = next(ex.batches(1))
    eval_loss = ex.loss_fn(model.eval(), ids)
    ref_eval, _ = ref_loss(p_ref, s_ref, ids, training=False)
    assert float(eval_loss) == pytest.approx(float(ref_eval), rel=1e-4)


def test_the_forward_pass_writes_batch_stats_and_key_back_under_filter_jit() -> None:
    model = ex.TinyLM()
    mean, key = model.block.norm.mean, model.block.drop.key
    ex.make_step(optax.sgd(0.0))(
        model, optax.sgd(0.0).init(model.parameters()), next(ex.batches(0))
    )
    # The caller's model itself took the forward pass's in-place changes.
    assert not np.allclose(model.block.norm.mean, mean)
    assert not np.array_equal(model.block.drop.key, key)


def test_the_example_script_runs() -> None:
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--steps", "4"],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    ).stdout
    assert "reloaded from the checkpoint; tied: True" in out
    assert "loss ratio:" in out.splitlines()[-1]
