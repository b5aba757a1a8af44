//! Taking registered nodes apart and putting them back, for each kind of rule.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple};

use crate::errors::{short_repr, TreeError};
use crate::face::{Face, Words};
use crate::invariant::Invariant;
use crate::registry::{Children, Flattened, Registration, Rule};

/// The children, aux data and (when known) child keys of a registered node. With
/// `with_keys`, a registered `flatten_with_keys` is called instead of `flatten`.
pub fn flatten<'py>(
    py: Python<'py>,
    reg: &Registration,
    obj: &Bound<'py, PyAny>,
    with_keys: bool,
) -> PyResult<Flattened<'py>> {
    flatten_in(py, reg, obj, with_keys, Face::Optree)
}

/// `flatten` for a walk of the given face: a flatten function's bad result is reported in
/// that face's words.
pub fn flatten_in<'py>(
    py: Python<'py>,
    reg: &Registration,
    obj: &Bound<'py, PyAny>,
    with_keys: bool,
    face: Face,
) -> PyResult<Flattened<'py>> {
    if let Rule::Custom { flatten, .. } = &reg.rule {
        if super::module_node::is_module(py, flatten) {
            return super::module_node::flatten(obj);
        }
    }
    match &reg.rule {
        Rule::Custom {
            flatten_with_keys: Some(fwk),
            ..
        } if with_keys => {
            let out = crate::ffi::call_borrowed(fwk.bind(py), &[obj])
                .map_err(|e| noted(py, e, "flatten_with_keys", reg))?;
            split_keyed_result(py, reg, &out)
        }
        Rule::Custom { flatten, .. } => {
            // Borrowed arguments by vectorcall: pyo3's `call1` of a one-tuple was 37
            // instructions a node (callgrind, 1,000 registered nodes).
            let out = crate::ffi::call_borrowed(flatten.bind(py), &[obj])
                .map_err(|e| noted(py, e, "flatten", reg))?;
            split_flatten_result(py, reg, &out, face)
        }
        Rule::Dataclass {
            data,
            meta,
            reads: [data_reads, meta_reads],
            ..
        } => {
            let mut children = Vec::with_capacity(data.len());
            fields_into(py, data, data_reads, obj, &mut children)?;
            let aux = dataclass_aux(py, meta, meta_reads, obj)?;
            Ok((Children::Vec(children), aux, None))
        }
        Rule::Static => Ok((Children::Vec(Vec::new()), obj.clone(), None)),
    }
}

/// Appends the values of a dataclass's fields `names`, in order, to `out`: each read where
/// `reads` (the rule's plans for those names) finds it in the instance, as generic attribute
/// lookup would find it (about 220 instructions a field on 3.11, a tenth of that here), and
/// with `getattr` otherwise, which gives any error.
#[inline]
pub fn fields_into<'py>(
    py: Python<'py>,
    names: &[Py<pyo3::types::PyString>],
    reads: &crate::ffi::FieldReads,
    obj: &Bound<'py, PyAny>,
    out: &mut Vec<Bound<'py, PyAny>>,
) -> PyResult<()> {
    reads.read_into(obj, names, out, |i| {
        let name = &names[i];
        obj.getattr(name.bind(py))
            .map_err(|err| missing_field(py, err, obj, name))
    })
}

/// The error of reading a registered field, with a note naming the registration that wants
/// it (an instance whose `__init__` did not set an attribute, for one).
#[cold]
#[inline(never)]
fn missing_field(
    py: Python<'_>,
    err: PyErr,
    obj: &Bound<'_, PyAny>,
    name: &Py<pyo3::types::PyString>,
) -> PyErr {
    let note = format!(
        "{} is registered as a pytree node with the attribute {}",
        crate::errors::type_name(obj),
        name.bind(py)
            .repr()
            .map(|r| r.to_string())
            .unwrap_or_default()
    );
    let _ = err.value(py).call_method1("add_note", (note,));
    err
}

/// A dataclass's aux data: the tuple of its meta fields' values (the empty tuple when it has
/// none).
#[inline(always)]
pub fn dataclass_aux<'py>(
    py: Python<'py>,
    meta: &[Py<pyo3::types::PyString>],
    reads: &crate::ffi::FieldReads,
    obj: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    if meta.is_empty() {
        // Kept, not asked of CPython each time (a call and a check: 20 instructions a node).
        static EMPTY: pyo3::sync::PyOnceLock<Py<PyTuple>> = pyo3::sync::PyOnceLock::new();
        let empty = EMPTY.get_or_init(py, || PyTuple::empty(py).unbind());
        return Ok(empty.bind(py).clone().into_any());
    }
    meta_values(py, meta, reads, obj)
}

/// `dataclass_aux` of a dataclass with meta fields (out of line: most have none).
#[inline(never)]
fn meta_values<'py>(
    py: Python<'py>,
    meta: &[Py<pyo3::types::PyString>],
    reads: &crate::ffi::FieldReads,
    obj: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let mut values = Vec::with_capacity(meta.len());
    fields_into(py, meta, reads, obj, &mut values)?;
    Ok(crate::containers::tuple_from_vec(py, values)?.into_any())
}

/// The user's exception, unchanged in type, with a note saying which registered function
/// of which type raised it (PEP 678 notes show under the traceback).
#[cold]
fn noted(py: Python<'_>, err: PyErr, which: &str, reg: &Registration) -> PyErr {
    let note = format!(
        "raised by the {which} function registered for {}",
        reg.name(py)
    );
    let _ = err.value(py).call_method1("add_note", (note,));
    err
}

/// The TypeError for a registered function that returned something of the wrong shape.
#[cold]
fn bad_result(
    py: Python<'_>,
    reg: &Registration,
    which: &'static str,
    expected: &'static str,
    why: &str,
    out: &Bound<'_, PyAny>,
) -> PyErr {
    TreeError::BadResult {
        registered: reg.name(py),
        which,
        expected,
        why: why.to_owned(),
        result: short_repr(out, 80),
    }
    .into()
}

/// JAX's words for a flatten function's bad result (JAX raises ValueError). A third item,
/// optree's entries, is accepted as in the main face; a result that fails with one is
/// reported as one that is not a pair.
#[cold]
fn jax_bad_result(out: &Bound<'_, PyAny>) -> PyErr {
    let shown = out
        .repr()
        .map(|r| r.to_string())
        .unwrap_or_else(|_| short_repr(out, 80));
    let pair = out.cast::<PyTuple>().is_ok_and(|t| t.len() == 2);
    TreeError::JaxFlattenResult { shown, pair }.into()
}

/// optree's RuntimeError for a flatten function's result of the wrong shape (`what` it did,
/// in optree's words), with the result after it.
#[cold]
fn optree_flatten_error(
    py: Python<'_>,
    reg: &Registration,
    fault: crate::errors::FlattenFault,
    out: &Bound<'_, PyAny>,
) -> PyErr {
    let ty = reg
        .ty
        .bind(py)
        .repr()
        .map(|r| r.to_string())
        .unwrap_or_else(|_| reg.name(py));
    TreeError::FlattenShape {
        ty,
        fault,
        result: short_repr(out, 80),
    }
    .into()
}

/// Splits what a registered flatten function returned into its children and aux data.
fn split_flatten_result<'py>(
    py: Python<'py>,
    reg: &Registration,
    out: &Bound<'py, PyAny>,
    face: Face,
) -> PyResult<Flattened<'py>> {
    let bad = |why: &str| {
        if face.words() == Words::Jax {
            return jax_bad_result(out);
        }
        bad_result(
            py,
            reg,
            "flatten",
            "(children, aux_data) or (children, aux_data, entries)",
            why,
            out,
        )
    };
    // Any iterable is taken as the tuple of its items, as optree takes it.
    let converted;
    let parts = match out.cast::<PyTuple>() {
        Ok(t) => t,
        Err(_) => {
            let items = out.try_iter().map_err(|e| {
                if face.words() == Words::Jax {
                    return jax_bad_result(out);
                }
                // Python's own words first (optree's), then which function returned what.
                TreeError::FlattenNotIterable {
                    python: e.value(py).to_string(),
                    registered: reg.name(py),
                    result: short_repr(out, 80),
                }
                .caused_by(py, e)
            })?;
            converted = PyTuple::new(py, items.collect::<PyResult<Vec<_>>>()?)?;
            &converted
        }
    };
    if parts.len() != 2 && parts.len() != 3 {
        if face.words() == Words::Jax {
            return Err(jax_bad_result(out));
        }
        return Err(optree_flatten_error(
            py,
            reg,
            crate::errors::FlattenFault::Length(parts.len()),
            out,
        ));
    }
    // Items read in place, its length checked above (`get_item` was a call into CPython per
    // item, two or three per registered node).
    let item = |i: usize| crate::ffi::tuple_item(parts, i).invariant("a flatten result's item");
    let children = match item(0)?.cast_into_exact::<PyTuple>() {
        Ok(t) => Children::Tuple(t),
        Err(e) => match e.into_inner().cast_into_exact::<pyo3::types::PyList>() {
            Ok(l) => Children::List(l),
            Err(e) => {
                let iter = e
                    .into_inner()
                    .try_iter()
                    .map_err(|_| bad("its children are not iterable"))?;
                Children::Vec(iter.collect::<PyResult<Vec<_>>>()?)
            }
        },
    };
    let entries = match parts.len() {
        3 => Some(item(2)?).filter(|e| !e.is_none()),
        _ => None,
    };
    let entries = if let Some(entries) = entries {
        let entries = match entries.cast_into::<PyTuple>() {
            Ok(t) => t,
            Err(e) => {
                let e = e.into_inner();
                let items = e
                    .try_iter()
                    .map_err(|_| bad("its entries are not iterable"))?;
                PyTuple::new(py, items.collect::<PyResult<Vec<_>>>()?)?
            }
        };
        if entries.len() != children.len() {
            if face.words() == Words::Jax {
                return Err(bad("its entries and children differ in number"));
            }
            return Err(optree_flatten_error(
                py,
                reg,
                crate::errors::FlattenFault::EntriesCount {
                    children: children.len(),
                    entries: entries.len(),
                },
                out,
            ));
        }
        Some(entries)
    } else {
        None
    };
    Ok((children, item(1)?, entries))
}

/// Splits what JAX's `flatten_with_keys` returned: `([(key, child), ...], aux_data)`.
fn split_keyed_result<'py>(
    py: Python<'py>,
    reg: &Registration,
    out: &Bound<'py, PyAny>,
) -> PyResult<Flattened<'py>> {
    let bad = |why: &str| {
        bad_result(
            py,
            reg,
            "flatten_with_keys",
            "([(key, child), ...], aux_data)",
            why,
            out,
        )
    };
    let parts = out.cast::<PyTuple>().map_err(|_| bad("it returned"))?;
    if parts.len() != 2 {
        return Err(bad(&format!(
            "it returned a tuple of length {}",
            parts.len()
        )));
    }
    let pairs = parts.get_item(0)?;
    let mut keys = Vec::new();
    let mut children = Vec::new();
    for pair in pairs
        .try_iter()
        .map_err(|_| bad("its first item is not iterable"))?
    {
        let pair = pair?;
        let pair = pair
            .cast::<PyTuple>()
            .map_err(|_| bad("an item is not a (key, child) pair"))?;
        if pair.len() != 2 {
            return Err(bad("an item is not a (key, child) pair"));
        }
        keys.push(pair.get_item(0)?);
        children.push(pair.get_item(1)?);
    }
    Ok((
        Children::Vec(children),
        parts.get_item(1)?,
        Some(PyTuple::new(py, keys)?),
    ))
}

struct ObjectMethods {
    new: Py<PyAny>,
}

static OBJECT: PyOnceLock<ObjectMethods> = PyOnceLock::new();

/// Rebuilds a registered node from its aux data and children (in leaf order).
pub fn unflatten<'py>(
    py: Python<'py>,
    reg: &Registration,
    aux: &Bound<'py, PyAny>,
    children: Bound<'py, PyTuple>,
) -> PyResult<Bound<'py, PyAny>> {
    match &reg.rule {
        Rule::Custom {
            unflatten, flatten, ..
        } => {
            let ty = reg.ty.bind(py);
            if let Some(module) = super::module_node::unflatten(flatten, ty, aux, &children)? {
                return Ok(module);
            }
            crate::ffi::call_borrowed(unflatten.bind(py), &[aux, children.as_any()])
                .map_err(|e| noted(py, e, "unflatten", reg))
        }
        Rule::Static => Ok(aux.clone()),
        Rule::Dataclass {
            data,
            meta,
            call_init,
            kwnames,
            ..
        } => {
            let ty = reg.ty.bind(py);
            let meta_values = aux.cast::<PyTuple>()?;
            if *call_init {
                if let Some(obj) = init_directly(ty, kwnames.bind(py), &children, meta_values)? {
                    return Ok(obj);
                }
                let kwargs = PyDict::new(py);
                for (name, value) in kwnames
                    .bind(py)
                    .iter()
                    .zip(children.iter().chain(meta_values))
                {
                    kwargs.set_item(name, value)?;
                }
                ty.call((), Some(&kwargs))
            } else {
                let children: Vec<Bound<'py, PyAny>> = children.iter().collect();
                with_attributes(ty, data, meta, meta_values, &children)
            }
        }
    }
}

/// Whether `reg` rebuilds its instances attribute by attribute (`with_attributes`): a
/// dataclass registered with `call_init` false, and every `register_object` class.
#[inline]
pub fn sets_attributes(reg: &Registration) -> bool {
    matches!(
        reg.rule,
        Rule::Dataclass {
            call_init: false,
            ..
        }
    )
}

/// An instance of a registration that `sets_attributes`, rebuilt from its aux data and its
/// children (in leaf order, borrowed: unflatten passes the top of its value stack).
#[inline]
pub fn attributes_node<'py>(
    py: Python<'py>,
    reg: &Registration,
    aux: &Bound<'py, PyAny>,
    children: &[Bound<'py, PyAny>],
) -> PyResult<Bound<'py, PyAny>> {
    match &reg.rule {
        Rule::Dataclass { data, meta, .. } => with_attributes(
            reg.ty.bind(py),
            data,
            meta,
            aux.cast::<PyTuple>()?,
            children,
        ),
        _ => Err(crate::internal!("an attribute rebuild of another rule")),
    }
}

/// `object.__new__(ty)`, then `object.__setattr__(obj, name, value)` for each data field and
/// its child, then each meta field and its value: neither `__init__` nor a class's own
/// `__setattr__` runs (a frozen dataclass's included), and each value goes into `__dict__` or
/// its slot. A class whose `__new__` is object's is allocated by object's `tp_new` directly;
/// one with its own `__new__` gets a call of `object.__new__`, which bypasses it. The Python
/// call per instance was a third of a 1,000-object unflatten.
fn with_attributes<'py>(
    ty: &Bound<'py, pyo3::types::PyType>,
    data: &[Py<pyo3::types::PyString>],
    meta: &[Py<pyo3::types::PyString>],
    meta_values: &Bound<'py, PyTuple>,
    children: &[Bound<'py, PyAny>],
) -> PyResult<Bound<'py, PyAny>> {
    let py = ty.py();
    if children.len() != data.len() || meta_values.len() != meta.len() {
        return Err(crate::internal!(
            "{} rebuilt from {} children and {} meta values, registered with {} and {}",
            ty.name().map(|n| n.to_string()).unwrap_or_default(),
            children.len(),
            meta_values.len(),
            data.len(),
            meta.len()
        ));
    }
    let obj = match crate::ffi::object_new(ty) {
        Some(made) => made?,
        None => {
            let methods = OBJECT.get_or_try_init(py, || -> PyResult<ObjectMethods> {
                let object = py.get_type::<pyo3::types::PyAny>();
                Ok(ObjectMethods {
                    new: object.getattr("__new__")?.unbind(),
                })
            })?;
            methods.new.bind(py).call1((ty,))?
        }
    };
    for (name, value) in data.iter().zip(children) {
        crate::ffi::generic_setattr(&obj, name.bind(py), value)?;
    }
    for (name, value) in meta.iter().zip(meta_values.iter()) {
        crate::ffi::generic_setattr(&obj, name.bind(py), &value)?;
    }
    Ok(obj)
}

/// `ty(**dict(zip(kwnames, children + meta_values)))` without the keyword dict, when
/// calling the class does no more than `object.__new__(ty)` then `ty.__init__(obj, ...)`:
/// its metaclass is `type`, its `__new__` is object's and its `__init__` a Python function,
/// which is then vectorcalled with the names as keywords. None (nothing done) otherwise. The
/// dict built and unpacked for every instance was a tenth of a dataclass-heavy unflatten.
fn init_directly<'py>(
    ty: &Bound<'py, pyo3::types::PyType>,
    kwnames: &Bound<'py, PyTuple>,
    children: &Bound<'py, PyTuple>,
    meta_values: &Bound<'py, PyTuple>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let py = ty.py();
    let n = children.len() + meta_values.len();
    let plain = crate::ffi::metatype_is_type(ty) && crate::ffi::new_is_object_new(ty);
    if !plain || n != kwnames.len() || n > MAX_DIRECT_FIELDS {
        return Ok(None);
    }
    let Ok(init) = ty
        .getattr(pyo3::intern!(py, "__init__"))?
        .cast_into_exact::<pyo3::types::PyFunction>()
    else {
        return Ok(None);
    };
    let Some(obj) = crate::ffi::object_new(ty) else {
        return Ok(None);
    };
    let obj = obj?;
    let result = crate::ffi::call_method_kw(&init, &obj, [children, meta_values], kwnames)?;
    if !result.is_none() {
        return Err(TreeError::InitReturned {
            type_name: crate::errors::type_name(&result),
        }
        .into());
    }
    Ok(Some(obj))
}

/// The most fields `init_directly` passes (on the native stack); more go through a dict.
const MAX_DIRECT_FIELDS: usize = crate::ffi::MAX_KW_ARGS;

/// Why a node of `arity` children, aux data `aux` and child keys `entries` is not one that
/// flattening an instance under `reg` gives (None when it could be): a dataclass has one child
/// per data field and the tuple of its meta fields' values as aux data, a static node no
/// children and an instance of its type as aux data. Checked where a treespec is built from
/// outside data (a pickle, JAX's node data), so a state that loads flattens back the same.
/// A type registered with functions is trusted: only its flatten function knows its arity.
#[cold]
pub fn misfit(
    py: Python<'_>,
    reg: &Registration,
    arity: usize,
    aux: &Bound<'_, PyAny>,
    entries: Option<&Bound<'_, PyTuple>>,
) -> Option<String> {
    let name = reg.name(py);
    match &reg.rule {
        Rule::Custom { .. } => None,
        Rule::Dataclass { data, meta, .. } => {
            if arity != data.len() {
                return Some(format!(
                    "{name} is registered with {} data fields, not {arity}",
                    data.len()
                ));
            }
            let fits = aux
                .cast_exact::<PyTuple>()
                .is_ok_and(|t| t.len() == meta.len());
            if !fits {
                return Some(format!(
                    "{name} is registered with {} meta fields: its aux data must be a tuple \
                     of their values, got {}",
                    meta.len(),
                    short_repr(aux, 80)
                ));
            }
            entries.map(|_| format!("{name} is a dataclass: its children have no stored keys"))
        }
        Rule::Static => {
            if arity != 0 || entries.is_some() {
                return Some(format!(
                    "{name} is registered as static: it has no children, not {arity}"
                ));
            }
            (!aux.get_type().is(reg.ty.bind(py))).then(|| {
                format!(
                    "{name} is registered as static: its value must be a {name}, got {}",
                    short_repr(aux, 80)
                )
            })
        }
    }
}
