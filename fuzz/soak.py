"""The soak: a million calls of each operation, with RSS and leaf reference counts recorded.

    python fuzz/soak.py                    # every operation, 1,000,000 calls each
    python fuzz/soak.py --calls 100000 flatten map
    python fuzz/soak.py --threads --deep   # also the long thread run and the full-depth run

For each operation: RSS after a warm-up of 1% of the calls and after all of them, the
reference counts of the tree's leaves, keys and node types before and after, and the time per
call. An operation fails when a reference count moved or RSS grew by more than --tolerance
bytes. With --threads, tests/reliability/test_threads.py runs with OXTREE_THREAD_ROUNDS=50000; with
--deep, fuzz/deep_ops.py runs at depth 100,000 under the default recursion limit and under
1,000,000, every operation at full depth, with its time. Prints a Markdown table for
docs/reliability.md; exit status 0 when everything passed.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import pickle
import subprocess
import sys
import time
from collections import OrderedDict, defaultdict, deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import oxtree
import oxtree.tree_util

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# The classes the tests share with the fuzzer live in tests/nodes.py.
if str(ROOT / "tests") not in sys.path:
    sys.path.append(str(ROOT / "tests"))
from nodes import Key, Leaf, Pair, make_default  # noqa: E402


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class Node:
    __slots__ = ("a", "b")

    def __init__(self, a: Any, b: Any) -> None:
        self.a, self.b = a, b


oxtree.register_pytree_node(
    Node, lambda n: ((n.a, n.b), None, ("a", "b")), lambda _, c: Node(*c), namespace="soak"
)


def fixture() -> tuple[Any, Any, list[Any]]:
    """A tree of every node kind with private leaves and keys; a JSON-able twin."""
    leaves = [Leaf(str(i)) for i in range(10)]
    keys = [Key(2), Key(1)]
    tree = {
        keys[0]: [leaves[0], (leaves[1], None), Pair(leaves[2], leaves[3])],
        keys[1]: OrderedDict(z=deque([leaves[4]], maxlen=3), y=Node(leaves[5], [leaves[6]])),
        "c": defaultdict(make_default, {"d": leaves[7], 3: (leaves[8], leaves[9])}),
    }
    plain = {"x": [leaves[0], (leaves[1], None)], "y": {"b": leaves[2], "a": [leaves[3]]}}
    return tree, plain, [*leaves, *keys, Pair, make_default]


def operations(tree: Any, plain: Any) -> dict[str, Callable[[], Any]]:
    ns = {"namespace": "soak"}
    leaves, spec = oxtree.tree_flatten(tree, **ns)
    wide = oxtree.tree_map(lambda x: [x, x], tree, **ns)
    plain_spec = oxtree.tree_structure(plain)
    doc = json.dumps(oxtree.treespec_to_json(plain_spec))
    state = pickle.dumps(spec)
    g_leaves, gd = oxtree.graph_flatten(tree, tree, **ns)
    jax_leaves, jax_def = oxtree.tree_util.tree_flatten(plain)
    mismatched = [leaves[0]]

    def raising(x: Any) -> bool:
        raise KeyError("soak")

    def error_paths() -> None:
        with contextlib.suppress(ValueError):
            spec.flatten_up_to(mismatched)
        with contextlib.suppress(KeyError):
            oxtree.tree_leaves(tree, raising, **ns)

    return {
        "flatten": lambda: oxtree.tree_flatten(tree, **ns),
        "leaves": lambda: oxtree.tree_leaves(tree, **ns),
        "structure": lambda: oxtree.tree_structure(tree, **ns),
        "unflatten": lambda: spec.unflatten(leaves),
        "map": lambda: oxtree.tree_map(id, tree, **ns),
        "map_two_trees": lambda: oxtree.tree_map(lambda a, b: b, tree, wide, **ns),
        "flatten_up_to": lambda: spec.flatten_up_to(wide),
        "flatten_with_path": lambda: oxtree.tree_flatten_with_path(tree, **ns),
        "accessors": lambda: oxtree.tree_accessors(tree, **ns),
        "pickle_loads": lambda: pickle.loads(state),
        "json_loads": lambda: oxtree.treespec_from_json(doc, types=[Pair]),
        "graph_flatten": lambda: oxtree.graph_flatten(tree, tree, **ns),
        "graph_unflatten": lambda: oxtree.graph_unflatten(gd, g_leaves),
        "jax_flatten": lambda: oxtree.tree_util.tree_flatten(plain),
        "jax_unflatten": lambda: oxtree.tree_util.tree_unflatten(jax_def, jax_leaves),
        "spec_eq_hash_repr": lambda: (spec == plain_spec, hash(spec), repr(spec)),
        "error_paths": error_paths,
    }


def soak(name: str, calls: int, tolerance: int) -> dict[str, Any]:
    tree, plain, watched = fixture()
    call = operations(tree, plain)[name]
    warm = max(calls // 100, 1000)
    for _ in range(warm):
        call()
    gc.collect()
    refs_before = [sys.getrefcount(x) for x in watched]
    rss_before = rss()
    began = time.perf_counter()
    for _ in range(calls):
        call()
    seconds = time.perf_counter() - began
    gc.collect()
    rss_after = rss()
    refs_after = [sys.getrefcount(x) for x in watched]
    return {
        "op": name,
        "calls": calls,
        "us_per_call": 1e6 * seconds / calls,
        "rss_before_mb": rss_before / 2**20,
        "rss_after_mb": rss_after / 2**20,
        "refcounts_unchanged": refs_before == refs_after,
        "ok": refs_before == refs_after and rss_after - rss_before <= tolerance,
    }


def run_threads() -> dict[str, Any]:
    began = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            "-X",
            "dev",
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            str(ROOT / "tests" / "test_threads.py"),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "OXTREE_THREAD_ROUNDS": "50000"},
        check=False,
        cwd=ROOT,
    )
    return {
        "ok": proc.returncode == 0,
        "seconds": time.perf_counter() - began,
        "summary": proc.stdout.strip().splitlines()[-1]
        if proc.stdout.strip()
        else proc.stderr[-500:],
    }


def run_deep(limit: int) -> dict[str, Any]:
    began = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, str(HERE / "deep_ops.py"), str(limit), "100000"],
        capture_output=True,
        text=True,
        check=False,
        timeout=7200,
    )
    records = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("[")]
    done = [r for r in records if r[0] == "done"]
    bad = [r for r in done if r[2] not in ("ok", "RecursionError")]
    slowest = sorted(done, key=lambda r: -r[4])[:10]
    return {
        "limit": limit,
        "returncode": proc.returncode,
        "finished": any(r[0] == "finished" for r in records),
        "ops": len(done) - 1,
        "recursion_errors": [r[1] for r in done if r[2] == "RecursionError"],
        "bad": bad,
        "slowest": [(r[1], r[4], r[5]) for r in slowest],
        "seconds": time.perf_counter() - began,
        "ok": proc.returncode == 0 and not bad,
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("ops", nargs="*", help="operations to soak (default: all)")
    parser.add_argument("--calls", type=int, default=1_000_000)
    parser.add_argument("--tolerance", type=int, default=2 << 20, help="allowed RSS growth, bytes")
    parser.add_argument("--threads", action="store_true")
    parser.add_argument("--deep", action="store_true")
    parser.add_argument("--json", default=None, help="write the results here too")
    args = parser.parse_args()
    tree, plain, _ = fixture()
    names = args.ops or list(operations(tree, plain))
    results: dict[str, Any] = {"soak": []}
    print("| operation | calls | µs/call | RSS before (MB) | RSS after (MB) | refcounts |")
    print("|---|---:|---:|---:|---:|---|")
    ok = True
    for name in names:
        r = soak(name, args.calls, args.tolerance)
        results["soak"].append(r)
        ok &= r["ok"]
        print(
            f"| {name} | {r['calls']:,} | {r['us_per_call']:.2f} | {r['rss_before_mb']:.1f} "
            f"| {r['rss_after_mb']:.1f} | {'unchanged' if r['refcounts_unchanged'] else 'CHANGED'} |",
            flush=True,
        )
    if args.threads:
        results["threads"] = run_threads()
        ok &= results["threads"]["ok"]
        print(f"\nthreads (50,000 rounds): {results['threads']}", flush=True)
    if args.deep:
        for limit in (0, 1_000_000):
            r = run_deep(limit)
            results[f"deep_{limit}"] = r
            ok &= r["ok"]
            print(f"\ndeep (limit {limit or 'default'}): {json.dumps(r)}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
