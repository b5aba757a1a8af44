//! Cached type pointers and the classification of tuple subclasses.

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Arc, Mutex};

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

/// The `collections` types when an earlier call imported them (no import, no Python code).
pub fn collections_if_ready(py: Python<'_>) -> Option<&'static Collections> {
    COLLECTIONS.get(py)
}

/// How many tuple subclasses the classification cache holds before it starts over.
const TUPLE_CACHE_LIMIT: usize = 1024;

/// Facts about types, keyed by type address and checked against the type's version tag.
///
/// No reference to the type is kept, so caching never keeps a class alive. An entry counts
/// only while the type at that address still carries the same valid version tag: CPython
/// gives every type a fresh tag from a global counter and drops it when the type is modified,
/// so a class freed and replaced by another at the same address, or a class whose attributes
/// changed, misses the cache and is looked at again. A type without a tag is never cached.
struct TypeCache<V> {
    map: Mutex<Option<PtrMap<(u32, V)>>>,
    limit: usize,
}

impl<V: Clone> TypeCache<V> {
    const fn new(limit: usize) -> Self {
        TypeCache {
            map: Mutex::new(None),
            limit,
        }
    }

    fn get(&self, ty: &Bound<'_, PyAny>) -> Option<V> {
        let tag = version_tag(ty)?;
        let guard = self.map.lock().ok()?;
        let (cached, value) = guard.as_ref()?.get(&(ty.as_ptr() as usize))?;
        (*cached == tag).then(|| value.clone())
    }

    /// Records `value` for `ty`. Call it after the lookups that computed `value`: they give
    /// the type a version tag if it can have one.
    fn insert(&self, ty: &Bound<'_, PyAny>, value: V) {
        if let (Some(tag), Ok(mut guard)) = (version_tag(ty), self.map.lock()) {
            let map = guard.get_or_insert_with(PtrMap::default);
            if map.len() >= self.limit {
                map.clear();
            }
            map.insert(ty.as_ptr() as usize, (tag, value));
        }
    }
}

/// Whether `ty` is exactly one of the builtin scalar types, which are leaves unless a
/// namespace registers them: int, float, str, bool, bytes, complex.
#[inline(always)]
pub fn is_scalar_type(ty: *mut ffi::PyTypeObject) -> bool {
    ty == std::ptr::addr_of_mut!(ffi::PyLong_Type)
        || ty == std::ptr::addr_of_mut!(ffi::PyFloat_Type)
        || ty == std::ptr::addr_of_mut!(ffi::PyUnicode_Type)
        || ty == std::ptr::addr_of_mut!(ffi::PyBool_Type)
        || ty == std::ptr::addr_of_mut!(ffi::PyBytes_Type)
        || ty == std::ptr::addr_of_mut!(ffi::PyComplex_Type)
}

/// Tuple subclasses already classified.
static TUPLE_KINDS: TypeCache<Kind> = TypeCache::new(TUPLE_CACHE_LIMIT);

fn version_tag(ty: &Bound<'_, PyAny>) -> Option<u32> {
    type_version_tag(ty.cast::<PyType>().ok()?)
}

pub use crate::ffi::{type_version_tag, valid_version_tag as valid_tag};

/// Classifies a strict subclass of tuple: a namedtuple, a struct sequence, or a leaf.
#[cold]
pub fn tuple_subclass_kind(ty: &Bound<'_, PyType>) -> Kind {
    if let Some(kind) = TUPLE_KINDS.get(ty.as_any()) {
        return kind;
    }
    let kind = if is_structseq_class(ty) {
        Kind::StructSeq
    } else if is_namedtuple_class(ty) {
        Kind::NamedTuple
    } else {
        Kind::Leaf
    };
    TUPLE_KINDS.insert(ty.as_any(), kind);
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

/// What makes rebuilding a namedtuple class by filling a new tuple what calling it does:
/// the class's `__new__` function, the code object and globals it had when it was checked
/// (with the globals' version tag, when it can be read) and `tuple.__new__`. It holds the
/// objects, so the addresses it compares stay theirs while it lives.
pub struct PlainNew {
    arity: usize,
    func: Py<pyo3::types::PyFunction>,
    code: Py<PyAny>,
    globals: Py<pyo3::types::PyDict>,
    globals_version: Option<u64>,
    tuple_new: Py<PyAny>,
}

impl PlainNew {
    /// A second proof holding the same objects (for a thread's slot: its checks then read
    /// the slot itself, not a shared allocation behind it).
    fn clone_ref(&self, py: Python<'_>) -> PlainNew {
        PlainNew {
            arity: self.arity,
            func: self.func.clone_ref(py),
            code: self.code.clone_ref(py),
            globals: self.globals.clone_ref(py),
            globals_version: self.globals_version,
            tuple_new: self.tuple_new.clone_ref(py),
        }
    }

    /// Whether `ty` (the class this was made for, with the same version tag) still builds
    /// instances the checked way. The version tag covers the class's own attributes
    /// (`__new__`, `__init__`, slots); this covers what can change without touching the class:
    /// its metaclass, the `__code__` of its `__new__`, and the globals that code reads
    /// (`_tuple_new`). Pointer and integer compares (a dict lookup where the dict's version
    /// tag cannot be read).
    #[inline]
    fn holds(&self, ty: &Bound<'_, PyAny>) -> bool {
        let py = ty.py();
        crate::ffi::metatype_is_type(ty)
            && crate::ffi::function_code_addr(self.func.bind(py)) == self.code.as_ptr() as usize
            && match self.globals_version {
                // `globals_version` is Some only where `dict_version` read it.
                Some(v) => crate::ffi::dict_version(self.globals.bind(py)) == Some(v),
                None => {
                    crate::ffi::dict_get_str_addr(self.globals.bind(py), intern!(py, "_tuple_new"))
                        == self.tuple_new.as_ptr() as usize
                }
            }
    }
}

/// Namedtuple classes checked by `plain_namedtuple_arity`: the proof, or None.
static PLAIN_NAMEDTUPLES: TypeCache<Option<Arc<PlainNew>>> = TypeCache::new(TUPLE_CACHE_LIMIT);

/// The number of fields of `ty` when calling it with that many positional arguments is
/// exactly `tuple.__new__(ty, args)`: a tuple subclass whose metaclass is `type`, whose
/// `__init__` is object's, and whose `__new__` is the one `collections.namedtuple` generates
/// (a function of `_cls` and one argument per field, whose body refers to no global but
/// `_tuple_new`, which is `tuple.__new__`). None otherwise. The finding is cached under the
/// type's version tag, which any change of the class's attributes renews, and checked again
/// on every call against what can change without one (`PlainNew::holds`).
pub fn plain_namedtuple_arity(cls: &Bound<'_, PyType>) -> Option<usize> {
    let ty = cls.as_any();
    // In front of the shared cache (a lock and a hash lookup: an eighth of a namedtuple-heavy
    // unflatten), each thread remembers a few types by address, checked with the version tag.
    let tag = type_version_tag(cls);
    let slot = (ty.as_ptr() as usize >> 4) % RECENT_NAMEDTUPLES;
    if let Some(tag) = tag {
        let hit = RECENT.with(|r| {
            // `holds` runs no Python code: nothing borrows the slot meanwhile.
            let seen = r[slot].borrow();
            if seen.addr != ty.as_ptr() as usize || seen.tag != tag {
                return None;
            }
            match &seen.check {
                None => Some(None),
                Some(check) if check.holds(ty) => Some(Some(check.arity)),
                Some(_) => None,
            }
        });
        if let Some(arity) = hit {
            return arity;
        }
    }
    let proof = match PLAIN_NAMEDTUPLES.get(ty) {
        Some(Some(proof)) if proof.holds(ty) => Some(proof),
        Some(None) => None,
        // Not seen, or its `__new__` changed in place: look again.
        _ => {
            let proof = find_plain_namedtuple_arity(ty)
                .unwrap_or(None)
                .map(Arc::new);
            PLAIN_NAMEDTUPLES.insert(ty, proof.clone());
            proof
        }
    };
    let arity = proof.as_ref().map(|p| p.arity);
    // The lookups may have given the type its tag. The slot is keyed as the shared cache is
    // (address and version tag) and holds its own references to the proof's objects, so it
    // needs no word from the shared cache (which may drop the proof later) to stay valid.
    if let Some(tag) = type_version_tag(cls) {
        let recent = Recent {
            addr: ty.as_ptr() as usize,
            tag,
            check: proof.as_ref().map(|p| p.clone_ref(ty.py())),
        };
        // The slot's old proof is released after the slot is written (its objects' release
        // may run Python code, which may look here again).
        let old = RECENT.with(|r| r[slot].replace(recent));
        drop(old);
    }
    arity
}

/// How many namedtuple types each thread remembers in front of `PLAIN_NAMEDTUPLES`.
const RECENT_NAMEDTUPLES: usize = 16;

struct Recent {
    addr: usize,
    tag: u32,
    /// The proof itself (its own references), not an `Arc` of the shared cache's: one
    /// pointer hop less per namedtuple, and no need to know whether the shared cache still
    /// holds it.
    check: Option<PlainNew>,
}

const NO_RECENT: Recent = Recent {
    addr: 0,
    tag: 0,
    check: None,
};

thread_local! {
    /// Namedtuple types looked at lately, by address.
    static RECENT: [RefCell<Recent>; RECENT_NAMEDTUPLES] =
        const { [const { RefCell::new(NO_RECENT) }; RECENT_NAMEDTUPLES] };
}

#[cold]
fn find_plain_namedtuple_arity(ty: &Bound<'_, PyAny>) -> PyResult<Option<PlainNew>> {
    let py = ty.py();
    let Ok(cls) = ty.cast::<PyType>() else {
        return Ok(None);
    };
    let plain_type = crate::ffi::metatype_is_type(cls)
        && crate::ffi::type_flags(cls) & ffi::Py_TPFLAGS_TUPLE_SUBCLASS != 0
        && crate::ffi::init_is_object_init(cls);
    if !plain_type {
        return Ok(None);
    }
    let fields = cls.getattr(intern!(py, "_fields"))?;
    let Ok(fields) = fields.cast::<PyTuple>() else {
        return Ok(None);
    };
    let new = cls.getattr(intern!(py, "__new__"))?;
    if !new.is_instance_of::<pyo3::types::PyFunction>() {
        return Ok(None);
    }
    let tuple_new = py.get_type::<PyTuple>().getattr(intern!(py, "__new__"))?;
    let globals = new.getattr(intern!(py, "__globals__"))?;
    let Ok(globals) = globals.cast::<pyo3::types::PyDict>() else {
        return Ok(None);
    };
    match globals.get_item(intern!(py, "_tuple_new"))? {
        Some(f) if f.is(&tuple_new) => {}
        _ => return Ok(None),
    }
    let globals_version = crate::ffi::dict_version(globals);
    let globals = globals.clone().unbind();
    let code = new.getattr(intern!(py, "__code__"))?;
    let names = code.getattr(intern!(py, "co_names"))?;
    let only_tuple_new = names.cast::<PyTuple>().is_ok_and(|n| {
        n.len() == 1
            && n.get_item(0)
                .is_ok_and(|g| g.eq("_tuple_new").unwrap_or(false))
    });
    let argcount: usize = code.getattr(intern!(py, "co_argcount"))?.extract()?;
    let kwonly: usize = code.getattr(intern!(py, "co_kwonlyargcount"))?.extract()?;
    let flags: u32 = code.getattr(intern!(py, "co_flags"))?.extract()?;
    // CO_VARARGS | CO_VARKEYWORDS
    let star_args = flags & (0x04 | 0x08) != 0;
    if !only_tuple_new || argcount != fields.len() + 1 || kwonly != 0 || star_args {
        return Ok(None);
    }
    // The body must be the generated one, byte for byte: a `__code__` swapped in place for
    // another function of the same signature and names (`_tuple_new(_cls, (x * 10, y))`)
    // passes every check above.
    let reference = generated_new_code(py, fields.len())?;
    for attr in [intern!(py, "co_code"), intern!(py, "co_consts")] {
        if !code.getattr(attr)?.eq(reference.getattr(attr)?)? {
            return Ok(None);
        }
    }
    let Ok(func) = new.cast_into::<pyo3::types::PyFunction>() else {
        return Ok(None);
    };
    Ok(Some(PlainNew {
        arity: fields.len(),
        func: func.unbind(),
        code: code.unbind(),
        globals,
        globals_version,
        tuple_new: tuple_new.unbind(),
    }))
}

/// The code of the `__new__` that `collections.namedtuple` generates for `n` fields (made once
/// per `n`, from a namedtuple class of that many fields).
#[cold]
fn generated_new_code(py: Python<'_>, n: usize) -> PyResult<Bound<'_, PyAny>> {
    static MADE: Mutex<Vec<(usize, Py<PyAny>)>> = Mutex::new(Vec::new());
    if let Some((_, code)) = MADE.lock().ok().and_then(|m| {
        m.iter()
            .find(|(k, _)| *k == n)
            .map(|(k, c)| (*k, c.clone_ref(py)))
    }) {
        return Ok(code.into_bound(py));
    }
    let names: Vec<String> = (0..n).map(|i| format!("f{i}")).collect();
    let cls = py
        .import(intern!(py, "collections"))?
        .getattr(intern!(py, "namedtuple"))?
        .call1(("Reference", names))?;
    let code = cls
        .getattr(intern!(py, "__new__"))?
        .getattr(intern!(py, "__code__"))?;
    if let Ok(mut made) = MADE.lock() {
        if made.len() < 64 {
            made.push((n, code.clone().unbind()));
        }
    }
    Ok(code)
}

/// A struct sequence class (`time.struct_time`, `os.stat_result`): a final tuple subclass
/// with the integer attributes `n_fields`, `n_sequence_fields` and `n_unnamed_fields`.
pub fn is_structseq_class(ty: &Bound<'_, PyType>) -> bool {
    let py = ty.py();
    let flags = crate::ffi::type_flags(ty);
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

/// Struct sequence types' field names (interned), as `field_names` finds them.
type FieldNames = std::sync::Arc<Vec<Option<Py<PyString>>>>;
static STRUCTSEQ_NAMES: TypeCache<FieldNames> = TypeCache::new(256);

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
    let names = match STRUCTSEQ_NAMES.get(ty) {
        Some(names) => names,
        None => {
            let names: FieldNames = std::sync::Arc::new(
                field_names(ty, kind)?
                    .into_iter()
                    .map(|n| n.map(|n| PyString::intern(py, &n).unbind()))
                    .collect(),
            );
            STRUCTSEQ_NAMES.insert(ty, names.clone());
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

/// The node kind the walk gives instances of `cls` when no registration applies to it:
/// `NAMEDTUPLE` or `STRUCTSEQUENCE` for such a tuple subclass, else `LEAF`. (What
/// `oxtree.types.is_namedtuple_class` and its relatives ask.)
#[pyo3::pyfunction]
pub fn _tuple_kind<'py>(cls: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let kind = match cls.cast::<PyType>() {
        Ok(ty) if ty.is_subclass_of::<PyTuple>()? && !ty.is(cls.py().get_type::<PyTuple>()) => {
            tuple_subclass_kind(ty)
        }
        _ => Kind::Leaf,
    };
    kind.to_py(cls.py())
}

/// The field names of a namedtuple or struct sequence class, as the walk names them: a
/// struct sequence's unnamed fields are left out, or with `unnamed=True` kept as None (one
/// item per child, as key paths and accessors need them).
#[pyo3::pyfunction]
#[pyo3(signature = (cls, /, *, unnamed = false))]
pub fn _tuple_fields<'py>(
    cls: &Bound<'py, PyType>,
    unnamed: bool,
) -> PyResult<Vec<Option<String>>> {
    let kind = tuple_subclass_kind(cls);
    if kind == Kind::Leaf {
        return Err(crate::errors::TreeError::NotTupleClass {
            got: cls.repr()?.to_string(),
        }
        .into());
    }
    let names = field_names(cls.as_any(), kind)?;
    Ok(if unnamed {
        names
    } else {
        names.into_iter().filter(Option::is_some).collect()
    })
}
