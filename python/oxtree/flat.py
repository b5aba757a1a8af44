"""Flat trees: flatten once, work on the leaves, rebuild or write back when needed.

A training loop that maps over a model's parameters flattens the model on every
``jax.tree.map`` (optax's ``update`` and ``apply_updates`` call several). A
:class:`FlatTree` is the model flattened once: a treedef (or, for objects with shared
references, a graphdef) and a tuple of leaves. Its operations run over that tuple only, never
walking the model again; :meth:`FlatTree.unflatten` rebuilds the objects when they are
needed, and :meth:`FlatTree.write_back` puts the leaves back into the live objects.

>>> flat = FlatTree.flatten({'w': 1.0, 'b': [2.0, 3.0]})
>>> flat
FlatTree(PyTreeSpec({'b': [*, *], 'w': *}), leaves=(2.0, 3.0, 1.0))
>>> flat.map(lambda x: x * 10).unflatten()
{'w': 10.0, 'b': [20.0, 30.0]}
>>> target = {'w': 1.0, 'b': [2.0, 3.0]}
>>> flat.map(lambda x: -x).write_back(target)
>>> target
{'w': -1.0, 'b': [-2.0, -3.0]}

A flat tree is a pytree to oxtree and to JAX (registered with JAX once JAX is imported): one
node whose children are its leaves, and whose aux data, the structure, is shared by every flat
tree mapped from it, so ``jax.jit``, ``jax.grad`` and optax take it as it is, and a structure
check between two such flat trees is one identity test.
"""

from __future__ import annotations

import functools
import itertools
import operator
import sys

from oxtree import _core, _jax_hook
from oxtree._core import GraphDef, PyTreeSpec, graph_flatten, graph_unflatten, keystr

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing at run time
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Sequence
    from typing import Any

__all__ = ["FlatTree"]

_MISSING: Any = object()


class _FlatDef:
    """A flat tree's structure: the whole tree's treedef (a ``PyTreeSpec``, or a ``GraphDef``
    for a graph), the positions among its leaves of those the flat tree holds (``select``;
    None for all of them), how to flatten a target as the treedef was made (``flatten``) and
    rebuild it (``rebuild``). It is JAX's aux data for a flat tree, shared by every flat tree
    mapped from one, so JAX's structure checks (``==`` on aux data, after an identity test)
    and :class:`FlatTree`'s own cost one identity test between them."""

    __slots__ = ("_hash", "_paths", "flatten", "rebuild", "select", "treedef", "whole")

    def __init__(
        self,
        treedef: PyTreeSpec | GraphDef,
        select: tuple[int, ...] | None,
        flatten: Callable[..., tuple[list[Any], Any]],
        whole: _FlatDef | None = None,
    ) -> None:
        self.treedef = treedef
        self.select = select
        self.flatten = flatten
        self.rebuild: Callable[[Sequence[Any]], Any] = (
            functools.partial(graph_unflatten, treedef)
            if type(treedef) is GraphDef
            else treedef.unflatten  # type: ignore[union-attr]
        )
        # The structure holding every leaf of the treedef: what merging parts gives back.
        self.whole: _FlatDef = self if select is None or whole is None else whole
        self._hash = hash((treedef, select))
        self._paths: list[tuple[Any, ...]] | None = None

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if type(other) is not _FlatDef:
            return NotImplemented
        return (self.treedef is other.treedef or self.treedef == other.treedef) and (
            self.select is other.select or self.select == other.select
        )

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        if self.select is None:
            return repr(self.treedef)
        return f"{self.treedef!r}, selected={self.select!r}"

    @property
    def num_leaves(self) -> int:
        return self.treedef.num_leaves if self.select is None else len(self.select)

    def paths(self) -> list[tuple[Any, ...]]:
        """The key paths of the treedef's leaves (all of them), made once."""
        if self._paths is None:
            treedef = self.treedef
            self._paths = treedef.paths() if type(treedef) is GraphDef else treedef.key_paths()  # type: ignore[union-attr]
        return self._paths

    def where(self, i: int) -> str:
        """Where leaf ``i`` of the whole treedef lies, as ``keystr`` prints its path."""
        return keystr(self.paths()[i]) or "the root"


_new = object.__new__


def _make(flatdef: _FlatDef, leaves: tuple[Any, ...]) -> FlatTree:
    flat: FlatTree = _new(FlatTree)
    flat._def = flatdef
    flat._leaves = leaves
    return flat


def _rebuild(flatdef: _FlatDef, leaves: Iterable[Any]) -> FlatTree:
    """A flat tree from JAX's or oxtree's unflatten: its structure and its new leaves."""
    return _make(flatdef, tuple(leaves))


def _is_bool(x: Any) -> bool:
    if type(x) is bool:
        return True
    numpy = sys.modules.get("numpy")
    return numpy is not None and isinstance(x, numpy.bool_)


def _tree_flattener(
    is_leaf: Callable[[Any], bool] | None,
    none_is_leaf: bool,
    namespace: str,
    jax_registry: bool | None,
) -> Callable[..., tuple[list[Any], Any]]:
    if jax_registry is None:
        return functools.partial(
            _core.tree_flatten, is_leaf=is_leaf, none_is_leaf=none_is_leaf, namespace=namespace
        )
    return functools.partial(
        _core._tree_flatten_jax_registry,
        is_leaf=is_leaf,
        none_is_leaf=none_is_leaf,
        namespace=namespace,
        jax_registry=jax_registry,
    )


class FlatTree:
    """A tree (or a graph of objects) flattened once: its treedef and a tuple of its leaves.

    Make one with :meth:`flatten` (a tree, as :func:`oxtree.tree_flatten` sees it) or
    :meth:`from_graph` (objects with shared or cyclic references, as
    :func:`oxtree.graph_flatten` sees them: a submodule reached twice gives its leaves once).
    :meth:`map`, :meth:`zip`, :meth:`unzip`, :meth:`reduce`, :meth:`filter` and
    :meth:`merge` work over the leaves without walking the tree again and keep the structure
    object, so flat trees mapped from one another compare in O(1). :meth:`unflatten`
    rebuilds the objects; :meth:`write_back` writes the leaves into the live objects, in place.

    A flat tree may hold a subset of its treedef's leaves (:meth:`filter`): :attr:`indices`
    says which, :meth:`merge` puts them back among the others, and :meth:`unflatten` fills
    the rest with None.

    To oxtree and to JAX a flat tree is one node whose children are :attr:`leaves` and whose
    aux data is its structure: ``jax.jit``, ``jax.grad``, ``jax.tree.map`` and optax's
    ``update`` and ``apply_updates`` take and give flat trees.

    >>> flat = FlatTree.flatten([1, (2, 3)])
    >>> flat.leaves, flat.treedef
    ((1, 2, 3), PyTreeSpec([*, (*, *)]))
    >>> flat.map(lambda x, y: x + y, flat).unflatten()
    [2, (4, 6)]
    """

    __slots__ = ("_def", "_leaves")

    _def: _FlatDef
    _leaves: tuple[Any, ...]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError(
            "FlatTree is made by FlatTree.flatten(tree) or FlatTree.from_graph(*roots), and "
            "from another flat tree by its methods (map, with_leaves, ...)"
        )

    # -- constructors -----------------------------------------------------------------------

    @classmethod
    def flatten(
        cls,
        tree: Any,
        /,
        is_leaf: Callable[[Any], bool] | None = None,
        *,
        none_is_leaf: bool = False,
        namespace: str = "",
        jax_registry: bool | None = None,
    ) -> FlatTree:
        """``tree`` flattened once, as :func:`oxtree.tree_flatten` flattens it (the same
        options; ``jax_registry=True`` also reads JAX's registry, as ``oxtree.jax`` does, so
        equinox modules and flax structs are nodes).

        An object reached twice is flattened twice, as in every tree function; for objects
        with shared references that :meth:`write_back` must keep shared, use
        :meth:`from_graph`.

        >>> FlatTree.flatten({'a': 1, 'b': None}, none_is_leaf=True).leaves
        (1, None)
        """
        flatten = _tree_flattener(is_leaf, none_is_leaf, namespace, jax_registry)
        leaves, treedef = flatten(tree)
        return _make(_FlatDef(treedef, None, flatten), tuple(leaves))

    @classmethod
    def from_graph(
        cls,
        *roots: Any,
        is_leaf: Callable[[Any], bool] | None = None,
        none_is_leaf: bool = False,
        namespace: str = "",
        jax_registry: bool | None = None,
    ) -> FlatTree:
        """``roots`` flattened once as a graph, as :func:`oxtree.graph_flatten` flattens them
        (the same options): an object reached twice, through any root, gives its leaves
        once, and cycles are allowed. Its :attr:`treedef` is a ``GraphDef``.

        >>> shared = [1.0, 2.0]
        >>> flat = FlatTree.from_graph({'enc': shared, 'dec': shared})
        >>> flat.leaves
        (1.0, 2.0)
        >>> out = flat.map(lambda x: x * 2).unflatten()
        >>> out, out['enc'] is out['dec']
        ({'enc': [2.0, 4.0], 'dec': [2.0, 4.0]}, True)
        """
        flatten = functools.partial(
            graph_flatten,
            is_leaf=is_leaf,
            none_is_leaf=none_is_leaf,
            namespace=namespace,
            jax_registry=jax_registry,
        )
        leaves, graphdef = flatten(*roots)
        return _make(_FlatDef(graphdef, None, flatten), tuple(leaves))

    # -- what it holds ----------------------------------------------------------------------

    @property
    def leaves(self) -> tuple[Any, ...]:
        """The leaves, left to right (only the selected ones after :meth:`filter`)."""
        return self._leaves

    @property
    def treedef(self) -> PyTreeSpec | GraphDef:
        """The treedef of the whole tree (a ``GraphDef`` for :meth:`from_graph`), filtered
        out leaves included.

        >>> FlatTree.flatten((1, 2)).filter([True, False]).treedef
        PyTreeSpec((*, *))
        """
        return self._def.treedef

    @property
    def indices(self) -> tuple[int, ...] | None:
        """The positions, among the treedef's leaves, of the leaves this flat tree holds:
        None when it holds them all (see :meth:`filter`).

        >>> flat = FlatTree.flatten(['a', 'b', 'c'])
        >>> flat.indices, flat.filter(lambda x: x != 'b').indices
        (None, (0, 2))
        """
        return self._def.select

    def paths(self) -> list[tuple[Any, ...]]:
        """The key path of each leaf (JAX's key classes), as ``oxtree.keystr`` prints them.

        >>> [keystr(p) for p in FlatTree.flatten({'a': [1, 2]}).paths()]
        ["['a'][0]", "['a'][1]"]
        """
        paths = self._def.paths()
        select = self._def.select
        return list(paths) if select is None else [paths[i] for i in select]

    def __len__(self) -> int:
        return len(self._leaves)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._leaves)

    def __repr__(self) -> str:
        return f"FlatTree({self._def!r}, leaves={self._leaves!r})"

    def unflatten(self) -> Any:
        """The objects rebuilt from the leaves (with None in place of the leaves a
        :meth:`filter` left out); a graph's shared objects are shared again. With several
        roots, a tuple of them.

        >>> FlatTree.flatten({'a': 1, 'b': 2}).filter([False, True]).unflatten()
        {'a': None, 'b': 2}
        """
        flatdef = self._def
        if flatdef.select is None:
            return flatdef.rebuild(self._leaves)
        return flatdef.rebuild(self._into([None] * flatdef.treedef.num_leaves))

    def _into(self, full: list[Any]) -> list[Any]:
        """``full``, one value per leaf of the treedef, with this flat tree's leaves put in
        their places (all of them, in a new list, when it holds them all)."""
        select = self._def.select
        if select is None:
            return list(self._leaves)
        for i, leaf in zip(select, self._leaves, strict=True):
            full[i] = leaf
        return full

    # -- over the leaves --------------------------------------------------------------------

    def with_leaves(self, leaves: Iterable[Any]) -> FlatTree:
        """A flat tree of the same structure holding ``leaves``.

        >>> FlatTree.flatten({'a': 1, 'b': 2}).with_leaves([10, 20]).unflatten()
        {'a': 10, 'b': 20}
        """
        leaves = tuple(leaves)
        if len(leaves) != len(self._leaves):
            raise ValueError(
                f"FlatTree.with_leaves: the flat tree has {len(self._leaves)} leaves, got "
                f"{len(leaves)}"
            )
        return _make(self._def, leaves)

    def map(self, f: Callable[..., Any], /, *rest: FlatTree) -> FlatTree:
        """``f`` applied to each leaf (with the leaves of ``rest`` at the same place as
        further arguments), in a flat tree of the same structure. ``rest`` holds flat trees of
        this one's structure; when they share its structure object (as flat trees mapped from
        one another do), checking that costs one identity test each.

        >>> a = FlatTree.flatten({'x': 1, 'y': 2})
        >>> a.map(lambda p, g: p - 0.5 * g, a.map(lambda x: x * 2)).unflatten()
        {'x': 0.0, 'y': 0.0}
        """
        if not callable(f):
            raise TypeError(f"FlatTree.map expects a callable, got {type(f).__name__}")
        if not rest:
            return _make(self._def, tuple(map(f, self._leaves)))
        self._check_same(rest, "map")
        return _make(self._def, tuple(map(f, self._leaves, *[r._leaves for r in rest])))

    def zip(self, *rest: FlatTree) -> FlatTree:
        """A flat tree of the same structure whose leaves are tuples: this flat tree's leaf
        and those of ``rest`` at the same place (flat trees of this one's structure).
        :meth:`unzip` undoes it.

        >>> a = FlatTree.flatten([1, 2])
        >>> a.zip(a.map(str)).leaves
        ((1, '1'), (2, '2'))
        """
        self._check_same(rest, "zip")
        return _make(self._def, tuple(zip(self._leaves, *[r._leaves for r in rest], strict=True)))

    def unzip(self, n: int | None = None) -> tuple[FlatTree, ...]:
        """For a flat tree whose leaves are tuples of ``n`` items (as a :meth:`map` whose
        function returns tuples gives), ``n`` flat trees of its structure: the first items,
        the second items, ... ``n`` defaults to the length of the first leaf; pass it for a
        flat tree without leaves.

        >>> params = FlatTree.flatten({'a': 1.0, 'b': 2.0})
        >>> moved, halves = params.map(lambda p: (p - 1, p / 2)).unzip()
        >>> moved.unflatten(), halves.unflatten()
        ({'a': 0.0, 'b': 1.0}, {'a': 0.5, 'b': 1.0})
        """
        leaves = self._leaves
        if n is None:
            if not leaves:
                raise ValueError(
                    "FlatTree.unzip: the flat tree has no leaves to take the tuples' length "
                    "from; pass n"
                )
            n = len(leaves[0]) if isinstance(leaves[0], tuple) else -1
        elif type(n) is not int or n < 0:
            raise TypeError(f"FlatTree.unzip: n must be an int >= 0, got {n!r}")
        if any(not issubclass(ty, tuple) for ty in set(map(type, leaves))):
            self._raise_not_tuples(n)
        try:
            columns = tuple(zip(*leaves, strict=True)) if leaves else ((),) * n
        except ValueError:  # tuples of several lengths
            columns = ()
        if len(columns) != n:
            self._raise_not_tuples(n)
        flatdef = self._def
        return tuple(_make(flatdef, column) for column in columns)

    def _raise_not_tuples(self, n: int) -> None:
        for i, leaf in enumerate(self._leaves):
            if not isinstance(leaf, tuple):
                raise TypeError(
                    f"FlatTree.unzip: every leaf must be a tuple, but the leaf at "
                    f"{self._where(i)} is a {type(leaf).__name__}: {leaf!r}"
                )
            if len(leaf) != n:
                raise ValueError(
                    f"FlatTree.unzip: every leaf must be a tuple of {n} items, but the leaf "
                    f"at {self._where(i)} has {len(leaf)}: {leaf!r}"
                )

    def reduce(self, f: Callable[[Any, Any], Any], /, initial: Any = _MISSING) -> Any:
        """The leaves folded left to right by ``f``, from ``initial`` when given, as
        ``functools.reduce`` folds them.

        >>> FlatTree.flatten({'a': 1, 'b': [2, 3]}).reduce(operator.add, 10)
        16
        """
        if not callable(f):
            raise TypeError(f"FlatTree.reduce expects a callable, got {type(f).__name__}")
        if initial is _MISSING:
            if not self._leaves:
                raise TypeError("FlatTree.reduce: the flat tree has no leaves and no initial value")
            return functools.reduce(f, self._leaves)
        return functools.reduce(f, self._leaves, initial)

    # -- selecting leaves -------------------------------------------------------------------

    def filter(self, mask: Any, /) -> FlatTree:
        """The flat tree of the leaves ``mask`` selects: ``mask`` is a function of a leaf
        returning a bool, a sequence of bools (one per leaf) or a flat tree of bools of this
        one's structure. The result keeps the treedef; :attr:`indices` says which leaves it
        holds, and :meth:`merge` puts them back among the others.

        >>> flat = FlatTree.flatten({'w': 0.5, 'step': 3})
        >>> params = flat.filter(lambda x: isinstance(x, float))
        >>> params.leaves, params.indices
        ((0.5,), (1,))
        >>> flat.merge(params.map(lambda p: p * 2)).unflatten()
        {'w': 1.0, 'step': 3}
        """
        return self._select(self._mask(mask, "filter"), True)

    def partition(self, mask: Any, /) -> tuple[FlatTree, FlatTree]:
        """The flat trees of the leaves ``mask`` selects and of the others (``mask`` as
        :meth:`filter` takes it); ``a.merge(b)`` of the two is this flat tree again.

        >>> kept, rest = FlatTree.flatten([1, 'a', 2]).partition(lambda x: isinstance(x, int))
        >>> kept.leaves, rest.leaves, kept.merge(rest).unflatten()
        ((1, 2), ('a',), [1, 'a', 2])
        """
        keep = self._mask(mask, "partition")
        return self._select(keep, True), self._select(keep, False)

    def _mask(self, mask: Any, name: str) -> list[bool]:
        leaves = self._leaves
        if isinstance(mask, FlatTree):
            self._check_same((mask,), name)
            values: Sequence[Any] = mask._leaves
        elif callable(mask):
            values = [mask(leaf) for leaf in leaves]
        elif isinstance(mask, list | tuple):
            if len(mask) != len(leaves):
                raise ValueError(
                    f"FlatTree.{name}: the mask has {len(mask)} entries, but the flat tree has "
                    f"{len(leaves)} leaves"
                )
            values = mask
        else:
            raise TypeError(
                f"FlatTree.{name} takes a function of a leaf, a sequence of bools or a flat "
                f"tree of bools, got {type(mask).__name__}"
            )
        if not all(map(_is_bool, values)):
            i = next(i for i, v in enumerate(values) if not _is_bool(v))
            raise TypeError(
                f"FlatTree.{name}: the mask must give a bool for every leaf, got "
                f"{type(values[i]).__name__} {values[i]!r} for the leaf at {self._where(i)}"
            )
        return [bool(v) for v in values]

    def _select(self, keep: list[bool], value: bool) -> FlatTree:
        flatdef = self._def
        chosen = keep if value else [not k for k in keep]
        if all(chosen):
            return _make(flatdef, self._leaves)
        positions = range(len(self._leaves)) if flatdef.select is None else flatdef.select
        select = tuple(itertools.compress(positions, chosen))
        sub = _FlatDef(flatdef.treedef, select, flatdef.flatten, flatdef.whole)
        return _make(sub, tuple(itertools.compress(self._leaves, chosen)))

    def merge(self, *parts: FlatTree) -> FlatTree:
        """This flat tree's leaves with those of ``parts`` put in their places: flat trees
        of the same treedef, each holding all its leaves or those a :meth:`filter` selected;
        where several hold a leaf, the last one's wins. The result holds every leaf that any
        of them holds (all of them, when they do: then it has the structure of the unfiltered
        flat tree they come from).

        >>> flat = FlatTree.flatten({'a': 1, 'b': 2, 'c': 3})
        >>> a, rest = flat.partition([True, False, False])
        >>> a.merge(rest.map(lambda x: x * 10)).unflatten()
        {'a': 1, 'b': 20, 'c': 30}
        """
        flatdef = self._def
        treedef = flatdef.treedef
        for k, part in enumerate(parts):
            if not isinstance(part, FlatTree):
                raise TypeError(f"FlatTree.merge expects flat trees, got {type(part).__name__}")
            other = part._def.treedef
            if other is not treedef and other != treedef:
                raise ValueError(
                    f"FlatTree.merge: part {k} has another treedef than the flat tree: {other} "
                    f"!= {treedef}"
                )
        if not parts:
            return self
        full: list[Any] = [None] * treedef.num_leaves
        for flat in (self, *parts):
            full = flat._into(full)
        selects = [flat._def.select for flat in (self, *parts)]
        held = None if None in selects else set().union(*selects)  # type: ignore[arg-type]
        if held is None or len(held) == len(full):
            return _make(flatdef.whole, tuple(full))
        select = tuple(sorted(held))
        if select != flatdef.select:
            flatdef = _FlatDef(treedef, select, flatdef.flatten, flatdef.whole)
        return _make(flatdef, tuple(full[i] for i in select))

    # -- back into the objects --------------------------------------------------------------

    def write_back(self, *targets: Any) -> None:
        """Writes the leaves into ``targets``, the live objects this flat tree was made from
        (or others of the same structure): one target for :meth:`flatten`, the roots for
        :meth:`from_graph`. After a :meth:`filter`, only the selected leaves are written.

        The rules are ``oxtree.jax.filter_jit``'s write-back: Modules, lists, dicts and
        dataclass instances take the new leaves in place and keep their identities (shared
        objects stay shared, for a graph); a changed leaf inside a tuple or an object rebuilt
        from its children is given to its holder as a new object. A change that the targets
        cannot take (a leaf of a tuple at the top) raises ValueError naming the leaf, and
        nothing is written; so does a target of another structure. Nothing is done when no
        leaf changed.

        >>> from oxtree import Module
        >>> class Net(Module):
        ...     def __init__(self):
        ...         self.register_parameter('w', 1.0)
        >>> net = Net()
        >>> flat = FlatTree.from_graph(net)
        >>> flat.map(lambda w: w + 1).write_back(net)
        >>> net.w
        2.0
        """
        flatdef = self._def
        treedef = flatdef.treedef
        graph = type(treedef) is GraphDef
        wanted = treedef.num_roots if graph else 1  # type: ignore[union-attr]
        if len(targets) != wanted:
            made = "graph of" if graph else "tree of"
            raise TypeError(
                f"FlatTree.write_back: the flat tree is the {made} {wanted} root(s), so it "
                f"takes {wanted} target(s), got {len(targets)}"
            )
        now, now_def = flatdef.flatten(*targets)
        if now_def is not treedef and now_def != treedef:
            raise ValueError(
                "FlatTree.write_back: the target's structure is not the flat tree's: "
                f"{self._mismatch(targets, now_def)}"
            )
        new = self._into(list(now))
        if all(map(operator.is_, new, now)):
            return
        from oxtree._write_back import REFUSED, container_leaves, first_difference, write_leaves

        at = write_leaves(
            targets,
            self._roots(flatdef.rebuild(new)),
            new,
            treedef,
            flatdef.flatten,
            opaque=container_leaves(new, now),
        )
        if at is None:
            return
        again, again_def = flatdef.flatten(*self._roots(flatdef.rebuild(new)))
        if again_def != treedef:
            at = min(first_difference(again, new), len(new) - 1)
            raise ValueError(
                f"FlatTree.write_back: the new leaf at {flatdef.where(at)} (a "
                f"{type(new[at]).__name__}) is not a leaf to the flatten that made the flat "
                "tree, so writing it would change the target's structure; write back leaves "
                "that stay leaves (unflatten() gives objects of a new structure)"
            )
        if at < len(new):
            where = f"the leaf at {flatdef.where(at)}"
        elif graph:
            where = "the targets' structure"
        else:
            raise ValueError(
                "FlatTree.write_back: the target holds an object (a Module, list, dict or "
                "dataclass instance) in several places, each of which the flat tree, made by "
                "FlatTree.flatten, holds a copy of; make it with FlatTree.from_graph to write "
                "back to shared objects"
            )
        raise ValueError(
            f"FlatTree.write_back: {where} changed, and the change cannot be written back to "
            f"the target: {REFUSED}; use unflatten() to get new objects instead"
        )

    def _roots(self, rebuilt: Any) -> tuple[Any, ...]:
        """What :meth:`unflatten` rebuilt, as a tuple of roots."""
        treedef = self._def.treedef
        return rebuilt if type(treedef) is GraphDef and treedef.num_roots != 1 else (rebuilt,)

    def _mismatch(self, targets: tuple[Any, ...], found: Any) -> str:
        """Where ``targets`` part from the flat tree's treedef, in the core's words."""
        treedef = self._def.treedef
        spec = treedef.treespec if type(treedef) is GraphDef else treedef  # type: ignore[union-attr]
        try:
            spec.flatten_up_to(targets[0] if len(targets) == 1 else targets)
        except (ValueError, TypeError) as err:
            return str(err)
        return f"expected {treedef}, got {found}"

    # -- helpers ----------------------------------------------------------------------------

    def _check_same(self, others: Sequence[Any], name: str) -> None:
        flatdef = self._def
        for k, other in enumerate(others):
            if not isinstance(other, FlatTree):
                raise TypeError(
                    f"FlatTree.{name} expects flat trees, got {type(other).__name__} at "
                    f"position {k}"
                )
            theirs = other._def
            if theirs is flatdef or theirs == flatdef:
                continue
            if theirs.treedef is flatdef.treedef or theirs.treedef == flatdef.treedef:
                detail = (
                    f"it holds {theirs.num_leaves} of the treedef's leaves, this one "
                    f"{flatdef.num_leaves} (or others: see .indices)"
                )
            else:
                detail = f"{theirs.treedef} != {flatdef.treedef}"
            raise ValueError(
                f"FlatTree.{name}: flat tree {k} has another structure than this one: {detail}"
            )

    def _where(self, i: int) -> str:
        """Where this flat tree's leaf ``i`` lies, as a key path."""
        select = self._def.select
        return self._def.where(i if select is None else select[i])


_register_args = (FlatTree, operator.attrgetter("_leaves", "_def"), _rebuild)
_core.register_pytree_node(*_register_args)
# JAX sees the same node once JAX is imported (now, if it is; oxtree._jax_hook).
_jax_hook.register_with_jax(FlatTree, "register_pytree_node", _register_args)
