"""Every docstring example of the public modules runs, the Rust core's included."""

from __future__ import annotations

import doctest
import importlib

import oxtree
import pytest

MODULES = [
    "oxtree",
    "oxtree._core",
    "oxtree.registry",
    "oxtree.dataclasses",
    "oxtree.functools",
    "oxtree.accessors",
    "oxtree.treespec",
    "oxtree.serialization",
    "oxtree.tree_util",
    "oxtree.tree",
    "oxtree.types",
    "oxtree.ops",
    "oxtree.pytree",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    # The core's examples use the public names bare, as a user of `from oxtree import *` would.
    globs = {**{n: getattr(oxtree, n) for n in oxtree.__all__}, **vars(module)}
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    tests = finder.find(module, name, globs=globs)
    for test in tests:
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} docstring example(s) failed in {name}"
    if name in ("oxtree._core", "oxtree.registry", "oxtree.dataclasses"):
        assert result.attempted > 0, f"{name} has no docstring examples"
