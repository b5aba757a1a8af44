//! The hot path: walking a tree into leaves and post-order nodes.
//!
//! The walk uses an explicit heap stack, so a deep tree can never overflow the native stack;
//! depth is one comparison per container. Options are compile-time parameters: whether an
//! `is_leaf` predicate exists, whether None is a leaf, and which outputs are wanted (leaves,
//! nodes or both), so `tree_leaves` builds no nodes and `tree_structure` keeps no leaves.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::Arc;

use pyo3::exceptions::PyTypeError;
use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use smallvec::SmallVec;

use super::{Face, Node, Nodes};
use crate::errors::{Invariant, TreeError};
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

const NO_PAYLOAD: u32 = u32::MAX;

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

/// How a non-builtin-fast-path object is to be treated.
pub enum Class<'a> {
    Leaf,
    NoneNode,
    Node(Kind),
    Custom(&'a Arc<Registration>),
}

/// Classifies an object whose type is not exactly tuple, list, dict or NoneType. With
/// `jax`, a type JAX registers and oxtree does not is a registered node with JAX's rule
/// (`jax_registry`); asking JAX is the only way this can fail.
#[inline]
pub fn classify_other<'a>(
    obj: &Bound<'_, PyAny>,
    registry: &'a Registry,
    namespace: &str,
    face: Face,
    jax: bool,
) -> PyResult<Class<'a>> {
    classify_other_type(
        obj.py(),
        obj.get_type_ptr(),
        || crate::ffi::flags_of_type_of(obj),
        || obj.get_type(),
        registry,
        namespace,
        face,
        jax,
    )
}

/// What instances of `ty` are to a walk under these options: the walk's own dispatch, for a
/// type rather than an object (`oxtree._core._node_kind`).
pub fn classify_type<'a>(
    ty: &Bound<'_, pyo3::types::PyType>,
    none_is_leaf: bool,
    registry: &'a Registry,
    namespace: &str,
    face: Face,
    jax: bool,
) -> PyResult<Class<'a>> {
    let py = ty.py();
    if ty.is(py.get_type::<PyTuple>()) {
        Ok(Class::Node(Kind::Tuple))
    } else if ty.is(py.get_type::<PyList>()) {
        Ok(Class::Node(Kind::List))
    } else if ty.is(py.get_type::<PyDict>()) {
        Ok(Class::Node(Kind::Dict))
    } else if ty.is(py.None().bind(py).get_type()) {
        Ok(if none_is_leaf {
            Class::Leaf
        } else {
            Class::NoneNode
        })
    } else {
        classify_other_type(
            py,
            ty.as_type_ptr(),
            || crate::ffi::type_flags(ty),
            || ty.clone(),
            registry,
            namespace,
            face,
            jax,
        )
    }
}

/// `classify_other` for the type `ty` of an object `obj` (or of any instance, for
/// `classify_type`); `bound` makes it a Python object, only for tuple subclasses: the walk's
/// path takes no reference otherwise.
#[inline(always)]
#[allow(clippy::too_many_arguments)] // the type's facts, lazily, and the walk's options
fn classify_other_type<'a, 'py>(
    py: Python<'py>,
    ty: *mut ffi::PyTypeObject,
    flags: impl FnOnce() -> std::os::raw::c_ulong,
    bound: impl FnOnce() -> Bound<'py, pyo3::types::PyType>,
    registry: &'a Registry,
    namespace: &str,
    face: Face,
    jax: bool,
) -> PyResult<Class<'a>> {
    if registry.scalar_leaf(ty) {
        return Ok(Class::Leaf);
    }
    if !registry.is_empty() {
        if let Some(reg) = registry.lookup(ty, namespace) {
            return Ok(Class::Custom(reg));
        }
    }
    let c = types::collections(py);
    // OrderedDict and defaultdict, which JAX registers, are nodes of their own kinds here.
    if jax && ty != c.ordered_dict.as_ptr().cast() && ty != c.default_dict.as_ptr().cast() {
        // Before the namedtuple check, as in JAX: a registration comes first.
        let bound = bound();
        if let Some(reg) = crate::jax_registry::node(&bound)? {
            return Ok(Class::Custom(reg));
        }
        return Ok(builtin_class(py, ty, flags, || bound, face));
    }
    Ok(builtin_class(py, ty, flags, bound, face))
}

/// What the walk makes of a type that is no registered node: one of the builtin node kinds
/// oxtree knows by type (namedtuples, struct sequences, the collections mappings, deque), or
/// a leaf.
#[inline(always)]
fn builtin_class<'a, 'py>(
    py: Python<'py>,
    ty: *mut ffi::PyTypeObject,
    flags: impl FnOnce() -> std::os::raw::c_ulong,
    bound: impl FnOnce() -> Bound<'py, pyo3::types::PyType>,
    face: Face,
) -> Class<'a> {
    let flags = flags();
    if flags & ffi::Py_TPFLAGS_TUPLE_SUBCLASS != 0 {
        let kind = types::tuple_subclass_kind(&bound());
        // JAX treats struct sequences as leaves.
        return if kind == Kind::Leaf || (kind == Kind::StructSeq && face == Face::Jax) {
            Class::Leaf
        } else {
            Class::Node(kind)
        };
    }
    let c = types::collections(py);
    if flags & ffi::Py_TPFLAGS_DICT_SUBCLASS != 0 {
        if ty == c.ordered_dict.as_ptr().cast() {
            return Class::Node(Kind::OrderedDict);
        }
        if ty == c.default_dict.as_ptr().cast() {
            return Class::Node(Kind::DefaultDict);
        }
        return Class::Leaf;
    }
    if ty == c.deque.as_ptr().cast() && face == Face::Optree {
        return Class::Node(Kind::Deque);
    }
    Class::Leaf
}

/// The class of any object, as the walk sees it (without an `is_leaf` predicate).
pub fn classify<'a>(
    obj: &Bound<'_, PyAny>,
    none_is_leaf: bool,
    registry: &'a Registry,
    namespace: &str,
    face: Face,
    jax: bool,
) -> PyResult<Class<'a>> {
    if obj.is_exact_instance_of::<PyTuple>() {
        Ok(Class::Node(Kind::Tuple))
    } else if obj.is_exact_instance_of::<PyList>() {
        Ok(Class::Node(Kind::List))
    } else if obj.is_exact_instance_of::<PyDict>() {
        Ok(Class::Node(Kind::Dict))
    } else if obj.is_none() {
        Ok(if none_is_leaf {
            Class::Leaf
        } else {
            Class::NoneNode
        })
    } else {
        classify_other(obj, registry, namespace, face, jax)
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
    /// Read JAX's registry for types oxtree does not register (`jax_registry`).
    jax: bool,
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
            jax: false,
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
        self.give_back_pending();
        walked?;
        Ok(self.finish())
    }

    /// Room for as many leaves and nodes as the last walk on this thread produced: a loop
    /// flattening trees of one shape then never grows (and copies) its vectors.
    fn presize(&mut self) {
        let (leaves, nodes) = SIZE_HINT.with(Cell::get);
        if NODES {
            self.nodes.reserve(nodes);
        }
        if LEAVES {
            self.leaves = crate::spare::take(crate::spare::Slot::Leaves, leaves);
        }
        self.pending = crate::spare::take(crate::spare::Slot::Pending, 0);
    }

    /// Keeps the pending stack's buffer for the next walk (what an error left is released).
    fn give_back_pending(&mut self) {
        crate::spare::give_back(
            crate::spare::Slot::Pending,
            std::mem::take(&mut self.pending),
        );
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
            let child = match &mut top.items {
                Items::Tuple(t) => {
                    if top.pos < top.arity {
                        // A tuple never changes: `pos` is below its length.
                        Some(crate::ffi::tuple_item(t, top.pos).invariant("a tuple item")?)
                    } else {
                        None
                    }
                }
                Items::List(l) => {
                    if top.pos < top.arity {
                        match crate::ffi::list_item(l, top.pos) {
                            Some(item) => Some(item),
                            None => return Err(self.mutated(stack)),
                        }
                    } else {
                        None
                    }
                }
                Items::Pending => {
                    if top.pos < top.arity {
                        Some(
                            self.pending
                                .pop()
                                .invariant("a pending frame's children wait")?,
                        )
                    } else {
                        None
                    }
                }
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

    /// Room for a container's children: one growth step instead of several for wide nodes.
    #[inline(always)]
    fn reserve(&mut self, n: usize) {
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
        self.visit_other(obj, stack)
    }

    fn visit_other(&mut self, obj: Bound<'py, PyAny>, stack: &mut Vec<Frame<'py>>) -> PyResult<()> {
        if self.registry.scalar_leaf(obj.get_type_ptr()) {
            self.leaf(obj);
            return Ok(());
        }
        let ty = obj.get_type_ptr().cast::<ffi::PyObject>();
        if self.leaf_types.iter().flatten().any(|t| t.as_ptr() == ty) {
            self.leaf(obj);
            return Ok(());
        }
        let class = match self.last_custom {
            Some((t, reg)) if t == obj.get_type_ptr() => Class::Custom(reg),
            _ => classify_other(&obj, self.registry, self.namespace, self.face, self.jax)?,
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
        let own_order =
            kind == Kind::OrderedDict || (self.insertion_ordered && self.face != Face::Jax);
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
            let insertion = if self.face == Face::Jax {
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
                sort_keys_in_place(&keys, &ins_keys, self.face == Face::Jax)?;
            }
            let insertion = insertion_positions(&keys, &ins_keys)?;
            if let Some(positions) = &insertion {
                permute(&mut values, |i| positions.get(i));
            }
            // JAX rebuilds dicts sorted: its treespecs keep no insertion order.
            let insertion = if self.face == Face::Jax {
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
                node.set_insertion(insertion.as_ref().map(|p| (0..p.len()).map(|i| p.get(i))));
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
        if let crate::registry::Rule::Dataclass { data, meta, .. } = &reg.rule {
            // The fields go straight onto the pending stack, last one deepest.
            let base = self.pending.len();
            super::custom::fields_into(py, data, &obj, &mut self.pending)?;
            self.pending[base..].reverse();
            let n = data.len();
            // Meta values go into the treedef, compared by `==` (hashable or not, as optree
            // and JAX accept them).
            let aux = super::custom::dataclass_aux(py, meta, &obj)?;
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
            super::custom::Children::Tuple(t) => Items::Tuple(t),
            super::custom::Children::List(l) => Items::List(l),
            super::custom::Children::Vec(v) => {
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
        fill(self.payloads.push_built(|| Node::bare(kind, arity, 0, 0)));
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
            self.nodes
                .push_built(|| Node::bare(frame.kind, frame.arity, num_leaves, num_nodes));
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
fn take_stack<'py>() -> Vec<Frame<'py>> {
    match SPARE_STACK.with(Cell::take) {
        Some(spare) => crate::spare::retype(spare),
        None => Vec::with_capacity(64),
    }
}

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

/// Up to this many keys, leaf positions are found by a linear scan rather than a hash map.
const SMALL_MAPPING: usize = 16;

/// Untracks a key list whose items are all of atomic types (str, int, float, bool, None):
/// it cannot be part of a reference cycle, so the collector need not visit it (CPython
/// does the same for tuples). Returns whether it did.
fn untrack_if_atomic(keys: &Bound<'_, PyList>) -> bool {
    let atomic = keys.iter().all(|k| {
        k.is_exact_instance_of::<pyo3::types::PyString>()
            || k.is_exact_instance_of::<pyo3::types::PyInt>()
            || k.is_exact_instance_of::<pyo3::types::PyFloat>()
            || k.is_exact_instance_of::<pyo3::types::PyBool>()
            || k.is_none()
    });
    if atomic {
        // What CPython does itself for containers of atomic objects. The list is never
        // mutated to hold anything else: it is private to the treedef.
        crate::ffi::untrack(keys);
    }
    atomic
}

/// Temporaries sized for the small dicts most trees are made of, off the heap.
type Small<T> = SmallVec<[T; SMALL_MAPPING]>;

/// A dict's keys as a new list, the same keys' addresses (kept theirs by that list), and
/// its values (owned), all in storage order, which for dict and defaultdict is insertion
/// order.
type DictParts<'py> = (Bound<'py, PyList>, Small<usize>, Vec<Bound<'py, PyAny>>);

/// The `DictParts` of `dict`.
fn dict_items<'py>(dict: &Bound<'py, PyDict>) -> PyResult<DictParts<'py>> {
    let n = dict.len();
    let mut addrs = Small::with_capacity(n);
    let mut values = Vec::with_capacity(n);
    let list = crate::ffi::dict_keys_values(dict, &mut addrs, &mut values)?;
    Ok((list, addrs, values))
}

/// How many sorted key lists each thread remembers, direct-mapped by their keys' addresses:
/// enough for trees of a few hundred distinct dicts (a 1,000-leaf tree of random dicts has
/// 151, which 64 slots had thrashed).
const KEY_LIST_SLOTS: usize = 1024;

/// A sorted key list built for a small str-keyed dict, with the keys in the insertion order it
/// was built from and the sort's permutation. A dict with the very same key objects in the
/// same order (the hundred `{'weight': ..., 'bias': ...}` dicts of a model) shares the list
/// and the permutation: no sort, no allocation. The list owns the keys, so no other object
/// can take their addresses while the entry lives. The lists are private to treespecs, which
/// never hand them out (node data and pickles copy them), so sharing one is unobservable.
struct CachedKeys {
    n: usize,
    /// The keys' addresses (the list holds the keys, so no other object takes them).
    keys: [usize; SMALL_MAPPING],
    order: [u8; SMALL_MAPPING],
    list: Py<PyList>,
}

thread_local! {
    static KEY_LISTS: RefCell<Vec<Option<CachedKeys>>> = const { RefCell::new(Vec::new()) };
}

fn key_list_slot(keys: &[usize]) -> usize {
    let h = keys.iter().fold(0u64, |h, &k| {
        (h ^ ((k as u64) >> 4)).wrapping_mul(0x9E37_79B9_7F4A_7C15)
    });
    (h >> (64 - KEY_LIST_SLOTS.trailing_zeros())) as usize
}

/// A dict's keys in leaf order and its insertion positions (if they differ).
type SortedKeys<'py> = (Bound<'py, PyList>, Option<Positions>);

/// The leaf position of each key of a dict, in insertion order. Small str-keyed dicts keep
/// them as 4-bit fields of one word: a vector of words was copied through `memcpy` at each
/// return (a fifth of a gpt2-like flatten under perf), and a byte array, written byte by byte
/// and read back as words, stalled on store forwarding.
pub enum Positions {
    Nibbles { bits: u64, len: usize },
    Words(Box<[usize]>),
}

impl Positions {
    pub fn len(&self) -> usize {
        match self {
            Positions::Nibbles { len, .. } => *len,
            Positions::Words(w) => w.len(),
        }
    }

    pub fn get(&self, i: usize) -> usize {
        match self {
            Positions::Nibbles { bits, .. } => ((bits >> (4 * i)) & 0xF) as usize,
            Positions::Words(w) => w[i],
        }
    }
}

/// A small dict whose keys are all exact `str`: keys sorted by an insertion sort of
/// indices (Unicode code-point order, as `list.sort` gives for str), the key list built
/// once in that order, the values pushed onto `pending` in its reverse (the walk pops them in
/// leaf order), and the insertion positions read off the sort; `None` (having built and
/// pushed nothing) for any other dict. Measured on a gpt2-like dict
/// (220 small dicts per flatten): half the instructions of sorting a key list with
/// `list.sort`, finding positions by identity and permuting the values.
fn small_str_items<'py>(
    dict: &Bound<'py, PyDict>,
    pending: &mut Vec<Bound<'py, PyAny>>,
) -> Option<SortedKeys<'py>> {
    let py = dict.py();
    let n = dict.len();
    if n > SMALL_MAPPING {
        return None;
    }
    // The keys' addresses in a fixed array (`n` is known to fit); the values owned at once,
    // pushed onto `pending` in insertion order and put in place below. The keys are only
    // compared by address until a sort needs them.
    let mut keys = [0usize; SMALL_MAPPING];
    let base = pending.len();
    if crate::ffi::str_keyed_items(dict, &mut keys, pending)? != n {
        pending.truncate(base);
        return None;
    }
    let slot = key_list_slot(&keys[..n]);
    let cached = KEY_LISTS.with(|cache| {
        cache
            .borrow()
            .get(slot)
            .and_then(Option::as_ref)
            // Compared one by one: a slice compare of addresses calls `memcmp`.
            .filter(|e| e.n == n && e.keys.iter().zip(&keys[..n]).all(|(a, b)| a == b))
            .map(|e| (e.list.clone_ref(py).into_bound(py), e.order))
    });
    let Some((list, order)) = cached.or_else(|| sorted_key_list(dict, &keys, n, slot)) else {
        pending.truncate(base);
        return None;
    };
    // The walk pops the values in leaf order: they lie in its reverse, the value of leaf `j`
    // (inserted `order[j]`-th) at `n - 1 - j`.
    let order = &order[..n];
    if !reorder(&mut pending[base..], |k| usize::from(order[n - 1 - k])) {
        pending.truncate(base);
        return None;
    }
    if order.iter().enumerate().all(|(j, &i)| j == usize::from(i)) {
        return Some((list, None));
    }
    // The leaf position of the key inserted `i`-th is nibble `i` of `bits`.
    let bits = order.iter().enumerate().fold(0u64, |bits, (j, &i)| {
        bits | ((j as u64) << (4 * u32::from(i)))
    });
    Some((list, Some(Positions::Nibbles { bits, len: n })))
}

/// The sorted key list of a small str-keyed dict whose keys (in insertion order) are at the
/// addresses `keys[..n]`, and the sort's permutation; remembered in `slot` of this thread's
/// cache. None when the dict no longer holds those keys.
#[cold]
fn sorted_key_list<'py>(
    dict: &Bound<'py, PyDict>,
    keys: &[usize; SMALL_MAPPING],
    n: usize,
    slot: usize,
) -> Option<(Bound<'py, PyList>, [u8; SMALL_MAPPING])> {
    let py = dict.py();
    // Owned references, read again from the dict (no Python code has run since the values
    // were read): allocating the key list below may start a collection, whose finalizers run
    // Python code that could change the dict and free what it held.
    let key_refs: Small<Bound<'py, PyAny>> = crate::ffi::dict_items(dict).map(|(k, _)| k).collect();
    if key_refs.len() != n
        || key_refs
            .iter()
            .zip(keys)
            .any(|(k, &a)| k.as_ptr() as usize != a)
    {
        return None;
    }
    let mut order = [0u8; SMALL_MAPPING];
    for (i, o) in order.iter_mut().enumerate() {
        *o = i as u8;
    }
    let sorted = &mut order[..n];
    // Both are exact str (checked when read): comparing them cannot fail or run code.
    let greater =
        |a: u8, b: u8| crate::ffi::str_greater(&key_refs[a as usize], &key_refs[b as usize]);
    for i in 1..n {
        let mut j = i;
        while j > 0 && greater(sorted[j - 1], sorted[j]) {
            sorted.swap(j - 1, j);
            j -= 1;
        }
    }
    let list =
        crate::ffi::list_from(py, sorted.iter().map(|&i| key_refs[i as usize].clone())).ok()?;
    // A list of str cannot be part of a reference cycle (see `untrack_if_atomic`).
    crate::ffi::untrack(&list);
    if n > 0 {
        let entry = CachedKeys {
            n,
            keys: *keys,
            order,
            list: list.clone().unbind(),
        };
        // Dropping an evicted entry only releases a list of str: no Python code runs.
        KEY_LISTS.with(|cache| {
            let mut cache = cache.borrow_mut();
            if cache.is_empty() {
                cache.resize_with(KEY_LIST_SLOTS, || None);
            }
            cache[slot] = Some(entry);
        });
    }
    Some((list, order))
}

/// For each key in insertion order, its position in leaf (sorted) order; `None` when the two
/// orders agree. Both hold the same key objects, so positions are found by identity.
fn insertion_positions(
    sorted: &Bound<'_, PyList>,
    insertion: &[usize],
) -> PyResult<Option<Positions>> {
    let item = |i: usize| crate::ffi::list_item_addr(sorted, i).unwrap_or(0);
    if (0..insertion.len()).all(|i| item(i) == insertion[i]) {
        return Ok(None);
    }
    let positions: Option<Box<[usize]>> = if insertion.len() <= SMALL_MAPPING {
        insertion
            .iter()
            .map(|p| (0..insertion.len()).find(|&j| item(j) == *p))
            .collect()
    } else {
        let mut at: types::PtrMap<usize> = types::PtrMap::default();
        at.reserve(insertion.len());
        for j in 0..insertion.len() {
            at.insert(item(j), j);
        }
        insertion.iter().map(|p| at.get(p).copied()).collect()
    };
    // Sorting only permutes the keys, so every key is found.
    Ok(Some(Positions::Words(positions.invariant(
        "the sorted keys are the same objects as the dict's keys",
    )?)))
}

/// The most values `reorder` moves.
pub const REORDER_MAX: usize = 32;

/// Reorders `values` so that `values[k]` is the old `values[from(k)]`, following the
/// permutation's cycles with swaps (no buffer, no allocation). `from` must be a permutation
/// of `0..values.len()` (at most `REORDER_MAX`): otherwise nothing moves and the result is
/// false.
#[inline]
pub fn reorder<T>(values: &mut [T], from: impl Fn(usize) -> usize) -> bool {
    let n = values.len();
    if n > REORDER_MAX {
        return false;
    }
    // Each index asked once; checked to be a permutation before anything moves.
    let mut at = [0u8; REORDER_MAX];
    let mut seen = 0u32;
    for (k, slot) in at.iter_mut().enumerate().take(n) {
        let i = from(k);
        if i >= n || seen & (1 << i) != 0 {
            return false;
        }
        seen |= 1 << i;
        *slot = i as u8;
    }
    // Cycle by cycle: `values[k]` takes `values[at[k]]`, which takes `values[at[at[k]]]`, ...
    let mut done = 0u32;
    for start in 0..n {
        if done & (1 << start) != 0 {
            continue;
        }
        let mut k = start;
        loop {
            done |= 1 << k;
            let next = usize::from(at[k]);
            if next == start {
                break;
            }
            values.swap(k, next);
            k = next;
        }
    }
    true
}

/// Moves `values[i]` to `values[positions[i]]` for every `i`, following the permutation's
/// cycles in place.
fn permute<T>(values: &mut [T], positions: impl Fn(usize) -> usize) {
    let mut done: Small<bool> = smallvec::smallvec![false; values.len()];
    for start in 0..values.len() {
        if done[start] {
            continue;
        }
        // Carry the cycle start's value along: swap it into each target in turn.
        let mut i = start;
        loop {
            done[i] = true;
            let target = positions(i);
            if target == start {
                break;
            }
            values.swap(start, target);
            i = target;
        }
    }
}

/// Sorts `keys` in place: by `<`, else (a TypeError, optree's rule) by the qualified name of
/// the key's type then the key, else insertion order (`original`); JAX's rule (`strict`)
/// raises ValueError instead. Other exceptions propagate.
fn sort_keys_in_place(keys: &Bound<'_, PyList>, original: &[usize], strict: bool) -> PyResult<()> {
    let py = keys.py();
    let err = match keys.sort() {
        Ok(()) => return Ok(()),
        Err(e) => e,
    };
    // A failed sort leaves its list permuted: put the insertion order back. Every key is
    // alive now (the list holds each, whatever order it left them in), but writing one slot
    // drops the list's reference to the key it displaces, which may be the last one (a key's
    // `__lt__` may have emptied the dict): take a reference to every key before writing any,
    // found by its address.
    let mut held: types::PtrMap<Bound<'_, PyAny>> = types::PtrMap::default();
    for key in keys.iter() {
        held.insert(key.as_ptr() as usize, key);
    }
    for (i, addr) in original.iter().enumerate() {
        let key = held
            .get(addr)
            .invariant("a key of the sorted list that the dict did not hold")?;
        keys.set_item(i, key)?;
    }
    if strict {
        let out = pyo3::exceptions::PyValueError::new_err(
            "Comparator raised exception while sorting pytree dictionary keys.",
        );
        out.set_cause(py, Some(err));
        return Err(out);
    }
    if !err.is_instance_of::<PyTypeError>(py) {
        return Err(err);
    }
    let sorted = sort_keys(keys, false)?;
    for (i, key) in sorted.iter().enumerate() {
        keys.set_item(i, key)?;
    }
    Ok(())
}

/// The keys in sorted order, as a new list. Keys that cannot be compared with each other
/// (a TypeError) are ordered by their type's qualified name, then by value; if even that
/// fails, they keep insertion order. Any other exception from a comparison propagates.
pub fn sort_keys<'py>(keys: &Bound<'py, PyList>, strict: bool) -> PyResult<Bound<'py, PyList>> {
    let py = keys.py();
    let sorted = keys.get_slice(0, keys.len());
    match sorted.sort() {
        Ok(()) => return Ok(sorted),
        Err(e) if strict => {
            // JAX's rule: keys that do not sort are an error.
            let err = pyo3::exceptions::PyValueError::new_err(
                "Comparator raised exception while sorting pytree dictionary keys.",
            );
            err.set_cause(py, Some(e));
            return Err(err);
        }
        Err(e) if e.is_instance_of::<PyTypeError>(py) => {}
        Err(e) => return Err(e),
    }
    // A failed sort leaves its list partly permuted: start again from the original order.
    let mut pairs = Vec::with_capacity(keys.len());
    for key in keys.iter() {
        let name = types::qualified_name(&key.get_type())?;
        pairs.push(PyTuple::new(py, [name.into_pyobject(py)?.into_any(), key])?);
    }
    let pairs = PyList::new(py, pairs)?;
    match pairs.sort() {
        Ok(()) => {
            let out: Vec<Bound<'py, PyAny>> = pairs
                .iter()
                .map(|p| p.cast_into::<PyTuple>()?.get_item(1))
                .collect::<PyResult<_>>()?;
            PyList::new(py, out)
        }
        Err(e) if e.is_instance_of::<PyTypeError>(py) => Ok(keys.get_slice(0, keys.len())),
        Err(e) => Err(e),
    }
}

/// The options of one walk.
pub struct Options<'a, 'py> {
    pub is_leaf: Option<&'a Bound<'py, PyAny>>,
    /// `is_leaf` takes `(path, obj)` (JAX's `is_leaf_takes_path`).
    pub is_leaf_takes_path: bool,
    pub none_is_leaf: bool,
    pub namespace: &'a str,
    /// Ask custom nodes for their keys while walking.
    pub with_keys: bool,
    pub face: Face,
    /// Read JAX's registry too (`jax_registry`), as the JAX face always does: `oxtree.jax`,
    /// and the main face once `use_jax_registry` turns it on.
    pub jax_registry: bool,
}

impl<'a, 'py> Options<'a, 'py> {
    pub fn new(
        is_leaf: Option<&'a Bound<'py, PyAny>>,
        none_is_leaf: bool,
        namespace: &'a str,
    ) -> Self {
        Options {
            is_leaf,
            is_leaf_takes_path: false,
            none_is_leaf,
            namespace,
            with_keys: false,
            face: Face::Optree,
            jax_registry: crate::jax_registry::main_face_reads(),
        }
    }

    /// These options with JAX's registry read or not as a call's `jax_registry=` says (None:
    /// as `use_jax_registry` set it).
    pub fn with_jax_registry(self, jax_registry: Option<bool>) -> Self {
        Options {
            jax_registry: jax_registry.unwrap_or(self.jax_registry),
            ..self
        }
    }

    /// Whether the walk reads JAX's registry for types oxtree does not register.
    #[inline]
    pub fn reads_jax(&self) -> bool {
        self.jax_registry || self.face == Face::Jax
    }

    /// [`Options::new`] for the face a `jax=` flag names.
    pub fn on_face(
        is_leaf: Option<&'a Bound<'py, PyAny>>,
        none_is_leaf: bool,
        namespace: &'a str,
        jax: bool,
    ) -> Self {
        Options {
            face: Face::of(jax),
            ..Options::new(is_leaf, none_is_leaf, namespace)
        }
    }
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
    f.jax = opts.reads_jax();
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
    f.jax = opts.reads_jax();
    f.with_keys = opts.with_keys;
    f.presize();
    let mut stack = take_stack();
    let walked = roots.iter().try_for_each(|root| f.walk(root, &mut stack));
    give_back_stack(stack);
    f.give_back_pending();
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
        let mut nodes = Vec::with_capacity(n + 1);
        nodes.resize_with(n, || Node::LEAF);
        nodes.push(Node::bare(kind, n, n, n + 1));
        Flat {
            leaves: Vec::new(),
            nodes: nodes.into(),
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
    // `collections` is imported when the module loads (never here: that would run Python).
    let deque = types::collections_if_ready(tree.py())?.deque.as_ptr();
    // JAX's registry: only types known not to be JAX nodes (JAX's size read once).
    let jax_size = opts
        .reads_jax()
        .then(|| crate::jax_registry::size(tree.py()));
    // The last type found to be no JAX node: items of one type come in runs.
    let mut not_jax: *mut ffi::PyTypeObject = std::ptr::null_mut();
    // Nothing below runs Python code, so the list cannot change while it is looked at.
    let plain = |item: crate::ffi::ItemType| {
        if registry.scalar_leaf(item.ty) {
            return true;
        }
        if item.is_none {
            return opts.none_is_leaf;
        }
        item.flags
            & (ffi::Py_TPFLAGS_TUPLE_SUBCLASS
                | ffi::Py_TPFLAGS_LIST_SUBCLASS
                | ffi::Py_TPFLAGS_DICT_SUBCLASS)
            == 0
            && item.ty.cast() != deque
            && (registry.is_empty() || registry.lookup(item.ty, opts.namespace).is_none())
            && jax_size.is_none_or(|size| {
                let known = item.ty == not_jax
                    || crate::jax_registry::known_leaf(item.ty, item.flags, item.tag(), size);
                not_jax = if known { item.ty } else { std::ptr::null_mut() };
                known
            })
    };
    crate::ffi::all_item_types(tree, plain).then_some((kind, n))
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

#[cfg(test)]
mod tests {
    use super::permute;

    #[test]
    fn permute_moves_each_value_to_its_position() {
        let cases: [&[usize]; 5] = [
            &[0, 1, 2],
            &[1, 0],
            &[2, 0, 1],
            &[1, 2, 0],
            &[3, 0, 4, 1, 2],
        ];
        for positions in cases {
            let mut values: Vec<usize> = (0..positions.len()).collect();
            permute(&mut values, |i| positions[i]);
            for (i, &p) in positions.iter().enumerate() {
                assert_eq!(values[p], i, "positions {positions:?}");
            }
        }
    }

    #[test]
    fn permute_handles_large_permutations() {
        let n = 100;
        let positions: Vec<usize> = (0..n).map(|i| (i * 37 + 11) % n).collect();
        let mut values: Vec<usize> = (0..n).collect();
        permute(&mut values, |i| positions[i]);
        for (i, &p) in positions.iter().enumerate() {
            assert_eq!(values[p], i);
        }
    }
}
