//! The methods Python sees on `PathPattern`.

use std::fmt::Write as _;

use pyo3::prelude::*;
use pyo3::types::PyTuple;

use super::{Matcher, PathPattern, Seg, NO_MATCH};
use crate::errors::TreeError;
use crate::treespec::select::leaf_matches;
use crate::treespec::PyTreeSpec;

#[pymethods]
impl PathPattern {
    #[new]
    #[pyo3(signature = (*patterns))]
    fn new(patterns: &Bound<'_, PyTuple>) -> PyResult<Self> {
        let (matcher, sources) = Matcher::compile("PathPattern", patterns.iter())?;
        Ok(PathPattern {
            sources: PyTuple::new(patterns.py(), sources)?.unbind(),
            matcher,
        })
    }

    /// The patterns, each a str (a glob) or a compiled ``re.Pattern``.
    ///
    /// >>> PathPattern('a', PathPattern('b.*')).patterns
    /// ('a', 'b.*')
    #[getter]
    fn patterns(&self, py: Python<'_>) -> Py<PyTuple> {
        self.sources.clone_ref(py)
    }

    /// Whether the key path ``path`` (a sequence of key objects, as ``tree_leaves_with_path``
    /// gives) matches any of the patterns.
    ///
    /// >>> PathPattern("['params']['dense_*']['kernel']").match(
    /// ...     (DictKey('params'), DictKey('dense_1'), DictKey('kernel')))
    /// True
    fn r#match(&self, path: &Bound<'_, PyAny>) -> PyResult<bool> {
        let py = path.py();
        let mut sets = Vec::new();
        self.matcher.push_start(&mut sets);
        let mut text = String::new();
        let mut keys = Vec::new();
        for key in path.try_iter()? {
            let key = key?;
            // A Module's key in JAX's view (`oxtree.module.ModulePath`) stands for a path.
            if key.get_type().name()?.to_str()? == "ModulePath" {
                if let Ok(inner) = key.getattr("path") {
                    keys.extend(inner.try_iter()?.collect::<PyResult<Vec<_>>>()?);
                    continue;
                }
            }
            keys.push(key);
        }
        for key in &keys {
            let mut seg = Seg::of_key(key)?;
            if self.matcher.needs_text() {
                seg.write(&mut text)?;
            }
            let empty = self.matcher.push_step(&mut sets, &mut seg)?;
            let w = self.matcher.words();
            sets.drain(sets.len() - 2 * w..sets.len() - w);
            if empty && !self.matcher.needs_text() {
                return Ok(false);
            }
        }
        Ok(self.matcher.first(py, &sets, &text, true)? != NO_MATCH)
    }

    /// For each leaf of ``structure`` (a treespec, or a graphdef's leaves, references
    /// excluded), whether its key path matches.
    fn _leaf_mask(&self, structure: &Bound<'_, PyAny>) -> PyResult<Vec<bool>> {
        leaf_mask(self, structure)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let mut out = String::from("PathPattern(");
        for (i, source) in self.sources.bind(py).iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            let _ = write!(out, "{}", source.repr()?);
        }
        out.push(')');
        Ok(out)
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> PyResult<bool> {
        match other.cast::<PathPattern>() {
            Ok(o) => self
                .sources
                .bind(other.py())
                .eq(o.get().sources.bind(other.py())),
            Err(_) => Ok(false),
        }
    }

    fn __hash__(&self, py: Python<'_>) -> PyResult<isize> {
        self.sources.bind(py).hash()
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyTuple>> {
        let py = slf.py();
        PyTuple::new(
            py,
            [
                slf.get_type().into_any(),
                slf.get().sources.bind(py).clone().into_any(),
            ],
        )
    }
}

/// `PathPattern._leaf_mask`: for each leaf of a treespec, or of a graphdef (its references
/// left out), whether its key path matches.
pub fn leaf_mask(pattern: &PathPattern, structure: &Bound<'_, PyAny>) -> PyResult<Vec<bool>> {
    let py = structure.py();
    let m = &pattern.matcher;
    if let Ok(spec) = structure.cast::<PyTreeSpec>() {
        let hits = leaf_matches(py, spec.get(), m, true)?;
        return Ok(hits.into_iter().map(|h| h != NO_MATCH).collect());
    }
    if let Ok(gd) = structure.cast::<crate::graph::GraphDef>() {
        let gd = gd.get();
        let hits = leaf_matches(py, gd.spec(py), m, true)?;
        let mut refs = gd.ref_at().map(|(leaf, _)| leaf).peekable();
        let mut out = Vec::with_capacity(hits.len());
        for (i, h) in hits.into_iter().enumerate() {
            if refs.peek() == Some(&i) {
                refs.next();
            } else {
                out.push(h != NO_MATCH);
            }
        }
        return Ok(out);
    }
    Err(TreeError::ExpectsArgument {
        function: "_leaf_mask",
        expected: "a treespec or a graphdef",
        got: crate::errors::type_name(structure),
    }
    .into())
}
