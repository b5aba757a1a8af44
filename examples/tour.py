"""A guided tour of oxtree, printed section by section. This is what `make demo` runs.

    .venv/bin/python examples/tour.py              # everything, ending with a speed table
    .venv/bin/python examples/tour.py --no-bench   # skip the speed table
    .venv/bin/python examples/tour.py --only error # only sections whose title contains "error"

Each section is a function decorated with `@section(title)`; sections run in the order they
are defined, so a new feature gets its own function appended before the speed section.
"""

from __future__ import annotations

import argparse
import collections
import pickle
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import oxtree

# --------------------------------------------------------------------------------------
# Tiny helpers
# --------------------------------------------------------------------------------------

SECTIONS: list[tuple[str, Callable[[], None]]] = []


def section(title: str) -> Callable[[Callable[[], None]], Callable[[], None]]:
    """Register a tour section; sections run in definition order."""

    def register(fn: Callable[[], None]) -> Callable[[], None]:
        SECTIONS.append((title, fn))
        return fn

    return register


def show(label: str, value: Any) -> None:
    print(f"  {label:<28} {value!r}")


def note(text: str) -> None:
    print(f"  # {text}")


def expect_error(label: str, fn: Callable[[], Any]) -> None:
    """Run `fn`, which should raise, and print the exception it raised."""
    try:
        result = fn()
    except Exception as e:  # RecursionError is an Exception too
        print(f"  {label}\n    -> {type(e).__name__}: {e}")
    else:
        print(f"  {label}\n    -> no error (returned {type(result).__name__})")


Point = collections.namedtuple("Point", ["x", "y"])


# --------------------------------------------------------------------------------------
# The tree engine
# --------------------------------------------------------------------------------------


@section("Flatten and unflatten")
def flatten_and_unflatten() -> None:
    tree = {"b": (1, [2, 3]), "a": {"y": 4, "x": 5}}
    leaves, spec = oxtree.tree_flatten(tree)
    show("tree", tree)
    show("leaves", leaves)
    print(f"  {'spec':<28} {spec}")
    note("dict keys are visited in sorted order, so 'a' (5, 4) comes before 'b' (1, 2, 3)")
    rebuilt = oxtree.tree_unflatten(spec, leaves)
    show("unflatten(spec, leaves)", rebuilt)
    show("same tree again?", rebuilt == tree)
    show("insertion order kept?", list(rebuilt) == list(tree))
    scaled = oxtree.tree_unflatten(spec, [x * 10 for x in leaves])
    show("unflatten(spec, leaves x 10)", scaled)


@section("None: an empty node, or a leaf on request")
def none_handling() -> None:
    tree = [1, None, {"a": None, "b": 2}]
    leaves, spec = oxtree.tree_flatten(tree)
    show("tree", tree)
    show("leaves (default)", leaves)
    print(f"  {'spec (default)':<28} {spec}")
    leaves, spec = oxtree.tree_flatten(tree, none_is_leaf=True)
    show("leaves (none_is_leaf=True)", leaves)
    print(f"  {'spec (none_is_leaf=True)':<28} {spec}")


@section("Built-in node types")
def node_types() -> None:
    examples = {
        "namedtuple": Point(x=1, y=(2, 3)),
        "OrderedDict": collections.OrderedDict([("z", 1), ("a", 2)]),
        "defaultdict": collections.defaultdict(list, {"b": 1, "a": 2}),
        "deque": collections.deque([1, 2, 3], maxlen=5),
        "struct sequence": time.gmtime(0),
    }
    failed = []
    for name, tree in examples.items():
        print(f"  {name}:")
        try:
            leaves, spec = oxtree.tree_flatten(tree)
            back = oxtree.tree_unflatten(spec, leaves)
        except Exception as e:
            # Show the remaining types anyway; the section is reported as failed at the end.
            print(f"    failed: {type(e).__name__}: {e}")
            failed.append(name)
            continue
        print(f"    leaves     {leaves!r}")
        print(f"    spec       {spec}")
        print(f"    round trip {type(back).__name__}, equal: {back == tree}")
    note("OrderedDict keeps its own key order; defaultdict keeps its default_factory;")
    note("deque keeps maxlen; struct sequences such as time.struct_time are nodes.")
    if failed:
        raise RuntimeError(f"node types that failed: {', '.join(failed)}")


@section("is_leaf: stop flattening early")
def is_leaf_demo() -> None:
    tree = {"pos": (1.0, 2.0), "vel": (0.5, -0.5), "ids": [7, 8]}
    show("tree", tree)
    show("leaves", oxtree.tree_leaves(tree))

    def is_pair(x: Any) -> bool:
        return isinstance(x, tuple)

    show("leaves, is_leaf=tuple", oxtree.tree_leaves(tree, is_leaf=is_pair))
    print(f"  {'spec, is_leaf=tuple':<28} {oxtree.tree_structure(tree, is_leaf=is_pair)}")


@section("tree_map, tree_map_, tree_leaves, tree_structure")
def mapping() -> None:
    params = {"w": [1.0, 2.0], "b": 0.5}
    grads = {"w": [0.1, 0.2], "b": 0.05}
    show("params", params)
    show("grads", grads)
    show("tree_map(x * 2, params)", oxtree.tree_map(lambda x: x * 2, params))
    step = oxtree.tree_map(lambda p, g: round(p - 0.1 * g, 3), params, grads)
    show("tree_map(p - .1g, p, g)", step)

    seen: list[float] = []
    returned = oxtree.tree_map_(seen.append, params)
    show("tree_map_(seen.append, .)", seen)
    show("returns the input itself?", returned is params)

    show("tree_leaves(params)", oxtree.tree_leaves(params))
    print(f"  {'tree_structure(params)':<28} {oxtree.tree_structure(params)}")


@section("The treedef (PyTreeSpec)")
def treedef() -> None:
    spec = oxtree.tree_structure([1, {"a": 2, "b": (3, 4)}])
    print(f"  {'spec':<28} {spec}")
    show("num_leaves", spec.num_leaves)
    show("num_nodes", spec.num_nodes)
    print(f"  {'children()':<28} {spec.children()}")

    outer = oxtree.tree_structure((0, 0))
    inner = oxtree.tree_structure({"m": 0, "v": 0})
    print(f"  {'(*, *).compose({m, v})':<28} {outer.compose(inner)}")

    prefix = oxtree.tree_structure([0, {"a": 0, "b": 0}])
    full = [1, {"a": [2, 3], "b": {"deep": 4}}]
    show("flatten_up_to", prefix.flatten_up_to(full))
    note("flatten_up_to stops at the spec's leaves and returns the subtrees found there")

    again = oxtree.tree_structure([9, {"b": (8, 7), "a": 6}])
    show("== same structure", spec == again)
    show("== different structure", spec == oxtree.tree_structure([1, 2]))
    show("hash equal for equal specs", hash(spec) == hash(again))
    show("usable as dict key", {spec: "cached"}[again])

    restored = pickle.loads(pickle.dumps(spec))
    print(f"  {'pickle round trip':<28} {restored}")
    show("equal after pickling", restored == spec)


# --------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------


@section("Clear errors")
def errors() -> None:
    a = {"layer1": {"w": 1, "b": 2}, "layer2": [3, 4]}
    b = {"layer1": {"w": 1, "b": 2}, "layer2": [3, 4, 5]}
    expect_error(
        "tree_map over trees that differ deep inside:",
        lambda: oxtree.tree_map(lambda x, y: x + y, a, b),
    )
    c = {"layer1": {"w": 1, "bias": 2}, "layer2": [3, 4]}
    expect_error(
        "tree_map over dicts with different keys:",
        lambda: oxtree.tree_map(lambda x, y: x + y, a, c),
    )

    spec = oxtree.tree_structure(a)
    expect_error(
        f"tree_unflatten with 3 leaves for a spec of {spec.num_leaves}:",
        lambda: oxtree.tree_unflatten(spec, [1, 2, 3]),
    )

    cyclic: list[Any] = [1, [2]]
    cyclic[1].append(cyclic)
    expect_error("flattening a list that contains itself:", lambda: oxtree.tree_leaves(cyclic))


@section("Deep trees")
def deep_trees() -> None:
    depth = 100_000
    chain: Any = "bottom"
    for _ in range(depth):
        chain = [chain]
    note(
        f"a chain of {depth:,} nested one-element lists (Python's recursion limit is "
        f"{sys.getrecursionlimit():,})"
    )
    try:
        start = time.perf_counter()
        leaves, spec = oxtree.tree_flatten(chain)
        back = oxtree.tree_unflatten(spec, ["new bottom"])
        mapped = oxtree.tree_map(str.upper, chain)
        elapsed = time.perf_counter() - start
    except Exception as e:
        print(f"  -> {type(e).__name__}: {e}")
        return
    show("leaves", leaves)
    show("num_nodes", spec.num_nodes)
    node = back
    for _ in range(depth):
        node = node[0]
    show("unflatten -> innermost", node)
    node = mapped
    for _ in range(depth):
        node = node[0]
    show("tree_map(upper) -> innermost", node)
    print(f"  {'flatten+unflatten+map took':<28} {elapsed * 1e3:.1f} ms")


# --------------------------------------------------------------------------------------
# Speed (keep this section last)
# --------------------------------------------------------------------------------------


@section("Speed: oxtree vs jax.tree_util vs optree (quick run)")
def speed() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    import bench

    results = bench.run(
        workloads=["tuple3", "mixed1k", "dict10k", "resnet50"],
        ops=["flatten", "unflatten", "map1", "map2"],
        libs=["oxtree", "jax", "optree"],
        quick=True,
    )
    table = bench.format_table(results, summary=False)
    print("\n".join("  " + line if line else "" for line in table.splitlines()))
    note("per-call medians; full run with more workloads and ops: make bench")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-bench", action="store_true", help="skip the speed table")
    parser.add_argument("--only", metavar="TEXT", help="run sections whose title contains TEXT")
    args = parser.parse_args(argv)

    version = getattr(oxtree, "__version__", "?")
    print(f"oxtree {version} tour  (Python {sys.version.split()[0]})")
    failed = []
    number = 0
    for title, fn in SECTIONS:
        if args.no_bench and fn is speed:
            continue
        if args.only and args.only.lower() not in title.lower():
            continue
        number += 1
        print(f"\n== {number}. {title} ==")
        try:
            fn()
        except Exception:
            failed.append(title)
            traceback.print_exc(file=sys.stdout)
    if failed:
        print(f"\n{len(failed)} section(s) failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
