"""Packaging: a non-editable ``pip install .`` holds every subpackage (the root folders mapped by ``package-dir``)
and the contract text, and ``bench`` writes under the current directory, never into the installed package."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from kvtable.bench.cli import DEFAULT_JSON

REPO = Path(__file__).resolve().parents[2]
PACKAGES = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
FROM_THE_TARGET_ONLY = (  # argv: the target folder, then the packages to import from it
    "import importlib, sys\n"
    "sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in getattr(f, '__module__', '')]\n"
    "sys.path.insert(0, sys.argv[1])\n"
    "for name in sys.argv[2:]:\n"
    "    print(importlib.import_module(name).__file__)\n"
    "import kvtable.cli\n"
    "sys.exit(kvtable.cli.main(['prove', '--only', 'W1.in-bounds']))\n"
)


@pytest.mark.slow
def test_a_non_editable_install_imports_every_subpackage(tmp_path: Path) -> None:
    source, target = tmp_path / "source", tmp_path / "site"  # a copy: the build writes build/ and egg-info into it
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(".git", ".venv", "build", "*.egg-info", "__pycache__",
                                                                 ".hypothesis", "bench-results"))
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                          "--target", str(target), str(source)], capture_output=True, text=True, timeout=600)
    assert pip.returncode == 0, pip.stderr
    done = subprocess.run([sys.executable, "-c", FROM_THE_TARGET_ONLY, str(target), *PACKAGES], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": ""})
    assert done.returncode == 0, done.stderr
    files = done.stdout.splitlines()[:len(PACKAGES)]
    assert files == [str(target.joinpath(*name.split("."), "__init__.py")) for name in PACKAGES]
    assert (target / "kvtable" / "spec" / "SPEC.md").read_text() == (REPO / "spec" / "SPEC.md").read_text()


def test_bench_writes_under_the_current_directory() -> None:
    assert not DEFAULT_JSON.is_absolute() and DEFAULT_JSON.parts[0] == "bench-results"
