"""Seeing trees: pretty text, summary tables, differences, and HTML views.

Everything here reads trees the way the engine does (one-level flattens with the engine's keys),
so registered nodes and dataclasses show their field names, and every place is named by its key
path in ``keystr`` form, rooted at ``tree`` as in the engine's error messages.

>>> import numpy as np
>>> params = {'w': np.zeros((3, 4), np.float32), 'b': np.zeros(4, np.float32), 'step': 0}
>>> pprint(params)
{'w': f32[3,4], 'b': f32[4], 'step': 0}
>>> print(tree_diff(params, {'w': params['w'], 'b': [0.0]}))
tree: expected dict with keys ['b', 'step', 'w'], got dict with keys ['w', 'b']: {'w': f32[3,4], 'b': [0.0]}; missing keys ['step']
tree['b']: expected a leaf of type ndarray, got list of length 1: [0.0]

Nothing here imports numpy or jax: arrays are recognised by their ``shape`` and ``dtype``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import IO, Any, NamedTuple

from oxtree._core import MAX_RECURSION_DEPTH, PyTreeKind, PyTreeSpec
from oxtree._pretty_model import (
    CYCLE,
    LEAF,
    MORE,
    NODE,
    REF,
    STATIC,
    TRACKED_KINDS,
    Item,
    array_shape,
    array_text,
    atom_text,
    axes_note,
    build,
    build_from_spec,
    display_order,
    key_label,
    node_brackets,
    one_level,
    short_repr,
    type_label,
    walk,
)
from oxtree.ops import _path_str

__all__ = [
    "Difference",
    "TreeDiff",
    "TreeView",
    "pformat",
    "pprint",
    "summary",
    "tree_diff",
    "treespec_html",
    "view",
]

# Defaults shared by the text and HTML renderings.
_WIDTH = 100
_INDENT = 2
_MAX_ITEMS = 100


def _check_count(name: str, value: Any, minimum: int, *, optional: bool = False) -> None:
    if optional and value is None:
        return
    if not isinstance(value, int) or isinstance(value, bool):
        allowed = "an int or None" if optional else "an int"
        raise TypeError(f"{name} must be {allowed}, got {type(value).__name__}: {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")


# --------------------------------------------------------------------------------------------------
# Text layout.


def _is_single_tuple(item: Item) -> bool:
    assert item.spec is not None
    return (
        item.spec.kind == PyTreeKind.TUPLE
        and len(item.entries) == 1
        and item.entries[0].kind != MORE
    )


def _child_label(item: Item) -> str:
    return "" if item.kind == MORE else key_label(item.key)


def _fill_flat(root: Item, width: int) -> None:
    """Set each item's one-line text, or None where it cannot fit in ``width`` columns."""
    for item in reversed(list(walk(root))):  # children before their parents
        text = atom_text(item)
        if text is not None:
            item.flat = text if len(text) <= width and "\n" not in text else None
            continue
        assert item.spec is not None
        opening, closing = node_brackets(item)
        parts = [opening]
        length = len(opening) + len(closing)
        for index, child in enumerate(item.entries):
            if child.flat is None:
                item.flat = None
                break
            piece = (", " if index else "") + _child_label(child) + child.flat
            length += len(piece)
            if length > width:
                item.flat = None
                break
            parts.append(piece)
        else:
            if _is_single_tuple(item):
                parts.append(",")
            parts.append(closing)
            text = "".join(parts)
            item.flat = text if len(text) <= width else None


def _layout(root: Item, width: int, indent: int) -> str:
    """One line when it fits in ``width``, else one child per line, ``indent`` deeper."""
    _fill_flat(root, width)
    # Indentation stops growing at half the width, so that a tree nested deeper than the
    # width allows still prints in O(lines * width) characters and leaves room for the text.
    max_pad = width // 2
    lines: list[str] = []
    stack: list[tuple[Item, int, str, str] | str] = [(root, 0, "", "")]
    while stack:
        work = stack.pop()
        if isinstance(work, str):
            lines.append(work)
            continue
        item, level, label, suffix = work
        pad = " " * min(level * indent, max_pad)
        if item.flat is not None and len(pad) + len(label) + len(item.flat) + len(suffix) <= width:
            lines.append(pad + label + item.flat + suffix)
            continue
        text = atom_text(item)
        if text is not None:  # too long or several lines: continuation lines keep the indent
            first, *rest = text.split("\n")
            lines.append(pad + label + first + ("" if rest else suffix))
            lines.extend(pad + line for line in rest[:-1])
            if rest:
                lines.append(pad + rest[-1] + suffix)
            continue
        assert item.spec is not None
        opening, closing = node_brackets(item)
        if not item.entries:
            lines.append(pad + label + opening + closing + suffix)
            continue
        lines.append(pad + label + opening)
        stack.append(pad + closing + suffix)
        stack.extend(
            (child, level + 1, _child_label(child), ",") for child in reversed(item.entries)
        )
    return "\n".join(lines)


def pformat(
    tree: Any,
    /,
    is_leaf: Callable[[Any], bool] | None = None,
    *,
    width: int = _WIDTH,
    indent: int = _INDENT,
    max_items: int | None = _MAX_ITEMS,
    max_leaves: int | None = None,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> str:
    """``tree`` as indented text that fits in ``width`` columns where it can.

    A node that fits on one line stays on one line; otherwise it is broken with one child per
    line, ``indent`` spaces deeper (up to half the width), each followed by a comma. Arrays (anything with ``shape`` and
    ``dtype``, numpy and jax alike) print as ``f32[3,4]``; functions by name; other leaves by
    ``repr``. Namedtuples, dataclasses and registered nodes show their children by field name
    (the engine's keys), dataclasses also their static fields. Dicts keep their own order.

    A node with more than ``max_items`` children shows the first ``max_items`` and
    ``... (N more)``; after ``max_leaves`` leaves (no limit by default) the rest is left out
    the same way. A list, dict, deque or registered node met a second time prints as
    ``<ref PATH>``, the key path of its first occurrence, and one met again inside itself as
    ``<ref PATH (cycle)>``, so graphs print (once) and cycles end.

    >>> from collections import namedtuple
    >>> Point = namedtuple('Point', 'x y')
    >>> print(pformat({'a': Point(1, 2), 'b': [3, None]}))
    {'a': Point(x=1, y=2), 'b': [3, None]}
    >>> print(pformat({'a': Point(1, 2), 'b': [3, None]}, width=24))
    {
      'a': Point(x=1, y=2),
      'b': [3, None],
    }
    >>> print(pformat(list(range(100)), max_items=3))
    [0, 1, 2, ... (97 more)]
    >>> shared = [1, 2]
    >>> loop = {'shared': shared, 'again': shared}
    >>> loop['self'] = loop
    >>> print(pformat(loop))
    {'shared': [1, 2], 'again': <ref tree['shared']>, 'self': <ref tree (cycle)>}
    """
    _check_count("width", width, 1)
    _check_count("indent", indent, 0)
    _check_count("max_items", max_items, 1, optional=True)
    _check_count("max_leaves", max_leaves, 1, optional=True)
    root = build(
        tree,
        is_leaf=is_leaf,
        none_is_leaf=none_is_leaf,
        namespace=namespace,
        max_items=max_items,
        max_leaves=max_leaves,
    )
    return _layout(root, width, indent)


def pprint(
    tree: Any,
    /,
    is_leaf: Callable[[Any], bool] | None = None,
    *,
    width: int = _WIDTH,
    indent: int = _INDENT,
    max_items: int | None = _MAX_ITEMS,
    max_leaves: int | None = None,
    none_is_leaf: bool = False,
    namespace: str = "",
    file: IO[str] | None = None,
) -> None:
    """Print :func:`pformat`'s text of ``tree`` to ``file`` (standard output by default).

    >>> pprint({'layers': [(1, 2), (3, 4)], 'name': 'mlp'}, width=30)
    {
      'layers': [(1, 2), (3, 4)],
      'name': 'mlp',
    }
    """
    text = pformat(
        tree,
        is_leaf,
        width=width,
        indent=indent,
        max_items=max_items,
        max_leaves=max_leaves,
        none_is_leaf=none_is_leaf,
        namespace=namespace,
    )
    print(text, file=sys.stdout if file is None else file)


# --------------------------------------------------------------------------------------------------
# Summary tables.


def _leaf_size(obj: Any) -> tuple[int, int]:
    """``(elements, bytes)`` of a leaf: an array's size and nbytes, else one element of 0 bytes."""
    shape = array_shape(obj)
    if shape is None:
        return 1, 0
    elements = 1
    for dim in shape:
        if not isinstance(dim, int):
            return 0, 0  # a symbolic dimension: unknown size
        elements *= dim
    nbytes = getattr(obj, "nbytes", None)
    if not isinstance(nbytes, int):
        itemsize = getattr(getattr(obj, "dtype", None), "itemsize", None)
        nbytes = elements * itemsize if isinstance(itemsize, int) else 0
    return elements, nbytes


def _human_bytes(count: int) -> str:
    size = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{count} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def _type_column(item: Item) -> str:
    if item.kind == NODE:
        assert item.spec is not None
        return type_label(item.spec)
    if item.kind == LEAF:
        shape = array_shape(item.obj)
        text = type(item.obj).__qualname__ if shape is None else array_text(item.obj, shape)
        return text + axes_note(item)
    return atom_text(item) or ""


def summary(
    tree: Any,
    /,
    is_leaf: Callable[[Any], bool] | None = None,
    *,
    depth: int | None = 2,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> str:
    """A table of the subtrees of ``tree`` down to ``depth`` levels, with their sizes.

    One row per subtree whose key path has 1 to ``depth`` keys (every subtree when ``depth``
    is None), in display order, then a ``total`` row. Columns: the key path (keystr form), the
    type (an array's ``f32[3,4]``), the number of leaves, of elements (an array's size, 1 for
    any other leaf) and of bytes (an array's ``nbytes``; other leaves count 0 bytes: only array
    data is measured, never Python objects). A container met a second time is a ``<ref ...>``
    row and counts once, as the parameters of a model with shared layers do.

    >>> import numpy as np
    >>> model = {'dense': {'w': np.ones((3, 4), np.float32), 'b': np.ones(4, np.float32)},
    ...          'scale': 0.5}
    >>> print(summary(model))
    path                type      leaves  elements  bytes
    tree['dense']       dict           2        16     64
    tree['dense']['w']  f32[3,4]       1        12     48
    tree['dense']['b']  f32[4]         1         4     16
    tree['scale']       float          1         1      0
    total                              3        17     64
    """
    _check_count("depth", depth, 0, optional=True)
    root = build(tree, is_leaf=is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)
    rows = _summary_rows(root, depth)
    return _table(rows)


class _Row(NamedTuple):
    path: str
    type: str
    leaves: int | None
    elements: int | None
    nbytes: int | None


def _summary_rows(root: Item, depth: int | None) -> list[_Row]:
    """Rows for the items at depths 1..depth, then the total (the root's sums)."""
    sizes: dict[int, tuple[int, int, int]] = {}
    for item in reversed(list(walk(root))):
        if item.kind == LEAF:
            sizes[id(item)] = (1, *_leaf_size(item.obj))
        elif item.kind == NODE:
            parts = [sizes[id(child)] for child in item.entries]
            sizes[id(item)] = (
                sum(p[0] for p in parts),
                sum(p[1] for p in parts),
                sum(p[2] for p in parts),
            )
        else:
            sizes[id(item)] = (0, 0, 0)
    rows = []
    stack: list[tuple[Item, int]] = [(root, 0)]
    while stack:
        item, level = stack.pop()
        if level >= 1 and item.kind != STATIC:
            counted = sizes[id(item)] if item.kind not in (REF, CYCLE) else (None, None, None)
            rows.append(_Row(item.path(), _type_column(item), *counted))
        if depth is None or level < depth:
            stack.extend((child, level + 1) for child in reversed(item.entries))
    rows.append(_Row("total", "", *sizes[id(root)]))
    return rows


def _number(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def _table(rows: list[_Row]) -> str:
    header = ("path", "type", "leaves", "elements", "bytes")
    cells = [header] + [
        (row.path, row.type, _number(row.leaves), _number(row.elements), _number(row.nbytes))
        for row in rows
    ]
    widths = [max(len(cell[column]) for cell in cells) for column in range(5)]
    lines = []
    for cell in cells:
        line = "  ".join(
            [cell[0].ljust(widths[0]), cell[1].ljust(widths[1])]
            + [cell[column].rjust(widths[column]) for column in (2, 3, 4)]
        )
        lines.append(line.rstrip())
    total = rows[-1].nbytes or 0
    if total >= 1024:
        lines[-1] += f" ({_human_bytes(total)})"
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------
# Differences.


class Difference(NamedTuple):
    """One place where two trees differ: its key path (``tree[1]['b']``) and what differs."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class TreeDiff(tuple[Difference, ...]):
    """The differences :func:`tree_diff` found, in order; empty (and false) when there are none.

    ``str()`` gives one ``path: message`` line per difference (``no differences`` when empty).

    >>> diff = tree_diff({'a': 1}, {'a': 1, 'b': 2})
    >>> len(diff), diff[0].path
    (1, 'tree')
    >>> print(diff)
    tree: expected dict with keys ['a'], got dict with keys ['a', 'b']: {'a': 1, 'b': 2}; extra keys ['b']
    """

    __slots__ = ()

    def __str__(self) -> str:
        return "\n".join(map(str, self)) if self else "no differences"

    def __repr__(self) -> str:
        return f"TreeDiff({list(self)!r})"


_DICT_KINDS = frozenset({PyTreeKind.DICT, PyTreeKind.ORDEREDDICT, PyTreeKind.DEFAULTDICT})


def _describe_node(spec: PyTreeSpec, obj: Any) -> str:
    """What ``spec``'s root is, in the engine's words: ``tuple of length 2``."""
    if spec.is_leaf():
        return f"a leaf of type {type(obj).__name__}"
    kind = spec.kind
    count = spec.num_children
    if kind == PyTreeKind.NONE:
        return "None"
    if kind in (PyTreeKind.TUPLE, PyTreeKind.LIST, PyTreeKind.DEQUE):
        return f"{type_label(spec)} of length {count}"
    if kind in _DICT_KINDS:
        return f"{type_label(spec)} with keys {short_repr(list(spec.entries()), 200)}"
    assert spec.type is not None
    if kind == PyTreeKind.NAMEDTUPLE:
        return f"namedtuple {spec.type.__qualname__} of length {count}"
    if kind == PyTreeKind.STRUCTSEQUENCE:
        return f"struct sequence {spec.type.__qualname__}"
    aux = short_repr(spec.node_data(), 80)
    return f"{spec.type.__name__} with aux data {aux} and {count} children"


def _short_text(obj: Any, options: dict[str, Any], limit: int = 80) -> str:
    """``obj`` on one line as :func:`pformat` shows it (arrays as ``f32[3]``), cut to ``limit``
    characters; only the first few children of each node are looked at."""
    root = build(obj, max_items=8, max_leaves=limit // 2, **options)
    text = _layout(root, sys.maxsize, 0).replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _describe_object(obj: Any, spec: PyTreeSpec | None = None, **options: Any) -> str:
    """What ``obj`` is, in the engine's words: ``list of length 2: [1, 2]``."""
    if obj is None:
        return "None"
    if spec is not None and spec.kind == PyTreeKind.CUSTOM:
        return f"{_describe_node(spec, obj)}: {_short_text(obj, options)}"
    name = type(obj).__name__
    if isinstance(obj, dict):
        shape = f" with keys {short_repr(list(obj.keys()), 200)}"
    else:
        try:
            shape = f" of length {len(obj)}"
        except Exception:  # unsized
            shape = ""
    return f"{name}{shape}: {_short_text(obj, options)}"


def _key_difference(expected: PyTreeSpec, got: PyTreeSpec) -> str:
    """``; missing keys [...]; extra keys [...]`` between two dict nodes."""
    expected_keys, got_keys = list(expected.entries()), list(got.entries())
    missing = [short_repr(key, 40) for key in expected_keys if key not in got_keys]
    extra = [short_repr(key, 40) for key in got_keys if key not in expected_keys]
    out = ""
    if missing:
        out += f"; missing keys [{', '.join(missing)}]"
    if extra:
        out += f"; extra keys [{', '.join(extra)}]"
    return out


def _node_difference(
    spec_a: PyTreeSpec, a: Any, spec_b: PyTreeSpec, b: Any, options: dict[str, Any]
) -> tuple[str | None, bool]:
    """The structural difference between the roots of ``a`` and ``b`` (None if none), and
    whether their children can be compared."""
    try:
        same = spec_a == spec_b
    except Exception:  # node data that cannot be compared (arrays, say)
        same = False
    both_nodes = not spec_a.is_leaf() and not spec_b.is_leaf()
    if same:
        return None, both_nodes
    expected = _describe_node(spec_a, a)
    got = _describe_object(b, spec_b, **options)
    message = f"expected {expected}, got {got}"
    if spec_a.kind in _DICT_KINDS and spec_b.kind in _DICT_KINDS:
        message += _key_difference(spec_a, spec_b)
    if both_nodes and spec_a.kind == spec_b.kind:
        # What the descriptions leave out: a defaultdict's factory, a deque's maxlen, ...
        data_a, data_b = spec_a.node_data(), spec_b.node_data()
        what = "node data"
        if spec_a.kind == PyTreeKind.DEQUE:
            what = "maxlen"
        elif spec_a.kind == PyTreeKind.DEFAULTDICT:
            what, data_a, data_b = "default_factory", data_a[0], data_b[0]
        if (what != "node data" and data_a != data_b) or got.startswith(expected + ":"):
            message += (
                f"; {what} differs: expected {short_repr(data_a, 80)}, got {short_repr(data_b, 80)}"
            )
    return message, both_nodes


def _array_difference(a: Any, b: Any, text: str, rtol: float, atol: float) -> str | None:
    """How two arrays of the same shape and dtype differ in value (None when they do not)."""
    try:
        import numpy as np
    except ImportError:  # arrays from elsewhere and no numpy: compare them as they compare
        return None if _equal(a, b) else f"{text} values differ"
    try:
        x, y = np.asarray(a), np.asarray(b)
        with np.errstate(all="ignore"):
            if x.dtype.kind in "fc" and not (rtol or atol):
                same = (x == y) | (np.isnan(x) & np.isnan(y))
            elif x.dtype.kind in "iufc":
                same = np.isclose(x, y, rtol=rtol, atol=atol, equal_nan=True)
            else:
                same = np.asarray(x == y, dtype=bool)
            same = np.broadcast_to(same, x.shape)
            differing = x.size - int(np.count_nonzero(same))
            if differing == 0:
                return None
            where, which = int(np.argmin(same.reshape(-1))), "first"
            if x.dtype.kind in "iufc":
                wide = np.complex128 if x.dtype.kind == "c" else np.float64
                gaps = np.abs(x.astype(wide) - y.astype(wide)).reshape(-1)
                gaps = np.where(same.reshape(-1) | np.isnan(gaps), -1.0, gaps)
                if gaps.max() >= 0:
                    where, which = int(np.argmax(gaps)), "largest"
    except Exception as exc:  # values that cannot be read or compared (a tracer, say)
        reason = short_repr(str(exc).partition("\n")[0], 120)[1:-1]
        return f"{text} values cannot be compared ({type(exc).__name__}: {reason})"
    index = np.unravel_index(where, x.shape) if x.shape else ()
    at = f" at [{', '.join(str(int(i)) for i in index)}]" if index else ""
    expected, got = x[index].item(), y[index].item()
    return (
        f"{text} values differ in {differing:,} of {x.size:,} elements; {which}{at}: "
        f"expected {expected!r}, got {got!r}"
    )


def _equal(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # an __eq__ that raises or returns something without a truth value
        return False


def _leaf_difference(a: Any, b: Any, rtol: float, atol: float) -> str | None:
    """How two leaves differ in value (None when they are equal)."""
    if a is b:
        return None
    shape_a, shape_b = array_shape(a), array_shape(b)
    if shape_a is not None and shape_b is not None:
        text_a, text_b = array_text(a, shape_a), array_text(b, shape_b)
        if text_a != text_b:
            return f"expected {text_a}, got {text_b}"
        return _array_difference(a, b, text_a, rtol, atol)
    if shape_a is None and shape_b is None and type(a) is type(b):
        if _equal(a, b):
            return None
        if isinstance(a, float | complex) and not isinstance(a, bool):
            if a != a and b != b:  # both NaN
                return None
            if (rtol or atol) and abs(a - b) <= atol + rtol * abs(b):
                return None
        elif isinstance(a, int) and (rtol or atol) and abs(a - b) <= atol + rtol * abs(b):
            return None
    describe = [
        array_text(x, s) if s is not None else _describe_object(x)
        for x, s in ((a, shape_a), (b, shape_b))
    ]
    return f"expected {describe[0]}, got {describe[1]}"


_Link = tuple[Any, "Any"] | None  # a key path as a linked list: (key, parent link)


def _link_path(link: _Link) -> str:
    keys = []
    while link is not None:
        keys.append(link[0])
        link = link[1]
    return "tree" + _path_str(tuple(reversed(keys)))


def tree_diff(
    a: Any,
    b: Any,
    /,
    is_leaf: Callable[[Any], bool] | None = None,
    *,
    leaves: bool = False,
    rtol: float = 0.0,
    atol: float = 0.0,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> TreeDiff:
    """Every place where ``b``'s structure differs from ``a``'s, and with ``leaves=True`` every
    leaf whose value differs, each with its key path.

    Messages use the engine's words (``expected`` describes ``a``, ``got`` describes ``b``):
    ``expected tuple of length 2, got list of length 2: [1, 2]``, and for dicts the
    ``missing keys`` and ``extra keys``. Below a node that differs, children with the same key
    on both sides are compared too (by key for dicts and fields, by position for sequences),
    so one call reports everything. Leaves compare by ``==`` and type; arrays (anything with
    ``shape`` and ``dtype``) by dtype, shape and then element by element with NaN equal to NaN,
    within ``rtol`` and ``atol`` when given.

    The result is a :class:`TreeDiff`: a tuple of :class:`Difference` records ``(path,
    message)`` that is false when there is no difference, and prints one line per difference.

    >>> print(tree_diff([1, {'b': (1, 2)}], [1, {'b': [1, 2], 'c': 3}]))
    tree[1]: expected dict with keys ['b'], got dict with keys ['b', 'c']: {'b': [1, 2], 'c': 3}; extra keys ['c']
    tree[1]['b']: expected tuple of length 2, got list of length 2: [1, 2]
    >>> print(tree_diff({'x': 1.0, 'y': 2}, {'x': 1.5, 'y': 2}, leaves=True))
    tree['x']: expected float: 1.0, got float: 1.5
    >>> bool(tree_diff((1, [2]), (3, [4])))
    False
    """
    for name, value in (("rtol", rtol), ("atol", atol)):
        if not isinstance(value, int | float) or isinstance(value, bool) or not value >= 0:
            raise ValueError(f"{name} must be a non-negative number, got {value!r}")
    options = {"is_leaf": is_leaf, "none_is_leaf": none_is_leaf, "namespace": namespace}
    found: list[Difference] = []
    seen: set[tuple[int, int]] = set()
    keep_alive: list[Any] = []
    stack: list[tuple[Any, Any, _Link, int]] = [(a, b, None, 0)]
    while stack:
        x, y, link, depth = stack.pop()
        spec_x, pairs_x = one_level(x, is_leaf, none_is_leaf, namespace)
        spec_y, pairs_y = one_level(y, is_leaf, none_is_leaf, namespace)
        message, compare_children = _node_difference(spec_x, x, spec_y, y, options)
        if message is None and leaves and spec_x.is_leaf():
            message = _leaf_difference(x, y, rtol, atol)
        if message is not None:
            found.append(Difference(_link_path(link), message))
        if not compare_children:
            continue
        if spec_x.kind in TRACKED_KINDS:
            pair = (id(x), id(y))
            if pair in seen:
                continue  # a shared or cyclic pair of containers: compared once
            seen.add(pair)
            keep_alive.append((x, y))
        if depth >= MAX_RECURSION_DEPTH:
            raise RecursionError(
                f"maximum tree depth ({MAX_RECURSION_DEPTH}) exceeded at {_link_path(link)}"
            )
        pairs_x = display_order(x, spec_x, pairs_x)
        others = {key: child for key, child in pairs_y}
        for key, child in reversed(pairs_x):
            if key in others:
                stack.append((child, others[key], (key, link), depth + 1))
    return TreeDiff(found)


# --------------------------------------------------------------------------------------------------
# HTML views.


class TreeView:
    """A tree (or a treespec) wrapped for display: HTML in notebooks, :func:`pformat`'s text
    elsewhere. Made by :func:`view`."""

    __slots__ = ("_max_items", "_max_leaves", "_open_depth", "_options", "_tree")

    def __init__(
        self,
        tree: Any,
        *,
        open_depth: int,
        max_items: int | None,
        max_leaves: int | None,
        is_leaf: Callable[[Any], bool] | None,
        none_is_leaf: bool,
        namespace: str,
    ) -> None:
        self._tree = tree
        self._open_depth = open_depth
        self._max_items = max_items
        self._max_leaves = max_leaves
        self._options: dict[str, Any] = {
            "is_leaf": is_leaf,
            "none_is_leaf": none_is_leaf,
            "namespace": namespace,
        }

    def _model(self) -> Item:
        if isinstance(self._tree, PyTreeSpec):
            return build_from_spec(self._tree)
        return build(
            self._tree, max_items=self._max_items, max_leaves=self._max_leaves, **self._options
        )

    def _caption(self) -> str:
        if isinstance(self._tree, PyTreeSpec):
            count = self._tree.num_leaves
            return f"PyTreeSpec, {count:,} leaf" if count == 1 else f"PyTreeSpec, {count:,} leaves"
        return ""

    def _repr_html_(self) -> str:
        from oxtree._pretty_html import render_html  # and html: only when HTML is asked for

        return render_html(self._model(), open_depth=self._open_depth, caption=self._caption())

    def __repr__(self) -> str:
        return _layout(self._model(), _WIDTH, _INDENT)


def view(
    tree: Any,
    /,
    is_leaf: Callable[[Any], bool] | None = None,
    *,
    open_depth: int = 2,
    max_items: int | None = _MAX_ITEMS,
    max_leaves: int | None = None,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> TreeView:
    """``tree`` wrapped for display: a collapsible HTML tree in a notebook (``_repr_html_``),
    :func:`pformat`'s text as its ``repr``.

    Works for any tree, registered nodes (modules) included, and for a :class:`PyTreeSpec`
    (its leaves shown as ``*``). Nodes less than ``open_depth`` levels deep start expanded;
    ``max_items`` and ``max_leaves`` elide as in :func:`pformat`. The HTML is self-contained:
    inline styles only, every text escaped.

    >>> v = view({'a': [1, 2], 'b': '<b>'})
    >>> v
    {'a': [1, 2], 'b': '<b>'}
    >>> html = v._repr_html_()
    >>> html.count('<details'), '&lt;b&gt;' in html, '<b>' in html
    (2, True, False)
    """
    _check_count("open_depth", open_depth, 0)
    _check_count("max_items", max_items, 1, optional=True)
    _check_count("max_leaves", max_leaves, 1, optional=True)
    return TreeView(
        tree,
        open_depth=open_depth,
        max_items=max_items,
        max_leaves=max_leaves,
        is_leaf=is_leaf,
        none_is_leaf=none_is_leaf,
        namespace=namespace,
    )


def treespec_html(spec: PyTreeSpec, /, *, open_depth: int = 2) -> str:
    """A treespec as a collapsible HTML tree (what ``PyTreeSpec._repr_html_`` shows).

    >>> from oxtree import tree_structure
    >>> spec = tree_structure({'b': [1, 2], 'a': None})
    >>> html = treespec_html(spec)
    >>> html.startswith('<div class="oxtree-view"'), 'PyTreeSpec, 2 leaves' in html
    (True, True)
    """
    if not isinstance(spec, PyTreeSpec):
        raise TypeError(f"treespec_html expects a PyTreeSpec, got {type(spec).__name__}")
    _check_count("open_depth", open_depth, 0)
    return TreeView(
        spec,
        open_depth=open_depth,
        max_items=None,
        max_leaves=None,
        is_leaf=None,
        none_is_leaf=False,
        namespace="",
    )._repr_html_()
