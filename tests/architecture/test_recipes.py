"""ARCHITECTURE.md names guards that exist: every ``tests/...py::test`` it cites is a test there, and every rule
file under tests/architecture is on the page, so a recipe's list cannot drift from the guards."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "ARCHITECTURE.md").read_text()


def _tests_in(path: Path) -> set[str]:
    return {node.name for node in ast.parse(path.read_text()).body
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")}


def test_every_guard_the_page_cites_is_a_test() -> None:
    cited = re.findall(r"`(tests/[\w/]+\.py)::(\w+)`", PAGE)
    assert len(cited) >= 10
    missing = [f"{path}::{name}" for path, name in cited
               if not (ROOT / path).is_file() or name not in _tests_in(ROOT / path)]
    assert missing == []


def test_every_file_the_page_cites_exists() -> None:
    files = set(re.findall(r"`((?:tests|kvtable|spec|reference|impl|prover)/[\w/]+\.(?:py|md))", PAGE))
    assert [f for f in sorted(files) if "<" not in f and not (ROOT / f).is_file()] == []


def test_every_rule_file_is_on_the_page() -> None:
    rules = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "tests" / "architecture").glob("test_*.py"))
    assert [rule for rule in rules if f"`{rule}`" not in PAGE] == []


def test_the_page_stays_short() -> None:
    assert len(PAGE.splitlines()) <= 200
