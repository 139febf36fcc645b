"""The contract and the reference type-check under ``mypy --strict`` (pyproject's ``[tool.mypy]`` files)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_typed_layers_have_no_mypy_error() -> None:
    result = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental"], cwd=ROOT, capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stdout
    assert "Success: no issues found" in result.stdout
