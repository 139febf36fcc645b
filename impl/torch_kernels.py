"""The ``Kernels`` operations (impl/kernels.py) in vectorized torch: CPU or CUDA, no host-device sync.

Every operation dispatches a fixed number of torch ops whatever the number of groups or rows: the
per-group constants are built on the host once per call and uploaded as one small tensor, and the
location formula runs once over a ``[G, tokens]`` view. Reads clamp every index into the tensor, so
the sink cases (a pad, a column past the group's width) read a real element and resolve to the null
page 0. ``grouped_locs`` and ``grouped_extend_locs`` read each group's own table through its strides
(one gather when the tables are views of one storage, else one per table); ``replay_fill`` with its
``meta`` on the CPU writes each group with a few strided ops, else runs one vectorized pass.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from kvtable.impl import cpu_kernels
from kvtable.impl.extend_blocks import extend_blocks
from kvtable.impl.read_plan import INT32_END, read_plan
from kvtable.impl.tokens import upload


def _fixed_positions(seq_lens: torch.Tensor, bs: int, n: int, dtype: torch.dtype = torch.int64, *,
                     clamp: bool = True) -> torch.Tensor:
    """W1/W2/W4 as ``[bs, n]`` of ``dtype``: request b's token t at ``max(seq_b - n + t, 0)`` (token-major);
    ``clamp=False`` when every length is known to be at least n (no position below 0)."""
    seq = seq_lens if seq_lens.shape[0] == bs and seq_lens.dtype == dtype else seq_lens[:bs].to(dtype)
    positions = torch.add(seq.view(bs, 1), _steps(n, dtype, seq_lens.device))
    return positions.clamp_min_(0) if clamp else positions


_STEPS: dict[tuple[int, torch.dtype, torch.device], torch.Tensor] = {}


def _steps(n: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``arange(-n, 0)``: token t of a request sits ``n - t`` before its seq_len (kept per n, dtype, device)."""
    key = (n, dtype, device)
    steps = _STEPS.get(key)
    if steps is None:
        steps = _STEPS[key] = torch.arange(-n, 0, dtype=dtype, device=device)
    return steps


def _token_major(out: torch.Tensor, groups: int, bs: int, n: int) -> torch.Tensor:
    """``out[:groups, :bs*n]`` as ``[groups, bs, n]``: token t of request b at ``b * n + t``."""
    return out[:groups, : bs * n].view(groups, bs, n)


def _slots(page: torch.Tensor, col: torch.Tensor, width: torch.Tensor, positions: torch.Tensor,
           ps: torch.Tensor) -> torch.Tensor:
    """``max(page, 0) * ps + pos % ps`` as ``(max(page, 0) - col) * ps + pos`` (no offset array), the page
    taken as 0 (the sink) where the column is at or past the width or the page's slots pass int32 (W5:
    ``(page + 1) * ps > 2^31``, the int32 store would wrap). Every operand is int64: a mixed-dtype torch op
    costs several times a same-dtype one on small tensors."""
    page.masked_fill_((page + 1) * ps > INT32_END, 0)
    page.clamp_min_(0).masked_fill_(col >= width, 0)
    return torch.addcmul(positions, page.sub_(col), ps)


def _gather_locs(tables: torch.Tensor, widths: torch.Tensor, page_sizes: torch.Tensor,
                 rows: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """int64 ``[G, *positions.shape]``: every group's slot of each (row, position), ``rows`` and int64 ``positions``
    broadcasting together; a column past a group's width reads page -1, which sinks to page 0."""
    groups = tables.shape[0]
    shape = (groups,) + (1,) * positions.dim()
    ps = page_sizes[:groups].to(torch.int64).view(shape)
    col = torch.div(positions, ps, rounding_mode="floor")
    g = torch.arange(groups, device=tables.device).view(shape)
    page = tables[g, rows, col.clamp_max(tables.shape[2] - 1)].to(torch.int64)
    return _slots(page, col, widths[:groups].to(torch.int64).view(shape), positions, ps)


def _expand_into(dst: torch.Tensor, src: torch.Tensor, ratio: int) -> None:
    """E2 on ``[rows, n]`` source blocks into ``dst [rows, n, k]`` (k <= ratio): sub-page j of block v is
    ``v * ratio + j`` for a real block, holes and pads stay themselves (the identity when ratio is 1).

    Branch-free int32 arithmetic (``real`` is 1 for a real block, else 0): ``value + real * j`` written
    straight into ``dst`` by one broadcast op (torch's ``where`` is several times slower on CPU). A block
    whose sub-pages pass int32 (``(v + 1) * ratio > 2^31``) becomes the hole 0: it would wrap to another
    page in the int32 store.
    """
    if ratio == 1:
        dst[:, :, 0].copy_(src)
        return
    src = src.masked_fill(src > INT32_END // ratio - 1, 0)
    real = src.clamp(0, 1)
    value = torch.addcmul(src, src, real, value=ratio - 1)
    subpage = torch.arange(dst.shape[2], dtype=src.dtype, device=src.device)
    torch.addcmul(value.unsqueeze(2), real.unsqueeze(2), subpage, out=dst)


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
    if filled < width:
        live[:, filled:].fill_(tail_pad)
    if rows < bs:
        dst[rows:bs].zero_()


def vectorized_locs(tables: Sequence[torch.Tensor], page_sizes: Sequence[int], seq_lens: torch.Tensor,
                    out: torch.Tensor, bs: int, n: int, *, longest: int | None = None,
                    shortest: int | None = None) -> None:
    """``GroupedLocs`` in torch ops (any device). Token i of group g reads ``row_start[b] + col * stride(1)`` of
    its group's span (``impl/read_plan.py``, built once per set of tables), the column clamped into the width
    and the page zeroed past it (the sink), or past W5's top page. A table with no column reads a stand-in zero: every
    token of it sinks. int32 arithmetic when the lengths are int32 and every index fits, else int64.

    ``longest`` (the torch kernels' own extra) is a host bound on ``seq_lens[:bs]``, read off the CPU
    mirrors: when every table holds that many tokens, no column reaches past a width, and the column
    clamp and its sink are skipped. ``shortest``, a host bound from below: at least n, no position is
    clamped at 0.
    """
    if bs * n == 0 or not tables:
        return
    dtype = torch.int32 if seq_lens.dtype == torch.int32 else torch.int64
    plan = read_plan(tables, page_sizes, out.device, dtype)
    positions = _fixed_positions(seq_lens, bs, n, plan.dtype, clamp=shortest is None or shortest < n)
    col = plan.col(positions)
    inside = longest is not None and longest <= plan.reach
    dst = _token_major(out, len(tables), bs, n)
    index = plan.index(plan.rows(bs), col if inside else torch.minimum(col, plan.last))
    page = plan.sink(plan.gather(index, dst if dst.is_contiguous() else None))  # the pages land in out itself
    if not inside:
        page.masked_fill_(col > plan.last, 0)
    if plan.dtype == torch.int32:
        plan.unwrap(torch.addcmul(positions, page.sub_(col), plan.ps, out=dst))
    else:
        dst.copy_(plan.unwrap(torch.addcmul(positions, page.to(torch.int64).sub_(col), plan.ps)))


def vectorized_extend_locs(tables: Sequence[torch.Tensor], page_sizes: Sequence[int], prefix_lens: Sequence[int],
                           extend_lens: Sequence[int], out: torch.Tensor) -> None:
    """``GroupedExtendLocs`` in torch ops (any device; at least one token written). The index arithmetic is host
    work on the lengths (``impl/extend_blocks.py``): each page a request writes is read once per unit block
    (``elem``) and turned into the block's ``max(page, 0) * ps + base`` (a page past W5's top taken as 0), then
    every token's location is its block's value (one gather per group) plus its spot (one add for all groups).
    int32 when every step fits, else int64.
    """
    extend = np.asarray(extend_lens, dtype=np.int64)
    device, groups = out.device, len(tables)
    tables = [t if t.stride(1) == 1 else t.contiguous() for t in tables]
    plan = read_plan(tables, page_sizes, device, torch.int32)
    at = extend_blocks(prefix_lens, extend, page_sizes, plan.bases, plan.pitches,
                       max(span.numel() for span in plan.spans))
    dtype = torch.int32 if at.dtype == np.int32 else torch.int64
    if dtype != plan.dtype:
        plan = read_plan(tables, page_sizes, device, dtype)
    spot = upload(torch.from_numpy(at.spot), device, dtype)
    elem = torch.from_numpy(at.elem)
    pages = plan.sink(plan.gather(upload(elem, device, elem.dtype)), exact=True)
    base = upload(torch.from_numpy(at.base), device, dtype)
    values = torch.addcmul(base, pages.to(dtype), plan.ps.view(groups, 1))
    block = spot if at.unit == 1 else spot >> (at.unit.bit_length() - 1) if at.unit & (at.unit - 1) == 0 \
        else torch.div(spot, at.unit, rounding_mode="floor")
    dst = out[:groups, : spot.shape[0]]
    sums = dst if dtype == torch.int32 else torch.empty(dst.shape, dtype=dtype, device=device)
    if len(plan.spans) == 1:  # tables in one storage: one gather for every group, a fixed op count
        blocks = values.shape[1]
        narrow = block.dtype == torch.int32 and groups * blocks < INT32_END
        first = torch.from_numpy(np.arange(0, groups * blocks, blocks, dtype=np.int32 if narrow else np.int64))
        index = torch.add(block, upload(first, device, first.dtype).view(-1, 1))
        torch.index_select(values.view(-1), 0, index.view(-1), out=sums.view(-1))
    else:
        for g in range(groups):
            torch.index_select(values[g], 0, block, out=sums[g])
    sums.add_(spot)
    if sums is not dst:
        dst.copy_(sums)


class TorchKernels:
    """The reference-speed implementation; the Triton one must agree with it element for element.

    ``compiled_cpu``: CPU tensors take the compiled loops of ``impl/cpu_kernels.py`` for ``grouped_locs``,
    ``grouped_extend_locs`` and ``replay_fill``; off, every device takes the torch ops (as CUDA tensors always do).
    """

    def __init__(self, *, compiled_cpu: bool = True) -> None:
        self.compiled_cpu = compiled_cpu

    @property
    def name(self) -> str:
        """``torch``, or ``torch-ops`` with the compiled CPU loops off."""
        return "torch" if self.compiled_cpu else "torch-ops"

    def stacked_locs(self, tables: torch.Tensor, widths: torch.Tensor, page_sizes: torch.Tensor,
                     seq_lens: torch.Tensor, out: torch.Tensor, bs: int, n: int) -> None:
        if bs * n == 0 or tables.shape[0] == 0:
            return
        rows = torch.arange(bs, device=tables.device).view(bs, 1)
        positions = _fixed_positions(seq_lens, bs, n)
        _token_major(out, tables.shape[0], bs, n).copy_(_gather_locs(tables, widths, page_sizes, rows, positions))

    def grouped_locs(self, tables: Sequence[torch.Tensor], page_sizes: Sequence[int], seq_lens: torch.Tensor,
                     out: torch.Tensor, bs: int, n: int, *, longest: int | None = None,
                     shortest: int | None = None) -> None:
        """See ``GroupedLocs``: on CPU tensors one compiled loop over every group (``impl/cpu_kernels.py``,
        unless ``compiled_cpu`` is off), else ``vectorized_locs``' torch ops, which take the host bounds
        ``longest`` and ``shortest``."""
        if bs * n == 0 or not tables:
            return
        if self.compiled_cpu and out.device.type == "cpu" and seq_lens.device.type == "cpu":
            cpu_kernels.fixed_locs(tables, page_sizes, seq_lens, out, bs, n)
        else:
            vectorized_locs(tables, page_sizes, seq_lens, out, bs, n, longest=longest, shortest=shortest)

    def stacked_extend_locs(self, tables: torch.Tensor, widths: torch.Tensor, page_sizes: torch.Tensor,
                            rows: torch.Tensor, positions: torch.Tensor, out: torch.Tensor) -> None:
        total = rows.shape[0]
        if total == 0 or tables.shape[0] == 0:
            return
        out[: tables.shape[0], :total] = _gather_locs(tables, widths, page_sizes, rows, positions.to(torch.int64))

    def grouped_extend_locs(self, tables: Sequence[torch.Tensor], page_sizes: Sequence[int],
                            prefix_lens: Sequence[int], extend_lens: Sequence[int], out: torch.Tensor) -> None:
        """See ``GroupedExtendLocs``: on CPU tensors one compiled loop over every group (``impl/cpu_kernels.py``,
        unless ``compiled_cpu`` is off), else ``vectorized_extend_locs``' torch ops."""
        extend = np.asarray(extend_lens, dtype=np.int64)
        total = int(extend.sum()) if tables and extend.size else 0
        if total == 0:
            return
        if self.compiled_cpu and out.device.type == "cpu":
            cpu_kernels.extend_locs(tables, page_sizes, np.asarray(prefix_lens, dtype=np.int64), extend,
                                    out[: len(tables), :total])
        else:
            vectorized_extend_locs(tables, page_sizes, prefix_lens, extend, out)

    def replay_fill(self, packed: torch.Tensor, meta: torch.Tensor, dst: torch.Tensor, bs: int,
                    actual_bs: int, tail_pad: int) -> None:
        groups, width = meta.shape[0], dst.shape[2]
        if groups == 0 or bs == 0 or width == 0:
            return
        plan = _host_plan(packed, meta, dst, bs, actual_bs, tail_pad)
        if plan is not None:
            rows = max(0, min(actual_bs, bs))
            if self.compiled_cpu and dst.device.type == "cpu" and meta.dtype in (torch.int32, torch.int64):
                cpu_kernels.replay_fill(packed, meta, dst, bs, rows, tail_pad)
                return
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
        value.masked_fill_((value + 1) * ratio > INT32_END, 0)  # sub-pages past int32 would wrap: a hole
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
