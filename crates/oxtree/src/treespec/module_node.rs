//! `oxtree.Module` nodes: their aux data (`_ModuleDef`) and their walk.
//!
//! Every Module class is registered with the same flatten function, this file's
//! `_module_flatten`, and a registration whose flatten is that function is walked here, as a
//! dataclass is: the aux data is the module's `_oxtree_def` slot (a `ModuleDef`), the children
//! are `__dict__[name]` for each of its `names`, the keys its `keys`. Rebuilding makes the
//! object with `object.__new__`, sets the slot and fills `__dict__` with the configuration
//! (`others`) then the children. A module whose configuration changed since it was last read
//! (`others` is None) has it read again here; only the configuration's hashable stand-in is
//! made in Python, by `oxtree.module._ModuleDef` (a subclass of `ModuleDef`), which knows what
//! configuration may hold.

use std::sync::OnceLock;

use pyo3::gc::PyVisit;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::pyclass::CompareOp;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList, PyTuple, PyType};
use pyo3::PyTraverseError;

use crate::errors::{short_repr, TreeError};
use crate::registry::{Children, Flattened};

/// A module's aux data: its layout (the tree attributes' names, kinds and keys, in
/// registration order) and its configuration, the `OTHERS` attributes sorted by name (None
/// while it must be read again from the module), with `key`, the configuration's hashable
/// stand-in that equality and the hash read. Immutable; shared by a module and its copies.
#[pyclass(frozen, subclass, module = "oxtree", name = "_ModuleDef")]
pub struct ModuleDef {
    /// The module's `_Layout`.
    #[pyo3(get)]
    layout: Py<PyAny>,
    /// The tree attributes' names.
    #[pyo3(get)]
    names: Py<PyTuple>,
    /// Their kinds (`Kind`s).
    #[pyo3(get)]
    kinds: Py<PyTuple>,
    /// Their keys (`GetAttrKey`s).
    #[pyo3(get)]
    keys: Py<PyTuple>,
    /// The configuration, or None when it must be read again.
    #[pyo3(get)]
    others: Option<Py<PyDict>>,
    /// The configuration's hashable stand-in (None with `others`).
    #[pyo3(get, name = "_key")]
    key: Py<PyAny>,
    hash: OnceLock<isize>,
}

#[pymethods]
impl ModuleDef {
    #[new]
    fn new(
        layout: Bound<'_, PyAny>,
        names: Bound<'_, PyTuple>,
        kinds: Bound<'_, PyTuple>,
        keys: Bound<'_, PyTuple>,
        others: Option<Bound<'_, PyDict>>,
        key: Bound<'_, PyAny>,
    ) -> PyResult<ModuleDef> {
        if kinds.len() != names.len() || keys.len() != names.len() {
            return Err(TreeError::ModuleDefCounts {
                names: names.len(),
                kinds: kinds.len(),
                keys: keys.len(),
            }
            .into());
        }
        Ok(ModuleDef {
            layout: layout.unbind(),
            names: names.unbind(),
            kinds: kinds.unbind(),
            keys: keys.unbind(),
            others: others.map(Bound::unbind),
            key: key.unbind(),
            hash: OnceLock::new(),
        })
    }

    fn __richcmp__(
        slf: &Bound<'_, Self>,
        other: &Bound<'_, PyAny>,
        op: CompareOp,
    ) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let equal = match op {
            CompareOp::Eq | CompareOp::Ne => {
                slf.is(other) || {
                    match other.cast::<ModuleDef>() {
                        Ok(other) => {
                            let (a, b) = (slf.get(), other.get());
                            a.layout.bind(py).eq(b.layout.bind(py))?
                                && a.key.bind(py).eq(b.key.bind(py))?
                        }
                        Err(_) => false,
                    }
                }
            }
            _ => return Ok(py.NotImplemented()),
        };
        Ok((equal == matches!(op, CompareOp::Eq))
            .into_pyobject(py)?
            .to_owned()
            .into_any()
            .unbind())
    }

    fn __hash__(&self, py: Python<'_>) -> PyResult<isize> {
        if let Some(h) = self.hash.get() {
            return Ok(*h);
        }
        let h = PyTuple::new(py, [self.layout.bind(py), self.key.bind(py)])?.hash()?;
        Ok(*self.hash.get_or_init(|| h))
    }

    /// `(type, (layout, others))`: the class (`oxtree.module._ModuleDef`) makes the key again.
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyTuple>> {
        let py = slf.py();
        let d = slf.get();
        let others = match &d.others {
            Some(o) => o.bind(py).clone().into_any(),
            None => py.None().into_bound(py),
        };
        let args = PyTuple::new(py, [d.layout.bind(py).clone(), others])?;
        PyTuple::new(py, [slf.get_type().into_any(), args.into_any()])
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        // No `__clear__`: immutable, and made after all it holds; a cycle through it passes
        // through its configuration dict or the module, which can be cleared.
        visit.call(&self.layout)?;
        visit.call(&self.names)?;
        visit.call(&self.kinds)?;
        visit.call(&self.keys)?;
        visit.call(&self.others)?;
        visit.call(&self.key)
    }
}

/// `_module_flatten`, the flatten function every Module class is registered with, kept when
/// `oxtree._core` is initialised (`lib.rs`): a registration whose flatten is this object is
/// a Module class.
pub static FLATTEN: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// `object.__new__`.
static NEW: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// Whether a registration's flatten function is the Module one.
#[inline]
pub fn is_module(py: Python<'_>, flatten: &Py<PyAny>) -> bool {
    FLATTEN
        .get(py)
        .is_some_and(|f| f.as_ptr() == flatten.as_ptr())
}

/// The children, aux data and keys of a Module.
pub fn flatten<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Flattened<'py>> {
    let (children, aux, keys) = parts(obj)?;
    Ok((Children::Vec(children), aux.into_any(), Some(keys)))
}

type Parts<'py> = (
    Vec<Bound<'py, PyAny>>,
    Bound<'py, ModuleDef>,
    Bound<'py, PyTuple>,
);

fn parts<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Parts<'py>> {
    let py = obj.py();
    let aux = obj.getattr(intern!(py, "_oxtree_def"))?;
    let mut aux = module_def(&aux, "_oxtree_def")?.clone();
    let dict = obj
        .getattr(intern!(py, "__dict__"))?
        .cast_into::<PyDict>()?;
    if aux.get().others.is_none() {
        aux = refresh(obj, &dict, &aux)?;
    }
    let def = aux.get();
    let names = def.names.bind(py);
    let mut values = Vec::with_capacity(names.len());
    for (i, name) in names.iter().enumerate() {
        match dict.get_item(&name)? {
            Some(value) => values.push(value),
            None => return Err(unassigned(obj, def, i)),
        }
    }
    let keys = def.keys.bind(py).clone();
    Ok((values, aux, keys))
}

/// `aux` as a `ModuleDef`; `what` names it in the TypeError.
fn module_def<'a, 'py>(
    aux: &'a Bound<'py, PyAny>,
    what: &'static str,
) -> PyResult<&'a Bound<'py, ModuleDef>> {
    aux.cast::<ModuleDef>().map_err(|_| {
        TreeError::NotModuleDef {
            what,
            got: short_repr(aux, 80),
        }
        .into()
    })
}

/// Reads a module's configuration again (it changed since it was last read): its attributes
/// other than the tree ones, sorted by name, in new aux data of the same class, set in its
/// slot.
#[cold]
fn refresh<'py>(
    obj: &Bound<'py, PyAny>,
    dict: &Bound<'py, PyDict>,
    aux: &Bound<'py, ModuleDef>,
) -> PyResult<Bound<'py, ModuleDef>> {
    let py = obj.py();
    let def = aux.get();
    let names = def.names.bind(py);
    let config = PyList::empty(py);
    for (name, _) in dict.iter() {
        if !names.contains(&name)? {
            config.append(name)?;
        }
    }
    config.sort()?;
    let others = PyDict::new(py);
    for name in config.iter() {
        if let Some(value) = dict.get_item(&name)? {
            others.set_item(name, value)?;
        }
    }
    let owner = obj.get_type().qualname()?;
    let fresh = aux
        .get_type()
        .call1((def.layout.bind(py), others, owner))?
        .cast_into::<ModuleDef>()?;
    crate::ffi::generic_setattr(obj, intern!(py, "_oxtree_def").as_any(), fresh.as_any())?;
    Ok(fresh)
}

/// The error for tree attribute `i` of `obj`, declared or registered but never assigned.
#[cold]
fn unassigned(obj: &Bound<'_, PyAny>, def: &ModuleDef, i: usize) -> PyErr {
    let py = obj.py();
    let name = def
        .names
        .bind(py)
        .get_item(i)
        .map(|n| n.to_string())
        .unwrap_or_default();
    let kind = def
        .kinds
        .bind(py)
        .get_item(i)
        .and_then(|k| k.getattr(intern!(py, "name")))
        .map(|k| k.to_string())
        .unwrap_or_default();
    let cls = obj
        .get_type()
        .qualname()
        .map(|q| q.to_string())
        .unwrap_or_default();
    TreeError::Unassigned { cls, name, kind }.into()
}

/// A Module of class `ty` rebuilt from its aux data and children, when `flatten` is the
/// Module flatten function (None otherwise).
pub fn unflatten<'py>(
    flatten: &Py<PyAny>,
    ty: &Bound<'py, PyType>,
    aux: &Bound<'py, PyAny>,
    children: &Bound<'py, PyTuple>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    if !is_module(ty.py(), flatten) {
        return Ok(None);
    }
    rebuild(ty, aux, children).map(Some)
}

fn rebuild<'py>(
    ty: &Bound<'py, PyType>,
    aux: &Bound<'py, PyAny>,
    children: &Bound<'py, PyTuple>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = ty.py();
    let d = module_def(aux, "aux data")?.get();
    let (Some(others), true) = (&d.others, d.names.bind(py).len() == children.len()) else {
        return Err(TreeError::ModuleRebuild {
            cls: ty.qualname()?.to_string(),
            children: children.len(),
            aux: short_repr(aux, 80),
        }
        .into());
    };
    let new = NEW.get_or_try_init(py, || {
        py.get_type::<PyAny>()
            .getattr(intern!(py, "__new__"))
            .map(Bound::unbind)
    })?;
    let obj = new.bind(py).call1((ty,))?;
    // The configuration is copied (one table copy), the children added, and the copy made
    // the object's `__dict__`; the slot and `__dict__` are set as `object.__setattr__` sets
    // them, so a class's own `__setattr__` (Module's checks kinds) is not run.
    let dict = others.bind(py).copy()?;
    for (name, child) in d.names.bind(py).iter().zip(children.iter()) {
        dict.set_item(name, child)?;
    }
    crate::ffi::generic_setattr(&obj, intern!(py, "_oxtree_def").as_any(), aux)?;
    crate::ffi::generic_setattr(&obj, intern!(py, "__dict__").as_any(), dict.as_any())?;
    Ok(obj)
}

/// The flatten function every Module class is registered with: `(children, aux data, keys)`.
#[pyfunction]
pub fn _module_flatten<'py>(m: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyTuple>> {
    let py = m.py();
    let (children, aux, keys) = parts(m)?;
    PyTuple::new(
        py,
        [
            PyTuple::new(py, children)?.into_any(),
            aux.into_any(),
            keys.into_any(),
        ],
    )
}

/// The keyed flatten function every Module class is registered with: `(((key, child), ...),
/// aux data)` (its keys are JAX's kind: `GetAttrKey`s, taken as they are by keyed walks).
#[pyfunction]
pub fn _module_flatten_with_keys<'py>(m: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyTuple>> {
    let py = m.py();
    let (children, aux, keys) = parts(m)?;
    let pairs = keys
        .iter()
        .zip(children)
        .map(|(key, child)| PyTuple::new(py, [key, child]))
        .collect::<PyResult<Vec<_>>>()?;
    PyTuple::new(py, [PyTuple::new(py, pairs)?.into_any(), aux.into_any()])
}

/// Rebuilds a Module of class `cls` from its aux data and children (each Module class's
/// registered unflatten function is this, given its class).
#[pyfunction]
pub fn _module_unflatten<'py>(
    cls: &Bound<'py, PyType>,
    aux: &Bound<'py, PyAny>,
    children: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let children = match children.cast::<PyTuple>() {
        Ok(t) => t.clone(),
        Err(_) => PyTuple::new(
            cls.py(),
            children.try_iter()?.collect::<PyResult<Vec<_>>>()?,
        )?,
    };
    rebuild(cls, aux, &children)
}
