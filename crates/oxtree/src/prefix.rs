//! `prefix_errors`: every place where one tree is not a prefix of another, described in the
//! words of the face that asks (optree's `prefix_errors`, JAX's `_prefix_error`).
//!
//! Like both peers it walks the two objects one level at a time, pre-order and left to right,
//! and stops below the first difference in each subtree. Slow path only: it runs when a
//! caller wants the errors, or after a multi-tree walk has already failed.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PySet, PyString, PyTuple, PyType};

use crate::face::options::Options;
use crate::face::Words;
use crate::invariant::Invariant;
use crate::kind::Kind;
use crate::registry::Registry;
use crate::treespec::flatten::{self, Flat};
use crate::treespec::Node;

/// A message with holes where the caller's name for the prefix tree goes (`in_axes`).
#[derive(Default)]
struct Message {
    parts: Vec<String>,
    cur: String,
}

impl Message {
    fn text(mut self, s: &str) -> Self {
        self.cur.push_str(s);
        self
    }
    fn name(mut self) -> Self {
        self.parts.push(std::mem::take(&mut self.cur));
        self
    }
    fn done(mut self) -> PrefixError {
        self.parts.push(self.cur);
        PrefixError { parts: self.parts }
    }
}

/// One structure error of `prefix_errors`: call it with the prefix tree's name to get the
/// ValueError describing where and how the trees differ.
#[pyclass(frozen, module = "oxtree", name = "PrefixError")]
pub struct PrefixError {
    parts: Vec<String>,
}

impl PrefixError {
    /// The message with `name` as the prefix tree's name.
    pub fn render(&self, name: &str) -> String {
        self.parts.join(name)
    }
}

#[pymethods]
impl PrefixError {
    /// The ValueError for the prefix tree called `name`.
    fn __call__(&self, py: Python<'_>, name: &str) -> Py<PyAny> {
        PyErr::from(crate::errors::TreeError::Prefix(self.render(name)))
            .into_value(py)
            .into_any()
    }

    fn __repr__(&self) -> String {
        format!("<PrefixError: {:?}>", self.render("tree"))
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

fn str_of(obj: &Bound<'_, PyAny>) -> String {
    obj.str()
        .map(|s| s.to_string())
        .unwrap_or_else(|_| crate::errors::repr(obj))
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

/// `textwrap.indent("\n".join(difflib.ndiff(a.splitlines(), b.splitlines())), "    ")`.
fn ndiff(py: Python<'_>, a: &str, b: &str) -> PyResult<String> {
    let lines =
        |s: &str| -> PyResult<Bound<'_, PyAny>> { PyString::new(py, s).call_method0("splitlines") };
    let diff = py
        .import("difflib")?
        .call_method1("ndiff", (lines(a)?, lines(b)?))?;
    let joined = PyString::new(py, "\n").call_method1("join", (diff,))?;
    Ok(py
        .import("textwrap")?
        .call_method1("indent", (joined, "    "))?
        .to_string())
}

/// The child keys of a JAX-face node, as JAX prints them (`str(key.key)`).
fn jax_key_strs<'py>(py: Python<'py>, node: &Node) -> PyResult<Vec<Bound<'py, PyAny>>> {
    crate::treespec::keys::node_keys(py, node, crate::treespec::keys::KeyStyle::Keys)
}

fn key_text(key: &Bound<'_, PyAny>) -> String {
    match key.getattr("key") {
        Ok(k) => str_of(&k),
        Err(_) => str_of(key),
    }
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
        // Where the error is, as `NAME[0]['a']` (optree: `NAME tree root` at the root). Built
        // only for an error: a path per node would make deep trees quadratic.
        let at_path = |m: Message| -> Message {
            let m = m.name();
            let path = path_of(&trail, at);
            if face.words() == Words::Optree && path.is_empty() {
                m.text(" tree root")
            } else {
                m.text(&path)
            }
        };
        let (pt, ft) = (p.get_type(), f.get_type());
        let (pt_repr, ft_repr) = (
            crate::errors::repr(pt.as_any()),
            crate::errors::repr(ft.as_any()),
        );
        let both_std_dict =
            !face.rules().mappings_match_exactly && is_std_dict(py, &pt) && is_std_dict(py, &ft);
        if !pt.is(&ft) && !both_std_dict {
            let m = at_path(
                Message::default()
                    .text("pytree structure error: different types at key path\n    "),
            )
            .text("\nAt that key path, the prefix pytree ")
            .name()
            .text(&format!(
                " has a subtree of type\n    {pt_repr}\nbut at the same key path the full \
                 pytree has a subtree of different type\n    {ft_repr}."
            ));
            errors.push(m.done());
            continue;
        }
        let fl = Level::of(&f, &one, reg)?;
        let fn_ = fl.root()?;
        let mut full_children: Vec<Bound<'py, PyAny>> = fl.children().to_vec();
        let header = |what: &str| {
            at_path(
                Message::default()
                    .text(&format!("pytree structure error: {what} at key path\n    ")),
            )
            .text("\nAt that key path, the prefix pytree ")
            .name()
        };
        let (np, nf) = (pl.children().len(), full_children.len());
        // Each peer compares a level in its own way and words it in its own texts.
        match face.words() {
            Words::Jax => {
                if pt.is_subclass_of::<PyList>()? || pt.is_subclass_of::<PyTuple>()? {
                    if np != nf {
                        let name = pt.name()?.to_string();
                        let m = header(&format!("different lengths of {name}")).text(&format!(
                            " has a subtree of type {name} of length {np}, but the full pytree \
                             has a subtree of the same type but of length {nf}."
                        ));
                        errors.push(m.done());
                        continue;
                    }
                } else if np != nf {
                    let pk = jax_key_strs(py, pn)?;
                    let fk = jax_key_strs(py, fn_)?;
                    let objects = crate::errors::prints_key_objects();
                    let text = |k: &Bound<'_, PyAny>| {
                        if objects {
                            str_of(k)
                        } else {
                            key_text(k)
                        }
                    };
                    let join =
                        |ks: &[Bound<'_, PyAny>]| ks.iter().map(text).collect::<Vec<_>>().join(" ");
                    // JAX's key objects hash as their keys: a set of the keys iterates in
                    // the order JAX's set of key objects does. Each key of the difference
                    // is printed as the keys are above.
                    let raw =
                        |k: &Bound<'py, PyAny>| k.getattr("key").unwrap_or_else(|_| k.clone());
                    let diff = (|| -> PyResult<String> {
                        let shown = PyDict::new(py);
                        for k in pk.iter().chain(fk.iter()) {
                            shown.set_item(raw(k), text(k))?;
                        }
                        let a = PySet::new(py, pk.iter().map(raw))?;
                        let b = PySet::new(py, fk.iter().map(raw))?;
                        let d = a.call_method1("symmetric_difference", (b,))?;
                        let d: Vec<String> = d
                            .try_iter()?
                            .map(|k| {
                                let k = k?;
                                match shown.get_item(&k)? {
                                    Some(t) => t.extract::<String>(),
                                    None => Ok(str_of(&k)),
                                }
                            })
                            .collect::<PyResult<_>>()?;
                        Ok(d.join(" "))
                    })();
                    let mut text = format!(
                        " has a subtree of type\n    {pt_repr}\nwith {np} child keys\n    {}\n\
                         but at the same key path the full pytree has a subtree of the same \
                         type but with {nf} child keys\n    {}\n",
                        join(&pk),
                        join(&fk)
                    );
                    if let Ok(d) = diff {
                        text.push_str(&format!(
                            "so the symmetric difference on key sets is\n    {d}"
                        ));
                    }
                    errors.push(
                        header("different numbers of pytree children")
                            .text(&text)
                            .done(),
                    );
                    continue;
                }
                let (pm, fm) = (jax_meta(py, pn)?, jax_meta(py, fn_)?);
                if pm.ne(&fm)? {
                    let (ps, fs) = (str_of(&pm), str_of(&fm));
                    let m = header("different pytree metadata").text(&format!(
                        " has a subtree of type\n    {pt_repr}\nwith metadata\n    {ps}\nbut at \
                         the same key path the full pytree has a subtree of the same type but \
                         with metadata\n    {fs}\nso the diff in the metadata at these pytree \
                         nodes is\n{}",
                        ndiff(py, &ps, &fs)?
                    ));
                    errors.push(m.done());
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
                    let (ps, fs) = (PySet::new(py, &pk)?, PySet::new(py, &fk)?);
                    if !ps.eq(&fs)? {
                        let missing = crate::errors::key_difference(&pk, &fk)?;
                        let extra = crate::errors::key_difference(&fk, &pk)?;
                        let mut diff = String::new();
                        if !missing.is_empty() {
                            diff.push_str(&format!(
                                "\nmissing key(s):\n    {}",
                                crate::errors::repr(missing.as_any())
                            ));
                        }
                        if !extra.is_empty() {
                            diff.push_str(&format!(
                                "\nextra key(s):\n    {}",
                                crate::errors::repr(extra.as_any())
                            ));
                        }
                        let m = header("different pytree keys").text(&format!(
                            " has a subtree of type\n    {pt_repr}\nwith {} key(s)\n    {}\nbut \
                             at the same key path the full pytree has a subtree of type\n    \
                             {ft_repr}\nbut with {} key(s)\n    {}{diff}",
                            pk.len(),
                            crate::errors::repr(pk.as_any()),
                            fk.len(),
                            crate::errors::repr(fk.as_any()),
                        ));
                        errors.push(m.done());
                        continue;
                    }
                    // Pair the full tree's children with the prefix's by key.
                    full_children = pk.iter().map(|k| f.get_item(k)).collect::<PyResult<_>>()?;
                }
                let nf = full_children.len();
                if np != nf {
                    let m = header("different numbers of pytree children").text(&format!(
                        " has a subtree of type\n    {pt_repr}\nwith {np} children, but at the \
                         same key path the full pytree has a subtree of the same type but with \
                         {nf} children."
                    ));
                    errors.push(m.done());
                    continue;
                }
                let both_deque = pn.kind == Kind::Deque && fn_.kind == Kind::Deque;
                if !both_deque && !both_std_dict {
                    let (pm, fm) = (
                        crate::treespec::node_data::node_data(py, pn)?,
                        crate::treespec::node_data::node_data(py, fn_)?,
                    );
                    if pm.ne(&fm)? {
                        let (ps, fs) = (crate::errors::repr(&pm), crate::errors::repr(&fm));
                        let m = header("different pytree metadata").text(&format!(
                            " has a subtree of type\n    {pt_repr}\nwith metadata\n    {ps}\n\
                             but at the same key path the full pytree has a subtree of the same \
                             type but with metadata\n    {fs}\nso the diff in the metadata at \
                             these pytree nodes is\n{}",
                            ndiff(py, &ps, &fs)?
                        ));
                        errors.push(m.done());
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
