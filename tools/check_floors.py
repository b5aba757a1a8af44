"""Checks that the Rust core's files stand on floors: no file imports, directly or through
others, a file that imports it.

    python tools/check_floors.py [--quiet] [--levels] [--src DIR]

`make test` runs it beside tools/check_architecture.py. It reads crates/oxtree/src as text (no
build): every path a file names (`use crate::a::b`, `crate::a::f()` in code, `super::x`,
`self::x`, a child module's name in a `mod.rs`) is resolved to the file that defines its
module, following `use` re-exports to the file that defines the name, and becomes an arrow
from the file to that one. Declaring a child module (`mod x;`) is no arrow: a folder's
`mod.rs` may stand below the files it declares. A `#[macro_export]` macro counts as its
defining file's (`crate::internal!` is errors.rs's). `#[cfg(test)]` modules are skipped: a
test may use anything.

Two rules, and the exit status is 1 when either is broken:

- No import circle: a strongly connected component of two or more files is printed with the
  arrows inside it.
- Every file stands on one of the named floors of `FLOORS` (docs/architecture.md draws
  them) and imports only files on its own floor or below. A new file must be given a floor.

It prints the named floors, lowest first, and with `--levels` the finer levels the arrows
alone give (a file's level is one above the highest level of the files it imports; 0 for a
file that imports none of the crate's).
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "crates" / "oxtree" / "src"

IDENT = r"[A-Za-z_]\w*"

# The floors, lowest first: (name, the files on it, as paths relative to SRC; a path ending
# in `/` is every file of that folder). A file may import files of its own floor or below.
FLOORS: list[tuple[str, tuple[str, ...]]] = [
    ("raw access", ("ffi/", "invariant.rs")),
    (
        "kinds, types, registry, faces",
        (
            "kind.rs",
            "plugins.rs",
            "path_text.rs",
            "key_classes.rs",
            "types.rs",
            "spare.rs",
            "containers.rs",
            "registry.rs",
            "jax_registry.rs",
            "treespec/dict_order.rs",
            "errors/",
            "face/mod.rs",
            "face/options.rs",
            "pattern/mod.rs",
        ),
    ),
    ("model", ("treespec/node.rs", "treespec/mod.rs", "treespec/node_data.rs")),
    (
        "walks",
        (
            "treespec/classify.rs",
            "treespec/module_node.rs",
            "treespec/custom.rs",
            "treespec/keys.rs",
            "treespec/flatten.rs",
            "treespec/dict_template.rs",
            "treespec/unflatten.rs",
            "treespec/traverse.rs",
            "treespec/select.rs",
        ),
    ),
    (
        "operations",
        (
            "treespec/compare.rs",
            "treespec/repr.rs",
            "treespec/ops.rs",
            "treespec/pickle.rs",
            "treespec/proto.rs",
            "walk.rs",
            "prefix.rs",
            "algebra.rs",
            "graph.rs",
            "filter_jit.rs",
        ),
    ),
    (
        "Python methods and entry points",
        ("treespec/py_methods.rs", "pattern/py_methods.rs", "face/optree.rs", "face/jax.rs"),
    ),
    ("the module", ("lib.rs",)),
]


def floor_of(name: str) -> int | None:
    for level, (_, paths) in enumerate(FLOORS):
        for path in paths:
            if name == path or (path.endswith("/") and name.startswith(path)):
                return level
    return None


def strip(text: str) -> str:
    """`text` with comments, string literals and char literals blanked (newlines kept)."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif (raw := re.match(r'b?r(#*)"', text[i:])) and (i == 0 or not text[i - 1].isalnum()):
            end = '"' + raw[1]
            j = text.find(end, i + raw.end())
            j = n if j < 0 else j + len(end)
            out.append('""' + re.sub(r"[^\n]", " ", text[i + 2 : j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""' + re.sub(r"[^\n]", " ", text[i + 2 : j + 1]))
            i = j + 1
        elif c == "'" and (char := re.match(r"'(\\.[^']*|[^\\'])'", text[i:])):
            out.append("' '" + " " * (char.end() - 3))
            i += char.end()
        else:
            out.append(c)
            i += 1
    return "".join(out)


def without_tests(text: str) -> str:
    """`text` with every `#[cfg(test)]` item blanked."""
    while (m := re.search(r"#\[cfg\(test\)\]", text)) is not None:
        j = m.end()
        depth = 0
        while j < len(text):
            if text[j] == "{":
                depth += 1
            elif text[j] == "}":
                depth -= 1
                if depth == 0:
                    j += 1
                    break
            elif text[j] == ";" and depth == 0:
                j += 1
                break
            j += 1
        text = text[: m.start()] + re.sub(r"[^\n]", " ", text[m.start() : j]) + text[j:]
    return text


def module_of(path: Path) -> tuple[str, ...]:
    parts = path.relative_to(SRC).with_suffix("").parts
    if parts[-1] in ("mod", "lib"):
        parts = parts[:-1]
    return tuple(parts)


def expand_use(tree: str) -> list[tuple[list[str], str]]:
    """The paths of a use tree (`a::{b, c::{self, d as e}}`), each with the name it binds
    (`*` for a glob)."""
    out: list[tuple[list[str], str]] = []

    def walk(prefix: list[str], part: str) -> None:
        part = " ".join(part.split())
        brace = part.find("{")
        if brace < 0:
            m = re.fullmatch(rf"(.*?)(?:\s+as\s+({IDENT}))?", part)
            segs = [s.strip() for s in (m[1] if m else part).split("::") if s.strip()]
            if segs and segs[-1] == "self":
                segs = segs[:-1]
            path = prefix + segs
            if path:
                out.append((path, (m[2] if m and m[2] else path[-1])))
            return
        head = [s.strip() for s in part[:brace].split("::") if s.strip()]
        inner = part[brace + 1 : part.rfind("}")]
        depth, start = 0, 0
        for j, ch in enumerate(inner + ","):
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            elif ch == "," and depth == 0:
                if inner[start:j].strip():
                    walk(prefix + head, inner[start:j])
                start = j + 1

    walk([], tree)
    return out


class File:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.name = str(path.relative_to(SRC))
        self.module = module_of(path)
        self.text = without_tests(strip(path.read_text()))
        # Child modules declared in this file (`mod x;`), and inline modules (`mod x {`).
        self.children = set(re.findall(rf"\bmod\s+({IDENT})\s*;", self.text))
        self.macros = set(re.findall(rf"macro_rules!\s*({IDENT})", self.text))
        # name -> (the module the use sits in, its path), for every `use` of the file.
        self.uses: list[tuple[tuple[str, ...], list[str], str]] = []
        # (the module the path sits in, the path) for every path in code.
        self.paths: list[tuple[tuple[str, ...], list[str]]] = []
        self.scan()

    def inline_module_at(self) -> list[tuple[int, int, str]]:
        """(start, end, name) of each inline `mod name { ... }`."""
        spans = []
        for m in re.finditer(rf"\bmod\s+({IDENT})\s*\{{", self.text):
            depth, j = 0, m.end() - 1
            while j < len(self.text):
                if self.text[j] == "{":
                    depth += 1
                elif self.text[j] == "}":
                    depth -= 1
                    if depth == 0:
                        break
                j += 1
            spans.append((m.start(), j, m[1]))
        return spans

    def module_at(self, offset: int, spans: list[tuple[int, int, str]]) -> tuple[str, ...]:
        inner = [s for s in spans if s[0] <= offset <= s[1]]
        return self.module + tuple(name for _, _, name in sorted(inner))

    def scan(self) -> None:
        spans = self.inline_module_at()
        used = []
        for m in re.finditer(r"\buse\s+([^;]+);", self.text):
            used.append((m.start(), m.end()))
            where = self.module_at(m.start(), spans)
            for path, alias in expand_use(m[1]):
                self.uses.append((where, path, alias))
        text = self.text
        for start, end in used:
            text = text[:start] + " " * (end - start) + text[end:]
        for m in re.finditer(rf"(?<![\w:])((?:{IDENT}::)+{IDENT})(!?)", text):
            where = self.module_at(m.start(), spans)
            self.paths.append((where, m[1].split("::") + (["!"] if m[2] else [])))


def main() -> int:
    global SRC
    quiet = "--quiet" in sys.argv
    if "--src" in sys.argv:
        # Another tree's crate sources (an older commit's, to compare floors).
        SRC = Path(sys.argv[sys.argv.index("--src") + 1]).resolve()
    files = [File(p) for p in sorted(SRC.rglob("*.rs"))]
    by_module = {f.module: f for f in files}
    macros = {m: f for f in files for m in f.macros}
    # Every module, inline ones included, that some file defines.
    modules = dict(by_module)
    for f in files:
        for _, _, name in f.inline_module_at():
            modules.setdefault((*f.module, name), f)
    # Names bound by `use` in each module: module -> name -> absolute path.
    bound: dict[tuple[str, ...], dict[str, list[str]]] = defaultdict(dict)

    def absolute(where: tuple[str, ...], path: list[str]) -> list[str] | None:
        """`path`, written in module `where`, as a path from the crate root; None when it
        leaves the crate (std, pyo3)."""
        head, rest = path[0], path[1:]
        if head == "crate":
            return rest
        if head == "self":
            return [*where, *rest]
        if head == "super":
            up = list(where)
            while path and path[0] == "super":
                up = up[:-1]
                path = path[1:]
            return up + path
        if (*where, head) in modules:
            return [*where, *path]
        if head in bound.get(tuple(where), {}):
            return [*bound[tuple(where)][head], *rest]
        return None

    for f in files:
        for where, path, alias in f.uses:
            full = absolute(where, path)
            if full is not None and alias and alias != "*":
                bound[where][alias] = full

    def resolve(path: list[str], seen: int = 0) -> File | None:
        if path and path[-1] == "!":
            return macros.get(path[-2]) if len(path) >= 2 else None
        for cut in range(len(path), -1, -1):
            module = tuple(path[:cut])
            if module not in modules:
                continue
            rest = path[cut:]
            if rest and seen < 20 and rest[0] in bound.get(module, {}):
                return resolve(bound[module][rest[0]] + rest[1:], seen + 1)
            return modules[module]
        return None

    arrows: dict[str, set[str]] = {f.name: set() for f in files}
    for f in files:
        for where, path, _ in f.uses:
            full = absolute(where, path)
            target = resolve(full) if full is not None else None
            if target is not None and target is not f:
                arrows[f.name].add(target.name)
        for where, path in f.paths:
            if path[-1] == "!" and path[0] == "crate" and len(path) == 3:
                target = macros.get(path[1])
            else:
                full = absolute(where, path)
                target = resolve(full) if full is not None else None
            if target is not None and target is not f:
                arrows[f.name].add(target.name)

    components = strongly_connected(arrows)
    circles = [c for c in components if len(c) > 1]
    total = sum(len(a) for a in arrows.values())
    unplaced = sorted(n for n in arrows if floor_of(n) is None)
    placed = {name: floor_of(name) for name in arrows}
    upward = sorted(
        (name, dest)
        for name, dests in arrows.items()
        for dest in dests
        if (here := placed[name]) is not None
        and (there := placed[dest]) is not None
        and there > here
    )
    print(
        f"{len(files)} files, {total} arrows, {len(circles)} import circle(s), "
        f"{len(upward)} arrow(s) up a floor, {len(unplaced)} file(s) on no floor"
    )
    if not quiet:
        for level, (name, _) in enumerate(FLOORS):
            names = sorted(n for n in arrows if floor_of(n) == level)
            print(f"floor {level} ({name}): " + ", ".join(names))
    if "--levels" in sys.argv or (circles and not quiet):
        print_levels(arrows, components)
    for c in circles:
        members = set(c)
        print(f"\nimport circle of {len(c)} files:")
        for name in sorted(c):
            inside = sorted(arrows[name] & members)
            print(f"  {name} -> {', '.join(inside)}")
    for name, dest in upward:
        print(f"arrow up a floor: {name} (floor {placed[name]}) -> {dest} (floor {placed[dest]})")
    for name in unplaced:
        print(f"on no floor: {name} (give it one in FLOORS, tools/check_floors.py)")
    return 1 if circles or upward or unplaced else 0


def print_levels(arrows: dict[str, set[str]], components: list[list[str]]) -> None:
    """The levels the arrows alone give (a circle's files share one)."""
    component_of = {name: i for i, c in enumerate(components) for name in c}
    level: dict[int, int] = {}
    # Tarjan's order lists every component after the ones it imports.
    for i, c in enumerate(components):
        below = {component_of[t] for n in c for t in arrows[n]} - {i}
        level[i] = 1 + max((level[j] for j in below), default=-1)
    for n in range(max(level.values(), default=-1) + 1):
        names = sorted(m for i, c in enumerate(components) if level[i] == n for m in c)
        print(f"level {n}: " + ", ".join(names))


def strongly_connected(arrows: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative: the components, each after every component it reaches."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for root in sorted(arrows):
        if root in index:
            continue
        work = [(root, iter(sorted(arrows[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(arrows[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        component.append(top)
                        if top == node:
                            break
                    out.append(sorted(component))
    return out


if __name__ == "__main__":
    sys.exit(main())
