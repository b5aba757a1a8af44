//! The model: one node of a treedef, and the vector of them a treespec holds.
//!
//! A treespec (`PyTreeSpec`, in `treespec/mod.rs`) is a `Vec<Node>` in post-order: children
//! before their parent, the root last. Each node records its kind, its arity, the number of
//! leaves and nodes in its subtree, and what rebuilding it needs (dict keys and their
//! insertion order, a namedtuple's type, a registered node's aux data and registration).

use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

use super::dict_order::Positions;
use crate::ffi::nodes::{CustomRef, Slot};
use crate::invariant::Invariant;
use crate::kind::Kind;
use crate::path_text::PathEntry;
use crate::registry::Registration;
use crate::types;

/// A treespec's nodes, each registered node's registration held with them.
pub type Nodes = crate::ffi::nodes::Nodes<Node>;

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
    pub(crate) custom: CustomRef<Registration>,
    extra: Option<Box<NodeExtra>>,
}

// The size docs/architecture.md gives ("The treedef"), checked when the crate compiles. A
// new field also belongs in `Slot::discard` below, which forgets a node once it has released
// what the node holds.
#[cfg(target_pointer_width = "64")]
const _: [(); 64] = [(); std::mem::size_of::<Node>()];

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
    /// `set_insertion` from a walk's positions: a small dict's nibbles are the packed
    /// field as they are (repacking them one by one was a twentieth of a 1,000-leaf tree of
    /// small dicts' flatten).
    #[inline]
    pub fn set_insertion_positions(&mut self, positions: Option<&Positions>) {
        match positions {
            Some(&Positions::Nibbles { bits, len }) if len <= PACKED_MAX => {
                // The same 4-bit fields in the same order; the nibbles past `len` are zero.
                self.packed = bits as u32;
                if let Some(e) = &mut self.extra {
                    e.insertion = None;
                }
            }
            _ => self.set_insertion(positions.map(|p| (0..p.len()).map(|i| p.get(i)))),
        }
    }
    #[inline]
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
                    .and_then(|r| crate::registry::child_names(r))
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

impl Slot for Node {
    type Reg = Registration;

    #[inline(always)]
    fn registration(&self) -> &CustomRef<Registration> {
        &self.custom
    }

    #[inline(always)]
    fn registration_mut(&mut self) -> &mut CustomRef<Registration> {
        &mut self.custom
    }

    #[inline(always)]
    fn set_counts(&mut self, num_leaves: usize, num_nodes: usize) {
        self.num_leaves = num_leaves;
        self.num_nodes = num_nodes;
    }

    #[inline]
    fn copy_unregistered(&self, py: Python<'_>) -> Node {
        self.clone_ref(py)
    }

    #[inline(always)]
    fn holds_nothing(&self) -> bool {
        Node::holds_nothing(self)
    }

    /// A node holding its data alone (a registered node's aux data, the common payload of a
    /// `tree_leaves` walk) releases it inline: the drop glue's calls were 40 instructions a
    /// registered node (callgrind, 1,000 registered nodes).
    #[inline(always)]
    fn discard(mut self) {
        if self.keys.is_none() && self.extra.is_none() {
            drop(self.data.take());
            // Nothing is left to release: the registration pointer owns nothing, and the
            // other fields are plain numbers. A field added to `Node` must be released here
            // too (the size check below `Node` fails first, pointing here).
            std::mem::forget(self);
        }
    }
}
