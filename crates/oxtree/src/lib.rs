//! oxtree's Rust core: the `oxtree._core` extension module.
//!
//! This file only declares the module; the logic lives in modules named by noun.

mod api;
mod errors;
mod graph;
mod jax_api;
mod kind;
mod paths;
mod registry;
mod spare;
mod treespec;
mod types;

use pyo3::prelude::*;

#[pymodule]
#[pyo3(name = "_core")]
fn core_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("MAX_RECURSION_DEPTH", treespec::MAX_DEPTH)?;
    m.add("NONE_IS_LEAF", true)?;
    m.add("NONE_IS_NODE", false)?;
    m.add("GLOBAL_NAMESPACE", "")?;
    m.add_class::<treespec::PyTreeSpec>()?;
    // Imported now, so that no walk needs to import it (a walk of plain leaves then runs no
    // Python code: see `flatten::leaf_sequence`).
    types::collections(m.py());
    m.add("PyTreeKind", kind::py_tree_kind(m.py())?)?;
    api::register(m)?;
    paths::register(m)?;
    jax_api::register(m)?;
    graph::register(m)?;
    treespec::prefix::register(m)?;
    Ok(())
}
