"""Every public function and treedef method on trees nested 100,000 deep.

    python fuzz/deep_ops.py [--slow-depth=N] LIMIT DEPTH [OP ...]  # LIMIT 0: the default limit

Each operation must return a correct result or raise RecursionError; anything else (another
exception, a wrong result, a crash) is a failure. The script prints one JSON record per line,
flushed at once, so that a parent process knows which operation was running if this one dies:
``["start", op]`` then ``["done", op, outcome, detail, seconds, depth]`` (outcome ``ok``,
``wrong`` or an exception name), and ``["finished"]`` at the end. tests/reliability/test_reliability.py runs it in a
subprocess at the default recursion limit and at 1,000,000 (where a recursion guarded only by
the interpreter's limit would overflow the C stack); `OPS` says which public names each
operation covers, so the test can check that none is left out.

Checks walk results iteratively: comparing two deep lists with ``==`` would itself recurse.
Operations whose output is quadratic in depth by nature (one key path per node) run on a
shallower chain (`QUADRATIC_DEPTH`).
"""

# No `from __future__ import annotations`: tests/reliability/test_reliability.py runs this file's text
# after test_errors.py's subprocess prelude, where a __future__ import could not come first.
import copy
import io
import json
import operator
import pickle
import sys
import time
from collections import OrderedDict, defaultdict, deque, namedtuple
from collections.abc import Callable
from typing import Any

Pt = namedtuple("Pt", "x y")
QUADRATIC_DEPTH = 2_000
# Operations slow enough at full depth to run on a shallower chain (--slow-depth) inside the
# test suite: rendering builds text for every level.
SLOW = {"pretty"}


class Leaf:
    """A leaf nobody else holds, compared by identity."""

    def __repr__(self) -> str:
        return "Leaf"


LEAF = Leaf()
OTHER = Leaf()


def emit(*record: Any) -> None:
    print(json.dumps(record), flush=True)


def chain(n: int, leaf: Any, wrap: Callable[[Any], Any] = lambda x: [x]) -> Any:
    tree = leaf
    for _ in range(n):
        tree = wrap(tree)
    return tree


def bottom(tree: Any, n: int, cls: type = list, index: Any = 0) -> Any:
    """The object `n` levels down a chain of `cls` (None if the chain is broken)."""
    for _ in range(n):
        if type(tree) is not cls:
            return None
        tree = tree[index]
    return tree


def is_chain(tree: Any, n: int, leaf: Any, cls: type = list, index: Any = 0) -> bool:
    return bottom(tree, n, cls, index) is leaf


class Box:
    """A registered node with one child."""

    def __init__(self, child: Any) -> None:
        self.child = child


def build(depth: int) -> dict[str, Any]:
    """The shared fixtures: deep trees, their treedefs and helpers, built once."""
    import oxtree
    import oxtree.dataclasses

    if Box not in oxtree.registered_types(namespace="deep"):
        oxtree.register_pytree_node(
            Box, lambda b: ((b.child,), None, ("child",)), lambda _, c: Box(*c), namespace="deep"
        )

    @oxtree.dataclasses.dataclass(namespace="deep")
    class Node:
        child: Any

    d = depth
    tree = chain(d, LEAF)
    fx: dict[str, Any] = {"d": d, "tree": tree, "Node": Node}
    fx["twin"] = chain(d, OTHER)
    fx["none_tree"] = chain(d, None)
    fx["pair_tree"] = chain(d, (LEAF, OTHER))
    fx["spec"] = oxtree.tree_structure(tree)
    fx["twin_spec"] = oxtree.tree_structure(fx["twin"])
    fx["pair_spec"] = oxtree.tree_structure(fx["pair_tree"])
    fx["short"] = chain(QUADRATIC_DEPTH, LEAF)
    return fx


def ops(fx: dict[str, Any]) -> dict[str, tuple[tuple[str, ...], Callable[[], Any]]]:
    """op name -> (public names it covers, a check returning True when the result is right)."""
    import oxtree
    import oxtree.pytree
    import oxtree.tree
    import oxtree.tree_util as tu

    d, tree, spec = fx["d"], fx["tree"], fx["spec"]
    twin, pair_tree, pair_spec = fx["twin"], fx["pair_tree"], fx["pair_spec"]
    short = fx["short"]
    Node = fx["Node"]
    q = QUADRATIC_DEPTH

    def paths_check() -> bool:
        paths, leaves, s = oxtree.tree_flatten_with_path(tree)
        return leaves == [LEAF] and paths == [(0,) * d] and s == spec

    def leaves_with_path() -> bool:
        ((path, leaf),) = oxtree.tree_leaves_with_path(tree)
        return len(path) == d and leaf is LEAF

    def map_with_path() -> bool:
        seen = []
        out = oxtree.tree_map_with_path(lambda p, x: seen.append(len(p)) or OTHER, tree)
        return seen == [d] and is_chain(out, d, OTHER)

    def map_with_path_() -> bool:
        seen = []
        return oxtree.tree_map_with_path_(
            lambda p, x: seen.append(len(p)), tree
        ) is tree and seen == [d]

    def accessors() -> bool:
        (acc,) = oxtree.tree_accessors(tree)
        return len(acc) == d and acc(tree) is LEAF and acc.path == (0,) * d

    def accessor_text() -> bool:
        (acc,) = oxtree.tree_accessors(short)
        text = repr(acc) + str(acc) + acc.codify("t")
        return (
            text.count("[0]") >= 3 * q
            and acc == oxtree.tree_accessors(short)[0]
            and hash(acc) == hash(oxtree.tree_accessors(short)[0])
        )

    def flatten_with_accessor() -> bool:
        accs, leaves, s = oxtree.tree_flatten_with_accessor(tree)
        return leaves == [LEAF] and len(accs[0]) == d and s == spec

    def map_with_accessor() -> bool:
        out = oxtree.tree_map_with_accessor(lambda a, x: len(a), tree)
        return bottom(out, d) == d

    def map_with_accessor_() -> bool:
        seen = []
        return oxtree.tree_map_with_accessor_(
            lambda a, x: seen.append(len(a)), tree
        ) is tree and seen == [d]

    def keystr_check() -> bool:
        ((path, _),) = tu.tree_leaves_with_path(tree)
        return oxtree.keystr(path) == "[0]" * d and tu.keystr(
            path, simple=True, separator="/"
        ) == "/".join(["0"] * d)

    def tree_set() -> bool:
        return is_chain(oxtree.tree_set(tree, (0,) * d, OTHER), d, OTHER)

    def select_by_pattern() -> bool:
        # Globs (one NFA state set per depth), a regex (the keystr grown and cut back as the
        # walk goes), and a glob that fails at the first key (the chain skipped whole), on
        # every face.
        import re

        regex = re.compile(r"[\[\]0]*")
        ((path, _),) = tu.tree_leaves_with_path(tree)
        ok = oxtree.PathPattern("**").match(path) and oxtree.PathPattern(regex).match(path)
        for mask, labels, set_matching in (
            (oxtree.tree_mask, oxtree.tree_labels, oxtree.tree_set_matching),
            (tu.tree_mask, tu.tree_labels, tu.tree_set_matching),
            (oxtree.tree.mask, oxtree.tree.labels, oxtree.tree.set_matching),
        ):
            ok = ok and (
                is_chain(mask(tree, "[0]**"), d, True)
                and is_chain(mask(tree, "[1]**"), d, False)
                and is_chain(mask(tree, regex), d, True)
                and is_chain(labels(tree, {"**": OTHER}), d, OTHER)
                and is_chain(set_matching(tree, "**", OTHER), d, OTHER)
                and bottom(set_matching(tree, "**", func=lambda p, x: len(p)), d) == d
            )
        return ok

    def broadcast_prefix() -> bool:
        return is_chain(
            oxtree.tree_broadcast_prefix(tree, twin), d, LEAF
        ) and oxtree.broadcast_prefix(tree, twin) == [LEAF]

    def broadcast_leaf_prefix() -> bool:
        return is_chain(oxtree.tree_broadcast_prefix(LEAF, twin), d, LEAF)

    def broadcast_common() -> bool:
        a, b = oxtree.tree_broadcast_common(tree, twin)
        la, lb = oxtree.broadcast_common(tree, twin)
        return is_chain(a, d, LEAF) and is_chain(b, d, OTHER) and la == [LEAF] and lb == [OTHER]

    def broadcast_map() -> bool:
        out = oxtree.tree_broadcast_map(lambda a, b: b, tree, twin)
        out2 = oxtree.tree_broadcast_map_with_path(lambda p, a, b: len(p), tree, twin)
        out3 = oxtree.tree_broadcast_map_with_accessor(lambda acc, a, b: len(acc), tree, twin)
        return is_chain(out, d, OTHER) and bottom(out2, d) == d and bottom(out3, d) == d

    def prefix_errors() -> bool:
        ok = oxtree.prefix_errors(tree, twin) == []
        errors = oxtree.prefix_errors(chain(d, (LEAF,)), chain(d, [LEAF]))
        return ok and len(errors) == 1 and "[0]" in str(errors[0]("in_axes"))

    def transpose() -> bool:
        inner = oxtree.tree_structure((0, 0))
        a, b = oxtree.tree_transpose(spec, inner, pair_tree)
        return is_chain(a, d, LEAF) and is_chain(b, d, OTHER)

    def transpose_map() -> bool:
        a, b = oxtree.tree_transpose_map(lambda x: (x, OTHER), tree)
        c, _ = oxtree.tree_transpose_map_with_path(lambda p, x: (len(p), x), tree)
        e, _ = oxtree.tree_transpose_map_with_accessor(lambda acc, x: (len(acc), x), tree)
        return (
            is_chain(a, d, LEAF)
            and is_chain(b, d, OTHER)
            and bottom(c, d) == d
            and bottom(e, d) == d
        )

    def reductions() -> bool:
        nums = chain(d, 3)
        return (
            oxtree.tree_reduce(operator.add, nums, 1) == 4
            and oxtree.tree_reduce_associative(operator.add, nums) == 3
            and oxtree.tree_sum(nums) == 3
            and oxtree.tree_max(nums) == 3
            and oxtree.tree_min(nums) == 3
            and oxtree.tree_all(nums)
            and oxtree.tree_any(nums)
        )

    def partition_combine() -> bool:
        left, right = oxtree.tree_partition(lambda x: x is LEAF, tree)
        back = oxtree.tree_combine(left, right)
        return is_chain(back, d, LEAF)

    def one_level() -> bool:
        out = oxtree.tree_flatten_one_level(tree)
        return len(out[0]) == 1 and out[0][0] is tree[0]

    def replace_nones() -> bool:
        return is_chain(oxtree.tree_replace_nones(OTHER, fx["none_tree"]), d, OTHER)

    def treespec_functions() -> bool:
        return (
            len(oxtree.treespec_accessors(spec)[0]) == d
            and oxtree.treespec_child(spec, 0).num_nodes == d
            and len(oxtree.treespec_children(spec)) == 1
            and oxtree.treespec_entries(spec) == [0]
            and oxtree.treespec_entry(spec, 0) == 0
            and not oxtree.treespec_is_leaf(spec)
            and not oxtree.treespec_is_strict_leaf(spec)
            and not oxtree.treespec_is_one_level(spec)
            and oxtree.treespec_is_prefix(spec, pair_spec)
            and oxtree.treespec_is_suffix(pair_spec, spec)
            and oxtree.treespec_one_level(spec) == oxtree.tree_structure([0])
            and oxtree.treespec_paths(spec) == [(0,) * d]
        )

    def treespec_transform() -> bool:
        return oxtree.treespec_transform(spec).num_nodes == spec.num_nodes

    def treespec_constructors() -> bool:
        n = spec.num_nodes + 1
        made = [
            oxtree.treespec_tuple([spec]),
            oxtree.treespec_list([spec]),
            oxtree.treespec_dict({"a": spec}),
            oxtree.treespec_ordereddict({"a": spec}),
            oxtree.treespec_defaultdict(list, {"a": spec}),
            oxtree.treespec_deque([spec]),
            oxtree.treespec_from_collection([spec]),
        ]
        nt = oxtree.treespec_namedtuple(Pt(spec, spec))
        leaf, none = oxtree.treespec_leaf(), oxtree.treespec_none()
        return (
            all(s.num_nodes == n for s in made)
            and nt.num_nodes == 2 * spec.num_nodes + 1
            and leaf.num_leaves == 1
            and none.num_leaves == 0
        )

    def structseq_constructor() -> bool:
        import time

        fields = [spec] + [oxtree.treespec_leaf()] * 8
        return oxtree.treespec_structseq(time.struct_time(fields)).num_leaves == 9

    def nodes_round_trip() -> bool:
        nodes = spec._nodes()
        back = oxtree.PyTreeSpec._from_nodes(
            nodes, none_is_leaf=spec.none_is_leaf, namespace=spec.namespace, face=spec._face
        )
        return len(nodes) == spec.num_nodes and back == spec

    def json_round_trip() -> bool:
        doc = oxtree.treespec_to_json(spec)
        back = oxtree.treespec_from_json(doc)
        text = json.dumps(doc)
        return back == spec and oxtree.treespec_from_json(text) == spec

    def deep_json_text() -> bool:
        # A document nested 100,000 deep must be refused cleanly. (Under a recursion limit
        # far above the default, CPython's own json.loads overflows the C stack on such
        # text before oxtree sees anything; main() skips this operation there.)
        text = "[" * d + "]" * d
        try:
            oxtree.treespec_from_json(text)
        except ValueError:
            return True
        return False

    def leaves_predicates() -> bool:
        return oxtree.all_leaves([tree]) is False and oxtree.tree_is_leaf(tree) is False

    def spec_methods() -> bool:
        return (
            spec.is_leaf() is False
            and spec.paths() == [(0,) * d]
            and len(spec.accessors()[0]) == d
            and spec.entries() == [0]
            and spec.entry(0) == 0
            and len(spec.key_paths()[0]) == d
            and spec.is_prefix(pair_spec)
            and pair_spec.is_suffix(spec)
            and spec.broadcast_to_common_suffix(pair_spec) == pair_spec
            and spec.one_level() == oxtree.tree_structure([0])
            and spec.is_one_level() is False
            and spec.node_data() is None
            and spec.num_children == 1
            and spec.kind == oxtree.PyTreeKind.LIST
            and spec.type is list
            and spec.namespace == ""
            and spec.none_is_leaf is False
        )

    def spec_order() -> bool:
        return (
            spec < pair_spec
            and spec <= pair_spec
            and pair_spec > spec
            and pair_spec >= spec
            and str(spec) == repr(spec)
        )

    def spec_transform() -> bool:
        counts = [0, 0]

        def f_node(s: Any) -> Any:
            counts[0] += 1
            return s

        def f_leaf(s: Any) -> Any:
            counts[1] += 1
            return s

        return spec.transform(f_node, f_leaf) == spec and counts == [d, 1]

    def spec_traverse() -> bool:
        out = spec.traverse([LEAF], lambda x: x, lambda x: x)
        out2 = spec.walk([LEAF], None, None)
        return is_chain(out, d, LEAF) and out2 is not None

    def spec_to_json_method() -> bool:
        return oxtree.treespec_from_json(spec.to_json()) == spec

    def from_node_data() -> bool:
        treedef = tu.tree_structure(tree)
        rebuilt = oxtree.PyTreeSpec.from_node_data_and_children(
            None, treedef.node_data(), treedef.children()
        )
        return rebuilt == treedef

    def graft() -> bool:
        return spec._graft([oxtree.tree_structure((0, 0))]).num_leaves == 2

    def graph_round_trip() -> bool:
        leaves, gd = oxtree.graph_flatten(tree, tree)
        out = oxtree.graph_unflatten(gd, leaves)
        return leaves == [LEAF] and out[0] is out[1] and is_chain(out[0], d, LEAF)

    def graph_cycle() -> bool:
        bottom_list: list[Any] = []
        root = chain(d - 1, bottom_list)
        bottom_list.append(root)
        leaves, gd = oxtree.graph_flatten(root)
        out = oxtree.graph_unflatten(gd, leaves)
        return bottom(out, d) is out

    def graphdef_methods() -> bool:
        leaves, gd = oxtree.graph_flatten(tree, tree)
        back = pickle.loads(pickle.dumps(gd))
        return (
            gd.num_leaves == 1
            and gd.num_roots == 2
            and gd.num_refs == 1
            and gd.num_nodes > d
            and len(gd) == 1
            and gd.treespec.num_leaves == 2
            and len(gd.references()) == 1
            and len(gd.paths()) == 1
            and back == gd
            and hash(back) == hash(gd)
            and gd != oxtree.graph_flatten(tree)[1]
            and copy.copy(gd) == gd
            and copy.deepcopy(gd) == gd
            and len(repr(gd)) > d
            and gd.unflatten(leaves)[0] is not None
        )

    def graph_layout() -> bool:
        _leaves, gd = oxtree.graph_flatten(short)
        return len(gd._layout()) == q + 1

    def graph_dict_view() -> bool:
        view = oxtree.graph_to_dict(short)
        back = oxtree.graph_from_dict(view)
        return len(view) == q + 1 and is_chain(back, q, LEAF)

    def dataclass_chain() -> bool:
        deep_nodes = chain(d, LEAF, Node)
        leaves, s = oxtree.tree_flatten(deep_nodes, namespace="deep")
        out = s.unflatten([OTHER])
        for _ in range(d):
            out = out.child
        return leaves == [LEAF] and out is OTHER and s.num_nodes == d + 1

    def custom_chain() -> bool:
        boxes = chain(d, LEAF, Box)
        leaves, s = oxtree.tree_flatten(boxes, namespace="deep")
        paths = oxtree.tree_paths(boxes, namespace="deep")
        out = oxtree.tree_map(lambda x: OTHER, boxes, namespace="deep")
        for _ in range(d):
            out = out.child
        return (
            leaves == [LEAF] and paths == [("child",) * d] and out is OTHER and s.num_nodes == d + 1
        )

    def mixed_kinds() -> bool:
        wrappers = [
            lambda x: (x,),
            lambda x: {"k": x},
            lambda x: Pt(x, None),
            lambda x: OrderedDict(a=x),
            lambda x: defaultdict(list, {0: x}),
            lambda x: deque([x]),
        ]
        deep_mixed = LEAF
        for level in range(d):
            deep_mixed = wrappers[level % len(wrappers)](deep_mixed)
        leaves, s = oxtree.tree_flatten(deep_mixed)
        rebuilt = s.unflatten(leaves)
        return (
            leaves == [LEAF]
            and s.flatten_up_to(rebuilt) == [LEAF]
            and pickle.loads(pickle.dumps(s)) == s
            and oxtree.treespec_from_json(oxtree.treespec_to_json(s), types=[Pt]) == s
        )

    def partial_chain() -> bool:
        p = oxtree.Partial(print, tree)
        leaves, s = oxtree.tree_flatten(p)
        return leaves == [LEAF] and s.num_nodes > d

    # -- the JAX faces
    def jax_flatten() -> bool:
        leaves, treedef = tu.tree_flatten(tree)
        return (
            leaves == [LEAF]
            and is_chain(tu.tree_unflatten(treedef, [OTHER]), d, OTHER)
            and tu.tree_leaves(tree) == [LEAF]
            and tu.tree_structure(tree) == treedef
            and is_chain(tu.tree_map(lambda x: OTHER, tree), d, OTHER)
            and not tu.treedef_is_leaf(treedef)
            and len(tu.treedef_children(treedef)) == 1
            and tu.treedef_tuple([treedef]).num_leaves == 1
            and tu.all_leaves([tree]) is False
        )

    def jax_paths() -> bool:
        ((path, leaf),) = tu.tree_flatten_with_path(tree)[0]
        out = tu.tree_map_with_path(lambda p, x: len(p), tree)
        return (
            len(path) == d
            and leaf is LEAF
            and tu.tree_leaves_with_path(tree)[0][0] == path
            and bottom(out, d) == d
        )

    def jax_ops() -> bool:
        nums = chain(d, 3)
        a, b = tu.tree_transpose(tu.tree_structure(tree), tu.tree_structure((0, 0)), pair_tree)
        return (
            tu.tree_reduce(operator.add, nums) == 3
            and tu.tree_reduce_associative(operator.add, nums) == 3
            and tu.tree_all(nums)
            and is_chain(a, d, LEAF)
            and is_chain(b, d, OTHER)
            and is_chain(tu.tree_broadcast(LEAF, twin), d, LEAF)
        )

    def jax_one_level() -> bool:
        children, _ = tu.flatten_one_level(tree)
        keyed, _ = tu.flatten_one_level_with_keys(tree)
        return next(iter(children)) is tree[0] and len(list(keyed)) == 1

    def jax_treedef_methods() -> bool:
        treedef = tu.tree_structure(tree)
        back = tu.PyTreeDef.deserialize_using_proto(
            tu.default_registry, treedef.serialize_using_proto()
        )
        return back == treedef and is_chain(treedef.from_iterable_tree(tree), d, LEAF)

    def jax_tree_module() -> bool:
        t = oxtree.tree
        leaves, treedef = t.flatten(tree)
        a, b = t.transpose(t.structure(tree), t.structure((0, 0)), pair_tree)
        return (
            leaves == [LEAF]
            and is_chain(t.unflatten(treedef, [OTHER]), d, OTHER)
            and t.leaves(tree) == [LEAF]
            and is_chain(t.map(lambda x: OTHER, tree), d, OTHER)
            and len(t.flatten_with_path(tree)[0][0][0]) == d
            and len(t.leaves_with_path(tree)[0][0]) == d
            and bottom(t.map_with_path(lambda p, x: len(p), tree), d) == d
            and t.reduce(operator.add, chain(d, 3)) == 3
            and t.reduce_associative(operator.add, chain(d, 3)) == 3
            and t.all(chain(d, 3))
            and is_chain(t.broadcast(LEAF, twin), d, LEAF)
            and is_chain(a, d, LEAF)
            and is_chain(b, d, OTHER)
        )

    def pretty_functions() -> bool:
        text = oxtree.pformat(tree)
        out = io.StringIO()
        oxtree.pprint(tree, file=out)
        summary = oxtree.summary(tree)
        diff = oxtree.tree_diff(tree, twin)
        view = oxtree.view(tree)
        return (
            bool(text)
            and bool(out.getvalue())
            and bool(summary)
            and diff is not None
            and view is not None
        )

    table: dict[str, tuple[tuple[str, ...], Callable[[], Any]]] = {
        "tree_flatten_with_path": (("tree_flatten_with_path",), paths_check),
        "tree_paths": (("tree_paths",), lambda: oxtree.tree_paths(tree) == [(0,) * d]),
        "tree_leaves_with_path": (("tree_leaves_with_path",), leaves_with_path),
        "tree_map_with_path": (("tree_map_with_path",), map_with_path),
        "tree_map_with_path_": (("tree_map_with_path_",), map_with_path_),
        "tree_accessors": (("tree_accessors", "PyTreeAccessor.path"), accessors),
        "accessor_text": (("PyTreeAccessor.codify", "PyTreeAccessor.__call__"), accessor_text),
        "tree_flatten_with_accessor": (("tree_flatten_with_accessor",), flatten_with_accessor),
        "tree_map_with_accessor": (("tree_map_with_accessor",), map_with_accessor),
        "tree_map_with_accessor_": (("tree_map_with_accessor_",), map_with_accessor_),
        "keystr": (("keystr", "tree_util.keystr"), keystr_check),
        "tree_set": (("tree_set",), tree_set),
        "select_by_pattern": (
            tuple(
                f"{face}{n}"
                for face, names in (
                    ("", ("tree_mask", "tree_labels", "tree_set_matching")),
                    ("tree_util.", ("tree_mask", "tree_labels", "tree_set_matching")),
                    ("tree.", ("mask", "labels", "set_matching")),
                )
                for n in names
            ),
            select_by_pattern,
        ),
        "tree_broadcast_prefix": (("tree_broadcast_prefix", "broadcast_prefix"), broadcast_prefix),
        "tree_broadcast_prefix_leaf": (("tree_broadcast_prefix",), broadcast_leaf_prefix),
        "tree_broadcast_common": (("tree_broadcast_common", "broadcast_common"), broadcast_common),
        "tree_broadcast_map": (
            (
                "tree_broadcast_map",
                "tree_broadcast_map_with_path",
                "tree_broadcast_map_with_accessor",
            ),
            broadcast_map,
        ),
        "prefix_errors": (("prefix_errors",), prefix_errors),
        "tree_transpose": (("tree_transpose",), transpose),
        "tree_transpose_map": (
            (
                "tree_transpose_map",
                "tree_transpose_map_with_path",
                "tree_transpose_map_with_accessor",
            ),
            transpose_map,
        ),
        "reductions": (
            (
                "tree_reduce",
                "tree_reduce_associative",
                "tree_sum",
                "tree_max",
                "tree_min",
                "tree_all",
                "tree_any",
            ),
            reductions,
        ),
        "tree_partition": (("tree_partition", "tree_combine"), partition_combine),
        "tree_flatten_one_level": (("tree_flatten_one_level",), one_level),
        "tree_replace_nones": (("tree_replace_nones",), replace_nones),
        "treespec_functions": (
            (
                "treespec_accessors",
                "treespec_child",
                "treespec_children",
                "treespec_entries",
                "treespec_entry",
                "treespec_is_leaf",
                "treespec_is_strict_leaf",
                "treespec_is_one_level",
                "treespec_is_prefix",
                "treespec_is_suffix",
                "treespec_one_level",
                "treespec_paths",
            ),
            treespec_functions,
        ),
        "treespec_transform": (("treespec_transform",), treespec_transform),
        "treespec_constructors": (
            (
                "treespec_tuple",
                "treespec_list",
                "treespec_dict",
                "treespec_ordereddict",
                "treespec_defaultdict",
                "treespec_deque",
                "treespec_from_collection",
                "treespec_namedtuple",
                "treespec_leaf",
                "treespec_none",
            ),
            treespec_constructors,
        ),
        "treespec_structseq": (("treespec_structseq",), structseq_constructor),
        "treespec_json": (("treespec_to_json", "treespec_from_json"), json_round_trip),
        "treespec_from_json_deep_text": (("treespec_from_json",), deep_json_text),
        "all_leaves": (("all_leaves", "tree_is_leaf"), leaves_predicates),
        "spec_methods": (
            tuple(
                f"PyTreeSpec.{m}"
                for m in (
                    "is_leaf",
                    "paths",
                    "accessors",
                    "entries",
                    "entry",
                    "key_paths",
                    "is_prefix",
                    "is_suffix",
                    "broadcast_to_common_suffix",
                    "one_level",
                    "is_one_level",
                    "node_data",
                    "num_children",
                    "kind",
                    "type",
                    "namespace",
                    "none_is_leaf",
                )
            ),
            spec_methods,
        ),
        "spec_order": (("PyTreeSpec.__lt__", "PyTreeSpec.__str__"), spec_order),
        "spec_transform": (("PyTreeSpec.transform",), spec_transform),
        "spec_traverse": (("PyTreeSpec.traverse", "PyTreeSpec.walk"), spec_traverse),
        "spec_to_json": (("PyTreeSpec.to_json",), spec_to_json_method),
        "spec_nodes": (
            ("PyTreeSpec._nodes", "PyTreeSpec._from_nodes", "PyTreeSpec._face"),
            nodes_round_trip,
        ),
        "from_node_data_and_children": (
            ("PyTreeSpec.from_node_data_and_children",),
            from_node_data,
        ),
        "graft": (("PyTreeSpec._graft",), graft),
        "graph_round_trip": (("graph_flatten", "graph_unflatten"), graph_round_trip),
        "graph_cycle": (("graph_flatten", "graph_unflatten"), graph_cycle),
        "graphdef_methods": (
            tuple(
                f"GraphDef.{m}"
                for m in (
                    "num_leaves",
                    "num_roots",
                    "num_refs",
                    "num_nodes",
                    "treespec",
                    "references",
                    "paths",
                    "unflatten",
                    "__reduce__",
                    "__copy__",
                    "__deepcopy__",
                    "__repr__",
                    "__hash__",
                    "__eq__",
                )
            ),
            graphdef_methods,
        ),
        "graph_layout": (("GraphDef._layout",), graph_layout),
        "graph_dict_view": (("graph_to_dict", "graph_from_dict"), graph_dict_view),
        "dataclass_chain": (("dataclasses.dataclass",), dataclass_chain),
        "custom_chain": (("register_pytree_node",), custom_chain),
        "mixed_kinds": (("tree_flatten", "tree_unflatten"), mixed_kinds),
        "partial_chain": (("Partial",), partial_chain),
        "jax_flatten": (
            tuple(
                f"tree_util.{n}"
                for n in (
                    "tree_flatten",
                    "tree_unflatten",
                    "tree_leaves",
                    "tree_structure",
                    "tree_map",
                    "treedef_is_leaf",
                    "treedef_children",
                    "treedef_tuple",
                    "all_leaves",
                )
            ),
            jax_flatten,
        ),
        "jax_paths": (
            (
                "tree_util.tree_flatten_with_path",
                "tree_util.tree_map_with_path",
                "tree_util.tree_leaves_with_path",
            ),
            jax_paths,
        ),
        "jax_ops": (
            tuple(
                f"tree_util.{n}"
                for n in (
                    "tree_reduce",
                    "tree_reduce_associative",
                    "tree_all",
                    "tree_transpose",
                    "tree_broadcast",
                )
            ),
            jax_ops,
        ),
        "jax_one_level": (
            ("tree_util.flatten_one_level", "tree_util.flatten_one_level_with_keys"),
            jax_one_level,
        ),
        "jax_treedef_methods": (
            (
                "PyTreeSpec.serialize_using_proto",
                "PyTreeSpec.deserialize_using_proto",
                "PyTreeSpec.from_iterable_tree",
            ),
            jax_treedef_methods,
        ),
        "jax_tree_module": (
            tuple(
                f"tree.{n}"
                for n in (
                    "flatten",
                    "unflatten",
                    "leaves",
                    "structure",
                    "map",
                    "flatten_with_path",
                    "leaves_with_path",
                    "map_with_path",
                    "reduce",
                    "reduce_associative",
                    "all",
                    "broadcast",
                    "transpose",
                )
            ),
            jax_tree_module,
        ),
    }

    def spec_repr_html() -> bool:
        # The outline is one pre-order walk, so the HTML view is linear in the depth.
        outline = spec._outline()
        return len(outline) == d + 1 and len(spec._repr_html_()) > d

    table["spec_repr_html"] = (("PyTreeSpec._repr_html_", "PyTreeSpec._outline"), spec_repr_html)
    if hasattr(oxtree, "pformat"):
        table["pretty"] = (("pformat", "pprint", "summary", "tree_diff", "view"), pretty_functions)
    return table


def main() -> None:
    args = sys.argv[1:]
    slow_depth = None
    if args and args[0].startswith("--slow-depth="):
        slow_depth = int(args.pop(0).split("=")[1])
    limit, depth = int(args[0]), int(args[1])
    wanted = args[2:]
    if limit:
        sys.setrecursionlimit(limit)
    emit("start", "build")
    tables = {depth: ops(build(depth))}
    emit("done", "build", "ok", "", 0, depth)
    for name in tables[depth]:
        if wanted and name not in wanted:
            continue
        if name == "treespec_from_json_deep_text" and sys.getrecursionlimit() > 100_000:
            continue
        op_depth = slow_depth if slow_depth and name in SLOW else depth
        if op_depth not in tables:
            tables[op_depth] = ops(build(op_depth))
        _, check = tables[op_depth][name]
        emit("start", name)
        began = time.perf_counter()
        try:
            ok = check()
        except BaseException as exc:  # a Rust panic is a BaseException
            outcome, detail = type(exc).__name__, str(exc)[:300]
        else:
            outcome, detail = ("ok" if ok is True else "wrong"), repr(ok)[:300]
        emit("done", name, outcome, detail, round(time.perf_counter() - began, 3), op_depth)
    emit("finished")


if __name__ == "__main__":
    main()
