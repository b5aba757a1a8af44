//! Selecting leaves by path pattern (`pattern/mod.rs`): for each leaf of a treespec, the first
//! pattern its key path matches, in one pre-order pass over the nodes. Each node's child keys
//! are looked at once (shared by the leaves below), as `keys.rs` makes paths, but no key
//! object is made for the builtin containers, and a subtree no glob can reach is skipped
//! whole. Globs cost no Python call per leaf; a regular expression is called once per leaf
//! with its keystr, kept as one growing string.

use pyo3::prelude::*;

use super::keys::{child_key, KeyStyle};
use super::{Node, PyTreeSpec};
use crate::invariant::Invariant;
use crate::kind::Kind;
use crate::pattern::{Matcher, Seg, NO_MATCH};
use crate::types;

/// The key of child `j` of `node`, as its JAX-style key (`keys::child_key`) names it.
fn child_seg<'py>(py: Python<'py>, node: &Node, j: usize) -> PyResult<Seg<'py>> {
    match node.kind {
        Kind::Tuple | Kind::List | Kind::Deque => return Ok(Seg::Index(j as isize)),
        Kind::Dict | Kind::OrderedDict | Kind::DefaultDict => {
            if let Some(keys) = node.keys() {
                return Seg::dict_key(keys.bind(py).get_item(j)?);
            }
        }
        Kind::NamedTuple | Kind::StructSeq => {
            if let Some(name) = types::field_name_at(node.kept_data(py), node.kind, j)? {
                return Ok(Seg::Attr(name));
            }
        }
        _ => {}
    }
    Seg::of_key(&child_key(py, node, j, KeyStyle::Keys)?)
}

enum Task {
    /// Child `j` (at node position `node`) of the node at `parent`.
    Child {
        parent: usize,
        j: usize,
        node: usize,
    },
    /// Leave a node: drop its state set, cut the path text back to `text_len`.
    Exit { text_len: usize },
}

struct Pass<'a, 'py> {
    py: Python<'py>,
    spec: &'a PyTreeSpec,
    m: &'a Matcher,
    any_order: bool,
    out: Vec<u32>,
    /// The state sets of the open nodes, `m.words()` each, the current one on top.
    sets: Vec<u64>,
    /// The keystr of the current node's path (kept only when a regex needs it).
    text: String,
    next_leaf: usize,
    tasks: Vec<Task>,
}

impl Pass<'_, '_> {
    fn pop(&mut self, text_len: usize) {
        self.sets.truncate(self.sets.len() - self.m.words());
        self.text.truncate(text_len);
    }

    /// Visits node `idx`, whose state set is on top.
    fn visit(&mut self, idx: usize, text_len: usize) -> PyResult<()> {
        let node = &self.spec.nodes[idx];
        if node.kind == Kind::Leaf {
            let top = self.sets.len() - self.m.words();
            let hit = self
                .m
                .first(self.py, &self.sets[top..], &self.text, self.any_order)?;
            *self
                .out
                .get_mut(self.next_leaf)
                .invariant("a leaf position within the treespec's leaves")? = hit;
            self.next_leaf += 1;
            self.pop(text_len);
        } else if node.arity == 0 {
            self.pop(text_len);
        } else {
            self.tasks.push(Task::Exit { text_len });
            // Children from the last (just before the node, in post-order) to the first, so
            // they come off the stack left to right.
            let mut end = idx;
            for j in (0..node.arity).rev() {
                let child = end - 1;
                self.tasks.push(Task::Child {
                    parent: idx,
                    j,
                    node: child,
                });
                end = child + 1 - self.spec.nodes[child].num_nodes;
            }
        }
        Ok(())
    }

    fn run(mut self) -> PyResult<Vec<u32>> {
        let needs_text = self.m.needs_text();
        self.m.push_start(&mut self.sets);
        let root = self
            .spec
            .nodes
            .len()
            .checked_sub(1)
            .invariant("a root node")?;
        self.visit(root, 0)?;
        while let Some(task) = self.tasks.pop() {
            match task {
                Task::Exit { text_len } => self.pop(text_len),
                Task::Child { parent, j, node } => {
                    let mut seg = child_seg(self.py, &self.spec.nodes[parent], j)?;
                    let text_len = self.text.len();
                    if needs_text {
                        seg.write(&mut self.text)?;
                    }
                    let empty = self.m.push_step(&mut self.sets, &mut seg)?;
                    if empty && !needs_text {
                        // No glob can match below: every leaf there is unselected.
                        self.next_leaf += self.spec.nodes[node].num_leaves;
                        self.pop(text_len);
                        continue;
                    }
                    self.visit(node, text_len)?;
                }
            }
        }
        Ok(self.out)
    }
}

/// For each leaf of `spec`, left to right, the tag of the first pattern of `m` its key path
/// matches (`NO_MATCH` for none). With `any_order`, any matching pattern's tag will do.
pub fn leaf_matches(
    py: Python<'_>,
    spec: &PyTreeSpec,
    m: &Matcher,
    any_order: bool,
) -> PyResult<Vec<u32>> {
    Pass {
        py,
        spec,
        m,
        any_order,
        out: vec![NO_MATCH; spec.num_leaves()],
        sets: Vec::with_capacity(16 * m.words()),
        text: String::new(),
        next_leaf: 0,
        tasks: Vec::new(),
    }
    .run()
}
