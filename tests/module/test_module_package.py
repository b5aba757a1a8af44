"""oxtree.module and oxtree.jax as packages: what the split into submodules must keep.

Pickles made before it still load (they name `oxtree.module.Module`, `oxtree.module._Layout`,
`oxtree.module._ModuleDef`, `oxtree.jax._FilterJit`, ...), and the public names keep their
home; the one array rule (`oxtree._arrays`) serves Modules and the filtered transforms.
"""

from __future__ import annotations

import base64
import operator
import pickle

import jax
import jax.numpy as jnp
import numpy as np
import oxtree
import oxtree.jax as oxjax
import pytest
from oxtree import Kind, Module

# A pickle made by oxtree before oxtree.module and oxtree.jax were packages, of:
#   m = Module(); m.register_parameter("w", [1.0, 2.0]); m.register_state("n", 3)
#   m.act = "relu"; m.sub = Module(); m.sub.register_parameter("b", 0.5)
#   {"module": m, "spec": oxtree.tree_structure(m),
#    "kinds": (Kind.PARAMETER, Kind.STATE, Kind.MODULE, Kind.OTHERS),
#    "jit": oxjax.filter_jit(operator.neg), "carry": oxjax.Carry,
#    "layout": m._oxtree_def.layout, "def": m._oxtree_def}
# pickled with protocol 4.
OLD_PICKLE = base64.b64decode(
    "gASVHgMAAAAAAAB9lCiMBm1vZHVsZZSMDW94dHJlZS5tb2R1bGWUjAZNb2R1bGWUk5QpgZR9lCiMCHRyYWluaW5nlIiMAXeU"
    "XZQoRz/wAAAAAAAAR0AAAAAAAAAAZYwBbpRLA4wDYWN0lIwEcmVsdZSMA3N1YpRoBCmBlH2UKGgHiIwBYpRHP+AAAAAAAAB1"
    "fZSMC19veHRyZWVfZGVmlGgCjApfTW9kdWxlRGVmlJOUaAKMB19MYXlvdXSUk5RoEGgCjARLaW5klJOUjAlwYXJhbWV0ZXKU"
    "hZRSlIaUhZSFlFKUfZRoB4hzhpRSlHOGlGJ1fZRoEmgUaBZoCGgbhpRoCmgYjAVzdGF0ZZSFlFKUhpRoDWgYaAGFlFKUhpSH"
    "lIWUUpR9lChoC2gMaAeIdYaUUpRzhpRijARzcGVjlIwMb3h0cmVlLl9jb3JllIwRX3JlYnVpbGRfdHJlZXNwZWOUk5QoSwGJ"
    "jACUKChLAUsATk5OTk50lChLAUsATk5OTk50lChLBEsCTk5OTk50lChLAUsATk5OTk50lChLAUsATk5OTk50lChLAEsBaCJO"
    "TmgEjAZveHRyZWWUjApHZXRBdHRyS2V5lJOUaBCFlFKUhZR0lChLAEsDaDJOTmgEaEBoCIWUUpRoQGgKhZRSlGhAaA2FlFKU"
    "h5R0lHSUjAZvcHRyZWWUdJSFlFKUjAVraW5kc5QoaBtoKGgraBiMBm90aGVyc5SFlFKUdJSMA2ppdJSMCm94dHJlZS5qYXiU"
    "jApfRmlsdGVySml0lJOUjAlfb3BlcmF0b3KUjANuZWeUk5SMBG5vbmWUaDiHlFKUfZQojANfZm6UaF2MB19kb25hdGWUaF6M"
    "Cl9uYW1lc3BhY2WUaDiMCl9fbW9kdWxlX1+UaFuMCF9fbmFtZV9flIwDbmVnlIwMX19xdWFsbmFtZV9flIwDbmVnlIwHX19k"
    "b2NfX5SMC1NhbWUgYXMgLWEulIwLX193cmFwcGVkX1+UaF11YowFY2FycnmUjApveHRyZWUuamF4lIwFQ2FycnmUk5SMBmxh"
    "eW91dJRoL4wDZGVmlGgydS4="
)


# A pickle made by oxtree while `_ModuleDef` was a Python class (before the core held it), of:
#   m = Module(); m.register_parameter("w", [1.0, 2.0]); m.register_state("n", 3)
#   m.act = "relu"; m.sizes = [4, 5]; m.sub = Module(); m.sub.register_parameter("b", 0.5)
#   {"module": m, "spec": oxtree.tree_structure(m), "def": m._oxtree_def,
#    "stale": m._oxtree_def.layout.stale}
# pickled with protocol 4.
PYTHON_DEF_PICKLE = base64.b64decode(
    "gASVMQIAAAAAAAB9lCiMBm1vZHVsZZSMDW94dHJlZS5tb2R1bGWUjAZNb2R1bGWUk5QpgZR9lCiMCHRyYWluaW5nlIiMAXeU"
    "XZQoRz/wAAAAAAAAR0AAAAAAAAAAZYwBbpRLA4wDYWN0lIwEcmVsdZSMBXNpemVzlF2UKEsESwVljANzdWKUaAQpgZR9lCho"
    "B4iMAWKURz/gAAAAAAAAdX2UjAtfb3h0cmVlX2RlZpRoAowKX01vZHVsZURlZpSTlGgCjAdfTGF5b3V0lJOUaBJoAowES2lu"
    "ZJSTlIwJcGFyYW1ldGVylIWUUpSGlIWUhZRSlH2UaAeIc4aUUpRzhpRidX2UaBRoFmgYaAhoHYaUaApoGowFc3RhdGWUhZRS"
    "lIaUaA9oGmgBhZRSlIaUh5SFlFKUfZQoaAtoDGgNaA5oB4h1hpRSlHOGlGKMBHNwZWOUjAxveHRyZWUuX2NvcmWUjBFfcmVi"
    "dWlsZF90cmVlc3BlY5STlChLAYmMAJQoKEsBSwBOTk5OTnSUKEsBSwBOTk5OTnSUKEsESwJOTk5OTnSUKEsBSwBOTk5OTnSU"
    "KEsBSwBOTk5OTnSUKEsASwFoJE5OaASMBm94dHJlZZSMCkdldEF0dHJLZXmUk5RoEoWUUpSFlHSUKEsASwNoNE5OaARoQmgI"
    "hZRSlGhCaAqFlFKUaEJoD4WUUpSHlHSUdJSMBm9wdHJlZZR0lIWUUpSMA2RlZpRoNIwFc3RhbGWUaBZoMU6GlFKUdS4="
)


def _made_now() -> Module:
    m = Module()
    m.register_parameter("w", [1.0, 2.0])
    m.register_state("n", 3)
    m.act = "relu"
    m.sub = Module()
    m.sub.register_parameter("b", 0.5)
    return m


def test_a_pickle_made_before_the_split_loads() -> None:
    for name in (b"oxtree.module", b"_Layout", b"_ModuleDef", b"oxtree.jax", b"_FilterJit"):
        assert name in OLD_PICKLE  # what the pickle names
    old = pickle.loads(OLD_PICKLE)
    now = _made_now()
    assert type(old["module"]) is Module
    assert oxtree.tree_leaves(old["module"]) == oxtree.tree_leaves(now)
    assert dict(old["module"].name_to_kind) == dict(now.name_to_kind)
    assert old["module"].act == "relu"
    assert old["spec"] == oxtree.tree_structure(now)
    assert old["spec"].unflatten([1, 2, 3, 4]).sub.b == 4
    assert old["kinds"] == (Kind.PARAMETER, Kind.STATE, Kind.MODULE, Kind.OTHERS)
    assert old["layout"] == now._oxtree_def.layout
    assert old["def"] == oxtree.tree_structure(now).node_data()
    assert old["jit"](2) == -2
    assert old["carry"] is oxjax.Carry


def test_a_pickle_of_the_python_module_def_loads() -> None:
    assert b"_ModuleDef" in PYTHON_DEF_PICKLE
    old = pickle.loads(PYTHON_DEF_PICKLE)
    now = _made_now()
    now.sizes = [4, 5]
    spec = oxtree.tree_structure(now)
    assert type(old["def"]) is oxtree.module._ModuleDef
    assert isinstance(old["def"], oxtree._core._ModuleDef)
    assert old["def"] == spec.node_data()
    assert hash(old["def"]) == hash(spec.node_data())
    assert old["def"].others == {"act": "relu", "sizes": [4, 5], "training": True}
    assert old["stale"] == now._oxtree_def.layout.stale
    assert old["stale"].others is None
    assert old["spec"] == spec
    assert type(old["module"]) is Module
    assert oxtree.tree_structure(old["module"]) == spec
    assert oxtree.tree_leaves(old["module"]) == oxtree.tree_leaves(now)
    out = old["spec"].unflatten([1, 2, 3, 4])
    assert (out.w, out.n, out.sub.b, out.sizes) == ([1, 2], 3, 4, [4, 5])


def test_new_pickles_name_the_public_modules() -> None:
    data = pickle.dumps({"spec": oxtree.tree_structure(_made_now()), "jit": oxjax.filter_jit(abs)})
    assert b"oxtree.module" in data
    assert b"oxtree.jax" in data
    assert b"oxtree.module._" not in data  # no submodule
    assert b"oxtree.jax._" not in data
    again = pickle.loads(data)
    assert again["spec"] == oxtree.tree_structure(_made_now())
    assert again["jit"](-3) == 3


def test_public_names_keep_their_home() -> None:
    import oxtree.module as om

    for name in ("Kind", "Module", "OfKind", "OfType", "PathContains", "All", "AnyOf", "Not"):
        assert getattr(om, name).__module__ == "oxtree.module", name
    assert om.ModulePath.__module__ == "oxtree.module"
    assert om.Parameter.__module__ == om.State.__module__ == "oxtree.module"
    for name in oxjax.__all__:
        assert getattr(oxjax, name).__module__ == "oxtree.jax", name
    assert oxtree.Module is om.Module
    # What oxtree.jax offered besides __all__ (what the transforms flatten with) stays.
    assert oxjax.graph_unflatten is oxtree.graph_unflatten
    assert oxjax.GraphDef is oxtree.GraphDef
    assert oxjax.graph_flatten({"a": [1]})[0] == [1]
    assert repr(oxjax.Carry) == "Carry"


# The one array rule: an instance of a JAX or NumPy array type (a NumPy scalar of a number or
# bool type included). Modules used to refuse anything with a shape and a dtype as
# configuration; they now refuse what filter_jit traces, and nothing else.
@pytest.mark.parametrize("value", [jnp.ones(2), np.ones(2), jnp.zeros((2, 2), jnp.int32)], ids=type)
def test_a_module_refuses_an_array_as_configuration(value: object) -> None:
    m = Module()
    with pytest.raises(TypeError, match=r"Module\.x holds an array .* but is not registered"):
        m.x = value
    assert oxjax.is_array(value)


@pytest.mark.parametrize(
    "value", [np.str_("relu"), jax.ShapeDtypeStruct((2, 3), jnp.float32)], ids=type
)
def test_a_module_keeps_a_shaped_non_array_as_configuration(value: object) -> None:
    # A np.str_ is a string and a ShapeDtypeStruct a hashable description: both have a shape
    # and a dtype, neither is an array, and filter_jit keeps them static.
    m = Module()
    m.x = value
    assert oxtree.tree_leaves(m) == []
    assert oxtree.tree_structure(m).node_data().others["x"] is value
    assert not oxjax.is_array(value)
    assert oxjax.filter_jit(lambda v: v)(value) is value


def test_an_abstract_module_still_checks_shapes_when_it_loads_arrays() -> None:
    # Its ShapeDtypeStruct leaves are no arrays, but stand for them (is_shaped): loading
    # arrays of another shape into it is refused, as into the module it describes.
    class Linear(Module):
        def __init__(self) -> None:
            self.register_parameter("w", jnp.zeros((2, 3)))

    abstract = oxjax.filter_eval_shape(Linear)
    assert isinstance(abstract.w, jax.ShapeDtypeStruct)
    assert abstract.load_state_dict({"w": jnp.ones((2, 3))}).w.shape == (2, 3)
    with pytest.raises(ValueError, match=r"w: expected float32\[2, 3\], got float32\[3, 2\]"):
        abstract.load_state_dict({"w": jnp.ones((3, 2))})


def test_the_array_rule_never_imports_jax_or_numpy() -> None:
    import subprocess
    import sys

    code = (
        "import sys; from oxtree._arrays import is_array, is_shaped\n"
        "assert not is_array(1.0) and not is_shaped('a')\n"
        "print(sorted(m for m in ('jax', 'numpy') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
    assert operator.not_(oxjax.is_array("a"))
