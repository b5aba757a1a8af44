"""Running a script in a fresh interpreter, for tests whose subject may crash the process.

A script runs after `PRELUDE`, which gives it `emit(*record)` (one JSON record per line,
flushed at once) and `run(name, fn)` (records `["start", name]`, then `["done", name, outcome,
benign, detail]`), so that the parent knows which operation was running if the child dies.
`run_script` runs each (script, arguments) once per test session and parses the records;
`op_result` fails the test with the child's last words when an operation never finished.

`DEEP_SCRIPT` runs the core walks and the treedef basics on trees nested `DEPTH` deep
(errors/test_errors.py runs it at three recursion limits; reliability/test_reliability.py
counts its `DEEP_OPS` as covered, next to fuzz/deep_ops.py's).
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

# How deep DEEP_SCRIPT's trees are.
DEPTH = 100_000

# Shared by the scripts run in subprocesses: one JSON record per line, flushed at once, so the
# parent knows which operation was running if the child dies.
PRELUDE = r"""
import json, sys


def emit(*record):
    print(json.dumps(record), flush=True)


def run(name, fn):
    emit("start", name)
    try:
        ok = fn()
    except BaseException as exc:  # a Rust panic surfaces as a BaseException
        benign = isinstance(exc, Exception) and not isinstance(exc, SystemError)
        emit("done", name, type(exc).__name__, benign, str(exc)[:300])
    else:
        emit("done", name, "ok" if ok is True else "wrong", ok is True, repr(ok)[:300])
"""

DEEP_SCRIPT = r"""
import copy, gc, pickle, sys
limit = int(sys.argv[1])
depth = int(sys.argv[2])
import oxtree
if limit:
    sys.setrecursionlimit(limit)

LEAF = object()
MAPPED = object()


def chain(n, leaf, wrap=lambda x: [x]):
    tree = leaf
    for _ in range(n):
        tree = wrap(tree)
    return tree


def is_chain(tree, n, leaf, cls=list):
    for _ in range(n):
        if type(tree) is not cls or len(tree) != 1:
            return False
        tree = tree[0]
    return tree is leaf


tree = chain(depth, LEAF)
twin = chain(depth, LEAF)


def flatten():
    leaves, spec = oxtree.tree_flatten(tree)
    return leaves == [LEAF] and leaves[0] is LEAF and spec.num_nodes == depth + 1


def map_two():
    wide = chain(depth, [LEAF])
    result = oxtree.tree_map(lambda a, b: b, tree, wide)
    return is_chain(result, depth + 1, LEAF)


def map_inplace():
    calls = []
    return oxtree.tree_map_(calls.append, tree) is tree and calls == [LEAF]


def deep_mismatch():
    other = chain(depth, (LEAF,))
    try:
        oxtree.tree_map(lambda a, b: b, chain(depth, [LEAF]), other)
    except ValueError as exc:
        return "tree[0][0]" in str(exc)
    return "no error"


def deep_cycle():
    bottom = []
    root = chain(depth - 1, bottom)
    bottom.append(root)
    try:
        oxtree.tree_leaves(root)
    except RecursionError:
        return True
    return "no error"


run("tree_flatten", flatten)
run("tree_leaves", lambda: oxtree.tree_leaves(tree) == [LEAF])
run("tree_iter", lambda: list(oxtree.tree_iter(tree)) == [LEAF])
run("tree_structure", lambda: oxtree.tree_structure(tree).num_leaves == 1)
run("tree_is_leaf", lambda: oxtree.tree_is_leaf(tree) is False)
run("tree_map", lambda: is_chain(oxtree.tree_map(lambda x: MAPPED, tree), depth, MAPPED))
run("tree_map_two_trees", map_two)
run("tree_map_", map_inplace)
run("dict_chain", lambda: oxtree.tree_leaves(chain(depth, LEAF, lambda x: {"k": x})) == [LEAF])
run("tuple_chain", lambda: oxtree.tree_structure(chain(depth, LEAF, lambda x: (x,))).num_leaves == 1)
run("deep_mismatch", deep_mismatch)
run("deep_cycle", deep_cycle)

# The deepest treedefs oxtree can build, for the operations on treedefs.
emit("start", "build_deepest_spec")
d = None
for depth_try in (depth, 30_000, 10_000, 3_000, 1_000, 300, 100, 30):
    try:
        spec = oxtree.tree_structure(chain(depth_try, LEAF))
        spec_twin = oxtree.tree_structure(chain(depth_try, 0))
        spec_other = oxtree.tree_structure(chain(depth_try, (0, 0)))
    except RecursionError:
        continue
    d = depth_try
    break
emit("done", "build_deepest_spec", "ok", True, d)
deep = chain(d, LEAF)


def repr_ok():
    return repr(spec) == "PyTreeSpec(" + "[" * d + "*" + "]" * d + ")"


def pickle_ok():
    loaded = pickle.loads(pickle.dumps(spec))
    return loaded.num_nodes == d + 1 and loaded == spec


def children_ok():
    children = spec.children()
    return len(children) == 1 and children[0].num_nodes == d


def dealloc():
    global spec, spec_twin, spec_other
    del spec, spec_twin, spec_other
    gc.collect()
    return True


run("tree_unflatten", lambda: is_chain(oxtree.tree_unflatten(spec, [LEAF]), d, LEAF))
run("spec.unflatten", lambda: is_chain(spec.unflatten([LEAF]), d, LEAF))
run("repr", repr_ok)
run("eq", lambda: spec == spec_twin and (spec != spec_twin) is False)
run("ne", lambda: spec != spec_other and (spec == spec_other) is False)
run("hash", lambda: hash(spec) == hash(spec_twin))
run("pickle", pickle_ok)
run("copy", lambda: copy.copy(spec).num_nodes == d + 1)
run("deepcopy", lambda: copy.deepcopy(spec).num_nodes == d + 1)
run("flatten_up_to", lambda: spec.flatten_up_to(deep) == [LEAF])
run("flatten_up_to_wider", lambda: spec.flatten_up_to(chain(d, (LEAF,))) == [(LEAF,)])
run("children", children_ok)
run("child", lambda: spec.child(0).num_nodes == d)
run("compose", lambda: spec.compose(oxtree.tree_structure((0, 0))).num_leaves == 2)
run("num_nodes", lambda: spec.num_nodes == d + 1 and len(spec) == 1)
run("dealloc", dealloc)
emit("finished")
"""

DEEP_OPS = [
    "tree_flatten",
    "tree_leaves",
    "tree_iter",
    "tree_structure",
    "tree_is_leaf",
    "tree_map",
    "tree_map_two_trees",
    "tree_map_",
    "dict_chain",
    "tuple_chain",
    "deep_mismatch",
    "deep_cycle",
    "build_deepest_spec",
    "tree_unflatten",
    "spec.unflatten",
    "repr",
    "eq",
    "ne",
    "hash",
    "pickle",
    "copy",
    "deepcopy",
    "flatten_up_to",
    "flatten_up_to_wider",
    "children",
    "child",
    "compose",
    "num_nodes",
    "dealloc",
]

_runs: dict[tuple[str, ...], dict[str, Any]] = {}


def run_script(script: str, *args: str) -> dict[str, Any]:
    """Runs `script` (after the prelude) in a fresh interpreter, once per argument tuple."""
    key = (script, *args)
    if key not in _runs:
        proc = subprocess.run(
            [sys.executable, "-c", PRELUDE + script, *args],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        records = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("[")]
        started = [r[1] for r in records if r[0] == "start"]
        _runs[key] = {
            "returncode": proc.returncode,
            "stderr": proc.stderr[-2000:],
            "last_started": started[-1] if started else None,
            "done": {r[1]: r[2:] for r in records if r[0] == "done"},
            "finished": any(r[0] == "finished" for r in records),
        }
    return _runs[key]


def op_result(run: dict[str, Any], op: str) -> list[Any]:
    """What `run` recorded for `op` after its name; fails the test if `op` never finished."""
    if op not in run["done"]:
        pytest.fail(
            f"the subprocess died (returncode {run['returncode']}) during "
            f"{run['last_started']!r} before {op!r} ran\n{run['stderr']}"
        )
    return list(run["done"][op])
