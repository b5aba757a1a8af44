"""The package's modules import each other without a circle.

The graph is read from the source (ast), not from a running interpreter: every ``import`` and
``from ... import`` of an ``oxtree`` module, at module level and inside functions alike (a
function-level import still makes its module depend on the imported one; it only delays the
moment). Two kinds of import are left out, each for a reason:

- those under ``if TYPE_CHECKING:``, which never run (they tell type checkers what a lazily
  loaded name is);
- the few function-level imports listed in ``LAZY_ALLOWED``, each with its reason: the optree
  face's ``ops`` and ``registry`` modules, whose names and contents optree fixes, need each
  other (and ``ops`` the package's names) at call time.

The package's ``__init__`` files load their submodules on first use through
``importlib.import_module`` (PEP 562 ``__getattr__``), which is no import statement and gives
no edge; a submodule that imports its package's ``__init__`` for a name shows as an edge to
the package, and the second test refuses it (the face modules listed there excepted).

An import names a module (``import oxtree.jax``, ``from oxtree import graph``) or a name in
one (``from oxtree.graph import graph_unflatten``): the edge goes to the module that is
named, the package's ``__init__`` when the name is not a submodule.
"""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "python" / "oxtree"

# Function-level imports that may close a circle, (importer, imported) -> why. Each is made at
# call time only, long after both modules are loaded; the import at module level goes the
# other way.
LAZY_ALLOWED = {
    ("oxtree.registry", "oxtree.ops"): (
        "optree's `register_pytree_node.get` gives a builtin node's flatten and unflatten "
        "functions, which are ops' one-level flatten and its unflatten table; ops reads "
        "registrations (DictMetaData, path entry types) at module level"
    ),
    ("oxtree.ops", "oxtree"): (
        "`oxtree.ops.__getattr__` hands out the package's names on first use, since "
        "`optree.ops` holds them all; the package imports ops only on first use too"
    ),
}
# Face modules that import the package itself for names, at call time or for its `__all__`:
# `oxtree.ops.__getattr__` hands out the package's names as `optree.ops` holds them, and
# `oxtree.pytree` re-exports the package's `tree_*` functions under short names.
FACES_OF_THE_PACKAGE = {"oxtree.ops", "oxtree.pytree"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    """Each module of the package by name: its source, or for the Rust core (which imports
    nothing of the package) its stub."""
    found = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
    for stub in sorted(PACKAGE.rglob("*.pyi")):
        found.setdefault(_module_name(stub), stub)
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> list[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement of ``tree``, each with whether it is inside a function; function
    bodies included, ``if TYPE_CHECKING:`` blocks left out (their ``else`` branch is kept)."""
    found: list[tuple[ast.Import | ast.ImportFrom, bool]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child, in_function)
            return
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append((node, in_function))
        inner = in_function or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        for child in ast.iter_child_nodes(node):
            visit(child, inner)

    visit(tree, False)
    return found


def _edges(name: str, path: Path, modules: dict[str, Path], *, lazy: bool) -> dict[str, int]:
    """The oxtree modules ``name`` imports, each with the line of its first import; with
    ``lazy``, the function-level imports of ``LAZY_ALLOWED`` left out."""
    is_package = path.name == "__init__.py"
    out: dict[str, int] = {}

    def add(target: str, line: int, in_function: bool) -> None:
        if target != name and not (lazy and in_function and (name, target) in LAZY_ALLOWED):
            out.setdefault(target, line)

    for node, in_function in _imports(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "oxtree" or alias.name.startswith("oxtree."):
                    add(alias.name, node.lineno, in_function)
            continue
        base = node.module or ""
        if node.level:  # relative: from the package holding this module
            package = name if is_package else name.rpartition(".")[0]
            for _ in range(node.level - 1):
                package = package.rpartition(".")[0]
            base = f"{package}.{base}" if base else package
        if base != "oxtree" and not base.startswith("oxtree."):
            continue
        for alias in node.names:
            sub = f"{base}.{alias.name}"
            add(sub if sub in modules else base, node.lineno, in_function)
    return out


def _graph() -> dict[str, dict[str, int]]:
    modules = _modules()
    graph = {name: _edges(name, path, modules, lazy=True) for name, path in modules.items()}
    for name, edges in graph.items():
        unknown = [t for t in edges if t not in modules]
        assert not unknown, f"{name} imports {unknown}, which are no modules of the package"
    return graph


def _cycle(graph: dict[str, dict[str, int]]) -> list[str] | None:
    """One import circle of ``graph`` (its modules in order, the first repeated last)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for target in graph.get(node, {}):
            if state.get(target) == 1:
                return [*stack[stack.index(target) :], target]
            if target not in state:
                found = visit(target)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def _describe(graph: dict[str, dict[str, int]], cycle: list[str]) -> str:
    return (
        " -> ".join(f"{a} (line {graph[a][b]})" for a, b in itertools.pairwise(cycle))
        + f" -> {cycle[-1]}"
    )


def test_the_package_has_no_import_circle() -> None:
    graph = _graph()
    assert len(graph) > 30  # the whole package was read
    cycle = _cycle(graph)
    assert cycle is None, f"import circle: {_describe(graph, cycle)}"


def test_the_allowed_lazy_imports_are_lazy_and_still_there() -> None:
    # Each allowed edge exists, only inside functions: a stale entry, or one made at module
    # level, fails here.
    modules = _modules()
    for (name, target), reason in LAZY_ALLOWED.items():
        assert reason
        every = _edges(name, modules[name], modules, lazy=False)
        assert target in every, f"{name} no longer imports {target}: drop it from LAZY_ALLOWED"
        kept = _edges(name, modules[name], modules, lazy=True)
        assert target not in kept, f"{name} imports {target} at module level"


def test_no_submodule_imports_its_package_for_a_name() -> None:
    # `from oxtree.jax import filter_jit` inside oxtree/jax/_vmap.py would run the package's
    # __init__ (which imports _vmap) for a name that some other submodule defines: import it
    # from there. The top-level package counts too (`import oxtree` inside oxtree.ops).
    graph = _graph()
    wrong = [
        f"{name} imports {target} (line {line})"
        for name, edges in graph.items()
        for target, line in edges.items()
        if name.startswith(f"{target}.")
        and _modules()[target].name == "__init__.py"
        and name not in FACES_OF_THE_PACKAGE
    ]
    assert not wrong, "; ".join(wrong)


@pytest.mark.parametrize(
    ("a", "b", "circle"),
    [
        ("import oxtree.b", "from oxtree import a", True),
        ("def f():\n    from oxtree.b import x", "import oxtree.a", True),
        ("from . import b", "from .a import x", True),
        ("if TYPE_CHECKING:\n    import oxtree.b", "import oxtree.a", False),
        ("import oxtree.b", "import os", False),
    ],
)
def test_the_checker_finds_circles(a: str, b: str, circle: bool, tmp_path: Path) -> None:
    # The rules on a made-up package of two modules: a circle through a function-level or a
    # relative import is found, one through a TYPE_CHECKING import is not.
    paths = {}
    for stem, text in (("a", a), ("b", b)):
        path = paths[f"oxtree.{stem}"] = tmp_path / f"{stem}.py"
        path.write_text(f"TYPE_CHECKING = False\n{text}\n")
    graph = {name: _edges(name, path, paths, lazy=False) for name, path in paths.items()}
    found = _cycle(graph)
    assert (found == ["oxtree.a", "oxtree.b", "oxtree.a"]) if circle else found is None
