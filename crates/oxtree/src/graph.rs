//! Graphs: flattening objects with shared and cyclic references, and rebuilding them with
//! the same identities.
//!
//! A graph walk is the tree walk with a memo of the containers it has opened: a container
//! met again (through any root, or as its own descendant) becomes a *reference*, a leaf of
//! the walk's skeleton that takes no leaf value. A `GraphDef` is that skeleton (an ordinary
//! treespec) and, for each reference, the skeleton node it points to.
//!
//! Rebuilding must create each shared object once. Without references it is the tree
//! engine's unflatten. With them, mutable containers (list, dict, OrderedDict, defaultdict,
//! deque) and registered classes that rebuild in two steps (`oxtree.Module`) that are
//! referred to are created empty first, so a reference can be handed out before they are
//! filled; nodes built from their children (tuples, namedtuples, other registered classes)
//! are built once their children exist, in post-order, and those held up by a
//! reference to an ancestor not yet built are retried until none is left. Python cannot
//! close a cycle through immutable containers alone, so this always finishes for objects
//! made of the builtin containers; a cycle through registered classes only is reported.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList, PyTuple};
use pyo3::PyTraverseError;

use crate::errors::{type_name, StateOf, TreeError};
use crate::face::options::Options;
use crate::face::Face;
use crate::invariant::Invariant;
use crate::kind::Kind;
use crate::registry;
use crate::treespec::flatten;
use crate::treespec::keys::{self, KeyStyle};
use crate::treespec::{Node, PyTreeSpec};
use crate::types;

/// The module's `_rebuild_graphdef`, kept when `oxtree._core` is initialised (`lib.rs`), for
/// `__reduce__` (see `treespec::pickle::REBUILD`).
pub static REBUILD: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// The structure of a graph: what `graph_flatten` returns next to the leaves.
///
/// >>> x = [1, 2]
/// >>> leaves, gd = graph_flatten({'a': x, 'b': x})
/// >>> gd, gd.num_leaves, gd.num_refs
/// (GraphDef({'a': [*, *], 'b': <ref obj['a']>}), 2, 1)
/// >>> out = gd.unflatten([10, 20])
/// >>> out, out['a'] is out['b']
/// ({'a': [10, 20], 'b': [10, 20]}, True)
#[pyclass(frozen, module = "oxtree", name = "GraphDef")]
pub struct GraphDef {
    /// The walk's structure, in which every reference is a leaf.
    skeleton: Py<PyTreeSpec>,
    num_roots: usize,
    /// (skeleton leaf index, skeleton node position of the container referred to), in
    /// leaf order.
    refs: Box<[(u32, u32)]>,
    hash: OnceLock<isize>,
}

impl GraphDef {
    pub(crate) fn spec<'a>(&'a self, py: Python<'a>) -> &'a PyTreeSpec {
        let _ = py;
        self.skeleton.get()
    }

    /// The skeleton leaf index of each reference, with its target.
    pub(crate) fn ref_at(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.refs.iter().map(|&(l, t)| (l as usize, t as usize))
    }

    fn num_leaves(&self, py: Python<'_>) -> usize {
        self.spec(py).num_leaves() - self.refs.len()
    }

    /// The path of skeleton node `idx` in keystr form after `obj`.
    fn path_of(&self, py: Python<'_>, idx: usize) -> String {
        self.spec(py).path_to(py, idx, "obj")
    }

    /// Skeleton node position of each skeleton leaf, in leaf order.
    fn leaf_positions(&self, py: Python<'_>) -> Vec<usize> {
        let spec = self.spec(py);
        spec.nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.kind == Kind::Leaf)
            .map(|(i, _)| i)
            .collect()
    }
}

/// Whether a node is created empty and filled afterwards: the builtin mutable containers,
/// and registered classes that rebuild in two steps (see [`two_step`]).
fn is_mutable(py: Python<'_>, node: &Node) -> bool {
    match node.kind {
        Kind::List | Kind::Dict | Kind::OrderedDict | Kind::DefaultDict | Kind::Deque => true,
        Kind::Custom => two_step(py, node).is_some(),
        _ => false,
    }
}

/// The class of a custom node that rebuilds in two steps, as `oxtree.Module` does: its
/// `_oxtree_graph_empty_(aux)` makes the object without its children, and
/// `_oxtree_graph_fill_(obj, aux, children)` gives them to it later, so a reference to the
/// object can be handed out before its children exist (a child that holds its parent).
/// Asked only while rebuilding a graph with references, never on the tree paths.
fn two_step<'py>(py: Python<'py>, node: &Node) -> Option<Bound<'py, PyAny>> {
    let reg = node.custom()?;
    let ty = reg.ty.bind(py);
    match ty.hasattr(pyo3::intern!(py, "_oxtree_graph_fill_")) {
        Ok(true) => Some(ty.clone().into_any()),
        _ => None,
    }
}

/// An empty container of a mutable node's kind, with its options (factory, maxlen).
fn empty<'py>(py: Python<'py>, node: &Node) -> PyResult<Bound<'py, PyAny>> {
    let c = types::collections(py);
    let data = || node.kept_data(py);
    Ok(match node.kind {
        Kind::List => PyList::empty(py).into_any(),
        Kind::Dict => PyDict::new(py).into_any(),
        Kind::OrderedDict => c.ordered_dict.bind(py).call0()?,
        Kind::DefaultDict => c.default_dict.bind(py).call1((data(),))?,
        Kind::Deque => c.deque.bind(py).call1((PyTuple::empty(py), data()))?,
        Kind::Custom => match two_step(py, node) {
            Some(ty) => ty.call_method1(pyo3::intern!(py, "_oxtree_graph_empty_"), (data(),))?,
            None => return Err(crate::internal!("only two-step classes are created empty")),
        },
        _ => return Err(crate::internal!("only mutable kinds are created empty")),
    })
}

/// Fills an empty mutable container with its children.
fn fill<'py>(
    py: Python<'py>,
    target: &Bound<'py, PyAny>,
    node: &Node,
    children: Vec<Bound<'py, PyAny>>,
) -> PyResult<()> {
    match node.kind {
        Kind::List => {
            let list = target.cast::<PyList>()?;
            for child in children {
                list.append(child)?;
            }
            Ok(())
        }
        Kind::Deque => {
            target.call_method1("extend", (crate::containers::unflatten_list(py, children),))?;
            Ok(())
        }
        Kind::Custom => {
            let ty = two_step(py, node).invariant("only two-step classes are filled")?;
            let args = (target, node.kept_data(py), PyTuple::new(py, children)?);
            ty.call_method1(pyo3::intern!(py, "_oxtree_graph_fill_"), args)?;
            Ok(())
        }
        _ => crate::treespec::unflatten::fill_mapping(py, target, node, &children, Face::Optree),
    }
}

/// How many times a rebuild with references has tried to build or fill a node, over the
/// process's life: the tests read it (`_graph_rebuild_steps`) to check that nodes waiting
/// on an ancestor are retried a bounded number of times, not once per pass over all of them.
static REBUILD_STEPS: AtomicU64 = AtomicU64::new(0);

/// The number of rebuild steps taken so far (see `REBUILD_STEPS`); a private debugging aid.
#[pyfunction]
pub fn _graph_rebuild_steps() -> u64 {
    REBUILD_STEPS.load(Ordering::Relaxed)
}

/// A child of a node being rebuilt: a leaf value, or the object of another node.
enum Child<'py> {
    Leaf(Bound<'py, PyAny>),
    At(usize),
}

struct Rebuild<'a, 'py> {
    py: Python<'py>,
    spec: &'a PyTreeSpec,
    /// Every node's children, one after another; `start[i]` is node i's first.
    arena: Vec<Child<'py>>,
    start: Vec<usize>,
    /// Each node's object, once it exists (a mutable one may exist before it is filled).
    objs: Vec<Option<Bound<'py, PyAny>>>,
    done: Vec<bool>,
}

impl<'py> Rebuild<'_, 'py> {
    fn children(&self, i: usize) -> &[Child<'py>] {
        let s = self.start[i];
        &self.arena[s..s + self.spec.nodes[i].arity]
    }

    fn ready(&self, i: usize) -> bool {
        self.children(i).iter().all(|c| match c {
            Child::Leaf(_) => true,
            Child::At(p) => self.objs[*p].is_some(),
        })
    }

    fn values(&self, i: usize) -> PyResult<Vec<Bound<'py, PyAny>>> {
        self.children(i)
            .iter()
            .map(|c| match c {
                Child::Leaf(v) => Ok(v.clone()),
                Child::At(p) => self.objs[*p].clone().invariant("checked by ready()"),
            })
            .collect()
    }

    /// Builds or fills node `i` if its children exist; a mutable node is at least created.
    fn complete(&mut self, i: usize) -> PyResult<bool> {
        REBUILD_STEPS.fetch_add(1, Ordering::Relaxed);
        let node = &self.spec.nodes[i];
        let ready = self.ready(i);
        let existing = self.objs[i].clone();
        match (existing, ready) {
            // Created empty earlier (referred to, or held up): fill it now.
            (Some(obj), true) => fill(self.py, &obj, node, self.values(i)?)?,
            (None, true) => {
                let values = self.values(i)?.into_iter();
                self.objs[i] = Some(crate::treespec::unflatten::make_node(
                    self.py,
                    Face::Optree,
                    node,
                    values,
                )?);
            }
            // Held up: a mutable container exists from now on, to be filled later.
            (None, false) if is_mutable(self.py, node) => {
                self.objs[i] = Some(empty(self.py, node)?)
            }
            (_, false) => {}
        }
        self.done[i] = ready;
        Ok(ready)
    }
}

/// Rebuilds a skeleton whose leaves include references, each shared object once.
fn rebuild_shared<'py>(
    py: Python<'py>,
    gd: &GraphDef,
    leaves: Vec<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let spec = gd.spec(py);
    let n = spec.nodes.len();
    let mut r = Rebuild {
        py,
        spec,
        arena: Vec::with_capacity(n),
        start: vec![0; n],
        objs: vec![None; n],
        done: vec![false; n],
    };
    // Mutable containers referred to exist from the start, so a reference to one (from a
    // descendant, in a cycle) can be handed out before it is filled.
    for (_, target) in gd.ref_at() {
        let node = &spec.nodes[target];
        if r.objs[target].is_none() && is_mutable(py, node) {
            r.objs[target] = Some(empty(py, node)?);
        }
    }
    let mut leaves = leaves.into_iter();
    let mut refs = gd.ref_at().peekable();
    let mut leaf_idx = 0usize;
    let mut stack: Vec<Child<'py>> = Vec::new();
    let mut pending: Vec<usize> = Vec::new();
    for (i, node) in spec.nodes.iter().enumerate() {
        match node.kind {
            Kind::Leaf => {
                let child = match refs.peek() {
                    Some(&(l, target)) if l == leaf_idx => {
                        refs.next();
                        Child::At(target)
                    }
                    _ => Child::Leaf(leaves.next().invariant("the leaf count was checked")?),
                };
                leaf_idx += 1;
                stack.push(child);
            }
            Kind::None => {
                r.objs[i] = Some(py.None().into_bound(py));
                r.done[i] = true;
                stack.push(Child::At(i));
            }
            _ => {
                r.start[i] = r.arena.len();
                let from = stack.len() - node.arity;
                r.arena.extend(stack.drain(from..));
                if !r.complete(i)? {
                    pending.push(i);
                }
                stack.push(Child::At(i));
            }
        }
    }
    // Nodes held up by a reference to an ancestor not yet built: each waits for the nodes it
    // lacks, and is completed when the last of them is built (linear, however long the
    // chains of waiting nodes).
    if !pending.is_empty() {
        let mut waiting = vec![0u32; n];
        let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); n];
        let mut ready = Vec::new();
        for &i in &pending {
            for c in r.children(i) {
                if let Child::At(p) = c {
                    if r.objs[*p].is_none() {
                        waiting[i] += 1;
                        dependents[*p].push(i);
                    }
                }
            }
            if waiting[i] == 0 {
                ready.push(i);
            }
        }
        while let Some(i) = ready.pop() {
            let was_built = r.objs[i].is_some();
            let completed = r.complete(i)?;
            debug_assert!(completed, "a node with nothing to wait for completes");
            if !was_built {
                for d in std::mem::take(&mut dependents[i]) {
                    waiting[d] -= 1;
                    if waiting[d] == 0 {
                        ready.push(d);
                    }
                }
            }
        }
        if let Some(&i) = pending.iter().find(|&&i| !r.done[i]) {
            return Err(TreeError::ImmutableCycle {
                node_type: node_type_name(py, &spec.nodes[i]),
                path: gd.path_of(py, i),
            }
            .into());
        }
    }
    r.objs[n - 1].take().invariant("the root was built")
}

fn node_type_name(py: Python<'_>, node: &Node) -> String {
    match node.py_type(py) {
        Some(t) => t
            .getattr("__name__")
            .map(|n| n.to_string())
            .unwrap_or_else(|_| "node".into()),
        None => "node".into(),
    }
}

/// `(leaves, graphdef)` of one or more roots, flattened as one graph.
///
/// Every container that occurs more than once, through any root, is flattened once and
/// referred to afterwards; cycles are allowed. Leaves come in the tree engine's order and
/// are never turned into references: a leaf object met twice is in the leaves twice.
///
/// `jax_registry` reads JAX's registry too (None: as `use_jax_registry` set it), so a type
/// JAX registers (an equinox module, a flax struct) is a node; `with_keys` asks registered
/// nodes for their keys (a `flatten_with_keys`), so `GraphDef.paths()` names their children
/// as JAX does rather than by position.
///
/// >>> shared = [1, 2]
/// >>> leaves, gd = graph_flatten({'a': shared, 'b': shared})
/// >>> leaves, gd
/// ([1, 2], GraphDef({'a': [*, *], 'b': <ref obj['a']>}))
/// >>> out = graph_unflatten(gd, leaves)
/// >>> out['a'] is out['b']
/// True
#[pyfunction]
#[pyo3(signature = (*roots, is_leaf = None, none_is_leaf = false, namespace = "", jax_registry = None, with_keys = false))]
pub fn graph_flatten<'py>(
    py: Python<'py>,
    roots: &Bound<'py, PyTuple>,
    is_leaf: Option<&Bound<'py, PyAny>>,
    none_is_leaf: bool,
    namespace: &str,
    jax_registry: Option<bool>,
    with_keys: bool,
) -> PyResult<(Bound<'py, PyList>, Bound<'py, GraphDef>)> {
    crate::face::options::check_is_leaf(is_leaf)?;
    let opts = Options {
        with_keys,
        ..Options::new(is_leaf, none_is_leaf, namespace).with_jax_registry(jax_registry)
    };
    let roots: Vec<Bound<'py, PyAny>> = roots.iter().collect();
    let (leaves, gd) = flatten_roots(py, &roots, &opts)?;
    Ok((crate::containers::list_from_vec(py, leaves), gd))
}

/// The leaves and graphdef of `roots`, flattened as one graph (`graph_flatten`'s work).
pub(crate) fn flatten_roots<'py>(
    py: Python<'py>,
    roots: &[Bound<'py, PyAny>],
    opts: &Options<'_, 'py>,
) -> PyResult<(Vec<Bound<'py, PyAny>>, Bound<'py, GraphDef>)> {
    let reg = registry::snapshot();
    let mut g = flatten::flatten_graph(py, roots, opts, &reg)?;
    let positions = &g.memo.positions;
    let refs: Box<[(u32, u32)]> = g
        .memo
        .refs
        .iter()
        .map(|&(leaf, ordinal)| (leaf, positions[ordinal as usize]))
        .collect();
    let acyclic = g.flat.acyclic;
    let skeleton = crate::treespec::flatten::flat_spec(py, &mut g.flat, opts)?;
    let gd = GraphDef {
        skeleton: skeleton.unbind(),
        num_roots: roots.len(),
        refs,
        hash: OnceLock::new(),
    };
    let gd = crate::treespec::flatten::untracked_if(Bound::new(py, gd)?, acyclic);
    Ok((g.flat.leaves, gd))
}

/// Rebuilds what `graph_flatten` flattened, every shared object built once and every
/// reference wired to it, cycles included. Returns the root, or a tuple of the roots when
/// the graph was made from several (or none).
///
/// >>> x = [1, 2]
/// >>> x.append(x)
/// >>> leaves, gd = graph_flatten(x)
/// >>> y = graph_unflatten(gd, [10, 20])
/// >>> y[2] is y, y[:2]
/// (True, [10, 20])
#[pyfunction]
pub fn graph_unflatten<'py>(
    graphdef: &Bound<'py, PyAny>,
    leaves: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = graphdef.py();
    let gd = graphdef
        .cast::<GraphDef>()
        .map_err(|_| TreeError::ExpectsArgument {
            function: "graph_unflatten",
            expected: "a GraphDef as its first argument",
            got: type_name(graphdef),
        })?;
    let gd = gd.get();
    let (_, leaves) = crate::treespec::unflatten::collect_leaves(leaves)?;
    let expected = gd.num_leaves(py);
    if leaves.len() != expected {
        return Err(TreeError::LeafCount {
            face: crate::face::Face::Optree,
            what: "GraphDef",
            expected,
            got: leaves.len(),
        }
        .into());
    }
    if gd.refs.is_empty() {
        crate::treespec::unflatten::build(py, gd.spec(py), leaves)
    } else {
        rebuild_shared(py, gd, leaves)
    }
}

/// Whether two graphdefs are equal (`==`).
pub(crate) fn same_graphdef(py: Python<'_>, a: &GraphDef, b: &GraphDef) -> PyResult<bool> {
    Ok(a.num_roots == b.num_roots
        && a.refs == b.refs
        && a.skeleton.bind(py).eq(b.skeleton.bind(py))?)
}

fn repr(gd: &GraphDef, py: Python<'_>) -> PyResult<String> {
    let spec = gd.spec(py);
    let leaf_pos = gd.leaf_positions(py);
    let labels: std::collections::HashMap<usize, String> = gd
        .ref_at()
        .map(|(leaf, target)| (leaf_pos[leaf], format!("<ref {}>", gd.path_of(py, target))))
        .collect();
    let mut body = crate::treespec::repr::body_labelled(spec, py, &|i| labels.get(&i).cloned())?;
    if gd.num_roots != 1 {
        // The skeleton's root tuple stands for the roots: print them as arguments.
        body = format!("roots={body}");
    }
    Ok(format!(
        "GraphDef({body}{})",
        crate::treespec::repr::options(spec)
    ))
}

#[pymethods]
impl GraphDef {
    /// The number of leaves (references excluded).
    #[getter(num_leaves)]
    fn py_num_leaves(&self, py: Python<'_>) -> usize {
        self.num_leaves(py)
    }

    /// The number of distinct nodes (leaves, None and containers; references excluded).
    #[getter]
    fn num_nodes(&self, py: Python<'_>) -> usize {
        self.spec(py).nodes.len() - self.refs.len() - usize::from(self.num_roots != 1)
    }

    /// The number of roots the graph was flattened from.
    #[getter]
    fn num_roots(&self) -> usize {
        self.num_roots
    }

    /// The number of references (containers met again).
    #[getter]
    fn num_refs(&self) -> usize {
        self.refs.len()
    }

    /// The structure as a treespec in which every reference is a leaf; with several roots,
    /// its root is a tuple of them.
    #[getter]
    fn treespec(&self, py: Python<'_>) -> Py<PyTreeSpec> {
        self.skeleton.clone_ref(py)
    }

    /// For each reference, `(skeleton leaf index, path of the container it refers to)`,
    /// the path as a tuple of JAX-style keys.
    fn references<'py>(&self, py: Python<'py>) -> PyResult<Vec<(usize, Bound<'py, PyTuple>)>> {
        let spec = self.spec(py);
        self.ref_at()
            .map(|(leaf, target)| Ok((leaf, node_path(py, spec, target)?)))
            .collect()
    }

    /// The key path of every leaf (references excluded), as tuples of JAX-style keys; with
    /// several roots each path starts with `SequenceKey(root index)`.
    fn paths<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyTuple>>> {
        let all = keys::leaf_paths(self.spec(py), py, KeyStyle::Keys)?;
        let mut refs = self.ref_at().map(|(l, _)| l).peekable();
        let mut out = Vec::with_capacity(all.len() - self.refs.len());
        for (i, p) in all.into_iter().enumerate() {
            if refs.peek() == Some(&i) {
                refs.next();
            } else {
                out.push(p);
            }
        }
        Ok(out)
    }

    /// Every node in pre-order, for the path-keyed view: `(path, kind, type, data,
    /// target)`, where `path` is a tuple of JAX-style keys, `kind` a `PyTreeKind` number,
    /// `data` what a rebuild needs beyond the type and children (see `graph_to_dict`), and
    /// `target`, for a reference, the index in this list of the node it refers to (else -1).
    fn _layout<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyTuple>>> {
        layout(self, py)
    }

    /// Rebuilds the graph from `leaves` (as `graph_unflatten`).
    fn unflatten<'py>(
        slf: &Bound<'py, Self>,
        leaves: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        graph_unflatten(slf.as_any(), leaves)
    }

    fn __len__(&self, py: Python<'_>) -> usize {
        self.num_leaves(py)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        repr(self, py)
    }

    fn __hash__(&self, py: Python<'_>) -> PyResult<isize> {
        if let Some(h) = self.hash.get() {
            return Ok(*h);
        }
        let mut h = self.skeleton.bind(py).hash()? as u64;
        h = h.wrapping_mul(0x100_0000_01b3) ^ self.num_roots as u64;
        for &(l, t) in self.refs.iter() {
            h = (h ^ u64::from(l)).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ u64::from(t);
        }
        let h = (h >> 1) as isize;
        Ok(*self.hash.get_or_init(|| if h == -1 { -2 } else { h }))
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> PyResult<bool> {
        let py = other.py();
        let Ok(other) = other.cast::<GraphDef>() else {
            return Ok(false);
        };
        same_graphdef(py, self, other.get())
    }

    fn __ne__(&self, other: &Bound<'_, PyAny>) -> PyResult<bool> {
        Ok(!self.__eq__(other)?)
    }

    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let rebuild = REBUILD
            .get(py)
            .invariant("_rebuild_graphdef was kept at import")?
            .bind(py)
            .clone();
        let refs = PyTuple::new(py, self.refs.iter().map(|&(l, t)| (l, t)))?;
        let args = (self.skeleton.clone_ref(py), self.num_roots, refs).into_pyobject(py)?;
        PyTuple::new(py, [rebuild, args.into_any()])
    }

    fn __copy__(slf: PyRef<'_, Self>) -> Py<GraphDef> {
        slf.into()
    }

    fn __deepcopy__(slf: PyRef<'_, Self>, _memo: &Bound<'_, PyAny>) -> Py<GraphDef> {
        slf.into()
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.skeleton)
    }
}

/// What a rebuild needs of a node beyond its type and children.
fn layout_data<'py>(py: Python<'py>, node: &Node) -> PyResult<Bound<'py, PyAny>> {
    let none = || py.None().into_bound(py);
    let insertion_keys = || -> PyResult<Bound<'py, PyAny>> {
        match (node.keys(), node.insertion()) {
            (Some(keys), Some(pos)) => {
                let keys = keys.bind(py);
                let ordered = pos
                    .iter()
                    .map(|p| keys.get_item(p))
                    .collect::<PyResult<Vec<_>>>()?;
                Ok(PyTuple::new(py, ordered)?.into_any())
            }
            _ => Ok(none()),
        }
    };
    let data = || node.data.as_ref().map_or_else(none, |d| d.bind(py).clone());
    Ok(match node.kind {
        Kind::Dict => insertion_keys()?,
        Kind::DefaultDict => PyTuple::new(py, [data(), insertion_keys()?])?.into_any(),
        Kind::Deque | Kind::Custom => data(),
        _ => none(),
    })
}

/// The pre-order records of `_layout`.
fn layout<'py>(gd: &GraphDef, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyTuple>>> {
    let spec = gd.spec(py);
    let n = spec.nodes.len();
    let leaf_pos = gd.leaf_positions(py);
    let mut target_of: Vec<Option<usize>> = vec![None; n];
    for (leaf, target) in gd.ref_at() {
        target_of[leaf_pos[leaf]] = Some(target);
    }
    // Pre-order positions first, so references can name their target's record.
    let order = spec.preorder();
    let mut record_of = vec![0usize; n];
    for (k, &idx) in order.iter().enumerate() {
        record_of[idx] = k;
    }
    let mut out = Vec::with_capacity(n);
    let mut prefix_of: Vec<Option<Vec<Bound<'py, PyAny>>>> = vec![None; n];
    prefix_of[n - 1] = Some(Vec::new());
    for &idx in &order {
        let prefix = prefix_of[idx]
            .take()
            .invariant("a parent comes before its children")?;
        let node = &spec.nodes[idx];
        if node.arity > 0 {
            for (j, child) in spec.child_indices(idx).into_iter().enumerate() {
                let mut p = prefix.clone();
                p.push(keys::child_key(py, node, j, KeyStyle::Keys)?);
                prefix_of[child] = Some(p);
            }
        }
        let ty = match node.kind {
            Kind::Leaf => py.None().into_bound(py),
            _ => node
                .py_type(py)
                .unwrap_or_else(|| py.None().into_bound(py).get_type().into_any()),
        };
        let target: isize = target_of[idx].map_or(-1, |t| record_of[t] as isize);
        out.push(PyTuple::new(
            py,
            [
                PyTuple::new(py, prefix)?.into_any(),
                (node.kind as u8).into_pyobject(py)?.into_any(),
                ty,
                layout_data(py, node)?,
                target.into_pyobject(py)?.into_any(),
            ],
        )?);
    }
    Ok(out)
}

/// The key path of skeleton node `idx`, as a tuple of JAX-style keys.
fn node_path<'py>(py: Python<'py>, spec: &PyTreeSpec, idx: usize) -> PyResult<Bound<'py, PyTuple>> {
    let keys = spec
        .path_chain(idx)
        .into_iter()
        .map(|(n, j)| keys::child_key(py, &spec.nodes[n], j, KeyStyle::Keys))
        .collect::<PyResult<Vec<_>>>()?;
    PyTuple::new(py, keys)
}

/// A GraphDef from its parts (unpickling, and `graph_from_dict`), checked: every reference
/// must be a skeleton leaf, in order, and point at a container.
#[pyfunction]
pub fn _rebuild_graphdef<'py>(
    py: Python<'py>,
    skeleton: Bound<'py, PyTreeSpec>,
    num_roots: &Bound<'py, PyAny>,
    refs: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, GraphDef>> {
    let bad = |why: String| {
        PyErr::from(TreeError::State {
            of: StateOf::GraphDef,
            why,
        })
    };
    // Numbers out of range are a corrupted state like any other: ValueError, not the
    // OverflowError of an integer conversion.
    let num_roots: usize = num_roots.extract().map_err(|_| {
        bad(format!(
            "num_roots must be a small non-negative int, got {num_roots}"
        ))
    })?;
    let refs: Vec<(u32, u32)> = refs.extract().map_err(|_| {
        bad("references must be (leaf, target) pairs of small non-negative ints".into())
    })?;
    {
        let spec = skeleton.get();
        let root = spec.root();
        if num_roots != 1 && (root.kind != Kind::Tuple || root.arity != num_roots) {
            return Err(bad(format!(
                "{num_roots} roots need a tuple of {num_roots} at the root"
            )));
        }
        let n_leaves = spec.num_leaves() as u64;
        // A reference stands for an object already met, so its target comes before it in
        // walk (pre-)order: any other state would rebuild a graph that flattens differently.
        let n = spec.nodes.len();
        let mut preorder = vec![0usize; n];
        for (rank, idx) in spec.preorder().into_iter().enumerate() {
            preorder[idx] = rank;
        }
        let leaf_nodes: Vec<usize> = (0..n)
            .filter(|&i| spec.nodes[i].kind == Kind::Leaf)
            .collect();
        let mut last: Option<u32> = None;
        for &(leaf, target) in &refs {
            if u64::from(leaf) >= n_leaves || last.is_some_and(|l| l >= leaf) {
                return Err(bad(format!(
                    "reference at leaf {leaf} is out of order or range"
                )));
            }
            last = Some(leaf);
            let node = spec
                .nodes
                .get(target as usize)
                .ok_or_else(|| bad(format!("reference target {target} is out of range")))?;
            if matches!(node.kind, Kind::Leaf | Kind::None) {
                return Err(bad(format!("reference target {target} is not a container")));
            }
            // With several roots the skeleton's root is the tuple holding them, no object of
            // the graph's: nothing may refer to it.
            if num_roots != 1 && target as usize == spec.nodes.len() - 1 {
                return Err(bad("a reference targets the tuple of roots".into()));
            }
            if preorder[target as usize] > preorder[leaf_nodes[leaf as usize]] {
                return Err(bad(format!(
                    "reference at leaf {leaf} comes before its target {target}"
                )));
            }
        }
    }
    let gd = GraphDef {
        skeleton: skeleton.unbind(),
        num_roots,
        refs: refs.into_boxed_slice(),
        hash: OnceLock::new(),
    };
    Bound::new(py, gd)
}
