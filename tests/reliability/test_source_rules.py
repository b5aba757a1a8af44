"""Rules on the Rust core's source that keep two promises true as the code changes.

- Every ``unsafe`` block of the core lives in ``crates/oxtree/src/ffi/``, behind typed safe
  wrappers, each with its ``SAFETY:`` contract stated once (docs/architecture.md, "Unsafe code").
- No invariant failure surfaces as pyo3's ``PanicException`` (a ``BaseException`` that
  ``except Exception`` does not catch): the core returns a ``SystemError`` that asks for a
  report instead (``errors::internal!``, ``Invariant::invariant``). Code outside tests may not
  call ``expect``/``unwrap``/``unreachable!``/``panic!``/``assert!`` but in the allowed spots
  below, each with its reason.
- Every exception the core raises on its own account is built in ``crates/oxtree/src/errors/``
  (one enum, ``TreeError``, rendered in optree's or JAX's words), or, for a broken invariant of
  oxtree's own, in ``invariant.rs``, the floor below: no ``Py*Error::new_err`` or
  ``PyErr::new`` anywhere else (docs/architecture.md, "Errors").
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "crates" / "oxtree" / "src"
FFI = SRC / "ffi"

# (file relative to SRC, a piece of the line): why the panic cannot happen or is acceptable.
ALLOWED_PANICS = {
    ("types.rs", 'expect("the collections module always imports")'): (
        "the standard library's collections module, imported once when the extension module "
        "loads (before any call); Python itself cannot start without it"
    ),
    ("types.rs", 'expect("collections defines its container types")'): (
        "OrderedDict, defaultdict and deque are defined by every collections module of every "
        "supported CPython"
    ),
}

PANICS = re.compile(
    r"\.expect\(|\.unwrap\(\)|\bunreachable!|\bpanic!|\btodo!|\bunimplemented!"
    r"|(?<!debug_)\bassert(_eq|_ne)?!"
)
UNSAFE = re.compile(r"\bunsafe\b")
RAISE = re.compile(r"\bPy\w*(Error|Exception|Warning)::new_err\b|\bPyErr::new\b")
ERRORS = SRC / "errors"


def rust_files() -> list[Path]:
    return sorted(SRC.rglob("*.rs"))


def code_lines(path: Path) -> list[tuple[int, str]]:
    """The lines of `path` outside `#[cfg(test)]` items, string literals and `//` comments
    blanked."""
    out = []
    skipping = False  # inside a `#[cfg(test)]` item
    depth = 0
    for number, line in enumerate(path.read_text().splitlines(), 1):
        code = re.sub(r'"(\\.|[^"\\])*"', '""', line).split("//", 1)[0]
        if code.strip() == "#[cfg(test)]":
            skipping, depth = True, 0
            continue
        if skipping:
            opened = depth > 0 or "{" in code
            depth += code.count("{") - code.count("}")
            if (opened and depth <= 0) or (not opened and code.rstrip().endswith(";")):
                skipping = False
            continue
        out.append((number, code))
    return out


def ffi_files() -> list[Path]:
    return sorted(FFI.rglob("*.rs"))


def test_the_sources_are_found():
    assert FFI.is_dir()
    assert ffi_files()
    assert len(rust_files()) > 20


def test_unsafe_appears_only_in_ffi():
    found = [
        f"{path.relative_to(SRC)}:{number}: {code.strip()}"
        for path in rust_files()
        if FFI not in path.parents
        for number, code in code_lines(path)
        if UNSAFE.search(code)
    ]
    assert not found, "unsafe outside crates/oxtree/src/ffi/:\n" + "\n".join(found)


def test_exceptions_are_built_only_in_the_error_catalogue():
    found = [
        f"{path.relative_to(SRC)}:{number}: {code.strip()}"
        for path in rust_files()
        if ERRORS not in path.parents and path != SRC / "invariant.rs"
        for number, code in code_lines(path)
        if RAISE.search(code)
    ]
    assert not found, (
        "an exception built outside crates/oxtree/src/errors/ (add a TreeError variant):\n"
        + "\n".join(found)
    )
    # The rule sees what it must: the catalogue itself builds them.
    assert any(RAISE.search(code) for number, code in code_lines(ERRORS / "mod.rs"))


def test_every_unsafe_block_in_ffi_states_its_contract():
    missing = []
    for path in ffi_files():
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            code = line.split("//", 1)[0]
            if not UNSAFE.search(code) or re.search(r"\bunsafe fn\b", code):
                continue
            # The contract is the comment right above (`// SAFETY:`), or for an `unsafe fn`
            # its `# Safety` section.
            above = "\n".join(lines[max(0, i - 12) : i + 1])
            if "SAFETY:" not in above:
                missing.append(f"{path.relative_to(SRC)}:{i + 1}: {line.strip()}")
    assert not missing, "unsafe without a SAFETY comment:\n" + "\n".join(missing)


def test_no_panic_outside_tests_but_the_allowed_spots():
    seen = set()
    found = []
    for path in rust_files():
        name = str(path.relative_to(SRC))
        text = path.read_text().splitlines()
        for number, code in code_lines(path):
            if not PANICS.search(code):
                continue
            line = text[number - 1]
            allowed = [key for key in ALLOWED_PANICS if key[0] == name and key[1] in line]
            if allowed:
                seen.update(allowed)
            else:
                found.append(f"{name}:{number}: {line.strip()}")
    assert not found, (
        "a panic reachable from Python (raise SystemError with errors::internal! or "
        "Invariant::invariant instead):\n" + "\n".join(found)
    )


@pytest.mark.parametrize("spot", sorted(ALLOWED_PANICS))
def test_each_allowed_panic_still_exists(spot):
    # An allowed spot that is gone must leave the list, so the list never allows a new one.
    name, piece = spot
    path = SRC / name
    if not path.exists():
        pytest.skip(f"{name} is not in this tree")
    assert piece in path.read_text(), f"{name} no longer has {piece}: remove it from the list"
