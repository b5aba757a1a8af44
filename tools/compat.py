"""Runs optree 0.20.0's own test suite, unchanged, against oxtree (what `make compat` runs).

The suite comes from optree's sdist on PyPI (fetched once into `.compat/`, its sha256
checked). `tests/compat/optree/` is an alias package, put on `sys.path` for this run only,
that makes `import optree` and every `optree.<submodule>` resolve to oxtree's modules. The
tests named in `tests/compat/deselect.txt` (each with its reason) are left out. The last line
printed is the score; the exit status is non-zero below the bar.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import urllib.request
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".compat"
VERSION = "0.20.0"
SDIST = f"optree-{VERSION}.tar.gz"
SHA256 = "c7403eb0f2b2a060a97803a8f52904212df85ed6cff4b0eeed9cc6e38c2cf88d"
INDEX = "https://pypi.org/simple/optree/"
ALIAS = ROOT / "tests" / "compat"
DESELECT = ALIAS / "deselect.txt"
BAR = 99.0


def _sdist_url() -> str:
    """The sdist's link on PyPI's simple index, with its sha256 fragment checked."""
    request = urllib.request.Request(INDEX, headers={"User-Agent": "oxtree-compat"})
    with urllib.request.urlopen(request, timeout=60) as response:
        page = response.read().decode()
    for href in re.findall(r'href="([^"]+)"', page):
        url, _, fragment = href.partition("#")
        if url.rsplit("/", 1)[-1] == SDIST:
            if fragment != f"sha256={SHA256}":
                raise SystemExit(f"compat: {SDIST} on PyPI has {fragment!r}, expected {SHA256}")
            return url
    raise SystemExit(f"compat: {SDIST} is not listed on {INDEX}")


def fetch() -> Path:
    """The folder holding optree's `tests/`, downloading and unpacking the sdist if needed."""
    unpacked = CACHE / f"optree-{VERSION}"
    if (unpacked / "tests" / "helpers.py").is_file():
        return unpacked
    CACHE.mkdir(exist_ok=True)
    archive = CACHE / SDIST
    if not archive.is_file() or hashlib.sha256(archive.read_bytes()).hexdigest() != SHA256:
        url = _sdist_url()
        print(f"compat: downloading {url}", flush=True)
        with urllib.request.urlopen(url, timeout=300) as response:
            data = response.read()
        digest = hashlib.sha256(data).hexdigest()
        if digest != SHA256:
            raise SystemExit(f"compat: {SDIST} has sha256 {digest}, expected {SHA256}")
        archive.write_bytes(data)
    shutil.rmtree(unpacked, ignore_errors=True)
    prefix = f"optree-{VERSION}/tests/"
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(prefix)]
        # Only the tests: never optree's own package, which would shadow the alias.
        tar.extractall(CACHE, members=members, filter="data")
    return unpacked


def deselected() -> list[str]:
    """Node ids from deselect.txt (`node id  # reason` per line)."""
    ids = []
    for line in DESELECT.read_text().splitlines():
        node = line.split("#", 1)[0].strip()
        if node:
            ids.append(node)
    return ids


def score(report: Path) -> tuple[int, int, dict[str, list[str]]]:
    """(passed, scored, failures by test file) from pytest's JUnit XML report."""
    passed = scored = 0
    failures: dict[str, list[str]] = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        outcome = {child.tag for child in case}
        if "skipped" in outcome:
            continue
        scored += 1
        if outcome & {"failure", "error"}:
            failures.setdefault(case.get("classname", ""), []).append(case.get("name", ""))
        else:
            passed += 1
    return passed, scored, failures


def shards(suite: Path, jobs: int) -> list[list[str]]:
    """The suite's test files dealt into `jobs` groups of about equal size (by bytes).

    Parallel runs are one pytest process per group rather than pytest-xdist: xdist needs
    every worker to collect the same test ids, and some of optree's ids hold object addresses.
    """
    files = sorted(
        (p for p in (suite / "tests").rglob("test_*.py")),
        key=lambda p: p.stat().st_size,
        reverse=True,
    )
    groups: list[list[str]] = [[] for _ in range(jobs)]
    sizes = [0] * jobs
    for path in files:
        i = sizes.index(min(sizes))
        groups[i].append(str(path.relative_to(suite)))
        sizes[i] += path.stat().st_size
    return [g for g in groups if g]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", "-n", type=int, default=2, help="parallel pytest processes")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (e.g. a file)")
    args = parser.parse_args()
    suite = fetch()
    env = dict(os.environ)
    # Test ids hold reprs of sets and dicts: keep them stable between runs.
    env["PYTHONHASHSEED"] = "0"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ALIAS), env.get("PYTHONPATH")]))
    targets = [a for a in args.pytest_args if not a.startswith("-")]
    options = [a for a in args.pytest_args if a.startswith("-")]
    groups = [targets] if targets else shards(suite, max(1, args.jobs))
    reports = [CACHE / f"report-{i}.xml" for i in range(len(groups))]
    running = []
    for group, report in zip(groups, reports, strict=True):
        report.unlink(missing_ok=True)
        command = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-c",
            str(ALIAS / "pytest.ini"),
            "--rootdir",
            str(suite),
            f"--junitxml={report}",
            *(f"--deselect=tests/{node}" for node in deselected()),
            *options,
            *group,
        ]
        running.append(subprocess.Popen(command, cwd=suite, env=env))
    for process in running:
        process.wait()
    passed = scored = 0
    for report in reports:
        if not report.is_file():
            print(f"compat: no report in {report} (pytest did not finish)")
            return 1
        p, s, _ = score(report)
        passed, scored = passed + p, scored + s
    percent = 100.0 * passed / scored if scored else 0.0
    print(f"optree suite: {passed} passed / {scored} scored = {percent:.2f}%")
    return 0 if percent >= BAR else 1


if __name__ == "__main__":
    sys.exit(main())
