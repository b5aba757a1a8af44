//! optree's words: the texts of optree 0.20.0 (`include/optree/exceptions.h`, the treespec
//! and registry sources), unchanged, for every error the main face raises.

use pyo3::prelude::*;
use pyo3::types::PyList;

use super::model::{
    repr, repr_of, Expected, FlattenFault, Mismatch, PrefixDiff, SpecMismatch, TransformFault,
    TransposeFault, TreeError,
};
use crate::kind::Kind;

/// A tree against a treespec node (`flatten_up_to`), in optree's words.
pub(super) fn structure(
    py: Python<'_>,
    e: &Expected,
    mismatch: &Mismatch,
    found: &Bound<'_, PyAny>,
) -> PyResult<String> {
    let r = repr(found);
    let got_type = repr(found.get_type().as_any());
    let ty = repr_of(py, &e.ty);
    let n = e.arity;
    Ok(match (mismatch, e.kind) {
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
            let name = kind_name(py, e);
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
                key_difference_text(&expected, got)?,
                kind_name(py, e)
            )
        }
        (Mismatch::Data { got }, _) => format!(
            "Mismatch custom node data; expected: {}, got: {}; value: {r}.",
            repr_of(py, &e.data),
            repr(got.bind(py))
        ),
    })
}

/// optree's name of a node's type in treespec messages (`NodeKindToString`).
pub(super) fn kind_name(py: Python<'_>, e: &Expected) -> String {
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

/// `, missing key(s): [...], extra key(s): [...]` as optree writes them.
fn key_difference_text(expected: &Bound<'_, PyList>, got: &Bound<'_, PyList>) -> PyResult<String> {
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

pub(super) fn spec_structure(
    py: Python<'_>,
    mismatch: &SpecMismatch,
    e: &Expected,
    g: &Expected,
) -> PyResult<String> {
    let (en, gn) = (kind_name(py, e), kind_name(py, g));
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
                key_difference_text(&ek, &gk)?
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

/// What optree's `prefix_errors` alone reports (`pt`: the prefix subtree's type, shown):
/// the header's words and the text after the prefix tree's name.
pub(super) fn prefix(py: Python<'_>, pt: &str, diff: &PrefixDiff) -> PyResult<(String, String)> {
    match diff {
        PrefixDiff::KeysDiffer {
            full_type,
            prefix,
            full,
        } => {
            let (pk, fk) = (prefix.bind(py), full.bind(py));
            let mut text = format!(
                " has a subtree of type\n    {pt}\nwith {} key(s)\n    {}\nbut at the same \
                 key path the full pytree has a subtree of type\n    {}\nbut with {} key(s)\n    \
                 {}",
                pk.len(),
                repr(pk.as_any()),
                repr(full_type.bind(py).as_any()),
                fk.len(),
                repr(fk.as_any()),
            );
            let missing = key_difference(pk, fk)?;
            if !missing.is_empty() {
                text.push_str(&format!(
                    "\nmissing key(s):\n    {}",
                    repr(missing.as_any())
                ));
            }
            let extra = key_difference(fk, pk)?;
            if !extra.is_empty() {
                text.push_str(&format!("\nextra key(s):\n    {}", repr(extra.as_any())));
            }
            Ok(("different pytree keys".into(), text))
        }
        PrefixDiff::ArityDiffers { prefix, full } => Ok((
            "different numbers of pytree children".into(),
            format!(
                " has a subtree of type\n    {pt}\nwith {prefix} children, but at the same key \
                 path the full pytree has a subtree of the same type but with {full} children."
            ),
        )),
        other => Err(crate::internal!(
            "optree's words have no prefix error {other:?}"
        )),
    }
}

/// `unflatten` with the wrong number of leaves. `what`: PyTreeSpec, GraphDef.
pub(super) fn leaf_count(what: &str, expected: usize, got: usize) -> String {
    if got < expected {
        format!("Too few leaves for {what}; expected: {expected}, got: {got}.")
    } else {
        format!("Too many leaves for {what}; expected: {expected}. Got: {got}.")
    }
}

/// The errors only optree's words describe (registration, flatten results, reprs).
pub(super) fn message(err: &TreeError) -> String {
    match err {
        TreeError::NamespaceNotStr { got } => {
            format!("The namespace must be a string, got {got}.")
        }
        TreeError::BuiltinType { cls, what } => {
            format!("PyTree type {cls} is a built-in type and cannot be {what}.")
        }
        TreeError::AlreadyRegistered { cls, label } => {
            format!("PyTree type {cls} is already registered in {label}.")
        }
        TreeError::NotRegistered { cls, what, label } => {
            format!("PyTree type {cls} {what} in {label}.")
        }
        TreeError::NotEntryType { got } => {
            format!("Expected a subclass of PyTreeEntry, got {got}.")
        }
        TreeError::NotTupleClass { got } => {
            format!("Expected a namedtuple or a PyStructSequence type, got {got}.")
        }
        TreeError::FlattenShape { ty, fault, result } => {
            let what = match fault {
                FlattenFault::Length(n) => format!("should return a 2- or 3-tuple, got {n}."),
                FlattenFault::EntriesCount { children, entries } => format!(
                    "returned inconsistent number of children ({children}) and number of \
                     entries ({entries})."
                ),
            };
            format!("PyTree custom flatten function for type {ty} {what} It returned: {result}")
        }
        TreeError::NamedTupleFields { fields, ty, arity } => format!(
            "Number of fields ({fields}) of namedtuple type {ty} does not match the arity \
             ({arity}) of the treespec node. The `_fields` attribute may have been modified \
             after the treespec was created."
        ),
        TreeError::TransformResult { fault, got } => {
            let expected = "Expected the PyTreeSpec transform function returns";
            match fault {
                TransformFault::NotASpec { input } => {
                    format!("{expected} a PyTreeSpec, got {got} (input: {input}).")
                }
                TransformFault::NoneIsLeaf {
                    none_is_leaf,
                    input,
                } => format!(
                    "{expected} a PyTreeSpec with the same value of `none_is_leaf={}` as the \
                     input, got {got} (input: {input}).",
                    if *none_is_leaf { "True" } else { "False" }
                ),
                TransformFault::Namespace {
                    expected: namespace,
                } => {
                    format!("{expected} a PyTreeSpec with namespace {namespace}, got {got}.")
                }
                TransformFault::Arity { arity, input } => format!(
                    "{expected} a PyTreeSpec with the same number of arity as the input \
                     ({arity}), got {got} (input: {input})."
                ),
                TransformFault::NotOneLevel { input } => {
                    format!("{expected} a one-level PyTreeSpec as the input, got {got} (input: {input}).")
                }
            }
        }
        TreeError::Transpose(fault) => transpose(fault),
        TreeError::SameNamespace { subject, a, b } => format!(
            "{subject} must have the same namespace, got {} vs. {}.",
            str_repr(a),
            str_repr(b)
        ),
        TreeError::StaleRegistration {
            what,
            ty,
            namespace,
        } => format!(
            "PyTreeSpecs cannot be {what}: custom PyTree type {ty} no longer resolves to its \
             original registration in namespace {}.",
            str_repr(namespace)
        ),
        other => other.to_string(),
    }
}

/// optree's words for a transpose that cannot be done (JAX's own `Mismatch` aside).
fn transpose(fault: &TransposeFault) -> String {
    match fault {
        TransposeFault::NoLeaves { which, spec } => {
            format!("The {which} structure must have at least one leaf. Got: {spec}.")
        }
        TransposeFault::CannotInfer { outer } => format!(
            "Tree structures must have at least one leaf. Cannot infer the inner structure \
             under an outer structure with no leaves: {outer}."
        ),
        TransposeFault::NoneIsLeaf => {
            "Tree structures must have the same none_is_leaf value.".into()
        }
        TransposeFault::Empty { outer, inner } => format!(
            "Tree structures must have at least one leaf. Got outer {outer} and inner {inner}."
        ),
        TransposeFault::Mismatch { expected, got, .. } => {
            format!("Tree structure mismatch; expected: {expected}, got: {got}.")
        }
        // Python's words: optree has no such case, JAX indexes an empty list.
        TransposeFault::NoFirstLeaf => "list index out of range".into(),
    }
}

/// Python's `repr` of a str (a namespace, as optree shows it).
fn str_repr(s: &str) -> String {
    Python::attach(|py| repr(pyo3::types::PyString::new(py, s).as_any()))
}

/// `a - b` as a sorted list (set difference; optree's missing and extra keys).
fn key_difference<'py>(
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
