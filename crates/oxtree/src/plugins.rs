//! Every call from the core back into oxtree's own Python modules. Each is a feature written in
//! Python that a core object offers (a method of `PyTreeSpec`, a check against a Python class);
//! it is looked up by name when it is used (on a walk only to ask JAX's registry about a type
//! met for the first time), so importing `oxtree._core` imports none of these modules. `docs/architecture.md` gives the reason for each.

use pyo3::prelude::*;

/// A Python function or class of the package that the core calls or checks against.
#[derive(Clone, Copy)]
pub enum Plugin {
    /// `oxtree.accessors.PyTreeEntry`: a registration's `path_entry_type` must subclass it
    /// (optree's entry classes are Python classes users subclass).
    EntryBase,
    /// `oxtree.accessors._from_steps`: `PyTreeSpec.accessors()` builds optree's accessor
    /// objects from the key walk's steps.
    AccessorsFromSteps,
    /// `oxtree.serialization.treespec_to_json`: `PyTreeSpec.to_json()` (the versioned JSON
    /// format and its allow-list live with the loader, in Python).
    TreespecToJson,
    /// `oxtree.pretty.treespec_html`: `PyTreeSpec._repr_html_()`, the notebook view.
    TreespecHtml,
    /// `oxtree._jax_registry.describe`: how JAX's own registry takes a type apart, asked once
    /// per type by the walks that read JAX's registry (`jax_registry`; JAX's registry is made
    /// of JAX's Python objects).
    JaxDescribe,
}

impl Plugin {
    fn location(self) -> (&'static str, &'static str) {
        match self {
            Plugin::EntryBase => ("oxtree.accessors", "PyTreeEntry"),
            Plugin::AccessorsFromSteps => ("oxtree.accessors", "_from_steps"),
            Plugin::TreespecToJson => ("oxtree.serialization", "treespec_to_json"),
            Plugin::TreespecHtml => ("oxtree.pretty", "treespec_html"),
            Plugin::JaxDescribe => ("oxtree._jax_registry", "describe"),
        }
    }

    /// The object, from its module (imported on the first use, then found in `sys.modules`).
    pub fn get(self, py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
        let (module, name) = self.location();
        py.import(module)?.getattr(name)
    }
}
