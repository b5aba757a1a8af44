//! The two faces over the one engine: the entry points `oxtree` (optree's names, signatures and
//! insertion-ordered dicts) and `oxtree.tree_util`/`oxtree.tree` (JAX's sorted dicts and texts)
//! call. Each face only chooses what it passes to the shared walks: dict order, whether `None`
//! is a leaf, its namespace, its error language.

pub mod jax;
pub mod options;
pub mod optree;

use pyo3::prelude::*;

/// Which library's semantics a treespec follows where optree and JAX differ: dict order on
/// rebuild, deque and struct sequences as nodes or leaves, repr grammar, `node_data` and
/// `walk` forms, and whether the three mapping kinds match each other.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Face {
    Optree,
    Jax,
}

impl Face {
    /// The face's name in a pickle's state and `PyTreeSpec._face`.
    pub fn name(self) -> &'static str {
        match self {
            Face::Optree => "optree",
            Face::Jax => "jax",
        }
    }

    /// The face `name` names.
    pub fn from_name(name: &str) -> Option<Face> {
        match name {
            "optree" => Some(Face::Optree),
            "jax" => Some(Face::Jax),
            _ => None,
        }
    }

    /// The face a core entry point's `jax=` flag names.
    pub fn of(jax: bool) -> Face {
        if jax {
            Face::Jax
        } else {
            Face::Optree
        }
    }
}

/// An optional argument whose every value counts, None included (`tree_set_matching`'s
/// `value`, `tree_labels`'s `default`): the default `Given(None)` says it was left out.
pub struct Given<'py>(pub Option<Bound<'py, PyAny>>);

impl<'a, 'py> FromPyObject<'a, 'py> for Given<'py> {
    type Error = PyErr;

    fn extract(obj: pyo3::Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        Ok(Given(Some(obj.to_owned())))
    }
}
