"""Modules: classes whose instances are pytrees, with no registration call.

A :class:`Module` subclass is registered as a pytree node when it is defined. Each attribute
has a :class:`Kind`: ``PARAMETER`` and ``STATE`` attributes hold the leaves, ``MODULE``
attributes hold submodules (flattened in turn), and every other attribute (``OTHERS``) is
configuration kept in the treedef. Kinds come from ``register_parameter`` /
``register_state`` / ``register_module``, from annotations (``weight: Parameter``), or, for a
Module (or a list, tuple or dict of Modules) assigned to an attribute, by themselves; a pytree
that JAX registers and oxtree does not (an equinox module, a flax struct, an NNX State)
assigned to an attribute is a ``PARAMETER`` by itself, its arrays the module's leaves to JAX,
to ``oxtree.jax`` and to the module's methods.

>>> import oxtree
>>> class Counter(Module):
...     def __init__(self, step):
...         self.step = step                      # OTHERS: configuration
...         self.register_state('count', 0)
...         self.register_parameter('bias', 0.5)
>>> c = Counter(step=2)
>>> oxtree.tree_leaves(c)
[0, 0.5]
>>> dict(c.name_to_kind)
{'count': <Kind.STATE: 'state'>, 'bias': <Kind.PARAMETER: 'parameter'>}
>>> d = oxtree.tree_map(lambda x: x + 1, c)      # same class and config, no __init__ call
>>> type(d).__name__, d.count, d.bias, d.step
('Counter', 1, 1.5, 2)
>>> oxtree.tree_structure(Counter(2)) == oxtree.tree_structure(Counter(3))
False
"""

from __future__ import annotations

import enum
import functools
import operator
import re
import sys
import typing
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import Annotated, Any, Self, TypeVar

from oxtree import _jax_hook
from oxtree._axes import Axes
from oxtree._core import (
    GetAttrKey,
    PathPattern,
    PyTreeKind,
    _node_kind,
    _set_module_hooks,
    _tree_flatten_jax_registry,
    graph_flatten,
    graph_unflatten,
    register_pytree_node,
    registered_types,
    tree_leaves,
    tree_map,
)

# The names `oxtree` itself re-exports (Axes is oxtree._axes's). ModulePath and the filters (OfKind, OfType,
# PathContains, All, AnyOf, Not) are public here, in `oxtree.module`, only.
__all__ = ["Axes", "Kind", "Module", "Parameter", "State"]

_T = TypeVar("_T")
_M = TypeVar("_M", bound="Module")

# Registrations waiting for `import jax` to finish (oxtree._jax_hook's list itself): what
# `Module.__new__` checks, at the cost it always had.
_PENDING_JAX = _jax_hook.PENDING


class Kind(enum.Enum):
    """The kind of a module attribute.

    ``PARAMETER`` (trainable) and ``STATE`` (not trainable) attributes hold leaves,
    ``MODULE`` attributes hold submodules, ``OTHERS`` (the default for anything unregistered)
    is static configuration kept in the treedef.

    Kinds are open: :meth:`define` makes a new one (batch statistics, a cache, ...) whose
    attributes hold leaves, as ``STATE``'s do; register them with :meth:`Module.register_kind`
    or annotate them ``Annotated[T, kind]``, and pick them out with :meth:`Module.select`.

    >>> Kind.PARAMETER, Kind('state')
    (<Kind.PARAMETER: 'parameter'>, <Kind.STATE: 'state'>)
    >>> Kind.define('batch_stats'), Kind('batch_stats') is Kind.define('batch_stats')
    (<Kind.BATCH_STATS: 'batch_stats'>, True)
    """

    PARAMETER = "parameter"
    STATE = "state"
    MODULE = "module"
    OTHERS = "others"

    @classmethod
    def define(cls, name: str) -> Kind:
        """The kind named ``name`` (an identifier), made on first use; ``Kind(name)`` finds
        it afterwards (and in a pickle's loading process once defined there)."""
        if not isinstance(name, str) or not name.isidentifier():
            raise TypeError(f"Kind.define expects an identifier, got {name!r}")
        known = cls._value2member_map_.get(name)
        if known is not None:
            return known  # type: ignore[return-value]
        kind = object.__new__(cls)
        kind._value_ = name
        kind._name_ = name.upper()
        kind._sort_order_ = len(cls._value2member_map_)  # type: ignore[attr-defined]
        cls._value2member_map_[name] = kind
        return kind


# Annotation markers. An alias has no docstring syntax, so each gets its ``__doc__`` set, and
# its ``__module__`` (from 3.12 on an alias says ``typing``; documentation tools, doctest
# included, then skip it as not defined here).
Parameter = Annotated[_T, Kind.PARAMETER]
Parameter.__doc__ = """Marks a parameter field: ``weight: Parameter`` or ``Parameter[float]``.

A parameter (trainable) attribute holds leaves, as if set with ``register_parameter``.

>>> import oxtree
>>> class Scale(Module):
...     factor: Parameter[float]
...     def __init__(self, factor):
...         self.factor = factor
>>> s = Scale(2.0)
>>> dict(s.name_to_kind), oxtree.tree_leaves(s)
({'factor': <Kind.PARAMETER: 'parameter'>}, [2.0])
"""
Parameter.__module__ = __name__
State = Annotated[_T, Kind.STATE]
State.__doc__ = """Marks a state field: ``count: State`` or ``State[int]``.

A state (not trainable) attribute holds leaves, as if set with ``register_state``.

>>> import oxtree
>>> class Counter(Module):
...     count: State[int]
...     def __init__(self):
...         self.count = 0
>>> c = Counter()
>>> dict(c.name_to_kind), oxtree.tree_map(lambda n: n + 1, c).count
({'count': <Kind.STATE: 'state'>}, 1)
"""
State.__module__ = __name__


# --------------------------------------------------------------------------------------------
# The static part of a module: its layout (which attribute has which kind) and its
# configuration, together its aux data. Both are immutable and shared between a module and
# its tree_map copies; a module holds its aux data in one slot.
# --------------------------------------------------------------------------------------------


class _Layout:
    """The tree attributes of a module, in registration order, with their kinds and the
    :class:`Axes` (sharding annotation) of those that have one."""

    __slots__ = (
        "_hash",
        "keys",
        "kinds",
        "name_to_axes",
        "name_to_kind",
        "names",
        "stale",
        "values_of",
    )

    def __init__(
        self, items: tuple[tuple[str, Kind], ...], axes: Mapping[str, Axes] | None = None
    ) -> None:
        self.names: tuple[str, ...] = tuple(n for n, _ in items)
        self.kinds: tuple[Kind, ...] = tuple(k for _, k in items)
        self.name_to_kind: Mapping[str, Kind] = MappingProxyType(dict(items))
        # Only annotated attributes, in registration order.
        self.name_to_axes: Mapping[str, Axes] = MappingProxyType(
            {n: axes[n] for n in self.names if n in axes} if axes else {}
        )
        self.keys = tuple(GetAttrKey(n) for n in self.names)
        self._hash = hash((self.names, self.kinds, tuple(self.name_to_axes.items())))
        # The children of a module, read from its __dict__ by one C call.
        if len(self.names) >= 2:
            self.values_of: Callable[[dict[str, Any]], tuple[Any, ...]] = operator.itemgetter(
                *self.names
            )
        elif self.names:
            name = self.names[0]
            self.values_of = lambda d: (d[name],)
        else:
            self.values_of = lambda d: ()
        # The aux data of a module with this layout whose configuration must be read again.
        self.stale = _ModuleDef(self, None)

    def with_kind(self, name: str, kind: Kind, axes: Axes | None = None) -> _Layout:
        more = {name: axes} if axes is not None else {}
        return _Layout((*self.items(), (name, kind)), {**self.name_to_axes, **more})

    def without(self, name: str) -> _Layout:
        return _Layout(tuple(item for item in self.items() if item[0] != name), self.name_to_axes)

    def items(self) -> Iterator[tuple[str, Kind]]:
        return zip(self.names, self.kinds, strict=True)

    def __eq__(self, other: object) -> bool:
        return self is other or (
            isinstance(other, _Layout)
            and self.names == other.names
            and self.kinds == other.kinds
            and self.name_to_axes == other.name_to_axes
        )

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple[Any, ...]:
        return (_Layout, (tuple(self.items()), dict(self.name_to_axes)))

    def __repr__(self) -> str:
        axes = self.name_to_axes
        return ", ".join(
            f"{n}: {k.name}" + (f" {axes[n]!r}" if n in axes else "") for n, k in self.items()
        )


class _Identity:
    """An unhashable configuration value, compared by identity."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Identity) and self.value is other.value

    def __hash__(self) -> int:
        return id(self.value)


def _is_array(value: Any) -> bool:
    return getattr(value, "shape", None) is not None and getattr(value, "dtype", None) is not None


def _static_key(value: Any, where: Callable[[], str]) -> Any:
    """A hashable stand-in for a configuration value, equal for equal configurations.

    Hashable values stand for themselves; lists, tuples, dicts and sets holding unhashable
    values compare by content; arrays are refused (they belong in the leaves); anything else
    compares by identity.
    """
    try:
        hash(value)
    except TypeError:
        pass
    else:
        return value
    if isinstance(value, list | tuple):
        return (type(value), tuple(_static_key(v, where) for v in value))
    if isinstance(value, dict):
        return (type(value), tuple((k, _static_key(v, where)) for k, v in value.items()))
    if isinstance(value, set):
        return (set, frozenset(value))
    if _is_array(value):
        raise TypeError(
            f"{where()} holds an array ({value.dtype}{list(value.shape)}) but is not registered, "
            "so it would be static configuration in the treedef. Register it with "
            "register_parameter or register_state (or annotate it Parameter or State)."
        )
    return _Identity(value)


class _ModuleDef:
    """A module's aux data: its layout and its configuration, the ``OTHERS`` attributes
    sorted by name (None in a layout's ``stale`` instance: read them from the module).
    """

    __slots__ = ("_hash", "_key", "keys", "layout", "names", "others", "values_of")

    def __init__(
        self, layout: _Layout, others: dict[str, Any] | None, owner: str = "module"
    ) -> None:
        self.layout = layout
        self.names = layout.names
        self.keys = layout.keys
        self.values_of = layout.values_of
        self.others = others
        self._key = (
            None
            if others is None
            else tuple(
                (n, _static_key(v, lambda n=n: f"{owner}.{n}"))  # type: ignore[misc]
                for n, v in others.items()
            )
        )
        self._hash: int | None = None

    def __eq__(self, other: object) -> bool:
        return self is other or (
            isinstance(other, _ModuleDef)
            and self.layout == other.layout
            and self._key == other._key
        )

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash((self.layout, self._key))
        return self._hash

    def __reduce__(self) -> tuple[Any, ...]:
        return (_ModuleDef, (self.layout, self.others))

    def __repr__(self) -> str:
        config = ", ".join(f"{n}={_short_repr(v)}" for n, v in (self.others or {}).items())
        return f"<{self.layout}; {config}>" if self.names else f"<{config}>"


# Per-class declared kinds (from annotations), resolved at the first instantiation so that
# names defined after the class (string annotations) can be found.
_DECLARED = "_oxtree_declared_"
_EMPTY = _Layout(())
_MISSING = object()
_ANNOTATION_STRING = re.compile(r"^\s*(?:\w+\.)*(Parameter|State)\b")


def _declared(cls: type) -> tuple[_Layout, dict[str, Any]]:
    """A class's declared fields and the class-level defaults of some of them."""
    cached = cls.__dict__.get(_DECLARED)
    if cached is not None:
        return cached  # type: ignore[no-any-return]
    import inspect  # here: importing it costs more than the rest of `import oxtree`

    items: dict[str, Kind] = {}
    axes: dict[str, Axes] = {}
    for klass in reversed(cls.__mro__):
        if not (isinstance(klass, type) and issubclass(klass, Module)):
            continue
        for name, ann in inspect.get_annotations(klass).items():
            kind, axes_of = _annotation_kind(klass, name, ann)
            if kind is not None:
                items[name] = kind
                if axes_of is not None:
                    axes[name] = axes_of
    layout = _Layout(tuple(items.items()), axes) if items else _EMPTY
    defaults = {}
    for name in layout.names:
        default = getattr(cls, name, _MISSING)
        if default is not _MISSING and not callable(getattr(default, "__get__", None)):
            defaults[name] = default  # a value, not a method or property
    setattr(cls, _DECLARED, (layout, defaults))
    return layout, defaults


def _globals_of(klass: type) -> dict[str, Any]:
    """The globals of the first function defined in ``klass`` (empty when it has none)."""
    for value in vars(klass).values():
        names = getattr(value, "__globals__", None)
        if isinstance(names, dict):
            return dict(names)
    return {}


def _annotation_kind(klass: type, name: str, ann: Any) -> tuple[Kind | None, Axes | None]:
    """The kind an annotation gives, and the :class:`Axes` it carries (if any)."""
    if isinstance(ann, str):
        module = sys.modules.get(klass.__module__)
        # A module loaded from a file without a sys.modules entry: its functions' globals.
        found = dict(vars(module)) if module else _globals_of(klass)
        try:
            ann = eval(ann, found, dict(vars(klass)))
        except Exception:
            match = _ANNOTATION_STRING.match(ann)
            return (
                Kind.PARAMETER
                if match and match[1] == "Parameter"
                else (Kind.STATE if match else None)
            ), None
    if typing.get_origin(ann) is not Annotated:
        return None, None
    kinds = [m for m in ann.__metadata__ if isinstance(m, Kind)]
    if not kinds:
        return None, None
    axes = [m for m in ann.__metadata__ if isinstance(m, Axes)]
    if len(axes) > 1:
        raise TypeError(
            f"{klass.__qualname__}.{name}: an annotation may carry one Axes, got {axes}"
        )
    if len(kinds) > 1 or kinds[0] is Kind.OTHERS:
        raise TypeError(
            f"{klass.__qualname__}.{name}: an annotation may carry one of PARAMETER, STATE, "
            "MODULE or a kind made by Kind.define (OTHERS is the default: leave the "
            f"annotation plain), got {kinds}"
        )
    if axes and kinds[0] is Kind.MODULE:
        _checked_axes(axes[0], Kind.MODULE, None, f"{klass.__qualname__}.{name}")
    return kinds[0], (axes[0] if axes else None)


# --------------------------------------------------------------------------------------------
# Registration: one flatten for every module class, one unflatten per class.
# --------------------------------------------------------------------------------------------

_new_object = object.__new__


def _refresh(m: Module) -> _ModuleDef:
    """Reads a module's configuration again (after it changed) into new aux data."""
    layout = m._oxtree_def.layout
    tree = layout.name_to_kind
    others = dict(sorted((n, v) for n, v in vars(m).items() if n not in tree))
    aux = _ModuleDef(layout, others, type(m).__qualname__)
    _DEF_SLOT.__set__(m, aux)
    return aux


def _checked_axes(sharding: Any, kind: Kind, value: Any, where: str) -> Axes:
    """``sharding`` as an :class:`Axes` for an attribute of kind ``kind`` holding ``value``
    (checked against it when it is an array)."""
    if kind is Kind.MODULE:
        raise TypeError(
            f"{where}: a sharding lays out the arrays of a PARAMETER, STATE or user-defined "
            "kind; a MODULE's own attributes carry theirs"
        )
    axes = Axes.of(sharding, where)
    if _is_array(value):
        axes.check_rank(len(value.shape), where)
    return axes


def _unassigned(m: Module, error: KeyError) -> AttributeError:
    name = error.args[0]
    kind = m._oxtree_def.layout.name_to_kind[name].name
    return AttributeError(
        f"{type(m).__qualname__}.{name} ({kind}) was declared or registered but never "
        "assigned, so the module cannot be flattened"
    )


# The hot path: one slot read and one C call for the children.
def _flatten(m: Module) -> tuple[tuple[Any, ...], _ModuleDef, tuple[GetAttrKey, ...]]:
    aux = m._oxtree_def
    if aux.others is None:
        aux = _refresh(m)
    try:
        # The entries are GetAttrKeys in this face too, so paths print `.weight` everywhere.
        return aux.values_of(m.__dict__), aux, aux.keys
    except KeyError as e:
        raise _unassigned(m, e) from None


def _flatten_with_keys(m: Module) -> tuple[tuple[tuple[Any, Any], ...], _ModuleDef]:
    children, aux, _ = _flatten(m)
    return tuple(zip(aux.keys, children, strict=True)), aux


def _unflattener(cls: type[_M]) -> Callable[[_ModuleDef, Any], _M]:
    def unflatten(aux: _ModuleDef, children: Any) -> _M:
        m = _new_object(cls)
        _DEF_SLOT.__set__(m, aux)
        d = m.__dict__
        d.update(aux.others)  # type: ignore[arg-type]
        d.update(zip(aux.names, children))  # noqa: B905 (the treespec fixed the count)
        return m

    unflatten.__qualname__ = f"{cls.__qualname__}.<unflatten>"
    return unflatten


def _module_path_type() -> type:
    """The class ``ModulePath``, made the first time it is asked for (JAX imported by then):
    it subclasses JAX's ``GetAttrKey``, which this module cannot name before JAX is loaded."""
    cached = globals().get("ModulePath")
    if cached is not None:
        return cached  # type: ignore[no-any-return]
    import jax

    class ModulePath(jax.tree_util.GetAttrKey):  # type: ignore[misc]
        """One key in JAX's view of a Module: the whole key path of a leaf below the module.

        To JAX, a Module is one node whose children are the leaves of its graph
        (:func:`oxtree.graph_flatten`): a submodule reached twice (tied weights) gives its
        leaves once, so ``jax.grad`` sums its gradient and ``jax.tree_util.tree_map`` (optax's
        ``apply_updates``, say) keeps it shared. Each leaf's key is a ``ModulePath``: a JAX
        ``GetAttrKey`` whose name is the path as :meth:`Module.state_dict` names it
        (``layers[0].weight``), so it prints as ``keystr`` prints the path
        (``.layers[0].weight``), and tools that know JAX's key types (orbax, say) take a
        module whole. ``path`` holds the path's entries.

        >>> import jax
        >>> from oxtree import GetAttrKey, SequenceKey
        >>> k = ModulePath((GetAttrKey('layers'), SequenceKey(0), GetAttrKey('weight')))
        >>> k, str(k), k.name, k.path[-1]
        (ModulePath('.layers[0].weight'), '.layers[0].weight', 'layers[0].weight', GetAttrKey(name='weight'))
        >>> isinstance(k, jax.tree_util.GetAttrKey), k == jax.tree_util.GetAttrKey(k.name)
        (True, True)
        """

        __slots__ = ("path",)

        def __init__(self, path: tuple[Any, ...]) -> None:
            from oxtree._core import keystr

            path = tuple(path)
            text = keystr(path)
            if not path or type(path[0]) is not GetAttrKey:
                raise ValueError(
                    f"ModulePath: a module's path starts at one of its attributes (a "
                    f"GetAttrKey), got {text or '()'}"
                )
            super().__init__(text[1:])
            self.path = path

        def __repr__(self) -> str:
            return f"ModulePath({str(self)!r})"

        # Equality and hashing are GetAttrKey's (by name): a ModulePath equals the
        # GetAttrKey that a tool rebuilds from its name.

    ModulePath.__module__ = __name__
    ModulePath.__qualname__ = "ModulePath"
    globals()["ModulePath"] = ModulePath
    return ModulePath


def __getattr__(name: str) -> Any:
    if name == "ModulePath":
        return _module_path_type()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# What JAX calls to flatten a module: its graph, with None as a leaf so that a module and its
# gradient (None where nothing is differentiated) have equal aux data; JAX then sees each None
# child as its own None. The graph reads JAX's registry, so the arrays of an equinox module or
# a flax struct held by the module are its children and a tie inside one is kept. A partial of
# the core function: no Python frame per call.
_graph_children: Callable[[Module], tuple[list[Any], Any]] = functools.partial(
    graph_flatten, none_is_leaf=True, jax_registry=True
)

# How a module's own methods (update, select, state_dict, load_state_dict) see its graph: as
# JAX sees it, so their leaves and key paths are those of JAX's transforms and of orbax.
_module_graph: Callable[[Any], tuple[list[Any], Any]] = _graph_children

# The same graph with each registered node asked for its keys (an equinox module's
# flatten_with_keys): its `paths()` name every leaf as JAX's key paths do (`.lin.weight`).
_keyed_graph: Callable[[Any], tuple[list[Any], Any]] = functools.partial(
    graph_flatten, none_is_leaf=True, jax_registry=True, with_keys=True
)


def _graph_children_with_keys(m: Module) -> tuple[list[tuple[Any, Any]], Any]:
    leaves, gd = _keyed_graph(m)
    # Every key is a ModulePath, a one-step path too: tools that rebuild a tree from its key
    # paths (orbax) expect the children of one node to have keys of one type.
    module_path = _module_path_type()
    return [(module_path(p), leaf) for p, leaf in zip(gd.paths(), leaves, strict=True)], gd


def _child_at(node: Any, entry: Any) -> Any:
    """The child of ``node`` that the key ``entry`` names (an attribute, a key, an index)."""
    if isinstance(node, Module) and type(entry) is GetAttrKey:
        return node.__dict__[entry.name]
    name = getattr(entry, "name", _MISSING)
    if name is not _MISSING:
        return getattr(node, name)
    return node[getattr(entry, "idx", getattr(entry, "key", _MISSING))]


# What JAX calls to rebuild one: the core's graph_unflatten(graphdef, children) as it is.
_graph_rebuild: Callable[[Any, Any], Any] = graph_unflatten


def _register(cls: type[Module]) -> None:
    register_pytree_node(
        cls, _flatten, _unflattener(cls), flatten_with_keys_func=_flatten_with_keys
    )
    # This module never imports JAX: the class is registered with JAX now if JAX is loaded,
    # else once `import jax` has finished (oxtree._jax_hook).
    _jax_hook.register_with_jax(
        cls,
        "register_pytree_with_keys",
        (cls, _graph_children_with_keys, _graph_rebuild, _graph_children),
    )


def _holds_modules(value: Any) -> bool:
    if isinstance(value, Module):
        return True
    if isinstance(value, list | tuple):
        return bool(value) and all(isinstance(v, Module) for v in value)
    if isinstance(value, dict):
        return bool(value) and all(isinstance(v, Module) for v in value.values())
    return False


# Types whose instances are never nodes that JAX alone registers: most configuration values,
# answered by one set lookup.
_NOT_JAX_NODES = frozenset(
    {int, float, complex, bool, str, bytes, type(None), set, frozenset, type}
    | {type(_is_array), type(len), type(Kind.define)}
)


def _jax_node(value: Any) -> bool:
    """Whether ``value`` is a node that JAX registers and oxtree does not (an equinox module,
    a flax.struct dataclass, an NNX State, a ``jax.tree_util.Partial``). Never imports JAX."""
    cls = type(value)
    if cls in _NOT_JAX_NODES:
        return False
    # JAX's own registry first: one C++ lookup says no for a leaf type (the core's answer,
    # asked next, costs a microsecond).
    tu = sys.modules.get("jax._src.tree_util")
    if tu is None or not tu.default_registry.is_node(cls):
        return False
    return (
        _node_kind(cls, jax=True) is PyTreeKind.CUSTOM
        and not issubclass(cls, Module)
        and cls not in registered_types()
    )


def _holds_jax_nodes(value: Any) -> bool:
    """A JAX node (see :func:`_jax_node`), or a non-empty list, tuple or dict of them: what an
    attribute holds that becomes a ``PARAMETER`` by itself."""
    if isinstance(value, list | tuple):
        items: Any = value
    elif isinstance(value, dict):
        items = value.values()
    else:
        return _jax_node(value)
    # A container of plain values (sizes, names) is answered by its first item's type.
    return (
        bool(items) and type(next(iter(items))) not in _NOT_JAX_NODES and all(map(_jax_node, items))
    )


def _nones(value: Any) -> Any:
    """``value`` with every leaf None, its structure kept: JAX's registered nodes (an equinox
    module, a flax struct) included, as the module's graph sees them."""
    leaves, spec = _tree_flatten_jax_registry(value)
    return spec.unflatten([None] * len(leaves))


def _is_module(x: Any) -> bool:
    return isinstance(x, Module)


class _instance_only:
    """A method found on instances only, not on the class. Treescope takes a class that has
    ``_repr_html_`` for one whose own HTML replaces treescope's rendering; a Module renders
    in treescope natively (``__treescope_repr__``), while notebooks without treescope, which
    ask the instance, still get its HTML view."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            raise AttributeError(self.fn.__name__)
        return self.fn.__get__(obj, owner)


# --------------------------------------------------------------------------------------------
# The base class
# --------------------------------------------------------------------------------------------


class Module:
    """A base class whose subclasses are pytrees: parameters and states are the leaves.

    Register attributes with :meth:`register_parameter`, :meth:`register_state` and
    :meth:`register_module`, or declare them with annotations (``weight: Parameter``,
    ``count: State``); a Module, or a list, tuple or dict of Modules, assigned to an
    attribute becomes a ``MODULE`` by itself, and a pytree that JAX registers and oxtree does
    not (an equinox module, a flax struct), or a list, tuple or dict of them, a
    ``PARAMETER``. Anything else is configuration (``OTHERS``), kept in the treedef;
    ``training`` (True by default) is configuration too.

    Flattening, ``tree_map`` and ``jax.jit`` keep the class, the kinds and the
    configuration, and never call ``__init__``. Keys are ``GetAttrKey``s, so paths read
    ``.weight``. Subclasses need not call ``super().__init__()``.

    >>> import oxtree
    >>> class Linear(Module):
    ...     weight: Parameter
    ...     bias: Parameter
    ...     def __init__(self, w, b):
    ...         self.weight, self.bias = w, b
    >>> class Net(Module):
    ...     def __init__(self):
    ...         self.layers = [Linear(1.0, 0.0), Linear(2.0, 0.5)]
    ...         self.register_state('steps', 0)
    >>> net = Net()
    >>> oxtree.tree_leaves(net)
    [1.0, 0.0, 2.0, 0.5, 0]
    >>> [oxtree.keystr(p) for p, _ in oxtree.tree_util.tree_flatten_with_path(net)[0]]
    ['.layers[0].weight', '.layers[0].bias', '.layers[1].weight', '.layers[1].bias', '.steps']
    >>> oxtree.tree_leaves(net.parameters(), none_is_leaf=True)
    [1.0, 0.0, 2.0, 0.5, None]
    """

    __slots__ = ("__dict__", "_oxtree_def")
    _oxtree_def: _ModuleDef
    training: bool

    def __new__(cls, *args: Any, **kwargs: Any) -> Self:
        if _PENDING_JAX:  # JAX was half imported when the class was made: register it now
            _jax_hook.flush()
        self = _new_object(cls)
        layout, defaults = _declared(cls)
        _DEF_SLOT.__set__(self, layout.stale)
        d = self.__dict__
        d["training"] = True
        d.update(defaults)
        return self

    def __init__(self) -> None:
        # Nothing to do (``__new__`` sets a module up), so subclasses may skip calling it.
        pass

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _register(cls)

    # Rebuilding in two steps (see graph.rs): a module on a reference cycle (a child that
    # holds its parent) exists before its children, as a list does.
    @classmethod
    def _oxtree_graph_empty_(cls, aux: _ModuleDef) -> Module:
        m = _new_object(cls)
        _DEF_SLOT.__set__(m, aux)
        m.__dict__.update(aux.others)  # type: ignore[arg-type]
        return m

    @staticmethod
    def _oxtree_graph_fill_(m: Module, aux: _ModuleDef, children: tuple[Any, ...]) -> None:
        m.__dict__.update(zip(aux.names, children, strict=True))

    # -- kinds ------------------------------------------------------------------------------

    @property
    def name_to_kind(self) -> Mapping[str, Kind]:
        """A read-only mapping from each registered attribute to its kind, in registration
        order (attributes not listed are ``OTHERS``).

        >>> class M(Module):
        ...     def __init__(self):
        ...         self.register_parameter('w', 1.0)
        ...         self.lr = 0.1
        >>> M().name_to_kind
        mappingproxy({'w': <Kind.PARAMETER: 'parameter'>})
        """
        return self._oxtree_def.layout.name_to_kind

    @property
    def name_to_axes(self) -> Mapping[str, Axes]:
        """A read-only mapping from each attribute registered with a sharding annotation
        (``sharding=`` or an :class:`~oxtree.Axes` in its annotation) to its ``Axes``.

        >>> import numpy as np
        >>> class M(Module):
        ...     def __init__(self):
        ...         self.register_parameter('w', np.ones((2, 3)), sharding=('embed', None))
        ...         self.register_parameter('b', np.ones(3))
        >>> M().name_to_axes
        mappingproxy({'w': Axes('embed', None)})
        """
        return self._oxtree_def.layout.name_to_axes

    def register_parameter(self, name: str, value: Any, *, sharding: Any = None) -> None:
        """Sets attribute ``name`` to ``value`` as a ``PARAMETER`` (trainable leaves).

        ``sharding`` lays its arrays out on a device mesh: one entry per dimension, an axis
        name, a tuple of names or None (replicated), as a tuple, an :class:`~oxtree.Axes`
        or a ``jax.sharding.PartitionSpec`` (see :mod:`oxtree.sharding`).

        >>> class M(Module):
        ...     def __init__(self):
        ...         self.register_parameter('w', 1.0)
        >>> M().name_to_kind['w']
        <Kind.PARAMETER: 'parameter'>
        """
        self._register_kind(name, value, Kind.PARAMETER, sharding=sharding)

    def register_state(self, name: str, value: Any, *, sharding: Any = None) -> None:
        """Sets attribute ``name`` to ``value`` as a ``STATE`` (leaves that are not trained);
        ``sharding`` as :meth:`register_parameter` takes it.

        >>> class M(Module):
        ...     def __init__(self):
        ...         self.register_state('count', 0)
        >>> M().name_to_kind['count']
        <Kind.STATE: 'state'>
        """
        self._register_kind(name, value, Kind.STATE, sharding=sharding)

    def register_kind(self, name: str, value: Any, kind: Kind, *, sharding: Any = None) -> None:
        """Sets attribute ``name`` to ``value`` with kind ``kind``: ``PARAMETER``, ``STATE``,
        ``MODULE`` or a kind made by :meth:`Kind.define` (whose attributes hold leaves);
        ``sharding`` as :meth:`register_parameter` takes it (not for a ``MODULE``).

        >>> BatchStats = Kind.define('batch_stats')
        >>> class Norm(Module):
        ...     def __init__(self):
        ...         self.register_kind('mean', 0.0, BatchStats)
        >>> Norm().name_to_kind['mean']
        <Kind.BATCH_STATS: 'batch_stats'>
        """
        if not isinstance(kind, Kind) or kind is Kind.OTHERS:
            raise TypeError(
                f"{type(self).__qualname__}.register_kind({name!r}, ...): the kind must be a "
                f"Kind other than OTHERS (plain assignment makes configuration), got {kind!r}"
            )
        if kind is Kind.MODULE and sharding is None:
            self.register_module(name, value)
        else:
            self._register_kind(name, value, kind, sharding=sharding)

    def register_module(self, name: str, value: Any) -> None:
        """Sets attribute ``name`` to ``value`` (a Module, or a list, tuple or dict of
        Modules, possibly empty) as a ``MODULE``.

        >>> class M(Module):
        ...     def __init__(self):
        ...         self.register_module('blocks', [])
        >>> M().name_to_kind['blocks']
        <Kind.MODULE: 'module'>
        """
        if not (_holds_modules(value) or (isinstance(value, list | tuple | dict) and not value)):
            raise TypeError(
                f"register_module({name!r}, ...) expects a Module or a list, tuple or dict of "
                f"Modules, got {type(value).__name__}: {value!r}"
            )
        self._register_kind(name, value, Kind.MODULE)

    def _register_kind(
        self, name: str, value: Any, kind: Kind, *, assigned: bool = False, sharding: Any = None
    ) -> None:
        cls = type(self).__qualname__
        if not isinstance(name, str) or not name.isidentifier():
            raise TypeError(f"{cls}: attribute names must be identifiers, got {name!r}")
        if name.startswith("_oxtree") or name in _RESERVED:
            raise ValueError(f"{cls}: {name!r} is reserved by Module and cannot be registered")
        layout = self._oxtree_def.layout
        if name in layout.name_to_kind:
            raise ValueError(
                f"{cls}: attribute {name!r} is already registered "
                f"(as {layout.name_to_kind[name].name}); register each name once"
            )
        if name in self.__dict__ and not assigned:  # an assigned Module turns OTHERS to MODULE
            raise ValueError(
                f"{cls}: attribute {name!r} already exists as OTHERS (configuration); "
                "register it before assigning it"
            )
        axes = None
        if sharding is not None:
            axes = _checked_axes(sharding, kind, value, f"{cls}.{name}")
        _DEF_SLOT.__set__(self, layout.with_kind(name, kind, axes).stale)
        self.__dict__[name] = value

    def __setattr__(self, name: str, value: Any) -> None:
        layout = self._oxtree_def.layout
        if name not in layout.name_to_kind and name != "_oxtree_def":
            if _holds_modules(value):
                self._register_kind(name, value, Kind.MODULE, assigned=True)
                return
            if type(value) not in _NOT_JAX_NODES and _holds_jax_nodes(value):
                self._register_kind(name, value, Kind.PARAMETER, assigned=True)
                return
            if _is_array(value):
                _static_key(value, lambda: f"{type(self).__qualname__}.{name}")
            _DEF_SLOT.__set__(self, layout.stale)
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        layout = self._oxtree_def.layout
        object.__delattr__(self, name)
        if name in layout.name_to_kind:
            layout = layout.without(name)
        _DEF_SLOT.__set__(self, layout.stale)

    # -- functional updates -------------------------------------------------------------------

    def parameters(self: _M) -> _M:
        """A module of the same class in which only the ``PARAMETER`` leaves remain (every
        other leaf is None), recursively; submodules shared stay shared.

        >>> class M(Module):
        ...     def __init__(self):
        ...         self.register_parameter('w', [1.0, 2.0])
        ...         self.register_state('n', 0)
        >>> p = M().parameters()
        >>> p.w, p.n
        ([1.0, 2.0], None)
        """
        return _rebuild(self, keep=Kind.PARAMETER)

    def states(self: _M) -> _M:
        """A module of the same class in which only the ``STATE`` leaves remain (every other
        leaf is None), recursively.

        >>> class M(Module):
        ...     def __init__(self):
        ...         self.register_parameter('w', [1.0, 2.0])
        ...         self.register_state('n', 0)
        >>> s = M().states()
        >>> s.w, s.n
        ([None, None], 0)
        """
        return _rebuild(self, keep=Kind.STATE)

    def update(self: _M, other: _M) -> _M:
        """A new module taking each leaf from ``other`` where ``other``'s is not None and from
        ``self`` elsewhere (``other`` has ``self``'s structure, as ``parameters()`` and
        ``states()`` have). Shared submodules stay shared; ``self`` is untouched.

        >>> class M(Module):
        ...     def __init__(self):
        ...         self.register_parameter('w', 1.0)
        ...         self.register_state('n', 0)
        >>> import oxtree
        >>> m = M()
        >>> p = oxtree.tree_map(lambda x: x * 10, m.parameters())
        >>> new = m.update(p)
        >>> new.w, new.n, m.w
        (10.0, 0, 1.0)
        """
        if type(other) is not type(self):
            raise TypeError(
                f"{type(self).__qualname__}.update expects a {type(self).__qualname__}, "
                f"got {type(other).__qualname__}"
            )
        mine, gd = _module_graph(self)
        theirs, other_gd = _module_graph(other)
        if gd != other_gd:
            # The tree engine names the first path where they part.
            tree_map(lambda a, b: a, self, other, none_is_leaf=True)
            raise ValueError(
                f"{type(self).__qualname__}.update: the modules have the same tree structure "
                "but share submodules differently (oxtree's tree functions, such as "
                "oxtree.tree_map, copy a shared submodule once per occurrence; JAX's "
                "(jax.tree_util.tree_map, jax.grad, optax), filter_jit and graph_flatten "
                "keep it shared)"
            )
        leaves = [a if b is None else b for a, b in zip(mine, theirs, strict=True)]
        _check_like(self, "update", gd, mine, leaves)
        return graph_unflatten(gd, leaves)  # type: ignore[no-any-return]

    def select(self, *filters: Any) -> Self:
        """A module of the same class in which only the leaves that every filter accepts
        remain (every other leaf is None); shared submodules stay shared.

        A filter is a :class:`Kind`, a type (of the leaf), a bool, a function of
        ``(path, kind, leaf)``, one of :class:`OfKind`, :class:`OfType`,
        :class:`PathContains`, :class:`All`, :class:`AnyOf`, :class:`Not`, or an
        :class:`oxtree.PathPattern` (globs over the leaf's ``keystr`` such as
        ``'layers[*].w'``; see docs/key-paths.md), matched in one pass over the module's
        graph.

        >>> class M(Module):
        ...     def __init__(self):
        ...         self.register_parameter('w', 1.0)
        ...         self.register_parameter('b', 0.5)
        ...         self.register_state('n', 0)
        >>> s = M().select(Kind.PARAMETER, Not(PathContains('b')))
        >>> s.w, s.b, s.n
        (1.0, None, None)
        >>> from oxtree import PathPattern
        >>> M().select(Not(PathPattern('b'))).state_dict()
        {'w': 1.0, 'n': 0}
        """
        test = All(*filters)
        leaves, gd = _keyed_graph(self)
        kept = test._mask(_Leaves(self, gd, leaves), [leaf is not None for leaf in leaves])
        return graph_unflatten(  # type: ignore[no-any-return]
            gd, [leaf if k else None for leaf, k in zip(leaves, kept, strict=True)]
        )

    def state_dict(self, *filters: Any) -> dict[str, Any]:
        """The leaves by key path (``keystr`` without the leading dot), each shared one once,
        None leaves left out; with ``filters`` (see :meth:`select`), only the leaves they
        accept. :meth:`load_state_dict` reads it back.

        >>> class M(Module):
        ...     def __init__(self):
        ...         self.layers = [Module(), Module()]
        ...         self.layers[0].register_parameter('w', 1.0)
        ...         self.register_state('n', 0)
        >>> M().state_dict()
        {'layers[0].w': 1.0, 'n': 0}
        """
        from oxtree._core import keystr

        source = self.select(*filters) if filters else self
        leaves, gd = _keyed_graph(source)
        return {
            keystr(path).removeprefix("."): leaf
            for path, leaf in zip(gd.paths(), leaves, strict=True)
            if leaf is not None
        }

    def load_state_dict(self, state: Mapping[str, Any], *, strict: bool = True) -> Self:
        """A new module whose leaves are read from ``state`` (as :meth:`state_dict` makes
        it); ``self`` is untouched and shared submodules stay shared. An array must keep its
        shape and dtype. With ``strict`` (the default), every leaf of the module must be in
        ``state`` and every key of ``state`` must name one; otherwise missing leaves keep
        their values and unknown keys are ignored. A ValueError names every missing,
        unknown and mis-shaped entry.

        >>> class M(Module):
        ...     def __init__(self):
        ...         self.register_parameter('w', 1.0)
        ...         self.register_state('n', 0)
        >>> m = M().load_state_dict({'w': 2.0, 'n': 3})
        >>> m.w, m.n
        (2.0, 3)
        >>> M().load_state_dict({'w': 2.0, 'x': 1})
        Traceback (most recent call last):
        ...
        ValueError: M.load_state_dict: missing keys ['n']; unknown keys ['x']
        """
        from oxtree._core import keystr

        if not isinstance(state, Mapping):
            raise TypeError(
                f"{type(self).__qualname__}.load_state_dict expects a mapping from key paths "
                f"to leaves, got {type(state).__name__}"
            )
        leaves, gd = _keyed_graph(self)
        keys = [keystr(path).removeprefix(".") for path in gd.paths()]
        new = [
            state.get(key, leaf) if leaf is not None else state.get(key)
            for key, leaf in zip(keys, leaves, strict=True)
        ]
        problems = []
        if strict:
            missing = [k for k, leaf in zip(keys, leaves, strict=True) if leaf is not None]
            missing = [k for k in missing if k not in state]
            if missing:
                problems.append(f"missing keys {missing}")
        known = set(keys)
        unknown = [k for k in state if k not in known]
        if strict and unknown:
            problems.append(f"unknown keys {unknown}")
        if problems:
            raise ValueError(f"{type(self).__qualname__}.load_state_dict: {'; '.join(problems)}")
        _check_like(self, "load_state_dict", gd, leaves, new)
        return graph_unflatten(gd, new)  # type: ignore[no-any-return]

    def replace(self: _M, **changes: Any) -> _M:
        """A shallow copy with some attributes replaced; ``self`` is untouched.

        Each change is an assignment, so a Module assigned becomes a ``MODULE``.

        >>> class M(Module):
        ...     def __init__(self):
        ...         self.register_parameter('w', 1.0)
        ...         self.lr = 0.1
        >>> m = M().replace(w=2.0, lr=0.5)
        >>> m.w, m.lr, m.name_to_kind['w']
        (2.0, 0.5, <Kind.PARAMETER: 'parameter'>)
        """
        known = self._oxtree_def.layout.name_to_kind
        for name in changes:
            if name not in known and name not in self.__dict__:
                raise TypeError(
                    f"{type(self).__qualname__}.replace: no attribute {name!r} "
                    f"(attributes: {sorted(set(known) | set(self.__dict__))})"
                )
        new = _copy(self)
        for name, value in changes.items():
            setattr(new, name, value)
        return new

    def train(self: _M) -> _M:
        """A copy with ``training=True``, here and in every submodule.

        >>> Module().eval().train().training
        True
        """
        return _rebuild(self, training=True)

    def eval(self: _M) -> _M:
        """A copy with ``training=False``, here and in every submodule.

        >>> Module().eval().training
        False
        """
        return _rebuild(self, training=False)

    def submodules(self) -> Iterator[Module]:
        """The direct submodules, in registration order (each shared one once).

        >>> class M(Module):
        ...     def __init__(self):
        ...         self.a = Module()
        ...         self.b = [Module(), self.a]
        >>> len(list(M().submodules()))
        2
        """
        seen: set[int] = set()
        for name, kind in self._oxtree_def.layout.items():
            if kind is Kind.MODULE:
                for sub in _modules_in(self.__dict__.get(name)):
                    if id(sub) not in seen:
                        seen.add(id(sub))
                        yield sub

    # -- display ------------------------------------------------------------------------------

    def __repr__(self) -> str:
        from oxtree.pretty import pformat  # here, not at import: display is rarely needed

        return pformat(self)

    @_instance_only
    def _repr_html_(self) -> str:
        from oxtree.pretty import view

        return view(self)._repr_html_()

    def __treescope_repr__(self, path: str | None, subtree_renderer: Any) -> Any:
        """Treescope's rendering hook: the module in constructor form, its leaves counted by
        kind on the first line (see ``oxtree._treescope``)."""
        from oxtree._treescope import render

        return render(self, path, subtree_renderer)


_DEF_SLOT = Module.__dict__["_oxtree_def"]
# The core reads and rebuilds modules itself (as _flatten and _unflattener's functions do)
# for every class registered with _flatten; those functions remain for what it hands back.
_set_module_hooks(_flatten)
_RESERVED = frozenset(n for n in dir(Module) if not n.startswith("_")) | {"training"}
_register(Module)


def _modules_in(value: Any) -> list[Module]:
    return [x for x in tree_leaves(value, _is_module) if isinstance(x, Module)]


def _copy(m: _M) -> _M:
    new = _new_object(type(m))
    _DEF_SLOT.__set__(new, m._oxtree_def)
    new.__dict__.update(m.__dict__)
    return new


def _rebuild(root: _M, *, keep: Kind | None = None, training: bool | None = None) -> _M:
    """Copies ``root`` and its submodules (each shared one once). With ``keep``, only the
    leaves of that kind remain (others become None); with ``training``, every copy gets it.
    """
    memo: dict[int, Module] = {}

    def visit(m: Any) -> Any:
        if not isinstance(m, Module):
            return m if keep is None else None
        new = memo.get(id(m))
        if new is not None:
            return new
        new = memo[id(m)] = _copy(m)
        d = new.__dict__
        for name, kind in m._oxtree_def.layout.items():
            if name not in d:
                continue
            if kind is Kind.MODULE:
                d[name] = tree_map(visit, d[name], is_leaf=_is_module)
            elif keep is not None and kind is not keep:
                d[name] = _nones(d[name])
        if training is not None and d.get("training") is not training:
            d["training"] = training
            _DEF_SLOT.__set__(new, m._oxtree_def.layout.stale)
        return new

    return visit(root)  # type: ignore[no-any-return]


def _short_repr(value: Any) -> str:
    """A configuration value in a treedef's repr: functions by name, not by address."""
    text = repr(value)
    name = getattr(value, "__qualname__", None) or getattr(value, "__name__", None)
    if text.startswith("<") and callable(value) and isinstance(name, str):
        return name
    return text


def _check_like(m: Module, what: str, gd: Any, old: list[Any], new: list[Any]) -> None:
    """Raises a ValueError naming every array leaf of ``new`` whose shape or dtype differs
    from the one it replaces in ``old``."""
    bad = []
    for i, (a, b) in enumerate(zip(old, new, strict=True)):
        if a is b or not (_is_array(a) and _is_array(b)):
            continue
        if tuple(a.shape) != tuple(b.shape) or a.dtype != b.dtype:
            bad.append(i)
    if not bad:
        return
    from oxtree._core import keystr

    paths = _keyed_graph(m)[1].paths()
    detail = "; ".join(
        f"{keystr(paths[i]).removeprefix('.')}: expected {old[i].dtype}{list(old[i].shape)}, "
        f"got {new[i].dtype}{list(new[i].shape)}"
        for i in bad
    )
    raise ValueError(f"{type(m).__qualname__}.{what}: arrays of another shape or dtype: {detail}")


def _leaf_kinds(root: Module, gd: Any) -> list[Kind | None]:
    """The kind of the attribute each graph leaf of ``root`` lies under (None when no module
    attribute holds it), found by following its path."""
    return [_kind_at(root, path) for path in gd.paths()]


def _kind_at(root: Any, path: tuple[Any, ...]) -> Kind | None:
    """The kind of the module attribute that the leaf at ``path`` below ``root`` lies under
    (None when no module attribute holds it)."""
    node: Any = root
    kind: Kind | None = None
    for entry in path:
        if isinstance(node, Module) and type(entry) is GetAttrKey:
            kind = node._oxtree_def.layout.name_to_kind.get(entry.name, Kind.OTHERS)
            node = node.__dict__.get(entry.name)
            continue
        try:
            node = _child_at(node, entry)
        except Exception:  # a registered node's entry: the kind stays that of its holder
            break
    return kind


# --------------------------------------------------------------------------------------------
# Filters: predicates on (path, kind, leaf), for select and state_dict
# --------------------------------------------------------------------------------------------


class _Leaves:
    """The leaves of a module's graph as filters see them, each column made when first asked
    for: a path pattern needs neither the paths nor the kinds."""

    __slots__ = ("_kinds", "_paths", "graphdef", "leaves", "root")

    def __init__(self, root: Module, graphdef: Any, leaves: list[Any]) -> None:
        self.root, self.graphdef, self.leaves = root, graphdef, leaves
        self._paths: list[tuple[Any, ...]] | None = None
        self._kinds: list[Kind | None] | None = None

    @property
    def paths(self) -> list[tuple[Any, ...]]:
        if self._paths is None:
            self._paths = self.graphdef.paths()
        return self._paths

    @property
    def kinds(self) -> list[Kind | None]:
        if self._kinds is None:
            self._kinds = _leaf_kinds(self.root, self.graphdef)
        return self._kinds


def _mask_of(f: Any, at: _Leaves, ask: list[bool]) -> list[bool]:
    """Whether filter ``f`` accepts each leaf of ``at`` where ``ask`` says to ask it (False
    elsewhere, without asking): filters joined by All, AnyOf and Not are asked about the
    leaves the ones before them left open, as ``all`` and ``any`` would, so a filter after
    ``OfType(jax.Array)`` sees arrays only."""
    if isinstance(f, _Filter):
        return f._mask(at, ask)
    return [
        a and bool(f(path, kind, leaf))
        for a, path, kind, leaf in zip(ask, at.paths, at.kinds, at.leaves, strict=True)
    ]


class _Filter:
    __slots__ = ()

    def __call__(self, path: tuple[Any, ...], kind: Kind | None, leaf: Any) -> bool:
        raise NotImplementedError

    def _mask(self, at: _Leaves, ask: list[bool]) -> list[bool]:
        """Whether this filter accepts each leaf of ``at`` where ``ask`` is true (see
        ``_mask_of``); one call per leaf unless a subclass knows better."""
        return [
            a and bool(self(path, kind, leaf))
            for a, path, kind, leaf in zip(ask, at.paths, at.kinds, at.leaves, strict=True)
        ]

    def __repr__(self) -> str:
        args = ", ".join(repr(getattr(self, n)) for n in self.__slots__)
        return f"{type(self).__name__}({args})"


def _as_filter(f: Any) -> Callable[[tuple[Any, ...], Kind | None, Any], bool]:
    if isinstance(f, _Filter):
        return f
    if isinstance(f, Kind):
        return OfKind(f)
    if isinstance(f, bool):
        return lambda path, kind, leaf: f
    if isinstance(f, type):
        return OfType(f)
    if callable(f):
        return f  # type: ignore[no-any-return]
    if isinstance(f, PathPattern):
        return _Matches(f)
    hint = f"; for a path pattern write PathPattern({f!r})" if isinstance(f, str) else ""
    raise TypeError(
        "a module filter is a Kind, a type, a bool, a function of (path, kind, leaf), a "
        "PathPattern or a filter such as OfKind or PathContains, got "
        f"{type(f).__name__}: {f!r}{hint}"
    )


class _Matches(_Filter):
    """Accepts the leaves whose key path matches a :class:`oxtree.PathPattern`; a module's
    leaves are matched all at once by the core (``PathPattern._leaf_mask``)."""

    __slots__ = ("pattern",)

    def __init__(self, pattern: PathPattern) -> None:
        self.pattern = pattern

    def __call__(self, path: tuple[Any, ...], kind: Kind | None, leaf: Any) -> bool:
        return self.pattern.match(path)

    def _mask(self, at: _Leaves, ask: list[bool]) -> list[bool]:
        matched = self.pattern._leaf_mask(at.graphdef)
        return [a and m for a, m in zip(ask, matched, strict=True)]

    def __repr__(self) -> str:
        return repr(self.pattern)


def _all_of(items: tuple[_T, ...], cls: type, message: str) -> tuple[_T, ...]:
    for x in items:
        if not isinstance(x, cls):
            raise TypeError(f"{message}, got {type(x).__name__}: {x!r}")
    return items


class OfKind(_Filter):
    """Accepts the leaves held by attributes of any of ``kinds``.

    >>> OfKind(Kind.STATE)((), Kind.STATE, 0), OfKind(Kind.STATE)((), Kind.PARAMETER, 0)
    (True, False)
    """

    __slots__ = ("kinds",)

    def __init__(self, *kinds: Kind) -> None:
        self.kinds = frozenset(_all_of(kinds, Kind, "OfKind expects Kinds"))

    def __call__(self, path: tuple[Any, ...], kind: Kind | None, leaf: Any) -> bool:
        return kind in self.kinds

    def __repr__(self) -> str:
        return f"OfKind({', '.join(sorted(k.name for k in self.kinds))})"


class OfType(_Filter):
    """Accepts the leaves that are instances of any of ``types``.

    >>> OfType(float)((), None, 1.0), OfType(float)((), None, 1)
    (True, False)
    """

    __slots__ = ("types",)

    def __init__(self, *types: type) -> None:
        self.types = _all_of(types, type, "OfType expects types")

    def __call__(self, path: tuple[Any, ...], kind: Kind | None, leaf: Any) -> bool:
        return isinstance(leaf, self.types)


class PathContains(_Filter):
    """Accepts the leaves whose key path has an entry named ``key`` (an attribute name, a
    dict key or a sequence index).

    >>> from oxtree import GetAttrKey, SequenceKey
    >>> PathContains('enc')((GetAttrKey('enc'), SequenceKey(0)), None, 1.0)
    True
    """

    __slots__ = ("key",)

    def __init__(self, key: Any) -> None:
        self.key = key

    def __call__(self, path: tuple[Any, ...], kind: Kind | None, leaf: Any) -> bool:
        key = self.key
        for entry in path:
            value = getattr(entry, "name", getattr(entry, "key", getattr(entry, "idx", entry)))
            if type(value) is type(key) and value == key:
                return True
        return False


class _Combined(_Filter):
    """Filters joined by ``_join`` (``all`` or ``any``)."""

    __slots__ = ("filters",)
    _join: Callable[[Iterator[bool]], bool]

    def __init__(self, *filters: Any) -> None:
        self.filters = tuple(map(_as_filter, filters))

    def __call__(self, path: tuple[Any, ...], kind: Kind | None, leaf: Any) -> bool:
        return type(self)._join(f(path, kind, leaf) for f in self.filters)

    def _mask(self, at: _Leaves, ask: list[bool]) -> list[bool]:
        if type(self)._join is all:  # each filter asked where all before it accepted
            for f in self.filters:
                ask = _mask_of(f, at, ask)
            return ask
        accepted = [False] * len(ask)  # any: each filter asked where none before accepted
        for f in self.filters:
            hit = _mask_of(f, at, ask)
            accepted = [a or h for a, h in zip(accepted, hit, strict=True)]
            ask = [a and not h for a, h in zip(ask, hit, strict=True)]
        return accepted


class All(_Combined):
    """Accepts the leaves every one of ``filters`` accepts (all leaves when none is given).

    >>> All(Kind.PARAMETER, float)((), Kind.PARAMETER, 1.0)
    True
    """

    __slots__ = ()
    _join = all


class AnyOf(_Combined):
    """Accepts the leaves at least one of ``filters`` accepts.

    >>> AnyOf(Kind.PARAMETER, Kind.STATE)((), Kind.STATE, 0)
    True
    """

    __slots__ = ()
    _join = any


class Not(_Filter):
    """Accepts the leaves ``filter`` rejects.

    >>> Not(Kind.PARAMETER)((), Kind.STATE, 0)
    True
    """

    __slots__ = ("filter",)

    def __init__(self, filter: Any) -> None:
        self.filter = _as_filter(filter)

    def __call__(self, path: tuple[Any, ...], kind: Kind | None, leaf: Any) -> bool:
        return not self.filter(path, kind, leaf)

    def _mask(self, at: _Leaves, ask: list[bool]) -> list[bool]:
        inner = _mask_of(self.filter, at, ask)
        return [a and not m for a, m in zip(ask, inner, strict=True)]
