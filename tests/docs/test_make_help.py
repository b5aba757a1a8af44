"""`make help` lists every target of the Makefile, each with its line."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def phony_targets() -> set[str]:
    """The names in the Makefile's ``.PHONY:`` lines, continuation lines included."""
    text = (ROOT / "Makefile").read_text().replace("\\\n", " ")
    names: set[str] = set()
    for line in re.findall(r"(?m)^\.PHONY:(.*)$", text):
        names.update(line.split())
    return names


def test_every_phony_target_is_in_make_help() -> None:
    make = shutil.which("make")
    if make is None:
        pytest.skip("no make on PATH")
    done = subprocess.run(
        [make, "--no-print-directory", "-s", "help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    listed = {}
    for line in done.stdout.splitlines():
        match = re.fullmatch(r"make(?: (\S+))?\s+(\S.*)", line)
        assert match, f"make help printed a line that is not `make TARGET  what it does`: {line!r}"
        listed[match.group(1) or "all"] = match.group(2)
    targets = phony_targets()
    assert {"all", "help", "test", "dist", "docs-check"} <= targets
    missing = sorted(targets - listed.keys())
    assert not missing, f"targets missing from make help (add a `## make NAME ...` line): {missing}"
    stale = sorted(listed.keys() - targets)
    assert not stale, f"make help lists targets the Makefile does not declare .PHONY: {stale}"
