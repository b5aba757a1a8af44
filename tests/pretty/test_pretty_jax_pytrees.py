"""oxtree.pretty on pytrees that JAX registers and oxtree does not (equinox modules, flax.struct
dataclasses, NNX States): display always reads JAX's registry, so they show their fields and
arrays, static fields included, rather than one opaque leaf."""

from __future__ import annotations

import io
from typing import Any

import pytest

eqx = pytest.importorskip("equinox")
flax_struct = pytest.importorskip("flax.struct")
try:
    from flax import nnx
except (ImportError, AttributeError):  # flax 0.12.8's nnx does not import with jax 0.12
    nnx = None
# `make test-matrix` pairs the pinned flax with a newer jax, where `flax.nnx` fails to import.
needs_nnx = pytest.mark.skipif(nnx is None, reason="flax.nnx does not import with this jax")

import jax  # noqa: E402 (after the skips: a venv without equinox or flax skips this file)
import jax.numpy as jnp  # noqa: E402
import oxtree  # noqa: E402
from oxtree import pretty  # noqa: E402
from oxtree._pretty_model import own_key  # noqa: E402


@flax_struct.dataclass
class Stats:
    mean: Any
    count: Any
    label: str = flax_struct.field(pytree_node=False, default="stats")


def linear(n_in: int = 2, n_out: int = 3, **kwargs: Any) -> Any:
    return eqx.nn.Linear(n_in, n_out, key=jax.random.PRNGKey(0), **kwargs)


def nnx_state(seed: int = 0) -> Any:
    return nnx.state(nnx.Linear(2, 3, rngs=nnx.Rngs(seed)))


LINEAR = "Linear(weight=f32[3,2], bias=f32[3], in_features=2, out_features=3, use_bias=True)"


# --------------------------------------------------------------------------------------------
# pformat / pprint


def test_equinox_module_shows_fields_arrays_and_static_fields() -> None:
    assert pretty.pformat(linear()) == LINEAR


def test_equinox_model_nested_with_functions_by_name() -> None:
    mlp = eqx.nn.MLP(2, 2, 4, 1, key=jax.random.PRNGKey(0))
    text = pretty.pformat(mlp)
    assert text.startswith(
        "MLP(\n  layers=(\n    Linear(weight=f32[4,2], bias=f32[4], in_features=2"
    )
    # jax.nn.relu is a custom_jvp object: by name, without its address.
    assert "  activation=<function relu>,\n" in text
    assert "0x" not in text
    assert "  width_size=4,\n" in text


def test_flax_struct_shows_data_and_static_fields() -> None:
    out = io.StringIO()
    pretty.pprint(Stats(jnp.zeros(3), jnp.zeros((), jnp.int32)), file=out)
    assert out.getvalue() == "Stats(mean=f32[3], count=i32[], label='stats')\n"


@needs_nnx
def test_nnx_state_shows_its_keys_in_braces() -> None:
    assert pretty.pformat(nnx_state()) == (
        "State({'bias': Param(value=f32[3]), 'kernel': Param(value=f32[2,3])})"
    )
    assert pretty.pformat(nnx_state(), width=40) == (
        "State({\n  'bias': Param(value=f32[3]),\n  'kernel': Param(value=f32[2,3]),\n})"
    )


def test_shared_equinox_module_prints_once() -> None:
    layer = linear()
    assert pretty.pformat([layer, layer], width=200) == f"[{LINEAR}, <ref tree[0]>]"


def test_the_main_face_setting_does_not_matter() -> None:
    previous = oxtree.use_jax_registry(False)
    try:
        assert pretty.pformat(linear()) == LINEAR
    finally:
        oxtree.use_jax_registry(previous)


# --------------------------------------------------------------------------------------------
# summary, tree_diff, view


@needs_nnx
def test_summary_counts_the_arrays_inside() -> None:
    layer = linear()
    assert pretty.summary({"a": layer, "b": layer, "s": nnx_state()}).splitlines() == [
        "path                 type             leaves  elements  bytes",
        "tree['a']            Linear                2         9     36",
        "tree['a'].weight     f32[3,2]              1         6     24",
        "tree['a'].bias       f32[3]                1         3     12",
        "tree['b']            <ref tree['a']>       -         -      -",
        "tree['s']            State                 2         9     36",
        "tree['s']['bias']    Param                 1         3     12",
        "tree['s']['kernel']  Param                 1         6     24",
        "total                                      4        18     72",
    ]


@needs_nnx
def test_tree_diff_names_fields_and_static_data() -> None:
    a = linear()
    b = eqx.tree_at(lambda lin: lin.bias, a, a.bias + 1)
    assert str(pretty.tree_diff(a, b)) == "no differences"
    assert str(pretty.tree_diff(a, b, leaves=True)).startswith(
        "tree.bias: f32[3] values differ in 3 of 3 elements"
    )
    diff = pretty.tree_diff(Stats(jnp.zeros(3), 0), Stats(jnp.zeros(3), 0, label="other"))
    assert [d.path for d in diff] == ["tree"]
    assert "aux data (('label', 'stats'),)" in diff[0].message
    assert "(('label', 'other'),)" in diff[0].message
    diff = pretty.tree_diff(nnx_state(0), nnx_state(1), leaves=True)
    assert [d.path for d in diff] == ["tree['kernel'].value"]


def test_view_html_shows_fields_and_static_fields() -> None:
    html = pretty.view(linear())._repr_html_()
    assert ">.weight</span>: " in html
    assert ">f32[3,2]</span>" in html
    assert ">in_features</span>" not in html  # static fields show in the row, as dataclasses'
    assert "(static)" in html
    assert html.count("<details") == 1


# --------------------------------------------------------------------------------------------
# Keys


def test_own_key_reads_jax_keys_as_oxtree_keys() -> None:
    tu = jax.tree_util
    assert own_key(tu.GetAttrKey("w")) == oxtree.GetAttrKey("w")
    assert type(own_key(tu.GetAttrKey("w"))) is oxtree.GetAttrKey
    assert own_key(tu.DictKey("k")) == oxtree.DictKey("k")
    assert own_key(tu.SequenceKey(2)) == oxtree.SequenceKey(2)
    assert own_key(tu.FlattenedIndexKey(1)) == oxtree.FlattenedIndexKey(1)
    mine = oxtree.GetAttrKey("x")
    assert own_key(mine) is mine
    assert own_key("raw") == "raw"
