//! JAX's words: jaxlib's and `jax/_src/tree_util.py`'s texts, unchanged, for every error
//! the JAX face raises.

use std::sync::atomic::{AtomicBool, Ordering};

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PySet, PyType};

use super::model::{
    repr, repr_of, str_of, Expected, Mismatch, PrefixDiff, TransposeFault, TreeError,
};
use crate::kind::Kind;

/// A tree against a treedef node (`flatten_up_to`), in jaxlib's words.
pub(super) fn structure(
    py: Python<'_>,
    e: &Expected,
    mismatch: &Mismatch,
    found: &Bound<'_, PyAny>,
) -> PyResult<String> {
    let r = repr(found);
    let ty = repr_of(py, &e.ty);
    let n = e.arity;
    Ok({
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
    })
}

/// What JAX's `_prefix_error` alone reports (`ty`: the prefix subtree's type, `pt`: shown):
/// the header's words and the text after the prefix tree's name.
pub(super) fn prefix(
    py: Python<'_>,
    ty: &Py<PyType>,
    pt: &str,
    diff: &PrefixDiff,
) -> PyResult<(String, String)> {
    match diff {
        PrefixDiff::LengthDiffers { prefix, full } => {
            let name = ty.bind(py).name()?.to_string();
            Ok((
                format!("different lengths of {name}"),
                format!(
                    " has a subtree of type {name} of length {prefix}, but the full pytree has \
                     a subtree of the same type but of length {full}."
                ),
            ))
        }
        PrefixDiff::ChildKeysDiffer { prefix, full } => Ok((
            "different numbers of pytree children".into(),
            child_keys(py, pt, prefix, full),
        )),
        other => Err(crate::internal!(
            "JAX's words have no prefix error {other:?}"
        )),
    }
}

/// JAX's text for nodes with different numbers of children, listing each side's child keys
/// and their symmetric difference.
fn child_keys(py: Python<'_>, pt: &str, pk: &[Py<PyAny>], fk: &[Py<PyAny>]) -> String {
    let objects = prints_key_objects();
    let text = |k: &Bound<'_, PyAny>| {
        if objects {
            str_of(k)
        } else {
            match k.getattr("key") {
                Ok(inner) => str_of(&inner),
                Err(_) => str_of(k),
            }
        }
    };
    let join = |ks: &[Py<PyAny>]| {
        ks.iter()
            .map(|k| text(k.bind(py)))
            .collect::<Vec<_>>()
            .join(" ")
    };
    // JAX's key objects hash as their keys: a set of the keys iterates in the order JAX's
    // set of key objects does. Each key of the difference is printed as the keys are above.
    let raw = |k: &Py<PyAny>| {
        let k = k.bind(py);
        k.getattr("key").unwrap_or_else(|_| k.clone())
    };
    let diff = (|| -> PyResult<String> {
        let shown = PyDict::new(py);
        for k in pk.iter().chain(fk.iter()) {
            shown.set_item(raw(k), text(k.bind(py)))?;
        }
        let a = PySet::new(py, pk.iter().map(raw))?;
        let b = PySet::new(py, fk.iter().map(raw))?;
        let d = a.call_method1("symmetric_difference", (b,))?;
        let d: Vec<String> = d
            .try_iter()?
            .map(|k| {
                let k = k?;
                match shown.get_item(&k)? {
                    Some(t) => t.extract::<String>(),
                    None => Ok(str_of(&k)),
                }
            })
            .collect::<PyResult<_>>()?;
        Ok(d.join(" "))
    })();
    let mut out = format!(
        " has a subtree of type\n    {pt}\nwith {} child keys\n    {}\nbut at the same key \
         path the full pytree has a subtree of the same type but with {} child keys\n    {}\n",
        pk.len(),
        join(pk),
        fk.len(),
        join(fk)
    );
    if let Ok(d) = diff {
        out.push_str(&format!(
            "so the symmetric difference on key sets is\n    {d}"
        ));
    }
    out
}

/// `unflatten` with the wrong number of leaves.
pub(super) fn leaf_count(expected: usize, got: usize) -> String {
    if got < expected {
        format!("Too few leaves for PyTreeDef; expected {expected}, got {got}")
    } else {
        format!("Too many leaves for PyTreeDef; expected {expected}. Got: {got}.")
    }
}

/// The errors only JAX's words describe.
pub(super) fn message(err: &TreeError) -> String {
    match err {
        TreeError::JaxFlattenResult { shown, pair } => {
            let what = if *pair {
                " where 'children' is iterable"
            } else {
                ""
            };
            format!(
                "The to_iterable function for a custom PyTree node should return a (children, \
                 aux_data) tuple{what}, got {shown}"
            )
        }
        TreeError::MetadataEquality { ty } => {
            let node = match ty {
                Some(ty) => format!(" node of type {ty}"),
                None => String::new(),
            };
            format!(
                "Exception raised while checking equality of metadata fields of pytree{node}. \
                 Make sure that metadata fields are hashable and have simple equality \
                 semantics. (Note: arrays cannot be passed as metadata fields!)"
            )
        }
        TreeError::Transpose(TransposeFault::Mismatch { expected, got, .. }) => {
            format!("Mismatch\n{got}\n != \n{expected}")
        }
        TreeError::NotAPrefix => "`prefix_treedef` is not a prefix of `full_treedef`".into(),
        TreeError::ProtoUserNode => "User-defined nodes are not supported when serializing \
                                     pytrees as protocol buffers. You should either convert \
                                     the user-defined nodes to another type or use pickle \
                                     instead."
            .into(),
        TreeError::ProtoKeyNotStr => {
            "Only string keys are supported in proto pytree serialization.".into()
        }
        // jaxlib's words, then the two counts.
        TreeError::IterableArity { arity, got } => format!(
            "Arity mismatch between trees: a node of {arity} children got an iterable of {got}"
        ),
        TreeError::UnsortableKeys => {
            "Comparator raised exception while sorting pytree dictionary keys.".into()
        }
        other => other.to_string(),
    }
}

/// Whether the JAX loaded beside oxtree prints a prefix error's child keys as key objects
/// (`['b']`, jax 0.11 and later) rather than as the keys inside them (`b`, jax 0.10). Set by
/// the JAX face (`_set_jax_version`) when JAX is loaded; the newest JAX's words until then.
static KEY_OBJECTS: AtomicBool = AtomicBool::new(true);

/// The version of the JAX whose words the JAX face speaks.
pub fn set_jax_version(major: u32, minor: u32) {
    KEY_OBJECTS.store((major, minor) >= (0, 11), Ordering::Relaxed);
}

/// Whether prefix errors show child keys as JAX's key objects (see [`set_jax_version`]).
fn prints_key_objects() -> bool {
    KEY_OBJECTS.load(Ordering::Relaxed)
}
