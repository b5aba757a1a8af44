//! Broken invariants of oxtree's own: a SystemError that asks for a report, never a panic.
//! The ground floor of the crate (it imports nothing of it), so that every file, `ffi/`
//! included, can raise one.

use pyo3::exceptions::PySystemError;
use pyo3::prelude::*;

/// An `Err` naming the broken invariant (a SystemError, see `internal_error`): what code
/// reachable from Python uses instead of `expect`/`unwrap`/`unreachable!`.
#[macro_export]
macro_rules! internal {
    ($($arg:tt)*) => {
        $crate::invariant::internal_error(format!($($arg)*))
    };
}

const REPORT: &str = "This is a bug in oxtree: please report this to oxtree with the code \
                      that raised it.";

/// The SystemError for the broken invariant `what`.
#[cold]
pub fn internal_error(what: String) -> PyErr {
    PySystemError::new_err(message(&what))
}

fn message(what: &str) -> String {
    format!("internal error: {what}.\n{REPORT}")
}

/// `value`, or a SystemError naming the invariant `what` when it is None.
#[cold]
#[inline(never)]
fn missing(what: &str) -> PyErr {
    internal!("{what}")
}

/// Unwraps an invariant: Some/Ok, else a SystemError saying `what` was expected.
pub trait Invariant<T> {
    fn invariant(self, what: &str) -> PyResult<T>;
}

impl<T> Invariant<T> for Option<T> {
    #[inline]
    fn invariant(self, what: &str) -> PyResult<T> {
        match self {
            Some(v) => Ok(v),
            None => Err(missing(what)),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_internal_error_asks_for_a_report() {
        assert!(super::message("a node without keys").contains("please report this to oxtree"));
    }
}
