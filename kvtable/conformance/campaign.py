"""The conformance properties as plain ``@given`` tests, for fuzzing campaigns under HypoFuzz.

``kvtable fuzz`` runs each property for a fixed budget; a campaign runs for hours or days, on many
machines, with Hypothesis' own coverage-guided fuzzing engine (HypoFuzz) choosing which property to
feed. HypoFuzz fuzzes pytest-collected ``@given`` tests; this module defines one per property, each
drawing from the property's own strategy and judging with its own check, against the backend the
kvtable pytest plugin selects. The test is parametrized by property, so HypoFuzz and a plain pytest run
key its examples alike (by node id), and ``--kvtable-replay`` replays a campaign's failures::

    pip install hypofuzz
    hypothesis fuzz --no-dashboard -n 8 -- --pyargs kvtable.conformance.campaign \\
        --kvtable-backend mypkg.kv:Backend --kvtable-database redis://ci-cache:6379

``--kvtable-database`` (a directory or ``redis://``) becomes Hypothesis' default database, keyed by
backend, profile and level, so every machine of the campaign shares its failures and a
``kvtable fuzz`` of the same backend elsewhere never deletes them. To check a campaign's findings::

    pytest --pyargs kvtable.conformance.campaign --kvtable-backend mypkg.kv:Backend \
        --kvtable-database redis://ci-cache:6379 --kvtable-replay

The stateful graph-protocol property has no ``@given`` form here (run it with
``kvtable fuzz --property graph/protocol``).
"""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvtable.conformance.properties import PROPERTIES, Context, Property
from kvtable.internals import private

__all__ = ["CAMPAIGN_PROPERTIES", "test_property"]

ConjectureResult = private("ConjectureResult")
if not hasattr(ConjectureResult, "slice_comments"):
    # HypoFuzz (25.11.1) copies the explain phase's comments off the shrunk failure as it reports it; Hypothesis
    # 6.170 no longer keeps them there, so without this the fuzz worker dies on the very failure it found.
    ConjectureResult.slice_comments = {}

CAMPAIGN_PROPERTIES = tuple(p for p in PROPERTIES if p.stateful is None)
"""Every property with a strategy (the stateful graph protocol runs under ``kvtable fuzz``)."""
UNSUPPORTED_LIMIT = 20
"""Examples in a row a backend may call ``Unsupported`` before the property is skipped as not applicable
(below Hypothesis' own give-up point, so the skip names the reasons instead of a health-check failure)."""
_TALLIES: defaultdict[str, Counter[str]] = defaultdict(Counter)
"""Per property: examples the backend supported (``"supported"``) and, by reason, the ones it did not."""


@pytest.mark.parametrize("prop", CAMPAIGN_PROPERTIES, ids=[p.name for p in CAMPAIGN_PROPERTIES])
@given(data=st.data())
# Unsupported examples are discarded by design; no deadline, as in kvtable's own runner: a backend compiles its
# kernels on first use (Triton's JIT), so a first example may take seconds
@settings(suppress_health_check=[HealthCheck.filter_too_much], deadline=None)
def test_property(prop: Property, kvtable_context: Context, data: st.DataObject) -> None:
    """One property against the plugin's backend: its own strategy, its own check (a Mismatch names the clause)."""
    assert prop.strategy is not None and prop.check is not None
    reason = prop.not_applicable(kvtable_context) if prop.not_applicable is not None else None
    if reason:
        pytest.skip(f"{prop.name} not applicable: {reason}")
    example = data.draw(prop.strategy, label="example")
    tally = _TALLIES[prop.name]
    if not tally["supported"] and tally.total() >= UNSUPPORTED_LIMIT:
        reasons = ", ".join(f"{why} ({count})" for why, count in sorted(tally.items()))
        pytest.skip(f"{prop.name} not applicable: every example unsupported: {reasons}")
    kvtable_context.transcript.reset()
    before = Counter(kvtable_context.unsupported)
    try:
        # Unsupported: discarded (never shrunk toward) and counted, as in the runner; --sanitize findings: safety
        with kvtable_context.example(prop.clause):
            prop.check(kvtable_context, example)
        tally["supported"] += 1
    finally:
        tally.update(kvtable_context.unsupported - before)
