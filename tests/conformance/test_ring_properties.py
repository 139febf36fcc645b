"""The ring properties (R1-R3): the built-in backends pass them, a transformers-style backend passes them under the
transformers profile, and a ring index off by one fails the safety tier."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import torch

from kvtable.backends.reference_backend import ReferenceBackend
from kvtable.backends.torch_backend import TorchBackend
from kvtable.conformance.properties import select
from kvtable.conformance.runner import run_conformance
from kvtable.zoo.mutants import BY_NAME, mutated_backend

RING = ["R1", "R2", "R3"]
NAMES = ["ring/rejects", "ring/slots-safe", "ring/writes", "ring/reads"]


def _run(backend, *, profile: str = "kvtable", level: str = "strict", names: Sequence[str] = RING,
         examples: int = 30):
    return run_conformance(backend, properties=select(list(names)), examples=examples, seed=0, shrink=False,
                           isolate=False, level=level, profile=profile)


def test_the_ring_properties_are_registered_under_their_clauses() -> None:
    assert sorted(p.name for p in select(RING)) == sorted(NAMES)


def test_the_torch_backend_passes_every_ring_property() -> None:
    report = _run(TorchBackend, examples=20)
    assert sorted((r.property, r.status) for r in report.results) == sorted((n, "passed") for n in NAMES)


@pytest.mark.slow
def test_the_reference_backend_passes_every_ring_property() -> None:
    report = _run(ReferenceBackend)
    assert sorted((r.property, r.status) for r in report.results) == sorted((n, "passed") for n in NAMES)


class TrashBackend(ReferenceBackend):
    """transformers' conventions over the reference: int64 indices, unstored tokens at the write trash (-1)."""

    def ring_locs(self, table: torch.Tensor, prefix_lens: Sequence[int], extend_lens: Sequence[int], page_size: int,
                  window: int) -> tuple[torch.Tensor, torch.Tensor]:
        writes, reads = super().ring_locs(table, prefix_lens, extend_lens, page_size, window)
        return torch.where(writes < page_size, -1, writes).long(), reads.long()


def test_a_transformers_style_backend_passes_under_its_profile_and_not_under_kvtables() -> None:
    report = _run(TrashBackend, profile="transformers", level="correct")
    assert {r.status for r in report.results} == {"passed"}
    report = _run(TrashBackend, level="correct", names=["ring/writes"])
    (result,) = report.results
    assert result.status == "failed" and result.clause.startswith("R2") and result.tier == "correctness"


def test_a_ring_index_off_by_one_fails_the_safety_tier() -> None:
    mutant = BY_NAME["ring-index-off-by-one"]
    with mutated_backend(mutant) as backend_class:
        report = _run(backend_class(), level="safety", names=["ring/slots-safe"])
    (result,) = report.results
    assert (result.status, result.tier) == ("failed", "safety")
    # the shifted index writes a slot of its own ring that another token of the window holds, or (a young ring,
    # one column wide) indexes the column past the row: either is unsafe
    assert result.clause.startswith("R1")
    assert "another slot of its own ring" in result.message or "out-of-bounds read" in result.message
