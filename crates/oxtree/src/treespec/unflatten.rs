//! Rebuilding trees from leaves: one loop over the post-order nodes with a value stack.

use pyo3::exceptions::PyTypeError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

use super::{Face, Node, PyTreeSpec};
use crate::errors::{type_name, Invariant, TreeError};

const LEAVES_COUNTED: &str = "the treespec has fewer leaf nodes than its leaf count";
use crate::kind::Kind;
use crate::spare::{self, Slot};
use crate::types;

/// `spec.unflatten(leaves)` for any iterable of leaves.
pub fn unflatten_iterable<'py>(
    spec: &PyTreeSpec,
    leaves: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let (py, vec) = collect_leaves(leaves)?;
    build(py, spec, vec)
}

/// The items of an iterable of leaves, as a vector.
pub fn collect_leaves<'py>(
    leaves: &Bound<'py, PyAny>,
) -> PyResult<(Python<'py>, Vec<Bound<'py, PyAny>>)> {
    let py = leaves.py();
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
            PyTypeError::new_err(format!(
                "leaves must be an iterable of leaves, got {}",
                type_name(leaves)
            ))
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
    let mut stack = spare::take(Slot::Values, spec.nodes.len().min(spec.num_leaves() + 1));
    let root = build_values(py, spec, leaves.drain(..), &mut stack, visit);
    spare::give_back(Slot::Leaves, leaves);
    spare::give_back(Slot::Values, stack);
    root
}

/// The loop of `build_with`, over a value stack the caller provides.
fn build_values<'py>(
    py: Python<'py>,
    spec: &PyTreeSpec,
    mut leaves: impl Iterator<Item = Bound<'py, PyAny>>,
    stack: &mut Vec<Bound<'py, PyAny>>,
    visit: &Visit<'_, 'py>,
) -> PyResult<Bound<'py, PyAny>> {
    for node in &spec.nodes {
        let value = match (node.kind, visit) {
            (Kind::Leaf, Visit::Rebuild) => leaves.next().invariant(LEAVES_COUNTED)?,
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
            (Kind::None, Visit::Rebuild) => py.None().into_bound(py),
            (Kind::Dict, Visit::Rebuild) => {
                // The children stay on the stack while the dict takes references to them:
                // no vector for the insertion order.
                let start = stack.len() - node.arity;
                dict_from(py, node, stack, start, spec.face)?
            }
            (Kind::Tuple, Visit::Rebuild) => seq_from_top(py, stack, node.arity, false),
            (Kind::List, Visit::Rebuild) => seq_from_top(py, stack, node.arity, true),
            (Kind::NamedTuple, Visit::Rebuild) => {
                namedtuple_from_top(node.kept_data(py), stack, node.arity)?
            }
            (_, Visit::Rebuild) => {
                let start = stack.len() - node.arity;
                make_node(py, spec.face, node, stack.drain(start..))?
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
                let children = tuple_from(py, stack.drain(start..));
                match f_node {
                    Some(f) => {
                        let data = if node.kind == Kind::NamedTuple {
                            // JAX hands a namedtuple's class to walk's f_node.
                            node.kept_data(py).clone()
                        } else {
                            let data = super::ops::jax_node_data(py, node)?;
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
                let children = tuple_from(py, stack.drain(start..));
                match f_node {
                    Some(f) => {
                        let ty = node.py_type(py).unwrap_or_else(|| py.None().into_bound(py));
                        f.call1((ty, super::ops::node_data(py, node)?, children))?
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

extern "C" {
    // CPython's own presized constructor (exported by libpython, left out of pyo3-ffi as
    // private API): a dict that holds `minused` items without resizing.
    fn _PyDict_NewPresized(minused: ffi::Py_ssize_t) -> *mut ffi::PyObject;
}

/// An empty dict with room for `n` items. Measured on a 10,000-key dict rebuild: the
/// growth steps of an unsized dict are a fifth of the time.
fn new_dict(py: Python<'_>, n: usize) -> PyResult<Bound<'_, PyAny>> {
    // Up to 5 items fit a new dict's smallest table (CPython presizes nothing below that).
    if n <= 5 {
        return Ok(PyDict::new(py).into_any());
    }
    // SAFETY: returns a new reference to an empty dict, or NULL with an exception set.
    unsafe { Bound::from_owned_ptr_or_err(py, _PyDict_NewPresized(n as ffi::Py_ssize_t)) }
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
#[inline]
fn seq_from_top<'py>(
    py: Python<'py>,
    stack: &mut Vec<Bound<'py, PyAny>>,
    n: usize,
    list: bool,
) -> Bound<'py, PyAny> {
    // SAFETY: a new sequence of `n` NULL slots (NULL itself on memory error, which
    // `from_owned_ptr` turns into a panic caught at the boundary, the stack still owning its
    // values), filled with the matching `SET_ITEM`.
    unsafe {
        if list {
            let seq = Bound::from_owned_ptr(py, ffi::PyList_New(n as ffi::Py_ssize_t));
            move_top_into(&seq, stack, n, ffi::PyList_SET_ITEM);
            seq
        } else {
            let seq = Bound::from_owned_ptr(py, ffi::PyTuple_New(n as ffi::Py_ssize_t));
            move_top_into(&seq, stack, n, ffi::PyTuple_SET_ITEM);
            seq
        }
    }
}

/// Moves the top `n` values of `stack` into the `n` NULL slots of `seq` with `set`.
///
/// # Safety
/// `seq` must be a new tuple (or tuple subclass instance) or list of exactly `n` NULL slots,
/// seen by no other code yet, and `set` the matching `SET_ITEM`.
#[inline(always)]
unsafe fn move_top_into<'py>(
    seq: &Bound<'py, PyAny>,
    stack: &mut Vec<Bound<'py, PyAny>>,
    n: usize,
    set: unsafe fn(*mut ffi::PyObject, ffi::Py_ssize_t, *mut ffi::PyObject),
) {
    let start = stack.len() - n;
    // SAFETY: each slot is filled once with a reference read out of the stack, whose length
    // is cut below those values at once, so each reference changes owner exactly once;
    // nothing between can run Python code.
    unsafe {
        let values = stack.as_ptr().add(start);
        for i in 0..n {
            set(
                seq.as_ptr(),
                i as ffi::Py_ssize_t,
                (*values.add(i)).as_ptr(),
            );
        }
        stack.set_len(start);
    }
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
    let py = ty.py();
    if types::plain_namedtuple_arity(ty) != Some(n) {
        return ty.call1(seq_from_top(py, stack, n, false).cast_into::<PyTuple>()?);
    }
    let raw: *mut ffi::PyTypeObject = ty.as_ptr().cast();
    // SAFETY: `ty` is a tuple subclass (checked, with its version tag, by
    // `plain_namedtuple_arity`). Its `tp_alloc` returns a new instance with `n` NULL slots
    // (or NULL with an exception set, the stack still owning its values), each filled once;
    // a collection meanwhile would skip NULL slots, and none can run, as nothing here runs
    // Python code. The instance is then tracked by the collector as `tuple.__new__` leaves it.
    unsafe {
        let alloc = (*raw).tp_alloc.unwrap_or(ffi::PyType_GenericAlloc);
        let obj = Bound::from_owned_ptr_or_err(py, alloc(raw, n as ffi::Py_ssize_t))?;
        move_top_into(&obj, stack, n, ffi::PyTuple_SET_ITEM);
        if ffi::PyObject_GC_IsTracked(obj.as_ptr()) == 0 {
            ffi::PyObject_GC_Track(obj.as_ptr().cast());
        }
        Ok(obj)
    }
}

/// Moves `items` into the `n` NULL slots of a new sequence with `set` (which steals).
///
/// # Safety
/// `seq` must be a new tuple or list of exactly `items.len()` NULL slots, seen by no other
/// code yet, and `set` the matching `SET_ITEM`.
unsafe fn fill_new<'py>(
    seq: &Bound<'py, PyAny>,
    items: impl ExactSizeIterator<Item = Bound<'py, PyAny>>,
    set: unsafe fn(*mut ffi::PyObject, ffi::Py_ssize_t, *mut ffi::PyObject),
) {
    let n = items.len();
    let mut i = 0;
    for item in items.take(n) {
        // SAFETY: slot `i < n` of a new sequence, filled once with a reference it steals.
        unsafe { set(seq.as_ptr(), i as ffi::Py_ssize_t, item.into_ptr()) };
        i += 1;
    }
    assert_eq!(
        i, n,
        "an ExactSizeIterator yielded fewer items than it promised"
    );
}

/// A new tuple that takes over the references of `items`.
pub fn tuple_from<'py>(
    py: Python<'py>,
    items: impl ExactSizeIterator<Item = Bound<'py, PyAny>>,
) -> Bound<'py, PyTuple> {
    // SAFETY: PyTuple_New returns a new tuple of `n` NULL slots (NULL on memory error, which
    // `from_owned_ptr` turns into a panic caught at the boundary), filled by `fill_new`.
    unsafe {
        let t = Bound::from_owned_ptr(py, ffi::PyTuple_New(items.len() as ffi::Py_ssize_t));
        fill_new(&t, items, ffi::PyTuple_SET_ITEM);
        t.cast_into_unchecked()
    }
}

/// A new list that takes over the references of `items`.
pub fn list_from<'py>(
    py: Python<'py>,
    items: impl ExactSizeIterator<Item = Bound<'py, PyAny>>,
) -> Bound<'py, PyList> {
    // SAFETY: as in `tuple_from`, with a new list.
    unsafe {
        let l = Bound::from_owned_ptr(py, ffi::PyList_New(items.len() as ffi::Py_ssize_t));
        fill_new(&l, items, ffi::PyList_SET_ITEM);
        l.cast_into_unchecked()
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
    let positions = if face == Face::Jax {
        None
    } else {
        node.insertion()
    };
    let exact_dict = target.is_exact_instance_of::<PyDict>();
    let set = |key: &Bound<'py, PyAny>, value: &Bound<'py, PyAny>| -> PyResult<()> {
        if exact_dict {
            // SAFETY: `target` is an exact dict and both pointers are live; PyDict_SetItem
            // does not steal references.
            if unsafe { ffi::PyDict_SetItem(target.as_ptr(), key.as_ptr(), value.as_ptr()) } < 0 {
                return Err(PyErr::fetch(py));
            }
            Ok(())
        } else {
            target.set_item(key, value)
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
    let data = || node.kept_data(py);
    Ok(match node.kind {
        Kind::Tuple => tuple_from(py, children).into_any(),
        Kind::List => list_from(py, children).into_any(),
        Kind::Dict => dict_from(py, node, &mut children.collect(), 0, face)?,
        Kind::NamedTuple => {
            let mut values = children.collect::<Vec<_>>();
            let n = values.len();
            namedtuple_from_top(data(), &mut values, n)?
        }
        Kind::StructSeq => data().call1((tuple_from(py, children),))?,
        Kind::OrderedDict => {
            let d = types::collections(py).ordered_dict.bind(py).call0()?;
            fill_mapping(py, &d, node, &children.collect::<Vec<_>>(), face)?;
            d
        }
        Kind::DefaultDict => {
            let d = types::collections(py)
                .default_dict
                .bind(py)
                .call1((data(),))?;
            fill_mapping(py, &d, node, &children.collect::<Vec<_>>(), face)?;
            d
        }
        Kind::Deque => {
            let items = list_from(py, children);
            types::collections(py)
                .deque
                .bind(py)
                .call1((items, data()))?
        }
        Kind::Custom => {
            let reg = node
                .custom()
                .invariant("a custom node without its registration")?;
            super::custom::unflatten(py, reg, data(), tuple_from(py, children))?
        }
        Kind::Leaf | Kind::None => {
            return Err(crate::internal!(
                "a {:?} node rebuilt with children",
                node.kind
            ))
        }
    })
}
