//! The JAX face's entry points (`oxtree._core.jax_face`): JAX's signatures over the same engine,
//! with the JAX options (sorted dict rebuilds, deque and struct sequences as leaves, JAX's
//! reprs) carried by the treedefs they make.

use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

use super::Given;
use crate::errors::TreeError;
use crate::face::options::Options;
use crate::face::Face;
use crate::invariant::Invariant;
use crate::treespec::keys::KeyStyle;
use crate::treespec::{ops, PyTreeSpec};
use crate::walk;

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
pub fn tree_flatten<'py>(
    tree: &Bound<'py, PyAny>,
    is_leaf: Option<&Bound<'py, PyAny>>,
) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyTreeSpec>)> {
    walk::flatten_impl(tree, &jax_opts(is_leaf, false))
}

/// The leaves of a pytree.
///
/// >>> tree_leaves({'b': 2, 'a': [1, None]})
/// [1, 2]
#[pyfunction]
#[pyo3(signature = (tree, is_leaf = None))]
pub fn tree_leaves<'py>(
    tree: &Bound<'py, PyAny>,
    is_leaf: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyList>> {
    walk::leaves_impl(tree, &jax_opts(is_leaf, false))
}

/// The treedef of a pytree.
///
/// >>> tree_structure((1, [2, None]))
/// PyTreeDef((*, [*, None]))
#[pyfunction]
#[pyo3(signature = (tree, is_leaf = None))]
pub fn tree_structure<'py>(
    tree: &Bound<'py, PyAny>,
    is_leaf: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyTreeSpec>> {
    walk::structure_impl(tree, &jax_opts(is_leaf, false))
}

/// Rebuilds a pytree from a treedef and its leaves.
///
/// >>> tree_unflatten(tree_structure({'b': 0, 'a': 0}), [1, 2])
/// {'a': 1, 'b': 2}
#[pyfunction]
#[pyo3(signature = (treedef, leaves))]
pub fn tree_unflatten<'py>(
    treedef: &Bound<'py, PyAny>,
    leaves: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    walk::unflatten_impl(treedef, leaves)
}

/// Maps `f` over the leaves of `tree` and the matching subtrees of `rest`.
///
/// >>> tree_map(lambda x, y: x + y, (1, {'a': 2}), (10, {'a': 20}))
/// (11, {'a': 22})
#[pyfunction]
#[pyo3(signature = (f, tree, *rest, is_leaf = None))]
pub fn tree_map<'py>(
    f: &Bound<'py, PyAny>,
    tree: &Bound<'py, PyAny>,
    rest: &Bound<'py, PyTuple>,
    is_leaf: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    walk::map_impl(f, tree, rest, &jax_opts(is_leaf, false), true)?
        .invariant("tree_map kept no result")
}

/// Whether every item of `iterable` is a leaf.
///
/// >>> all_leaves([1, 'a']), all_leaves([1, None])
/// (True, False)
#[pyfunction]
#[pyo3(signature = (iterable, is_leaf = None))]
pub fn all_leaves(
    iterable: &Bound<'_, PyAny>,
    is_leaf: Option<&Bound<'_, PyAny>>,
) -> PyResult<bool> {
    walk::all_leaves_impl(iterable, is_leaf, false, "", Face::Jax)
}

/// Flattens with key paths: (`[(key_path, leaf), ...]`, treedef).
///
/// >>> tree_flatten_with_path({'a': [1]})
/// ([((DictKey(key='a'), SequenceKey(idx=0)), 1)], PyTreeDef({'a': [*]}))
#[pyfunction]
#[pyo3(signature = (tree, is_leaf = None, is_leaf_takes_path = false))]
pub fn tree_flatten_with_path<'py>(
    tree: &Bound<'py, PyAny>,
    is_leaf: Option<&Bound<'py, PyAny>>,
    is_leaf_takes_path: bool,
) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyTreeSpec>)> {
    walk::keyed_pairs_impl(tree, &jax_opts(is_leaf, is_leaf_takes_path))
}

/// The `(key_path, leaf)` pairs of a pytree.
///
/// >>> tree_leaves_with_path([1, {'x': 2}])
/// [((SequenceKey(idx=0),), 1), ((SequenceKey(idx=1), DictKey(key='x')), 2)]
#[pyfunction]
#[pyo3(signature = (tree, is_leaf = None, is_leaf_takes_path = false))]
pub fn tree_leaves_with_path<'py>(
    tree: &Bound<'py, PyAny>,
    is_leaf: Option<&Bound<'py, PyAny>>,
    is_leaf_takes_path: bool,
) -> PyResult<Bound<'py, PyList>> {
    Ok(walk::keyed_pairs_impl(tree, &jax_opts(is_leaf, is_leaf_takes_path))?.0)
}

/// Maps `f(key_path, x, *xs)` over the leaves.
///
/// >>> tree_map_with_path(lambda p, x: len(p), [1, {'x': 2}])
/// [1, {'x': 2}]
#[pyfunction]
#[pyo3(signature = (f, tree, *rest, is_leaf = None, is_leaf_takes_path = false))]
pub fn tree_map_with_path<'py>(
    f: &Bound<'py, PyAny>,
    tree: &Bound<'py, PyAny>,
    rest: &Bound<'py, PyTuple>,
    is_leaf: Option<&Bound<'py, PyAny>>,
    is_leaf_takes_path: bool,
) -> PyResult<Bound<'py, PyAny>> {
    walk::map_with_paths_impl(
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
pub fn _is_leaf(tree: &Bound<'_, PyAny>, is_leaf: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
    walk::is_leaf_impl(tree, is_leaf, false, "", Face::Jax)
}

/// `tree_flatten_with_path` with the registrations of `namespace`: how `oxtree.jax` hands a
/// registered type's children and keys to JAX, which flattens it as the JAX face does (any
/// aux data, JAX's keys).
#[pyfunction]
#[pyo3(signature = (tree, is_leaf = None, *, namespace = ""))]
pub fn _flatten_with_path_in<'py>(
    tree: &Bound<'py, PyAny>,
    is_leaf: Option<&Bound<'py, PyAny>>,
    namespace: &str,
) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyTreeSpec>)> {
    let opts = Options {
        face: Face::Jax,
        ..Options::new(is_leaf, false, namespace)
    };
    walk::keyed_pairs_impl(tree, &opts)
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
pub fn broadcast_flattened_prefix_with_treedef<'py>(
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
        return Err(TreeError::PrefixLeafCount {
            got: leaves.len(),
            expected: prefix.num_leaves(),
        }
        .into());
    }
    let Some(places) = ops::prefix_leaf_places(py, prefix, full)? else {
        return Err(TreeError::NotAPrefix.into());
    };
    let mut out = Vec::with_capacity(full.num_leaves());
    for (leaf, j) in leaves.iter().zip(places) {
        out.extend(std::iter::repeat_n(leaf, full.nodes[j].num_leaves));
    }
    PyList::new(py, out)
}

/// The tree with every leaf replaced by whether its key path matches any of `patterns`
/// (globs over its `keystr`, compiled `re.Pattern`s or `PathPattern`s): a mask for
/// `optax.masked`.
///
/// >>> tree_mask({'enc': {'w': 1, 'bias': 2}, 'head': {'w': 3}}, "**['bias']")
/// {'enc': {'bias': True, 'w': False}, 'head': {'w': False}}
#[pyfunction]
#[pyo3(signature = (tree, *patterns, is_leaf = None))]
pub fn tree_mask<'py>(
    tree: &Bound<'py, PyAny>,
    patterns: &Bound<'py, PyTuple>,
    is_leaf: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    walk::mask_impl(tree, patterns, &jax_opts(is_leaf, false))
}

/// The tree with every leaf replaced by the label of the first rule whose pattern its key
/// path matches (`rules`: a mapping from patterns to labels, or `(pattern, label)` pairs),
/// or by `default`; without a default an unmatched leaf raises ValueError. Labels for
/// `optax.multi_transform`.
///
/// >>> tree_labels({'w': 1, 'b': 2}, {"['b']": 'no_decay'}, default='decay')
/// {'b': 'no_decay', 'w': 'decay'}
#[pyfunction]
#[pyo3(signature = (tree, rules, default = Given(None), *, is_leaf = None))]
#[pyo3(text_signature = "(tree, rules, default=..., *, is_leaf=None)")]
pub fn tree_labels<'py>(
    tree: &Bound<'py, PyAny>,
    rules: &Bound<'py, PyAny>,
    default: Given<'py>,
    is_leaf: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    walk::labels_impl(tree, rules, default.0, &jax_opts(is_leaf, false))
}

/// A new tree in which every leaf whose key path matches `pattern` is replaced by `value`,
/// or by `func(key_path, leaf)`.
///
/// >>> tree_set_matching({'enc': [1, 2], 'dec': [3]}, "['enc'][*]", 0)
/// {'dec': [3], 'enc': [0, 0]}
#[pyfunction]
#[pyo3(signature = (tree, pattern, value = Given(None), *, func = None, is_leaf = None))]
#[pyo3(text_signature = "(tree, pattern, value=..., *, func=None, is_leaf=None)")]
pub fn tree_set_matching<'py>(
    tree: &Bound<'py, PyAny>,
    pattern: &Bound<'py, PyAny>,
    value: Given<'py>,
    func: Option<&Bound<'py, PyAny>>,
    is_leaf: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    walk::set_matching_impl(tree, pattern, value.0, func, &jax_opts(is_leaf, false))
}

/// Tells the core the version of the JAX loaded beside it, whose words the JAX face then
/// speaks where JAX's releases differ (a prefix error's child keys: `b` before jax 0.11,
/// `['b']` since). `oxtree.tree_util` calls it once, when JAX is loaded; until then the newest
/// JAX's words are used.
#[pyfunction]
pub fn _set_jax_version(version: &str) {
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let major = parts.next().unwrap_or(0);
    let minor = parts.next().unwrap_or(0);
    // A version that does not parse says nothing: the words stay as they were.
    if (major, minor) != (0, 0) {
        crate::errors::set_jax_version(major, minor);
    }
}
