//! The error catalogue's data: every error oxtree raises on its own account, as a value
//! holding what its message needs. Rendering (`errors/mod.rs` with `optree_words.rs` and
//! `jax_words.rs`) stands above it, so that the files that raise (`dict_order.rs`, ...) need
//! only this one.

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyList, PyType};

use crate::face::Face;
use crate::kind::Kind;

/// What a treespec node expects, copied out of the node for a message.
#[derive(Debug)]
pub struct Expected {
    pub kind: Kind,
    pub arity: usize,
    /// The node's type: the namedtuple or struct sequence class, the registered class.
    pub ty: Option<Py<PyAny>>,
    /// The key list of a mapping node.
    pub keys: Option<Py<PyList>>,
    /// A custom node's aux data; a defaultdict's factory.
    pub data: Option<Py<PyAny>>,
    /// The registered class is a dataclass registered by field lists (JAX's
    /// `register_dataclass`).
    pub dataclass: bool,
}

/// How an object failed to stand where a treespec node is.
#[derive(Debug)]
pub enum Mismatch {
    /// The node is None; the object is not.
    NotNone,
    /// The object is not an instance of the node's container type.
    NotInstance,
    /// A container of the right type with another number of children.
    Arity { got: usize },
    /// A namedtuple or struct sequence of another class.
    Type,
    /// A mapping whose keys differ from the node's: the object's keys (sorted when they
    /// sort) and, where the node keeps it, its default factory.
    Keys {
        got: Py<PyList>,
        factory: Option<Py<PyAny>>,
    },
    /// A registered node whose aux data differs.
    Data { got: Py<PyAny> },
}

/// A difference between two treespecs, found where one must stand for the other.
#[derive(Debug)]
pub enum SpecMismatch {
    /// Different node types (optree: "incompatible node types").
    Kind,
    /// The same container type with another number of children.
    Arity,
    /// Different key sets.
    Keys,
    /// Namedtuples or struct sequences of different classes.
    Type,
    /// Registered nodes of different classes.
    CustomType,
    /// Registered nodes with different aux data.
    Data,
}

/// What went wrong, with everything the message needs.
#[derive(Debug)]
pub enum TreeError {
    /// A tree does not have the structure a treespec expects (`flatten_up_to`, the other
    /// trees of a multi-tree map, broadcasting). Rendered in the face's words.
    Structure {
        face: Face,
        expected: Expected,
        mismatch: Mismatch,
        /// The object found there.
        found: Py<PyAny>,
        /// Where, in keystr form (`tree[1]['b']`, `tree[1] (in rests[0])`).
        path: Option<String>,
    },
    /// Two treespecs differ where one must be a prefix of the other (optree's
    /// `broadcast_to_common_suffix`). `expected`/`got`: both nodes, in optree's words.
    SpecStructure {
        mismatch: SpecMismatch,
        expected: Expected,
        got: Expected,
        path: Option<String>,
    },
    /// `unflatten` was given the wrong number of leaves. `what`: PyTreeSpec, GraphDef.
    LeafCount {
        face: Face,
        what: &'static str,
        expected: usize,
        got: usize,
    },
    /// A container is its own ancestor.
    Cycle { closes_at: String, ancestor: String },
    /// Nesting deeper than the depth limit, with no cycle.
    TooDeep { path: String, limit: usize },
    /// A container changed size while it was being walked.
    Mutated { path: String, what: &'static str },
    /// A Module attribute declared or registered with a kind but never assigned
    /// (AttributeError): the module has no value to flatten there.
    Unassigned {
        cls: String,
        name: String,
        kind: String,
    },
    /// A result of `what` (`PyTreeSpec.compose`, `graft`, `transform`) too large to allocate:
    /// `nodes`, its size, which came from the input (None: too large to count) (MemoryError).
    TooManyNodes {
        what: &'static str,
        nodes: Option<usize>,
    },
    /// The key path of a mismatch, retraced with the registered functions, meets a node with
    /// fewer children than the first walk found (a flatten function that answers otherwise
    /// the second time, or a tree changed in between).
    RetraceNoChild,
    /// Likewise, a node that no longer matches its treespec node.
    RetraceDiffers,

    // Registration (optree's words; the JAX face registers through the same checks).
    /// The namespace argument is not a str (TypeError). `got`: its repr.
    NamespaceNotStr { got: String },
    /// A builtin node type cannot be registered or unregistered (`what`: `re-registered`,
    /// `unregistered`).
    BuiltinType { cls: String, what: &'static str },
    /// The type is registered in that namespace already (`label`: `the global namespace`,
    /// `namespace 'x'`).
    AlreadyRegistered { cls: String, label: String },
    /// Unregistering a type that has no registration there (`what`: why, in optree's words).
    NotRegistered {
        cls: String,
        what: &'static str,
        label: String,
    },
    /// `path_entry_type` is no subclass of `PyTreeEntry` (TypeError).
    NotEntryType { got: String },
    /// A function argument is not callable (TypeError).
    NotCallable { what: String, type_name: String },
    /// A function was given an argument of the wrong type (TypeError): `function` expects
    /// `expected` (`a treespec as its first argument`), got an object of type `got`.
    ExpectsArgument {
        function: &'static str,
        expected: &'static str,
        got: String,
    },
    /// `is_leaf` that is neither callable nor None (TypeError).
    IsLeafNotCallable { type_name: String },
    /// A `*args` of at most one `what` value (`initial`, `identity`) given `got` (TypeError).
    TooManyValues { what: &'static str, got: usize },
    /// JAX's form of `PyTreeSpec.walk` called without its leaves (TypeError).
    WalkLeavesMissing,
    /// A child index out of range: `PyTreeSpec::{method}()` (`Child`, `Entry`) of a node
    /// with `arity` children (IndexError).
    ChildIndex {
        method: &'static str,
        index: isize,
        arity: isize,
    },
    /// `filter_jit` found an entry whose compiled cache is no dict (TypeError).
    CompiledCacheNotDict { type_name: String },
    /// `broadcast_flattened_prefix_with_treedef` given another number of prefix leaves than
    /// the prefix treedef has.
    PrefixLeafCount { got: usize, expected: usize },
    /// JAX's words: `broadcast_flattened_prefix_with_treedef`'s prefix treedef is no prefix
    /// of its full treedef.
    NotAPrefix,
    /// `graph_unflatten` met a node (`node_type`, at `path`) on a reference cycle that only
    /// nodes built from their children close, which no order of building can rebuild.
    ImmutableCycle { node_type: String, path: String },
    /// A warning's text with a NUL character (at byte `position`), which a warning cannot
    /// carry (Rust's `NulError` words).
    WarningNul { position: usize },
    /// A registration was given something that is no class (TypeError).
    NotAClass { got: String },
    /// `init_names` does not name every data and meta field.
    InitNames { expected: usize, got: usize },
    /// `_tuple_fields` of a class that is no namedtuple or struct sequence (TypeError).
    NotTupleClass { got: String },
    /// `describe` gave an answer the core cannot read (TypeError; oxtree's own bug).
    JaxDescription { ty: String, described: String },

    // What registered functions returned.
    /// A registered function's result of the wrong shape (TypeError, oxtree's words: optree
    /// takes any such result apart with Python's own errors).
    BadResult {
        registered: String,
        which: &'static str,
        expected: &'static str,
        why: String,
        result: String,
    },
    /// A flatten result that is not iterable: Python's words first (optree's), then which
    /// function returned what (TypeError).
    FlattenNotIterable {
        python: String,
        registered: String,
        result: String,
    },
    /// optree's RuntimeError for a flatten result of the wrong shape (`fault`: what it did).
    FlattenShape {
        ty: String,
        fault: FlattenFault,
        result: String,
    },
    /// JAX's ValueError for a flatten result that is not `(children, aux_data)`; `pair`: it
    /// was a pair, whose children were not iterable.
    JaxFlattenResult { shown: String, pair: bool },
    /// A class's `__init__` returned something else than None (TypeError, Python's words).
    InitReturned { type_name: String },
    /// Comparing two treedefs' aux data raised (JAX's ValueError; the error is the cause).
    /// `ty`: the registered type, when the node is a registered one.
    MetadataEquality { ty: Option<String> },

    // Dict keys.
    /// Dict keys that do not sort, on a face that sorts strictly (JAX's ValueError; the
    /// comparison's exception is the cause).
    UnsortableKeys,

    // States and reprs.
    /// A serialized form (`of`) that describes nothing oxtree can rebuild (`why`: what is
    /// wrong with it, where).
    State { of: StateOf, why: String },
    /// `serialize_using_proto` of a treespec of the main face.
    ProtoFaceOnly,
    /// JAX's refusal to serialize a registered node as a protocol buffer.
    ProtoUserNode,
    /// JAX's refusal to serialize a dict key that is no str as a protocol buffer.
    ProtoKeyNotStr,
    /// JAX's `from_iterable_tree` given an iterable of another length than its node's arity.
    IterableArity { arity: usize, got: usize },
    /// A namedtuple class whose `_fields` changed since the treespec was made (optree's
    /// words).
    NamedTupleFields {
        fields: usize,
        ty: String,
        arity: usize,
    },
    /// `unflatten`'s leaves are not iterable (TypeError). `type_name`: what they were.
    LeavesNotIterable { type_name: String },

    /// A function given to `PyTreeSpec.transform` returned something it may not (optree's
    /// words; `got`: what it returned, shown).
    TransformResult { fault: TransformFault, got: String },

    // Algebra.
    /// `tree_reduce` of a tree without leaves and no initial value (TypeError, functools'
    /// words).
    EmptyReduce,
    /// `tree_reduce_associative` of a tree without leaves and no identity (TypeError).
    EmptyAssociativeReduce,
    /// A transpose that cannot be done (`tree_transpose`, optree's `tree_transpose_map`).
    Transpose(TransposeFault),

    // Treespecs that do not go together (composing, broadcasting, merging).
    /// Treespecs with different `none_is_leaf` where `op` needs one: with both values
    /// (`PyTreeSpec.compose`) or without (`broadcast_to_common_suffix`).
    NoneIsLeafDiffers {
        op: &'static str,
        values: Option<(bool, bool)>,
    },
    /// Treespecs of different faces where `op` needs one.
    FacesDiffer { op: &'static str },
    /// Treespecs of two different non-global namespaces merged into one.
    NamespacesDiffer { a: String, b: String },
    /// optree's check that `subject` (`PyTreeSpecs`, `Tree structures`) share a namespace.
    SameNamespace {
        subject: &'static str,
        a: String,
        b: String,
    },
    /// optree's guard for merged treespecs: a custom node's type (`ty`, its repr) resolves
    /// in `namespace` to another registration than the one it holds; `what` completes
    /// "PyTreeSpecs cannot be ...".
    StaleRegistration {
        what: &'static str,
        ty: String,
        namespace: String,
    },
    /// `compose` given another number of inner treespecs than the outer one has leaves.
    ComposeCount { expected: usize, got: usize },
    /// `compose` given an inner treespec whose `none_is_leaf` is not the outer one's.
    ComposeNoneIsLeaf { none_is_leaf: bool },
    /// Broadcasting to a common suffix given no tree at all (TypeError).
    SuffixOfNothing,

    // Node data: a node rebuilt from its data and children.
    /// A registered node rebuilt from another number of children than it has (`cls`: its
    /// class; `expected`: None for a static node, which has none, else its data fields).
    NodeChildren {
        cls: String,
        expected: Option<usize>,
        got: usize,
    },
    /// A dataclass node's metadata that is no `((name, value), ...)` for its meta fields
    /// `names` (TypeError; `got`: shown).
    NodeMetadata {
        cls: String,
        names: Vec<String>,
        got: String,
    },
    /// JAX's `from_node_data_and_children` given node data and children that make no node.
    FromNodeData(NodeDataFault),
    /// A `_ModuleDef` made of name, kind and key lists of different lengths.
    ModuleDefCounts {
        names: usize,
        kinds: usize,
        keys: usize,
    },
    /// A Module's `what` (`aux data`, `_oxtree_def`) that is no `_ModuleDef` (TypeError;
    /// `got`: shown).
    NotModuleDef { what: &'static str, got: String },
    /// A Module rebuilt from children and aux data that do not fit (`cls`: its qualified
    /// name; `aux`: shown).
    ModuleRebuild {
        cls: String,
        children: usize,
        aux: String,
    },

    // Path patterns (`caller`: the function they were given to).
    /// A malformed glob: what is wrong (`what`) at which character (`at`, 0-based).
    BadPattern {
        caller: String,
        pattern: String,
        at: usize,
        what: String,
    },
    /// More patterns in one call than can be numbered.
    TooManyPatterns { caller: String },
    /// A compiled bytes regular expression, which cannot match key paths (TypeError;
    /// `shown`: its repr).
    BytesRegex { caller: String, shown: String },
    /// Something that is no path pattern (TypeError; `shown`: a short repr).
    NotAPattern {
        caller: String,
        type_name: String,
        shown: String,
    },

    // Labels and matching leaves (`tree_labels`, `tree_set_matching`).
    /// `tree_labels`'s rules that are neither a mapping nor a sequence of pairs (TypeError;
    /// `shown`: a short repr).
    NotRules { type_name: String, shown: String },
    /// An item of `tree_labels`'s rules that is no pair (TypeError; `shown`: a short repr).
    RuleNotAPair { shown: String },
    /// `tree_labels` without a default: no rule matches the leaf at `path` (its keystr's
    /// repr); `unmatched` of `total` leaves match none.
    NoRuleMatches {
        path: String,
        unmatched: usize,
        total: usize,
    },
    /// `tree_set_matching` given both `value` and `func` (`both`), or neither (TypeError).
    SetMatchingArgs { both: bool },

    /// A prefix tree is no prefix of the full tree: the first `PrefixMismatch`, rendered
    /// with the prefix tree's name (`in_axes`, `tree_map tree`).
    Prefix {
        name: String,
        mismatch: Arc<PrefixMismatch>,
    },
}

/// Where and how a prefix tree is no prefix of a full tree (`prefix_errors`): what the walk
/// found, rendered later, with the name the caller gives the prefix tree, in `face`'s words.
#[derive(Debug)]
pub struct PrefixMismatch {
    pub face: Face,
    /// The key path below the prefix tree's name (`[0]['a']`); empty at the root.
    pub path: String,
    /// The type of the prefix tree's subtree there.
    pub prefix_type: Py<PyType>,
    pub diff: PrefixDiff,
}

/// How the two subtrees of a `PrefixMismatch` differ.
#[derive(Debug)]
pub enum PrefixDiff {
    /// Subtrees of different types (`full_type`: the full tree's).
    NodeKindDiffers { full_type: Py<PyType> },
    /// JAX: a list or tuple of another length.
    LengthDiffers { prefix: usize, full: usize },
    /// JAX: a node with another number of children: each side's child keys (JAX's key
    /// objects).
    ChildKeysDiffer {
        prefix: Vec<Py<PyAny>>,
        full: Vec<Py<PyAny>>,
    },
    /// optree: mappings with different key sets, each in its node's order.
    KeysDiffer {
        full_type: Py<PyType>,
        prefix: Py<PyList>,
        full: Py<PyList>,
    },
    /// optree: a node with another number of children.
    ArityDiffers { prefix: usize, full: usize },
    /// The nodes' metadata differ (JAX's `flatten_one_level` metadata; optree's node data).
    MetadataDiffers { prefix: Py<PyAny>, full: Py<PyAny> },
}

/// What a registered flatten function returned wrong, in optree's RuntimeError.
#[derive(Debug)]
pub enum FlattenFault {
    /// Not a 2- or 3-tuple: its length.
    Length(usize),
    /// Children and entries differ in number.
    EntriesCount { children: usize, entries: usize },
}

/// Why a transpose cannot be done. optree's words, but for `Mismatch` and `NoFirstLeaf`.
#[derive(Debug)]
pub enum TransposeFault {
    /// optree's `tree_transpose_map` met a structure without leaves (`which`: `outer`,
    /// `inner`; `spec`: its repr).
    NoLeaves { which: &'static str, spec: String },
    /// optree: no inner structure given, and an outer one without leaves to infer it under
    /// (`outer`: its repr).
    CannotInfer { outer: String },
    /// JAX: no inner structure given, and no first subtree to infer it from (the IndexError
    /// of JAX's `[0]`, in Python's words).
    NoFirstLeaf,
    /// optree: the outer and the inner structure differ in `none_is_leaf`.
    NoneIsLeaf,
    /// optree: a structure without leaves (both reprs).
    Empty { outer: String, inner: String },
    /// The tree's structure is not the outer one composed with the inner one (TypeError, in
    /// `face`'s words; both reprs).
    Mismatch {
        face: Face,
        expected: String,
        got: String,
    },
}

/// The serialized forms a treespec or graph is rebuilt from.
#[derive(Debug, Clone, Copy)]
pub enum StateOf {
    /// A pickled PyTreeSpec (`__setstate__`, `_from_nodes`).
    PyTreeSpec,
    /// A pickled GraphDef.
    GraphDef,
    /// JAX's `PyTreeDefProto` bytes (`deserialize_using_proto`).
    Proto,
}

/// Why JAX's node data (`(type, data)` or None) and children make no node (`arity`: the
/// number of children).
#[derive(Debug)]
pub enum NodeDataFault {
    /// A leaf (None) given children.
    LeafChildren,
    /// Neither `(type, data)` nor None.
    NotAPair,
    /// `node_data[0]` is no type.
    NotAType,
    /// A None node given children.
    NoneChildren { arity: usize },
    /// A defaultdict's data that is no `(factory, keys)`.
    DefaultDictData,
    /// Another number of dict keys than children.
    KeyCount { keys: usize, arity: usize },
    /// Unhashable dict keys.
    UnhashableKeys,
    /// Repeated dict keys (`keys`: shown).
    RepeatedKeys { keys: String },
    /// Dict keys not in sorted order.
    UnsortedKeys,
    /// A namedtuple class (`ty`: its name) with another number of fields than children.
    Fields {
        ty: String,
        fields: usize,
        arity: usize,
    },
    /// A type that is no registered node (`ty`: its name).
    NotRegistered { ty: String },
    /// Data and children that do not fit the type's registration (`why`: the registration's
    /// check, `custom::misfit`).
    Misfit { why: String },
}

/// What a `PyTreeSpec.transform` function returned wrong. `input`: the treespec it was
/// given, shown.
#[derive(Debug)]
pub enum TransformFault {
    /// No PyTreeSpec (TypeError).
    NotASpec { input: String },
    /// A treespec with the other `none_is_leaf` (the input's: `none_is_leaf`).
    NoneIsLeaf { none_is_leaf: bool, input: String },
    /// A treespec of another namespace than `expected` (`got` shows its namespace).
    Namespace { expected: String },
    /// A node's treespec with another number of leaves than the node's `arity`.
    Arity { arity: usize, input: String },
    /// A node's treespec that is more than one level deep.
    NotOneLevel { input: String },
}

/// `repr(obj)`, or `<T object>` when its `__repr__` fails.
#[cold]
pub fn repr(obj: &Bound<'_, PyAny>) -> String {
    match obj.repr() {
        Ok(r) => r.to_string(),
        Err(_) => format!("<{} object>", type_name(obj)),
    }
}

pub fn repr_of(py: Python<'_>, obj: &Option<Py<PyAny>>) -> String {
    obj.as_ref()
        .map(|o| repr(o.bind(py)))
        .unwrap_or_else(|| "None".into())
}

/// A short `repr` of an object for messages: at most `limit` characters.
#[cold]
pub fn short_repr(obj: &Bound<'_, PyAny>, limit: usize) -> String {
    let text = match obj.repr() {
        Ok(r) => r.to_string(),
        Err(_) => format!("<{} object>", type_name(obj)),
    };
    if text.chars().count() <= limit {
        text
    } else {
        let cut: String = text.chars().take(limit.saturating_sub(3)).collect();
        format!("{cut}...")
    }
}

/// `str(obj)`, or its `repr` when `__str__` fails.
#[cold]
pub fn str_of(obj: &Bound<'_, PyAny>) -> String {
    obj.str()
        .map(|s| s.to_string())
        .unwrap_or_else(|_| repr(obj))
}

/// The `__name__` of an object's type.
pub fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".to_owned())
}
