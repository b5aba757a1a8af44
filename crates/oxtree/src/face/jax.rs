//! The JAX face's entry points (`oxtree._core.jax`): JAX's signatures over the same engine,
//! with the JAX options (sorted dict rebuilds, deque and struct sequences as leaves, JAX's
//! reprs) carried by the treedefs they make.

use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

use crate::errors::Invariant;
use crate::errors::TreeError;
use crate::face::optree as api;
use crate::kind::Kind;
use crate::treespec::flatten::Options;
use crate::treespec::keys::KeyStyle;
use crate::treespec::{ops, Face, PyTreeSpec};

fn jax_opts<'a, 'py>(
    is_leaf: Option<&'a Bound<'py, PyAny>>,
    is_leaf_takes_path: bool,
) -> Options<'a, 'py> {
    Options {
        is_leaf_takes_path,
        face: Face::Jax,
        ..Options::new(is_leaf, false, "")
    }
}

/// Flattens a pytree into its leaves (dicts in sorted key order) and a treedef.
///
/// >>> tree_flatten([1, {'b': 2, 'a': (3, None)}])
/// ([1, 3, 2], PyTreeDef([*, {'a': (*, None), 'b': *}]))
#[pyfunction]
#[pyo3(signature = (tree, is_leaf = None))]
fn tree_flatten<'py>(
    tree: &Bound<'py, PyAny>,
    is_leaf: Option<&Bound<'py, PyAny>>,
) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyTreeSpec>)> {
    api::flatten_impl(tree, &jax_opts(is_leaf, false))
}

/// The leaves of a pytree.
///
/// >>> tree_leaves({'b': 2, 'a': [1, None]})
/// [1, 2]
#[pyfunction]
#[pyo3(signature = (tree, is_leaf = None))]
fn tree_leaves<'py>(
    tree: &Bound<'py, PyAny>,
    is_leaf: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyList>> {
    api::leaves_impl(tree, &jax_opts(is_leaf, false))
}

/// The treedef of a pytree.
///
/// >>> tree_structure((1, [2, None]))
/// PyTreeDef((*, [*, None]))
#[pyfunction]
#[pyo3(signature = (tree, is_leaf = None))]
fn tree_structure<'py>(
    tree: &Bound<'py, PyAny>,
    is_leaf: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyTreeSpec>> {
    api::structure_impl(tree, &jax_opts(is_leaf, false))
}

/// Rebuilds a pytree from a treedef and its leaves.
///
/// >>> tree_unflatten(tree_structure({'b': 0, 'a': 0}), [1, 2])
/// {'a': 1, 'b': 2}
#[pyfunction]
#[pyo3(signature = (treedef, leaves))]
fn tree_unflatten<'py>(
    treedef: &Bound<'py, PyAny>,
    leaves: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    api::unflatten_impl(treedef, leaves)
}

/// Maps `f` over the leaves of `tree` and the matching subtrees of `rest`.
///
/// >>> tree_map(lambda x, y: x + y, (1, {'a': 2}), (10, {'a': 20}))
/// (11, {'a': 22})
#[pyfunction]
#[pyo3(signature = (f, tree, *rest, is_leaf = None))]
fn tree_map<'py>(
    f: &Bound<'py, PyAny>,
    tree: &Bound<'py, PyAny>,
    rest: &Bound<'py, PyTuple>,
    is_leaf: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    api::map_impl(f, tree, rest, &jax_opts(is_leaf, false), true)?
        .invariant("tree_map kept no result")
}

/// Whether every item of `iterable` is a leaf.
///
/// >>> all_leaves([1, 'a']), all_leaves([1, None])
/// (True, False)
#[pyfunction]
#[pyo3(signature = (iterable, is_leaf = None))]
fn all_leaves(iterable: &Bound<'_, PyAny>, is_leaf: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
    api::all_leaves_impl(iterable, is_leaf, false, "", Face::Jax)
}

/// Flattens with key paths: (`[(key_path, leaf), ...]`, treedef).
///
/// >>> tree_flatten_with_path({'a': [1]})
/// ([((DictKey(key='a'), SequenceKey(idx=0)), 1)], PyTreeDef({'a': [*]}))
#[pyfunction]
#[pyo3(signature = (tree, is_leaf = None, is_leaf_takes_path = false))]
fn tree_flatten_with_path<'py>(
    tree: &Bound<'py, PyAny>,
    is_leaf: Option<&Bound<'py, PyAny>>,
    is_leaf_takes_path: bool,
) -> PyResult<(Bound<'py, PyList>, PyTreeSpec)> {
    api::keyed_pairs_impl(tree, &jax_opts(is_leaf, is_leaf_takes_path))
}

/// The `(key_path, leaf)` pairs of a pytree.
///
/// >>> tree_leaves_with_path([1, {'x': 2}])
/// [((SequenceKey(idx=0),), 1), ((SequenceKey(idx=1), DictKey(key='x')), 2)]
#[pyfunction]
#[pyo3(signature = (tree, is_leaf = None, is_leaf_takes_path = false))]
fn tree_leaves_with_path<'py>(
    tree: &Bound<'py, PyAny>,
    is_leaf: Option<&Bound<'py, PyAny>>,
    is_leaf_takes_path: bool,
) -> PyResult<Bound<'py, PyList>> {
    Ok(api::keyed_pairs_impl(tree, &jax_opts(is_leaf, is_leaf_takes_path))?.0)
}

/// Maps `f(key_path, x, *xs)` over the leaves.
///
/// >>> tree_map_with_path(lambda p, x: len(p), [1, {'x': 2}])
/// [1, {'x': 2}]
#[pyfunction]
#[pyo3(signature = (f, tree, *rest, is_leaf = None, is_leaf_takes_path = false))]
fn tree_map_with_path<'py>(
    f: &Bound<'py, PyAny>,
    tree: &Bound<'py, PyAny>,
    rest: &Bound<'py, PyTuple>,
    is_leaf: Option<&Bound<'py, PyAny>>,
    is_leaf_takes_path: bool,
) -> PyResult<Bound<'py, PyAny>> {
    api::map_with_paths_impl(
        f,
        tree,
        rest,
        &jax_opts(is_leaf, is_leaf_takes_path),
        KeyStyle::Keys,
    )
}

/// Whether `tree` is a leaf to JAX (None is not: it is a node without children).
#[pyfunction]
#[pyo3(signature = (tree, is_leaf = None))]
fn _is_leaf(tree: &Bound<'_, PyAny>, is_leaf: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
    api::is_leaf_impl(tree, is_leaf, false, "", Face::Jax)
}

/// `tree_flatten_with_path` with the registrations of `namespace`: how `oxtree.jax` hands a
/// registered type's children and keys to JAX, which flattens it as the JAX face does (any
/// aux data, JAX's keys).
#[pyfunction]
#[pyo3(signature = (tree, is_leaf = None, *, namespace = ""))]
fn _flatten_with_path_in<'py>(
    tree: &Bound<'py, PyAny>,
    is_leaf: Option<&Bound<'py, PyAny>>,
    namespace: &str,
) -> PyResult<(Bound<'py, PyList>, PyTreeSpec)> {
    let opts = Options {
        face: Face::Jax,
        ..Options::new(is_leaf, false, namespace)
    };
    api::keyed_pairs_impl(tree, &opts)
}

/// Each of `prefix_leaves` (the leaves of `prefix_treedef`) repeated once per leaf of the
/// subtree of `full_treedef` it stands for: the leaves of the full tree that broadcasting
/// the prefix tree gives.
///
/// >>> p = tree_structure((0, 0)); f = tree_structure(([0, 0], {'a': 0}))
/// >>> broadcast_flattened_prefix_with_treedef(['x', 'y'], p, f)
/// ['x', 'x', 'y']
#[pyfunction]
#[pyo3(signature = (prefix_leaves, prefix_treedef, full_treedef))]
fn broadcast_flattened_prefix_with_treedef<'py>(
    prefix_leaves: &Bound<'py, PyAny>,
    prefix_treedef: PyRef<'py, PyTreeSpec>,
    full_treedef: PyRef<'py, PyTreeSpec>,
) -> PyResult<Bound<'py, PyList>> {
    let py = prefix_leaves.py();
    let leaves = prefix_leaves
        .try_iter()?
        .collect::<PyResult<Vec<Bound<'py, PyAny>>>>()?;
    let (prefix, full) = (&*prefix_treedef, &*full_treedef);
    if leaves.len() != prefix.num_leaves() {
        return Err(TreeError::Value(format!(
            "broadcast_flattened_prefix_with_treedef: {} prefix leaves for a prefix treedef \
             of {} leaves",
            leaves.len(),
            prefix.num_leaves()
        ))
        .into());
    }
    if !ops::is_prefix(py, prefix, full, false)? {
        return Err(
            TreeError::Value("`prefix_treedef` is not a prefix of `full_treedef`".into()).into(),
        );
    }
    // The two treedefs agree node for node down to the prefix's leaves (checked above):
    // pair them, and note how many full leaves lie under each prefix leaf.
    let mut counts = Vec::with_capacity(leaves.len());
    let mut pairs = vec![(prefix.nodes.len() - 1, full.nodes.len() - 1)];
    while let Some((i, j)) = pairs.pop() {
        if prefix.nodes[i].kind == Kind::Leaf {
            counts.push((i, full.nodes[j].num_leaves));
        } else {
            pairs.extend(
                prefix
                    .child_indices(i)
                    .into_iter()
                    .zip(full.child_indices(j)),
            );
        }
    }
    // Post-order numbers a treedef's leaves left to right.
    counts.sort_unstable();
    let mut out = Vec::with_capacity(full.num_leaves());
    for (leaf, (_, n)) in leaves.iter().zip(counts) {
        out.extend(std::iter::repeat_n(leaf, n));
    }
    PyList::new(py, out)
}

pub fn register(parent: &Bound<'_, PyModule>) -> PyResult<()> {
    let m = PyModule::new(parent.py(), "jax")?;
    // Its full name, so its functions' `__module__` says where they live (and nothing
    // mistakes it for the `jax` package).
    m.setattr("__name__", "oxtree._core.jax")?;
    m.add_function(wrap_pyfunction!(tree_flatten, &m)?)?;
    m.add_function(wrap_pyfunction!(tree_leaves, &m)?)?;
    m.add_function(wrap_pyfunction!(tree_structure, &m)?)?;
    m.add_function(wrap_pyfunction!(tree_unflatten, &m)?)?;
    m.add_function(wrap_pyfunction!(tree_map, &m)?)?;
    m.add_function(wrap_pyfunction!(all_leaves, &m)?)?;
    m.add_function(wrap_pyfunction!(tree_flatten_with_path, &m)?)?;
    m.add_function(wrap_pyfunction!(tree_leaves_with_path, &m)?)?;
    m.add_function(wrap_pyfunction!(tree_map_with_path, &m)?)?;
    m.add_function(wrap_pyfunction!(_is_leaf, &m)?)?;
    m.add_function(wrap_pyfunction!(_flatten_with_path_in, &m)?)?;
    m.add_function(wrap_pyfunction!(
        broadcast_flattened_prefix_with_treedef,
        &m
    )?)?;
    parent.add("jax", &m)?;
    Ok(())
}
