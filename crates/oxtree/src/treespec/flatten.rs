//! The hot path: walking a tree into leaves and post-order nodes.
//!
//! The walk uses an explicit heap stack, so a deep tree can never overflow the native stack;
//! depth is one comparison per container. Options are compile-time parameters: whether an
//! `is_leaf` predicate exists, whether None is a leaf, and which outputs are wanted (leaves,
//! nodes or both), so `tree_leaves` builds no nodes and `tree_structure` keeps no leaves.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::Arc;

use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

use super::classify::{classify_other, Class};
use super::dict_order::{
    dict_items, insertion_positions, permute, small_str_items, sort_keys_in_place,
    untrack_if_atomic,
};
use super::{Node, Nodes, PyTreeSpec};
use crate::errors::TreeError;
use crate::face::options::Options;
use crate::face::Face;
use crate::invariant::Invariant;
use crate::jax_registry::Sighting;
use crate::kind::Kind;
use crate::path_text;
use crate::registry::{Registration, Registry};
use crate::types;

/// The deepest nesting any walk accepts before raising RecursionError. Deep enough for any
/// real tree (and 100,000-deep chains); the heap stack makes it safe at any value.
pub const MAX_DEPTH: usize = 200_000;

/// The depth at which the walk first looks for a cycle among the containers it is inside;
/// the threshold doubles after each look, so the checks cost O(1) per container overall.
const FIRST_CYCLE_CHECK: usize = 1_000;

/// An `is_leaf` predicate, or none (a compile-time choice).
pub trait Pred<'py> {
    const ACTIVE: bool;
    /// Whether the predicate takes the key path too (JAX's `is_leaf_takes_path`).
    const WANTS_PATH: bool = false;
    fn test(&self, obj: &Bound<'py, PyAny>) -> PyResult<bool>;
    fn test_path(&self, _path: &Bound<'py, PyTuple>, obj: &Bound<'py, PyAny>) -> PyResult<bool> {
        self.test(obj)
    }
}

pub struct NoPred;

impl<'py> Pred<'py> for NoPred {
    const ACTIVE: bool = false;
    #[inline(always)]
    fn test(&self, _obj: &Bound<'py, PyAny>) -> PyResult<bool> {
        Ok(false)
    }
}

pub struct CallPred<'a, 'py>(pub &'a Bound<'py, PyAny>);

impl<'py> Pred<'py> for CallPred<'_, 'py> {
    const ACTIVE: bool = true;
    #[inline]
    fn test(&self, obj: &Bound<'py, PyAny>) -> PyResult<bool> {
        self.0.call1((obj,))?.is_truthy()
    }
}

/// An `is_leaf(path, obj)` predicate.
pub struct PathPred<'a, 'py>(pub &'a Bound<'py, PyAny>);

impl<'py> Pred<'py> for PathPred<'_, 'py> {
    const ACTIVE: bool = true;
    const WANTS_PATH: bool = true;
    fn test(&self, obj: &Bound<'py, PyAny>) -> PyResult<bool> {
        self.test_path(&PyTuple::empty(obj.py()), obj)
    }
    fn test_path(&self, path: &Bound<'py, PyTuple>, obj: &Bound<'py, PyAny>) -> PyResult<bool> {
        self.0.call1((path, obj))?.is_truthy()
    }
}

/// Everything but the root is a leaf: the walk goes one level deep.
pub struct NotRoot(pub *mut ffi::PyObject);

impl<'py> Pred<'py> for NotRoot {
    const ACTIVE: bool = true;
    #[inline]
    fn test(&self, obj: &Bound<'py, PyAny>) -> PyResult<bool> {
        Ok(obj.as_ptr() != self.0)
    }
}

/// What a walk produced.
pub struct Flat<'py> {
    pub leaves: Vec<Bound<'py, PyAny>>,
    pub nodes: Nodes,
    /// True when the walk's namespace shaped it (optree's rule): a custom node was found (a
    /// namespace may register its type differently), or the namespace itself is in
    /// `dict_insertion_ordered` mode.
    pub namespaced: bool,
    /// True when the nodes hold no object that could be part of a reference cycle (only
    /// untracked key lists and ints): the treespec need not be tracked by the collector.
    pub acyclic: bool,
}

/// The children of the container a frame walks.
enum Items<'py> {
    Tuple(Bound<'py, PyTuple>),
    List(Bound<'py, PyList>),
    /// The next `arity - pos` objects popped off the walk's pending stack, where the
    /// container's children were pushed last child first (dicts, dataclasses, registered
    /// nodes whose flatten gave neither a tuple nor a list): no vector per container (a
    /// malloc and a free were 8% of a gpt2-like flatten).
    Pending,
}

struct Frame<'py> {
    /// The container itself, for cycle detection and error paths, when `items` is not it
    /// (a tuple or list walks itself: no second reference per level).
    obj: Option<Bound<'py, PyAny>>,
    items: Items<'py>,
    pos: usize,
    arity: usize,
    kind: Kind,
    /// Where the node this frame will emit waits on the walk's payload stack, for kinds
    /// that carry data (`NO_PAYLOAD` for tuples and lists, whose node is made at close).
    /// Keeping nodes out of frames keeps frames small: moving them was an eighth of a
    /// 500-deep chain's flatten.
    payload: u32,
    leaves_before: usize,
    nodes_before: usize,
    /// Graph walks: the container's number in the order containers were opened.
    ordinal: u32,
}

// The size docs/architecture.md gives ("Walks"), checked when the crate compiles.
#[cfg(target_pointer_width = "64")]
const _: [(); 72] = [(); std::mem::size_of::<Frame<'static>>()];

const NO_PAYLOAD: u32 = u32::MAX;

/// The number of children from which opening a container reserves room for them.
const RESERVE_FROM: usize = 16;

/// A frame's node: its payload, or a bare node made for the occasion.
enum FrameNode<'n> {
    Payload(&'n Node),
    Bare(Node),
}

impl std::ops::Deref for FrameNode<'_> {
    type Target = Node;
    fn deref(&self) -> &Node {
        match self {
            FrameNode::Payload(n) => n,
            FrameNode::Bare(n) => n,
        }
    }
}

impl<'py> Frame<'py> {
    /// The node this frame stands for (a bare copy for tuples and lists).
    fn node<'n>(&self, payloads: &'n [Node]) -> FrameNode<'n> {
        match payloads.get(self.payload as usize) {
            Some(node) if self.payload != NO_PAYLOAD => FrameNode::Payload(node),
            _ => FrameNode::Bare(Node::bare(self.kind, self.arity, 0, 0)),
        }
    }

    /// The container this frame walks (None only for a pending frame without its
    /// container, which `push_node` never makes).
    fn container(&self) -> Option<&Bound<'py, PyAny>> {
        match (&self.obj, &self.items) {
            (Some(obj), _) => Some(obj),
            (None, Items::Tuple(t)) => Some(t.as_any()),
            (None, Items::List(l)) => Some(l.as_any()),
            (None, Items::Pending) => None,
        }
    }
}

/// What a graph walk remembers: every container it opened, by address.
#[derive(Default)]
pub struct Memo<'py> {
    /// Address of each opened container to its ordinal (the order of opening).
    seen: types::PtrMap<u32>,
    /// The containers themselves, held so no address is reused during the walk (a custom
    /// node's children may be temporaries).
    keep: Vec<Bound<'py, PyAny>>,
    /// Each ordinal's node position, filled in when its container closes.
    pub positions: Vec<u32>,
    /// References: (skeleton leaf index, ordinal of the container referred to).
    pub refs: Vec<(u32, u32)>,
}

pub struct Flattener<
    'a,
    'py,
    P,
    const NONE_LEAF: bool,
    const NODES: bool,
    const LEAVES: bool,
    const GRAPH: bool = false,
> {
    py: Python<'py>,
    pred: P,
    registry: &'a Registry,
    namespace: &'a str,
    leaves: Vec<Bound<'py, PyAny>>,
    nodes: Nodes,
    leaf_count: usize,
    namespaced: bool,
    acyclic: bool,
    next_cycle_check: usize,
    /// Ask custom nodes for their keys (JAX's `flatten_with_keys`) while walking.
    with_keys: bool,
    face: Face,
    /// Read JAX's registry for types oxtree does not register (`jax_registry`), as this walk
    /// sees it.
    jax: Option<Sighting>,
    /// optree's `dict_insertion_ordered` mode for this walk's namespace: dicts and
    /// defaultdicts keep their insertion order, as OrderedDicts do (optree's face only).
    insertion_ordered: bool,
    /// The types of the last two objects classified as leaves by the slow path: leaves of one
    /// type usually come in runs, or alternate between two (an int and a float field of
    /// every dataclass). Held strongly, so their addresses cannot be reused mid-walk.
    leaf_types: [Option<Bound<'py, pyo3::types::PyType>>; 2],
    /// The type and registration of the last registered node opened: nodes of one class
    /// come in runs (a list of dataclasses), so most skip the registry's hash lookup. The
    /// registration holds its type, so the address cannot be reused mid-walk.
    last_custom: Option<(*mut ffi::PyTypeObject, &'a Arc<Registration>)>,
    /// Graph walks only: the containers seen so far.
    memo: Memo<'py>,
    /// The nodes of open frames whose kinds carry data, innermost last.
    payloads: Nodes,
    /// Children of open `Items::Pending` frames not yet visited, each frame's last child
    /// deepest: a depth-first walk pops them in order.
    pending: Vec<Bound<'py, PyAny>>,
}

impl<
        'a,
        'py,
        P: Pred<'py>,
        const NONE_LEAF: bool,
        const NODES: bool,
        const LEAVES: bool,
        const GRAPH: bool,
    > Flattener<'a, 'py, P, NONE_LEAF, NODES, LEAVES, GRAPH>
{
    fn new(py: Python<'py>, pred: P, registry: &'a Registry, namespace: &'a str) -> Self {
        Flattener {
            py,
            pred,
            registry,
            namespace,
            leaves: Vec::new(),
            nodes: Nodes::new(),
            leaf_count: 0,
            namespaced: registry.dict_insertion_ordered_in(namespace),
            acyclic: true,
            next_cycle_check: FIRST_CYCLE_CHECK,
            with_keys: false,
            face: Face::Optree,
            jax: None,
            insertion_ordered: registry.dict_insertion_ordered(namespace),
            leaf_types: [None, None],
            last_custom: None,
            memo: Memo::default(),
            payloads: Nodes::new(),
            pending: Vec::new(),
        }
    }

    fn run(mut self, root: &Bound<'py, PyAny>) -> PyResult<Flat<'py>> {
        let mut stack = take_stack();
        self.presize();
        let walked = self.walk(root, &mut stack);
        give_back_stack(stack);
        self.give_back_buffers();
        walked?;
        Ok(self.finish())
    }

    /// Room for as many leaves and nodes as the last walk on this thread produced: a loop
    /// flattening trees of one shape then never grows (and copies) its vectors.
    fn presize(&mut self) {
        let (leaves, nodes) = SIZE_HINT.with(Cell::get);
        if NODES {
            self.nodes = super::take_nodes(super::Buffer::Nodes, nodes);
        }
        if LEAVES {
            self.leaves = crate::spare::take(crate::spare::Slot::Leaves, leaves);
        }
        self.pending = crate::spare::take(crate::spare::Slot::Pending, 0);
        self.payloads = super::take_nodes(super::Buffer::Payloads, 0);
    }

    /// Keeps the pending stack's and the payload stack's buffers for the next walk (what an
    /// error left in them is released).
    fn give_back_buffers(&mut self) {
        crate::spare::give_back(
            crate::spare::Slot::Pending,
            std::mem::take(&mut self.pending),
        );
        super::give_back_nodes(super::Buffer::Payloads, std::mem::take(&mut self.payloads));
    }

    /// Pushes `children` (in child order) to be visited by an `Items::Pending` frame.
    #[inline(always)]
    fn push_pending(&mut self, children: impl DoubleEndedIterator<Item = Bound<'py, PyAny>>) {
        self.pending.extend(children.rev());
    }

    fn finish(mut self) -> Flat<'py> {
        let nodes = if NODES {
            self.nodes.len()
        } else {
            SIZE_HINT.with(Cell::get).1
        };
        SIZE_HINT.with(|h| h.set((self.leaf_count, nodes)));
        // The nodes live on in a treespec: give back room a bigger earlier walk asked for.
        if self.nodes.capacity() > 2 * self.nodes.len() + 16 {
            self.nodes.shrink_to_fit();
        }
        Flat {
            leaves: self.leaves,
            nodes: self.nodes,
            namespaced: self.namespaced,
            acyclic: self.acyclic,
        }
    }

    /// Walks one tree, appending its leaves and nodes to what earlier walks produced.
    fn walk(&mut self, root: &Bound<'py, PyAny>, stack: &mut Vec<Frame<'py>>) -> PyResult<()> {
        self.visit(root.clone(), stack)?;
        while let Some(top) = stack.last_mut() {
            // The end test first, then the kind: one branch the same for every kind of
            // container, and the dispatch only for a child (a test in each arm mispredicted
            // once a registered node, tuples inside a list, closed).
            let child = if top.pos < top.arity {
                Some(match &mut top.items {
                    // A tuple never changes: `pos` is below its length.
                    Items::Tuple(t) => {
                        crate::ffi::tuple_item(t, top.pos).invariant("a tuple item")?
                    }
                    Items::List(l) => match crate::ffi::list_item(l, top.pos) {
                        Some(item) => item,
                        None => return Err(self.mutated(stack)),
                    },
                    Items::Pending => self
                        .pending
                        .pop()
                        .invariant("a pending frame's children wait")?,
                })
            } else {
                None
            };
            match child {
                Some(child) => {
                    top.pos += 1;
                    self.visit(child, stack)?;
                }
                None => {
                    // Closed where it lies, then dropped in place: popping it moved the
                    // frame through the native stack first, and dropping the copy's items
                    // read back what had just been stored (store forwarding; perf put a
                    // seventh of a 500-deep chain's flatten in that drop).
                    if let Some(top) = stack.last() {
                        if !self.close(top) {
                            return Err(crate::internal!("a frame closed without its node"));
                        }
                    }
                    stack.truncate(stack.len().saturating_sub(1));
                }
            }
        }
        Ok(())
    }

    /// Graph walks: when `obj` was opened before, emits a reference to it (a skeleton leaf
    /// that takes no leaf value) and says so.
    #[inline(always)]
    fn seen_before(&mut self, obj: &Bound<'py, PyAny>) -> bool {
        if !GRAPH {
            return false;
        }
        let Some(&ordinal) = self.memo.seen.get(&(obj.as_ptr() as usize)) else {
            return false;
        };
        self.memo.refs.push((self.leaf_count as u32, ordinal));
        self.leaf_count += 1;
        if NODES {
            self.nodes.push(Node::LEAF);
        }
        true
    }

    /// Room for a wide container's children: one growth step instead of several. Narrow
    /// ones leave it to the pushes, which check the room anyway (two reserves were 10
    /// instructions a container, a thirteenth of a 500-deep chain's flatten).
    #[inline(always)]
    fn reserve(&mut self, n: usize) {
        if n <= RESERVE_FROM {
            return;
        }
        if NODES {
            self.nodes.reserve(n + 1);
        }
        if LEAVES {
            self.leaves.reserve(n);
        }
    }

    #[inline(always)]
    fn leaf(&mut self, obj: Bound<'py, PyAny>) {
        if LEAVES {
            self.leaves.push(obj);
        }
        self.leaf_count += 1;
        if NODES {
            self.nodes.push(Node::LEAF);
        }
    }

    #[inline(always)]
    fn visit(&mut self, obj: Bound<'py, PyAny>, stack: &mut Vec<Frame<'py>>) -> PyResult<()> {
        if P::ACTIVE {
            let hit = if P::WANTS_PATH {
                let path = stack_path(self.py, stack, &self.payloads)?;
                self.pred.test_path(&path, &obj)?
            } else {
                self.pred.test(&obj)?
            };
            if hit {
                self.leaf(obj);
                return Ok(());
            }
        }
        let obj = match crate::ffi::into_exact::<PyTuple>(obj) {
            Ok(t) => {
                if self.seen_before(t.as_any()) {
                    return Ok(());
                }
                let n = t.len();
                self.reserve(n);
                return self.push_seq(|| Items::Tuple(t), Kind::Tuple, n, stack);
            }
            Err(obj) => obj,
        };
        let obj = match crate::ffi::into_exact::<PyList>(obj) {
            Ok(l) => {
                if self.seen_before(l.as_any()) {
                    return Ok(());
                }
                let n = l.len();
                self.reserve(n);
                return self.push_seq(|| Items::List(l), Kind::List, n, stack);
            }
            Err(obj) => obj,
        };
        if obj.is_exact_instance_of::<PyDict>() {
            if self.seen_before(&obj) {
                return Ok(());
            }
            return self.open_mapping(obj, Kind::Dict, stack);
        }
        if obj.is_none() {
            if NONE_LEAF {
                self.leaf(obj);
            } else if NODES {
                self.nodes.push(Node::NONE);
            }
            return Ok(());
        }
        // Here, not in `visit_other`: most leaves are scalars, and entering that large
        // function cost an int leaf ~30 instructions of register saves and restores.
        if self.registry.scalar_leaf(obj.get_type_ptr()) {
            self.leaf(obj);
            return Ok(());
        }
        self.visit_other(obj, stack)
    }

    fn visit_other(&mut self, obj: Bound<'py, PyAny>, stack: &mut Vec<Frame<'py>>) -> PyResult<()> {
        let ty = obj.get_type_ptr().cast::<ffi::PyObject>();
        if self.leaf_types.iter().flatten().any(|t| t.as_ptr() == ty) {
            self.leaf(obj);
            return Ok(());
        }
        let class = match self.last_custom {
            Some((t, reg)) if t == obj.get_type_ptr() => Class::Custom(reg),
            _ => classify_other(
                &obj,
                self.registry,
                self.namespace,
                self.face,
                self.jax.as_ref(),
            )?,
        };
        if !matches!(class, Class::Leaf) && self.seen_before(&obj) {
            return Ok(());
        }
        match class {
            Class::Leaf => {
                // The newer type takes the older one's slot.
                self.leaf_types.swap(0, 1);
                self.leaf_types[0] = Some(obj.get_type());
                self.leaf(obj);
                Ok(())
            }
            Class::NoneNode => Err(crate::internal!("None missed the fast path")),
            Class::Custom(reg) => {
                self.last_custom = Some((obj.get_type_ptr(), reg));
                self.namespaced = true;
                self.acyclic = false;
                self.open_custom(obj, reg, stack)
            }
            Class::Node(kind) => match kind {
                Kind::NamedTuple | Kind::StructSeq => {
                    self.acyclic = false;
                    // Namedtuples and struct sequences are tuple subclasses.
                    let t = obj
                        .cast::<PyTuple>()
                        .map_err(|_| crate::internal!("a namedtuple that is no tuple"))?
                        .clone();
                    let n = t.len();
                    let ty = obj.get_type().into_any().unbind();
                    self.push_node(
                        obj,
                        || Items::Tuple(t),
                        kind,
                        n,
                        stack,
                        |node| {
                            node.data = Some(ty);
                        },
                    )
                }
                Kind::OrderedDict | Kind::DefaultDict => self.open_mapping(obj, kind, stack),
                Kind::Deque => {
                    let items = iter_to_list(&obj)?;
                    let maxlen = obj.getattr(intern!(self.py, "maxlen"))?.unbind();
                    let n = items.len();
                    self.push_node(
                        obj,
                        || Items::List(items),
                        Kind::Deque,
                        n,
                        stack,
                        |node| {
                            node.data = Some(maxlen);
                        },
                    )
                }
                _ => Err(crate::internal!(
                    "classify returned the fast-path kind {kind:?}"
                )),
            },
        }
    }

    /// Opens a dict, OrderedDict or defaultdict: keys in leaf order, values snapshotted.
    fn open_mapping(
        &mut self,
        obj: Bound<'py, PyAny>,
        kind: Kind,
        stack: &mut Vec<Frame<'py>>,
    ) -> PyResult<()> {
        let py = self.py;
        // Every mapping kind is a dict subclass (checked by the caller).
        let dict = obj
            .cast::<PyDict>()
            .map_err(|_| crate::internal!("a mapping that is no dict"))?;
        // Whether the key list is known to be untracked already (all keys str).
        let mut untracked = false;
        let own_order = kind == Kind::OrderedDict
            || (self.insertion_ordered && self.face.rules().honours_insertion_ordered_mode);
        let (keys, insertion) = if own_order {
            // The OrderedDict's own order, which its dict storage need not follow (and a
            // dict's insertion order in `dict_insertion_ordered` mode).
            let keys = iter_to_list(&obj)?;
            let base = self.pending.len();
            for key in keys.iter() {
                match dict_get(dict, &key)? {
                    Some(v) => self.pending.push(v),
                    None => return Err(self.mutated_at(stack, "dict")),
                }
            }
            self.pending[base..].reverse();
            (keys, None)
        } else if let Some((keys, insertion)) = small_str_items(dict, &mut self.pending) {
            untracked = true;
            let insertion = if !self.face.rules().records_insertion_order {
                None
            } else {
                insertion
            };
            (keys, insertion)
        } else {
            // One pass over the dict's storage (insertion order) takes keys and values; the
            // key list is then sorted in place and the values permuted to match, with no
            // lookups, one Python list per dict (the kept key list) and, for dicts of up to
            // 16 keys, no other allocation but the value vector: fewer allocations of
            // collected objects means fewer garbage-collector passes (9% of a gpt2 flatten).
            let (keys, ins_keys, mut values) = dict_items(dict)?;
            if keys.len() > 1 {
                sort_keys_in_place(&keys, &ins_keys, self.face.rules().sorts_dict_keys_strictly)?;
            }
            let insertion = insertion_positions(&keys, &ins_keys)?;
            if let Some(positions) = &insertion {
                permute(&mut values, |i| positions.get(i));
            }
            // JAX rebuilds dicts sorted: its treespecs keep no insertion order.
            let insertion = if !self.face.rules().records_insertion_order {
                None
            } else {
                insertion
            };
            self.push_pending(values.into_iter());
            (keys, insertion)
        };
        let n = keys.len();
        self.reserve(n);
        let factory = if kind == Kind::DefaultDict {
            self.acyclic = false;
            Some(obj.getattr(intern!(py, "default_factory"))?.unbind())
        } else {
            None
        };
        if !untracked && !untrack_if_atomic(&keys) {
            self.acyclic = false;
        }
        self.push_node(
            obj,
            || Items::Pending,
            kind,
            n,
            stack,
            |node| {
                node.data = factory;
                node.set_keys(Some(keys.unbind()));
                node.set_insertion_positions(insertion.as_ref());
            },
        )
    }

    fn open_custom(
        &mut self,
        obj: Bound<'py, PyAny>,
        reg: &'a Arc<Registration>,
        stack: &mut Vec<Frame<'py>>,
    ) -> PyResult<()> {
        let py = self.py;
        if let crate::registry::Rule::Dataclass {
            data,
            meta,
            reads: [data_reads, meta_reads],
            ..
        } = &reg.rule
        {
            // The fields go straight onto the pending stack, last one deepest.
            let base = self.pending.len();
            super::custom::fields_into(py, data, data_reads, &obj, &mut self.pending)?;
            self.pending[base..].reverse();
            let n = data.len();
            // Meta values go into the treedef, compared by `==` (hashable or not, as optree
            // and JAX accept them).
            let aux = super::custom::dataclass_aux(py, meta, meta_reads, &obj)?;
            return self.push_custom_node(
                obj,
                || Items::Pending,
                n,
                stack,
                reg,
                |node| node.data = Some(aux.unbind()),
            );
        }
        let (children, aux, mut entries) =
            super::custom::flatten_in(py, reg, &obj, self.with_keys, self.face)?;
        if self.with_keys {
            if let (
                Some(e),
                crate::registry::Rule::Custom {
                    flatten_with_keys: None,
                    ..
                },
            ) = (&entries, &reg.rule)
            {
                // optree-style entries, wanted as JAX keys: each becomes a FlattenedIndexKey.
                let keys = e
                    .iter()
                    .map(|k| super::keys::flattened_key(py, k))
                    .collect::<PyResult<Vec<_>>>()?;
                entries = Some(PyTuple::new(py, keys)?);
            }
        }
        let n = children.len();
        let items = match children {
            crate::registry::Children::Tuple(t) => Items::Tuple(t),
            crate::registry::Children::List(l) => Items::List(l),
            crate::registry::Children::Vec(v) => {
                self.push_pending(v.into_iter());
                Items::Pending
            }
        };
        self.push_custom_node(
            obj,
            || items,
            n,
            stack,
            reg,
            |node| {
                node.data = Some(aux.unbind());
                node.set_entries(entries.map(Bound::unbind));
            },
        )
    }

    /// Opens a container whose node carries data: the node is made on the payload stack and
    /// filled there by `fill`, and the frame over `items` built in place (see `push_frame`).
    #[inline(always)]
    fn push_node(
        &mut self,
        obj: Bound<'py, PyAny>,
        items: impl FnOnce() -> Items<'py>,
        kind: Kind,
        arity: usize,
        stack: &mut Vec<Frame<'py>>,
        fill: impl FnOnce(&mut Node),
    ) -> PyResult<()> {
        let payload = self.payloads.len() as u32;
        self.payloads
            .push_built(|| Node::bare(kind, arity, 0, 0), fill);
        self.push_frame(Some(obj), items, kind, arity, payload, stack)
    }

    /// `push_node` for a registered node of `reg`.
    #[inline(always)]
    fn push_custom_node(
        &mut self,
        obj: Bound<'py, PyAny>,
        items: impl FnOnce() -> Items<'py>,
        arity: usize,
        stack: &mut Vec<Frame<'py>>,
        reg: &Arc<Registration>,
        fill: impl FnOnce(&mut Node),
    ) -> PyResult<()> {
        let payload = self.payloads.len() as u32;
        self.payloads
            .push_custom_built(|| Node::bare(Kind::Custom, arity, 0, 0), reg, fill);
        self.push_frame(Some(obj), items, Kind::Custom, arity, payload, stack)
    }

    /// Opens a tuple or list (`kind` says which, checked by the caller).
    #[inline(always)]
    fn push_seq(
        &mut self,
        items: impl FnOnce() -> Items<'py>,
        kind: Kind,
        arity: usize,
        stack: &mut Vec<Frame<'py>>,
    ) -> PyResult<()> {
        self.push_frame(None, items, kind, arity, NO_PAYLOAD, stack)
    }

    /// Pushes a frame built in the stack's own memory, its items made inside the write. Built
    /// on the native stack and then copied, frames and nodes were read with wide loads right
    /// after the narrow stores that made them, which stall (store forwarding): perf put a
    /// fifth of a 500-deep chain's flatten, and a quarter of a gpt2-like dict's, on those
    /// copies.
    #[inline(always)]
    fn push_frame(
        &mut self,
        obj: Option<Bound<'py, PyAny>>,
        items: impl FnOnce() -> Items<'py>,
        kind: Kind,
        arity: usize,
        payload: u32,
        stack: &mut Vec<Frame<'py>>,
    ) -> PyResult<()> {
        let (leaves_before, nodes_before) = (self.leaf_count, self.nodes.len());
        push_built(stack, || Frame {
            obj,
            items: items(),
            pos: 0,
            arity,
            kind,
            payload,
            leaves_before,
            nodes_before,
            ordinal: 0,
        });
        self.opened(stack)
    }

    /// What follows pushing a frame: the depth check, and a graph walk's memo.
    #[inline(always)]
    fn opened(&mut self, stack: &mut Vec<Frame<'py>>) -> PyResult<()> {
        if stack.len() > self.next_cycle_check {
            if let Some((new, open)) = stack.split_last() {
                if let Err(e) = self.check_depth(open, new) {
                    stack.pop();
                    return Err(e);
                }
            }
        }
        if GRAPH {
            let top = stack.last_mut().invariant("a frame just pushed")?;
            let obj = top
                .container()
                .invariant("a pending frame's container")?
                .clone();
            top.ordinal = self.memo.keep.len() as u32;
            self.memo.seen.insert(obj.as_ptr() as usize, top.ordinal);
            self.memo.keep.push(obj);
            self.memo.positions.push(u32::MAX);
        }
        Ok(())
    }

    /// Emits the node of a finished frame; false (a broken invariant) when its payload
    /// node is missing. A bool, not a `PyResult`: this runs once per node.
    #[inline(always)]
    fn close(&mut self, frame: &Frame<'py>) -> bool {
        if GRAPH {
            self.memo.positions[frame.ordinal as usize] = self.nodes.len() as u32;
        }
        let has_payload = frame.payload != NO_PAYLOAD;
        if !NODES {
            if has_payload {
                self.payloads.discard_last();
            }
            return true;
        }
        let num_leaves = self.leaf_count - frame.leaves_before;
        let num_nodes = self.nodes.len() - frame.nodes_before + 1;
        // Each node is built or moved where it lands, never through the native stack: a node
        // made or popped there was copied with wide loads right after narrow stores, which
        // stall on store forwarding (perf: a 500-deep chain, a gpt2-like dict).
        if has_payload {
            // A frame with a payload pushed it (`push_node`).
            if !self
                .nodes
                .move_last_from(&mut self.payloads, num_leaves, num_nodes)
            {
                return false;
            }
        } else {
            // A tuple or a list: a bare node, which holds nothing.
            self.nodes
                .push_empty(|| Node::bare(frame.kind, frame.arity, num_leaves, num_nodes));
        }
        true
    }

    /// Past a threshold depth: look for a cycle among the open containers; past the limit,
    /// raise RecursionError.
    #[cold]
    #[inline(never)]
    fn check_depth(&mut self, stack: &[Frame<'py>], new: &Frame<'py>) -> PyResult<()> {
        let mut seen: HashMap<usize, usize> = HashMap::with_capacity(stack.len() + 1);
        let objs = stack
            .iter()
            .filter_map(|f| f.container())
            .chain(new.container());
        for (depth, obj) in objs.enumerate() {
            if let Some(first) = seen.insert(obj.as_ptr() as usize, depth) {
                let path = |k: usize| frame_path(self.py, &stack[..k], &self.payloads);
                return Err(TreeError::Cycle {
                    closes_at: path(depth),
                    ancestor: path(first),
                }
                .into());
            }
        }
        if stack.len() >= MAX_DEPTH {
            return Err(TreeError::TooDeep {
                path: frame_path(self.py, stack, &self.payloads),
                limit: MAX_DEPTH,
            }
            .into());
        }
        self.next_cycle_check = (self.next_cycle_check * 2).min(MAX_DEPTH);
        Ok(())
    }

    #[cold]
    fn mutated(&self, stack: &[Frame<'py>]) -> PyErr {
        let what = match stack.last().map(|f| f.kind) {
            Some(Kind::List) => "list",
            _ => "container",
        };
        let path = frame_path(
            self.py,
            &stack[..stack.len().saturating_sub(1)],
            &self.payloads,
        );
        TreeError::Mutated { path, what }.into()
    }

    #[cold]
    fn mutated_at(&self, stack: &[Frame<'py>], what: &'static str) -> PyErr {
        TreeError::Mutated {
            path: frame_path(self.py, stack, &self.payloads),
            what,
        }
        .into()
    }
}

use crate::ffi::push_built;

thread_local! {
    /// The sizes (leaves, nodes) of the last walk on this thread.
    static SIZE_HINT: Cell<(usize, usize)> = const { Cell::new((0, 0)) };
    /// A walk stack's allocation, kept between walks on this thread (empty, lifetime erased).
    static SPARE_STACK: Cell<Option<Vec<Frame<'static>>>> = const { Cell::new(None) };
}

/// Frames a stack keeps between walks at most (a few hundred KiB): deeper walks allocate.
const KEPT_FRAMES: usize = 4096;

/// An empty walk stack, with the allocation of an earlier walk when one is spare. Measured
/// on a 500-deep chain: growing a fresh stack was a sixth of the flatten.
// Inlined into the walk: see `treespec::take_nodes`.
#[inline(always)]
fn take_stack<'py>() -> Vec<Frame<'py>> {
    match SPARE_STACK.with(Cell::take) {
        Some(spare) => crate::spare::retype(spare),
        None => Vec::with_capacity(64),
    }
}

// Inlined into the walk: see `treespec::take_nodes`.
#[inline(always)]
fn give_back_stack(mut stack: Vec<Frame<'_>>) {
    stack.clear();
    if stack.capacity() <= KEPT_FRAMES {
        SPARE_STACK.with(|s| s.set(Some(crate::spare::retype(stack))));
    }
}

/// The key path (JAX's key objects) of the object the walk is visiting below `frames`.
fn stack_path<'py>(
    py: Python<'py>,
    frames: &[Frame<'py>],
    payloads: &[Node],
) -> PyResult<Bound<'py, PyTuple>> {
    let keys = frames
        .iter()
        .map(|f| {
            super::keys::child_key(
                py,
                &f.node(payloads),
                f.pos.saturating_sub(1),
                super::keys::KeyStyle::Keys,
            )
        })
        .collect::<PyResult<Vec<_>>>()?;
    PyTuple::new(py, keys)
}

/// The path to the container a walk would open below `frames`, from the frames' positions.
#[cold]
fn frame_path(py: Python<'_>, frames: &[Frame<'_>], payloads: &[Node]) -> String {
    let nodes: Vec<_> = frames.iter().map(|f| f.node(payloads)).collect();
    let entries: Vec<_> = frames
        .iter()
        .zip(&nodes)
        .map(|(f, n)| n.entry(py, f.pos.saturating_sub(1)))
        .collect();
    path_text::render("tree", &entries)
}

/// Looks a key up in a dict without calling `__missing__`; `None` if it is absent.
#[inline]
fn dict_get<'py>(
    dict: &Bound<'py, PyDict>,
    key: &Bound<'py, PyAny>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    crate::ffi::dict_get_item(dict, key)
}

/// `list(obj)`: a new list of what iterating `obj` yields.
pub fn iter_to_list<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
    crate::ffi::sequence_list(obj)
}

fn run_with<'py, P: Pred<'py>, const NONE_LEAF: bool, const NODES: bool, const LEAVES: bool>(
    tree: &Bound<'py, PyAny>,
    pred: P,
    opts: &Options<'_, 'py>,
    registry: &Registry,
) -> PyResult<Flat<'py>> {
    let mut f =
        Flattener::<P, NONE_LEAF, NODES, LEAVES>::new(tree.py(), pred, registry, opts.namespace);
    f.with_keys = opts.with_keys;
    f.face = opts.face;
    f.jax = opts.reads_jax().then(Sighting::default);
    f.run(tree)
}

/// What a graph walk produced: the walk's output, whose nodes form a skeleton in which every
/// reference is a leaf, and the memo that says which skeleton leaves are references.
pub struct GraphFlat<'py> {
    pub flat: Flat<'py>,
    pub memo: Memo<'py>,
}

fn run_graph_with<'py, P: Pred<'py>, const NONE_LEAF: bool>(
    py: Python<'py>,
    roots: &[Bound<'py, PyAny>],
    pred: P,
    opts: &Options<'_, 'py>,
    registry: &Registry,
) -> PyResult<GraphFlat<'py>> {
    let mut f =
        Flattener::<P, NONE_LEAF, true, true, true>::new(py, pred, registry, opts.namespace);
    f.face = opts.face;
    f.jax = opts.reads_jax().then(Sighting::default);
    f.with_keys = opts.with_keys;
    f.presize();
    let mut stack = take_stack();
    let walked = roots.iter().try_for_each(|root| f.walk(root, &mut stack));
    give_back_stack(stack);
    f.give_back_buffers();
    walked?;
    if roots.len() != 1 {
        // Several roots (or none): the skeleton's root is a tuple of them.
        let mut node = Node::bare(Kind::Tuple, roots.len(), f.leaf_count, f.nodes.len() + 1);
        node.num_leaves = f.leaf_count;
        f.nodes.push(node);
    }
    let memo = std::mem::take(&mut f.memo);
    Ok(GraphFlat {
        flat: f.finish(),
        memo,
    })
}

/// Walks `roots` as one graph: a container met again (through any root) becomes a reference.
pub fn flatten_graph<'py>(
    py: Python<'py>,
    roots: &[Bound<'py, PyAny>],
    opts: &Options<'_, 'py>,
    registry: &Registry,
) -> PyResult<GraphFlat<'py>> {
    match (opts.is_leaf, opts.none_is_leaf) {
        (None, false) => run_graph_with::<_, false>(py, roots, NoPred, opts, registry),
        (None, true) => run_graph_with::<_, true>(py, roots, NoPred, opts, registry),
        (Some(f), false) => run_graph_with::<_, false>(py, roots, CallPred(f), opts, registry),
        (Some(f), true) => run_graph_with::<_, true>(py, roots, CallPred(f), opts, registry),
    }
}

/// Walks `tree` one level: its children are the leaves (None children too). `opts.is_leaf`
/// is not consulted.
pub fn flatten_one_level<'py>(
    tree: &Bound<'py, PyAny>,
    opts: &Options<'_, 'py>,
    registry: &Registry,
) -> PyResult<Flat<'py>> {
    let pred = NotRoot(tree.as_ptr());
    if opts.none_is_leaf {
        run_with::<_, true, true, true>(tree, pred, opts, registry)
    } else {
        run_with::<_, false, true, true>(tree, pred, opts, registry)
    }
}

/// What a flatten found: the walk's output, or a sequence whose items are all leaves.
pub enum Walked<'py> {
    Flat(Flat<'py>),
    /// The tree is an exact tuple or list (the kind) of this many items, every one a leaf:
    /// its leaves are its items and its nodes those of `Flat::leaf_sequence`. The walk was
    /// skipped.
    Sequence(Kind, usize),
}

/// `flatten_opts`, except that a tuple or list whose items are plainly leaves skips the walk:
/// taking and giving back the walk's buffers, its stack and its size hint were two fifths of
/// a 3-leaf flatten (callgrind), and most arguments trees are such tuples.
pub fn flatten_or_sequence<'py, const NODES: bool, const LEAVES: bool>(
    tree: &Bound<'py, PyAny>,
    opts: &Options<'_, 'py>,
    registry: &Registry,
) -> PyResult<Walked<'py>> {
    match leaf_sequence(tree, opts, registry) {
        Some((kind, n)) => Ok(Walked::Sequence(kind, n)),
        None => flatten_opts::<NODES, LEAVES>(tree, opts, registry).map(Walked::Flat),
    }
}

impl Flat<'_> {
    /// What a walk of a tuple or list (`kind`) of `n` leaves gives, leaves left out (they are
    /// the sequence's items).
    pub fn leaf_sequence(kind: Kind, n: usize) -> Self {
        let mut nodes = Nodes::with_capacity(n + 1);
        for _ in 0..n {
            nodes.push(Node::LEAF);
        }
        nodes.push(Node::bare(kind, n, n, n + 1));
        Flat {
            leaves: Vec::new(),
            nodes,
            namespaced: false,
            acyclic: true,
        }
    }
}

/// The kind and length of `tree` when it is an exact tuple or list whose items the walk
/// would all take for leaves, decided without running any Python code (so a list cannot
/// change while it is looked at): builtin scalars, None when it is a leaf, and objects of
/// unregistered types that are no container kind. None when the walk must decide.
fn leaf_sequence(
    tree: &Bound<'_, PyAny>,
    opts: &Options<'_, '_>,
    registry: &Registry,
) -> Option<(Kind, usize)> {
    if opts.is_leaf.is_some() {
        return None;
    }
    let (kind, n) = if let Ok(t) = tree.cast_exact::<PyTuple>() {
        (Kind::Tuple, t.len())
    } else if let Ok(l) = tree.cast_exact::<PyList>() {
        (Kind::List, l.len())
    } else {
        return None;
    };
    // Read only for an item that is neither a builtin scalar nor None (most leaf sequences
    // hold nothing else).
    let mut rare = RareChecks::default();
    // What is decided depends on the type alone (None is its type's one instance), and
    // items of one type come in runs: the last type accepted is accepted again at one
    // compare (a 100,000-int list: 20 instructions an item before, 10 after).
    let mut accepted: *mut ffi::PyTypeObject = std::ptr::null_mut();
    // Nothing below runs Python code, so the list cannot change while it is looked at.
    let plain = |item: crate::ffi::ItemType| {
        if item.ty == accepted {
            return true;
        }
        let ok = if registry.scalar_leaf(item.ty) {
            true
        } else if item.is_none {
            opts.none_is_leaf
        } else {
            rare.plain_leaf(tree.py(), item, opts, registry)
        };
        if ok {
            accepted = item.ty;
        }
        ok
    };
    crate::ffi::all_item_types(tree, plain).then_some((kind, n))
}

/// How `leaf_sequence` decides an item that is neither a builtin scalar nor None, with what
/// it read for the items before.
struct RareChecks {
    /// The address of `collections.deque` (compared only) and JAX's registry size when the
    /// walk reads JAX's registry, read at the first such item; None inside when `collections`
    /// is not imported yet.
    read: Option<Option<(*mut ffi::PyObject, Option<usize>)>>,
    /// The last type found to be no JAX node: items of one type come in runs.
    not_jax: *mut ffi::PyTypeObject,
}

impl Default for RareChecks {
    fn default() -> Self {
        RareChecks {
            read: None,
            not_jax: std::ptr::null_mut(),
        }
    }
}

impl RareChecks {
    /// Whether the walk takes `item` (neither a builtin scalar nor None) for a leaf: an
    /// unregistered type of no container kind. `collections` is imported when the module
    /// loads (never here: that would run Python code); false until it is.
    #[inline(never)]
    fn plain_leaf(
        &mut self,
        py: Python<'_>,
        item: crate::ffi::ItemType,
        opts: &Options<'_, '_>,
        registry: &Registry,
    ) -> bool {
        let read = *self.read.get_or_insert_with(|| {
            let deque = types::collections_if_ready(py)?.deque.as_ptr();
            // JAX's registry: only types known not to be JAX nodes (its size read once).
            Some((
                deque,
                opts.reads_jax().then(|| crate::jax_registry::size(py)),
            ))
        });
        let Some((deque, jax_size)) = read else {
            return false;
        };
        item.flags
            & (ffi::Py_TPFLAGS_TUPLE_SUBCLASS
                | ffi::Py_TPFLAGS_LIST_SUBCLASS
                | ffi::Py_TPFLAGS_DICT_SUBCLASS)
            == 0
            && item.ty.cast() != deque
            && (registry.is_empty() || registry.lookup(item.ty, opts.namespace).is_none())
            && jax_size.is_none_or(|size| {
                let known = item.ty == self.not_jax
                    || crate::jax_registry::known_leaf(item.ty, item.flags, item.tag(), size);
                self.not_jax = if known { item.ty } else { std::ptr::null_mut() };
                known
            })
    }
}

/// Walks `tree` with the options chosen once, as compile-time parameters.
pub fn flatten_opts<'py, const NODES: bool, const LEAVES: bool>(
    tree: &Bound<'py, PyAny>,
    opts: &Options<'_, 'py>,
    registry: &Registry,
) -> PyResult<Flat<'py>> {
    match (opts.is_leaf, opts.is_leaf_takes_path, opts.none_is_leaf) {
        (None, _, false) => run_with::<_, false, NODES, LEAVES>(tree, NoPred, opts, registry),
        (None, _, true) => run_with::<_, true, NODES, LEAVES>(tree, NoPred, opts, registry),
        (Some(f), false, false) => {
            run_with::<_, false, NODES, LEAVES>(tree, CallPred(f), opts, registry)
        }
        (Some(f), false, true) => {
            run_with::<_, true, NODES, LEAVES>(tree, CallPred(f), opts, registry)
        }
        (Some(f), true, false) => {
            run_with::<_, false, NODES, LEAVES>(tree, PathPred(f), opts, registry)
        }
        (Some(f), true, true) => {
            run_with::<_, true, NODES, LEAVES>(tree, PathPred(f), opts, registry)
        }
    }
}

fn namespace_of(flat_namespaced: bool, namespace: &str) -> String {
    if flat_namespaced {
        namespace.to_owned()
    } else {
        String::new()
    }
}

/// The treespec a walk produced (its nodes, with the registrations they point to), with the
/// options it was made under.
pub fn spec_of(
    flat_nodes: crate::treespec::Nodes,
    namespaced: bool,
    opts: &Options<'_, '_>,
) -> PyTreeSpec {
    PyTreeSpec::new(
        flat_nodes,
        opts.none_is_leaf,
        namespace_of(namespaced, opts.namespace),
    )
    .with_face(opts.face)
}

/// The treespec of a walk as a Python object (see `spec_into_py`), taking the walk's nodes
/// (with their registrations) and leaving its leaves.
pub fn flat_spec<'py>(
    py: Python<'py>,
    flat: &mut Flat<'py>,
    opts: &Options<'_, 'py>,
) -> PyResult<Bound<'py, PyTreeSpec>> {
    let spec = spec_of(std::mem::take(&mut flat.nodes), flat.namespaced, opts);
    spec_into_py(py, spec, flat.acyclic)
}

/// The treespec as a Python object, untracked by the collector when it holds nothing that
/// could be part of a cycle (most treespecs: leaves, tuples, lists, dicts with str keys).
/// Measured on a gpt2-like dict flatten: the collector's passes over young treespecs were a
/// tenth of the time.
pub fn spec_into_py(
    py: Python<'_>,
    spec: PyTreeSpec,
    acyclic: bool,
) -> PyResult<Bound<'_, PyTreeSpec>> {
    Ok(untracked_if(Bound::new(py, spec)?, acyclic))
}

/// A new immutable object (treespec, graphdef), untracked by the collector when `acyclic`
/// says nothing it holds could be part of a cycle.
pub fn untracked_if<T>(obj: Bound<'_, T>, acyclic: bool) -> Bound<'_, T> {
    if acyclic {
        // Nothing it holds can reach it back.
        crate::ffi::untrack(&obj);
    }
    obj
}
