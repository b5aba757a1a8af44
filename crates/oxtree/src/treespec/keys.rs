//! Key paths: the entries that lead from the root to each leaf, in three styles.
//!
//! Each node's child entries are made once and shared by every leaf below them; each leaf's
//! path is one tuple. The walk goes once over the post-order nodes from the root (the last),
//! with an explicit stack of the nodes still open.

use std::cell::RefCell;
use std::thread::LocalKey;

use pyo3::prelude::*;
use pyo3::types::{PyInt, PyList, PyString, PyTuple, PyWeakrefReference};
use smallvec::SmallVec;

use super::{Node, PyTreeSpec};
use crate::key_classes::{DictKey, FlattenedIndexKey, GetAttrKey, SequenceKey};
use crate::kind::Kind;
use crate::types;

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum KeyStyle {
    /// optree's raw paths: indices, dict keys, field names.
    Raw,
    /// JAX's key objects: SequenceKey, DictKey, GetAttrKey, FlattenedIndexKey.
    Keys,
    /// `(raw entry, node type, PyTreeKind)` triples, from which Python builds accessors, with
    /// the registration's `path_entry_type` as a fourth item when it has one.
    Steps,
}

fn field_name<'py>(
    py: Python<'py>,
    node: &Node,
    j: usize,
) -> PyResult<Option<Bound<'py, PyString>>> {
    Ok(match node.kind {
        Kind::NamedTuple | Kind::StructSeq => {
            types::field_name_at(node.kept_data(py), node.kind, j)?
        }
        Kind::Custom => node
            .custom()
            .and_then(|r| crate::registry::child_names(r))
            .and_then(|names| names.get(j))
            .map(|n| n.bind(py).clone()),
        _ => None,
    })
}

/// The raw entry of child `j`: its index, dict key, field name or registered entry.
fn raw_key<'py>(py: Python<'py>, node: &Node, j: usize) -> PyResult<Bound<'py, PyAny>> {
    if let Some(keys) = node.keys() {
        return keys.bind(py).get_item(j);
    }
    if let Some(entries) = node.entries() {
        return entries.bind(py).get_item(j);
    }
    if node.kind == Kind::Custom {
        if let Some(name) = field_name(py, node, j)? {
            return Ok(name.into_any());
        }
    }
    Ok(j.into_pyobject(py)?.into_any())
}

/// How many `SequenceKey`s are made once and shared: keys are immutable, so every path may
/// hold the same `SequenceKey(3)`.
const SHARED_SEQUENCE_KEYS: usize = 1024;

static SEQUENCE_KEYS: pyo3::sync::PyOnceLock<Vec<Py<SequenceKey>>> = pyo3::sync::PyOnceLock::new();

static FLATTENED_INDEX_KEYS: pyo3::sync::PyOnceLock<Vec<Py<FlattenedIndexKey>>> =
    pyo3::sync::PyOnceLock::new();

/// The `FlattenedIndexKey(j)` made once and shared, for `j` below `SHARED_SEQUENCE_KEYS`.
fn shared_flattened_index_keys(py: Python<'_>) -> PyResult<&'static [Py<FlattenedIndexKey>]> {
    let keys = FLATTENED_INDEX_KEYS.get_or_try_init(py, || {
        (0..SHARED_SEQUENCE_KEYS)
            .map(|i| {
                let key = i.into_pyobject(py)?.into_any().unbind();
                Py::new(py, FlattenedIndexKey { key })
            })
            .collect::<PyResult<Vec<_>>>()
    })?;
    Ok(keys)
}

/// `FlattenedIndexKey(j)`, shared for small `j` (the children of registered nodes that name
/// no keys).
fn flattened_index_key(py: Python<'_>, j: usize) -> PyResult<Bound<'_, PyAny>> {
    if let Some(key) = shared_flattened_index_keys(py)?.get(j) {
        return Ok(key.bind(py).clone().into_any());
    }
    let key = j.into_pyobject(py)?.into_any().unbind();
    Ok(Bound::new(py, FlattenedIndexKey { key })?.into_any())
}

/// The `SequenceKey(j)` made once and shared, for `j` below `SHARED_SEQUENCE_KEYS`.
fn shared_sequence_keys(py: Python<'_>) -> PyResult<&'static [Py<SequenceKey>]> {
    let keys = SEQUENCE_KEYS.get_or_try_init(py, || {
        (0..SHARED_SEQUENCE_KEYS)
            .map(|i| Py::new(py, SequenceKey { idx: i as isize }))
            .collect::<PyResult<Vec<_>>>()
    })?;
    Ok(keys)
}

/// `SequenceKey(j)`, shared for small `j`.
fn sequence_key(py: Python<'_>, j: usize) -> PyResult<Bound<'_, PyAny>> {
    if let Some(key) = shared_sequence_keys(py)?.get(j) {
        return Ok(key.bind(py).clone().into_any());
    }
    Ok(Bound::new(py, SequenceKey { idx: j as isize })?.into_any())
}

/// `SequenceKey(j)` for `j` from `SHARED_SEQUENCE_KEYS` on, made when a list that long is
/// first walked with key paths and shared from then on, up to `LONG_SEQUENCE_KEYS_MAX`:
/// making and freeing a key object per item was a third of a 100,000-item list's flatten
/// with key paths (callgrind: 1,336 instructions an item). A few MiB at most, as the dict
/// templates of unflatten keep.
static LONG_SEQUENCE_KEYS: std::sync::Mutex<Vec<Py<SequenceKey>>> =
    std::sync::Mutex::new(Vec::new());

/// The most `SequenceKey`s shared in all (`SHARED_SEQUENCE_KEYS` of them always).
const LONG_SEQUENCE_KEYS_MAX: usize = 131_072;

fn long_sequence_keys() -> std::sync::MutexGuard<'static, Vec<Py<SequenceKey>>> {
    // The vector is valid whatever a panicking holder left: keys are only appended.
    LONG_SEQUENCE_KEYS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Appends `SequenceKey(0)` to `SequenceKey(n - 1)` for a sequence longer than
/// `SHARED_SEQUENCE_KEYS`, shared up to `LONG_SEQUENCE_KEYS_MAX`.
fn push_long_sequence_keys<'py>(py: Python<'py>, n: usize, out: &mut KeyBuf<'py>) -> PyResult<()> {
    let shared = shared_sequence_keys(py)?;
    out.extend(shared.iter().map(|k| k.bind(py).clone().into_any()));
    let want = n.min(LONG_SEQUENCE_KEYS_MAX) - shared.len();
    let have = long_sequence_keys().len();
    if have < want {
        // Made with no lock held: making an object may start a collection, whose finalizers
        // may walk a tree too.
        let made = (shared.len() + have..shared.len() + want)
            .map(|i| Py::new(py, SequenceKey { idx: i as isize }))
            .collect::<PyResult<Vec<_>>>()?;
        let mut keys = long_sequence_keys();
        // Another walk may have grown the vector meanwhile: its keys are the same.
        let extra = if keys.len() == have {
            keys.extend(made);
            Vec::new()
        } else {
            made
        };
        drop(keys);
        drop(extra);
    }
    out.extend(
        long_sequence_keys()
            .iter()
            .take(want)
            .map(|k| k.bind(py).clone().into_any()),
    );
    for j in out.len()..n {
        out.push(Bound::new(py, SequenceKey { idx: j as isize })?.into_any());
    }
    Ok(())
}

/// `keys`, each shared when one is (`j` below `SHARED_SEQUENCE_KEYS`), else made by `make`.
fn push_shared<'py, T>(
    py: Python<'py>,
    shared: &[Py<T>],
    n: usize,
    out: &mut KeyBuf<'py>,
    make: impl Fn(usize) -> PyResult<Bound<'py, PyAny>>,
) -> PyResult<()> {
    for j in 0..n {
        out.push(match shared.get(j) {
            Some(key) => key.bind(py).clone().into_any(),
            None => make(j)?,
        });
    }
    Ok(())
}

/// Whether `obj` is one of the key classes (oxtree's, or JAX's, which share their names).
fn is_key_object(obj: &Bound<'_, PyAny>) -> bool {
    if obj.is_instance_of::<SequenceKey>()
        || obj.is_instance_of::<DictKey>()
        || obj.is_instance_of::<GetAttrKey>()
        || obj.is_instance_of::<FlattenedIndexKey>()
    {
        return true;
    }
    let ty = obj.get_type();
    let module = ty.module().map(|m| m.to_string()).unwrap_or_default();
    let name = ty.name().map(|n| n.to_string()).unwrap_or_default();
    module.starts_with("jax")
        && matches!(
            name.as_str(),
            "SequenceKey" | "DictKey" | "GetAttrKey" | "FlattenedIndexKey"
        )
}

/// Key objects made once and shared, by the address of the str or int they wrap: keys are
/// immutable, so every path may hold the same `DictKey('w')`. Each entry holds its key
/// object (through the key class), so no address is reused while it is cached. Making a key
/// object was most of a key path's cost (276 instructions of a gpt2-like dict's 450 per
/// child); the cache is emptied when it reaches `SHARED_KEYS_MAX` entries. Per thread: a
/// process-wide cache behind a mutex spent most of its lookup on the lock's two atomic
/// operations (perf: 45% of `child_key`).
type KeyCache = LocalKey<RefCell<types::PtrMap<Py<PyAny>>>>;
thread_local! {
    static DICT_KEYS: RefCell<types::PtrMap<Py<PyAny>>> = RefCell::default();
    static ATTR_KEYS: RefCell<types::PtrMap<Py<PyAny>>> = RefCell::default();
    static FLAT_KEYS: RefCell<types::PtrMap<Py<PyAny>>> = RefCell::default();
}

/// `FlattenedIndexKey(entry)` for one of optree's raw entries, shared for str and int ones.
pub fn flattened_key<'py>(
    py: Python<'py>,
    entry: Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    shared_key(py, &FLAT_KEYS, entry, |k| {
        Ok(Bound::new(py, FlattenedIndexKey { key: k.unbind() })?.into_any())
    })
}
const SHARED_KEYS_MAX: usize = 16_384;

fn shared_key<'py>(
    py: Python<'py>,
    cache: &'static KeyCache,
    key: Bound<'py, PyAny>,
    make: impl FnOnce(Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    // Only keys whose value can never change: exact str and int.
    if !(key.is_exact_instance_of::<PyString>() || key.is_exact_instance_of::<PyInt>()) {
        return make(key);
    }
    let addr = key.as_ptr() as usize;
    // No borrow is held while Python code may run (making a key object may start a
    // collection); clearing or replacing entries releases only key objects, str and int.
    if let Some(found) = cache.with(|c| c.borrow().get(&addr).map(|k| k.clone_ref(py))) {
        return Ok(found.into_bound(py));
    }
    let made = make(key)?;
    cache.with(|c| {
        let mut map = c.borrow_mut();
        if map.len() >= SHARED_KEYS_MAX {
            map.clear();
        }
        map.insert(addr, made.clone().unbind());
    });
    Ok(made)
}

/// Whether `node` is of a type registered with JAX's `flatten_with_keys`: its entries are
/// that function's keys.
fn has_flatten_with_keys(node: &Node) -> bool {
    matches!(
        node.custom().map(|reg| &reg.rule),
        Some(crate::registry::Rule::Custom {
            flatten_with_keys: Some(_),
            ..
        })
    )
}

/// The key of child `j` of `node` in the given style.
pub fn child_key<'py>(
    py: Python<'py>,
    node: &Node,
    j: usize,
    style: KeyStyle,
) -> PyResult<Bound<'py, PyAny>> {
    match style {
        KeyStyle::Raw => raw_key(py, node, j),
        KeyStyle::Steps => {
            let ty = node.py_type(py).unwrap_or_else(|| py.None().into_bound(py));
            let kind = node.kind.to_py(py)?;
            let raw = raw_key(py, node, j)?;
            // A registration's own entry class rides along as a fourth item.
            match node.custom().and_then(|r| r.path_entry_type.as_ref()) {
                Some(entry_type) => {
                    let entry_type = entry_type.bind(py).clone();
                    Ok(PyTuple::new(py, [raw, ty, kind, entry_type])?.into_any())
                }
                None => Ok(PyTuple::new(py, [raw, ty, kind])?.into_any()),
            }
        }
        KeyStyle::Keys => {
            // Most children are in tuples and lists, whose keys need no payload lookup.
            if matches!(node.kind, Kind::Tuple | Kind::List | Kind::Deque) {
                return sequence_key(py, j);
            }
            if let Some(keys) = node.keys() {
                let key = keys.bind(py).get_item(j)?;
                return shared_key(py, &DICT_KEYS, key, |k| {
                    Ok(Bound::new(py, DictKey { key: k.unbind() })?.into_any())
                });
            }
            if let Some(entries) = node.entries() {
                // Keys from `flatten_with_keys` as they are, whatever they are (JAX keeps a
                // raw 'x' as 'x'); optree's raw entries (a walk that did not ask for keys)
                // as the FlattenedIndexKey a keyed walk makes.
                let entry = entries.bind(py).get_item(j)?;
                if is_key_object(&entry) || has_flatten_with_keys(node) {
                    return Ok(entry);
                }
                return flattened_key(py, entry);
            }
            if let Some(crate::registry::Rule::Dataclass {
                keys: Some(keys), ..
            }) = node.custom().map(|reg| &reg.rule)
            {
                if let Some(key) = keys.get(j) {
                    return Ok(key.bind(py).clone());
                }
            }
            if let Some(name) = field_name(py, node, j)? {
                return shared_key(py, &ATTR_KEYS, name.into_any(), |n| {
                    let name = n.cast_into::<PyString>()?.unbind();
                    Ok(Bound::new(py, GetAttrKey { name })?.into_any())
                });
            }
            if node.kind == Kind::Custom {
                return flattened_index_key(py, j);
            }
            sequence_key(py, j)
        }
    }
}

/// The keys of all children of `node`, left to right.
pub fn node_keys<'py>(
    py: Python<'py>,
    node: &Node,
    style: KeyStyle,
) -> PyResult<Vec<Bound<'py, PyAny>>> {
    let mut keys = KeyBuf::with_capacity(node.arity);
    push_node_keys(py, node, style, &mut keys, &mut FieldKeys::default())?;
    Ok(keys)
}

/// Keys on their way into paths.
type KeyBuf<'py> = Vec<Bound<'py, PyAny>>;

/// The keys of the last node whose children are named fields, by the identity of what names
/// them (a namedtuple's type, a registered dataclass's name list, both held by the treespec
/// for the walk): nodes of one class come in runs, as in a list of dataclasses, whose keys
/// were then looked up in the key cache per node (95 instructions a key).
#[derive(Default)]
struct FieldKeys<'py> {
    id: usize,
    keys: SmallVec<[Bound<'py, PyAny>; 4]>,
}

/// Appends the keys of all children of `node` to `out`, left to right: what `child_key`
/// gives for each, with what every child shares (the shared key vector, a namedtuple's
/// `_fields`, a key cache's borrow) looked up once per node. Per child, `child_key` spent
/// most of a key path's key making there (callgrind, a 1,000-leaf mixed tree: 129
/// instructions a key, 250 for a namedtuple field).
fn push_node_keys<'py>(
    py: Python<'py>,
    node: &Node,
    style: KeyStyle,
    out: &mut KeyBuf<'py>,
    last: &mut FieldKeys<'py>,
) -> PyResult<()> {
    let n = node.arity;
    out.reserve(n);
    let sequence = matches!(node.kind, Kind::Tuple | Kind::List | Kind::Deque);
    match style {
        KeyStyle::Keys if sequence => {
            let shared = shared_sequence_keys(py)?;
            if n > shared.len() {
                return push_long_sequence_keys(py, n, out);
            }
            return push_shared(py, shared, n, out, |j| sequence_key(py, j));
        }
        // optree's raw entries name only registered nodes' children: the rest are indices.
        KeyStyle::Raw
            if node.kind != Kind::Custom && node.keys().is_none() && node.entries().is_none() =>
        {
            for j in 0..n {
                out.push(j.into_pyobject(py)?.into_any());
            }
            return Ok(());
        }
        KeyStyle::Steps => return push_each_key(py, node, style, out),
        _ => {}
    }
    if let Some(keys) = node.keys() {
        let keys = keys.bind(py);
        if keys.len() != n {
            return push_each_key(py, node, style, out);
        }
        let base = out.len();
        out.extend(keys.iter());
        if style == KeyStyle::Keys {
            share_keys(py, &DICT_KEYS, &mut out[base..], |k| {
                Ok(Bound::new(py, DictKey { key: k.unbind() })?.into_any())
            })?;
        }
        return Ok(());
    }
    if node.entries().is_some() {
        return push_each_key(py, node, style, out);
    }
    if style == KeyStyle::Keys {
        if let Some(crate::registry::Rule::Dataclass { keys: Some(_), .. }) =
            node.custom().map(|reg| &reg.rule)
        {
            return push_each_key(py, node, style, out);
        }
    }
    let id = field_names_id(py, node);
    if id != 0 && last.id == id && last.keys.len() == n {
        out.extend(last.keys.iter().cloned());
        return Ok(());
    }
    let base = out.len();
    if !push_field_names(py, node, out)? {
        out.truncate(base);
        if style == KeyStyle::Keys
            && node.kind == Kind::Custom
            && node
                .custom()
                .and_then(|r| crate::registry::child_names(r))
                .is_none()
        {
            let shared = shared_flattened_index_keys(py)?;
            return push_shared(py, shared, n, out, |j| flattened_index_key(py, j));
        }
        return push_each_key(py, node, style, out);
    }
    if style == KeyStyle::Keys {
        share_keys(py, &ATTR_KEYS, &mut out[base..], |n| {
            let name = n.cast_into::<PyString>()?.unbind();
            Ok(Bound::new(py, GetAttrKey { name })?.into_any())
        })?;
    }
    if id != 0 {
        last.id = id;
        last.keys = out[base..].iter().cloned().collect();
    }
    Ok(())
}

/// What names the children of a namedtuple or registered dataclass node (see `FieldKeys`),
/// as an address; 0 for other nodes.
fn field_names_id(py: Python<'_>, node: &Node) -> usize {
    match node.kind {
        Kind::NamedTuple => node.kept_data(py).as_ptr() as usize,
        Kind::Custom => node
            .custom()
            .and_then(|r| crate::registry::child_names(r))
            .map_or(0, |names| names.as_ptr() as usize),
        _ => 0,
    }
}

/// `child_key` for each child of `node`, left to right.
fn push_each_key<'py>(
    py: Python<'py>,
    node: &Node,
    style: KeyStyle,
    out: &mut KeyBuf<'py>,
) -> PyResult<()> {
    for j in 0..node.arity {
        out.push(child_key(py, node, j, style)?);
    }
    Ok(())
}

/// Appends the field names of all children of a namedtuple, struct sequence or registered
/// dataclass node, as `field_name` gives them; false (with some pushed) when a child has
/// none or the node is of another kind, for the caller to fall back on `child_key`.
fn push_field_names<'py>(py: Python<'py>, node: &Node, out: &mut KeyBuf<'py>) -> PyResult<bool> {
    let n = node.arity;
    match node.kind {
        Kind::NamedTuple => {
            // `_fields` read once, where `field_name_at` reads it per child.
            let fields = node.kept_data(py).getattr(pyo3::intern!(py, "_fields"))?;
            let Ok(fields) = fields.cast::<PyTuple>() else {
                return Ok(false);
            };
            if fields.len() < n {
                return Ok(false);
            }
            for name in fields.iter().take(n) {
                if !name.is_instance_of::<PyString>() {
                    return Ok(false);
                }
                out.push(name);
            }
            Ok(true)
        }
        Kind::Custom => {
            let Some(names) = node.custom().and_then(|r| crate::registry::child_names(r)) else {
                return Ok(false);
            };
            if names.len() < n {
                return Ok(false);
            }
            out.extend(
                names[..n]
                    .iter()
                    .map(|name| name.bind(py).clone().into_any()),
            );
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// Replaces each of `keys` (str or int entries) by its shared key object from `cache`,
/// made by `make` when missing, as `shared_key` does one at a time: the cache is borrowed
/// once for the found ones.
fn share_keys<'py>(
    py: Python<'py>,
    cache: &'static KeyCache,
    keys: &mut [Bound<'py, PyAny>],
    make: impl Fn(Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>>,
) -> PyResult<()> {
    let mut missing: SmallVec<[usize; 8]> = SmallVec::new();
    cache.with(|c| {
        let map = c.borrow();
        for (i, key) in keys.iter_mut().enumerate() {
            let cacheable =
                key.is_exact_instance_of::<PyString>() || key.is_exact_instance_of::<PyInt>();
            match map.get(&(key.as_ptr() as usize)) {
                Some(found) if cacheable => *key = found.bind(py).clone(),
                _ => missing.push(i),
            }
        }
    });
    // No borrow is held while a key object is made (that may run Python code).
    for i in missing {
        keys[i] = shared_key(py, cache, keys[i].clone(), &make)?;
    }
    Ok(())
}

/// The most leaves of a tuple or list whose leaves' paths are made once and shared.
const SHARED_PATHS_MAX: usize = 16;

/// `(j,)` and `(SequenceKey(j),)` for `j` up to `SHARED_PATHS_MAX`, by style (Raw, Keys).
static SEQUENCE_PATHS: [pyo3::sync::PyOnceLock<Vec<Py<PyTuple>>>; 2] =
    [const { pyo3::sync::PyOnceLock::new() }; 2];

/// The paths of the leaves of a tuple or list of `n` leaves, shared tuples (paths are
/// immutable); None when `n` or the style has none.
pub fn shared_sequence_paths(
    py: Python<'_>,
    n: usize,
    style: KeyStyle,
) -> PyResult<Option<&'static [Py<PyTuple>]>> {
    let slot = match style {
        KeyStyle::Raw => 0,
        KeyStyle::Keys => 1,
        KeyStyle::Steps => return Ok(None),
    };
    if n > SHARED_PATHS_MAX {
        return Ok(None);
    }
    let paths = SEQUENCE_PATHS[slot].get_or_try_init(py, || {
        let node = Node::bare(Kind::Tuple, SHARED_PATHS_MAX, SHARED_PATHS_MAX, 0);
        node_keys(py, &node, style)?
            .into_iter()
            .map(|key| Ok(PyTuple::new(py, [key])?.unbind()))
            .collect::<PyResult<Vec<_>>>()
    })?;
    Ok(Some(&paths[..n]))
}

/// The path of every leaf of `spec`, left to right.
///
/// The nodes are in post-order, so walking them from the last (the root) to the first visits
/// each node before its children and the children right to left: one pass over the node
/// list, with a stack of the nodes still open (each with the count of its children still to
/// come) beside the prefix of keys, and the paths made right to left. Opening a node pushes
/// the keys of all its children at once (`push_node_keys`); each child then moves its key
/// from there onto the prefix.
pub fn leaf_paths<'py>(
    spec: &PyTreeSpec,
    py: Python<'py>,
    style: KeyStyle,
) -> PyResult<Vec<Bound<'py, PyTuple>>> {
    let mut out = Vec::with_capacity(spec.num_leaves());
    // This thread's spare buffers (free once a flatten is done: a nested call finds them
    // taken and allocates), not small vectors on the native stack: on a 1,000-leaf mixed tree
    // the small vectors' inline-or-heap test on every push and pop was a fifth of the walk,
    // and fresh vectors cost a 10-key dict's paths 380 instructions (callgrind).
    let mut prefix = crate::spare::take(crate::spare::Slot::Values, 16);
    let mut open: Vec<usize> = Vec::with_capacity(32);
    // The keys of the children still to come of the open nodes, each node's last child's
    // key on top.
    let mut waiting = crate::spare::take(crate::spare::Slot::Pending, 32);
    let mut last = FieldKeys::default();
    for node in spec.nodes.iter().rev() {
        if let Some(left) = open.last_mut() {
            *left -= 1;
            let key = waiting
                .pop()
                .ok_or_else(|| crate::internal!("a child without its key"))?;
            prefix.push(key);
        }
        if node.kind == Kind::Leaf {
            out.push(crate::ffi::tuple_of(py, &prefix)?);
        } else if node.arity > 0 {
            push_node_keys(py, node, style, &mut waiting, &mut last)?;
            open.push(node.arity);
            continue;
        }
        // The node is done: drop its key, and close each open node whose last child it was.
        while let Some(&left) = open.last() {
            prefix.pop();
            if left > 0 {
                break;
            }
            open.pop();
        }
    }
    crate::spare::give_back(crate::spare::Slot::Values, prefix);
    crate::spare::give_back(crate::spare::Slot::Pending, waiting);
    out.reverse();
    Ok(out)
}

/// The most leaves of a tree whose paths are kept for the next walk (as the kept treespec
/// of a leaf sequence: a few MiB of one-key tuples at most).
const KEPT_PATHS_MAX: usize = 1 << 17;

/// How many trees' paths each thread keeps, filed by their node and leaf counts.
const KEPT_PATHS_SLOTS: usize = 4;

/// The leaf paths of a tree walked on this thread, with what they depend on, node by node
/// in post-order: its kind, its arity and what names its children (a dict's key list, held;
/// a weak reference to a namedtuple's or struct sequence's type). A loop that flattens
/// trees of one shape with paths (a training step's parameters) gets the same path tuples
/// back, which are immutable, instead of making a tuple per leaf and its keys each time,
/// and freeing them: a 1,000-leaf mixed tree's flatten with key paths went from 1.07M
/// instructions to 0.62M, a gpt2-like dict's from 439k to 286k (callgrind). Only trees that
/// hold no user object through their paths are kept (dict keys exact str or int, types weakly, registered nodes
/// by their registration's serial number and only when their flatten function gave no
/// keys), so that keeping them keeps no user object alive.
struct KeptPaths {
    style: KeyStyle,
    nodes: Vec<KeptNode>,
    paths: Vec<Py<PyTuple>>,
}

/// A node of a kept tree: its kind, its arity and what names its children (`names_to_keep`).
struct KeptNode {
    kind: Kind,
    arity: usize,
    names: Names,
}

/// What names the children of a node of a kept tree.
enum Names {
    /// Positions: tuples, lists, deques (and leaves and None, which have no children).
    Positions,
    /// A dict's key list (exact str and int keys).
    Keys(Py<PyList>),
    /// A weak reference to a namedtuple's or struct sequence's type.
    Fields(Py<PyWeakrefReference>),
    /// A registered node's registration, by its serial number (unique to it, so no
    /// registration need be held), when its flatten function gave no keys of its own.
    Registration(u64),
}

thread_local! {
    static KEPT_PATHS: RefCell<[Option<KeptPaths>; KEPT_PATHS_SLOTS]> =
        const { RefCell::new([const { None }; KEPT_PATHS_SLOTS]) };
}

fn kept_paths_slot(spec: &PyTreeSpec, style: KeyStyle) -> usize {
    let h = (spec.nodes.len() as u64)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(spec.num_leaves() as u64)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(style as u64);
    (h >> 32) as usize % KEPT_PATHS_SLOTS
}

/// What names the children of `node`, as a kept tree holds it (`KeptPaths`); None for a
/// node whose tree is not kept (one that would keep a user object alive).
fn names_to_keep(py: Python<'_>, node: &Node) -> Option<Names> {
    Some(match node.kind {
        Kind::Leaf | Kind::None | Kind::Tuple | Kind::List | Kind::Deque => Names::Positions,
        k if k.is_mapping() => {
            let keys = node.keys().as_ref()?;
            let plain = keys
                .bind(py)
                .iter()
                .all(|k| k.is_exact_instance_of::<PyString>() || k.is_exact_instance_of::<PyInt>());
            if !plain {
                return None;
            }
            Names::Keys(keys.clone_ref(py))
        }
        Kind::NamedTuple | Kind::StructSeq => {
            let ty = node.data.as_ref()?;
            Names::Fields(PyWeakrefReference::new(ty.bind(py)).ok()?.unbind())
        }
        Kind::Custom if node.entries().is_none() => Names::Registration(node.custom()?.serial),
        _ => return None,
    })
}

impl KeptNode {
    /// Whether `node` has this kind and arity and names its children the same way.
    fn fits(&self, py: Python<'_>, node: &Node) -> bool {
        use pyo3::types::PyWeakrefMethods;
        if node.kind != self.kind || node.arity != self.arity {
            return false;
        }
        match &self.names {
            Names::Positions => true,
            Names::Keys(kept) => {
                let Some(keys) = node.keys() else {
                    return false;
                };
                if keys.is(kept) {
                    return true;
                }
                // The same key objects in the same order (the kept list holds its own, so
                // no address has been reused).
                let (keys, kept) = (keys.bind(py), kept.bind(py));
                keys.len() == kept.len() && keys.iter().zip(kept.iter()).all(|(a, b)| a.is(&b))
            }
            Names::Fields(weak) => match &node.data {
                Some(ty) => weak.bind(py).upgrade().is_some_and(|t| t.is(ty)),
                None => false,
            },
            Names::Registration(serial) => {
                node.entries().is_none() && node.custom().is_some_and(|r| r.serial == *serial)
            }
        }
    }
}

impl KeptPaths {
    /// Whether these are the paths of `spec`'s leaves in `style`.
    fn fits(&self, py: Python<'_>, spec: &PyTreeSpec, style: KeyStyle) -> bool {
        self.style == style
            && self.nodes.len() == spec.nodes.len()
            && self.paths.len() == spec.num_leaves()
            && spec
                .nodes
                .iter()
                .zip(&self.nodes)
                .all(|(node, kept)| kept.fits(py, node))
    }

    /// What a kept tree holds of `spec`'s nodes, None when it may not be kept.
    fn nodes_of(py: Python<'_>, spec: &PyTreeSpec) -> Option<Vec<KeptNode>> {
        spec.nodes
            .iter()
            .map(|node| {
                Some(KeptNode {
                    kind: node.kind,
                    arity: node.arity,
                    names: names_to_keep(py, node)?,
                })
            })
            .collect()
    }
}

/// Puts `entry` in slot `slot` of this thread's kept paths, unless a walk that ran meanwhile
/// filled it (its entry is as good).
fn put_back_paths(slot: usize, entry: Option<KeptPaths>) {
    let unused = KEPT_PATHS.with(|kept| {
        let mut kept = kept.borrow_mut();
        if kept[slot].is_none() {
            kept[slot] = entry;
            None
        } else {
            entry
        }
    });
    // Released with the cache no longer borrowed.
    drop(unused);
}

/// Calls `f` with the path of every leaf of `spec`, left to right: the paths of the last
/// tree of the same shape walked on this thread (`KeptPaths`), or new ones, kept for the
/// next walk when the tree may be kept.
pub fn with_leaf_paths<R>(
    spec: &PyTreeSpec,
    py: Python<'_>,
    style: KeyStyle,
    f: impl FnOnce(&[Py<PyTuple>]) -> PyResult<R>,
) -> PyResult<R> {
    let fresh = |spec| -> PyResult<Vec<Py<PyTuple>>> {
        Ok(leaf_paths(spec, py, style)?
            .into_iter()
            .map(Bound::unbind)
            .collect())
    };
    if style == KeyStyle::Steps || spec.num_leaves() > KEPT_PATHS_MAX {
        return f(&fresh(spec)?);
    }
    let slot = kept_paths_slot(spec, style);
    // The entry is out of its slot while it is used: `f` may run Python code (making a tuple
    // may start a collection, whose finalizers may walk trees too), and a walk meanwhile
    // finds the slot empty. Comparing reads pointers and weak references only.
    let taken = KEPT_PATHS.with(|kept| kept.borrow_mut()[slot].take());
    if let Some(entry) = &taken {
        if entry.fits(py, spec, style) {
            let result = f(&entry.paths);
            put_back_paths(slot, taken);
            return result;
        }
    }
    let paths = match fresh(spec) {
        Ok(paths) => paths,
        Err(e) => {
            put_back_paths(slot, taken);
            return Err(e);
        }
    };
    let Some(nodes) = KeptPaths::nodes_of(py, spec) else {
        put_back_paths(slot, taken);
        return f(&paths);
    };
    let entry = KeptPaths {
        style,
        nodes,
        paths,
    };
    let result = f(&entry.paths);
    // The entry of another shape gives way.
    drop(taken);
    put_back_paths(slot, Some(entry));
    result
}
