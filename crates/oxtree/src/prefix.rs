//! `prefix_errors`: every place where one tree is not a prefix of another, described in the
//! words of the face that asks (optree's `prefix_errors`, JAX's `_prefix_error`).
//!
//! Like both peers it walks the two objects one level at a time, pre-order and left to right,
//! and stops below the first difference in each subtree. Slow path only: it runs when a
//! caller wants the errors, or after a multi-tree walk has already failed.

use pyo3::prelude::*;
use std::sync::Arc;

use pyo3::types::{PyList, PySet, PyTuple, PyType};

use crate::errors::{PrefixDiff, PrefixMismatch, TreeError};
use crate::face::options::Options;
use crate::face::Words;
use crate::invariant::Invariant;
use crate::kind::Kind;
use crate::registry::Registry;
use crate::treespec::flatten::{self, Flat};
use crate::treespec::Node;

/// One structure error of `prefix_errors`: call it with the prefix tree's name to get the
/// ValueError describing where and how the trees differ.
#[pyclass(frozen, module = "oxtree", name = "PrefixError")]
pub struct PrefixError {
    mismatch: Arc<PrefixMismatch>,
}

impl PrefixError {
    /// The catalogue's error, with `name` as the prefix tree's name.
    pub fn named(&self, name: &str) -> TreeError {
        TreeError::Prefix {
            name: name.to_owned(),
            mismatch: Arc::clone(&self.mismatch),
        }
    }
}

#[pymethods]
impl PrefixError {
    /// The ValueError for the prefix tree called `name`.
    fn __call__(&self, py: Python<'_>, name: &str) -> Py<PyAny> {
        PyErr::from(self.named(name)).into_value(py).into_any()
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!(
            "<PrefixError: {:?}>",
            self.mismatch.render(py, "tree")?
        ))
    }
}

/// One object taken apart one level: its children and its root node (a leaf node for a leaf).
struct Level<'py> {
    flat: Flat<'py>,
}

impl<'py> Level<'py> {
    fn of(obj: &Bound<'py, PyAny>, opts: &Options<'_, 'py>, reg: &Registry) -> PyResult<Self> {
        Ok(Level {
            flat: flatten::flatten_one_level(obj, opts, reg)?,
        })
    }
    fn root(&self) -> PyResult<&Node> {
        self.flat
            .nodes
            .last()
            .invariant("a one-level walk made no node")
    }
    fn children(&self) -> &[Bound<'py, PyAny>] {
        &self.flat.leaves
    }
}

fn is_std_dict(py: Python<'_>, ty: &Bound<'_, PyType>) -> bool {
    let c = crate::types::collections(py);
    ty.is(py.get_type::<pyo3::types::PyDict>()) || ty.is(&c.ordered_dict) || ty.is(&c.default_dict)
}

/// JAX's metadata of a node (what `flatten_one_level` returns beside the children): the
/// sorted key tuple of a dict, the key tuple of an OrderedDict, `(factory, keys)` of a
/// defaultdict, a custom node's aux data, None for sequences.
fn jax_meta<'py>(py: Python<'py>, node: &Node) -> PyResult<Bound<'py, PyAny>> {
    let data = crate::treespec::node_data::jax_node_data(py, node)?;
    if data.is_none() {
        return Ok(data);
    }
    let meta = data.get_item(1)?;
    if node.kind == Kind::Dict {
        return Ok(meta.cast_into::<PyList>()?.to_tuple().into_any());
    }
    Ok(meta)
}

/// The child keys of a JAX-face node, as JAX prints them (`str(key.key)`).
fn jax_key_strs<'py>(py: Python<'py>, node: &Node) -> PyResult<Vec<Bound<'py, PyAny>>> {
    crate::treespec::keys::node_keys(py, node, crate::treespec::keys::KeyStyle::Keys)
}

/// Every place where `prefix` is not a prefix of `full`, left to right.
pub fn prefix_errors<'py>(
    prefix: &Bound<'py, PyAny>,
    full: &Bound<'py, PyAny>,
    opts: &Options<'_, 'py>,
    reg: &Registry,
) -> PyResult<Vec<PrefixError>> {
    let py = prefix.py();
    let face = opts.face;
    let one = Options {
        is_leaf: None,
        is_leaf_takes_path: false,
        none_is_leaf: opts.none_is_leaf,
        namespace: opts.namespace,
        with_keys: face.rules().keys_are_jax_objects,
        face,
        jax_registry: opts.jax_registry,
    };
    // Key paths share their parents' entries: (parent, entry) per visited node.
    let mut trail: Vec<(usize, String)> = Vec::new();
    let path_of = |trail: &[(usize, String)], mut at: usize| {
        let mut parts = Vec::new();
        while at != usize::MAX {
            let (parent, entry) = &trail[at];
            parts.push(entry.clone());
            at = *parent;
        }
        parts.reverse();
        parts.concat()
    };
    let mut errors = Vec::new();
    let mut stack: Vec<(Bound<'py, PyAny>, Bound<'py, PyAny>, usize)> =
        vec![(prefix.clone(), full.clone(), usize::MAX)];
    while let Some((p, f, at)) = stack.pop() {
        if let Some(is_leaf) = opts.is_leaf {
            if is_leaf.call1((&p,))?.is_truthy()? {
                continue;
            }
        }
        let pl = Level::of(&p, &one, reg)?;
        let pn = pl.root()?;
        if pn.kind == Kind::Leaf {
            continue;
        }
        // The mismatch at this node. Its key path is built only for an error: a path per node
        // would make deep trees quadratic.
        let (pt, ft) = (p.get_type(), f.get_type());
        let mut found = |diff: PrefixDiff| {
            errors.push(PrefixError {
                mismatch: Arc::new(PrefixMismatch {
                    face,
                    path: path_of(&trail, at),
                    prefix_type: pt.clone().unbind(),
                    diff,
                }),
            })
        };
        let both_std_dict =
            !face.rules().mappings_match_exactly && is_std_dict(py, &pt) && is_std_dict(py, &ft);
        if !pt.is(&ft) && !both_std_dict {
            found(PrefixDiff::NodeKindDiffers {
                full_type: ft.unbind(),
            });
            continue;
        }
        let fl = Level::of(&f, &one, reg)?;
        let fn_ = fl.root()?;
        let mut full_children: Vec<Bound<'py, PyAny>> = fl.children().to_vec();
        let (np, nf) = (pl.children().len(), full_children.len());
        // Each peer compares a level in its own way.
        match face.words() {
            Words::Jax => {
                if np != nf {
                    if pt.is_subclass_of::<PyList>()? || pt.is_subclass_of::<PyTuple>()? {
                        found(PrefixDiff::LengthDiffers {
                            prefix: np,
                            full: nf,
                        });
                    } else {
                        let keys = |n: &Node| -> PyResult<Vec<Py<PyAny>>> {
                            Ok(jax_key_strs(py, n)?
                                .into_iter()
                                .map(Bound::unbind)
                                .collect())
                        };
                        found(PrefixDiff::ChildKeysDiffer {
                            prefix: keys(pn)?,
                            full: keys(fn_)?,
                        });
                    }
                    continue;
                }
                let (pm, fm) = (jax_meta(py, pn)?, jax_meta(py, fn_)?);
                if pm.ne(&fm)? {
                    found(PrefixDiff::MetadataDiffers {
                        prefix: pm.unbind(),
                        full: fm.unbind(),
                    });
                    continue;
                }
            }
            Words::Optree => {
                if both_std_dict {
                    let keys_of = |n: &Node| -> PyResult<Bound<'py, PyList>> {
                        let k = n.keys().as_ref().invariant("a mapping node without keys")?;
                        Ok(k.bind(py).get_slice(0, k.bind(py).len()))
                    };
                    let (pk, fk) = (keys_of(pn)?, keys_of(fn_)?);
                    if !PySet::new(py, &pk)?.eq(PySet::new(py, &fk)?)? {
                        found(PrefixDiff::KeysDiffer {
                            full_type: ft.unbind(),
                            prefix: pk.unbind(),
                            full: fk.unbind(),
                        });
                        continue;
                    }
                    // Pair the full tree's children with the prefix's by key.
                    full_children = pk.iter().map(|k| f.get_item(k)).collect::<PyResult<_>>()?;
                }
                let nf = full_children.len();
                if np != nf {
                    found(PrefixDiff::ArityDiffers {
                        prefix: np,
                        full: nf,
                    });
                    continue;
                }
                let both_deque = pn.kind == Kind::Deque && fn_.kind == Kind::Deque;
                if !both_deque && !both_std_dict {
                    let (pm, fm) = (
                        crate::treespec::node_data::node_data(py, pn)?,
                        crate::treespec::node_data::node_data(py, fn_)?,
                    );
                    if pm.ne(&fm)? {
                        found(PrefixDiff::MetadataDiffers {
                            prefix: pm.unbind(),
                            full: fm.unbind(),
                        });
                        continue;
                    }
                }
            }
        }
        // Same node: compare the children, leftmost first.
        let pairs: Vec<_> = pl.children().iter().cloned().zip(full_children).collect();
        let base = trail.len();
        for j in 0..pairs.len() {
            let mut entry = String::new();
            match (face.rules().keys_are_jax_objects, pn.entry(py, j)) {
                // optree's accessors quote a registered node's raw entries.
                (false, crate::path_text::PathEntry::Text(_)) if pn.kind == Kind::Custom => {
                    let raw = crate::treespec::keys::child_key(
                        py,
                        pn,
                        j,
                        crate::treespec::keys::KeyStyle::Raw,
                    )?;
                    entry = format!("[<flat index {}>]", crate::errors::repr(&raw));
                }
                (_, e) => e.write_to(&mut entry),
            }
            trail.push((at, entry));
        }
        for (j, (pc, fc)) in pairs.into_iter().enumerate().rev() {
            stack.push((pc, fc, base + j));
        }
    }
    Ok(errors)
}

/// `(prefix_tree, full_tree)`'s structure errors, for `oxtree.prefix_errors` (optree's words)
/// and `oxtree.tree_util.prefix_errors` (`jax=True`, JAX's words).
#[pyfunction]
#[pyo3(signature = (prefix_tree, full_tree, /, is_leaf = None, *, none_is_leaf = false, namespace = "", jax = false))]
pub fn _prefix_errors<'py>(
    prefix_tree: &Bound<'py, PyAny>,
    full_tree: &Bound<'py, PyAny>,
    is_leaf: Option<&Bound<'py, PyAny>>,
    none_is_leaf: bool,
    namespace: &str,
    jax: bool,
) -> PyResult<Vec<PrefixError>> {
    let opts = Options::on_face(is_leaf, none_is_leaf, namespace, jax);
    crate::registry::with_registry(|reg| prefix_errors(prefix_tree, full_tree, &opts, reg))
}
