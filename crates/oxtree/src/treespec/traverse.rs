//! Walking another tree against a treespec: `flatten_up_to`, the core of multi-tree map.
//!
//! The walk starts at the root (the last node) and finds each child's node index by stepping
//! left over the sibling subtrees, so it needs no pre-computed child offsets. Children are
//! pushed right to left, so they are popped, and the leaves come out, left to right.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

use super::{Face, Node, PyTreeSpec};
use crate::errors::{short_repr, type_name, TreeError};
use crate::kind::Kind;
use crate::registry::Registry;
use crate::types;

/// The subtrees of `tree` at the places of the leaves of `spec`.
pub fn flatten_up_to<'py>(
    spec: &PyTreeSpec,
    tree: &Bound<'py, PyAny>,
    registry: &Registry,
    which: Option<&str>,
) -> PyResult<Vec<Bound<'py, PyAny>>> {
    let py = tree.py();
    let mut out = Vec::with_capacity(spec.num_leaves());
    let mut stack: Vec<(Bound<'py, PyAny>, usize)> = vec![(tree.clone(), spec.nodes.len() - 1)];
    let mut children: Vec<Bound<'py, PyAny>> = Vec::new();
    while let Some((obj, idx)) = stack.pop() {
        let node = &spec.nodes[idx];
        match node.kind {
            Kind::Leaf => {
                out.push(obj);
                continue;
            }
            Kind::None => {
                if !obj.is_none() {
                    return Err(mismatch(spec, py, idx, &obj, which, tree, registry));
                }
                continue;
            }
            _ => {}
        }
        children.clear();
        if !node_children(py, node, &obj, registry, spec.face, &mut children)? {
            return Err(mismatch(spec, py, idx, &obj, which, tree, registry));
        }
        // Push right to left, so the leftmost child is walked first.
        let mut child_idx = idx - 1;
        for child in children.drain(..).rev() {
            stack.push((child, child_idx));
            child_idx = child_idx.wrapping_sub(spec.nodes[child_idx].num_nodes);
        }
    }
    Ok(out)
}

/// Collects the children of `obj` for `node`, in leaf order. Returns false when `obj` does
/// not have the node's type or shape.
fn node_children<'py>(
    py: Python<'py>,
    node: &Node,
    obj: &Bound<'py, PyAny>,
    registry: &Registry,
    face: Face,
    out: &mut Vec<Bound<'py, PyAny>>,
) -> PyResult<bool> {
    let same_type = |data: &Option<Py<PyAny>>| {
        data.as_ref()
            .is_some_and(|t| obj.get_type().as_ptr() == t.as_ptr())
    };
    match node.kind {
        Kind::Tuple | Kind::NamedTuple | Kind::StructSeq => {
            let ok = match node.kind {
                Kind::Tuple => obj.is_exact_instance_of::<PyTuple>(),
                _ => same_type(&node.data),
            };
            if !ok {
                return Ok(false);
            }
            // SAFETY: all three kinds are tuples (exactly, or subclasses checked above).
            let t = unsafe { obj.cast_unchecked::<PyTuple>() };
            if t.len() != node.arity {
                return Ok(false);
            }
            out.extend(t.iter());
        }
        Kind::List => {
            let Ok(l) = obj.cast_exact::<PyList>() else {
                return Ok(false);
            };
            if l.len() != node.arity {
                return Ok(false);
            }
            out.extend(l.iter());
        }
        Kind::Dict | Kind::OrderedDict | Kind::DefaultDict => {
            // Under optree's rules any of the three mapping kinds matches any other with the
            // same keys (JAX wants the same type); values are taken in the treespec's order.
            let ok = match super::flatten::classify(obj, false, registry, "", face) {
                super::flatten::Class::Node(k) => {
                    k.is_mapping() && (face == Face::Optree || k == node.kind)
                }
                _ => false,
            };
            if !ok {
                return Ok(false);
            }
            // SAFETY: every mapping kind is a dict subclass.
            let d = unsafe { obj.cast_unchecked::<PyDict>() };
            if d.len() != node.arity {
                return Ok(false);
            }
            let keys = node
                .keys()
                .as_ref()
                .expect("mapping nodes keep their keys")
                .bind(py);
            for key in keys.iter() {
                match d.get_item(key)? {
                    Some(v) => out.push(v),
                    None => return Ok(false),
                }
            }
        }
        Kind::Deque => {
            if obj.get_type().as_ptr() != types::collections(py).deque.as_ptr() {
                return Ok(false);
            }
            let items: Vec<_> = obj.try_iter()?.collect::<PyResult<_>>()?;
            if items.len() != node.arity {
                return Ok(false);
            }
            out.extend(items);
        }
        Kind::Custom => {
            let reg = node.custom().expect("custom nodes keep their registration");
            if obj.get_type().as_ptr() != reg.ty.as_ptr() {
                return Ok(false);
            }
            let (kids, aux, _) = super::custom::flatten(py, reg, obj, false)?;
            let expected = node
                .data
                .as_ref()
                .expect("custom nodes keep their aux data")
                .bind(py);
            if kids.len() != node.arity || !(aux.is(expected) || aux.eq(expected)?) {
                return Ok(false);
            }
            out.extend(kids.into_vec());
        }
        Kind::Leaf | Kind::None => unreachable!("handled by the caller"),
    }
    Ok(true)
}

/// What a node expects, in words: `tuple of length 2`, `dict with keys ['a', 'b']`.
#[cold]
pub fn describe_node(py: Python<'_>, node: &Node) -> String {
    let keys = || {
        node.keys()
            .as_ref()
            .map(|k| short_repr(k.bind(py).as_any(), 200))
            .unwrap_or_default()
    };
    let type_of = |data: &Option<Py<PyAny>>| {
        data.as_ref()
            .and_then(|t| t.bind(py).getattr("__qualname__").ok())
            .map(|n| n.to_string())
            .unwrap_or_else(|| "?".into())
    };
    match node.kind {
        Kind::Leaf => "a leaf".into(),
        Kind::None => "None".into(),
        Kind::Tuple => format!("tuple of length {}", node.arity),
        Kind::List => format!("list of length {}", node.arity),
        Kind::Dict => format!("dict with keys {}", keys()),
        Kind::OrderedDict => format!("OrderedDict with keys {}", keys()),
        Kind::DefaultDict => format!("defaultdict with keys {}", keys()),
        Kind::NamedTuple => format!(
            "namedtuple {} of length {}",
            type_of(&node.data),
            node.arity
        ),
        Kind::StructSeq => format!("struct sequence {}", type_of(&node.data)),
        Kind::Deque => format!("deque of length {}", node.arity),
        Kind::Custom => {
            let name = node
                .custom()
                .map(|r| r.name(py))
                .unwrap_or_else(|| "?".into());
            let aux = node
                .data
                .as_ref()
                .map(|a| short_repr(a.bind(py), 80))
                .unwrap_or_default();
            format!("{name} with aux data {aux} and {} children", node.arity)
        }
    }
}

/// What an object is, in the same words.
#[cold]
fn describe_obj(obj: &Bound<'_, PyAny>) -> String {
    let name = type_name(obj);
    let shape = if let Ok(d) = obj.cast::<PyDict>() {
        format!(" with keys {}", short_repr(d.keys().as_any(), 200))
    } else if obj.is_none() {
        return "None".into();
    } else {
        match obj.len() {
            Ok(n) => format!(" of length {n}"),
            Err(_) => String::new(),
        }
    };
    format!("{name}{shape}: {}", short_repr(obj, 80))
}

#[cold]
fn mismatch(
    spec: &PyTreeSpec,
    py: Python<'_>,
    idx: usize,
    obj: &Bound<'_, PyAny>,
    which: Option<&str>,
    tree: &Bound<'_, PyAny>,
    registry: &Registry,
) -> PyErr {
    let node = &spec.nodes[idx];
    let mut got = describe_obj(obj);
    if let (Some(keys), Ok(d)) = (node.keys(), obj.cast::<PyDict>()) {
        got.push_str(&key_difference(keys.bind(py), &d.keys()));
    }
    let path =
        keyed_path(spec, py, idx, tree, registry).unwrap_or_else(|_| spec.path_to(py, idx, "tree"));
    TreeError::Mismatch {
        path,
        expected: describe_node(py, node),
        got,
        which: which.map(str::to_owned),
    }
    .into()
}

/// The path to node `idx`, walking `tree` (which matched the treespec down to there) so that
/// registered nodes with JAX keys (`flatten_with_keys`) are named by them.
#[cold]
fn keyed_path(
    spec: &PyTreeSpec,
    py: Python<'_>,
    idx: usize,
    tree: &Bound<'_, PyAny>,
    registry: &Registry,
) -> PyResult<String> {
    use crate::paths::PathEntry;
    let mut entries = Vec::new();
    let mut cur = tree.clone();
    for (n, j) in spec.path_chain(idx) {
        let node = &spec.nodes[n];
        let keyed = match (node.custom(), node.kind) {
            (Some(reg), Kind::Custom) => match &reg.rule {
                crate::registry::Rule::Custom {
                    flatten_with_keys: Some(_),
                    ..
                } => Some(reg),
                _ => None,
            },
            _ => None,
        };
        if let Some(reg) = keyed {
            let (children, _, keys) = super::custom::flatten(py, reg, &cur, true)?;
            let key = keys
                .ok_or_else(|| PyErr::new::<pyo3::exceptions::PyValueError, _>("no keys"))?
                .get_item(j)?;
            entries.push(PathEntry::Text(super::custom_entry_text(&key)));
            cur = children
                .into_vec()
                .into_iter()
                .nth(j)
                .ok_or_else(|| PyErr::new::<pyo3::exceptions::PyValueError, _>("no child"))?;
        } else {
            entries.push(node.entry(py, j));
            let mut children = Vec::new();
            if !node_children(py, node, &cur, registry, spec.face, &mut children)? {
                return Err(PyErr::new::<pyo3::exceptions::PyValueError, _>(
                    "structure differs",
                ));
            }
            cur = children
                .into_iter()
                .nth(j)
                .ok_or_else(|| PyErr::new::<pyo3::exceptions::PyValueError, _>("no child"))?;
        }
    }
    Ok(crate::paths::render("tree", &entries))
}

/// `; missing keys [...], extra keys [...]` between what a node expects and what a dict has.
#[cold]
fn key_difference(expected: &Bound<'_, PyList>, found: &Bound<'_, PyList>) -> String {
    let contains =
        |list: &Bound<'_, PyList>, k: &Bound<'_, PyAny>| list.contains(k).unwrap_or(false);
    let missing: Vec<String> = expected
        .iter()
        .filter(|k| !contains(found, k))
        .map(|k| short_repr(&k, 40))
        .collect();
    let extra: Vec<String> = found
        .iter()
        .filter(|k| !contains(expected, k))
        .map(|k| short_repr(&k, 40))
        .collect();
    let mut out = String::new();
    if !missing.is_empty() {
        out.push_str(&format!("; missing keys [{}]", missing.join(", ")));
    }
    if !extra.is_empty() {
        out.push_str(&format!("; extra keys [{}]", extra.join(", ")));
    }
    out
}
