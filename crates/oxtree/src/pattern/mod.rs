//! Path patterns: which leaves of a tree a glob over the `keystr` form of their key paths, or
//! a compiled `re.Pattern`, selects. A `PathPattern` is compiled once; `treespec/select.rs`
//! matches it against every leaf of a treespec in one pre-order pass.
//!
//! The grammar (docs/key-paths.md, "Selecting leaves by pattern", is the user's copy): a glob
//! is a sequence of keys, each written as `keystr` writes it.
//!
//! - `.name`: an attribute key (`GetAttrKey`); the `.` of the first key may be left out.
//! - `[text]`: a key `keystr` writes in brackets (`SequenceKey`, `DictKey`,
//!   `FlattenedIndexKey`), `text` matched against what it writes between them (`0`, `'a'`,
//!   `<flat index 0>`).
//! - `['text']` or `["text"]`: a dict key that is a `str`, `text` matched against the string
//!   itself (either quote, whatever quote `repr` would choose).
//! - `**` (written `.**` after the first key): any number of keys, none included.
//! - In a key, `*` matches any run of characters and `?` one character; `\` makes the next
//!   character literal. There are no character classes: brackets are `keystr`'s own syntax.
//!
//! The matcher is a small NFA over keys: one state per key of each glob and one accepting
//! state per glob, a set of states per depth of the walk (a bitset), so each key is looked
//! at once per state it can advance and a subtree no glob can reach is skipped whole.

mod py_methods;

use std::borrow::Cow;
use std::fmt::Write as _;

use pyo3::prelude::*;
use pyo3::types::{PyString, PyTuple};

use crate::errors::{repr, type_name, TreeError};
use crate::key_classes::{foreign_key_field, DictKey, FlattenedIndexKey, GetAttrKey, SequenceKey};

// ---------------------------------------------------------------------------------------------
// Globs within one key

/// A piece of a glob within one key.
#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Lit(String),
    /// `*`: any run of characters (none included).
    Star,
    /// `?`: one character.
    One,
}

/// A glob over the text of one key.
#[derive(Clone, Debug)]
struct Glob {
    toks: Vec<Tok>,
    /// The glob is a lone `*`: it matches any text, which need not be made.
    any: bool,
    /// The glob is a literal integer (`[3]`): a sequence index compares as a number.
    int: Option<isize>,
}

impl Glob {
    fn new(toks: Vec<Tok>) -> Glob {
        let any = toks == [Tok::Star];
        let int = match toks.as_slice() {
            [Tok::Lit(s)] => s.parse::<isize>().ok().filter(|n| n.to_string() == *s),
            _ => None,
        };
        Glob { toks, any, int }
    }

    /// Whether the whole of `text` matches: the classic greedy walk that backtracks to the
    /// last `*` only (exact for `*`, `?` and literals), linear in practice.
    fn matches(&self, text: &str) -> bool {
        if self.any {
            return true;
        }
        let toks = &self.toks;
        let (mut i, mut t) = (0usize, 0usize);
        // (token after the last star, where in the text that star's run ends)
        let mut star: Option<(usize, usize)> = None;
        loop {
            if let Some(tok) = toks.get(i) {
                match tok {
                    Tok::Star => {
                        star = Some((i + 1, t));
                        i += 1;
                        continue;
                    }
                    Tok::One => {
                        if let Some(c) = text[t..].chars().next() {
                            t += c.len_utf8();
                            i += 1;
                            continue;
                        }
                    }
                    Tok::Lit(s) => {
                        if text[t..].starts_with(s.as_str()) {
                            t += s.len();
                            i += 1;
                            continue;
                        }
                    }
                }
            } else if t == text.len() {
                return true;
            }
            // A mismatch: let the last star take one more character, or fail.
            match star {
                Some((after, end)) => match text[end..].chars().next() {
                    Some(c) => {
                        let end = end + c.len_utf8();
                        star = Some((after, end));
                        i = after;
                        t = end;
                    }
                    None => return false,
                },
                None => return false,
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Keys as the matcher sees them

/// One key of a path: what the patterns look at, taken from a treespec node's child or from a
/// key object, without making text a pattern does not ask for.
pub enum Seg<'py> {
    /// An attribute (`GetAttrKey`): `.name`.
    Attr(Bound<'py, PyString>),
    /// An attribute known by its text only (a key object of another class printing `.name`).
    AttrText(String),
    /// A sequence index: `[3]`.
    Index(isize),
    /// A dict key that is a str: `['a']`; its `repr` made when asked for.
    Str(Bound<'py, PyString>, Option<String>),
    /// Any other bracketed key: the text between the brackets (`1`, `<flat index 0>`).
    Item(String),
    /// A key whose text is neither `.name` nor `[...]`: only `**` matches it.
    Other(String),
}

/// The text of a Python str (lossy for lone surrogates, which no UTF-8 text holds).
pub fn str_text<'a>(s: &'a Bound<'_, PyString>) -> Cow<'a, str> {
    match s.to_str() {
        Ok(t) => Cow::Borrowed(t),
        Err(_) => Cow::Owned(s.to_string_lossy().into_owned()),
    }
}

/// `repr(s)` made without calling Python where Python's rule is plain: an exact str of
/// printable ASCII without a backslash, and not holding both quotes, is itself between
/// quotes (`"` when it holds a `'`, else `'`). Anything else (escapes, other characters, a
/// subclass's own `__repr__`) is left to Python: None. A dict key's repr is a Python call per
/// key otherwise, for every key a regular expression needs the keystr of.
fn plain_str_repr(s: &Bound<'_, PyString>) -> Option<String> {
    if !s.is_exact_instance_of::<PyString>() {
        return None;
    }
    let text = s.to_str().ok()?;
    let plain = text
        .bytes()
        .all(|b| (0x20..0x7f).contains(&b) && b != b'\\');
    let (single, double) = (text.contains('\''), text.contains('"'));
    if !plain || (single && double) {
        return None;
    }
    let quote = if single { '"' } else { '\'' };
    let mut out = String::with_capacity(text.len() + 2);
    out.push(quote);
    out.push_str(text);
    out.push(quote);
    Some(out)
}

impl<'py> Seg<'py> {
    /// The key of a dict: a str, or another object known by its `repr`.
    pub fn dict_key(key: Bound<'py, PyAny>) -> PyResult<Seg<'py>> {
        match key.cast_into::<PyString>() {
            Ok(s) => Ok(Seg::Str(s, None)),
            Err(e) => Ok(Seg::Item(e.into_inner().repr()?.to_string())),
        }
    }

    /// The key a key object stands for: oxtree's and JAX's key classes by their fields, any
    /// other object by its `str`, as `keystr` prints it.
    pub fn of_key(key: &Bound<'py, PyAny>) -> PyResult<Seg<'py>> {
        let py = key.py();
        if let Ok(k) = key.cast::<SequenceKey>() {
            return Ok(Seg::Index(k.get().idx));
        }
        if let Ok(k) = key.cast::<DictKey>() {
            return Seg::dict_key(k.get().key.bind(py).clone());
        }
        if let Ok(k) = key.cast::<GetAttrKey>() {
            return Ok(Seg::Attr(k.get().name.bind(py).clone()));
        }
        if let Ok(k) = key.cast::<FlattenedIndexKey>() {
            return Ok(Seg::Item(format!(
                "<flat index {}>",
                k.get().key.bind(py).str()?
            )));
        }
        match foreign_key_field(key) {
            Some("idx") => {
                if let Ok(idx) = key.getattr("idx")?.extract::<isize>() {
                    return Ok(Seg::Index(idx));
                }
            }
            Some("key") if key.get_type().name()?.to_str()? == "DictKey" => {
                return Seg::dict_key(key.getattr("key")?);
            }
            _ => {}
        }
        let text = key.str()?.to_string();
        Ok(if let Some(name) = text.strip_prefix('.') {
            Seg::AttrText(name.to_owned())
        } else if text.len() >= 2 && text.starts_with('[') && text.ends_with(']') {
            Seg::Item(text[1..text.len() - 1].to_owned())
        } else {
            Seg::Other(text)
        })
    }

    fn attr(&self) -> Option<Cow<'_, str>> {
        match self {
            Seg::Attr(s) => Some(str_text(s)),
            Seg::AttrText(t) => Some(Cow::Borrowed(t)),
            _ => None,
        }
    }

    /// The text between the brackets of a bracketed key, as `keystr` writes it.
    fn item(&mut self) -> PyResult<Option<Cow<'_, str>>> {
        Ok(match self {
            Seg::Index(i) => Some(Cow::Owned(i.to_string())),
            Seg::Str(s, cached) => {
                if cached.is_none() {
                    *cached = Some(match plain_str_repr(s) {
                        Some(text) => text,
                        None => s.repr()?.to_string(),
                    });
                }
                cached.as_deref().map(Cow::Borrowed)
            }
            Seg::Item(t) => Some(Cow::Borrowed(t)),
            _ => None,
        })
    }

    /// Appends the key as `keystr` writes it.
    pub fn write(&mut self, out: &mut String) -> PyResult<()> {
        if let Seg::Index(i) = self {
            let _ = write!(out, "[{i}]");
            return Ok(());
        }
        if let Some(name) = self.attr() {
            out.push('.');
            out.push_str(&name);
            return Ok(());
        }
        if let Seg::Other(t) = self {
            out.push_str(t);
            return Ok(());
        }
        let item = self.item()?;
        out.push('[');
        out.push_str(item.as_deref().unwrap_or_default());
        out.push(']');
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Steps: one key of a glob

#[derive(Clone, Debug)]
enum Step {
    /// `**`: any number of keys.
    Any,
    /// `.glob`
    Attr(Glob),
    /// `[glob]`: against the text between the brackets.
    Item(Glob),
    /// `['glob']`: against a str dict key itself.
    Str(Glob),
}

impl Step {
    fn matches(&self, seg: &mut Seg<'_>) -> PyResult<bool> {
        Ok(match self {
            Step::Any => true,
            Step::Attr(g) => seg.attr().is_some_and(|name| g.matches(&name)),
            Step::Str(g) => match seg {
                Seg::Str(s, _) => g.matches(&str_text(s)),
                _ => false,
            },
            Step::Item(g) => match seg {
                Seg::Index(i) if g.any || g.int.is_some() => g.any || g.int == Some(*i),
                Seg::Str(..) | Seg::Index(_) | Seg::Item(_) if g.any => true,
                _ => seg.item()?.is_some_and(|text| g.matches(&text)),
            },
        })
    }
}

/// A malformed glob: what is wrong, and at which character (0-based).
struct Malformed {
    what: String,
    at: usize,
}

fn malformed<T>(what: impl Into<String>, at: usize) -> Result<T, Malformed> {
    Err(Malformed {
        what: what.into(),
        at,
    })
}

const STAR_STAR: &str = "'**' stands for whole keys: write it as a key of its own \
                         ('a.**.b', \"['a']**['b']\"); '*' matches within one key";

/// Parses a glob into steps (consecutive `**` merged into one).
fn parse(pattern: &str) -> Result<Vec<Step>, Malformed> {
    let chars: Vec<char> = pattern.chars().collect();
    let n = chars.len();
    let mut steps: Vec<Step> = Vec::new();
    let mut i = 0;
    while i < n {
        let start = i;
        let after_bracket = matches!(steps.last(), Some(Step::Item(_) | Step::Str(_)))
            && chars.get(i.wrapping_sub(1)) == Some(&']');
        match chars[i] {
            '[' => {
                steps.push(bracket(&chars, &mut i)?);
                // After a bracketed key: the end, the next key, or `**`.
                if i < n && !matches!(chars[i], '.' | '[' | '*') {
                    return malformed(
                        format!("expected '.', '[' or '**' after ']', got {:?}", chars[i]),
                        i,
                    );
                }
                continue;
            }
            ']' => return malformed("unmatched ']'", i),
            '.' => {
                i += 1;
                if i == n || chars[i] == '.' || chars[i] == '[' {
                    return malformed("empty key after '.'", start);
                }
            }
            // After a bracketed key a '*' can only begin `**`.
            '*' if after_bracket && chars.get(i + 1) != Some(&'*') => {
                return malformed("expected '.', '[' or '**' after ']', got '*'", i);
            }
            // The first key, whose '.' may be left out: every later key starts at the '.' or
            // '[' that ended the one before it, or at '**' right after a ']'.
            _ => {}
        }
        // An attribute key or `**`, from `i`.
        if chars[i] == '*' && chars.get(i + 1) == Some(&'*') {
            if chars.get(i + 2) == Some(&'*') {
                return malformed(format!("'***' is not a key; {STAR_STAR}"), i);
            }
            if let Some(&c) = chars.get(i + 2) {
                if c != '.' && c != '[' {
                    return malformed(STAR_STAR, i);
                }
            }
            i += 2;
            if !matches!(steps.last(), Some(Step::Any)) {
                steps.push(Step::Any);
            }
            continue;
        }
        let toks = glob(&chars, &mut i, |c| c == '.' || c == '[', "attribute")?;
        steps.push(Step::Attr(Glob::new(toks)));
    }
    Ok(steps)
}

/// A bracketed key, from the `[` at `*i` to just after its `]`.
fn bracket(chars: &[char], i: &mut usize) -> Result<Step, Malformed> {
    let open = *i;
    *i += 1;
    match chars.get(*i) {
        None => malformed("unclosed '['", open),
        Some(&q) if q == '\'' || q == '"' => {
            let quote = *i;
            *i += 1;
            let toks = glob(chars, i, |c| c == q, "quoted")?;
            if *i >= chars.len() {
                return malformed(format!("unterminated string: no closing {q}"), quote);
            }
            *i += 1; // the closing quote
            match chars.get(*i) {
                Some(']') => {
                    *i += 1;
                    Ok(Step::Str(Glob::new(toks)))
                }
                None => malformed("unclosed '['", open),
                Some(c) => malformed(format!("expected ']' after the string, got {c:?}"), *i),
            }
        }
        Some(_) => {
            let toks = glob(chars, i, |c| c == ']', "bracketed")?;
            if *i >= chars.len() {
                return malformed("unclosed '['", open);
            }
            if toks.is_empty() {
                return malformed("empty key '[]'", open);
            }
            *i += 1; // the ']'
            Ok(Step::Item(Glob::new(toks)))
        }
    }
}

/// The glob of one key, from `*i` up to (not including) the first character `end` accepts
/// or the end of the pattern.
fn glob(
    chars: &[char],
    i: &mut usize,
    end: impl Fn(char) -> bool,
    what: &str,
) -> Result<Vec<Tok>, Malformed> {
    let quoted = what == "quoted";
    let mut toks = Vec::new();
    let mut lit = String::new();
    let flush = |lit: &mut String, toks: &mut Vec<Tok>| {
        if !lit.is_empty() {
            toks.push(Tok::Lit(std::mem::take(lit)));
        }
    };
    while let Some(&c) = chars.get(*i) {
        if end(c) {
            break;
        }
        match c {
            '\\' => match chars.get(*i + 1) {
                Some(&next) => {
                    lit.push(next);
                    *i += 2;
                    continue;
                }
                None => return malformed("dangling '\\' at the end of the pattern", *i),
            },
            '*' if chars.get(*i + 1) == Some(&'*') => {
                return malformed(format!("'**' inside a key; {STAR_STAR}"), *i);
            }
            '*' => {
                flush(&mut lit, &mut toks);
                toks.push(Tok::Star);
            }
            '?' => {
                flush(&mut lit, &mut toks);
                toks.push(Tok::One);
            }
            ']' if !quoted => return malformed("unmatched ']'", *i),
            '[' if !quoted => {
                return malformed(
                    format!("'[' inside {what} key (write '\\[' for a literal '[')"),
                    *i,
                )
            }
            c => lit.push(c),
        }
        *i += 1;
    }
    flush(&mut lit, &mut toks);
    Ok(toks)
}

// ---------------------------------------------------------------------------------------------
// The matcher

/// A state of the NFA: the next key of a glob to match, or a glob matched whole.
#[derive(Clone, Debug)]
enum State {
    Step(Step),
    Accept,
}

/// One pattern of a matcher.
#[derive(Debug)]
enum Part {
    /// A glob: its accepting state.
    Glob { accept: usize },
    /// A compiled `re.Pattern`'s bound `fullmatch`, called with the keystr of each leaf
    /// (taken once: looking the method up per leaf was a fifth of a regex's cost).
    Regex(Py<PyAny>),
}

/// Patterns compiled together. `parts[k]` came from argument `tags[k]`: a `PathPattern`
/// argument of several patterns gives several parts with one tag.
#[derive(Debug)]
pub struct Matcher {
    states: Vec<State>,
    /// The first state of each glob.
    starts: Vec<usize>,
    parts: Vec<Part>,
    tags: Vec<u32>,
    /// u64 words per state set.
    words: usize,
    has_regex: bool,
}

/// No part matched.
pub const NO_MATCH: u32 = u32::MAX;

/// Whether `obj` is a compiled regular expression (`re.Pattern`; `re` need not be imported
/// to ask, since no such object exists before it is).
fn is_regex(obj: &Bound<'_, PyAny>) -> bool {
    let ty = obj.get_type();
    ty.name().is_ok_and(|n| n == "Pattern") && ty.module().is_ok_and(|m| m == "re")
}

/// The ValueError of a malformed glob, pointing at the character.
fn malformed_error(caller: &str, pattern: &str, bad: Malformed) -> PyErr {
    TreeError::BadPattern {
        caller: caller.to_owned(),
        pattern: pattern.to_owned(),
        at: bad.at,
        what: bad.what,
    }
    .into()
}

impl Matcher {
    /// Compiles `patterns` (each a str glob, a compiled `re.Pattern` or a `PathPattern`), each
    /// tagged with its position; `caller` names the function in error messages.
    pub fn compile<'py>(
        caller: &str,
        patterns: impl IntoIterator<Item = Bound<'py, PyAny>>,
    ) -> PyResult<(Matcher, Vec<Bound<'py, PyAny>>)> {
        let mut m = Matcher {
            states: Vec::new(),
            starts: Vec::new(),
            parts: Vec::new(),
            tags: Vec::new(),
            words: 0,
            has_regex: false,
        };
        let mut sources = Vec::new();
        for (tag, pattern) in patterns.into_iter().enumerate() {
            let tag = u32::try_from(tag).map_err(|_| TreeError::TooManyPatterns {
                caller: caller.to_owned(),
            })?;
            if let Ok(pp) = pattern.cast::<PathPattern>() {
                for source in pp.get().sources.bind(pattern.py()).iter() {
                    m.add(caller, tag, &source)?;
                    sources.push(source);
                }
            } else {
                m.add(caller, tag, &pattern)?;
                sources.push(pattern);
            }
        }
        m.words = m.states.len().div_ceil(64).max(1);
        Ok((m, sources))
    }

    fn add(&mut self, caller: &str, tag: u32, pattern: &Bound<'_, PyAny>) -> PyResult<()> {
        if let Ok(text) = pattern.cast::<PyString>() {
            let text = str_text(text);
            let steps = parse(&text).map_err(|bad| malformed_error(caller, &text, bad))?;
            self.starts.push(self.states.len());
            self.states.extend(steps.into_iter().map(State::Step));
            self.parts.push(Part::Glob {
                accept: self.states.len(),
            });
            self.states.push(State::Accept);
        } else if is_regex(pattern) {
            if !pattern.getattr("pattern")?.is_instance_of::<PyString>() {
                return Err(TreeError::BytesRegex {
                    caller: caller.to_owned(),
                    shown: repr(pattern),
                }
                .into());
            }
            self.parts
                .push(Part::Regex(pattern.getattr("fullmatch")?.unbind()));
            self.has_regex = true;
        } else {
            return Err(TreeError::NotAPattern {
                caller: caller.to_owned(),
                type_name: type_name(pattern),
                shown: crate::errors::short_repr(pattern, 60),
            }
            .into());
        }
        self.tags.push(tag);
        Ok(())
    }

    /// u64 words per state set.
    pub fn words(&self) -> usize {
        self.words
    }

    /// Whether matching needs each leaf's keystr (some pattern is a regular expression).
    pub fn needs_text(&self) -> bool {
        self.has_regex
    }

    /// Adds state `s` to `set`, and the states `**` lets through without a key.
    fn add_state(&self, set: &mut [u64], mut s: usize) {
        loop {
            set[s / 64] |= 1 << (s % 64);
            match self.states.get(s) {
                Some(State::Step(Step::Any)) => s += 1,
                _ => return,
            }
        }
    }

    /// Pushes the state set of the empty path onto `sets`.
    pub fn push_start(&self, sets: &mut Vec<u64>) {
        let base = sets.len();
        sets.resize(base + self.words, 0);
        for &s in &self.starts {
            self.add_state(&mut sets[base..], s);
        }
    }

    /// Pushes onto `sets` the state set after `seg`, from the set on top; returns whether it
    /// is empty (no glob can match below).
    pub fn push_step(&self, sets: &mut Vec<u64>, seg: &mut Seg<'_>) -> PyResult<bool> {
        let w = self.words;
        let base = sets.len() - w;
        sets.resize(base + 2 * w, 0);
        let (old, new) = sets[base..].split_at_mut(w);
        let mut empty = true;
        for (word_idx, &word) in old.iter().enumerate() {
            let mut bits = word;
            while bits != 0 {
                let s = word_idx * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                if let Some(State::Step(step)) = self.states.get(s) {
                    if let Step::Any = step {
                        self.add_state(new, s);
                        empty = false;
                    } else if step.matches(seg)? {
                        self.add_state(new, s + 1);
                        empty = false;
                    }
                }
            }
        }
        Ok(empty)
    }

    /// The tag of the first pattern that matches a path: its globs by the state set, its
    /// regular expressions called with `text`, the path's keystr. With `any_order` the globs
    /// are asked first (any match will do), sparing regular expressions the call.
    pub fn first(&self, py: Python<'_>, set: &[u64], text: &str, any_order: bool) -> PyResult<u32> {
        let in_set = |s: usize| set[s / 64] & (1 << (s % 64)) != 0;
        if any_order {
            for (k, part) in self.parts.iter().enumerate() {
                if matches!(part, Part::Glob { accept } if in_set(*accept)) {
                    return Ok(self.tags[k]);
                }
            }
        }
        let mut text_obj: Option<Bound<'_, PyString>> = None;
        for (k, part) in self.parts.iter().enumerate() {
            let hit = match part {
                Part::Glob { accept } => in_set(*accept),
                Part::Regex(fullmatch) => {
                    let text = text_obj.get_or_insert_with(|| PyString::new(py, text));
                    !fullmatch.bind(py).call1((text.clone(),))?.is_none()
                }
            };
            if hit {
                return Ok(self.tags[k]);
            }
        }
        Ok(NO_MATCH)
    }
}

// ---------------------------------------------------------------------------------------------
// The Python class

/// Patterns over key paths, compiled once: a leaf is selected when its key path matches any
/// of them. Each pattern is a glob over the path's ``keystr`` form or a compiled
/// ``re.Pattern`` matched (``fullmatch``) against the whole keystr; a ``PathPattern`` given
/// as a pattern adds its own. The glob grammar: keys written as ``keystr`` writes them
/// (``.name``, ``[0]``, ``['key']``; the first key's ``.`` may be left out); in a key, ``*``
/// matches any run of characters and ``?`` one; ``**`` (``.**``) any number of whole keys;
/// ``\`` makes the next character literal. A quoted key matches a ``str`` dict key by the
/// string itself, an unquoted ``[text]`` what ``keystr`` writes between the brackets.
///
/// ``tree_mask``, ``tree_labels`` and ``tree_set_matching`` take patterns; so do
/// ``oxtree.jax.partition`` (as its filter spec) and the filters of ``Module.select``.
///
/// >>> p = PathPattern('layers[*].w', '**.bias')
/// >>> p.match((GetAttrKey('layers'), SequenceKey(3), GetAttrKey('w')))
/// True
/// >>> p.match((DictKey('enc'), GetAttrKey('bias'))), p.match((GetAttrKey('w'),))
/// (True, False)
/// >>> p
/// PathPattern('layers[*].w', '**.bias')
/// >>> PathPattern('layers[*.w')
/// Traceback (most recent call last):
/// ...
/// ValueError: PathPattern: invalid path pattern 'layers[*.w' at position 6: unclosed '['
///     layers[*.w
///           ^
#[pyclass(frozen, module = "oxtree", name = "PathPattern")]
pub struct PathPattern {
    /// The patterns, each a str or a compiled `re.Pattern` (`PathPattern`s given were
    /// replaced by theirs). They hold nothing that could refer back to the pattern, so the
    /// class takes no part in garbage collection.
    sources: Py<PyTuple>,
    pub matcher: Matcher,
}

/// The matcher of the patterns a tree function was given.
pub enum Compiled<'py> {
    /// One `PathPattern`: its own matcher, compiled when it was made.
    Shared(Bound<'py, PathPattern>),
    /// Anything else, compiled for this call.
    Own(Matcher),
}

impl Compiled<'_> {
    pub fn matcher(&self) -> &Matcher {
        match self {
            Compiled::Shared(p) => &p.get().matcher,
            Compiled::Own(m) => m,
        }
    }
}

impl PathPattern {
    /// The matcher of `patterns`, given to `caller`: a lone `PathPattern`'s own when the
    /// caller asks only whether a pattern matches (`by_argument == false`), else compiled
    /// now with each part tagged by the argument it came from.
    pub fn compile_args<'py>(
        caller: &str,
        patterns: Vec<Bound<'py, PyAny>>,
        by_argument: bool,
    ) -> PyResult<Compiled<'py>> {
        if let [only] = patterns.as_slice() {
            if let (false, Ok(p)) = (by_argument, only.cast::<PathPattern>()) {
                return Ok(Compiled::Shared(p.clone()));
            }
        }
        Ok(Compiled::Own(Matcher::compile(caller, patterns)?.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn steps(p: &str) -> Vec<String> {
        parse(p)
            .unwrap_or_default()
            .iter()
            .map(|s| format!("{s:?}"))
            .collect()
    }

    fn error(p: &str) -> (String, usize) {
        match parse(p) {
            Ok(_) => (String::new(), usize::MAX),
            Err(m) => (m.what, m.at),
        }
    }

    fn glob_of(p: &str) -> Glob {
        let chars: Vec<char> = p.chars().collect();
        let mut i = 0;
        Glob::new(glob(&chars, &mut i, |_| false, "attribute").unwrap_or_default())
    }

    #[test]
    fn globs_match_within_one_key() {
        for (g, text, hit) in [
            ("*", "", true),
            ("a*", "abc", true),
            ("*c", "abc", true),
            ("a*c", "ac", true),
            ("a*b*c", "axbyc", true),
            ("a*b*c", "axbyd", false),
            ("a?c", "abc", true),
            ("a?c", "ac", false),
            ("?", "é", true),
            ("a\\*", "a*", true),
            ("a\\*", "ab", false),
            ("*ab", "aab", true),
            ("", "", true),
            ("", "a", false),
        ] {
            assert_eq!(glob_of(g).matches(text), hit, "{g} {text}");
        }
    }

    #[test]
    fn patterns_parse_into_keys() {
        assert_eq!(steps("a.b").len(), 2);
        assert_eq!(steps(".a.b").len(), 2);
        assert_eq!(steps("**.**.a").len(), 2);
        assert_eq!(steps("['a'][0]**").len(), 3);
        assert_eq!(steps("['a']*"), Vec::<String>::new());
        assert_eq!(steps("[0]**a"), Vec::<String>::new());
        assert_eq!(steps("").len(), 0);
        assert_eq!(steps("[*]").len(), 1);
    }

    #[test]
    fn malformed_patterns_say_where() {
        assert_eq!(error("a[0").1, 1);
        assert_eq!(error("a]").0, "unmatched ']'");
        assert_eq!(error("a..b").1, 1);
        assert_eq!(error("a.").0, "empty key after '.'");
        assert_eq!(error("[]").0, "empty key '[]'");
        assert_eq!(error("['a]").1, 1);
        assert_eq!(error("['a'x]").1, 4);
        assert_eq!(error("a**").1, 1);
        assert_eq!(error("***").1, 0);
        assert_eq!(error("**a").1, 0);
        assert_eq!(error("a\\").1, 1);
        assert_eq!(error("[0]a").1, 3);
        assert_eq!(error("[a[b]").1, 2);
    }
}
