//! A treespec's nodes together with the registrations its registered nodes point into.
//!
//! Generic over the node type (`Slot`), so that this folder imports nothing of the crate:
//! the treespec's `Node` implements `Slot` (`treespec/node.rs`), and `Nodes<Node>`, compiled
//! for that one type, is what the treespec holds.

use std::mem::ManuallyDrop;
use std::ptr::NonNull;
use std::sync::Arc;

use pyo3::Python;

/// What a `Nodes` needs of the nodes it holds.
pub trait Slot: Sized {
    /// What a registered node points to (a `Registration`).
    type Reg: Send + Sync;
    /// The node's registration pointer.
    fn registration(&self) -> &CustomRef<Self::Reg>;
    fn registration_mut(&mut self) -> &mut CustomRef<Self::Reg>;
    /// Sets the node's leaf and node counts.
    fn set_counts(&mut self, num_leaves: usize, num_nodes: usize);
    /// A copy of the node but for its registration (an empty `CustomRef`).
    fn copy_unregistered(&self, py: Python<'_>) -> Self;
    /// Whether dropping the node has nothing to release.
    fn holds_nothing(&self) -> bool;
    /// Drops the node (a slot type may release its common contents more cheaply).
    #[inline(always)]
    fn discard(self) {
        drop(self);
    }
}

/// A registered node's registration, as a plain pointer: cloning and dropping an `Arc` per
/// node were two atomic operations each (perf: an eighth of a dataclass-heavy flatten).
///
/// The lifetime contract, kept by this module alone: a non-empty `CustomRef` is made only
/// here, only in a node of a `Nodes` whose `regs` hold an `Arc` of its registration, and
/// never leaves that `Nodes` (no `&mut` to such a node, no node moved out of one; a copy
/// of a node made elsewhere, `Node::clone_ref`, is empty). So a `&Node` borrowed from a
/// `Nodes` proves the registration alive for as long as the borrow.
pub struct CustomRef<R>(Option<NonNull<R>>);

// SAFETY: a `CustomRef` is a shared reference to a registration, which is `Send + Sync`
// (the bound), kept alive by an `Arc` (the contract above).
unsafe impl<R: Send + Sync> Send for CustomRef<R> {}
// SAFETY: as for `Send`.
unsafe impl<R: Send + Sync> Sync for CustomRef<R> {}

impl<R> CustomRef<R> {
    pub const NONE: CustomRef<R> = CustomRef(None);

    #[inline(always)]
    pub fn is_none(&self) -> bool {
        self.0.is_none()
    }

    /// The registration, for as long as the node holding this is borrowed.
    #[inline]
    pub fn get(&self) -> Option<&R> {
        // SAFETY: a non-empty `CustomRef` lies in a node of a `Nodes` that holds an `Arc`
        // of the pointee and outlives the borrow of `self` (the type's contract).
        self.0.map(|p| unsafe { p.as_ref() })
    }
}

/// Nodes in post-order and one `Arc` of each registration their custom nodes point to.
/// Reads go through `Deref` to `[Node]`; writes through the methods below, which keep the
/// two together: a custom node enters only with its registration (`push_custom`,
/// `push_custom_built`) or with the `Nodes` it is copied or moved from (`push_copy`,
/// `move_last_from`, `append`). Plain nodes made elsewhere (`push`, `From<Vec<Node>>`)
/// point to no registration.
///
/// Both vectors are released by `Drop` alone (hence `ManuallyDrop`), which skips an empty one
/// at one compare: the drop glue called two functions per `Nodes` dropped, and a flatten drops
/// several empty ones (buffers taken out of a walk and a treespec; callgrind: 7 a 10-key dict's
/// flatten, 80 instructions each).
pub struct Nodes<N: Slot> {
    vec: ManuallyDrop<Vec<N>>,
    /// Held, read only to avoid taking a second `Arc` of one registration: usually one
    /// or two entries, so lookups are scans, the last entry first.
    regs: ManuallyDrop<Vec<Arc<N::Reg>>>,
    /// Whether some node may hold something to release: false, dropping frees the buffer
    /// without reading a node (a 100,000-leaf list's treespec was 6.4 MB read back node by
    /// node on every drop: 12 instructions a leaf, a third of its `tree_structure`).
    /// Every way in keeps it: a node that enters is checked once it is complete, or (a
    /// moved payload node, a registered node) taken to hold something.
    holds: bool,
}

impl<N: Slot> Default for Nodes<N> {
    fn default() -> Self {
        Nodes {
            vec: ManuallyDrop::new(Vec::new()),
            regs: ManuallyDrop::new(Vec::new()),
            holds: false,
        }
    }
}

/// A node just written into a `Nodes`, open for its counts only.
pub struct NodeMut<'a, N>(&'a mut N);

impl<N: Slot> NodeMut<'_, N> {
    #[inline]
    pub fn set_counts(&mut self, num_leaves: usize, num_nodes: usize) {
        self.0.set_counts(num_leaves, num_nodes);
    }
}

impl<N> std::ops::Deref for NodeMut<'_, N> {
    type Target = N;
    fn deref(&self) -> &N {
        self.0
    }
}

impl<N: Slot> std::ops::Deref for Nodes<N> {
    type Target = [N];
    #[inline(always)]
    fn deref(&self) -> &[N] {
        &self.vec
    }
}

impl<'a, N: Slot> IntoIterator for &'a Nodes<N> {
    type Item = &'a N;
    type IntoIter = std::slice::Iter<'a, N>;
    fn into_iter(self) -> Self::IntoIter {
        self.vec.iter()
    }
}

/// Nodes made outside this module point to no registration.
impl<N: Slot> From<Vec<N>> for Nodes<N> {
    fn from(vec: Vec<N>) -> Nodes<N> {
        debug_assert!(vec.iter().all(|n| n.registration().is_none()));
        let holds = vec.iter().any(|n| !n.holds_nothing());
        Nodes {
            vec: ManuallyDrop::new(vec),
            regs: ManuallyDrop::new(Vec::new()),
            holds,
        }
    }
}

impl<N: Slot> Drop for Nodes<N> {
    /// Drops only the nodes that hold something: the drop glue called a function per node,
    /// leaves included (an eighth of a 500-deep chain's flatten, treespec freed each
    /// call), and none is read when none holds anything (`holds`). The registrations go
    /// after the nodes. An empty vector (no allocation) is not touched.
    #[inline]
    fn drop(&mut self) {
        if self.vec.capacity() != 0 {
            self.release_nodes();
        }
        if self.regs.capacity() != 0 {
            drop(std::mem::take(&mut *self.regs));
        }
    }
}

impl<N: Slot> Nodes<N> {
    pub fn new() -> Nodes<N> {
        Nodes::default()
    }

    pub fn with_capacity(n: usize) -> Nodes<N> {
        Vec::with_capacity(n).into()
    }

    /// Empties these nodes (releasing what they hold, as dropping them would) and hands back
    /// their buffer, for a later `Nodes` to be made in (`From<Vec<N>>`).
    pub fn into_buffer(mut self) -> Vec<N> {
        let mut vec = std::mem::take(&mut *self.vec);
        if self.holds {
            super::memory::clear_sparse(&mut vec, |n| !n.holds_nothing());
        } else {
            super::memory::clear_sparse(&mut vec, |_| false);
        }
        vec
    }

    /// Drops the nodes and frees their buffer (the vector left empty, which needs no drop).
    fn release_nodes(&mut self) {
        let vec = std::mem::take(&mut *self.vec);
        if self.holds {
            super::memory::drop_sparse(vec, |n| !n.holds_nothing());
        } else {
            // A loop that does nothing: compiled away, the buffer is freed unread.
            super::memory::drop_sparse(vec, |_| false);
        }
    }

    #[inline]
    pub fn reserve(&mut self, more: usize) {
        self.vec.reserve(more);
    }

    pub fn try_reserve(&mut self, more: usize) -> Result<(), std::collections::TryReserveError> {
        self.vec.try_reserve(more)
    }

    pub fn capacity(&self) -> usize {
        self.vec.capacity()
    }

    pub fn shrink_to_fit(&mut self) {
        self.vec.shrink_to_fit();
    }

    /// Appends `node`, made outside this module, so pointing to no registration.
    #[inline(always)]
    pub fn push(&mut self, node: N) {
        debug_assert!(node.registration().is_none());
        self.holds |= !node.holds_nothing();
        self.vec.push(node);
    }

    /// Appends `make()`, built in place (see `push_built`) and filled by `fill`: a node made
    /// outside this module points to no registration, so `fill` cannot carry one off.
    #[inline(always)]
    pub fn push_built(&mut self, make: impl FnOnce() -> N, fill: impl FnOnce(&mut N)) {
        let node = self.push_filled(make, fill);
        let holds = !node.holds_nothing();
        self.holds |= holds;
    }

    /// Appends `make()`, built in place (see `push_built`), a node the caller knows holds
    /// nothing (a tuple's or a list's): `holds` is left as it is, and the node is not read
    /// back (reading back the fields just written to find that out was 10 instructions a
    /// node, a sixth of what a 500-deep chain's flatten spends on nodes). A wrong call
    /// leaks what the node holds, never frees it twice.
    #[inline(always)]
    pub fn push_empty(&mut self, make: impl FnOnce() -> N) {
        let node = super::memory::push_built(&mut self.vec, make);
        debug_assert!(node.holds_nothing() && node.registration().is_none());
    }

    /// `push_built`, the node handed back for a registration to be set (`holds` not kept).
    #[inline(always)]
    fn push_filled(&mut self, make: impl FnOnce() -> N, fill: impl FnOnce(&mut N)) -> &mut N {
        let node = super::memory::push_built(&mut self.vec, make);
        debug_assert!(node.registration().is_none());
        fill(node);
        node
    }

    /// Appends `node` as a registered node of `reg`.
    pub fn push_custom(&mut self, node: N, reg: &Arc<N::Reg>) {
        self.push_custom_built(|| node, reg, |_| {});
    }

    /// Appends `make()`, built in place and filled by `fill` (see `push_built`), as a
    /// registered node of `reg`.
    #[inline(always)]
    pub fn push_custom_built(
        &mut self,
        make: impl FnOnce() -> N,
        reg: &Arc<N::Reg>,
        fill: impl FnOnce(&mut N),
    ) {
        self.keep(reg);
        self.holds = true;
        // The node points to no registration yet: `fill` cannot carry one off.
        let node = self.push_filled(make, fill);
        *node.registration_mut() = CustomRef(Some(NonNull::from(&**reg)));
    }

    /// Appends a copy of `src[i]`, its registration included.
    pub fn push_copy(&mut self, py: Python<'_>, src: &Nodes<N>, i: usize) -> NodeMut<'_, N> {
        let from = &src.vec[i];
        let mut copy = from.copy_unregistered(py);
        self.holds |= !from.holds_nothing();
        if let Some(p) = from.registration().0 {
            self.keep_ptr(p);
            *copy.registration_mut() = CustomRef(Some(p));
        }
        NodeMut(super::memory::push_built(&mut self.vec, || copy))
    }

    /// Appends copies of `src[range]`, their registrations included.
    pub fn extend_copy(&mut self, py: Python<'_>, src: &Nodes<N>, range: std::ops::Range<usize>) {
        self.vec.reserve(range.len());
        for i in range {
            self.push_copy(py, src, i);
        }
    }

    /// Moves all of `other`'s nodes to the end of these, with their registrations.
    pub fn append(&mut self, mut other: Nodes<N>) {
        self.vec.append(&mut other.vec);
        self.holds |= other.holds;
        for reg in std::mem::take(&mut *other.regs) {
            if !self.regs.iter().any(|r| Arc::ptr_eq(r, &reg)) {
                self.regs.push(reg);
            }
        }
    }

    /// Moves the last node of `from` to the end of these, memory to memory (see
    /// `move_last`), with its registration, and sets its counts; false when `from` is
    /// empty.
    #[inline(always)]
    pub fn move_last_from(
        &mut self,
        from: &mut Nodes<N>,
        num_leaves: usize,
        num_nodes: usize,
    ) -> bool {
        let Some(node) = super::memory::move_last(&mut from.vec, &mut self.vec) else {
            return false;
        };
        node.set_counts(num_leaves, num_nodes);
        let reg = node.registration().0;
        // A node moved here was filled elsewhere (a walk's payload): taken to hold something.
        self.holds = true;
        if let Some(p) = reg {
            // `from` still holds the registration: the node just left it.
            self.keep_ptr(p);
        }
        true
    }

    /// Drops the last node, if any.
    #[inline]
    pub fn discard_last(&mut self) {
        if let Some(node) = self.vec.pop() {
            node.discard();
        }
    }

    /// Holds an `Arc` of `reg`, unless these hold one already.
    #[inline(always)]
    fn keep(&mut self, reg: &Arc<N::Reg>) {
        if !self.regs.last().is_some_and(|r| Arc::ptr_eq(r, reg)) {
            self.keep_other(reg);
        }
    }

    #[cold]
    #[inline(never)]
    fn keep_other(&mut self, reg: &Arc<N::Reg>) {
        if !self.regs.iter().any(|r| Arc::ptr_eq(r, reg)) {
            self.regs.push(reg.clone());
        }
    }

    /// `keep` for the registration behind a `CustomRef` of a live `Nodes` (the caller's
    /// source of a copied or moved node).
    #[inline(always)]
    fn keep_ptr(&mut self, p: NonNull<N::Reg>) {
        if self.regs.last().map(Arc::as_ptr) != Some(p.as_ptr().cast_const()) {
            self.keep_ptr_other(p);
        }
    }

    #[cold]
    #[inline(never)]
    fn keep_ptr_other(&mut self, p: NonNull<N::Reg>) {
        let p = p.as_ptr().cast_const();
        if self.regs.iter().any(|r| Arc::as_ptr(r) == p) {
            return;
        }
        // SAFETY: `p` came from a `CustomRef` of a `Nodes` the caller borrows, which holds
        // an `Arc` of it (the contract of `CustomRef`): the allocation is live, and
        // counting one more reference and taking it as an `Arc` is the clone of that `Arc`.
        let arc = unsafe {
            Arc::increment_strong_count(p);
            Arc::from_raw(p)
        };
        self.regs.push(arc);
    }
}
