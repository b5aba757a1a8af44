"""Random-number streams for Modules: :class:`Rngs`, a Module holding named key streams.

Each stream (an :class:`RngStream`) holds a PRNG key and a call counter, both leaves of the
kind :data:`RNG` (``Kind('rng')``). Calling a stream returns ``jax.random.fold_in(key,
count)`` and advances the counter, so every call gives a new key and the same seed gives the
same keys. Since an :class:`Rngs` is a Module, it goes through ``oxtree.jax``'s filtered
transforms like any other: inside ``filter_jit`` the advanced counters are written back to
the caller's object, and ``filter_grad`` never differentiates keys or counters (they are
not floating-point arrays).

>>> import jax
>>> rngs = Rngs(0, dropout=1)
>>> sorted(rngs), rngs.dropout().dtype == rngs().dtype
(['default', 'dropout'], True)
>>> int(rngs.dropout.count), int(rngs.default.count)
(1, 1)
>>> bool((jax.random.key_data(Rngs(0)()) == jax.random.key_data(Rngs(0)())).all())
True
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping
from typing import Annotated, Any

from oxtree.module import Kind, Module

# JAX is imported when a stream is made, not with this module: `from oxtree import *` binds
# Rngs and RngStream without it, and making one without JAX installed says what is missing.

__all__ = ["RNG", "RngStream", "Rngs"]

# The kind of a stream's key and counter: leaves, never trained (pick them with
# ``module.select(RNG)``, or leave them out with ``Not(OfKind(RNG))``).
RNG = Kind.define("rng")

_Seed = Any  # an int, an integer scalar array, a typed key array or a raw uint32 key


def _needs_jax(what: str) -> None:
    """Imports JAX, or raises an ImportError saying that ``oxtree.<what>`` needs it."""
    try:
        import jax  # noqa: F401
    except ImportError as e:
        raise ImportError(f"oxtree.{what} needs JAX: pip install jax") from e


def _per_key(fn: Callable[..., Any], batch_ndim: int) -> Callable[..., Any]:
    """``fn`` of one key (and one count) mapped over ``batch_ndim`` leading axes."""
    import jax

    for _ in range(batch_ndim):
        fn = jax.vmap(fn)
    return fn


@functools.cache
def _raw_key_size() -> int:
    import jax

    # The trailing size of a raw key of the default implementation (2 for threefry), read
    # from its shape only.
    return int(jax.eval_shape(lambda: jax.random.PRNGKey(0)).shape[-1])


def _as_key(where: str, seed: _Seed) -> tuple[Any, tuple[int, ...]]:
    """The key a stream starts from (``where`` names it in errors), and the shape of its
    batch of keys."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    if isinstance(seed, RngStream):
        seed = seed.key
    dtype = getattr(seed, "dtype", None)
    shape = tuple(getattr(seed, "shape", ()))
    if dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
        return seed, shape
    if dtype is not None and np.dtype(dtype) == np.uint32 and shape:
        if shape[-1] != _raw_key_size():
            raise ValueError(
                f"{where}: a raw key is a uint32 array of shape (..., {_raw_key_size()}), "
                f"got shape {shape}"
            )
        return jnp.asarray(seed), shape[:-1]
    if dtype is None:
        integer = isinstance(seed, int) and not isinstance(seed, bool)
        got = f"{type(seed).__name__}: {seed!r}"
    else:
        integer = shape == () and np.issubdtype(np.dtype(dtype), np.integer)
        got = f"an array of {np.dtype(dtype)}{list(shape)}"
    if not integer:
        raise TypeError(
            f"{where} expects an int seed, a key from jax.random.key or a raw uint32 key from "
            f"jax.random.PRNGKey, got {got}"
        )
    try:
        return jax.random.key(seed), ()
    except (OverflowError, ValueError, TypeError) as e:
        raise ValueError(f"{where}: {seed!r} is not a valid seed ({e})") from None


class RngStream(Module):
    """One stream of PRNG keys: a key and a call counter, both leaves of kind :data:`RNG`.

    Each call returns ``jax.random.fold_in(key, count)`` and adds one to ``count``. The key
    is typed (``jax.random.key``) or raw (``jax.random.PRNGKey``'s uint32 pair), and the
    keys a stream returns are of the same sort. A stream whose key is a batch of keys (made
    by :meth:`split`) returns one key per element, and under ``filter_vmap`` each element
    sees a stream of its own.

    >>> import jax
    >>> s = RngStream(jax.random.PRNGKey(0))
    >>> s().shape, s().dtype, int(s.count)
    ((2,), dtype('uint32'), 2)
    """

    key: Annotated[Any, RNG]
    count: Annotated[Any, RNG]

    def __init__(self, key: _Seed) -> None:
        _needs_jax("RngStream")
        import jax.numpy as jnp

        self.key, batch = _as_key("RngStream", key)
        self.count = jnp.zeros(batch, jnp.uint32)

    def __call__(self) -> Any:
        """A new key, ``fold_in(key, count)``; the counter advances by one.

        >>> s = RngStream(0)
        >>> (s() == s()).item(), int(s.count)
        (False, 2)
        """
        import jax
        import jax.numpy as jnp

        count = self.count
        key = _per_key(jax.random.fold_in, count.ndim)(self.key, count)
        self.count = count + jnp.uint32(1)
        return key

    def split(self, num: int | tuple[int, ...]) -> RngStream:
        """A new stream whose key is a batch of ``num`` keys (an int or a shape) made from
        this stream's next key, for a ``filter_vmap`` over ``num`` elements.

        >>> RngStream(0).split(3).count.shape
        (3,)
        """
        import jax

        key = self()
        split = _per_key(lambda k: jax.random.split(k, num), self.count.ndim)
        return type(self)(split(key))

    def fork(self) -> RngStream:
        """A new stream started from this stream's next key (its counter at zero).

        >>> s = RngStream(0)
        >>> f = s.fork()
        >>> int(s.count), int(f.count), (f() == RngStream(0).fork()()).item()
        (1, 0, True)
        """
        return type(self)(self())


# The names a stream may not take: the attributes of an Rngs (its methods, Module's).
@functools.cache
def _reserved() -> frozenset[str]:
    return frozenset(n for n in dir(Rngs) if not n.startswith("_")) | {"training"}


class Rngs(Module):
    """Named streams of PRNG keys (as Flax NNX's ``nnx.Rngs``): a Module holding one
    :class:`RngStream` per name.

    ``Rngs(0, params=1, dropout=2)`` makes the streams ``default`` (from the positional
    seed), ``params`` and ``dropout``; each seed is an int, a key from ``jax.random.key``, a
    raw key from ``jax.random.PRNGKey`` or an :class:`RngStream`, and a mapping of names to
    seeds may stand for the positional one. ``rngs.params()`` (or ``rngs['params']()``)
    returns the next key of a stream and ``rngs()`` the next of ``default``. A name that is
    not a stream falls back to ``default`` when there is one (so a layer asking for
    ``rngs.params()`` works with ``Rngs(0)``); without it, it is an ``AttributeError``
    (``KeyError`` for ``rngs[name]``) naming the streams.

    Each stream is a submodule, at the path ``.name``; its key and counter are leaves of the
    kind :data:`RNG`. Inside ``oxtree.jax.filter_jit`` the counters advance on the caller's
    object (the write-back), so a jitted and an eager run draw the same keys.

    >>> import jax
    >>> rngs = Rngs(0, dropout=1)
    >>> k1, k2 = rngs.dropout(), rngs.dropout()
    >>> bool((jax.random.key_data(k1) != jax.random.key_data(k2)).any())
    True
    >>> int(rngs.dropout.count), len(rngs), 'params' in rngs
    (2, 2, False)
    >>> Rngs(dropout=1).params
    Traceback (most recent call last):
    ...
    AttributeError: Rngs has no stream 'params' (its streams: 'dropout'); name it, as in Rngs(params=0), or give a default stream, as in Rngs(0), that other names fall back to
    """

    def __init__(
        self, default: _Seed | Mapping[str, _Seed] | None = None, /, **streams: _Seed
    ) -> None:
        _needs_jax("Rngs")
        if isinstance(default, Mapping):
            streams = {**default, **streams}
        elif default is not None:
            if "default" in streams:
                raise TypeError(
                    "Rngs: the default stream is given twice (positionally and as default=)"
                )
            streams = {"default": default, **streams}
        for name, seed in streams.items():
            if not isinstance(name, str) or not name.isidentifier() or name.startswith("_"):
                raise TypeError(
                    f"Rngs: stream names are identifiers not starting with '_', got {name!r}"
                )
            if name in _reserved():
                raise ValueError(
                    f"Rngs: {name!r} is the name of an Rngs attribute and cannot name a stream"
                )
            key, _ = _as_key(f"Rngs: stream {name!r}", seed)
            self.register_module(name, RngStream(key))

    def _streams(self) -> dict[str, RngStream]:
        return {n: v for n, v in vars(self).items() if isinstance(v, RngStream)}

    def _stream(self, name: str, error: type[Exception]) -> RngStream:
        streams = self._streams()
        stream = streams.get(name, streams.get("default"))
        if stream is None:
            names = ", ".join(map(repr, streams)) or "none"
            message = (
                f"Rngs has no stream {name!r} (its streams: {names}); name it, as in "
                f"Rngs({name}=0), or give a default stream, as in Rngs(0), that other names "
                "fall back to"
            )
            raise error(message)
        return stream

    def __getattr__(self, name: str) -> RngStream:
        # Only called for names that are no attribute: private and special names (probed
        # by copy, pickle and friends) never fall back to the default stream.
        if name.startswith("_"):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return self._stream(name, AttributeError)

    def __getitem__(self, name: str) -> RngStream:
        """The stream ``name`` (or ``default`` if there is none of that name).

        >>> Rngs(params=0)['params'].count.shape
        ()
        """
        return self._stream(name, KeyError)

    def __call__(self) -> Any:
        """The next key of the ``default`` stream.

        >>> Rngs(0)().shape
        ()
        """
        return self._stream("default", AttributeError)()

    def __iter__(self) -> Iterator[str]:
        return iter(self._streams())

    def __len__(self) -> int:
        return len(self._streams())

    def __contains__(self, name: object) -> bool:
        return name in self._streams()

    def items(self) -> Iterator[tuple[str, RngStream]]:
        """The ``(name, stream)`` pairs, in the order they were given.

        >>> [name for name, _ in Rngs(0, params=1).items()]
        ['default', 'params']
        """
        return iter(self._streams().items())

    def fork(self) -> Rngs:
        """A new Rngs with the same stream names, each started from its stream's next key.

        >>> rngs = Rngs(params=0)
        >>> forked = rngs.fork()
        >>> int(rngs.params.count), int(forked.params.count)
        (1, 0)
        """
        return Rngs(**{name: stream.fork() for name, stream in self.items()})

    def split(self, num: int | tuple[int, ...]) -> Rngs:
        """A new Rngs whose every stream holds a batch of ``num`` keys (an int or a shape),
        made from its next key: one stream per element under ``oxtree.jax.filter_vmap``
        (an ensemble of modules built from one Rngs).

        >>> Rngs(0).split(4).default.count.shape
        (4,)
        """
        return Rngs(**{name: stream.split(num) for name, stream in self.items()})
