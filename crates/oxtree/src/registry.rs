//! The registry of custom node types: namespace -> type -> registration.
//!
//! Read-mostly: every walk takes one snapshot (an `Arc`) at its start, so a registration
//! made by another thread mid-walk never changes the rules under a walk. Writers copy the
//! map, change the copy and swap it in under the lock.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyTuple, PyType};

use crate::errors::TreeError;
use crate::plugins::Plugin;
use crate::types::{self, PtrMap};

/// How a registered type is taken apart and put back together.
pub enum Rule {
    /// User functions: `flatten(obj) -> (children, aux)` or `(children, aux, entries)`,
    /// `unflatten(aux, children) -> obj`, and optionally JAX's
    /// `flatten_with_keys(obj) -> ([(key, child), ...], aux)`.
    Custom {
        flatten: Py<PyAny>,
        unflatten: Py<PyAny>,
        flatten_with_keys: Option<Py<PyAny>>,
    },
    /// A dataclass, walked natively: the data fields are the children, the meta fields' values
    /// (a tuple) the aux data. Rebuilt by calling the class with keyword arguments, or, with
    /// `call_init == false`, by `object.__new__` and `object.__setattr__` on every field.
    Dataclass {
        data: Vec<Py<PyString>>,
        meta: Vec<Py<PyString>>,
        call_init: bool,
        /// The `__init__` keywords of the data fields then the meta fields, as one tuple (the
        /// keyword names of a vectorcall of `__init__`): their names unless registered with
        /// other `init_names`.
        kwnames: Py<PyTuple>,
        /// The data fields' keys in key paths, when they are not oxtree's `GetAttrKey`s: a
        /// class registered with JAX's `register_dataclass` (see `jax_registry`) gets JAX's
        /// own key objects, as `jax.tree_util` gives them.
        keys: Option<Box<[Py<PyAny>]>>,
        /// Where the data fields' (`[0]`) and the meta fields' (`[1]`) values are read on an
        /// instance, planned once per version of the class.
        reads: [crate::ffi::FieldReads; 2],
    },
    /// A leafless node whose value (hashable) lives in the treedef.
    Static,
}

impl Rule {
    /// A dataclass rule's `reads`, with nothing planned yet.
    pub fn field_reads(
        data: &[Py<PyString>],
        meta: &[Py<PyString>],
    ) -> [crate::ffi::FieldReads; 2] {
        [
            crate::ffi::FieldReads::new(data.len()),
            crate::ffi::FieldReads::new(meta.len()),
        ]
    }
}

pub struct Registration {
    pub ty: Py<PyType>,
    pub rule: Rule,
    /// The namespace it was registered in ("" for the global one).
    pub namespace: String,
    /// optree's `path_entry_type`: the `PyTreeEntry` class accessors use for this node's
    /// children (None: chosen from what the type is, as optree's `AutoEntry` does).
    pub path_entry_type: Option<Py<PyAny>>,
    /// When it was made, among all registrations: listings come in registration order.
    pub serial: u64,
}

static SERIAL: AtomicU64 = AtomicU64::new(0);

impl Registration {
    /// A registration that lives outside the registry's tables (JAX's rules for a type JAX
    /// registers: `jax_registry`), in the global namespace, with no `path_entry_type`.
    pub fn outside(ty: Py<PyType>, rule: Rule) -> Registration {
        Registration {
            ty,
            rule,
            namespace: String::new(),
            path_entry_type: None,
            serial: SERIAL.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// The type's `__name__`, for messages and reprs.
    pub fn name(&self, py: Python<'_>) -> String {
        self.ty
            .bind(py)
            .name()
            .map(|n| n.to_string())
            .unwrap_or_else(|_| "?".into())
    }
}

/// One immutable version of the registry.
#[derive(Default, Clone)]
pub struct Registry {
    global: PtrMap<Arc<Registration>>,
    namespaced: HashMap<String, PtrMap<Arc<Registration>>>,
    /// True when one of the builtin scalar types (`types::is_scalar_type`) is registered in
    /// some namespace: only then must a scalar leaf be looked up.
    scalars: bool,
    /// Namespaces in optree's `dict_insertion_ordered` mode ("" for the global one, which
    /// puts every namespace in it).
    insertion_ordered: HashSet<String>,
}

impl Registry {
    /// Whether objects of exact type `ty` are leaves by a pointer compare alone: a builtin
    /// scalar type (int, float, str, ...) that no namespace registers. Scalars are most of the
    /// leaves of most trees, and a registry lookup costs a hash per leaf.
    #[inline(always)]
    pub fn scalar_leaf(&self, ty: *mut pyo3::ffi::PyTypeObject) -> bool {
        !self.scalars && types::is_scalar_type(ty)
    }

    fn note_scalars(&mut self) {
        self.scalars = self
            .global
            .keys()
            .chain(self.namespaced.values().flat_map(|m| m.keys()))
            .any(|&k| types::is_scalar_type(k as *mut pyo3::ffi::PyTypeObject));
    }

    /// Whether walks in `namespace` keep dicts in insertion order (optree's
    /// `dict_insertion_ordered`): set for it or for the global namespace.
    #[inline]
    pub fn dict_insertion_ordered(&self, namespace: &str) -> bool {
        !self.insertion_ordered.is_empty()
            && (self.insertion_ordered.contains("") || self.insertion_ordered.contains(namespace))
    }

    /// Whether `namespace` itself (not the global namespace) is in `dict_insertion_ordered`
    /// mode: a walk's dict order then depends on its namespace, which its treespec keeps.
    #[inline]
    pub fn dict_insertion_ordered_in(&self, namespace: &str) -> bool {
        !namespace.is_empty()
            && !self.insertion_ordered.is_empty()
            && self.insertion_ordered.contains(namespace)
    }

    /// True when nothing is registered: the walk can skip lookups altogether.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.global.is_empty() && self.namespaced.is_empty()
    }

    /// The registration for `ty` in `namespace`, falling back to the global namespace.
    #[inline]
    pub fn lookup(
        &self,
        ty: *mut pyo3::ffi::PyTypeObject,
        namespace: &str,
    ) -> Option<&Arc<Registration>> {
        let key = ty as usize;
        if !namespace.is_empty() {
            if let Some(found) = self.namespaced.get(namespace).and_then(|m| m.get(&key)) {
                return Some(found);
            }
        }
        self.global.get(&key)
    }

    fn table(&mut self, namespace: &str) -> &mut PtrMap<Arc<Registration>> {
        if namespace.is_empty() {
            &mut self.global
        } else {
            self.namespaced.entry(namespace.to_owned()).or_default()
        }
    }
}

static REGISTRY: Mutex<Option<Arc<Registry>>> = Mutex::new(None);

/// Registrations removed by `unregister_pytree_node`, by (namespace, type address), held
/// weakly: while a treespec built before still holds one, a pickle of that treespec loads in
/// this process. A registration nobody holds any more is gone for good.
type Retired = HashMap<(String, usize), Weak<Registration>>;

static RETIRED: Mutex<Option<Retired>> = Mutex::new(None);

/// The registration of `ty` in `namespace` (or the global one), for rebuilding a pickled
/// treespec: the live registry first, then a registration retired but still in use.
pub fn lookup_for_load(
    ty: *mut pyo3::ffi::PyTypeObject,
    namespace: &str,
) -> Option<Arc<Registration>> {
    if let Some(found) = snapshot().lookup(ty, namespace) {
        return Some(found.clone());
    }
    let guard = RETIRED.lock().unwrap_or_else(|e| e.into_inner());
    let retired = guard.as_ref()?;
    [namespace, ""].iter().find_map(|ns| {
        let reg = retired.get(&((*ns).to_owned(), ty as usize))?.upgrade()?;
        // A live registration keeps its type alive, so the address cannot have been reused.
        (reg.ty.as_ptr() == ty.cast()).then_some(reg)
    })
}

/// Bumped under the lock by every change of the registry.
static VERSION: AtomicU64 = AtomicU64::new(1);

/// This thread's view of the registry.
struct ThreadView {
    /// The last snapshot this thread took and the version it was taken at: a walk starts with
    /// one atomic load instead of taking the lock (4% of a 3-leaf flatten).
    snapshot: RefCell<Option<(u64, Arc<Registry>)>>,
    /// How many `with_registry` calls on this thread are borrowing `snapshot`: while one is,
    /// the snapshot is neither replaced nor dropped.
    lent: Cell<u32>,
}

thread_local! {
    static VIEW: ThreadView = const {
        ThreadView {
            snapshot: RefCell::new(None),
            lent: Cell::new(0),
        }
    };
}

/// The registry as it is now (or as it was a moment ago, if another thread is changing it).
pub fn snapshot() -> Arc<Registry> {
    let version = VERSION.load(Ordering::Acquire);
    let cached = VIEW.with(|v| match &*v.snapshot.borrow() {
        Some((at, reg)) if *at == version => Some(reg.clone()),
        _ => None,
    });
    if let Some(reg) = cached {
        return reg;
    }
    let (version, reg) = {
        let mut guard = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
        let reg = guard
            .get_or_insert_with(|| Arc::new(Registry::default()))
            .clone();
        (VERSION.load(Ordering::Acquire), reg)
    };
    // The registry this thread held before is dropped outside the lock, and never while a
    // `with_registry` call borrows it.
    let previous = VIEW
        .with(|v| (v.lent.get() == 0).then(|| v.snapshot.replace(Some((version, reg.clone())))));
    drop(previous);
    reg
}

/// Calls `f` with the registry as `snapshot` would give it, lending this thread's cached
/// snapshot when it is current instead of counting a reference to it: the two atomic
/// reference-count updates were 5% of a 3-leaf flatten.
pub fn with_registry<R>(f: impl FnOnce(&Registry) -> R) -> R {
    let version = VERSION.load(Ordering::Acquire);
    VIEW.with(|view| {
        // A shared borrow of the cell for the whole call: nested calls borrow it too, and
        // `snapshot` replaces it only while no call is lent it (`lent`).
        let held = view.snapshot.borrow();
        let Some((_, reg)) = held.as_ref().filter(|(at, _)| *at == version) else {
            drop(held);
            return f(&snapshot());
        };
        /// Ends the loan however `f` returns (unwinding included).
        struct Loan<'v>(&'v Cell<u32>);
        impl Drop for Loan<'_> {
            fn drop(&mut self) {
                self.0.set(self.0.get() - 1);
            }
        }
        view.lent.set(view.lent.get() + 1);
        let _loan = Loan(&view.lent);
        f(reg)
    })
}

/// Applies `change` to a copy of the registry and publishes the copy.
fn update<T>(change: impl FnOnce(&mut Registry) -> PyResult<T>) -> PyResult<T> {
    let mut guard = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
    let mut next: Registry = guard.as_deref().cloned().unwrap_or_default();
    let out = change(&mut next)?;
    next.note_scalars();
    let old = guard.replace(Arc::new(next));
    VERSION.fetch_add(1, Ordering::AcqRel);
    drop(guard);
    // This thread's cached snapshot is stale now: let it go at once, so an unregistered
    // type is not kept alive by it (other threads, and this one when a walk is borrowing it,
    // let theirs go on their next walk).
    let cached = VIEW.with(|v| (v.lent.get() == 0).then(|| v.snapshot.replace(None)));
    // Released after the lock: dropping the last reference to a registration can run Python
    // code (a `__del__`), which must not find the registry locked.
    drop(old);
    drop(cached);
    Ok(out)
}

/// Where a registration lives, in optree's words: `the global namespace` or
/// `namespace 'name'`.
fn namespace_label(py: Python<'_>, namespace: &str) -> PyResult<String> {
    Ok(if namespace.is_empty() {
        "the global namespace".into()
    } else {
        format!("namespace {}", PyString::new(py, namespace).repr()?)
    })
}

/// The namespace argument of the registry functions: a str (optree's TypeError otherwise).
fn namespace_arg(namespace: &Bound<'_, PyAny>) -> PyResult<String> {
    match namespace.cast::<PyString>() {
        Ok(s) => Ok(s.to_str()?.to_owned()),
        Err(_) => Err(TreeError::NamespaceNotStr {
            got: namespace.repr()?.to_string(),
        }
        .into()),
    }
}

/// Builtin node types cannot be registered or unregistered (`what`): their rules are fixed.
fn check_registrable(cls: &Bound<'_, PyType>, what: &'static str) -> PyResult<()> {
    let py = cls.py();
    let c = types::collections(py);
    let builtins = [
        py.get_type::<PyTuple>().as_ptr(),
        py.get_type::<PyList>().as_ptr(),
        py.get_type::<PyDict>().as_ptr(),
        py.None().bind(py).get_type().as_ptr(),
        c.ordered_dict.as_ptr(),
        c.default_dict.as_ptr(),
        c.deque.as_ptr(),
    ];
    if builtins.contains(&cls.as_ptr()) {
        return Err(TreeError::BuiltinType {
            cls: cls.repr()?.to_string(),
            what,
        }
        .into());
    }
    Ok(())
}

fn insert(
    cls: &Bound<'_, PyType>,
    rule: Rule,
    namespace: &Bound<'_, PyAny>,
    path_entry_type: Option<&Bound<'_, PyAny>>,
) -> PyResult<()> {
    let namespace = namespace_arg(namespace)?;
    let namespace = namespace.as_str();
    check_registrable(cls, "re-registered")?;
    let path_entry_type = match path_entry_type {
        Some(t) if !t.is_none() => Some(check_entry_type(t)?),
        _ => None,
    };
    let reg = Arc::new(Registration {
        ty: cls.clone().unbind(),
        rule,
        namespace: namespace.to_owned(),
        path_entry_type,
        serial: SERIAL.fetch_add(1, Ordering::Relaxed),
    });
    let key = cls.as_ptr() as usize;
    update(|r| {
        let table = r.table(namespace);
        if table.contains_key(&key) {
            return Err(TreeError::AlreadyRegistered {
                cls: cls.repr()?.to_string(),
                label: namespace_label(cls.py(), namespace)?,
            }
            .into());
        }
        table.insert(key, reg);
        Ok(())
    })?;
    if !namespace.is_empty() {
        if let Err(e) = warn_override(cls, namespace) {
            // Warnings turned into errors: the registration is undone, as optree undoes it.
            let undone = update(|r| Ok(r.table(namespace).remove(&key)))?;
            drop(undone);
            return Err(e);
        }
    }
    if let Some(retired) = RETIRED.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
        retired.remove(&(namespace.to_owned(), key));
    }
    Ok(())
}

/// optree's UserWarning when a namespace gets its own rules for a namedtuple or struct
/// sequence class, which every namespace already treats as a node. (Only for namespaces:
/// JAX's face registers in the global one, and JAX does not warn.)
fn warn_override(cls: &Bound<'_, PyType>, namespace: &str) -> PyResult<()> {
    let what = if types::is_structseq_class(cls) {
        "is a class of `PyStructSequence`, "
    } else if types::is_namedtuple_class(cls) {
        "is a subclass of `collections.namedtuple`, "
    } else {
        return Ok(());
    };
    let py = cls.py();
    let message = format!(
        "PyTree type {} {what}which is already registered in the global namespace. Override it \
         with custom flatten/unflatten functions in namespace {}.",
        cls.repr()?,
        PyString::new(py, namespace).repr()?
    );
    let category = py.get_type::<pyo3::exceptions::PyUserWarning>();
    let message = std::ffi::CString::new(message).map_err(|e| TreeError::WarningNul {
        position: e.nul_position(),
    })?;
    PyErr::warn(py, category.as_any(), &message, 1)
}

/// `path_entry_type` must be a subclass of optree's `PyTreeEntry` (`oxtree.PyTreeEntry`).
fn check_entry_type(t: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
    let py = t.py();
    let base = Plugin::EntryBase.get(py)?;
    let ok = t
        .cast::<PyType>()
        .is_ok_and(|ty| ty.is_subclass(&base).unwrap_or(false));
    if !ok {
        return Err(TreeError::NotEntryType {
            got: t.repr()?.to_string(),
        }
        .into());
    }
    Ok(t.clone().unbind())
}

fn check_callable(f: &Bound<'_, PyAny>, what: &str) -> PyResult<()> {
    if f.is_callable() {
        Ok(())
    } else {
        Err(TreeError::NotCallable {
            what: what.to_owned(),
            type_name: f.get_type().name()?.to_string(),
        }
        .into())
    }
}

/// Registers `cls` as a pytree node with user flatten and unflatten functions.
///
/// `flatten_func(obj)` returns `(children, aux_data)` (JAX) or `(children, aux_data,
/// entries)` (optree); `unflatten_func(aux_data, children)` rebuilds the object. The empty
/// namespace is the global one. Returns `cls`.
///
/// >>> class Pair:
/// ...     def __init__(self, a, b): self.a, self.b = a, b
/// ...     def __repr__(self): return f'Pair({self.a!r}, {self.b!r})'
/// >>> _ = register_pytree_node(
/// ...     Pair, lambda p: ((p.a, p.b), None, ('a', 'b')), lambda _, c: Pair(*c), namespace='doc')
/// >>> tree_flatten(Pair(1, [2]), namespace='doc')
/// ([1, 2], PyTreeSpec(CustomTreeNode(Pair[None], [*, [*]]), namespace='doc'))
/// >>> tree_map(lambda x: x * 10, Pair(1, [2]), namespace='doc')
/// Pair(10, [20])
/// >>> tree_paths(Pair(1, [2]), namespace='doc')
/// [('a',), ('b', 0)]
/// >>> tree_leaves(Pair(1, 2))  # a node only in calls that pass its namespace
/// [Pair(1, 2)]
#[pyfunction]
#[pyo3(
    signature = (cls, /, flatten_func, unflatten_func, *, path_entry_type = None, flatten_with_keys_func = None, namespace = None),
    text_signature = "(cls, /, flatten_func, unflatten_func, *, path_entry_type=None, flatten_with_keys_func=None, namespace='')"
)]
pub fn register_pytree_node<'py>(
    cls: &Bound<'py, PyAny>,
    flatten_func: &Bound<'py, PyAny>,
    unflatten_func: &Bound<'py, PyAny>,
    path_entry_type: Option<&Bound<'py, PyAny>>,
    flatten_with_keys_func: Option<&Bound<'py, PyAny>>,
    namespace: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let namespace = namespace_or_global(cls.py(), namespace);
    let ty = as_type(cls)?;
    check_callable(flatten_func, "flatten_func")?;
    check_callable(unflatten_func, "unflatten_func")?;
    if let Some(f) = flatten_with_keys_func {
        check_callable(f, "flatten_with_keys_func")?;
    }
    let rule = Rule::Custom {
        flatten: flatten_func.clone().unbind(),
        unflatten: unflatten_func.clone().unbind(),
        flatten_with_keys: flatten_with_keys_func.map(|f| f.clone().unbind()),
    };
    insert(ty, rule, &namespace, path_entry_type)?;
    Ok(cls.clone())
}

fn as_type<'a, 'py>(cls: &'a Bound<'py, PyAny>) -> PyResult<&'a Bound<'py, PyType>> {
    cls.cast::<PyType>().map_err(|_| {
        TreeError::NotAClass {
            got: cls.repr().map(|r| r.to_string()).unwrap_or_default(),
        }
        .into()
    })
}

/// Registers a dataclass whose fields were checked by the Python layer.
///
/// `init_names`, when given, are the `__init__` keywords of the data fields then the meta
/// fields, in that order, where they differ from the attribute names (an attrs field `_x`
/// is passed as `x`); by default each field is passed under its own name.
#[pyfunction]
#[pyo3(
    signature = (cls, data_fields, meta_fields, *, call_init = true, path_entry_type = None, namespace = None, init_names = None),
    text_signature = "(cls, data_fields, meta_fields, *, call_init=True, path_entry_type=None, namespace='', init_names=None)"
)]
#[allow(clippy::too_many_arguments)] // one per registration option, all keyword-only
pub fn _register_dataclass_fields<'py>(
    cls: &Bound<'py, PyAny>,
    data_fields: Vec<Bound<'py, PyString>>,
    meta_fields: Vec<Bound<'py, PyString>>,
    call_init: bool,
    path_entry_type: Option<&Bound<'py, PyAny>>,
    namespace: Option<&Bound<'py, PyAny>>,
    init_names: Option<Vec<Bound<'py, PyString>>>,
) -> PyResult<Bound<'py, PyAny>> {
    let namespace = namespace_or_global(cls.py(), namespace);
    let ty = as_type(cls)?;
    let intern = |names: Vec<Bound<'py, PyString>>| -> Vec<Py<PyString>> {
        names
            .into_iter()
            .map(|n| PyString::intern(cls.py(), &n.to_string_lossy()).unbind())
            .collect()
    };
    let (data, meta) = (intern(data_fields), intern(meta_fields));
    let kwnames = match init_names {
        None => PyTuple::new(cls.py(), data.iter().chain(&meta).collect::<Vec<_>>())?,
        Some(names) if names.len() == data.len() + meta.len() => {
            PyTuple::new(cls.py(), intern(names))?
        }
        Some(names) => {
            return Err(TreeError::InitNames {
                expected: data.len() + meta.len(),
                got: names.len(),
            }
            .into());
        }
    }
    .unbind();
    let rule = Rule::Dataclass {
        reads: Rule::field_reads(&data, &meta),
        data,
        meta,
        call_init,
        kwnames,
        keys: None,
    };
    insert(ty, rule, &namespace, path_entry_type)?;
    Ok(cls.clone())
}

/// Attribute names, as `_attribute_fields` returns them.
type AttributeNames<'py> = Vec<Bound<'py, PyString>>;

/// The child and static attribute names of `cls` as registered in `namespace` (or the global
/// namespace), when that registration rebuilds instances attribute by attribute
/// (`register_object`, or a dataclass with `init_on_unflatten=False`); None for any other
/// rule or an unregistered type. `oxtree.jax.register` mirrors such a rule with functions
/// made for those attributes.
#[pyfunction]
#[pyo3(signature = (cls, /, *, namespace = ""))]
pub fn _attribute_fields<'py>(
    cls: &Bound<'py, PyAny>,
    namespace: &str,
) -> PyResult<Option<(AttributeNames<'py>, AttributeNames<'py>)>> {
    let py = cls.py();
    let ty = as_type(cls)?;
    let reg = snapshot();
    let Some(found) = reg.lookup(ty.as_type_ptr(), namespace) else {
        return Ok(None);
    };
    Ok(match &found.rule {
        Rule::Dataclass {
            data,
            meta,
            call_init: false,
            ..
        } => {
            let names = |v: &[Py<PyString>]| v.iter().map(|n| n.bind(py).clone()).collect();
            Some((names(data), names(meta)))
        }
        _ => None,
    })
}

/// Registers `cls` as a static node: no children, the instance itself kept in the treedef.
///
/// >>> class Units:
/// ...     def __init__(self, name): self.name = name
/// ...     def __eq__(self, other): return isinstance(other, Units) and other.name == self.name
/// ...     def __hash__(self): return hash(self.name)
/// >>> _ = register_static(Units)
/// >>> tree_leaves([Units('m'), 1.5])
/// [1.5]
#[pyfunction]
#[pyo3(signature = (cls, /, *, namespace = None), text_signature = "(cls, /, *, namespace='')")]
pub fn register_static<'py>(
    cls: &Bound<'py, PyAny>,
    namespace: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let namespace = namespace_or_global(cls.py(), namespace);
    insert(as_type(cls)?, Rule::Static, &namespace, None)?;
    Ok(cls.clone())
}

/// Removes the registration of `cls` in `namespace`. Treespecs built before keep working.
///
/// >>> class Pair:
/// ...     def __init__(self, a, b): self.a, self.b = a, b
/// >>> _ = register_pytree_node(Pair, lambda p: ((p.a, p.b), None), lambda _, c: Pair(*c))
/// >>> spec = tree_structure(Pair(1, 2))
/// >>> unregister_pytree_node(Pair)
/// >>> len(tree_leaves(Pair(1, 2))), spec.unflatten([3, 4]).b
/// (1, 4)
/// >>> unregister_pytree_node(Pair)
/// Traceback (most recent call last):
/// ...
/// ValueError: PyTree type <class '...Pair'> is not registered in the global namespace.
#[pyfunction]
#[pyo3(signature = (cls, /, *, namespace = None), text_signature = "(cls, /, *, namespace='')")]
pub fn unregister_pytree_node(
    cls: &Bound<'_, PyAny>,
    namespace: Option<&Bound<'_, PyAny>>,
) -> PyResult<()> {
    let ty = as_type(cls)?;
    let namespace = namespace_arg(&namespace_or_global(cls.py(), namespace))?;
    let namespace = namespace.as_str();
    check_registrable(ty, "unregistered")?;
    let key = ty.as_ptr() as usize;
    let removed = update(|r| {
        let found = r.table(namespace).remove(&key);
        if !namespace.is_empty() && r.namespaced.get(namespace).is_some_and(|t| t.is_empty()) {
            r.namespaced.remove(namespace);
        }
        Ok(found)
    })?;
    match removed {
        Some(reg) => {
            let mut guard = RETIRED.lock().unwrap_or_else(|e| e.into_inner());
            let retired = guard.get_or_insert_with(HashMap::new);
            retired.retain(|_, w| w.strong_count() > 0);
            retired.insert((namespace.to_owned(), key), Arc::downgrade(&reg));
            drop(guard);
            // Dropped here, with the GIL held and no lock taken.
            drop(reg);
            Ok(())
        }
        None => {
            // optree's words: namedtuples and struct sequences are nodes without a
            // registration of their own.
            let what = if types::is_structseq_class(ty) {
                "is a class of `PyStructSequence`, which is not explicitly registered"
            } else if types::is_namedtuple_class(ty) {
                "is a subclass of `collections.namedtuple`, which is not explicitly registered"
            } else {
                "is not registered"
            };
            Err(TreeError::NotRegistered {
                cls: ty.repr()?.to_string(),
                what,
                label: namespace_label(cls.py(), namespace)?,
            }
            .into())
        }
    }
}

/// The namespace argument as given, or the global namespace (the empty string) when left out.
fn namespace_or_global<'py>(
    py: Python<'py>,
    namespace: Option<&Bound<'py, PyAny>>,
) -> Bound<'py, PyAny> {
    match namespace {
        Some(n) => n.clone(),
        None => PyString::new(py, "").into_any(),
    }
}

/// The registered node types of a namespace (with the global ones when `namespace` is not
/// empty), for introspection.
///
/// >>> class Pair:
/// ...     def __init__(self, a, b): self.a, self.b = a, b
/// >>> _ = register_pytree_node(
/// ...     Pair, lambda p: ((p.a, p.b), None), lambda _, c: Pair(*c), namespace='doc-types')
/// >>> Pair in registered_types(namespace='doc-types'), Pair in registered_types()
/// (True, False)
#[pyfunction]
#[pyo3(signature = (*, namespace = ""))]
pub fn registered_types(py: Python<'_>, namespace: &str) -> Vec<Py<PyType>> {
    let reg = snapshot();
    let mut out: Vec<Py<PyType>> = reg.global.values().map(|r| r.ty.clone_ref(py)).collect();
    if let Some(t) = reg.namespaced.get(namespace) {
        out.extend(t.values().map(|r| r.ty.clone_ref(py)));
    }
    out
}

/// The number of builtin node types (None, tuple, list, dict, OrderedDict, defaultdict,
/// deque), counted as optree's registry counts them.
const BUILTIN_NODE_TYPES: usize = 7;

/// The number of node types in the registry: the builtin ones and the registered ones of
/// `namespace` (with the global ones), or of every namespace when `namespace` is None.
///
/// >>> get_registry_size() >= get_registry_size(namespace='') >= 7
/// True
#[pyfunction]
#[pyo3(signature = (namespace = None))]
pub fn get_registry_size(namespace: Option<&str>) -> usize {
    let reg = snapshot();
    let registered = match namespace {
        None => reg.global.len() + reg.namespaced.values().map(|t| t.len()).sum::<usize>(),
        Some(ns) => {
            reg.global.len()
                + if ns.is_empty() {
                    0
                } else {
                    reg.namespaced.get(ns).map_or(0, |t| t.len())
                }
        }
    };
    BUILTIN_NODE_TYPES + registered
}

/// Every registration as `(type, namespace, flatten_func, unflatten_func, path_entry_type)`,
/// in registration order: the rows of `oxtree.registry`'s registry view. The functions are None
/// for natively walked dataclasses and static types, `path_entry_type` None when unset.
#[pyfunction]
pub fn _registrations(py: Python<'_>) -> PyResult<Vec<Bound<'_, PyTuple>>> {
    let reg = snapshot();
    let mut regs: Vec<&Arc<Registration>> = reg
        .global
        .values()
        .chain(reg.namespaced.values().flat_map(|t| t.values()))
        .collect();
    regs.sort_by_key(|r| r.serial);
    let mut out = Vec::new();
    for r in regs {
        let none = || py.None();
        let (flatten, unflatten) = match &r.rule {
            Rule::Custom {
                flatten, unflatten, ..
            } => (flatten.clone_ref(py), unflatten.clone_ref(py)),
            _ => (none(), none()),
        };
        let entry = r
            .path_entry_type
            .as_ref()
            .map_or_else(none, |t| t.clone_ref(py));
        out.push(PyTuple::new(
            py,
            [
                r.ty.clone_ref(py).into_any(),
                PyString::new(py, &r.namespace).into_any().unbind(),
                flatten,
                unflatten,
                entry,
            ],
        )?);
    }
    Ok(out)
}

/// Whether dicts are flattened in insertion order in `namespace` (optree's
/// `dict_insertion_ordered` mode), counting the global namespace's mode unless
/// `inherit_global_namespace` is false.
///
/// >>> is_dict_insertion_ordered('')
/// False
#[pyfunction]
#[pyo3(signature = (namespace = "", inherit_global_namespace = true))]
pub fn is_dict_insertion_ordered(namespace: &str, inherit_global_namespace: bool) -> bool {
    let reg = snapshot();
    if inherit_global_namespace {
        reg.dict_insertion_ordered(namespace)
    } else {
        reg.insertion_ordered.contains(namespace)
    }
}

/// Turns optree's `dict_insertion_ordered` mode on or off for `namespace` ("" for every
/// namespace). `oxtree.dict_insertion_ordered` is the context manager over it.
#[pyfunction]
#[pyo3(signature = (mode, /, namespace = ""))]
pub fn set_dict_insertion_ordered(mode: bool, namespace: &str) -> PyResult<()> {
    update(|r| {
        if mode {
            r.insertion_ordered.insert(namespace.to_owned());
        } else {
            r.insertion_ordered.remove(namespace);
        }
        Ok(())
    })
}

/// The children of a registered node: the tuple or list a flatten function returned as is,
/// or a vector of what iterating its result gave.
pub enum Children<'py> {
    Tuple(Bound<'py, PyTuple>),
    List(Bound<'py, pyo3::types::PyList>),
    Vec(Vec<Bound<'py, PyAny>>),
}

impl<'py> Children<'py> {
    pub fn len(&self) -> usize {
        match self {
            Children::Tuple(t) => t.len(),
            Children::List(l) => l.len(),
            Children::Vec(v) => v.len(),
        }
    }

    /// Appends the children to `out`: a tuple's or list's items by one raw copy (measured on
    /// a two-tree map over 1,000 registered nodes: collecting a vector first, then extending,
    /// was 125 instructions per node).
    pub fn append_to(self, out: &mut Vec<Bound<'py, PyAny>>) {
        match self {
            Children::Tuple(t) => {
                if !crate::ffi::extend_with_items(out, t.as_any()) {
                    out.extend(t.iter());
                }
            }
            Children::List(l) => {
                if !crate::ffi::extend_with_items(out, l.as_any()) {
                    out.extend(l.iter());
                }
            }
            Children::Vec(v) => out.extend(v),
        }
    }

    pub fn into_vec(self) -> Vec<Bound<'py, PyAny>> {
        match self {
            Children::Tuple(t) => t.iter().collect(),
            Children::List(l) => l.iter().collect(),
            Children::Vec(v) => v,
        }
    }
}

/// What flattening a registered node gives: children, aux data, and the children's keys
/// when the registration supplies them.
pub type Flattened<'py> = (
    Children<'py>,
    Bound<'py, PyAny>,
    Option<Bound<'py, PyTuple>>,
);

/// The field names of a dataclass node's children, if the rule knows them.
pub fn child_names(reg: &Registration) -> Option<&[Py<pyo3::types::PyString>]> {
    match &reg.rule {
        Rule::Dataclass { data, .. } => Some(data),
        _ => None,
    }
}
