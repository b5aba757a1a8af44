"""pytest plugin for the JAX compatibility run (loaded as a conftest in the run's temp dir).

``OXTREE_COMPAT_FACE=oxtree`` presents oxtree's faces as ``jax.tree_util`` and ``jax.tree``,
and, while the test module is imported, oxtree's names for every name the module imports
from ``jax._src.tree_util``. JAX's own internals (jit, tracing, ``jax.numpy``, the test
helpers) keep the real modules they imported before this plugin ran.
``OXTREE_COMPAT_FACE=jax`` changes nothing: that run tells which tests pass on JAX itself.

Each test's outcome goes to the JSON file named by ``OXTREE_COMPAT_RESULTS``; tests named in
``deselected.txt`` are not run.
"""

from __future__ import annotations

import fnmatch
import json
import os
import sys
import types
from pathlib import Path
from typing import Any

import jax
import jax._src.test_util
import jax._src.tree_util
import jax.flatten_util
import jax.numpy
import jax.tree
import jax.tree_util
import pytest

FACE = os.environ.get("OXTREE_COMPAT_FACE", "jax")
DESELECTED = Path(os.environ["OXTREE_COMPAT_DESELECTED"])
RESULTS = Path(os.environ["OXTREE_COMPAT_RESULTS"])

_outcomes: dict[str, dict[str, str]] = {}


def _missing(module: str, name: str) -> Any:
    def missing(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{module} has no {name}")

    missing.__name__ = name
    return missing


class _InternalFace(types.ModuleType):
    """``jax._src.tree_util`` as the test module sees it: oxtree.tree_util's names only.

    A name oxtree lacks is a function that raises, so only the tests that use it fail (never
    a silent fall back to JAX's own implementation).
    """

    def __getattr__(self, name: str) -> Any:
        import oxtree.tree_util

        try:
            return getattr(oxtree.tree_util, name)
        except AttributeError:
            return _missing("oxtree.tree_util", name)


if FACE == "oxtree":
    import oxtree.jax  # before the swap below: it imports JAX's own jax.tree_util
    import oxtree.tree
    import oxtree.tree_util

    jax.tree_util = oxtree.tree_util  # type: ignore[assignment]
    jax.tree = oxtree.tree  # type: ignore[assignment]
    sys.modules["jax.tree_util"] = oxtree.tree_util
    sys.modules["jax.tree"] = oxtree.tree

    @pytest.hookimpl(hookwrapper=True)
    def pytest_make_collect_report(collector: pytest.Collector) -> Any:
        # Only while the test module is imported: JAX modules loaded later keep JAX's own.
        if not isinstance(collector, pytest.Module):
            yield
            return
        real = sys.modules["jax._src.tree_util"]
        sys.modules["jax._src.tree_util"] = _InternalFace("jax._src.tree_util")
        try:
            yield
        finally:
            sys.modules["jax._src.tree_util"] = real

    def pytest_runtest_setup(item: pytest.Item) -> None:
        # jax.jit flattens its arguments with JAX's registry: a type registered through
        # oxtree is a node there once mirrored, which is what a user of oxtree does
        # (`oxtree.jax.register`). Types the test module registered so far are mirrored.
        oxtree.jax.register_namespace()


def _deselection_patterns() -> list[str]:
    patterns = []
    for line in DESELECTED.read_text().splitlines():
        pattern = line.split("#", 1)[0].strip()
        if pattern:
            patterns.append(pattern)
    return patterns


def _short_id(nodeid: str) -> str:
    return nodeid.split("::", 1)[1]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    patterns = _deselection_patterns()
    keep, drop = [], []
    for item in items:
        short = _short_id(item.nodeid)
        (drop if any(fnmatch.fnmatchcase(short, p) for p in patterns) else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    short = _short_id(report.nodeid)
    entry = _outcomes.setdefault(short, {"outcome": "passed", "why": ""})
    if report.when == "call" and report.outcome == "passed":
        return
    if report.outcome in ("failed", "skipped") and entry["outcome"] == "passed":
        entry["outcome"] = report.outcome
        crash = getattr(report.longrepr, "reprcrash", None)
        if crash is not None:
            entry["why"] = crash.message.splitlines()[0] if crash.message else ""
        elif isinstance(report.longrepr, tuple):  # a skip: (file, line, reason)
            entry["why"] = str(report.longrepr[2])
        else:
            entry["why"] = str(report.longrepr).splitlines()[-1] if report.longrepr else ""


def pytest_sessionfinish(session: pytest.Session) -> None:
    RESULTS.write_text(json.dumps(_outcomes, indent=1, sort_keys=True))
