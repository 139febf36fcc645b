"""A slot-mapping-only backend written in vLLM's style (our own code, modelled on vLLM's conventions).

What it models (read from vLLM's ``vllm/v1/worker/block_table.py`` and ``vllm/v1/worker/gpu/block_table.py``):

- every scheduled token gets one int64 slot, ``block_id * block_size + position % block_size``, looked up
  in its request's row of the group's block table (one vectorized gather over (request, position) pairs,
  as vLLM's slot-mapping kernels do over ``query_start_loc`` and ``positions``);
- tokens that must not be written get ``PAD_SLOT_ID`` (-1), which the KV writers skip: padded requests'
  tokens, and (as vLLM's PR #54296 added) lanes whose block index falls outside the table;
- like vLLM, no mask on the block ids themselves: vLLM's tables never hold a negative id (null block 0,
  zero tails), and its KV writers (``reshape_and_cache*``) drop every slot < 0 anyway, so a negative id
  would give a negative slot that nothing writes (the ``vllm`` profile's domain and writer);
- kernel blocks smaller than the manager's: block ``b`` becomes ``b*r .. b*r+r-1``, so the null block 0
  becomes ``0 .. r-1`` and a zero tail does too (``map_to_kernel_blocks``);
- no CUDA-graph runner of kvtable's shape, no debug checker, no validation: vLLM's scheduler and KV-cache
  manager guarantee the invariants, so broken input is the scheduler's to refuse.

Run it with its profile, from a clone's root::

    kvtable conform --backend examples/vllm_style.py:backend --profile vllm --level correct

``backend_53982`` is the same backend seeded with vLLM #53982: the block-table load has no column bound,
so a position past a narrow group's width reads the next row's block.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

PAD_SLOT_ID = -1


def slot_mapping(block_table: torch.Tensor, req_indices: torch.Tensor, positions: torch.Tensor,
                 block_size: int, *, column_bound: bool = True) -> torch.Tensor:
    """int64 slots of (request, position) pairs; lanes with no block of their own get ``PAD_SLOT_ID``."""
    rows, width = block_table.shape
    blocks = torch.div(positions, block_size, rounding_mode="floor")
    lane_ok = (positions >= 0) & (req_indices >= 0) & (req_indices < rows)
    if column_bound:
        lane_ok &= blocks < width
    flat = block_table.reshape(-1).long()
    index = torch.where(lane_ok, req_indices * width + blocks, 0)
    block_ids = flat[index]  # without the column bound, a lane can load past the table's end (kvtable: unsafe)
    return torch.where(lane_ok, block_ids * block_size + positions % block_size, PAD_SLOT_ID)


class VllmStyleBackend:
    """Slot mappings only: decode, verify, re-anchor, extend, per-group, and kernel-block expansion."""

    name = "vllm-style"

    def __init__(self, device: str = "cpu", column_bound: bool = True) -> None:
        self.device = device
        self.column_bound = column_bound

    def _slots(self, table: torch.Tensor, req: torch.Tensor, pos: torch.Tensor, block_size: int) -> torch.Tensor:
        return slot_mapping(table, req, pos, block_size, column_bound=self.column_bound)

    def _fixed_count(self, table: torch.Tensor, seq_lens: torch.Tensor, block_size: int, n: int,
                     live_rows: int | None) -> torch.Tensor:
        """``n`` tokens per request at ``max(seq - n + t, 0)`` (verify, re-anchor); padded requests get -1."""
        bs = seq_lens.shape[0]
        req = torch.arange(bs).repeat_interleave(n)
        pos = (seq_lens.long().repeat_interleave(n) - n + torch.arange(n).repeat(bs)).clamp_min(0)
        slots = self._slots(table, req, pos, block_size)
        if live_rows is not None:
            slots[live_rows * n:] = PAD_SLOT_ID
        return slots

    def decode_locs(self, table: torch.Tensor, seq_lens: torch.Tensor, page_size: int,
                    *, actual_bs: int | None = None) -> torch.Tensor:
        """One slot per request; a CUDA-graph-padded batch's dummy requests (rows ``>= actual_bs``) get -1."""
        slots = self._slots(table, torch.arange(seq_lens.shape[0]), seq_lens.long() - 1, page_size)
        if actual_bs is not None:
            slots[actual_bs:] = PAD_SLOT_ID
        return slots

    def verify_locs(self, table: torch.Tensor, seq_lens: torch.Tensor, page_size: int, n: int,
                    *, actual_bs: int | None = None) -> torch.Tensor:
        return self._fixed_count(table, seq_lens, page_size, n, actual_bs)

    def reanchor_locs(self, table: torch.Tensor, frontier: torch.Tensor, page_size: int, n: int) -> torch.Tensor:
        return self._fixed_count(table, frontier, page_size, n, None)

    def extend_locs(self, table: torch.Tensor, prefix_lens: Sequence[int], extend_lens: Sequence[int],
                    page_size: int) -> torch.Tensor:
        counts = torch.tensor(list(extend_lens), dtype=torch.long)
        starts = torch.tensor(list(prefix_lens), dtype=torch.long)
        req = torch.arange(len(counts)).repeat_interleave(counts)
        query_start = torch.cumsum(counts, 0) - counts
        pos = starts.repeat_interleave(counts) + torch.arange(int(counts.sum())) - query_start.repeat_interleave(counts)
        return self._slots(table, req, pos, page_size)

    def group_locs(self, specs: Sequence[Any], tables: Mapping[str, torch.Tensor], batch: Any,
                   *, tail_pad: int = -1) -> dict[str, torch.Tensor]:
        """Every attention group's slots at its own block size (state groups have no slot mapping)."""
        seq = torch.tensor(batch.seq_lens, dtype=torch.long)
        out = {}
        for spec in specs:
            if spec.family == "state" or spec.group_id not in tables:
                continue
            table, size = tables[spec.group_id], spec.block_granularity
            if batch.mode == "extend":
                prefix = list(batch.prefix_lens)
                extend = [seq_len - start for seq_len, start in zip(batch.seq_lens, prefix, strict=True)]
                out[spec.group_id] = self.extend_locs(table, prefix, extend, size)
            else:
                live = None if batch.actual_bs is None else batch.live_rows
                out[spec.group_id] = self._fixed_count(table, seq, size, batch.tokens_per_row, live)
        return dict(sorted(out.items()))

    def expand_table(self, table: torch.Tensor, ratio: int, *, max_kernel_pages: int | None = None,
                     tail_pad: int = -1, actual_bs: int | None = None) -> torch.Tensor:
        """Manager blocks to kernel blocks as ``append_row`` maps a row's own block ids: ``b -> b*r + j``, a null
        block among them (anything <= 0) -> ``j``; the columns after the row's last real block stay 0 (a block list
        never ends in the null block). Every row is mapped alike (padded rows are never read)."""
        if ratio < 1:
            raise ValueError(f"the kernel block size must divide the manager's block size (ratio {ratio})")
        rows, width = table.shape
        out_width = width * ratio if max_kernel_pages is None else max_kernel_pages
        if out_width < 0:
            raise ValueError(f"max_kernel_pages must be >= 0, got {max_kernel_pages}")
        if ratio == 1:
            kernel = table.to(torch.int32)
        else:
            base = torch.where(table > 0, table.long() * ratio, 0).repeat_interleave(ratio, dim=1)
            own = ((table > 0) * torch.arange(1, width + 1)).amax(dim=1, keepdim=True) if width else table[:, :0]
            inside = torch.arange(width).repeat_interleave(ratio) < own  # the row's own blocks, up to its last real
            kernel = torch.where(inside, base + torch.arange(ratio).repeat(width), 0).to(torch.int32)
        out = torch.zeros((rows, out_width), dtype=torch.int32)  # vLLM's tables are zero-initialised
        keep = min(out_width, kernel.shape[1])
        out[:, :keep] = kernel[:, :keep]
        return out


def backend() -> VllmStyleBackend:
    """The vLLM-style backend (no ``debug`` parameter: it has no debug mode)."""
    return VllmStyleBackend()


def backend_53982() -> VllmStyleBackend:
    """Seeded with vLLM #53982: no column bound on the block-table load (reads the next row's block)."""
    return VllmStyleBackend(column_bound=False)
