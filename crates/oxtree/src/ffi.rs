//! Every raw CPython access of the core, and every other `unsafe` operation, behind small
//! typed safe wrappers. No other module of the crate contains `unsafe` (a test in
//! `tests/reliability/test_source_rules.py` keeps it so).
//!
//! Each wrapper states its contract once, in a `SAFETY:` comment, and checks at run time
//! whatever its callers could get wrong (an index, a length, a type), so that no input of
//! safe code can make it misbehave; the checks are compares on values already loaded, a
//! branch never taken on the hot paths. Every wrapper is `#[inline]`: it compiles to the
//! code the callers had inline before.
//!
//! Private CPython layouts (the dict tables the template copy writes into, the dict
//! version tag) are compiled only for the interpreters whose layout they mirror, by the
//! cfgs `build.rs` passes from pyo3-build-config (`Py_3_14`, `Py_GIL_DISABLED`, `PyPy`,
//! ...): an extension is built for one interpreter, so nothing is decided at run time.

use std::ffi::c_ulong;

use pyo3::ffi as sys;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyFunction, PyList, PyString, PyTuple, PyType};

// ---------------------------------------------------------------------------------------
// Types: slots and flags.
// ---------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------
// Objects.
// ---------------------------------------------------------------------------------------

/// `a == b` as containers compare their items: identity first, then `__eq__`.
#[inline]
pub fn rich_eq(a: &Bound<'_, PyAny>, b: &Bound<'_, PyAny>) -> PyResult<bool> {
    // SAFETY: both objects are live (held by the caller for the call).
    match unsafe { sys::PyObject_RichCompareBool(a.as_ptr(), b.as_ptr(), sys::Py_EQ) } {
        r if r < 0 => Err(PyErr::fetch(a.py())),
        r => Ok(r == 1),
    }
}

/// `object.__setattr__(obj, name, value)`: bypasses a frozen dataclass's own `__setattr__`
/// and stores into `__dict__` or a slot.
#[inline]
pub fn generic_setattr(
    obj: &Bound<'_, PyAny>,
    name: &Bound<'_, PyAny>,
    value: &Bound<'_, PyAny>,
) -> PyResult<()> {
    // SAFETY: three live objects; PyObject_GenericSetAttr does not steal references and
    // returns -1 with an exception set on failure.
    if unsafe { sys::PyObject_GenericSetAttr(obj.as_ptr(), name.as_ptr(), value.as_ptr()) } < 0 {
        return Err(PyErr::fetch(obj.py()));
    }
    Ok(())
}

/// The most keyword arguments `call_method_kw` passes (on the native stack).
pub const MAX_KW_ARGS: usize = 30;

/// `func(self_, **dict(zip(kwnames, values)))` by vectorcall, the values being the items of
/// `parts[0]` then `parts[1]`: no argument tuple or dict. `func` is a Python function, whose
/// calls check their keyword names themselves (a name that is not a str raises TypeError).
/// `kwnames` must be a tuple of as many names as there are values (at most
/// `MAX_KW_ARGS`); anything else raises SystemError.
#[inline]
pub fn call_method_kw<'py>(
    func: &Bound<'py, PyFunction>,
    self_: &Bound<'py, PyAny>,
    parts: [&Bound<'py, PyTuple>; 2],
    kwnames: &Bound<'py, PyTuple>,
) -> PyResult<Bound<'py, PyAny>> {
    let n = kwnames.len();
    if n > MAX_KW_ARGS || parts[0].len() + parts[1].len() != n {
        return Err(crate::internal!(
            "a keyword call whose names do not match its values"
        ));
    }
    // Slot 0 is free for the callee (PY_VECTORCALL_ARGUMENTS_OFFSET), slot 1 is `self`.
    let mut args = [std::ptr::null_mut::<sys::PyObject>(); MAX_KW_ARGS + 2];
    args[1] = self_.as_ptr();
    let mut at = 2;
    for part in parts {
        for i in 0..part.len() {
            // SAFETY: a tuple never changes, and `i` is below its length; the item is
            // borrowed for the call, which the caller's tuple outlives.
            args[at] = unsafe { part.get_borrowed_item_unchecked(i) }.as_ptr();
            at += 1;
        }
    }
    // SAFETY: `args[1..n + 2]` holds `self_` and the `n` values, borrowed (the caller holds
    // them) for the call; `kwnames` is a tuple of `n` names, which a Python function's call
    // checks; slot 0 may be overwritten by the callee (the offset flag). The result is a new
    // reference or NULL with an exception set.
    unsafe {
        Bound::from_owned_ptr_or_err(
            func.py(),
            sys::PyObject_Vectorcall(
                func.as_ptr(),
                args.as_mut_ptr().add(1),
                1 | sys::PY_VECTORCALL_ARGUMENTS_OFFSET,
                kwnames.as_ptr(),
            ),
        )
    }
}

// ---------------------------------------------------------------------------------------
// The garbage collector.
// ---------------------------------------------------------------------------------------

/// Stops the collector from tracking `obj`, which its owner vouches can be part of no
/// reference cycle (an immutable object holding only atomic objects, or a private list of
/// such). Harmless for an object the collector does not track.
#[inline]
pub fn untrack<T>(obj: &Bound<'_, T>) {
    // SAFETY: a live object; PyObject_GC_UnTrack of an untracked (or non-GC) object is a
    // no-op, and its dealloc untracks only what is still tracked. Untracking never frees or
    // moves anything: the worst a wrong vouch does is leave a cycle uncollected.
    unsafe {
        if sys::PyObject_IS_GC(obj.as_ptr()) != 0 {
            sys::PyObject_GC_UnTrack(obj.as_ptr().cast());
        }
    }
}

/// Tracks `obj` by the collector if it is a GC object not tracked yet.
#[inline]
pub fn track(obj: &Bound<'_, PyAny>) {
    // SAFETY: a live, fully initialized object (every slot filled); tracking an untracked GC
    // object is what its constructor would have done. `PyObject_GC_IsTracked` is 0 for a
    // non-GC object (it tests `PyObject_IS_GC` itself), so asking it first spares the common
    // case (`PyType_GenericAlloc` already tracked the instance) the second call.
    unsafe {
        if sys::PyObject_GC_IsTracked(obj.as_ptr()) == 0 && sys::PyObject_IS_GC(obj.as_ptr()) != 0 {
            sys::PyObject_GC_Track(obj.as_ptr().cast());
        }
    }
}

/// CPython's `_PyObject_GC_MAY_BE_TRACKED`: whether `obj` could take part in a cycle.
#[inline(always)]
fn may_be_tracked(obj: *mut sys::PyObject) -> bool {
    // SAFETY: only called below on live objects (held by a stack or a dict); the flag test
    // first spares most leaves (numbers, arrays) a call.
    unsafe {
        ((*sys::Py_TYPE(obj)).tp_flags & sys::Py_TPFLAGS_HAVE_GC) != 0
            && sys::PyObject_IS_GC(obj) != 0
            && (sys::PyTuple_CheckExact(obj) == 0 || sys::PyObject_GC_IsTracked(obj) != 0)
    }
}

// ---------------------------------------------------------------------------------------
// Tuples and lists.
// ---------------------------------------------------------------------------------------

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
    if type_flags(ty) & sys::Py_TPFLAGS_TUPLE_SUBCLASS == 0 {
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
            track(&obj);
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

// ---------------------------------------------------------------------------------------
// Dicts.
// ---------------------------------------------------------------------------------------

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
    #[cfg(all(not(PyPy), not(GraalPy), not(Py_LIMITED_API), not(Py_3_14)))]
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
    #[cfg(not(all(not(PyPy), not(GraalPy), not(Py_LIMITED_API), not(Py_3_14))))]
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

/// For a dict of at most `STR_ITEMS_MAX` items whose keys are all exact str: the keys'
/// addresses (compared, never dereferenced) into `keys` and the values (new references)
/// pushed onto `values`, both in storage order; the number of items. None for any other
/// dict, with `values` as it was. One pass over the table, and no reference counted for
/// the keys.
#[inline]
pub fn str_keyed_items<'py>(
    dict: &Bound<'py, PyDict>,
    keys: &mut [usize; STR_ITEMS_MAX],
    values: &mut Vec<Bound<'py, PyAny>>,
) -> Option<usize> {
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
            if sys::PyUnicode_CheckExact(key) == 0 || len == STR_ITEMS_MAX {
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

// ---------------------------------------------------------------------------------------
// CPython's private dict layout (3.11 to 3.13 with the GIL).
// ---------------------------------------------------------------------------------------

/// Whether this build's dicts have the layout of `DictObject` and `KeysObject` below:
/// CPython 3.11, 3.12 or 3.13 with the GIL, its full API (an extension built for one CPython
/// version loads only into that version). Any other interpreter builds every dict key by
/// key and reads no version tag.
pub const DICT_LAYOUT_KNOWN: bool = cfg!(all(
    not(Py_LIMITED_API),
    not(PyPy),
    not(GraalPy),
    not(RustPython),
    not(Py_GIL_DISABLED),
    not(Py_3_14),
));

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
/// it, then the entries.
#[repr(C)]
struct KeysObject {
    dk_refcnt: sys::Py_ssize_t,
    dk_log2_size: u8,
    dk_log2_index_bytes: u8,
    dk_kind: u8,
    dk_version: u32,
    dk_usable: sys::Py_ssize_t,
    dk_nentries: sys::Py_ssize_t,
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

/// The most items `dict_copy_with_values` fills.
pub const MAX_TEMPLATE_KEYS: usize = 32;

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
        let entries = table
            .add(1)
            .cast::<u8>()
            .add(1usize << (*table).dk_log2_index_bytes)
            .cast::<[*mut sys::PyObject; 2]>();
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
            may_hold_cycles = may_hold_cycles || may_be_tracked(value);
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

// ---------------------------------------------------------------------------------------
// Memory: vectors and shared references.
// ---------------------------------------------------------------------------------------

/// Pushes `make()` onto `v` and returns it there, building the value straight in the vector's memory: a
/// `push(make())` of a large value was built on the stack and copied.
#[inline(always)]
pub fn push_built<T>(v: &mut Vec<T>, make: impl FnOnce() -> T) -> &mut T {
    v.reserve(1);
    let len = v.len();
    // SAFETY: room for one more element was just reserved; the slot past the length is
    // written once, and only then does the length cover it.
    unsafe {
        let slot = v.as_mut_ptr().add(len);
        slot.write(make());
        v.set_len(len + 1);
        &mut *slot
    }
}

/// Moves the last element of `from` to the end of `to`, memory to memory, and returns it
/// there; None when `from` is empty.
#[inline(always)]
pub fn move_last<'v, T>(from: &mut Vec<T>, to: &'v mut Vec<T>) -> Option<&'v mut T> {
    let last = from.len().checked_sub(1)?;
    to.reserve(1);
    let len = to.len();
    // SAFETY: `from[last]` is initialized and is given up (the length is cut) as it is copied
    // bitwise into the slot past `to`'s length, reserved just above, which the length then
    // covers: the value changes owner once and is neither dropped nor duplicated.
    unsafe {
        std::ptr::copy_nonoverlapping(from.as_ptr().add(last), to.as_mut_ptr().add(len), 1);
        from.set_len(last);
        to.set_len(len + 1);
        Some(&mut *to.as_mut_ptr().add(len))
    }
}

/// Drops the elements of `v` for which `holds_something` is true and frees the buffer,
/// skipping the drop glue of the others, which the caller vouches hold nothing: the glue
/// called a function per element (an eighth of a 500-deep chain's flatten). A wrong vouch
/// leaks, never frees twice.
#[inline]
pub fn drop_sparse<T>(v: Vec<T>, holds_something: impl Fn(&T) -> bool) {
    let mut v = std::mem::ManuallyDrop::new(v);
    for item in v.iter_mut() {
        if holds_something(item) {
            // SAFETY: each element is dropped at most once, here; the vector's length is set
            // to zero below before its buffer is freed, so none is dropped again.
            unsafe { std::ptr::drop_in_place(item) };
        }
    }
    // SAFETY: the vector is still owned (ManuallyDrop); with length zero, dropping it frees
    // the buffer and touches no element.
    unsafe {
        v.set_len(0);
        std::mem::ManuallyDrop::drop(&mut v);
    }
}

/// An empty vector of `B` in the allocation of `v` (emptied), when the two element types
/// have one size and alignment; else a new empty vector.
pub fn retype<A, B>(mut v: Vec<A>) -> Vec<B> {
    v.clear();
    if std::mem::size_of::<A>() != std::mem::size_of::<B>()
        || std::mem::align_of::<A>() != std::mem::align_of::<B>()
        || std::mem::size_of::<A>() == 0
    {
        return Vec::new();
    }
    let mut v = std::mem::ManuallyDrop::new(v);
    // SAFETY: `A` and `B` have one size and alignment (checked above), so the allocation's
    // layout is the one a `Vec<B>` of this capacity would have made; the vector is empty, so
    // no value is reinterpreted; pointer and capacity are owned by the result alone.
    unsafe { Vec::from_raw_parts(v.as_mut_ptr().cast::<B>(), 0, v.capacity()) }
}

/// A treespec's nodes together with the registrations its registered nodes point into.
pub mod nodes {
    use std::ptr::NonNull;
    use std::sync::Arc;

    use pyo3::Python;

    use crate::registry::Registration;
    use crate::treespec::Node;

    /// A registered node's registration, as a plain pointer: cloning and dropping an `Arc` per
    /// node were two atomic operations each (perf: an eighth of a dataclass-heavy flatten).
    ///
    /// The lifetime contract, kept by this module alone: a non-empty `CustomRef` is made only
    /// here, only in a node of a `Nodes` whose `regs` hold an `Arc` of its registration, and
    /// never leaves that `Nodes` (no `&mut` to such a node, no node moved out of one; a copy
    /// of a node made elsewhere, `Node::clone_ref`, is empty). So a `&Node` borrowed from a
    /// `Nodes` proves the registration alive for as long as the borrow.
    pub struct CustomRef(Option<NonNull<Registration>>);

    // `CustomRef` is `Send` and `Sync` because a `Registration` is both.
    const _: () = {
        const fn send_sync<T: Send + Sync>() {}
        send_sync::<Registration>();
    };

    // SAFETY: a `CustomRef` is a shared reference to a `Registration`, which is `Send + Sync`
    // (checked above), kept alive by an `Arc` (the contract above).
    unsafe impl Send for CustomRef {}
    // SAFETY: as for `Send`.
    unsafe impl Sync for CustomRef {}

    impl CustomRef {
        pub const NONE: CustomRef = CustomRef(None);

        #[inline(always)]
        pub fn is_none(&self) -> bool {
            self.0.is_none()
        }

        /// The registration, for as long as the node holding this is borrowed.
        #[inline]
        pub fn get(&self) -> Option<&Registration> {
            // SAFETY: a non-empty `CustomRef` lies in a node of a `Nodes` that holds an `Arc`
            // of the pointee and outlives the borrow of `self` (the type's contract).
            self.0.map(|p| unsafe { p.as_ref() })
        }
    }

    /// Nodes in post-order and one `Arc` of each registration their custom nodes point to.
    /// Reads go through `Deref` to `[Node]`; writes through the methods below, which keep the
    /// two together: a custom node enters only with its registration (`push_custom`,
    /// `push_custom_built`) or with the `Nodes` it is copied or moved from (`push_copy`,
    /// `move_last_from`, `append`). Plain nodes made elsewhere (`push`, `From<Vec<Node>>`)
    /// point to no registration.
    #[derive(Default)]
    pub struct Nodes {
        vec: Vec<Node>,
        /// Held, read only to avoid taking a second `Arc` of one registration: usually one
        /// or two entries, so lookups are scans, the last entry first.
        regs: Vec<Arc<Registration>>,
    }

    /// A node just written into a `Nodes`, open for its counts only.
    pub struct NodeMut<'a>(&'a mut Node);

    impl NodeMut<'_> {
        #[inline]
        pub fn set_counts(&mut self, num_leaves: usize, num_nodes: usize) {
            self.0.num_leaves = num_leaves;
            self.0.num_nodes = num_nodes;
        }
    }

    impl std::ops::Deref for NodeMut<'_> {
        type Target = Node;
        fn deref(&self) -> &Node {
            self.0
        }
    }

    impl std::ops::Deref for Nodes {
        type Target = [Node];
        #[inline(always)]
        fn deref(&self) -> &[Node] {
            &self.vec
        }
    }

    impl<'a> IntoIterator for &'a Nodes {
        type Item = &'a Node;
        type IntoIter = std::slice::Iter<'a, Node>;
        fn into_iter(self) -> Self::IntoIter {
            self.vec.iter()
        }
    }

    /// Nodes made outside this module point to no registration.
    impl From<Vec<Node>> for Nodes {
        fn from(vec: Vec<Node>) -> Nodes {
            debug_assert!(vec.iter().all(|n| n.custom.is_none()));
            Nodes {
                vec,
                regs: Vec::new(),
            }
        }
    }

    impl Drop for Nodes {
        /// Drops only the nodes that hold something: the drop glue called a function per node,
        /// leaves included (an eighth of a 500-deep chain's flatten, treespec freed each
        /// call). The registrations go after the nodes.
        fn drop(&mut self) {
            super::drop_sparse(std::mem::take(&mut self.vec), |n| !n.holds_nothing());
        }
    }

    impl Nodes {
        pub fn new() -> Nodes {
            Nodes::default()
        }

        pub fn with_capacity(n: usize) -> Nodes {
            Vec::with_capacity(n).into()
        }

        #[inline]
        pub fn reserve(&mut self, more: usize) {
            self.vec.reserve(more);
        }

        pub fn try_reserve(
            &mut self,
            more: usize,
        ) -> Result<(), std::collections::TryReserveError> {
            self.vec.try_reserve(more)
        }

        pub fn capacity(&self) -> usize {
            self.vec.capacity()
        }

        pub fn shrink_to_fit(&mut self) {
            self.vec.shrink_to_fit();
        }

        /// Appends `node`, made outside this module, so pointing to no registration.
        #[inline(always)]
        pub fn push(&mut self, node: Node) {
            debug_assert!(node.custom.is_none());
            self.vec.push(node);
        }

        /// Appends `make()`, built in place (see `push_built`), and returns it to be filled:
        /// a node made outside this module points to no registration, so its `&mut` cannot
        /// carry one off.
        #[inline(always)]
        pub fn push_built(&mut self, make: impl FnOnce() -> Node) -> &mut Node {
            let node = super::push_built(&mut self.vec, make);
            debug_assert!(node.custom.is_none());
            node
        }

        /// Appends `node` as a registered node of `reg`.
        pub fn push_custom(&mut self, node: Node, reg: &Arc<Registration>) {
            self.push_custom_built(|| node, reg, |_| {});
        }

        /// Appends `make()`, built in place and filled by `fill` (see `push_built`), as a
        /// registered node of `reg`.
        #[inline(always)]
        pub fn push_custom_built(
            &mut self,
            make: impl FnOnce() -> Node,
            reg: &Arc<Registration>,
            fill: impl FnOnce(&mut Node),
        ) {
            self.keep(reg);
            let node = self.push_built(make);
            // The node points to no registration yet: `fill` cannot carry one off.
            fill(node);
            node.custom = CustomRef(Some(NonNull::from(&**reg)));
        }

        /// Appends a copy of `src[i]`, its registration included.
        pub fn push_copy(&mut self, py: Python<'_>, src: &Nodes, i: usize) -> NodeMut<'_> {
            let from = &src.vec[i];
            let mut copy = from.clone_ref(py);
            if let Some(p) = from.custom.0 {
                self.keep_ptr(p);
                copy.custom = CustomRef(Some(p));
            }
            NodeMut(super::push_built(&mut self.vec, || copy))
        }

        /// Appends copies of `src[range]`, their registrations included.
        pub fn extend_copy(&mut self, py: Python<'_>, src: &Nodes, range: std::ops::Range<usize>) {
            self.vec.reserve(range.len());
            for i in range {
                self.push_copy(py, src, i);
            }
        }

        /// Moves all of `other`'s nodes to the end of these, with their registrations.
        pub fn append(&mut self, mut other: Nodes) {
            self.vec.append(&mut other.vec);
            for reg in std::mem::take(&mut other.regs) {
                if !self.regs.iter().any(|r| Arc::ptr_eq(r, &reg)) {
                    self.regs.push(reg);
                }
            }
        }

        /// Moves the last node of `from` to the end of these, memory to memory (see
        /// `move_last`), with its registration, and sets its counts; false when `from` is
        /// empty.
        #[inline(always)]
        pub fn move_last_from(
            &mut self,
            from: &mut Nodes,
            num_leaves: usize,
            num_nodes: usize,
        ) -> bool {
            let Some(node) = super::move_last(&mut from.vec, &mut self.vec) else {
                return false;
            };
            node.num_leaves = num_leaves;
            node.num_nodes = num_nodes;
            if let Some(p) = node.custom.0 {
                // `from` still holds the registration: the node just left it.
                self.keep_ptr(p);
            }
            true
        }

        /// Drops the last node, if any.
        #[inline]
        pub fn discard_last(&mut self) {
            self.vec.pop();
        }

        /// Holds an `Arc` of `reg`, unless these hold one already.
        #[inline(always)]
        fn keep(&mut self, reg: &Arc<Registration>) {
            if !self.regs.last().is_some_and(|r| Arc::ptr_eq(r, reg)) {
                self.keep_other(reg);
            }
        }

        #[cold]
        #[inline(never)]
        fn keep_other(&mut self, reg: &Arc<Registration>) {
            if !self.regs.iter().any(|r| Arc::ptr_eq(r, reg)) {
                self.regs.push(reg.clone());
            }
        }

        /// `keep` for the registration behind a `CustomRef` of a live `Nodes` (the caller's
        /// source of a copied or moved node).
        #[inline(always)]
        fn keep_ptr(&mut self, p: NonNull<Registration>) {
            if self.regs.last().map(Arc::as_ptr) != Some(p.as_ptr().cast_const()) {
                self.keep_ptr_other(p);
            }
        }

        #[cold]
        #[inline(never)]
        fn keep_ptr_other(&mut self, p: NonNull<Registration>) {
            let p = p.as_ptr().cast_const();
            if self.regs.iter().any(|r| Arc::as_ptr(r) == p) {
                return;
            }
            // SAFETY: `p` came from a `CustomRef` of a `Nodes` the caller borrows, which holds
            // an `Arc` of it (the contract of `CustomRef`): the allocation is live, and
            // counting one more reference and taking it as an `Arc` is the clone of that `Arc`.
            let arc = unsafe {
                Arc::increment_strong_count(p);
                Arc::from_raw(p)
            };
            self.regs.push(arc);
        }
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

/// `obj` as a `T` when its type is exactly `T`'s, else `obj` back: a pointer compare, with
/// no error object made on a miss (the walks try several types per object).
#[inline(always)]
pub fn into_exact<'py, T: pyo3::PyTypeInfo>(
    obj: Bound<'py, PyAny>,
) -> Result<Bound<'py, T>, Bound<'py, PyAny>> {
    if obj.is_exact_instance_of::<T>() {
        // SAFETY: the exact type was just checked.
        Ok(unsafe { obj.cast_into_unchecked() })
    } else {
        Err(obj)
    }
}
