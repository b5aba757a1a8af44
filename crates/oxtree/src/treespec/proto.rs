//! JAX's treedef methods that the main face has no counterpart of: `serialize_using_proto`
//! and `deserialize_using_proto` (JAX's `PyTreeDefProto` wire format, byte for byte) and
//! `from_iterable_tree`.
//!
//! The proto holds only what JAX serializes: leaf, list, None, tuple and str-keyed dict
//! nodes in post-order, dict keys as indices into a table of interned strings:
//!
//! ```text
//! PyTreeDefProto     { repeated PyTreeNodeDefProto nodes = 1; repeated string interned_strings = 2; }
//! PyTreeNodeDefProto { uint32 arity = 1; PyTreeNodeType type = 2; DictKeysProto dict_keys = 3; }
//! DictKeysProto      { repeated uint32 str_id = 1; }   (packed)
//! PyTreeNodeType     { INVALID = 0; LEAF = 1; LIST = 2; NONE = 3; TUPLE = 4; DICT = 5; }
//! ```

use std::collections::HashMap;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString, PyTuple};

use super::{pickle, PyTreeSpec};
use crate::errors::{StateOf, TreeError};
use crate::kind::Kind;

const LEAF: u64 = 1;
const LIST: u64 = 2;
const NONE: u64 = 3;
const TUPLE: u64 = 4;
const DICT: u64 = 5;

/// Protobuf wire types.
const VARINT: u64 = 0;
const FIXED64: u64 = 1;
const LEN: u64 = 2;
const FIXED32: u64 = 5;

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_tag(out: &mut Vec<u8>, field: u64, wire: u64) {
    put_varint(out, field << 3 | wire);
}

fn put_len(out: &mut Vec<u8>, field: u64, bytes: &[u8]) {
    put_tag(out, field, LEN);
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// The bytes JAX's `serialize_using_proto` gives for the same treedef.
pub fn serialize<'py>(spec: &PyTreeSpec, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
    if !spec.face.rules().jax_forms {
        return Err(TreeError::ProtoFaceOnly.into());
    }
    let mut strings: Vec<String> = Vec::new();
    let mut interned: HashMap<String, u64> = HashMap::new();
    let mut out = Vec::new();
    let mut node_bytes = Vec::new();
    for node in &spec.nodes {
        node_bytes.clear();
        let kind = match node.kind {
            Kind::Leaf => LEAF,
            Kind::List => LIST,
            Kind::None => NONE,
            Kind::Tuple => TUPLE,
            Kind::Dict => DICT,
            _ => return Err(TreeError::ProtoUserNode.into()),
        };
        if node.arity != 0 {
            put_tag(&mut node_bytes, 1, VARINT);
            put_varint(&mut node_bytes, node.arity as u64);
        }
        put_tag(&mut node_bytes, 2, VARINT);
        put_varint(&mut node_bytes, kind);
        if let (Kind::Dict, Some(keys)) = (node.kind, node.keys()) {
            let mut ids = Vec::new();
            for key in keys.bind(py).iter() {
                let Ok(key) = key.cast::<PyString>() else {
                    return Err(TreeError::ProtoKeyNotStr.into());
                };
                let key = key.to_str()?.to_owned();
                let next = strings.len() as u64;
                let id = *interned.entry(key.clone()).or_insert_with(|| {
                    strings.push(key);
                    next
                });
                put_varint(&mut ids, id);
            }
            if !ids.is_empty() {
                let mut dict_keys = Vec::new();
                put_len(&mut dict_keys, 1, &ids);
                put_len(&mut node_bytes, 3, &dict_keys);
            }
        }
        put_len(&mut out, 1, &node_bytes);
    }
    for s in &strings {
        put_len(&mut out, 2, s.as_bytes());
    }
    Ok(PyBytes::new(py, &out))
}

fn malformed(what: &str) -> PyErr {
    TreeError::State {
        of: StateOf::Proto,
        why: what.to_owned(),
    }
    .into()
}

/// A reader of protobuf fields over a byte slice.
struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

/// One field's value: a varint, or the bytes of a length-delimited field.
enum Value<'a> {
    Int(u64),
    Bytes(&'a [u8]),
    Other,
}

impl<'a> Reader<'a> {
    fn new(data: &'a [u8]) -> Self {
        Reader { data, pos: 0 }
    }

    fn varint(&mut self) -> PyResult<u64> {
        let mut v: u64 = 0;
        for shift in (0..64).step_by(7) {
            let Some(&b) = self.data.get(self.pos) else {
                return Err(malformed("truncated varint"));
            };
            self.pos += 1;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(malformed("varint too long"))
    }

    fn take(&mut self, n: usize) -> PyResult<&'a [u8]> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.data.len())
            .ok_or_else(|| malformed("truncated field"))?;
        let bytes = &self.data[self.pos..end];
        self.pos = end;
        Ok(bytes)
    }

    /// The next field as (field number, value); None at the end.
    fn field(&mut self) -> PyResult<Option<(u64, Value<'a>)>> {
        if self.pos == self.data.len() {
            return Ok(None);
        }
        let tag = self.varint()?;
        let value = match tag & 7 {
            VARINT => Value::Int(self.varint()?),
            LEN => {
                let n = usize::try_from(self.varint()?).map_err(|_| malformed("bad length"))?;
                Value::Bytes(self.take(n)?)
            }
            FIXED64 => {
                self.take(8)?;
                Value::Other
            }
            FIXED32 => {
                self.take(4)?;
                Value::Other
            }
            _ => return Err(malformed("unknown wire type")),
        };
        Ok(Some((tag >> 3, value)))
    }
}

struct ProtoNode {
    arity: u64,
    kind: u64,
    key_ids: Vec<u64>,
}

fn parse_node(bytes: &[u8]) -> PyResult<ProtoNode> {
    let mut node = ProtoNode {
        arity: 0,
        kind: 0,
        key_ids: Vec::new(),
    };
    let mut r = Reader::new(bytes);
    while let Some((field, value)) = r.field()? {
        match (field, value) {
            (1, Value::Int(v)) => node.arity = v,
            (2, Value::Int(v)) => node.kind = v,
            (3, Value::Bytes(b)) => {
                let mut keys = Reader::new(b);
                while let Some((field, value)) = keys.field()? {
                    match (field, value) {
                        (1, Value::Int(id)) => node.key_ids.push(id),
                        (1, Value::Bytes(packed)) => {
                            let mut ids = Reader::new(packed);
                            while ids.pos < packed.len() {
                                node.key_ids.push(ids.varint()?);
                            }
                        }
                        (1, Value::Other) => return Err(malformed("bad dict key id")),
                        _ => {}
                    }
                }
            }
            (1..=3, _) => return Err(malformed("a node field has the wrong wire type")),
            _ => {}
        }
    }
    Ok(node)
}

/// The JAX-face treedef of JAX's `serialize_using_proto` bytes. Every node goes through the
/// checks pickled treespecs get, so malformed bytes raise ValueError.
pub fn deserialize(py: Python<'_>, data: &[u8]) -> PyResult<PyTreeSpec> {
    let mut nodes = Vec::new();
    let mut strings = Vec::new();
    let mut r = Reader::new(data);
    while let Some((field, value)) = r.field()? {
        match (field, value) {
            (1, Value::Bytes(b)) => nodes.push(parse_node(b)?),
            (2, Value::Bytes(b)) => strings.push(
                std::str::from_utf8(b).map_err(|_| malformed("an interned string is not UTF-8"))?,
            ),
            (1 | 2, _) => return Err(malformed("a field has the wrong wire type")),
            _ => {}
        }
    }
    let none = || py.None().into_bound(py);
    let mut state_nodes = Vec::with_capacity(nodes.len());
    for node in &nodes {
        let kind = match node.kind {
            LEAF => Kind::Leaf,
            LIST => Kind::List,
            NONE => Kind::None,
            TUPLE => Kind::Tuple,
            DICT => Kind::Dict,
            _ => return Err(malformed("unknown node type")),
        };
        let keys = if kind == Kind::Dict {
            let keys = node
                .key_ids
                .iter()
                .map(|&id| {
                    usize::try_from(id)
                        .ok()
                        .and_then(|i| strings.get(i))
                        .map(|s| PyString::new(py, s))
                        .ok_or_else(|| malformed("dict_key out of range"))
                })
                .collect::<PyResult<Vec<_>>>()?;
            PyTuple::new(py, keys)?.into_any()
        } else {
            none()
        };
        let arity = usize::try_from(node.arity).map_err(|_| malformed("arity too large"))?;
        state_nodes.push(PyTuple::new(
            py,
            [
                (kind as u8).into_pyobject(py)?.into_any(),
                arity.into_pyobject(py)?.into_any(),
                none(),
                keys,
                none(),
                none(),
                none(),
            ],
        )?);
    }
    let state = PyTuple::new(
        py,
        [
            1u32.into_pyobject(py)?.into_any(),
            pyo3::types::PyBool::new(py, false).to_owned().into_any(),
            "".into_pyobject(py)?.into_any(),
            PyTuple::new(py, state_nodes)?.into_any(),
            "jax".into_pyobject(py)?.into_any(),
        ],
    )?;
    pickle::rebuild_treespec(&state).map_err(|e| {
        let shown = e.value(py).to_string();
        malformed(shown.trim_start_matches("invalid PyTreeSpec state: "))
    })
}

/// JAX's `from_iterable_tree`: a tree of this treedef's structure built from nested
/// iterables, one per node, holding the node's children (leaves are taken as they are).
pub fn from_iterable_tree<'py>(
    spec: &PyTreeSpec,
    tree: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = tree.py();
    // Pre-order with an explicit stack: no native recursion however deep the treedef.
    let mut leaves = Vec::with_capacity(spec.num_leaves());
    let mut stack = vec![(spec.nodes.len() - 1, tree.clone())];
    while let Some((idx, obj)) = stack.pop() {
        let node = &spec.nodes[idx];
        if node.kind == Kind::Leaf {
            leaves.push(obj);
            continue;
        }
        let items = obj.try_iter()?.collect::<PyResult<Vec<_>>>()?;
        if items.len() != node.arity {
            return Err(TreeError::IterableArity {
                arity: node.arity,
                got: items.len(),
            }
            .into());
        }
        stack.extend(spec.child_indices(idx).into_iter().zip(items).rev());
    }
    super::unflatten::build(py, spec, leaves)
}
