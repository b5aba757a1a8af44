"""Treespecs as versioned JSON, with no pickle involved.

Treespecs made of builtin nodes (None, tuple, list, dict, OrderedDict, defaultdict, deque,
namedtuples and struct sequences whose classes can be imported by name) serialize; custom
nodes do not (their aux data may be any object). Loading goes through the same validation as
unpickling, so a corrupted document raises ValueError.

>>> import json, oxtree
>>> spec = oxtree.tree_structure([1, {'b': 2, 'a': (3, None)}])
>>> doc = treespec_to_json(spec)
>>> json.loads(json.dumps(doc)) == doc
True
>>> treespec_from_json(json.dumps(doc)) == spec
True
"""

from __future__ import annotations

from oxtree import _core
from oxtree._core import PyTreeKind, PyTreeSpec

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


def _type_name(obj: Any) -> str:
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or "<locals>" in qualname:
        raise ValueError(f"treespec_to_json: {obj!r} cannot be named for import")
    if _import(f"{module}:{qualname}") is not obj:
        raise ValueError(f"treespec_to_json: {module}.{qualname} does not import as {obj!r}")
    return f"{module}:{qualname}"


def _import(name: Any) -> Any:
    import importlib

    if not isinstance(name, str) or name.count(":") != 1:
        raise ValueError(f"treespec_from_json: bad type name {name!r}")
    module, qualname = name.split(":")
    try:
        obj: Any = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"treespec_from_json: cannot import {name!r}: {e}") from None
    return obj


def treespec_to_json(treespec: PyTreeSpec, /) -> dict[str, Any]:
    """A JSON-compatible document describing ``treespec`` (builtin node types only).

    >>> treespec_to_json(treespec_leaf := __import__('oxtree').tree_structure(1))['nodes']
    [['leaf', 0]]
    """
    if not isinstance(treespec, PyTreeSpec):
        raise TypeError(f"treespec_to_json expects a PyTreeSpec, got {treespec!r}")
    _, (state,) = treespec.__reduce__()
    _version, none_is_leaf, namespace, nodes, face = state
    if face != "optree":
        raise ValueError("treespec_to_json: only treespecs of the main face have a JSON form")
    out = []
    for kind_no, arity, data, keys, insertion, custom_type, _entries in nodes:
        kind = PyTreeKind(kind_no)
        node: list[Any] = [_KIND_NAMES[kind_no], arity]
        if kind == PyTreeKind.CUSTOM:
            raise ValueError(
                f"treespec_to_json: custom node {custom_type.__qualname__} has no JSON form "
                "(pickle the treespec instead)"
            )
        if keys is not None:
            node.append([_encode_key(k) for k in keys])
        if kind in (PyTreeKind.DICT, PyTreeKind.DEFAULTDICT):
            node.append(list(insertion) if insertion is not None else None)
        if kind in (PyTreeKind.NAMEDTUPLE, PyTreeKind.STRUCTSEQUENCE):
            node.append(_type_name(data))
        elif kind == PyTreeKind.DEFAULTDICT:
            node.append(None if data is None else _type_name(data))
        elif kind == PyTreeKind.DEQUE:
            node.append(data)
        out.append(node)
    return {
        "format": JSON_FORMAT,
        "version": JSON_VERSION,
        "none_is_leaf": none_is_leaf,
        "namespace": namespace,
        "nodes": out,
    }


def treespec_from_json(doc: str | bytes | dict[str, Any], /) -> PyTreeSpec:
    """Rebuilds a treespec from :func:`treespec_to_json`'s document (or its JSON text).

    Anything malformed raises ValueError.

    >>> import oxtree
    >>> treespec_from_json(treespec_to_json(oxtree.tree_structure((1, None))))
    PyTreeSpec((*, None))
    """
    if isinstance(doc, str | bytes):
        import json  # here: importing it costs more than the rest of `import oxtree`

        try:
            doc = json.loads(doc)
        except (json.JSONDecodeError, RecursionError) as e:
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
    state_nodes = []
    for i, node in enumerate(nodes):
        if (
            not isinstance(node, list)
            or len(node) < 2
            or not isinstance(node[0], str)
            or node[0] not in _KIND_VALUES
            or type(node[1]) is not int
        ):
            raise ValueError(f"treespec_from_json: node {i} is malformed: {node!r}")
        kind = PyTreeKind(_KIND_VALUES[node[0]])
        arity, rest = node[1], node[2:]
        data = keys = insertion = None
        try:
            if kind in (PyTreeKind.DICT, PyTreeKind.DEFAULTDICT, PyTreeKind.ORDEREDDICT):
                if not isinstance(rest[0], list):
                    raise ValueError(f"treespec_from_json: node {i}: keys must be a list")
                keys = tuple(_decode_key(k) for k in rest[0])
                if kind != PyTreeKind.ORDEREDDICT and rest[1] is not None:
                    insertion = tuple(rest[1])
                if kind == PyTreeKind.DEFAULTDICT and rest[2] is not None:
                    data = _import(rest[2])
            elif kind in (PyTreeKind.NAMEDTUPLE, PyTreeKind.STRUCTSEQUENCE):
                data = _import(rest[0])
            elif kind == PyTreeKind.DEQUE:
                data = rest[0]
            elif kind == PyTreeKind.CUSTOM:
                raise ValueError("custom nodes have no JSON form")
        except (IndexError, TypeError) as e:
            raise ValueError(f"treespec_from_json: node {i} is malformed: {node!r}") from e
        state_nodes.append((int(kind), arity, data, keys, insertion, None, None))
    state = (1, doc.get("none_is_leaf"), doc.get("namespace"), tuple(state_nodes))
    return _core._rebuild_treespec(state)
