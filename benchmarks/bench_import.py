"""Import-time benchmark: how long ``import oxtree`` adds to a fresh interpreter.

Target: ``import oxtree`` under 20 ms. Each figure is the median, over ``--runs``
fresh interpreters, of the wall time of ``python -c STATEMENT`` minus that of ``python -c pass``
(the runs of the two alternate). Bytecode caching is on, with the cache in a temporary
directory (``PYTHONDONTWRITEBYTECODE``, if set, would make every run recompile), and each
statement runs once before timing to fill it. Besides ``import oxtree``, the table shows the
first use of the heavier parts (the JAX face, pretty-printing, modules, everything through
``from oxtree import *``) and, when installed, optree's import for comparison.

Usage (from the repository root)::

    .venv/bin/python benchmarks/bench_import.py
    .venv/bin/python benchmarks/bench_import.py --runs 41 --importtime   # and -X importtime
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time

STATEMENTS = [
    ("import oxtree", "import oxtree"),
    ("+ a core call", "import oxtree; oxtree.tree_flatten({'a': [1, 2]})"),
    ("import oxtree.tree_util", "import oxtree.tree_util"),
    ("+ oxtree.pformat", "import oxtree; oxtree.pformat"),
    ("+ oxtree.Module", "import oxtree; oxtree.Module"),
    ("from oxtree import *", "from oxtree import *"),
]
if importlib.util.find_spec("optree") is not None:
    STATEMENTS.append(("import optree", "import optree"))


def _wall(code: str, env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=21, help="interpreters per statement")
    parser.add_argument(
        "--importtime", action="store_true", help="also show -X importtime's top modules"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as cache:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = cache
        print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
        print(f"{'statement':<26}{'median ms':>10}{'min ms':>9}")
        for label, code in STATEMENTS:
            _wall(code, env)  # fills the bytecode cache
            _wall("pass", env)
            spent, base = [], []
            for _ in range(args.runs):
                base.append(_wall("pass", env))
                spent.append(_wall(code, env))
            median = (statistics.median(spent) - statistics.median(base)) * 1e3
            best = (min(spent) - min(base)) * 1e3
            print(f"{label:<26}{median:>10.1f}{best:>9.1f}")
        if args.importtime:
            _importtime(env)


def _importtime(env: dict[str, str]) -> None:
    """The modules ``import oxtree`` loads, by cumulative time (one run, cache warm)."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import oxtree"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    rows = [line.split("|") for line in done.stderr.splitlines()[1:]]
    print("\n-X importtime (us): self, cumulative, module")
    for self_us, cumulative, name in rows[-15:]:
        print(f"{self_us.split(':')[1].strip():>8}{cumulative.strip():>10}  {name.rstrip()}")


if __name__ == "__main__":
    main()
