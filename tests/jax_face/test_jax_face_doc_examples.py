"""The examples of JAX's own pytree documentation, run with jax and with oxtree's JAX face.

The examples come from two pages of JAX's documentation: "Pytrees" (an older version of the
page) and "Custom pytree nodes" (the current one). Each example is a function of a module pair
`(tree_util, tree)`: it runs once with `(jax.tree_util, jax.tree)` and once with
`(oxtree.tree_util, oxtree.tree)`, and everything it prints (including the type of each exception an example expects) must be identical.
Live jax is the reference, so where the pages' printed text is older than jax 0.10.2 the comparison
follows today's jax.

Every example defines its classes inside the function: registrations are global and permanent in
jax, so each run registers fresh class objects (with the same names, so printed output matches).
The `jax.jit` / `jax.vmap` / `jax.jacobian` parts of the pages are JAX internals and are left out;
the pure tree functions they rely on are exercised instead.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import typing
from collections import namedtuple
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import jax.tree
import jax.tree_util
import numpy as np
import oxtree.tree
import oxtree.tree_util
import pytest

JAX = (jax.tree_util, jax.tree)
OX = (oxtree.tree_util, oxtree.tree)

Example = Callable[[Any, Any], None]
EXAMPLES: dict[str, Example] = {}


def example(fn: Example) -> Example:
    EXAMPLES[fn.__name__] = fn
    return fn


def capture(fn: Example, mods: tuple[Any, Any]) -> str:
    """Everything `fn(*mods)` prints."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        fn(*mods)
    return out.getvalue()


def print_raised(thunk: Callable[[], Any], *, message: bool = False) -> None:
    """Print the type of the exception `thunk` raises (and its message when asked), or its
    result's type when it does not raise."""
    try:
        result = thunk()
    except Exception as exc:
        print(f"raises {type(exc).__name__}" + (f": {exc}" if message else ""))
    else:
        print(f"returns {type(result).__name__}")


# --------------------------------------------------------------------------------------------------
# JAX's "Pytrees" page (an older version).


@example
def pytrees_page_example_pytrees_and_leaf_counts(tree_util: Any, tree: Any) -> None:
    marker = object()
    pytrees = [
        [1, "a", marker],  # 3 leaves
        (1, (2, 3), ()),  # 3 leaves
        [1, {"k1": 2, "k2": (3, 4)}, 5],  # 5 leaves
    ]
    for pytree in pytrees:
        leaves = tree_util.tree_leaves(pytree)
        print(len(leaves), [type(leaf).__name__ for leaf in leaves], tree.structure(pytree))
        print(any(leaf is marker for leaf in leaves), tree.leaves(pytree) == leaves)


@example
def pytrees_page_flatten_unflatten(tree_util: Any, tree: Any) -> None:
    tree_flatten, tree_unflatten = tree_util.tree_flatten, tree_util.tree_unflatten
    # The structured value to be transformed
    value_structured = [1.0, (2.0, 3.0)]
    # The leaves in value_flat correspond to the `*` markers in value_tree
    value_flat, value_tree = tree_flatten(value_structured)
    print(f"value_flat={value_flat}\nvalue_tree={value_tree}")
    # Transform the flat value list using an element-wise numeric transformer
    transformed_flat = [v * 2.0 for v in value_flat]
    print(f"transformed_flat={transformed_flat}")
    # Reconstruct the structured output, using the original
    transformed_structured = tree_unflatten(value_tree, transformed_flat)
    print(f"transformed_structured={transformed_structured}")


def show_example_000(tree_util: Any, structured: Any) -> None:
    flat, treedef = tree_util.tree_flatten(structured)
    unflattened = tree_util.tree_unflatten(treedef, flat)
    print(f"structured={structured}\n  flat={flat}\n  tree={treedef}\n  unflattened={unflattened}")


@example
def pytrees_page_show_example_containers(tree_util: Any, tree: Any) -> None:
    Point = namedtuple("Point", ["x", "y"])
    example_containers = [
        (1.0, [2.0, 3.0]),
        (1.0, {"b": 2.0, "a": 3.0}),
        1.0,
        None,
        np.zeros(2),
        Point(1.0, 2.0),
    ]
    for structured in example_containers:
        show_example_000(tree_util, structured)


@example
def pytrees_page_special_is_a_leaf(tree_util: Any, tree: Any) -> None:
    class Special:
        def __init__(self, x: Any, y: Any) -> None:
            self.x = x
            self.y = y

        def __repr__(self) -> str:
            return f"Special(x={self.x}, y={self.y})"

    show_example_000(tree_util, Special(1.0, 2.0))


@example
def pytrees_page_registered_special(tree_util: Any, tree: Any) -> None:
    class Special:
        def __init__(self, x: Any, y: Any) -> None:
            self.x = x
            self.y = y

    class RegisteredSpecial(Special):
        def __repr__(self) -> str:
            return f"RegisteredSpecial(x={self.x}, y={self.y})"

    def special_flatten(v: Any) -> tuple[Any, Any]:
        children = (v.x, v.y)
        aux_data = None
        return (children, aux_data)

    def special_unflatten(aux_data: Any, children: Any) -> Any:
        return RegisteredSpecial(*children)

    tree_util.register_pytree_node(RegisteredSpecial, special_flatten, special_unflatten)
    show_example_000(tree_util, RegisteredSpecial(1.0, 2.0))
    # Treedefs are compared for equality: the aux data (None) compares meaningfully.
    first = tree_util.tree_structure(RegisteredSpecial(1.0, 2.0))
    second = tree_util.tree_structure(RegisteredSpecial("a", [3]))
    third = tree_util.tree_structure(RegisteredSpecial("a", "b"))
    print(first == second, first == third, hash(first) == hash(third))


@example
def pytrees_page_in_axes_prefix_tree(tree_util: Any, tree: Any) -> None:
    a1, a2, a3 = np.zeros(2), np.ones(3), np.arange(4)
    args = (a1, {"k1": a2, "k2": a3})
    for in_axes in [(None, {"k1": None, "k2": 0}), (None, 0), 0]:
        # jax's own tree_broadcast treats None as a node (vmap's in_axes reads None as a leaf):
        # a None against an array is a structure error; with is_leaf it broadcasts.
        for broadcast in (tree_util.tree_broadcast, tree.broadcast):
            print_raised(lambda b=broadcast, axes=in_axes: b(axes, args))
            result = broadcast(in_axes, args, is_leaf=lambda x: x is None)
            print(result, tree_util.tree_structure(result))
        # The prefix matched up leaf by leaf with the input's subtrees.
        pairs = tree_util.tree_map(
            lambda axis, sub: (axis, tree_util.tree_structure(sub)),
            in_axes,
            args,
            is_leaf=lambda x: x is None,
        )
        print(pairs)


# --------------------------------------------------------------------------------------------------
# JAX's "Custom pytree nodes" page (current).


def _fresh_special() -> type:
    """The page's `Special`: no __repr__ (its default repr holds an address, not printed)."""

    class Special:
        def __init__(self, x: Any, y: Any) -> None:
            self.x = x
            self.y = y

    return Special


@example
def custom_nodes_page_special_leaves(tree_util: Any, tree: Any) -> None:
    Special = _fresh_special()
    specials = [Special(0, 1), Special(2, 4)]
    leaves = tree.leaves(specials)
    print(len(leaves), [type(leaf).__qualname__ for leaf in leaves])
    print(all(a is b for a, b in zip(leaves, specials, strict=True)))
    print(tree.structure(specials))


@example
def custom_nodes_page_map_over_unregistered_special_raises(tree_util: Any, tree: Any) -> None:
    Special = _fresh_special()
    # The error comes from `x + 1` itself: same type and same message.
    print_raised(lambda: tree.map(lambda x: x + 1, [Special(0, 1), Special(2, 4)]), message=True)
    print_raised(lambda: tree_util.tree_map(lambda x: x + 1, [Special(0, 1)]), message=True)


@example
def custom_nodes_page_register_pytree_node(tree_util: Any, tree: Any) -> None:
    Special = _fresh_special()

    class RegisteredSpecial(Special):  # type: ignore[valid-type, misc]
        def __repr__(self) -> str:
            return f"RegisteredSpecial(x={self.x}, y={self.y})"

    def special_flatten(v: Any) -> tuple[Any, Any]:
        children = (v.x, v.y)
        aux_data = None
        return (children, aux_data)

    def special_unflatten(aux_data: Any, children: Any) -> Any:
        return RegisteredSpecial(*children)

    tree_util.register_pytree_node(RegisteredSpecial, special_flatten, special_unflatten)
    print(tree.map(lambda x: x + 1, [RegisteredSpecial(0, 1), RegisteredSpecial(2, 4)]))
    print(tree.flatten([RegisteredSpecial(0, 1), RegisteredSpecial(2, 4)]))
    for path, leaf in tree.leaves_with_path([RegisteredSpecial(0, 1)]):
        print(tree_util.keystr(path), path, leaf)


@example
def custom_nodes_page_register_pytree_node_class(tree_util: Any, tree: Any) -> None:
    Special = _fresh_special()

    @tree_util.register_pytree_node_class
    class RegisteredSpecial2(Special):  # type: ignore[valid-type, misc]
        def __repr__(self) -> str:
            return f"RegisteredSpecial2(x={self.x}, y={self.y})"

        def tree_flatten(self) -> tuple[Any, Any]:
            children = (self.x, self.y)
            aux_data = None
            return (children, aux_data)

        @classmethod
        def tree_unflatten(cls, aux_data: Any, children: Any) -> Any:
            return cls(*children)

    def show_example(structured: Any) -> None:
        flat, treedef = structured.tree_flatten()
        unflattened = RegisteredSpecial2.tree_unflatten(treedef, flat)
        print(f"{structured=}\n  {flat=}\n  tree={treedef}\n  {unflattened=}")

    show_example(RegisteredSpecial2(1.0, 2.0))
    # And through the library: the class is a node now.
    print(tree.flatten(RegisteredSpecial2(1.0, 2.0)))
    print(tree.map(lambda x: x * 10, RegisteredSpecial2(1.0, 2.0)))
    print(type(RegisteredSpecial2).__name__, RegisteredSpecial2.__name__)


@example
def custom_nodes_page_namedtuple_string_field_is_a_leaf(tree_util: Any, tree: Any) -> None:
    class MyOtherContainer(typing.NamedTuple):
        name: str
        a: Any
        b: Any
        c: Any

    containers = [MyOtherContainer("Alice", 1, 2, 3), MyOtherContainer("Bob", 4, 5, 6)]
    print(tree.leaves(containers))
    print(tree.structure(containers))
    # The string field is a leaf: its key path is `.name` (what jit's error names as `x.name`).
    for path, leaf in tree.leaves_with_path(MyOtherContainer("moc", 1, 2, 3)):
        print(tree_util.keystr(path), repr(leaf))


@example
def custom_nodes_page_register_dataclass_with_meta_fields(tree_util: Any, tree: Any) -> None:
    @functools.partial(
        tree_util.register_dataclass, data_fields=["a", "b", "c"], meta_fields=["name"]
    )
    @dataclasses.dataclass
    class MyDataclassContainer:
        name: str
        a: Any
        b: Any
        c: Any

    containers = [
        MyDataclassContainer("apple", 5.3, 1.2, jnp.zeros([4])),
        MyDataclassContainer("banana", np.array([3, 4]), -1.0, 0.0),
    ]
    # `name` is not a leaf: it lives in the treedef as metadata.
    print(tree.leaves(containers))
    print(tree.structure(containers))
    mdc = MyDataclassContainer("mdc", 1, 2, 3)
    print(tree.map(lambda x: x * 2, mdc))
    for path, leaf in tree.leaves_with_path(mdc):
        print(tree_util.keystr(path), leaf)
    # Same metadata: equal treedefs (what jit's cache relies on); different metadata: unequal.
    same = tree.structure(MyDataclassContainer("mdc", 4, 5, 6))
    other = tree.structure(MyDataclassContainer("other", 1, 2, 3))
    mdc_def = tree.structure(mdc)
    print(mdc_def == same, hash(mdc_def) == hash(same), mdc_def == other)


def _fresh_mytree(register: Callable[..., Any]) -> type:
    class MyTree:
        def __init__(self, a: Any) -> None:
            self.a = jnp.asarray(a)

    register(MyTree, lambda t: ((t.a,), None), lambda _, args: MyTree(*args))
    return MyTree


@example
def custom_nodes_page_init_with_unexpected_values(tree_util: Any, tree: Any) -> None:
    MyTree = _fresh_mytree(tree_util.register_pytree_node)
    t = MyTree(jnp.arange(5.0))
    print(tree.structure(t), tree.leaves(t))
    # What vmap does internally: placeholder leaves like object() go through __init__.
    print_raised(lambda: tree.map(lambda _: object(), t))
    # What jacobian does: None and trees of trees go through __init__ too.
    print_raised(lambda: tree.map(lambda _: None, t), message=True)
    print_raised(lambda: tree_util.tree_unflatten(tree.structure(t), [t]))
    print_raised(lambda: tree_util.tree_unflatten(tree.structure(t), [object()]))


@example
def custom_nodes_page_solution_1_init_tolerates_placeholders(tree_util: Any, tree: Any) -> None:
    class MyTree:
        def __init__(self, a: Any) -> None:
            if not (type(a) is object or a is None or isinstance(a, MyTree)):
                a = jnp.asarray(a)
            self.a = a

    tree_util.register_pytree_node(MyTree, lambda t: ((t.a,), None), lambda _, a: MyTree(*a))
    t = MyTree(jnp.arange(5.0))
    for f in (lambda _: object(), lambda _: None, lambda _: t, lambda x: x + 1):
        print(type(tree.map(f, t).a).__name__)


@example
def custom_nodes_page_solution_2_unflatten_avoids_init(tree_util: Any, tree: Any) -> None:
    class MyTree:
        def __init__(self, a: Any) -> None:
            self.a = jnp.asarray(a)

    def tree_unflatten(aux_data: Any, children: Any) -> Any:
        del aux_data  # Unused in this class.
        obj = object.__new__(MyTree)
        obj.a = children[0]
        return obj

    tree_util.register_pytree_node(MyTree, lambda t: ((t.a,), None), tree_unflatten)
    t = MyTree(jnp.arange(5.0))
    marker = object()
    mapped = tree.map(lambda _: marker, t)
    print(type(mapped).__name__, mapped.a is marker)
    print(type(tree.map(lambda _: None, t).a).__name__)
    print(tree.map(lambda x: x * 2, t).a)


@example
def custom_nodes_page_flatten_unflatten(tree_util: Any, tree: Any) -> None:
    tree_flatten, tree_unflatten = tree_util.tree_flatten, tree_util.tree_unflatten
    value_structured = [1.0, (2.0, 3.0)]
    value_flat, value_tree = tree_flatten(value_structured)
    print(f"{value_flat=}\n{value_tree=}")
    transformed_flat = [v * 2.0 for v in value_flat]
    print(f"{transformed_flat=}")
    transformed_structured = tree_unflatten(value_tree, transformed_flat)
    print(f"{transformed_structured=}")


@example
def custom_nodes_page_show_example_containers(tree_util: Any, tree: Any) -> None:
    Point = namedtuple("Point", ["x", "y"])
    example_containers = [
        (1.0, [2.0, 3.0]),
        (1.0, {"b": 2.0, "a": 3.0}),
        1.0,
        None,
        jnp.zeros(2),
        Point(1.0, 2.0),
    ]

    def show_example(structured: Any) -> None:
        flat, tree = tree_util.tree_flatten(structured)
        unflattened = tree_util.tree_unflatten(tree, flat)
        print(f"{structured=}\n  {flat=}\n  {tree=}\n  {unflattened=}")

    for structured in example_containers:
        show_example(structured)


# --------------------------------------------------------------------------------------------------
# The proof: every example prints the same with jax and with oxtree.


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_example_prints_the_same(name: str) -> None:
    fn = EXAMPLES[name]
    expected = capture(fn, JAX)
    actual = capture(fn, OX)
    assert expected, "the example printed nothing"
    assert actual == expected


# The pages' own printed text, where it is still what jax 0.10.2 prints.
CUSTOM_NODES_FLATTEN_OUTPUT = """\
value_flat=[1.0, 2.0, 3.0]
value_tree=PyTreeDef([*, (*, *)])
transformed_flat=[2.0, 4.0, 6.0]
transformed_structured=[2.0, (4.0, 6.0)]
"""

CUSTOM_NODES_SHOW_EXAMPLE_OUTPUT = """\
structured=(1.0, [2.0, 3.0])
  flat=[1.0, 2.0, 3.0]
  tree=PyTreeDef((*, [*, *]))
  unflattened=(1.0, [2.0, 3.0])
structured=(1.0, {'b': 2.0, 'a': 3.0})
  flat=[1.0, 3.0, 2.0]
  tree=PyTreeDef((*, {'a': *, 'b': *}))
  unflattened=(1.0, {'a': 3.0, 'b': 2.0})
structured=1.0
  flat=[1.0]
  tree=PyTreeDef(*)
  unflattened=1.0
structured=None
  flat=[]
  tree=PyTreeDef(None)
  unflattened=None
structured=Array([0., 0.], dtype=float32)
  flat=[Array([0., 0.], dtype=float32)]
  tree=PyTreeDef(*)
  unflattened=Array([0., 0.], dtype=float32)
structured=Point(x=1.0, y=2.0)
  flat=[1.0, 2.0]
  tree=PyTreeDef(CustomNode(namedtuple[Point], [*, *]))
  unflattened=Point(x=1.0, y=2.0)
"""


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("custom_nodes_page_flatten_unflatten", CUSTOM_NODES_FLATTEN_OUTPUT),
        ("custom_nodes_page_show_example_containers", CUSTOM_NODES_SHOW_EXAMPLE_OUTPUT),
    ],
)
def test_doc_page_text_is_still_current(name: str, text: str) -> None:
    assert capture(EXAMPLES[name], JAX) == text
    assert capture(EXAMPLES[name], OX) == text


def test_registered_special_leaves_and_map_as_in_the_custom_nodes_page() -> None:
    """The page's printed results of mapping over registered nodes and of a NamedTuple's leaves."""
    outputs = [
        capture(EXAMPLES["custom_nodes_page_register_pytree_node"], mods) for mods in (JAX, OX)
    ]
    for out in outputs:
        assert out.splitlines()[0] == "[RegisteredSpecial(x=1, y=2), RegisteredSpecial(x=3, y=5)]"
    outputs = [
        capture(EXAMPLES["custom_nodes_page_namedtuple_string_field_is_a_leaf"], mods)
        for mods in (JAX, OX)
    ]
    for out in outputs:
        assert out.splitlines()[0] == "['Alice', 1, 2, 3, 'Bob', 4, 5, 6]"
