//! Every exception oxtree raises on its own account is built here, on the slow path.

use std::fmt;

use pyo3::exceptions::{PyIndexError, PyRecursionError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;

/// What went wrong, with everything the message needs.
#[derive(Debug)]
pub enum TreeError {
    /// A tree does not have the structure a treespec expects at `path`.
    Mismatch {
        path: String,
        expected: String,
        got: String,
        which: Option<String>,
    },
    /// `unflatten` was given the wrong number of leaves.
    LeafCount {
        expected: usize,
        got: usize,
        spec: String,
    },
    /// A container is its own ancestor.
    Cycle { closes_at: String, ancestor: String },
    /// Nesting deeper than the depth limit, with no cycle.
    TooDeep { path: String, limit: usize },
    /// A container changed size while it was being walked.
    Mutated { path: String, what: &'static str },
    /// A bad argument.
    Type(String),
    /// A bad value (of a pickled state, a composition...).
    Value(String),
    /// An index out of range.
    Index(String),
    /// A result too large to allocate (its size came from the input).
    Memory(String),
}

impl fmt::Display for TreeError {
    #[cold]
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TreeError::Mismatch {
                path,
                expected,
                got,
                which,
            } => {
                write!(f, "tree structure mismatch at {path}")?;
                if let Some(which) = which {
                    write!(f, " (in {which})")?;
                }
                write!(f, ": expected {expected}, got {got}")
            }
            TreeError::LeafCount {
                expected,
                got,
                spec,
            } => {
                let which = if got < expected {
                    "too few"
                } else {
                    "too many"
                };
                write!(
                    f,
                    "{which} leaves for {spec}: expected {expected}, got {got}"
                )
            }
            TreeError::Cycle {
                closes_at,
                ancestor,
            } => write!(
                f,
                "cycle detected: the container at {closes_at} is the same object as its \
                 ancestor at {ancestor}; a pytree cannot contain itself (use graph flattening \
                 for objects with cyclic references)"
            ),
            TreeError::TooDeep { path, limit } => write!(
                f,
                "maximum tree depth ({limit}) exceeded at {path} while walking the tree"
            ),
            TreeError::Mutated { path, what } => {
                write!(
                    f,
                    "the {what} at {path} changed size while the tree was walked"
                )
            }
            TreeError::Type(msg) | TreeError::Value(msg) | TreeError::Index(msg) => {
                f.write_str(msg)
            }
            TreeError::Memory(msg) => f.write_str(msg),
        }
    }
}

impl From<TreeError> for PyErr {
    #[cold]
    fn from(err: TreeError) -> PyErr {
        let msg = err.to_string();
        match err {
            TreeError::Mismatch { .. } | TreeError::LeafCount { .. } | TreeError::Value(_) => {
                PyValueError::new_err(msg)
            }
            TreeError::Cycle { .. } | TreeError::TooDeep { .. } => PyRecursionError::new_err(msg),
            TreeError::Mutated { .. } => PyRuntimeError::new_err(msg),
            TreeError::Type(_) => PyTypeError::new_err(msg),
            TreeError::Index(_) => PyIndexError::new_err(msg),
            TreeError::Memory(_) => pyo3::exceptions::PyMemoryError::new_err(msg),
        }
    }
}

/// A short `repr` of an object for messages: at most `limit` characters.
#[cold]
pub fn short_repr(obj: &Bound<'_, PyAny>, limit: usize) -> String {
    let text = match obj.repr() {
        Ok(r) => r.to_string(),
        Err(_) => format!("<{} object>", type_name(obj)),
    };
    if text.chars().count() <= limit {
        text
    } else {
        let cut: String = text.chars().take(limit.saturating_sub(3)).collect();
        format!("{cut}...")
    }
}

/// The `__name__` of an object's type.
pub fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_what_and_where() {
        let e = TreeError::Mismatch {
            path: "tree[1]['b']".into(),
            expected: "tuple of length 2".into(),
            got: "list of length 2: [1, 2]".into(),
            which: None,
        };
        let s = e.to_string();
        assert!(s.contains("tree[1]['b']") && s.contains("tuple") && s.contains("list"));
        let e = TreeError::LeafCount {
            expected: 3,
            got: 2,
            spec: "PyTreeSpec((*, *, *))".into(),
        };
        assert_eq!(
            e.to_string(),
            "too few leaves for PyTreeSpec((*, *, *)): expected 3, got 2"
        );
        let e = TreeError::Cycle {
            closes_at: "tree[1]".into(),
            ancestor: "tree".into(),
        };
        assert!(e
            .to_string()
            .starts_with("cycle detected: the container at tree[1]"));
    }
}
