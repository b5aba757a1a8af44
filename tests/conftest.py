"""oxtree's test suite, in folders by subsystem.

engine/ flatten, unflatten and the leaf walks; treespec/ treespec methods and the tree algebra;
paths/ key paths and accessors; registry/ registration; errors/ every error text; optree_face/
and jax_face/ drop-in behaviour against optree and JAX; graph/ shared and cyclic references;
module/ Modules; flat/ flat trees (oxtree.FlatTree, with JAX and optax, and docs/flat.md);
integration/ the JAX integration (filter_jit, mirroring); pretty/ the
pretty-printer; reliability/ memory, threads, fuzzing and untrusted input; docs/ the doctests
of the user documentation; typing/ `PyTree[T]` at run time and to mypy and pyright;
ecosystem/ the types JAX's ecosystem registers with JAX (equinox, flax.struct, Flax NNX, chex,
JAX's own registration functions and Partial) against `jax.tree_util` and `jax.tree`, and
oxtree.jax on their models (each library's module skips when it is not installed). compat/
runs the peers' own suites (`make compat`, not collected here).

Shared by the test modules, in this folder:

- nodes.py: the node classes, keys and leaves trees are made of (Point, Vector, Pair, Key,
  Leaf, Opaque, Rec, ...), also used by the fuzzer (fuzz/);
- helpers.py: the corpus of trees (CORPUS, TREES), `parametrize`, the comparators
  (`assert_same_tree`, `assert_same_leaves`) and a hypothesis strategy for random trees;
- paths_helpers.py: the key-path oracles of paths/;
- subprocess_runs.py: running a script in a fresh interpreter, for tests whose subject may
  crash the process (deep trees, hostile callbacks), and the deep-tree script.

The folder of this file is on `sys.path` (pytest's default import mode), so test modules
import these as `import helpers`, `from nodes import Point`; fuzz/ is on it too, after it, so
that reliability/ imports the fuzzer's modules (`import cases`, `import deep_ops`).

Every test has a time limit (pytest-timeout, `timeout` in pyproject.toml): a hang fails that
test with a traceback instead of stalling the run. A test that is slow by nature says so with
`@pytest.mark.timeout(seconds)`.
"""

import sys
from pathlib import Path

collect_ignore = ["compat"]

FUZZ = str(Path(__file__).resolve().parent.parent / "fuzz")
if FUZZ not in sys.path:
    sys.path.append(FUZZ)
