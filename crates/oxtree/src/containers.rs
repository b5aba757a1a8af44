//! Python tuples and lists built from Rust vectors and iterators, taking over the references
//! (built with direct constructors, never Python-level calls).

use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

/// A list that takes over the references in `items` (whose buffer this thread keeps for the
/// next walk: see `spare`).
pub fn unflatten_list<'py>(
    py: Python<'py>,
    mut items: Vec<Bound<'py, PyAny>>,
) -> Bound<'py, PyList> {
    let list = crate::ffi::list_from_vec_infallible(py, &mut items);
    crate::spare::give_back(crate::spare::Slot::Leaves, items);
    list
}

/// A 2-tuple that takes over the two references.
pub fn tuple_pair<'py>(
    py: Python<'py>,
    a: Bound<'py, PyAny>,
    b: Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyTuple>> {
    crate::ffi::tuple_pair_of(py, a, b)
}

/// A tuple that takes over the references in `items`.
pub fn tuple_from_vec<'py>(
    py: Python<'py>,
    items: Vec<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyTuple>> {
    tuple_from(py, items.into_iter())
}

/// A new tuple that takes over the references of `items`.
pub fn tuple_from<'py>(
    py: Python<'py>,
    items: impl ExactSizeIterator<Item = Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyTuple>> {
    crate::ffi::tuple_from(py, items)
}

/// A new list that takes over the references of `items`.
pub fn list_from<'py>(
    py: Python<'py>,
    items: impl ExactSizeIterator<Item = Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyList>> {
    crate::ffi::list_from(py, items)
}

/// A list that takes over the references in `items`.
pub fn list_from_vec<'py>(py: Python<'py>, items: Vec<Bound<'py, PyAny>>) -> Bound<'py, PyList> {
    unflatten_list(py, items)
}
