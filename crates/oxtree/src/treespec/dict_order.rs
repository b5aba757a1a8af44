//! The order of a dict's keys: sorted for the walk (the leaf order), with the insertion
//! order kept as positions, and the per-thread cache of sorted key lists that spares the
//! sort for dicts with the same str keys.

use std::cell::RefCell;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use smallvec::SmallVec;

use crate::errors::TreeError;
use crate::invariant::Invariant;
use crate::types;

/// Up to this many keys, leaf positions are found by a linear scan rather than a hash map.
pub const SMALL_MAPPING: usize = 16;

/// Untracks a key list whose items are all of atomic types (str, int, float, bool, None):
/// it cannot be part of a reference cycle, so the collector need not visit it (CPython
/// does the same for tuples). Returns whether it did.
pub fn untrack_if_atomic(keys: &Bound<'_, PyList>) -> bool {
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
pub type Small<T> = SmallVec<[T; SMALL_MAPPING]>;

/// A dict's keys as a new list, the same keys' addresses (kept theirs by that list), and
/// its values (owned), all in storage order, which for dict and defaultdict is insertion
/// order.
pub type DictParts<'py> = (Bound<'py, PyList>, Small<usize>, Vec<Bound<'py, PyAny>>);

/// The `DictParts` of `dict`.
pub fn dict_items<'py>(dict: &Bound<'py, PyDict>) -> PyResult<DictParts<'py>> {
    let n = dict.len();
    let mut addrs = Small::with_capacity(n);
    let mut values = Vec::with_capacity(n);
    let list = crate::ffi::dict_keys_values(dict, &mut addrs, &mut values)?;
    Ok((list, addrs, values))
}

/// How many sorted key lists each thread remembers: enough for trees of a few hundred
/// distinct dicts (a 1,000-leaf tree of random dicts has 151, which 64 slots had thrashed).
const KEY_LIST_SLOTS: usize = 1024;

/// The entries a key set may take (its set of slots). Direct-mapped (one), two key sets whose
/// addresses hashed alike evicted each other on every walk: a 1,000-leaf tree of random dicts
/// missed 28 times a flatten where 14 had the same keys. With four, and the least recently
/// used entry evicted, misses depend on how many key sets a walk meets, not where they lie.
const KEY_LIST_WAYS: usize = 4;

/// The most keys a dict may have for its key set to be remembered (`KEY_LISTS`): a model's
/// dict of its 24 layers is sorted once, not on every walk.
pub const CACHED_KEYS_MAX: usize = REORDER_MAX;

/// A sorted key list built for a small str-keyed dict, with the keys in the insertion order it
/// was built from and what the sort's permutation gives. A dict with the very same key objects
/// in the same order (the hundred `{'weight': ..., 'bias': ...}` dicts of a model) shares the
/// list and the permutation: no sort, no allocation. The list owns the keys, so no other
/// object can take their addresses while the entry lives. The lists are private to
/// treespecs, which never hand them out (node data and pickles copy them), so sharing one is
/// unobservable.
struct CachedKeys {
    /// `key_list_hash` of the keys: compared first, so most other entries of the set are
    /// passed over at one compare.
    hash: u64,
    /// When the entry was last found or made (`KeyLists::clock`): the set's oldest is evicted.
    used: u32,
    /// The keys' addresses (the list holds the keys, so no other object takes them).
    keys: Box<[usize]>,
    order: KeyOrder,
}

/// What walking a small str-keyed dict needs of its key set, worked out once per key set:
/// on a hit a walk only follows the swaps (a permutation read and checked at every dict, and
/// positions packed again, were half of what a 1,000-leaf tree of small dicts spent on them).
struct KeyOrder {
    /// The keys in leaf order.
    list: Py<PyList>,
    /// The swaps that turn the dict's values, in insertion order, into the walk's pending
    /// order (leaf order reversed): at most one fewer than the keys.
    swaps: [(u8, u8); CACHED_KEYS_MAX],
    num_swaps: u8,
    positions: KeyPositions,
}

/// A key set's insertion positions (see `Positions`).
enum KeyPositions {
    /// The insertion order is the leaf order.
    Same,
    /// Up to `SMALL_MAPPING` keys: the leaf position of the key inserted `i`-th as nibble `i`.
    Nibbles(u64),
    /// More keys: the leaf position of each key, in insertion order.
    Words(Box<[usize]>),
}

impl KeyOrder {
    /// The key set's order, from the sort's permutation (`order[j]`: the insertion index of
    /// leaf `j`'s key); None when `order` is no permutation.
    fn new(list: Py<PyList>, order: &[u8]) -> Option<KeyOrder> {
        let n = order.len();
        let mut swaps = [(0u8, 0u8); CACHED_KEYS_MAX];
        let mut num_swaps = 0;
        // The walk pops the values in leaf order: they lie in its reverse, the value of leaf
        // `j` (inserted `order[j]`-th) at `n - 1 - j`.
        let permutes = cycle_swaps(
            n,
            |k| usize::from(order[n - 1 - k]),
            |a, b| {
                swaps[usize::from(num_swaps)] = (a as u8, b as u8);
                num_swaps += 1;
            },
        );
        let positions = if order.iter().enumerate().all(|(j, &i)| j == usize::from(i)) {
            KeyPositions::Same
        } else if n <= SMALL_MAPPING {
            // The leaf position of the key inserted `i`-th is nibble `i` of `bits`.
            KeyPositions::Nibbles(order.iter().enumerate().fold(0u64, |bits, (j, &i)| {
                bits | ((j as u64) << (4 * u32::from(i)))
            }))
        } else {
            let mut words = vec![0; n];
            for (j, &i) in order.iter().enumerate() {
                *words.get_mut(usize::from(i))? = j;
            }
            KeyPositions::Words(words.into())
        };
        permutes.then_some(KeyOrder {
            list,
            swaps,
            num_swaps,
            positions,
        })
    }

    /// Puts `values` (the dict's, in insertion order) in pending order; the key list and the
    /// insertion positions.
    #[inline]
    fn apply<'py>(&self, py: Python<'py>, values: &mut [Bound<'py, PyAny>]) -> SortedKeys<'py> {
        for &(a, b) in &self.swaps[..usize::from(self.num_swaps)] {
            values.swap(usize::from(a), usize::from(b));
        }
        let positions = match &self.positions {
            KeyPositions::Same => None,
            &KeyPositions::Nibbles(bits) => Some(Positions::Nibbles {
                bits,
                len: values.len(),
            }),
            KeyPositions::Words(words) => Some(Positions::Words(words.clone())),
        };
        (self.list.clone_ref(py).into_bound(py), positions)
    }
}

/// One thread's sorted key lists: `KEY_LIST_SLOTS` entries in sets of `KEY_LIST_WAYS`.
struct KeyLists {
    entries: Vec<Option<CachedKeys>>,
    /// Counts lookups that found an entry and entries made (it may wrap: an eviction
    /// then picks a younger entry, nothing worse).
    clock: u32,
}

impl KeyLists {
    /// The slots of the set that a key set with this hash maps to (empty before the first
    /// entry is made).
    fn set_of(&mut self, hash: u64) -> &mut [Option<CachedKeys>] {
        let sets = KEY_LIST_SLOTS / KEY_LIST_WAYS;
        let set = (hash >> (64 - sets.trailing_zeros())) as usize;
        let start = set * KEY_LIST_WAYS;
        self.entries
            .get_mut(start..start + KEY_LIST_WAYS)
            .unwrap_or_default()
    }

    /// What is remembered for the keys at `keys` (their hash `hash`), applied to `values`
    /// (see `KeyOrder::apply`); None (values untouched) when nothing is.
    fn find<'py>(
        &mut self,
        py: Python<'py>,
        hash: u64,
        keys: &[usize],
        values: &mut [Bound<'py, PyAny>],
    ) -> Option<SortedKeys<'py>> {
        self.clock = self.clock.wrapping_add(1);
        let now = self.clock;
        let n = keys.len();
        let entry = self
            .set_of(hash)
            .iter_mut()
            .flatten()
            // Compared one by one: a slice compare of addresses calls `memcmp`.
            .find(|e| {
                e.hash == hash && e.keys.len() == n && e.keys.iter().zip(keys).all(|(a, b)| a == b)
            })?;
        entry.used = now;
        (values.len() == n).then(|| entry.order.apply(py, values))
    }

    /// Remembers `entry` in its set, in place of the least recently used entry when the set
    /// is full. Dropping an evicted entry only releases a list of str: no Python code runs.
    fn insert(&mut self, mut entry: CachedKeys) {
        if self.entries.is_empty() {
            self.entries.resize_with(KEY_LIST_SLOTS, || None);
        }
        self.clock = self.clock.wrapping_add(1);
        entry.used = self.clock;
        let set = self.set_of(entry.hash);
        let victim = set
            .iter()
            .position(Option::is_none)
            .or_else(|| (0..set.len()).min_by_key(|&i| set[i].as_ref().map_or(0, |e| e.used)));
        if let Some(slot) = victim.and_then(|i| set.get_mut(i)) {
            *slot = Some(entry);
        }
    }
}

thread_local! {
    static KEY_LISTS: RefCell<KeyLists> = const {
        RefCell::new(KeyLists {
            entries: Vec::new(),
            clock: 0,
        })
    };
}

/// A hash of a key set's addresses, in order.
fn key_list_hash(keys: &[usize]) -> u64 {
    keys.iter().fold(0u64, |h, &k| {
        (h ^ ((k as u64) >> 4)).wrapping_mul(0x9E37_79B9_7F4A_7C15)
    })
}

/// A dict's keys in leaf order and its insertion positions (if they differ).
pub type SortedKeys<'py> = (Bound<'py, PyList>, Option<Positions>);

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

/// A small dict (at most `CACHED_KEYS_MAX` items) whose keys are all exact `str`: keys
/// sorted by an insertion sort of indices (Unicode code-point order, as `list.sort` gives for
/// str), the key list built once in that order, the values pushed onto `pending` in its
/// reverse (the walk pops them in leaf order), and the insertion positions read off the
/// sort; `None` (having built and pushed nothing) for any other dict. Measured on a
/// gpt2-like dict (220 small dicts per flatten): half the instructions of sorting a key list
/// with `list.sort`, finding positions by identity and permuting the values.
pub fn small_str_items<'py>(
    dict: &Bound<'py, PyDict>,
    pending: &mut Vec<Bound<'py, PyAny>>,
) -> Option<SortedKeys<'py>> {
    // Most dicts are small: their keys' addresses fit a smaller array, zeroed at each dict.
    if dict.len() <= SMALL_MAPPING {
        str_items::<SMALL_MAPPING>(dict, pending)
    } else if dict.len() <= CACHED_KEYS_MAX {
        str_items::<CACHED_KEYS_MAX>(dict, pending)
    } else {
        None
    }
}

/// `small_str_items` for a dict of at most `N` items.
#[inline]
fn str_items<'py, const N: usize>(
    dict: &Bound<'py, PyDict>,
    pending: &mut Vec<Bound<'py, PyAny>>,
) -> Option<SortedKeys<'py>> {
    let py = dict.py();
    let n = dict.len();
    // The keys' addresses in a fixed array (`n` is known to fit); the values owned at once,
    // pushed onto `pending` in insertion order and put in place below. The keys are only
    // compared by address until a sort needs them.
    let mut keys = [0usize; N];
    let base = pending.len();
    if crate::ffi::str_keyed_items(dict, &mut keys, pending)? != n {
        pending.truncate(base);
        return None;
    }
    let keys = keys.get(..n)?;
    let hash = key_list_hash(keys);
    let values = &mut pending[base..];
    let found = KEY_LISTS.with(|cache| cache.borrow_mut().find(py, hash, keys, values));
    let sorted = found.or_else(|| {
        let order = sorted_key_list(dict, keys)?;
        let sorted = order.apply(py, values);
        if n > 0 {
            let entry = CachedKeys {
                hash,
                used: 0,
                keys: keys.into(),
                order,
            };
            KEY_LISTS.with(|cache| cache.borrow_mut().insert(entry));
        }
        Some(sorted)
    });
    if sorted.is_none() {
        pending.truncate(base);
    }
    sorted
}

/// The key order of a small str-keyed dict whose keys (in insertion order) are at the
/// addresses `keys` (at most `CACHED_KEYS_MAX`): its sorted key list, and what follows from
/// the sort's permutation. None when the dict no longer holds those keys.
#[cold]
fn sorted_key_list<'py>(dict: &Bound<'py, PyDict>, keys: &[usize]) -> Option<KeyOrder> {
    let n = keys.len();
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
    let mut order = [0u8; CACHED_KEYS_MAX];
    for (i, o) in order.iter_mut().enumerate() {
        *o = i as u8;
    }
    let sorted = order.get_mut(..n)?;
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
    KeyOrder::new(list.unbind(), sorted)
}

/// For each key in insertion order, its position in leaf (sorted) order; `None` when the two
/// orders agree. Both hold the same key objects, so positions are found by identity.
pub fn insertion_positions(
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
    cycle_swaps(values.len(), from, |a, b| values.swap(a, b))
}

/// The swaps, in order, that make `values[k]` the old `values[from(k)]` for a slice of `n`
/// values, each handed to `swap`, following the permutation's cycles. `from` must be a
/// permutation of `0..n` (`n` at most `REORDER_MAX`): otherwise no swap is handed out and
/// the result is false. A cycle of `m` values takes `m - 1` swaps, so there are fewer swaps
/// than values.
#[inline]
fn cycle_swaps(
    n: usize,
    from: impl Fn(usize) -> usize,
    mut swap: impl FnMut(usize, usize),
) -> bool {
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
            swap(k, next);
            k = next;
        }
    }
    true
}

/// Moves `values[i]` to `values[positions[i]]` for every `i`, following the permutation's
/// cycles in place.
pub fn permute<T>(values: &mut [T], positions: impl Fn(usize) -> usize) {
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
pub fn sort_keys_in_place(
    keys: &Bound<'_, PyList>,
    original: &[usize],
    strict: bool,
) -> PyResult<()> {
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
        return Err(TreeError::UnsortableKeys.caused_by(py, err));
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
            return Err(TreeError::UnsortableKeys.caused_by(py, e));
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
