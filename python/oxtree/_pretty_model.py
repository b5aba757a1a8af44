"""The display model behind :mod:`oxtree.pretty`: a tree of :class:`Item` built from an object
(one engine call per node) or from a treespec, and the small text helpers every renderer shares.

A walk never recurses (a 100,000-deep chain renders), tracks the identity of mutable containers
(a container met again becomes a reference to its first occurrence, and a cycle a reference to
an ancestor) and elides what is over the caller's budgets. It imports neither numpy nor jax:
arrays are recognised by their ``shape`` and ``dtype`` attributes.
"""

from __future__ import annotations

import re
import types
from collections.abc import Callable, Iterable
from typing import Any

from oxtree._core import (
    MAX_RECURSION_DEPTH,
    DictKey,
    FlattenedIndexKey,
    GetAttrKey,
    PyTreeKind,
    PyTreeSpec,
    SequenceKey,
    tree_flatten_with_keys,
)
from oxtree.ops import _path_str

# Item kinds.
LEAF = "leaf"  # a leaf of the tree
NODE = "node"  # a node with children (possibly none)
NONE = "none"  # None as a node
STATIC = "static"  # a value kept in the structure, not a leaf: a dataclass's static field, or
#                    an object of a `register_static` type
REF = "ref"  # a mutable container met a second time
CYCLE = "cycle"  # a mutable container met again below itself
MORE = "more"  # children left out (`count` of them)
PLACEHOLDER = "placeholder"  # a treespec's leaf, `*`

# Containers whose identity matters: mutable ones (and registered nodes, usually objects).
# Tuples are left out on purpose: CPython shares equal constant tuples, so the same tuple object
# twice means nothing, and no cycle can pass through tuples alone.
TRACKED_KINDS = frozenset(
    {
        PyTreeKind.LIST,
        PyTreeKind.DICT,
        PyTreeKind.ORDEREDDICT,
        PyTreeKind.DEFAULTDICT,
        PyTreeKind.DEQUE,
        PyTreeKind.CUSTOM,
    }
)
_INSERTION_ORDERED = frozenset({PyTreeKind.DICT, PyTreeKind.DEFAULTDICT})

# Stack entry modes of the walk.
_VISIT, _STATIC_FIELD, _ELIDED = 0, 1, 2


class Item:
    """One entry of the display model."""

    __slots__ = ("count", "entries", "first", "flat", "key", "kind", "obj", "parent", "spec")

    def __init__(self, kind: str, parent: Item | None, key: Any) -> None:
        self.kind = kind
        self.parent = parent
        self.key = key  # the key under the parent (a JAX key object), None at the root
        self.obj: Any = None  # the object (a leaf, a node, a static value)
        self.spec: PyTreeSpec | None = None  # a node's one-level treespec (its type and data)
        self.entries: list[Item] = []
        self.first: Item | None = None  # what a REF or CYCLE refers to
        self.count = 0  # how many children a MORE item stands for
        self.flat: str | None = None  # scratch for the text layout

    def keys(self) -> list[Any]:
        """The key path from the root to this item."""
        keys = []
        item: Item | None = self
        while item is not None and item.parent is not None:
            keys.append(item.key)
            item = item.parent
        keys.reverse()
        return keys

    def path(self) -> str:
        """This item's key path in keystr form, rooted at ``tree``."""
        return "tree" + _path_str(tuple(self.keys()))


# --------------------------------------------------------------------------------------------------
# Building the model.


def _children_are_leaves(path: tuple[Any, ...], obj: Any) -> bool:
    return len(path) > 0


# JAX's key classes, by name, and oxtree's class of the same meaning and its one field.
_JAX_KEYS = {
    "GetAttrKey": (GetAttrKey, "name"),
    "DictKey": (DictKey, "key"),
    "SequenceKey": (SequenceKey, "idx"),
    "FlattenedIndexKey": (FlattenedIndexKey, "key"),
}
_OWN_KEYS = (GetAttrKey, DictKey, SequenceKey, FlattenedIndexKey)


def own_key(key: Any) -> Any:
    """``key`` as oxtree's key of the same meaning: a node that JAX registers (an equinox
    module, an NNX State) names its children with JAX's key objects (``jax.tree_util.GetAttrKey``,
    same ``name``), which the renderers read as oxtree's. Recognised by class name and module,
    so JAX is never imported here; any other key comes back as it is."""
    if isinstance(key, _OWN_KEYS):
        return key
    for cls in type(key).__mro__:
        if cls.__module__.partition(".")[0] in ("jax", "jaxlib"):
            found = _JAX_KEYS.get(cls.__name__)
            if found is not None:
                own, field = found
                return own(getattr(key, field))
    return key


def one_level(
    obj: Any, is_leaf: Callable[[Any], bool] | None, none_is_leaf: bool, namespace: str
) -> tuple[PyTreeSpec, list[tuple[Any, Any]]]:
    """``obj``'s one-level treespec and its ``(key, child)`` pairs in the engine's order.

    One flatten whose ``is_leaf`` stops below the root: every node type, registered ones
    included, comes apart the way the engine takes it apart, with the engine's keys
    (``flatten_with_keys`` keys for nodes registered with them). Display reads JAX's registry
    too, always: an equinox module, a flax struct or an NNX State shows its fields and arrays
    (with oxtree's key objects, see :func:`own_key`) rather than one opaque leaf.
    """
    predicate: Callable[[tuple[Any, ...], Any], bool] = _children_are_leaves
    if is_leaf is not None:
        user_is_leaf = is_leaf

        def predicate(path: tuple[Any, ...], x: Any) -> bool:
            return len(path) > 0 or bool(user_is_leaf(x))

    pairs, spec = tree_flatten_with_keys(
        obj,
        predicate,
        is_leaf_takes_path=True,
        none_is_leaf=none_is_leaf,
        namespace=namespace,
        jax_registry=True,
    )
    if spec.is_leaf():
        return spec, []
    return spec, [(own_key(path[0]), child) for path, child in pairs]


def display_order(obj: Any, spec: PyTreeSpec, pairs: list[tuple[Any, Any]]) -> list[Any]:
    """The pairs of a dict in the dict's own order (the engine gives sorted order)."""
    if spec.kind not in _INSERTION_ORDERED or len(pairs) < 2:
        return pairs
    position = {id(key): index for index, key in enumerate(obj)}
    try:
        return sorted(pairs, key=lambda pair: position[id(pair[0].key)])
    except KeyError:  # keys the engine copied: keep its order
        return pairs


def _with_static_fields(obj: Any, pairs: list[tuple[Any, Any]]) -> list[tuple[Any, Any, bool]]:
    """A dataclass node's children interleaved with its other fields, in field order."""
    import dataclasses  # here: importing it costs more than the rest of `import oxtree`

    by_name = {key.name: (key, child) for key, child in pairs if isinstance(key, GetAttrKey)}
    out: list[tuple[Any, Any, bool]] = []
    for field in dataclasses.fields(obj):
        pair = by_name.pop(field.name, None)
        if pair is not None:
            out.append((*pair, False))
        elif field.repr and hasattr(obj, field.name):
            out.append((GetAttrKey(field.name), getattr(obj, field.name), True))
    placed = {id(pair[1]) for pair in out}
    out.extend((key, child, False) for key, child in pairs if id(child) not in placed)
    return out


def _add_more(parent: Item, count: int) -> None:
    last = parent.entries[-1] if parent.entries else None
    if last is not None and last.kind == MORE:
        last.count += count
    else:
        item = Item(MORE, parent, None)
        item.count = count
        parent.entries.append(item)


def _is_ancestor(candidate: Item, item: Item | None) -> bool:
    while item is not None:
        if item is candidate:
            return True
        item = item.parent
    return False


def build(
    tree: Any,
    *,
    is_leaf: Callable[[Any], bool] | None = None,
    none_is_leaf: bool = False,
    namespace: str = "",
    max_items: int | None = None,
    max_leaves: int | None = None,
) -> Item:
    """The display model of ``tree``, children in display order (dicts in their own order).

    At most ``max_items`` children of any one node are kept, and once ``max_leaves`` leaves are
    in, everything after them is left out; each run of left-out children becomes one MORE item.
    """
    import dataclasses  # here: importing it costs more than the rest of `import oxtree`

    root: Item | None = None
    stack: list[tuple[Any, Item | None, Any, int, int]] = [(tree, None, None, 0, _VISIT)]
    seen: dict[int, tuple[Any, Item]] = {}  # keeps the objects alive, so ids stay unique
    leaves = 0
    while stack:
        obj, parent, key, depth, mode = stack.pop()
        if parent is not None and max_leaves is not None and leaves >= max_leaves:
            _add_more(parent, obj if mode == _ELIDED else 1)
            continue
        if mode == _ELIDED:
            assert parent is not None
            _add_more(parent, obj)
            continue
        item = Item(STATIC if mode == _STATIC_FIELD else LEAF, parent, key)
        item.obj = obj
        if parent is None:
            root = item
        else:
            parent.entries.append(item)
        if mode == _STATIC_FIELD:
            continue
        spec, pairs = one_level(obj, is_leaf, none_is_leaf, namespace)
        if spec.is_leaf():
            leaves += 1
            continue
        kind = spec.kind
        if kind == PyTreeKind.NONE:
            item.kind = NONE
            continue
        if kind == PyTreeKind.CUSTOM and not pairs and spec.node_data() is obj:
            item.kind = STATIC  # a register_static object: its own node data
            continue
        if kind in TRACKED_KINDS:
            prior = seen.get(id(obj))
            if prior is not None:
                item.kind = CYCLE if _is_ancestor(prior[1], parent) else REF
                item.first = prior[1]
                continue
            seen[id(obj)] = (obj, item)
        if depth >= MAX_RECURSION_DEPTH:
            raise RecursionError(
                f"maximum tree depth ({MAX_RECURSION_DEPTH}) exceeded at {item.path()} while "
                "rendering: is a registered flatten function making new nodes without end?"
            )
        item.kind = NODE
        item.spec = spec
        pairs = display_order(obj, spec, pairs)
        children: list[tuple[Any, Any, bool]]
        if kind == PyTreeKind.CUSTOM and dataclasses.is_dataclass(obj):
            children = _with_static_fields(obj, pairs)
        else:
            children = [(child_key, child, False) for child_key, child in pairs]
        if max_items is not None and len(children) > max_items:
            stack.append((len(children) - max_items, item, None, depth + 1, _ELIDED))
            children = children[:max_items]
        for child_key, child, static in reversed(children):
            stack.append((child, item, child_key, depth + 1, _STATIC_FIELD if static else _VISIT))
    assert root is not None
    return root


def build_from_spec(spec: PyTreeSpec) -> Item:
    """The display model of a treespec: its leaves are ``*`` placeholders.

    Built from the treespec's pre-order outline in one pass (taking ``children()`` level by
    level copies each subtree again at every level: quadratic on deep treespecs).
    """
    items: list[Item] = []
    for parent, key, level in spec._outline():
        item = Item(PLACEHOLDER, items[parent] if parent >= 0 else None, key)
        if parent >= 0:
            items[parent].entries.append(item)
        if level is not None:
            if level.kind == PyTreeKind.NONE:
                item.kind = NONE
            else:
                item.kind = NODE
                item.spec = level
        items.append(item)
    return items[0]


def walk(root: Item) -> Iterable[Item]:
    """Every item of the model, pre-order, without recursion."""
    stack = [root]
    while stack:
        item = stack.pop()
        yield item
        stack.extend(reversed(item.entries))


# --------------------------------------------------------------------------------------------------
# Text for leaves, keys and node heads.


def safe_repr(obj: Any) -> str:
    """``repr(obj)``, or a placeholder naming the type when ``__repr__`` raises."""
    try:
        return repr(obj)
    except Exception as exc:  # a broken __repr__ must not break rendering
        return f"<{type(obj).__qualname__} object (repr raised {type(exc).__name__})>"


def short_repr(obj: Any, limit: int) -> str:
    """:func:`safe_repr` cut to ``limit`` characters (the engine's rule for messages)."""
    text = safe_repr(obj)
    return text if len(text) <= limit else text[: limit - 3] + "..."


_DTYPE_PREFIXES = {"float": "f", "int": "i", "uint": "u", "complex": "c", "bfloat": "bf"}
_DTYPE_NAME = re.compile(r"(bfloat|float|complex|uint|int)(\d+)(.*)")


def dtype_name(dtype: Any) -> str:
    """The short name of a dtype: ``f32``, ``i64``, ``u8``, ``bf16``, ``c64``, ``bool``.

    Other dtypes keep their own name (``object``, ``datetime64[ns]``); a library prefix such as
    ``torch.`` is dropped.
    """
    name = getattr(dtype, "name", None)
    kind = getattr(dtype, "kind", None)
    code = getattr(dtype, "str", None)
    if kind in ("U", "S") and isinstance(code, str):
        return code.lstrip("<>|=")  # numpy strings: U5, S3 (their names count bits)
    if not isinstance(name, str):
        name = str(dtype)
    name = name.rsplit(".", 1)[-1]
    match = _DTYPE_NAME.fullmatch(name)
    if match is None:
        return name
    return _DTYPE_PREFIXES[match.group(1)] + match.group(2) + match.group(3)


def array_shape(obj: Any) -> tuple[Any, ...] | None:
    """The shape of an array-like leaf (anything with ``shape`` and ``dtype``), else None."""
    if isinstance(obj, type):
        return None  # np.ndarray the class has `shape` too
    try:
        shape = obj.shape
        obj.dtype  # noqa: B018 (only its presence matters here)
        return tuple(shape)
    except Exception:  # no such attributes, or a shape that is not a sequence
        return None


def array_text(obj: Any, shape: tuple[Any, ...]) -> str:
    """``f32[3,4]``: the dtype's short name and the shape."""
    return f"{dtype_name(obj.dtype)}[{','.join(str(dim) for dim in shape)}]"


_FUNCTION_TYPES = (
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    types.BuiltinMethodType,
)


def leaf_text(obj: Any) -> str:
    """How a leaf prints: arrays as ``f32[3,4]``, functions by name, the rest by ``repr``."""
    shape = array_shape(obj)
    if shape is not None:
        return array_text(obj, shape)
    if isinstance(obj, _FUNCTION_TYPES):
        return f"<function {getattr(obj, '__qualname__', getattr(obj, '__name__', '?'))}>"
    text = safe_repr(obj)
    if " at 0x" in text and callable(obj) and not isinstance(obj, type):
        # A wrapped function (jax.nn.relu is a custom_jvp, a jitted one a PjitFunction) whose
        # repr shows an address: by its name, as functions are.
        try:
            name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
        except Exception:  # a callable whose attributes raise: its repr stands
            name = None
        if isinstance(name, str):
            return f"<function {name}>"
    return text


def _callable_text(obj: Any) -> str:
    if obj is None:
        return "None"
    if isinstance(obj, type):
        return obj.__qualname__
    return leaf_text(obj)


def type_label(spec: PyTreeSpec) -> str:
    """The name a node's type goes by: ``dict``, ``Point``, ``time.struct_time``."""
    cls = spec.type
    if cls is None:
        return "None"
    if spec.kind == PyTreeKind.STRUCTSEQUENCE and cls.__module__ != "builtins":
        return f"{cls.__module__}.{cls.__qualname__}"
    return cls.__qualname__.rpartition("<locals>.")[2]  # a class made in a function: its name


def brackets(spec: PyTreeSpec, empty: bool) -> tuple[str, str]:
    """What goes before and after a node's children: ``("Point(", ")")``, ``("{", "}")``."""
    kind = spec.kind
    if kind == PyTreeKind.TUPLE:
        return "(", ")"
    if kind == PyTreeKind.LIST:
        return "[", "]"
    if kind == PyTreeKind.DICT:
        return "{", "}"
    if kind == PyTreeKind.ORDEREDDICT:
        return ("OrderedDict(", ")") if empty else ("OrderedDict({", "})")
    if kind == PyTreeKind.DEFAULTDICT:
        factory = spec.node_data()[0]
        return f"defaultdict({_callable_text(factory)}, {{", "})"
    if kind == PyTreeKind.DEQUE:
        maxlen = spec.node_data()
        return "deque([", "])" if maxlen is None else f"], maxlen={maxlen})"
    return f"{type_label(spec)}(", ")"


def node_brackets(item: Item) -> tuple[str, str]:
    """:func:`brackets` for a node item: a registered node whose children are all keyed by
    ``DictKey`` (an NNX State, a mapping registered with JAX) holds them in braces, as an
    ``OrderedDict`` does: ``State({'kernel': ...})``."""
    assert item.spec is not None
    opening, closing = brackets(item.spec, not item.entries)
    if item.spec.kind == PyTreeKind.CUSTOM:
        keys = [child.key for child in item.entries if child.kind != MORE]
        if keys and all(isinstance(key, DictKey) for key in keys):
            return opening + "{", "}" + closing
    return opening, closing


def axes_note(item: Item) -> str:
    """``@('embed', 'mlp')`` after a Module attribute's leaf when the attribute carries a
    sharding annotation (its ``name_to_axes`` entry), else nothing."""
    parent = item.parent
    if parent is None or not isinstance(item.key, GetAttrKey) or array_shape(item.obj) is None:
        return ""
    axes = getattr(
        getattr(getattr(parent.obj, "_oxtree_def", None), "layout", None), "name_to_axes", None
    )
    found = axes.get(item.key.name) if isinstance(axes, types.MappingProxyType) else None
    return "" if found is None else f"@{found.entries!r}"


def key_label(key: Any) -> str:
    """How a child's key prints before it inside its node: ``x=``, ``'a': `` or nothing."""
    if isinstance(key, SequenceKey):
        return ""
    if isinstance(key, GetAttrKey):
        return f"{key.name}="
    if isinstance(key, DictKey):
        return f"{safe_repr(key.key)}: "
    raw = key.key if isinstance(key, FlattenedIndexKey) else key
    if isinstance(raw, int):
        return ""
    if isinstance(raw, str) and raw.isidentifier():
        return f"{raw}="
    return f"{safe_repr(raw)}: "


def atom_text(item: Item) -> str | None:
    """The text of an item that prints as one piece, or None for a node (even an empty one)."""
    kind = item.kind
    if kind in (LEAF, STATIC):
        return leaf_text(item.obj) + axes_note(item)
    if kind == PLACEHOLDER:
        return "*"
    if kind == NONE:
        return "None"
    if kind == REF:
        assert item.first is not None
        return f"<ref {item.first.path()}>"
    if kind == CYCLE:
        assert item.first is not None
        return f"<ref {item.first.path()} (cycle)>"
    if kind == MORE:
        return f"... ({item.count:,} more)"
    return None
