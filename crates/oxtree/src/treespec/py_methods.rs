//! The methods and properties Python sees on `PyTreeSpec`, each a call into the operation
//! that implements it.

use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};
use pyo3::PyTraverseError;

use super::{compare, keys, ops, pickle, proto, repr, traverse, unflatten, PyTreeSpec};
use crate::errors::TreeError;
use crate::face::{Face, Given};
use crate::kind::Kind;
use crate::plugins::Plugin;

/// An index as optree's methods take one: an int, or an object with `__index__` or, failing
/// that, `__int__` (floats aside, as `int` arguments go).
fn int_like(index: &Bound<'_, PyAny>) -> PyResult<isize> {
    match index.extract::<isize>() {
        Ok(i) => Ok(i),
        Err(err) => {
            let py = index.py();
            if index.is_instance_of::<pyo3::types::PyFloat>()
                || !index.hasattr(pyo3::intern!(py, "__int__"))?
            {
                return Err(err);
            }
            index.call_method0(pyo3::intern!(py, "__int__"))?.extract()
        }
    }
}

#[pymethods]
impl PyTreeSpec {
    /// The number of leaves in the tree.
    #[getter(num_leaves)]
    fn py_num_leaves(&self) -> usize {
        self.num_leaves()
    }

    /// The number of nodes in the tree, leaves and None included.
    #[getter]
    fn num_nodes(&self) -> usize {
        self.root().num_nodes
    }

    /// The number of children of the root node.
    #[getter]
    fn num_children(&self) -> usize {
        self.root().arity
    }

    /// Whether None is a leaf (True) or a node without children (False) in this treespec.
    #[getter]
    fn none_is_leaf(&self) -> bool {
        self.none_is_leaf
    }

    /// The registry namespace the custom nodes of this treespec come from ("" if global).
    #[getter]
    fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The kind of the root node.
    #[getter]
    fn kind<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.root().kind.to_py(py)
    }

    /// The type of the root node (None for a leaf).
    #[getter]
    fn r#type<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyAny>> {
        self.root().py_type(py)
    }

    /// Whether the treespec is a single leaf; with `strict=False`, any single node (None too).
    #[pyo3(signature = (strict = true))]
    fn is_leaf(&self, strict: bool) -> bool {
        self.nodes.len() == 1 && (!strict || self.root().kind == Kind::Leaf)
    }

    /// The treespecs of the root's children, left to right.
    fn children(&self, py: Python<'_>) -> Vec<PyTreeSpec> {
        self.child_indices(self.nodes.len() - 1)
            .into_iter()
            .map(|i| self.subtree(py, i))
            .collect()
    }

    /// The treespec of the root's `index`-th child.
    fn child(&self, py: Python<'_>, index: &Bound<'_, PyAny>) -> PyResult<PyTreeSpec> {
        let index = int_like(index)?;
        let children = self.child_indices(self.nodes.len() - 1);
        let n = children.len() as isize;
        let index = if index < 0 { index + n } else { index };
        if index < 0 || index >= n {
            return Err(TreeError::ChildIndex {
                method: "Child",
                index,
                arity: n,
            }
            .into());
        }
        Ok(self.subtree(py, children[index as usize]))
    }

    /// Rebuild a tree of this structure from an iterable of leaves.
    fn unflatten<'py>(&self, leaves: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        unflatten::unflatten_iterable(self, leaves)
    }

    /// The subtrees of `tree` at the places of this treespec's leaves; `tree` must have this
    /// treespec as a prefix of its structure.
    fn flatten_up_to<'py>(&self, tree: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
        let py = tree.py();
        let out =
            crate::registry::with_registry(|reg| traverse::flatten_up_to(self, tree, reg, None))?;
        Ok(crate::containers::list_from_vec(py, out))
    }

    /// The treespec made by replacing every leaf of this one with `inner`.
    fn compose(&self, py: Python<'_>, inner: &PyTreeSpec) -> PyResult<PyTreeSpec> {
        ops::compose(py, self, inner)
    }

    /// The path (optree's raw entries) of every leaf.
    fn paths<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyTuple>>> {
        keys::leaf_paths(self, py, keys::KeyStyle::Raw)
    }

    /// The accessor of every leaf (`PyTreeAccessor`), which fetches it from a tree.
    fn accessors<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let steps = keys::leaf_paths(self, py, keys::KeyStyle::Steps)?;
        Plugin::AccessorsFromSteps.get(py)?.call1((steps,))
    }

    /// The entries (raw keys) of the root's children.
    fn entries<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyAny>>> {
        keys::node_keys(py, self.root(), keys::KeyStyle::Raw)
    }

    /// The entry (raw key) of the root's `index`-th child.
    fn entry<'py>(
        &self,
        py: Python<'py>,
        index: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let index = int_like(index)?;
        let n = self.root().arity as isize;
        let i = if index < 0 { index + n } else { index };
        if i < 0 || i >= n {
            return Err(TreeError::ChildIndex {
                method: "Entry",
                index,
                arity: n,
            }
            .into());
        }
        keys::child_key(py, self.root(), i as usize, keys::KeyStyle::Raw)
    }

    /// The key path (JAX's key objects) of every leaf.
    fn key_paths<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyTuple>>> {
        keys::leaf_paths(self, py, keys::KeyStyle::Keys)
    }

    /// Whether this treespec is a prefix of `other` (`other` replaces some leaves with
    /// subtrees); with `strict=True`, a proper prefix.
    #[pyo3(signature = (other, /, *, strict = false))]
    fn is_prefix(&self, py: Python<'_>, other: &PyTreeSpec, strict: bool) -> PyResult<bool> {
        ops::is_prefix(py, self, other, strict)
    }

    /// Whether this treespec is a suffix of `other` (`other` is a prefix of this one).
    #[pyo3(signature = (other, /, *, strict = false))]
    fn is_suffix(&self, py: Python<'_>, other: &PyTreeSpec, strict: bool) -> PyResult<bool> {
        ops::is_prefix(py, other, self, strict)
    }

    /// The smallest treespec both this one and `other` are prefixes of.
    fn broadcast_to_common_suffix(
        &self,
        py: Python<'_>,
        other: &PyTreeSpec,
    ) -> PyResult<PyTreeSpec> {
        ops::common_suffix(py, self, other)
    }

    /// This treespec with its `i`-th leaf replaced by `inner[i]`.
    fn _graft(&self, py: Python<'_>, inner: Vec<PyRef<'_, PyTreeSpec>>) -> PyResult<PyTreeSpec> {
        ops::graft(py, self, &inner)
    }

    /// A new treespec: bottom up, each leaf becomes `f_leaf(leaf spec)` and each node
    /// `f_node(one-level spec)` with the transformed children grafted onto its leaves.
    #[pyo3(signature = (f_node = None, f_leaf = None))]
    fn transform(
        &self,
        py: Python<'_>,
        f_node: Option<&Bound<'_, PyAny>>,
        f_leaf: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyTreeSpec> {
        ops::transform(py, self, f_node, f_leaf)
    }

    /// The root node alone, with a leaf for each child; None for a leaf.
    fn one_level(&self, py: Python<'_>) -> Option<PyTreeSpec> {
        ops::one_level(py, self)
    }

    /// Every node in pre-order as `(parent, key, one_level)`: the parent's position in this
    /// list (-1 for the root), the node's key in its parent (JAX-style, None for the root)
    /// and its one-level treespec (None for a leaf). Linear in the nodes, for renderers that
    /// would otherwise copy a subtree per level with `children()`.
    #[allow(clippy::type_complexity)]
    fn _outline<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<Vec<(isize, Option<Bound<'py, PyAny>>, Option<PyTreeSpec>)>> {
        let mut out = Vec::with_capacity(self.nodes.len());
        let mut todo: Vec<(usize, isize, Option<Bound<'py, PyAny>>)> =
            vec![(self.nodes.len() - 1, -1, None)];
        while let Some((idx, parent, key)) = todo.pop() {
            let me = out.len() as isize;
            out.push((parent, key, ops::one_level_at(py, self, idx)));
            let node = &self.nodes[idx];
            let mut end = idx;
            for j in (0..node.arity).rev() {
                let child = end - 1;
                let k = keys::child_key(py, node, j, keys::KeyStyle::Keys)?;
                todo.push((child, me, Some(k)));
                end = child + 1 - self.nodes[child].num_nodes;
            }
        }
        Ok(out)
    }

    /// Whether the root's children are all leaves (and the root is not a leaf).
    fn is_one_level(&self) -> bool {
        let root = self.root();
        root.kind != Kind::Leaf
            && self.nodes.len() == root.arity + 1
            && self.nodes[..self.nodes.len() - 1]
                .iter()
                .all(|n| n.kind == Kind::Leaf)
    }

    /// The root's node data, as optree reports it (the keys of a dict, a namedtuple's type,
    /// a custom node's aux data, ...).
    fn node_data<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        if self.face.rules().jax_forms {
            super::node_data::jax_node_data(py, self.root())
        } else {
            super::node_data::node_data(py, self.root())
        }
    }

    /// Rebuilds the tree, calling `f_leaf(leaf)` at leaves and `f_node(container)` on each
    /// rebuilt node.
    #[pyo3(signature = (leaves, /, f_node = None, f_leaf = None))]
    fn traverse<'py>(
        &self,
        leaves: &Bound<'py, PyAny>,
        f_node: Option<&Bound<'py, PyAny>>,
        f_leaf: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let leaves = unflatten::collect_leaves(leaves)?;
        unflatten::build_with(
            leaves.0,
            self,
            leaves.1,
            &unflatten::Visit::Traverse { f_node, f_leaf },
        )
    }

    /// Walks the tree bottom up. optree's form `walk(leaves, f_node, f_leaf)` calls
    /// `f_node(type, node_data, children)`; on a JAX-face treedef the form is JAX's,
    /// `walk(f_node, f_leaf, leaves)` with `f_node(children, node_data)`.
    #[pyo3(signature = (a, /, f_node = None, f_leaf = None))]
    fn walk<'py>(
        &self,
        a: &Bound<'py, PyAny>,
        f_node: Option<&Bound<'py, PyAny>>,
        f_leaf: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        // JAX's positional form `walk(f_node, f_leaf, leaves)` lands in (a, f_node, f_leaf).
        let (b, c) = (f_node, f_leaf);
        let callable = |x: Option<&Bound<'py, PyAny>>| x.filter(|f| !f.is_none()).cloned();
        let jax_forms = self.face.rules().jax_forms;
        let (leaves, f_node, f_leaf) = if jax_forms {
            let leaves = c.ok_or(TreeError::WalkLeavesMissing)?;
            (leaves, callable(Some(a)), callable(b))
        } else {
            (a, callable(b), callable(c))
        };
        let (py, leaves) = unflatten::collect_leaves(leaves)?;
        let (f_node, f_leaf) = (f_node.as_ref(), f_leaf.as_ref());
        let visit = if jax_forms {
            unflatten::Visit::JaxWalk { f_node, f_leaf }
        } else {
            unflatten::Visit::Walk { f_node, f_leaf }
        };
        unflatten::build_with(py, self, leaves, &visit)
    }

    /// A versioned JSON-compatible document describing this treespec (builtin nodes only);
    /// `treespec_from_json` reads it back.
    fn to_json<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        Plugin::TreespecToJson.get(py)?.call1((slf,))
    }

    /// The treedef in JAX's `PyTreeDefProto` wire format (the bytes JAX gives): leaves,
    /// lists, tuples, None and dicts with str keys only; JAX-face treedefs only.
    fn serialize_using_proto<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        proto::serialize(self, py)
    }

    /// The JAX-face treedef of `serialize_using_proto`'s bytes (JAX's or oxtree's).
    /// `registry` is accepted for JAX's signature; oxtree has one registry.
    #[staticmethod]
    #[pyo3(signature = (registry, data))]
    fn deserialize_using_proto(
        py: Python<'_>,
        registry: &Bound<'_, PyAny>,
        data: &[u8],
    ) -> PyResult<PyTreeSpec> {
        let _ = registry;
        proto::deserialize(py, data)
    }

    /// JAX's `from_iterable_tree`: builds this structure from nested iterables, each giving
    /// a node's children in order; what stands at a leaf is taken as it is.
    #[allow(clippy::wrong_self_convention)] // JAX's name for a method
    fn from_iterable_tree<'py>(&self, tree: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        proto::from_iterable_tree(self, tree)
    }

    /// JAX's constructor: the treedef whose root has `node_data` (as `node_data()` gives it,
    /// `(type, data)`, or None for a leaf) and the given children. `registry` is accepted for
    /// JAX's signature; oxtree has one registry.
    #[staticmethod]
    #[pyo3(signature = (registry, node_data, children))]
    fn from_node_data_and_children(
        py: Python<'_>,
        registry: &Bound<'_, PyAny>,
        node_data: &Bound<'_, PyAny>,
        children: Vec<PyRef<'_, PyTreeSpec>>,
    ) -> PyResult<PyTreeSpec> {
        let _ = registry;
        ops::from_jax_node_data(py, node_data, &children)
    }

    fn __len__(&self) -> usize {
        self.num_leaves()
    }

    /// A collapsible HTML view for notebooks (`oxtree.pretty.treespec_html`).
    fn _repr_html_<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        Plugin::TreespecHtml.get(slf.py())?.call1((slf,))
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        repr::repr(self, py)
    }

    fn __hash__(&self, py: Python<'_>) -> PyResult<isize> {
        if let Some(h) = self.hash.get() {
            return Ok(*h);
        }
        let h = compare::hash(self, py)?;
        Ok(*self.hash.get_or_init(|| h))
    }

    fn __richcmp__(
        &self,
        other: &Bound<'_, PyAny>,
        op: pyo3::basic::CompareOp,
    ) -> PyResult<Py<PyAny>> {
        use pyo3::basic::CompareOp;
        let py = other.py();
        let Ok(other) = other.cast::<PyTreeSpec>() else {
            return Ok(py.NotImplemented());
        };
        let other = other.get();
        let result = match op {
            CompareOp::Eq => compare::equal(self, other, py)?,
            CompareOp::Ne => !compare::equal(self, other, py)?,
            // Ordered by the prefix relation: a < b when a is a proper prefix of b.
            CompareOp::Lt => ops::is_prefix(py, self, other, true)?,
            CompareOp::Le => ops::is_prefix(py, self, other, false)?,
            CompareOp::Gt => ops::is_prefix(py, other, self, true)?,
            CompareOp::Ge => ops::is_prefix(py, other, self, false)?,
        };
        Ok(result.into_pyobject(py)?.to_owned().into_any().unbind())
    }

    /// The treespec's nodes in post-order (children before their parent), as `_Node`s.
    fn _nodes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        pickle::nodes(self, py)
    }

    /// The treespec of `nodes` (a tuple of `_Node`s in post-order), checked as a pickle's
    /// state is: a ValueError names the first node that does not fit. The defaults: None is no
    /// leaf, the global namespace, optree's face.
    #[staticmethod]
    #[pyo3(signature = (nodes, *, none_is_leaf = Given(None), namespace = Given(None), face = Given(None)))]
    fn _from_nodes<'py>(
        py: Python<'py>,
        nodes: &Bound<'py, PyAny>,
        none_is_leaf: Given<'py>,
        namespace: Given<'py>,
        face: Given<'py>,
    ) -> PyResult<PyTreeSpec> {
        let or = |v: Given<'py>, default: Bound<'py, PyAny>| v.0.unwrap_or(default);
        pickle::from_nodes(
            nodes,
            &or(
                none_is_leaf,
                pyo3::types::PyBool::new(py, false).to_owned().into_any(),
            ),
            &or(namespace, pyo3::types::PyString::new(py, "").into_any()),
            &or(
                face,
                pyo3::types::PyString::new(py, Face::Optree.name()).into_any(),
            ),
        )
    }

    /// Which library's semantics the treespec follows: "optree" or "jax".
    #[getter]
    fn _face(&self) -> &'static str {
        self.face.name()
    }

    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        pickle::reduce(self, py)
    }

    fn __copy__(slf: PyRef<'_, Self>) -> Py<PyTreeSpec> {
        slf.into()
    }

    fn __deepcopy__(slf: PyRef<'_, Self>, _memo: &Bound<'_, PyAny>) -> Py<PyTreeSpec> {
        // Immutable: a deep copy may share everything.
        slf.into()
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        // Only references this treespec owns are visited. The registrations behind custom
        // nodes are shared through `Arc`s with the registry and other treespecs, so they are
        // not ours to report. No `__clear__`: a treespec is immutable and created after all it
        // holds, so every cycle through it passes through a mutable object that can be cleared.
        for node in &self.nodes {
            visit.call(&node.data)?;
            visit.call(node.keys())?;
            visit.call(node.entries())?;
        }
        Ok(())
    }
}
