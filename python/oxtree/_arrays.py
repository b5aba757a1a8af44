"""What counts as an array leaf: one rule for the filtered transforms (which leaves are traced,
differentiated, written back) and for Modules (which values are refused as configuration),
decided without importing JAX or NumPy.

An array is an instance of a JAX array type (``jax.Array``, a tracer: a filtered transform
nests in another), ``np.ndarray``, or a NumPy scalar of a number or bool type. Other objects
with a ``shape`` and a ``dtype`` are not: a ``jax.ShapeDtypeStruct`` (hashable, static
configuration or the stand-in :func:`is_shaped` accepts), a ``np.str_`` (a string), an array
of another library. An instance of an array type exists only once its library is imported,
so the check reads the libraries already in ``sys.modules`` and never imports one.
"""

from __future__ import annotations

import sys
from typing import Any

# type -> whether it is an array type. The core reads it directly on filter_jit's warm path
# (see `oxtree.jax._jit`); `is_array_type` fills it.
_IS_ARRAY_TYPE: dict[type, bool] = {}


def _array_types() -> tuple[tuple[type, ...], tuple[type, ...], bool]:
    """The array types of the libraries loaded now, the NumPy scalar types that hold no number,
    and whether the answer is final (False while JAX is half imported)."""
    np = sys.modules.get("numpy")
    if np is None:  # JAX imports NumPy: neither is loaded, so no array exists
        return (), (), True
    arrays: tuple[type, ...] = (np.ndarray, np.generic)
    # NumPy's str_, bytes_ and void scalars (np.flexible) and object scalars hold no number.
    excluded = (np.flexible, np.object_)
    jax = sys.modules.get("jax")
    if jax is None:
        return arrays, excluded, True
    array = getattr(jax, "Array", None)
    core = getattr(jax, "core", None)
    tracer = getattr(core, "Tracer", None)
    if array is None or tracer is None:
        return arrays, excluded, False
    # Tracers pass `isinstance(x, jax.Array)` but are no subclasses of it.
    return (*arrays, array, tracer), excluded, True


def is_array_type(ty: type) -> bool:
    """Whether instances of ``ty`` are arrays (see the module docstring); cached per type."""
    found = _IS_ARRAY_TYPE.get(ty)
    if found is None:
        arrays, excluded, final = _array_types()
        found = issubclass(ty, arrays) and not issubclass(ty, excluded)
        if final:
            _IS_ARRAY_TYPE[ty] = found
    return found


def is_array(x: Any) -> bool:
    """Whether ``x`` is an array leaf: a JAX array (tracers included), a NumPy array or a
    NumPy scalar of a number or bool type (a ``np.str_`` is no array).

    >>> import jax.numpy as jnp, numpy as np
    >>> is_array(jnp.ones(2)), is_array(np.float32(1.0)), is_array(1.0), is_array('a')
    (True, True, False, False)
    """
    return is_array_type(type(x))


def is_shaped(x: Any) -> bool:
    """Whether ``x`` is an array or an abstract one, a ``jax.ShapeDtypeStruct`` (an array's
    shape and dtype, no data): what ``filter_eval_shape`` makes abstract, and what a Module
    compares by shape and dtype when its leaves are replaced (an abstract module, made by
    ``filter_eval_shape``, loading a checkpoint)."""
    if is_array_type(type(x)):
        return True
    jax = sys.modules.get("jax")
    struct = getattr(jax, "ShapeDtypeStruct", None)
    return struct is not None and isinstance(x, struct)
