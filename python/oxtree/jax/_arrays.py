"""Which leaves the filtered transforms trace or differentiate: :func:`is_array` (the one rule,
:mod:`oxtree._arrays`, which Modules follow too) and :func:`is_inexact_array`."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from oxtree._arrays import is_array


def is_inexact_array(x: Any) -> bool:
    """Whether ``x`` is an array leaf (see :func:`is_array`) of floating or complex dtype.

    >>> import jax.numpy as jnp
    >>> is_inexact_array(jnp.ones(2)), is_inexact_array(jnp.arange(2)), is_inexact_array(1.0)
    (True, False, False)
    >>> is_inexact_array(jax.random.key(0)), is_inexact_array(jax.random.PRNGKey(0))
    (False, False)
    """
    # JAX's issubdtype knows extended dtypes (a typed PRNG key's key<fry> is no number);
    # NumPy's raises on them.
    return is_array(x) and bool(jax.dtypes.issubdtype(x.dtype, np.inexact))
