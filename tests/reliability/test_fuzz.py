"""A short run of the fuzzer (fuzz/fuzz.py), and checks that its driver reports crashes.

`make fuzz` runs a million cases; this runs a few thousand with a fixed seed, in subprocesses
chunk by chunk like the long run, and fails on any crash or finding (a wrong result compared
with optree / jax.tree_util or with the case's own round trip, or an exception that is not a
clean TypeError, ValueError, KeyError, IndexError, RecursionError or RuntimeError). Each
failure message carries the command that replays the case.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
DRIVER = ROOT / "fuzz" / "fuzz.py"
SEED = int(os.environ.get("OXTREE_FUZZ_SEED", "20251121"))
CASES = int(os.environ.get("OXTREE_FUZZ_CASES", "2000"))


def drive(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None
) -> tuple[dict[str, Any], str]:
    report = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, str(DRIVER), "--report", str(report), "--tmp", str(tmp_path), *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, **(env or {})},
    )
    assert report.exists(), proc.stdout[-2000:] + proc.stderr[-2000:]
    return json.loads(report.read_text()), proc.stdout


def describe(report: dict[str, Any]) -> str:
    lines = []
    for crash in report["crashes"][:5]:
        lines.append(
            f"CRASH {crash['replay']} (returncode {crash['returncode']})\n{crash['stderr'][-800:]}"
        )
    for f in report["findings"][:10]:
        replay = f"python fuzz/fuzz.py --seed {f['seed']} --start {f['index']} --count 1 -v"
        lines.append(f"{f['what']} in {f['op']} ({f['kind']}): {replay}\n  {f['detail'][:400]}")
    return "\n".join(lines)


# Thousands of cases in two subprocesses, the longest test of the suite (54 s on a loaded
# two-core machine, 128 s with eleven processes on two cores): as long as drive() lets the
# driver run.
@pytest.mark.timeout(600)
def test_short_fuzz_run_is_clean(tmp_path):
    report, _ = drive(
        tmp_path,
        "--seed",
        str(SEED),
        "--cases",
        str(CASES),
        "--chunk",
        str(CASES // 2),
        "--jobs",
        "2",
        "--quiet",
    )
    assert report["cases"] == CASES
    assert report["calls"] > 5 * CASES
    assert not report["crashes"], describe(report)
    assert not report["findings"], describe(report)


def test_driver_reports_a_crash_with_its_seed_and_resumes(tmp_path):
    report, out = drive(
        tmp_path,
        "--seed",
        "7",
        "--cases",
        "40",
        "--chunk",
        "40",
        "--jobs",
        "1",
        "--quiet",
        env={"OXTREE_FUZZ_CRASH_AT": "13"},
    )
    (crash,) = report["crashes"]
    assert crash["seed"] == 7
    assert crash["index"] == 13
    assert crash["returncode"] == -11
    assert "--seed 7 --start 13 --count 1" in crash["replay"]
    assert crash["replayed"]["returncode"] == -11  # the replay dies the same way
    assert "CRASH seed=7 index=13" in out
    assert report["cases"] == 40  # the cases after the crash ran too


@pytest.mark.parametrize("kind", ["tree", "hostile", "pickle", "state", "json", "graph"])
def test_every_case_kind_is_generated(kind):
    import cases  # fuzz/cases.py (fuzz/ is on sys.path: conftest.py)

    kinds = set()
    for index in range(400):
        findings: list[dict[str, Any]] = []
        case = cases.Case(SEED, index, findings)
        roll = case.rng.random()
        kinds.add(next(k for limit, k in cases.KIND_ODDS if roll < limit))
    assert kind in kinds


def test_a_panic_or_an_internal_error_is_a_finding():
    # pyo3 raises a Rust panic as pyo3_runtime.PanicException, a BaseException; the core's
    # invariant failures raise SystemError. Neither is a clean exception: both are findings.
    sys.path.insert(0, str(ROOT / "fuzz"))
    import cases

    class PanicException(BaseException):
        pass

    def panics():
        raise PanicException("called `Option::unwrap()` on a `None` value")

    def internal():
        raise SystemError("an invariant failed: please report this to oxtree")

    findings: list[dict[str, Any]] = []
    case = cases.Case(SEED, 0, findings)
    assert case.call("panicking op", panics)[0] is False
    assert case.call("internal op", internal)[0] is False
    assert [(f["what"], f["op"]) for f in findings] == [
        ("panic", "panicking op"),
        ("bad-exception", "internal op"),
    ]
    assert "PanicException" in findings[0]["detail"]
