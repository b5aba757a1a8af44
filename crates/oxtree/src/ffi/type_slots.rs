//! Types: slots and flags.

use std::ffi::c_ulong;

use pyo3::ffi as sys;
use pyo3::prelude::*;
use pyo3::types::{PyFunction, PyTuple, PyType};

/// The `tp_flags` of `obj`'s type.
#[inline]
pub fn flags_of_type_of(obj: &Bound<'_, PyAny>) -> c_ulong {
    // SAFETY: a live object's type is a live type object; `tp_flags` is plain data.
    unsafe { (*sys::Py_TYPE(obj.as_ptr())).tp_flags }
}

/// The `tp_flags` of the type `ty`.
#[inline]
pub fn type_flags(ty: &Bound<'_, PyType>) -> c_ulong {
    // SAFETY: a live type object; `tp_flags` is plain data.
    unsafe { (*ty.as_type_ptr()).tp_flags }
}

/// The `tp_flags` and `tp_version_tag` of the type `ty`.
#[inline]
pub fn type_flags_and_tag(ty: &Bound<'_, PyType>) -> (c_ulong, u32) {
    let raw = ty.as_type_ptr();
    // SAFETY: a live type object; both fields are plain data.
    unsafe { ((*raw).tp_flags, (*raw).tp_version_tag) }
}

/// The version tag of the type `ty`, when it is valid: a type that carries it has not been
/// modified since it was given it, and no other type ever gets it.
#[inline]
pub fn type_version_tag(ty: &Bound<'_, PyType>) -> Option<u32> {
    let (flags, tag) = type_flags_and_tag(ty);
    valid_version_tag(flags, tag)
}

/// The version tag `tag` of a type whose flags are `flags`, when it is valid (see
/// `type_version_tag`).
#[inline]
pub fn valid_version_tag(flags: c_ulong, tag: u32) -> Option<u32> {
    // Up to 3.12 a modified type loses Py_TPFLAGS_VALID_VERSION_TAG (3.11 keeps the old
    // tag); from 3.13 the flag is never set and a modified type's tag is 0. Without this
    // gate no type had a tag on 3.13, and every cache keyed by it missed (namedtuple
    // unflatten 16x slower).
    let valid = if cfg!(Py_3_13) {
        true
    } else {
        flags & sys::Py_TPFLAGS_VALID_VERSION_TAG != 0
    };
    (valid && tag != 0).then_some(tag)
}

/// Whether the type of `obj` is exactly `type` (a class whose metaclass is `type` itself).
#[inline]
pub fn metatype_is_type(obj: &Bound<'_, PyAny>) -> bool {
    // SAFETY: the address of a static type object, compared, never dereferenced.
    unsafe { sys::Py_TYPE(obj.as_ptr()) == std::ptr::addr_of_mut!(sys::PyType_Type) }
}

/// Whether the slot `slot` reads has the same function in `ty` as in `object`. Both
/// pointers come from libpython, where each of object's slots has one address.
#[inline]
fn slot_is_objects(
    ty: &Bound<'_, PyType>,
    slot: impl Fn(&sys::PyTypeObject) -> Option<usize>,
) -> bool {
    // SAFETY: a live type object and the static `object` type; slots are plain data.
    unsafe { slot(&*ty.as_type_ptr()) == slot(&*std::ptr::addr_of!(sys::PyBaseObject_Type)) }
}

/// Whether `ty`'s `__init__` slot is `object.__init__`'s.
#[inline]
pub fn init_is_object_init(ty: &Bound<'_, PyType>) -> bool {
    slot_is_objects(ty, |t| t.tp_init.map(|f| f as usize))
}

/// Whether `ty`'s `__new__` slot is `object.__new__`'s.
#[inline]
pub fn new_is_object_new(ty: &Bound<'_, PyType>) -> bool {
    slot_is_objects(ty, |t| t.tp_new.map(|f| f as usize))
}

/// `object.__new__(ty)`, for a class whose `__new__` is object's (None for any other class,
/// whose instances object's `__new__` could not lay out): it raises for an abstract class,
/// as calling the class would.
#[inline]
pub fn object_new<'py>(ty: &Bound<'py, PyType>) -> Option<PyResult<Bound<'py, PyAny>>> {
    if !new_is_object_new(ty) {
        return None;
    }
    let py = ty.py();
    // SAFETY: object's `tp_new`, called for a class whose `tp_new` it is (checked above), with
    // an empty argument tuple and no keywords; it returns a new reference or NULL with an
    // exception set.
    let new = unsafe { (*std::ptr::addr_of_mut!(sys::PyBaseObject_Type)).tp_new }?;
    // SAFETY: as just above.
    Some(unsafe {
        Bound::from_owned_ptr_or_err(
            py,
            new(
                ty.as_type_ptr(),
                PyTuple::empty(py).as_ptr(),
                std::ptr::null_mut(),
            ),
        )
    })
}

/// The address of the code object `func` runs now (compared, never dereferenced).
#[inline]
pub fn function_code_addr(func: &Bound<'_, PyFunction>) -> usize {
    // SAFETY: a live function object; `func_code` is a plain pointer field.
    unsafe { (*func.as_ptr().cast::<sys::PyFunctionObject>()).func_code as usize }
}
