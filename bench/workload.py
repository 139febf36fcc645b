"""Seeded, contract-valid benchmark batches: group sets, lengths and per-group tables, built vectorized.

Each row holds distinct real pages over the columns it needs, front holes (page 0) where a sliding
window has slid past, and the tail pad -1 after its last real page, as clauses T3-T5 and T7 require.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from kvtable.reference.model import Batch, GroupSpec, read_start

KERNEL_PAGE_SIZE = 16
MAX_SEQ = 32768
"""Longest sequence in any benchmark batch (tokens)."""

_GROUPS = (
    GroupSpec("full", "full", 16),
    GroupSpec("swa", "sliding", 16, window=4096),
    GroupSpec("full_b64", "full", 64),
    GroupSpec("swa_b32", "sliding", 32, window=1024),
    GroupSpec("full_b32", "full", 32),
    GroupSpec("swa_b64", "sliding", 64, window=8192),
    GroupSpec("swa_512", "sliding", 16, window=512),
    GroupSpec("full_b128", "full", 128),
)


def group_set(n_groups: int) -> tuple[GroupSpec, ...]:
    """1 to 8 attention groups: full and sliding at the kernel page size, then coarser blocks and windows."""
    if not 1 <= n_groups <= len(_GROUPS):
        raise ValueError(f"benchmarks use 1..{len(_GROUPS)} groups, got {n_groups}")
    return _GROUPS[:n_groups]


@dataclass(frozen=True)
class Workload:
    """One batch: its group specs, one int32 table per group and the lengths."""

    specs: tuple[GroupSpec, ...]
    tables: dict[str, torch.Tensor]
    batch: Batch

    @property
    def tokens(self) -> int:
        """Locations written per group."""
        if self.batch.mode == "extend":
            assert self.batch.prefix_lens is not None
            return sum(self.batch.seq_lens) - sum(self.batch.prefix_lens)
        return self.batch.bs * self.batch.tokens_per_row


def extend_workload(n_groups: int, bs: int, *, max_extend: int, seed: int, max_seq: int = MAX_SEQ,
                    device: str = "cpu") -> Workload:
    """A prefill batch of mixed lengths: extend log-uniform in [1, max_extend], prefix so seq <= max_seq."""
    gen = torch.Generator().manual_seed(seed)
    log_len = torch.rand(bs, generator=gen, dtype=torch.float64) * math.log(max_extend)
    extend = [max(1, min(max_extend, round(math.exp(x)))) for x in log_len.tolist()]
    room = torch.rand(bs, generator=gen, dtype=torch.float64).tolist()
    prefix = [int(r * (max_seq - e)) for r, e in zip(room, extend, strict=True)]
    batch = Batch.extend(prefix, extend)
    specs = group_set(n_groups)
    return Workload(specs, build_tables(specs, batch, gen, max_seq=max_seq, device=device), batch)


def decode_workload(n_groups: int, bs: int, *, n: int, seed: int, max_seq: int = MAX_SEQ,
                    device: str = "cpu") -> Workload:
    """A decode (n == 1) or verify batch, seq_lens uniform in [n, max_seq]."""
    gen = torch.Generator().manual_seed(seed)
    seq = torch.randint(n, max_seq + 1, (bs,), generator=gen).tolist()
    batch = Batch(tuple(seq), mode="decode" if n == 1 else "verify", n=n)
    specs = group_set(n_groups)
    return Workload(specs, build_tables(specs, batch, gen, max_seq=max_seq, device=device), batch)


def build_tables(specs: Sequence[GroupSpec], batch: Batch, gen: torch.Generator, *, max_seq: int = MAX_SEQ,
                 device: str = "cpu") -> dict[str, torch.Tensor]:
    """Per-group tables ``[bs, ceil(max_seq / B)]``: front holes, distinct real pages, tail pad -1."""
    seq = torch.tensor(batch.seq_lens, dtype=torch.int64)
    tables: dict[str, torch.Tensor] = {}
    for spec in specs:
        ps = spec.block_granularity
        width = -(-max_seq // ps)
        starts = torch.tensor([read_start(batch, row, spec.window) for row in range(batch.bs)],
                              dtype=torch.int64)
        cols = torch.arange(width)
        pages = (torch.randperm(batch.bs * width, generator=gen) + 1).view(batch.bs, width)
        table = torch.where(cols < (-(-seq // ps))[:, None], pages, -1)
        table = torch.where(cols < (starts // ps)[:, None], 0, table)
        tables[spec.group_id] = table.to(torch.int32).to(device)
    return tables


def one_storage(tables: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The same tables as views of one int32 buffer, back to back (as an engine that allocates every group's
    table from one pool hands them over)."""
    sizes = [t.numel() for t in tables.values()]
    first = next(iter(tables.values()))
    pool = torch.empty(sum(sizes), dtype=torch.int32, device=first.device)
    views, offset = {}, 0
    for (gid, table), size in zip(tables.items(), sizes, strict=True):
        views[gid] = pool[offset: offset + size].view(table.shape)
        views[gid].copy_(table)
        offset += size
    return views


def stacked(specs: Sequence[GroupSpec], tables: Mapping[str, torch.Tensor]
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The tables as one ``[G, bs, Wmax]`` stack (columns past a group's width -1), widths, page sizes."""
    groups = [s for s in specs if not s.is_state]
    widths = [tables[s.group_id].shape[1] for s in groups]
    first = tables[groups[0].group_id]
    stack = torch.full((len(groups), first.shape[0], max(widths)), -1, dtype=torch.int32, device=first.device)
    for g, spec in enumerate(groups):
        stack[g, :, : widths[g]] = tables[spec.group_id]
    return stack, torch.tensor(widths, dtype=torch.int32, device=first.device), \
        torch.tensor([s.block_granularity for s in groups], dtype=torch.int32, device=first.device)
