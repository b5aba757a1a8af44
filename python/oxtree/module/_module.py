"""The :class:`Module` base class: its registration with oxtree (the core's Module flatten and
unflatten functions, which it walks natively) and JAX, its functional updates and the kind of
the attribute each leaf lies under."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Self, TypeVar

from oxtree import _jax_hook
from oxtree._arrays import is_array, is_shaped
from oxtree._core import (
    GetAttrKey,
    _module_flatten,
    _module_flatten_with_keys,
    _module_unflatten,
    graph_unflatten,
    keystr,
    register_pytree_node,
    tree_leaves,
    tree_map,
)
from oxtree.module._axes import Axes
from oxtree.module._filters import All, _Leaves
from oxtree.module._jax_view import (
    _graph_children,
    _graph_children_with_keys,
    _graph_rebuild,
    _holds_jax_nodes,
    _keyed_graph,
    _module_graph,
    _nones,
)
from oxtree.module._layout import (
    _EMPTY,
    _MISSING,
    Kind,
    _annotation_kind,
    _checked_axes,
    _Layout,
    _ModuleDef,
    _static_key,
)

_M = TypeVar("_M", bound="Module")

# Registrations waiting for `import jax` to finish (oxtree._jax_hook's list itself): what
# `Module.__new__` checks, at the cost it always had.
_PENDING_JAX = _jax_hook.PENDING

# Per-class declared kinds (from annotations), resolved at the first instantiation so that
# names defined after the class (string annotations) can be found.
_DECLARED = "_oxtree_declared_"


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


_new_object = object.__new__


def _child_at(node: Any, entry: Any) -> Any:
    """The child of ``node`` that the key ``entry`` names (an attribute, a key, an index)."""
    if isinstance(node, Module) and type(entry) is GetAttrKey:
        return node.__dict__[entry.name]
    name = getattr(entry, "name", _MISSING)
    if name is not _MISSING:
        return getattr(node, name)
    return node[getattr(entry, "idx", getattr(entry, "key", _MISSING))]


def _register(cls: type[Module]) -> None:
    # The core walks every class registered with `_module_flatten` itself (its children, aux
    # data and keys read by the fields of the module's `_ModuleDef`), and rebuilds it.
    register_pytree_node(
        cls,
        _module_flatten,
        functools.partial(_module_unflatten, cls),
        flatten_with_keys_func=_module_flatten_with_keys,
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
            if _holds_jax_nodes(value):
                self._register_kind(name, value, Kind.PARAMETER, assigned=True)
                return
            if is_array(value):
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
        kept = test._mask(
            _Leaves(self, gd, leaves, _leaf_kinds), [leaf is not None for leaf in leaves]
        )
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
        from oxtree.module._treescope import render

        return render(self, path, subtree_renderer, _leaf_kinds)


_DEF_SLOT = Module.__dict__["_oxtree_def"]

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


def _check_like(m: Module, what: str, gd: Any, old: list[Any], new: list[Any]) -> None:
    """Raises a ValueError naming every array leaf of ``new`` whose shape or dtype differs
    from the one it replaces in ``old``."""
    bad = []
    for i, (a, b) in enumerate(zip(old, new, strict=True)):
        if a is b or not (is_shaped(a) and is_shaped(b)):
            continue
        if tuple(a.shape) != tuple(b.shape) or a.dtype != b.dtype:
            bad.append(i)
    if not bad:
        return
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
