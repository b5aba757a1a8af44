//! optree's repr grammar: `PyTreeSpec([*, {'a': *, 'b': (*, None)}], NoneIsLeaf)`.
//!
//! Written in pre-order from an explicit task stack, so the cost is linear in the output and a
//! chain 100,000 deep prints without recursion.

use pyo3::prelude::*;

use super::PyTreeSpec;
use crate::invariant::Invariant;
use crate::kind::Kind;
use crate::types;

enum Task {
    Node(usize),
    Text(String),
}

fn repr_of(obj: &Bound<'_, PyAny>) -> PyResult<String> {
    Ok(obj.repr()?.to_string())
}

/// The body of the repr: the tree alone, without `PyTreeSpec(...)` around it.
pub fn body(spec: &PyTreeSpec, py: Python<'_>) -> PyResult<String> {
    body_labelled(spec, py, &|_| None)
}

/// The body, with the leaves for which `label(node index)` gives text printed as that text
/// instead of `*` (a graph's references).
pub fn body_labelled(
    spec: &PyTreeSpec,
    py: Python<'_>,
    label: &dyn Fn(usize) -> Option<String>,
) -> PyResult<String> {
    let mut out = String::new();
    let mut tasks = vec![Task::Node(spec.nodes.len() - 1)];
    while let Some(task) = tasks.pop() {
        let idx = match task {
            Task::Text(s) => {
                out.push_str(&s);
                continue;
            }
            Task::Node(idx) => idx,
        };
        let node = &spec.nodes[idx];
        let children = spec.child_indices(idx);
        let keys: Vec<String> = match (node.keys(), node.kind) {
            (Some(k), _) => k
                .bind(py)
                .iter()
                .map(|k| repr_of(&k))
                .collect::<PyResult<_>>()?,
            (None, Kind::NamedTuple | Kind::StructSeq) => match &node.data {
                Some(t) => types::field_names(t.bind(py), node.kind)?
                    .into_iter()
                    .enumerate()
                    .map(|(i, n)| n.unwrap_or_else(|| format!("<unnamed@{i}>")))
                    .collect(),
                None => Vec::new(),
            },
            _ => Vec::new(),
        };
        let (open, close, labels): (String, String, Option<(&[String], &str)>) =
            if spec.face.rules().jax_forms
                && matches!(
                    node.kind,
                    Kind::NamedTuple | Kind::OrderedDict | Kind::DefaultDict | Kind::Custom
                )
            {
                // JAX's grammar: every node but the builtin containers is `CustomNode(T[aux], [...])`.
                let (name, aux) = jax_custom_label(py, node)?;
                (format!("CustomNode({name}[{aux}], ["), "])".into(), None)
            } else {
                match node.kind {
                    Kind::Leaf => (
                        label(idx).unwrap_or_else(|| "*".into()),
                        String::new(),
                        None,
                    ),
                    Kind::None => ("None".into(), String::new(), None),
                    Kind::Tuple => {
                        let close = if node.arity == 1 { ",)" } else { ")" };
                        ("(".into(), close.into(), None)
                    }
                    Kind::List => ("[".into(), "]".into(), None),
                    Kind::Dict => ("{".into(), "}".into(), Some((&keys, ": "))),
                    Kind::NamedTuple | Kind::StructSeq => {
                        let t = node.kept_data(py);
                        if node.kind == Kind::NamedTuple && keys.len() != node.arity {
                            // optree's words for a namedtuple whose `_fields` changed since.
                            return Err(crate::errors::TreeError::NamedTupleFields {
                                fields: keys.len(),
                                ty: t.repr()?.to_string(),
                                arity: node.arity,
                            }
                            .into());
                        }
                        let name = if node.kind == Kind::NamedTuple {
                            t.getattr("__name__")?.to_string()
                        } else {
                            format!(
                                "{}.{}",
                                t.getattr("__module__")?,
                                t.getattr("__qualname__")?
                            )
                        };
                        (format!("{name}("), ")".into(), Some((&keys, "=")))
                    }
                    Kind::OrderedDict => {
                        if node.arity == 0 {
                            ("OrderedDict()".into(), String::new(), None)
                        } else {
                            ("OrderedDict({".into(), "})".into(), Some((&keys, ": ")))
                        }
                    }
                    Kind::DefaultDict => {
                        let factory = repr_of(node.kept_data(py))?;
                        (
                            format!("defaultdict({factory}, {{"),
                            "})".into(),
                            Some((&keys, ": ")),
                        )
                    }
                    Kind::Deque => {
                        let maxlen = node.kept_data(py);
                        let close = if maxlen.is_none() {
                            "])".to_string()
                        } else {
                            format!("], maxlen={})", repr_of(maxlen)?)
                        };
                        if node.arity == 0 {
                            let open = if maxlen.is_none() {
                                "deque()".to_string()
                            } else {
                                format!("deque(maxlen={})", repr_of(maxlen)?)
                            };
                            (open, String::new(), None)
                        } else {
                            ("deque([".into(), close, None)
                        }
                    }
                    Kind::Custom => {
                        let name = node
                            .custom()
                            .invariant("a custom node without its registration")?
                            .name(py);
                        let aux = super::node_data::custom_metadata(py, node)?;
                        (
                            format!("CustomTreeNode({name}[{}], [", repr_of(&aux)?),
                            "])".into(),
                            None,
                        )
                    }
                }
            };
        out.push_str(&open);
        // Queue, in reverse: the close, then each child preceded by its separator and label.
        tasks.push(Task::Text(close));
        for (j, &child) in children.iter().enumerate().rev() {
            tasks.push(Task::Node(child));
            if let Some((labels, sep)) = labels {
                if let Some(label) = labels.get(j) {
                    tasks.push(Task::Text(format!("{label}{sep}")));
                }
            }
            if j > 0 {
                tasks.push(Task::Text(", ".into()));
            }
        }
    }
    Ok(out)
}

/// The name and aux data JAX prints for a node it represents as a custom node.
fn jax_custom_label(py: Python<'_>, node: &super::Node) -> PyResult<(String, String)> {
    let keys_tuple = || -> PyResult<String> {
        match node.keys() {
            Some(k) => repr_of(k.bind(py).to_tuple().as_any()),
            None => Ok("()".into()),
        }
    };
    let data = || node.kept_data(py);
    Ok(match node.kind {
        Kind::NamedTuple => ("namedtuple".into(), data().getattr("__name__")?.to_string()),
        Kind::OrderedDict => ("OrderedDict".into(), keys_tuple()?),
        Kind::DefaultDict => (
            "defaultdict".into(),
            format!("({}, {})", repr_of(data())?, keys_tuple()?),
        ),
        _ => {
            // JAX prints a custom node's aux data with str().
            let reg = node
                .custom()
                .invariant("a custom node without its registration")?;
            (reg.name(py), data().str()?.to_string())
        }
    })
}

pub fn repr(spec: &PyTreeSpec, py: Python<'_>) -> PyResult<String> {
    if spec.face.rules().jax_forms {
        return Ok(format!("PyTreeDef({})", body(spec, py)?));
    }
    Ok(format!("PyTreeSpec({}{})", body(spec, py)?, options(spec)))
}

/// The options after the body of a repr: `, NoneIsLeaf` and `, namespace='...'` when set.
pub fn options(spec: &PyTreeSpec) -> String {
    let mut out = String::new();
    if spec.none_is_leaf {
        out.push_str(", NoneIsLeaf");
    }
    if !spec.namespace.is_empty() {
        out.push_str(&format!(", namespace={:?}", spec.namespace).replace('"', "'"));
    }
    out
}
