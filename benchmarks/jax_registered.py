"""Workloads of types registered with JAX itself, for ``bench.py``'s "jax-registered" group.

Equinox modules, ``flax.struct`` dataclasses and Flax NNX's ``State`` register themselves with
``jax.tree_util``, not with oxtree. ``oxtree.tree_util`` is meant to treat them as nodes, exactly
as ``jax.tree_util`` does, so these trees are timed with ``oxtree.tree_util`` against
``jax.tree_util`` only, and ``jax.tree_util``'s own answers are the reference: the pure-Python
reference in ``bench.py`` cannot know what a library registered with JAX.

Workloads (each needs the library in brackets; without it the workload is skipped):

* ``eqx_mlp``        ``eqx.nn.MLP(8, 4, width_size=32, depth=2)`` [equinox]: three Linear
  layers' weights and biases, and the two activation functions (fields, so leaves)
* ``eqx_stack100``   an ``eqx.Module`` holding a list of 100 ``eqx.nn.Linear(8, 8)`` [equinox]
* ``flax_struct1k``  ``flax.struct`` dataclasses nested three deep (a net of 10 blocks, each of
  24 four-array layers and two norms, with static fields): 1,000 leaves [flax]
* ``nnx_state``      the ``nnx.State`` of ``nnx.split(model)`` for a small transformer [flax]: an
  embedding, two blocks (LayerNorm, 2-head ``nnx.MultiHeadAttention``, LayerNorm, a two-Linear
  MLP) at width 16, and an output Linear

This module never imports equinox or flax until a workload is built, and never imports
``bench``: ``bench`` wraps what :func:`case` returns in its own ``Case`` and times it.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

#: The ops this group times.
OPS: tuple[str, ...] = ("flatten", "unflatten", "map1")


def _same_objects(a: Sequence[Any], b: Sequence[Any]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


# --------------------------------------------------------------------------------------
# Trees
# --------------------------------------------------------------------------------------


def _key(seed: int) -> Any:
    import jax

    return jax.random.PRNGKey(seed)


def make_eqx_mlp() -> Any:
    import equinox as eqx

    return eqx.nn.MLP(in_size=8, out_size=4, width_size=32, depth=2, key=_key(0))


@functools.cache
def _eqx_stack_class() -> type:
    import equinox as eqx

    class Stack(eqx.Module):
        layers: list[Any]

    return Stack


def make_eqx_stack100(n: int = 100) -> Any:
    import equinox as eqx
    import jax

    keys = jax.random.split(_key(1), n)
    return _eqx_stack_class()([eqx.nn.Linear(8, 8, key=k) for k in keys])


@functools.cache
def _flax_struct_classes() -> tuple[type, type, type, type]:
    from flax import struct

    @struct.dataclass
    class Dense:
        kernel: Any
        bias: Any
        scale: Any
        shift: Any
        name: str = struct.field(pytree_node=False, default="dense")

    @struct.dataclass
    class Norm:
        scale: Any
        bias: Any
        eps: float = struct.field(pytree_node=False, default=1e-6)

    @struct.dataclass
    class Block:
        layers: tuple[Any, ...]
        norm1: Any
        norm2: Any
        index: int = struct.field(pytree_node=False, default=0)

    @struct.dataclass
    class Net:
        blocks: tuple[Any, ...]
        name: str = struct.field(pytree_node=False, default="net")

    return Dense, Norm, Block, Net


def make_flax_struct1k(n_blocks: int = 10, n_layers: int = 24) -> Any:
    """10 blocks x (24 layers x 4 arrays + 2 norms x 2 arrays) = 1,000 leaves."""
    dense, norm, block, net = _flax_struct_classes()

    def arr() -> np.ndarray:
        return np.zeros(4, dtype=np.float32)

    blocks = tuple(
        block(
            layers=tuple(dense(arr(), arr(), arr(), arr()) for _ in range(n_layers)),
            norm1=norm(arr(), arr()),
            norm2=norm(arr(), arr()),
            index=i,
        )
        for i in range(n_blocks)
    )
    return net(blocks=blocks)


@functools.cache
def _nnx_model_class() -> type:
    from flax import nnx

    class Block(nnx.Module):
        def __init__(self, d: int, heads: int, rngs: nnx.Rngs) -> None:
            self.ln1 = nnx.LayerNorm(d, rngs=rngs)
            self.attn = nnx.MultiHeadAttention(
                num_heads=heads, in_features=d, qkv_features=d, decode=False, rngs=rngs
            )
            self.ln2 = nnx.LayerNorm(d, rngs=rngs)
            self.fc1 = nnx.Linear(d, 4 * d, rngs=rngs)
            self.fc2 = nnx.Linear(4 * d, d, rngs=rngs)

    class Transformer(nnx.Module):
        def __init__(self, vocab: int, d: int, heads: int, layers: int, rngs: nnx.Rngs) -> None:
            self.embed = nnx.Embed(vocab, d, rngs=rngs)
            # Blocks as plain attributes: no container type that changed across Flax versions.
            for i in range(layers):
                setattr(self, f"block{i}", Block(d, heads, rngs))
            self.head = nnx.Linear(d, vocab, rngs=rngs)

    return Transformer


def make_nnx_state() -> Any:
    from flax import nnx

    model = _nnx_model_class()(vocab=64, d=16, heads=2, layers=2, rngs=nnx.Rngs(0))
    _, state = nnx.split(model)
    return state


#: name -> (builder, the modules it needs).
WORKLOADS: dict[str, tuple[Callable[[], Any], tuple[str, ...]]] = {
    "eqx_mlp": (make_eqx_mlp, ("equinox",)),
    "eqx_stack100": (make_eqx_stack100, ("equinox",)),
    "flax_struct1k": (make_flax_struct1k, ("flax",)),
    "nnx_state": (make_nnx_state, ("flax",)),
}


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # ValueError: in sys.modules as None (import blocked)
        return False


def missing(name: str) -> str | None:
    """Why workload `name` cannot be built here (a module it needs is not installed), or None."""
    absent = [m for m in WORKLOADS[name][1] if not _installed(m)]
    if not absent:
        return None
    return f"{' and '.join(absent)} {'is' if len(absent) == 1 else 'are'} not installed"


# --------------------------------------------------------------------------------------
# Reference answers and cases
# --------------------------------------------------------------------------------------


class JaxTree:
    """One tree with `jax.tree_util`'s answers for it (`jtu` is that module)."""

    def __init__(self, name: str, jtu: Any) -> None:
        self.name = name
        self.jtu = jtu
        self.tree = WORKLOADS[name][0]()
        self.leaves, self.treedef = jtu.tree_flatten(self.tree)

    def rebuilt_equal(self, result: Any) -> bool:
        """Whether `result` is a new tree (not the input passed through whole) in which
        jax.tree_util sees the reference structure and the very same leaves."""
        if result is self.tree:
            return False
        leaves, treedef = self.jtu.tree_flatten(result)
        return treedef == self.treedef and _same_objects(leaves, self.leaves)

    def flatten_ok(self, tu: Any, result: Any) -> bool:
        """`tu.tree_flatten`'s result: jax's leaves, and a treedef that rebuilds an equal tree."""
        leaves, spec = result
        return (
            _same_objects(leaves, self.leaves)
            and spec.num_leaves == len(self.leaves)
            and self.rebuilt_equal(tu.tree_unflatten(spec, leaves))
        )


def _identity(x: Any) -> Any:
    return x


def case(tu: Any, w: JaxTree, op: str) -> tuple[str, dict[str, Any], Callable[[Any], bool]]:
    """(statement, its globals, check of its result) for `op` on `w` through `tu`, a module
    with jax.tree_util's API. unflatten rebuilds from `tu`'s own treedef and jax's leaves, so a
    treedef that took a node for a leaf raises there (reported as an error, not a crash)."""
    if op == "flatten":
        return "f(t)", {"f": tu.tree_flatten, "t": w.tree}, functools.partial(w.flatten_ok, tu)
    if op == "unflatten":
        _, spec = tu.tree_flatten(w.tree)
        return "f(s, v)", {"f": tu.tree_unflatten, "s": spec, "v": list(w.leaves)}, w.rebuilt_equal
    if op == "map1":
        return "f(g, t)", {"f": tu.tree_map, "g": _identity, "t": w.tree}, w.rebuilt_equal
    raise ValueError(op)


def versions() -> dict[str, str]:
    """Installed versions of the libraries whose types these workloads use."""
    out = {}
    for dist in ("equinox", "flax"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out
