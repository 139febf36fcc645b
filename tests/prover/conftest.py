"""The prover's tests share one proof of the whole registry per test session (``proved_registry``).

Proving every obligation takes 25-40 s, so the tests that read its results are slow-tier tests and share
the one run; under pytest-xdist they form one ``xdist_group`` so one worker proves it once.
"""

from __future__ import annotations

import pytest

from kvtable.prover import prove
from kvtable.prover.obligations.registry import OBLIGATIONS

GROUP = pytest.mark.xdist_group("proved-registry")


@pytest.fixture(scope="session")
def proved_registry() -> dict[str, prove.Result]:
    """Every obligation of the registry, proved once: its result by obligation name, in registry order."""
    return {r.obligation.name: r for r in prove.prove(OBLIGATIONS)}  # z3's resource limit: the same on any box


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests that read the registry's proof run on one xdist worker, the one that proved it."""
    for item in items:
        if "proved_registry" in getattr(item, "fixturenames", ()):
            item.add_marker(GROUP)
