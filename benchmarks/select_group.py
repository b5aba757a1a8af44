"""The "select" group of bench.py: choosing leaves by key-path pattern (docs/key-paths.md),
the masks and labels of optax.masked and optax.multi_transform.

The tree, ``module300``, is a Module-like nested dict of parameters (293 small arrays): an
embedding, 18 blocks of attention (query, key, value, out), MLP (fc1, fc2) and two layer
norms, a final norm and a head, all under ``['params']``. Each op is timed for oxtree (the
JAX face ``oxtree.tree_util``, or the main package with ``--face optree``) against what one
writes by hand with ``jax.tree_util``: ``tree_map_with_path`` calling ``fnmatch`` (or a
compiled regex's ``fullmatch``) on ``keystr`` of every path. The hand-written version's
answer is the reference each result is checked against; the patterns are chosen so that
``fnmatch``'s ``*`` (which crosses keys) and oxtree's ``**`` select the same leaves here, and
the hand-written ones escape ``[`` as ``[[]`` (to ``fnmatch`` a ``[`` opens a character
class: ``['params']`` unescaped matches no keystr at all).

Ops:

* ``mask_glob``   ``tree_mask(tree, "['params']['block_*']['mlp']**['kernel']")``; by hand,
  ``fnmatch(keystr(p), "[[]'params'][[]'block_*'][[]'mlp']*[[]'kernel']")`` per leaf
* ``mask_regex``  ``tree_mask(tree, re.compile(r".*\\['(kernel|scale)'\\]"))``; by hand, its
  ``fullmatch(keystr(p))`` per leaf
* ``labels``      ``tree_labels(tree, rules, default='decay')`` with two glob rules; by hand,
  the first rule whose ``fnmatch`` pattern matches
* ``set_matching``  ``tree_set_matching(tree, "**['bias']", 0.0)``; by hand,
  ``0.0 if fnmatch(keystr(p), "*[[]'bias']") else x``
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable
from typing import Any

import numpy as np

#: The name that stands for every workload of the group in bench.py's `--workloads`.
GROUP = "select"

OPS: tuple[str, ...] = ("mask_glob", "mask_regex", "labels", "set_matching")


def make_module300(n_blocks: int = 18, width: int = 4) -> dict[str, Any]:
    """A Module-like parameter dict of 293 small float32 arrays."""

    def dense() -> dict[str, np.ndarray]:
        return {"kernel": np.zeros((width, width), np.float32), "bias": np.zeros(width, np.float32)}

    def norm() -> dict[str, np.ndarray]:
        return {"scale": np.ones(width, np.float32), "bias": np.zeros(width, np.float32)}

    params: dict[str, Any] = {"embed": {"embedding": np.zeros((16, width), np.float32)}}
    for i in range(n_blocks):
        params[f"block_{i}"] = {
            "attn": {name: dense() for name in ("query", "key", "value", "out")},
            "mlp": {"fc1": dense(), "fc2": dense()},
            "ln_1": norm(),
            "ln_2": norm(),
        }
    params["ln_f"] = norm()
    params["head"] = dense()
    return {"params": params}


WORKLOADS: dict[str, Callable[[], Any]] = {"module300": make_module300}


def _fn(pattern: str) -> str:
    """An fnmatch pattern whose brackets are literal."""
    return pattern.replace("[", "[[]")


# (oxtree's pattern, the fnmatch pattern a user would write for the same leaves)
GLOB = (
    "['params']['block_*']['mlp']**['kernel']",
    _fn("['params']['block_*']['mlp']*['kernel']"),
)
REGEX = re.compile(r".*\['(kernel|scale)'\]")
RULES = (
    ("**['bias']", _fn("*['bias']"), "no_decay"),
    ("['params']['embed']**", _fn("['params']['embed']*"), "embed"),
)
BIAS = ("**['bias']", _fn("*['bias']"))


def _by_hand(jtu: Any, op: str) -> Callable[[Any], Any]:
    """The function of a tree that `op` stands for, written with jax.tree_util."""
    keystr, match = jtu.keystr, fnmatch.fnmatch
    if op == "mask_glob":
        pattern = GLOB[1]
        return lambda t: jtu.tree_map_with_path(lambda p, _: match(keystr(p), pattern), t)
    if op == "mask_regex":
        return lambda t: jtu.tree_map_with_path(
            lambda p, _: REGEX.fullmatch(keystr(p)) is not None, t
        )
    if op == "labels":

        def label(p: Any, _: Any) -> str:
            text = keystr(p)
            return next((lab for _, pat, lab in RULES if match(text, pat)), "decay")

        return lambda t: jtu.tree_map_with_path(label, t)
    if op == "set_matching":
        pattern = BIAS[1]
        return lambda t: jtu.tree_map_with_path(
            lambda p, x: 0.0 if match(keystr(p), pattern) else x, t
        )
    raise ValueError(op)


def _oxtree(face_module: Any, op: str) -> Callable[[Any], Any]:
    """The same through oxtree's face `face_module` (oxtree or oxtree.tree_util)."""
    if op == "mask_glob":
        return lambda t: face_module.tree_mask(t, GLOB[0])
    if op == "mask_regex":
        return lambda t: face_module.tree_mask(t, REGEX)
    if op == "labels":
        rules = {pat: lab for pat, _, lab in RULES}
        return lambda t: face_module.tree_labels(t, rules, "decay")
    if op == "set_matching":
        return lambda t: face_module.tree_set_matching(t, BIAS[0], 0.0)
    raise ValueError(op)


def reference(jtu: Any, tree: Any, op: str) -> list[Any]:
    """The leaves of the hand-written answer (arrays kept as they are)."""
    return jtu.tree_leaves(_by_hand(jtu, op)(tree))


def case(
    lib: str, mod: Any, tree: Any, op: str, face: str, expected: list[Any], jtu: Any
) -> tuple[str, dict[str, Any], Callable[[Any], bool]]:
    """(statement, its globals, check of its result) for `op` on `tree` by `lib`: "oxtree"
    (through `mod.tree_util` or `mod` itself, as `face` says) or "jax" (by hand)."""
    if lib == "oxtree":
        fn = _oxtree(mod.tree_util if face == "jax" else mod, op)
    else:
        fn = _by_hand(mod.tree_util, op)
    structure = jtu.tree_structure(tree)

    def check(result: Any) -> bool:
        leaves = jtu.tree_leaves(result)
        same = all(
            (a is b) if isinstance(b, np.ndarray) else (type(a) is type(b) and a == b)
            for a, b in zip(leaves, expected, strict=True)
        )
        return jtu.tree_structure(result) == structure and len(leaves) == len(expected) and same

    return "f(t)", {"f": fn, "t": tree}, check
