//! Memory: vectors and shared references.

/// Pushes `make()` onto `v` and returns it there, building the value straight in the vector's memory: a
/// `push(make())` of a large value was built on the stack and copied.
#[inline(always)]
pub fn push_built<T>(v: &mut Vec<T>, make: impl FnOnce() -> T) -> &mut T {
    v.reserve(1);
    let len = v.len();
    // SAFETY: room for one more element was just reserved; the slot past the length is
    // written once, and only then does the length cover it.
    unsafe {
        let slot = v.as_mut_ptr().add(len);
        slot.write(make());
        v.set_len(len + 1);
        &mut *slot
    }
}

/// Moves the last element of `from` to the end of `to`, memory to memory, and returns it
/// there; None when `from` is empty.
#[inline(always)]
pub fn move_last<'v, T>(from: &mut Vec<T>, to: &'v mut Vec<T>) -> Option<&'v mut T> {
    let last = from.len().checked_sub(1)?;
    to.reserve(1);
    let len = to.len();
    // SAFETY: `from[last]` is initialized and is given up (the length is cut) as it is copied
    // bitwise into the slot past `to`'s length, reserved just above, which the length then
    // covers: the value changes owner once and is neither dropped nor duplicated.
    unsafe {
        std::ptr::copy_nonoverlapping(from.as_ptr().add(last), to.as_mut_ptr().add(len), 1);
        from.set_len(last);
        to.set_len(len + 1);
        Some(&mut *to.as_mut_ptr().add(len))
    }
}

/// Drops the elements of `v` for which `holds_something` is true and frees the buffer,
/// skipping the drop glue of the others, which the caller vouches hold nothing: the glue
/// called a function per element (an eighth of a 500-deep chain's flatten). A wrong vouch
/// leaks, never frees twice.
#[inline]
pub fn drop_sparse<T>(mut v: Vec<T>, holds_something: impl Fn(&T) -> bool) {
    clear_sparse(&mut v, holds_something);
}

/// `drop_sparse` that keeps the buffer: `v` is left empty, its capacity unchanged.
#[inline]
pub fn clear_sparse<T>(v: &mut Vec<T>, holds_something: impl Fn(&T) -> bool) {
    let len = v.len();
    // SAFETY: the length is cut to zero first, so no element is dropped twice even if a drop
    // below panics (the rest then leak); each of the `len` initialized elements is dropped
    // at most once, here.
    unsafe {
        v.set_len(0);
        let base = v.as_mut_ptr();
        for i in 0..len {
            let item = base.add(i);
            if holds_something(&*item) {
                std::ptr::drop_in_place(item);
            }
        }
    }
}

/// An empty vector of `B` in the allocation of `v` (emptied), when the two element types
/// have one size and alignment; else a new empty vector.
pub fn retype<A, B>(mut v: Vec<A>) -> Vec<B> {
    v.clear();
    if std::mem::size_of::<A>() != std::mem::size_of::<B>()
        || std::mem::align_of::<A>() != std::mem::align_of::<B>()
        || std::mem::size_of::<A>() == 0
    {
        return Vec::new();
    }
    let mut v = std::mem::ManuallyDrop::new(v);
    // SAFETY: `A` and `B` have one size and alignment (checked above), so the allocation's
    // layout is the one a `Vec<B>` of this capacity would have made; the vector is empty, so
    // no value is reinterpreted; pointer and capacity are owned by the result alone.
    unsafe { Vec::from_raw_parts(v.as_mut_ptr().cast::<B>(), 0, v.capacity()) }
}
