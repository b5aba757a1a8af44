"""Type stubs for oxtree's Rust extension."""

import re
import types as _types
from collections.abc import Callable, Iterable
from enum import IntEnum
from typing import Any, Final, Self, SupportsIndex, SupportsInt, TypeVar, final

from typing_extensions import disjoint_base

_T = TypeVar("_T")

__all__ = [
    "MAX_RECURSION_DEPTH",
    "NONE_IS_LEAF",
    "NONE_IS_NODE",
    "GLOBAL_NAMESPACE",
    "OPTREE_HAS_FROZENDICT",
    "OPTREE_HAS_SUBINTERPRETER_SUPPORT",
    "PYBIND11_HAS_NATIVE_ENUM",
    "PYBIND11_HAS_SUBINTERPRETER_SUPPORT",
    "Py_DEBUG",
    "Py_GIL_DISABLED",
    "_registrations",
    "_tuple_fields",
    "_tuple_kind",
    "get_registry_size",
    "is_dict_insertion_ordered",
    "set_dict_insertion_ordered",
    "PyTreeSpec",
    "PyTreeKind",
    "_Node",
    "tree_flatten",
    "tree_leaves",
    "tree_structure",
    "tree_unflatten",
    "tree_map",
    "tree_map_",
    "tree_is_leaf",
    "all_leaves",
    "_rebuild_treespec",
    "GraphDef",
    "graph_flatten",
    "graph_unflatten",
    "_rebuild_graphdef",
    "_graph_rebuild_steps",
    "_ModuleDef",
    "_module_flatten",
    "_module_flatten_with_keys",
    "_module_unflatten",
    "_FilterJitCore",
    "register_pytree_node",
    "unregister_pytree_node",
    "register_static",
    "_register_dataclass_fields",
    "_attribute_fields",
    "registered_types",
    "SequenceKey",
    "DictKey",
    "GetAttrKey",
    "FlattenedIndexKey",
    "keystr",
    "tree_flatten_with_path",
    "tree_paths",
    "tree_flatten_with_keys",
    "tree_leaves_with_path",
    "tree_map_with_path",
    "tree_map_with_keys",
    "PathPattern",
    "tree_mask",
    "tree_labels",
    "tree_set_matching",
    "_flatten_with_steps",
    "_tree_flatten_jax_registry",
    "_use_jax_registry",
    "jax_face",
    "_flatten_one_level",
    "PrefixError",
    "_prefix_errors",
    "_node_kind",
    "_jax_only_node",
    "_unflatten_node",
    "_broadcast_prefix",
    "_broadcast_common",
    "_tree_reduce",
    "_tree_reduce_associative",
    "_tree_all",
    "_tree_transpose",
    "_transpose_outputs",
]

MAX_RECURSION_DEPTH: Final[int]
NONE_IS_LEAF: Final[bool]
NONE_IS_NODE: Final[bool]
GLOBAL_NAMESPACE: Final[str]
Py_DEBUG: Final[bool]
Py_GIL_DISABLED: Final[bool]
OPTREE_HAS_FROZENDICT: Final[bool]
OPTREE_HAS_SUBINTERPRETER_SUPPORT: Final[bool]
PYBIND11_HAS_NATIVE_ENUM: Final[bool]
PYBIND11_HAS_SUBINTERPRETER_SUPPORT: Final[bool]

class PyTreeKind(IntEnum):
    """The kind of a treespec's root node (optree's numbering)."""

    CUSTOM = 0
    LEAF = 1
    NONE = 2
    TUPLE = 3
    LIST = 4
    DICT = 5
    NAMEDTUPLE = 6
    ORDEREDDICT = 7
    DEFAULTDICT = 8
    DEQUE = 9
    STRUCTSEQUENCE = 10
    FROZENDICT = 11
    NUM_KINDS = 12

@final
class PyTreeSpec:
    """An immutable, hashable, picklable tree structure."""

    @property
    def num_leaves(self) -> int: ...
    @property
    def num_nodes(self) -> int: ...
    @property
    def num_children(self) -> int: ...
    @property
    def none_is_leaf(self) -> bool: ...
    @property
    def namespace(self) -> str: ...
    @property
    def kind(self) -> PyTreeKind: ...
    @property
    def type(self) -> type | None: ...
    def is_leaf(self, strict: bool = True) -> bool: ...
    def children(self) -> list[PyTreeSpec]: ...
    def child(self, index: SupportsInt | SupportsIndex) -> PyTreeSpec: ...
    def unflatten(self, leaves: Iterable[Any]) -> Any: ...
    def flatten_up_to(self, tree: Any) -> list[Any]: ...
    def compose(self, inner: PyTreeSpec) -> PyTreeSpec: ...
    def paths(self) -> list[tuple[Any, ...]]: ...
    def accessors(self) -> Any: ...
    def entries(self) -> list[Any]: ...
    def entry(self, index: SupportsInt | SupportsIndex) -> Any: ...
    def key_paths(self) -> list[tuple[Any, ...]]: ...
    def is_prefix(self, other: PyTreeSpec, /, *, strict: bool = False) -> bool: ...
    def is_suffix(self, other: PyTreeSpec, /, *, strict: bool = False) -> bool: ...
    def broadcast_to_common_suffix(self, other: PyTreeSpec) -> PyTreeSpec: ...
    def _graft(self, inner: list[PyTreeSpec]) -> PyTreeSpec: ...
    def transform(
        self,
        f_node: Callable[[PyTreeSpec], PyTreeSpec] | None = None,
        f_leaf: Callable[[PyTreeSpec], PyTreeSpec] | None = None,
    ) -> PyTreeSpec: ...
    def one_level(self) -> PyTreeSpec | None: ...
    def _outline(self) -> list[tuple[int, Any, PyTreeSpec | None]]: ...
    def is_one_level(self) -> bool: ...
    def node_data(self) -> Any: ...
    def to_json(self) -> dict[str, Any]: ...
    def traverse(
        self,
        leaves: Iterable[Any],
        /,
        f_node: Callable[[Any], Any] | None = None,
        f_leaf: Callable[[Any], Any] | None = None,
    ) -> Any: ...
    def walk(self, a: Any, /, f_node: Any = None, f_leaf: Any = None) -> Any:
        """optree's ``walk(leaves, f_node, f_leaf)``; JAX's ``walk(f_node, f_leaf, leaves)``
        on a JAX-face treedef."""
    @staticmethod
    def from_node_data_and_children(
        registry: Any, node_data: Any, children: list[PyTreeSpec]
    ) -> PyTreeSpec: ...
    def serialize_using_proto(self) -> bytes: ...
    @staticmethod
    def deserialize_using_proto(registry: Any, data: bytes) -> PyTreeSpec: ...
    def from_iterable_tree(self, tree: Any) -> Any: ...
    def __lt__(self, value: PyTreeSpec, /) -> bool: ...
    def __le__(self, value: PyTreeSpec, /) -> bool: ...
    def __gt__(self, value: PyTreeSpec, /) -> bool: ...
    def __ge__(self, value: PyTreeSpec, /) -> bool: ...
    def __len__(self) -> int: ...
    def _repr_html_(self) -> str: ...
    def __eq__(self, value: object, /) -> bool: ...
    def __ne__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...
    def _nodes(self) -> tuple[_Node, ...]: ...
    @staticmethod
    def _from_nodes(
        nodes: tuple[_Node, ...] | list[_Node],
        *,
        none_is_leaf: bool = ...,
        namespace: str = ...,
        face: str = ...,
    ) -> PyTreeSpec: ...
    @property
    def _face(self) -> str: ...
    def __reduce__(self) -> tuple[Callable[..., PyTreeSpec], tuple[Any, ...]]: ...
    def __copy__(self) -> PyTreeSpec: ...
    def __deepcopy__(self, memo: Any) -> PyTreeSpec: ...

@final
class _Node:
    """One node of a treespec (``PyTreeSpec._nodes()``, ``PyTreeSpec._from_nodes``)."""

    def __new__(
        cls,
        kind: int,
        arity: int,
        data: Any = None,
        keys: tuple[Any, ...] | None = None,
        insertion: tuple[int, ...] | None = None,
        custom_type: type | None = None,
        entries: tuple[Any, ...] | None = None,
        *,
        index: int | None = None,
    ) -> Self: ...
    @property
    def kind(self) -> PyTreeKind: ...
    @property
    def arity(self) -> int: ...
    @property
    def data(self) -> Any: ...
    @property
    def keys(self) -> tuple[Any, ...] | None: ...
    @property
    def insertion(self) -> tuple[int, ...] | None: ...
    @property
    def custom_type(self) -> type | None: ...
    @property
    def entries(self) -> tuple[Any, ...] | None: ...

def tree_flatten(
    tree: Any,
    /,
    is_leaf: Callable[[Any], bool] | None = None,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> tuple[list[Any], PyTreeSpec]: ...
def tree_leaves(
    tree: Any,
    /,
    is_leaf: Callable[[Any], bool] | None = None,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> list[Any]: ...
def tree_structure(
    tree: Any,
    /,
    is_leaf: Callable[[Any], bool] | None = None,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> PyTreeSpec: ...
def tree_unflatten(treespec: PyTreeSpec, leaves: Iterable[Any]) -> Any: ...
def tree_map(
    func: Callable[..., Any],
    tree: Any,
    /,
    *rests: Any,
    is_leaf: Callable[[Any], bool] | None = None,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> Any: ...
def tree_map_(
    func: Callable[..., Any],
    tree: _T,
    /,
    *rests: Any,
    is_leaf: Callable[[Any], bool] | None = None,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> _T: ...
def tree_is_leaf(
    tree: Any,
    /,
    is_leaf: Callable[[Any], bool] | None = None,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> bool: ...
def all_leaves(
    iterable: Iterable[Any],
    /,
    is_leaf: Callable[[Any], bool] | None = None,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> bool: ...
def _rebuild_treespec(state: tuple[Any, ...]) -> PyTreeSpec: ...
def register_pytree_node(
    cls: type[_T],
    /,
    flatten_func: Callable[[Any], tuple[Any, ...]],
    unflatten_func: Callable[[Any, Any], Any],
    *,
    path_entry_type: type | None = None,
    flatten_with_keys_func: Callable[[Any], tuple[Any, Any]] | None = None,
    namespace: str = "",
) -> type[_T]: ...
def unregister_pytree_node(cls: type, /, *, namespace: str = "") -> None: ...
def register_static(cls: type[_T], /, *, namespace: str = "") -> type[_T]: ...
def _register_dataclass_fields(
    cls: type[_T],
    data_fields: list[str],
    meta_fields: list[str],
    *,
    call_init: bool = True,
    path_entry_type: type | None = None,
    namespace: str = "",
    init_names: list[str] | None = None,
) -> type[_T]: ...
def _attribute_fields(
    cls: type, /, *, namespace: str = ""
) -> tuple[list[str], list[str]] | None: ...
def registered_types(*, namespace: str = "") -> list[type]: ...
def get_registry_size(namespace: str | None = None) -> int: ...
def _registrations() -> list[tuple[type, str, Any, Any, type | None]]: ...
def is_dict_insertion_ordered(
    namespace: str = "", inherit_global_namespace: bool = True
) -> bool: ...
def set_dict_insertion_ordered(mode: bool, /, namespace: str = "") -> None: ...
def _use_jax_registry(mode: bool, /) -> bool: ...
def _tuple_kind(cls: object) -> PyTreeKind: ...
def _tuple_fields(cls: type, /, *, unnamed: bool = False) -> list[str | None]: ...

@final
class SequenceKey:
    """A position in a sequence: ``SequenceKey(idx=0)``, printed ``[0]``."""

    __match_args__ = ("idx",)
    def __new__(cls, idx: int) -> Self: ...
    @property
    def idx(self) -> int: ...
    def __eq__(self, value: object, /) -> bool: ...
    def __ne__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...
    def __reduce__(self) -> tuple[Any, ...]: ...

@final
class DictKey:
    """A mapping key: ``DictKey(key='a')``, printed ``['a']``."""

    __match_args__ = ("key",)
    def __new__(cls, key: Any) -> Self: ...
    @property
    def key(self) -> Any: ...
    def __eq__(self, value: object, /) -> bool: ...
    def __ne__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...
    def __reduce__(self) -> tuple[Any, ...]: ...

@final
class GetAttrKey:
    """An attribute or field: ``GetAttrKey(name='x')``, printed ``.x``."""

    __match_args__ = ("name",)
    def __new__(cls, name: str) -> Self: ...
    @property
    def name(self) -> str: ...
    def __eq__(self, value: object, /) -> bool: ...
    def __ne__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...
    def __reduce__(self) -> tuple[Any, ...]: ...

@final
class FlattenedIndexKey:
    """A child of a node that names no keys: printed ``[<flat index 0>]``."""

    __match_args__ = ("key",)
    def __new__(cls, key: Any) -> Self: ...
    @property
    def key(self) -> Any: ...
    def __eq__(self, value: object, /) -> bool: ...
    def __ne__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...
    def __reduce__(self) -> tuple[Any, ...]: ...

def keystr(keys: Iterable[Any], *, simple: bool = False, separator: str = "") -> str: ...
def tree_flatten_with_path(
    tree: Any,
    /,
    is_leaf: Callable[..., bool] | None = None,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
    is_leaf_takes_path: bool = False,
) -> tuple[list[tuple[Any, ...]], list[Any], PyTreeSpec]: ...
def tree_paths(
    tree: Any,
    /,
    is_leaf: Callable[..., bool] | None = None,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
    is_leaf_takes_path: bool = False,
) -> list[tuple[Any, ...]]: ...
def tree_flatten_with_keys(
    tree: Any,
    /,
    is_leaf: Callable[..., bool] | None = None,
    *,
    is_leaf_takes_path: bool = False,
    none_is_leaf: bool = False,
    namespace: str = "",
    jax_registry: bool | None = None,
) -> tuple[list[tuple[tuple[Any, ...], Any]], PyTreeSpec]: ...
def tree_leaves_with_path(
    tree: Any,
    /,
    is_leaf: Callable[..., bool] | None = None,
    *,
    is_leaf_takes_path: bool = False,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> list[tuple[tuple[Any, ...], Any]]: ...
def tree_map_with_path(
    func: Callable[..., Any],
    tree: Any,
    /,
    *rests: Any,
    is_leaf: Callable[..., bool] | None = None,
    none_is_leaf: bool = False,
    namespace: str = "",
    is_leaf_takes_path: bool = False,
) -> Any: ...
def tree_map_with_keys(
    func: Callable[..., Any],
    tree: Any,
    /,
    *rests: Any,
    is_leaf: Callable[..., bool] | None = None,
    is_leaf_takes_path: bool = False,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> Any: ...
def _flatten_with_steps(
    tree: Any,
    /,
    is_leaf: Callable[[Any], bool] | None = None,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> tuple[list[tuple[Any, ...]], list[Any], PyTreeSpec]: ...

#: The JAX face's entry points (``oxtree.tree_util`` re-exports them).
@final
class PathPattern:
    """Patterns over key paths (globs over ``keystr``, compiled ``re.Pattern``s), compiled
    once; a leaf is selected when its key path matches any of them."""

    def __new__(cls, *patterns: str | re.Pattern[str] | PathPattern) -> Self: ...
    @property
    def patterns(self) -> tuple[str | re.Pattern[str], ...]: ...
    def match(self, path: Iterable[Any]) -> bool: ...
    def _leaf_mask(self, structure: PyTreeSpec | GraphDef) -> list[bool]: ...
    def __eq__(self, value: object, /) -> bool: ...
    def __ne__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...
    def __reduce__(self) -> tuple[Any, ...]: ...

_Pattern = str | re.Pattern[str] | PathPattern

def tree_mask(
    tree: Any,
    /,
    *patterns: _Pattern,
    is_leaf: Callable[..., bool] | None = None,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> Any: ...
def tree_labels(
    tree: Any,
    rules: Any,
    /,
    default: Any = ...,
    *,
    is_leaf: Callable[..., bool] | None = None,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> Any: ...
def tree_set_matching(
    tree: Any,
    pattern: _Pattern,
    /,
    value: Any = ...,
    *,
    func: Callable[[tuple[Any, ...], Any], Any] | None = None,
    is_leaf: Callable[..., bool] | None = None,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> Any: ...

jax_face: _types.ModuleType

def _flatten_one_level(
    tree: Any,
    /,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
    jax: bool = False,
    jax_registry: bool | None = None,
) -> tuple[list[Any], PyTreeSpec]: ...
def _tree_flatten_jax_registry(
    tree: Any,
    /,
    is_leaf: Callable[[Any], bool] | None = None,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
    jax_registry: bool = True,
) -> tuple[list[Any], PyTreeSpec]: ...

@final
class PrefixError:
    def __call__(self, name: str) -> ValueError: ...

def _prefix_errors(
    prefix_tree: Any,
    full_tree: Any,
    /,
    is_leaf: Callable[[Any], bool] | None = None,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
    jax: bool = False,
) -> list[PrefixError]: ...

# The tree algebra both faces share (`jax=True`: JAX's flatten rules and texts).
def _node_kind(
    cls: object, /, *, none_is_leaf: bool = False, namespace: str = "", jax: bool = False
) -> PyTreeKind: ...
def _jax_only_node(value: object, /) -> bool: ...
def _unflatten_node(treespec: PyTreeSpec, metadata: Any, children: Iterable[Any], /) -> Any: ...
def _broadcast_prefix(
    prefix_tree: Any,
    full_tree: Any,
    /,
    is_leaf: Callable[[Any], bool] | None = None,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
    jax: bool = False,
    leaves: bool = False,
    jax_registry: bool | None = None,
) -> Any: ...
def _broadcast_common(
    trees: Iterable[Any],
    /,
    is_leaf: Callable[[Any], bool] | None = None,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
    leaves: bool = False,
    indices: bool = False,
) -> Any: ...
def _tree_reduce(
    func: Callable[[Any, Any], Any],
    tree: Any,
    /,
    *initial: Any,
    is_leaf: Callable[[Any], bool] | None = None,
    none_is_leaf: bool = False,
    namespace: str = "",
    jax: bool = False,
) -> Any: ...
def _tree_reduce_associative(
    operation: Callable[[Any, Any], Any],
    tree: Any,
    /,
    *identity: Any,
    is_leaf: Callable[[Any], bool] | None = None,
    none_is_leaf: bool = False,
    namespace: str = "",
    jax: bool = False,
) -> Any: ...
def _tree_all(
    tree: Any,
    /,
    is_leaf: Callable[[Any], bool] | None = None,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
    jax: bool = False,
    any: bool = False,
) -> bool: ...
def _tree_transpose(
    outer_treespec: PyTreeSpec,
    inner_treespec: PyTreeSpec | None,
    tree: Any,
    /,
    is_leaf: Callable[[Any], bool] | None = None,
    *,
    jax: bool = False,
) -> Any: ...
def _transpose_outputs(
    outer_treespec: PyTreeSpec,
    outputs: list[Any],
    /,
    inner_treespec: PyTreeSpec | None = None,
    is_leaf: Callable[[Any], bool] | None = None,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> Any: ...

# Graphs: shared and cyclic references.
@final
class GraphDef:
    @property
    def num_leaves(self) -> int: ...
    @property
    def num_nodes(self) -> int: ...
    @property
    def num_roots(self) -> int: ...
    @property
    def num_refs(self) -> int: ...
    @property
    def treespec(self) -> PyTreeSpec: ...
    def references(self) -> list[tuple[int, tuple[Any, ...]]]: ...
    def paths(self) -> list[tuple[Any, ...]]: ...
    def _layout(self) -> list[tuple[tuple[Any, ...], int, Any, Any, int]]: ...
    def unflatten(self, leaves: Iterable[Any]) -> Any: ...
    def __len__(self) -> int: ...
    def __hash__(self) -> int: ...
    def __eq__(self, value: object, /) -> bool: ...
    def __ne__(self, value: object, /) -> bool: ...
    def __reduce__(self) -> tuple[Any, ...]: ...
    def __copy__(self) -> GraphDef: ...
    def __deepcopy__(self, memo: Any) -> GraphDef: ...

def graph_flatten(
    *roots: Any,
    is_leaf: Callable[[Any], bool] | None = None,
    none_is_leaf: bool = False,
    namespace: str = "",
    jax_registry: bool | None = None,
    with_keys: bool = False,
) -> tuple[list[Any], GraphDef]: ...
def graph_unflatten(graphdef: GraphDef, leaves: Iterable[Any]) -> Any: ...
def _rebuild_graphdef(
    skeleton: PyTreeSpec, num_roots: int, refs: list[tuple[int, int]]
) -> GraphDef: ...
def _graph_rebuild_steps() -> int: ...

@disjoint_base
class _ModuleDef:
    """A Module's aux data (subclassed by ``oxtree.module._ModuleDef``)."""

    def __new__(
        cls,
        layout: Any,
        names: tuple[str, ...],
        kinds: tuple[Any, ...],
        keys: tuple[GetAttrKey, ...],
        others: dict[str, Any] | None,
        key: Any,
    ) -> Self: ...
    @property
    def layout(self) -> Any: ...
    @property
    def names(self) -> tuple[str, ...]: ...
    @property
    def kinds(self) -> tuple[Any, ...]: ...
    @property
    def keys(self) -> tuple[GetAttrKey, ...]: ...
    @property
    def others(self) -> dict[str, Any] | None: ...
    @property
    def _key(self) -> Any: ...
    def __eq__(self, value: object, /) -> bool: ...
    def __ne__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...
    def __reduce__(self) -> tuple[Any, ...]: ...

def _module_flatten(m: Any) -> tuple[tuple[Any, ...], _ModuleDef, tuple[GetAttrKey, ...]]: ...
def _module_flatten_with_keys(
    m: Any,
) -> tuple[tuple[tuple[GetAttrKey, Any], ...], _ModuleDef]: ...
def _module_unflatten(cls: type[_T], aux: Any, children: Iterable[Any]) -> _T: ...

@disjoint_base
class _FilterJitCore:
    def __new__(
        cls,
        namespace: str,
        known: dict[type, bool],
        classify: Callable[[type], bool],
    ) -> Self: ...
    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...
