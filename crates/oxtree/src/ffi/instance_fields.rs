//! Reading registered fields straight from instances (CPython 3.11 to 3.13 with the GIL): a
//! value kept in the instance's inline values, or in a `__slots__` member.
//!
//! Generic attribute lookup (`PyObject_GenericGetAttr`) costs about 220 instructions a field
//! on 3.11: a lookup of the name along the class's MRO (`_PyType_Lookup`), then of the
//! instance's values by name, and the call overhead. A class's fields keep their places as
//! long as the class keeps its version tag, so each place is found once per version of the
//! class (as CPython's own `LOAD_ATTR_INSTANCE_VALUE` and `LOAD_ATTR_SLOT` do) and read in a
//! few instructions afterwards.

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering::Relaxed};

use pyo3::ffi as sys;
use pyo3::prelude::*;
use pyo3::types::PyString;

/// Whether this build reads fields directly: CPython 3.11, 3.12 or 3.13 with the GIL and its
/// full API (`DICT_LAYOUT_KNOWN`'s interpreters), the versions whose instance layouts
/// `inline_value` mirrors (an extension built for one CPython version loads only into that
/// version). Any other interpreter reads every field with `getattr`.
pub const FIELD_LAYOUT_KNOWN: bool = super::dict_layout::DICT_LAYOUT_KNOWN;

// A plan, in one word: the kind in the low two bits, its operand above them.
/// Read with `getattr`.
const GENERIC: usize = 0;
/// The instance's inline value at the index above the bits.
const INLINE: usize = 1;
/// The object slot at the byte offset above the bits.
const SLOT: usize = 2;

/// How each of a list of attributes is read on the instances of one class, planned for one
/// version of that class (its version tag) and planned again when the instances' class has
/// another version (the class was changed, or it is another class).
///
/// The atomics are read and written with the GIL held (no other thread runs meanwhile:
/// `FIELD_LAYOUT_KNOWN` excludes free-threaded builds); they only make the struct `Sync`.
pub struct FieldReads {
    /// The version tag the plans were made under; 0 while there are none.
    tag: AtomicU32,
    plans: Box<[AtomicUsize]>,
    /// The address of the last class found with no version tag to plan under (3.12 and 3.13
    /// give none to a class changed a thousand times): its instances are read with
    /// `getattr`, without planning again for each.
    untagged: AtomicUsize,
}

impl FieldReads {
    /// No plans yet, for `n` attributes.
    pub fn new(n: usize) -> Self {
        FieldReads {
            tag: AtomicU32::new(0),
            plans: (0..n).map(|_| AtomicUsize::new(GENERIC)).collect(),
            untagged: AtomicUsize::new(0),
        }
    }

    /// Pushes onto `out` the attributes `names` of `obj` (the list this was made for), in
    /// order, each read where the plan for the class of `obj` says, or taken from
    /// `getattr(i)` (for `names[i]`) where the plan is `getattr`, where the instance does not
    /// hold the value in the planned place (its attribute deleted, its values moved to a
    /// dict), or on an interpreter whose layouts are not known. `getattr` gives the value or
    /// the error; as it may run Python code that changes the class, the plans are checked
    /// again after it.
    #[inline]
    pub fn read_into<'py>(
        &self,
        obj: &Bound<'py, PyAny>,
        names: &[Py<PyString>],
        out: &mut Vec<Bound<'py, PyAny>>,
        mut getattr: impl FnMut(usize) -> PyResult<Bound<'py, PyAny>>,
    ) -> PyResult<()> {
        out.reserve(names.len());
        let mut direct = self.prepare(obj, names);
        for i in 0..names.len() {
            if direct {
                // `prepare` said the plans are those of the class of `obj` as it is now, and
                // nothing has run Python code since.
                if let Some(value) = self.read_planned(obj, i) {
                    out.push(value);
                    continue;
                }
            }
            out.push(getattr(i)?);
            direct = direct && self.prepare(obj, names);
        }
        Ok(())
    }

    /// Makes the plans current for the class of `obj`, whose attributes `names` (the list
    /// this was made for) are about to be read. Whether any direct read may be tried.
    #[inline(always)]
    fn prepare(&self, obj: &Bound<'_, PyAny>, names: &[Py<PyString>]) -> bool {
        if !FIELD_LAYOUT_KNOWN || names.len() != self.plans.len() {
            return false;
        }
        match tag_of_type_of(obj) {
            Some(tag) => tag == self.tag.load(Relaxed) || self.plan(&obj.get_type(), names),
            None if obj.get_type().as_ptr() as usize == self.untagged.load(Relaxed) => false,
            None => self.plan(&obj.get_type(), names),
        }
    }

    /// Plans each read for `ty` as it is now; whether it has a version tag to keep them under.
    #[cold]
    #[inline(never)]
    fn plan(&self, ty: &Bound<'_, pyo3::types::PyType>, names: &[Py<PyString>]) -> bool {
        self.tag.store(0, Relaxed);
        let py = ty.py();
        let generic_getattr = {
            let raw = ty.as_type_ptr();
            // SAFETY: a live type object; `tp_getattro` is plain data, compared only.
            let slot = unsafe { (*raw).tp_getattro };
            slot.map(|f| f as usize) == Some(sys::PyObject_GenericGetAttr as *const () as usize)
        };
        for (plan, name) in self.plans.iter().zip(names) {
            let how = if generic_getattr {
                plan_read(ty, name.bind(py))
            } else {
                GENERIC
            };
            plan.store(how, Relaxed);
        }
        // `_PyType_Lookup` gave the class a version tag if it can have one; nothing since
        // has run Python code, so the class is still as planned.
        match super::type_slots::type_version_tag(ty) {
            Some(tag) => {
                self.tag.store(tag, Relaxed);
                true
            }
            None => {
                self.untagged.store(ty.as_ptr() as usize, Relaxed);
                false
            }
        }
    }

    /// Attribute `i` of `obj` (a new reference) read where its plan says, or None: the plan
    /// is `getattr`, or the instance does not hold the value there. Only right while the
    /// plans are those of the class of `obj` as it is now: called by `read_into` after
    /// `prepare` said so, with no Python code run since.
    #[inline(always)]
    fn read_planned<'py>(&self, obj: &Bound<'py, PyAny>, i: usize) -> Option<Bound<'py, PyAny>> {
        let plan = self.plans.get(i)?.load(Relaxed);
        let operand = plan >> 2;
        let raw = obj.as_ptr();
        // SAFETY: the plan was made by `plan_read` for the class of `obj` under the version
        // tag that class still has (`prepare` checked it, and no Python code ran since; the
        // callers' contract): the class is unchanged since (every
        // change to a class, or to one in its MRO, takes its tag away, and no other class
        // ever gets it), so its layout and its instances' are those planned. `INLINE`: the
        // class keeps inline values (`inline_value` checks the instance still has them) and
        // `operand` is the index of the name in its shared keys, which only grow by
        // appending, within the capacity every instance's values were made with; CPython's
        // `LOAD_ATTR_INSTANCE_VALUE` reads the same index under the same tag. `SLOT`: the
        // class's `__slots__` member for the name is an object member (`Py_T_OBJECT_EX`)
        // at byte `operand` of every instance, as `LOAD_ATTR_SLOT` reads it. A value read is
        // made an owned reference at once; nothing here runs Python code.
        let value = unsafe {
            match plan & 3 {
                INLINE => inline_value(raw, operand),
                SLOT => *raw.cast::<u8>().add(operand).cast::<*mut sys::PyObject>(),
                _ => std::ptr::null_mut(),
            }
        };
        if value.is_null() {
            return None;
        }
        // SAFETY: a live object the instance holds a reference to.
        Some(unsafe { Bound::from_borrowed_ptr(obj.py(), value) })
    }
}

/// The valid version tag of the class of `obj` (see `type_version_tag`), read without taking
/// a reference to the class.
#[inline]
fn tag_of_type_of(obj: &Bound<'_, PyAny>) -> Option<u32> {
    // SAFETY: a live object's type is a live type object; both fields are plain data.
    let (flags, tag) = unsafe {
        let ty = sys::Py_TYPE(obj.as_ptr());
        ((*ty).tp_flags, (*ty).tp_version_tag)
    };
    super::type_slots::valid_version_tag(flags, tag)
}

/// What `_PyType_Lookup` finds for `name` along the MRO of `ty` (a borrowed reference), or
/// NULL, without an exception set; it runs no Python code (the MRO's dicts are exact dicts,
/// looked up with an exact str) and gives `ty` a version tag when it can. CPython 3.11-3.13
/// export it (`cpython/object.h`); PyO3 does not declare it. NULL on other interpreters,
/// where nothing calls it (`FIELD_LAYOUT_KNOWN`).
///
/// # Safety
/// `ty` a live type, `name` a live exact str; use the result only while nothing runs Python
/// code.
unsafe fn type_lookup(ty: *mut sys::PyTypeObject, name: *mut sys::PyObject) -> *mut sys::PyObject {
    #[cfg(cpython_private_layout)]
    {
        // SAFETY: the signature of `_PyType_Lookup` as CPython 3.11-3.13 declare and export
        // it (`cpython/object.h`); the cfg above compiles it only for those interpreters.
        unsafe extern "C" {
            fn _PyType_Lookup(
                ty: *mut sys::PyTypeObject,
                name: *mut sys::PyObject,
            ) -> *mut sys::PyObject;
        }
        // SAFETY: the caller's contract is the function's.
        return unsafe { _PyType_Lookup(ty, name) };
    }
    #[allow(unreachable_code)]
    {
        let _ = (ty, name);
        std::ptr::null_mut()
    }
}

/// The plan for reading attribute `name` on the instances of `ty` (whose `tp_getattro` is
/// `PyObject_GenericGetAttr`), as generic attribute lookup would find it:
/// - a `__slots__` member (an object member descriptor, found along the MRO, a data
///   descriptor that wins over any instance dict): `SLOT` at its offset;
/// - nothing along the MRO, or a class attribute that is no data descriptor and whose type
///   cannot become one (a static type's slots never change: a field's default of a builtin
///   type, a function): the instance's value wins, `INLINE` at the name's index in the
///   class's shared keys, when the class keeps inline values and the name is there;
/// - `GENERIC` otherwise (a property, any other descriptor, a class attribute of a class
///   that could gain `__set__`, a name not in the shared keys yet).
fn plan_read(ty: &Bound<'_, pyo3::types::PyType>, name: &Bound<'_, PyString>) -> usize {
    if !name.is_exact_instance_of::<PyString>() {
        return GENERIC;
    }
    let raw_ty = ty.as_type_ptr();
    // SAFETY: a live type and an exact str (checked above). `found` is NULL or a live object
    // the MRO's dicts hold, inspected here while nothing runs Python code; its type's fields
    // and a member descriptor's `PyMemberDef` are plain data (CPython's
    // `PyMemberDescrObject` on 3.11+, as PyO3 declares it).
    unsafe {
        let found = type_lookup(raw_ty, name.as_ptr());
        if !found.is_null() {
            let found_ty = sys::Py_TYPE(found);
            if found_ty == std::ptr::addr_of_mut!(sys::PyMemberDescr_Type) {
                let member = (*found.cast::<sys::PyMemberDescrObject>()).d_member;
                let plain = !member.is_null()
                    && (*member).type_code == sys::Py_T_OBJECT_EX
                    && (*member).flags & (sys::Py_AUDIT_READ | sys::Py_RELATIVE_OFFSET) == 0
                    && (*member).offset >= std::mem::size_of::<sys::PyObject>() as sys::Py_ssize_t
                    && (*member).offset + std::mem::size_of::<usize>() as sys::Py_ssize_t
                        <= (*raw_ty).tp_basicsize;
                return if plain {
                    ((*member).offset as usize) << 2 | SLOT
                } else {
                    GENERIC
                };
            }
            // An immutable type cannot gain `__set__` later (a class could, unseen by the
            // tag of `ty`).
            let fixed = (*found_ty).tp_flags & sys::Py_TPFLAGS_IMMUTABLETYPE != 0;
            if !fixed || (*found_ty).tp_descr_set.is_some() {
                return GENERIC;
            }
        }
        match shared_key_index(raw_ty, name.as_ptr()) {
            Some(index) => index << 2 | INLINE,
            None => GENERIC,
        }
    }
}

/// `dk_kind` of a split table: the shared keys of a class's instances.
const DICT_KEYS_SPLIT: u8 = 2;

/// `Py_TPFLAGS_INLINE_VALUES` (3.13): instances keep their values right after the header.
const TPFLAGS_INLINE_VALUES: std::os::raw::c_ulong = 1 << 2;

/// The index of `name` among the shared keys of the instances of `ty`, when its instances
/// keep inline values indexed by those keys (3.11 and 3.12: a managed dict; 3.13: inline
/// values right after the object header).
///
/// # Safety
/// `ty` a live type, `name` a live exact str, on an interpreter of `FIELD_LAYOUT_KNOWN`.
unsafe fn shared_key_index(ty: *mut sys::PyTypeObject, name: *mut sys::PyObject) -> Option<usize> {
    // SAFETY: the caller's contract: `ty` a live heap type whose `ht_cached_keys`, when set
    // and of the split kind, is a keys table of `dk_nentries` (key, value) entries after its
    // index table (`dict_layout::KeysObject`); keys are compared (exact str, no Python code).
    unsafe {
        let flags = (*ty).tp_flags;
        let inline = if cfg!(Py_3_13) {
            flags & TPFLAGS_INLINE_VALUES != 0
                && (*ty).tp_basicsize == std::mem::size_of::<sys::PyObject>() as sys::Py_ssize_t
        } else {
            flags & sys::Py_TPFLAGS_MANAGED_DICT != 0
        };
        if !inline || flags & sys::Py_TPFLAGS_HEAPTYPE == 0 {
            return None;
        }
        let keys = (*ty.cast::<sys::PyHeapTypeObject>())
            .ht_cached_keys
            .cast::<super::dict_layout::KeysObject>();
        if keys.is_null() || (*keys).dk_kind != DICT_KEYS_SPLIT {
            return None;
        }
        let entries = super::dict_layout::KeysObject::unicode_entries(keys);
        (0..(*keys).dk_nentries.max(0) as usize).find(|&i| {
            let key = (*entries.add(i))[0];
            key == name
                || (!key.is_null()
                    && sys::PyUnicode_CheckExact(key) != 0
                    && sys::PyUnicode_Compare(key, name) == 0)
        })
    }
}

/// CPython 3.13's `PyDictValues` header: the values follow it.
#[repr(C)]
struct InlineValues313 {
    capacity: u8,
    size: u8,
    embedded: u8,
    valid: u8,
    values: [*mut sys::PyObject; 0],
}

/// The inline value at `index` of `obj` (borrowed; NULL when unset or when the instance's
/// values are not inline now).
///
/// # Safety
/// `obj` a live instance of a class for which `shared_key_index` gave `index` and that has
/// not changed since (see `FieldReads::read_planned`).
#[inline]
unsafe fn inline_value(obj: *mut sys::PyObject, index: usize) -> *mut sys::PyObject {
    // SAFETY: the caller's contract; the words read are those CPython's own accessors read
    // for this version (cited per branch).
    unsafe {
        let values: *mut *mut sys::PyObject = if cfg!(Py_3_13) {
            // `_PyObject_InlineValues`: right after the object header; `valid` is cleared when
            // they move to a dict. A dict made from them while valid shares them.
            let header = obj.add(1).cast::<InlineValues313>();
            if (*header).valid == 0 || index >= (*header).capacity as usize {
                return std::ptr::null_mut();
            }
            std::ptr::addr_of_mut!((*header).values).cast()
        } else if cfg!(Py_3_12) {
            // `_PyObject_DictOrValuesPointer`: three words before the object, the values' address
            // minus one (an odd word) or a dict's (or NULL).
            let word = *obj.cast::<usize>().sub(3);
            if word & 1 == 0 {
                return std::ptr::null_mut();
            }
            (word + 1) as *mut *mut sys::PyObject
        } else {
            // 3.11's `_PyObject_ValuesPointer`: four words before the object, NULL once the
            // instance has a dict.
            let values = *obj.cast::<*mut *mut sys::PyObject>().sub(4);
            if values.is_null() {
                return std::ptr::null_mut();
            }
            values
        };
        *values.add(index)
    }
}
