//! Every exception oxtree raises on its own account is built here, on the slow path: one
//! enum, `TreeError` (its variants, the data, in `model.rs`), rendered in the words of the
//! face that raises it (`optree_words.rs`, `jax_words.rs`; oxtree's own texts below) and
//! converted to a Python exception in one `From` impl. `invariant.rs`, the floor below, builds
//! the one other kind: the SystemError of a broken invariant of oxtree's own.

use std::fmt;

use pyo3::exceptions::{PyIndexError, PyRecursionError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;

use crate::face::{Face, Words};

mod jax_words;
mod model;
mod optree_words;

pub use jax_words::set_jax_version;
pub use model::{
    repr, short_repr, str_of, type_name, Expected, FlattenFault, Mismatch, NodeDataFault,
    PrefixDiff, PrefixMismatch, SpecMismatch, StateOf, TransformFault, TransposeFault, TreeError,
};

fn render_structure(
    py: Python<'_>,
    face: Face,
    e: &Expected,
    mismatch: &Mismatch,
    found: &Bound<'_, PyAny>,
) -> PyResult<String> {
    match face.words() {
        Words::Optree => optree_words::structure(py, e, mismatch, found),
        Words::Jax => jax_words::structure(py, e, mismatch, found),
    }
}

/// `textwrap.indent("\n".join(difflib.ndiff(a.splitlines(), b.splitlines())), "    ")`.
fn ndiff(py: Python<'_>, a: &str, b: &str) -> PyResult<String> {
    use pyo3::types::PyString;
    let lines =
        |s: &str| -> PyResult<Bound<'_, PyAny>> { PyString::new(py, s).call_method0("splitlines") };
    let diff = py
        .import("difflib")?
        .call_method1("ndiff", (lines(a)?, lines(b)?))?;
    let joined = PyString::new(py, "\n").call_method1("join", (diff,))?;
    Ok(py
        .import("textwrap")?
        .call_method1("indent", (joined, "    "))?
        .to_string())
}

impl PrefixMismatch {
    /// The message, with `name` as the prefix tree's name. Both peers share its frame and
    /// their texts for different types and metadata; the rest is each face's own.
    #[cold]
    pub fn render(&self, py: Python<'_>, name: &str) -> PyResult<String> {
        let words = self.face.words();
        let path = match words {
            Words::Optree if self.path.is_empty() => " tree root",
            _ => &self.path,
        };
        let pt = repr(self.prefix_type.bind(py).as_any());
        let (what, body) = match &self.diff {
            PrefixDiff::NodeKindDiffers { full_type } => (
                "different types".to_owned(),
                format!(
                    " has a subtree of type\n    {pt}\nbut at the same key path the full \
                     pytree has a subtree of different type\n    {}.",
                    repr(full_type.bind(py).as_any())
                ),
            ),
            PrefixDiff::MetadataDiffers { prefix, full } => {
                // optree shows the node data's repr, JAX the metadata's str.
                let show = |o: &Py<PyAny>| match words {
                    Words::Optree => repr(o.bind(py)),
                    Words::Jax => str_of(o.bind(py)),
                };
                let (ps, fs) = (show(prefix), show(full));
                (
                    "different pytree metadata".to_owned(),
                    format!(
                        " has a subtree of type\n    {pt}\nwith metadata\n    {ps}\nbut at \
                         the same key path the full pytree has a subtree of the same type but \
                         with metadata\n    {fs}\nso the diff in the metadata at these pytree \
                         nodes is\n{}",
                        ndiff(py, &ps, &fs)?
                    ),
                )
            }
            diff => match words {
                Words::Optree => optree_words::prefix(py, &pt, diff)?,
                Words::Jax => jax_words::prefix(py, &self.prefix_type, &pt, diff)?,
            },
        };
        Ok(format!(
            "pytree structure error: {what} at key path\n    {name}{path}\nAt that key path, \
             the prefix pytree {name}{body}"
        ))
    }
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
            } => match optree_words::spec_structure(py, mismatch, expected, got) {
                Ok(text) => with_path(text, path),
                Err(e) => format!("treespec structure mismatch ({e})"),
            },
            TreeError::Prefix { name, mismatch } => mismatch
                .render(py, name)
                .unwrap_or_else(|e| format!("pytree structure error ({e})")),
            _ => self.to_string(),
        }
    }
}

/// What `tree_labels` says its rules are, before what it got.
const RULES: &str = "tree_labels: rules is a mapping from patterns to labels or a sequence of \
                     (pattern, label) pairs, ";

impl fmt::Display for TreeError {
    #[cold]
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TreeError::Structure { .. }
            | TreeError::SpecStructure { .. }
            | TreeError::Prefix { .. } => f.write_str(&Python::attach(|py| self.message(py))),
            TreeError::LeafCount {
                face,
                what,
                expected,
                got,
            } => f.write_str(&match face.words() {
                Words::Optree => optree_words::leaf_count(what, *expected, *got),
                Words::Jax => jax_words::leaf_count(*expected, *got),
            }),
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
            TreeError::Unassigned { cls, name, kind } => write!(
                f,
                "{cls}.{name} ({kind}) was declared or registered but never assigned, so the \
                 module cannot be flattened"
            ),
            TreeError::TooManyNodes { what, nodes } => {
                write!(f, "{what}: the result would have ")?;
                match nodes {
                    Some(n) => write!(f, "{n}")?,
                    None => f.write_str("too many")?,
                }
                f.write_str(" nodes, more than can be allocated")
            }
            TreeError::RetraceNoChild => f.write_str("no child"),
            TreeError::RetraceDiffers => f.write_str("structure differs"),
            TreeError::NotRules { type_name, shown } => {
                write!(f, "{RULES}got {type_name}: {shown}")
            }
            TreeError::RuleNotAPair { shown } => {
                write!(f, "{RULES}got the item {shown} (not a pair)")
            }
            TreeError::NoRuleMatches {
                path,
                unmatched,
                total,
            } => write!(
                f,
                "tree_labels: no rule matches the leaf at {path} ({unmatched} of {total} \
                 leaves match none); add a rule for it or give a default"
            ),
            TreeError::SetMatchingArgs { both: true } => {
                f.write_str("tree_set_matching: give either value or func, not both")
            }
            TreeError::SetMatchingArgs { both: false } => f.write_str(
                "tree_set_matching: give the value to put at the matching leaves, or func \
                 (a function of (key_path, leaf))",
            ),
            TreeError::NamespaceNotStr { .. }
            | TreeError::BuiltinType { .. }
            | TreeError::AlreadyRegistered { .. }
            | TreeError::NotRegistered { .. }
            | TreeError::NotEntryType { .. }
            | TreeError::NotTupleClass { .. }
            | TreeError::FlattenShape { .. }
            | TreeError::NamedTupleFields { .. }
            | TreeError::TransformResult { .. }
            | TreeError::SameNamespace { .. }
            | TreeError::StaleRegistration { .. } => f.write_str(&optree_words::message(self)),
            TreeError::Transpose(fault) => match fault {
                TransposeFault::Mismatch { face, .. } if face.words() == Words::Jax => {
                    f.write_str(&jax_words::message(self))
                }
                _ => f.write_str(&optree_words::message(self)),
            },
            TreeError::JaxFlattenResult { .. }
            | TreeError::MetadataEquality { .. }
            | TreeError::UnsortableKeys
            | TreeError::NotAPrefix
            | TreeError::ProtoUserNode
            | TreeError::ProtoKeyNotStr
            | TreeError::IterableArity { .. } => f.write_str(&jax_words::message(self)),
            // oxtree's own words (and Python's, where Python raises the same fault).
            TreeError::NotCallable { what, type_name } => {
                write!(f, "{what} must be callable, got {type_name}")
            }
            TreeError::ExpectsArgument {
                function,
                expected,
                got,
            } => write!(f, "{function} expects {expected}, got {got}"),
            TreeError::NotAClass { got } => write!(f, "Expected a class, got {got}."),
            TreeError::InitNames { expected, got } => write!(
                f,
                "init_names must name every data and meta field: expected {expected}, got {got}"
            ),
            TreeError::JaxDescription { ty, described } => write!(
                f,
                "oxtree could not read JAX's registration of {ty}: unexpected description \
                 {described} (please report this)"
            ),
            TreeError::BadResult {
                registered,
                which,
                expected,
                why,
                result,
            } => write!(
                f,
                "the {which} function registered for {registered} must return {expected}; \
                 {why}: {result}"
            ),
            TreeError::FlattenNotIterable {
                python,
                registered,
                result,
            } => write!(
                f,
                "{python}; the flatten function registered for {registered} must return \
                 (children, aux_data) or (children, aux_data, entries), got {result}"
            ),
            TreeError::InitReturned { type_name } => {
                write!(f, "__init__() should return None, not '{type_name}'")
            }
            TreeError::State { of, why } => match of {
                StateOf::PyTreeSpec => write!(f, "invalid PyTreeSpec state: {why}"),
                StateOf::GraphDef => write!(f, "invalid GraphDef state: {why}"),
                StateOf::Proto => write!(f, "Could not deserialize PyTreeDefProto: {why}."),
            },
            TreeError::ProtoFaceOnly => f.write_str(
                "serialize_using_proto: only treedefs of the JAX face (oxtree.tree_util) have a \
                 proto form; use pickle for this treespec",
            ),
            TreeError::LeavesNotIterable { type_name } => {
                write!(f, "leaves must be an iterable of leaves, got {type_name}")
            }
            TreeError::EmptyReduce => {
                f.write_str("reduce() of empty iterable with no initial value")
            }
            TreeError::EmptyAssociativeReduce => {
                f.write_str("Must specify identity for parallel reduction of empty sequence.")
            }
            TreeError::NoneIsLeafDiffers { op, values } => {
                write!(f, "{op}: the treespecs disagree on none_is_leaf")?;
                match values {
                    Some((a, b)) => write!(f, " ({a} and {b})"),
                    None => Ok(()),
                }
            }
            TreeError::FacesDiffer { op } => {
                write!(f, "{op}: the treespecs are of different faces")
            }
            TreeError::NamespacesDiffer { a, b } => write!(
                f,
                "the treespecs come from different namespaces ({a:?} and {b:?})"
            ),
            TreeError::ComposeCount { expected, got } => write!(
                f,
                "expected {expected} treespecs, one for each leaf, got {got}"
            ),
            TreeError::ComposeNoneIsLeaf { none_is_leaf } => write!(
                f,
                "expected treespecs with none_is_leaf={}",
                if *none_is_leaf { "True" } else { "False" }
            ),
            TreeError::SuffixOfNothing => {
                f.write_str("broadcasting to a common suffix needs a tree")
            }
            TreeError::NodeChildren { cls, expected, got } => match expected {
                None => write!(f, "a {cls} node has no children, got {got}"),
                Some(n) => write!(f, "a {cls} node has {n} children, got {got}"),
            },
            TreeError::NodeMetadata { cls, names, got } => write!(
                f,
                "the metadata of a {cls} node is ((name, value), ...) for its meta fields \
                 {names:?}, got {got}"
            ),
            TreeError::FromNodeData(fault) => {
                f.write_str("from_node_data_and_children: ")?;
                match fault {
                    NodeDataFault::LeafChildren => f.write_str("a leaf has no children"),
                    NodeDataFault::NotAPair => {
                        f.write_str("node_data must be (type, data) or None")
                    }
                    NodeDataFault::NotAType => f.write_str("node_data[0] must be a type"),
                    NodeDataFault::NoneChildren { arity } => {
                        write!(f, "None has no children, got {arity}")
                    }
                    NodeDataFault::DefaultDictData => {
                        f.write_str("defaultdict data must be (factory, keys)")
                    }
                    NodeDataFault::KeyCount { keys, arity } => {
                        write!(f, "{keys} keys for {arity} children")
                    }
                    NodeDataFault::UnhashableKeys => f.write_str("dict keys must be hashable"),
                    NodeDataFault::RepeatedKeys { keys } => write!(f, "repeated dict keys: {keys}"),
                    NodeDataFault::UnsortedKeys => {
                        f.write_str("dict keys must be given in sorted order")
                    }
                    NodeDataFault::Fields { ty, fields, arity } => {
                        write!(f, "{ty} has {fields} fields, got {arity} children")
                    }
                    NodeDataFault::NotRegistered { ty } => {
                        write!(f, "{ty} is not a registered pytree node type")
                    }
                    NodeDataFault::Misfit { why } => f.write_str(why),
                }
            }
            TreeError::BadPattern {
                caller,
                pattern,
                at,
                what,
            } => {
                // A caret under the character, past the same tabs.
                let caret: String = pattern
                    .chars()
                    .take(*at)
                    .map(|c| if c == '\t' { '\t' } else { ' ' })
                    .collect();
                let shown =
                    Python::attach(|py| repr(pyo3::types::PyString::new(py, pattern).as_any()));
                write!(
                    f,
                    "{caller}: invalid path pattern {shown} at position {at}: {what}\n    \
                     {pattern}\n    {caret}^"
                )
            }
            TreeError::TooManyPatterns { caller } => write!(f, "{caller}: too many patterns"),
            TreeError::BytesRegex { caller, shown } => write!(
                f,
                "{caller}: a bytes regular expression cannot match key paths (str): {shown}"
            ),
            TreeError::NotAPattern {
                caller,
                type_name,
                shown,
            } => write!(
                f,
                "{caller}: a path pattern is a str (a glob over keystr), a compiled re.Pattern \
                 or a PathPattern, got {type_name}: {shown}"
            ),
            TreeError::IsLeafNotCallable { type_name } => {
                write!(f, "is_leaf must be a callable or None, got {type_name}")
            }
            TreeError::TooManyValues { what, got } => {
                write!(f, "expected at most one {what} value, got {got}")
            }
            TreeError::WalkLeavesMissing => {
                f.write_str("walk(f_node, f_leaf, leaves): the leaves are missing")
            }
            TreeError::ChildIndex {
                method,
                index,
                arity,
            } => write!(
                f,
                "PyTreeSpec::{method}() index out of range. (index {index}, a node with \
                 {arity} children)"
            ),
            TreeError::CompiledCacheNotDict { type_name } => write!(
                f,
                "filter_jit: an entry's compiled cache must be a dict, got {type_name}"
            ),
            TreeError::PrefixLeafCount { got, expected } => write!(
                f,
                "broadcast_flattened_prefix_with_treedef: {got} prefix leaves for a prefix \
                 treedef of {expected} leaves"
            ),
            TreeError::ImmutableCycle { node_type, path } => write!(
                f,
                "graph_unflatten: cannot rebuild the {node_type} at {path}: it is on a \
                 reference cycle that passes only through nodes built from their children \
                 (tuples, namedtuples, registered classes); such a cycle needs a list, dict, \
                 deque or other mutable container to close through"
            ),
            TreeError::WarningNul { position } => {
                write!(f, "nul byte found in provided data at position: {position}")
            }
            TreeError::ModuleDefCounts { names, kinds, keys } => write!(
                f,
                "_ModuleDef: {names} names, {kinds} kinds and {keys} keys"
            ),
            TreeError::NotModuleDef { what, got } => {
                write!(f, "a Module's {what} must be a _ModuleDef, got {got}")
            }
            TreeError::ModuleRebuild { cls, children, aux } => write!(
                f,
                "cannot rebuild a {cls} from {children} children and aux data {aux}"
            ),
        }
    }
}

impl TreeError {
    /// The Python exception, raised from `cause` (its `__cause__`).
    #[cold]
    pub fn caused_by(self, py: Python<'_>, cause: PyErr) -> PyErr {
        let err: PyErr = self.into();
        err.set_cause(py, Some(cause));
        err
    }
}

impl From<TreeError> for PyErr {
    #[cold]
    fn from(err: TreeError) -> PyErr {
        let msg = err.to_string();
        match err {
            TreeError::TransformResult {
                fault: TransformFault::NotASpec { .. },
                ..
            }
            | TreeError::Transpose(TransposeFault::Mismatch { .. }) => PyTypeError::new_err(msg),
            TreeError::Transpose(TransposeFault::NoFirstLeaf) => PyIndexError::new_err(msg),
            TreeError::Structure { .. }
            | TreeError::SpecStructure { .. }
            | TreeError::LeafCount { .. }
            | TreeError::RetraceNoChild
            | TreeError::RetraceDiffers
            | TreeError::NoRuleMatches { .. }
            | TreeError::BuiltinType { .. }
            | TreeError::AlreadyRegistered { .. }
            | TreeError::NotRegistered { .. }
            | TreeError::InitNames { .. }
            | TreeError::JaxFlattenResult { .. }
            | TreeError::MetadataEquality { .. }
            | TreeError::UnsortableKeys
            | TreeError::State { .. }
            | TreeError::ProtoFaceOnly
            | TreeError::ProtoUserNode
            | TreeError::ProtoKeyNotStr
            | TreeError::IterableArity { .. }
            | TreeError::NamedTupleFields { .. }
            | TreeError::Transpose(_)
            | TreeError::NoneIsLeafDiffers { .. }
            | TreeError::FacesDiffer { .. }
            | TreeError::NamespacesDiffer { .. }
            | TreeError::SameNamespace { .. }
            | TreeError::StaleRegistration { .. }
            | TreeError::ComposeCount { .. }
            | TreeError::ComposeNoneIsLeaf { .. }
            | TreeError::NodeChildren { .. }
            | TreeError::FromNodeData(_)
            | TreeError::ModuleDefCounts { .. }
            | TreeError::ModuleRebuild { .. }
            | TreeError::BadPattern { .. }
            | TreeError::PrefixLeafCount { .. }
            | TreeError::NotAPrefix
            | TreeError::ImmutableCycle { .. }
            | TreeError::WarningNul { .. }
            | TreeError::TooManyPatterns { .. }
            | TreeError::TransformResult { .. }
            | TreeError::Prefix { .. } => PyValueError::new_err(msg),
            TreeError::FlattenShape { .. } => PyRuntimeError::new_err(msg),
            TreeError::Cycle { .. } | TreeError::TooDeep { .. } => PyRecursionError::new_err(msg),
            TreeError::Mutated { .. } => PyRuntimeError::new_err(msg),
            TreeError::Unassigned { .. } => pyo3::exceptions::PyAttributeError::new_err(msg),
            TreeError::NamespaceNotStr { .. }
            | TreeError::NotRules { .. }
            | TreeError::RuleNotAPair { .. }
            | TreeError::SetMatchingArgs { .. }
            | TreeError::NotEntryType { .. }
            | TreeError::NotCallable { .. }
            | TreeError::ExpectsArgument { .. }
            | TreeError::NotAClass { .. }
            | TreeError::NotTupleClass { .. }
            | TreeError::JaxDescription { .. }
            | TreeError::BadResult { .. }
            | TreeError::FlattenNotIterable { .. }
            | TreeError::InitReturned { .. }
            | TreeError::LeavesNotIterable { .. }
            | TreeError::EmptyReduce
            | TreeError::EmptyAssociativeReduce
            | TreeError::SuffixOfNothing
            | TreeError::NodeMetadata { .. }
            | TreeError::NotModuleDef { .. }
            | TreeError::BytesRegex { .. }
            | TreeError::NotAPattern { .. }
            | TreeError::IsLeafNotCallable { .. }
            | TreeError::TooManyValues { .. }
            | TreeError::WalkLeavesMissing
            | TreeError::CompiledCacheNotDict { .. } => PyTypeError::new_err(msg),
            TreeError::ChildIndex { .. } => PyIndexError::new_err(msg),
            TreeError::TooManyNodes { .. } => pyo3::exceptions::PyMemoryError::new_err(msg),
        }
    }
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

    #[test]
    fn named_variants_keep_their_texts() {
        let cases = [
            (
                TreeError::NoneIsLeafDiffers {
                    op: "PyTreeSpec.compose",
                    values: Some((false, true)),
                },
                "PyTreeSpec.compose: the treespecs disagree on none_is_leaf (false and true)",
            ),
            (
                TreeError::NoneIsLeafDiffers {
                    op: "broadcast_to_common_suffix",
                    values: None,
                },
                "broadcast_to_common_suffix: the treespecs disagree on none_is_leaf",
            ),
            (
                TreeError::TooManyNodes {
                    what: "graft",
                    nodes: None,
                },
                "graft: the result would have too many nodes, more than can be allocated",
            ),
            (
                TreeError::TooManyNodes {
                    what: "transform",
                    nodes: Some(5),
                },
                "transform: the result would have 5 nodes, more than can be allocated",
            ),
            (
                TreeError::ChildIndex {
                    method: "Child",
                    index: -3,
                    arity: 2,
                },
                "PyTreeSpec::Child() index out of range. (index -3, a node with 2 children)",
            ),
            (
                TreeError::NodeChildren {
                    cls: "St".into(),
                    expected: None,
                    got: 1,
                },
                "a St node has no children, got 1",
            ),
            (
                TreeError::FromNodeData(NodeDataFault::KeyCount { keys: 1, arity: 2 }),
                "from_node_data_and_children: 1 keys for 2 children",
            ),
            (
                TreeError::State {
                    of: StateOf::Proto,
                    why: "truncated varint".into(),
                },
                "Could not deserialize PyTreeDefProto: truncated varint.",
            ),
            (
                TreeError::RuleNotAPair {
                    shown: "('a', 1, 2)".into(),
                },
                "tree_labels: rules is a mapping from patterns to labels or a sequence of \
                 (pattern, label) pairs, got the item ('a', 1, 2) (not a pair)",
            ),
            (
                TreeError::Transpose(TransposeFault::Mismatch {
                    face: Face::Jax,
                    expected: "E".into(),
                    got: "G".into(),
                }),
                "Mismatch\nG\n != \nE",
            ),
            (
                TreeError::Transpose(TransposeFault::Mismatch {
                    face: Face::Optree,
                    expected: "E".into(),
                    got: "G".into(),
                }),
                "Tree structure mismatch; expected: E, got: G.",
            ),
        ];
        for (err, text) in cases {
            assert_eq!(err.to_string(), text);
        }
    }
}
