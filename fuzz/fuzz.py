"""The fuzz driver: runs `cases.py` in subprocesses, chunk by chunk, and survives crashes.

    python fuzz/fuzz.py --cases 1000000 --jobs 2            # the full run (`make fuzz`)
    python fuzz/fuzz.py --cases 5000 --chunk 2500          # a short run
    python fuzz/fuzz.py --seed 3 --start 41577 --count 1 -v  # replay one case

Each chunk is a fresh interpreter that records the index of the case it is running in a
shared memory-mapped file before running it. When a chunk dies (a signal, an abort, a hang
past --timeout), the driver reads that index, reports the seed and index, replays the case
alone to confirm, and resumes the chunk after it. Findings (wrong results, exceptions that are
not clean) come back as JSON and are grouped by what failed, each with its replay command.
Exit status: 0 when there were no crashes and no findings.
"""

from __future__ import annotations

import argparse
import collections
import gc
import json
import mmap
import os
import signal
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def worker(seed: int, start: int, count: int, progress: str | None, verbose: bool) -> None:
    """Runs cases [start, start + count) in this process; prints one JSON summary line."""
    import faulthandler

    faulthandler.enable()
    import cases

    if count > 1 and not cases.NO_JAX:
        import jax.tree_util  # noqa: F401 (imported once, before the heap is frozen)

    # Everything imported so far is permanent: collections the cases trigger stay cheap.
    gc.collect()
    gc.freeze()

    marker = None
    if progress:
        handle = open(progress, "r+b")  # noqa: SIM115 (lives as long as the process)
        marker = mmap.mmap(handle.fileno(), 16)
    findings: list[dict[str, Any]] = []
    calls = 0
    # The driver's own test (tests/reliability/test_fuzz.py) makes one case die on purpose.
    crash_at = int(os.environ.get("OXTREE_FUZZ_CRASH_AT", "-1"))
    began = time.perf_counter()
    for index in range(start, start + count):
        if marker is not None:
            struct.pack_into("<qq", marker, 0, index, 1)
        if index == crash_at:
            os.kill(os.getpid(), signal.SIGSEGV)
        before = len(findings)
        calls += cases.run_case(seed, index, findings)
        if (index - start) % 500 == 499:
            print(f"CALLS {calls}", flush=True)  # a crash later in the chunk keeps the count
        for f in findings[before:]:
            # At once, so a later crash in the same chunk does not lose it.
            print("FINDING " + json.dumps(f), flush=True)
            if verbose:
                print(json.dumps(f, indent=1), file=sys.stderr)
    if marker is not None:
        struct.pack_into("<qq", marker, 0, start + count, 0)
    summary = {
        "cases": count,
        "calls": calls,
        "seconds": time.perf_counter() - began,
        "findings": len(findings),
    }
    print("SUMMARY " + json.dumps(summary), flush=True)


def _command(
    seed: int, start: int, count: int, progress: str | None, extra: list[str]
) -> list[str]:
    cmd = [sys.executable, *extra, str(HERE / "fuzz.py"), "--worker", "--seed", str(seed)]
    cmd += ["--start", str(start), "--count", str(count)]
    if progress:
        cmd += ["--progress", progress]
    return cmd


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONHASHSEED"] = "0"  # replays see the same set and dict orders
    env.setdefault("JAX_PLATFORMS", "cpu")
    return env


class Chunk:
    """One running subprocess over cases [start, end)."""

    def __init__(self, seed: int, start: int, end: int, args: argparse.Namespace) -> None:
        self.seed, self.start, self.end = seed, start, end
        fd, self.progress = tempfile.mkstemp(prefix="oxtree-fuzz-", dir=args.tmp)
        os.write(fd, b"\0" * 16)
        os.close(fd)
        # Open while the chunk runs; closed by close().
        self.out = tempfile.TemporaryFile(dir=args.tmp)  # noqa: SIM115
        self.err = tempfile.TemporaryFile(dir=args.tmp)  # noqa: SIM115
        self.began = time.monotonic()
        self.proc = subprocess.Popen(
            _command(seed, start, end - start, self.progress, args.python_flags),
            stdout=self.out,
            stderr=self.err,
            env=_env(),
        )

    def running_index(self) -> int:
        with open(self.progress, "rb") as f:
            index, busy = struct.unpack("<qq", f.read(16))
        return index if busy else -1

    def read(self) -> tuple[str, str]:
        self.out.seek(0)
        self.err.seek(0)
        return self.out.read().decode(errors="replace"), self.err.read().decode(errors="replace")

    def close(self) -> None:
        self.out.close()
        self.err.close()
        os.unlink(self.progress)


def replay_crashes(seed: int, index: int, args: argparse.Namespace) -> dict[str, Any]:
    """Runs one case alone; reports whether it crashes again."""
    proc = subprocess.run(
        _command(seed, index, 1, None, args.python_flags),
        capture_output=True,
        text=True,
        env=_env(),
        timeout=args.timeout,
        check=False,
    )
    return {"returncode": proc.returncode, "stderr": proc.stderr[-3000:]}


def drive(args: argparse.Namespace) -> int:
    pending = collections.deque(
        (s, min(s + args.chunk, args.start + args.cases))
        for s in range(args.start, args.start + args.cases, args.chunk)
    )
    running: list[Chunk] = []
    totals = {"cases": 0, "calls": 0, "cpu_seconds": 0.0}
    findings: list[dict[str, Any]] = []
    crashes: list[dict[str, Any]] = []
    began = time.monotonic()
    try:
        _loop(args, pending, running, totals, findings, crashes, began)
    finally:
        for chunk in running:  # interrupted: leave no orphan workers behind
            chunk.proc.kill()
            chunk.proc.wait()
            chunk.close()
    return _report(args, totals, findings, crashes, began)


def _loop(
    args: argparse.Namespace,
    pending: collections.deque[tuple[int, int]],
    running: list[Chunk],
    totals: dict[str, Any],
    findings: list[dict[str, Any]],
    crashes: list[dict[str, Any]],
    began: float,
) -> None:
    while pending or running:
        while pending and len(running) < args.jobs:
            start, end = pending.popleft()
            running.append(Chunk(args.seed, start, end, args))
        time.sleep(0.05)
        for chunk in list(running):
            code = chunk.proc.poll()
            hung = code is None and time.monotonic() - chunk.began > args.timeout
            if code is None and not hung:
                continue
            if hung:
                chunk.proc.kill()
                chunk.proc.wait()
                code = "timeout"
            running.remove(chunk)
            out, err = chunk.read()
            lines = out.splitlines()
            summary = next((line for line in lines if line.startswith("SUMMARY ")), None)
            findings.extend(
                json.loads(line[len("FINDING ") :]) for line in lines if line.startswith("FINDING ")
            )
            if code == 0 and summary is not None:
                data = json.loads(summary[len("SUMMARY ") :])
                totals["cases"] += data["cases"]
                totals["calls"] += data["calls"]
                totals["cpu_seconds"] += data["seconds"]
            else:
                counted = [int(line.split()[1]) for line in lines if line.startswith("CALLS ")]
                totals["calls"] += max(counted, default=0)
                index = chunk.running_index()
                crash = {
                    "seed": args.seed,
                    "index": index,
                    # A signal is a crash of the process; an exit status is the harness's
                    # own failure (a Python exception outside any library call).
                    "kind": "timeout"
                    if code == "timeout"
                    else ("signal" if isinstance(code, int) and code < 0 else "exit"),
                    "returncode": code,
                    "stderr": err[-3000:],
                    "replay": f"python fuzz/fuzz.py --seed {args.seed} --start {index} --count 1 -v"
                    + (f" --avoid {args.avoid}" if args.avoid else ""),
                }
                if index >= 0 and code != "timeout":
                    crash["replayed"] = replay_crashes(args.seed, index, args)
                crashes.append(crash)
                label = "CRASH" if crash["kind"] == "signal" else "WORKER FAILED"
                print(f"{label} seed={args.seed} index={index} returncode={code}", flush=True)
                print(err[-1500:], flush=True)
                # The cases before the crash ran; count them and resume after the crash.
                resume = index + 1 if index >= 0 else chunk.end
                totals["cases"] += max(0, resume - chunk.start)
                if resume < chunk.end:
                    pending.appendleft((resume, chunk.end))
            chunk.close()
            if not args.quiet:
                done = totals["cases"]
                rate = done / max(time.monotonic() - began, 1e-9)
                print(
                    f"  {done:>9,} cases  {len(findings)} findings  {len(crashes)} crashes  ({rate:,.0f}/s)",
                    flush=True,
                )


def _report(
    args: argparse.Namespace,
    totals: dict[str, Any],
    findings: list[dict[str, Any]],
    crashes: list[dict[str, Any]],
    began: float,
) -> int:
    wall = time.monotonic() - began
    report = {
        "seed": args.seed,
        "avoid": args.avoid,
        "cases": totals["cases"],
        "calls": totals["calls"],
        "wall_seconds": round(wall, 1),
        "cpu_seconds": round(totals["cpu_seconds"], 1),
        "crashes": crashes,
        "findings": findings,
    }
    if args.report:
        Path(args.report).write_text(json.dumps(report, indent=1))
    groups = collections.Counter((f["what"], f["op"]) for f in findings)
    print(
        f"\n{totals['cases']:,} cases, {totals['calls']:,} library calls in {wall:,.0f} s "
        f"(seed {args.seed}): {len(crashes)} crashes, {len(findings)} findings"
    )
    for (what, op), n in groups.most_common():
        first = next(f for f in findings if (f["what"], f["op"]) == (what, op))
        print(f"  {n:>6} x {what:14} {op}")
        print(
            f"           e.g. --seed {first['seed']} --start {first['index']} --count 1 -v: {first['detail'][:300]}"
        )
    return 1 if crashes or findings else 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument(
        "--count", type=int, default=None, help="with --start: replay these cases in-process"
    )
    parser.add_argument("--chunk", type=int, default=20_000)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument(
        "--timeout", type=float, default=900.0, help="seconds before a chunk counts as hung"
    )
    parser.add_argument("--report", default=None, help="write the full JSON report here")
    parser.add_argument("--tmp", default=None, help="directory for progress files")
    parser.add_argument("--dev", action="store_true", help="run chunks under python -X dev")
    parser.add_argument(
        "--avoid", default="", help="known bugs not to trigger, comma-separated (sort-uaf)"
    )
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--progress", default=None, help=argparse.SUPPRESS)
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args()
    if args.worker or args.count is not None:
        worker(args.seed, args.start, args.count or 1, args.progress, args.verbose)
        return 0
    args.python_flags = ["-X", "dev"] if args.dev else []
    if args.avoid:
        os.environ["OXTREE_FUZZ_AVOID"] = args.avoid  # inherited by every chunk
    return drive(args)


if __name__ == "__main__":
    sys.exit(main())
