//! Rebuilding small str-keyed dicts by copying a template.
//!
//! A dict built key by key costs CPython a keys table allocated and cleared, then a probe,
//! a free-slot search and a write per key: 40% of a gpt2-like unflatten under perf.
//! `PyDict_Copy` of a dict that has the same keys in the same order instead copies the
//! table in one `memcpy`. This module keeps, per thread, a template dict for recently
//! rebuilt key lists (keys mapped to None, in the order the rebuilt dict must have), copies
//! it, and writes the values into the copy's entries.
//!
//! Writing the entries needs the layout of CPython's dict (private to CPython). It is the
//! same on 3.11, 3.12 and 3.13 with the GIL (`PyDictObject` and `PyDictKeysObject` in their
//! `cpython/dictobject.h` and `internal/pycore_dict.h`; 3.13's free-threaded build adds a
//! mutex to the keys header), so the write (`ffi::dict_copy_with_values`) is compiled only
//! for those (`ffi::DICT_LAYOUT_KNOWN`) and checks every copy before writing into it: each
//! entry must hold the expected key and None, or the copy is dropped and the dict built key
//! by key as on any other version.

use std::cell::{Cell, RefCell};

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use super::{Insertion, Node};
use crate::face::Face;

/// Dicts of at most this many keys are copied from templates whenever they are rebuilt
/// again: each template holds a table as large as the dict's, and the thread keeps `SLOTS`
/// of them.
const SMALL_KEYS: usize = 32;

/// Larger dicts (up to `ffi::MAX_TEMPLATE_KEYS` keys) get a template only while this
/// thread's templates of more than `SMALL_KEYS` keys hold at most this many keys in all
/// (about 3 MiB of tables), so the cache never holds more than a few large dicts' worth.
/// Measured on a 10,000-key dict's rebuild: 299 instructions a key built key by key, 35
/// copied from its template.
const LARGE_KEYS_BUDGET: usize = 1 << 17;

/// Templates kept per thread: enough for trees of a few hundred distinct dicts (a 1,000-leaf
/// tree of random dicts has 151). Two-way: a key list and order may sit in either slot of
/// its pair, so two dicts whose hashes meet do not evict each other on every rebuild (in a
/// direct-mapped table, 17 of that tree's 151 dicts did, and were built key by key).
const SLOTS: usize = 1024;

/// The order of a template's keys: the leaf order (`SORTED`), a packed insertion order, or
/// (top bit set) the hash of an insertion order kept as a slice.
const SORTED: u64 = u64::MAX;

struct Template {
    /// The node's key list (leaf order), never read: held so that neither its address nor
    /// its keys' addresses (what `identity` is made of) can be another object's.
    _keys: Py<PyList>,
    /// What the template is found by: `identity` of its key list.
    identity: u64,
    order: u64,
    /// The insertion positions of a dict of more than 8 keys (`order` is only their hash).
    slice: Option<Box<[usize]>>,
    /// Made the second time these keys are rebuilt in this order: a dict rebuilt once (a
    /// treespec unpickled and unflattened, keys seen once) is built key by key, not twice.
    dict: Option<Py<PyDict>>,
    /// The keys this template counts against `LARGE_KEYS_BUDGET` (0 for a small one).
    budgeted: usize,
}

thread_local! {
    static TEMPLATES: RefCell<Vec<Option<Template>>> = const { RefCell::new(Vec::new()) };
    /// The keys of this thread's large templates (see `LARGE_KEYS_BUDGET`).
    static LARGE_KEYS_HELD: Cell<usize> = const { Cell::new(0) };
}

/// The dict of `node` (an exact-dict node of up to `ffi::MAX_TEMPLATE_KEYS` str keys) holding the values
/// `stack[start..]` (leaf order), copied from a template: the values move into the dict and
/// `stack` is cut to `start`. `None` when this dict cannot be made that way, with `stack`
/// untouched (the caller builds it key by key).
pub fn copy_with_values<'py>(
    py: Python<'py>,
    node: &Node,
    stack: &mut Vec<Bound<'py, PyAny>>,
    start: usize,
    face: Face,
) -> Option<PyResult<Bound<'py, PyAny>>> {
    let n = node.arity;
    debug_assert_eq!(stack.len() - start, n);
    if !crate::ffi::DICT_LAYOUT_KNOWN || n == 0 || n > crate::ffi::MAX_TEMPLATE_KEYS {
        return None;
    }
    let keys = node.keys().as_ref()?.bind(py);
    let insertion = if !face.rules().records_insertion_order {
        None
    } else {
        node.insertion()
    };
    let (order, slice) = match insertion {
        None => (SORTED, None),
        Some(Insertion::Packed { bits, .. }) => (u64::from(bits), None),
        // Dicts of more than 8 keys keep their order in a slice: remembered by a hash of it
        // (top bit set: never a packed order), the slice itself compared on a hit.
        Some(Insertion::Slice(s)) => {
            let h = s.iter().fold(0x243F_6A88_85A3_08D3u64, |h, &p| {
                (h ^ p as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
            });
            ((h | 1 << 63) & !1, Some(s))
        }
    };
    // The leaf position of the i-th key in the rebuilt dict's order.
    let position = |i: usize| insertion.map_or(i, |ins| ins.get(i));
    let template = match template_for(py, keys, order, slice, &position) {
        Ok(Some(t)) => t,
        Ok(None) => return None,
        Err(e) => return Some(Err(e)),
    };
    crate::ffi::dict_copy_with_values(&template, keys, position, stack, start)
        .map(|r| r.map(Bound::into_any))
}

/// What a template for `keys` is found by. A small key list: its address (flatten shares one
/// list among the dicts with the same small set of str keys). A larger one: a hash of its
/// keys' addresses, so that every treespec of a dict with the same key objects in the same
/// order finds it, each flatten's new list included (a `tree_map` over a 10,000-key dict
/// rebuilt it key by key on every call). A hash that two key lists share finds a template
/// whose keys are not this list's: the copy checks every key, and is then dropped.
fn identity(keys: &Bound<'_, PyList>) -> u64 {
    let n = keys.len();
    if n <= SMALL_KEYS {
        return keys.as_ptr() as usize as u64;
    }
    (0..n)
        .filter_map(|i| crate::ffi::list_item_addr(keys, i))
        .fold(n as u64, |h, a| {
            (h ^ (a as u64 >> 4)).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        })
}

/// The first slot of the pair where a key list of `identity` in `order` may sit (the other
/// is the next one).
fn pair_of(identity: u64, order: u64) -> usize {
    let h = (identity >> 4 ^ order).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (h >> (64 - SLOTS.trailing_zeros())) as usize & !1
}

/// This thread's template for `keys` in `order` (made and kept when these keys are seen a
/// second time); `None` when there is none yet, or a key is not an exact str (the dict is
/// built key by key).
fn template_for<'py>(
    py: Python<'py>,
    keys: &Bound<'py, PyList>,
    order: u64,
    slice: Option<&[usize]>,
    position: &dyn Fn(usize) -> usize,
) -> PyResult<Option<Bound<'py, PyDict>>> {
    let identity = identity(keys);
    let pair = pair_of(identity, order);
    let is_this =
        |t: &&Template| t.identity == identity && t.order == order && t.slice.as_deref() == slice;
    // The slot that holds these keys in this order, else the one to fill: an empty one, else
    // one whose keys were seen only once, else the pair's second (the first keeps its place).
    let (slot, seen) = TEMPLATES.with(|t| {
        let t = t.borrow();
        let Some(both) = t.get(pair..pair + 2) else {
            return (pair, None);
        };
        for (way, held) in both.iter().enumerate() {
            if let Some(held) = held.as_ref().filter(is_this) {
                return (
                    pair + way,
                    Some(held.dict.as_ref().map(|d| d.bind(py).clone())),
                );
            }
        }
        let free = both
            .iter()
            .position(Option::is_none)
            .or_else(|| {
                both.iter()
                    .position(|held| held.as_ref().is_some_and(|h| h.dict.is_none()))
            })
            .unwrap_or(1);
        (pair + free, None)
    });
    let n = keys.len();
    match seen {
        Some(Some(dict)) => return Ok(Some(dict)),
        // Seen once before (its keys checked then): the template is made now.
        Some(None) => {}
        None => {
            // Only str keys are remembered: hashing and comparing them runs no Python code,
            // and the cache then holds nothing a user could want collected.
            let all_str = (0..n).all(|i| {
                crate::ffi::list_item(keys, i)
                    .is_some_and(|k| k.is_exact_instance_of::<pyo3::types::PyString>())
            });
            if all_str {
                // First sight: remembered, built key by key this time.
                keep(slot, keys, identity, order, slice, None);
            }
            return Ok(None);
        }
    }
    let budgeted = if n > SMALL_KEYS { n } else { 0 };
    if budgeted > 0 && LARGE_KEYS_HELD.get() + budgeted > LARGE_KEYS_BUDGET {
        return Ok(None);
    }
    let dict = PyDict::new(py);
    let none = py.None();
    for i in 0..n {
        dict.set_item(keys.get_item(position(i))?, &none)?;
    }
    keep(slot, keys, identity, order, slice, Some((&dict, budgeted)));
    Ok(Some(dict))
}

/// Remembers `keys` in `order` in `slot`, with the template when there is one (and the keys
/// it counts against `LARGE_KEYS_BUDGET`).
fn keep(
    slot: usize,
    keys: &Bound<'_, PyList>,
    identity: u64,
    order: u64,
    slice: Option<&[usize]>,
    dict: Option<(&Bound<'_, PyDict>, usize)>,
) {
    let budgeted = dict.map_or(0, |(_, b)| b);
    let kept = Template {
        _keys: keys.clone().unbind(),
        identity,
        order,
        slice: slice.map(Box::from),
        dict: dict.map(|(d, _)| d.clone().unbind()),
        budgeted,
    };
    let old = TEMPLATES.with(|t| {
        let mut t = t.borrow_mut();
        if t.is_empty() {
            t.resize_with(SLOTS, || None);
        }
        t[slot].replace(kept)
    });
    let released = old.as_ref().map_or(0, |o| o.budgeted);
    LARGE_KEYS_HELD.set(LARGE_KEYS_HELD.get() + budgeted - released);
    // Dropped after the borrow ends: releasing a template runs no Python code, but a nested
    // call must never find the cache borrowed.
    drop(old);
}
