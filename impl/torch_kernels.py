"""The ``Kernels`` operations (impl/kernels.py) in vectorized torch: CPU or CUDA, no host-device sync.

Every index is computed in int64 and clamped into the tensor before it is read, so the sink cases
(a pad, a column past the group's width) read a real element and resolve to the null page 0.
"""

from __future__ import annotations

import torch

from kvtable.impl.tokens import fixed_tokens


def _gather_locs(tables: torch.Tensor, widths: torch.Tensor, page_sizes: torch.Tensor,
                 rows: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """int64 ``[G, T]``: ``max(page, 0) * ps + pos % ps`` with ``page = -1`` past a group's width."""
    groups = tables.shape[0]
    ps = page_sizes[:groups].to(torch.int64).unsqueeze(1)
    width = widths[:groups].to(torch.int64).unsqueeze(1)
    pos = positions.to(torch.int64).unsqueeze(0)
    col = pos // ps
    inside = col < width
    safe_col = torch.where(inside, col, torch.zeros_like(col))
    g = torch.arange(groups, device=tables.device).unsqueeze(1)
    page = tables[g, rows.to(torch.int64).unsqueeze(0), safe_col].to(torch.int64)
    page = torch.where(inside, page, torch.full_like(page, -1))
    return page.clamp_min(0) * ps + pos % ps


class TorchKernels:
    """The reference-speed implementation; the Triton one must agree with it element for element."""

    name = "torch"

    def stacked_locs(self, tables: torch.Tensor, widths: torch.Tensor, page_sizes: torch.Tensor,
                     seq_lens: torch.Tensor, out: torch.Tensor, bs: int, n: int) -> None:
        total = bs * n
        if total == 0 or tables.shape[0] == 0:
            return
        row, pos = fixed_tokens(seq_lens, bs, n)
        locs = _gather_locs(tables, widths, page_sizes, row, pos)
        out[: tables.shape[0], :total] = locs.to(torch.int32)

    def stacked_extend_locs(self, tables: torch.Tensor, widths: torch.Tensor, page_sizes: torch.Tensor,
                            rows: torch.Tensor, positions: torch.Tensor, out: torch.Tensor) -> None:
        total = rows.shape[0]
        if total == 0 or tables.shape[0] == 0:
            return
        locs = _gather_locs(tables, widths, page_sizes, rows, positions)
        out[: tables.shape[0], :total] = locs.to(torch.int32)

    def replay_fill(self, packed: torch.Tensor, meta: torch.Tensor, dst: torch.Tensor, bs: int,
                    actual_bs: int, tail_pad: int) -> None:
        groups, width = meta.shape[0], dst.shape[2]
        if groups == 0 or bs == 0 or width == 0:
            return
        device = dst.device
        info = meta.to(device=device, dtype=torch.int64)
        offset, cols, ratio = (info[:, k].view(groups, 1, 1) for k in range(3))
        b = torch.arange(bs, device=device).view(1, bs, 1)
        w = torch.arange(width, device=device).view(1, 1, width)
        src_col = w // ratio
        live = b < actual_bs
        copied = live & (src_col < cols)
        source = packed if packed.numel() else packed.new_zeros(1)
        index = torch.where(copied, offset + b * cols + src_col, torch.zeros_like(src_col))
        value = source.to(device)[index.clamp(0, source.numel() - 1)].to(torch.int64)
        expanded = torch.where(value > 0, value * ratio + w % ratio, value)
        filled = torch.where(copied, expanded, torch.where(live, tail_pad, 0))
        dst[:groups, :bs] = filled.to(torch.int32)


TORCH_KERNELS = TorchKernels()
