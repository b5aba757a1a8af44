//! JAX's own registry, for the walks that follow it: the JAX face, `oxtree.jax`, and the main
//! face when `use_jax_registry` turns it on. A type oxtree does not register but JAX does
//! (an equinox module, a `flax.struct` dataclass, `jax.tree_util.Partial`, any class passed
//! to `jax.tree_util.register_*`) is a registered node with JAX's rule.
//!
//! The core never imports JAX: JAX is there when `jax._src.tree_util` is in `sys.modules`.
//! Each type is asked about once, through the plug-in `oxtree._jax_registry.describe` (Python,
//! because reading JAX's registry means JAX's Python objects), and the answer is kept:
//! - a JAX node: a `Registration` with JAX's rule, made once per process and kept for the life
//!   of the process, as JAX keeps its own (JAX has no way to unregister a type). It holds its
//!   type, so the type's address can never be reused.
//! - not a JAX node: a per-thread entry by type address, valid while the type keeps its
//!   version tag (a freed class's address reused by a new one misses) and JAX's registry its
//!   size. Every registration through JAX's API adds one entry to the dict
//!   `jax._src.tree_util._registry` and none is ever removed, so a size that changed means a
//!   type may have been registered since: the entry is stale and the type is asked about
//!   again. A leaf type costs a hash lookup per walk, never a Python call.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyString, PyTuple, PyType};

use crate::errors::TreeError;
use crate::plugins::Plugin;
use crate::registry::{Registration, Rule};
use crate::types::{self, PtrMap};

/// Whether the main face reads JAX's registry too (`use_jax_registry`).
static MAIN_FACE: AtomicBool = AtomicBool::new(false);

/// Whether walks of the main face read JAX's registry.
#[inline]
pub fn main_face_reads() -> bool {
    MAIN_FACE.load(Ordering::Relaxed)
}

/// Sets whether the main face reads JAX's registry; returns the setting it replaces.
#[pyfunction]
#[pyo3(signature = (mode, /))]
pub fn _use_jax_registry(mode: bool) -> bool {
    MAIN_FACE.swap(mode, Ordering::Relaxed)
}

/// JAX's registrations as oxtree registrations, by type address: one per type per process.
static ADOPTED: Mutex<Option<PtrMap<&'static Arc<Registration>>>> = Mutex::new(None);

/// `jax._src.tree_util._registry`, once JAX has been imported (it lives as long as JAX).
static JAX_TABLE: OnceLock<Py<PyDict>> = OnceLock::new();

/// `sys.modules`.
static SYS_MODULES: PyOnceLock<Py<PyDict>> = PyOnceLock::new();

/// What this thread knows of a type.
#[derive(Clone, Copy)]
enum Seen {
    Node(&'static Arc<Registration>),
    /// Not a JAX node when its version tag was `tag` and JAX's registry had `size` entries
    /// (0: JAX was not imported).
    Leaf {
        tag: u32,
        size: usize,
    },
}

/// How many types a thread remembers before it starts over.
const SEEN_LIMIT: usize = 4096;

thread_local! {
    static SEEN: RefCell<PtrMap<Seen>> = RefCell::new(PtrMap::default());
}

/// The number of entries in JAX's registry: 0 while JAX is not imported (once it is, the
/// registry holds at least the builtin containers).
#[inline]
pub fn size(py: Python<'_>) -> usize {
    match JAX_TABLE.get() {
        Some(table) => table.bind(py).len(),
        None => find_table(py),
    }
}

#[cold]
fn find_table(py: Python<'_>) -> usize {
    let Ok(modules) = SYS_MODULES.get_or_try_init(py, || -> PyResult<Py<PyDict>> {
        Ok(py
            .import("sys")?
            .getattr("modules")?
            .cast_into::<PyDict>()?
            .unbind())
    }) else {
        return 0;
    };
    // A str key in a dict: no Python code runs.
    let Ok(Some(module)) = modules.bind(py).get_item(intern!(py, "jax._src.tree_util")) else {
        return 0;
    };
    // Half imported (JAX is importing it now): not there yet.
    let Ok(table) = module
        .getattr(intern!(py, "_registry"))
        .and_then(|t| Ok(t.cast_into::<PyDict>()?))
    else {
        return 0;
    };
    let n = table.len();
    let _ = JAX_TABLE.set(table.unbind());
    n
}

/// Whether objects of type `ty` (flags `flags`, version tag `tag`) are known, without running
/// Python code, not to be JAX nodes: JAX's registry has `size` entries now (`size(py)`).
#[inline]
pub fn known_leaf(
    ty: *mut pyo3::ffi::PyTypeObject,
    flags: std::os::raw::c_ulong,
    tag: u32,
    size: usize,
) -> bool {
    let Some(tag) = types::valid_tag(flags, tag) else {
        return false;
    };
    SEEN.with(|seen| {
        matches!(
            seen.borrow().get(&(ty as usize)),
            Some(Seen::Leaf { tag: t, size: s }) if *t == tag && *s == size
        )
    })
}

/// JAX's registry as one walk sees it: its size, read when first needed (while JAX is not
/// imported, reading it is a `sys.modules` lookup), and the last type found not to be a JAX
/// node (held, so its address cannot be reused during the walk): nodes of one type come in
/// runs (a list of namedtuples), and each then skips the per-thread lookup.
#[derive(Default)]
pub struct Sighting {
    size: Cell<Option<usize>>,
    not_node: RefCell<Option<Py<PyType>>>,
}

impl Sighting {
    #[inline]
    pub fn size(&self, py: Python<'_>) -> usize {
        match self.size.get() {
            Some(n) => n,
            None => {
                let n = size(py);
                self.size.set(Some(n));
                n
            }
        }
    }

    #[inline]
    fn known_not_node(&self, ty: &Bound<'_, PyType>) -> bool {
        self.not_node
            .borrow()
            .as_ref()
            .is_some_and(|t| t.as_ptr() == ty.as_ptr())
    }

    #[inline]
    fn remember_not_node(&self, ty: &Bound<'_, PyType>) {
        if let Ok(mut slot) = self.not_node.try_borrow_mut() {
            *slot = Some(ty.clone().unbind());
        }
    }
}

/// JAX's registration of `ty` as an oxtree registration, or None when JAX does not make its
/// instances custom nodes (or JAX is not imported), for a walk that saw JAX's registry as
/// `seen_by`.
#[inline]
pub fn node<'s>(
    ty: &Bound<'_, PyType>,
    seen_by: &Sighting,
) -> PyResult<Option<&'s Arc<Registration>>> {
    let py = ty.py();
    if seen_by.known_not_node(ty) {
        return Ok(None);
    }
    let seen = SEEN.with(|seen| seen.borrow().get(&(ty.as_ptr() as usize)).copied());
    let found = match seen {
        Some(Seen::Node(reg)) => return Ok(Some(reg)),
        Some(Seen::Leaf { tag, size: s })
            if types::type_version_tag(ty) == Some(tag) && seen_by.size(py) == s =>
        {
            None
        }
        _ => ask(ty)?,
    };
    if found.is_none() {
        seen_by.remember_not_node(ty);
    }
    Ok(found)
}

/// Remembers what this thread learnt about `ty`.
fn remember(ty: &Bound<'_, PyType>, seen: Seen) {
    SEEN.with(|cell| {
        let mut map = cell.borrow_mut();
        if map.len() >= SEEN_LIMIT {
            map.clear();
        }
        map.insert(ty.as_ptr() as usize, seen);
    });
}

#[cold]
#[inline(never)]
fn ask(ty: &Bound<'_, PyType>) -> PyResult<Option<&'static Arc<Registration>>> {
    let py = ty.py();
    let key = ty.as_ptr() as usize;
    let before = size(py);
    if before != 0 {
        let known = ADOPTED
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .and_then(|m| m.get(&key).copied());
        if let Some(reg) = known {
            remember(ty, Seen::Node(reg));
            return Ok(Some(reg));
        }
    }
    // A lookup of a name the class lacks goes through CPython's method cache, which gives
    // the class a version tag if it can have one: then the answer can be remembered.
    let _ = ty.hasattr(intern!(py, "__oxtree_jax_probe__"));
    let described = if before == 0 {
        None
    } else {
        let out = Plugin::JaxDescribe.get(py)?.call1((ty,))?;
        (!out.is_none()).then_some(out)
    };
    let Some(described) = described else {
        if let Some(tag) = types::type_version_tag(ty) {
            remember(ty, Seen::Leaf { tag, size: before });
        }
        return Ok(None);
    };
    let made = registration(ty, &described)?;
    let reg = {
        let mut guard = ADOPTED.lock().unwrap_or_else(|e| e.into_inner());
        let map = guard.get_or_insert_with(PtrMap::default);
        match map.get(&key) {
            // Another thread made it meanwhile: one registration per type.
            Some(reg) => *reg,
            None => {
                // Kept for the life of the process, as JAX keeps its registrations: a
                // treespec's nodes may point at it from any thread, at any time.
                let reg: &'static Arc<Registration> = Box::leak(Box::new(Arc::new(made)));
                map.insert(key, reg);
                reg
            }
        }
    };
    remember(ty, Seen::Node(reg));
    Ok(Some(reg))
}

/// The registration `describe` gave for `ty`: `("dataclass", data_fields, meta_fields, keys)`
/// or `("custom", flatten, unflatten, flatten_with_keys)`.
fn registration(ty: &Bound<'_, PyType>, described: &Bound<'_, PyAny>) -> PyResult<Registration> {
    let py = ty.py();
    let bad = || -> PyErr {
        TreeError::JaxDescription {
            ty: ty.name().map(|n| n.to_string()).unwrap_or_default(),
            described: described.repr().map(|r| r.to_string()).unwrap_or_default(),
        }
        .into()
    };
    let parts = described.cast::<PyTuple>().map_err(|_| bad())?;
    if parts.len() != 4 {
        return Err(bad());
    }
    let what: String = parts.get_item(0)?.extract().map_err(|_| bad())?;
    let rule = match what.as_str() {
        "dataclass" => {
            let names = |i: usize| -> PyResult<Vec<Py<PyString>>> {
                parts
                    .get_item(i)?
                    .try_iter()?
                    .map(|n| {
                        let n = n?;
                        let s = n.cast::<PyString>().map_err(|_| bad())?;
                        Ok(PyString::intern(py, &s.to_string_lossy()).unbind())
                    })
                    .collect()
            };
            let (data, meta) = (names(1)?, names(2)?);
            let keys: Box<[Py<PyAny>]> = parts
                .get_item(3)?
                .try_iter()?
                .map(|k| Ok(k?.unbind()))
                .collect::<PyResult<_>>()?;
            if keys.len() != data.len() {
                return Err(bad());
            }
            let kwnames = PyTuple::new(py, data.iter().chain(&meta).collect::<Vec<_>>())?.unbind();
            Rule::Dataclass {
                reads: Rule::field_reads(&data, &meta),
                data,
                meta,
                call_init: true,
                kwnames,
                keys: Some(keys),
            }
        }
        "custom" => {
            let f = |i: usize| -> PyResult<Py<PyAny>> {
                let f = parts.get_item(i)?;
                if f.is_callable() {
                    Ok(f.unbind())
                } else {
                    Err(bad())
                }
            };
            Rule::Custom {
                flatten: f(1)?,
                unflatten: f(2)?,
                flatten_with_keys: Some(f(3)?),
            }
        }
        _ => return Err(bad()),
    };
    Ok(Registration::outside(ty.clone().unbind(), rule))
}

/// The registration JAX gives `ty`, for rebuilding a treespec that names it (a pickle, a
/// node made from its data): what a walk reading JAX's registry would have found.
pub fn lookup_for_load(ty: &Bound<'_, PyType>) -> PyResult<Option<Arc<Registration>>> {
    Ok(node(ty, &Sighting::default())?.cloned())
}
