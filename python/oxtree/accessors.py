"""Accessors: callable paths that fetch a subtree, as optree offers them.

A :class:`PyTreeAccessor` is a tuple of :class:`PyTreeEntry` objects; called on a tree it
walks the entries and returns the subtree there, and :meth:`PyTreeAccessor.codify` renders it
as Python source.

>>> import oxtree
>>> tree = {'a': [1, (2, 3)]}
>>> acc = oxtree.tree_accessors(tree)[2]
>>> acc
PyTreeAccessor(*['a'][1][1], (MappingEntry(key='a', type=<class 'dict'>), SequenceEntry(index=1, type=<class 'list'>), SequenceEntry(index=1, type=<class 'tuple'>)))
>>> acc(tree), acc.codify('tree'), acc.path
(3, "tree['a'][1][1]", ('a', 1, 1))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from oxtree import _core
from oxtree._core import PyTreeKind, PyTreeSpec, _tuple_fields
from oxtree.types import is_namedtuple_class, is_structseq_class, structseq_fields

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing at run time
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from typing import Any

__all__ = [
    "AutoEntry",
    "DataclassEntry",
    "FlattenedEntry",
    "GetAttrEntry",
    "GetItemEntry",
    "MappingEntry",
    "NamedTupleEntry",
    "PyTreeAccessor",
    "PyTreeEntry",
    "SequenceEntry",
    "StructSequenceEntry",
    "tree_accessors",
    "tree_flatten_with_accessor",
    "tree_map_with_accessor",
    "tree_set",
]


class PyTreeEntry:
    """One step from a node to a child: the entry, the node's type and its kind.

    The base class of the entry classes below; an entry is called on a node to fetch the
    child, and :meth:`codify` writes the same step as Python source.

    >>> e = tree_accessors({'a': [1, 2]})[1][1]
    >>> e, isinstance(e, PyTreeEntry)
    (SequenceEntry(index=1, type=<class 'list'>), True)
    >>> e.entry, e.type, e.kind
    (1, <class 'list'>, <PyTreeKind.LIST: 4>)
    >>> e([10, 20]), e.codify('xs')
    (20, 'xs[1]')
    """

    __slots__ = ("entry", "kind", "type")
    entry: Any
    type: type
    kind: PyTreeKind

    def __init__(self, entry: Any, type: type, kind: PyTreeKind) -> None:
        kind = PyTreeKind(kind)
        if kind == PyTreeKind.LEAF:
            raise ValueError("Cannot create a leaf path entry.")
        if kind == PyTreeKind.NONE:
            raise ValueError("Cannot create a path entry for None.")
        object.__setattr__(self, "entry", entry)
        object.__setattr__(self, "type", type)
        object.__setattr__(self, "kind", kind)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __call__(self, obj: Any, /) -> Any:
        """The child of ``obj`` this entry names (``obj[entry]`` unless a subclass says else)."""
        try:
            return obj[self.entry]
        except TypeError as ex:
            raise TypeError(
                f"{self.__class__!r} cannot access through {obj!r} via entry {self.entry!r}"
            ) from ex

    def codify(self, /, node: str = "") -> str:
        """Python source that reads this child from ``node``."""
        return f"{node}[<flat index {self.entry!r}>]"

    def _fields(self) -> str:
        return f"entry={self.entry!r}, type={self.type!r}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._fields()})"

    def _identity(self) -> tuple[Any, ...]:
        # Entries are equal when they name the same child the same way: a subclass that
        # overrides neither `__call__` nor `codify` equals its base (optree's rule).
        cls = type(self)
        return (self.entry, self.type, self.kind, cls.__call__, cls.codify)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PyTreeEntry):
            return NotImplemented
        return self._identity() == other._identity()

    def __hash__(self) -> int:
        return hash(self._identity())

    def __add__(self, other: object) -> PyTreeAccessor:
        if isinstance(other, PyTreeEntry):
            return PyTreeAccessor((self, other))
        if isinstance(other, PyTreeAccessor):
            return PyTreeAccessor((self, *other))
        return NotImplemented

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.entry, self.type, self.kind))


class GetItemEntry(PyTreeEntry):
    """A child read by ``obj[entry]``.

    >>> e = GetItemEntry('a', dict, PyTreeKind.DICT)
    >>> e({'a': 1}), e.codify('d')
    (1, "d['a']")
    """

    __slots__ = ()

    def __call__(self, obj: Any) -> Any:
        return obj[self.entry]

    def codify(self, node: str = "") -> str:
        return f"{node}[{self.entry!r}]"


class SequenceEntry(GetItemEntry):
    """A position in a tuple, list or deque.

    >>> e = SequenceEntry(1, list, PyTreeKind.LIST)
    >>> e, e.index, e([10, 20]), e.codify('xs')
    (SequenceEntry(index=1, type=<class 'list'>), 1, 20, 'xs[1]')
    """

    __slots__ = ()

    @property
    def index(self) -> int:
        return self.entry  # type: ignore[no-any-return]

    def __call__(self, obj: Any) -> Any:  # its own, as optree's: it differs from GetItemEntry
        return obj[self.entry]

    def _fields(self) -> str:
        return f"index={self.entry!r}, type={self.type!r}"


class MappingEntry(GetItemEntry):
    """A key of a dict, OrderedDict or defaultdict.

    >>> e = MappingEntry('a', dict, PyTreeKind.DICT)
    >>> e, e.key, e({'a': 1}), e.codify('d')
    (MappingEntry(key='a', type=<class 'dict'>), 'a', 1, "d['a']")
    """

    __slots__ = ()

    @property
    def key(self) -> Any:
        return self.entry

    def __call__(self, obj: Any) -> Any:  # its own, as optree's: it differs from GetItemEntry
        return obj[self.entry]

    def _fields(self) -> str:
        return f"key={self.entry!r}, type={self.type!r}"


class NamedTupleEntry(SequenceEntry):
    """A field of a namedtuple (the entry is its index).

    >>> import collections
    >>> P = collections.namedtuple('P', 'x y')
    >>> e = NamedTupleEntry(1, P, PyTreeKind.NAMEDTUPLE)
    >>> e, e.field, e(P(1, 2)), e.codify('p')
    (NamedTupleEntry(field='y', type=<class '...P'>), 'y', 2, 'p.y')
    """

    __slots__ = ()

    @property
    def fields(self) -> tuple[str, ...]:
        """The namedtuple's field names."""
        return self.type._fields  # type: ignore[attr-defined,no-any-return]

    @property
    def field(self) -> str:
        return self.fields[self.entry]

    def __call__(self, obj: Any) -> Any:
        return getattr(obj, self.field)

    def codify(self, node: str = "") -> str:
        return f"{node}.{self.field}"

    def _fields(self) -> str:
        return f"field={self.field!r}, type={self.type!r}"


class StructSequenceEntry(SequenceEntry):
    """A field of a struct sequence such as ``time.struct_time`` (the entry is its index).

    >>> import time
    >>> e = StructSequenceEntry(0, time.struct_time, PyTreeKind.STRUCTSEQUENCE)
    >>> e, e(time.gmtime(0)), e.codify('t')
    (StructSequenceEntry(field='tm_year', type=<class 'time.struct_time'>), 1970, 't.tm_year')
    """

    __slots__ = ()

    @property
    def fields(self) -> tuple[str, ...]:
        """The field names (``'unnamed field'`` for the unnamed fields, as optree says)."""
        return structseq_fields(self.type)

    @property
    def field(self) -> str:
        return self.fields[self.entry]

    @property
    def is_unnamed(self) -> bool:
        """Whether this entry is a field without a name, reachable only by index."""
        return _structseq_field_names(self.type)[self.entry] is None

    def __call__(self, obj: Any) -> Any:
        return obj[self.entry]

    def codify(self, node: str = "") -> str:
        field = _structseq_field_names(self.type)[self.entry]
        return f"{node}[{self.entry!r}]" if field is None else f"{node}.{field}"

    def _fields(self) -> str:
        field = _structseq_field_names(self.type)[self.entry]
        if field is None:
            return f"entry={self.entry!r}, type={self.type!r}"
        return f"field={field!r}, type={self.type!r}"


def _structseq_field_names(cls: Any) -> list[str | None]:
    """One name (or None) per visible field of a struct sequence class (the core's names)."""
    return _tuple_fields(cls, unnamed=True)


class GetAttrEntry(PyTreeEntry):
    """A child read by ``getattr(obj, name)``; a dotted name reads one attribute per part.

    >>> e = GetAttrEntry('real', complex, PyTreeKind.CUSTOM)
    >>> e.name, e(3 + 4j), e.codify('z')
    ('real', 3.0, 'z.real')
    >>> GetAttrEntry('a.x-y', object, PyTreeKind.CUSTOM).codify('node')
    "getattr(node.a, 'x-y')"
    """

    __slots__ = ()

    @property
    def name(self) -> str:
        return self.entry  # type: ignore[no-any-return]

    def __call__(self, obj: Any) -> Any:
        for part in self.name.split("."):
            obj = getattr(obj, part)
        return obj

    def codify(self, node: str = "") -> str:
        for part in self.name.split("."):
            node = f"{node}.{part}" if part.isidentifier() else f"getattr({node}, {part!r})"
        return node


class _FieldEntry(GetAttrEntry):
    """A field of a class whose fields are declared (a dataclass, an attrs class).

    The entry is the field's name, or the position among the children of a class registered
    by ``register_node``, which records its children fields in the attribute ``_MARKER``.
    """

    __slots__ = ()
    _MARKER = ""

    def _declared(self) -> list[tuple[str, bool]]:
        """(name, is an ``__init__`` field) for every field of ``self.type``, in order."""
        raise NotImplementedError

    @property
    def fields(self) -> tuple[str, ...]:
        """Every field's name."""
        return tuple(name for name, _ in self._declared())

    @property
    def init_fields(self) -> tuple[str, ...]:
        """The names of the fields ``__init__`` takes."""
        return tuple(name for name, init in self._declared() if init)

    @property
    def children_fields(self) -> tuple[str, ...]:
        """The fields an integer entry counts: the children ``register_node`` recorded, or
        every field for a class registered otherwise (its flatten function decides)."""
        # The class's own record: a subclass inherits the attribute, not the registration.
        recorded = self.type.__dict__.get(self._MARKER)
        return self.fields if recorded is None else tuple(recorded[0])

    @property
    def field(self) -> str:
        if isinstance(self.entry, int):
            return self.children_fields[self.entry]
        return self.entry  # type: ignore[no-any-return]

    @property
    def name(self) -> str:
        return self.field

    def _fields(self) -> str:
        return f"field={self.field!r}, type={self.type!r}"


class DataclassEntry(_FieldEntry):
    """A field of a registered dataclass.

    >>> import dataclasses
    >>> @dataclasses.dataclass
    ... class Point:
    ...     x: float
    ...     y: float
    >>> _ = register_dataclass(Point, namespace='doc-accessors')
    >>> e = tree_accessors(Point(1.0, 2.0), namespace='doc-accessors')[1][0]
    >>> e, e.field, e(Point(1.0, 2.0)), e.codify('p')
    (DataclassEntry(field='y', type=<class '...Point'>), 'y', 2.0, 'p.y')
    >>> e.fields, e.init_fields
    (('x', 'y'), ('x', 'y'))
    """

    __slots__ = ()
    _MARKER = "__optree_dataclass_fields__"

    def _declared(self) -> list[tuple[str, bool]]:
        import dataclasses

        return [(f.name, f.init) for f in dataclasses.fields(self.type)]


class FlattenedEntry(PyTreeEntry):
    """A child of a registered node, found by flattening the node one level.

    >>> class Pair:
    ...     def __init__(self, a, b): self.a, self.b = a, b
    >>> _ = register_pytree_node(
    ...     Pair, lambda p: ((p.a, p.b), None), lambda _, c: Pair(*c), namespace='doc-accessors')
    >>> e = tree_accessors(Pair(1, 2), namespace='doc-accessors')[1][0]
    >>> e, e(Pair(1, 2)), e.codify('p')
    (FlattenedEntry(entry=1, type=<class '...Pair'>), 2, 'p[<flat index 1>]')
    """

    __slots__ = ("namespace",)
    namespace: str

    def __init__(self, entry: Any, type: type, kind: PyTreeKind, namespace: str = "") -> None:
        super().__init__(entry, type, kind)
        object.__setattr__(self, "namespace", namespace)

    def __call__(self, obj: Any) -> Any:
        children, spec = _one_level(obj, self.namespace)
        entries = spec.entries()
        for i, e in enumerate(entries):
            if e == self.entry:
                return children[i]
        raise KeyError(f"{self.entry!r} is not an entry of {type(obj).__name__} {entries!r}")

    # codify: the base class's `[<flat index i>]`, which is no Python source (optree's too).


class AutoEntry(PyTreeEntry):
    """Makes the entry class that fits a registered node's type (kind ``CUSTOM``).

    A namedtuple or struct sequence gets its entry class, a dataclass
    :class:`DataclassEntry`, a mapping :class:`MappingEntry`, a sequence
    :class:`SequenceEntry`, anything else :class:`FlattenedEntry`.

    >>> AutoEntry(0, list, PyTreeKind.CUSTOM)
    SequenceEntry(index=0, type=<class 'list'>)
    >>> AutoEntry('a', dict, PyTreeKind.CUSTOM)
    MappingEntry(key='a', type=<class 'dict'>)
    """

    __slots__ = ()

    def __new__(cls, entry: Any, type: type, kind: PyTreeKind) -> PyTreeEntry:  # type: ignore[misc]
        if cls is not AutoEntry:
            return super().__new__(cls)
        if kind != PyTreeKind.CUSTOM:
            raise ValueError(f"Cannot create an automatic path entry for PyTreeKind {kind!r}.")
        return _entry_class(entry, type, kind)(entry, type, kind)


def _entry_class(entry: Any, typ: type, kind: PyTreeKind) -> type[PyTreeEntry]:
    if kind in (PyTreeKind.TUPLE, PyTreeKind.LIST, PyTreeKind.DEQUE):
        return SequenceEntry
    if kind in (PyTreeKind.DICT, PyTreeKind.ORDEREDDICT, PyTreeKind.DEFAULTDICT):
        return MappingEntry
    if kind == PyTreeKind.NAMEDTUPLE:
        return NamedTupleEntry
    if kind == PyTreeKind.STRUCTSEQUENCE:
        return StructSequenceEntry
    # A registered type: judged by what it is, as optree's AutoEntry does.
    if isinstance(typ, type):
        import dataclasses  # here: importing it costs more than the rest of `import oxtree`

        if is_structseq_class(typ):
            return StructSequenceEntry
        if is_namedtuple_class(typ):
            return NamedTupleEntry
        if dataclasses.is_dataclass(typ):
            return DataclassEntry
        if issubclass(typ, Mapping):
            return MappingEntry
        if issubclass(typ, Sequence):
            return SequenceEntry
    return FlattenedEntry


class PyTreeAccessor(tuple):  # type: ignore[type-arg]
    """A path from the root to a subtree, as a tuple of entries; call it on a tree.

    >>> tree = {'a': [1, (2, 3)]}
    >>> acc = tree_accessors(tree)[2]
    >>> acc(tree), acc.path, acc.codify('tree')
    (3, ('a', 1, 1), "tree['a'][1][1]")
    >>> acc[:2].codify(), acc[:2](tree)        # a slice is the accessor of an inner node
    ("*['a'][1]", (2, 3))
    """

    __slots__ = ()

    def __new__(cls, entries: Iterable[PyTreeEntry] = ()) -> PyTreeAccessor:
        entries = tuple(entries)
        if not all(isinstance(e, PyTreeEntry) for e in entries):
            raise TypeError(f"Expected a path of PyTreeEntry, got {entries!r}.")
        return super().__new__(cls, entries)

    def __call__(self, obj: Any) -> Any:
        for entry in self:
            obj = entry(obj)
        return obj

    @property
    def path(self) -> tuple[Any, ...]:
        """The raw entries: optree's path."""
        return tuple(e.entry for e in self)

    def codify(self, /, root: str = "*") -> str:
        """Python source that reads this subtree from ``root``: ``obj['a'][0].x``."""
        out = root
        for entry in self:
            out = entry.codify(out)
        return out

    def __add__(self, other: object) -> PyTreeAccessor:
        if isinstance(other, PyTreeEntry):
            return PyTreeAccessor((*self, other))
        if isinstance(other, tuple):
            return PyTreeAccessor((*self, *other))
        return NotImplemented

    def __radd__(self, other: object) -> PyTreeAccessor:
        if isinstance(other, PyTreeEntry):
            return PyTreeAccessor((other, *self))
        if isinstance(other, tuple):
            return PyTreeAccessor((*other, *self))
        return NotImplemented

    def __mul__(self, times: Any) -> PyTreeAccessor:
        return PyTreeAccessor(super().__mul__(times))

    __rmul__ = __mul__

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PyTreeAccessor):
            return False
        return tuple.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash((PyTreeAccessor, tuple(self)))

    def __getitem__(self, index: Any) -> Any:
        item = super().__getitem__(index)
        return PyTreeAccessor(item) if isinstance(index, slice) else item

    def __repr__(self) -> str:
        return f"PyTreeAccessor({self.codify()}, {tuple(self)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (PyTreeAccessor, (tuple(self),))


def _from_steps(
    steps: list[tuple[tuple[Any, type, PyTreeKind], ...]], namespace: str = ""
) -> list[PyTreeAccessor]:
    # Each node's step triples are shared by every leaf below it: make one entry per triple.
    made: dict[int, PyTreeEntry] = {}
    out = []
    for path in steps:
        entries = []
        for step in path:
            entry = made.get(id(step))
            if entry is None:
                # A fourth item is the registration's own path_entry_type.
                cls = step[3] if len(step) == 4 else _entry_class(*step)
                if cls is FlattenedEntry:
                    entry = FlattenedEntry(*step[:3], namespace=namespace)
                else:
                    entry = cls(*step[:3])
                made[id(step)] = entry
            entries.append(entry)
        out.append(PyTreeAccessor(entries))
    return out


def _one_level(obj: Any, namespace: str = "") -> tuple[list[Any], PyTreeSpec]:
    leaves, spec = _core._flatten_one_level(obj, namespace=namespace)
    return leaves, spec


def _one_level_keyed(obj: Any, namespace: str = "") -> tuple[list[Any], PyTreeSpec, list[Any]]:
    """Children, one-level spec and JAX keys of `obj`'s children."""
    pairs, spec = _core.tree_flatten_with_keys(
        obj, lambda p, x: len(p) == 1, is_leaf_takes_path=True, namespace=namespace
    )
    children = [x for _, x in pairs] if not spec.is_leaf(strict=False) else []
    keys = [p[0] for p, _ in pairs] if children else []
    return children, spec, keys


def tree_flatten_with_accessor(
    tree: Any,
    /,
    is_leaf: Callable[[Any], bool] | None = None,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> tuple[list[PyTreeAccessor], list[Any], PyTreeSpec]:
    """``(accessors, leaves, treespec)``: every leaf with the accessor that fetches it.

    >>> accessors, leaves, spec = tree_flatten_with_accessor({'x': [5]})
    >>> [a.codify('t') for a in accessors], leaves
    (["t['x'][0]"], [5])
    """
    steps, leaves, spec = _core._flatten_with_steps(
        tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace
    )
    return _from_steps(steps, spec.namespace), leaves, spec


def tree_accessors(
    tree: Any,
    /,
    is_leaf: Callable[[Any], bool] | None = None,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> list[PyTreeAccessor]:
    """The accessor of every leaf.

    >>> [a.codify() for a in tree_accessors([1, (2,)])]
    ['*[0]', '*[1][0]']
    """
    return tree_flatten_with_accessor(
        tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace
    )[0]


def tree_map_with_accessor(
    func: Callable[..., Any],
    tree: Any,
    /,
    *rests: Any,
    is_leaf: Callable[[Any], bool] | None = None,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> Any:
    """Maps ``func(accessor, x, *xs)`` over the leaves.

    >>> tree_map_with_accessor(lambda a, x: a.codify('t'), {'k': [0]})
    {'k': ["t['k'][0]"]}
    """
    accessors, leaves, spec = tree_flatten_with_accessor(
        tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace
    )
    others = [spec.flatten_up_to(r) for r in rests]
    return spec.unflatten(
        func(a, x, *xs) for a, x, *xs in zip(accessors, leaves, *others, strict=True)
    )


def _raw_entry(step: Any) -> Any:
    """The raw entry a path step names: a JAX key, an accessor entry or a raw entry."""
    if isinstance(step, PyTreeEntry):
        return step.entry
    if isinstance(step, _core.SequenceKey):
        return step.idx
    if isinstance(step, _core.DictKey | _core.FlattenedIndexKey):
        return step.key
    if isinstance(step, _core.GetAttrKey):
        return step.name
    # jax.tree_util's own key classes, known by name so that JAX is never imported here.
    attr = _JAX_KEY_FIELDS.get(type(step).__name__)
    if attr is not None and type(step).__module__.startswith(("jax", "jaxlib")):
        return getattr(step, attr)
    return step


_JAX_KEY_FIELDS = {
    "SequenceKey": "idx",
    "DictKey": "key",
    "GetAttrKey": "name",
    "FlattenedIndexKey": "key",
}


def _child_position(spec: PyTreeSpec, keys: list[Any], node: Any, step: Any) -> int | None:
    raw = _raw_entry(step)
    entries = spec.entries()
    kind = spec.kind
    if kind in (PyTreeKind.NAMEDTUPLE, PyTreeKind.STRUCTSEQUENCE) and isinstance(raw, str):
        names = _tuple_fields(type(node), unnamed=True)
        return names.index(raw) if raw in names else None
    for i, (e, k) in enumerate(zip(entries, keys, strict=False)):
        if k == step or (type(e) is type(raw) and e == raw) or _raw_entry(k) == raw:
            return i
    # A flat index into a registered node's children.
    if kind == PyTreeKind.CUSTOM and type(raw) is int and 0 <= raw < len(entries):
        return raw
    return None


def tree_set(
    tree: Any,
    where: Any,
    value: Any,
    /,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> Any:
    """A new tree with the subtree at ``where`` replaced by ``value``.

    ``where`` is a ``PyTreeAccessor``, a raw path (``('a', 0)``) or a JAX key path. Subtrees
    off the path are shared with ``tree``, which is left untouched. A path that does not exist
    raises ``KeyError`` (mappings and named fields) or ``IndexError`` (sequences).

    >>> tree = {'a': [1, 2], 'b': (3,)}
    >>> new = tree_set(tree, ('a', 1), 20)
    >>> new, tree, new['b'] is tree['b']
    ({'a': [1, 20], 'b': (3,)}, {'a': [1, 2], 'b': (3,)}, True)
    """
    # A Module's key in JAX's view (oxtree.module.ModulePath) holds a whole path.
    steps = tuple(
        e for step in where for e in (step.path if type(step).__name__ == "ModulePath" else (step,))
    )
    stack: list[tuple[PyTreeSpec, list[Any], int]] = []
    node = tree
    for depth, step in enumerate(steps):
        raw = _raw_entry(step)
        children, spec, keys = _one_level_keyed(node, namespace)
        if spec.is_leaf(strict=False):
            raise KeyError(
                f"tree_set: no subtree at {_render(steps[: depth + 1])}: "
                f"{type(node).__name__} has no children"
            )
        pos = _child_position(spec.one_level() or spec, keys, node, step)
        if pos is None:
            err = IndexError if isinstance(raw, int) and spec.kind in _SEQUENCES else KeyError
            raise err(f"tree_set: no subtree at {_render(steps[: depth + 1])}")
        stack.append((spec, children, pos))
        node = children[pos]
    out = value
    for spec, children, pos in reversed(stack):
        children = list(children)
        children[pos] = out
        out = spec.one_level().unflatten(children)  # type: ignore[union-attr]
    return out


_SEQUENCES = (PyTreeKind.TUPLE, PyTreeKind.LIST, PyTreeKind.DEQUE, PyTreeKind.NAMEDTUPLE)


def _render(steps: tuple[Any, ...]) -> str:
    parts = []
    for s in steps:
        if isinstance(s, PyTreeEntry):
            parts.append(s.codify(""))
        elif isinstance(s, _core.SequenceKey | _core.DictKey | _core.GetAttrKey):
            parts.append(str(s))
        else:
            parts.append(f"[{s!r}]")
    return "tree" + "".join(parts)
