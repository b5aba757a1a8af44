//! `oxtree.Module` nodes read and rebuilt natively.
//!
//! Every Module class is registered with the same flatten function (module.py's `_flatten`),
//! which module.py hands over once through `_set_module_hooks`. A registration whose flatten
//! is that function is a Module class, and the walks read it as they read a dataclass: the
//! aux data is the module's `_oxtree_def` slot (a `_ModuleDef`: `names`, `keys`, `others`),
//! the children are `__dict__[name]` for each of its `names`, the keys its `keys`. Rebuilding
//! makes the object with `object.__new__`, sets the slot and fills `__dict__` with the
//! configuration (`others`) then the children, as module.py's unflatten function does.
//!
//! Anything unusual (aux data whose configuration must be read again, an attribute never
//! assigned, a `_ModuleDef` of another shape) returns `None`, and the caller calls the
//! registered Python function, which handles it and words any error. So the native path
//! changes the speed, never the result.

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};

use crate::registry::{Children, Flattened};

struct Hooks {
    /// The flatten function every Module class is registered with.
    flatten: Py<PyAny>,
    /// `object.__new__`.
    new: Py<PyAny>,
}

static HOOKS: PyOnceLock<Hooks> = PyOnceLock::new();

/// Tells the core which flatten function marks a Module class (module.py calls it once, at
/// import).
#[pyfunction]
pub fn _set_module_hooks(py: Python<'_>, flatten: Bound<'_, PyAny>) -> PyResult<()> {
    let new = py
        .get_type::<pyo3::types::PyAny>()
        .getattr(intern!(py, "__new__"))?
        .unbind();
    // A second call (module.py reloaded) keeps the first hooks: classes registered with the
    // new flatten function then take the Python path, which gives the same results.
    let _ = HOOKS.set(
        py,
        Hooks {
            flatten: flatten.unbind(),
            new,
        },
    );
    Ok(())
}

/// The hooks, when `flatten` is the Module flatten function.
#[inline]
fn hooks_for(py: Python<'_>, flatten: &Py<PyAny>) -> Option<&'static Hooks> {
    HOOKS
        .get(py)
        .filter(|h| h.flatten.as_ptr() == flatten.as_ptr())
}

/// Whether a registration's flatten function is the Module one.
#[inline]
pub fn is_module(py: Python<'_>, flatten: &Py<PyAny>) -> bool {
    hooks_for(py, flatten).is_some()
}

/// The children, aux data and keys of a Module, or None when the Python function must
/// decide (see the module docs).
pub fn flatten<'py>(obj: &Bound<'py, PyAny>) -> Option<Flattened<'py>> {
    let py = obj.py();
    let aux = obj.getattr(intern!(py, "_oxtree_def")).ok()?;
    let others = aux.getattr(intern!(py, "others")).ok()?;
    if others.is_none() {
        return None; // the configuration changed: module.py reads it again
    }
    let names = aux.getattr(intern!(py, "names")).ok()?;
    let names = names.cast::<PyTuple>().ok()?;
    let keys = aux
        .getattr(intern!(py, "keys"))
        .ok()?
        .cast_into::<PyTuple>()
        .ok()?;
    let dict = obj.getattr(intern!(py, "__dict__")).ok()?;
    let dict = dict.cast::<PyDict>().ok()?;
    let mut values = Vec::with_capacity(names.len());
    for name in names.iter() {
        values.push(dict.get_item(&name).ok()??);
    }
    Some((Children::Vec(values), aux, Some(keys)))
}

/// A Module of class `ty` rebuilt from its aux data and children, or None when the Python
/// function must do it.
pub fn unflatten<'py>(
    flatten: &Py<PyAny>,
    ty: &Bound<'py, PyType>,
    aux: &Bound<'py, PyAny>,
    children: &Bound<'py, PyTuple>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let py = ty.py();
    let Some(hooks) = hooks_for(py, flatten) else {
        return Ok(None);
    };
    let Ok(others) = aux.getattr(intern!(py, "others")) else {
        return Ok(None);
    };
    let Ok(others) = others.cast_into::<PyDict>() else {
        return Ok(None);
    };
    let Ok(names) = aux.getattr(intern!(py, "names")) else {
        return Ok(None);
    };
    let Ok(names) = names.cast_into::<PyTuple>() else {
        return Ok(None);
    };
    if names.len() != children.len() {
        return Ok(None);
    }
    let obj = hooks.new.bind(py).call1((ty,))?;
    // The configuration is copied (one table copy), the children added, and the copy made
    // the object's `__dict__`; the slot and `__dict__` are set as `object.__setattr__` sets
    // them, so a class's own `__setattr__` (Module's checks kinds) is not run.
    let dict = others.copy()?;
    for (name, child) in names.iter().zip(children.iter()) {
        dict.set_item(name, child)?;
    }
    crate::ffi::generic_setattr(&obj, intern!(py, "_oxtree_def").as_any(), aux)?;
    crate::ffi::generic_setattr(&obj, intern!(py, "__dict__").as_any(), dict.as_any())?;
    Ok(Some(obj))
}
