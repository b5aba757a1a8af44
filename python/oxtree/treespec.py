"""Building and inspecting treespecs directly, as optree's ``treespec_*`` functions do.

>>> import oxtree
>>> spec = treespec_tuple([treespec_leaf(), treespec_dict(b=treespec_leaf(), a=treespec_none())])
>>> spec
PyTreeSpec((*, {'a': None, 'b': *}))
>>> spec.unflatten([1, 2])
(1, {'b': 2, 'a': None})
"""

from __future__ import annotations

import collections
from collections.abc import Mapping

from oxtree import _core
from oxtree._core import PyTreeSpec
from oxtree.types import is_namedtuple_instance, is_structseq_instance

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing at run time
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from typing import Any, SupportsIndex, SupportsInt

# optree.treespec's names: the constructors without the `treespec_` prefix (served by
# `__getattr__` below), in the order of oxtree's `treespec_*` names.
__all__ = [  # noqa: F822
    "defaultdict",
    "deque",
    "dict",
    "from_collection",
    "leaf",
    "list",
    "namedtuple",
    "none",
    "ordereddict",
    "structseq",
    "tuple",
    "frozendict",
]


class _Slot:
    """A placeholder leaf standing for a child treespec while the one-level shape is made."""

    __slots__ = ()


_SLOT = _Slot()


def _arg(spec: Any) -> PyTreeSpec:
    """The argument of a function form must be a treespec (TypeError)."""
    if not isinstance(spec, PyTreeSpec):
        raise TypeError(f"expected a PyTreeSpec, got {type(spec).__name__}: {spec!r}")
    return spec


def _from_collection(
    collection: Any, children: list[Any], none_is_leaf: bool, namespace: str
) -> PyTreeSpec:
    """The one-level treespec of `collection` (whose items are `_SLOT`), grafted.

    Children checked as optree checks them, with its texts: each a treespec with the same
    ``none_is_leaf``, all of one namespace, which an empty ``namespace`` adopts.
    """
    shape = _core.tree_structure(
        collection, lambda x: x is _SLOT, none_is_leaf=none_is_leaf, namespace=namespace
    )
    common = ""
    for child in children:
        if not isinstance(child, PyTreeSpec):
            kind = shape.type
            name = kind.__name__ if kind in _BUILTIN_NODE_TYPES else repr(kind)
            raise ValueError(
                f"Expected a(n) {name} of PyTreeSpec(s), got {shape.unflatten(children)!r}."
            )
        if child.none_is_leaf != none_is_leaf:
            raise ValueError(f"Expected treespec(s) with `none_is_leaf={none_is_leaf}`.")
        if child.namespace and child.namespace != common:
            if common:
                raise ValueError(
                    "Expected treespecs with the same namespace, "
                    f"got {common!r} vs. {child.namespace!r}."
                )
            common = child.namespace
    if common and namespace and common != namespace:
        raise ValueError(f"Expected treespec(s) with namespace {namespace!r}, got {common!r}.")
    return shape._graft(children)


# The node types optree's messages name by their bare name (others by their repr).
_BUILTIN_NODE_TYPES = (
    tuple,
    list,
    dict,
    collections.OrderedDict,
    collections.defaultdict,
    collections.deque,
)


def _mapping_items(mapping: Any, kwargs: dict[str, Any]) -> list[tuple[Any, Any]]:
    items = list(mapping.items()) if isinstance(mapping, Mapping) else list(mapping)
    items.extend(kwargs.items())
    return items


def treespec_leaf(*, none_is_leaf: bool = False, namespace: str = "") -> PyTreeSpec:
    """The treespec of a single leaf.

    >>> treespec_leaf()
    PyTreeSpec(*)
    """
    return _core.tree_structure(_SLOT, none_is_leaf=none_is_leaf, namespace=namespace)


def treespec_none(*, none_is_leaf: bool = False, namespace: str = "") -> PyTreeSpec:
    """The treespec of None: a node without children, or a leaf with ``none_is_leaf=True``.

    >>> treespec_none()
    PyTreeSpec(None)
    """
    return _core.tree_structure(None, none_is_leaf=none_is_leaf, namespace=namespace)


def treespec_tuple(
    iterable: Iterable[PyTreeSpec] = (), /, *, none_is_leaf: bool = False, namespace: str = ""
) -> PyTreeSpec:
    """A tuple of the given treespecs.

    >>> treespec_tuple([treespec_leaf(), treespec_none()])
    PyTreeSpec((*, None))
    """
    children = list(iterable)
    return _from_collection(tuple(_SLOT for _ in children), children, none_is_leaf, namespace)


def treespec_list(
    iterable: Iterable[PyTreeSpec] = (), /, *, none_is_leaf: bool = False, namespace: str = ""
) -> PyTreeSpec:
    """A list of the given treespecs.

    >>> treespec_list([treespec_leaf()])
    PyTreeSpec([*])
    """
    children = list(iterable)
    return _from_collection([_SLOT for _ in children], children, none_is_leaf, namespace)


def _dict_like(
    make: Callable[[list[Any]], Any],
    items: list[tuple[Any, Any]],
    none_is_leaf: bool,
    namespace: str,
) -> PyTreeSpec:
    by_key = dict(items)
    shape = make([(k, _SLOT) for k in by_key])
    # Children are grafted in the shape's leaf order (sorted keys for dict and defaultdict).
    order = _core.tree_structure(
        shape, lambda x: x is _SLOT, none_is_leaf=none_is_leaf, namespace=namespace
    ).entries()
    return _from_collection(shape, [by_key[k] for k in order], none_is_leaf, namespace)


def treespec_dict(
    mapping: Mapping[Any, PyTreeSpec] | Iterable[tuple[Any, PyTreeSpec]] = (),
    /,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
    **kwargs: PyTreeSpec,
) -> PyTreeSpec:
    """A dict of the given treespecs (insertion order kept for rebuilding).

    >>> treespec_dict({'b': treespec_leaf(), 'a': treespec_none()})
    PyTreeSpec({'a': None, 'b': *})
    """
    return _dict_like(dict, _mapping_items(mapping, kwargs), none_is_leaf, namespace)


def treespec_ordereddict(
    mapping: Mapping[Any, PyTreeSpec] | Iterable[tuple[Any, PyTreeSpec]] = (),
    /,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
    **kwargs: PyTreeSpec,
) -> PyTreeSpec:
    """An OrderedDict of the given treespecs, in the given order.

    >>> treespec_ordereddict([('b', treespec_leaf()), ('a', treespec_leaf())])
    PyTreeSpec(OrderedDict({'b': *, 'a': *}))
    """
    items = _mapping_items(mapping, kwargs)
    return _dict_like(collections.OrderedDict, items, none_is_leaf, namespace)


def treespec_frozendict(
    mapping: Mapping[Any, PyTreeSpec] | Iterable[tuple[Any, PyTreeSpec]] = (),
    /,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
    **kwargs: PyTreeSpec,
) -> PyTreeSpec:
    """A ``frozendict`` node of the given treespecs: optree offers it on Python 3.15+, whose
    builtin ``frozendict`` oxtree does not support yet, so it raises ``RuntimeError``.

    >>> treespec_frozendict()
    Traceback (most recent call last):
    ...
    RuntimeError: `optree.treespec_frozendict` requires Python 3.15+ with `frozendict` support.
    """
    raise RuntimeError(
        "`optree.treespec_frozendict` requires Python 3.15+ with `frozendict` support."
    )


def treespec_defaultdict(
    default_factory: Callable[[], Any] | None = None,
    mapping: Mapping[Any, PyTreeSpec] | Iterable[tuple[Any, PyTreeSpec]] = (),
    /,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
    **kwargs: PyTreeSpec,
) -> PyTreeSpec:
    """A defaultdict with ``default_factory`` of the given treespecs.

    >>> treespec_defaultdict(list, {'a': treespec_leaf()})
    PyTreeSpec(defaultdict(<class 'list'>, {'a': *}))
    """
    items = _mapping_items(mapping, kwargs)
    return _dict_like(
        lambda pairs: collections.defaultdict(default_factory, pairs),
        items,
        none_is_leaf,
        namespace,
    )


def treespec_deque(
    iterable: Iterable[PyTreeSpec] = (),
    /,
    maxlen: int | None = None,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> PyTreeSpec:
    """A deque of the given treespecs.

    >>> treespec_deque([treespec_leaf()], maxlen=4)
    PyTreeSpec(deque([*], maxlen=4))
    """
    children = list(iterable)
    if maxlen is not None:
        children = children[len(children) - maxlen :] if maxlen else []  # a deque keeps the last
    shape = collections.deque([_SLOT for _ in children], maxlen=maxlen)
    return _from_collection(shape, children, none_is_leaf, namespace)


def treespec_namedtuple(
    namedtuple: Any, /, *, none_is_leaf: bool = False, namespace: str = ""
) -> PyTreeSpec:
    """A namedtuple node whose fields hold treespecs.

    >>> import collections
    >>> P = collections.namedtuple('P', 'x y')
    >>> treespec_namedtuple(P(treespec_leaf(), treespec_none()))
    PyTreeSpec(P(x=*, y=None))
    """
    if not is_namedtuple_instance(namedtuple):
        raise ValueError(f"Expected a namedtuple of PyTreeSpec(s), got {namedtuple!r}.")
    children = list(namedtuple)
    shape = type(namedtuple)(*(_SLOT for _ in children))
    return _from_collection(shape, children, none_is_leaf, namespace)


def treespec_structseq(
    structseq: Any, /, *, none_is_leaf: bool = False, namespace: str = ""
) -> PyTreeSpec:
    """A struct sequence node whose fields hold treespecs.

    >>> import time
    >>> spec = treespec_structseq(time.struct_time([treespec_leaf()] * 9))
    >>> spec.num_leaves
    9
    """
    if not is_structseq_instance(structseq):
        raise ValueError(f"Expected a PyStructSequence of PyTreeSpec(s), got {structseq!r}.")
    children = list(structseq)
    shape = type(structseq)([_SLOT for _ in children])
    return _from_collection(shape, children, none_is_leaf, namespace)


def treespec_from_collection(
    collection: Any, /, *, none_is_leaf: bool = False, namespace: str = ""
) -> PyTreeSpec:
    """The treespec of a container whose children are treespecs (any node type).

    >>> treespec_from_collection({'a': treespec_leaf(), 'b': [treespec_leaf()]})
    Traceback (most recent call last):
    ...
    ValueError: Expected a(n) dict of PyTreeSpec(s), got {'a': PyTreeSpec(*), 'b': [PyTreeSpec(*)]}.
    >>> treespec_from_collection([treespec_leaf(), treespec_none()])
    PyTreeSpec([*, None])
    """
    children, shape = _core._flatten_one_level(
        collection, none_is_leaf=none_is_leaf, namespace=namespace
    )
    if shape.num_nodes == 1:
        # A leaf (or None) is its own treespec; optree warns about a leaf.
        if shape.is_leaf():
            import warnings

            warnings.warn(
                "PyTreeSpec::MakeFromCollection() is called on a leaf.", UserWarning, stacklevel=2
            )
        return shape
    return _from_collection(
        shape.unflatten([_SLOT] * len(children)), children, none_is_leaf, namespace
    )


def treespec_paths(treespec: PyTreeSpec, /) -> list[tuple[Any, ...]]:
    """The path of every leaf, as tuples of raw entries: ``treespec.paths()``.

    >>> treespec_paths(tree_structure({'a': [1, 2], 'b': None}))
    [('a', 0), ('a', 1)]
    """
    return _arg(treespec).paths()


def treespec_accessors(treespec: PyTreeSpec, /) -> Any:
    """The accessor of every leaf: ``treespec.accessors()``.

    >>> spec = tree_structure({'a': [1, 2]})
    >>> [a.codify('t') for a in treespec_accessors(spec)]
    ["t['a'][0]", "t['a'][1]"]
    """
    return _arg(treespec).accessors()


def treespec_entries(treespec: PyTreeSpec, /) -> list[Any]:
    """The entries (keys, indices or fields) of the root's children: ``treespec.entries()``.

    >>> treespec_entries(tree_structure({'b': 1, 'a': [2]}))
    ['a', 'b']
    >>> treespec_entries(tree_structure((3, 4)))
    [0, 1]
    """
    return _arg(treespec).entries()


def treespec_entry(treespec: PyTreeSpec, index: SupportsInt | SupportsIndex, /) -> Any:
    """The entry of the root's ``index``-th child: ``treespec.entry(index)``.

    >>> treespec_entry(tree_structure({'b': 1, 'a': 2}), 1)
    'b'
    """
    return _arg(treespec).entry(index)


def treespec_children(treespec: PyTreeSpec, /) -> list[PyTreeSpec]:
    """The treespecs of the root's children: ``treespec.children()``.

    >>> treespec_children(tree_structure({'a': [1, 2], 'b': None}))
    [PyTreeSpec([*, *]), PyTreeSpec(None)]
    """
    return _arg(treespec).children()


def treespec_child(treespec: PyTreeSpec, index: SupportsInt | SupportsIndex, /) -> PyTreeSpec:
    """The treespec of the root's ``index``-th child: ``treespec.child(index)``.

    >>> treespec_child(tree_structure({'a': [1, 2], 'b': None}), 0)
    PyTreeSpec([*, *])
    """
    return _arg(treespec).child(index)


def treespec_one_level(treespec: PyTreeSpec, /) -> PyTreeSpec | None:
    """The root node alone, its children made leaves (None for a leaf): ``treespec.one_level()``.

    >>> treespec_one_level(tree_structure({'a': [1, 2], 'b': None}))
    PyTreeSpec({'a': *, 'b': *})
    >>> print(treespec_one_level(tree_structure(1)))
    None
    """
    return _arg(treespec).one_level()


def treespec_transform(
    treespec: PyTreeSpec,
    /,
    f_node: Callable[[PyTreeSpec], PyTreeSpec] | None = None,
    f_leaf: Callable[[PyTreeSpec], PyTreeSpec] | None = None,
) -> PyTreeSpec:
    """A treespec rebuilt bottom-up by ``f_node`` (nodes) and ``f_leaf`` (leaves).

    Each function takes the one-level (for a node) or leaf treespec and returns its
    replacement: ``treespec.transform(f_node, f_leaf)``.

    >>> spec = tree_structure({'a': [1, 2], 'b': None})
    >>> treespec_transform(spec, f_leaf=lambda leaf: tree_structure((0, 0)))
    PyTreeSpec({'a': [(*, *), (*, *)], 'b': None})
    """
    return _arg(treespec).transform(f_node, f_leaf)


def treespec_is_leaf(treespec: PyTreeSpec, /, *, strict: bool = True) -> bool:
    """Whether the treespec is one leaf (with ``strict=False``, or None): ``treespec.is_leaf()``.

    >>> treespec_is_leaf(tree_structure(1)), treespec_is_leaf(tree_structure([1]))
    (True, False)
    >>> treespec_is_leaf(tree_structure(None)), treespec_is_leaf(tree_structure(None), strict=False)
    (False, True)
    """
    return _arg(treespec).is_leaf(strict=strict)


def treespec_is_strict_leaf(treespec: PyTreeSpec, /) -> bool:
    """Whether the treespec is exactly one leaf.

    >>> treespec_is_strict_leaf(tree_structure(1)), treespec_is_strict_leaf(tree_structure(None))
    (True, False)
    """
    return _arg(treespec).is_leaf(strict=True)


def treespec_is_one_level(treespec: PyTreeSpec, /) -> bool:
    """Whether the root's children are all leaves: ``treespec.is_one_level()``.

    >>> treespec_is_one_level(tree_structure([1, 2]))
    True
    >>> treespec_is_one_level(tree_structure([1, [2]]))
    False
    """
    return _arg(treespec).is_one_level()


def treespec_is_prefix(
    treespec: PyTreeSpec, other_treespec: PyTreeSpec, /, *, strict: bool = False
) -> bool:
    """Whether ``treespec`` is a prefix of ``other_treespec``: ``treespec.is_prefix(...)``.

    A prefix is the other treespec with some subtrees cut down to leaves; with
    ``strict=True`` the two must also differ.

    >>> a, b = tree_structure([1, 2]), tree_structure([1, (2, 3)])
    >>> treespec_is_prefix(a, b), treespec_is_prefix(b, a)
    (True, False)
    >>> treespec_is_prefix(a, a), treespec_is_prefix(a, a, strict=True)
    (True, False)
    """
    return _arg(treespec).is_prefix(_arg(other_treespec), strict=strict)


def treespec_is_suffix(
    treespec: PyTreeSpec, other_treespec: PyTreeSpec, /, *, strict: bool = False
) -> bool:
    """Whether ``other_treespec`` is a prefix of ``treespec``: ``treespec.is_suffix(...)``.

    >>> a, b = tree_structure([1, 2]), tree_structure([1, (2, 3)])
    >>> treespec_is_suffix(b, a), treespec_is_suffix(a, b)
    (True, False)
    """
    return _arg(treespec).is_suffix(_arg(other_treespec), strict=strict)


# optree.treespec's short names (`treespec.tuple`, ...), served by `__getattr__`: as module
# globals they would shadow the builtins `tuple`, `list` and `dict` in this module's code.
_SHORT_NAMES = {
    name: f"treespec_{name}"
    for name in [
        "leaf",
        "none",
        "tuple",
        "list",
        "dict",
        "namedtuple",
        "ordereddict",
        "defaultdict",
        "deque",
        "structseq",
        "frozendict",
        "from_collection",
    ]
}


def __getattr__(name: str) -> Any:
    long = _SHORT_NAMES.get(name)
    if long is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return globals()[long]


def __dir__() -> list[str]:
    return sorted({*globals(), *_SHORT_NAMES})
