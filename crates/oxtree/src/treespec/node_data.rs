//! What a node's data reads as from Python: optree's `node_data()` and JAX's, and a
//! registered node's metadata as optree shows it.

use pyo3::prelude::*;
use pyo3::types::PyList;

use super::Node;
use crate::kind::Kind;

/// optree's node data of a node: None for sequences and None, the key list for mappings,
/// `(factory, keys)` for a defaultdict, the maxlen of a deque, the type of a namedtuple or
/// struct sequence, the aux data of a custom node.
pub fn node_data<'py>(py: Python<'py>, node: &Node) -> PyResult<Bound<'py, PyAny>> {
    let keys = || -> Bound<'py, PyAny> {
        match node.keys() {
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
        Kind::Deque | Kind::NamedTuple | Kind::StructSeq => data(),
        Kind::Custom => custom_metadata(py, node)?,
    })
}

/// A registered node's metadata as optree shows it: the aux data, except for a registered
/// dataclass, whose meta field values are kept alone and shown as optree's dataclasses
/// store them, `(('name', value), ...)`.
pub fn custom_metadata<'py>(py: Python<'py>, node: &Node) -> PyResult<Bound<'py, PyAny>> {
    let aux = node.kept_data(py);
    match node.custom().map(|r| &r.rule) {
        Some(crate::registry::Rule::Dataclass { meta, .. }) => {
            let pairs = meta
                .iter()
                .zip(aux.try_iter()?)
                .map(|(name, value)| Ok((name.bind(py), value?)))
                .collect::<PyResult<Vec<_>>>()?;
            Ok(pyo3::types::PyTuple::new(py, pairs)?.into_any())
        }
        _ => Ok(aux.clone()),
    }
}

/// JAX's node data of a treespec's root: None for a leaf, else `(type, data)` where data is
/// None for sequences and namedtuples, the sorted key list of a dict, the key tuple of an
/// OrderedDict, `(factory, keys)` for a defaultdict, the aux data of a custom node.
pub fn jax_node_data<'py>(py: Python<'py>, node: &Node) -> PyResult<Bound<'py, PyAny>> {
    let none = || py.None().into_bound(py);
    let Some(ty) = node.py_type(py) else {
        return Ok(none());
    };
    let keys_tuple = || {
        node.keys()
            .as_ref()
            .map(|k| k.bind(py).to_tuple().into_any())
            .unwrap_or_else(none)
    };
    let data = match node.kind {
        Kind::Leaf => return Ok(none()),
        Kind::None
        | Kind::Tuple
        | Kind::List
        | Kind::NamedTuple
        | Kind::Deque
        | Kind::StructSeq => none(),
        Kind::Dict => node_data(py, node)?,
        Kind::OrderedDict => keys_tuple(),
        Kind::DefaultDict => {
            let factory = node
                .data
                .as_ref()
                .map(|d| d.bind(py).clone())
                .unwrap_or_else(none);
            (factory, keys_tuple()).into_pyobject(py)?.into_any()
        }
        Kind::Custom => node
            .data
            .as_ref()
            .map(|d| d.bind(py).clone())
            .unwrap_or_else(none),
    };
    Ok((ty, data).into_pyobject(py)?.into_any())
}
