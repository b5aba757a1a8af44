"""HTML for :mod:`oxtree.pretty`: a collapsible tree of ``<details>`` elements.

Self-contained: inline ``style`` attributes only (no ``<style>`` block that would leak into a
notebook's page, no scripts, no external assets), and every piece of text from the tree goes
through :func:`html.escape`.
"""

from __future__ import annotations

from html import escape

from oxtree._core import keystr
from oxtree._pretty_model import (
    CYCLE,
    MORE,
    NODE,
    REF,
    STATIC,
    Item,
    atom_text,
    brackets,
    type_label,
)

_ROOT_STYLE = (
    "font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, 'Liberation Mono', monospace;"
    " font-size: 13px; line-height: 1.5; overflow-x: auto;"
)
_CHILDREN_STYLE = "margin-left: 0.45em; padding-left: 1.1em; border-left: 1px solid #c8ccd1;"
_ROW_STYLE = "padding-left: 1.1em; white-space: pre-wrap;"
_SUMMARY_STYLE = "cursor: pointer; white-space: pre-wrap;"
_KEY_STYLE = "color: #0b5cad;"
_TYPE_STYLE = "color: #7c3aad; font-weight: 600;"
_LEAF_STYLE = "color: #1a7f37;"
_NOTE_STYLE = "color: #6a737d;"
_REF_STYLE = "color: #b35900; font-style: italic;"


def _span(style: str, text: str) -> str:
    return f'<span style="{style}">{escape(text)}</span>'


def _label(item: Item) -> str:
    if item.parent is None or item.kind == MORE:
        return ""
    return _span(_KEY_STYLE, keystr([item.key])) + ": "


def _count(entries: list[Item]) -> str:
    """``3 items``: the node's children (static fields are not children)."""
    count = sum(item.count if item.kind == MORE else item.kind != STATIC for item in entries)
    return f"{count:,} item" if count == 1 else f"{count:,} items"


def _row(item: Item) -> str:
    """A one-line entry: a leaf, None, a static value, a reference, an elision, an empty node."""
    text = atom_text(item)
    if text is None:
        assert item.spec is not None
        opening, closing = brackets(item.spec, True)
        body = _span(_TYPE_STYLE, opening + closing)
    elif item.kind in (REF, CYCLE):
        body = _span(_REF_STYLE, text)
    elif item.kind == MORE:
        body = _span(_NOTE_STYLE, text)
    elif item.kind == STATIC:
        body = _span(_LEAF_STYLE, text) + _span(_NOTE_STYLE, "  (static)")
    else:
        body = _span(_LEAF_STYLE, text)
    return f'<div style="{_ROW_STYLE}">{_label(item)}{body}</div>'


def render_html(root: Item, *, open_depth: int, caption: str = "") -> str:
    """The model under ``root`` as nested ``<details>``; levels above ``open_depth`` start open."""
    out = [f'<div class="oxtree-view" style="{_ROOT_STYLE}">']
    # Work items: an Item to render at a depth, or a literal closing string.
    stack: list[tuple[Item, int] | str] = [(root, 0)]
    while stack:
        work = stack.pop()
        if isinstance(work, str):
            out.append(work)
            continue
        item, depth = work
        if item.kind != NODE or not item.entries:
            if depth == 0 and caption:
                out.append(f"<div>{_span(_NOTE_STYLE, caption)}</div>")
            out.append(_row(item))
            continue
        assert item.spec is not None
        is_open = " open" if depth < open_depth else ""
        head = _span(_TYPE_STYLE, type_label(item.spec))
        note = caption if depth == 0 and caption else _count(item.entries)
        out.append(
            f'<details{is_open}><summary style="{_SUMMARY_STYLE}">{_label(item)}{head}'
            f"{_span(_NOTE_STYLE, '  ' + note)}</summary>"
            f'<div style="{_CHILDREN_STYLE}">'
        )
        stack.append("</div></details>")
        stack.extend((child, depth + 1) for child in reversed(item.entries))
    out.append("</div>")
    return "".join(out)
