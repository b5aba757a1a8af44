//! The operations both faces call: each `*_impl` function checks its arguments, runs one walk
//! under the `Options` a face chose (dict order, whether `None` is a leaf, namespace, error
//! language) and returns Python objects. The faces' entry points (`face/optree.rs`,
//! `face/jax.rs`) and the graph functions (`graph.rs`) only choose what they pass.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyList, PyString, PyTuple};

use crate::containers::list_from_vec;
use crate::errors::{short_repr, type_name, TreeError};
use crate::face::options::{check_is_leaf, Options};
use crate::face::Face;
use crate::kind::Kind;
use crate::pattern::{Matcher, PathPattern, NO_MATCH};
use crate::registry;
use crate::treespec::classify::{self, Class};
use crate::treespec::flatten::{self, flat_spec, spec_of, Flat, Walked};
use crate::treespec::keys::{self, KeyStyle};
use crate::treespec::{select, PyTreeSpec};

/// `(leaves, treespec)` under `opts`.
pub fn flatten_impl<'py>(
    tree: &Bound<'py, PyAny>,
    opts: &Options<'_, 'py>,
) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyTreeSpec>)> {
    check_is_leaf(opts.is_leaf)?;
    let walked =
        registry::with_registry(|reg| flatten::flatten_or_sequence::<true, true>(tree, opts, reg))?;
    Ok(match walked {
        Walked::Sequence(kind, n) => (items_list(tree)?, sequence_spec(tree.py(), kind, n, opts)?),
        Walked::Flat(mut flat) => {
            let spec = flat_spec(tree.py(), &mut flat, opts)?;
            (list_from_vec(tree.py(), flat.leaves), spec)
        }
    })
}

/// A new list of the items of an exact tuple or list (a `Walked::Sequence` tree).
fn items_list<'py>(seq: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
    if let Ok(list) = seq.cast::<PyList>() {
        return crate::ffi::list_copy(list);
    }
    match seq.cast::<PyTuple>() {
        Ok(tuple) => crate::ffi::tuple_to_list(tuple),
        Err(_) => Err(crate::internal!("a leaf sequence that is no tuple or list")),
    }
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
    match walked {
        Walked::Sequence(kind, n) => sequence_spec(tree.py(), kind, n, opts),
        Walked::Flat(mut flat) => flat_spec(tree.py(), &mut flat, opts),
    }
}

/// The most items of a leaf sequence whose treespec is made once and shared.
const SHARED_SEQUENCE_MAX: usize = 16;

/// The treespecs of tuples and lists of up to `SHARED_SEQUENCE_MAX` leaves, made on first use,
/// by (list, none_is_leaf, face, length). A treespec is immutable and compared by value,
/// so every such flatten can hand out the same one: making and freeing it (its node vector,
/// the object) was a third of a 3-leaf tuple's flatten (callgrind: 2,436 instructions).
static SEQUENCE_SPECS: [pyo3::sync::PyOnceLock<Py<PyTreeSpec>>;
    4 * Face::COUNT * (SHARED_SEQUENCE_MAX + 1)] =
    [const { pyo3::sync::PyOnceLock::new() }; 4 * Face::COUNT * (SHARED_SEQUENCE_MAX + 1)];

/// The most items of a longer leaf sequence whose treespec is kept for the next call (8 MiB
/// of nodes at most, one treespec at a time).
const KEPT_SEQUENCE_MAX: usize = 1 << 17;

/// The treespec of the last leaf sequence of `SHARED_SEQUENCE_MAX` to `KEPT_SEQUENCE_MAX`
/// items, by (class, length) as `SEQUENCE_SPECS` files them. A loop that flattens lists of
/// one length (a step's list of parameters) gets the same treespec back instead of making
/// a node per leaf each time: on a 100,000-leaf list, making and freeing its 6.4 MB of nodes
/// was two fifths of `tree_flatten` and most of `tree_structure`.
type KeptSpec = Option<((usize, usize), Py<PyTreeSpec>)>;
static LAST_SEQUENCE_SPEC: std::sync::Mutex<KeptSpec> = std::sync::Mutex::new(None);

/// The kept treespec of a leaf sequence of class and length `key`, or `make()`'s, then kept
/// in its place.
fn kept_sequence_spec<'py>(
    py: Python<'py>,
    key: (usize, usize),
    make: impl FnOnce() -> PyResult<Bound<'py, PyTreeSpec>>,
) -> PyResult<Bound<'py, PyTreeSpec>> {
    if let Ok(last) = LAST_SEQUENCE_SPEC.lock() {
        if let Some((k, spec)) = &*last {
            if *k == key {
                return Ok(spec.bind(py).clone());
            }
        }
    }
    let spec = make()?;
    // The treespec it replaces is released once the lock is (a poisoned lock keeps none).
    let replaced = LAST_SEQUENCE_SPEC
        .lock()
        .ok()
        .and_then(|mut last| last.replace((key, spec.clone().unbind())));
    drop(replaced);
    Ok(spec)
}

/// The treespec of a `Walked::Sequence`: a tuple or list (`kind`) of `n` leaves.
fn sequence_spec<'py>(
    py: Python<'py>,
    kind: Kind,
    n: usize,
    opts: &Options<'_, 'py>,
) -> PyResult<Bound<'py, PyTreeSpec>> {
    let make = || flat_spec(py, &mut Flat::leaf_sequence(kind, n), opts);
    let class = (usize::from(kind == Kind::List) * 2 + usize::from(opts.none_is_leaf))
        * Face::COUNT
        + opts.face.index();
    if n > SHARED_SEQUENCE_MAX {
        return if n <= KEPT_SEQUENCE_MAX {
            kept_sequence_spec(py, (class, n), make)
        } else {
            make()
        };
    }
    let slot = &SEQUENCE_SPECS[class * (SHARED_SEQUENCE_MAX + 1) + n];
    if let Some(spec) = slot.get(py) {
        return Ok(spec.bind(py).clone());
    }
    let spec = make()?;
    Ok(slot.get_or_init(py, || spec.unbind()).bind(py).clone())
}

/// `tree_unflatten(treespec, leaves)` with a clear error for a non-treespec.
pub fn unflatten_impl<'py>(
    treespec: &Bound<'py, PyAny>,
    leaves: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let spec = treespec
        .cast::<PyTreeSpec>()
        .map_err(|_| TreeError::ExpectsArgument {
            function: "tree_unflatten",
            expected: "a treespec as its first argument",
            got: type_name(treespec),
        })?;
    crate::treespec::unflatten::unflatten_iterable(spec.get(), leaves)
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
        return Err(TreeError::NotCallable {
            what: "func".into(),
            type_name: type_name(func),
        }
        .into());
    }
    check_is_leaf(opts.is_leaf)?;
    let walked =
        registry::with_registry(|reg| flatten::flatten_or_sequence::<true, true>(tree, opts, reg))?;
    let flat = match walked {
        Walked::Flat(flat) => flat,
        Walked::Sequence(kind, n) => {
            if let Some(others) = sequence_rests(kind, n, rests) {
                return map_sequence(func, tree, kind, &others, keep_results);
            }
            // A tree that differs from the sequence: the general path names where.
            let mut flat = Flat::leaf_sequence(kind, n);
            flat.leaves = sequence_items(tree);
            flat
        }
    };
    let spec = spec_of(flat.nodes, flat.namespaced, opts);
    let others = if rests.is_empty() {
        Vec::new()
    } else {
        registry::with_registry(|reg| flatten_rests(&spec, tree, rests, opts, "tree_map", reg))?
    };
    let results = call_each(func, &flat.leaves, &others, keep_results)?;
    if keep_results {
        Ok(Some(crate::treespec::unflatten::build(py, &spec, results)?))
    } else {
        Ok(None)
    }
}

/// The items of an exact tuple or list (a `Walked::Sequence` tree), taken before any call of
/// the mapped function (which may change a list).
fn sequence_items<'py>(seq: &Bound<'py, PyAny>) -> Vec<Bound<'py, PyAny>> {
    let mut items = Vec::new();
    crate::ffi::extend_with_items(&mut items, seq);
    items
}

/// The items of each of `rests` when every one is, as the tree is, an exact tuple or list
/// (`kind`) of `n` items: what flattening it up to the tree's treespec gives. None when one
/// is anything else (the general path then reports it).
fn sequence_rests<'py>(
    kind: Kind,
    n: usize,
    rests: &Bound<'py, PyTuple>,
) -> Option<Vec<Vec<Bound<'py, PyAny>>>> {
    rests
        .iter()
        .map(|rest| {
            let same = match kind {
                Kind::List => rest.cast_exact::<PyList>().is_ok_and(|l| l.len() == n),
                _ => rest.cast_exact::<PyTuple>().is_ok_and(|t| t.len() == n),
            };
            same.then(|| sequence_items(&rest))
        })
        .collect()
}

/// `map_impl` over a tree that is a tuple or list (`kind`) of leaves, with `others` the
/// items of its other trees: no treespec is made (for a 100,000-leaf list, making and
/// freeing its nodes cost more than the walk).
fn map_sequence<'py>(
    func: &Bound<'py, PyAny>,
    tree: &Bound<'py, PyAny>,
    kind: Kind,
    others: &[Vec<Bound<'py, PyAny>>],
    keep_results: bool,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let py = tree.py();
    let results = call_each(func, &sequence_items(tree), others, keep_results)?;
    if !keep_results {
        return Ok(None);
    }
    Ok(Some(match kind {
        Kind::List => list_from_vec(py, results).into_any(),
        _ => crate::containers::tuple_from_vec(py, results)?.into_any(),
    }))
}

/// `func(leaf, *(o[i] for o in others))` for each leaf in order, the results kept when
/// `keep_results` says: a vectorcall of borrowed arguments (`ffi::call_borrowed`), a tuple
/// of arguments only past `ffi::MAX_CALL_ARGS`. The number of trees is matched once,
/// outside the loops.
#[inline(always)]
fn call_each<'py>(
    func: &Bound<'py, PyAny>,
    leaves: &[Bound<'py, PyAny>],
    others: &[Vec<Bound<'py, PyAny>>],
    keep_results: bool,
) -> PyResult<Vec<Bound<'py, PyAny>>> {
    let py = func.py();
    let mut results = Vec::with_capacity(if keep_results { leaves.len() } else { 0 });
    let mut keep = |r: Bound<'py, PyAny>| {
        if keep_results {
            results.push(r);
        }
    };
    match others {
        [] => {
            for leaf in leaves {
                keep(crate::ffi::call_borrowed(func, &[leaf])?);
            }
        }
        [other] => {
            for (leaf, o) in leaves.iter().zip(other) {
                keep(crate::ffi::call_borrowed(func, &[leaf, o])?);
            }
        }
        _ if others.len() < crate::ffi::MAX_CALL_ARGS => {
            for (i, leaf) in leaves.iter().enumerate() {
                let mut args = [leaf; crate::ffi::MAX_CALL_ARGS];
                for (arg, o) in args[1..].iter_mut().zip(others) {
                    *arg = &o[i];
                }
                keep(crate::ffi::call_borrowed(func, &args[..=others.len()])?);
            }
        }
        _ => {
            for (i, leaf) in leaves.iter().enumerate() {
                let mut args = Vec::with_capacity(others.len() + 1);
                args.push(leaf.clone());
                args.extend(others.iter().map(|o| o[i].clone()));
                keep(func.call1(crate::containers::tuple_from_vec(py, args)?)?);
            }
        }
    }
    Ok(results)
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
        // Formatted only for an error: a `format!` here was 7% of a 3-leaf map2.
        let which = format_args!("rests[{i}]");
        match crate::treespec::traverse::flatten_up_to(spec, &rest, reg, Some(&which)) {
            Ok(found) => others.push(found),
            Err(err)
                if spec.face.rules().reports_prefix_errors
                    && err.is_instance_of::<PyValueError>(tree.py()) =>
            {
                let errors = crate::prefix::prefix_errors(tree, &rest, opts, reg)?;
                return Err(match errors.first() {
                    Some(first) => first.named(&format!("{caller} tree")).into(),
                    None => err,
                });
            }
            Err(err) => return Err(err),
        }
    }
    Ok(others)
}

/// `(children, one-level treespec)` of `tree` under `opts`: its children as leaves.
pub fn one_level_impl<'py>(
    tree: &Bound<'py, PyAny>,
    opts: &Options<'_, 'py>,
) -> PyResult<(Bound<'py, PyList>, PyTreeSpec)> {
    let flat = registry::with_registry(|reg| flatten::flatten_one_level(tree, opts, reg))?;
    let spec = spec_of(flat.nodes, flat.namespaced, opts);
    Ok((list_from_vec(tree.py(), flat.leaves), spec))
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
    let jax = face.rules().reads_jax_registry || crate::jax_registry::main_face_reads();
    let seen_by = crate::jax_registry::Sighting::default();
    registry::with_registry(|reg| {
        Ok(matches!(
            classify::classify(
                tree,
                none_is_leaf,
                reg,
                namespace,
                face,
                jax.then_some(&seen_by)
            )?,
            Class::Leaf
        ))
    })
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
type WithPaths<'py> = (
    Vec<Bound<'py, PyTuple>>,
    Vec<Bound<'py, PyAny>>,
    Bound<'py, PyTreeSpec>,
);

/// Flattens with key paths in the given style and calls `f` with the paths (shared,
/// immutable tuples: see `keys::with_leaf_paths`), the leaves and the treespec. A tuple or
/// list of plain leaves skips the walk, as `flatten_impl` does, and its treespec and paths
/// are shared ones: walking, making the treespec and freeing it were most of a 3-leaf
/// tuple's flatten with paths (callgrind: 3,400 instructions of 5,700).
fn walk_with_paths<'py, R>(
    tree: &Bound<'py, PyAny>,
    opts: &Options<'_, 'py>,
    style: KeyStyle,
    f: impl FnOnce(&[Py<PyTuple>], Vec<Bound<'py, PyAny>>, Bound<'py, PyTreeSpec>) -> PyResult<R>,
) -> PyResult<R> {
    check_is_leaf(opts.is_leaf)?;
    let py = tree.py();
    let opts = Options {
        with_keys: style == KeyStyle::Keys,
        ..*opts
    };
    let walked = registry::with_registry(|reg| {
        flatten::flatten_or_sequence::<true, true>(tree, &opts, reg)
    })?;
    let (leaves, spec) = match walked {
        Walked::Sequence(kind, n) => {
            let spec = sequence_spec(py, kind, n, &opts)?;
            if let Some(paths) = keys::shared_sequence_paths(py, n, style)? {
                return f(paths, items_vec(tree)?, spec);
            }
            (items_vec(tree)?, spec)
        }
        Walked::Flat(mut flat) => {
            let spec = flat_spec(py, &mut flat, &opts)?;
            (flat.leaves, spec)
        }
    };
    let held = spec.clone();
    keys::with_leaf_paths(held.get(), py, style, |paths| f(paths, leaves, spec))
}

/// Flattens with key paths in the given style: (paths, leaves, treespec).
pub fn paths_impl<'py>(
    tree: &Bound<'py, PyAny>,
    opts: &Options<'_, 'py>,
    style: KeyStyle,
) -> PyResult<WithPaths<'py>> {
    let py = tree.py();
    walk_with_paths(tree, opts, style, |paths, leaves, spec| {
        let paths = paths.iter().map(|p| p.bind(py).clone()).collect();
        Ok((paths, leaves, spec))
    })
}

/// The items of an exact tuple or list (a `Walked::Sequence` tree).
fn items_vec<'py>(seq: &Bound<'py, PyAny>) -> PyResult<Vec<Bound<'py, PyAny>>> {
    if let Ok(list) = seq.cast::<PyList>() {
        return Ok(list.iter().collect());
    }
    match seq.cast::<PyTuple>() {
        Ok(tuple) => Ok(tuple.iter().collect()),
        Err(_) => Err(crate::internal!("a leaf sequence that is no tuple or list")),
    }
}

pub fn tuples_to_list<'py>(py: Python<'py>, items: Vec<Bound<'py, PyTuple>>) -> Bound<'py, PyList> {
    list_from_vec(py, items.into_iter().map(Bound::into_any).collect())
}

/// JAX-style `([(key_path, leaf), ...], treespec)` under `opts`. Each leaf's place in the
/// leaf vector takes its pair, which the list then takes over with the vector's buffer.
pub fn keyed_pairs_impl<'py>(
    tree: &Bound<'py, PyAny>,
    opts: &Options<'_, 'py>,
) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyTreeSpec>)> {
    let py = tree.py();
    walk_with_paths(tree, opts, KeyStyle::Keys, |paths, mut leaves, spec| {
        if paths.len() != leaves.len() {
            return Err(crate::internal!("a path count unlike the leaf count"));
        }
        for (slot, path) in leaves.iter_mut().zip(paths) {
            let pair =
                crate::containers::tuple_pair(py, path.bind(py).clone().into_any(), slot.clone())?;
            *slot = pair.into_any();
        }
        Ok((list_from_vec(py, leaves), spec))
    })
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
        return Err(TreeError::NotCallable {
            what: "func".into(),
            type_name: type_name(func),
        }
        .into());
    }
    let (paths, leaves, spec) = paths_impl(tree, opts, style)?;
    let others = registry::with_registry(|reg| {
        flatten_rests(spec.get(), tree, rests, opts, "tree_map_with_path", reg)
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
            func.call1(crate::containers::tuple_from_vec(py, args)?)?
        };
        results.push(r);
    }
    crate::treespec::unflatten::build(py, spec.get(), results)
}

// ---------------------------------------------------------------------------------------------
// Selecting leaves by path pattern (pattern/mod.rs, treespec/select.rs)

/// Flattens `tree` under `opts` and matches `m` against every leaf's key path: for each leaf
/// the tag of the first pattern it matches (`NO_MATCH` for none), the leaves (when `LEAVES`)
/// and the treespec.
fn select_walk<'py, const LEAVES: bool>(
    tree: &Bound<'py, PyAny>,
    opts: &Options<'_, 'py>,
    m: &Matcher,
    any_order: bool,
) -> PyResult<(Vec<u32>, Vec<Bound<'py, PyAny>>, PyTreeSpec)> {
    check_is_leaf(opts.is_leaf)?;
    let opts = Options {
        with_keys: true,
        ..*opts
    };
    let flat =
        registry::with_registry(|reg| flatten::flatten_opts::<true, LEAVES>(tree, &opts, reg))?;
    let spec = spec_of(flat.nodes, flat.namespaced, &opts);
    let hits = select::leaf_matches(tree.py(), &spec, m, any_order)?;
    Ok((hits, flat.leaves, spec))
}

/// `tree_mask`: the tree with each leaf replaced by whether its key path matches any of
/// `patterns`.
pub fn mask_impl<'py>(
    tree: &Bound<'py, PyAny>,
    patterns: &Bound<'py, PyTuple>,
    opts: &Options<'_, 'py>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = tree.py();
    let m = PathPattern::compile_args("tree_mask", patterns.iter().collect(), false)?;
    let (hits, _, spec) = select_walk::<false>(tree, opts, m.matcher(), true)?;
    let flags = hits
        .iter()
        .map(|&h| PyBool::new(py, h != NO_MATCH).to_owned().into_any())
        .collect();
    crate::treespec::unflatten::build(py, &spec, flags)
}

/// The patterns of some rules, and their labels.
type Rules<'py> = (Vec<Bound<'py, PyAny>>, Vec<Bound<'py, PyAny>>);

/// The (pattern, label) pairs of `tree_labels`'s rules: a mapping's items in its order, or
/// an iterable of pairs.
fn rule_pairs<'py>(rules: &Bound<'py, PyAny>) -> PyResult<Rules<'py>> {
    let bad = || -> PyErr {
        TreeError::NotRules {
            type_name: type_name(rules),
            shown: short_repr(rules, 60),
        }
        .into()
    };
    if rules.is_instance_of::<PyString>() || rules.is_instance_of::<pyo3::types::PyBytes>() {
        return Err(bad());
    }
    let items = if rules.is_instance_of::<PyDict>() || rules.hasattr("items")? {
        rules.call_method0("items")?
    } else {
        rules.clone()
    };
    let iter = items.try_iter().map_err(|_| bad())?;
    let (mut patterns, mut labels) = (Vec::new(), Vec::new());
    for item in iter {
        let item = item?;
        let pair = item
            .cast::<PyTuple>()
            .ok()
            .filter(|t| t.len() == 2)
            .map(|t| (t.get_item(0), t.get_item(1)));
        match pair {
            Some((Ok(p), Ok(l))) => {
                patterns.push(p);
                labels.push(l);
            }
            _ => {
                return Err(TreeError::RuleNotAPair {
                    shown: short_repr(&item, 60),
                }
                .into())
            }
        }
    }
    Ok((patterns, labels))
}

/// `tree_labels`: the tree with each leaf replaced by the label of the first rule whose
/// pattern its key path matches, or `default`; without a default an unmatched leaf raises.
pub fn labels_impl<'py>(
    tree: &Bound<'py, PyAny>,
    rules: &Bound<'py, PyAny>,
    default: Option<Bound<'py, PyAny>>,
    opts: &Options<'_, 'py>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = tree.py();
    let (patterns, labels) = rule_pairs(rules)?;
    let m = PathPattern::compile_args("tree_labels", patterns, true)?;
    let (hits, _, spec) = select_walk::<false>(tree, opts, m.matcher(), false)?;
    let mut out = Vec::with_capacity(hits.len());
    for (i, &h) in hits.iter().enumerate() {
        let label = match labels.get(h as usize) {
            Some(label) => label.clone(),
            None => match &default {
                Some(d) => d.clone(),
                None => {
                    let path = keys::leaf_paths(&spec, py, KeyStyle::Keys)?
                        .swap_remove(i)
                        .into_any();
                    let unmatched = hits.iter().filter(|&&h| h == NO_MATCH).count();
                    return Err(TreeError::NoRuleMatches {
                        path: repr_keystr(&path)?,
                        unmatched,
                        total: hits.len(),
                    }
                    .into());
                }
            },
        };
        out.push(label);
    }
    crate::treespec::unflatten::build(py, &spec, out)
}

/// A key path as `keystr` prints it, `()` for the root.
fn repr_keystr(path: &Bound<'_, PyAny>) -> PyResult<String> {
    let text = crate::key_classes::keystr(path, false, "")?;
    Ok(if text.is_empty() { "()".into() } else { text })
}

/// `tree_set_matching`: the tree with each leaf whose key path matches `pattern` replaced by
/// `value`, or by `func(key_path, leaf)`; exactly one of the two is given.
pub fn set_matching_impl<'py>(
    tree: &Bound<'py, PyAny>,
    pattern: &Bound<'py, PyAny>,
    value: Option<Bound<'py, PyAny>>,
    func: Option<&Bound<'py, PyAny>>,
    opts: &Options<'_, 'py>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = tree.py();
    match (&value, func) {
        (Some(_), Some(_)) => return Err(TreeError::SetMatchingArgs { both: true }.into()),
        (None, None) => return Err(TreeError::SetMatchingArgs { both: false }.into()),
        (None, Some(f)) if !f.is_callable() => {
            return Err(TreeError::NotCallable {
                what: "tree_set_matching: func".into(),
                type_name: type_name(f),
            }
            .into())
        }
        _ => {}
    }
    let m = PathPattern::compile_args("tree_set_matching", vec![pattern.clone()], false)?;
    let (hits, leaves, spec) = select_walk::<true>(tree, opts, m.matcher(), true)?;
    let paths = match func {
        Some(_) => Some(keys::leaf_paths(&spec, py, KeyStyle::Keys)?),
        None => None,
    };
    let mut out = Vec::with_capacity(leaves.len());
    for (i, (leaf, &h)) in leaves.into_iter().zip(&hits).enumerate() {
        out.push(match (h == NO_MATCH, &value, func, &paths) {
            (true, ..) => leaf,
            (false, Some(v), ..) => v.clone(),
            (false, None, Some(f), Some(paths)) => f.call1((paths[i].clone(), leaf))?,
            _ => return Err(crate::internal!("tree_set_matching without value or func")),
        });
    }
    crate::treespec::unflatten::build(py, &spec, out)
}
