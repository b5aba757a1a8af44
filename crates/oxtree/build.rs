//! Passes PyO3's interpreter cfgs (`Py_3_12`, `Py_GIL_DISABLED`, `PyPy`, ...) to this crate,
//! and two of its own for code written against one CPython version's private API:
//! - `cpython_private_api`: CPython 3.11, 3.12 or 3.13 with its full API (no limited API),
//!   whose libpython exports the private functions `ffi/` declares itself;
//! - `cpython_private_layout`: those with the GIL, whose private layouts (dicts, instance
//!   values) `ffi/dict_layout.rs` and `ffi/instance_fields.rs` mirror.
//!
//! Code under them is compiled only for those interpreters: an extension is built for one.

use pyo3_build_config::{PythonAbiKind, PythonImplementation};

fn main() {
    pyo3_build_config::use_pyo3_cfgs();
    let config = pyo3_build_config::get();
    println!("cargo::rustc-check-cfg=cfg(cpython_private_api)");
    println!("cargo::rustc-check-cfg=cfg(cpython_private_layout)");
    let (abi, version) = (config.target_abi(), config.version());
    let private_api = abi.implementation() == PythonImplementation::CPython
        && matches!(abi.kind(), PythonAbiKind::VersionSpecific(_))
        && version.major == 3
        && (11..=13).contains(&version.minor);
    if private_api {
        println!("cargo::rustc-cfg=cpython_private_api");
        if !config.is_free_threaded() {
            println!("cargo::rustc-cfg=cpython_private_layout");
        }
    }
}
