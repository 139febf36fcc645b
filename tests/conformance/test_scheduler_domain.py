"""Under tokenspeed's profile only what its scheduler builds is drawn: no negative extend prefix and no malformed
table (its ``CacheBatchMetadata`` bridge refuses those before any location code runs), so a backend that gathers
unguarded, as tokenspeed's mixin does, is not failed for inputs it is never handed; the wide domain still is."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest
import torch

from kvtable.conformance.properties import select
from kvtable.conformance.runner import run_conformance

pytestmark = pytest.mark.slow  # two conformance runs of four properties: about a minute each on a loaded machine

PROPERTIES = ("rejects-cheap/T1", "rejects-cheap/T9", "rejects/T9", "rejects/lone-table")


def _within_width(table: torch.Tensor, pos: torch.Tensor, page_size: int) -> None:
    """The bound tokenspeed's extend checks: no column past the table's width (a negative one is not checked)."""
    if len(pos) and int(pos.max()) // page_size >= table.shape[-1]:
        raise RuntimeError(f"write locations out of table bounds: needs col {int(pos.max()) // page_size}")


class UnguardedGather:
    """Eager locations in tokenspeed's manner, in our words: positions from the lengths as handed, a column past a
    table's width refused (RuntimeError) but a negative one gathered as it is, every delivered group's table used
    as handed, decode pages clamped at 0, state groups shed."""

    name, device = "unguarded-gather", "cpu"

    def __init__(self, debug: bool | None = None) -> None:
        self.debug = bool(debug)

    def extend_locs(self, table: torch.Tensor, prefix_lens: Sequence[int], extend_lens: Sequence[int],
                    page_size: int) -> torch.Tensor:
        out = [torch.zeros(0, dtype=torch.int32)]
        for row, (prefix, new) in enumerate(zip(prefix_lens, extend_lens, strict=True)):
            pos = torch.arange(int(prefix), int(prefix) + int(new))
            _within_width(table, pos, page_size)
            out.append((table[row].gather(0, pos // page_size) * page_size + pos % page_size).to(torch.int32))
        return torch.cat(out)

    def decode_locs(self, table: torch.Tensor, seq_lens: torch.Tensor, page_size: int) -> torch.Tensor:
        pos = seq_lens.long() - 1
        _within_width(table, pos, page_size)
        pages = table.gather(1, (pos // page_size).unsqueeze(1)).squeeze(1)
        return (pages.clamp_min(0) * page_size + pos % page_size).to(torch.int32)

    def group_locs(self, specs: Sequence[Any], tables: Mapping[str, torch.Tensor], batch: Any,
                   *, tail_pad: int = -1) -> dict[str, torch.Tensor]:
        sizes = {s.group_id: s.block_granularity for s in specs if s.family != "state"}
        default = min(sizes.values(), default=1)  # a group no spec declares: the kernel page size
        state = {s.group_id for s in specs if s.family == "state"}
        out = {}
        for gid, table in tables.items():
            if gid in state:
                continue
            ps = sizes.get(gid, default)
            if batch.mode == "extend":
                new = [s - p for s, p in zip(batch.seq_lens, batch.prefix_lens, strict=True)]
                out[gid] = self.extend_locs(table, batch.prefix_lens, new, ps)
            elif batch.mode == "decode":
                out[gid] = self.decode_locs(table, torch.tensor(batch.seq_lens), ps)
            else:
                raise NotImplementedError(batch.mode)
        return out


@pytest.fixture(autouse=True)
def _from_the_repo_root(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    monkeypatch.chdir(request.config.rootpath)


def _failing(profile: str) -> set[str]:
    report = run_conformance(f"{__name__}:UnguardedGather", examples=20, seed=0, profile=profile,
                             properties=select(list(PROPERTIES)), level="safety", isolate=False)
    return {r.property for r in report.failures}


def test_the_tokenspeed_domain_hands_no_negative_prefix_and_no_malformed_table() -> None:
    assert _failing("tokenspeed") == set()


def test_the_wide_domain_still_fails_the_unguarded_gather() -> None:
    assert {"rejects-cheap/T1", "rejects/T9"} <= _failing("tokenspeed+any")
