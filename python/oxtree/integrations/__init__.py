"""Integrations with array libraries and attrs, as ``optree.integrations`` offers them.

Each submodule (``attrs``, ``jax``, ``numpy``, ``torch``) is imported on first use and
raises ``ImportError`` when its library is not installed.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

SUBMODULES: frozenset[str] = frozenset({"attrs", "jax", "numpy", "torch"})


def __dir__() -> list[str]:
    return [*sorted(SUBMODULES), "SUBMODULES"]


def __getattr__(name: str, /) -> ModuleType:
    if name in SUBMODULES:
        submodule = importlib.import_module(f"{__name__}.{name}")
        setattr(sys.modules[__name__], name, submodule)
        return submodule
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
