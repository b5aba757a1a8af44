//! Rebuilding trees from leaves: one loop over the post-order nodes with a value stack.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

use super::{Node, PyTreeSpec};
use crate::errors::{type_name, TreeError};
use crate::face::Face;
use crate::invariant::Invariant;

const LEAVES_COUNTED: &str = "the treespec has fewer leaf nodes than its leaf count";
use crate::containers::{list_from, tuple_from};
use crate::kind::Kind;
use crate::spare::{self, Slot};
use crate::types;

/// `spec.unflatten(leaves)` for any iterable of leaves.
pub fn unflatten_iterable<'py>(
    spec: &PyTreeSpec,
    leaves: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    if let Some(kind) = flat_sequence(spec) {
        if let Some(seq) = sequence_of_leaves(kind, leaves, spec.num_leaves())? {
            return Ok(seq);
        }
    }
    let (py, vec) = collect_leaves(leaves)?;
    build(py, spec, vec)
}

/// The kind of a treespec that is a tuple or list of leaves only (the treespec of most
/// argument tuples), None for any other.
#[inline]
fn flat_sequence(spec: &PyTreeSpec) -> Option<Kind> {
    let root = spec.root();
    // `arity` children in `arity + 1` nodes are single nodes, and `arity` leaves among them
    // make every one a leaf (a None node counts no leaf).
    (matches!(root.kind, Kind::Tuple | Kind::List)
        && spec.nodes.len() == root.arity + 1
        && root.num_leaves == root.arity)
        .then_some(root.kind)
}

/// A new tuple or list (`kind`) of the items of `leaves` when it is an exact list or tuple of
/// `n` items; None (nothing made) for any other iterable, left to the general path and its
/// errors. Measured on a 3-leaf tuple: the value stack and leaf vector of the general path were
/// two fifths of the unflatten (callgrind).
fn sequence_of_leaves<'py>(
    kind: Kind,
    leaves: &Bound<'py, PyAny>,
    n: usize,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let py = leaves.py();
    let list = kind == Kind::List;
    if let Ok(l) = leaves.cast_exact::<PyList>() {
        if l.len() != n {
            return Ok(None);
        }
        return Ok(Some(if list {
            crate::ffi::list_copy(l)?.into_any()
        } else {
            tuple_from(py, l.iter())?.into_any()
        }));
    }
    if let Ok(t) = leaves.cast_exact::<PyTuple>() {
        if t.len() != n {
            return Ok(None);
        }
        return Ok(Some(if list {
            crate::ffi::tuple_to_list(t)?.into_any()
        } else {
            tuple_from(py, t.iter())?.into_any()
        }));
    }
    Ok(None)
}

/// The items of an iterable of leaves, as a vector.
pub fn collect_leaves<'py>(
    leaves: &Bound<'py, PyAny>,
) -> PyResult<(Python<'py>, Vec<Bound<'py, PyAny>>)> {
    let py = leaves.py();
    let mut vec = spare::take(Slot::Leaves, 0);
    if crate::ffi::extend_with_items(&mut vec, leaves) {
        return Ok((py, vec));
    }
    spare::give_back(Slot::Leaves, vec);
    let vec: Vec<Bound<'py, PyAny>> = if let Ok(list) = leaves.cast::<PyList>() {
        let mut vec = spare::take(Slot::Leaves, list.len());
        vec.extend(list.iter());
        vec
    } else if let Ok(tuple) = leaves.cast::<PyTuple>() {
        let mut vec = spare::take(Slot::Leaves, tuple.len());
        vec.extend(tuple.iter());
        vec
    } else {
        let iter = leaves.try_iter().map_err(|_| {
            PyErr::from(crate::errors::TreeError::LeavesNotIterable {
                type_name: type_name(leaves),
            })
        })?;
        iter.collect::<PyResult<_>>()?
    };
    Ok((py, vec))
}

/// Builds the tree of `spec` from exactly `spec.num_leaves()` leaves, consuming them.
pub fn build<'py>(
    py: Python<'py>,
    spec: &PyTreeSpec,
    leaves: Vec<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    build_with(py, spec, leaves, &Visit::Rebuild)
}

/// What a post-order walk of a treespec does at each node.
pub enum Visit<'a, 'py> {
    /// Rebuild the containers (unflatten).
    Rebuild,
    /// optree's `traverse`: `f_leaf(leaf)` at leaves, `f_node(rebuilt container)` at nodes.
    Traverse {
        f_node: Option<&'a Bound<'py, PyAny>>,
        f_leaf: Option<&'a Bound<'py, PyAny>>,
    },
    /// optree's `walk`: `f_leaf(leaf)` at leaves, `f_node(type, node_data, children)` at nodes.
    Walk {
        f_node: Option<&'a Bound<'py, PyAny>>,
        f_leaf: Option<&'a Bound<'py, PyAny>>,
    },
    /// JAX's `walk`: `f_leaf(leaf)` at leaves, `f_node(children, node_data)` at nodes.
    JaxWalk {
        f_node: Option<&'a Bound<'py, PyAny>>,
        f_leaf: Option<&'a Bound<'py, PyAny>>,
    },
}

/// A post-order walk of `spec` over `leaves`, doing what `visit` says at each node.
pub fn build_with<'py>(
    py: Python<'py>,
    spec: &PyTreeSpec,
    mut leaves: Vec<Bound<'py, PyAny>>,
    visit: &Visit<'_, 'py>,
) -> PyResult<Bound<'py, PyAny>> {
    let expected = spec.num_leaves();
    if leaves.len() != expected {
        return Err(TreeError::LeafCount {
            face: spec.face,
            what: "PyTreeSpec",
            expected,
            got: leaves.len(),
        }
        .into());
    }
    // The stack never holds more values than there are nodes; both buffers go back to this
    // thread's spares at the end (a wide tree's buffers would otherwise be page-faulted in
    // afresh on every call).
    if let (Visit::Rebuild, Some(kind)) = (visit, flat_sequence(spec)) {
        let seq = if kind == Kind::List {
            list_from(py, leaves.drain(..))?.into_any()
        } else {
            tuple_from(py, leaves.drain(..))?.into_any()
        };
        spare::give_back(Slot::Leaves, leaves);
        return Ok(seq);
    }
    let mut stack = spare::take(Slot::Values, spec.nodes.len().min(spec.num_leaves() + 1));
    let root = match visit {
        Visit::Rebuild => rebuild_values(py, spec, leaves.drain(..), &mut stack),
        _ => build_values(py, spec, leaves.drain(..), &mut stack, visit),
    };
    spare::give_back(Slot::Leaves, leaves);
    spare::give_back(Slot::Values, stack);
    root
}

/// The loop of `build_with` for unflatten, over a value stack the caller provides: the
/// `Visit::Rebuild` arms alone, so each node costs one match on its kind.
fn rebuild_values<'py>(
    py: Python<'py>,
    spec: &PyTreeSpec,
    mut leaves: impl Iterator<Item = Bound<'py, PyAny>>,
    stack: &mut Vec<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    for node in &spec.nodes {
        let value = rebuilt(py, spec, node, &mut leaves, stack)?;
        stack.push(value);
    }
    stack.pop().invariant("a treespec rebuilt no root")
}

/// The value unflatten makes of `node`: the next leaf, None, or the container of the
/// top values of `stack`, which it takes off.
#[inline(always)]
fn rebuilt<'py>(
    py: Python<'py>,
    spec: &PyTreeSpec,
    node: &Node,
    leaves: &mut impl Iterator<Item = Bound<'py, PyAny>>,
    stack: &mut Vec<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    Ok(match node.kind {
        Kind::Leaf => leaves.next().invariant(LEAVES_COUNTED)?,
        Kind::None => py.None().into_bound(py),
        Kind::Dict => {
            // The children stay on the stack while the dict takes references to them:
            // no vector for the insertion order.
            let start = stack.len() - node.arity;
            dict_from(py, node, stack, start, spec.face)?
        }
        Kind::Tuple => seq_from_top(py, stack, node.arity, false)?,
        Kind::List => seq_from_top(py, stack, node.arity, true)?,
        Kind::NamedTuple => namedtuple_from_top(node.kept(py)?, stack, node.arity)?,
        Kind::Custom if node.custom().is_some_and(super::custom::sets_attributes) => {
            // Set straight from the value stack: no tuple of children per instance.
            let start = stack.len() - node.arity;
            let reg = node
                .custom()
                .invariant("a custom node without its registration")?;
            let obj = super::custom::attributes_node(py, reg, node.kept(py)?, &stack[start..])?;
            stack.truncate(start);
            obj
        }
        Kind::Custom => {
            // The children's tuple made straight from the value stack, as for tuples.
            let reg = node
                .custom()
                .invariant("a custom node without its registration")?;
            let children = seq_from_top(py, stack, node.arity, false)?;
            // `seq_from_top` made an exact tuple: the cast cannot fail.
            let children = children.cast_into::<PyTuple>()?;
            super::custom::unflatten(py, reg, node.kept(py)?, children)?
        }
        _ => {
            let start = stack.len() - node.arity;
            make_node(py, spec.face, node, stack.drain(start..))?
        }
    })
}

/// The loop of `build_with` for the walks, over a value stack the caller provides.
fn build_values<'py>(
    py: Python<'py>,
    spec: &PyTreeSpec,
    mut leaves: impl Iterator<Item = Bound<'py, PyAny>>,
    stack: &mut Vec<Bound<'py, PyAny>>,
    visit: &Visit<'_, 'py>,
) -> PyResult<Bound<'py, PyAny>> {
    for node in &spec.nodes {
        let value = match (node.kind, visit) {
            (_, Visit::Rebuild) => rebuilt(py, spec, node, &mut leaves, stack)?,
            (
                Kind::Leaf,
                Visit::Traverse { f_leaf, .. }
                | Visit::Walk { f_leaf, .. }
                | Visit::JaxWalk { f_leaf, .. },
            ) => {
                let leaf = leaves.next().invariant(LEAVES_COUNTED)?;
                match f_leaf {
                    Some(f) => f.call1((leaf,))?,
                    None => leaf,
                }
            }
            (_, Visit::Traverse { f_node, .. }) => {
                let start = stack.len() - node.arity;
                let obj = rebuild(py, spec.face, node, stack.drain(start..))?;
                match f_node {
                    Some(f) => f.call1((obj,))?,
                    None => obj,
                }
            }
            (_, Visit::JaxWalk { f_node, .. }) => {
                let start = stack.len() - node.arity;
                let children = tuple_from(py, stack.drain(start..))?;
                match f_node {
                    Some(f) => {
                        let data = if node.kind == Kind::NamedTuple {
                            // JAX hands a namedtuple's class to walk's f_node.
                            node.kept(py)?.clone()
                        } else {
                            let data = super::node_data::jax_node_data(py, node)?;
                            if data.is_none() {
                                data
                            } else {
                                data.get_item(1)?
                            }
                        };
                        f.call1((children, data))?
                    }
                    None => rebuild(
                        py,
                        spec.face,
                        node,
                        children.iter().collect::<Vec<_>>().into_iter(),
                    )?,
                }
            }
            (_, Visit::Walk { f_node, .. }) => {
                let start = stack.len() - node.arity;
                let children = tuple_from(py, stack.drain(start..))?;
                match f_node {
                    Some(f) => {
                        let ty = node.py_type(py).unwrap_or_else(|| py.None().into_bound(py));
                        f.call1((ty, super::node_data::node_data(py, node)?, children))?
                    }
                    None => rebuild(
                        py,
                        spec.face,
                        node,
                        children.iter().collect::<Vec<_>>().into_iter(),
                    )?,
                }
            }
        };
        stack.push(value);
    }
    stack.pop().invariant("a treespec rebuilt no root")
}

/// An empty dict with room for `n` items. Measured on a 10,000-key dict rebuild: the
/// growth steps of an unsized dict are a fifth of the time.
fn new_dict(py: Python<'_>, n: usize) -> PyResult<Bound<'_, PyAny>> {
    // Up to 5 items fit a new dict's smallest table (CPython presizes nothing below that).
    if n <= 5 {
        return Ok(PyDict::new(py).into_any());
    }
    Ok(crate::ffi::dict_presized(py, n)?.into_any())
}

/// The dict of a `Kind::Dict` node holding the values `stack[start..]` (leaf order), which
/// it takes off the stack: copied from a template when it can be, else built key by key.
fn dict_from<'py>(
    py: Python<'py>,
    node: &Node,
    stack: &mut Vec<Bound<'py, PyAny>>,
    start: usize,
    face: Face,
) -> PyResult<Bound<'py, PyAny>> {
    if let Some(copied) = super::dict_template::copy_with_values(py, node, stack, start, face) {
        return copied;
    }
    let d = new_dict(py, node.arity)?;
    fill_mapping(py, &d, node, &stack[start..], face)?;
    stack.truncate(start);
    Ok(d)
}

/// A node rebuilt from its children, None included (it has none).
fn rebuild<'py>(
    py: Python<'py>,
    face: Face,
    node: &Node,
    children: impl ExactSizeIterator<Item = Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    if node.kind == Kind::None {
        return Ok(py.None().into_bound(py));
    }
    make_node(py, face, node, children)
}

/// A new tuple (or list) that takes over the top `n` values of `stack`. The hot case of
/// unflatten, without the draining iterator `make_node` takes: a 500-deep chain of lists spent
/// a fifth of its own instructions on it.
#[inline(always)]
fn seq_from_top<'py>(
    py: Python<'py>,
    stack: &mut Vec<Bound<'py, PyAny>>,
    n: usize,
    list: bool,
) -> PyResult<Bound<'py, PyAny>> {
    match crate::ffi::seq_from_top(py, stack, n, list) {
        Some(seq) => Ok(seq),
        None => Err(seq_failed(py)),
    }
}

/// Why `seq_from_top` made nothing: a memory error, or a treespec that asked for more values
/// than were built.
#[cold]
#[inline(never)]
fn seq_failed(py: Python<'_>) -> PyErr {
    PyErr::take(py).unwrap_or_else(|| crate::internal!("a sequence of more values than were built"))
}

/// A new instance of the namedtuple class `ty` that takes over the top `n` values of
/// `stack`: what `ty(*values)` gives. A class exactly as `collections.namedtuple` (or
/// `typing.NamedTuple`) made it is allocated and filled here, as `tuple.__new__(ty, values)`
/// would (all its Python-level `__new__` does): no Python frame, argument tuple or
/// intermediate tuple per namedtuple (they were two fifths of a mixed tree's unflatten).
fn namedtuple_from_top<'py>(
    ty: &Bound<'py, PyAny>,
    stack: &mut Vec<Bound<'py, PyAny>>,
    n: usize,
) -> PyResult<Bound<'py, PyAny>> {
    match ty.cast::<pyo3::types::PyType>() {
        // A plain namedtuple class is a tuple subclass (checked, with its version tag, by
        // `plain_namedtuple_arity`; `tuple_subclass_from_top` checks it again).
        Ok(cls) if types::plain_namedtuple_arity(cls) == Some(n) => {
            crate::ffi::tuple_subclass_from_top(cls, stack, n)
        }
        _ => ty.call1(seq_from_top(ty.py(), stack, n, false)?.cast_into::<PyTuple>()?),
    }
}

/// Fills a mapping in the original dict's order. Children come in leaf (sorted) order; when
/// the insertion order differs, the node's recorded positions give it, so every key is
/// inserted once.
pub fn fill_mapping<'py>(
    py: Python<'py>,
    target: &Bound<'py, PyAny>,
    node: &Node,
    values: &[Bound<'py, PyAny>],
    face: Face,
) -> PyResult<()> {
    let keys = node
        .keys()
        .as_ref()
        .invariant("a mapping node without its keys")?
        .bind(py);
    // JAX rebuilds dicts in sorted key order; optree in the original insertion order.
    let positions = if !face.rules().records_insertion_order {
        None
    } else {
        node.insertion()
    };
    let exact_dict = target.cast_exact::<PyDict>().ok();
    let set = |key: &Bound<'py, PyAny>, value: &Bound<'py, PyAny>| -> PyResult<()> {
        match exact_dict {
            Some(d) => crate::ffi::dict_set_item(d, key, value),
            None => target.set_item(key, value),
        }
    };
    match positions {
        None => {
            for (key, value) in keys.iter().zip(values) {
                set(&key, value)?;
            }
        }
        Some(positions) => {
            for i in positions.iter() {
                set(&keys.get_item(i)?, &values[i])?;
            }
        }
    }
    Ok(())
}

pub fn make_node<'py>(
    py: Python<'py>,
    face: Face,
    node: &Node,
    children: impl ExactSizeIterator<Item = Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let data = || node.kept(py);
    Ok(match node.kind {
        Kind::Tuple => tuple_from(py, children)?.into_any(),
        Kind::List => list_from(py, children)?.into_any(),
        Kind::Dict => dict_from(py, node, &mut children.collect(), 0, face)?,
        Kind::NamedTuple => {
            let mut values = children.collect::<Vec<_>>();
            let n = values.len();
            namedtuple_from_top(data()?, &mut values, n)?
        }
        Kind::StructSeq => data()?.call1((tuple_from(py, children)?,))?,
        Kind::OrderedDict => {
            let d = types::collections(py).ordered_dict.bind(py).call0()?;
            fill_mapping(py, &d, node, &children.collect::<Vec<_>>(), face)?;
            d
        }
        Kind::DefaultDict => {
            let d = types::collections(py)
                .default_dict
                .bind(py)
                .call1((data()?,))?;
            fill_mapping(py, &d, node, &children.collect::<Vec<_>>(), face)?;
            d
        }
        Kind::Deque => {
            let items = list_from(py, children)?;
            types::collections(py)
                .deque
                .bind(py)
                .call1((items, data()?))?
        }
        Kind::Custom => {
            let reg = node
                .custom()
                .invariant("a custom node without its registration")?;
            super::custom::unflatten(py, reg, data()?, tuple_from(py, children)?)?
        }
        Kind::Leaf | Kind::None => {
            return Err(crate::internal!(
                "a {:?} node rebuilt with children",
                node.kind
            ))
        }
    })
}
