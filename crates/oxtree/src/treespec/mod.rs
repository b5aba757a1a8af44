//! `PyTreeSpec`: an immutable treedef holding a flat vector of nodes in post-order.
//!
//! Post-order (children before their parent, the root last) makes every subtree a contiguous
//! slice `[i + 1 - num_nodes, i]`, unflatten a single loop over a value stack, and equality
//! and hashing linear scans. The nodes are `node.rs`'s; the methods Python sees are
//! `py_methods.rs`'s.

pub mod classify;
mod compare;
pub mod custom;
pub mod dict_order;
mod dict_template;
pub mod flatten;
pub mod keys;
pub mod module_node;
mod node;
pub mod node_data;
pub mod ops;
pub mod pickle;
mod proto;
mod py_methods;
pub mod repr;
pub mod select;
pub mod traverse;
pub mod unflatten;

use std::cell::Cell;
use std::sync::OnceLock;

use pyo3::prelude::*;

use crate::errors::TreeError;
use crate::face::Face;
use crate::path_text;

pub use node::{custom_entry_text, Insertion, Node, Nodes};

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

impl Drop for PyTreeSpec {
    /// The node buffer goes to this thread's next walk (`give_back_nodes`).
    fn drop(&mut self) {
        give_back_nodes(Buffer::Nodes, std::mem::take(&mut self.nodes));
    }
}

/// What a node buffer kept between walks is for: buffers in use at once take different slots.
#[derive(Clone, Copy)]
pub enum Buffer {
    /// The nodes a walk makes, given back by the treespecs that held them when they die.
    Nodes = 0,
    /// A walk's payload stack (the nodes of open frames whose kinds carry data).
    Payloads = 1,
}

thread_local! {
    /// Empty node buffers kept between walks on this thread, by `Buffer`.
    static SPARE_NODES: [Cell<Option<Vec<Node>>>; 2] =
        const { [Cell::new(None), Cell::new(None)] };
}

/// The largest node buffer kept between walks, in nodes (4 MiB): larger ones are freed.
const KEPT_NODES: usize = 1 << 16;

/// Empty nodes with room for `capacity`, in this thread's spare buffer of `slot` when there
/// is one. A loop flattening trees of one shape then never allocates nodes: its treespecs
/// die, giving their buffers back, as fast as they are made (measured: the node buffer's and
/// the payload stack's malloc and free were a twelfth of a 10-key dict's flatten).
// Inlined, as are the other takes and give-backs of a walk's buffers: a walk then finds
// its thread's locals once (each outlined one called `__tls_get_addr`; with the calls,
// 277 instructions of a 10-key dict's flatten, callgrind).
#[inline(always)]
pub fn take_nodes(slot: Buffer, capacity: usize) -> Nodes {
    let mut nodes = match SPARE_NODES.with(|s| s[slot as usize].take()) {
        Some(buffer) => Nodes::from(buffer),
        None => Nodes::new(),
    };
    nodes.reserve(capacity);
    nodes
}

/// Releases what `nodes` hold and keeps their buffer for the next `take_nodes` of `slot`.
// Inlined into the walk: see `take_nodes`.
#[inline(always)]
pub fn give_back_nodes(slot: Buffer, nodes: Nodes) {
    // Releasing may run Python code that walks again and takes or gives back this slot: the
    // buffer is put back only once it is empty.
    let buffer = nodes.into_buffer();
    if buffer.capacity() > 0 && buffer.capacity() <= KEPT_NODES {
        // A thread whose locals are being destroyed frees it instead.
        let _ = SPARE_NODES.try_with(|s| s[slot as usize].set(Some(buffer)));
    }
}

/// An empty node vector with room for `size` nodes, a number that came from the input
/// (`None` when computing it overflowed).
pub fn node_vec(size: Option<usize>, what: &'static str) -> PyResult<Nodes> {
    let mut nodes = Nodes::new();
    reserve_nodes(&mut nodes, size, what)?;
    Ok(nodes)
}

/// Room for `more` nodes in `out` (`None`: a count that overflowed): a result too large to
/// allocate raises MemoryError, never aborts the process.
pub fn reserve_nodes(out: &mut Nodes, more: Option<usize>, what: &'static str) -> PyResult<()> {
    let total = more.and_then(|m| m.checked_add(out.len()));
    match (more, total) {
        (Some(m), Some(n)) if n <= MAX_NODES && out.try_reserve(m).is_ok() => Ok(()),
        _ => Err(TreeError::TooManyNodes { what, nodes: total }.into()),
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

    fn check_same_options(&self, other: &PyTreeSpec, what: &'static str) -> Result<(), TreeError> {
        if self.none_is_leaf != other.none_is_leaf {
            return Err(TreeError::NoneIsLeafDiffers {
                op: what,
                values: Some((self.none_is_leaf, other.none_is_leaf)),
            });
        }
        Ok(())
    }
}
