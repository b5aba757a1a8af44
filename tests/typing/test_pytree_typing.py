"""``oxtree.typing.PyTree``: optree's run-time behaviour, and an alias type checkers accept.

At run time ``PyTree[T]`` must be what optree's is (the same union, reprs, caching and
errors): optree 0.20 is the oracle. For type checkers ``PyTree`` is a recursive type alias
(see the comment above it in python/oxtree/typing.py); ``sample_pytree_types.py`` beside
this file is what users write with it, and mypy and pyright must both accept it in strict
mode (what ``make lint`` runs; here too, so that ``pytest`` alone notices a regression).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections import deque
from pathlib import Path
from typing import Any, ForwardRef, TypeVar, Union, get_args, get_origin

import numpy as np
import optree
import oxtree
import pytest
from oxtree.typing import CustomTreeNode, PyTree, PyTreeTypeVar

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = Path(__file__).with_name("sample_pytree_types.py")

T = TypeVar("T")


class Local:
    """A leaf type defined in a test module: its name is module-qualified in the union."""


# typing.Union and `|` make different objects (and optree treats them apart): both are here.
PARAMS = [int, str, Union[int, str], int | str, T, np.ndarray, Local, Any, None]  # noqa: UP007


def _outcome(make: Any) -> tuple[str, str]:
    """What `make()` gives, comparable across the two libraries: the repr with optree's module
    name, or the exception's type and message."""
    try:
        value = make()
    except Exception as ex:  # every error is compared, whatever its type
        return type(ex).__name__, str(ex)
    return "ok", repr(value).replace("oxtree.typing", "optree.typing")


@pytest.mark.parametrize("param", PARAMS, ids=repr)
def test_subscription_is_optrees_union(param: Any) -> None:
    ours = PyTree[param]
    theirs = optree.PyTree[param]
    assert _outcome(lambda: ours) == _outcome(lambda: theirs)
    assert get_origin(ours) is Union
    assert len(get_args(ours)) == len(get_args(theirs))
    # Cached, and idempotent: PyTree[PyTree[T]] is PyTree[T].
    assert PyTree[param] is ours
    assert PyTree[ours] == ours


def test_union_members() -> None:
    ref = get_args(PyTree[int])[1].__args__[0]
    assert ref.__forward_arg__ == "PyTree[int]"
    assert get_args(PyTree[int]) == (
        int,
        tuple[ref, ...],
        list[ref],
        dict[Any, ref],
        deque[ref],
        CustomTreeNode[ref],
    )


@pytest.mark.parametrize("param", [int, Local, T], ids=repr)
def test_named_forms(param: Any) -> None:
    named = PyTree[param, "Tree"]
    assert _outcome(lambda: named) == _outcome(lambda: optree.PyTree[param, "Tree"])
    assert get_args(named)[1] == tuple[ForwardRef("Tree"), ...]
    assert PyTreeTypeVar("Tree", param) == named
    assert _outcome(lambda: PyTreeTypeVar("Tree", param)) == _outcome(
        lambda: optree.PyTreeTypeVar("Tree", param)
    )
    assert PyTree[named] is named


@pytest.mark.parametrize(
    "item",
    [(int, 1), (int, "a", "b"), (), (int,), [int], (int, None)],
    ids=repr,
)
def test_subscription_errors_are_optrees(item: Any) -> None:
    assert _outcome(lambda: PyTree[item]) == _outcome(lambda: optree.PyTree[item])


def test_special_form_errors_are_optrees() -> None:
    def subclass(base: Any) -> Any:
        return type("Sub", (base,), {})

    for make in (
        lambda mod: mod.PyTree(),
        lambda mod: subclass(mod.PyTree),
        lambda mod: mod.PyTreeTypeVar(1, int),
        lambda mod: subclass(mod.PyTreeTypeVar),
    ):
        ours = _outcome(lambda make=make: make(oxtree))
        assert ours[0] == "TypeError"
        assert ours == _outcome(lambda make=make: make(optree))


def test_runtime_names() -> None:
    # At run time PyTree stays optree's class (the alias exists for type checkers only).
    assert isinstance(PyTree, type)
    assert PyTree.__module__ == "oxtree.typing"
    assert PyTree.__qualname__ == "PyTree"
    assert oxtree.PyTree is PyTree
    assert oxtree.typing.PyTree is PyTree


# -- type checkers -----------------------------------------------------------------------------


def _check(module: str, *args: str) -> str:
    for needed in (module, "jax"):  # the sample annotates with jax.Array
        if importlib.util.find_spec(needed) is None:
            pytest.skip(f"{needed} is not installed (requirements-dev.txt pins it; `make venv`)")
    # From the repository root, so that pyproject.toml's [tool.mypy] and [tool.pyright] apply
    # (strict, unused ignores are errors, oxtree read from python/).
    run = subprocess.run(
        [sys.executable, "-m", module, *args, str(SAMPLE.relative_to(ROOT))],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    output = run.stdout + run.stderr
    assert run.returncode == 0, output
    return output


@pytest.mark.timeout(300)
def test_mypy_accepts_the_sample() -> None:
    output = _check("mypy")
    assert "Success: no issues found in 1 source file" in output


@pytest.mark.timeout(300)
def test_pyright_accepts_the_sample() -> None:
    output = _check("pyright", "--pythonpath", sys.executable)
    assert "0 errors, 0 warnings" in output
