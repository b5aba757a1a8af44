"""Annotations a user of oxtree writes, for `make lint` to run mypy and pyright over.

Not a test module (pytest collects ``test_*.py`` only) and never run: it only has to type-check,
under both checkers, in strict mode. Each line that ends in ``# type: ignore[...]`` is one the
checkers must reject: both are set to report an ignore comment that silences nothing
(mypy's ``warn_unused_ignores``, pyright's ``reportUnnecessaryTypeIgnoreComment``), so a
wrong acceptance fails the check as surely as a wrong rejection.
"""

from __future__ import annotations

from collections import OrderedDict, defaultdict, deque
from collections.abc import Callable
from typing import Any, NamedTuple, TypeAlias, TypeVar, assert_type

import jax
import oxtree
import oxtree.tree as jt
import oxtree.tree_util as jtu
from oxtree import PyTree, PyTreeDef, PyTreeSpec
from oxtree.typing import Children, CustomTreeNode, MetaData

T = TypeVar("T")

IntTree: TypeAlias = PyTree[int]
ArrayTree: TypeAlias = PyTree[jax.Array]


# -- the main face (optree's names) ---------------------------------------------------------


def total(tree: PyTree[int]) -> int:
    """A function over any tree of ints."""
    leaves: list[Any] = oxtree.tree_leaves(tree)
    return sum(leaves)


def as_text(tree: PyTree[int]) -> PyTree[str]:
    """tree_map's result is a tree too."""
    out: PyTree[str] = oxtree.tree_map(str, tree)
    return out


def same_shape(tree: PyTree[T]) -> PyTree[T]:
    """A generic tree in, the same kind out."""
    leaves, spec = oxtree.tree_flatten(tree)
    rebuilt: PyTree[T] = oxtree.tree_unflatten(spec, leaves)
    return rebuilt


class Point(NamedTuple):
    x: int
    y: int


class Pair:
    """A class that flattens itself (optree's CustomTreeNode protocol)."""

    def __init__(self, a: int, b: int) -> None:
        self.a, self.b = a, b

    def __tree_flatten__(self) -> tuple[tuple[int, int], None]:
        return (self.a, self.b), None

    @classmethod
    def __tree_unflatten__(cls, metadata: MetaData, children: Children[int]) -> Pair:
        a, b = children
        return cls(a, b)


# Every container kind, inline and held in variables (where the invariance of list and dict
# would bite an alias made of list[...] and dict[...]). mypy joins the values of a mixed
# literal held in an unannotated variable to `object` (`[1, (2, 3)]` is a `list[object]`), so
# such a variable is annotated; pyright infers the union and needs no annotation.
ints = [1, 2, 3]
mapping = {"a": 1, "b": 2}
nested: PyTree[int] = {"a": [1, (2, 3)], "b": {"c": 4}, "d": None}
total(1)
total(ints)
total(mapping)
total(nested)
total({"a": [1, (2, 3)], "b": {"c": 4}, "d": None})
total((1, [2, 3], {"k": (4,)}))
total(Point(1, 2))
total(deque([1, 2]))
total(OrderedDict(a=1))
total(defaultdict(int, a=1))
total([None, {"a": None}])  # None is a node without children
total(Pair(1, 2))
total([Pair(1, 2), {"p": Pair(3, 4)}])
total(1.5)  # type: ignore[arg-type]
total([1, 2.5])  # type: ignore[list-item]
total({"a": 1.5})  # type: ignore[dict-item]
total({1, 2})  # type: ignore[arg-type]  # a set is a leaf, not a node
total(object())  # type: ignore[arg-type]
# Not asserted: a str, a sequence of str, passes for any PyTree under mypy (pyright rejects it);
# see the comment above PyTree in oxtree/typing.py.
floats = {"a": 1.5}
total(floats)  # type: ignore[arg-type]

t: IntTree = {"a": [1, 2], "b": (3, None)}
strings: PyTree[str] = as_text(t)
bad: IntTree = {"a": [1, 2.5]}  # type: ignore[list-item]
same_shape(t)
same_shape(Point(1, 2))
node: CustomTreeNode[Any] = Pair(1, 2)

spec = oxtree.tree_structure(nested)
assert_type(spec, PyTreeSpec)
assert_type(spec, PyTreeDef)  # PyTreeDef is another name of PyTreeSpec
assert_type(spec.num_leaves, int)
assert_type(oxtree.tree_leaves(nested), list[Any])
children: list[PyTreeSpec] = spec.children()


# -- the JAX face (jax.tree_util's and jax.tree's names) over JAX arrays --------------------
# Only `jax.Array` itself is used from JAX: its functions' own annotations change between
# releases (`make test-matrix` installs the newest), and they are not what is checked here.


def apply(f: Callable[[jax.Array], jax.Array], params: ArrayTree) -> ArrayTree:
    """jax.tree.map over a tree of arrays."""
    out: ArrayTree = jt.map(f, params)
    return out


def by_path(params: PyTree[jax.Array]) -> dict[str, jax.Array]:
    """Key paths and leaves, as jax.tree_util gives them."""
    pairs: list[tuple[jtu.KeyPath[Any], jax.Array]] = jtu.tree_leaves_with_path(params)
    return {jtu.keystr(path): leaf for path, leaf in pairs}


def structure(params: PyTree[jax.Array]) -> jtu.PyTreeDef:
    """jax.tree_util's treedef type, and its functions over treedefs."""
    treedef: jtu.PyTreeDef = jtu.tree_structure(params)
    kids: list[jtu.PyTreeDef] = jtu.treedef_children(treedef)
    if jtu.treedef_is_leaf(treedef):
        return treedef
    return jtu.treedef_tuple(kids)


def last_key(path: jtu.KeyPath[jtu.KeyEntry]) -> jtu.KeyEntry:
    """JAX's KeyEntry is a type variable, as in jax.tree_util."""
    return path[-1]


def step(w: jax.Array, b: jax.Array, f: Callable[[jax.Array], jax.Array]) -> ArrayTree:
    """Trees of arrays built inline and in variables, passed to the functions above."""
    params: ArrayTree = {"w": w, "b": [b, None]}
    layers = [w, b]
    by_path(params)
    by_path(layers)
    by_path({"w": w, "b": [b, None], "extra": (w,)})
    structure(params)
    apply(f, {"w": 1})  # type: ignore[dict-item]  # an int is no jax.Array
    return apply(f, params)


path: jtu.KeyPath[Any] = (jtu.DictKey("w"), jtu.SequenceKey(0), jtu.GetAttrKey("x"))
last_key(path)
