//! Pickling: a flat, versioned state (one tuple per node, post-order), validated on load so a
//! corrupted or hand-made state raises ValueError instead of building a broken treespec.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyList, PyTuple, PyType};

use super::{Node, PyTreeSpec};
use crate::errors::TreeError;
use crate::face::Face;
use crate::invariant::Invariant;
use crate::kind::Kind;
use crate::registry;
use crate::types;

const STATE_VERSION: u32 = 1;

fn opt<'py>(py: Python<'py>, v: &Option<Py<impl Sized>>) -> Bound<'py, PyAny> {
    match v {
        Some(o) => o.bind(py).clone().into_any(),
        None => py.None().into_bound(py),
    }
}

fn as_tuple<'py>(py: Python<'py>, keys: &Option<Py<PyList>>) -> Bound<'py, PyAny> {
    match keys {
        Some(k) => k.bind(py).to_tuple().into_any(),
        None => py.None().into_bound(py),
    }
}

pub fn state<'py>(spec: &PyTreeSpec, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
    let mut nodes = Vec::with_capacity(spec.nodes.len());
    for node in &spec.nodes {
        let custom_type = match node.custom() {
            Some(reg) => reg.ty.bind(py).clone().into_any(),
            None => py.None().into_bound(py),
        };
        nodes.push(PyTuple::new(
            py,
            [
                (node.kind as u8).into_pyobject(py)?.into_any(),
                node.arity.into_pyobject(py)?.into_any(),
                opt(py, &node.data),
                as_tuple(py, node.keys()),
                match node.insertion() {
                    Some(pos) => PyTuple::new(py, pos.iter().collect::<Vec<_>>())?.into_any(),
                    None => py.None().into_bound(py),
                },
                custom_type,
                opt(py, node.entries()),
            ],
        )?);
    }
    PyTuple::new(
        py,
        [
            STATE_VERSION.into_pyobject(py)?.into_any(),
            pyo3::types::PyBool::new(py, spec.none_is_leaf)
                .to_owned()
                .into_any(),
            spec.namespace.clone().into_pyobject(py)?.into_any(),
            PyTuple::new(py, nodes)?.into_any(),
            match spec.face {
                Face::Optree => "optree",
                Face::Jax => "jax",
            }
            .into_pyobject(py)?
            .into_any(),
        ],
    )
}

/// The module's `_rebuild_treespec`, kept when `oxtree._core` is initialised (`lib.rs`):
/// pickle saves a function by name and checks that the name gives back the same object, so
/// `__reduce__` hands it the module's own, without importing the module to find it.
pub static REBUILD: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

pub fn reduce<'py>(spec: &PyTreeSpec, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
    let rebuild = REBUILD
        .get(py)
        .invariant("_rebuild_treespec was kept at import")?
        .bind(py)
        .clone();
    PyTuple::new(
        py,
        [rebuild, PyTuple::new(py, [state(spec, py)?])?.into_any()],
    )
}

fn bad(msg: impl Into<String>) -> PyErr {
    TreeError::Value(format!("invalid PyTreeSpec state: {}", msg.into())).into()
}

fn positions(obj: &Bound<'_, PyAny>, i: usize) -> PyResult<Option<Box<[usize]>>> {
    if obj.is_none() {
        return Ok(None);
    }
    let v: Vec<usize> = obj.extract().map_err(|_| {
        bad(format!(
            "node {i}: the insertion order must be a tuple of ints"
        ))
    })?;
    Ok(Some(v.into_boxed_slice()))
}

fn key_list<'py>(
    obj: &Bound<'py, PyAny>,
    what: &str,
    i: usize,
) -> PyResult<Option<Bound<'py, PyList>>> {
    if obj.is_none() {
        return Ok(None);
    }
    let t = obj
        .cast::<PyTuple>()
        .map_err(|_| bad(format!("node {i}: {what} must be a tuple")))?;
    Ok(Some(t.to_list()))
}

/// Rebuilds a treespec from `__reduce__`'s state, checking every invariant.
#[pyfunction]
#[pyo3(name = "_rebuild_treespec")]
pub fn rebuild_treespec(state: &Bound<'_, PyAny>) -> PyResult<PyTreeSpec> {
    let py = state.py();
    let state = state.cast::<PyTuple>().map_err(|_| bad("not a tuple"))?;
    if state.len() != 4 && state.len() != 5 {
        return Err(bad(format!("expected 5 fields, got {}", state.len())));
    }
    let face = if state.len() == 5 {
        match state.get_item(4)?.extract::<String>().as_deref() {
            Ok("optree") => Face::Optree,
            Ok("jax") => Face::Jax,
            _ => return Err(bad("the face must be 'optree' or 'jax'")),
        }
    } else {
        Face::Optree
    };
    let version: u32 = state
        .get_item(0)?
        .extract()
        .map_err(|_| bad("bad version"))?;
    if version != STATE_VERSION {
        return Err(bad(format!(
            "unknown version {version} (this oxtree reads version {STATE_VERSION})"
        )));
    }
    let none_is_leaf: bool = state
        .get_item(1)?
        .extract()
        .map_err(|_| bad("none_is_leaf must be a bool"))?;
    let namespace: String = state
        .get_item(2)?
        .extract()
        .map_err(|_| bad("namespace must be a str"))?;
    let raw = state.get_item(3)?;
    let raw = raw
        .cast::<PyTuple>()
        .map_err(|_| bad("nodes must be a tuple"))?;
    if raw.is_empty() {
        return Err(bad("no nodes"));
    }
    // (num_leaves, num_nodes) of each completed subtree not yet claimed by a parent.
    let mut pending: Vec<(usize, usize)> = Vec::new();
    let mut nodes = super::Nodes::with_capacity(raw.len());
    // The first dict node whose keys are sorted apart from their insertion order, and the
    // first whose keys are in insertion order and do not sort: a walk makes one or the other
    // (optree's `dict_insertion_ordered` mode is per walk), so a state with both would not
    // re-flatten to itself.
    let (mut sorted_at, mut insertion_ordered_at) = (None, None);
    for (i, item) in raw.iter().enumerate() {
        let mut node_entries: Option<Py<PyTuple>> = None;
        let t = item
            .cast::<PyTuple>()
            .map_err(|_| bad(format!("node {i} is not a tuple")))?;
        if t.len() != 7 {
            return Err(bad(format!("node {i} has {} fields, expected 7", t.len())));
        }
        let kind_no: u8 = t
            .get_item(0)?
            .extract()
            .map_err(|_| bad(format!("node {i}: bad kind")))?;
        let kind = Kind::from_u8(kind_no)
            .ok_or_else(|| bad(format!("node {i}: unknown kind {kind_no}")))?;
        let arity: usize = t
            .get_item(1)?
            .extract()
            .map_err(|_| bad(format!("node {i}: bad arity")))?;
        let data = t.get_item(2)?;
        let keys = key_list(&t.get_item(3)?, "keys", i)?;
        let insertion = positions(&t.get_item(4)?, i)?;
        if insertion.is_some() && !matches!(kind, Kind::Dict | Kind::DefaultDict) {
            return Err(bad(format!(
                "node {i}: only dict nodes have an insertion order"
            )));
        }
        let custom_type = t.get_item(5)?;
        if kind != Kind::Custom && !custom_type.is_none() {
            return Err(bad(format!("node {i}: only a custom node names a type")));
        }
        if keys.is_some() && !matches!(kind, Kind::Dict | Kind::OrderedDict | Kind::DefaultDict) {
            return Err(bad(format!("node {i}: only mapping nodes have keys")));
        }
        let entries = t.get_item(6)?;
        if !entries.is_none() {
            let e = entries
                .cast::<PyTuple>()
                .map_err(|_| bad(format!("node {i}: entries must be a tuple or None")))?;
            if kind != Kind::Custom || e.len() != arity {
                return Err(bad(format!("node {i}: entries do not fit the node")));
            }
            node_entries = Some(e.clone().unbind());
        }
        if arity > pending.len() {
            return Err(bad(format!(
                "node {i} claims {arity} children but only {} precede it",
                pending.len()
            )));
        }
        let mut node = Node::bare(kind, arity, 0, 0);
        let mut registration = None;
        node.set_entries(node_entries.take());
        let data_none = data.is_none();
        match kind {
            Kind::Leaf | Kind::None | Kind::Tuple | Kind::List => {
                if (matches!(kind, Kind::Leaf | Kind::None) && arity != 0)
                    || (kind == Kind::None && none_is_leaf)
                    || !data_none
                {
                    return Err(bad(format!("node {i}: malformed {kind:?} node")));
                }
            }
            Kind::Dict | Kind::OrderedDict | Kind::DefaultDict => {
                let k =
                    keys.ok_or_else(|| bad(format!("node {i}: a mapping node needs its keys")))?;
                if k.len() != arity {
                    return Err(bad(format!(
                        "node {i}: {} keys for {arity} children",
                        k.len()
                    )));
                }
                // Keys must be distinct and hashable, and in the order a walk gives them: an
                // OrderedDict's own order; a dict's or defaultdict's sorted order, the
                // insertion order recorded apart (a permutation other than the identity; JAX's
                // treedefs keep none and always sort); or, with no insertion order recorded,
                // any order: what a walk in optree's `dict_insertion_ordered` mode makes (such
                // a state re-flattens to itself in that mode, and loads outside it, as
                // optree's do).
                let distinct = pyo3::types::PySet::new(py, k.iter())
                    .map_err(|_| bad(format!("node {i}: dict keys must be hashable")))?;
                if distinct.len() != arity {
                    return Err(bad(format!("node {i}: repeated dict keys")));
                }
                if kind != Kind::OrderedDict && arity > 1 {
                    if insertion.is_some() && !face.rules().records_insertion_order {
                        return Err(bad(format!(
                            "node {i}: a JAX treedef records no insertion order"
                        )));
                    }
                    let sorted =
                        super::dict_order::sort_keys(&k, face.rules().sorts_dict_keys_strictly)
                            .map_err(|_| bad(format!("node {i}: dict keys do not sort")))?;
                    if !sorted.iter().zip(k.iter()).all(|(a, b)| a.is(&b)) {
                        if insertion.is_some() || !face.rules().records_insertion_order {
                            return Err(bad(format!(
                                "node {i}: dict keys are not in sorted order"
                            )));
                        }
                        insertion_ordered_at.get_or_insert(i);
                    }
                    if insertion.is_some() {
                        sorted_at.get_or_insert(i);
                    }
                    if let (Some(a), Some(b)) = (sorted_at, insertion_ordered_at) {
                        return Err(bad(format!(
                            "node {a} sorts its dict keys and node {b} keeps them in insertion \
                             order (dict_insertion_ordered mode): one walk makes only one of these"
                        )));
                    }
                }
                if let Some(order) = &insertion {
                    let mut seen = vec![false; arity];
                    let is_permutation = kind != Kind::OrderedDict
                        && order.len() == arity
                        && order
                            .iter()
                            .all(|&p| p < arity && !std::mem::replace(&mut seen[p], true));
                    if !is_permutation {
                        return Err(bad(format!(
                            "node {i}: the insertion order is not a permutation of the keys"
                        )));
                    }
                    if order.iter().enumerate().all(|(j, &p)| j == p) {
                        return Err(bad(format!(
                            "node {i}: an insertion order equal to the sorted order is not recorded"
                        )));
                    }
                }
                if kind == Kind::DefaultDict {
                    if !data_none && !data.is_callable() {
                        return Err(bad(format!(
                            "node {i}: a defaultdict factory must be callable or None"
                        )));
                    }
                    node.data = Some(data.unbind());
                } else if !data_none {
                    return Err(bad(format!("node {i}: unexpected data for a mapping")));
                }
                node.set_keys(Some(k.unbind()));
                node.set_insertion(insertion.as_deref().map(|p| p.iter().copied()));
            }
            Kind::NamedTuple | Kind::StructSeq => {
                let ty = data
                    .cast::<PyType>()
                    .map_err(|_| bad(format!("node {i}: expected a type")))?;
                let ok = if kind == Kind::NamedTuple {
                    types::is_namedtuple_class(ty)
                } else {
                    types::is_structseq_class(ty)
                };
                if !ok || types::field_names(ty, kind)?.len() != arity {
                    return Err(bad(format!(
                        "node {i}: {} does not fit a {kind:?} node of arity {arity}",
                        ty.name()?
                    )));
                }
                if registry::snapshot()
                    .lookup(ty.as_ptr().cast(), &namespace)
                    .is_some()
                {
                    return Err(bad(format!(
                        "node {i}: {} is registered as a pytree node type, so its instances \
                         are custom nodes, not {kind:?} nodes",
                        ty.name()?
                    )));
                }
                node.data = Some(data.unbind());
            }
            Kind::Deque => {
                if !data_none {
                    if !data.is_exact_instance_of::<pyo3::types::PyInt>() {
                        return Err(bad(format!("node {i}: maxlen must be an int or None")));
                    }
                    let m: isize = data
                        .extract()
                        .map_err(|_| bad(format!("node {i}: maxlen must be an int or None")))?;
                    if m < 0 || (m as usize) < arity {
                        return Err(bad(format!(
                            "node {i}: maxlen {m} cannot hold {arity} items"
                        )));
                    }
                }
                node.data = Some(data.unbind());
            }
            Kind::Custom => {
                let ty = custom_type
                    .cast::<PyType>()
                    .map_err(|_| bad(format!("node {i}: a custom node needs its type")))?;
                // Then JAX's registry: a node a walk reading it made (reading it runs none
                // of the type's code).
                let found = match registry::lookup_for_load(ty.as_ptr().cast(), &namespace) {
                    Some(found) => Some(found),
                    None => crate::jax_registry::lookup_for_load(ty)?,
                };
                let found = found.ok_or_else(|| {
                    bad(format!(
                        "node {i}: {} is not a registered pytree node type in this process",
                        ty.name().map(|n| n.to_string()).unwrap_or_default()
                    ))
                })?;
                if let Some(why) = super::custom::misfit(
                    py,
                    &found,
                    arity,
                    &data,
                    node.entries().as_ref().map(|e| e.bind(py)),
                ) {
                    return Err(bad(format!("node {i}: {why}")));
                }
                registration = Some(found);
                node.data = Some(data.unbind());
            }
        }
        let (mut leaves, mut count) = match kind {
            Kind::Leaf => (1, 1),
            _ => (0, 1),
        };
        for _ in 0..arity {
            let (l, n) = pending.pop().invariant("a child's sizes, checked above")?;
            leaves += l;
            count += n;
        }
        node.num_leaves = leaves;
        node.num_nodes = count;
        pending.push((leaves, count));
        match &registration {
            Some(reg) => nodes.push_custom(node, reg),
            None => nodes.push(node),
        }
    }
    if pending.len() != 1 {
        return Err(bad(format!(
            "the nodes form {} trees, not one",
            pending.len()
        )));
    }
    let rules = face.rules();
    if (none_is_leaf && !rules.none_is_leaf_allowed)
        || nodes.iter().any(|n| {
            (n.kind == Kind::Deque && !rules.deque_is_node)
                || (n.kind == Kind::StructSeq && !rules.structseq_is_node)
        })
    {
        return Err(bad(
            "a JAX treespec has no deque or struct sequence nodes and None is never a leaf",
        ));
    }
    // The namespace is kept as saved, as optree keeps it: an empty namespace matches any in
    // `==`, so a state naming one its nodes do not depend on still loads equal to its walk.
    Ok(PyTreeSpec::new(nodes, none_is_leaf, namespace).with_face(face))
}
