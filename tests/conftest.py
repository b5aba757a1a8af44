"""oxtree's test suite, in folders by subsystem.

engine/ flatten, unflatten and the leaf walks; treespec/ treespec methods and the tree algebra;
paths/ key paths and accessors; registry/ registration; errors/ every error text; optree_face/
and jax_face/ drop-in behaviour against optree and JAX; graph/ shared and cyclic references;
module/ Modules; integration/ the JAX integration (filter_jit, mirroring); pretty/ the
pretty-printer; reliability/ memory, threads, fuzzing and untrusted input; docs/ the doctests
of the user documentation. compat/ runs the peers' own suites (`make compat`, not collected
here).

The folder of this file is on `sys.path` (pytest's default import mode), so every test module
imports the shared trees and node classes as `import helpers` and `import paths_helpers`.
"""

collect_ignore = ["compat"]
