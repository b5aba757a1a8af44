"""Runs JAX's own ``tests/tree_util_test.py`` against oxtree's JAX face and scores it.

The test file is read from a snapshot of the jax repository, a bare or normal git clone of
github.com/jax-ml/jax (it is not on PyPI, and it is never copied into this repository;
``git clone --bare https://github.com/jax-ml/jax .compat/jax`` makes one where ``--snapshot``
looks by default), into a temporary directory, and run twice with pytest
under this interpreter: once as it is, against the installed jax (which tests pass on JAX
itself: those are the scored tests), and once with ``jax.tree_util`` / ``jax.tree``
presented as ``oxtree.tree_util`` / ``oxtree.tree`` (see ``plugin.py``). The last line is
``jax suite[ (jax X, Python Y)]: P passed / S scored = X%``; the exit status is non-zero below
the bar (99%) or when a public name of the installed ``jax.tree_util`` / ``jax.tree`` is
missing from oxtree's faces or takes other parameters. Without the snapshot it prints one
line saying so and exits 0.

    python tools/compat_jax/run.py --ref jax-v0.10.2
    python tools/compat_jax/run.py --ref HEAD --label
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import platform
import subprocess
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# The default snapshot: .compat/jax in this clone (git-ignored), what `make compat-jax` uses
# unless JAX_SNAPSHOT says otherwise.
SNAPSHOT = HERE.parent.parent / ".compat" / "jax"
TEST_PATH = "tests/tree_util_test.py"
BAR = 99.0


def read_test_file(snapshot: Path, ref: str) -> str | None:
    if not snapshot.is_dir():
        return None
    proc = subprocess.run(
        ["git", "-C", str(snapshot), "show", f"{ref}:{TEST_PATH}"],
        capture_output=True,
        text=True,
        check=False,
    )
    return proc.stdout if proc.returncode == 0 else None


def run_face(workdir: Path, face: str, jobs_env: dict[str, str]) -> dict[str, dict[str, str]]:
    results = workdir / f"results-{face}.json"
    env = {
        **os.environ,
        **jobs_env,
        "OXTREE_COMPAT_FACE": face,
        "OXTREE_COMPAT_RESULTS": str(results),
        "OXTREE_COMPAT_DESELECTED": str(HERE / "deselected.txt"),
        "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu"),
    }
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-c",
        str(workdir / "pytest.ini"),
        "--rootdir",
        str(workdir),
        "tree_util_test.py",
    ]
    proc = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, check=False)
    if not results.exists() or proc.returncode not in (0, 1):
        sys.stdout.write(proc.stdout[-6000:] + proc.stderr[-3000:])
        raise SystemExit(f"the {face} run did not complete (pytest exit status {proc.returncode})")
    outcomes: dict[str, dict[str, str]] = json.loads(results.read_text())
    return outcomes


def _params(fn: Any) -> list[tuple[str, str, Any]] | None:
    """Each parameter's name, kind and default (sentinel defaults by presence only)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # nanobind classes: no introspectable signature
        return None
    out = []
    for p in sig.parameters.values():
        d = p.default
        if d is not inspect.Parameter.empty and not (
            d is None or isinstance(d, bool | int | float | str | tuple)
        ):
            d = "<sentinel>"
        out.append((p.name, p.kind.name, d))
    return out


def check_public_names() -> list[str]:
    """Where oxtree's faces lack a public name of the installed jax.tree_util / jax.tree, or
    have it with other parameters."""
    import jax.tree
    import jax.tree_util
    import oxtree.tree
    import oxtree.tree_util

    problems = []
    for theirs, ours in ((jax.tree_util, oxtree.tree_util), (jax.tree, oxtree.tree)):
        for name in sorted(n for n in dir(theirs) if not n.startswith("_")):
            if not hasattr(ours, name):
                problems.append(f"{ours.__name__} has no {name}")
                continue
            expected = _params(getattr(theirs, name))
            if expected is not None and _params(getattr(ours, name)) != expected:
                problems.append(f"{ours.__name__}.{name}: parameters differ from JAX's")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ref", default="jax-v0.10.2", help="git ref of the jax snapshot")
    parser.add_argument("--snapshot", type=Path, default=SNAPSHOT)
    parser.add_argument(
        "--label", action="store_true", help="name the jax and Python versions in the last line"
    )
    parser.add_argument(
        "--verbose", action="store_true", help="also list the passing and the unscored tests"
    )
    args = parser.parse_args()

    source = read_test_file(args.snapshot, args.ref)
    title = "jax suite"
    if args.label:
        python = ".".join(platform.python_version_tuple()[:2])
        title += f" (jax {version('jax')}, Python {python})"
    if source is None:
        print(f"{title}: skipped, no {TEST_PATH} at {args.ref} in {args.snapshot}")
        return 0

    with tempfile.TemporaryDirectory(prefix="oxtree-compat-jax-") as tmp:
        workdir = Path(tmp)
        (workdir / "tree_util_test.py").write_text(source)
        (workdir / "conftest.py").write_text((HERE / "plugin.py").read_text())
        (workdir / "pytest.ini").write_text("[pytest]\n")
        on_jax = run_face(workdir, "jax", {})
        on_oxtree = run_face(workdir, "oxtree", {})

    scored = sorted(name for name, r in on_jax.items() if r["outcome"] == "passed")
    passed = [name for name in scored if on_oxtree.get(name, {}).get("outcome") == "passed"]
    failing = [name for name in scored if name not in passed]
    for name in failing:
        why = on_oxtree.get(name, {"outcome": "not run", "why": ""})
        print(f"FAIL {name}: {why['outcome']}: {why['why'][:200]}")
    if args.verbose:
        for name in passed:
            print(f"pass {name}")
        for name, r in sorted(on_jax.items()):
            if r["outcome"] != "passed":
                print(f"not scored {name}: {r['outcome']} on jax: {r['why'][:160]}")
    names = check_public_names()
    for problem in names:
        print(f"NAME {problem}")
    not_scored = len(on_jax) - len(scored)
    print(f"({not_scored} tests that do not pass on jax itself are not scored)")
    pct = 100.0 * len(passed) / len(scored) if scored else 0.0
    print(f"public names of jax.tree_util and jax.tree: {len(names)} missing or different")
    print(f"{title}: {len(passed)} passed / {len(scored)} scored = {pct:.1f}%")
    return 0 if pct >= BAR and not names else 1


if __name__ == "__main__":
    raise SystemExit(main())
