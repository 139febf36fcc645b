"""What kvtable's fused paths are measured against, written the way engines write them today.

- extend: upstream's per-request loop (tokenspeed ``_compute_extend_group_out_cache_locs``): for
  each request, its positions, then one small gather per group;
- decode / verify: one torch chain per group (upstream's eager ``_compute_decode_group_out_cache_locs``),
  and the bare formula: the fewest torch ops that give the same values on a valid batch;
- extend: the gather floor, one ``index_select`` per group of the pages the locations read;
- replay fill: a plain ``copy_`` of as many bytes as the fill writes, the memory-copy floor.
Every group uses its own block granularity as page size, on the raw (unexpanded) tables.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from kvtable.errors import ContractViolation
from kvtable.reference.model import GroupSpec


def _attention_groups(specs: Sequence[GroupSpec]) -> list[GroupSpec]:
    return [spec for spec in specs if not spec.is_state]


def loop_extend_locs(specs: Sequence[GroupSpec], tables: Mapping[str, torch.Tensor],
                     prefix_lens: Sequence[int], extend_lens: Sequence[int]) -> dict[str, torch.Tensor]:
    """W3 per request, then per group: ``table[i][pos // ps] * ps + pos % ps``, concatenated in request order."""
    groups = _attention_groups(specs)
    device = tables[groups[0].group_id].device
    parts: dict[str, list[torch.Tensor]] = {spec.group_id: [] for spec in groups}
    for i, (prefix, new) in enumerate(zip(prefix_lens, extend_lens, strict=True)):
        positions = torch.arange(prefix, prefix + new, dtype=torch.int64, device=device)
        for spec in groups:
            table, ps = tables[spec.group_id], spec.block_granularity
            max_col = (prefix + new - 1) // ps
            if max_col >= table.shape[1]:
                raise ContractViolation("T8", f"prefix {prefix} + extend {new} needs column {max_col}, table "
                                        f"has {table.shape[1]}", group=spec.group_id, row=i, col=max_col)
            parts[spec.group_id].append(table[i][positions // ps] * ps + (positions % ps).to(torch.int32))
    return {gid: torch.cat(p) if p else torch.empty(0, dtype=torch.int32, device=device)
            for gid, p in parts.items()}


def chain_decode_locs(table: torch.Tensor, seq_lens: torch.Tensor, page_size: int, n: int) -> torch.Tensor:
    """W1/W2 for one group: positions ``max(seq - n + t, 0)``, token-major, a gather, then the slot."""
    bs = seq_lens.shape[0]
    offsets = torch.arange(n, dtype=torch.int64, device=seq_lens.device)
    positions = (seq_lens.to(torch.int64)[:, None] - n + offsets).clamp_min(0).reshape(-1)
    rows = torch.arange(bs, device=seq_lens.device).repeat_interleave(n)
    pages = table[rows, positions // page_size]
    return (pages.clamp_min(0) * page_size + (positions % page_size).to(torch.int32)).to(torch.int32)


def per_group_decode_locs(specs: Sequence[GroupSpec], tables: Mapping[str, torch.Tensor],
                          seq_lens: torch.Tensor, n: int) -> dict[str, torch.Tensor]:
    """Every attention group's chain, one after the other (a launch per op per group on a GPU)."""
    return {spec.group_id: chain_decode_locs(tables[spec.group_id], seq_lens, spec.block_granularity, n)
            for spec in _attention_groups(specs)}


def bare_decode_locs(specs: Sequence[GroupSpec], tables: Mapping[str, torch.Tensor], seq_lens: torch.Tensor,
                     n: int) -> dict[str, torch.Tensor]:
    """W1/W2 with no validation and no sink clamps: int32 positions once, then per group a gather and the slot."""
    bs = seq_lens.shape[0]
    if n == 1:
        positions, rows = seq_lens - 1, torch.arange(bs, device=seq_lens.device)
    else:
        offsets = torch.arange(-n, 0, dtype=seq_lens.dtype, device=seq_lens.device)
        positions = (seq_lens[:, None] + offsets).clamp_min_(0).view(-1)
        rows = torch.arange(bs, device=seq_lens.device).repeat_interleave(n)
    return {spec.group_id: tables[spec.group_id][rows, positions // spec.block_granularity]
            * spec.block_granularity + positions % spec.block_granularity
            for spec in _attention_groups(specs)}


def gather_floor(flat_tables: Mapping[str, torch.Tensor], indices: Mapping[str, torch.Tensor]
                 ) -> dict[str, torch.Tensor]:
    """The memory floor of any location kernel: per group, one gather of the page each token reads
    (int64 indices into the flattened table, computed beforehand)."""
    return {gid: flat_tables[gid].index_select(0, index) for gid, index in indices.items()}


def copy_floor(dst: torch.Tensor, src: torch.Tensor) -> None:
    """The memory-copy floor: one plain ``copy_`` between contiguous buffers of equal size."""
    dst.copy_(src)
