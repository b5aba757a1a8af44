//! Structural operations on treespecs: prefixes, common suffixes, grafting, one level.

use pyo3::prelude::*;
use pyo3::types::PyList;

use super::{compare, node_vec, Node, Nodes, PyTreeSpec};
use crate::errors::{NodeDataFault, SpecMismatch, TransformFault, TreeError};
use crate::invariant::Invariant;
use crate::kind::Kind;

/// The treespec made by replacing every leaf of `spec` with `inner` (`PyTreeSpec.compose`).
pub fn compose(py: Python<'_>, spec: &PyTreeSpec, inner: &PyTreeSpec) -> PyResult<PyTreeSpec> {
    spec.check_same_options(inner, "PyTreeSpec.compose")?;
    check_same_namespace(&spec.namespace, &inner.namespace, "PyTreeSpecs")?;
    let leaves = spec.root().num_leaves;
    let size = (leaves.checked_mul(inner.nodes.len()))
        .and_then(|n| n.checked_add(spec.nodes.len() - leaves));
    let mut nodes = node_vec(size, "PyTreeSpec.compose")?;
    for (i, node) in spec.nodes.iter().enumerate() {
        if node.kind == Kind::Leaf {
            nodes.extend_copy(py, &inner.nodes, 0..inner.nodes.len());
        } else {
            nodes.push_copy(py, &spec.nodes, i).set_counts(
                node.num_leaves * inner.num_leaves(),
                node.num_nodes + node.num_leaves * (inner.root().num_nodes - 1),
            );
        }
    }
    let namespace = if spec.namespace.is_empty() {
        &inner.namespace
    } else {
        &spec.namespace
    };
    if spec.namespace != inner.namespace {
        check_merged_registrations(py, &nodes, namespace, "merged")?;
    }
    Ok(PyTreeSpec::new(nodes, spec.none_is_leaf, namespace.clone()).with_face(spec.face))
}

/// When node `y` can stand where node `x` is, the position in `y` of each of `x`'s children.
/// optree's rules let the three mapping kinds stand for each other when their keys agree
/// (children then pair by key) and deques differ in maxlen; JAX's want the same node.
fn matching_children(
    py: Python<'_>,
    face: crate::face::Face,
    x: &Node,
    y: &Node,
) -> PyResult<Option<Vec<usize>>> {
    if compare::same_node(py, x, y)? {
        return Ok(Some((0..x.arity).collect()));
    }
    if face.rules().mappings_match_exactly || x.arity != y.arity {
        return Ok(None);
    }
    if x.kind == Kind::Deque && y.kind == Kind::Deque {
        return Ok(Some((0..x.arity).collect()));
    }
    if x.kind.is_mapping() && y.kind.is_mapping() {
        let (Some(xk), Some(yk)) = (x.keys(), y.keys()) else {
            return Ok(None);
        };
        let index = pyo3::types::PyDict::new(py);
        for (k, key) in yk.bind(py).iter().enumerate() {
            index.set_item(key, k)?;
        }
        let mut order = Vec::with_capacity(x.arity);
        for key in xk.bind(py).iter() {
            match index.get_item(key)? {
                Some(k) => order.push(k.extract::<usize>()?),
                None => return Ok(None),
            }
        }
        return Ok(Some(order));
    }
    Ok(None)
}

/// The error for treespecs with no common suffix: the first difference in optree's order
/// (it compares the rightmost children first), found again on this cold path; `found` is
/// the one the left-to-right walk met.
#[cold]
#[inline(never)]
fn suffix_mismatch(
    py: Python<'_>,
    a: &PyTreeSpec,
    b: &PyTreeSpec,
    found: (usize, usize),
) -> PyResult<PyErr> {
    let mut pairs = vec![(a.nodes.len() - 1, b.nodes.len() - 1)];
    let mut first = found;
    while let Some((i, j)) = pairs.pop() {
        let (x, y) = (&a.nodes[i], &b.nodes[j]);
        if x.kind == Kind::Leaf || y.kind == Kind::Leaf {
            continue;
        }
        let Some(order) = matching_children(py, a.face, x, y)? else {
            first = (i, j);
            break;
        };
        let theirs = b.child_indices(j);
        // Left to right onto the stack: the rightmost pair is compared first.
        pairs.extend(
            a.child_indices(i)
                .into_iter()
                .zip(order.into_iter().map(|k| theirs[k])),
        );
    }
    let (i, j) = first;
    let (x, y) = (&a.nodes[i], &b.nodes[j]);
    Ok(TreeError::SpecStructure {
        mismatch: spec_mismatch(py, x, y)?,
        expected: super::traverse::expected_of(py, x),
        got: super::traverse::expected_of(py, y),
        path: Some(a.path_to(py, i, "tree")),
    }
    .into())
}

/// How node `y` differs from node `x` where it cannot stand for it, in the order optree
/// checks (kind, then arity or keys, then type, then aux data).
#[cold]
fn spec_mismatch(py: Python<'_>, x: &Node, y: &Node) -> PyResult<SpecMismatch> {
    let same_kind = x.kind == y.kind || (x.kind.is_mapping() && y.kind.is_mapping());
    Ok(if !same_kind {
        SpecMismatch::Kind
    } else if x.kind.is_mapping() {
        SpecMismatch::Keys
    } else if x.kind == Kind::Custom {
        let same_type = match (x.custom(), y.custom()) {
            (Some(a), Some(b)) => a.ty.is(&b.ty),
            _ => false,
        };
        if !same_type {
            SpecMismatch::CustomType
        } else if x.arity != y.arity {
            SpecMismatch::Arity
        } else {
            SpecMismatch::Data
        }
    } else if x.arity != y.arity {
        SpecMismatch::Arity
    } else if matches!(x.kind, Kind::NamedTuple | Kind::StructSeq) {
        SpecMismatch::Type
    } else {
        // Same kind and arity: only JAX's stricter node comparison gets here (a deque's
        // maxlen, say); report it as a difference of node data.
        let _ = py;
        SpecMismatch::Data
    })
}

/// Whether `a` is a prefix of `b`: `b` is `a` with some leaves replaced by subtrees.
pub fn is_prefix(py: Python<'_>, a: &PyTreeSpec, b: &PyTreeSpec, strict: bool) -> PyResult<bool> {
    Ok(match prefix_leaf_places(py, a, b)? {
        None => false,
        Some(places) => !strict || places.iter().any(|&j| b.nodes[j].kind != Kind::Leaf),
    })
}

/// When `a` is a prefix of `b`, the index in `b` of the node at the place of each leaf of
/// `a`, left to right (the root of the subtree of `b` that leaf stands for); None otherwise.
pub fn prefix_leaf_places(
    py: Python<'_>,
    a: &PyTreeSpec,
    b: &PyTreeSpec,
) -> PyResult<Option<Vec<usize>>> {
    if a.none_is_leaf != b.none_is_leaf || a.face != b.face {
        return Ok(None);
    }
    let mut pairs = vec![(a.nodes.len() - 1, b.nodes.len() - 1)];
    let mut places = Vec::with_capacity(a.num_leaves());
    while let Some((i, j)) = pairs.pop() {
        let (x, y) = (&a.nodes[i], &b.nodes[j]);
        if x.kind == Kind::Leaf {
            places.push((i, j));
            continue;
        }
        let Some(order) = matching_children(py, a.face, x, y)? else {
            return Ok(None);
        };
        let theirs = b.child_indices(j);
        pairs.extend(
            a.child_indices(i)
                .into_iter()
                .zip(order.into_iter().map(|k| theirs[k])),
        );
    }
    // Post-order numbers a treespec's leaves left to right.
    places.sort_unstable();
    Ok(Some(places.into_iter().map(|(_, j)| j).collect()))
}

/// The treespec both `a` and `b` are prefixes of, the smallest such: where one has a leaf,
/// the other's subtree.
pub fn common_suffix(py: Python<'_>, a: &PyTreeSpec, b: &PyTreeSpec) -> PyResult<PyTreeSpec> {
    if a.none_is_leaf != b.none_is_leaf {
        return Err(TreeError::NoneIsLeafDiffers {
            op: "broadcast_to_common_suffix",
            values: None,
        }
        .into());
    }
    let namespace = pick_namespace(&a.namespace, &b.namespace)?;
    if a.namespace != b.namespace {
        // The result's nodes come from both: checked before the walk, as optree checks.
        check_merged_registrations(py, &a.nodes, &namespace, "merged")?;
        check_merged_registrations(py, &b.nodes, &namespace, "merged")?;
    }
    // Post-order output from a pre-order walk: emit each node after its children, by pushing
    // an "emit" marker before the children.
    enum Task {
        Visit(usize, usize),
        Emit(usize, usize, usize),
    }
    let mut out = Nodes::new();
    let mut leaves = 0;
    let mut tasks = vec![Task::Visit(a.nodes.len() - 1, b.nodes.len() - 1)];
    while let Some(task) = tasks.pop() {
        match task {
            Task::Visit(i, j) => {
                let (x, y) = (&a.nodes[i], &b.nodes[j]);
                if x.kind == Kind::Leaf {
                    leaves += y.num_leaves;
                    out.append(std::mem::take(&mut b.subtree(py, j).nodes));
                } else if y.kind == Kind::Leaf {
                    leaves += x.num_leaves;
                    out.append(std::mem::take(&mut a.subtree(py, i).nodes));
                } else {
                    let Some(order) = matching_children(py, a.face, x, y)? else {
                        return Err(suffix_mismatch(py, a, b, (i, j))?);
                    };
                    tasks.push(Task::Emit(i, out.len(), leaves));
                    let theirs = b.child_indices(j);
                    for (ci, k) in a.child_indices(i).into_iter().zip(order).rev() {
                        tasks.push(Task::Visit(ci, theirs[k]));
                    }
                }
            }
            Task::Emit(i, start, leaves_before) => {
                let num_nodes = out.len() - start + 1;
                out.push_copy(py, &a.nodes, i)
                    .set_counts(leaves - leaves_before, num_nodes);
            }
        }
    }
    if a.face != b.face {
        return Err(TreeError::FacesDiffer {
            op: "broadcast_to_common_suffix",
        }
        .into());
    }
    Ok(PyTreeSpec::new(out, a.none_is_leaf, namespace).with_face(a.face))
}

fn pick_namespace(a: &str, b: &str) -> PyResult<String> {
    match (a.is_empty(), b.is_empty()) {
        (true, _) => Ok(b.to_owned()),
        (_, true) => Ok(a.to_owned()),
        _ if a == b => Ok(a.to_owned()),
        _ => Err(TreeError::NamespacesDiffer {
            a: a.to_owned(),
            b: b.to_owned(),
        }
        .into()),
    }
}

/// optree's check that two treespecs (`subject`, as its messages name them) merged into one
/// have one namespace, or an empty one that adopts the other's.
pub fn check_same_namespace(a: &str, b: &str, subject: &'static str) -> PyResult<()> {
    if a.is_empty() || b.is_empty() || a == b {
        return Ok(());
    }
    Err(TreeError::SameNamespace {
        subject,
        a: a.to_owned(),
        b: b.to_owned(),
    }
    .into())
}

/// optree's guard for treespecs merged into one namespace: when the result's `namespace`
/// is not every input's, each custom node must still resolve there to the registration it
/// holds (a node made in the global namespace may meet a type the namespace registers
/// otherwise). `what` completes "PyTreeSpecs cannot be ...".
pub fn check_merged_registrations(
    py: Python<'_>,
    nodes: &[Node],
    namespace: &str,
    what: &'static str,
) -> PyResult<()> {
    if namespace.is_empty() {
        return Ok(());
    }
    let mut reg = None;
    for node in nodes {
        let Some(held) = node.custom() else { continue };
        let reg = reg.get_or_insert_with(crate::registry::snapshot);
        let found = reg.lookup(held.ty.as_ptr().cast(), namespace);
        if !found.is_some_and(|f| std::ptr::eq(std::sync::Arc::as_ptr(f), held)) {
            return Err(TreeError::StaleRegistration {
                what,
                ty: held.ty.bind(py).repr()?.to_string(),
                namespace: namespace.to_owned(),
            }
            .into());
        }
    }
    Ok(())
}

/// `spec` with its `i`-th leaf replaced by `inner[i]`, for every leaf.
pub fn graft(
    py: Python<'_>,
    spec: &PyTreeSpec,
    inner: &[PyRef<'_, PyTreeSpec>],
) -> PyResult<PyTreeSpec> {
    if inner.len() != spec.num_leaves() {
        return Err(TreeError::ComposeCount {
            expected: spec.num_leaves(),
            got: inner.len(),
        }
        .into());
    }
    let mut namespace = spec.namespace.clone();
    for s in inner {
        if s.none_is_leaf != spec.none_is_leaf {
            return Err(TreeError::ComposeNoneIsLeaf {
                none_is_leaf: spec.none_is_leaf,
            }
            .into());
        }
        namespace = pick_namespace(&namespace, &s.namespace)?;
    }
    let merged = spec.namespace != namespace || inner.iter().any(|s| s.namespace != namespace);
    // Each node's counts grow by what its leaves became: track, per open subtree, the
    // number of nodes and leaves emitted since it started, in post-order.
    let size = inner
        .iter()
        .try_fold(spec.nodes.len() - spec.num_leaves(), |n, s| {
            n.checked_add(s.nodes.len())
        });
    let mut out = super::node_vec(size, "graft")?;
    let mut pending: Vec<(usize, usize)> = Vec::new();
    let mut next = 0;
    for (i, node) in spec.nodes.iter().enumerate() {
        if node.kind == Kind::Leaf {
            let sub = &inner[next];
            next += 1;
            out.extend_copy(py, &sub.nodes, 0..sub.nodes.len());
            pending.push((sub.num_leaves(), sub.nodes.len()));
        } else {
            let (mut leaves, mut count) = (0, 1);
            for _ in 0..node.arity {
                let (l, c) = pending
                    .pop()
                    .invariant("a node with more children than the nodes before it")?;
                leaves += l;
                count += c;
            }
            out.push_copy(py, &spec.nodes, i).set_counts(leaves, count);
            pending.push((leaves, count));
        }
    }
    if merged {
        check_merged_registrations(py, &out, &namespace, "composed into a collection")?;
    }
    Ok(PyTreeSpec::new(out, spec.none_is_leaf, namespace).with_face(spec.face))
}

/// The root node with a leaf for each child, or None for a leaf.
pub fn one_level(py: Python<'_>, spec: &PyTreeSpec) -> Option<PyTreeSpec> {
    one_level_at(py, spec, spec.nodes.len() - 1)
}

/// Node `idx` alone, with a leaf for each child; None for a leaf.
pub fn one_level_at(py: Python<'_>, spec: &PyTreeSpec, idx: usize) -> Option<PyTreeSpec> {
    let root = &spec.nodes[idx];
    if root.kind == Kind::Leaf {
        return None;
    }
    let mut nodes: Nodes = (0..root.arity)
        .map(|_| Node::LEAF)
        .collect::<Vec<_>>()
        .into();
    nodes
        .push_copy(py, &spec.nodes, idx)
        .set_counts(root.arity, root.arity + 1);
    Some(spec.derive(nodes))
}

/// optree's `transform`: bottom up, each leaf becomes `f_leaf(leaf spec)` and each node
/// `f_node(its one-level spec)` with the transformed children grafted onto its leaves.
pub fn transform(
    py: Python<'_>,
    spec: &PyTreeSpec,
    f_node: Option<&Bound<'_, PyAny>>,
    f_leaf: Option<&Bound<'_, PyAny>>,
) -> PyResult<PyTreeSpec> {
    // The input a function was given, for messages: the leaf or the node's one level.
    let input = |idx: usize| -> PyResult<String> {
        match one_level_at(py, spec, idx) {
            Some(one) => super::repr::repr(&one, py),
            None => super::repr::repr(&spec.derive(vec![Node::LEAF].into()), py),
        }
    };
    let call = |f: &Bound<'_, PyAny>, arg: PyTreeSpec, idx: usize| -> PyResult<Py<PyTreeSpec>> {
        let out = f.call1((arg,))?;
        match out.cast_into::<PyTreeSpec>() {
            Ok(s) => Ok(s.unbind()),
            Err(e) => Err(TreeError::TransformResult {
                fault: TransformFault::NotASpec { input: input(idx)? },
                got: e.into_inner().repr()?.to_string(),
            }
            .into()),
        }
    };
    // One post-order pass writing the result's nodes straight into `out`: a finished subtree's
    // nodes are contiguous there, so a node only needs its children's leaf and node counts
    // (`pending`), never a copy of their nodes (copying made deep chains quadratic).
    let mut out = Nodes::with_capacity(spec.nodes.len());
    let mut pending: Vec<(usize, usize)> = Vec::new();
    // optree's rule: the input's namespace, else the first one a result names; every result
    // naming one must name that one.
    let mut namespace = spec.namespace.clone();
    // Whether some result's namespace differs from the input's (then the guard runs).
    let mut merged = false;
    let mut face = spec.face;
    let mut check = |s: &PyTreeSpec, idx: usize| -> PyResult<()> {
        if s.none_is_leaf != spec.none_is_leaf {
            return Err(TreeError::TransformResult {
                fault: TransformFault::NoneIsLeaf {
                    none_is_leaf: spec.none_is_leaf,
                    input: input(idx)?,
                },
                got: super::repr::repr(s, py)?,
            }
            .into());
        }
        if !s.namespace.is_empty() && s.namespace != namespace {
            if !namespace.is_empty() {
                return Err(TreeError::TransformResult {
                    fault: TransformFault::Namespace {
                        expected: pyo3::types::PyString::new(py, &namespace)
                            .repr()?
                            .to_string(),
                    },
                    got: pyo3::types::PyString::new(py, &s.namespace)
                        .repr()?
                        .to_string(),
                }
                .into());
            }
            namespace.clone_from(&s.namespace);
        }
        merged |= s.namespace != spec.namespace;
        Ok(())
    };
    for (idx, node) in spec.nodes.iter().enumerate() {
        if node.kind == Kind::Leaf {
            let leaf = spec.derive(vec![Node::LEAF].into());
            let got = match f_leaf {
                Some(f) => call(f, leaf, idx)?,
                None => Py::new(py, leaf)?,
            };
            let got = got.bind(py).get();
            check(got, idx)?;
            face = got.face;
            super::reserve_nodes(&mut out, Some(got.nodes.len()), "transform")?;
            out.extend_copy(py, &got.nodes, 0..got.nodes.len());
            pending.push((got.num_leaves(), got.nodes.len()));
            continue;
        }
        let one = one_level_at(py, spec, idx).invariant("a one-level view of a non-leaf node")?;
        let shape = match f_node {
            Some(f) => call(f, one, idx)?,
            None => Py::new(py, one)?,
        };
        let s = shape.bind(py).get();
        check(s, idx)?;
        if s.num_leaves() != node.arity {
            return Err(TreeError::TransformResult {
                fault: TransformFault::Arity {
                    arity: node.arity,
                    input: input(idx)?,
                },
                got: super::repr::repr(s, py)?,
            }
            .into());
        }
        if s.nodes.len() != node.arity + 1 {
            return Err(TreeError::TransformResult {
                fault: TransformFault::NotOneLevel { input: input(idx)? },
                got: super::repr::repr(s, py)?,
            }
            .into());
        }
        face = s.face;
        let (mut leaves, mut count) = (0, 1);
        for (l, c) in pending.drain(pending.len() - node.arity..) {
            leaves += l;
            count += c;
        }
        out.push_copy(py, &s.nodes, s.nodes.len() - 1)
            .set_counts(leaves, count);
        pending.push((leaves, count));
    }
    if merged {
        check_merged_registrations(py, &out, &namespace, "transformed")?;
    }
    Ok(PyTreeSpec::new(out, spec.none_is_leaf, namespace).with_face(face))
}

/// A JAX-face treedef from JAX's node data (`(type, data)`, or None for a leaf) and children.
pub fn from_jax_node_data(
    py: Python<'_>,
    node_data: &Bound<'_, PyAny>,
    children: &[PyRef<'_, PyTreeSpec>],
) -> PyResult<PyTreeSpec> {
    use pyo3::types::{PyDict, PyTuple, PyType};
    let bad = |fault: NodeDataFault| -> PyErr { TreeError::FromNodeData(fault).into() };
    let leaf = || {
        PyTreeSpec::new(vec![Node::LEAF].into(), false, String::new())
            .with_face(crate::face::Face::Jax)
    };
    if node_data.is_none() {
        if !children.is_empty() {
            return Err(bad(NodeDataFault::LeafChildren));
        }
        return Ok(leaf());
    }
    let pair = node_data
        .cast::<PyTuple>()
        .map_err(|_| bad(NodeDataFault::NotAPair))?;
    if pair.len() != 2 {
        return Err(bad(NodeDataFault::NotAPair));
    }
    let ty = pair.get_item(0)?;
    let ty = ty
        .cast::<PyType>()
        .map_err(|_| bad(NodeDataFault::NotAType))?;
    let data = pair.get_item(1)?;
    let arity = children.len();
    let c = crate::types::collections(py);
    let is = |t: &Bound<'_, PyType>| ty.is(t);
    // A custom node's registration, held by its treespec's nodes.
    let mut registration = None;
    let mut node = if is(&py.get_type::<PyTuple>()) {
        Node::bare(Kind::Tuple, arity, 0, 0)
    } else if is(&py.get_type::<PyList>()) {
        Node::bare(Kind::List, arity, 0, 0)
    } else if is(&py.None().bind(py).get_type()) {
        if arity != 0 {
            return Err(bad(NodeDataFault::NoneChildren { arity }));
        }
        Node::bare(Kind::None, 0, 0, 0)
    } else if is(&py.get_type::<PyDict>())
        || is(c.ordered_dict.bind(py))
        || is(c.default_dict.bind(py))
    {
        let (kind, keys, factory) = if is(&py.get_type::<PyDict>()) {
            (Kind::Dict, data.clone(), None)
        } else if is(c.ordered_dict.bind(py)) {
            (Kind::OrderedDict, data.clone(), None)
        } else {
            let fk = data
                .cast::<PyTuple>()
                .map_err(|_| bad(NodeDataFault::DefaultDictData))?;
            (Kind::DefaultDict, fk.get_item(1)?, Some(fk.get_item(0)?))
        };
        let keys = super::flatten::iter_to_list(&keys)?;
        if keys.len() != arity {
            return Err(bad(NodeDataFault::KeyCount {
                keys: keys.len(),
                arity,
            }));
        }
        let distinct = pyo3::types::PySet::new(py, keys.iter())
            .map_err(|_| bad(NodeDataFault::UnhashableKeys))?;
        if distinct.len() != arity {
            return Err(bad(NodeDataFault::RepeatedKeys {
                keys: crate::errors::short_repr(&keys, 80),
            }));
        }
        let mut n = Node::bare(kind, arity, 0, 0);
        if kind != Kind::OrderedDict {
            let sorted = super::dict_order::sort_keys(&keys, true)?;
            if !sorted.iter().zip(keys.iter()).all(|(a, b)| a.is(&b)) {
                return Err(bad(NodeDataFault::UnsortedKeys));
            }
        }
        n.set_keys(Some(keys.unbind()));
        n.data = factory.map(Bound::unbind);
        n
    } else if crate::types::is_namedtuple_class(ty) {
        let fields = crate::types::field_names(ty, Kind::NamedTuple)?.len();
        if fields != arity {
            return Err(bad(NodeDataFault::Fields {
                ty: ty.name()?.to_string(),
                fields,
                arity,
            }));
        }
        let mut n = Node::bare(Kind::NamedTuple, arity, 0, 0);
        n.data = Some(ty.clone().into_any().unbind());
        n
    } else {
        let reg = crate::registry::snapshot();
        // The JAX face: a type JAX registers is a node here as in its walks.
        let found = match reg.lookup(ty.as_ptr().cast(), "") {
            Some(found) => Some(found.clone()),
            None => crate::jax_registry::lookup_for_load(ty)?,
        };
        let found = found.ok_or_else(|| {
            bad(NodeDataFault::NotRegistered {
                ty: ty.name().map(|n| n.to_string()).unwrap_or_default(),
            })
        })?;
        if let Some(why) = super::custom::misfit(py, &found, arity, &data, None) {
            return Err(bad(NodeDataFault::Misfit { why }));
        }
        let mut n = Node::bare(Kind::Custom, arity, 0, 0);
        n.data = Some(data.unbind());
        registration = Some(found);
        n
    };
    node.num_leaves = arity;
    node.num_nodes = arity + 1;
    let mut nodes: Nodes = (0..arity).map(|_| Node::LEAF).collect::<Vec<_>>().into();
    match &registration {
        Some(reg) => nodes.push_custom(node, reg),
        None => nodes.push(node),
    }
    let shape = PyTreeSpec::new(nodes, false, String::new()).with_face(crate::face::Face::Jax);
    graft(py, &shape, children)
}
