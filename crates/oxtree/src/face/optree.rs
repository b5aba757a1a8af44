//! The main face's entry points (module `oxtree._core`, re-exported by `oxtree`): optree's
//! names and signatures over the shared walks (`walk.rs`), dicts rebuilt in insertion order.

use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

use super::Given;
use crate::face::options::Options;
use crate::face::Face;
use crate::invariant::Invariant;
use crate::treespec::keys::KeyStyle;
use crate::treespec::PyTreeSpec;
use crate::walk;

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
    walk::flatten_impl(tree, &Options::new(is_leaf, none_is_leaf, namespace))
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
    walk::leaves_impl(tree, &Options::new(is_leaf, none_is_leaf, namespace))
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
    walk::structure_impl(tree, &Options::new(is_leaf, none_is_leaf, namespace))
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
    walk::unflatten_impl(treespec, leaves)
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
    walk::map_impl(func, tree, rests, &opts, true)?.invariant("tree_map kept no result")
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
    walk::map_impl(
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
    walk::is_leaf_impl(tree, is_leaf, none_is_leaf, namespace, Face::Optree)
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
    walk::all_leaves_impl(iterable, is_leaf, none_is_leaf, namespace, Face::Optree)
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
) -> PyResult<(
    Bound<'py, PyList>,
    Bound<'py, PyList>,
    Bound<'py, PyTreeSpec>,
)> {
    let opts = path_opts(is_leaf, is_leaf_takes_path, none_is_leaf, namespace);
    let (paths, leaves, spec) = walk::paths_impl(tree, &opts, KeyStyle::Raw)?;
    Ok((
        walk::tuples_to_list(py, paths),
        crate::containers::list_from_vec(py, leaves),
        spec,
    ))
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
    Ok(walk::tuples_to_list(
        py,
        walk::paths_impl(tree, &opts, KeyStyle::Raw)?.0,
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
#[pyo3(signature = (tree, /, is_leaf = None, *, is_leaf_takes_path = false, none_is_leaf = false, namespace = "", jax_registry = None))]
pub fn tree_flatten_with_keys<'py>(
    tree: &Bound<'py, PyAny>,
    is_leaf: Option<&Bound<'py, PyAny>>,
    is_leaf_takes_path: bool,
    none_is_leaf: bool,
    namespace: &str,
    jax_registry: Option<bool>,
) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyTreeSpec>)> {
    walk::keyed_pairs_impl(
        tree,
        &path_opts(is_leaf, is_leaf_takes_path, none_is_leaf, namespace)
            .with_jax_registry(jax_registry),
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
    Ok(walk::keyed_pairs_impl(
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
    walk::map_with_paths_impl(func, tree, rests, &opts, KeyStyle::Raw)
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
    walk::map_with_paths_impl(func, tree, rests, &opts, KeyStyle::Keys)
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
) -> PyResult<(
    Bound<'py, PyList>,
    Bound<'py, PyList>,
    Bound<'py, PyTreeSpec>,
)> {
    let (paths, leaves, spec) = walk::paths_impl(
        tree,
        &Options::new(is_leaf, none_is_leaf, namespace),
        KeyStyle::Steps,
    )?;
    Ok((
        walk::tuples_to_list(py, paths),
        crate::containers::list_from_vec(py, leaves),
        spec,
    ))
}

/// `(children, one-level treespec)` of `tree`: its children as leaves. The one primitive the
/// Python layers use to take a node apart (accessors, `tree_set`, `tree_flatten_one_level`,
/// treespec constructors, JAX's `flatten_one_level`), with no Python call per child.
#[pyfunction]
#[pyo3(signature = (tree, /, *, none_is_leaf = false, namespace = "", jax = false, jax_registry = None))]
pub fn _flatten_one_level<'py>(
    tree: &Bound<'py, PyAny>,
    none_is_leaf: bool,
    namespace: &str,
    jax: bool,
    jax_registry: Option<bool>,
) -> PyResult<(Bound<'py, PyList>, PyTreeSpec)> {
    let opts = Options::on_face(None, none_is_leaf, namespace, jax).with_jax_registry(jax_registry);
    walk::one_level_impl(tree, &opts)
}

/// `tree_flatten` of the main face for `oxtree.jax`, which reads JAX's registry too (or as
/// `jax_registry` says): optree's dict order and namespaces, JAX's registered types as nodes.
#[pyfunction]
#[pyo3(signature = (tree, /, is_leaf = None, *, none_is_leaf = false, namespace = "", jax_registry = true))]
pub fn _tree_flatten_jax_registry<'py>(
    tree: &Bound<'py, PyAny>,
    is_leaf: Option<&Bound<'py, PyAny>>,
    none_is_leaf: bool,
    namespace: &str,
    jax_registry: bool,
) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyTreeSpec>)> {
    let opts = Options::new(is_leaf, none_is_leaf, namespace).with_jax_registry(Some(jax_registry));
    walk::flatten_impl(tree, &opts)
}

/// The tree with every leaf replaced by whether its key path matches any of `patterns`
/// (globs over its `keystr`, compiled `re.Pattern`s or `PathPattern`s; see `PathPattern`):
/// a mask for `optax.masked`, or a filter spec for `oxtree.jax.partition`.
///
/// >>> tree_mask({'enc': {'w': 1, 'bias': 2}, 'head': {'w': 3}}, "**['bias']", "['head']**")
/// {'enc': {'w': False, 'bias': True}, 'head': {'w': True}}
#[pyfunction]
#[pyo3(signature = (tree, /, *patterns, is_leaf = None, none_is_leaf = false, namespace = ""))]
pub fn tree_mask<'py>(
    tree: &Bound<'py, PyAny>,
    patterns: &Bound<'py, PyTuple>,
    is_leaf: Option<&Bound<'py, PyAny>>,
    none_is_leaf: bool,
    namespace: &str,
) -> PyResult<Bound<'py, PyAny>> {
    walk::mask_impl(
        tree,
        patterns,
        &Options::new(is_leaf, none_is_leaf, namespace),
    )
}

/// The tree with every leaf replaced by the label of the first rule whose pattern its key
/// path matches: `rules` maps patterns to labels (or is a sequence of `(pattern, label)`
/// pairs); a leaf no rule matches gets `default`, and without one it raises ValueError.
/// Labels for `optax.multi_transform`.
///
/// >>> tree_labels({'w': 1, 'b': 2, 'n': 3}, {"['b']": 'no_decay', "['n']": 'frozen'}, 'decay')
/// {'w': 'decay', 'b': 'no_decay', 'n': 'frozen'}
#[pyfunction]
#[pyo3(signature = (tree, rules, /, default = Given(None), *, is_leaf = None, none_is_leaf = false, namespace = ""))]
#[pyo3(
    text_signature = "(tree, rules, /, default=..., *, is_leaf=None, none_is_leaf=False, namespace='')"
)]
pub fn tree_labels<'py>(
    tree: &Bound<'py, PyAny>,
    rules: &Bound<'py, PyAny>,
    default: Given<'py>,
    is_leaf: Option<&Bound<'py, PyAny>>,
    none_is_leaf: bool,
    namespace: &str,
) -> PyResult<Bound<'py, PyAny>> {
    walk::labels_impl(
        tree,
        rules,
        default.0,
        &Options::new(is_leaf, none_is_leaf, namespace),
    )
}

/// A new tree in which every leaf whose key path matches `pattern` is replaced by `value`,
/// or by `func(key_path, leaf)`; the other leaves and `tree` itself are left as they are.
///
/// >>> tree = {'enc': [1, 2], 'dec': [3]}
/// >>> tree_set_matching(tree, "['enc'][*]", 0)
/// {'enc': [0, 0], 'dec': [3]}
/// >>> tree_set_matching(tree, '**', func=lambda path, x: f'{keystr(path)}={x}')
/// {'enc': ["['enc'][0]=1", "['enc'][1]=2"], 'dec': ["['dec'][0]=3"]}
#[pyfunction]
#[pyo3(signature = (tree, pattern, /, value = Given(None), *, func = None, is_leaf = None, none_is_leaf = false, namespace = ""))]
#[pyo3(
    text_signature = "(tree, pattern, /, value=..., *, func=None, is_leaf=None, none_is_leaf=False, namespace='')"
)]
pub fn tree_set_matching<'py>(
    tree: &Bound<'py, PyAny>,
    pattern: &Bound<'py, PyAny>,
    value: Given<'py>,
    func: Option<&Bound<'py, PyAny>>,
    is_leaf: Option<&Bound<'py, PyAny>>,
    none_is_leaf: bool,
    namespace: &str,
) -> PyResult<Bound<'py, PyAny>> {
    walk::set_matching_impl(
        tree,
        pattern,
        value.0,
        func,
        &Options::new(is_leaf, none_is_leaf, namespace),
    )
}
