"""oxtree without JAX: ``import oxtree``, ``from oxtree import *``, ``dir(oxtree)`` and
``help(oxtree)`` work, and a name that needs JAX (``Rngs``, ``RngStream``) fails only when it
is used, with an ImportError saying to install JAX.

Each check runs in a fresh interpreter: once with a finder on ``sys.meta_path`` that makes
``jax`` and ``jaxlib`` unimportable (always), and once in a virtual environment made for the
test, with nothing installed, the package found through ``PYTHONPATH`` (oxtree needs nothing
at run time but its compiled core).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import oxtree
import pytest

PYTHON_DIR = str(Path(oxtree.__file__).resolve().parent.parent)

# Makes jax and jaxlib unimportable, as if they were not installed.
BLOCK_JAX = """
import importlib.abc, sys

class _NoJax(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ("jax", "jaxlib"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, _NoJax())
"""

# What is checked, in the fresh interpreter: the results come back as JSON on stdout.
CHECK = """
import json, pydoc, sys

import oxtree

namespace = {}
exec("from oxtree import *", namespace)
listed = dir(oxtree)
text = pydoc.render_doc(oxtree, renderer=pydoc.plaintext)
errors = {}
for name in ("Rngs", "RngStream"):
    try:
        getattr(oxtree, name)(0)
    except ImportError as e:
        errors[name] = f"{type(e).__name__}: {e}"
    else:
        errors[name] = None
print(json.dumps({
    "star": sorted(n for n in namespace if n != "__builtins__"),
    "all": sorted(oxtree.__all__),
    "dir_has_all": set(oxtree.__all__) <= set(listed),
    "help_lines": len(text.splitlines()),
    "help_names_rngs": "class Rngs" in text,
    "errors": errors,
    "jax_loaded": sorted(m for m in sys.modules if m.partition(".")[0] in ("jax", "jaxlib")),
}))
"""

NEEDS_JAX = {
    "Rngs": "ImportError: oxtree.Rngs needs JAX: pip install jax",
    "RngStream": "ImportError: oxtree.RngStream needs JAX: pip install jax",
}


def _run(python: str, code: str, env: dict[str, str] | None = None) -> dict[str, object]:
    done = subprocess.run(
        [python, "-c", code], capture_output=True, text=True, timeout=60, env=env, check=False
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])  # type: ignore[no-any-return]


def _check(out: dict[str, object]) -> None:
    assert out["star"] == out["all"]  # every name of __all__ bound
    assert "Rngs" in out["star"]
    assert out["dir_has_all"]
    assert out["help_names_rngs"]
    assert out["help_lines"] > 1000
    assert out["errors"] == NEEDS_JAX
    assert out["jax_loaded"] == []


def test_without_jax_every_name_imports_and_the_jax_ones_say_so_when_used() -> None:
    _check(_run(sys.executable, BLOCK_JAX + CHECK))


def test_in_an_environment_without_jax(tmp_path: Path) -> None:
    # A virtual environment with nothing installed (no pip either, which keeps it fast).
    env_dir = tmp_path / "venv"
    try:
        venv.EnvBuilder(with_pip=False, system_site_packages=False).create(env_dir)
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.skip(f"cannot make a virtual environment here: {e}")
    python = env_dir / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    env = {**os.environ, "PYTHONPATH": PYTHON_DIR}
    env.pop("PYTHONHOME", None)
    probe = subprocess.run(
        [str(python), "-c", "import importlib.util as u; print(u.find_spec('jax') is None)"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if probe.stdout.strip() != "True":
        pytest.skip(f"the new environment still finds jax: {probe.stdout}{probe.stderr}")
    _check(_run(str(python), CHECK, env))


def test_the_star_import_does_not_import_jax_where_it_is_installed() -> None:
    # JAX installed (this interpreter has it): `from oxtree import *` binds Rngs without
    # loading it, which takes a second; making a stream loads it.
    out = _run(
        sys.executable,
        "import json, sys\n"
        "from oxtree import *\n"
        "before = 'jax' in sys.modules\n"
        "Rngs(0)\n"
        "print(json.dumps({'before': before, 'after': 'jax' in sys.modules}))\n",
    )
    assert out == {"before": False, "after": True}
