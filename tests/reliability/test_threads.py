"""Threads: eight workers flatten, map and unflatten while another thread changes the registry.

Every walk takes one snapshot of the registry when it starts, so a tree holding a type that is
being registered and unregistered comes out either with that type as a node (under one of the
flatten functions it was registered with) or as a leaf: never a mixture within one call, never
a crash. Treedefs built while a type was registered keep working after it is unregistered.
`OXTREE_THREAD_ROUNDS` scales the run (the soak script uses it); the default keeps it short.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import OrderedDict
from typing import Any

import oxtree
import oxtree.tree_util
import pytest

NAMESPACE = "threads"
WORKERS = 8
ROUNDS = int(os.environ.get("OXTREE_THREAD_ROUNDS", "600"))


class Stable:
    """Registered for the whole module: its results never change."""

    def __init__(self, a: Any, b: Any) -> None:
        self.a, self.b = a, b


class Toggle:
    """Registered, re-registered with other flatten functions and unregistered, over and over."""

    def __init__(self, *items: Any) -> None:
        self.items = list(items)


class Leaf:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"Leaf({self.name})"


def _toggle_forward(t: Toggle) -> tuple[Any, ...]:
    return list(t.items), "fwd"


def _toggle_backward(t: Toggle) -> tuple[Any, ...]:
    return list(reversed(t.items)), "bwd"


def _toggle_unflatten(aux: str, children: Any) -> Toggle:
    items = list(children)
    return Toggle(*(items if aux == "fwd" else reversed(items)))


TOGGLE_RULES = (_toggle_forward, _toggle_backward)


@pytest.fixture(scope="module", autouse=True)
def registrations():
    oxtree.register_pytree_node(
        Stable, lambda s: ((s.a, s.b), None), lambda _, c: Stable(*c), namespace=NAMESPACE
    )
    yield
    oxtree.unregister_pytree_node(Stable, namespace=NAMESPACE)
    for ns in (NAMESPACE, ""):
        if Toggle in oxtree.registered_types(namespace=ns):
            oxtree.unregister_pytree_node(Toggle, namespace=ns)


LEAVES = [Leaf(str(i)) for i in range(8)]


def make_tree() -> Any:
    a, b, c, d, e, f, g, h = LEAVES
    return {
        "s": Stable(a, [b, Toggle(c, (d,))]),
        "t": Toggle(e, {"k": f}),
        "o": OrderedDict(z=(g, None), y=Toggle()),
        "l": [h, Toggle(Toggle(a, b))],
    }


def expected_outcomes(tree: Any) -> dict[str, tuple[list[Any], str]]:
    """(leaves, treespec repr) for each state Toggle can be in."""
    out = {}
    for name, rule in (("forward", _toggle_forward), ("backward", _toggle_backward)):
        ns = f"{NAMESPACE}-expect-{name}"
        oxtree.register_pytree_node(
            Stable, lambda s: ((s.a, s.b), None), lambda _, c: Stable(*c), namespace=ns
        )
        oxtree.register_pytree_node(Toggle, rule, _toggle_unflatten, namespace=ns)
        leaves, spec = oxtree.tree_flatten(tree, namespace=ns)
        out[name] = (leaves, repr(spec).replace(f", namespace='{ns}'", ""))
        oxtree.unregister_pytree_node(Toggle, namespace=ns)
        oxtree.unregister_pytree_node(Stable, namespace=ns)
    leaves, spec = oxtree.tree_flatten(tree, namespace=NAMESPACE)
    out["leaf"] = (leaves, repr(spec).replace(f", namespace='{NAMESPACE}'", ""))
    return out


def _matches(leaves: list[Any], spec_repr: str, outcomes: dict[str, Any]) -> str | None:
    for name, (want_leaves, want_repr) in outcomes.items():
        same = len(leaves) == len(want_leaves) and all(
            a is b for a, b in zip(leaves, want_leaves, strict=True)
        )
        if spec_repr == want_repr and same:
            return name
    return None


def _strip(spec: oxtree.PyTreeSpec) -> str:
    return repr(spec).replace(f", namespace='{NAMESPACE}'", "")


class Churn(threading.Thread):
    """Registers and unregisters Toggle (and fresh classes) until told to stop."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self.changes = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            i = 0
            while not self.stop.is_set():
                rule = TOGGLE_RULES[i % 2]
                oxtree.register_pytree_node(Toggle, rule, _toggle_unflatten, namespace=NAMESPACE)
                # Give the workers the interpreter while Toggle is registered, and again after it
                # is gone: on a loaded machine the churn could otherwise run whole time slices in
                # one state, and the workers would never see the registry change.
                time.sleep(0)
                fresh = type(f"Fresh{i}", (), {})
                oxtree.register_pytree_node(fresh, lambda x: ((), type(x)), lambda t, c: t())
                oxtree.unregister_pytree_node(Toggle, namespace=NAMESPACE)
                time.sleep(0)
                oxtree.unregister_pytree_node(fresh)
                oxtree.register_static(fresh, namespace=NAMESPACE)
                oxtree.unregister_pytree_node(fresh, namespace=NAMESPACE)
                self.changes += 6
                i += 1
        except BaseException as exc:
            self.error = exc


def run_workers(work: Any, rounds: int = ROUNDS, switch: float = 1e-5) -> list[int]:
    """Runs `work(index, round)` in WORKERS threads while a Churn thread runs; returns counts."""
    churn = Churn()
    errors: list[BaseException] = []
    counts = [0] * WORKERS
    barrier = threading.Barrier(WORKERS + 1)

    def worker(index: int) -> None:
        try:
            barrier.wait()
            for round_ in range(rounds):
                work(index, round_)
                counts[index] += 1
        except BaseException as exc:
            errors.append(exc)

    old = sys.getswitchinterval()
    sys.setswitchinterval(switch)
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(WORKERS)]
    try:
        for thread in threads:
            thread.start()
        churn.start()
        barrier.wait()
        for thread in threads:
            thread.join(timeout=300)
    finally:
        churn.stop.set()
        churn.join(timeout=60)
        sys.setswitchinterval(old)
    assert not any(t.is_alive() for t in threads), "a worker hung"
    if errors:
        raise errors[0]
    if churn.error is not None:
        raise churn.error
    assert churn.changes > 0
    return counts


def test_flatten_map_unflatten_while_registry_changes():
    tree = make_tree()
    outcomes = expected_outcomes(tree)
    seen: set[str] = set()

    def work(index: int, round_: int) -> None:
        step = (index + round_) % 4
        if step == 0:
            leaves, spec = oxtree.tree_flatten(tree, namespace=NAMESPACE)
            name = _matches(leaves, _strip(spec), outcomes)
            assert name is not None, f"a mixed or wrong result: {spec!r}"
            seen.add(name)
            rebuilt = spec.unflatten(leaves)  # works even if Toggle was unregistered since
            again = oxtree.tree_flatten(rebuilt, namespace=f"{NAMESPACE}-none")[0]
            assert len(again) >= 1
            assert spec.flatten_up_to(rebuilt) == leaves
        elif step == 1:
            calls: list[Any] = []
            mapped = oxtree.tree_map(lambda x: calls.append(x) or (x,), tree, namespace=NAMESPACE)
            # The function saw the leaves of exactly one valid outcome, in order.
            assert any(
                len(calls) == len(want) and all(a is b for a, b in zip(calls, want, strict=True))
                for want, _ in outcomes.values()
            ), calls
            assert type(mapped) is dict
            assert type(mapped["s"]) is Stable
        elif step == 2:
            paths, leaves, spec = oxtree.tree_flatten_with_path(tree, namespace=NAMESPACE)
            assert len(paths) == len(leaves) == spec.num_leaves
            assert _matches(leaves, _strip(spec), outcomes) is not None
        else:
            leaves, gd = oxtree.graph_flatten(tree, tree, namespace=NAMESPACE)
            out = oxtree.graph_unflatten(gd, leaves)
            assert out[0] is out[1]
            assert gd.num_leaves == len(leaves)

    counts = run_workers(work)
    assert counts == [ROUNDS] * WORKERS
    assert len(seen) >= 2, f"the registry never changed under a worker: {seen}"


def test_treedefs_outlive_their_registration_across_threads():
    # Specs built while Toggle is registered, unflattened by other threads after it is gone.
    oxtree.register_pytree_node(Toggle, _toggle_forward, _toggle_unflatten, namespace=NAMESPACE)
    tree = [Toggle(LEAVES[0], LEAVES[1]), Stable(LEAVES[2], Toggle())]
    leaves, spec = oxtree.tree_flatten(tree, namespace=NAMESPACE)
    oxtree.unregister_pytree_node(Toggle, namespace=NAMESPACE)
    assert leaves == LEAVES[:3]

    def work(index: int, round_: int) -> None:
        rebuilt = spec.unflatten(leaves)
        assert type(rebuilt[0]) is Toggle
        assert rebuilt[0].items == LEAVES[:2]
        assert type(rebuilt[1].b) is Toggle
        assert spec.flatten_up_to(rebuilt) == leaves
        assert oxtree.tree_map(lambda x: x, rebuilt, namespace=NAMESPACE) is not None
        assert repr(spec).startswith("PyTreeSpec([CustomTreeNode(Toggle")

    counts = run_workers(work, rounds=ROUNDS // 2)
    assert counts == [ROUNDS // 2] * WORKERS


def test_jax_face_while_global_registry_changes():
    # The JAX face walks the global namespace, which the churn thread also changes.
    tree = {"a": [LEAVES[0], (LEAVES[1], None)], "b": LEAVES[2]}
    want_leaves, want = oxtree.tree_util.tree_flatten(tree)

    def work(index: int, round_: int) -> None:
        leaves, treedef = oxtree.tree_util.tree_flatten(tree)
        assert leaves == want_leaves
        assert treedef == want
        assert oxtree.tree_util.tree_unflatten(treedef, leaves) == tree
        assert oxtree.tree_util.tree_map(lambda x: x, tree) == tree

    counts = run_workers(work, rounds=ROUNDS // 2, switch=1e-6)
    assert counts == [ROUNDS // 2] * WORKERS
