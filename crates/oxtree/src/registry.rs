//! The registry of custom node types: namespace -> type -> registration.
//!
//! Read-mostly: every walk takes one snapshot (an `Arc`) at its start, so a registration
//! made by another thread mid-walk never changes the rules under a walk. Writers build a new
//! map and swap it in under the lock.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use pyo3::types::PyType;

use crate::types::PtrMap;

/// How a registered type is taken apart and put back together.
pub struct Registration {
    pub ty: Py<PyType>,
    /// `flatten(obj) -> (children, aux_data)` or `(children, aux_data, entries)`.
    pub flatten: Py<PyAny>,
    /// `unflatten(aux_data, children) -> obj`.
    pub unflatten: Py<PyAny>,
    /// JAX's `flatten_with_keys(obj) -> ([(key, child), ...], aux_data)`, if given.
    pub flatten_with_keys: Option<Py<PyAny>>,
    /// The namespace it was registered in ("" for the global one).
    pub namespace: String,
}

/// One immutable version of the registry.
#[derive(Default)]
pub struct Registry {
    global: PtrMap<Arc<Registration>>,
    namespaced: HashMap<String, PtrMap<Arc<Registration>>>,
}

impl Registry {
    /// True when nothing is registered: the walk can skip lookups altogether.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.global.is_empty() && self.namespaced.is_empty()
    }

    /// The registration for `ty` in `namespace`, falling back to the global namespace.
    #[inline]
    pub fn lookup(
        &self,
        ty: *mut pyo3::ffi::PyTypeObject,
        namespace: &str,
    ) -> Option<&Arc<Registration>> {
        let key = ty as usize;
        if !namespace.is_empty() {
            if let Some(found) = self.namespaced.get(namespace).and_then(|m| m.get(&key)) {
                return Some(found);
            }
        }
        self.global.get(&key)
    }
}

static REGISTRY: Mutex<Option<Arc<Registry>>> = Mutex::new(None);

/// The registry as it is now; cheap (one lock and one reference count).
pub fn snapshot() -> Arc<Registry> {
    let mut guard = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
    guard
        .get_or_insert_with(|| Arc::new(Registry::default()))
        .clone()
}
