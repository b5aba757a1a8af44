//! Dicts through the public API: lookups, building, iterating, str keys.

use pyo3::ffi as sys;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};

/// `dict.get(key)` without a default: None when the key is missing; an error from the key's
/// `__hash__` or `__eq__` propagates.
#[inline]
pub fn dict_get_item<'py>(
    dict: &Bound<'py, PyDict>,
    key: &Bound<'py, PyAny>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let py = dict.py();
    // SAFETY: both objects are live; the result is a borrowed reference (or NULL with or
    // without an exception set), made an owned one at once.
    unsafe {
        let v = sys::PyDict_GetItemWithError(dict.as_ptr(), key.as_ptr());
        if v.is_null() {
            match PyErr::take(py) {
                Some(e) => Err(e),
                None => Ok(None),
            }
        } else {
            Ok(Some(Bound::from_borrowed_ptr(py, v)))
        }
    }
}

/// The address of `dict[key]` (compared, never dereferenced; 0 when missing) for an exact
/// str key, whose hashing and comparing run no Python code.
#[inline]
pub fn dict_get_str_addr(dict: &Bound<'_, PyDict>, key: &Bound<'_, PyString>) -> usize {
    if !key.is_exact_instance_of::<PyString>() {
        return 0;
    }
    // SAFETY: a live dict and a live exact str; only the address of the result is kept. A
    // str key cannot fail to hash or compare, so no exception is left set.
    unsafe { sys::PyDict_GetItemWithError(dict.as_ptr(), key.as_ptr()) as usize }
}

/// An empty dict with room for `n` items without resizing.
#[inline]
pub fn dict_presized(py: Python<'_>, n: usize) -> PyResult<Bound<'_, PyDict>> {
    #[cfg(cpython_private_api)]
    {
        extern "C" {
            // CPython's own presized constructor (exported by libpython 3.11-3.13, left out
            // of pyo3-ffi as private API).
            fn _PyDict_NewPresized(minused: sys::Py_ssize_t) -> *mut sys::PyObject;
        }
        // SAFETY: returns a new reference to an empty dict, or NULL with an exception set.
        unsafe {
            Ok(
                Bound::from_owned_ptr_or_err(py, _PyDict_NewPresized(n as sys::Py_ssize_t))?
                    .cast_into_unchecked(),
            )
        }
    }
    #[cfg(not(cpython_private_api))]
    {
        let _ = n;
        Ok(PyDict::new(py))
    }
}

/// `dict[key] = value` on an exact dict, without the method lookup of `set_item`.
#[inline]
pub fn dict_set_item(
    dict: &Bound<'_, PyDict>,
    key: &Bound<'_, PyAny>,
    value: &Bound<'_, PyAny>,
) -> PyResult<()> {
    // SAFETY: three live objects; PyDict_SetItem does not steal references and returns -1
    // with an exception set on failure.
    if unsafe { sys::PyDict_SetItem(dict.as_ptr(), key.as_ptr(), value.as_ptr()) } < 0 {
        return Err(PyErr::fetch(dict.py()));
    }
    Ok(())
}

/// The items of a dict in storage order (insertion order for dict and its subclasses), as
/// new references: `PyDict_Next` made safe. A dict changed between two steps is read as it
/// is then (never past its table), as CPython's own loops over `PyDict_Next` do.
pub struct DictItems<'a, 'py> {
    dict: &'a Bound<'py, PyDict>,
    pos: sys::Py_ssize_t,
}

impl<'py> Iterator for DictItems<'_, 'py> {
    type Item = (Bound<'py, PyAny>, Bound<'py, PyAny>);

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        let mut key: *mut sys::PyObject = std::ptr::null_mut();
        let mut value: *mut sys::PyObject = std::ptr::null_mut();
        // SAFETY: PyDict_Next checks `pos` against the dict's current table and yields
        // borrowed references to live entries, made owned ones before anything else runs.
        unsafe {
            if sys::PyDict_Next(self.dict.as_ptr(), &mut self.pos, &mut key, &mut value) == 0 {
                return None;
            }
            let py = self.dict.py();
            Some((
                Bound::from_borrowed_ptr(py, key),
                Bound::from_borrowed_ptr(py, value),
            ))
        }
    }
}

/// The items of `dict` (see `DictItems`).
#[inline]
pub fn dict_items<'a, 'py>(dict: &'a Bound<'py, PyDict>) -> DictItems<'a, 'py> {
    DictItems { dict, pos: 0 }
}

/// The keys of `dict` as a new list, their addresses pushed onto `addrs` (kept theirs by the
/// list) and its values (new references) onto `values`, all in storage order: one pass, the
/// list filled in place. A dict whose length disagrees with its table raises SystemError.
#[inline]
pub fn dict_keys_values<'py, A: smallvec::Array<Item = usize>>(
    dict: &Bound<'py, PyDict>,
    addrs: &mut smallvec::SmallVec<A>,
    values: &mut Vec<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyList>> {
    let py = dict.py();
    let n = dict.len();
    // SAFETY: PyList_New gives `n` NULL slots (or NULL with an exception set), each filled
    // below at most once, with a new reference; a slot left NULL (a dict whose table holds
    // fewer items than its length says) raises before the list is seen, and its dealloc
    // skips NULL slots. PyDict_Next checks `pos` against the dict's table and yields
    // borrowed references to live entries, made owned ones at once; nothing here runs Python
    // code.
    unsafe {
        let list = Bound::from_owned_ptr_or_err(py, sys::PyList_New(n as sys::Py_ssize_t))?;
        let mut pos: sys::Py_ssize_t = 0;
        let mut key: *mut sys::PyObject = std::ptr::null_mut();
        let mut value: *mut sys::PyObject = std::ptr::null_mut();
        let mut i = 0;
        while sys::PyDict_Next(dict.as_ptr(), &mut pos, &mut key, &mut value) != 0 {
            if i == n {
                return Err(crate::internal!("a dict holds more items than its length"));
            }
            sys::Py_INCREF(key);
            sys::PyList_SET_ITEM(list.as_ptr(), i as sys::Py_ssize_t, key);
            addrs.push(key as usize);
            values.push(Bound::from_borrowed_ptr(py, value));
            i += 1;
        }
        if i != n {
            return Err(crate::internal!("a dict holds fewer items than its length"));
        }
        Ok(list.cast_into_unchecked())
    }
}

/// The most items `str_keyed_items` reads.
pub const STR_ITEMS_MAX: usize = 16;

/// For a dict of at most `N` items (`STR_ITEMS_MAX` for most callers) whose keys are all
/// exact str: the keys' addresses (compared, never dereferenced) into `keys` and the values
/// (new references) pushed onto `values`, both in storage order; the number of items. None
/// for any other dict, with `values` as it was. One pass over the table, and no reference
/// counted for the keys.
#[inline]
pub fn str_keyed_items<'py, const N: usize>(
    dict: &Bound<'py, PyDict>,
    keys: &mut [usize; N],
    values: &mut Vec<Bound<'py, PyAny>>,
) -> Option<usize> {
    if let Some(items) = super::dict_layout::str_table_items(dict, keys, values) {
        return items;
    }
    let py = dict.py();
    let base = values.len();
    let mut pos: sys::Py_ssize_t = 0;
    let mut key: *mut sys::PyObject = std::ptr::null_mut();
    let mut value: *mut sys::PyObject = std::ptr::null_mut();
    let mut len = 0;
    // SAFETY: PyDict_Next checks `pos` against the dict's table and yields borrowed
    // references to live entries; a key is only tested for its exact type, a value made an
    // owned reference at once. Nothing here runs Python code.
    unsafe {
        while sys::PyDict_Next(dict.as_ptr(), &mut pos, &mut key, &mut value) != 0 {
            if sys::PyUnicode_CheckExact(key) == 0 || len == N {
                values.truncate(base);
                return None;
            }
            keys[len] = key as usize;
            values.push(Bound::from_borrowed_ptr(py, value));
            len += 1;
        }
    }
    Some(len)
}

/// Whether str `a` sorts after str `b` (code-point order, as `<` on str); false when either
/// is not an exact str. Two ASCII strings, the usual dict keys, compare as byte slices: a
/// third of `PyUnicode_Compare`'s instructions, which first dispatches on both strings'
/// kinds.
#[inline]
pub fn str_greater(a: &Bound<'_, PyAny>, b: &Bound<'_, PyAny>) -> bool {
    let (a, b) = (a.as_ptr(), b.as_ptr());
    // SAFETY: both are live (held by the caller); they are used as str only once checked to
    // be exact str objects. A compact ASCII string (always ready) holds its `length` bytes
    // right after its header; comparing two str cannot fail or run code.
    unsafe {
        if sys::PyUnicode_CheckExact(a) == 0 || sys::PyUnicode_CheckExact(b) == 0 {
            return false;
        }
        if sys::PyUnicode_IS_COMPACT_ASCII(a) != 0 && sys::PyUnicode_IS_COMPACT_ASCII(b) != 0 {
            let bytes = |s: *mut sys::PyObject| {
                std::slice::from_raw_parts(
                    sys::PyUnicode_1BYTE_DATA(s).cast_const(),
                    sys::PyUnicode_GET_LENGTH(s) as usize,
                )
            };
            return bytes(a) > bytes(b);
        }
        sys::PyUnicode_Compare(a, b) > 0
    }
}
