"""The engines tier: each test drives an installed engine in its own venv (``kvtable engines install NAME``).

A venv that is missing, or lacks the engine, is a skip naming why (``.ci/run`` installs all three first);
every test here is slow (a subprocess importing the engine).
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from kvtable.engines import load_engine
from kvtable.engines.cli import default_venv

pytestmark = pytest.mark.slow


def engine_python(name: str) -> Path:
    """The python of engine ``name``'s venv, with the engine importable there; a skip naming why otherwise."""
    info = load_engine(name).ENGINE
    python = default_venv(name, info.version) / "bin" / "python"
    if not python.exists():
        pytest.skip(f"{name}: no venv at {python.parent.parent} (kvtable engines install {name})")
    version = f"import importlib.metadata as m; print(m.version({info.distribution!r}))"
    probe = subprocess.run([str(python), "-c", version], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"{name}: not importable in its venv: {probe.stderr.strip().splitlines()[-1:]}")
    return python


@pytest.fixture(scope="session")
def kvtable_in() -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run ``kvtable ARGS`` inside engine ``name``'s venv: ``kvtable_in("vllm", "conform", ...)``."""

    def run(name: str, *args: str | Path, timeout: float = 1200) -> subprocess.CompletedProcess[str]:
        command: Sequence[str] = [str(engine_python(name)), "-m", "kvtable.cli", *map(str, args)]
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout)

    return run


@pytest.fixture
def engine_python_of() -> Callable[[str], Path]:
    """``engine_python`` as a fixture: for a test that runs its own script in an engine's venv."""
    return engine_python
