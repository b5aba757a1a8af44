//! The functions `oxtree` exports: each crosses the Python/Rust boundary once.

use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

use crate::errors::{type_name, TreeError};
use crate::registry;
use crate::treespec::flatten::{self, Class, Options};
use crate::treespec::keys::{self, KeyStyle};
use crate::treespec::PyTreeSpec;

/// A list that takes over the references in `items`.
pub fn list_from_vec<'py>(py: Python<'py>, items: Vec<Bound<'py, PyAny>>) -> Bound<'py, PyList> {
    crate::treespec::unflatten_list(py, items)
}

fn check_is_leaf(is_leaf: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
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
    py: Python<'py>,
    tree: &Bound<'py, PyAny>,
    is_leaf: Option<&Bound<'py, PyAny>>,
    none_is_leaf: bool,
    namespace: &str,
) -> PyResult<(Bound<'py, PyList>, PyTreeSpec)> {
    check_is_leaf(is_leaf)?;
    let reg = registry::snapshot();
    let flat = flatten::flatten::<true, true>(tree, is_leaf, none_is_leaf, namespace, &reg)?;
    let spec = PyTreeSpec::new(
        flat.nodes,
        none_is_leaf,
        namespace_of(flat.namespaced, namespace),
    );
    Ok((list_from_vec(py, flat.leaves), spec))
}

/// The leaves of a tree, left to right (dicts in sorted key order).
///
/// >>> tree_leaves({'b': 2, 'a': [1, None]})
/// [1, 2]
#[pyfunction]
#[pyo3(signature = (tree, /, is_leaf = None, *, none_is_leaf = false, namespace = ""))]
pub fn tree_leaves<'py>(
    py: Python<'py>,
    tree: &Bound<'py, PyAny>,
    is_leaf: Option<&Bound<'py, PyAny>>,
    none_is_leaf: bool,
    namespace: &str,
) -> PyResult<Bound<'py, PyList>> {
    check_is_leaf(is_leaf)?;
    let reg = registry::snapshot();
    let flat = flatten::flatten::<false, true>(tree, is_leaf, none_is_leaf, namespace, &reg)?;
    Ok(list_from_vec(py, flat.leaves))
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
) -> PyResult<PyTreeSpec> {
    check_is_leaf(is_leaf)?;
    let reg = registry::snapshot();
    let flat = flatten::flatten::<true, false>(tree, is_leaf, none_is_leaf, namespace, &reg)?;
    Ok(PyTreeSpec::new(
        flat.nodes,
        none_is_leaf,
        namespace_of(flat.namespaced, namespace),
    ))
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
    let spec = treespec.cast::<PyTreeSpec>().map_err(|_| {
        TreeError::Type(format!(
            "tree_unflatten expects a PyTreeSpec as its first argument, got {}",
            type_name(treespec)
        ))
    })?;
    crate::treespec::unflatten_iterable(spec.get(), leaves)
}

/// Flattens the first tree, the others up to its structure, and calls `func` leaf by leaf.
fn map_leaves<'py>(
    func: &Bound<'py, PyAny>,
    tree: &Bound<'py, PyAny>,
    rests: &Bound<'py, PyTuple>,
    is_leaf: Option<&Bound<'py, PyAny>>,
    none_is_leaf: bool,
    namespace: &str,
    keep_results: bool,
) -> PyResult<(Vec<Bound<'py, PyAny>>, PyTreeSpec)> {
    if !func.is_callable() {
        return Err(
            TreeError::Type(format!("func must be callable, got {}", type_name(func))).into(),
        );
    }
    check_is_leaf(is_leaf)?;
    let reg = registry::snapshot();
    let flat = flatten::flatten::<true, true>(tree, is_leaf, none_is_leaf, namespace, &reg)?;
    let spec = PyTreeSpec::new(
        flat.nodes,
        none_is_leaf,
        namespace_of(flat.namespaced, namespace),
    );
    let mut results = Vec::with_capacity(if keep_results { flat.leaves.len() } else { 0 });
    if rests.is_empty() {
        for leaf in &flat.leaves {
            let r = func.call1((leaf,))?;
            if keep_results {
                results.push(r);
            }
        }
    } else {
        let mut others = Vec::with_capacity(rests.len());
        for (i, rest) in rests.iter().enumerate() {
            let which = format!("rests[{i}]");
            others.push(crate::treespec::flatten_up_to(
                &spec,
                &rest,
                &reg,
                Some(&which),
            )?);
        }
        for (i, leaf) in flat.leaves.iter().enumerate() {
            let r = if let [other] = others.as_slice() {
                func.call1((leaf, &other[i]))?
            } else {
                let mut args = Vec::with_capacity(others.len() + 1);
                args.push(leaf.clone());
                args.extend(others.iter().map(|o| o[i].clone()));
                func.call1(crate::treespec::tuple_from_vec(func.py(), args))?
            };
            if keep_results {
                results.push(r);
            }
        }
    }
    Ok((results, spec))
}

/// Maps `func` over the leaves of `tree` (and the matching subtrees of `rests`).
///
/// >>> tree_map(lambda x, y: x + y, (1, {'a': 2}), (10, {'a': 20}))
/// (11, {'a': 22})
#[pyfunction]
#[pyo3(signature = (func, tree, /, *rests, is_leaf = None, none_is_leaf = false, namespace = ""))]
pub fn tree_map<'py>(
    py: Python<'py>,
    func: &Bound<'py, PyAny>,
    tree: &Bound<'py, PyAny>,
    rests: &Bound<'py, PyTuple>,
    is_leaf: Option<&Bound<'py, PyAny>>,
    none_is_leaf: bool,
    namespace: &str,
) -> PyResult<Bound<'py, PyAny>> {
    let (results, spec) = map_leaves(func, tree, rests, is_leaf, none_is_leaf, namespace, true)?;
    crate::treespec::build(py, &spec, results)
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
    map_leaves(func, tree, rests, is_leaf, none_is_leaf, namespace, false)?;
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
    check_is_leaf(is_leaf)?;
    if let Some(f) = is_leaf {
        if f.call1((tree,))?.is_truthy()? {
            return Ok(true);
        }
    }
    let reg = registry::snapshot();
    Ok(matches!(
        flatten::classify(tree, none_is_leaf, &reg, namespace),
        Class::Leaf
    ))
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
    check_is_leaf(is_leaf)?;
    for item in iterable.try_iter()? {
        if !tree_is_leaf(&item?, is_leaf, none_is_leaf, namespace)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Each leaf's path, the leaves, and the treespec.
type WithPaths<'py> = (Vec<Bound<'py, PyTuple>>, Vec<Bound<'py, PyAny>>, PyTreeSpec);

/// Flattens with key paths in the given style: (paths, leaves, treespec).
fn flatten_with_paths<'py>(
    tree: &Bound<'py, PyAny>,
    is_leaf: Option<&Bound<'py, PyAny>>,
    is_leaf_takes_path: bool,
    none_is_leaf: bool,
    namespace: &str,
    style: KeyStyle,
) -> PyResult<WithPaths<'py>> {
    check_is_leaf(is_leaf)?;
    let reg = registry::snapshot();
    let opts = Options {
        is_leaf,
        is_leaf_takes_path,
        none_is_leaf,
        namespace,
        with_keys: style == KeyStyle::Keys,
    };
    let flat = flatten::flatten_opts::<true, true>(tree, &opts, &reg)?;
    let spec = PyTreeSpec::new(
        flat.nodes,
        none_is_leaf,
        namespace_of(flat.namespaced, namespace),
    );
    let paths = keys::leaf_paths(&spec, tree.py(), style)?;
    Ok((paths, flat.leaves, spec))
}

fn tuples_to_list<'py>(py: Python<'py>, items: Vec<Bound<'py, PyTuple>>) -> Bound<'py, PyList> {
    list_from_vec(py, items.into_iter().map(Bound::into_any).collect())
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
    let (paths, leaves, spec) = flatten_with_paths(
        tree,
        is_leaf,
        is_leaf_takes_path,
        none_is_leaf,
        namespace,
        KeyStyle::Raw,
    )?;
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
    let (paths, _, _) = flatten_with_paths(
        tree,
        is_leaf,
        is_leaf_takes_path,
        none_is_leaf,
        namespace,
        KeyStyle::Raw,
    )?;
    Ok(tuples_to_list(py, paths))
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
    py: Python<'py>,
    tree: &Bound<'py, PyAny>,
    is_leaf: Option<&Bound<'py, PyAny>>,
    is_leaf_takes_path: bool,
    none_is_leaf: bool,
    namespace: &str,
) -> PyResult<(Bound<'py, PyList>, PyTreeSpec)> {
    let (paths, leaves, spec) = flatten_with_paths(
        tree,
        is_leaf,
        is_leaf_takes_path,
        none_is_leaf,
        namespace,
        KeyStyle::Keys,
    )?;
    let pairs: Vec<Bound<'py, PyAny>> = paths
        .into_iter()
        .zip(leaves)
        .map(|(p, l)| crate::treespec::tuple_from_vec(py, vec![p.into_any(), l]).into_any())
        .collect();
    Ok((list_from_vec(py, pairs), spec))
}

/// The key path (JAX's key objects) and leaf of every leaf, as pairs.
///
/// >>> tree_leaves_with_path([1, {'x': 2}])
/// [((SequenceKey(idx=0),), 1), ((SequenceKey(idx=1), DictKey(key='x')), 2)]
#[pyfunction]
#[pyo3(signature = (tree, /, is_leaf = None, *, is_leaf_takes_path = false, none_is_leaf = false, namespace = ""))]
pub fn tree_leaves_with_path<'py>(
    py: Python<'py>,
    tree: &Bound<'py, PyAny>,
    is_leaf: Option<&Bound<'py, PyAny>>,
    is_leaf_takes_path: bool,
    none_is_leaf: bool,
    namespace: &str,
) -> PyResult<Bound<'py, PyList>> {
    Ok(tree_flatten_with_keys(
        py,
        tree,
        is_leaf,
        is_leaf_takes_path,
        none_is_leaf,
        namespace,
    )?
    .0)
}

/// Maps `func(path, leaf, *others)` over a tree, with paths in the given style.
#[allow(clippy::too_many_arguments)]
fn map_with_paths<'py>(
    func: &Bound<'py, PyAny>,
    tree: &Bound<'py, PyAny>,
    rests: &Bound<'py, PyTuple>,
    is_leaf: Option<&Bound<'py, PyAny>>,
    is_leaf_takes_path: bool,
    none_is_leaf: bool,
    namespace: &str,
    style: KeyStyle,
) -> PyResult<Bound<'py, PyAny>> {
    let py = tree.py();
    if !func.is_callable() {
        return Err(
            TreeError::Type(format!("func must be callable, got {}", type_name(func))).into(),
        );
    }
    let (paths, leaves, spec) = flatten_with_paths(
        tree,
        is_leaf,
        is_leaf_takes_path,
        none_is_leaf,
        namespace,
        style,
    )?;
    let reg = registry::snapshot();
    let mut others = Vec::with_capacity(rests.len());
    for (i, rest) in rests.iter().enumerate() {
        let which = format!("rests[{i}]");
        others.push(crate::treespec::flatten_up_to(
            &spec,
            &rest,
            &reg,
            Some(&which),
        )?);
    }
    let mut results = Vec::with_capacity(leaves.len());
    for (i, (path, leaf)) in paths.into_iter().zip(leaves).enumerate() {
        let r = if others.is_empty() {
            func.call1((path, leaf))?
        } else {
            let mut args = Vec::with_capacity(others.len() + 2);
            args.push(path.into_any());
            args.push(leaf);
            args.extend(others.iter().map(|o| o[i].clone()));
            func.call1(crate::treespec::tuple_from_vec(py, args))?
        };
        results.push(r);
    }
    crate::treespec::build(py, &spec, results)
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
    map_with_paths(
        func,
        tree,
        rests,
        is_leaf,
        is_leaf_takes_path,
        none_is_leaf,
        namespace,
        KeyStyle::Raw,
    )
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
    map_with_paths(
        func,
        tree,
        rests,
        is_leaf,
        is_leaf_takes_path,
        none_is_leaf,
        namespace,
        KeyStyle::Keys,
    )
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
    let (paths, leaves, spec) = flatten_with_paths(
        tree,
        is_leaf,
        false,
        none_is_leaf,
        namespace,
        KeyStyle::Steps,
    )?;
    Ok((tuples_to_list(py, paths), list_from_vec(py, leaves), spec))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
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
    Ok(())
}
