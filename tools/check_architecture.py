"""Checks that docs/architecture.md cites only files, make targets and code names that exist.

    python tools/check_architecture.py [DOC]

`make test` runs it before pytest. It reads the document as text and the repository as text
(no import, no build), and prints one line per citation it cannot find. The rules:

- File map (the first fenced block): a line indented by at most two spaces starts with an
  entry, a path. One at the left margin is relative to the repository root, and one that ends
  in `/` becomes the folder of the indented entries below it; an indented entry is relative to
  that folder. Other file names in an entry's description (`tree.py`, `_ravel.py`) are
  relative to the entry's folder, or else to the folder at the left margin above it.
- Paths in the text: a backticked span, or a bare word, that contains a `/` and ends in a
  file extension or in `/` is relative to the repository root, or the end of a path of the
  repository (`treespec/select.rs`, as the text names files of the crate). A backticked file
  name with no folder (`flatten.rs`) must be the name of some file of the repository.
- `make X` in backticks: X is a target of the Makefile.
- Code names: a backticked span, in the text or the file map, that is an identifier path
  (`PyTreeSpec`, `flatten::leaf_sequence`, `GraphDef._layout()`, `internal!`,
  `Flattener<P, ...>`, `oxtree._core.jax_face`) is looked up in the code: crates/oxtree,
  python/oxtree, tools, fuzz and the build files (not tests/), read as words.
  - A single name must occur as a whole word in the code.
  - `a::b` (Rust) and `A.b` (Python): `b` must occur in a file that defines `a`: the module
    file `a.rs` or `a/mod.rs` (for `::`, Rust files only), or a file with `struct a`,
    `enum a`, `trait a`, `impl a`, `class a`, `def a`, `fn a`, `mod a` or
    `macro_rules! a`; each further segment likewise in the files of the segment before it.
  - `oxtree.a.b` is a module path: `python/oxtree/a.py` (or `a/__init__.py`) must exist and
    contain `b`; `oxtree._core` is the extension, whose submodules are the nested
    `mod jax_face` of its declarative `#[pymodule]` (or a string literal naming them).
  - Names of other libraries are not ours to check: a dotted name whose first segment is in
    `EXTERNAL` (`sys.setrecursionlimit`, `optree._C`) or is a dunder (`__new__.__code__`),
    a name in `EXTERNAL_NAMES` (CPython's `tp_clear`), and single capital letters, which the
    text uses as placeholders (`oxtree.X`).
Anything else in backticks (expressions, literals, key paths) is prose.
"""

from __future__ import annotations

import bisect
import itertools
import re
import subprocess
import sys
from collections.abc import Callable
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"

# Where code names are looked up: the product, its tools and the fuzzer (not the tests: a name
# the page cites must be the code's, and a test of this script names missing ones).
CODE_DIRS = ("crates/oxtree", "python/oxtree", "tools", "fuzz")
CODE_FILES = ("Makefile", "Cargo.toml", "pyproject.toml")
CODE_SUFFIXES = {".rs", ".py", ".pyi", ".toml", ".sh", ""}
EXTENSIONS = r"(?:py|pyi|rs|md|toml|txt|sh|ini|json|cfg|supp)"
# First segments of dotted names that belong to other libraries or to Python itself.
EXTERNAL = {
    "collections",
    "dict",
    "enum",
    "jax",
    "list",
    "mypy",
    "object",
    "optree",
    "sys",
    "tuple",
    "typing",
}

# Names of CPython's C API the text explains the design against.
EXTERNAL_NAMES = {"tp_clear"}

IDENT = r"[A-Za-z_]\w*"
NAME = re.compile(rf"^(?P<path>{IDENT}(?:(?:::|\.){IDENT})*)(?:!|\(\)|\([^()]*\)|<[^<>]*>)?$")
PATH_WORD = re.compile(rf"(?<![\w`/.-])((?:[\w.-]+/)+(?:[\w.-]+\.{EXTENSIONS})?)(?![\w/])")


def tracked_files() -> list[str]:
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [line for line in out.splitlines() if (ROOT / line).exists()]


FILES = tracked_files()
BASENAMES = {Path(f).name for f in FILES}


@cache
def read(path: str) -> str:
    try:
        return (ROOT / path).read_text(errors="replace")
    except (IsADirectoryError, FileNotFoundError):
        return ""


CODE = [
    f
    for f in FILES
    if (f in CODE_FILES or f.startswith(tuple(d + "/" for d in CODE_DIRS)))
    and Path(f).suffix in CODE_SUFFIXES
    and f != "tools/check_architecture.py"  # its own examples would find themselves
]


WORD = re.compile(r"\w+")
DEFINITION = re.compile(
    r"(?:\b(?:struct|enum|trait|mod|class|def|fn|type)\s+|\bimpl(?:<[^>]*>)?\s+"
    r"|macro_rules!\s+)(\w+)"
)


@cache
def words(path: str) -> frozenset[str]:
    return frozenset(WORD.findall(read(path)))


def files_with(name: str, files: list[str] | None = None) -> list[str]:
    return [f for f in (CODE if files is None else files) if name in words(f)]


@cache
def definitions() -> dict[str, list[str]]:
    """name -> the files that define it: its module file, or a struct/enum/class/... of it."""
    found: dict[str, list[str]] = {}
    for f in CODE:
        path = Path(f)
        names = set(DEFINITION.findall(read(f)))
        names.add(path.stem if path.stem not in ("mod", "__init__") else path.parent.name)
        if f.endswith(".rs"):
            names.update(path.parent.relative_to("crates/oxtree").parts)
        for name in names:
            found.setdefault(name, []).append(f)
    return found


def defining_files(name: str) -> list[str]:
    return definitions().get(name, [])


def exists(path: str) -> bool:
    return (ROOT / path).exists()


def check_path(path: str, problems: list[str], where: str, strict: bool = False) -> None:
    """`strict`: `path` is relative to the repository root, nothing else."""
    if strict:
        if not exists(path):
            problems.append(f"{where}: {path} does not exist")
    elif "/" not in path.rstrip("/"):
        if path.rstrip("/") in BASENAMES or exists(path):
            return
        problems.append(f"{where}: no file named {path!r} in the repository")
    elif not exists(path) and not any(f.endswith("/" + path) for f in FILES):
        problems.append(f"{where}: {path} does not exist")


def check_python_module_path(name: str) -> str | None:
    parts = name.split(".")
    files: list[str] = ["python/oxtree/__init__.py"]
    for i, part in enumerate(parts[1:], 1):
        if part == "_core":
            files = [f for f in CODE if f.startswith("crates/oxtree/src/")]
            continue
        if files and files[0].startswith("crates/"):
            # A submodule of the extension: named by a string literal in the Rust code.
            # (or by a nested `mod` of the declarative `#[pymodule]`).
            literal = re.compile(rf'"{re.escape(part)}"|\bmod {re.escape(part)}\b')
            if not any(literal.search(read(f)) for f in files):
                return f"{'.'.join(parts[: i + 1])}: no Rust code names the submodule {part!r}"
            continue
        folder = str(Path(files[0]).parent)
        module = [f"{folder}/{part}.py", f"{folder}/{part}/__init__.py"]
        present = [m for m in module if exists(m)]
        if present:
            files = present
            continue
        if not files_with(part, files):
            return f"{'.'.join(parts[: i + 1])}: {part!r} is not in {', '.join(files)}"
        return None
    return None


def check_name(span: str, problems: list[str], where: str) -> None:
    match = NAME.match(span)
    if not match:
        return
    name = match["path"]
    parts = re.split(r"::|\.", name)
    if ("." in name and parts[0] in EXTERNAL) or name in EXTERNAL_NAMES:
        return
    if re.fullmatch(r"__\w+__", parts[0]):
        return
    parts = [p for p in parts if not re.fullmatch(r"[A-Z]", p)]
    if not parts:
        return
    if parts[0] == "oxtree" and "." in name:
        problem = check_python_module_path(".".join(parts))
        if problem:
            problems.append(f"{where}: `{span}`: {problem}")
        return
    if not files_with(parts[0]):
        problems.append(f"{where}: `{span}`: {parts[0]!r} occurs nowhere in the code")
        return
    rust = "::" in name
    scope = defining_files(parts[0])
    for previous, part in itertools.pairwise(parts):
        if rust:
            # A Rust path: the segment before is a module or a type of the crate.
            scope = [f for f in scope if f.endswith(".rs")]
        if not scope:
            # Nothing defines the previous segment (a Python-level name made in Rust, say):
            # the segment must at least occur somewhere.
            scope = CODE
        hits = files_with(part, scope)
        if not hits:
            places = "the code" if scope is CODE else ", ".join(scope)
            problems.append(f"{where}: `{span}`: {part!r} is not in {places} ({previous})")
            return
        scope = defining_files(part)


def makefile_targets() -> set[str]:
    return set(re.findall(r"^([\w.-]+)\s*:(?!=)", read("Makefile"), re.MULTILINE))


def check_file_map(block: list[tuple[int, str]], problems: list[str]) -> None:
    folder = ""
    for lineno, line in block:
        indent = len(line) - len(line.lstrip(" "))
        if not line.strip() or indent > 2:
            entry_dir = None
        else:
            entry = line.split()[0]
            path = entry if indent == 0 else folder + entry
            if indent == 0:
                folder = entry if entry.endswith("/") else ""
            check_path(path, problems, f"line {lineno} (file map)", strict=True)
            entry_dir = str(Path(path).parent) if not path.endswith("/") else path.rstrip("/")
            line = line[indent + len(entry) :]
            last_dir = entry_dir
        for other in re.findall(rf"(?<![\w/.`-])([\w-]+\.{EXTENSIONS})(?![\w/])", line):
            base = entry_dir if entry_dir is not None else last_dir
            # A file named in a row's text sits beside the row's file, or at the top of the
            # row's folder (`face/optree.rs ... over walk.rs`).
            if folder and not exists(f"{base}/{other}") and exists(folder + other):
                base = folder.rstrip("/")
            check_path(f"{base}/{other}", problems, f"line {lineno} (file map)", strict=True)


def check(doc: Path) -> list[str]:
    text = doc.read_text()
    lines = text.splitlines()
    problems: list[str] = []
    # Lines whose backticked spans are checked (all but the fences), and the prose among them.
    spans: list[tuple[int, str]] = []
    prose: list[tuple[int, str]] = []
    block: list[tuple[int, str]] = []
    in_block = False
    maps = 0
    for lineno, line in enumerate(lines, 1):
        if line.startswith("```"):
            if in_block:
                maps += 1
                if maps == 1:
                    check_file_map(block, problems)
                block = []
            in_block = not in_block
            continue
        if in_block:
            block.append((lineno, line))
        spans.append((lineno, line))
        if not in_block:
            prose.append((lineno, line))
    targets = makefile_targets()
    text, lineno_at = joined(spans)
    for match in re.finditer(r"`([^`]+)`", text):
        span = " ".join(match[1].split())
        where = f"line {lineno_at(match.start())}"
        if span.startswith("make "):
            target = span.split()[1]
            if target not in targets:
                problems.append(f"{where}: `{span}`: no Makefile target {target!r}")
        elif re.fullmatch(rf"[\w./-]*/[\w./-]*|[\w.-]+\.{EXTENSIONS}", span):
            check_path(span, problems, where)
        else:
            check_name(span, problems, where)
    text, lineno_at = joined(prose)
    for match in PATH_WORD.finditer(re.sub(r"`[^`]+`", lambda m: " " * len(m[0]), text)):
        check_path(match[1], problems, f"near line {lineno_at(match.start())}")
    return problems


def joined(lines: list[tuple[int, str]]) -> tuple[str, Callable[[int], int]]:
    """The lines as one text (a backticked span may run over a line break), and a function
    from an offset in it to the line number in the document."""
    starts = [0]
    for _, line in lines:
        starts.append(starts[-1] + len(line) + 1)

    def lineno_at(offset: int) -> int:
        return lines[min(bisect.bisect_right(starts, offset) - 1, len(lines) - 1)][0]

    return "\n".join(line for _, line in lines), lineno_at


def main() -> int:
    doc = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else DOC
    problems = check(doc)
    shown = doc.relative_to(ROOT) if doc.is_relative_to(ROOT) else doc
    for problem in problems:
        print(f"{shown}: {problem}")
    if problems:
        print(f"{len(problems)} citation(s) of {doc.name} not found in the code", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
