//! Where in a tree, as text for error messages: a path is a list of `PathEntry`s rendered in
//! `keystr` form (`tree[1]['b'].x`). Python never sees these; the key objects users see are in
//! `key_classes.rs`.

use pyo3::prelude::*;

/// One step from a container to a child.
pub enum PathEntry<'py> {
    /// A position in a sequence, or a flattened index of a custom node.
    Index(usize),
    /// A mapping key.
    Key(Bound<'py, PyAny>),
    /// A named field (namedtuple, struct sequence, dataclass).
    Attr(String),
    /// Already rendered (a registered key's str, `[<flat index 0>]`).
    Text(String),
}

impl PathEntry<'_> {
    pub fn write_to(&self, out: &mut String) {
        match self {
            PathEntry::Index(i) => {
                out.push('[');
                out.push_str(&i.to_string());
                out.push(']');
            }
            PathEntry::Key(k) => {
                out.push('[');
                match k.repr() {
                    Ok(r) => out.push_str(&r.to_string_lossy()),
                    Err(_) => out.push('?'),
                }
                out.push(']');
            }
            PathEntry::Attr(name) => {
                out.push('.');
                out.push_str(name);
            }
            PathEntry::Text(text) => out.push_str(text),
        }
    }
}

/// `root` followed by each entry in keystr form, e.g. `tree[1]['b'].x`.
pub fn render(root: &str, entries: &[PathEntry<'_>]) -> String {
    let mut out = String::from(root);
    for e in entries {
        e.write_to(&mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_and_attr_render_without_python() {
        let entries = [
            PathEntry::Index(1),
            PathEntry::Attr("x".into()),
            PathEntry::Index(0),
        ];
        assert_eq!(render("tree", &entries), "tree[1].x[0]");
        assert_eq!(render("tree", &[]), "tree");
    }
}
