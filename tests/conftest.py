"""Test-session set-up shared by every tier: the support modules import by name, and the ``slow`` tier.

``tests/support/`` holds the hand vectors and the misbehaving backends the tests load by name
(``runs_backends:Name``). Plain ``pytest`` runs the fast tier; ``pytest --slow`` runs every test
(see tests/README.md for where a new test goes).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import kvtable.impl.triton_kernels  # noqa: F401 (sets TRITON_INTERPRET where CUDA is absent, before any test
import kvtable.internals  # imports triton: standard's jit helpers such as tl.sum interpret only if it was set first)

SUPPORT = Path(__file__).resolve().parent / "support"
sys.path.insert(0, str(SUPPORT))


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--slow``: run the slow tier too (what CI runs)."""
    parser.addoption("--slow", action="store_true", help="run the slow tier as well as the fast one")


def pytest_configure(config: pytest.Config) -> None:
    """Under ``-n N`` (xdist's ``load``), keep each ``xdist_group`` on one worker: a group shares a session
    fixture too costly to build twice (the prover's proof of the registry). Hypothesis draws no constants
    mined from the modules loaded so far: a derandomized test draws the same examples whatever ran before it."""
    if getattr(config.option, "dist", "no") == "load":
        config.option.dist = "loadgroup"
    kvtable.internals.without_local_constants()


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without ``--slow``, deselect the tests marked ``slow`` (reported as deselected, never as passed)."""
    if config.getoption("--slow"):
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not item.get_closest_marker("slow")]
