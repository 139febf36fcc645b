"""R1-R3's z3 obligations: the ring index stays in the ring and evicts only the token that left the window, the
reads are the first query's cached window, and a shifted index is caught with a concrete counterexample."""

from __future__ import annotations

from kvtable.prover import prove
from kvtable.prover.obligations.registry import OBLIGATIONS

RING = [ob for ob in OBLIGATIONS if ob.clause in ("R1", "R2", "R3")]


def test_every_ring_obligation_gets_its_expected_verdict() -> None:
    results = {r.obligation.name: r for r in prove.prove(RING, isolate=False)}
    assert sorted(results) == sorted([
        "R1.ring-index-in-bounds", "R1.window-slots-distinct", "R2.write-evicts-only-left-token",
        "R3.reads-cover-window", "R2.shifted-index-misses-own-slot"])
    assert {name: r.outcome.status for name, r in results.items()} == {
        name: "counterexample" if name == "R2.shifted-index-misses-own-slot" else "proved" for name in results}
    model = dict(results["R2.shifted-index-misses-own-slot"].outcome.model)
    window, p = model["window"], model["p"]
    assert window >= 2 and (p + 1) % window != p % window
