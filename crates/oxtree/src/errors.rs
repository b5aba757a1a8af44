//! Every exception oxtree raises on its own account is built here, on the slow path.

use std::fmt;

use pyo3::exceptions::{PyIndexError, PyRecursionError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyList;

use crate::face::Face;
use crate::kind::Kind;

/// What a treespec node expects, copied out of the node for a message.
#[derive(Debug)]
pub struct Expected {
    pub kind: Kind,
    pub arity: usize,
    /// The node's type: the namedtuple or struct sequence class, the registered class.
    pub ty: Option<Py<PyAny>>,
    /// The key list of a mapping node.
    pub keys: Option<Py<PyList>>,
    /// A custom node's aux data; a defaultdict's factory.
    pub data: Option<Py<PyAny>>,
    /// The registered class is a dataclass registered by field lists (JAX's
    /// `register_dataclass`).
    pub dataclass: bool,
}

/// How an object failed to stand where a treespec node is.
#[derive(Debug)]
pub enum Mismatch {
    /// The node is None; the object is not.
    NotNone,
    /// The object is not an instance of the node's container type.
    NotInstance,
    /// A container of the right type with another number of children.
    Arity { got: usize },
    /// A namedtuple or struct sequence of another class.
    Type,
    /// A mapping whose keys differ from the node's: the object's keys (sorted when they
    /// sort) and, where the node keeps it, its default factory.
    Keys {
        got: Py<PyList>,
        factory: Option<Py<PyAny>>,
    },
    /// A registered node whose aux data differs.
    Data { got: Py<PyAny> },
}

/// A difference between two treespecs, found where one must stand for the other.
#[derive(Debug)]
pub enum SpecMismatch {
    /// Different node types (optree: "incompatible node types").
    Kind,
    /// The same container type with another number of children.
    Arity,
    /// Different key sets.
    Keys,
    /// Namedtuples or struct sequences of different classes.
    Type,
    /// Registered nodes of different classes.
    CustomType,
    /// Registered nodes with different aux data.
    Data,
}

/// What went wrong, with everything the message needs.
#[derive(Debug)]
pub enum TreeError {
    /// A tree does not have the structure a treespec expects (`flatten_up_to`, the other
    /// trees of a multi-tree map, broadcasting). Rendered in the face's words.
    Structure {
        face: Face,
        expected: Expected,
        mismatch: Mismatch,
        /// The object found there.
        found: Py<PyAny>,
        /// Where, in keystr form (`tree[1]['b']`, `tree[1] (in rests[0])`).
        path: Option<String>,
    },
    /// Two treespecs differ where one must be a prefix of the other (optree's
    /// `broadcast_to_common_suffix`). `expected`/`got`: both nodes, in optree's words.
    SpecStructure {
        mismatch: SpecMismatch,
        expected: Expected,
        got: Expected,
        path: Option<String>,
    },
    /// `unflatten` was given the wrong number of leaves. `what`: PyTreeSpec, GraphDef.
    LeafCount {
        face: Face,
        what: &'static str,
        expected: usize,
        got: usize,
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

/// `repr(obj)`, or `<T object>` when its `__repr__` fails.
#[cold]
pub fn repr(obj: &Bound<'_, PyAny>) -> String {
    match obj.repr() {
        Ok(r) => r.to_string(),
        Err(_) => format!("<{} object>", type_name(obj)),
    }
}

fn repr_of(py: Python<'_>, obj: &Option<Py<PyAny>>) -> String {
    obj.as_ref()
        .map(|o| repr(o.bind(py)))
        .unwrap_or_else(|| "None".into())
}

/// `a - b` as a sorted list (set difference; optree's missing and extra keys).
pub fn key_difference<'py>(
    a: &Bound<'py, PyList>,
    b: &Bound<'py, PyList>,
) -> PyResult<Bound<'py, PyList>> {
    let py = a.py();
    let b_set = pyo3::types::PySet::new(py, b.iter())?;
    let out = PyList::empty(py);
    for k in pyo3::types::PySet::new(py, a.iter())?.iter() {
        if !b_set.contains(&k)? {
            out.append(k)?;
        }
    }
    crate::treespec::dict_order::sort_keys(&out, false)
}

/// optree's name of a node's type in treespec messages (`NodeKindToString`).
fn optree_kind_name(py: Python<'_>, e: &Expected) -> String {
    match e.kind {
        Kind::Leaf => "leaf type".into(),
        Kind::None => "NoneType".into(),
        Kind::Tuple => "tuple".into(),
        Kind::List => "list".into(),
        Kind::Dict => "dict".into(),
        Kind::OrderedDict => "OrderedDict".into(),
        Kind::DefaultDict => "defaultdict".into(),
        Kind::Deque => "deque".into(),
        Kind::NamedTuple | Kind::StructSeq | Kind::Custom => repr_of(py, &e.ty),
    }
}

fn render_structure(
    py: Python<'_>,
    face: Face,
    e: &Expected,
    mismatch: &Mismatch,
    found: &Bound<'_, PyAny>,
) -> PyResult<String> {
    let r = repr(found);
    let got_type = repr(found.get_type().as_any());
    let ty = repr_of(py, &e.ty);
    let n = e.arity;
    Ok(match face {
        Face::Optree => match (mismatch, e.kind) {
            (Mismatch::NotNone, _) => format!("Expected None, got {r}."),
            (Mismatch::NotInstance, Kind::Tuple) => {
                format!("Expected an instance of tuple, got {r}.")
            }
            (Mismatch::NotInstance, Kind::List) => {
                format!("Expected an instance of list, got {r}.")
            }
            (Mismatch::NotInstance, Kind::Dict | Kind::OrderedDict | Kind::DefaultDict) => {
                format!(
                    "Expected an instance of dict, collections.OrderedDict, or \
                     collections.defaultdict, got {r}."
                )
            }
            (Mismatch::NotInstance, Kind::Deque) => {
                format!("Expected an instance of collections.deque, got {r}.")
            }
            (Mismatch::NotInstance, Kind::NamedTuple) => {
                format!("Expected an instance of collections.namedtuple, got {r}.")
            }
            (Mismatch::NotInstance, Kind::StructSeq) => {
                format!("Expected an instance of PyStructSequence type, got {r}.")
            }
            (Mismatch::NotInstance, _) => format!(
                "Custom node type mismatch; expected type: {ty}, got type: {got_type}; \
                 value: {r}."
            ),
            (Mismatch::Arity { got }, Kind::Tuple | Kind::List | Kind::Deque) => {
                let name = optree_kind_name(py, e);
                format!("{name} arity mismatch; expected: {n}, got: {got}; {name}: {r}.")
            }
            (Mismatch::Arity { got }, Kind::NamedTuple) => {
                format!("namedtuple arity mismatch; expected: {n}, got: {got}; tuple: {r}.")
            }
            (Mismatch::Arity { got }, Kind::StructSeq) => {
                format!("PyStructSequence arity mismatch; expected: {n}, got: {got}; tuple: {r}.")
            }
            (Mismatch::Arity { got }, _) => {
                format!("Custom type arity mismatch; expected: {n}, got: {got}; value: {r}.")
            }
            (Mismatch::Type, kind) => format!(
                "{} type mismatch; expected type: {ty}, got type: {got_type}; tuple: {r}.",
                if kind == Kind::StructSeq {
                    "PyStructSequence"
                } else {
                    "namedtuple"
                }
            ),
            (Mismatch::Keys { got, .. }, _) => {
                let expected = e.keys.as_ref().map(|k| k.bind(py).clone());
                let expected = expected.unwrap_or_else(|| PyList::empty(py));
                let got = got.bind(py);
                format!(
                    "dictionary key mismatch; expected key(s): {}, got key(s): {}{}; {}: {r}.",
                    repr(expected.as_any()),
                    repr(got.as_any()),
                    optree_key_difference(&expected, got)?,
                    optree_kind_name(py, e)
                )
            }
            (Mismatch::Data { got }, _) => format!(
                "Mismatch custom node data; expected: {}, got: {}; value: {r}.",
                repr_of(py, &e.data),
                repr(got.bind(py))
            ),
        },
        Face::Jax => {
            let custom = if e.dataclass {
                "Custom dataclass node"
            } else {
                "Custom node"
            };
            match (mismatch, e.kind) {
                (Mismatch::NotNone, _) => format!(
                    "Expected None, got {r}.\n\nIn previous releases of JAX, flatten-up-to used \
                     to consider None to be a tree-prefix of non-None values. To obtain the \
                     previous behavior, you can usually write:\n  jax.tree.map(lambda x, y: \
                     None if x is None else f(x, y), a, b, is_leaf=lambda x: x is None)"
                ),
                (Mismatch::NotInstance, Kind::Tuple) => format!("Expected tuple, got {r}."),
                (Mismatch::NotInstance, Kind::List) => format!("Expected list, got {r}."),
                (Mismatch::NotInstance, Kind::Dict) => format!("Expected dict, got {r}."),
                (Mismatch::NotInstance, Kind::NamedTuple) => {
                    format!("Expected named tuple, got {r}.")
                }
                (Mismatch::NotInstance, _) => {
                    format!("{custom} type mismatch: expected type: {ty}, value: {r}.")
                }
                (Mismatch::Arity { got }, Kind::Tuple) => {
                    format!("Tuple arity mismatch: {got} != {n}; tuple: {r}.")
                }
                (Mismatch::Arity { got }, Kind::List) => {
                    format!("List arity mismatch: {got} != {n}; list: {r}.")
                }
                (Mismatch::Arity { got }, Kind::NamedTuple) => {
                    format!("Named tuple arity mismatch: {got} != {n}; tuple: {r}.")
                }
                (Mismatch::Arity { got }, _) => {
                    format!("Custom type arity mismatch: {got} != {n}; value: {r}.")
                }
                (Mismatch::Type, _) => {
                    format!("Named tuple type mismatch: expected type: {ty}, tuple: {r}.")
                }
                (Mismatch::Keys { got, .. }, Kind::Dict) => format!(
                    "Dict key mismatch; expected keys: {}; present keys: {}.",
                    e.keys
                        .as_ref()
                        .map(|k| repr(k.bind(py).as_any()))
                        .unwrap_or_else(|| "[]".into()),
                    repr(got.bind(py).as_any())
                ),
                (Mismatch::Keys { got, factory }, kind) => {
                    // JAX registers OrderedDict and defaultdict as custom nodes whose aux data
                    // is the key tuple, or (factory, key tuple).
                    let keys_tuple = |k: &Bound<'_, PyList>| repr(k.to_tuple().as_any());
                    let expected = e
                        .keys
                        .as_ref()
                        .map(|k| keys_tuple(k.bind(py)))
                        .unwrap_or_else(|| "()".into());
                    let got = keys_tuple(got.bind(py));
                    let (expected, got) = if kind == Kind::DefaultDict {
                        (
                            format!("({}, {expected})", repr_of(py, &e.data)),
                            format!("({}, {got})", repr_of(py, factory)),
                        )
                    } else {
                        (expected, got)
                    };
                    format!("Mismatch custom node data: {expected} != {got}; value: {r}.")
                }
                (Mismatch::Data { got }, _) => format!(
                    "Mismatch {} data: {} != {}; value: {r}.",
                    if e.dataclass {
                        "custom dataclass node"
                    } else {
                        "custom node"
                    },
                    repr_of(py, &e.data),
                    repr(got.bind(py))
                ),
            }
        }
    })
}

/// `, missing key(s): [...], extra key(s): [...]` as optree writes them.
fn optree_key_difference(
    expected: &Bound<'_, PyList>,
    got: &Bound<'_, PyList>,
) -> PyResult<String> {
    let mut out = String::new();
    let missing = key_difference(expected, got)?;
    if !missing.is_empty() {
        out.push_str(&format!(", missing key(s): {}", repr(missing.as_any())));
    }
    let extra = key_difference(got, expected)?;
    if !extra.is_empty() {
        out.push_str(&format!(", extra key(s): {}", repr(extra.as_any())));
    }
    Ok(out)
}

fn render_spec_structure(
    py: Python<'_>,
    mismatch: &SpecMismatch,
    e: &Expected,
    g: &Expected,
) -> PyResult<String> {
    let (en, gn) = (optree_kind_name(py, e), optree_kind_name(py, g));
    Ok(match mismatch {
        SpecMismatch::Kind => {
            format!("PyTreeSpecs have incompatible node types; expected type: {en}, got: {gn}.")
        }
        SpecMismatch::Arity => {
            let what = match e.kind {
                Kind::NamedTuple => "namedtuple".to_owned(),
                Kind::StructSeq => "PyStructSequence".to_owned(),
                Kind::Custom => "Custom type".to_owned(),
                _ => en,
            };
            format!(
                "{what} arity mismatch; expected: {}, got: {}.",
                e.arity, g.arity
            )
        }
        SpecMismatch::Keys => {
            let empty = || PyList::empty(py);
            let ek = e
                .keys
                .as_ref()
                .map(|k| k.bind(py).clone())
                .unwrap_or_else(empty);
            let gk = g
                .keys
                .as_ref()
                .map(|k| k.bind(py).clone())
                .unwrap_or_else(empty);
            let sorted = crate::treespec::dict_order::sort_keys(&gk, false)?;
            format!(
                "dictionary key mismatch; expected key(s): {}, got key(s): {}{}.",
                repr(ek.as_any()),
                repr(sorted.as_any()),
                optree_key_difference(&ek, &gk)?
            )
        }
        SpecMismatch::Type => format!(
            "{} type mismatch; expected type: {en}, got type: {gn}.",
            if e.kind == Kind::StructSeq {
                "PyStructSequence"
            } else {
                "namedtuple"
            }
        ),
        SpecMismatch::CustomType => {
            format!("Custom node type mismatch; expected type: {en}, got type: {gn}.")
        }
        SpecMismatch::Data => format!(
            "Mismatch custom node data; expected: {}, got: {}.",
            repr_of(py, &e.data),
            repr_of(py, &g.data)
        ),
    })
}

impl TreeError {
    /// The message, in the words of the face the error belongs to: the peer library's text
    /// first, unchanged, then oxtree's detail (where the structures differ).
    #[cold]
    pub fn message(&self, py: Python<'_>) -> String {
        let with_path = |text: String, path: &Option<String>| match path {
            Some(p) => format!("{text}\nMismatch at key path: {p}"),
            None => text,
        };
        match self {
            TreeError::Structure {
                face,
                expected,
                mismatch,
                found,
                path,
            } => match render_structure(py, *face, expected, mismatch, found.bind(py)) {
                Ok(text) => with_path(text, path),
                Err(e) => format!("tree structure mismatch ({e})"),
            },
            TreeError::SpecStructure {
                mismatch,
                expected,
                got,
                path,
            } => match render_spec_structure(py, mismatch, expected, got) {
                Ok(text) => with_path(text, path),
                Err(e) => format!("treespec structure mismatch ({e})"),
            },
            _ => self.to_string(),
        }
    }
}

impl fmt::Display for TreeError {
    #[cold]
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TreeError::Structure { .. } | TreeError::SpecStructure { .. } => {
                f.write_str(&Python::attach(|py| self.message(py)))
            }
            TreeError::LeafCount {
                face,
                what,
                expected,
                got,
            } => match (face, got < expected) {
                (Face::Optree, true) => write!(
                    f,
                    "Too few leaves for {what}; expected: {expected}, got: {got}."
                ),
                (Face::Optree, false) => write!(
                    f,
                    "Too many leaves for {what}; expected: {expected}. Got: {got}."
                ),
                (Face::Jax, true) => write!(
                    f,
                    "Too few leaves for PyTreeDef; expected {expected}, got {got}"
                ),
                (Face::Jax, false) => write!(
                    f,
                    "Too many leaves for PyTreeDef; expected {expected}. Got: {got}."
                ),
            },
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
            TreeError::Structure { .. }
            | TreeError::SpecStructure { .. }
            | TreeError::LeafCount { .. }
            | TreeError::Value(_) => PyValueError::new_err(msg),
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
    fn leaf_counts_speak_each_face() {
        let e = TreeError::LeafCount {
            face: Face::Optree,
            what: "PyTreeSpec",
            expected: 3,
            got: 2,
        };
        assert_eq!(
            e.to_string(),
            "Too few leaves for PyTreeSpec; expected: 3, got: 2."
        );
        let e = TreeError::LeafCount {
            face: Face::Jax,
            what: "PyTreeSpec",
            expected: 2,
            got: 3,
        };
        assert!(e
            .to_string()
            .starts_with("Too many leaves for PyTreeDef; expected 2."));
        let e = TreeError::Cycle {
            closes_at: "tree[1]".into(),
            ancestor: "tree".into(),
        };
        assert!(e
            .to_string()
            .starts_with("cycle detected: the container at tree[1]"));
    }
}
