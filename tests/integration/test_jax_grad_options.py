"""oxtree.jax.filter_grad and filter_value_and_grad with jax.grad's options: argnums,
holomorphic, allow_int (has_aux and namespace are covered with the rest of oxtree.jax)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import oxtree.jax as oxjax
import pytest
from oxtree import Module


class Linear(Module):
    w: Any
    b: Any

    def __init__(self, w: Any, b: Any) -> None:
        self.register_parameter("w", w)
        self.register_parameter("b", b)


def loss(layer: Any, x: Any, scale: Any) -> Any:
    return jnp.sum(layer.w * x + layer.b) * scale


def args() -> tuple[Any, ...]:
    return Linear(jnp.array([1.0, 2.0]), jnp.float32(0.5)), jnp.array([3.0, -1.0]), 2.0


def test_argnums_int_differentiates_that_argument_only() -> None:
    layer, x, scale = args()
    g = oxjax.filter_grad(loss, argnums=1)(layer, x, scale)
    expected = jax.grad(lambda x: loss(layer, x, scale))(x)
    np.testing.assert_allclose(g, expected)  # the structure of argument 1: one array
    assert isinstance(g, jax.Array)


def test_argnums_sequence_gives_a_tuple_of_trees() -> None:
    layer, x, scale = args()
    value, (g_layer, g_x) = oxjax.filter_value_and_grad(loss, argnums=(0, 1))(layer, x, scale)
    exp_value, (ew, eb, ex) = jax.value_and_grad(
        lambda w, b, x: loss(Linear(w, b), x, scale), argnums=(0, 1, 2)
    )(layer.w, layer.b, x)
    assert float(value) == float(exp_value)
    assert isinstance(g_layer, Linear)
    np.testing.assert_allclose(g_layer.w, ew)
    np.testing.assert_allclose(g_layer.b, eb)
    np.testing.assert_allclose(g_x, ex)
    # a one-element sequence gives a one-element tuple, as in jax.grad
    (only,) = oxjax.filter_grad(loss, argnums=[1])(layer, x, scale)
    np.testing.assert_allclose(only, ex)
    # the order of argnums is the order of the tuple
    g_x2, g_layer2 = oxjax.filter_grad(loss, argnums=(1, 0))(layer, x, scale)
    np.testing.assert_allclose(g_x2, ex)
    np.testing.assert_allclose(g_layer2.w, ew)


def test_argnums_sequence_keeps_an_object_shared_between_arguments() -> None:
    shared = [jnp.float32(3.0)]
    g_a, g_b = oxjax.filter_grad(lambda a, b: a[0] * b[0], argnums=(0, 1))(shared, shared)
    assert g_a is g_b  # one object in the arguments, one in the gradients
    assert float(g_a[0]) == 6.0  # d(w*w)/dw, accumulated over both uses


def test_argnums_writes_back_changes_to_the_differentiated_arguments() -> None:
    state, params = {"count": jnp.int32(0)}, {"w": jnp.float32(2.0)}

    def step(state: Any, params: Any) -> Any:
        state["count"] = state["count"] + 1
        params["seen"] = "yes"
        return params["w"] ** 2

    g = oxjax.filter_grad(step, argnums=1)(state, params)
    assert float(g["w"]) == 4.0
    assert params["seen"] == "yes"  # argument 1 was a copy: its change is written back
    assert int(state["count"]) == 1  # argument 0 was passed as it is


def test_keyword_arguments_are_never_differentiated() -> None:
    g = oxjax.filter_grad(lambda a, *, b: a * b)(jnp.float32(2.0), b=jnp.float32(5.0))
    assert float(g) == 5.0


def test_holomorphic() -> None:
    z = {"z": jnp.complex64(1.0 + 2.0j), "tag": "c"}
    g = oxjax.filter_grad(lambda t: t["z"] ** 2, holomorphic=True)(z)
    np.testing.assert_allclose(g["z"], jax.grad(lambda v: v**2, holomorphic=True)(z["z"]))
    assert g["tag"] is None
    bad = {"z": jnp.complex64(1.0j), "w": jnp.float32(1.0)}
    with pytest.raises(
        TypeError,
        match=r"filter_grad with holomorphic=True differentiates complex leaves only; the leaf "
        r"at args\[0\]\['w'\] is float32",
    ):
        oxjax.filter_grad(lambda t: t["z"] * t["w"], holomorphic=True)(bad)
    # without holomorphic, a complex input is refused by JAX, as jax.grad refuses it for a
    # complex output
    with pytest.raises(TypeError, match=r"real-valued outputs"):
        oxjax.filter_grad(lambda t: t["z"] ** 2)(z)


def test_allow_int_differentiates_integer_arrays_with_float0_gradients() -> None:
    p = {"w": jnp.float32(2.0), "n": jnp.int32(3), "flag": np.bool_(True), "k": 4}

    def f(p: Any) -> Any:
        return p["w"] * p["n"]

    g = oxjax.filter_grad(f, allow_int=True)(p)
    assert float(g["w"]) == 3.0
    assert g["n"].dtype == jax.dtypes.float0
    assert g["flag"].dtype == jax.dtypes.float0
    assert g["k"] is None  # a Python int is no array: static, as always
    expected = jax.grad(lambda n: jnp.float32(2.0) * n, allow_int=True)(jnp.int32(3))
    assert g["n"].dtype == expected.dtype
    plain = oxjax.filter_grad(f)(p)
    assert plain["n"] is None
    assert plain["flag"] is None


def test_decorator_form_takes_the_options() -> None:
    @oxjax.filter_value_and_grad(argnums=(1,), has_aux=True)
    def f(a: Any, b: Any) -> Any:
        return a * b, "aux"

    (value, aux), (g,) = f(jnp.float32(2.0), jnp.float32(3.0))
    assert (float(value), aux, float(g)) == (6.0, "aux", 2.0)
    assert f.__name__ == "f"


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"argnums": "0"}, TypeError, r"filter_grad: argnums must be an int or a sequence of ints"),
        ({"argnums": (0, 1.0)}, TypeError, r"filter_grad: argnums must be an int or a sequence"),
        ({"argnums": True}, TypeError, r"filter_grad: argnums must be an int or a sequence"),
        ({"argnums": ()}, ValueError, r"filter_grad: argnums=\(\) differentiates nothing"),
        ({"argnums": (0, -1)}, ValueError, r"filter_grad: argnums must be positions .* got -1"),
        ({"has_aux": 1}, TypeError, r"filter_grad: has_aux must be a bool, got int: 1"),
        ({"holomorphic": "no"}, TypeError, r"filter_grad: holomorphic must be a bool"),
        ({"allow_int": None}, TypeError, r"filter_grad: allow_int must be a bool"),
        ({"namespace": 1}, TypeError, r"filter_grad: namespace must be a str, got int"),
    ],
)
def test_bad_options_are_refused_when_the_function_is_made(
    kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        oxjax.filter_grad(loss, **kwargs)
    with pytest.raises(error, match=message.replace("filter_grad", "filter_value_and_grad")):
        oxjax.filter_value_and_grad(loss, **kwargs)


def test_argnums_past_the_call_s_arguments_is_refused_and_nothing_changes() -> None:
    layer, x, _ = args()
    w = layer.w
    with pytest.raises(
        TypeError,
        match=r"filter_grad: differentiating with respect to argnums=\(0, 2\) needs at least 3 "
        r"positional arguments, but the call passed 2",
    ):
        oxjax.filter_grad(loss, argnums=(0, 2))(layer, x)
    assert layer.w is w
