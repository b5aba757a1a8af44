"""Every docstring example of the public modules runs, the Rust core's included."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import oxtree
import pytest

# Every public module of the package (and the core), found rather than listed, so a new
# module's examples run without anyone remembering to add it here.
MODULES = [
    "oxtree",
    "oxtree._core",
    *sorted(
        f"oxtree.{info.name}"
        for info in pkgutil.iter_modules(oxtree.__path__)
        if not info.name.startswith("_")
    ),
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
