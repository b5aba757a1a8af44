//! The two faces over the one engine: the entry points `oxtree` (optree's names, signatures and
//! insertion-ordered dicts) and `oxtree.tree_util`/`oxtree.tree` (JAX's sorted dicts and texts)
//! call. Each face only chooses what it passes to the shared walks: dict order, whether `None`
//! is a leaf, its namespace, its error language.

pub mod jax;
pub mod optree;
