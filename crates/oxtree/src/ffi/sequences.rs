//! Tuples and lists: reading items, building them from values.

use std::ffi::c_ulong;

use pyo3::ffi as sys;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple, PyType};

/// Item `i` of `t` (a new reference), or None past its end.
#[inline]
pub fn tuple_item<'py>(t: &Bound<'py, PyTuple>, i: usize) -> Option<Bound<'py, PyAny>> {
    if i >= t.len() {
        return None;
    }
    // SAFETY: a tuple never changes, and `i` is below its length.
    Some(unsafe { t.get_borrowed_item_unchecked(i) }.to_owned())
}

/// Appends a new reference to each item of `seq`, an exact list or tuple (false, nothing
/// appended, for any other object). Measured on a 3-leaf tuple's unflatten: pyo3's item
/// iterator, which reads the list's length again at every step, cost 15 instructions per leaf.
pub fn extend_with_items<'py>(out: &mut Vec<Bound<'py, PyAny>>, seq: &Bound<'py, PyAny>) -> bool {
    let py = seq.py();
    // SAFETY: `seq` is an exact list or tuple (checked); its item array holds `n` live
    // objects, and nothing below runs Python code (only increfs), so it cannot change while
    // they are read. Each slot of `out` past its length is written once, then counted.
    unsafe {
        let (items, n) = if seq.is_exact_instance_of::<PyList>() {
            let l = seq.as_ptr().cast::<sys::PyListObject>();
            (
                (*l).ob_item.cast_const(),
                sys::PyList_GET_SIZE(seq.as_ptr()) as usize,
            )
        } else if seq.is_exact_instance_of::<PyTuple>() {
            let t = seq.as_ptr().cast::<sys::PyTupleObject>();
            (
                (*t).ob_item.as_ptr(),
                sys::PyTuple_GET_SIZE(seq.as_ptr()) as usize,
            )
        } else {
            return false;
        };
        out.reserve(n);
        let base = out.len();
        let dst = out.as_mut_ptr().add(base);
        for i in 0..n {
            let item = *items.add(i);
            sys::Py_INCREF(item);
            dst.add(i).write(Bound::from_owned_ptr(py, item));
        }
        out.set_len(base + n);
    }
    true
}

/// Item `i` of `l` as it is now (a new reference), or None past its current end.
#[inline]
pub fn list_item<'py>(l: &Bound<'py, PyList>, i: usize) -> Option<Bound<'py, PyAny>> {
    if i >= l.len() {
        return None;
    }
    // SAFETY: `i` was just checked against the list's current length, and the borrowed item
    // becomes an owned reference before any code could change the list.
    Some(unsafe {
        Bound::from_borrowed_ptr(
            l.py(),
            sys::PyList_GET_ITEM(l.as_ptr(), i as sys::Py_ssize_t),
        )
    })
}

/// The address of item `i` of `l` as it is now (compared, never dereferenced), or None past
/// its end.
#[inline]
pub fn list_item_addr(l: &Bound<'_, PyList>, i: usize) -> Option<usize> {
    if i >= l.len() {
        return None;
    }
    // SAFETY: `i` is below the list's current length; only the address is read.
    Some(unsafe { sys::PyList_GET_ITEM(l.as_ptr(), i as sys::Py_ssize_t) } as usize)
}

/// `l[:]`: a new list of the same items.
#[inline]
pub fn list_copy<'py>(l: &Bound<'py, PyList>) -> PyResult<Bound<'py, PyList>> {
    // SAFETY: a live list; PyList_GetSlice returns a new list or NULL with an exception set.
    unsafe {
        Ok(Bound::from_owned_ptr_or_err(
            l.py(),
            sys::PyList_GetSlice(l.as_ptr(), 0, l.len() as sys::Py_ssize_t),
        )?
        .cast_into_unchecked())
    }
}

/// `list(t)`: a new list of the items of tuple `t`, copied slot by slot (a tuple's items
/// never change, so no iterator nor length check is needed).
#[inline]
pub fn tuple_to_list<'py>(t: &Bound<'py, PyTuple>) -> PyResult<Bound<'py, PyList>> {
    let n = t.len();
    // SAFETY: PyList_New returns a new list of `n` NULL slots (or NULL with an exception
    // set); each slot `i < n` is filled once with a new reference to item `i` of the tuple,
    // which has `n` items (a tuple's length never changes), before the list is seen by
    // anything else.
    unsafe {
        let l = Bound::from_owned_ptr_or_err(t.py(), sys::PyList_New(n as sys::Py_ssize_t))?;
        let src = (*t.as_ptr().cast::<sys::PyTupleObject>()).ob_item.as_ptr();
        let dst = (*l.as_ptr().cast::<sys::PyListObject>()).ob_item;
        for i in 0..n {
            let item = src.add(i).read();
            sys::Py_INCREF(item);
            dst.add(i).write(item);
        }
        Ok(l.cast_into_unchecked())
    }
}

/// `list(obj)`: a new list of what iterating `obj` yields.
#[inline]
pub fn sequence_list<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
    // SAFETY: PySequence_List accepts any iterable and returns a new list or NULL with an
    // exception set.
    unsafe {
        Ok(
            Bound::from_owned_ptr_or_err(obj.py(), sys::PySequence_List(obj.as_ptr()))?
                .cast_into_unchecked(),
        )
    }
}

/// What `leaf_items` tells about each item: its type's address (compared, never
/// dereferenced by the caller), its type's flags, and whether it is None.
#[derive(Clone, Copy)]
pub struct ItemType<'a> {
    pub ty: *mut sys::PyTypeObject,
    pub flags: c_ulong,
    pub is_none: bool,
    /// Made only by `all_item_types`, for one call of its callback, while the item (so its
    /// type) is alive.
    live: std::marker::PhantomData<&'a ()>,
}

impl ItemType<'_> {
    /// The type's `tp_version_tag` (see `types::valid_tag`), read only when asked: most
    /// items are decided by their type's address.
    #[inline]
    pub fn tag(&self) -> u32 {
        // SAFETY: an `ItemType` lives no longer than its callback call (`live`), during which
        // the item holds its type alive; the tag is plain data.
        unsafe { (*self.ty).tp_version_tag }
    }
}

/// Whether `accept` holds for the type of every item of `seq`, an exact tuple or list, read
/// without taking references (a 100,000-item list of leaves is looked at in one pass). The
/// length and item array are read again for each item, so a list changed meanwhile is read
/// as it is now, never past its end.
#[inline]
pub fn all_item_types(
    seq: &Bound<'_, PyAny>,
    mut accept: impl FnMut(ItemType<'_>) -> bool,
) -> bool {
    let ptr = seq.as_ptr();
    // SAFETY: the address of the None singleton, compared only.
    let none = unsafe { sys::Py_None() };
    let is_tuple = seq.is_exact_instance_of::<PyTuple>();
    if !is_tuple && !seq.is_exact_instance_of::<PyList>() {
        return false;
    }
    let mut i = 0;
    loop {
        // SAFETY: the exact type was checked above; `i` is checked against the length as it
        // is now, and the item (owned by the sequence at this moment) is only read for its
        // type and flags, plain data of a live type object, before anything else runs.
        let item = unsafe {
            if is_tuple {
                if i >= sys::PyTuple_GET_SIZE(ptr) as usize {
                    return true;
                }
                (*ptr.cast::<sys::PyTupleObject>())
                    .ob_item
                    .as_ptr()
                    .add(i)
                    .read()
            } else {
                if i >= sys::PyList_GET_SIZE(ptr) as usize {
                    return true;
                }
                (*ptr.cast::<sys::PyListObject>()).ob_item.add(i).read()
            }
        };
        // SAFETY: as above: a live object's type and that type's flags.
        let (ty, flags) = unsafe {
            let ty = sys::Py_TYPE(item);
            (ty, (*ty).tp_flags)
        };
        if !accept(ItemType {
            ty,
            flags,
            is_none: item == none,
            live: std::marker::PhantomData,
        }) {
            return false;
        }
        i += 1;
    }
}

/// A new tuple that takes over the references of `items` (a memory error or an iterator
/// that yields fewer items than it promised raises).
#[inline]
pub fn tuple_from<'py>(
    py: Python<'py>,
    items: impl ExactSizeIterator<Item = Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyTuple>> {
    // SAFETY: PyTuple_New returns a new tuple of `n` NULL slots (or NULL with an exception
    // set), filled by `fill_new` with the matching setter.
    unsafe {
        let t = Bound::from_owned_ptr_or_err(py, sys::PyTuple_New(items.len() as _))?;
        fill_new(&t, items, sys::PyTuple_SET_ITEM)?;
        Ok(t.cast_into_unchecked())
    }
}

/// A new tuple of new references to `items`: a key path from the keys above a leaf, with no
/// iterator between (with `tuple_pair_of` for the pairs, callgrind counted 227 instructions
/// fewer than `tuple_from` over cloned items on a 10-key dict's 20 tuples).
#[inline]
pub fn tuple_of<'py>(
    py: Python<'py>,
    items: &[Bound<'py, PyAny>],
) -> PyResult<Bound<'py, PyTuple>> {
    // SAFETY: PyTuple_New returns a new tuple of `items.len()` NULL slots (or NULL with an
    // exception set); each slot `i < len` is set once, with a new reference (the increment
    // makes the reference that SET_ITEM steals).
    unsafe {
        let t = Bound::from_owned_ptr_or_err(py, sys::PyTuple_New(items.len() as _))?;
        for (i, item) in items.iter().enumerate() {
            let p = item.as_ptr();
            sys::Py_INCREF(p);
            sys::PyTuple_SET_ITEM(t.as_ptr(), i as sys::Py_ssize_t, p);
        }
        Ok(t.cast_into_unchecked())
    }
}

/// A new 2-tuple that takes over the references `a` and `b`.
#[inline]
pub fn tuple_pair_of<'py>(
    py: Python<'py>,
    a: Bound<'py, PyAny>,
    b: Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyTuple>> {
    // SAFETY: a new tuple of 2 NULL slots (or NULL with an exception set, `a` and `b` then
    // dropped as usual), each set once with a reference it steals.
    unsafe {
        let t = Bound::from_owned_ptr_or_err(py, sys::PyTuple_New(2))?;
        sys::PyTuple_SET_ITEM(t.as_ptr(), 0, a.into_ptr());
        sys::PyTuple_SET_ITEM(t.as_ptr(), 1, b.into_ptr());
        Ok(t.cast_into_unchecked())
    }
}

/// A new list that takes over the references of `items`, as `tuple_from`.
#[inline]
pub fn list_from<'py>(
    py: Python<'py>,
    items: impl ExactSizeIterator<Item = Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyList>> {
    // SAFETY: as in `tuple_from`, with a new list.
    unsafe {
        let l = Bound::from_owned_ptr_or_err(py, sys::PyList_New(items.len() as _))?;
        fill_new(&l, items, sys::PyList_SET_ITEM)?;
        Ok(l.cast_into_unchecked())
    }
}

/// Moves `items` into the NULL slots of a new sequence with `set` (which steals). A slot
/// left NULL (an iterator shorter than its length) raises: the sequence is dropped unseen,
/// and its dealloc skips NULL slots.
///
/// # Safety
/// `seq` must be a new tuple or list of exactly `items.len()` NULL slots, seen by no other
/// code yet, and `set` the matching `SET_ITEM`.
#[inline(always)]
unsafe fn fill_new<'py>(
    seq: &Bound<'py, PyAny>,
    items: impl ExactSizeIterator<Item = Bound<'py, PyAny>>,
    set: unsafe fn(*mut sys::PyObject, sys::Py_ssize_t, *mut sys::PyObject),
) -> PyResult<()> {
    let n = items.len();
    let mut i = 0;
    for item in items.take(n) {
        // SAFETY: slot `i < n` of a new sequence, filled once with a reference it steals.
        unsafe { set(seq.as_ptr(), i as sys::Py_ssize_t, item.into_ptr()) };
        i += 1;
    }
    if i != n {
        return Err(crate::internal!(
            "an iterator yielded fewer items than it promised"
        ));
    }
    Ok(())
}

/// A new tuple (`list` false) or list of the top `n` values of `stack`, which move into it;
/// None (the stack untouched) on a memory error, with the exception set, or when the stack
/// holds fewer than `n` values, with none set. An `Option`, not a `PyResult`: this runs once
/// per tuple and list rebuilt, and a pointer returns in a register.
#[inline]
pub fn seq_from_top<'py>(
    py: Python<'py>,
    stack: &mut Vec<Bound<'py, PyAny>>,
    n: usize,
    list: bool,
) -> Option<Bound<'py, PyAny>> {
    let start = stack.len().checked_sub(n)?;
    // SAFETY: a new sequence of `n` NULL slots (or NULL with an exception set, the stack still
    // owning its values), filled by `move_top_into` with the matching setter; `n` values lie
    // past `start`.
    unsafe {
        if list {
            let seq = Bound::from_owned_ptr_or_opt(py, sys::PyList_New(n as sys::Py_ssize_t))?;
            move_top_into(&seq, stack, start, sys::PyList_SET_ITEM);
            Some(seq)
        } else {
            let seq = Bound::from_owned_ptr_or_opt(py, sys::PyTuple_New(n as sys::Py_ssize_t))?;
            move_top_into(&seq, stack, start, sys::PyTuple_SET_ITEM);
            Some(seq)
        }
    }
}

/// A new instance of the tuple subclass `ty` holding the top `n` values of `stack`, which
/// move into it: what `tuple.__new__(ty, values)` makes, without an argument tuple. A
/// SystemError (the caller's invariant broken), with `stack` untouched, when `ty` is not a
/// tuple subclass or `stack` holds fewer than `n` values.
#[inline]
pub fn tuple_subclass_from_top<'py>(
    ty: &Bound<'py, PyType>,
    stack: &mut Vec<Bound<'py, PyAny>>,
    n: usize,
) -> PyResult<Bound<'py, PyAny>> {
    if super::type_slots::type_flags(ty) & sys::Py_TPFLAGS_TUPLE_SUBCLASS == 0 {
        return Err(no_tuple_subclass());
    }
    if n > stack.len() {
        return Err(too_few_values());
    }
    let raw = ty.as_type_ptr();
    // SAFETY: `ty` is a tuple subclass (checked), whose `tp_alloc` returns a new instance
    // with `n` NULL item slots (or NULL with an exception set, the stack still owning its
    // values), each filled once; a collection meanwhile would skip NULL slots, and none can
    // run, as nothing here runs Python code. The instance is then tracked by the collector
    // as `tuple.__new__` leaves it.
    unsafe {
        let alloc = (*raw).tp_alloc.unwrap_or(sys::PyType_GenericAlloc);
        let obj = Bound::from_owned_ptr_or_err(ty.py(), alloc(raw, n as sys::Py_ssize_t))?;
        move_top_into(&obj, stack, stack.len() - n, sys::PyTuple_SET_ITEM);
        // `PyType_GenericAlloc` (every namedtuple class's) tracks a GC type's instance
        // itself; another allocator may not.
        if !std::ptr::eq(alloc as *const (), sys::PyType_GenericAlloc as *const ()) {
            super::objects::track(&obj);
        }
        Ok(obj)
    }
}

/// Why `tuple_subclass_from_top` made nothing: a class that is no tuple subclass.
#[cold]
#[inline(never)]
fn no_tuple_subclass() -> PyErr {
    crate::internal!("a tuple subclass instance asked of a class that is no tuple subclass")
}

/// Why `tuple_subclass_from_top` made nothing: fewer values than asked for.
#[cold]
#[inline(never)]
fn too_few_values() -> PyErr {
    crate::internal!("a sequence of more values than were built")
}

/// Moves the values of `stack` past `start` into the NULL slots of `seq` with `set` (which
/// steals).
///
/// # Safety
/// `seq` must be a new tuple (or tuple subclass instance) or list of exactly
/// `stack.len() - start` NULL slots, seen by no other code yet, `set` the matching
/// `SET_ITEM`, and `start <= stack.len()`.
#[inline(always)]
unsafe fn move_top_into<'py>(
    seq: &Bound<'py, PyAny>,
    stack: &mut Vec<Bound<'py, PyAny>>,
    start: usize,
    set: unsafe fn(*mut sys::PyObject, sys::Py_ssize_t, *mut sys::PyObject),
) {
    let n = stack.len() - start;
    // SAFETY: each slot is filled once with a reference read out of the stack, whose length
    // is cut below those values at once, so each reference changes owner exactly once;
    // nothing between can run Python code.
    unsafe {
        let values = stack.as_ptr().add(start);
        let move_one = |i: usize| {
            set(
                seq.as_ptr(),
                i as sys::Py_ssize_t,
                (*values.add(i)).as_ptr(),
            )
        };
        // Most containers are small: a loop known to run at most 4 times is laid out
        // straight, where the general one is unrolled by 4 behind a prologue (a 500-deep
        // chain of 1-item lists spent a sixth of its own loop there).
        if n <= 4 {
            (0..n.min(4)).for_each(move_one);
        } else {
            (0..n).for_each(move_one);
        }
        stack.set_len(start);
    }
}

/// `list_from` for the callers whose signature has no error (graph.rs's rebuild): a list
/// of `items.len()` slots cannot fail but for memory, where pyo3's constructor raises
/// through its panic guard as pyo3's own `PyList::empty` does. Prefer `list_from`.
#[inline]
pub fn list_from_vec_infallible<'py>(
    py: Python<'py>,
    items: &mut Vec<Bound<'py, PyAny>>,
) -> Bound<'py, PyList> {
    let n = items.len();
    // SAFETY: PyList_New gives `n` NULL slots (NULL itself only on memory error, which
    // `from_owned_ptr` reports through pyo3's panic guard), filled by `move_top_into` with
    // the vector's `n` values, which move into the list.
    unsafe {
        let l = Bound::from_owned_ptr(py, sys::PyList_New(n as sys::Py_ssize_t));
        move_top_into(&l, items, 0, sys::PyList_SET_ITEM);
        l.cast_into_unchecked()
    }
}
