//! Every raw CPython access of the core, and every other `unsafe` operation, behind small
//! typed safe wrappers, one file per concern. No file outside this folder contains `unsafe`
//! (a test in `tests/reliability/test_source_rules.py` keeps it so). The folder is the
//! crate's ground floor: it imports nothing of the crate but `invariant.rs`.
//!
//! Each wrapper states its contract once, in a `SAFETY:` comment, and checks at run time
//! whatever its callers could get wrong (an index, a length, a type), so that no input of
//! safe code can make it misbehave; the checks are compares on values already loaded, a
//! branch never taken on the hot paths. Every wrapper is `#[inline]`: it compiles to the
//! code the callers had inline before.
//!
//! Private CPython layouts (the dict tables the template copy writes into, the dict
//! version tag) are compiled only for the interpreters whose layout they mirror, by the
//! cfgs `build.rs` derives from pyo3-build-config (`cpython_private_layout`: CPython 3.11 to
//! 3.13 with the GIL; `cpython_private_api`: their private functions): an extension is built
//! for one interpreter, so nothing is decided at run time.

pub mod dict_layout;
pub mod dicts;
pub mod instance_fields;
pub mod memory;
pub mod nodes;
pub mod objects;
pub mod sequences;
pub mod type_slots;

pub use dict_layout::*;
pub use dicts::*;
pub use instance_fields::*;
pub use memory::*;
pub use objects::*;
pub use sequences::*;
pub use type_slots::*;
