//! The warm call of `oxtree.jax.filter_jit`, in the core.
//!
//! A compiled function (`_FilterJitCore`, subclassed in Python by `oxtree.jax._FilterJit`)
//! takes a call's arguments straight from the interpreter, as `jax.jit`'s C++ dispatch does:
//! it flattens the arguments as one graph whose roots are the positional arguments and, when
//! there are any, the keyword arguments' dict, splits the leaves into their types,
//! the array leaves and the static leaves in one pass, checks the graphdef and leaf types
//! against the previous call's, looks the static leaves up in that entry's cache, calls the
//! compiled function with the arrays and rebuilds its result with `graph_unflatten`. What is
//! rare stays in Python, asked through methods of the subclass: making an entry for a new
//! structure (`_entry`), compiling for new static leaves (`_compiled`), a call where one array
//! object fills several leaves (`_call_aliased`), and a result with static leaves or changes
//! to write back to the arguments (`_Out.finish`).

use std::collections::HashSet;
use std::hash::BuildHasherDefault;
use std::sync::{Arc, Mutex, MutexGuard};

use pyo3::gc::PyVisit;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple, PyType};
use pyo3::PyTraverseError;

use crate::errors::{type_name, TreeError};
use crate::face::options::Options;
use crate::graph::{self, GraphDef};
use crate::types;

/// The previous call's structure and what it found for it: a training loop calls with one
/// structure, and comparing with it (a pointer compare per node and per leaf type) is cheaper
/// than hashing a new graphdef, which asks every module's aux data for its hash.
struct Last {
    graphdef: Py<GraphDef>,
    types: Py<PyTuple>,
    /// Whether the last root is the keyword arguments' dict.
    has_kwargs: bool,
    /// The Python entry (`oxtree.jax._Entry`), handed back to the subclass's methods.
    entry: Py<PyAny>,
    /// `entry.compiled`: static leaves -> compiled function.
    compiled: Py<PyDict>,
}

/// The core of a function compiled by `oxtree.jax.filter_jit`: its warm call.
#[pyclass(frozen, subclass, module = "oxtree", name = "_FilterJitCore")]
pub struct FilterJitCore {
    namespace: String,
    /// Type -> whether its instances are arrays, as far as known.
    known: Py<PyDict>,
    /// Asked (`classify(type) -> bool`) about a type `known` lacks; it may remember the answer
    /// in `known`.
    classify: Py<PyAny>,
    last: Mutex<Option<Arc<Last>>>,
}

impl FilterJitCore {
    fn last(&self) -> MutexGuard<'_, Option<Arc<Last>>> {
        // Held only to copy or replace the field, never across Python code: a panic (the only
        // way to poison it) cannot happen while it is held, so a poisoned lock is still sound.
        self.last.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The types of `leaves`, their array leaves and their static leaves (each in leaf order),
/// and whether one array object fills several leaves; `classify(type)` says whether a type's
/// instances are arrays. `types` is `last_types` itself when the leaves have the same types as
/// there.
fn split<'py>(
    py: Python<'py>,
    leaves: impl ExactSizeIterator<Item = Bound<'py, PyAny>>,
    mut classify: impl FnMut(&Bound<'py, PyType>) -> PyResult<bool>,
    last_types: Option<Bound<'py, PyTuple>>,
) -> PyResult<Split<'py>> {
    let n = leaves.len();
    let mut types = Vec::with_capacity(n);
    let mut arrays = Vec::with_capacity(n);
    let mut statics = Vec::new();
    let mut seen: HashSet<usize, BuildHasherDefault<types::PtrHasher>> =
        HashSet::with_capacity_and_hasher(n, Default::default());
    let mut aliased = false;
    let mut last_ty = std::ptr::null_mut();
    let mut is_array = false;
    for leaf in leaves {
        let ty = leaf.get_type();
        if ty.as_type_ptr() != last_ty {
            is_array = classify(&ty)?;
            last_ty = ty.as_type_ptr();
        }
        types.push(ty);
        if is_array {
            aliased |= !seen.insert(leaf.as_ptr() as usize);
            arrays.push(leaf);
        } else {
            statics.push(leaf);
        }
    }
    let same = last_types.filter(|last| {
        last.len() == n
            && last
                .iter()
                .zip(&types)
                .all(|(a, b)| a.as_ptr() == b.as_ptr())
    });
    let (types, same) = match same {
        Some(last) => (last, true),
        None => (PyTuple::new(py, types)?, false),
    };
    Ok(Split {
        types,
        same,
        arrays: crate::containers::tuple_from_vec(py, arrays)?,
        statics: crate::containers::tuple_from_vec(py, statics)?,
        aliased,
    })
}

/// What [`split`] finds.
struct Split<'py> {
    types: Bound<'py, PyTuple>,
    /// Whether `types` is the `last_types` given.
    same: bool,
    arrays: Bound<'py, PyTuple>,
    statics: Bound<'py, PyTuple>,
    aliased: bool,
}

/// The entry's cache of compiled functions, read once when it becomes the last entry.
fn last_of<'py>(
    graphdef: Bound<'py, GraphDef>,
    types: Bound<'py, PyTuple>,
    has_kwargs: bool,
    entry: Bound<'py, PyAny>,
) -> PyResult<Last> {
    let py = entry.py();
    let compiled = entry.getattr(intern!(py, "compiled"))?;
    let compiled = compiled
        .cast_into::<PyDict>()
        .map_err(|e| TreeError::CompiledCacheNotDict {
            type_name: type_name(e.into_inner().as_any()),
        })?;
    Ok(Last {
        graphdef: graphdef.unbind(),
        types: types.unbind(),
        has_kwargs,
        entry: entry.unbind(),
        compiled: compiled.unbind(),
    })
}

#[pymethods]
impl FilterJitCore {
    /// `namespace` is the registry namespace the arguments are flattened in; `known` maps a
    /// type to whether its instances are arrays, and `classify(type)` (which must answer a
    /// bool, and may remember it in `known`) is asked about a type `known` lacks.
    #[new]
    #[pyo3(signature = (namespace, known, classify))]
    fn new(namespace: String, known: Bound<'_, PyDict>, classify: Bound<'_, PyAny>) -> Self {
        FilterJitCore {
            namespace,
            known: known.unbind(),
            classify: classify.unbind(),
            last: Mutex::new(None),
        }
    }

    /// Calls the compiled function with the array leaves of the arguments and rebuilds its
    /// result. The subclass's methods get the roots as a tuple: the positional arguments, then
    /// the keyword arguments' dict when there are keyword arguments (`has_kwargs`).
    #[pyo3(signature = (*args, **kwargs))]
    fn __call__<'py>(
        slf: &Bound<'py, Self>,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let me = slf.get();
        // The roots: each positional argument, then the keyword arguments' dict unless empty
        // (a tuple and an empty dict node more would cost a fifth of the flatten of a small
        // model).
        let kwargs = kwargs.filter(|k| !k.is_empty());
        let mut roots: Vec<Bound<'py, PyAny>> = Vec::with_capacity(args.len() + 1);
        roots.extend(args.iter());
        roots.extend(kwargs.map(|k| k.clone().into_any()));
        let has_kwargs = kwargs.is_some();
        // `oxtree.jax` follows JAX's registry too: an equinox module is a node, as to JAX.
        let opts = Options::new(None, false, &me.namespace).with_jax_registry(Some(true));
        let (leaves, gd) = graph::flatten_roots(py, &roots, &opts)?;
        let last = me.last().clone();
        let (known, classify) = (me.known.bind(py), me.classify.bind(py));
        let s = split(
            py,
            leaves.iter().cloned(),
            |ty| match known.get_item(ty)? {
                Some(flag) => flag.is_truthy(),
                None => classify.call1((ty,))?.is_truthy(),
            },
            last.as_ref().map(|l| l.types.bind(py).clone()),
        )?;
        let last = match last {
            Some(l)
                if s.same
                    && l.has_kwargs == has_kwargs
                    && graph::same_graphdef(py, gd.get(), l.graphdef.get())? =>
            {
                l
            }
            _ => {
                let call = (&gd, &s.types, has_kwargs);
                let entry = slf.call_method1(intern!(py, "_entry"), call)?;
                let l = Arc::new(last_of(gd, s.types.clone(), has_kwargs, entry)?);
                // The previous entry is dropped after the lock is released (dropping it may
                // run Python code).
                let previous = me.last().replace(l.clone());
                drop(previous);
                l
            }
        };
        let entry = last.entry.bind(py);
        let roots = if has_kwargs {
            PyTuple::new(py, roots)?
        } else {
            args.clone()
        };
        if s.aliased {
            let leaves = crate::containers::list_from_vec(py, leaves);
            let call = (entry, s.statics, s.arrays, leaves, roots);
            return slf.call_method1(intern!(py, "_call_aliased"), call);
        }
        // An unhashable static leaf fails the lookup: `_compiled` says which one.
        let compiled = match last.compiled.bind(py).get_item(&s.statics) {
            Ok(Some(f)) => f,
            _ => slf.call_method1(intern!(py, "_compiled"), (entry, &s.statics))?,
        };
        // One argument per array (donation and layouts are options of the compiled
        // function): JAX's C++ dispatch takes them without a tuple node.
        let result = compiled.call1(&s.arrays)?;
        // The compiled function returns `(arrays, _Out record)`.
        let (out_arrays, out) = result.extract::<(Bound<'py, PyAny>, Bound<'py, PyAny>)>()?;
        let direct = out.getattr(intern!(py, "direct"))?;
        if !direct.is_none() {
            // Nothing to write back and no static leaves to merge: the arrays are the leaves.
            return graph::graph_unflatten(&direct, &out_arrays);
        }
        let leaves = crate::containers::list_from_vec(py, leaves);
        out.call_method1(intern!(py, "finish"), (out_arrays, leaves, roots))
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.known)?;
        visit.call(&self.classify)?;
        // The lock is never held across Python code, so the collector (which runs Python
        // code's allocations) cannot find it held by its own thread; another thread holding
        // it is skipped rather than waited for.
        if let Ok(last) = self.last.try_lock() {
            if let Some(l) = last.as_ref() {
                visit.call(&l.graphdef)?;
                visit.call(&l.types)?;
                visit.call(&l.entry)?;
                visit.call(&l.compiled)?;
            }
        }
        Ok(())
    }

    fn __clear__(&self) {
        let taken = self.last().take();
        drop(taken);
    }
}
