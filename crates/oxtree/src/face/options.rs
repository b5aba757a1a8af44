//! The options of one walk, chosen once per call by a face's entry point.

use pyo3::prelude::*;

use crate::errors::{type_name, TreeError};
use crate::face::Face;

/// The options of one walk.
pub struct Options<'a, 'py> {
    pub is_leaf: Option<&'a Bound<'py, PyAny>>,
    /// `is_leaf` takes `(path, obj)` (JAX's `is_leaf_takes_path`).
    pub is_leaf_takes_path: bool,
    pub none_is_leaf: bool,
    pub namespace: &'a str,
    /// Ask custom nodes for their keys while walking.
    pub with_keys: bool,
    pub face: Face,
    /// Read JAX's registry too (`jax_registry`), as the JAX face always does: `oxtree.jax`,
    /// and the main face once `use_jax_registry` turns it on.
    pub jax_registry: bool,
}

impl<'a, 'py> Options<'a, 'py> {
    pub fn new(
        is_leaf: Option<&'a Bound<'py, PyAny>>,
        none_is_leaf: bool,
        namespace: &'a str,
    ) -> Self {
        Options {
            is_leaf,
            is_leaf_takes_path: false,
            none_is_leaf,
            namespace,
            with_keys: false,
            face: Face::Optree,
            jax_registry: crate::jax_registry::main_face_reads(),
        }
    }

    /// These options with JAX's registry read or not as a call's `jax_registry=` says (None:
    /// as `use_jax_registry` set it).
    pub fn with_jax_registry(self, jax_registry: Option<bool>) -> Self {
        Options {
            jax_registry: jax_registry.unwrap_or(self.jax_registry),
            ..self
        }
    }

    /// Whether the walk reads JAX's registry for types oxtree does not register.
    #[inline]
    pub fn reads_jax(&self) -> bool {
        self.jax_registry || self.face.rules().reads_jax_registry
    }

    /// [`Options::new`] for the face a `jax=` flag names.
    pub fn on_face(
        is_leaf: Option<&'a Bound<'py, PyAny>>,
        none_is_leaf: bool,
        namespace: &'a str,
        jax: bool,
    ) -> Self {
        Options {
            face: Face::of(jax),
            ..Options::new(is_leaf, none_is_leaf, namespace)
        }
    }
}

pub fn check_is_leaf(is_leaf: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
    match is_leaf {
        Some(f) if !f.is_callable() => Err(TreeError::IsLeafNotCallable {
            type_name: type_name(f),
        }
        .into()),
        _ => Ok(()),
    }
}
