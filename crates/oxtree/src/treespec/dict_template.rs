//! Rebuilding small str-keyed dicts by copying a template.
//!
//! A dict built key by key costs CPython a keys table allocated and cleared, then a probe,
//! a free-slot search and a write per key: 40% of a gpt2-like unflatten under perf.
//! `PyDict_Copy` of a dict that has the same keys in the same order instead copies the
//! table in one `memcpy`. This module keeps, per thread, a template dict for recently
//! rebuilt key lists (keys mapped to None, in the order the rebuilt dict must have), copies
//! it, and writes the values into the copy's entries.
//!
//! Writing the entries needs the layout of CPython's dict (private to CPython). It is the
//! same on 3.11, 3.12 and 3.13 with the GIL (`PyDictObject` and `PyDictKeysObject` in their
//! `cpython/dictobject.h` and `internal/pycore_dict.h`; 3.13's free-threaded build adds a
//! mutex to the keys header), so the fast path is compiled only for those (`LAYOUT_KNOWN`)
//! and checks every copy before writing into it: each entry must hold the expected key and
//! None, or the copy is dropped and the dict built key by key as on any other version.

use std::cell::RefCell;

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use super::{Face, Insertion, Node};

/// Dicts of at most this many keys are copied from templates: each template holds a
/// table as large as the dict's, and the thread keeps `SLOTS` of them.
pub const MAX_KEYS: usize = 32;

/// Templates kept per thread (direct-mapped by key list and order): enough for trees of
/// a few hundred distinct dicts (a 1,000-leaf tree of random dicts has 151).
const SLOTS: usize = 1024;

/// The order of a template's keys: the leaf order (`SORTED`), a packed insertion order, or
/// (top bit set) the hash of an insertion order kept as a slice.
const SORTED: u64 = u64::MAX;

struct Template {
    /// The node's key list (leaf order), held so its address is not reused.
    keys: Py<PyList>,
    order: u64,
    /// The insertion positions of a dict of more than 8 keys (`order` is only their hash).
    slice: Option<Box<[usize]>>,
    /// Made the second time these keys are rebuilt in this order: a dict rebuilt once (a
    /// treespec unpickled and unflattened, keys seen once) is built key by key, not twice.
    dict: Option<Py<PyDict>>,
}

thread_local! {
    static TEMPLATES: RefCell<Vec<Option<Template>>> = const { RefCell::new(Vec::new()) };
}

/// CPython 3.11-3.13's `PyDictObject` (3.13 names the version tag `_ma_watcher_tag`).
#[repr(C)]
struct DictObject {
    ob_base: ffi::PyObject,
    ma_used: ffi::Py_ssize_t,
    ma_version_tag: u64,
    ma_keys: *mut KeysObject,
    ma_values: *mut std::ffi::c_void,
}

/// CPython 3.11-3.13's `PyDictKeysObject` header (with the GIL); the index table follows
/// it, then the entries.
#[repr(C)]
struct KeysObject {
    dk_refcnt: ffi::Py_ssize_t,
    dk_log2_size: u8,
    dk_log2_index_bytes: u8,
    dk_kind: u8,
    dk_version: u32,
    dk_usable: ffi::Py_ssize_t,
    dk_nentries: ffi::Py_ssize_t,
}

/// `dk_kind` of a table whose keys are all str: its entries are (key, value) pairs.
const DICT_KEYS_UNICODE: u8 = 1;

/// Whether this build's dicts have the layout above: CPython 3.11, 3.12 or 3.13 with the
/// GIL, its full API (an extension built for one CPython version loads only into that
/// version). Any other interpreter builds every dict key by key.
const LAYOUT_KNOWN: bool = cfg!(all(
    not(Py_LIMITED_API),
    not(PyPy),
    not(GraalPy),
    not(RustPython),
    not(Py_GIL_DISABLED),
    not(Py_3_14),
));

/// The version tag of `dict` (CPython 3.11 to 3.13 give a dict a new one on every change),
/// or None on an interpreter whose dict layout is not known.
pub fn dict_version(dict: &Bound<'_, PyDict>) -> Option<u64> {
    if !LAYOUT_KNOWN {
        return None;
    }
    // SAFETY: a live dict, with the layout of `DictObject` (`LAYOUT_KNOWN`).
    Some(unsafe { dict_version_raw(dict.as_ptr()) })
}

/// `dict_version` without the check of the layout.
///
/// # Safety
/// `dict` must be a live dict, and `dict_version` must have returned a tag before (the
/// layout is this interpreter's).
#[inline]
pub unsafe fn dict_version_raw(dict: *mut ffi::PyObject) -> u64 {
    // SAFETY: the caller's contract; a plain data field.
    unsafe { (*dict.cast::<DictObject>()).ma_version_tag }
}

/// The dict of `node` (an exact-dict node of up to `MAX_KEYS` str keys) holding the values
/// `stack[start..]` (leaf order), copied from a template: the values move into the dict and
/// `stack` is cut to `start`. `None` when this dict cannot be made that way, with `stack`
/// untouched (the caller builds it key by key).
pub fn copy_with_values<'py>(
    py: Python<'py>,
    node: &Node,
    stack: &mut Vec<Bound<'py, PyAny>>,
    start: usize,
    face: Face,
) -> Option<PyResult<Bound<'py, PyAny>>> {
    let n = node.arity;
    debug_assert_eq!(stack.len() - start, n);
    if !LAYOUT_KNOWN || n == 0 || n > MAX_KEYS {
        return None;
    }
    let keys = node.keys().as_ref()?.bind(py);
    let insertion = if face == Face::Jax {
        None
    } else {
        node.insertion()
    };
    let (order, slice) = match insertion {
        None => (SORTED, None),
        Some(Insertion::Packed { bits, .. }) => (u64::from(bits), None),
        // Dicts of more than 8 keys keep their order in a slice: remembered by a hash of it
        // (top bit set: never a packed order), the slice itself compared on a hit.
        Some(Insertion::Slice(s)) => {
            let h = s.iter().fold(0x243F_6A88_85A3_08D3u64, |h, &p| {
                (h ^ p as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
            });
            ((h | 1 << 63) & !1, Some(s))
        }
    };
    // The leaf position of the i-th key in the rebuilt dict's order.
    let position = |i: usize| insertion.map_or(i, |ins| ins.get(i));
    let template = match template_for(py, keys, order, slice, &position) {
        Ok(Some(t)) => t,
        Ok(None) => return None,
        Err(e) => return Some(Err(e)),
    };
    // SAFETY: `template` is an exact dict; PyDict_Copy returns a new reference or NULL with
    // an exception set.
    let copy =
        match unsafe { Bound::from_owned_ptr_or_err(py, ffi::PyDict_Copy(template.as_ptr())) } {
            Ok(copy) => copy,
            Err(e) => return Some(Err(e)),
        };
    // SAFETY: the copy is a new exact dict nobody else has seen, on a CPython whose layout
    // `DictObject` and `KeysObject` mirror (`LAYOUT_KNOWN`). Every entry is
    // checked to hold its expected key and None before any is written; the entries read lie
    // within the table CPython allocated for `ma_used == n` items.
    unsafe {
        let dict = copy.as_ptr().cast::<DictObject>();
        let table = (*dict).ma_keys;
        if (*dict).ma_used != n as ffi::Py_ssize_t
            || !(*dict).ma_values.is_null()
            || (*table).dk_nentries != n as ffi::Py_ssize_t
            || (*table).dk_kind != DICT_KEYS_UNICODE
        {
            return None;
        }
        let entries = table
            .add(1)
            .cast::<u8>()
            .add(1usize << (*table).dk_log2_index_bytes)
            .cast::<[*mut ffi::PyObject; 2]>();
        let none = ffi::Py_None();
        let list = keys.as_ptr();
        for i in 0..n {
            let [key, value] = *entries.add(i);
            if key != ffi::PyList_GET_ITEM(list, position(i) as ffi::Py_ssize_t) || value != none {
                return None;
            }
        }
        // Each value's reference moves from the stack into its entry (the stack is cut
        // below them right after, without releasing them); then the copy's n references to
        // None are given back.
        let values = stack.as_ptr().add(start);
        let mut may_hold_cycles = false;
        for i in 0..n {
            let value = (*values.add(position(i))).as_ptr();
            (*entries.add(i))[1] = value;
            may_hold_cycles = may_hold_cycles || may_be_tracked(value);
        }
        stack.set_len(start);
        for _ in 0..n {
            ffi::Py_DECREF(none);
        }
        // What inserting the values would have done: a dict holding a container is tracked.
        if may_hold_cycles && ffi::PyObject_GC_IsTracked(copy.as_ptr()) == 0 {
            ffi::PyObject_GC_Track(copy.as_ptr().cast());
        }
    }
    Some(Ok(copy))
}

/// CPython's `_PyObject_GC_MAY_BE_TRACKED`: whether `obj` could take part in a cycle.
///
/// # Safety
/// `obj` must be a live object.
unsafe fn may_be_tracked(obj: *mut ffi::PyObject) -> bool {
    // SAFETY: `obj` is live (the caller's contract), and so is its type. The flag test first
    // spares most leaves (numbers, arrays) a call.
    unsafe {
        ((*ffi::Py_TYPE(obj)).tp_flags & ffi::Py_TPFLAGS_HAVE_GC) != 0
            && ffi::PyObject_IS_GC(obj) != 0
            && (ffi::PyTuple_CheckExact(obj) == 0 || ffi::PyObject_GC_IsTracked(obj) != 0)
    }
}

fn slot_of(keys: &Bound<'_, PyList>, order: u64) -> usize {
    let h = ((keys.as_ptr() as usize as u64) >> 4 ^ order).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (h >> (64 - SLOTS.trailing_zeros())) as usize
}

/// This thread's template for `keys` in `order` (made and kept when these keys are seen a
/// second time); `None` when there is none yet, or a key is not an exact str (the dict is
/// built key by key).
fn template_for<'py>(
    py: Python<'py>,
    keys: &Bound<'py, PyList>,
    order: u64,
    slice: Option<&[usize]>,
    position: &dyn Fn(usize) -> usize,
) -> PyResult<Option<Bound<'py, PyDict>>> {
    let slot = slot_of(keys, order);
    let seen = TEMPLATES.with(|t| {
        t.borrow()
            .get(slot)
            .and_then(Option::as_ref)
            .filter(|t| {
                t.keys.as_ptr() == keys.as_ptr() && t.order == order && t.slice.as_deref() == slice
            })
            .map(|t| t.dict.as_ref().map(|d| d.bind(py).clone()))
    });
    let n = keys.len();
    match seen {
        Some(Some(dict)) => return Ok(Some(dict)),
        // Seen once before (its keys checked then): the template is made now.
        Some(None) => {}
        None => {
            // Only str keys are remembered: hashing and comparing them runs no Python code,
            // and the cache then holds nothing a user could want collected.
            let all_str = (0..n).all(|i| {
                // SAFETY: `i` is below the length of the node's key list, which nothing
                // changes.
                unsafe {
                    ffi::PyUnicode_CheckExact(ffi::PyList_GET_ITEM(keys.as_ptr(), i as _)) != 0
                }
            });
            if all_str {
                // First sight: remembered, built key by key this time.
                keep(slot, keys, order, slice, None);
            }
            return Ok(None);
        }
    }
    let dict = PyDict::new(py);
    let none = py.None();
    for i in 0..n {
        dict.set_item(keys.get_item(position(i))?, &none)?;
    }
    keep(slot, keys, order, slice, Some(&dict));
    Ok(Some(dict))
}

/// Remembers `keys` in `order` in `slot`, with the template when there is one.
fn keep(
    slot: usize,
    keys: &Bound<'_, PyList>,
    order: u64,
    slice: Option<&[usize]>,
    dict: Option<&Bound<'_, PyDict>>,
) {
    let kept = Template {
        keys: keys.clone().unbind(),
        order,
        slice: slice.map(Box::from),
        dict: dict.map(|d| d.clone().unbind()),
    };
    let old = TEMPLATES.with(|t| {
        let mut t = t.borrow_mut();
        if t.is_empty() {
            t.resize_with(SLOTS, || None);
        }
        t[slot].replace(kept)
    });
    // Dropped after the borrow ends: releasing a template runs no Python code, but a nested
    // call must never find the cache borrowed.
    drop(old);
}
