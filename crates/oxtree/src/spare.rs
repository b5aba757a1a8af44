//! Per-thread spare buffers for vectors of Python objects that live for one call.
//!
//! A walk over a large tree collects its leaves (and unflatten keeps a value stack) in
//! vectors as long as the tree is wide. Freed at the end of each call, a buffer of 100,000
//! objects goes back to the system and the next call takes page faults on a fresh one:
//! measured (perf) at a third of a 100,000-leaf unflatten, in `collect_leaves` and the value
//! stack. Each thread keeps one emptied buffer per slot instead.

use std::cell::Cell;

use pyo3::prelude::*;

/// The slots: buffers that can be taken at the same time use different ones.
#[derive(Clone, Copy)]
pub enum Slot {
    /// Leaves: collected by a flatten, or given to an unflatten.
    Leaves = 0,
    /// Unflatten's value stack.
    Values = 1,
    /// A flatten's pending children: the values of dicts and dataclass fields, waiting in
    /// reverse order to be visited.
    Pending = 2,
}

/// The largest buffer kept, in objects (4 MiB): larger ones are freed as usual.
const KEPT_OBJECTS: usize = 1 << 19;

thread_local! {
    /// The buffers, emptied, with their element type erased to the same-layout `usize`.
    static SPARE: [Cell<Option<Vec<usize>>>; 3] =
        const { [Cell::new(None), Cell::new(None), Cell::new(None)] };
}

/// An empty vector with room for `capacity` objects, reusing this thread's spare buffer of
/// `slot` when there is one (a nested call that finds the slot taken allocates).
// Inlined into the walk: see `treespec::take_nodes`.
#[inline(always)]
pub fn take<'py>(slot: Slot, capacity: usize) -> Vec<Bound<'py, PyAny>> {
    let mut v = match SPARE.with(|s| s[slot as usize].take()) {
        Some(buffer) => retype(buffer),
        None => Vec::new(),
    };
    v.reserve(capacity);
    v
}

/// Empties `v` (releasing what it holds) and keeps its buffer for the next `take`.
// Inlined into the walk: see `treespec::take_nodes`.
#[inline(always)]
pub fn give_back(slot: Slot, mut v: Vec<Bound<'_, PyAny>>) {
    // Releasing the objects may run Python code, which may take and give back this slot:
    // the buffer is put back only once it is empty.
    v.clear();
    if v.capacity() > 0 && v.capacity() <= KEPT_OBJECTS {
        SPARE.with(|s| s[slot as usize].set(Some(retype(v))));
    }
}

/// An empty vector with another element type of the same size and alignment (or the same type
/// with another lifetime, as the walk stack kept between walks needs): the allocation
/// alone changes hands.
pub use crate::ffi::retype;

#[cfg(test)]
mod tests {
    use super::retype;

    #[test]
    fn retype_keeps_the_allocation() {
        let mut v: Vec<usize> = Vec::with_capacity(10);
        v.push(1);
        v.clear();
        let ptr = v.as_ptr() as usize;
        let w: Vec<*const u8> = retype(v);
        assert_eq!(w.capacity(), 10);
        assert_eq!(w.as_ptr() as usize, ptr);
    }
}
