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
from kvtable.backends.protocol import OPERATIONS
from kvtable.conformance.properties import PROPERTIES
from kvtable.spec.clauses import CLAUSES
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


PROPERTY_MODULES = ROOT / "kvtable" / "conformance" / "properties"


def _names_by_module() -> dict[str, list[str]]:
    """The property names written literally in each module of ``properties/``."""
    return {path.stem: re.findall(r'Property\(\s*"([^"]+)"', path.read_text())
            for path in sorted(PROPERTY_MODULES.glob("*.py"))}


def test_every_property_name_is_a_literal_in_its_family_module() -> None:
    literals = {name for names in _names_by_module().values() for name in names}
    assert [p.name for p in PROPERTIES if p.name not in literals] == []
    assert len(literals) == len(PROPERTIES)


def test_a_property_prefix_is_its_module() -> None:
    """``safety/x`` lives in ``properties/safety.py`` (a ``-`` in the prefix is a ``_`` in the module name), so a
    name in a report leads to its file; a name with no prefix is a backend operation's or a clause's own name."""
    misplaced = [f"{name} in {module}.py" for module, names in _names_by_module().items() for name in names
                 if "/" in name and name.split("/", 1)[0].replace("-", "_") != module]
    assert misplaced == []
    own_names = set(OPERATIONS) | {c.name for c in CLAUSES}
    assert [name for names in _names_by_module().values() for name in names
            if "/" not in name and name not in own_names] == []


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
