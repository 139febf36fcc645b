"""Every conformance property against the selected backend (``--kvtable-backend``, default torch)."""

from __future__ import annotations

import pytest

from kvtable.conformance.execute import run_property
from kvtable.conformance.properties import PROPERTIES, Property
from kvtable.spec.clauses import CLAUSES

UNTESTED = {"W0": "slot-meaning is the definition every location property compares against"}


@pytest.mark.parametrize("prop", PROPERTIES, ids=[p.name for p in PROPERTIES])
def test_property(prop: Property, kvtable_context, kvtable_backend_spec: str, kvtable_level: str,
                  conformance_examples: int) -> None:
    result = run_property(prop, kvtable_context, examples=conformance_examples, seed=0, spec=kvtable_backend_spec,
                          level=kvtable_level)
    if not result.applicable:
        pytest.skip(f"not applicable: {result.message}")
    assert result.passed, (f"{result.status} [{result.clause}] {prop.name}: {result.message}\n"
                           f"counterexample:\n{result.counterexample}")
    assert result.examples >= 1


def test_every_clause_has_a_property_or_a_reason() -> None:
    tagged = {p.clause for p in PROPERTIES}
    assert {c.id for c in CLAUSES} - tagged == set(UNTESTED)
