//! Cached type pointers and the classification of tuple subclasses.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Mutex;

use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyString, PyTuple, PyType};

use crate::kind::Kind;

/// A hasher for keys that are already well-spread machine words (type pointers).
#[derive(Default)]
pub struct PtrHasher(u64);

impl Hasher for PtrHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(*b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_usize(&mut self, v: usize) {
        // Type objects are 8-aligned: drop the zero bits, then spread with a Fibonacci multiply.
        self.0 = ((v as u64) >> 3).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

pub type PtrMap<V> = HashMap<usize, V, BuildHasherDefault<PtrHasher>>;

/// The `collections` types that are builtin nodes, imported once.
pub struct Collections {
    pub ordered_dict: Py<PyType>,
    pub default_dict: Py<PyType>,
    pub deque: Py<PyType>,
}

static COLLECTIONS: PyOnceLock<Collections> = PyOnceLock::new();

pub fn collections(py: Python<'_>) -> &'static Collections {
    COLLECTIONS.get_or_init(py, || {
        let m = py
            .import("collections")
            .expect("the collections module always imports");
        let get = |name: &str| -> Py<PyType> {
            m.getattr(name)
                .and_then(|t| Ok(t.cast_into::<PyType>()?))
                .expect("collections defines its container types")
                .unbind()
        };
        Collections {
            ordered_dict: get("OrderedDict"),
            default_dict: get("defaultdict"),
            deque: get("deque"),
        }
    })
}

/// How many tuple subclasses the classification cache holds before it starts over.
const TUPLE_CACHE_LIMIT: usize = 1024;

/// Tuple subclasses already classified: type address -> (the type's version tag, kind).
///
/// No reference to the type is kept, so caching never keeps a class alive. A cached entry
/// counts only while the type at that address still carries the same valid version tag:
/// CPython gives every type a fresh tag from a global counter and drops it when the type is
/// modified, so a class freed and replaced by another at the same address, or a class whose
/// attributes changed, misses the cache and is classified again.
static TUPLE_KINDS: Mutex<Option<PtrMap<(u32, Kind)>>> = Mutex::new(None);

fn version_tag(ty: &Bound<'_, PyType>) -> Option<u32> {
    let raw: *mut ffi::PyTypeObject = ty.as_ptr().cast();
    // SAFETY: `ty` is a live type object; these two fields are plain data.
    let (flags, tag) = unsafe { ((*raw).tp_flags, (*raw).tp_version_tag) };
    (flags & ffi::Py_TPFLAGS_VALID_VERSION_TAG != 0 && tag != 0).then_some(tag)
}

/// Classifies a strict subclass of tuple: a namedtuple, a struct sequence, or a leaf.
#[cold]
pub fn tuple_subclass_kind(ty: &Bound<'_, PyType>) -> Kind {
    let key = ty.as_ptr() as usize;
    if let (Some(tag), Ok(guard)) = (version_tag(ty), TUPLE_KINDS.lock()) {
        if let Some(&(cached, kind)) = guard.as_ref().and_then(|m| m.get(&key)) {
            if cached == tag {
                return kind;
            }
        }
    }
    let kind = if is_structseq_class(ty) {
        Kind::StructSeq
    } else if is_namedtuple_class(ty) {
        Kind::NamedTuple
    } else {
        Kind::Leaf
    };
    // The attribute lookups above have given the type a version tag if it can have one.
    if let (Some(tag), Ok(mut guard)) = (version_tag(ty), TUPLE_KINDS.lock()) {
        let map = guard.get_or_insert_with(PtrMap::default);
        if map.len() >= TUPLE_CACHE_LIMIT {
            map.clear();
        }
        map.insert(key, (tag, kind));
    }
    kind
}

/// A namedtuple class: a tuple subclass whose `_fields` is a tuple of str, with `_make`.
pub fn is_namedtuple_class(ty: &Bound<'_, PyType>) -> bool {
    let py = ty.py();
    let Ok(fields) = ty.getattr(intern!(py, "_fields")) else {
        return false;
    };
    let Ok(fields) = fields.cast::<PyTuple>() else {
        return false;
    };
    fields
        .iter()
        .all(|f| f.is_instance_of::<pyo3::types::PyString>())
        && ty
            .getattr(intern!(py, "_make"))
            .map(|m| m.is_callable())
            .unwrap_or(false)
}

/// A struct sequence class (`time.struct_time`, `os.stat_result`): a final tuple subclass
/// with the integer attributes `n_fields`, `n_sequence_fields` and `n_unnamed_fields`.
pub fn is_structseq_class(ty: &Bound<'_, PyType>) -> bool {
    let py = ty.py();
    // SAFETY: `ty` is a live type object; reading its flags has no side effects.
    let flags = unsafe { ffi::PyType_GetFlags(ty.as_ptr().cast()) };
    if flags & ffi::Py_TPFLAGS_BASETYPE != 0 {
        return false;
    }
    [
        intern!(py, "n_fields"),
        intern!(py, "n_sequence_fields"),
        intern!(py, "n_unnamed_fields"),
    ]
    .iter()
    .all(|name| {
        ty.getattr(name)
            .map(|v| v.is_exact_instance_of::<pyo3::types::PyInt>())
            .unwrap_or(false)
    })
}

/// The field names of a namedtuple or struct sequence type, one per child; `None` for the
/// unnamed fields a struct sequence may have (`os.stat_result` has three).
pub fn field_names(ty: &Bound<'_, PyAny>, kind: Kind) -> PyResult<Vec<Option<String>>> {
    let py = ty.py();
    if kind == Kind::NamedTuple {
        return ty
            .getattr(intern!(py, "_fields"))?
            .try_iter()?
            .map(|f| Ok(Some(f?.extract::<String>()?)))
            .collect();
    }
    // Struct sequences expose only their named fields (`__match_args__`); find each one's
    // position by building an instance whose items are their own indices. Some cannot be
    // built (`sys.flags`): then the named fields are taken to come first, as they do in every
    // struct sequence of the standard library.
    let n: usize = ty.getattr(intern!(py, "n_sequence_fields"))?.extract()?;
    let named: Vec<String> = match ty.getattr(intern!(py, "__match_args__")) {
        Ok(m) => m.extract()?,
        Err(_) => Vec::new(),
    };
    let mut names = vec![None; n];
    match ty.call1((pyo3::types::PyTuple::new(py, 0..n)?,)) {
        Ok(probe) => {
            for name in named {
                if let Ok(i) = probe.getattr(name.as_str())?.extract::<usize>() {
                    if i < n {
                        names[i] = Some(name);
                    }
                }
            }
        }
        Err(_) => {
            for (slot, name) in names.iter_mut().zip(named) {
                *slot = Some(name);
            }
        }
    }
    Ok(names)
}

/// Each struct sequence type seen (held, so its address is not reused) -> its field names.
type StructSeqNames = PtrMap<(Py<PyAny>, std::sync::Arc<Vec<Option<Py<PyString>>>>)>;
static STRUCTSEQ_NAMES: Mutex<Option<StructSeqNames>> = Mutex::new(None);
const STRUCTSEQ_NAMES_MAX: usize = 256;

/// The name of field `j` of a namedtuple or struct sequence type (`None` for an unnamed or
/// missing one), without building the whole list: a namedtuple's `_fields` item as it is, a
/// struct sequence's names from a per-type cache (finding them builds a probe instance).
pub fn field_name_at<'py>(
    ty: &Bound<'py, PyAny>,
    kind: Kind,
    j: usize,
) -> PyResult<Option<Bound<'py, PyString>>> {
    let py = ty.py();
    if kind == Kind::NamedTuple {
        let fields = ty.getattr(intern!(py, "_fields"))?;
        if let Ok(fields) = fields.cast::<PyTuple>() {
            if j >= fields.len() {
                return Ok(None);
            }
            let name = fields.get_item(j)?;
            if let Ok(name) = name.cast_into::<PyString>() {
                return Ok(Some(name));
            }
        }
        // Not a tuple of str: the general path raises the right error.
        let names = field_names(ty, kind)?;
        return Ok(names
            .into_iter()
            .nth(j)
            .flatten()
            .map(|n| PyString::new(py, &n)));
    }
    let addr = ty.as_ptr() as usize;
    let cached = STRUCTSEQ_NAMES
        .lock()
        .expect("never poisoned")
        .as_ref()
        .and_then(|m| m.get(&addr).map(|(_, names)| names.clone()));
    let names = match cached {
        Some(names) => names,
        None => {
            let names: Vec<Option<Py<PyString>>> = field_names(ty, kind)?
                .into_iter()
                .map(|n| n.map(|n| PyString::intern(py, &n).unbind()))
                .collect();
            let names = std::sync::Arc::new(names);
            let mut guard = STRUCTSEQ_NAMES.lock().expect("never poisoned");
            let map = guard.get_or_insert_with(PtrMap::default);
            if map.len() >= STRUCTSEQ_NAMES_MAX {
                map.clear();
            }
            map.insert(addr, (ty.clone().unbind(), names.clone()));
            names
        }
    };
    Ok(names
        .get(j)
        .and_then(|n| n.as_ref())
        .map(|n| n.bind(py).clone()))
}

/// `module.qualname` of a type, as used to order dict keys of different types.
pub fn qualified_name(ty: &Bound<'_, PyType>) -> PyResult<String> {
    // Any object may stand in `__module__`; use its str, as an f-string would.
    let module = ty.getattr(intern!(ty.py(), "__module__"))?.str()?;
    Ok(format!("{}.{}", module, ty.qualname()?))
}
