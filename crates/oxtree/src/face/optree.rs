//! The functions `oxtree` exports: each crosses the Python/Rust boundary once.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

use crate::errors::{type_name, Invariant, TreeError};
use crate::registry;
use crate::treespec::flatten::{self, Class, Flat, Options, Walked};
use crate::treespec::keys::{self, KeyStyle};
use crate::treespec::{Face, PyTreeSpec};

/// A list that takes over the references in `items`.
pub fn list_from_vec<'py>(py: Python<'py>, items: Vec<Bound<'py, PyAny>>) -> Bound<'py, PyList> {
    crate::treespec::unflatten_list(py, items)
}

pub fn check_is_leaf(is_leaf: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
    match is_leaf {
        Some(f) if !f.is_callable() => Err(TreeError::Type(format!(
            "is_leaf must be a callable or None, got {}",
            type_name(f)
        ))
        .into()),
        _ => Ok(()),
    }
}

fn namespace_of(flat_namespaced: bool, namespace: &str) -> String {
    if flat_namespaced {
        namespace.to_owned()
    } else {
        String::new()
    }
}

/// The treespec a walk produced (its nodes and the registrations they point to), with the
/// options it was made under.
pub fn spec_of(
    flat_nodes: Vec<crate::treespec::Node>,
    registrations: Vec<std::sync::Arc<registry::Registration>>,
    namespaced: bool,
    opts: &Options<'_, '_>,
) -> PyTreeSpec {
    PyTreeSpec::from_walk(
        flat_nodes,
        registrations,
        opts.none_is_leaf,
        namespace_of(namespaced, opts.namespace),
    )
    .with_face(opts.face)
}

/// `(leaves, treespec)` under `opts`.
pub fn flatten_impl<'py>(
    tree: &Bound<'py, PyAny>,
    opts: &Options<'_, 'py>,
) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyTreeSpec>)> {
    check_is_leaf(opts.is_leaf)?;
    let walked =
        registry::with_registry(|reg| flatten::flatten_or_sequence::<true, true>(tree, opts, reg))?;
    Ok(match walked {
        Walked::Sequence(kind, n) => (
            items_list(tree)?,
            flat_spec(tree.py(), &mut Flat::leaf_sequence(kind, n), opts)?,
        ),
        Walked::Flat(mut flat) => {
            let spec = flat_spec(tree.py(), &mut flat, opts)?;
            (list_from_vec(tree.py(), flat.leaves), spec)
        }
    })
}

/// The treespec of a walk as a Python object (see `spec_into_py`), taking the walk's nodes
/// and registrations and leaving its leaves.
pub fn flat_spec<'py>(
    py: Python<'py>,
    flat: &mut Flat<'py>,
    opts: &Options<'_, 'py>,
) -> PyResult<Bound<'py, PyTreeSpec>> {
    let spec = spec_of(
        std::mem::take(&mut flat.nodes),
        std::mem::take(&mut flat.registrations),
        flat.namespaced,
        opts,
    );
    spec_into_py(py, spec, flat.acyclic)
}

/// A new list of the items of an exact tuple or list (a `Walked::Sequence` tree).
fn items_list<'py>(seq: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
    if let Ok(list) = seq.cast::<PyList>() {
        return crate::ffi::list_copy(list);
    }
    match seq.cast::<PyTuple>() {
        Ok(tuple) => crate::ffi::list_from(seq.py(), tuple.iter()),
        Err(_) => Err(crate::internal!("a leaf sequence that is no tuple or list")),
    }
}

/// The treespec as a Python object, untracked by the collector when it holds nothing that
/// could be part of a cycle (most treespecs: leaves, tuples, lists, dicts with str keys).
/// Measured on a gpt2-like dict flatten: the collector's passes over young treespecs were a
/// tenth of the time.
pub fn spec_into_py(
    py: Python<'_>,
    spec: PyTreeSpec,
    acyclic: bool,
) -> PyResult<Bound<'_, PyTreeSpec>> {
    Ok(untracked_if(Bound::new(py, spec)?, acyclic))
}

/// A new immutable object (treespec, graphdef), untracked by the collector when `acyclic`
/// says nothing it holds could be part of a cycle.
pub fn untracked_if<T>(obj: Bound<'_, T>, acyclic: bool) -> Bound<'_, T> {
    if acyclic {
        // Nothing it holds can reach it back.
        crate::ffi::untrack(&obj);
    }
    obj
}

/// The leaves under `opts`.
pub fn leaves_impl<'py>(
    tree: &Bound<'py, PyAny>,
    opts: &Options<'_, 'py>,
) -> PyResult<Bound<'py, PyList>> {
    check_is_leaf(opts.is_leaf)?;
    let walked = registry::with_registry(|reg| {
        flatten::flatten_or_sequence::<false, true>(tree, opts, reg)
    })?;
    Ok(match walked {
        Walked::Sequence(..) => items_list(tree)?,
        Walked::Flat(flat) => list_from_vec(tree.py(), flat.leaves),
    })
}

/// The treespec under `opts`.
pub fn structure_impl<'py>(
    tree: &Bound<'py, PyAny>,
    opts: &Options<'_, 'py>,
) -> PyResult<Bound<'py, PyTreeSpec>> {
    check_is_leaf(opts.is_leaf)?;
    let walked = registry::with_registry(|reg| {
        flatten::flatten_or_sequence::<true, false>(tree, opts, reg)
    })?;
    let mut flat = match walked {
        Walked::Sequence(kind, n) => Flat::leaf_sequence(kind, n),
        Walked::Flat(flat) => flat,
    };
    flat_spec(tree.py(), &mut flat, opts)
}

/// `tree_unflatten(treespec, leaves)` with a clear error for a non-treespec.
pub fn unflatten_impl<'py>(
    treespec: &Bound<'py, PyAny>,
    leaves: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let spec = treespec.cast::<PyTreeSpec>().map_err(|_| {
        TreeError::Type(format!(
            "tree_unflatten expects a treespec as its first argument, got {}",
            type_name(treespec)
        ))
    })?;
    crate::treespec::unflatten_iterable(spec.get(), leaves)
}

/// `tree_map` under `opts`; with `keep_results == false` (`tree_map_`) nothing is rebuilt.
pub fn map_impl<'py>(
    func: &Bound<'py, PyAny>,
    tree: &Bound<'py, PyAny>,
    rests: &Bound<'py, PyTuple>,
    opts: &Options<'_, 'py>,
    keep_results: bool,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let py = tree.py();
    if !func.is_callable() {
        return Err(
            TreeError::Type(format!("func must be callable, got {}", type_name(func))).into(),
        );
    }
    check_is_leaf(opts.is_leaf)?;
    let flat = registry::with_registry(|reg| flatten::flatten_opts::<true, true>(tree, opts, reg))?;
    let spec = spec_of(flat.nodes, flat.registrations, flat.namespaced, opts);
    let mut results = Vec::with_capacity(if keep_results { flat.leaves.len() } else { 0 });
    if rests.is_empty() {
        for leaf in &flat.leaves {
            let r = func.call1((leaf,))?;
            if keep_results {
                results.push(r);
            }
        }
    } else {
        let others = registry::with_registry(|reg| {
            flatten_rests(&spec, tree, rests, opts, "tree_map", reg)
        })?;
        for (i, leaf) in flat.leaves.iter().enumerate() {
            let r = if let [other] = others.as_slice() {
                func.call1((leaf, &other[i]))?
            } else {
                let mut args = Vec::with_capacity(others.len() + 1);
                args.push(leaf.clone());
                args.extend(others.iter().map(|o| o[i].clone()));
                func.call1(crate::treespec::tuple_from_vec(py, args)?)?
            };
            if keep_results {
                results.push(r);
            }
        }
    }
    if keep_results {
        Ok(Some(crate::treespec::build(py, &spec, results)?))
    } else {
        Ok(None)
    }
}

/// Each of `rests` flattened up to `spec`, the treespec of `tree`; errors naming which one
/// differs. On the JAX face a mismatch is described as JAX's `tree_map` does: the first prefix
/// error of `tree` against that tree, naming the prefix `{caller} tree`.
fn flatten_rests<'py>(
    spec: &PyTreeSpec,
    tree: &Bound<'py, PyAny>,
    rests: &Bound<'py, PyTuple>,
    opts: &Options<'_, 'py>,
    caller: &str,
    reg: &registry::Registry,
) -> PyResult<Vec<Vec<Bound<'py, PyAny>>>> {
    let mut others = Vec::with_capacity(rests.len());
    for (i, rest) in rests.iter().enumerate() {
        let which = format!("rests[{i}]");
        match crate::treespec::flatten_up_to(spec, &rest, reg, Some(&which)) {
            Ok(found) => others.push(found),
            Err(err) if spec.face == Face::Jax && err.is_instance_of::<PyValueError>(tree.py()) => {
                let errors = crate::treespec::prefix::prefix_errors(tree, &rest, opts, reg)?;
                return Err(match errors.first() {
                    Some(first) => PyValueError::new_err(first.render(&format!("{caller} tree"))),
                    None => err,
                });
            }
            Err(err) => return Err(err),
        }
    }
    Ok(others)
}

/// Whether `tree` is a single leaf under these options.
pub fn is_leaf_impl(
    tree: &Bound<'_, PyAny>,
    is_leaf: Option<&Bound<'_, PyAny>>,
    none_is_leaf: bool,
    namespace: &str,
    face: Face,
) -> PyResult<bool> {
    check_is_leaf(is_leaf)?;
    if let Some(f) = is_leaf {
        if f.call1((tree,))?.is_truthy()? {
            return Ok(true);
        }
    }
    Ok(registry::with_registry(|reg| {
        matches!(
            flatten::classify(tree, none_is_leaf, reg, namespace, face),
            Class::Leaf
        )
    }))
}

/// Whether every item of `iterable` is a leaf.
pub fn all_leaves_impl(
    iterable: &Bound<'_, PyAny>,
    is_leaf: Option<&Bound<'_, PyAny>>,
    none_is_leaf: bool,
    namespace: &str,
    face: Face,
) -> PyResult<bool> {
    check_is_leaf(is_leaf)?;
    for item in iterable.try_iter()? {
        if !is_leaf_impl(&item?, is_leaf, none_is_leaf, namespace, face)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Each leaf's path, the leaves, and the treespec.
type WithPaths<'py> = (Vec<Bound<'py, PyTuple>>, Vec<Bound<'py, PyAny>>, PyTreeSpec);

/// Flattens with key paths in the given style: (paths, leaves, treespec).
pub fn paths_impl<'py>(
    tree: &Bound<'py, PyAny>,
    opts: &Options<'_, 'py>,
    style: KeyStyle,
) -> PyResult<WithPaths<'py>> {
    check_is_leaf(opts.is_leaf)?;
    let opts = Options {
        with_keys: style == KeyStyle::Keys,
        ..*opts
    };
    let flat =
        registry::with_registry(|reg| flatten::flatten_opts::<true, true>(tree, &opts, reg))?;
    let spec = spec_of(flat.nodes, flat.registrations, flat.namespaced, &opts);
    let paths = keys::leaf_paths(&spec, tree.py(), style)?;
    Ok((paths, flat.leaves, spec))
}

fn tuples_to_list<'py>(py: Python<'py>, items: Vec<Bound<'py, PyTuple>>) -> Bound<'py, PyList> {
    list_from_vec(py, items.into_iter().map(Bound::into_any).collect())
}

/// JAX-style `([(key_path, leaf), ...], treespec)` under `opts`.
pub fn keyed_pairs_impl<'py>(
    tree: &Bound<'py, PyAny>,
    opts: &Options<'_, 'py>,
) -> PyResult<(Bound<'py, PyList>, PyTreeSpec)> {
    let py = tree.py();
    let (paths, leaves, spec) = paths_impl(tree, opts, KeyStyle::Keys)?;
    let pairs: Vec<Bound<'py, PyAny>> = paths
        .into_iter()
        .zip(leaves)
        .map(|(p, l)| crate::treespec::tuple_pair(py, p.into_any(), l).map(Bound::into_any))
        .collect::<PyResult<_>>()?;
    Ok((list_from_vec(py, pairs), spec))
}

/// Maps `func(path, leaf, *others)` over a tree, with paths in the given style.
pub fn map_with_paths_impl<'py>(
    func: &Bound<'py, PyAny>,
    tree: &Bound<'py, PyAny>,
    rests: &Bound<'py, PyTuple>,
    opts: &Options<'_, 'py>,
    style: KeyStyle,
) -> PyResult<Bound<'py, PyAny>> {
    let py = tree.py();
    if !func.is_callable() {
        return Err(
            TreeError::Type(format!("func must be callable, got {}", type_name(func))).into(),
        );
    }
    let (paths, leaves, spec) = paths_impl(tree, opts, style)?;
    let others = registry::with_registry(|reg| {
        flatten_rests(&spec, tree, rests, opts, "tree_map_with_path", reg)
    })?;
    let mut results = Vec::with_capacity(leaves.len());
    for (i, (path, leaf)) in paths.into_iter().zip(leaves).enumerate() {
        let r = if others.is_empty() {
            func.call1((path, leaf))?
        } else {
            let mut args = Vec::with_capacity(others.len() + 2);
            args.push(path.into_any());
            args.push(leaf);
            args.extend(others.iter().map(|o| o[i].clone()));
            func.call1(crate::treespec::tuple_from_vec(py, args)?)?
        };
        results.push(r);
    }
    crate::treespec::build(py, &spec, results)
}

/// Flattens a tree into its leaves (dicts in sorted key order) and its structure.
///
/// >>> leaves, spec = tree_flatten([1, {'b': 2, 'a': (3, None)}])
/// >>> leaves
/// [1, 3, 2]
/// >>> spec
/// PyTreeSpec([*, {'a': (*, None), 'b': *}])
#[pyfunction]
#[pyo3(signature = (tree, /, is_leaf = None, *, none_is_leaf = false, namespace = ""))]
pub fn tree_flatten<'py>(
    tree: &Bound<'py, PyAny>,
    is_leaf: Option<&Bound<'py, PyAny>>,
    none_is_leaf: bool,
    namespace: &str,
) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyTreeSpec>)> {
    flatten_impl(tree, &Options::new(is_leaf, none_is_leaf, namespace))
}

/// The leaves of a tree, left to right (dicts in sorted key order).
///
/// >>> tree_leaves({'b': 2, 'a': [1, None]})
/// [1, 2]
#[pyfunction]
#[pyo3(signature = (tree, /, is_leaf = None, *, none_is_leaf = false, namespace = ""))]
pub fn tree_leaves<'py>(
    tree: &Bound<'py, PyAny>,
    is_leaf: Option<&Bound<'py, PyAny>>,
    none_is_leaf: bool,
    namespace: &str,
) -> PyResult<Bound<'py, PyList>> {
    leaves_impl(tree, &Options::new(is_leaf, none_is_leaf, namespace))
}

/// The structure of a tree, without its leaves.
///
/// >>> tree_structure((1, [2, None]))
/// PyTreeSpec((*, [*, None]))
#[pyfunction]
#[pyo3(signature = (tree, /, is_leaf = None, *, none_is_leaf = false, namespace = ""))]
pub fn tree_structure<'py>(
    tree: &Bound<'py, PyAny>,
    is_leaf: Option<&Bound<'py, PyAny>>,
    none_is_leaf: bool,
    namespace: &str,
) -> PyResult<Bound<'py, PyTreeSpec>> {
    structure_impl(tree, &Options::new(is_leaf, none_is_leaf, namespace))
}

/// Rebuilds a tree from a treespec and an iterable of leaves.
///
/// >>> spec = tree_structure({'b': 0, 'a': 0})
/// >>> tree_unflatten(spec, [1, 2])
/// {'b': 2, 'a': 1}
#[pyfunction]
#[pyo3(signature = (treespec, leaves))]
pub fn tree_unflatten<'py>(
    treespec: &Bound<'py, PyAny>,
    leaves: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    unflatten_impl(treespec, leaves)
}

/// Maps `func` over the leaves of `tree` (and the matching subtrees of `rests`).
///
/// >>> tree_map(lambda x, y: x + y, (1, {'a': 2}), (10, {'a': 20}))
/// (11, {'a': 22})
#[pyfunction]
#[pyo3(signature = (func, tree, /, *rests, is_leaf = None, none_is_leaf = false, namespace = ""))]
pub fn tree_map<'py>(
    func: &Bound<'py, PyAny>,
    tree: &Bound<'py, PyAny>,
    rests: &Bound<'py, PyTuple>,
    is_leaf: Option<&Bound<'py, PyAny>>,
    none_is_leaf: bool,
    namespace: &str,
) -> PyResult<Bound<'py, PyAny>> {
    let opts = Options::new(is_leaf, none_is_leaf, namespace);
    map_impl(func, tree, rests, &opts, true)?.invariant("tree_map kept no result")
}

/// Calls `func` on the leaves of `tree` (and `rests`) for its side effects; returns `tree`.
///
/// >>> seen = []
/// >>> tree_map_(seen.append, [1, (2, 3)])
/// [1, (2, 3)]
/// >>> seen
/// [1, 2, 3]
#[pyfunction]
#[pyo3(signature = (func, tree, /, *rests, is_leaf = None, none_is_leaf = false, namespace = ""))]
pub fn tree_map_<'py>(
    func: &Bound<'py, PyAny>,
    tree: &Bound<'py, PyAny>,
    rests: &Bound<'py, PyTuple>,
    is_leaf: Option<&Bound<'py, PyAny>>,
    none_is_leaf: bool,
    namespace: &str,
) -> PyResult<Bound<'py, PyAny>> {
    map_impl(
        func,
        tree,
        rests,
        &Options::new(is_leaf, none_is_leaf, namespace),
        false,
    )?;
    Ok(tree.clone())
}

/// Whether `tree` is a single leaf.
///
/// >>> tree_is_leaf(1), tree_is_leaf([1]), tree_is_leaf(None), tree_is_leaf(None, none_is_leaf=True)
/// (True, False, False, True)
#[pyfunction]
#[pyo3(signature = (tree, /, is_leaf = None, *, none_is_leaf = false, namespace = ""))]
pub fn tree_is_leaf(
    tree: &Bound<'_, PyAny>,
    is_leaf: Option<&Bound<'_, PyAny>>,
    none_is_leaf: bool,
    namespace: &str,
) -> PyResult<bool> {
    is_leaf_impl(tree, is_leaf, none_is_leaf, namespace, Face::Optree)
}

/// Whether every item of `iterable` is a leaf.
///
/// >>> all_leaves([1, 'a', None]), all_leaves([1, (2,)])
/// (False, False)
/// >>> all_leaves([1, 'a', None], none_is_leaf=True)
/// True
#[pyfunction]
#[pyo3(signature = (iterable, /, is_leaf = None, *, none_is_leaf = false, namespace = ""))]
pub fn all_leaves(
    iterable: &Bound<'_, PyAny>,
    is_leaf: Option<&Bound<'_, PyAny>>,
    none_is_leaf: bool,
    namespace: &str,
) -> PyResult<bool> {
    all_leaves_impl(iterable, is_leaf, none_is_leaf, namespace, Face::Optree)
}

fn path_opts<'a, 'py>(
    is_leaf: Option<&'a Bound<'py, PyAny>>,
    is_leaf_takes_path: bool,
    none_is_leaf: bool,
    namespace: &'a str,
) -> Options<'a, 'py> {
    Options {
        is_leaf_takes_path,
        ..Options::new(is_leaf, none_is_leaf, namespace)
    }
}

/// Flattens a tree with the path (optree's raw entries) of every leaf: (paths, leaves, spec).
///
/// >>> tree_flatten_with_path({'b': [1, 2], 'a': 3})
/// ([('a',), ('b', 0), ('b', 1)], [3, 1, 2], PyTreeSpec({'a': *, 'b': [*, *]}))
#[pyfunction]
#[pyo3(signature = (tree, /, is_leaf = None, *, none_is_leaf = false, namespace = "", is_leaf_takes_path = false))]
pub fn tree_flatten_with_path<'py>(
    py: Python<'py>,
    tree: &Bound<'py, PyAny>,
    is_leaf: Option<&Bound<'py, PyAny>>,
    none_is_leaf: bool,
    namespace: &str,
    is_leaf_takes_path: bool,
) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyList>, PyTreeSpec)> {
    let opts = path_opts(is_leaf, is_leaf_takes_path, none_is_leaf, namespace);
    let (paths, leaves, spec) = paths_impl(tree, &opts, KeyStyle::Raw)?;
    Ok((tuples_to_list(py, paths), list_from_vec(py, leaves), spec))
}

/// The path (optree's raw entries) of every leaf.
///
/// >>> tree_paths([1, {'x': (2, 3)}])
/// [(0,), (1, 'x', 0), (1, 'x', 1)]
#[pyfunction]
#[pyo3(signature = (tree, /, is_leaf = None, *, none_is_leaf = false, namespace = "", is_leaf_takes_path = false))]
pub fn tree_paths<'py>(
    py: Python<'py>,
    tree: &Bound<'py, PyAny>,
    is_leaf: Option<&Bound<'py, PyAny>>,
    none_is_leaf: bool,
    namespace: &str,
    is_leaf_takes_path: bool,
) -> PyResult<Bound<'py, PyList>> {
    let opts = path_opts(is_leaf, is_leaf_takes_path, none_is_leaf, namespace);
    Ok(tuples_to_list(
        py,
        paths_impl(tree, &opts, KeyStyle::Raw)?.0,
    ))
}

/// JAX's flatten with key paths: (`[(key_path, leaf), ...]`, treespec), keys being
/// `SequenceKey`, `DictKey`, `GetAttrKey` and `FlattenedIndexKey` objects (or the keys a
/// registered `flatten_with_keys` gives).
///
/// >>> pairs, _ = tree_flatten_with_keys({'a': [1]})
/// >>> pairs
/// [((DictKey(key='a'), SequenceKey(idx=0)), 1)]
#[pyfunction]
#[pyo3(signature = (tree, /, is_leaf = None, *, is_leaf_takes_path = false, none_is_leaf = false, namespace = ""))]
pub fn tree_flatten_with_keys<'py>(
    tree: &Bound<'py, PyAny>,
    is_leaf: Option<&Bound<'py, PyAny>>,
    is_leaf_takes_path: bool,
    none_is_leaf: bool,
    namespace: &str,
) -> PyResult<(Bound<'py, PyList>, PyTreeSpec)> {
    keyed_pairs_impl(
        tree,
        &path_opts(is_leaf, is_leaf_takes_path, none_is_leaf, namespace),
    )
}

/// The key path (JAX's key objects) and leaf of every leaf, as pairs.
///
/// >>> tree_leaves_with_path([1, {'x': 2}])
/// [((SequenceKey(idx=0),), 1), ((SequenceKey(idx=1), DictKey(key='x')), 2)]
#[pyfunction]
#[pyo3(signature = (tree, /, is_leaf = None, *, is_leaf_takes_path = false, none_is_leaf = false, namespace = ""))]
pub fn tree_leaves_with_path<'py>(
    tree: &Bound<'py, PyAny>,
    is_leaf: Option<&Bound<'py, PyAny>>,
    is_leaf_takes_path: bool,
    none_is_leaf: bool,
    namespace: &str,
) -> PyResult<Bound<'py, PyList>> {
    Ok(keyed_pairs_impl(
        tree,
        &path_opts(is_leaf, is_leaf_takes_path, none_is_leaf, namespace),
    )?
    .0)
}

/// Maps `func(path, x, *xs)` over the leaves, paths being optree's raw entries.
///
/// >>> tree_map_with_path(lambda p, x: (p, x), {'a': 1})
/// {'a': (('a',), 1)}
#[pyfunction]
#[pyo3(signature = (func, tree, /, *rests, is_leaf = None, none_is_leaf = false, namespace = "", is_leaf_takes_path = false))]
pub fn tree_map_with_path<'py>(
    func: &Bound<'py, PyAny>,
    tree: &Bound<'py, PyAny>,
    rests: &Bound<'py, PyTuple>,
    is_leaf: Option<&Bound<'py, PyAny>>,
    none_is_leaf: bool,
    namespace: &str,
    is_leaf_takes_path: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let opts = path_opts(is_leaf, is_leaf_takes_path, none_is_leaf, namespace);
    map_with_paths_impl(func, tree, rests, &opts, KeyStyle::Raw)
}

/// Maps `func(key_path, x, *xs)` over the leaves, paths being JAX's key objects.
///
/// >>> tree_map_with_keys(lambda p, x: keystr(p), [1, {'x': 2}])
/// ['[0]', {'x': "[1]['x']"}]
#[pyfunction]
#[pyo3(signature = (func, tree, /, *rests, is_leaf = None, is_leaf_takes_path = false, none_is_leaf = false, namespace = ""))]
pub fn tree_map_with_keys<'py>(
    func: &Bound<'py, PyAny>,
    tree: &Bound<'py, PyAny>,
    rests: &Bound<'py, PyTuple>,
    is_leaf: Option<&Bound<'py, PyAny>>,
    is_leaf_takes_path: bool,
    none_is_leaf: bool,
    namespace: &str,
) -> PyResult<Bound<'py, PyAny>> {
    let opts = path_opts(is_leaf, is_leaf_takes_path, none_is_leaf, namespace);
    map_with_paths_impl(func, tree, rests, &opts, KeyStyle::Keys)
}

/// `(accessor steps, leaves, treespec)`: each leaf's path as `(entry, node type, kind)`
/// triples, from which `oxtree.accessors` builds `PyTreeAccessor`s.
#[pyfunction]
#[pyo3(signature = (tree, /, is_leaf = None, *, none_is_leaf = false, namespace = ""))]
pub fn _flatten_with_steps<'py>(
    py: Python<'py>,
    tree: &Bound<'py, PyAny>,
    is_leaf: Option<&Bound<'py, PyAny>>,
    none_is_leaf: bool,
    namespace: &str,
) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyList>, PyTreeSpec)> {
    let (paths, leaves, spec) = paths_impl(
        tree,
        &Options::new(is_leaf, none_is_leaf, namespace),
        KeyStyle::Steps,
    )?;
    Ok((tuples_to_list(py, paths), list_from_vec(py, leaves), spec))
}

/// `(children, one-level treespec)` of `tree`: its children as leaves. The one primitive the
/// Python layers use to take a node apart (accessors, `tree_set`, `tree_flatten_one_level`,
/// treespec constructors, JAX's `flatten_one_level`), with no Python call per child.
#[pyfunction]
#[pyo3(signature = (tree, /, *, none_is_leaf = false, namespace = "", jax = false))]
pub fn _flatten_one_level<'py>(
    tree: &Bound<'py, PyAny>,
    none_is_leaf: bool,
    namespace: &str,
    jax: bool,
) -> PyResult<(Bound<'py, PyList>, PyTreeSpec)> {
    let face = if jax { Face::Jax } else { Face::Optree };
    let opts = Options {
        face,
        ..Options::new(None, none_is_leaf, namespace)
    };
    let flat = registry::with_registry(|reg| flatten::flatten_one_level(tree, &opts, reg))?;
    let spec = spec_of(flat.nodes, flat.registrations, flat.namespaced, &opts);
    Ok((list_from_vec(tree.py(), flat.leaves), spec))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(_flatten_one_level, m)?)?;
    m.add_function(wrap_pyfunction!(tree_flatten_with_path, m)?)?;
    m.add_function(wrap_pyfunction!(tree_paths, m)?)?;
    m.add_function(wrap_pyfunction!(tree_flatten_with_keys, m)?)?;
    m.add_function(wrap_pyfunction!(tree_leaves_with_path, m)?)?;
    m.add_function(wrap_pyfunction!(tree_map_with_path, m)?)?;
    m.add_function(wrap_pyfunction!(tree_map_with_keys, m)?)?;
    m.add_function(wrap_pyfunction!(_flatten_with_steps, m)?)?;
    m.add_function(wrap_pyfunction!(tree_flatten, m)?)?;
    m.add_function(wrap_pyfunction!(tree_leaves, m)?)?;
    m.add_function(wrap_pyfunction!(tree_structure, m)?)?;
    m.add_function(wrap_pyfunction!(tree_unflatten, m)?)?;
    m.add_function(wrap_pyfunction!(tree_map, m)?)?;
    m.add_function(wrap_pyfunction!(tree_map_, m)?)?;
    m.add_function(wrap_pyfunction!(tree_is_leaf, m)?)?;
    m.add_function(wrap_pyfunction!(all_leaves, m)?)?;
    m.add_function(wrap_pyfunction!(crate::treespec::rebuild_treespec, m)?)?;
    m.add_function(wrap_pyfunction!(registry::register_pytree_node, m)?)?;
    m.add_function(wrap_pyfunction!(registry::unregister_pytree_node, m)?)?;
    m.add_function(wrap_pyfunction!(registry::register_static, m)?)?;
    m.add_function(wrap_pyfunction!(registry::_register_dataclass_fields, m)?)?;
    m.add_function(wrap_pyfunction!(registry::registered_types, m)?)?;
    m.add_function(wrap_pyfunction!(registry::get_registry_size, m)?)?;
    m.add_function(wrap_pyfunction!(registry::_registrations, m)?)?;
    m.add_function(wrap_pyfunction!(registry::is_dict_insertion_ordered, m)?)?;
    m.add_function(wrap_pyfunction!(registry::set_dict_insertion_ordered, m)?)?;
    m.add_function(wrap_pyfunction!(crate::types::_tuple_kind, m)?)?;
    m.add_function(wrap_pyfunction!(crate::types::_tuple_fields, m)?)?;
    Ok(())
}
