//! The kinds of node a treedef is made of.

use pyo3::prelude::*;

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

    pub fn to_py(self) -> PyTreeKind {
        match self {
            Kind::Custom => PyTreeKind::CUSTOM,
            Kind::Leaf => PyTreeKind::LEAF,
            Kind::None => PyTreeKind::NONE,
            Kind::Tuple => PyTreeKind::TUPLE,
            Kind::List => PyTreeKind::LIST,
            Kind::Dict => PyTreeKind::DICT,
            Kind::NamedTuple => PyTreeKind::NAMEDTUPLE,
            Kind::OrderedDict => PyTreeKind::ORDEREDDICT,
            Kind::DefaultDict => PyTreeKind::DEFAULTDICT,
            Kind::Deque => PyTreeKind::DEQUE,
            Kind::StructSeq => PyTreeKind::STRUCTSEQUENCE,
        }
    }
}

/// The kind of a treespec's root node (optree's numbering).
#[pyclass(eq, eq_int, frozen, hash, module = "oxtree", name = "PyTreeKind")]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(clippy::upper_case_acronyms, non_camel_case_types)]
pub enum PyTreeKind {
    CUSTOM = 0,
    LEAF = 1,
    NONE = 2,
    TUPLE = 3,
    LIST = 4,
    DICT = 5,
    NAMEDTUPLE = 6,
    ORDEREDDICT = 7,
    DEFAULTDICT = 8,
    DEQUE = 9,
    STRUCTSEQUENCE = 10,
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
