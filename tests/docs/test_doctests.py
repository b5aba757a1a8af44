"""Every docstring example of the public modules runs, the Rust core's included."""

from __future__ import annotations

import doctest
import importlib
import inspect
import pkgutil
import types
from types import ModuleType
from typing import Any

import oxtree
import pytest
from oxtree import tree, tree_util

# Every public module of the package (and the core), found rather than listed, so a new
# module's examples run without anyone remembering to add it here. The core's `jax_face`
# submodule (the JAX face's functions) is not importable by name, so it is listed. A public
# subpackage (oxtree.jax, oxtree.module) is read whole: its classes and functions are defined
# in its private submodules, whose examples run there.
_PUBLIC = sorted(
    info for info in pkgutil.iter_modules(oxtree.__path__) if not info.name.startswith("_")
)
MODULES = [
    "oxtree",
    "oxtree._core",
    "oxtree._core.jax_face",
    *(f"oxtree.{info.name}" for info in _PUBLIC),
    *sorted(
        sub.name
        for info in _PUBLIC
        if info.ispkg
        for sub in pkgutil.walk_packages(
            importlib.import_module(f"oxtree.{info.name}").__path__, f"oxtree.{info.name}."
        )
    ),
]


def _defined_in(obj: Any) -> str | None:
    """The module of MODULES whose source defines ``obj`` (a function, or a class by its
    functions), whatever its ``__module__`` says: a public class or function of a package
    names the package as its home but is defined in one of its submodules."""
    if inspect.isclass(obj):
        for member in vars(obj).values():
            found = _defined_in(getattr(member, "__func__", member))
            if found is not None:
                return found
        return None
    globals_ = getattr(obj, "__globals__", None)
    name = globals_.get("__name__") if isinstance(globals_, dict) else None
    return name if name in MODULES else None


class _Finder(doctest.DocTestFinder):
    """doctest's finder, taking a class or function for the module that defines it (see
    `_defined_in`) rather than the one its ``__module__`` names, so that its examples (a
    class's methods' included) are found there, once."""

    def _from_module(self, module: ModuleType, obj: Any) -> bool:  # type: ignore[override]
        defined = _defined_in(obj)
        if defined is not None:
            return defined == module.__name__
        return bool(super()._from_module(module, obj))  # type: ignore[misc]


# The namespaces whose every public callable must show an example.
FACES = (oxtree, tree_util, tree)


def _module(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError:  # a submodule an extension made: an attribute of its parent
        parent, _, child = name.rpartition(".")
        return getattr(importlib.import_module(parent), child)


def _doctests(name: str) -> list[doctest.DocTest]:
    """The examples of module `name`, with the names a reader of its docs has at hand."""
    module = _module(name)
    # The core's examples use the public names bare, as a user of `from oxtree import *` would;
    # those of a public package's submodules, the package's names too (its reader's).
    globs = {**{n: getattr(oxtree, n) for n in oxtree.__all__}}
    package = name.rpartition(".")[0]
    if package != "oxtree" and package in MODULES:
        globs.update(vars(importlib.import_module(package)))
    globs.update(vars(module))
    finder = _Finder(exclude_empty=True)
    tests = finder.find(module, name, globs=globs)
    found = {test.docstring for test in tests}
    # The finder skips what it cannot tie to the module: an alias with its own docstring
    # (`Parameter = Annotated[...]`, its __doc__ set), and the functions of a module whose
    # __name__ is not an import path (the core's `jax_face` submodule is an attribute only).
    parser = doctest.DocTestParser()
    public = getattr(module, "__all__", None) or [n for n in vars(module) if n[0] != "_"]
    for attr in public:
        obj = getattr(module, attr)
        doc = getattr(obj, "__doc__", None)
        if inspect.ismodule(obj) or not isinstance(doc, str) or ">>>" not in doc:
            continue
        # Defined here (not re-exported), and its own docstring rather than its type's; one
        # defined in a submodule of the list runs there.
        if getattr(obj, "__module__", None) != module.__name__ or doc == type(obj).__doc__:
            continue
        if _defined_in(obj) not in (None, name):
            continue
        if doc not in found:
            found.add(doc)
            tests.append(parser.get_doctest(doc, dict(globs), f"{name}.{attr}", None, 0))
    return tests


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in _doctests(name):
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} docstring example(s) failed in {name}"
    if name in ("oxtree._core", "oxtree._core.jax_face", "oxtree.registry", "oxtree.dataclasses"):
        assert result.attempted > 0, f"{name} has no docstring examples"


def _public_callables() -> list[tuple[str, Any]]:
    """Every callable in the faces' ``__all__`` (submodules aside), as ``(full name, obj)``."""
    out = []
    for face in FACES:
        for attr in face.__all__:
            obj = getattr(face, attr)
            # Type aliases (`tree_util.KeyPath = tuple[KeyEntry, ...]`, as JAX defines it)
            # are `types.GenericAlias` objects: they carry no docstring of their own.
            if isinstance(obj, types.GenericAlias):
                continue
            if not inspect.ismodule(obj) and callable(obj):
                out.append((f"{face.__name__}.{attr}", obj))
    return out


def test_every_public_name_has_an_example() -> None:
    # A name with an example in its docstring; an alias (`tree_util.PyTreeDef`) shares it.
    missing = [
        name
        for name, obj in _public_callables()
        if ">>>" not in (getattr(obj, "__doc__", "") or "")
    ]
    assert missing == [], f"{len(missing)} public names have no `>>>` example: {missing}"


def test_every_public_example_runs() -> None:
    # ... and that example is one `test_docstring_examples` runs (the finder skips some
    # objects, such as those whose __module__ names no module in MODULES).
    run = {test.docstring for name in MODULES for test in _doctests(name)}
    unrun = [
        name
        for name, obj in _public_callables()
        if ">>>" in (getattr(obj, "__doc__", "") or "") and obj.__doc__ not in run
    ]
    assert unrun == [], f"these public names' examples are never run: {unrun}"
