"""``jax.jit``'s options for :func:`oxtree.jax.filter_jit`: shardings, donation, static
arguments, placement.

filter_jit compiles a function of the arguments' array leaves (one positional argument per
array), once per input structure. :class:`JitOptions` holds what the user passed, by JAX's
names and meanings, and turns it, for one structure, into what that compiled function takes:
which arrays are donated (``donate_argnums`` over the arrays), the sharding of each array
(``in_shardings`` over the arrays), and the constraints the traced function puts on its array
results (``out_shardings``, and each changed argument's own ``in_shardings`` so that
write-back keeps the layout). Static arguments (``static_argnums`` / ``static_argnames``) are
taken out of the call and passed whole as one static leaf, :class:`StaticArgs`.

:class:`PrefixShardings` reads a shardings tree (a prefix of the tree it lays out) by key
path: ``in_shardings`` and ``out_shardings`` here, ``shardings`` in
:func:`oxtree.sharding.filter_shard`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import jax
from jax.sharding import AxisType, NamedSharding, PartitionSpec

from oxtree._core import DictKey, SequenceKey, keystr
from oxtree.graph import _graph_flatten_jax as graph_flatten

__all__ = ["JitOptions", "PrefixShardings", "StaticArgs", "constrain"]

_DONATE = ("none", "all", "all-except-first")


def is_sharding(x: Any) -> bool:
    """Whether ``x`` stands for one leaf's layout in a shardings tree: a
    ``jax.sharding.Sharding``, a ``PartitionSpec`` or None (unspecified)."""
    return x is None or isinstance(x, jax.sharding.Sharding | PartitionSpec)


class PrefixShardings:
    """A shardings tree (a prefix of a tree: one sharding for a whole subtree) read by key
    path: :meth:`at` gives the sharding of the leaf at a path, that of the longest prefix of
    it the shardings tree holds. ``what`` names the tree in errors (``in_shardings``)."""

    __slots__ = ("by_path", "used", "what")

    def __init__(self, shardings: Any, what: str) -> None:
        leaves, graphdef = graph_flatten(shardings, is_leaf=is_sharding, none_is_leaf=True)
        paths = graphdef.paths()
        for path, leaf in zip(paths, leaves, strict=True):
            if not is_sharding(leaf):
                raise TypeError(
                    f"{what}{keystr(path)}: a shardings tree holds jax.sharding.Sharding, "
                    f"PartitionSpec or None leaves, got {type(leaf).__name__}: {leaf!r}"
                )
        self.by_path = dict(zip(paths, leaves, strict=True))
        self.used: set[tuple[Any, ...]] = set()
        self.what = what

    def at(self, path: tuple[Any, ...], where: Callable[[], str]) -> Any:
        """The sharding for the leaf at ``path``; a ValueError naming ``where()`` when the
        shardings tree is no prefix there."""
        by_path = self.by_path
        for n in range(len(path), -1, -1):
            prefix = path[:n]
            if prefix in by_path:
                self.used.add(prefix)
                return by_path[prefix]
        raise ValueError(
            f"{self.what} is no prefix of the tree it lays out: it has no entry for "
            f"{where()} (its entries: {', '.join(self.what + keystr(p) for p in by_path) or 'none'})"
        )

    def check_all_used(self, where: str) -> None:
        """Raises a ValueError for the entries that matched no leaf of ``where``."""
        unused = [p for p in self.by_path if p not in self.used]
        # An entry for an empty subtree (an empty list, a None) matches no leaf legitimately;
        # one whose path goes past a leaf does not.
        stray = [p for p in unused if any(p[: len(u)] == u and p != u for u in self.used)]
        if stray:
            raise ValueError(
                f"{self.what} is no prefix of {where}: {self.what}{keystr(stray[0])} lies "
                "below a leaf there"
            )


def _explicit(sharding: Any) -> bool:
    """Whether ``sharding`` lays an array out over Explicit mesh axes (then
    ``jax.sharding.reshard`` places it; ``with_sharding_constraint`` takes Auto axes only)."""
    if isinstance(sharding, NamedSharding):
        mesh, spec = sharding.mesh, sharding.spec
    elif isinstance(sharding, PartitionSpec):
        mesh, spec = jax.sharding.get_abstract_mesh(), sharding
    else:
        return False
    types = dict(zip(mesh.axis_names, getattr(mesh, "axis_types", ()), strict=False))
    for entry in spec:
        for name in (entry,) if isinstance(entry, str) else (entry or ()):
            if types.get(name) == AxisType.Explicit:
                return True
    return False


def constrain(x: Any, sharding: Any) -> Any:
    """``x`` (traced) laid out by ``sharding``: ``jax.sharding.reshard`` over Explicit mesh
    axes, ``jax.lax.with_sharding_constraint`` otherwise."""
    if _explicit(sharding):
        return jax.sharding.reshard(x, sharding)
    return jax.lax.with_sharding_constraint(x, sharding)


def _argnums(value: Any, name: str) -> frozenset[int]:
    if value is None:
        return frozenset()
    items = (value,) if isinstance(value, int) else value
    try:
        nums = tuple(items)
    except TypeError:
        raise TypeError(
            f"filter_jit: {name} must be an int or a sequence of ints, got {value!r}"
        ) from None
    if not all(type(i) is int for i in nums):
        raise TypeError(f"filter_jit: {name} must be an int or a sequence of ints, got {value!r}")
    return frozenset(nums)


def _argnames(value: Any, name: str) -> frozenset[str]:
    if value is None:
        return frozenset()
    items: Iterable[Any] = (value,) if isinstance(value, str) else value
    try:
        names = tuple(items)
    except TypeError:
        raise TypeError(
            f"filter_jit: {name} must be a str or a sequence of str, got {value!r}"
        ) from None
    if not all(isinstance(n, str) for n in names):
        raise TypeError(f"filter_jit: {name} must be a str or a sequence of str, got {value!r}")
    return frozenset(names)


def _parameters(fn: Callable[..., Any]) -> list[inspect.Parameter] | None:
    """``fn``'s positional-or-keyword parameters, in order (None when it has no signature)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    return [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def _resolved(
    fn: Callable[..., Any], nums: frozenset[int], names: frozenset[str], what: str
) -> tuple[frozenset[int], frozenset[str]]:
    """``nums`` and ``names`` completed from each other through ``fn``'s signature, as
    ``jax.jit`` completes ``static_argnums`` / ``static_argnames`` (and ``donate_*``)."""
    params = _parameters(fn)
    if params is None:
        return nums, names
    if any(i < 0 for i in nums):
        nums = frozenset(i + len(params) if i < 0 else i for i in nums)
    by_name = {p.name: i for i, p in enumerate(params)}
    more_names = {
        params[i].name
        for i in nums
        if i < len(params) and params[i].kind != params[i].POSITIONAL_ONLY
    }
    more_nums = {by_name[n] for n in names if n in by_name}
    if any(i < 0 for i in nums):
        raise ValueError(
            f"filter_jit: {what}_argnums {sorted(nums)} reach before {fn!r}'s first parameter"
        )
    return nums | more_nums, names | more_names


class StaticArgs:
    """The static arguments of one call (``static_argnums`` / ``static_argnames``), as one
    static leaf: hashed and compared by value, so equal static arguments share a compiled
    function, as in ``jax.jit``."""

    __slots__ = ("_hash", "named", "positional")

    def __init__(
        self, positional: tuple[tuple[int, Any], ...], named: tuple[tuple[str, Any], ...]
    ) -> None:
        self.positional = positional
        self.named = named
        try:
            self._hash = hash((positional, named))
        except TypeError:
            for where, value in [(f"args[{i}]", v) for i, v in positional] + [
                (f"kwargs[{k!r}]", v) for k, v in named
            ]:
                try:
                    hash(value)
                except TypeError:
                    raise TypeError(
                        f"filter_jit: the static argument {where} (static_argnums / "
                        f"static_argnames) is an unhashable {type(value).__name__}; static "
                        "arguments are part of the compilation cache key, so they must be "
                        "hashable"
                    ) from None
            raise

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, StaticArgs)
            and self.positional == other.positional
            and self.named == other.named
        )

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return f"StaticArgs({self.positional!r}, {self.named!r})"


class JitOptions:
    """What :func:`oxtree.jax.filter_jit` passes on to ``jax.jit``, checked once."""

    __slots__ = (
        "backend",
        "compiler_options",
        "device",
        "donate",
        "donate_argnames",
        "donate_argnums",
        "in_shardings",
        "keep_unused",
        "out_shardings",
        "raw",
        "static_argnames",
        "static_argnums",
    )

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        donate: str = "none",
        in_shardings: Any = None,
        out_shardings: Any = None,
        static_argnums: Any = None,
        static_argnames: Any = None,
        donate_argnums: Any = None,
        donate_argnames: Any = None,
        keep_unused: bool = False,
        device: Any = None,
        backend: str | None = None,
        compiler_options: dict[str, Any] | None = None,
    ) -> None:
        self.raw = {
            "donate": donate,
            "in_shardings": in_shardings,
            "out_shardings": out_shardings,
            "static_argnums": static_argnums,
            "static_argnames": static_argnames,
            "donate_argnums": donate_argnums,
            "donate_argnames": donate_argnames,
            "keep_unused": keep_unused,
            "device": device,
            "backend": backend,
            "compiler_options": compiler_options,
        }
        if donate not in _DONATE:
            raise ValueError(f"filter_jit: donate must be one of {_DONATE}, got {donate!r}")
        self.donate = donate
        self.static_argnums, self.static_argnames = _resolved(
            fn,
            _argnums(static_argnums, "static_argnums"),
            _argnames(static_argnames, "static_argnames"),
            "static",
        )
        self.donate_argnums, self.donate_argnames = _resolved(
            fn,
            _argnums(donate_argnums, "donate_argnums"),
            _argnames(donate_argnames, "donate_argnames"),
            "donate",
        )
        if donate != "none" and (self.donate_argnums or self.donate_argnames):
            raise ValueError(
                "filter_jit: give donate ('all', 'all-except-first') or donate_argnums / "
                "donate_argnames, not both"
            )
        both = (
            self.static_argnums & self.donate_argnums or self.static_argnames & self.donate_argnames
        )
        if both:
            raise ValueError(
                f"filter_jit: the arguments {sorted(both)} are both static and donated; a static "
                "argument has no buffers to donate"
            )
        self.in_shardings = (
            None if in_shardings is None else PrefixShardings(in_shardings, "in_shardings")
        )
        self.out_shardings = (
            None if out_shardings is None else PrefixShardings(out_shardings, "out_shardings")
        )
        if not isinstance(keep_unused, bool):
            raise TypeError(f"filter_jit: keep_unused must be a bool, got {keep_unused!r}")
        self.keep_unused = keep_unused
        self.device = device
        self.backend = backend
        self.compiler_options = compiler_options

    @property
    def has_statics(self) -> bool:
        """Whether calls carry static arguments (then the first root is a StaticArgs)."""
        return bool(self.static_argnums or self.static_argnames)

    def jit_kwargs(self) -> dict[str, Any]:
        """The options ``jax.jit`` takes as they are."""
        kwargs: dict[str, Any] = {"keep_unused": self.keep_unused}
        if self.device is not None:
            kwargs["device"] = self.device
        if self.backend is not None:
            kwargs["backend"] = self.backend
        if self.compiler_options is not None:
            kwargs["compiler_options"] = self.compiler_options
        return kwargs

    # -- static arguments -------------------------------------------------------------------

    def split_statics(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """A call's arguments with the static ones taken out into a leading StaticArgs."""
        nums, names = self.static_argnums, self.static_argnames
        positional = tuple((i, a) for i, a in enumerate(args) if i in nums)
        named = tuple((k, v) for k, v in kwargs.items() if k in names)
        dynamic = tuple(a for i, a in enumerate(args) if i not in nums)
        rest = {k: v for k, v in kwargs.items() if k not in names} if named else kwargs
        return (StaticArgs(positional, named), *dynamic), rest

    @staticmethod
    def join_statics(
        fn: Callable[..., Any],
    ) -> Callable[..., Any]:
        """``fn`` taking a leading StaticArgs and the dynamic arguments, called with the
        arguments put back in their places."""

        def call(statics: StaticArgs, *dynamic: Any, **kwargs: Any) -> Any:
            args = list(dynamic)
            for i, value in statics.positional:
                args.insert(i, value)
            return fn(*args, **kwargs, **dict(statics.named))

        return call

    def user_index(self, dynamic: int) -> int:
        """The position in the user's call of the ``dynamic``-th positional argument that is
        not static."""
        if not self.static_argnums:
            return dynamic
        i = -1
        for _ in range(dynamic + 1):
            i += 1
            while i in self.static_argnums:
                i += 1
        return i

    # -- one input structure -------------------------------------------------------------------

    def _donated(self, path: tuple[Any, ...]) -> bool:
        """Whether the leaf at ``path`` (a path of ``(args, kwargs)``, the dynamic arguments'
        tuple first) belongs to a donated argument."""
        if self.donate == "all":
            return True
        if path[0] == SequenceKey(0):
            user = self.user_index(path[1].idx - self.has_statics)
            if self.donate == "all-except-first":
                return user != 0
            return user in self.donate_argnums
        if self.donate == "all-except-first":
            return True
        name = path[1].key if len(path) > 1 and type(path[1]) is DictKey else None
        return name in self.donate_argnames

    def in_sharding_at(self, path: tuple[Any, ...], where: Callable[[], str]) -> Any:
        """The ``in_shardings`` entry for the leaf at ``path`` (a path of ``(args, kwargs)``);
        None (unspecified) for keyword arguments when ``in_shardings`` is a tuple, which,
        as in ``jax.jit``, has one entry per positional argument that is not static."""
        prefix = self.in_shardings
        if prefix is None:
            return None
        if () in prefix.by_path:  # one sharding for every array
            return prefix.at((), where)
        if path[0] != SequenceKey(0):
            return None
        dynamic = SequenceKey(path[1].idx - self.has_statics)
        return prefix.at((dynamic, *path[2:]), where)

    def plan(
        self,
        arrays: Sequence[int],
        paths: Sequence[tuple[Any, ...]],
        where: Callable[[tuple[Any, ...]], str],
        nargs: int,
    ) -> tuple[tuple[int, ...], tuple[Any, ...] | None]:
        """For one input structure whose array leaves are ``arrays`` (leaf indices; ``paths``
        their paths in ``(args, kwargs)`` form, ``where`` words one): the positions among the
        arrays to donate, and each array's sharding (None when ``in_shardings`` is not
        given)."""
        donated = tuple(
            j
            for j, i in enumerate(arrays)
            if self.donate != "none" or self.donate_argnums or self.donate_argnames
            if self._donated(paths[i])
        )
        if self.in_shardings is None:
            return donated, None
        count = nargs - self.has_statics
        tuple_like = () not in self.in_shardings.by_path
        if tuple_like:
            top = {p[0] for p in self.in_shardings.by_path if p}
            if top != {SequenceKey(k) for k in range(count)}:
                raise ValueError(
                    f"filter_jit: in_shardings must be a sharding for every argument or a tuple "
                    f"with one entry per positional argument that is not static ({count} in "
                    f"this call), got {len(top)} entries"
                )
        shardings = tuple(
            self.in_sharding_at(paths[i], lambda i=i: where(paths[i]))  # type: ignore[misc]
            for i in arrays
        )
        return donated, shardings

    def constrain_out(self, leaves: list[Any], paths: Sequence[tuple[Any, ...]]) -> list[Any]:
        """The result's leaves (traced) with ``out_shardings`` applied to its arrays."""
        prefix = self.out_shardings
        if prefix is None:
            return leaves
        out = list(leaves)
        for k, (leaf, path) in enumerate(zip(leaves, paths, strict=True)):
            sharding = prefix.at(path, lambda path=path: f"the result{keystr(path)}")  # type: ignore[misc]
            if sharding is not None and isinstance(leaf, jax.core.Tracer):
                out[k] = constrain(leaf, sharding)
        prefix.check_all_used("the result")
        return out

    def constrain_changed(
        self,
        changed: list[Any],
        paths: Sequence[tuple[Any, ...]],
        where: Callable[[tuple[Any, ...]], str],
    ) -> list[Any]:
        """The arrays a function wrote into its arguments (at ``paths``, in ``(args, kwargs)``
        form) laid out by those arguments' ``in_shardings``: write-back keeps the layout."""
        if self.in_shardings is None:
            return changed
        return [
            value
            if (s := self.in_sharding_at(path, lambda path=path: where(path))) is None  # type: ignore[misc]
            else constrain(value, s)
            for value, path in zip(changed, paths, strict=True)
        ]
