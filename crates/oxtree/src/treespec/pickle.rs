//! Pickling: a flat, versioned state (one tuple per node, post-order), validated on load so a
//! corrupted or hand-made state raises ValueError instead of building a broken treespec. The
//! same nodes, typed (`_Node`), are what Python reads of a treespec's structure
//! (`PyTreeSpec._nodes`) and builds one from (`PyTreeSpec._from_nodes`), through the same
//! check: no Python module knows the state's layout.

use std::borrow::Borrow;

use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyTuple, PyType};
use pyo3::PyTraverseError;

use super::{Node, PyTreeSpec};
use crate::errors::{StateOf, TreeError};
use crate::face::Face;
use crate::invariant::Invariant;
use crate::kind::Kind;
use crate::registry;
use crate::types;

const STATE_VERSION: u32 = 1;

/// One node of a treespec as Python sees it, in the treespec's post-order: its kind, arity,
/// data, keys (a mapping's), insertion order (a dict's, when it differs from the key order),
/// custom type and entries. `PyTreeSpec._nodes()` gives them and `PyTreeSpec._from_nodes`
/// builds a treespec from them, checked as a pickle's state is (one check, `build`); a
/// pickle's state holds the same fields as one tuple per node (`to_tuple`, `read`).
#[pyclass(frozen, module = "oxtree", name = "_Node")]
pub struct PyNode {
    kind: Kind,
    /// The number of children.
    #[pyo3(get)]
    arity: usize,
    /// A namedtuple's or struct sequence's type, a deque's maxlen, a defaultdict's factory,
    /// a custom node's aux data; None otherwise.
    #[pyo3(get)]
    data: Py<PyAny>,
    keys: Option<Py<PyTuple>>,
    insertion: Option<Box<[usize]>>,
    /// A custom node's registered type; None otherwise.
    #[pyo3(get)]
    custom_type: Py<PyAny>,
    entries: Option<Py<PyTuple>>,
}

fn none_or<'py>(py: Python<'py>, v: Option<Bound<'py, PyAny>>) -> Bound<'py, PyAny> {
    v.unwrap_or_else(|| py.None().into_bound(py))
}

impl PyNode {
    /// The fields of a treespec's node.
    fn of(py: Python<'_>, node: &Node) -> PyResult<PyNode> {
        Ok(PyNode {
            kind: node.kind,
            arity: node.arity,
            data: node
                .data
                .as_ref()
                .map_or_else(|| py.None(), |d| d.clone_ref(py)),
            keys: node.keys().as_ref().map(|k| k.bind(py).to_tuple().unbind()),
            insertion: node.insertion().map(|pos| pos.iter().collect()),
            custom_type: node
                .custom()
                .map_or_else(|| py.None(), |reg| reg.ty.clone_ref(py).into_any()),
            entries: node.entries().as_ref().map(|e| e.clone_ref(py)),
        })
    }

    /// Reads a node's fields, with the types each must have; `at` names the node in messages.
    #[allow(clippy::too_many_arguments)]
    fn read(
        kind: &Bound<'_, PyAny>,
        arity: &Bound<'_, PyAny>,
        data: &Bound<'_, PyAny>,
        keys: &Bound<'_, PyAny>,
        insertion: &Bound<'_, PyAny>,
        custom_type: &Bound<'_, PyAny>,
        entries: &Bound<'_, PyAny>,
        at: &str,
    ) -> PyResult<PyNode> {
        let kind_no: u8 = kind.extract().map_err(|_| bad(format!("{at}: bad kind")))?;
        let kind =
            Kind::from_u8(kind_no).ok_or_else(|| bad(format!("{at}: unknown kind {kind_no}")))?;
        let arity: usize = arity
            .extract()
            .map_err(|_| bad(format!("{at}: bad arity")))?;
        let tuple_or_none = |obj: &Bound<'_, PyAny>, what: &str| -> PyResult<_> {
            if obj.is_none() {
                return Ok(None);
            }
            let t = obj
                .cast::<PyTuple>()
                .map_err(|_| bad(format!("{at}: {what}")))?;
            Ok(Some(t.clone().unbind()))
        };
        let keys = tuple_or_none(keys, "keys must be a tuple")?;
        let insertion = if insertion.is_none() {
            None
        } else {
            let v: Vec<usize> = insertion
                .extract()
                .map_err(|_| bad(format!("{at}: the insertion order must be a tuple of ints")))?;
            Some(v.into_boxed_slice())
        };
        let entries = tuple_or_none(entries, "entries must be a tuple or None")?;
        Ok(PyNode {
            kind,
            arity,
            data: data.clone().unbind(),
            keys,
            insertion,
            custom_type: custom_type.clone().unbind(),
            entries,
        })
    }

    /// A node of a pickle's state: `(kind, arity, data, keys, insertion, custom type,
    /// entries)`.
    fn to_tuple<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(
            py,
            [
                (self.kind as u8).into_pyobject(py)?.into_any(),
                self.arity.into_pyobject(py)?.into_any(),
                self.data.bind(py).clone(),
                self.py_keys(py),
                self.py_insertion(py)?,
                self.custom_type.bind(py).clone(),
                self.py_entries(py),
            ],
        )
    }

    /// A node of a pickle's state, as `to_tuple` writes it; `i` is its index.
    fn from_tuple(item: &Bound<'_, PyAny>, i: usize) -> PyResult<PyNode> {
        let t = item
            .cast::<PyTuple>()
            .map_err(|_| bad(format!("node {i} is not a tuple")))?;
        if t.len() != 7 {
            return Err(bad(format!("node {i} has {} fields, expected 7", t.len())));
        }
        let f = |j| t.get_item(j);
        PyNode::read(
            &f(0)?,
            &f(1)?,
            &f(2)?,
            &f(3)?,
            &f(4)?,
            &f(5)?,
            &f(6)?,
            &format!("node {i}"),
        )
    }
}

#[pymethods]
impl PyNode {
    #[new]
    #[pyo3(signature = (kind, arity, data = None, keys = None, insertion = None, custom_type = None, entries = None, *, index = None))]
    #[allow(clippy::too_many_arguments)]
    fn py_new(
        py: Python<'_>,
        kind: &Bound<'_, PyAny>,
        arity: &Bound<'_, PyAny>,
        data: Option<Bound<'_, PyAny>>,
        keys: Option<Bound<'_, PyAny>>,
        insertion: Option<Bound<'_, PyAny>>,
        custom_type: Option<Bound<'_, PyAny>>,
        entries: Option<Bound<'_, PyAny>>,
        index: Option<usize>,
    ) -> PyResult<PyNode> {
        // A loader building node `index` of a state names it in its errors, as the pickle
        // loader does.
        let at = index.map_or_else(|| "_Node".to_owned(), |i| format!("node {i}"));
        PyNode::read(
            kind,
            arity,
            &none_or(py, data),
            &none_or(py, keys),
            &none_or(py, insertion),
            &none_or(py, custom_type),
            &none_or(py, entries),
            &at,
        )
    }

    /// The node's kind (a `PyTreeKind`).
    #[getter]
    fn kind<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.kind.to_py(py)
    }

    /// A mapping's keys, in the order of its children (a tuple); None for other kinds.
    #[getter(keys)]
    fn py_keys<'py>(&self, py: Python<'py>) -> Bound<'py, PyAny> {
        none_or(
            py,
            self.keys.as_ref().map(|k| k.bind(py).clone().into_any()),
        )
    }

    /// A dict's keys in insertion order, as positions among its children (a tuple of ints),
    /// when that differs from the order of its children; None otherwise.
    #[getter(insertion)]
    fn py_insertion<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        Ok(match &self.insertion {
            Some(pos) => PyTuple::new(py, pos.iter())?.into_any(),
            None => py.None().into_bound(py),
        })
    }

    /// A custom node's path entries, one per child (a tuple), when its flatten gave them.
    #[getter(entries)]
    fn py_entries<'py>(&self, py: Python<'py>) -> Bound<'py, PyAny> {
        none_or(
            py,
            self.entries.as_ref().map(|e| e.bind(py).clone().into_any()),
        )
    }

    /// `_Node(kind=DICT, arity=2, keys=('a', 'b'))`: the fields that are not None.
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let mut text = format!(
            "_Node(kind={}, arity={}",
            self.kind.to_py(py)?.getattr(pyo3::intern!(py, "name"))?,
            self.arity
        );
        for (name, value) in [
            ("data", self.data.bind(py).clone()),
            ("keys", self.py_keys(py)),
            ("insertion", self.py_insertion(py)?),
            ("custom_type", self.custom_type.bind(py).clone()),
            ("entries", self.py_entries(py)),
        ] {
            if !value.is_none() {
                text += &format!(", {name}={}", value.repr()?);
            }
        }
        Ok(text + ")")
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        // No `__clear__`: a node is immutable and made after all it holds.
        visit.call(&self.data)?;
        visit.call(&self.keys)?;
        visit.call(&self.custom_type)?;
        visit.call(&self.entries)
    }
}

/// The treespec's nodes, in post-order.
pub fn nodes<'py>(spec: &PyTreeSpec, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
    let nodes = spec
        .nodes
        .iter()
        .map(|node| Bound::new(py, PyNode::of(py, node)?))
        .collect::<PyResult<Vec<_>>>()?;
    PyTuple::new(py, nodes)
}

pub fn state<'py>(spec: &PyTreeSpec, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
    let nodes = spec
        .nodes
        .iter()
        .map(|node| PyNode::of(py, node)?.to_tuple(py))
        .collect::<PyResult<Vec<_>>>()?;
    PyTuple::new(
        py,
        [
            STATE_VERSION.into_pyobject(py)?.into_any(),
            pyo3::types::PyBool::new(py, spec.none_is_leaf)
                .to_owned()
                .into_any(),
            spec.namespace.clone().into_pyobject(py)?.into_any(),
            PyTuple::new(py, nodes)?.into_any(),
            spec.face.name().into_pyobject(py)?.into_any(),
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
    TreeError::State {
        of: StateOf::PyTreeSpec,
        why: msg.into(),
    }
    .into()
}

/// The treespec-wide fields, as a state or `_from_nodes` gives them.
fn options(
    none_is_leaf: &Bound<'_, PyAny>,
    namespace: &Bound<'_, PyAny>,
    face: &Bound<'_, PyAny>,
) -> PyResult<(bool, String, Face)> {
    let face = face
        .extract::<String>()
        .ok()
        .and_then(|f| Face::from_name(&f))
        .ok_or_else(|| bad("the face must be 'optree' or 'jax'"))?;
    let none_is_leaf: bool = none_is_leaf
        .extract()
        .map_err(|_| bad("none_is_leaf must be a bool"))?;
    let namespace: String = namespace
        .extract()
        .map_err(|_| bad("namespace must be a str"))?;
    Ok((none_is_leaf, namespace, face))
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
    let face = match state.len() {
        5 => state.get_item(4)?,
        _ => Face::Optree.name().into_pyobject(py)?.into_any(),
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
    let (none_is_leaf, namespace, face) = options(&state.get_item(1)?, &state.get_item(2)?, &face)?;
    let raw = state.get_item(3)?;
    let raw = raw
        .cast::<PyTuple>()
        .map_err(|_| bad("nodes must be a tuple"))?;
    let nodes = raw
        .iter()
        .enumerate()
        .map(|(i, item)| PyNode::from_tuple(&item, i));
    build(py, nodes, none_is_leaf, namespace, face)
}

/// `PyTreeSpec._from_nodes`: a treespec of `nodes` (`_Node`s in post-order), checked as a
/// pickle's state is.
pub fn from_nodes(
    nodes: &Bound<'_, PyAny>,
    none_is_leaf: &Bound<'_, PyAny>,
    namespace: &Bound<'_, PyAny>,
    face: &Bound<'_, PyAny>,
) -> PyResult<PyTreeSpec> {
    let py = nodes.py();
    let (none_is_leaf, namespace, face) = options(none_is_leaf, namespace, face)?;
    let items: Vec<Bound<'_, PyAny>> = if let Ok(t) = nodes.cast::<PyTuple>() {
        t.iter().collect()
    } else if let Ok(l) = nodes.cast::<pyo3::types::PyList>() {
        l.iter().collect()
    } else {
        return Err(bad("nodes must be a tuple or a list"));
    };
    let nodes = items
        .into_iter()
        .enumerate()
        .map(|(i, n)| {
            n.cast_into::<PyNode>()
                .map_err(|_| bad(format!("node {i} is not a _Node")))
        })
        .collect::<PyResult<Vec<_>>>()?;
    build(
        py,
        nodes.iter().map(|n| Ok(n.get())),
        none_is_leaf,
        namespace,
        face,
    )
}

/// The one check of a treespec made from outside data (a pickle's state, `_from_nodes`):
/// every node fits its kind, the current registrations and the nodes before it.
fn build<N: Borrow<PyNode>>(
    py: Python<'_>,
    raw: impl ExactSizeIterator<Item = PyResult<N>>,
    none_is_leaf: bool,
    namespace: String,
    face: Face,
) -> PyResult<PyTreeSpec> {
    if raw.len() == 0 {
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
    for (i, item) in raw.enumerate() {
        let item = item?;
        let item: &PyNode = item.borrow();
        let (kind, arity) = (item.kind, item.arity);
        let data = item.data.bind(py).clone();
        let keys = item.keys.as_ref().map(|k| k.bind(py).to_list());
        let insertion = &item.insertion;
        if insertion.is_some() && !matches!(kind, Kind::Dict | Kind::DefaultDict) {
            return Err(bad(format!(
                "node {i}: only dict nodes have an insertion order"
            )));
        }
        let custom_type = item.custom_type.bind(py);
        if kind != Kind::Custom && !custom_type.is_none() {
            return Err(bad(format!("node {i}: only a custom node names a type")));
        }
        if keys.is_some() && !matches!(kind, Kind::Dict | Kind::OrderedDict | Kind::DefaultDict) {
            return Err(bad(format!("node {i}: only mapping nodes have keys")));
        }
        if let Some(e) = &item.entries {
            if kind != Kind::Custom || e.bind(py).len() != arity {
                return Err(bad(format!("node {i}: entries do not fit the node")));
            }
        }
        if arity > pending.len() {
            return Err(bad(format!(
                "node {i} claims {arity} children but only {} precede it",
                pending.len()
            )));
        }
        let mut node = Node::bare(kind, arity, 0, 0);
        let mut registration = None;
        node.set_entries(item.entries.as_ref().map(|e| e.clone_ref(py)));
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
