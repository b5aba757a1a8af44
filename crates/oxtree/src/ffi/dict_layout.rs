//! CPython's private dict layout (3.11 to 3.13 with the GIL): the version tag and the
//! template copy.

use pyo3::ffi as sys;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

/// Whether this build's dicts have the layout of `DictObject` and `KeysObject` below:
/// CPython 3.11, 3.12 or 3.13 with the GIL, its full API (an extension built for one CPython
/// version loads only into that version). Any other interpreter builds every dict key by
/// key and reads no version tag.
pub const DICT_LAYOUT_KNOWN: bool = cfg!(cpython_private_layout);

/// CPython 3.11-3.13's `PyDictObject` (3.13 names the version tag `_ma_watcher_tag`).
#[repr(C)]
struct DictObject {
    ob_base: sys::PyObject,
    ma_used: sys::Py_ssize_t,
    ma_version_tag: u64,
    ma_keys: *mut KeysObject,
    ma_values: *mut std::ffi::c_void,
}

/// CPython 3.11-3.13's `PyDictKeysObject` header (with the GIL); the index table follows
/// it, then the entries (`instance_fields` reads a class's shared keys with it too).
#[repr(C)]
pub(super) struct KeysObject {
    pub(super) dk_refcnt: sys::Py_ssize_t,
    pub(super) dk_log2_size: u8,
    pub(super) dk_log2_index_bytes: u8,
    pub(super) dk_kind: u8,
    pub(super) dk_version: u32,
    pub(super) dk_usable: sys::Py_ssize_t,
    pub(super) dk_nentries: sys::Py_ssize_t,
}

impl KeysObject {
    /// The entries of `table`, a table of str keys (unicode or split kind): (key, value)
    /// pairs after its index table, `dk_nentries` of them in use.
    ///
    /// # Safety
    /// `table` a live keys table of this layout whose kind is not general.
    #[inline]
    pub(super) unsafe fn unicode_entries(table: *mut KeysObject) -> *mut [*mut sys::PyObject; 2] {
        // SAFETY: the caller's contract; `DK_UNICODE_ENTRIES` computes the same address.
        unsafe {
            table
                .add(1)
                .cast::<u8>()
                .add(1usize << (*table).dk_log2_index_bytes)
                .cast()
        }
    }
}

/// `dk_kind` of a table whose keys are all str: its entries are (key, value) pairs.
const DICT_KEYS_UNICODE: u8 = 1;

/// The version tag of `dict` (CPython 3.11 to 3.13 give a dict a new one on every change),
/// or None on an interpreter whose dict layout is not known.
#[inline]
pub fn dict_version(dict: &Bound<'_, PyDict>) -> Option<u64> {
    if !DICT_LAYOUT_KNOWN {
        return None;
    }
    // SAFETY: a live dict, with the layout of `DictObject` (`DICT_LAYOUT_KNOWN`); the tag
    // is plain data.
    Some(unsafe { (*dict.as_ptr().cast::<DictObject>()).ma_version_tag })
}

/// `str_keyed_items` read straight from the table: for a dict of at most `N` items whose
/// keys are all exact str, the keys' addresses into `keys` and the values (new references)
/// pushed onto `values`, in storage order, and the number of items (`Some(None)`, with
/// `values` as it was, for more items or another key type). None, having read nothing, when
/// the dict is not a combined table of str keys or the layout is not this interpreter's:
/// the caller then reads it with `PyDict_Next`, which cost 50 instructions an item (a fifth
/// of a 10-key dict's flatten), against about 10 here.
#[inline]
pub fn str_table_items<'py, const N: usize>(
    dict: &Bound<'py, PyDict>,
    keys: &mut [usize; N],
    values: &mut Vec<Bound<'py, PyAny>>,
) -> Option<Option<usize>> {
    if !DICT_LAYOUT_KNOWN {
        return None;
    }
    let py = dict.py();
    let base = values.len();
    // SAFETY: a live dict with the layout of `DictObject` and `KeysObject`
    // (`DICT_LAYOUT_KNOWN`). A combined table (no separate values) of kind
    // DICT_KEYS_UNICODE holds `dk_nentries` (key, value) entries after its index table,
    // which `PyDict_Next` walks the same way, skipping entries whose value is NULL
    // (deleted). Keys are only compared and tested for their exact type; a value becomes an
    // owned reference at once. Nothing here runs Python code, so the table cannot change
    // while it is read.
    unsafe {
        let d = dict.as_ptr().cast::<DictObject>();
        if !(*d).ma_values.is_null() {
            return None;
        }
        let table = (*d).ma_keys;
        if (*table).dk_kind != DICT_KEYS_UNICODE {
            return None;
        }
        let used = (*d).ma_used;
        if used < 0 || used as usize > N {
            return Some(None);
        }
        let nentries = (*table).dk_nentries.max(0) as usize;
        let entries = KeysObject::unicode_entries(table);
        let mut len = 0;
        for i in 0..nentries {
            let [key, value] = *entries.add(i);
            if value.is_null() {
                continue;
            }
            if len == N || key.is_null() || sys::PyUnicode_CheckExact(key) == 0 {
                values.truncate(base);
                return Some(None);
            }
            keys[len] = key as usize;
            values.push(Bound::from_borrowed_ptr(py, value));
            len += 1;
        }
        if len != used as usize {
            // Not the table this layout describes: read it the public way.
            values.truncate(base);
            return None;
        }
        Some(Some(len))
    }
}

/// The most items `dict_copy_with_values` fills (its callers keep fewer templates of
/// large dicts, see `treespec::dict_template`).
pub const MAX_TEMPLATE_KEYS: usize = 1 << 17;

/// A copy of `template` (an exact dict whose str keys are `keys[position(i)]` in storage
/// order, each mapped to None) holding the values `stack[start..]` instead: the value for
/// `keys[j]` is `stack[start + j]`. The values move into the copy and `stack` is cut to
/// `start`. None, with `stack` untouched, when the copy does not have that shape (the
/// caller builds the dict key by key) or the layout is not this interpreter's.
///
/// A dict built key by key costs CPython a keys table allocated and cleared, then a probe,
/// a free-slot search and a write per key; `PyDict_Copy` of a dict with the same keys in the
/// same order copies the table in one `memcpy` (40% of a gpt2-like unflatten).
pub fn dict_copy_with_values<'py>(
    template: &Bound<'py, PyDict>,
    keys: &Bound<'py, PyList>,
    position: impl Fn(usize) -> usize,
    stack: &mut Vec<Bound<'py, PyAny>>,
    start: usize,
) -> Option<PyResult<Bound<'py, PyDict>>> {
    let n = keys.len();
    if !DICT_LAYOUT_KNOWN
        || n == 0
        || n > MAX_TEMPLATE_KEYS
        || stack.len().checked_sub(start) != Some(n)
    {
        return None;
    }
    let py = template.py();
    // SAFETY: a live dict; PyDict_Copy returns a new exact dict (whatever the type of its
    // argument) or NULL with an exception set.
    let copy: Bound<'py, PyDict> =
        match unsafe { Bound::from_owned_ptr_or_err(py, sys::PyDict_Copy(template.as_ptr())) } {
            // SAFETY: PyDict_Copy makes an exact dict.
            Ok(copy) => unsafe { copy.cast_into_unchecked() },
            Err(e) => return Some(Err(e)),
        };
    // SAFETY: the copy is a new exact dict nobody else has seen, on a CPython whose layout
    // `DictObject` and `KeysObject` mirror (`DICT_LAYOUT_KNOWN`). Its shape is checked (a
    // combined table of `n` str entries) and each entry checked to hold its expected key and
    // None before its value is written; the entries read lie within the table CPython
    // allocated for `ma_used == n` items. A value written stays owned by the stack until the
    // stack is cut, after the last check: a failed check puts None back into the entries
    // written so far (the copy then holds what it held, and is dropped), the stack keeping
    // every value. When all pass, the positions are below `n` (checked) and pairwise
    // distinct (entry `i` holds `keys[position(i)]`, and a dict's keys are distinct
    // objects), so each of the `n` values past `start` in `stack` moved exactly once. Nothing
    // here runs Python code (`may_be_tracked` reads flags and asks `tp_is_gc`, C code).
    unsafe {
        let dict = copy.as_ptr().cast::<DictObject>();
        let table = (*dict).ma_keys;
        if (*dict).ma_used != n as sys::Py_ssize_t
            || !(*dict).ma_values.is_null()
            || (*table).dk_nentries != n as sys::Py_ssize_t
            || (*table).dk_kind != DICT_KEYS_UNICODE
        {
            return None;
        }
        let entries = KeysObject::unicode_entries(table);
        let none = sys::Py_None();
        let list = keys.as_ptr();
        let values = stack.as_ptr().add(start);
        let mut may_hold_cycles = false;
        for i in 0..n {
            let p = position(i);
            let entry = entries.add(i);
            let [key, value] = *entry;
            if p >= n || key != sys::PyList_GET_ITEM(list, p as sys::Py_ssize_t) || value != none {
                for j in 0..i {
                    (*entries.add(j))[1] = none;
                }
                return None;
            }
            let value = (*values.add(p)).as_ptr();
            (*entry)[1] = value;
            may_hold_cycles = may_hold_cycles || super::objects::may_be_tracked(value);
        }
        // The values' references now belong to the entries: the stack is cut below them
        // without releasing them, and the copy's n references to None are given back.
        stack.set_len(start);
        for _ in 0..n {
            sys::Py_DECREF(none);
        }
        // What inserting the values would have done: a dict holding a container is tracked.
        if may_hold_cycles && sys::PyObject_GC_IsTracked(copy.as_ptr()) == 0 {
            sys::PyObject_GC_Track(copy.as_ptr().cast());
        }
    }
    Some(Ok(copy))
}
