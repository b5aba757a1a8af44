"""Treespecs as versioned JSON, with no pickle involved: safe to load from untrusted sources.

Treespecs made of builtin nodes (None, tuple, list, dict, OrderedDict, defaultdict, deque,
namedtuples and struct sequences) serialize; custom nodes do not (their aux data may be any
object). A document names classes and default factories as ``"module:qualname"`` text, and
loading only reads it: it never imports a module and never calls or looks up anything a
document names. Each name must be on an allow-list: the builtin factories (``list``, ``dict``,
``set``, ``int``, ...), the standard library's struct sequences, and the classes and factories
the caller passes in. Loading goes through the same validation as unpickling, so a corrupted
or hostile document raises ValueError.

>>> import collections, json, oxtree
>>> spec = oxtree.tree_structure([1, {'b': collections.defaultdict(list), 'a': (4, None)}])
>>> doc = treespec_to_json(spec)
>>> json.loads(json.dumps(doc)) == doc
True
>>> treespec_from_json(json.dumps(doc)) == spec
True
>>> doc['nodes'][4]
['defaultdict', 0, [], None, 'builtins:list']
>>> doc['nodes'][4][4] = 'os:abort'  # a hostile document: nothing is imported or called
>>> treespec_from_json(doc)
Traceback (most recent call last):
  ...
ValueError: treespec_from_json: node 4: 'os:abort' is not a known default factory (pass it in factories=)
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping

from oxtree._core import PyTreeKind, PyTreeSpec, _Node

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing at run time
if TYPE_CHECKING:
    from typing import Any

__all__ = ["JSON_FORMAT", "JSON_VERSION", "treespec_from_json", "treespec_to_json"]

JSON_FORMAT = "oxtree.treespec"
JSON_VERSION = 1

_KIND_NAMES = {k.value: k.name.lower() for k in PyTreeKind}
_KIND_VALUES = {v: k for k, v in _KIND_NAMES.items()}


def _encode_key(key: Any) -> Any:
    # str keys stay strings; others carry their type, so 1, 1.0, True and "1" stay apart.
    if type(key) is str:
        return key
    for typ in (bool, int, float):
        if type(key) is typ:
            return {typ.__name__: key}
    if key is None:
        return {"none": None}
    raise ValueError(f"treespec_to_json: dict key {key!r} has no JSON form")


def _decode_key(doc: Any) -> Any:
    if isinstance(doc, str):
        return doc
    if isinstance(doc, dict) and len(doc) == 1:
        ((tag, value),) = doc.items()
        if tag == "none" and value is None:
            return None
        # Each tag takes only its own JSON type: no silent conversions.
        if tag == "bool" and type(value) is bool:
            return value
        if tag == "int" and type(value) is int:
            return value
        if tag == "float" and type(value) in (int, float):
            return float(value)
    raise ValueError(f"treespec_from_json: bad dict key {doc!r}")


def _name_of(obj: Any) -> str | None:
    """``module:qualname`` of a class or function, read from its attributes (no import)."""
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or "<locals>" in qualname:
        return None
    return f"{module}:{qualname}"


def _type_name(obj: Any) -> str:
    name = _name_of(obj)
    if name is None:
        raise ValueError(f"treespec_to_json: {obj!r} cannot be named")
    # The name must lead back to the object in its (already loaded) module, so that a reader
    # who passes the object in resolves the same name; nothing is imported here.
    found: Any = sys.modules.get(name.partition(":")[0])
    for part in name.partition(":")[2].split("."):
        found = getattr(found, part, None)
    if found is not obj:
        raise ValueError(f"treespec_to_json: {name.replace(':', '.')} does not name {obj!r}")
    return name


# Default factories every reader accepts: builtin types that build an empty value.
_FACTORIES = (list, dict, set, frozenset, tuple, int, float, complex, str, bytes, bytearray, bool)


def _struct_sequences() -> list[type]:
    """The standard library's struct sequence classes, from modules already loaded."""
    found: list[type] = []
    for module, names in (
        ("time", ("struct_time",)),
        ("os", ("stat_result", "statvfs_result", "terminal_size", "times_result")),
        ("os", ("uname_result",)),
    ):
        mod = sys.modules.get(module)
        found.extend(t for n in names if isinstance(t := getattr(mod, n, None), type))
    return found


# The builtin allow-lists, made on first use (the struct sequences' again when a module that
# defines some is loaded later).
_BUILTIN_TABLES: dict[Any, dict[str, Any]] = {}


def _builtin_table(what: str) -> dict[str, Any]:
    key = (what, "time" in sys.modules)
    table = _BUILTIN_TABLES.get(key)
    if table is None:
        objs = _struct_sequences() if what == "types" else _FACTORIES
        table = {name: obj for obj in objs if (name := _name_of(obj)) is not None}
        _BUILTIN_TABLES[key] = table
    return table


def _allow_list(given: Any, what: str) -> dict[str, Any]:
    """Name -> object for the builtin entries and the caller's (a mapping of names to
    objects, or objects named by their ``module:qualname``)."""
    builtin = _builtin_table(what)
    if given is None:
        return builtin
    out = dict(builtin)
    if isinstance(given, Mapping):
        items = list(given.items())
    elif isinstance(given, str | bytes) or not isinstance(given, Iterable):
        raise TypeError(f"treespec_from_json: {what} must be an iterable or a mapping")
    else:
        items = []
        for obj in given:
            name = _name_of(obj)
            if name is None:
                raise TypeError(f"treespec_from_json: {obj!r} in {what} has no name to match")
            items.append((name, obj))
    for name, obj in items:
        if not isinstance(name, str):
            raise TypeError(f"treespec_from_json: the names in {what} must be str, got {name!r}")
        out[name] = obj
    return out


def _lookup(table: dict[str, Any], name: Any, i: int, what: str, arg: str) -> Any:
    if not isinstance(name, str):
        raise ValueError(f"treespec_from_json: node {i}: bad {what} name {name!r}")
    try:
        return table[name]
    except KeyError:
        raise ValueError(
            f"treespec_from_json: node {i}: {name!r} is not a known {what} (pass it in {arg}=)"
        ) from None


def treespec_to_json(treespec: PyTreeSpec, /) -> dict[str, Any]:
    """A JSON-compatible document describing ``treespec`` (builtin node types only).

    >>> treespec_to_json(treespec_leaf := __import__('oxtree').tree_structure(1))['nodes']
    [['leaf', 0]]
    """
    if not isinstance(treespec, PyTreeSpec):
        raise TypeError(f"treespec_to_json expects a PyTreeSpec, got {treespec!r}")
    if treespec._face != "optree":
        raise ValueError("treespec_to_json: only treespecs of the main face have a JSON form")
    out = []
    for n in treespec._nodes():
        kind = n.kind
        node: list[Any] = [_KIND_NAMES[kind], n.arity]
        if kind == PyTreeKind.CUSTOM:
            raise ValueError(
                f"treespec_to_json: custom node {n.custom_type.__qualname__} has no JSON form "
                "(pickle the treespec instead)"
            )
        if n.keys is not None:
            node.append([_encode_key(k) for k in n.keys])
        if kind in (PyTreeKind.DICT, PyTreeKind.DEFAULTDICT):
            node.append(list(n.insertion) if n.insertion is not None else None)
        if kind in (PyTreeKind.NAMEDTUPLE, PyTreeKind.STRUCTSEQUENCE):
            node.append(_type_name(n.data))
        elif kind == PyTreeKind.DEFAULTDICT:
            node.append(None if n.data is None else _type_name(n.data))
        elif kind == PyTreeKind.DEQUE:
            node.append(n.data)
        out.append(node)
    return {
        "format": JSON_FORMAT,
        "version": JSON_VERSION,
        "none_is_leaf": treespec.none_is_leaf,
        "namespace": treespec.namespace,
        "nodes": out,
    }


def treespec_from_json(
    doc: str | bytes | dict[str, Any],
    /,
    *,
    types: Iterable[type] | Mapping[str, type] | None = None,
    factories: Iterable[Any] | Mapping[str, Any] | None = None,
) -> PyTreeSpec:
    """Rebuilds a treespec from :func:`treespec_to_json`'s document (or its JSON text).

    Safe for untrusted documents: nothing named in the document is imported or called. A
    namedtuple or struct sequence class must be in ``types`` (the standard library's struct
    sequences are known), a defaultdict factory a builtin type (``list``, ``dict``, ``set``,
    ``int``, ...) or in ``factories``; each is an iterable of objects, matched by their
    ``module:qualname``, or a mapping from such names to objects. Anything malformed or
    unknown raises ValueError.

    >>> import oxtree
    >>> treespec_from_json(treespec_to_json(oxtree.tree_structure((1, None))))
    PyTreeSpec((*, None))
    """
    type_table = _allow_list(types, "types")
    factory_table = _allow_list(factories, "factories")
    if isinstance(doc, str | bytes):
        import json  # here: importing it costs more than the rest of `import oxtree`

        try:
            doc = json.loads(doc)
        except (ValueError, RecursionError) as e:
            raise ValueError(f"treespec_from_json: not JSON: {e}") from None
    if not isinstance(doc, dict) or doc.get("format") != JSON_FORMAT:
        raise ValueError("treespec_from_json: not an oxtree treespec document")
    if doc.get("version") != JSON_VERSION:
        raise ValueError(
            f"treespec_from_json: unknown version {doc.get('version')!r} "
            f"(this oxtree reads version {JSON_VERSION})"
        )
    nodes = doc.get("nodes")
    if not isinstance(nodes, list):
        raise ValueError("treespec_from_json: 'nodes' must be a list")
    spec_nodes = []
    for i, node in enumerate(nodes):
        if (
            not isinstance(node, list)
            or len(node) < 2
            or not isinstance(node[0], str)
            or node[0] not in _KIND_VALUES
            or type(node[1]) is not int
        ):
            raise ValueError(f"treespec_from_json: node {i} is malformed: {node!r:.200}")
        kind = PyTreeKind(_KIND_VALUES[node[0]])
        arity, rest = node[1], node[2:]
        data = keys = insertion = None
        try:
            if kind in (PyTreeKind.DICT, PyTreeKind.DEFAULTDICT, PyTreeKind.ORDEREDDICT):
                if not isinstance(rest[0], list):
                    raise ValueError(f"treespec_from_json: node {i}: keys must be a list")
                keys = tuple(_decode_key(k) for k in rest[0])
                if kind != PyTreeKind.ORDEREDDICT and rest[1] is not None:
                    if not isinstance(rest[1], list):
                        raise ValueError(f"treespec_from_json: node {i}: bad insertion order")
                    insertion = tuple(rest[1])
                if kind == PyTreeKind.DEFAULTDICT and rest[2] is not None:
                    data = _lookup(factory_table, rest[2], i, "default factory", "factories")
            elif kind == PyTreeKind.NAMEDTUPLE:
                data = _lookup(type_table, rest[0], i, "namedtuple class", "types")
            elif kind == PyTreeKind.STRUCTSEQUENCE:
                data = _lookup(type_table, rest[0], i, "struct sequence class", "types")
            elif kind == PyTreeKind.DEQUE:
                data = rest[0]
            elif kind == PyTreeKind.CUSTOM:
                raise ValueError("custom nodes have no JSON form")
        except (IndexError, TypeError) as e:
            raise ValueError(f"treespec_from_json: node {i} is malformed: {node!r:.200}") from e
        spec_nodes.append(_Node(kind, arity, data, keys, insertion, index=i))
    return PyTreeSpec._from_nodes(
        spec_nodes, none_is_leaf=doc.get("none_is_leaf"), namespace=doc.get("namespace")
    )
