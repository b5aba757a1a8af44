//! The kinds of node a treedef is made of.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyDict;

/// The kind of a node, with optree's numbering (exposed to Python as `PyTreeKind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    Custom = 0,
    Leaf = 1,
    None = 2,
    Tuple = 3,
    List = 4,
    Dict = 5,
    NamedTuple = 6,
    OrderedDict = 7,
    DefaultDict = 8,
    Deque = 9,
    StructSeq = 10,
}

impl Kind {
    pub const ALL: [Kind; 11] = [
        Kind::Custom,
        Kind::Leaf,
        Kind::None,
        Kind::Tuple,
        Kind::List,
        Kind::Dict,
        Kind::NamedTuple,
        Kind::OrderedDict,
        Kind::DefaultDict,
        Kind::Deque,
        Kind::StructSeq,
    ];

    pub fn from_u8(v: u8) -> Option<Kind> {
        Kind::ALL.get(usize::from(v)).copied()
    }

    /// Dict-like kinds: their children are addressed by key.
    pub fn is_mapping(self) -> bool {
        matches!(self, Kind::Dict | Kind::OrderedDict | Kind::DefaultDict)
    }
}

/// Python's `PyTreeKind`: an `enum.IntEnum` (as optree's is), made once at import.
static PY_TREE_KIND: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// optree's members in optree's numbering; the last two name no node oxtree makes:
/// `FROZENDICT` (Python 3.15's frozendict, not supported yet) and `NUM_KINDS` (the count).
const NAMES: [&str; 13] = [
    "CUSTOM",
    "LEAF",
    "NONE",
    "TUPLE",
    "LIST",
    "DICT",
    "NAMEDTUPLE",
    "ORDEREDDICT",
    "DEFAULTDICT",
    "DEQUE",
    "STRUCTSEQUENCE",
    "FROZENDICT",
    "NUM_KINDS",
];

/// The `PyTreeKind` enum class.
pub fn py_tree_kind(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    let cls = PY_TREE_KIND.get_or_try_init(py, || -> PyResult<Py<PyAny>> {
        let members: Vec<(&str, usize)> = NAMES.iter().enumerate().map(|(i, n)| (*n, i)).collect();
        let kwargs = PyDict::new(py);
        kwargs.set_item("module", "oxtree")?;
        let cls = py
            .import("enum")?
            .getattr("IntEnum")?
            .call(("PyTreeKind", members), Some(&kwargs))?;
        cls.setattr(
            "__doc__",
            "The kind of a treespec's root node (optree's numbering).\n\n\
             >>> tree_structure([1, 2]).kind\n\
             <PyTreeKind.LIST: 4>\n\
             >>> PyTreeKind(5).name, tree_structure(None).kind == PyTreeKind.NONE\n\
             ('DICT', True)\n",
        )?;
        Ok(cls.unbind())
    })?;
    Ok(cls.bind(py))
}

impl Kind {
    /// This kind as a member of Python's `PyTreeKind`.
    pub fn to_py<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        py_tree_kind(py)?.call1((self as u8,))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbering_round_trips() {
        for (i, k) in Kind::ALL.iter().enumerate() {
            assert_eq!(*k as usize, i);
            assert_eq!(Kind::from_u8(i as u8), Some(*k));
        }
        assert_eq!(Kind::from_u8(11), None);
    }

    #[test]
    fn mapping_kinds() {
        let mappings: Vec<Kind> = Kind::ALL
            .iter()
            .copied()
            .filter(|k| k.is_mapping())
            .collect();
        assert_eq!(
            mappings,
            vec![Kind::Dict, Kind::OrderedDict, Kind::DefaultDict]
        );
    }
}
