"""The package type-checks under mypy (pyproject's ``[tool.mypy]``: loose everywhere, strict on the public API).

mypy cannot follow setuptools' ``package-dir`` (``kvtable.spec`` lives in ``spec/``, ...), so the test checks a
view of the installed package: a temporary ``kvtable/`` whose entries link to the repository's folders.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def package_view(where: Path) -> Path:
    """Lay out ``kvtable`` as it is installed, by links into the repository, and return its folder."""
    package = where / "kvtable"
    package.mkdir()
    for entry in (ROOT / "kvtable").iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    package_dir = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    for name, folder in package_dir.items():
        if name != "kvtable":
            (package / name.removeprefix("kvtable.")).symlink_to(ROOT / folder)
    return package


def test_the_view_maps_every_root_folder(tmp_path: Path) -> None:
    package = package_view(tmp_path)
    assert (package / "spec" / "clauses.py").resolve() == ROOT / "spec" / "clauses.py"
    assert (package / "contract.py").resolve() == ROOT / "kvtable" / "contract.py"
    assert {p.name for p in package.iterdir()} >= {"spec", "prover", "reference", "impl", "bench", "trace"}


@pytest.mark.slow
def test_the_package_has_no_mypy_error(tmp_path: Path) -> None:
    package_view(tmp_path)
    result = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental", "--config-file",
                             str(ROOT / "pyproject.toml"), "--cache-dir", str(tmp_path / "cache")],
                            cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Success: no issues found" in result.stdout
