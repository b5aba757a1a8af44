//! `PyTreeSpec`: an immutable treedef holding a flat vector of nodes in post-order.
//!
//! Post-order (children before their parent, the root last) makes every subtree a contiguous
//! slice `[i + 1 - num_nodes, i]`, unflatten a single loop over a value stack, and equality
//! and hashing linear scans.

pub mod algebra;
mod compare;
mod custom;
mod dict_template;
pub mod flatten;
pub mod keys;
pub mod module_node;
pub mod ops;
pub mod pickle;
pub mod prefix;
mod proto;
mod repr;
pub mod select;
mod traverse;
mod unflatten;

use std::sync::OnceLock;

use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};
use pyo3::PyTraverseError;

use crate::errors::{Invariant, TreeError};
use crate::ffi::nodes::CustomRef;
pub use crate::ffi::nodes::Nodes;
use crate::kind::Kind;
use crate::path_text::{self, PathEntry};
use crate::plugins::Plugin;
use crate::registry::Registration;
use crate::types;

pub use flatten::MAX_DEPTH;
pub use pickle::rebuild_treespec;
pub use repr::{body_labelled as repr_body_labelled, options as repr_options};
pub use traverse::flatten_up_to;
pub use unflatten::{build, collect_leaves, fill_mapping, make_node, unflatten_iterable};

/// A list that takes over the references in `items` (whose buffer this thread keeps for the
/// next walk: see `spare`).
pub fn unflatten_list<'py>(
    py: Python<'py>,
    mut items: Vec<Bound<'py, PyAny>>,
) -> Bound<'py, PyList> {
    let list = crate::ffi::list_from_vec_infallible(py, &mut items);
    crate::spare::give_back(crate::spare::Slot::Leaves, items);
    list
}

/// A 2-tuple that takes over the two references.
pub fn tuple_pair<'py>(
    py: Python<'py>,
    a: Bound<'py, PyAny>,
    b: Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyTuple>> {
    unflatten::tuple_from(py, [a, b].into_iter())
}

/// A tuple that takes over the references in `items`.
pub fn tuple_from_vec<'py>(
    py: Python<'py>,
    items: Vec<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyTuple>> {
    unflatten::tuple_from(py, items.into_iter())
}

/// One node of a treedef. Kept small (64 bytes): leaves, tuples and lists, most of every
/// tree, carry no payload, and the rarer payloads live behind one box.
pub struct Node {
    pub kind: Kind,
    /// Dict and defaultdict of up to 8 keys whose insertion order differs from leaf order:
    /// the positions, 4 bits each (`PACKED_NONE` otherwise). It sits in what would be the
    /// padding after `kind`, so most dicts need no allocation for their order.
    packed: u32,
    pub arity: usize,
    pub num_leaves: usize,
    pub num_nodes: usize,
    /// NamedTuple / StructSeq: the type. DefaultDict: the default factory. Deque: `maxlen`
    /// (None or int). Custom: the auxiliary data.
    pub data: Option<Py<PyAny>>,
    /// Mapping kinds: the keys in leaf order (sorted for dict and defaultdict, insertion order
    /// for OrderedDict). Private: never handed out without a copy. Inline, not boxed: most
    /// dicts then need no allocation of their own.
    keys: Option<Py<PyList>>,
    /// Custom nodes: how to put the node back together (inline: registered nodes are as
    /// common as dicts in some trees, dataclass-heavy ones above all). Set and read only
    /// through the `Nodes` that holds the node and the registration (see `CustomRef`).
    pub(crate) custom: CustomRef,
    extra: Option<Box<NodeExtra>>,
}

/// The payloads of mapping and custom nodes.
#[derive(Default)]
struct NodeExtra {
    /// Dict and defaultdict, when the insertion order differs from `keys`: the leaf position
    /// of each key in insertion order (a permutation of `0..arity`).
    insertion: Option<Box<[usize]>>,
    /// Custom nodes: the keys of the children, when the flatten function gave them (optree's
    /// entries, or JAX's keys from `flatten_with_keys`).
    entries: Option<Py<PyTuple>>,
}

const PACKED_NONE: u32 = u32::MAX;
/// The most positions `packed` holds.
const PACKED_MAX: usize = 8;

/// A dict node's insertion order: for each key in insertion order, its leaf position.
#[derive(Clone, Copy)]
pub enum Insertion<'a> {
    Packed { bits: u32, len: usize },
    Slice(&'a [usize]),
}

impl Insertion<'_> {
    pub fn len(&self) -> usize {
        match *self {
            Insertion::Packed { len, .. } => len,
            Insertion::Slice(s) => s.len(),
        }
    }

    /// The leaf position of the `i`-th key in insertion order.
    #[inline]
    pub fn get(&self, i: usize) -> usize {
        match *self {
            Insertion::Packed { bits, .. } => ((bits >> (4 * i)) & 0xF) as usize,
            Insertion::Slice(s) => s[i],
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.len()).map(move |i| self.get(i))
    }
}
const NO_ENTRIES: &Option<Py<PyTuple>> = &None;

impl Node {
    pub const LEAF: Node = Node::bare(Kind::Leaf, 0, 1, 1);
    pub const NONE: Node = Node::bare(Kind::None, 0, 0, 1);

    /// Whether dropping this node has nothing to release (leaves, tuples, lists, None).
    #[inline(always)]
    pub(crate) fn holds_nothing(&self) -> bool {
        self.data.is_none() && self.keys.is_none() && self.custom.is_none() && self.extra.is_none()
    }

    pub const fn bare(kind: Kind, arity: usize, num_leaves: usize, num_nodes: usize) -> Node {
        Node {
            kind,
            packed: PACKED_NONE,
            arity,
            num_leaves,
            num_nodes,
            data: None,
            keys: None,
            custom: CustomRef::NONE,
            extra: None,
        }
    }

    pub fn keys(&self) -> &Option<Py<PyList>> {
        &self.keys
    }
    pub fn insertion(&self) -> Option<Insertion<'_>> {
        if self.packed != PACKED_NONE {
            return Some(Insertion::Packed {
                bits: self.packed,
                len: self.arity,
            });
        }
        self.extra
            .as_ref()
            .and_then(|e| e.insertion.as_deref())
            .map(Insertion::Slice)
    }
    /// A registered node's registration (kept alive by the `Nodes` this node lies in).
    #[inline]
    pub fn custom(&self) -> Option<&Registration> {
        self.custom.get()
    }
    pub fn entries(&self) -> &Option<Py<PyTuple>> {
        self.extra.as_ref().map_or(NO_ENTRIES, |e| &e.entries)
    }
    fn extra_mut(&mut self) -> &mut NodeExtra {
        self.extra.get_or_insert_with(Box::default)
    }
    fn wants_extra<T>(&self, value: &Option<T>) -> bool {
        value.is_some() || self.extra.is_some()
    }
    pub fn set_keys(&mut self, keys: Option<Py<PyList>>) {
        self.keys = keys;
    }
    /// Sets the insertion positions (`positions.len()` must be the node's arity).
    pub fn set_insertion(&mut self, positions: Option<impl ExactSizeIterator<Item = usize>>) {
        self.packed = PACKED_NONE;
        match positions {
            Some(p) if p.len() <= PACKED_MAX => {
                self.packed = p
                    .enumerate()
                    .fold(0, |bits, (i, q)| bits | ((q as u32) << (4 * i)));
                if let Some(e) = &mut self.extra {
                    e.insertion = None;
                }
            }
            _ => {
                let boxed = positions.map(Iterator::collect::<Box<[usize]>>);
                if self.wants_extra(&boxed) {
                    self.extra_mut().insertion = boxed;
                }
            }
        }
    }
    pub fn set_entries(&mut self, entries: Option<Py<PyTuple>>) {
        if self.wants_extra(&entries) {
            self.extra_mut().entries = entries;
        }
    }

    /// A copy of this node but for its registration (`Nodes::push_copy` copies that too).
    pub fn clone_ref(&self, py: Python<'_>) -> Node {
        Node {
            kind: self.kind,
            packed: self.packed,
            arity: self.arity,
            num_leaves: self.num_leaves,
            num_nodes: self.num_nodes,
            data: self.data.as_ref().map(|d| d.clone_ref(py)),
            keys: self.keys.as_ref().map(|k| k.clone_ref(py)),
            custom: CustomRef::NONE,
            extra: self.extra.as_ref().map(|e| {
                Box::new(NodeExtra {
                    insertion: e.insertion.clone(),
                    entries: e.entries.as_ref().map(|k| k.clone_ref(py)),
                })
            }),
        }
    }

    /// The data of a node kind that always keeps some (namedtuple and struct sequence type,
    /// defaultdict factory, deque maxlen, custom aux data); SystemError for other kinds.
    pub fn kept<'a, 'py>(&'a self, py: Python<'py>) -> PyResult<&'a Bound<'py, PyAny>> {
        Ok(self
            .data
            .as_ref()
            .invariant("a node of a kind that keeps its data without it")?
            .bind(py))
    }

    /// `kept`, reading None where a node lacks its data (every maker of these kinds sets
    /// it: a walk, `make_node`, unpickling), for callers with no error path.
    pub fn kept_data<'a, 'py>(&'a self, py: Python<'py>) -> &'a Bound<'py, PyAny> {
        static NONE: pyo3::sync::PyOnceLock<Py<PyAny>> = pyo3::sync::PyOnceLock::new();
        match &self.data {
            Some(d) => d.bind(py),
            None => NONE.get_or_init(py, || py.None()).bind(py),
        }
    }

    /// The Python type of this node (None for a leaf).
    pub fn py_type<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyAny>> {
        Some(match self.kind {
            Kind::Leaf => return None,
            Kind::None => py.None().bind(py).get_type().into_any(),
            Kind::Tuple => py.get_type::<PyTuple>().into_any(),
            Kind::List => py.get_type::<PyList>().into_any(),
            Kind::Dict => py.get_type::<pyo3::types::PyDict>().into_any(),
            Kind::OrderedDict => types::collections(py)
                .ordered_dict
                .bind(py)
                .clone()
                .into_any(),
            Kind::DefaultDict => types::collections(py)
                .default_dict
                .bind(py)
                .clone()
                .into_any(),
            Kind::Deque => types::collections(py).deque.bind(py).clone().into_any(),
            Kind::NamedTuple | Kind::StructSeq => self.data.as_ref()?.bind(py).clone(),
            Kind::Custom => self.custom()?.ty.bind(py).clone().into_any(),
        })
    }

    /// The entry that leads from this node to its `j`-th child, for paths in messages.
    pub fn entry<'py>(&self, py: Python<'py>, j: usize) -> PathEntry<'py> {
        match self.kind {
            Kind::Dict | Kind::OrderedDict | Kind::DefaultDict => match &self.keys() {
                Some(keys) => match keys.bind(py).get_item(j) {
                    Ok(k) => PathEntry::Key(k),
                    Err(_) => PathEntry::Index(j),
                },
                None => PathEntry::Index(j),
            },
            Kind::NamedTuple | Kind::StructSeq => {
                let name = self
                    .data
                    .as_ref()
                    .and_then(|t| types::field_names(t.bind(py), self.kind).ok())
                    .and_then(|names| names.into_iter().nth(j).flatten());
                match name {
                    Some(n) => PathEntry::Attr(n),
                    None => PathEntry::Index(j),
                }
            }
            Kind::Custom => {
                let name = self
                    .custom()
                    .and_then(|r| custom::child_names(r))
                    .and_then(|names| names.get(j))
                    .map(|n| n.bind(py).to_string_lossy().into_owned());
                match (name, &self.entries()) {
                    (Some(n), _) => PathEntry::Attr(n),
                    (None, Some(entries)) => match entries.bind(py).get_item(j) {
                        Ok(e) => PathEntry::Text(custom_entry_text(&e)),
                        Err(_) => PathEntry::Index(j),
                    },
                    (None, None) => PathEntry::Text(format!("[<flat index {j}>]")),
                }
            }
            _ => PathEntry::Index(j),
        }
    }
}

/// Which library's semantics a treespec follows where optree and JAX differ: dict order on
/// rebuild, deque and struct sequences as nodes or leaves, repr grammar, `node_data` and
/// `walk` forms, and whether the three mapping kinds match each other.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Face {
    Optree,
    Jax,
}

impl Face {
    /// The face a core entry point's `jax=` flag names.
    pub fn of(jax: bool) -> Face {
        if jax {
            Face::Jax
        } else {
            Face::Optree
        }
    }
}

/// How a registered node's child key reads in a path: JAX key objects by their str, raw
/// optree entries as flat indices.
pub fn custom_entry_text(entry: &Bound<'_, PyAny>) -> String {
    let is_key = entry.is_instance_of::<crate::key_classes::SequenceKey>()
        || entry.is_instance_of::<crate::key_classes::DictKey>()
        || entry.is_instance_of::<crate::key_classes::GetAttrKey>()
        || entry.is_instance_of::<crate::key_classes::FlattenedIndexKey>();
    // A raw entry reads as the FlattenedIndexKey it becomes in a JAX key path.
    match entry.str() {
        Ok(t) if is_key => t.to_string(),
        Ok(t) => format!("[<flat index {t}>]"),
        Err(_) => "[?]".into(),
    }
}

/// A tree structure: what `tree_flatten` returns next to the leaves.
///
/// Immutable, hashable and picklable. `PyTreeDef` is the same class; treedefs made by
/// `oxtree.tree_util` print in JAX's grammar.
///
/// >>> leaves, spec = tree_flatten({'b': [1, 2], 'a': None})
/// >>> spec, spec.num_leaves, spec.kind
/// (PyTreeSpec({'a': None, 'b': [*, *]}), 2, <PyTreeKind.DICT: 5>)
/// >>> spec.unflatten([10, 20])
/// {'b': [10, 20], 'a': None}
/// >>> spec == tree_structure({'a': None, 'b': [0, 0]})
/// True
/// >>> tree_util.tree_structure({'a': None, 'b': [0, 0]})
/// PyTreeDef({'a': None, 'b': [*, *]})
#[pyclass(frozen, module = "oxtree", name = "PyTreeSpec")]
pub struct PyTreeSpec {
    pub(crate) nodes: Nodes,
    pub(crate) none_is_leaf: bool,
    pub(crate) namespace: String,
    pub(crate) face: Face,
    pub(crate) hash: OnceLock<isize>,
}

/// An empty node vector with room for `size` nodes, a number that came from the input
/// (`None` when computing it overflowed).
pub fn node_vec(size: Option<usize>, what: &str) -> PyResult<Nodes> {
    let mut nodes = Nodes::new();
    reserve_nodes(&mut nodes, size, what)?;
    Ok(nodes)
}

/// Room for `more` nodes in `out` (`None`: a count that overflowed): a result too large to
/// allocate raises MemoryError, never aborts the process.
pub fn reserve_nodes(out: &mut Nodes, more: Option<usize>, what: &str) -> PyResult<()> {
    let total = more.and_then(|m| m.checked_add(out.len()));
    match (more, total) {
        (Some(m), Some(n)) if n <= MAX_NODES && out.try_reserve(m).is_ok() => Ok(()),
        _ => Err(TreeError::Memory(format!(
            "{what}: the result would have {} nodes, more than can be allocated",
            total.map_or_else(|| "too many".to_owned(), |n| n.to_string())
        ))
        .into()),
    }
}

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

/// The most nodes a treespec made by composing or grafting may have: 2**32 nodes would take
/// 256 GiB, more than any machine this runs on can hold.
pub const MAX_NODES: usize = 1 << 32;

impl PyTreeSpec {
    /// A treespec of `nodes` (which bring the registrations they point to).
    pub fn new(nodes: Nodes, none_is_leaf: bool, namespace: String) -> PyTreeSpec {
        debug_assert!(!nodes.is_empty());
        PyTreeSpec {
            nodes,
            none_is_leaf,
            namespace,
            face: Face::Optree,
            hash: OnceLock::new(),
        }
    }

    pub fn with_face(mut self, face: Face) -> PyTreeSpec {
        self.face = face;
        self
    }

    /// A treespec of other nodes with this one's options (none_is_leaf, namespace, face).
    pub fn derive(&self, nodes: Nodes) -> PyTreeSpec {
        PyTreeSpec::new(nodes, self.none_is_leaf, self.namespace.clone()).with_face(self.face)
    }

    pub fn root(&self) -> &Node {
        // Every maker of a treespec gives it a root (a walk makes at least one node, and
        // the algebra builds on roots); an empty one would read as a lone leaf.
        static LEAF: Node = Node::LEAF;
        self.nodes.last().unwrap_or(&LEAF)
    }

    pub fn num_leaves(&self) -> usize {
        self.root().num_leaves
    }

    /// Indices of the children of node `idx`, left to right.
    pub fn child_indices(&self, idx: usize) -> Vec<usize> {
        let node = &self.nodes[idx];
        let mut out = Vec::with_capacity(node.arity);
        let mut end = idx;
        for _ in 0..node.arity {
            let child = end - 1;
            out.push(child);
            end = child + 1 - self.nodes[child].num_nodes;
        }
        out.reverse();
        out
    }

    /// Node indices in pre-order (a parent before its children, left to right).
    pub fn preorder(&self) -> Vec<usize> {
        let mut order = Vec::with_capacity(self.nodes.len());
        let mut todo = vec![self.nodes.len() - 1];
        while let Some(idx) = todo.pop() {
            order.push(idx);
            todo.extend(self.child_indices(idx).into_iter().rev());
        }
        order
    }

    /// A copy of the subtree whose root is node `idx`.
    pub fn subtree(&self, py: Python<'_>, idx: usize) -> PyTreeSpec {
        let start = idx + 1 - self.nodes[idx].num_nodes;
        let mut nodes = Nodes::new();
        nodes.extend_copy(py, &self.nodes, start..idx + 1);
        self.derive(nodes)
    }

    /// The steps from the root to node `idx`: (node index, child position) pairs.
    pub fn path_chain(&self, idx: usize) -> Vec<(usize, usize)> {
        let mut chain = Vec::new();
        let mut cur = self.nodes.len() - 1;
        while cur != idx {
            let node = &self.nodes[cur];
            let mut end = cur;
            let mut found = None;
            for j in (0..node.arity).rev() {
                let child = end - 1;
                let start = child + 1 - self.nodes[child].num_nodes;
                if (start..=child).contains(&idx) {
                    found = Some((j, child));
                    break;
                }
                end = start;
            }
            let Some((j, child)) = found else { break };
            chain.push((cur, j));
            cur = child;
        }
        chain
    }

    /// The path from the root to node `idx`, in keystr form after `root`.
    #[cold]
    pub fn path_to(&self, py: Python<'_>, idx: usize, root: &str) -> String {
        let entries: Vec<_> = self
            .path_chain(idx)
            .into_iter()
            .map(|(n, j)| self.nodes[n].entry(py, j))
            .collect();
        path_text::render(root, &entries)
    }

    fn check_same_options(&self, other: &PyTreeSpec, what: &str) -> Result<(), TreeError> {
        if self.none_is_leaf != other.none_is_leaf {
            return Err(TreeError::Value(format!(
                "{what}: the treespecs disagree on none_is_leaf ({} and {})",
                self.none_is_leaf, other.none_is_leaf
            )));
        }
        Ok(())
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
            return Err(TreeError::Index(format!(
                "PyTreeSpec::Child() index out of range. \
                 (index {index}, a node with {n} children)"
            ))
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
        Ok(crate::walk::list_from_vec(py, out))
    }

    /// The treespec made by replacing every leaf of this one with `inner`.
    fn compose(&self, py: Python<'_>, inner: &PyTreeSpec) -> PyResult<PyTreeSpec> {
        self.check_same_options(inner, "PyTreeSpec.compose")?;
        ops::check_same_namespace(py, &self.namespace, &inner.namespace, "PyTreeSpecs")?;
        let leaves = self.root().num_leaves;
        let size = (leaves.checked_mul(inner.nodes.len()))
            .and_then(|n| n.checked_add(self.nodes.len() - leaves));
        let mut nodes = node_vec(size, "PyTreeSpec.compose")?;
        for (i, node) in self.nodes.iter().enumerate() {
            if node.kind == Kind::Leaf {
                nodes.extend_copy(py, &inner.nodes, 0..inner.nodes.len());
            } else {
                nodes.push_copy(py, &self.nodes, i).set_counts(
                    node.num_leaves * inner.num_leaves(),
                    node.num_nodes + node.num_leaves * (inner.root().num_nodes - 1),
                );
            }
        }
        let namespace = if self.namespace.is_empty() {
            &inner.namespace
        } else {
            &self.namespace
        };
        if self.namespace != inner.namespace {
            ops::check_merged_registrations(py, &nodes, namespace, "merged")?;
        }
        Ok(PyTreeSpec::new(nodes, self.none_is_leaf, namespace.clone()).with_face(self.face))
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
            return Err(TreeError::Index(format!(
                "PyTreeSpec::Entry() index out of range. \
                 (index {index}, a node with {n} children)"
            ))
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
        match self.face {
            Face::Optree => ops::node_data(py, self.root()),
            Face::Jax => ops::jax_node_data(py, self.root()),
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
        let (leaves, f_node, f_leaf) = match self.face {
            Face::Optree => (a, callable(b), callable(c)),
            Face::Jax => {
                let leaves = c.ok_or_else(|| {
                    TreeError::Type("walk(f_node, f_leaf, leaves): the leaves are missing".into())
                })?;
                (leaves, callable(Some(a)), callable(b))
            }
        };
        let (py, leaves) = unflatten::collect_leaves(leaves)?;
        let (f_node, f_leaf) = (f_node.as_ref(), f_leaf.as_ref());
        let visit = match self.face {
            Face::Optree => unflatten::Visit::Walk { f_node, f_leaf },
            Face::Jax => unflatten::Visit::JaxWalk { f_node, f_leaf },
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
