//! JAX's key classes (`SequenceKey`, `DictKey`, `GetAttrKey`, `FlattenedIndexKey`), the
//! entries of JAX-style key paths (`oxtree.tree_util.tree_flatten_with_path`,
//! `oxtree.tree_flatten_with_keys`; `treespec/keys.rs` makes them), and `keystr`, which joins
//! their string forms.

use pyo3::basic::CompareOp;
use pyo3::prelude::*;
use pyo3::types::{PyString, PyTuple};

/// A position in a sequence: `SequenceKey(idx=0)`, printed `[0]`.
///
/// >>> path, leaf = tree_util.tree_leaves_with_path(['a', 'b'])[1]
/// >>> path, leaf, path[0].idx, keystr(path)
/// ((SequenceKey(idx=1),), 'b', 1, '[1]')
#[pyclass(frozen, module = "oxtree", name = "SequenceKey")]
pub struct SequenceKey {
    #[pyo3(get)]
    pub idx: isize,
}

/// A mapping key: `DictKey(key='a')`, printed `['a']`.
///
/// >>> [path for path, _ in tree_util.tree_leaves_with_path({'b': 1, 'a': 2})]
/// [(DictKey(key='a'),), (DictKey(key='b'),)]
/// >>> k = DictKey('a')
/// >>> k.key, str(k), k == DictKey(key='a')
/// ('a', "['a']", True)
#[pyclass(frozen, module = "oxtree", name = "DictKey")]
pub struct DictKey {
    #[pyo3(get)]
    pub key: Py<PyAny>,
}

/// An attribute or field: `GetAttrKey(name='x')`, printed `.x`.
///
/// >>> import collections
/// >>> Point = collections.namedtuple('Point', 'x y')
/// >>> tree_util.tree_leaves_with_path(Point(1, 2))
/// [((GetAttrKey(name='x'),), 1), ((GetAttrKey(name='y'),), 2)]
/// >>> GetAttrKey('y').name, str(GetAttrKey('y'))
/// ('y', '.y')
#[pyclass(frozen, module = "oxtree", name = "GetAttrKey")]
pub struct GetAttrKey {
    #[pyo3(get)]
    pub name: Py<PyString>,
}

/// A child of a node that names no keys: `FlattenedIndexKey(key=0)`, printed `[<flat index 0>]`.
///
/// >>> class Pair:
/// ...     def __init__(self, a, b): self.a, self.b = a, b
/// >>> tree_util.register_pytree_node(Pair, lambda p: ((p.a, p.b), None), lambda _, c: Pair(*c))
/// >>> [path for path, _ in tree_util.tree_leaves_with_path(Pair(1, 2))]
/// [(FlattenedIndexKey(key=0),), (FlattenedIndexKey(key=1),)]
/// >>> FlattenedIndexKey(1).key, str(FlattenedIndexKey(1))
/// (1, '[<flat index 1>]')
/// >>> unregister_pytree_node(Pair)
#[pyclass(frozen, module = "oxtree", name = "FlattenedIndexKey")]
pub struct FlattenedIndexKey {
    #[pyo3(get)]
    pub key: Py<PyAny>,
}

fn richcmp_result(py: Python<'_>, op: CompareOp, eq: Option<bool>) -> Py<PyAny> {
    match (op, eq) {
        (CompareOp::Eq, Some(e)) => pyo3::types::PyBool::new(py, e)
            .to_owned()
            .into_any()
            .unbind(),
        (CompareOp::Ne, Some(e)) => pyo3::types::PyBool::new(py, !e)
            .to_owned()
            .into_any()
            .unbind(),
        _ => py.NotImplemented(),
    }
}

#[pymethods]
impl SequenceKey {
    #[new]
    fn new(idx: isize) -> Self {
        SequenceKey { idx }
    }
    #[classattr]
    fn __match_args__(py: Python<'_>) -> PyResult<Bound<'_, PyTuple>> {
        PyTuple::new(py, ["idx"])
    }
    fn __repr__(&self) -> String {
        format!("SequenceKey(idx={})", self.idx)
    }
    fn __str__(&self) -> String {
        format!("[{}]", self.idx)
    }
    fn __hash__(&self) -> isize {
        let h = self.idx.wrapping_mul(0x5bd1_e995).wrapping_add(0x2f);
        if h == -1 {
            -2
        } else {
            h
        }
    }
    fn __richcmp__(&self, other: &Bound<'_, PyAny>, op: CompareOp) -> Py<PyAny> {
        let eq = other
            .cast::<SequenceKey>()
            .ok()
            .map(|o| o.get().idx == self.idx);
        richcmp_result(other.py(), op, eq)
    }
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyTuple>> {
        let py = slf.py();
        PyTuple::new(
            py,
            [
                slf.get_type().into_any(),
                PyTuple::new(py, [slf.get().idx])?.into_any(),
            ],
        )
    }
}

macro_rules! object_key {
    ($ty:ident, $field:ident, $fty:ty, $name:literal, $str:expr) => {
        #[pymethods]
        impl $ty {
            #[new]
            fn new($field: Py<$fty>) -> Self {
                $ty { $field }
            }
            #[classattr]
            fn __match_args__(py: Python<'_>) -> PyResult<Bound<'_, PyTuple>> {
                PyTuple::new(py, [stringify!($field)])
            }
            fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
                Ok(format!(
                    concat!($name, "({}={})"),
                    stringify!($field),
                    self.$field.bind(py).repr()?
                ))
            }
            fn __str__(&self, py: Python<'_>) -> PyResult<String> {
                let f: fn(&Bound<'_, PyAny>) -> PyResult<String> = $str;
                f(self.$field.bind(py).as_any())
            }
            fn __hash__(&self, py: Python<'_>) -> PyResult<isize> {
                let h = self
                    .$field
                    .bind(py)
                    .hash()?
                    .wrapping_mul(31)
                    .wrapping_add($name.len() as isize);
                Ok(if h == -1 { -2 } else { h })
            }
            fn __richcmp__(&self, other: &Bound<'_, PyAny>, op: CompareOp) -> PyResult<Py<PyAny>> {
                let py = other.py();
                let eq = match other.cast::<$ty>() {
                    Ok(o) => Some(self.$field.bind(py).as_any().eq(o.get().$field.bind(py))?),
                    Err(_) => None,
                };
                Ok(richcmp_result(py, op, eq))
            }
            fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyTuple>> {
                let py = slf.py();
                let arg = slf.get().$field.bind(py).clone().into_any();
                PyTuple::new(
                    py,
                    [
                        slf.get_type().into_any(),
                        PyTuple::new(py, [arg])?.into_any(),
                    ],
                )
            }
            fn __traverse__(
                &self,
                visit: pyo3::gc::PyVisit<'_>,
            ) -> Result<(), pyo3::PyTraverseError> {
                visit.call(&self.$field)
            }
        }
    };
}

object_key!(DictKey, key, PyAny, "DictKey", |k| Ok(format!(
    "[{}]",
    k.repr()?
)));
object_key!(GetAttrKey, name, PyString, "GetAttrKey", |k| Ok(format!(
    ".{}",
    k.str()?
)));
object_key!(FlattenedIndexKey, key, PyAny, "FlattenedIndexKey", |k| Ok(
    format!("[<flat index {}>]", k.str()?)
));

/// The field holding the value of a key object of another library with JAX's key class
/// names (`jax.tree_util.SequenceKey(idx=...)` and the others).
pub(crate) fn foreign_key_field(key: &Bound<'_, PyAny>) -> Option<&'static str> {
    let name = key.get_type().name().ok()?;
    let field = match name.to_str().ok()? {
        "SequenceKey" => "idx",
        "DictKey" | "FlattenedIndexKey" => "key",
        "GetAttrKey" => "name",
        _ => return None,
    };
    key.hasattr(field).ok()?.then_some(field)
}

/// The simple form of one key, as JAX's `keystr(simple=True)` prints it.
fn simple_entry(key: &Bound<'_, PyAny>) -> PyResult<String> {
    let py = key.py();
    if let Ok(k) = key.cast::<SequenceKey>() {
        return Ok(k.get().idx.to_string());
    }
    let inner = if let Ok(k) = key.cast::<DictKey>() {
        k.get().key.bind(py).clone()
    } else if let Ok(k) = key.cast::<GetAttrKey>() {
        k.get().name.bind(py).clone().into_any()
    } else if let Ok(k) = key.cast::<FlattenedIndexKey>() {
        k.get().key.bind(py).clone()
    } else if let Some(field) = foreign_key_field(key) {
        // JAX's own key objects (from jax.tree_util) print the same way.
        key.getattr(field)?
    } else {
        key.clone()
    };
    Ok(inner.str()?.to_string())
}

/// Joins the string forms of the keys of a path: `['a'][0].x`, or with `simple=True` the bare
/// keys (`a/0/x` with `separator='/'`).
///
/// >>> keystr((DictKey('a'), SequenceKey(0), GetAttrKey('x')))
/// "['a'][0].x"
/// >>> keystr((DictKey('a'), SequenceKey(0)), simple=True, separator='/')
/// 'a/0'
#[pyfunction]
#[pyo3(signature = (keys, *, simple = false, separator = ""))]
pub fn keystr(keys: &Bound<'_, PyAny>, simple: bool, separator: &str) -> PyResult<String> {
    let mut parts = Vec::new();
    for key in keys.try_iter()? {
        let key = key?;
        parts.push(if simple {
            simple_entry(&key)?
        } else {
            key.str()?.to_string()
        });
    }
    Ok(parts.join(separator))
}
