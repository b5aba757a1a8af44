"""Treescope rendering of Modules (``Module.__treescope_repr__`` calls :func:`render`).

Imported only when treescope renders a Module, so treescope is never a dependency of
oxtree. A Module renders in constructor form, ``Linear(weight=..., bias=..., n_in=2)``: its
tree attributes in registration order (submodules by name), then its configuration. The
first line counts the module's leaves by kind (``# Param: 6 (24 B), State: 1 (4 B)``), each
shared leaf once. A submodule reached twice is marked, by treescope's own check for
repeated objects, wherever it appears, and unfolded at its first place only.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from treescope import formatting_util, rendering_parts

from oxtree._arrays import is_shaped
from oxtree.graph import graph_flatten
from oxtree.module._layout import Kind

TYPE_CHECKING = False
if TYPE_CHECKING:  # Module imports this module (lazily); the reverse is for type checkers only
    from oxtree.module._module import Module

# ``kinds_of(module, graphdef)``: the kind of the attribute each graph leaf lies under.
KindsOf = Callable[[Any, Any], "list[Kind | None]"]


def _count(m: Module, kinds_of: KindsOf) -> str:
    """``Param: 6 (24 B), State: 1 (4 B)``: the elements and bytes of the array leaves of
    ``m``'s graph (each shared leaf once), by kind; empty when it has no array leaf."""
    leaves, graphdef = graph_flatten(m, none_is_leaf=True)
    totals: dict[Kind, list[int]] = {}
    for kind, leaf in zip(kinds_of(m, graphdef), leaves, strict=True):
        if kind is None or not is_shaped(leaf):
            continue
        size = math.prod(leaf.shape)
        entry = totals.setdefault(kind, [0, 0])
        entry[0] += size
        entry[1] += size * leaf.dtype.itemsize
    parts = []
    for kind, (size, nbytes) in totals.items():
        label = "Param" if kind is Kind.PARAMETER else kind.value.replace("_", " ").title()
        parts.append(f"{label}: {size:,} ({_bytes(nbytes)})")
    return ", ".join(parts)


def _bytes(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:,} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000  # type: ignore[assignment]
    raise AssertionError("unreachable")  # pragma: no cover


def _seen_before(m: Module) -> bool:
    """Whether treescope's check for repeated objects has met ``m`` already in the
    rendering under way (its tracker is internal to treescope: without it, False)."""
    try:
        from treescope._internal.handlers.shared_value_postprocessor import (
            _shared_object_ids_seen,
        )

        tracker = _shared_object_ids_seen.get()
        return tracker is not None and id(m) in tracker.seen_at_least_once
    except (ImportError, AttributeError):  # another treescope
        return False


def render(m: Module, path: str | None, subtree_renderer: Any, kinds_of: KindsOf) -> Any:
    """The treescope rendering of ``m``: see the module docstring. ``kinds_of`` is the
    Module's ``_leaf_kinds``, passed in so that this module need not import the Module's."""
    layout = m._oxtree_def.layout
    state = vars(m)
    names = [n for n in layout.names if n in state]
    names += [n for n in state if n not in layout.name_to_kind]
    children = []
    for i, name in enumerate(names):
        child_path = None if path is None else f"{path}.{name}"
        last = i == len(names) - 1
        comma = (
            rendering_parts.fold_condition(expanded=rendering_parts.text(","))
            if last
            else rendering_parts.siblings(
                ",", rendering_parts.fold_condition(collapsed=rendering_parts.text(" "))
            )
        )
        children.append(
            rendering_parts.build_full_line_with_annotations(
                rendering_parts.siblings_with_annotations(
                    f"{name}=", subtree_renderer(state[name], path=child_path)
                ),
                comma,
            )
        )
    count = _count(m, kinds_of)
    return rendering_parts.build_foldable_tree_node_from_children(
        prefix=rendering_parts.siblings(rendering_parts.maybe_qualified_type_name(type(m)), "("),
        children=children,
        suffix=")",
        path=path,
        background_color=formatting_util.color_from_string(type(m).__qualname__),
        expand_state=(
            rendering_parts.ExpandState.COLLAPSED
            if _seen_before(m)
            else rendering_parts.ExpandState.WEAKLY_COLLAPSED
        ),
        first_line_annotation=(
            rendering_parts.comment_color(rendering_parts.text(f"  # {count}")) if count else None
        ),
    )
