"""Type annotations for pytrees, as ``optree.typing`` offers them.

``PyTree[T]`` is the union of ``T`` and every container kind holding ``PyTree[T]``;
``PyTreeTypeVar('Name', T)`` is the same union under a name of its own. Type checkers see
``PyTree`` as a recursive generic type alias (see ``PyTree``'s comment below), which mypy and
pyright both accept; the run time keeps optree's class and the unions it makes.

>>> from oxtree.typing import PyTree
>>> PyTree[int]  # doctest: +NORMALIZE_WHITESPACE
typing.Union[int, tuple[ForwardRef('PyTree[int]'), ...], list[ForwardRef('PyTree[int]')],
    dict[typing.Any, ForwardRef('PyTree[int]')], collections.deque[ForwardRef('PyTree[int]')],
    oxtree.typing.CustomTreeNode[ForwardRef('PyTree[int]')]]
"""

# optree.typing exports typing's old aliases (Tuple, List, Dict, ...) and builds unions with
# them; the modern spellings would change what users get.
# ruff: noqa: UP007, UP035, UP045

from __future__ import annotations

import abc
import contextlib
import functools
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import (
    TYPE_CHECKING,
    Any,
    ClassVar,
    DefaultDict,
    Deque,
    Dict,
    ForwardRef,
    Generic,
    List,
    NamedTuple,
    Optional,
    Protocol,
    Tuple,
    TypeAlias,
    TypeVar,
    Union,
    final,
    get_origin,
    runtime_checkable,
)
from weakref import WeakKeyDictionary

from oxtree._core import PyTreeKind, PyTreeSpec
from oxtree.accessors import (
    AutoEntry,
    DataclassEntry,
    FlattenedEntry,
    GetAttrEntry,
    GetItemEntry,
    MappingEntry,
    NamedTupleEntry,
    PyTreeAccessor,
    PyTreeEntry,
    SequenceEntry,
    StructSequenceEntry,
)
from oxtree.types import (
    PyStructSequence_UnnamedField,  # noqa: F401 (optree.typing has it, outside __all__)
    is_namedtuple,
    is_namedtuple_class,
    is_namedtuple_instance,
    is_structseq,
    is_structseq_class,
    is_structseq_instance,
    namedtuple_fields,
    structseq_fields,
)

__all__ = [
    "PyTreeSpec",
    "PyTreeDef",
    "PyTreeKind",
    "PyTree",
    "PyTreeTypeVar",
    "CustomTreeNode",
    "Children",
    "MetaData",
    "FlattenFunc",
    "UnflattenFunc",
    "PyTreeEntry",
    "GetItemEntry",
    "GetAttrEntry",
    "FlattenedEntry",
    "AutoEntry",
    "SequenceEntry",
    "MappingEntry",
    "NamedTupleEntry",
    "StructSequenceEntry",
    "DataclassEntry",
    "PyTreeAccessor",
    "is_namedtuple",
    "is_namedtuple_class",
    "is_namedtuple_instance",
    "namedtuple_fields",
    "is_structseq",
    "is_structseq_class",
    "is_structseq_instance",
    "structseq_fields",
    "T",
    "S",
    "U",
    "KT",
    "VT",
    "P",
    "F",
    "Iterable",
    "Sequence",
    "Tuple",
    "List",
    "Dict",
    "NamedTuple",
    "OrderedDict",
    "DefaultDict",
    "Deque",
    "StructSequence",
]

PyTreeDef = PyTreeSpec

T = TypeVar("T")
S = TypeVar("S")
U = TypeVar("U")
KT = TypeVar("KT")
VT = TypeVar("VT")
P = TypeVar("P")  # optree's name for a parameter variable
F = TypeVar("F", bound=Callable[..., Any])

#: The children of a node, as a flatten function returns them.
Children = Iterable[T]
#: A node's auxiliary data, kept in the treespec (must be hashable).
MetaData = Optional[Hashable]


@runtime_checkable
class CustomTreeNode(Protocol[T]):
    """The protocol of a class that flattens itself: ``__tree_flatten__`` and
    ``__tree_unflatten__``.

    >>> class Pair:
    ...     def __init__(self, a, b): self.a, self.b = a, b
    ...     def __tree_flatten__(self): return (self.a, self.b), None
    ...     @classmethod
    ...     def __tree_unflatten__(cls, metadata, children): return cls(*children)
    >>> isinstance(Pair(1, 2), CustomTreeNode)
    True
    """

    def __tree_flatten__(
        self, /
    ) -> tuple[Children[T], MetaData] | tuple[Children[T], MetaData, Iterable[Any] | None]:
        """The children, the metadata and (optionally) the children's path entries."""

    @classmethod
    def __tree_unflatten__(cls, metadata: MetaData, children: Children[T], /) -> CustomTreeNode[T]:
        """Rebuilds an instance from its metadata and children."""


class FlattenFunc(Protocol[T]):
    """The type of a flatten function: container -> (children, metadata[, entries]).

    >>> def flatten(pair) -> tuple[tuple[int, int], None]: return (pair.a, pair.b), None
    >>> f: FlattenFunc[int] = flatten
    """

    @abc.abstractmethod
    def __call__(
        self, container: Any, /
    ) -> tuple[Children[T], MetaData] | tuple[Children[T], MetaData, Iterable[Any] | None]:
        """Takes the container apart."""


class UnflattenFunc(Protocol[T]):
    """The type of an unflatten function: (metadata, children) -> container.

    >>> def unflatten(metadata, children) -> list[int]: return list(children)
    >>> f: UnflattenFunc[int] = unflatten
    """

    @abc.abstractmethod
    def __call__(self, metadata: MetaData, children: Children[T], /) -> Any:
        """Puts the container back together."""


def _type_name(param: Any) -> str:
    if isinstance(param, TypeVar):
        return param.__name__
    if isinstance(param, type):
        if param.__module__ == "builtins":
            return param.__qualname__
        return f"{param.__module__}.{getattr(param, '__qualname__', param.__name__)}"
    return repr(param)


# What type checkers see is not what runs. optree's `PyTree` is a class whose
# `__class_getitem__` builds a `Union` at run time; a checker cannot run that, so it reads
# `PyTree[int]` as an instance of the class `PyTree` and rejects every real tree passed for it
# (optree#251). For checkers `PyTree` is instead a recursive generic type alias, which mypy
# and pyright both resolve. Its members differ from the run-time union's on purpose:
# - `Sequence` and `Mapping` where the union has `tuple`, `list`, `dict` and `deque`: `list`
#   and `dict` are invariant, so a `list[int]` or `dict[str, int]` held in a variable would not
#   be a `list[PyTree[int]]`; `Sequence` and `Mapping`'s values are covariant and cover
#   namedtuples, deques, OrderedDicts and defaultdicts as well. The price: a `str` is a
#   sequence of `str`, and mypy (not pyright) takes that recursion as satisfied, so mypy lets a
#   `str` pass for any `PyTree[X]`. (A protocol that `str` fails, by its `__contains__`, closes
#   that hole, but then mypy no longer infers a mixed literal like `{'a': [1, (2, 3)]}` against
#   the alias: a wrong acceptance is the lesser harm.)
# - `None`: a node with no children (unless `none_is_leaf=True`), so `{'a': 1, 'b': None}` is a
#   `PyTree[int]`.
# - `CustomTreeNode[Any]`: a class that flattens itself. The protocol's parameter is invariant,
#   so `CustomTreeNode[PyTree[T]]` would reject a node whose `__tree_unflatten__` takes
#   `Children[int]`, as a `PyTree[int]` node's would.
# A type registered with `register_pytree_node` cannot be known to a checker: name it in `T`
# (`PyTree[int | Point]`). The named form `PyTree[T, 'Name']` and `PyTreeTypeVar` are
# run-time forms only; for checkers, name a tree type with `IntTree: TypeAlias = PyTree[int]`.
if TYPE_CHECKING:
    from collections.abc import Mapping  # here: optree.typing has no such name

    PyTree: TypeAlias = Union[
        T,
        Sequence["PyTree[T]"],
        Mapping[Any, "PyTree[T]"],
        CustomTreeNode[Any],
        None,
    ]
else:

    class PyTree(Generic[T]):
        """The type of a pytree whose leaves are ``T``: ``PyTree[T]`` (or ``PyTree[T, 'Name']``).

        A special form: it is never instantiated nor subclassed.

        >>> PyTree[int, 'IntTree'].__args__[:2]
        (<class 'int'>, tuple[ForwardRef('IntTree'), ...])
        """

        __slots__: ClassVar[tuple[()]] = ()
        # Every union made here, with its parameter and name: PyTree[PyTree[T]] is PyTree[T].
        __instances__: ClassVar[WeakKeyDictionary[Any, tuple[Any, str | None]]] = (
            WeakKeyDictionary()
        )
        __instance_lock__: ClassVar[threading.Lock] = threading.Lock()

        def __class_getitem__(cls, item: Any) -> Any:  # type: ignore[override]
            try:
                return _pytree_union(cls, item)
            except TypeError as ex:
                if "unhashable" not in str(ex):
                    raise
                return _pytree_union.__wrapped__(cls, item)

        def __new__(cls, /) -> Any:
            raise TypeError("Cannot instantiate special typing classes.")

        def __init_subclass__(cls, /, *args: Any, **kwargs: Any) -> None:
            raise TypeError("Cannot subclass special typing classes.")


@functools.cache
def _pytree_union(cls: Any, item: Any) -> Any:
    if not isinstance(item, tuple):
        item = (item, None)
    if len(item) == 1:
        item = (item[0], None)
    if len(item) != 2 or (item[1] is not None and not isinstance(item[1], str)):
        raise TypeError(
            f"{cls.__name__}[...] only supports a tuple of 2 items, "
            f"a parameter and a string of type name, got {item!r}."
        )
    param, name = item
    if get_origin(param) is Union:
        with cls.__instance_lock__:
            try:
                if param in cls.__instances__:
                    return param
            except TypeError:
                pass
    ref = ForwardRef(name if name is not None else f"{cls.__name__}[{_type_name(param)}]")
    alias = Union[
        param,
        tuple[ref, ...],  # tuple, namedtuple, struct sequence
        list[ref],
        dict[Any, ref],  # dict, OrderedDict, defaultdict
        deque[ref],
        CustomTreeNode[ref],
    ]
    with cls.__instance_lock__, contextlib.suppress(TypeError):
        cls.__instances__[alias] = (param, name)
    return alias


class PyTreeTypeVar:
    """``PyTreeTypeVar('Name', T)``: the type ``PyTree[T]`` under the name ``Name``.

    >>> PyTreeTypeVar('IntTree', int) == PyTree[int, 'IntTree']
    True
    """

    def __new__(cls, /, name: str, param: Any) -> Any:
        if not isinstance(name, str):
            raise TypeError(f"{cls.__name__} only supports a string of type name, got {name!r}.")
        # The named form exists at run time only: checkers see PyTree's one-parameter alias.
        return PyTree[param, name]  # type: ignore[misc, type-arg, valid-type]

    def __init_subclass__(cls, /, *args: Any, **kwargs: Any) -> None:
        raise TypeError("Cannot subclass special typing classes.")


class _StructSequenceMeta(type):
    def __subclasscheck__(cls, subclass: Any, /) -> bool:
        return is_structseq_class(subclass)

    def __instancecheck__(cls, instance: Any, /) -> bool:
        return is_structseq_instance(instance)


@final
class StructSequence(tuple, metaclass=_StructSequenceMeta):  # type: ignore[type-arg]
    """The type of CPython's struct sequences (``time.struct_time``, ``sys.float_info``):
    ``isinstance`` and ``issubclass`` ask the core."""

    __slots__: ClassVar[tuple[()]] = ()

    def __init_subclass__(cls, /) -> None:
        raise TypeError("type 'StructSequence' is not an acceptable base type")

    def __new__(cls, /, sequence: Iterable[Any], dict: Any = None) -> Any:
        """A type to check against, not to make: calling it raises NotImplementedError."""
        raise NotImplementedError


structseq = StructSequence
