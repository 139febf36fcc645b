"""The ``Kernels`` operations (impl/kernels.py) in vectorized torch: CPU or CUDA, no host-device sync.

The stacked operations compute every index in int64 and clamp it into the tensor before it is read,
so the sink cases (a pad, a column past the group's width) read a real element and resolve to the
null page 0. Three fast paths skip the stack: ``grouped_locs`` (each group's own table, read through
its strides, the width mask kept), and, where the host can see that they are exact, without the int64
temporaries: ``grouped_extend_locs`` (the caller proves every write inside its table) and
``replay_fill`` with its ``meta`` on the CPU (one slice copy or r strided writes per group).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

import torch

from kvtable.impl.tokens import extend_runs, fixed_tokens

INT32_END = 2**31
"""One past the largest int32: indices below it are computed in int32."""


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


def _table_spots(starts: torch.Tensor, lead: torch.Tensor, total: int, step: int, dtype: torch.dtype
                 ) -> torch.Tensor:
    """``[T]``: token k of request i at ``i * step + position``, its spot in a row-major flattening with
    ``step`` positions per row. Built as a running sum of ones with each request's jump added at its
    first token (an empty request's jump lands where the next one starts; a trailing one, past the end)."""
    first = lead + torch.arange(starts.shape[0], device=starts.device) * step
    spots = torch.ones(total + 1, dtype=dtype, device=starts.device)
    spots.index_add_(0, starts, torch.diff(first, prepend=first.new_ones(1)).to(dtype))
    return spots.cumsum_(0)[:total]


def _page_col(spot: torch.Tensor, ps: int) -> torch.Tensor:
    """``spot // ps`` of non-negative ``spot``: a shift for a power-of-two ``ps``."""
    if ps & (ps - 1) == 0:
        return spot >> (ps.bit_length() - 1)
    return torch.div(spot, ps, rounding_mode="floor")


def _flat(table: torch.Tensor) -> torch.Tensor:
    """The storage span of a non-empty 2-D table, 1-D: element (i, c) is at ``i * stride(0) + c * stride(1)``."""
    rows, width = table.shape
    return table.as_strided(((rows - 1) * table.stride(0) + (width - 1) * table.stride(1) + 1,), (1,))


def _expand_into(dst: torch.Tensor, src: torch.Tensor, ratio: int) -> None:
    """E2 on ``[rows, n]`` source blocks into ``dst [rows, n, k]`` (k <= ratio): sub-page j of block v is
    ``v * ratio + j`` for a real block, holes and pads stay themselves (the identity when ratio is 1).

    Branch-free int32 arithmetic (``real`` is 1 for a real block, else 0), one strided copy per
    sub-page: torch's ``where`` and strided-output arithmetic are several times slower on CPU.
    """
    if ratio == 1:
        dst[:, :, 0].copy_(src)
        return
    real = src.clamp(0, 1)
    value = torch.addcmul(src, src, real, value=ratio - 1)
    for j in range(dst.shape[2]):
        if j:
            value.add_(real)
        dst[:, :, j].copy_(value)


def _fill_group(dst: torch.Tensor, src: torch.Tensor, ratio: int, bs: int, tail_pad: int) -> None:
    """G3 for one group's ``dst [max_bs, W]``: ``src``'s rows expanded, the tail pad after them, rows up to bs 0."""
    rows, cols = src.shape
    width = dst.shape[1]
    live = dst[:rows]
    full = min(cols, width // ratio)
    filled = min(width, cols * ratio)
    _expand_into(live[:, : full * ratio].unflatten(1, (full, ratio)), src[:, :full], ratio)
    if filled > full * ratio:  # a last block cut by the width
        _expand_into(live[:, full * ratio: filled].unsqueeze(1), src[:, full: full + 1], ratio)
    live[:, filled:].fill_(tail_pad)
    dst[rows:bs].zero_()


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

    def grouped_locs(self, tables: Sequence[torch.Tensor], page_sizes: Sequence[int], seq_lens: torch.Tensor,
                     out: torch.Tensor, bs: int, n: int) -> None:
        """See ``GroupedLocs``. Token i reads flat element ``row * stride(0) + col * stride(1)`` of its
        group's table, the column clamped into the width and the page zeroed past it (the sink); groups
        of one page size share the columns and offsets. Every index is int64."""
        total = bs * n
        if total == 0 or not tables:
            return
        row, pos = fixed_tokens(seq_lens, bs, n)
        by_size: dict[int, list[int]] = {}
        for g, ps in enumerate(page_sizes):
            by_size.setdefault(ps, []).append(g)
        for ps, groups in by_size.items():
            col = _page_col(pos, ps)
            offset = torch.sub(pos, col, alpha=ps)
            reads: dict[tuple[int, int, int], tuple[torch.Tensor, torch.Tensor]] = {}
            for g in groups:
                table, page = tables[g], out[g, :total]
                width, (pitch, step) = table.shape[1], table.stride()
                if width == 0:  # no column at all: every token sinks
                    page.copy_(offset)
                    continue
                if (width, pitch, step) not in reads:
                    spot = col.clamp_max(width - 1)
                    spot = torch.add(spot if step == 1 else spot * step, row, alpha=pitch)
                    reads[width, pitch, step] = spot, col < width
                spot, within = reads[width, pitch, step]
                torch.index_select(_flat(table), 0, spot, out=page)
                torch.add(offset, page.clamp_min_(0).mul_(within), alpha=ps, out=page)

    def stacked_extend_locs(self, tables: torch.Tensor, widths: torch.Tensor, page_sizes: torch.Tensor,
                            rows: torch.Tensor, positions: torch.Tensor, out: torch.Tensor) -> None:
        total = rows.shape[0]
        if total == 0 or tables.shape[0] == 0:
            return
        locs = _gather_locs(tables, widths, page_sizes, rows, positions)
        out[: tables.shape[0], :total] = locs.to(torch.int32)

    def grouped_extend_locs(self, tables: Sequence[torch.Tensor], page_sizes: Sequence[int],
                            prefix_lens: Sequence[int], extend_lens: Sequence[int], out: torch.Tensor) -> None:
        """See ``GroupedExtendLocs``. Each token's spot ``row * stride(0) * ps + pos`` in its flattened
        table gives column and offset at once; groups with equal ``stride(0) * ps`` share the spots, and
        those with an equal page size too the columns. At most one spots and one columns tensor are
        alive at a time (a large extend otherwise page-faults fresh memory on every call).
        """
        total = sum(extend_lens)
        if total == 0 or not tables:
            return
        device = out.device
        reach = max(map(operator.add, prefix_lens, extend_lens))
        tables = [t if t.stride(1) == 1 else t.contiguous() for t in tables]
        top = max((len(extend_lens) - 1) * t.stride(0) * ps for t, ps in zip(tables, page_sizes, strict=True))
        dtype = torch.int32 if top + reach < INT32_END else torch.int64
        _, starts, lead = extend_runs(prefix_lens, extend_lens, device)
        by_step: dict[int, dict[int, list[int]]] = {}
        for g, (table, ps) in enumerate(zip(tables, page_sizes, strict=True)):
            by_step.setdefault(table.stride(0) * ps, {}).setdefault(ps, []).append(g)
        for step, by_size in by_step.items():
            spot = _table_spots(starts, lead, total, step, dtype)
            for ps, groups in by_size.items():
                col = _page_col(spot, ps)
                for g in groups:
                    page = out[g, :total]
                    torch.index_select(_flat(tables[g]), 0, col, out=page)
                    # max(page, 0) * ps + pos % ps as (max(page, 0) - col) * ps + spot: no offset array
                    wide = page.clamp_min_(0).to(spot.dtype).sub_(col)
                    page.copy_(torch.add(spot, wide, alpha=ps, out=wide))
                del col
            del spot  # freed before the next one is built: the allocator hands the same memory back

    def replay_fill(self, packed: torch.Tensor, meta: torch.Tensor, dst: torch.Tensor, bs: int,
                    actual_bs: int, tail_pad: int) -> None:
        groups, width = meta.shape[0], dst.shape[2]
        if groups == 0 or bs == 0 or width == 0:
            return
        plan = _host_plan(packed, meta, dst, bs, actual_bs, tail_pad)
        if plan is not None:
            rows = max(0, min(actual_bs, bs))
            for g, (offset, cols, ratio) in enumerate(plan):
                src = packed[offset: offset + rows * cols].view(rows, cols)
                _fill_group(dst[g], src, ratio, bs, tail_pad)
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


def _host_plan(packed: torch.Tensor, meta: torch.Tensor, dst: torch.Tensor, bs: int, actual_bs: int,
               tail_pad: int) -> list[list[int]] | None:
    """``meta`` as host ints when reading it costs no sync (a CPU tensor) and every group's source rows
    lie inside ``packed``; else None (the vectorized path, which clamps what it reads)."""
    if meta.device.type != "cpu" or meta.dim() != 2 or meta.shape[1] != 3 or packed.device != dst.device:
        return None
    if packed.dtype != torch.int32 or packed.dim() != 1 or dst.dtype != torch.int32:
        return None
    if not (meta.shape[0] <= dst.shape[0] and bs <= dst.shape[1] and -INT32_END <= tail_pad < INT32_END):
        return None
    rows = max(0, min(actual_bs, bs))
    plan = meta.tolist()
    if all(ratio >= 1 and cols >= 0 and 0 <= offset and offset + rows * cols <= packed.numel()
           for offset, cols, ratio in plan):
        return plan
    return None


TORCH_KERNELS = TorchKernels()
