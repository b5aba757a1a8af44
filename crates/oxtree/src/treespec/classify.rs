//! What an object is to a walk: a leaf, None, a builtin node kind or a registered node,
//! decided by its type (exact builtin types first, then the registry, then the tuple and
//! dict subclasses oxtree knows by type).

use std::sync::Arc;

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

use crate::face::Face;
use crate::jax_registry::Sighting;
use crate::kind::Kind;
use crate::registry::{Registration, Registry};
use crate::types;

/// How a non-builtin-fast-path object is to be treated.
pub enum Class<'a> {
    Leaf,
    NoneNode,
    Node(Kind),
    Custom(&'a Arc<Registration>),
}

/// Classifies an object whose type is not exactly tuple, list, dict or NoneType. With
/// `jax`, a type JAX registers and oxtree does not is a registered node with JAX's rule
/// (`jax_registry`); asking JAX is the only way this can fail.
#[inline]
pub fn classify_other<'a>(
    obj: &Bound<'_, PyAny>,
    registry: &'a Registry,
    namespace: &str,
    face: Face,
    jax: Option<&Sighting>,
) -> PyResult<Class<'a>> {
    classify_other_type(
        obj.py(),
        obj.get_type_ptr(),
        || crate::ffi::flags_of_type_of(obj),
        || obj.get_type(),
        registry,
        namespace,
        face,
        jax,
    )
}

/// What instances of `ty` are to a walk under these options: the walk's own dispatch, for a
/// type rather than an object (`oxtree._core._node_kind`).
pub fn classify_type<'a>(
    ty: &Bound<'_, pyo3::types::PyType>,
    none_is_leaf: bool,
    registry: &'a Registry,
    namespace: &str,
    face: Face,
    jax: Option<&Sighting>,
) -> PyResult<Class<'a>> {
    let py = ty.py();
    if ty.is(py.get_type::<PyTuple>()) {
        Ok(Class::Node(Kind::Tuple))
    } else if ty.is(py.get_type::<PyList>()) {
        Ok(Class::Node(Kind::List))
    } else if ty.is(py.get_type::<PyDict>()) {
        Ok(Class::Node(Kind::Dict))
    } else if ty.is(py.None().bind(py).get_type()) {
        Ok(if none_is_leaf {
            Class::Leaf
        } else {
            Class::NoneNode
        })
    } else {
        classify_other_type(
            py,
            ty.as_type_ptr(),
            || crate::ffi::type_flags(ty),
            || ty.clone(),
            registry,
            namespace,
            face,
            jax,
        )
    }
}

/// `classify_other` for the type `ty` of an object `obj` (or of any instance, for
/// `classify_type`); `bound` makes it a Python object, only for tuple subclasses: the walk's
/// path takes no reference otherwise.
#[inline(always)]
#[allow(clippy::too_many_arguments)] // the type's facts, lazily, and the walk's options
fn classify_other_type<'a, 'py>(
    py: Python<'py>,
    ty: *mut ffi::PyTypeObject,
    flags: impl FnOnce() -> std::os::raw::c_ulong,
    bound: impl FnOnce() -> Bound<'py, pyo3::types::PyType>,
    registry: &'a Registry,
    namespace: &str,
    face: Face,
    jax: Option<&Sighting>,
) -> PyResult<Class<'a>> {
    if registry.scalar_leaf(ty) {
        return Ok(Class::Leaf);
    }
    if !registry.is_empty() {
        if let Some(reg) = registry.lookup(ty, namespace) {
            return Ok(Class::Custom(reg));
        }
    }
    let c = types::collections(py);
    // OrderedDict and defaultdict, which JAX registers, are nodes of their own kinds here.
    let not_mapping = ty != c.ordered_dict.as_ptr().cast() && ty != c.default_dict.as_ptr().cast();
    if let Some(seen_by) = jax.filter(|_| not_mapping) {
        // Before the namedtuple check, as in JAX: a registration comes first.
        let bound = bound();
        if let Some(reg) = crate::jax_registry::node(&bound, seen_by)? {
            return Ok(Class::Custom(reg));
        }
        return Ok(builtin_class(py, ty, flags, || bound, face));
    }
    Ok(builtin_class(py, ty, flags, bound, face))
}

/// What the walk makes of a type that is no registered node: one of the builtin node kinds
/// oxtree knows by type (namedtuples, struct sequences, the collections mappings, deque), or
/// a leaf.
#[inline(always)]
fn builtin_class<'a, 'py>(
    py: Python<'py>,
    ty: *mut ffi::PyTypeObject,
    flags: impl FnOnce() -> std::os::raw::c_ulong,
    bound: impl FnOnce() -> Bound<'py, pyo3::types::PyType>,
    face: Face,
) -> Class<'a> {
    let flags = flags();
    if flags & ffi::Py_TPFLAGS_TUPLE_SUBCLASS != 0 {
        let kind = types::tuple_subclass_kind(&bound());
        // JAX treats struct sequences as leaves.
        return if kind == Kind::Leaf || (kind == Kind::StructSeq && !face.rules().structseq_is_node)
        {
            Class::Leaf
        } else {
            Class::Node(kind)
        };
    }
    let c = types::collections(py);
    if flags & ffi::Py_TPFLAGS_DICT_SUBCLASS != 0 {
        if ty == c.ordered_dict.as_ptr().cast() {
            return Class::Node(Kind::OrderedDict);
        }
        if ty == c.default_dict.as_ptr().cast() {
            return Class::Node(Kind::DefaultDict);
        }
        return Class::Leaf;
    }
    if ty == c.deque.as_ptr().cast() && face.rules().deque_is_node {
        return Class::Node(Kind::Deque);
    }
    Class::Leaf
}

/// The class of any object, as the walk sees it (without an `is_leaf` predicate).
pub fn classify<'a>(
    obj: &Bound<'_, PyAny>,
    none_is_leaf: bool,
    registry: &'a Registry,
    namespace: &str,
    face: Face,
    jax: Option<&Sighting>,
) -> PyResult<Class<'a>> {
    if obj.is_exact_instance_of::<PyTuple>() {
        Ok(Class::Node(Kind::Tuple))
    } else if obj.is_exact_instance_of::<PyList>() {
        Ok(Class::Node(Kind::List))
    } else if obj.is_exact_instance_of::<PyDict>() {
        Ok(Class::Node(Kind::Dict))
    } else if obj.is_none() {
        Ok(if none_is_leaf {
            Class::Leaf
        } else {
            Class::NoneNode
        })
    } else {
        classify_other(obj, registry, namespace, face, jax)
    }
}
