"""The conformance package's shape: modules import alone, names are literal, strategies are built once."""

from __future__ import annotations

import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis.strategies._internal.strategies import SearchStrategy

import kvtable.conformance
import kvtable.strategies
from kvtable.conformance.properties import PROPERTIES
from kvtable.strategies import BROKEN_CLAUSES, CHEAP_CLAUSES, CORRUPTIONS

ROOT = Path(__file__).resolve().parents[2]


def _modules(package) -> list[str]:
    """The package's modules, but no ``__main__`` (a command: importing it runs it)."""
    return sorted(m.name for m in pkgutil.walk_packages(package.__path__, package.__name__ + ".")
                  if not m.name.endswith(".__main__"))


MODULES = [*_modules(kvtable.conformance), "kvtable.strategies", *_modules(kvtable.strategies)]


@pytest.mark.slow
def test_every_conformance_and_strategy_module_imports_alone() -> None:
    """No import cycles: each module imports first, in a fresh set of kvtable modules."""
    script = "\n".join([
        "import importlib, sys, torch, hypothesis",
        f"for name in {MODULES!r}:",
        "    for loaded in [m for m in sys.modules if m.startswith('kvtable')]:",
        "        del sys.modules[loaded]",
        "    importlib.import_module(name)",
        "print('imported', len(" + repr(MODULES) + "))",
    ])
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"imported {len(MODULES)}"
    assert "kvtable.conformance.properties.graph" in MODULES and "kvtable.strategies.broken" in MODULES


def test_every_property_name_is_a_literal_in_its_family_module() -> None:
    source = "\n".join(p.read_text() for p in (ROOT / "kvtable" / "conformance" / "properties").glob("*.py"))
    literals = set(re.findall(r'Property\(\s*"([^"]+)"', source))
    assert [p.name for p in PROPERTIES if p.name not in literals] == []
    assert len(literals) == len(PROPERTIES)


def test_every_breach_and_corruption_has_its_property() -> None:
    names = {p.name for p in PROPERTIES}
    assert {f"rejects/{c}" for c in BROKEN_CLAUSES} <= names
    assert {f"rejects-cheap/{c}" for c in CHEAP_CLAUSES} <= names
    assert {f"checker/{how.replace(' ', '-')}" for how in CORRUPTIONS} <= names


@pytest.mark.slow
def test_no_strategy_is_built_inside_a_draw(monkeypatch) -> None:
    """After a warm-up run of every property's inputs, drawing them again builds (almost) no strategy object."""
    built: list[str] = []
    original = SearchStrategy.__init__

    def counting(self, *args, **kwargs) -> None:
        built.append(type(self).__name__)
        original(self, *args, **kwargs)

    def draw_each(strategy) -> None:
        @settings(max_examples=10, database=None, deadline=None, suppress_health_check=list(HealthCheck))
        @given(strategy)
        def draw(_example) -> None:
            pass

        draw()

    strategies = {p.name: p.strategy for p in PROPERTIES if p.strategy is not None}
    for strategy in strategies.values():
        draw_each(strategy)  # warm-up: every range drawn so far has its strategy
    monkeypatch.setattr(SearchStrategy, "__init__", counting)
    for strategy in strategies.values():
        draw_each(strategy)
    # hypothesis wraps each @given test's arguments in a few strategies of its own; nothing per draw
    assert len(built) <= 4 * len(strategies), sorted(set(built))
