"""The name `optree`, bound to oxtree, for running optree's own test suite (`make compat`).

Only `tools/compat.py` puts this folder on `sys.path`. `import optree` gives the `oxtree`
module itself, and `import optree.<name>` (any depth) gives `oxtree.<name>`: the same module
objects, so classes and registries are shared, never copied. Nothing here implements
anything; a name optree has and oxtree lacks belongs in oxtree.
"""

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys

import oxtree


def _real_name(name):
    """oxtree's module for optree's `name`: the same path, and `_C` is oxtree's `_core`."""
    parts = name.split(".")
    parts[0] = "oxtree"
    return ".".join("_core" if part == "_C" else part for part in parts)


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolves `optree.X.Y` to the already imported (or importable) `oxtree.X.Y`."""

    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith("optree."):
            return None
        real = _real_name(fullname)
        found = importlib.util.find_spec(real)
        if found is None:
            return None
        is_package = found.submodule_search_locations is not None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=is_package)

    def create_module(self, spec):
        module = importlib.import_module(_real_name(spec.name))
        # The import system stamps our spec onto the module; keep oxtree's own.
        self._spec = module.__spec__
        return module

    def exec_module(self, module):
        module.__spec__ = self._spec


sys.meta_path.insert(0, _Alias())
sys.modules["optree"] = oxtree
