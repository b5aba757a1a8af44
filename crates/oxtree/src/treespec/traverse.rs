//! Walking another tree against a treespec: `flatten_up_to`, the core of multi-tree map.
//!
//! The walk starts at the root (the last node) and finds each child's node index by stepping
//! left over the sibling subtrees, so it needs no pre-computed child offsets. Children are
//! pushed right to left, so they are popped, and the leaves come out, left to right.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

use super::{Node, PyTreeSpec};
use crate::errors::{Expected, Mismatch, TreeError};
use crate::face::Face;
use crate::kind::Kind;
use crate::registry::Registry;
use crate::types;

/// The subtrees of `tree` at the places of the leaves of `spec`.
pub fn flatten_up_to<'py>(
    spec: &PyTreeSpec,
    tree: &Bound<'py, PyAny>,
    registry: &Registry,
    which: Option<&dyn std::fmt::Display>,
) -> PyResult<Vec<Bound<'py, PyAny>>> {
    let mut out = Vec::with_capacity(spec.num_leaves());
    match walk::<false>(spec, tree, registry, &mut out)? {
        None => Ok(out),
        Some(found) => Err(report(spec, tree, registry, which, found)),
    }
}

/// Where a walk found the tree to differ: the node index, the object there and how.
type Found<'py> = (usize, Bound<'py, PyAny>, Mismatch);

/// Walks `tree` against `spec`, collecting the subtrees at its leaves into `out`; returns the
/// first mismatch met. Left to right (`RIGHT_FIRST == false`), so the leaves come out in
/// order; right to left is the order optree and jaxlib walk in, used only to find the
/// mismatch they would report first.
fn walk<'py, const RIGHT_FIRST: bool>(
    spec: &PyTreeSpec,
    tree: &Bound<'py, PyAny>,
    registry: &Registry,
    out: &mut Vec<Bound<'py, PyAny>>,
) -> PyResult<Option<Found<'py>>> {
    let py = tree.py();
    let mut stack: Vec<(Bound<'py, PyAny>, usize)> = vec![(tree.clone(), spec.nodes.len() - 1)];
    let mut children: Vec<Bound<'py, PyAny>> = Vec::new();
    while let Some((obj, idx)) = stack.pop() {
        let node = &spec.nodes[idx];
        match node.kind {
            Kind::Leaf => {
                out.push(obj);
                continue;
            }
            Kind::None => {
                if !obj.is_none() {
                    return Ok(Some((idx, obj, Mismatch::NotNone)));
                }
                continue;
            }
            _ => {}
        }
        if !RIGHT_FIRST && exact_sequence(spec, idx, &obj, out, &mut stack)? {
            continue;
        }
        children.clear();
        if let Some(why) = node_children(py, node, &obj, registry, spec.face, &mut children)? {
            return Ok(Some((idx, obj, why)));
        }
        if !RIGHT_FIRST && node.num_nodes == node.arity + 1 && node.num_leaves == node.arity {
            // Every child is a leaf node, and everything left of this node is out already:
            // its children are the next leaves, in order, without a trip through the stack
            // (a push and a pop per leaf were 6.4M of the 7.4M instructions of a 100,000-leaf
            // list's walk).
            out.append(&mut children);
        } else if RIGHT_FIRST {
            // Push left to right, so the rightmost child is walked first.
            for (child, child_idx) in children.drain(..).zip(spec.child_indices(idx)) {
                stack.push((child, child_idx));
            }
        } else {
            // Push right to left, so the leftmost child is walked first.
            let mut child_idx = idx - 1;
            for child in children.drain(..).rev() {
                stack.push((child, child_idx));
                child_idx = child_idx.wrapping_sub(spec.nodes[child_idx].num_nodes);
            }
        }
    }
    Ok(None)
}

/// The left-to-right walk's step at a tuple or list node `idx` when `obj` is exactly of its
/// type and length: its items go straight onto `stack` (or `out`, when they are all leaves),
/// with no trip through `node_children` and its vector (chain500 map2: 356k -> 334k
/// instructions). False, nothing done, for any other node or object (`node_children` then
/// takes it, and names any mismatch).
#[inline(always)]
fn exact_sequence<'py>(
    spec: &PyTreeSpec,
    idx: usize,
    obj: &Bound<'py, PyAny>,
    out: &mut Vec<Bound<'py, PyAny>>,
    stack: &mut Vec<(Bound<'py, PyAny>, usize)>,
) -> PyResult<bool> {
    let node = &spec.nodes[idx];
    let n = match node.kind {
        Kind::List => obj.cast_exact::<PyList>().map(|l| l.len()),
        Kind::Tuple => obj.cast_exact::<PyTuple>().map(|t| t.len()),
        _ => return Ok(false),
    };
    if n.ok() != Some(node.arity) {
        return Ok(false);
    }
    if node.num_nodes == node.arity + 1 && node.num_leaves == node.arity {
        // All children are leaves: the next leaves, in order (see `walk`).
        crate::ffi::extend_with_items(out, obj);
        return Ok(true);
    }
    // Right to left, so the leftmost child is walked first; the items are all taken before
    // anything else runs.
    let start = stack.len();
    let mut child_idx = idx - 1;
    for i in (0..node.arity).rev() {
        let item = match node.kind {
            Kind::List => obj
                .cast_exact::<PyList>()
                .ok()
                .and_then(|l| crate::ffi::list_item(l, i)),
            _ => obj
                .cast_exact::<PyTuple>()
                .ok()
                .and_then(|t| crate::ffi::tuple_item(t, i)),
        };
        let Some(item) = item else {
            stack.truncate(start);
            return Err(crate::internal!(
                "a sequence shorter than its checked length"
            ));
        };
        stack.push((item, child_idx));
        child_idx = child_idx.wrapping_sub(spec.nodes[child_idx].num_nodes);
    }
    Ok(true)
}

/// The error for a walk that found a mismatch: the one the peers report first (they walk
/// right to left), with its key path.
#[cold]
#[inline(never)]
fn report<'py>(
    spec: &PyTreeSpec,
    tree: &Bound<'py, PyAny>,
    registry: &Registry,
    which: Option<&dyn std::fmt::Display>,
    found: Found<'py>,
) -> PyErr {
    let mut scratch = Vec::new();
    let (idx, obj, why) = match walk::<true>(spec, tree, registry, &mut scratch) {
        Ok(Some(first)) => first,
        Ok(None) => found,
        Err(err) => return err,
    };
    mismatch(spec, tree.py(), idx, &obj, why, which, tree, registry)
}

/// Collects the children of `obj` for `node`, in leaf order. Returns how `obj` differs from
/// the node's type or shape, or None when it matches.
fn node_children<'py>(
    py: Python<'py>,
    node: &Node,
    obj: &Bound<'py, PyAny>,
    registry: &Registry,
    face: Face,
    out: &mut Vec<Bound<'py, PyAny>>,
) -> PyResult<Option<Mismatch>> {
    let same_type = |data: &Option<Py<PyAny>>| {
        data.as_ref()
            .is_some_and(|t| obj.get_type().as_ptr() == t.as_ptr())
    };
    match node.kind {
        Kind::Tuple | Kind::NamedTuple | Kind::StructSeq => {
            let ok = match node.kind {
                Kind::Tuple => obj.is_exact_instance_of::<PyTuple>(),
                _ => same_type(&node.data),
            };
            if !ok {
                return Ok(Some(tuple_mismatch(py, node, obj)));
            }
            // All three kinds are tuples (exactly, or subclasses checked above).
            let Ok(t) = obj.cast::<PyTuple>() else {
                return Err(crate::internal!("a tuple node's object is no tuple"));
            };
            if t.len() != node.arity {
                return Ok(Some(Mismatch::Arity { got: t.len() }));
            }
            if !crate::ffi::extend_with_items(out, t.as_any()) {
                out.extend(t.iter()); // a namedtuple or struct sequence
            }
        }
        Kind::List => {
            let Ok(l) = obj.cast_exact::<PyList>() else {
                return Ok(Some(Mismatch::NotInstance));
            };
            if l.len() != node.arity {
                return Ok(Some(Mismatch::Arity { got: l.len() }));
            }
            crate::ffi::extend_with_items(out, l.as_any()); // an exact list (checked above)
        }
        Kind::Dict | Kind::OrderedDict | Kind::DefaultDict => {
            // Under optree's rules any of the three mapping kinds matches any other with the
            // same keys (JAX wants the same type); values are taken in the treespec's order.
            // A mapping kind is known by type alone: JAX's registry is not asked.
            let ok = match super::classify::classify(obj, false, registry, "", face, None)? {
                super::classify::Class::Node(k) => {
                    k.is_mapping() && (!face.rules().mappings_match_exactly || k == node.kind)
                }
                _ => false,
            };
            if !ok {
                return Ok(Some(Mismatch::NotInstance));
            }
            // Every mapping kind is a dict subclass (checked above).
            let Ok(d) = obj.cast::<PyDict>() else {
                return Err(crate::internal!("a mapping node's object is no dict"));
            };
            let Some(keys) = node.keys().as_ref() else {
                return Err(crate::internal!("a mapping node without its keys"));
            };
            let keys = keys.bind(py);
            if d.len() != node.arity {
                return Ok(Some(key_mismatch(node, d, face)?));
            }
            if !values_by_same_keys(node, keys, d, out) {
                for key in keys.iter() {
                    match d.get_item(key)? {
                        Some(v) => out.push(v),
                        None => return Ok(Some(key_mismatch(node, d, face)?)),
                    }
                }
            }
            if face.rules().mappings_match_exactly && node.kind == Kind::OrderedDict {
                // JAX's aux data of an OrderedDict is its key tuple: the order counts.
                for (k, expected) in d.keys().iter().zip(keys.iter()) {
                    if !(k.is(&expected) || k.eq(&expected)?) {
                        out.clear();
                        return Ok(Some(key_mismatch(node, d, face)?));
                    }
                }
            }
            if face.rules().mappings_match_exactly && node.kind == Kind::DefaultDict {
                // JAX compares a defaultdict's factory as part of its aux data.
                let factory = obj.getattr(pyo3::intern!(py, "default_factory"))?;
                let same = match &node.data {
                    Some(f) => factory.is(f.bind(py)) || factory.eq(f.bind(py))?,
                    None => factory.is_none(),
                };
                if !same {
                    out.clear();
                    return Ok(Some(key_mismatch(node, d, face)?));
                }
            }
        }
        Kind::Deque => {
            if obj.get_type().as_ptr() != types::collections(py).deque.as_ptr() {
                return Ok(Some(Mismatch::NotInstance));
            }
            let items: Vec<_> = obj.try_iter()?.collect::<PyResult<_>>()?;
            if items.len() != node.arity {
                return Ok(Some(Mismatch::Arity { got: items.len() }));
            }
            out.extend(items);
        }
        Kind::Custom => {
            let Some(reg) = node.custom() else {
                return Err(crate::internal!("a custom node without its registration"));
            };
            if obj.get_type().as_ptr() != reg.ty.as_ptr() {
                return Ok(Some(Mismatch::NotInstance));
            }
            let (kids, aux, _) = super::custom::flatten(py, reg, obj, false)?;
            let same = match &node.data {
                Some(expected) => {
                    let expected = expected.bind(py);
                    aux.is(expected) || aux.eq(expected)?
                }
                None => aux.is_none(),
            };
            if !same {
                return Ok(Some(Mismatch::Data { got: aux.unbind() }));
            }
            if kids.len() != node.arity {
                return Ok(Some(Mismatch::Arity { got: kids.len() }));
            }
            kids.append_to(out);
        }
        Kind::Leaf | Kind::None => {
            return Err(crate::internal!(
                "node_children called on a {:?} node",
                node.kind
            ))
        }
    }
    Ok(None)
}

/// `values_by_same_keys` for a dict of at most `SCAN_KEYS_MIN` keys, all exact str: the
/// keys' addresses and the values read off its table in one pass (`ffi::str_keyed_items`),
/// no lookup per key, then put in leaf order. False (`out` as it was) when a key is not the
/// node's very key object at its place, or not a str. Each of the `arity` entries holds the
/// node's key at its leaf position, the positions being distinct (a dict's keys are
/// distinct objects, and `reorder` checks them): each value lands where a lookup of its
/// key would put it.
#[inline(never)]
fn small_values_by_same_keys<'py>(
    node: &Node,
    keys: &Bound<'py, PyList>,
    d: &Bound<'py, PyDict>,
    out: &mut Vec<Bound<'py, PyAny>>,
) -> bool {
    let n = node.arity;
    let mut addrs = [0usize; crate::ffi::STR_ITEMS_MAX];
    if n > addrs.len() {
        return false;
    }
    let insertion = node.insertion();
    let start = out.len();
    if crate::ffi::str_keyed_items(d, &mut addrs, out) != Some(n) {
        out.truncate(start);
        return false;
    }
    // The leaf position of the entry at each place, and the place of each leaf position.
    let mut from = [0u8; crate::ffi::STR_ITEMS_MAX];
    for (i, &addr) in addrs[..n].iter().enumerate() {
        let p = leaf_position(insertion, i);
        if p >= n || crate::ffi::list_item_addr(keys, p) != Some(addr) {
            out.truncate(start);
            return false;
        }
        from[p] = i as u8;
    }
    if insertion.is_some()
        && !super::dict_order::reorder(&mut out[start..], |k| usize::from(from[k]))
    {
        out.truncate(start);
        return false;
    }
    true
}

/// Dicts of at most this many keys are read by `small_values_by_same_keys`: one pass over
/// their table, str keys only, instead of a lookup per key (17k of a gpt2 map2's 672k
/// instructions, 31k of a mixed tree's 1.31M).
const SCAN_KEYS_MIN: usize = 16;

/// The leaf position of the key at place `i` of a dict in the insertion order the node
/// recorded (`usize::MAX` past it).
#[inline(always)]
fn leaf_position(insertion: Option<super::Insertion<'_>>, i: usize) -> usize {
    match insertion {
        Some(ins) if i < ins.len() => ins.get(i),
        Some(_) => usize::MAX,
        None => i,
    }
}

/// Pushes the values of `d` (as long as the node) onto `out` in leaf order when its keys are
/// the node's very key objects, read in one pass over its table with no lookup per key; false
/// (`out` as it was) otherwise. Trees built from one another (`tree_map`'s other trees, a
/// model's parameters and its gradients) share their key objects; then each value's leaf
/// position is the one the node recorded for the key at that place in insertion order.
/// Each key found at its place is the node's key there, and the keys of a dict are distinct,
/// so all `arity` places are filled once, each with the value of the key the node has there:
/// what a lookup per key would give. Nothing here runs Python code.
#[inline(never)]
fn values_by_same_keys<'py>(
    node: &Node,
    keys: &Bound<'py, PyList>,
    d: &Bound<'py, PyDict>,
    out: &mut Vec<Bound<'py, PyAny>>,
) -> bool {
    if node.arity <= SCAN_KEYS_MIN {
        return small_values_by_same_keys(node, keys, d, out);
    }
    let insertion = node.insertion();
    let position = |i: usize| leaf_position(insertion, i);
    let start = out.len();
    for (i, (key, value)) in crate::ffi::dict_items(d).enumerate() {
        if crate::ffi::list_item_addr(keys, position(i)) != Some(key.as_ptr() as usize) {
            out.truncate(start);
            return false;
        }
        out.push(value);
    }
    if out.len() - start != node.arity {
        out.truncate(start);
        return false;
    }
    if insertion.is_some() {
        super::dict_order::permute(&mut out[start..], position);
    }
    true
}

/// Why `obj`, not of a tuple node's exact type, does not match it: not a tuple of that
/// family at all, another length, or another class.
#[cold]
fn tuple_mismatch(py: Python<'_>, node: &Node, obj: &Bound<'_, PyAny>) -> Mismatch {
    let ty = obj.get_type();
    let family = match node.kind {
        Kind::NamedTuple => types::is_namedtuple_class(&ty),
        Kind::StructSeq => types::is_structseq_class(&ty),
        _ => false,
    };
    if !family {
        return Mismatch::NotInstance;
    }
    let _ = py;
    match obj.len() {
        Ok(n) if n != node.arity => Mismatch::Arity { got: n },
        _ => Mismatch::Type,
    }
}

/// The keys of a dict that does not match a mapping node.
#[cold]
fn key_mismatch(node: &Node, d: &Bound<'_, PyDict>, face: Face) -> PyResult<Mismatch> {
    let py = d.py();
    let keys = d.keys();
    // JAX shows an OrderedDict's keys in their order; sorted otherwise.
    let got = if face.rules().mappings_match_exactly && node.kind == Kind::OrderedDict {
        keys
    } else {
        super::dict_order::sort_keys(&keys, false)?
    };
    let factory = if node.kind == Kind::DefaultDict {
        d.getattr(pyo3::intern!(py, "default_factory"))
            .ok()
            .map(Bound::unbind)
    } else {
        None
    };
    Ok(Mismatch::Keys {
        got: got.unbind(),
        factory,
    })
}

/// What node `idx` expects, copied out of it for a message.
#[cold]
pub fn expected_of(py: Python<'_>, node: &Node) -> Expected {
    let dataclass = node
        .custom()
        .is_some_and(|r| matches!(r.rule, crate::registry::Rule::Dataclass { .. }));
    Expected {
        kind: node.kind,
        arity: node.arity,
        ty: node.py_type(py).map(Bound::unbind),
        keys: node.keys().as_ref().map(|k| k.clone_ref(py)),
        data: node.data.as_ref().map(|d| d.clone_ref(py)),
        dataclass,
    }
}

#[cold]
#[allow(clippy::too_many_arguments)]
fn mismatch(
    spec: &PyTreeSpec,
    py: Python<'_>,
    idx: usize,
    obj: &Bound<'_, PyAny>,
    why: Mismatch,
    which: Option<&dyn std::fmt::Display>,
    tree: &Bound<'_, PyAny>,
    registry: &Registry,
) -> PyErr {
    let at = keyed_path(spec, py, idx, tree, registry, "tree")
        .unwrap_or_else(|_| spec.path_to(py, idx, "tree"));
    let path = Some(match which {
        Some(which) => format!("{at} (in {which})"),
        None => at,
    });
    TreeError::Structure {
        face: spec.face,
        expected: expected_of(py, &spec.nodes[idx]),
        mismatch: why,
        found: obj.clone().unbind(),
        path,
    }
    .into()
}

/// The path to node `idx`, walking `tree` (which matched the treespec down to there) so that
/// registered nodes with JAX keys (`flatten_with_keys`) are named by them.
#[cold]
fn keyed_path(
    spec: &PyTreeSpec,
    py: Python<'_>,
    idx: usize,
    tree: &Bound<'_, PyAny>,
    registry: &Registry,
    root: &str,
) -> PyResult<String> {
    use crate::path_text::PathEntry;
    let mut entries = Vec::new();
    let mut cur = tree.clone();
    for (n, j) in spec.path_chain(idx) {
        let node = &spec.nodes[n];
        let keyed = match (node.custom(), node.kind) {
            (Some(reg), Kind::Custom) => match &reg.rule {
                crate::registry::Rule::Custom {
                    flatten_with_keys: Some(_),
                    ..
                } => Some(reg),
                _ => None,
            },
            _ => None,
        };
        if let Some(reg) = keyed {
            let (children, _, keys) = super::custom::flatten(py, reg, &cur, true)?;
            let key = keys
                .ok_or_else(|| crate::internal!("a keyed flatten without keys"))?
                .get_item(j)?;
            entries.push(PathEntry::Text(super::custom_entry_text(&key)));
            cur = children
                .into_vec()
                .into_iter()
                .nth(j)
                .ok_or_else(|| PyErr::from(TreeError::RetraceNoChild))?;
        } else {
            entries.push(node.entry(py, j));
            let mut children = Vec::new();
            if node_children(py, node, &cur, registry, spec.face, &mut children)?.is_some() {
                return Err(TreeError::RetraceDiffers.into());
            }
            cur = children
                .into_iter()
                .nth(j)
                .ok_or_else(|| PyErr::from(TreeError::RetraceNoChild))?;
        }
    }
    Ok(crate::path_text::render(root, &entries))
}
