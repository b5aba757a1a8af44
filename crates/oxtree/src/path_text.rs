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

/// How many steps a message shows at each end of a longer path: a path thousands of steps
/// deep (a tree past the depth limit) would otherwise make a message of megabytes.
const SHOWN_AT_EACH_END: usize = 16;

/// `root` followed by each entry in keystr form, e.g. `tree[1]['b'].x`. A path of more than
/// twice [`SHOWN_AT_EACH_END`] steps shows that many at each end and counts the steps between.
pub fn render(root: &str, entries: &[PathEntry<'_>]) -> String {
    let mut out = String::from(root);
    if entries.len() <= 2 * SHOWN_AT_EACH_END {
        for e in entries {
            e.write_to(&mut out);
        }
        return out;
    }
    let (head, rest) = entries.split_at(SHOWN_AT_EACH_END);
    let (middle, tail) = rest.split_at(rest.len() - SHOWN_AT_EACH_END);
    for e in head {
        e.write_to(&mut out);
    }
    out.push_str(&format!("...<{} steps>...", middle.len()));
    for e in tail {
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

    #[test]
    fn a_long_path_shows_both_ends_and_counts_the_middle() {
        let at_limit: Vec<_> = (0..2 * SHOWN_AT_EACH_END).map(PathEntry::Index).collect();
        let full: String = (0..2 * SHOWN_AT_EACH_END)
            .map(|i| format!("[{i}]"))
            .collect();
        assert_eq!(render("tree", &at_limit), format!("tree{full}"));

        let deep: Vec<_> = (0..100_000).map(PathEntry::Index).collect();
        let head: String = (0..SHOWN_AT_EACH_END).map(|i| format!("[{i}]")).collect();
        let tail: String = (100_000 - SHOWN_AT_EACH_END..100_000)
            .map(|i| format!("[{i}]"))
            .collect();
        let middle = 100_000 - 2 * SHOWN_AT_EACH_END;
        assert_eq!(
            render("tree", &deep),
            format!("tree{head}...<{middle} steps>...{tail}")
        );
    }
}
