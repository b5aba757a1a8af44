//! Objects: comparison, attributes, method calls, the garbage collector's tracking, exact casts.

use pyo3::ffi as sys;
use pyo3::prelude::*;
use pyo3::types::{PyFunction, PyTuple};

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

/// The most arguments `call_borrowed` passes (on the native stack).
pub const MAX_CALL_ARGS: usize = 8;

/// `func(*args)` by vectorcall with the arguments borrowed: no argument tuple and no
/// reference counted per argument (pyo3's `call1` of a tuple of one leaf cost 37
/// instructions a call, much of `tree_map`'s own work per leaf). More than
/// `MAX_CALL_ARGS` arguments raise SystemError.
#[inline(always)]
pub fn call_borrowed<'py>(
    func: &Bound<'py, PyAny>,
    args: &[&Bound<'py, PyAny>],
) -> PyResult<Bound<'py, PyAny>> {
    match *args {
        [a] => vectorcall(func, [std::ptr::null_mut(), a.as_ptr()]),
        [a, b] => vectorcall(func, [std::ptr::null_mut(), a.as_ptr(), b.as_ptr()]),
        _ if args.len() <= MAX_CALL_ARGS => {
            let mut slots = [std::ptr::null_mut(); MAX_CALL_ARGS + 1];
            for (slot, arg) in slots[1..].iter_mut().zip(args) {
                *slot = arg.as_ptr();
            }
            vectorcall_n(func, &mut slots, args.len())
        }
        _ => Err(crate::internal!(
            "a call of more arguments than it can pass"
        )),
    }
}

/// `func(*slots[1..])`, slot 0 free for the callee.
#[inline(always)]
fn vectorcall<'py, const M: usize>(
    func: &Bound<'py, PyAny>,
    mut slots: [*mut sys::PyObject; M],
) -> PyResult<Bound<'py, PyAny>> {
    vectorcall_n(func, &mut slots, M - 1)
}

/// `func(*slots[1..n + 1])`, slot 0 free for the callee.
#[inline(always)]
fn vectorcall_n<'py>(
    func: &Bound<'py, PyAny>,
    slots: &mut [*mut sys::PyObject],
    n: usize,
) -> PyResult<Bound<'py, PyAny>> {
    if n >= slots.len() {
        return Err(crate::internal!("a call of more arguments than slots"));
    }
    // SAFETY: `slots[1..n + 1]` holds `n` live objects, borrowed for the call (the caller
    // of `call_borrowed` holds them until it returns); slot 0 may be overwritten by the
    // callee (the offset flag). The result is a new reference or NULL with an exception set.
    unsafe {
        Bound::from_owned_ptr_or_err(
            func.py(),
            sys::PyObject_Vectorcall(
                func.as_ptr(),
                slots.as_mut_ptr().add(1),
                n | sys::PY_VECTORCALL_ARGUMENTS_OFFSET,
                std::ptr::null_mut(),
            ),
        )
    }
}

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
pub(super) fn may_be_tracked(obj: *mut sys::PyObject) -> bool {
    // SAFETY: only called below on live objects (held by a stack or a dict); the flag test
    // first spares most leaves (numbers, arrays) a call.
    unsafe {
        ((*sys::Py_TYPE(obj)).tp_flags & sys::Py_TPFLAGS_HAVE_GC) != 0
            && sys::PyObject_IS_GC(obj) != 0
            && (sys::PyTuple_CheckExact(obj) == 0 || sys::PyObject_GC_IsTracked(obj) != 0)
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
