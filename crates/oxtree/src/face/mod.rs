//! The two faces over the one engine: the entry points `oxtree` (optree's names, signatures and
//! insertion-ordered dicts) and `oxtree.tree_util`/`oxtree.tree` (JAX's sorted dicts and texts)
//! call. Each face only chooses what it passes to the shared walks: dict order, whether `None`
//! is a leaf, its namespace, its error language.

pub mod jax;
pub mod options;
pub mod optree;

use pyo3::prelude::*;

/// Which library's semantics a treespec follows where optree and JAX differ. A face is asked
/// by rule ([`Face::rules`]), never by name: what differs is listed once, in [`Rules`], and
/// only message rendering asks which words ([`Rules::words`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Face {
    Optree,
    Jax,
}

/// Which library's texts an error or a repr is written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Words {
    Optree,
    Jax,
}

/// What a face decides, one field per difference between optree and JAX.
#[derive(Debug)]
pub struct Rules {
    /// A dict rebuilds in its original insertion order, which its node records (optree);
    /// otherwise in sorted key order (JAX).
    pub records_insertion_order: bool,
    /// Dict keys that do not sort raise (JAX's ValueError) instead of falling back to
    /// sorting by type name, then to insertion order (optree).
    pub sorts_dict_keys_strictly: bool,
    /// A namespace in `dict_insertion_ordered` mode opens its dicts in their own order.
    pub honours_insertion_ordered_mode: bool,
    /// `collections.deque` is a node (optree); a leaf otherwise (JAX).
    pub deque_is_node: bool,
    /// Struct sequences (`time.struct_time`) are nodes (optree); leaves otherwise (JAX).
    pub structseq_is_node: bool,
    /// A mapping matches a mapping node only of the same kind, in the same order for an
    /// OrderedDict and with the same factory for a defaultdict (JAX); otherwise any of the
    /// three mapping kinds with the same keys stands for any other (optree).
    pub mappings_match_exactly: bool,
    /// `none_is_leaf=True` may be chosen (optree); None is always a node otherwise (JAX).
    pub none_is_leaf_allowed: bool,
    /// Walks read JAX's registry for types oxtree does not register.
    pub reads_jax_registry: bool,
    /// Key paths are JAX's key objects (`SequenceKey`, `DictKey`, ...) rather than optree's
    /// raw entries.
    pub keys_are_jax_objects: bool,
    /// `node_data`, `walk`, the repr's node labels and the proto methods take jaxlib's forms.
    pub jax_forms: bool,
    /// A structure mismatch between the trees of a multi-tree call is reported as the first
    /// prefix error of the first tree against the other one (JAX).
    pub reports_prefix_errors: bool,
    /// Broadcasting a prefix applies `is_leaf` to the prefix only and rebuilds with the full
    /// tree's structure (JAX's `tree_broadcast`); otherwise it keeps the prefix's nodes and
    /// applies `is_leaf` to both trees (optree's `broadcast_prefix`).
    pub broadcasts_into_full_structure: bool,
    /// Whose texts errors and reprs use.
    pub words: Words,
}

const OPTREE: Rules = Rules {
    records_insertion_order: true,
    sorts_dict_keys_strictly: false,
    honours_insertion_ordered_mode: true,
    deque_is_node: true,
    structseq_is_node: true,
    none_is_leaf_allowed: true,
    mappings_match_exactly: false,
    reads_jax_registry: false,
    keys_are_jax_objects: false,
    jax_forms: false,
    reports_prefix_errors: false,
    broadcasts_into_full_structure: false,
    words: Words::Optree,
};

const JAX: Rules = Rules {
    records_insertion_order: false,
    sorts_dict_keys_strictly: true,
    honours_insertion_ordered_mode: false,
    deque_is_node: false,
    structseq_is_node: false,
    none_is_leaf_allowed: false,
    mappings_match_exactly: true,
    reads_jax_registry: true,
    keys_are_jax_objects: true,
    jax_forms: true,
    reports_prefix_errors: true,
    broadcasts_into_full_structure: true,
    words: Words::Jax,
};

impl Face {
    /// The face's name in a pickle's state and `PyTreeSpec._face`.
    pub fn name(self) -> &'static str {
        match self {
            Face::Optree => "optree",
            Face::Jax => "jax",
        }
    }

    /// The face `name` names.
    pub fn from_name(name: &str) -> Option<Face> {
        match name {
            "optree" => Some(Face::Optree),
            "jax" => Some(Face::Jax),
            _ => None,
        }
    }

    /// The face a core entry point's `jax=` flag names.
    pub fn of(jax: bool) -> Face {
        if jax {
            Face::Jax
        } else {
            Face::Optree
        }
    }

    /// The face's rules.
    #[inline]
    pub const fn rules(self) -> &'static Rules {
        match self {
            Face::Optree => &OPTREE,
            Face::Jax => &JAX,
        }
    }

    /// Whose texts the face's errors and reprs use.
    #[inline]
    pub const fn words(self) -> Words {
        self.rules().words
    }

    /// The number of faces, and each face's place among them: for a cache of treespecs,
    /// which carry their face, keyed by face.
    pub const COUNT: usize = 2;
    #[inline]
    pub const fn index(self) -> usize {
        self as usize
    }
}

/// An optional argument whose every value counts, None included (`tree_set_matching`'s
/// `value`, `tree_labels`'s `default`): the default `Given(None)` says it was left out.
pub struct Given<'py>(pub Option<Bound<'py, PyAny>>);

impl<'a, 'py> FromPyObject<'a, 'py> for Given<'py> {
    type Error = PyErr;

    fn extract(obj: pyo3::Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        Ok(Given(Some(obj.to_owned())))
    }
}
