//! Passes PyO3's interpreter cfgs (`Py_3_12`, `Py_GIL_DISABLED`, `PyPy`, ...) to this crate,
//! so that code written against one CPython version's private layout is compiled only for
//! the versions it was checked against (see `treespec/dict_template.rs`).

fn main() {
    pyo3_build_config::use_pyo3_cfgs();
}
