"""Registrations that reach JAX's registry: at once when JAX is loaded, else after ``import jax``.

oxtree never imports JAX. A registration JAX must see too (one made through
``oxtree.tree_util``, a Module class) is handed to :func:`register_with_jax`, which makes it
with JAX's own function at once when JAX has been imported. Otherwise it waits in
``PENDING``, and a finder sits at the front of ``sys.meta_path``: when ``jax`` is imported it
lets the usual finder and loader do the work, and once ``jax`` has finished executing it makes
the waiting registrations and leaves ``sys.meta_path``. The finder is there only while
something waits, so a process that never imports JAX just keeps the registrations waiting.

A type JAX already has (registered with JAX by other code) is left alone in JAX: oxtree's rule
applies in oxtree, JAX's in JAX. A registration JAX refuses raises when it is made at once (the
caller's ``undo`` runs first) and becomes a RuntimeWarning when it waited: it must not break
someone's ``import jax``.
"""

from __future__ import annotations

import _thread
import sys
import warnings

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing at run time
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType
    from typing import Any, TypeAlias

    #: A registration's arguments, or the function of JAX's tree_util module making them.
    Arguments: TypeAlias = tuple[Any, ...] | Callable[[ModuleType], Sequence[Any]]

__all__ = ["PENDING", "WHEN_LOADED", "flush", "reached_jax", "register_with_jax", "when_jax_loaded"]

#: The registrations waiting for ``import jax`` to finish, in the order they were made: the
#: type, the name of JAX's registration function, and the arguments it is called with (or
#: the function of JAX's tree_util module that makes them, see :func:`register_with_jax`).
PENDING: list[tuple[type, str, Arguments]] = []

#: What waits for JAX besides registrations: functions of JAX's tree_util module, called once
#: when JAX has been imported (see :func:`when_jax_loaded`).
WHEN_LOADED: list[Callable[[ModuleType], object]] = []

# The types oxtree itself registered with JAX, so that oxtree.jax.register leaves them alone.
_REACHED: set[type] = set()
_LOCK = _thread.allocate_lock()
# JAX's own tree_util module (`jax._src.tree_util`), once JAX has finished importing.
_jax_tree_util_module: ModuleType | None = None
# Set when the finder saw `jax` finish executing: importlib marks the module initialised
# only after its loader returns, which is when the waiting registrations run.
_jax_executed = False


def _jax_tree_util() -> ModuleType | None:
    """JAX's own ``jax._src.tree_util`` when ``jax`` has finished importing, else None."""
    global _jax_tree_util_module
    if _jax_tree_util_module is not None:
        return _jax_tree_util_module
    jax = sys.modules.get("jax")
    if jax is None:
        return None
    # importlib's own flag for a module whose code is still running (jax half imported).
    if not _jax_executed and getattr(getattr(jax, "__spec__", None), "_initializing", False):
        return None
    # oxtree.tree_util is a drop-in for jax.tree_util and may stand in for it in sys.modules
    # (JAX's own test suite is run that way): JAX's functions are the ones that are not ours.
    package = sys.modules.get("jax._src")
    for found in (sys.modules.get("jax._src.tree_util"), getattr(package, "tree_util", None)):
        register = getattr(found, "register_pytree_node", None)
        if register is not None and not getattr(register, "__module__", "").startswith("oxtree"):
            _jax_tree_util_module = found
            return found
    return None


def _register(jtu: ModuleType, cls: type, name: str, args: Arguments) -> None:
    try:
        getattr(jtu, name)(*(args(jtu) if callable(args) else args))
    except ValueError as err:
        # JAX has the type from other code (or as a builtin node): its rule stays JAX's.
        if "Duplicate" in str(err):
            return
        raise
    with _LOCK:
        _REACHED.add(cls)


def register_with_jax(
    cls: type,
    name: str,
    args: Sequence[Any] | Callable[[ModuleType], Sequence[Any]],
    undo: Callable[[], object] | None = None,
) -> None:
    """Registers ``cls`` with JAX by ``jax.tree_util.<name>(*args)``: now if JAX is loaded,
    else once ``jax`` has been imported. ``args`` may be a function of JAX's tree_util module
    returning the arguments, called only then (for arguments made of JAX's own objects, its
    ``GetAttrKey`` for one). When JAX refuses it now, ``undo()`` runs and the error is raised
    again, JAX's message first."""
    with _LOCK:
        jtu = _jax_tree_util()
        if jtu is None:
            PENDING.append((cls, name, args if callable(args) else tuple(args)))
            if _HOOK not in sys.meta_path:
                sys.meta_path.insert(0, _HOOK)
            return
    try:
        _register(jtu, cls, name, args if callable(args) else tuple(args))
    except Exception as err:
        if undo is not None:
            undo()
        kind = type(err) if type(err) in (ValueError, TypeError) else RuntimeError
        undone = "" if undo is None else "; its registration with oxtree was undone"
        raise kind(f"{err} (JAX refused to register {cls.__qualname__}{undone})") from err


def when_jax_loaded(fn: Callable[[ModuleType], object]) -> None:
    """Calls ``fn(jax_tree_util)`` now if JAX is loaded, else once ``jax`` has been imported
    (with the waiting registrations). Never imports JAX."""
    with _LOCK:
        jtu = _jax_tree_util()
        if jtu is None:
            WHEN_LOADED.append(fn)
            if _HOOK not in sys.meta_path:
                sys.meta_path.insert(0, _HOOK)
            return
    fn(jtu)


def flush() -> None:
    """Makes the waiting registrations if JAX has finished importing, and removes the finder.
    One that JAX refuses is reported as a RuntimeWarning naming the type and the reason."""
    with _LOCK:
        jtu = _jax_tree_util()
        if jtu is None or not (PENDING or WHEN_LOADED):
            return
        waiting = list(PENDING)
        PENDING.clear()
        callbacks = list(WHEN_LOADED)
        WHEN_LOADED.clear()
        while _HOOK in sys.meta_path:
            sys.meta_path.remove(_HOOK)
    for fn in callbacks:
        fn(jtu)
    refused = []
    for cls, name, args in waiting:
        try:
            _register(jtu, cls, name, args)
        except Exception as err:
            refused.append((cls, err))
    for cls, reason in refused:
        warnings.warn(
            f"oxtree could not register {cls.__module__}.{cls.__qualname__} with JAX when jax "
            f"was imported ({type(reason).__name__}: {reason}); it is a pytree node to oxtree "
            "only",
            RuntimeWarning,
            stacklevel=2,
        )


def reached_jax(cls: type) -> bool:
    """Whether oxtree registered ``cls`` with JAX itself (through ``oxtree.tree_util`` or as a
    Module class), rather than JAX having it from other code or not at all."""
    with _LOCK:
        return cls in _REACHED


class _RegisterAfterLoad:
    """JAX's own loader, followed by the waiting registrations once ``jax`` has executed."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)  # type: ignore[no-any-return]

    def exec_module(self, module: ModuleType) -> None:
        global _jax_executed
        # The module and its spec name the real loader for whoever asks them later.
        spec = getattr(module, "__spec__", None)
        if spec is not None and spec.loader is self:
            spec.loader = self.loader
        if getattr(module, "__loader__", None) is self:
            module.__loader__ = self.loader
        self.loader.exec_module(module)
        with _LOCK:
            _jax_executed = True
        flush()


class _JaxImportHook:
    """The finder that waits for ``import jax`` (in ``sys.meta_path`` while ``PENDING`` is not
    empty). It finds nothing itself: it asks the finders after it."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        loaded = _jax_tree_util() is not None
        if fullname != "jax" and not loaded:
            return None
        spec = self._spec_of_the_others(fullname, path, target)
        if loaded:
            # JAX finished importing while registrations were waiting (they were made while
            # jax was half imported): make them now. Answering with the next finders' spec
            # ends importlib's pass over sys.meta_path, which flush() has just changed.
            flush()
        elif spec is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _RegisterAfterLoad(spec.loader)  # type: ignore[assignment]
        return spec

    def _spec_of_the_others(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None
    ) -> ModuleSpec | None:
        finders = list(sys.meta_path)
        after = finders[finders.index(self) + 1 :] if self in finders else finders
        for finder in after:
            find_spec = getattr(finder, "find_spec", None)
            if find_spec is not None:
                spec = find_spec(fullname, path, target)
                if spec is not None:
                    return spec  # type: ignore[no-any-return]
        return None


_HOOK = _JaxImportHook()
