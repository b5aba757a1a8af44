//! Structural operations on treespecs: prefixes, common suffixes, grafting, one level.

use pyo3::prelude::*;
use pyo3::types::PyList;

use super::{compare, Node, PyTreeSpec};
use crate::errors::TreeError;
use crate::kind::Kind;

/// optree's node data of a node: None for sequences and None, the key list for mappings,
/// `(factory, keys)` for a defaultdict, the maxlen of a deque, the type of a namedtuple or
/// struct sequence, the aux data of a custom node.
pub fn node_data<'py>(py: Python<'py>, node: &Node) -> PyResult<Bound<'py, PyAny>> {
    let keys = || -> Bound<'py, PyAny> {
        match &node.keys {
            Some(k) => k.bind(py).get_slice(0, k.bind(py).len()).into_any(),
            None => PyList::empty(py).into_any(),
        }
    };
    let data = || {
        node.data
            .as_ref()
            .map(|d| d.bind(py).clone())
            .unwrap_or_else(|| py.None().into_bound(py))
    };
    Ok(match node.kind {
        Kind::Leaf | Kind::None | Kind::Tuple | Kind::List => py.None().into_bound(py),
        Kind::Dict | Kind::OrderedDict => keys(),
        Kind::DefaultDict => (data(), keys()).into_pyobject(py)?.into_any(),
        Kind::Deque | Kind::NamedTuple | Kind::StructSeq | Kind::Custom => data(),
    })
}

/// Whether `a` is a prefix of `b`: `b` is `a` with some leaves replaced by subtrees.
pub fn is_prefix(py: Python<'_>, a: &PyTreeSpec, b: &PyTreeSpec, strict: bool) -> PyResult<bool> {
    if a.none_is_leaf != b.none_is_leaf {
        return Ok(false);
    }
    let mut pairs = vec![(a.nodes.len() - 1, b.nodes.len() - 1)];
    let mut proper = false;
    while let Some((i, j)) = pairs.pop() {
        let (x, y) = (&a.nodes[i], &b.nodes[j]);
        if x.kind == Kind::Leaf {
            proper |= y.kind != Kind::Leaf;
            continue;
        }
        if !compare::same_node(py, x, y)? {
            return Ok(false);
        }
        pairs.extend(a.child_indices(i).into_iter().zip(b.child_indices(j)));
    }
    Ok(!strict || proper)
}

/// The treespec both `a` and `b` are prefixes of, the smallest such: where one has a leaf,
/// the other's subtree.
pub fn common_suffix(py: Python<'_>, a: &PyTreeSpec, b: &PyTreeSpec) -> PyResult<PyTreeSpec> {
    if a.none_is_leaf != b.none_is_leaf {
        return Err(TreeError::Value(
            "broadcast_to_common_suffix: the treespecs disagree on none_is_leaf".into(),
        )
        .into());
    }
    // Post-order output from a pre-order walk: emit each node after its children, by pushing
    // an "emit" marker before the children.
    enum Task {
        Visit(usize, usize),
        Emit(usize, usize, usize),
    }
    let mut out: Vec<Node> = Vec::new();
    let mut leaves = 0;
    let mut tasks = vec![Task::Visit(a.nodes.len() - 1, b.nodes.len() - 1)];
    while let Some(task) = tasks.pop() {
        match task {
            Task::Visit(i, j) => {
                let (x, y) = (&a.nodes[i], &b.nodes[j]);
                if x.kind == Kind::Leaf {
                    leaves += y.num_leaves;
                    out.extend(b.subtree(py, j).nodes);
                } else if y.kind == Kind::Leaf {
                    leaves += x.num_leaves;
                    out.extend(a.subtree(py, i).nodes);
                } else {
                    if !compare::same_node(py, x, y)? {
                        return Err(TreeError::Mismatch {
                            path: a.path_to(py, i, "tree"),
                            expected: super::traverse::describe_node(py, x),
                            got: super::traverse::describe_node(py, y),
                            which: Some("the other treespec".into()),
                        }
                        .into());
                    }
                    tasks.push(Task::Emit(i, out.len(), leaves));
                    for (ci, cj) in a.child_indices(i).into_iter().zip(b.child_indices(j)).rev() {
                        tasks.push(Task::Visit(ci, cj));
                    }
                }
            }
            Task::Emit(i, start, leaves_before) => {
                let mut node = a.nodes[i].clone_ref(py);
                node.num_nodes = out.len() - start + 1;
                node.num_leaves = leaves - leaves_before;
                out.push(node);
            }
        }
    }
    Ok(PyTreeSpec::new(
        out,
        a.none_is_leaf,
        pick_namespace(&a.namespace, &b.namespace)?,
    ))
}

fn pick_namespace(a: &str, b: &str) -> PyResult<String> {
    match (a.is_empty(), b.is_empty()) {
        (true, _) => Ok(b.to_owned()),
        (_, true) => Ok(a.to_owned()),
        _ if a == b => Ok(a.to_owned()),
        _ => Err(TreeError::Value(format!(
            "the treespecs come from different namespaces ({a:?} and {b:?})"
        ))
        .into()),
    }
}

/// `spec` with its `i`-th leaf replaced by `inner[i]`, for every leaf.
pub fn graft(
    py: Python<'_>,
    spec: &PyTreeSpec,
    inner: &[PyRef<'_, PyTreeSpec>],
) -> PyResult<PyTreeSpec> {
    if inner.len() != spec.num_leaves() {
        return Err(TreeError::Value(format!(
            "expected {} treespecs, one for each leaf, got {}",
            spec.num_leaves(),
            inner.len()
        ))
        .into());
    }
    let mut namespace = spec.namespace.clone();
    for s in inner {
        if s.none_is_leaf != spec.none_is_leaf {
            return Err(TreeError::Value(format!(
                "expected treespecs with none_is_leaf={}",
                if spec.none_is_leaf { "True" } else { "False" }
            ))
            .into());
        }
        namespace = pick_namespace(&namespace, &s.namespace)?;
    }
    // Each node's counts grow by what its leaves became: track, per open subtree, the
    // number of nodes and leaves emitted since it started, in post-order.
    let mut out: Vec<Node> = Vec::new();
    let mut pending: Vec<(usize, usize)> = Vec::new();
    let mut next = 0;
    for node in &spec.nodes {
        if node.kind == Kind::Leaf {
            let sub = &inner[next];
            next += 1;
            out.extend(sub.nodes.iter().map(|n| n.clone_ref(py)));
            pending.push((sub.num_leaves(), sub.nodes.len()));
        } else {
            let mut n = node.clone_ref(py);
            let (mut leaves, mut count) = (0, 1);
            for _ in 0..node.arity {
                let (l, c) = pending.pop().expect("post-order");
                leaves += l;
                count += c;
            }
            n.num_leaves = leaves;
            n.num_nodes = count;
            out.push(n);
            pending.push((leaves, count));
        }
    }
    Ok(PyTreeSpec::new(out, spec.none_is_leaf, namespace))
}

/// The root node with a leaf for each child, or None for a leaf.
pub fn one_level(py: Python<'_>, spec: &PyTreeSpec) -> Option<PyTreeSpec> {
    let root = spec.root();
    if root.kind == Kind::Leaf {
        return None;
    }
    let mut nodes: Vec<Node> = (0..root.arity).map(|_| Node::LEAF).collect();
    let mut top = root.clone_ref(py);
    top.num_leaves = root.arity;
    top.num_nodes = root.arity + 1;
    nodes.push(top);
    Some(PyTreeSpec::new(
        nodes,
        spec.none_is_leaf,
        spec.namespace.clone(),
    ))
}

/// optree's `transform`: bottom up, each leaf becomes `f_leaf(leaf spec)` and each node
/// `f_node(its one-level spec)` with the transformed children grafted onto its leaves.
pub fn transform(
    py: Python<'_>,
    spec: &PyTreeSpec,
    f_node: Option<&Bound<'_, PyAny>>,
    f_leaf: Option<&Bound<'_, PyAny>>,
) -> PyResult<PyTreeSpec> {
    let call = |f: &Bound<'_, PyAny>, arg: PyTreeSpec, what: &str| -> PyResult<Py<PyTreeSpec>> {
        let out = f.call1((arg,))?;
        out.cast_into::<PyTreeSpec>()
            .map(Bound::unbind)
            .map_err(|e| {
                TreeError::Type(format!(
                    "{what} must return a PyTreeSpec, got {}",
                    e.into_inner()
                        .get_type()
                        .name()
                        .map(|n| n.to_string())
                        .unwrap_or_default()
                ))
                .into()
            })
    };
    let mut stack: Vec<Py<PyTreeSpec>> = Vec::new();
    for (idx, node) in spec.nodes.iter().enumerate() {
        if node.kind == Kind::Leaf {
            let leaf = PyTreeSpec::new(vec![Node::LEAF], spec.none_is_leaf, spec.namespace.clone());
            stack.push(match f_leaf {
                Some(f) => call(f, leaf, "f_leaf")?,
                None => Py::new(py, leaf)?,
            });
            continue;
        }
        let children: Vec<Py<PyTreeSpec>> = stack.split_off(stack.len() - node.arity);
        let one = one_level(py, &spec.subtree(py, idx)).expect("not a leaf");
        let shape = match f_node {
            Some(f) => call(f, one, "f_node")?,
            None => Py::new(py, one)?,
        };
        let refs: Vec<PyRef<'_, PyTreeSpec>> =
            children.iter().map(|c| c.bind(py).borrow()).collect();
        let grafted = graft(py, shape.bind(py).get(), &refs)?;
        stack.push(Py::new(py, grafted)?);
    }
    let root = stack.pop().expect("a treespec has a root");
    let root = root.bind(py).get();
    Ok(PyTreeSpec::new(
        root.nodes.iter().map(|n| n.clone_ref(py)).collect(),
        root.none_is_leaf,
        root.namespace.clone(),
    ))
}
