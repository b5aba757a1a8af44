//! oxtree's Rust core: the `oxtree._core` extension module.
//!
//! This file only declares the module; the logic lives in modules named by noun.

mod errors;
mod face;
mod ffi;
mod graph;
mod kind;
mod paths;
mod registry;
mod spare;
mod treespec;
mod types;

use pyo3::prelude::*;

// The walks read dicts with `PyDict_Next` and lists through borrowed items, with no
// critical sections: on a free-threaded CPython the module asks to keep the GIL on.
#[pymodule(gil_used = true)]
#[pyo3(name = "_core")]
fn core_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("MAX_RECURSION_DEPTH", treespec::MAX_DEPTH)?;
    m.add("NONE_IS_LEAF", true)?;
    m.add("NONE_IS_NODE", false)?;
    m.add("GLOBAL_NAMESPACE", "")?;
    // Facts of the interpreter this module was built for (and so is loaded into), under
    // optree's names: `sys.abiflags` has "d" for a debug build, "t" for a free-threaded one.
    let abiflags: String = m
        .py()
        .import("sys")?
        .getattr("abiflags")
        .and_then(|f| f.extract())
        .unwrap_or_default();
    m.add("Py_DEBUG", abiflags.contains('d'))?;
    m.add("Py_GIL_DISABLED", abiflags.contains('t'))?;
    // optree's flags for optional features of its build; oxtree has none of these (no
    // frozendict node kind, no per-interpreter registries, no pybind11).
    for flag in [
        "OPTREE_HAS_FROZENDICT",
        "OPTREE_HAS_SUBINTERPRETER_SUPPORT",
        "PYBIND11_HAS_NATIVE_ENUM",
        "PYBIND11_HAS_SUBINTERPRETER_SUPPORT",
    ] {
        m.add(flag, false)?;
    }
    m.add_class::<treespec::PyTreeSpec>()?;
    // Imported now, so that no walk needs to import it (a walk of plain leaves then runs no
    // Python code: see `flatten::leaf_sequence`).
    types::collections(m.py());
    m.add("PyTreeKind", kind::py_tree_kind(m.py())?)?;
    face::optree::register(m)?;
    paths::register(m)?;
    face::jax::register(m)?;
    graph::register(m)?;
    treespec::prefix::register(m)?;
    Ok(())
}
