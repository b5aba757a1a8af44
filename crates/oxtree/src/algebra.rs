//! The tree algebra both faces share: broadcasting a prefix, transposing, reducing, and the
//! facts about types and nodes the Python layers would otherwise re-derive (a type's node
//! kind, rebuilding a registered node from new metadata).
//!
//! Each function is one implementation; a face chooses only what it passes (`jax=True` for
//! JAX's flatten rules and error texts, `none_is_leaf` and `namespace` for optree's), and
//! each public call crosses the Python/Rust boundary once.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple, PyType};

use crate::containers::list_from_vec;
use crate::errors::{TransposeFault, TreeError};
use crate::face::options::{check_is_leaf, Options};
use crate::face::Face;
use crate::invariant::Invariant;
use crate::kind::Kind;
use crate::registry::{self, Registry, Rule};
use crate::treespec::classify::{self, Class};
use crate::treespec::flatten::{self, spec_of};
use crate::treespec::{ops, PyTreeSpec};
use crate::walk::leaves_impl;

/// The node kind instances of `cls` have in a walk under these options (`PyTreeKind.LEAF`
/// for a leaf type, and for anything that is not a type): the walk's own dispatch, asked for
/// a type. `jax=True` answers for JAX's face (deques and struct sequences are leaves).
///
/// >>> _node_kind(list), _node_kind(int), _node_kind(type(None), none_is_leaf=True)
/// (<PyTreeKind.LIST: 4>, <PyTreeKind.LEAF: 1>, <PyTreeKind.LEAF: 1>)
#[pyfunction]
#[pyo3(signature = (cls, /, *, none_is_leaf = false, namespace = "", jax = false))]
pub fn _node_kind<'py>(
    cls: &Bound<'py, PyAny>,
    none_is_leaf: bool,
    namespace: &str,
    jax: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let py = cls.py();
    let kind = match cls.cast::<PyType>() {
        Ok(ty) => registry::with_registry(|reg| {
            let reads_jax = jax || crate::jax_registry::main_face_reads();
            let seen_by = crate::jax_registry::Sighting::default();
            Ok::<_, PyErr>(
                match classify::classify_type(
                    ty,
                    none_is_leaf,
                    reg,
                    namespace,
                    Face::of(jax),
                    reads_jax.then_some(&seen_by),
                )? {
                    Class::Leaf => Kind::Leaf,
                    Class::NoneNode => Kind::None,
                    Class::Node(kind) => kind,
                    Class::Custom(_) => Kind::Custom,
                },
            )
        })?,
        Err(_) => Kind::Leaf,
    };
    kind.to_py(py)
}

/// Whether `value` is a node that JAX registers and oxtree does not (an equinox module, a
/// `flax.struct` dataclass, an NNX `State`, a `jax.tree_util.Partial`): the JAX face's walk
/// would take it apart with JAX's rule. False for every builtin node kind, for any type
/// registered with oxtree in its global namespace, and whenever JAX is not imported. What
/// makes a Module attribute a parameter by itself; a leaf type, once known, costs a hash
/// lookup.
///
/// >>> _jax_only_node(1.0), _jax_only_node((1, 2)), _jax_only_node({'a': 1})
/// (False, False, False)
#[pyfunction]
#[pyo3(signature = (value, /))]
pub fn _jax_only_node(value: &Bound<'_, PyAny>) -> PyResult<bool> {
    let ty = value.get_type();
    registry::with_registry(|reg| {
        let seen_by = crate::jax_registry::Sighting::default();
        Ok(
            match classify::classify_type(&ty, false, reg, "", Face::Jax, Some(&seen_by))? {
                // The registry is asked first: a registration found there is oxtree's own.
                Class::Custom(_) => reg.lookup(ty.as_type_ptr(), "").is_none(),
                _ => false,
            },
        )
    })
}

/// Rebuilds the root node of `treespec`, a registered node, from `metadata` (in the form
/// its `node_data()` shows: a dataclass's meta fields as `((name, value), ...)`) and
/// `children`, through its registration: what optree's `tree_flatten_one_level` hands out as
/// the node's `unflatten_func`.
#[pyfunction]
#[pyo3(signature = (treespec, metadata, children, /))]
pub fn _unflatten_node<'py>(
    treespec: &Bound<'py, PyTreeSpec>,
    metadata: &Bound<'py, PyAny>,
    children: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = metadata.py();
    let spec = treespec.get();
    let root = spec.root();
    let Some(reg) = root.custom() else {
        return Err(TreeError::ExpectsArgument {
            function: "_unflatten_node",
            expected: "a treespec whose root is a registered node",
            got: crate::treespec::repr::repr(spec, py)?,
        }
        .into());
    };
    let children = PyTuple::new(py, children.try_iter()?.collect::<PyResult<Vec<_>>>()?)?;
    let cls = || reg.ty.bind(py).qualname().map(|n| n.to_string());
    let aux = match &reg.rule {
        Rule::Custom { .. } => metadata.clone(),
        Rule::Static => {
            if !children.is_empty() {
                return Err(TreeError::NodeChildren {
                    cls: cls()?,
                    expected: None,
                    got: children.len(),
                }
                .into());
            }
            metadata.clone()
        }
        Rule::Dataclass { data, meta, .. } => {
            if children.len() != data.len() {
                return Err(TreeError::NodeChildren {
                    cls: cls()?,
                    expected: Some(data.len()),
                    got: children.len(),
                }
                .into());
            }
            meta_values(py, metadata, meta).ok_or_else(|| -> PyErr {
                TreeError::NodeMetadata {
                    cls: cls().unwrap_or_default(),
                    names: meta.iter().map(|n| n.to_string()).collect(),
                    got: crate::errors::short_repr(metadata, 80),
                }
                .into()
            })?
        }
    };
    crate::treespec::custom::unflatten(py, reg, &aux, children)
}

/// The values of `((name, value), ...)` when the names are `names`, in order.
fn meta_values<'py>(
    py: Python<'py>,
    metadata: &Bound<'py, PyAny>,
    names: &[Py<pyo3::types::PyString>],
) -> Option<Bound<'py, PyAny>> {
    let pairs = metadata.cast::<PyTuple>().ok()?;
    if pairs.len() != names.len() {
        return None;
    }
    let mut values = Vec::with_capacity(names.len());
    for (pair, name) in pairs.iter().zip(names) {
        let pair = pair.cast_into::<PyTuple>().ok()?;
        if pair.len() != 2 || !pair.get_item(0).ok()?.eq(name.bind(py)).ok()? {
            return None;
        }
        values.push(pair.get_item(1).ok()?);
    }
    PyTuple::new(py, values).ok().map(Bound::into_any)
}

/// The leaves of `tree` under `opts`, as a Rust vector.
fn leaves_of<'py>(
    tree: &Bound<'py, PyAny>,
    opts: &Options<'_, 'py>,
) -> PyResult<Vec<Bound<'py, PyAny>>> {
    Ok(leaves_impl(tree, opts)?.iter().collect())
}

/// `prefix_tree` broadcast over `full_tree`: each leaf of `prefix_tree` repeated over the
/// subtree of `full_tree` under it. One walk of each tree, one crossing of the boundary.
///
/// optree's face (`tree_broadcast_prefix`, `broadcast_prefix`) keeps the prefix tree's nodes
/// above its leaves, applies `is_leaf` to both trees and reports a mismatch as `tree_map`
/// does; JAX's (`tree_broadcast`, `jax=True`) rebuilds with the full tree's structure,
/// applies `is_leaf` to the prefix only, and reports JAX's first prefix error, naming the
/// prefix `broadcast_prefix prefix_tree`. `leaves=True` returns the broadcast leaves alone.
///
/// >>> _broadcast_prefix((1, 2), ([3, 4], {'a': 5}))
/// ([1, 1], {'a': 2})
/// >>> _broadcast_prefix((1, 2), ([3, 4], {'a': 5}), leaves=True)
/// [1, 1, 2]
#[pyfunction]
#[pyo3(signature = (prefix_tree, full_tree, /, is_leaf = None, *, none_is_leaf = false, namespace = "", jax = false, leaves = false, jax_registry = None))]
#[allow(clippy::too_many_arguments)]
pub fn _broadcast_prefix<'py>(
    prefix_tree: &Bound<'py, PyAny>,
    full_tree: &Bound<'py, PyAny>,
    is_leaf: Option<&Bound<'py, PyAny>>,
    none_is_leaf: bool,
    namespace: &str,
    jax: bool,
    leaves: bool,
    jax_registry: Option<bool>,
) -> PyResult<Bound<'py, PyAny>> {
    check_is_leaf(is_leaf)?;
    let opts =
        Options::on_face(is_leaf, none_is_leaf, namespace, jax).with_jax_registry(jax_registry);
    registry::with_registry(|reg| broadcast(prefix_tree, full_tree, &opts, leaves, reg))
}

fn broadcast<'py>(
    prefix_tree: &Bound<'py, PyAny>,
    full_tree: &Bound<'py, PyAny>,
    opts: &Options<'_, 'py>,
    leaves_only: bool,
    reg: &Registry,
) -> PyResult<Bound<'py, PyAny>> {
    let py = prefix_tree.py();
    let jax = opts.face.rules().broadcasts_into_full_structure;
    let flat = flatten::flatten_opts::<true, true>(prefix_tree, opts, reg)?;
    let prefix = spec_of(flat.nodes, flat.namespaced, opts);
    let subtrees = match crate::treespec::traverse::flatten_up_to(&prefix, full_tree, reg, None) {
        Ok(subtrees) => subtrees,
        Err(err)
            if opts.face.rules().reports_prefix_errors
                && err.is_instance_of::<PyValueError>(py) =>
        {
            return Err(jax_prefix_error(prefix_tree, full_tree, opts, reg, err)?)
        }
        Err(err) => return Err(err),
    };
    // JAX's face applies `is_leaf` to the prefix tree only.
    let full_opts = Options {
        is_leaf: if jax { None } else { opts.is_leaf },
        ..*opts
    };
    let pieces = subtrees
        .iter()
        .map(|sub| {
            let f = flatten::flatten_opts::<true, false>(sub, &full_opts, reg)?;
            Ok(spec_of(f.nodes, f.namespaced, &full_opts))
        })
        .collect::<PyResult<Vec<PyTreeSpec>>>()?;
    if leaves_only || jax {
        let mut out = Vec::with_capacity(pieces.iter().map(PyTreeSpec::num_leaves).sum());
        for (leaf, piece) in flat.leaves.iter().zip(&pieces) {
            out.extend(std::iter::repeat_n(leaf, piece.num_leaves()).cloned());
        }
        if leaves_only {
            return Ok(list_from_vec(py, out).into_any());
        }
        let full = flatten::flatten_opts::<true, false>(full_tree, &full_opts, reg)?;
        let full = spec_of(full.nodes, full.namespaced, &full_opts);
        return crate::treespec::unflatten::build(py, &full, out);
    }
    let spread = flat
        .leaves
        .into_iter()
        .zip(&pieces)
        .map(|(leaf, piece)| spread_over(py, leaf, piece))
        .collect::<PyResult<Vec<_>>>()?;
    crate::treespec::unflatten::build(py, &prefix, spread)
}

/// `value` repeated over the structure `piece` (itself, when `piece` is a leaf).
fn spread_over<'py>(
    py: Python<'py>,
    value: Bound<'py, PyAny>,
    piece: &PyTreeSpec,
) -> PyResult<Bound<'py, PyAny>> {
    if piece.nodes.len() == 1 && piece.root().kind == Kind::Leaf {
        return Ok(value);
    }
    crate::treespec::unflatten::build(py, piece, vec![value; piece.num_leaves()])
}

/// `trees` broadcast to their common suffix structure (optree's `tree_broadcast_common`,
/// `broadcast_common`, `tree_broadcast_map`): wherever one tree has a leaf and another a
/// subtree, the leaf is repeated over that subtree's structure; each tree keeps its own
/// nodes. Returns a list of the broadcast trees, or with `leaves=True` of their leaves (in
/// the common structure's order, as optree lists them). With
/// `indices=True` each tree's leaves are replaced by their positions (0, 1, ...) and the
/// result is `(broadcast trees, each tree's leaves)`: what `tree_broadcast_map` maps over.
///
/// >>> _broadcast_common(((1, {'a': 2}), ((3, 4), 5)))
/// [((1, 1), {'a': 2}), ((3, 4), {'a': 5})]
#[pyfunction]
#[pyo3(signature = (trees, /, is_leaf = None, *, none_is_leaf = false, namespace = "", leaves = false, indices = false))]
pub fn _broadcast_common<'py>(
    trees: &Bound<'py, PyAny>,
    is_leaf: Option<&Bound<'py, PyAny>>,
    none_is_leaf: bool,
    namespace: &str,
    leaves: bool,
    indices: bool,
) -> PyResult<Bound<'py, PyAny>> {
    check_is_leaf(is_leaf)?;
    let py = trees.py();
    let opts = Options::on_face(is_leaf, none_is_leaf, namespace, false);
    let trees = trees.try_iter()?.collect::<PyResult<Vec<_>>>()?;
    let flats = registry::with_registry(|reg| {
        trees
            .iter()
            .map(|tree| flatten::flatten_opts::<true, true>(tree, &opts, reg))
            .collect::<PyResult<Vec<_>>>()
    })?;
    let mut specs = Vec::with_capacity(flats.len());
    let mut values = Vec::with_capacity(flats.len());
    for flat in flats {
        specs.push(spec_of(flat.nodes, flat.namespaced, &opts));
        values.push(flat.leaves);
    }
    let Some(first) = specs.first() else {
        return Err(TreeError::SuffixOfNothing.into());
    };
    let mut folded: Option<PyTreeSpec> = None;
    for spec in &specs[1..] {
        folded = Some(ops::common_suffix(
            py,
            folded.as_ref().unwrap_or(first),
            spec,
        )?);
    }
    let common = folded.as_ref().unwrap_or(first);
    let mut out = Vec::with_capacity(specs.len());
    for (spec, own) in specs.iter().zip(&values) {
        let places = ops::prefix_leaf_places(py, spec, common)?
            .invariant("a tree's structure is a prefix of the common suffix")?;
        let values: Vec<Bound<'py, PyAny>> = if indices {
            (0..own.len())
                .map(|k| Ok(k.into_pyobject(py)?.into_any()))
                .collect::<PyResult<_>>()?
        } else {
            own.clone()
        };
        let spread = values
            .into_iter()
            .zip(&places)
            .map(|(value, &j)| spread_over(py, value, &common.subtree(py, j)))
            .collect::<PyResult<Vec<_>>>()?;
        let tree = crate::treespec::unflatten::build(py, spec, spread)?;
        out.push(if leaves {
            // In the common structure's order (a mapping paired with another kind lists its
            // values in the common structure's key order), as optree takes them.
            let found = registry::with_registry(|reg| {
                crate::treespec::traverse::flatten_up_to(common, &tree, reg, None)
            })?;
            list_from_vec(py, found).into_any()
        } else {
            tree
        });
    }
    let out = list_from_vec(py, out);
    if !indices {
        return Ok(out.into_any());
    }
    let own = values.into_iter().map(|v| list_from_vec(py, v).into_any());
    let own = list_from_vec(py, own.collect());
    Ok(PyTuple::new(py, [out.into_any(), own.into_any()])?.into_any())
}

/// JAX's report of a prefix that does not fit: its first prefix error (`is_leaf` unused, as
/// in JAX), or `err` when that finds none.
#[cold]
fn jax_prefix_error<'py>(
    prefix_tree: &Bound<'py, PyAny>,
    full_tree: &Bound<'py, PyAny>,
    opts: &Options<'_, 'py>,
    reg: &Registry,
    err: PyErr,
) -> PyResult<PyErr> {
    let plain = Options {
        is_leaf: None,
        ..*opts
    };
    let errors = crate::prefix::prefix_errors(prefix_tree, full_tree, &plain, reg)?;
    Ok(match errors.first() {
        Some(first) => first.named("broadcast_prefix prefix_tree").into(),
        None => err,
    })
}

/// `functools.reduce(func, leaves[, initial])` over the leaves of `tree` (`initial`: none or
/// one positional argument).
///
/// >>> _tree_reduce(lambda a, b: a + b, [1, (2, 3)]), _tree_reduce(max, [], 7)
/// (6, 7)
#[pyfunction]
#[pyo3(signature = (func, tree, /, *initial, is_leaf = None, none_is_leaf = false, namespace = "", jax = false))]
pub fn _tree_reduce<'py>(
    func: &Bound<'py, PyAny>,
    tree: &Bound<'py, PyAny>,
    initial: &Bound<'py, PyTuple>,
    is_leaf: Option<&Bound<'py, PyAny>>,
    none_is_leaf: bool,
    namespace: &str,
    jax: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let opts = Options::on_face(is_leaf, none_is_leaf, namespace, jax);
    let mut leaves = leaves_of(tree, &opts)?.into_iter();
    let mut acc = match optional(initial, "initial")? {
        Some(start) => start,
        None => leaves
            .next()
            .ok_or_else(|| PyErr::from(TreeError::EmptyReduce))?,
    };
    for leaf in leaves {
        acc = func.call1((acc, leaf))?;
    }
    Ok(acc)
}

/// The one optional value a `*args` of at most one item holds.
fn optional<'py>(
    args: &Bound<'py, PyTuple>,
    what: &'static str,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    match args.len() {
        0 => Ok(None),
        1 => Ok(Some(args.get_item(0)?)),
        got => Err(TreeError::TooManyValues { what, got }.into()),
    }
}

/// The leaves of `tree` reduced pairwise with an associative `operation`: a balanced tree of
/// calls, the left half before the right half, as JAX pairs them. `identity` (none or one
/// positional argument) is the result for a tree without leaves and otherwise unused.
///
/// >>> _tree_reduce_associative(lambda a, b: f'({a}+{b})', [1, 2, (3, 4, 5)])
/// '((1+2)+(3+(4+5)))'
#[pyfunction]
#[pyo3(signature = (operation, tree, /, *identity, is_leaf = None, none_is_leaf = false, namespace = "", jax = false))]
pub fn _tree_reduce_associative<'py>(
    operation: &Bound<'py, PyAny>,
    tree: &Bound<'py, PyAny>,
    identity: &Bound<'py, PyTuple>,
    is_leaf: Option<&Bound<'py, PyAny>>,
    none_is_leaf: bool,
    namespace: &str,
    jax: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let opts = Options::on_face(is_leaf, none_is_leaf, namespace, jax);
    let leaves = leaves_of(tree, &opts)?;
    if leaves.is_empty() {
        return optional(identity, "identity")?
            .ok_or_else(|| PyErr::from(TreeError::EmptyAssociativeReduce));
    }
    pairwise(operation, &leaves)
}

/// Native recursion only log2(leaves) deep.
fn pairwise<'py>(
    op: &Bound<'py, PyAny>,
    values: &[Bound<'py, PyAny>],
) -> PyResult<Bound<'py, PyAny>> {
    if let [one] = values {
        return Ok(one.clone());
    }
    let (left, right) = values.split_at(values.len() / 2);
    op.call1((pairwise(op, left)?, pairwise(op, right)?))
}

/// Whether every leaf of `tree` is truthy (`any=True`: whether some leaf is).
///
/// >>> _tree_all([1, (True, None)]), _tree_all([0, 1], any=True), _tree_all([])
/// (True, True, True)
#[pyfunction]
#[pyo3(signature = (tree, /, is_leaf = None, *, none_is_leaf = false, namespace = "", jax = false, any = false))]
pub fn _tree_all(
    tree: &Bound<'_, PyAny>,
    is_leaf: Option<&Bound<'_, PyAny>>,
    none_is_leaf: bool,
    namespace: &str,
    jax: bool,
    any: bool,
) -> PyResult<bool> {
    let opts = Options::on_face(is_leaf, none_is_leaf, namespace, jax);
    for leaf in leaves_impl(tree, &opts)?.iter() {
        if leaf.is_truthy()? == any {
            return Ok(any);
        }
    }
    Ok(!any)
}

/// `tree`, a tree of structure `outer_treespec` whose subtrees have structure
/// `inner_treespec`, turned inside out. `inner_treespec=None` takes the structure of the
/// subtree under the first outer leaf. Only the total number of leaves is checked. optree's
/// face flattens with the outer treespec's options and `is_leaf`, and refuses structures
/// without leaves (ValueError); JAX's (`jax=True`) flattens as JAX does and says JAX's
/// `Mismatch` text.
///
/// >>> _tree_transpose(tree_structure([0, 0]), None, [(1, 2), (3, 4)])
/// ([1, 3], [2, 4])
#[pyfunction]
#[pyo3(signature = (outer_treespec, inner_treespec, tree, /, is_leaf = None, *, jax = false))]
pub fn _tree_transpose<'py>(
    outer_treespec: &Bound<'py, PyTreeSpec>,
    inner_treespec: Option<&Bound<'py, PyTreeSpec>>,
    tree: &Bound<'py, PyAny>,
    is_leaf: Option<&Bound<'py, PyAny>>,
    jax: bool,
) -> PyResult<Bound<'py, PyAny>> {
    check_is_leaf(is_leaf)?;
    let py = tree.py();
    let outer = outer_treespec.get();
    let repr = |s: &PyTreeSpec| crate::treespec::repr::repr(s, py);
    let (none_is_leaf, namespace) = if jax {
        (false, "")
    } else {
        (outer.none_is_leaf, outer.namespace.as_str())
    };
    // JAX flattens first; optree checks the structures first.
    let jax_flat = if jax {
        Some(crate::walk::flatten_impl(
            tree,
            &Options::on_face(None, false, "", true),
        )?)
    } else {
        None
    };
    let inferred;
    let inner = match inner_treespec {
        Some(inner) => inner.get(),
        None => {
            if !jax && outer.num_leaves() == 0 {
                return Err(TreeError::Transpose(TransposeFault::CannotInfer {
                    outer: repr(outer)?,
                })
                .into());
            }
            let first = registry::with_registry(|reg| {
                crate::treespec::traverse::flatten_up_to(outer, tree, reg, None)
            })?
            .into_iter()
            .next()
            .ok_or_else(|| TreeError::Transpose(TransposeFault::NoFirstLeaf))?;
            let opts = Options::on_face(is_leaf, none_is_leaf, namespace, jax);
            inferred = crate::walk::structure_impl(&first, &opts)?;
            inferred.get()
        }
    };
    let (outer_size, inner_size) = (outer.num_leaves(), inner.num_leaves());
    let (leaves, spec) = match jax_flat {
        Some(flat) => flat,
        None => {
            if inner.none_is_leaf != none_is_leaf {
                return Err(TreeError::Transpose(TransposeFault::NoneIsLeaf).into());
            }
            crate::treespec::ops::check_same_namespace(
                &outer.namespace,
                &inner.namespace,
                "Tree structures",
            )?;
            if outer_size == 0 || inner_size == 0 {
                return Err(TreeError::Transpose(TransposeFault::Empty {
                    outer: repr(outer)?,
                    inner: repr(inner)?,
                })
                .into());
            }
            let namespace = if namespace.is_empty() {
                inner.namespace.as_str()
            } else {
                namespace
            };
            let opts = Options::on_face(is_leaf, none_is_leaf, namespace, false);
            crate::walk::flatten_impl(tree, &opts)?
        }
    };
    if leaves.len() != outer_size * inner_size {
        let expected = ops::compose(py, outer, inner)?;
        let (got, expected) = (repr(spec.get())?, repr(&expected)?);
        let face = if jax { Face::Jax } else { Face::Optree };
        return Err(TreeError::Transpose(TransposeFault::Mismatch {
            face,
            expected,
            got,
        })
        .into());
    }
    // No rows make no columns, as JAX's `zip(*rows)` gives none.
    transposed(py, outer, inner, leaves.iter().collect(), false)
}

/// The one transpose: `leaves`, `outer.num_leaves()` rows of `inner.num_leaves()` leaves each
/// (row-major), rebuilt as an `inner` tree of `outer` trees: column `c` of the rows becomes
/// one outer tree. Without rows there are `inner.num_leaves()` empty columns when
/// `columns_without_rows` (optree's `tree_transpose_map`), none otherwise.
fn transposed<'py>(
    py: Python<'py>,
    outer: &PyTreeSpec,
    inner: &PyTreeSpec,
    leaves: Vec<Bound<'py, PyAny>>,
    columns_without_rows: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let (outer_size, inner_size) = (outer.num_leaves(), inner.num_leaves());
    let mut columns = Vec::with_capacity(inner_size);
    if outer_size > 0 || columns_without_rows {
        for c in 0..inner_size {
            let column = leaves.iter().skip(c).step_by(inner_size).cloned().collect();
            columns.push(crate::treespec::unflatten::build(py, outer, column)?);
        }
    }
    crate::treespec::unflatten::unflatten_iterable(inner, PyList::new(py, columns)?.as_any())
}

/// `outputs`, the results of a function mapped over the leaves of a tree of structure
/// `outer_treespec` (one per leaf), transposed: an `inner_treespec` tree of outer trees (optree's
/// `tree_transpose_map`). Without `inner_treespec` the inner structure is the first output's,
/// flattened with `is_leaf`, `none_is_leaf` and `namespace`; it must have leaves (ValueError),
/// as must the outer structure then; each output is flattened up to it (ValueError naming the
/// key path where one differs).
///
/// >>> _transpose_outputs(tree_structure([0, 0]), [(1, 2), (3, 4)])
/// ([1, 3], [2, 4])
#[pyfunction]
#[pyo3(signature = (outer_treespec, outputs, /, inner_treespec = None, is_leaf = None, *, none_is_leaf = false, namespace = ""))]
pub fn _transpose_outputs<'py>(
    outer_treespec: &Bound<'py, PyTreeSpec>,
    outputs: Vec<Bound<'py, PyAny>>,
    inner_treespec: Option<&Bound<'py, PyTreeSpec>>,
    is_leaf: Option<&Bound<'py, PyAny>>,
    none_is_leaf: bool,
    namespace: &str,
) -> PyResult<Bound<'py, PyAny>> {
    check_is_leaf(is_leaf)?;
    let py = outer_treespec.py();
    let outer = outer_treespec.get();
    let repr = |s: &PyTreeSpec| crate::treespec::repr::repr(s, py);
    let inferred;
    let inner = match inner_treespec {
        Some(inner) => inner.get(),
        None => {
            let Some(first) = outputs.first() else {
                return Err(TreeError::Transpose(TransposeFault::NoLeaves {
                    which: "outer",
                    spec: repr(outer)?,
                })
                .into());
            };
            let opts = Options::on_face(is_leaf, none_is_leaf, namespace, false);
            inferred = crate::walk::structure_impl(first, &opts)?;
            inferred.get()
        }
    };
    if inner.num_leaves() == 0 {
        return Err(TreeError::Transpose(TransposeFault::NoLeaves {
            which: "inner",
            spec: repr(inner)?,
        })
        .into());
    }
    let mut leaves = Vec::with_capacity(outputs.len() * inner.num_leaves());
    registry::with_registry(|reg| {
        for output in &outputs {
            leaves.extend(crate::treespec::traverse::flatten_up_to(
                inner, output, reg, None,
            )?);
        }
        PyResult::Ok(())
    })?;
    transposed(py, outer, inner, leaves, true)
}
