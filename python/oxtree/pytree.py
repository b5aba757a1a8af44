"""The tree functions under short names (``pytree.flatten``, ``pytree.map``, ...), and
:func:`reexport`, which makes a copy of this module bound to a registry namespace.

Every ``oxtree.tree_<name>`` is here as ``<name>``, the very same object; so are
``register_node`` (``register_pytree_node``), ``register_node_class``, ``unregister_node``,
``dict_insertion_ordered`` and the submodules ``dataclasses`` and ``functools``.

>>> from oxtree import pytree
>>> pytree.map(lambda x: x + 1, {'a': (1, 2)})
{'a': (2, 3)}

A library gives itself tree utilities bound to its own registry namespace:

>>> mylib = pytree.reexport(namespace='mylib', module='mylib.pytree')
>>> @mylib.dataclasses.dataclass
... class Pair:
...     a: int
...     b: int
>>> mylib.leaves([Pair(1, 2)]), pytree.leaves([Pair(1, 2)])
([1, 2], [Pair(a=1, b=2)])
"""

from __future__ import annotations

import builtins as _builtins
import functools as _functools
import inspect as _inspect
import sys as _sys
from types import ModuleType as _ModuleType

import oxtree as _ox
from oxtree import dataclasses, functools
from oxtree._core import PyTreeKind, PyTreeSpec
from oxtree.accessors import PyTreeEntry
from oxtree.registry import dict_insertion_ordered
from oxtree.registry import register_pytree_node as register_node
from oxtree.registry import register_pytree_node_class as register_node_class
from oxtree.registry import unregister_pytree_node as unregister_node
from oxtree.version import __version__

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing at run time
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

# Short name -> oxtree's name, for every `tree_*` oxtree exports (loaded on first use).
_SHORT = {name[len("tree_") :]: name for name in _ox.__all__ if name.startswith("tree_")}

__all__ = [
    "reexport",
    "PyTreeSpec",
    "PyTreeKind",
    "PyTreeEntry",
    *_SHORT,
    "register_node",
    "register_node_class",
    "unregister_node",
    "dict_insertion_ordered",
]


def __getattr__(name: str) -> Any:
    full = _SHORT.get(name)
    if full is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_ox, full)
    # Cached as a global: code in this module names the builtins it uses (`set`, `all`, ...)
    # through `_builtins`, since these short names shadow them.
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(_builtins.set(globals()) | _builtins.set(_SHORT))


class ReexportedModule(_ModuleType):
    """A module that offers ``original``'s public names with ``namespace`` as the default.

    A function that takes ``namespace`` is wrapped so that the argument defaults to the
    module's namespace (the ``.get`` of ``register_node`` too); other names are the
    original's own objects.
    """

    def __init__(
        self,
        name: str,
        /,
        *,
        namespace: str,
        original: _ModuleType,
        extra_members: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(
            name,
            f"Re-exports :mod:`{original.__name__}` as :mod:`{name}` "
            f"with namespace :const:`{namespace!r}`.",
        )
        public = {n for n in original.__all__ if n != "reexport"}
        for key, value in (extra_members or {}).items():
            setattr(self, key, value)
        self._namespace = namespace
        self._original = original
        self._public = public
        self._all = sorted(public)
        self._dir = sorted(public | _builtins.set(extra_members or ()))

    @property  # type: ignore[override]
    def __all__(self) -> list[str]:
        """The names ``from <module> import *`` gives: the original's, less ``reexport``."""
        return list(self._all)

    def __dir__(self) -> list[str]:
        return list(self._dir)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name not in self._public:
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
        value = getattr(self._original, name)
        if callable(value) and not isinstance(value, type):
            value = _with_namespace(value, self._namespace)
        setattr(self, name, value)
        return value


def _with_namespace(func: Callable[..., Any], namespace: str) -> Callable[..., Any]:
    """``func`` with ``namespace`` as its namespace argument's default (``func`` itself when
    it takes none)."""
    try:
        signature = _inspect.signature(func)
    except (TypeError, ValueError):
        return func
    if "namespace" not in signature.parameters:
        return func

    @_functools.wraps(func)
    def bound(*args: Any, namespace: str = namespace, **kwargs: Any) -> Any:
        return func(*args, namespace=namespace, **kwargs)

    bound.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[
            p.replace(default=namespace) if p.name == "namespace" else p
            for p in signature.parameters.values()
        ]
    )
    if callable(getattr(func, "get", None)):
        bound.get = _with_namespace(func.get, namespace)  # type: ignore[attr-defined]
    return bound


def reexport(*, namespace: str, module: str | None = None) -> _ModuleType:
    """A module with this module's names, its functions defaulting to ``namespace``.

    Its ``dataclasses.dataclass``, ``register_node`` and ``register_node_class`` register in
    that namespace; its tree functions look types up there (then in the global one). The
    module is ``module`` (default: ``<caller's module>.pytree``), with submodules
    ``<module>.dataclasses`` and ``<module>.functools``; all three are added to
    ``sys.modules``, and none may exist already.

    >>> lib = reexport(namespace='doc-lib', module='doc_lib.pytree')
    >>> lib.__name__, lib.dataclasses.__name__
    ('doc_lib.pytree', 'doc_lib.pytree.dataclasses')
    """
    if not isinstance(namespace, str):
        raise TypeError(f"The namespace must be a string, got {namespace!r}.")
    if module is None:
        module = f"{_sys._getframe(1).f_globals.get('__name__', '__main__')}.pytree"
    if not module or not _builtins.all(part.isidentifier() for part in module.split(".")):
        raise ValueError(f"invalid module name: {module!r}")
    names = (module, f"{module}.dataclasses", f"{module}.functools")
    for name in names:
        if name in _sys.modules:
            raise ValueError(f"module {name!r} already exists")
    subs = {
        "dataclasses": ReexportedModule(names[1], namespace=namespace, original=dataclasses),
        "functools": ReexportedModule(names[2], namespace=namespace, original=functools),
    }
    mod = ReexportedModule(
        module,
        namespace=namespace,
        original=_sys.modules[__name__],
        extra_members={"__version__": __version__, **subs},
    )
    _sys.modules[names[0]] = mod
    _sys.modules[names[1]] = subs["dataclasses"]
    _sys.modules[names[2]] = subs["functools"]
    return mod
