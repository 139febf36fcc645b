"""The ``Kernels`` operations (impl/kernels.py) in vectorized torch: CPU or CUDA, no host-device sync.

Every operation dispatches a fixed number of torch ops whatever the number of groups or rows: the
per-group constants are built on the host once per call and uploaded as one small tensor, and the
location formula runs once over a ``[G, tokens]`` view. Reads clamp every index into the tensor, so
the sink cases (a pad, a column past the group's width) read a real element and resolve to the null
page 0. ``grouped_locs`` and ``grouped_extend_locs`` read each group's own table through its strides
(one gather when the tables are views of one storage, else one per table); ``replay_fill`` writes each
group with a few strided ops from its host ``meta``. The same ops run on every device (impl/routes.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

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
    if ratio == 1:  # a plain copy, without the [rows, n, 1] view the expansion takes (fewer ops per replay)
        live[:, :full].copy_(src if full == cols else src[:, :full])
    else:
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
                           extend_lens: Sequence[int] | np.ndarray, out: torch.Tensor) -> None:
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
    """The torch route of every operation (impl/routes.py): the same ops on CPU and CUDA tensors.

    ``host_bounds`` declares what ``impl/locs.py`` may hand the grouped paths beyond the ``Kernels`` protocol:
    int64 lengths as they are, int64 numpy extend runs, and ``longest``/``shortest``, bounds on the lengths
    read off their CPU mirrors. A subclass that overrides a grouped path with the protocol's signature sets it
    to False. ``host_meta`` declares that ``replay_fill`` reads its ``meta`` on the host (the graph runner keeps
    it on the CPU for them).
    """

    name = "torch"
    host_bounds = True
    host_meta = True

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
        """See ``GroupedLocs``: ``vectorized_locs``' torch ops, which take the host bounds ``longest`` and
        ``shortest``."""
        vectorized_locs(tables, page_sizes, seq_lens, out, bs, n, longest=longest, shortest=shortest)

    def stacked_extend_locs(self, tables: torch.Tensor, widths: torch.Tensor, page_sizes: torch.Tensor,
                            rows: torch.Tensor, positions: torch.Tensor, out: torch.Tensor) -> None:
        total = rows.shape[0]
        if total == 0 or tables.shape[0] == 0:
            return
        out[: tables.shape[0], :total] = _gather_locs(tables, widths, page_sizes, rows, positions.to(torch.int64))

    def grouped_extend_locs(self, tables: Sequence[torch.Tensor], page_sizes: Sequence[int],
                            prefix_lens: Sequence[int], extend_lens: Sequence[int], out: torch.Tensor) -> None:
        """See ``GroupedExtendLocs``: ``vectorized_extend_locs``' torch ops."""
        extend = np.asarray(extend_lens, dtype=np.int64)
        if tables and extend.size and int(extend.sum()):
            vectorized_extend_locs(tables, page_sizes, prefix_lens, extend, out)

    def replay_fill(self, packed: torch.Tensor, meta: torch.Tensor, dst: torch.Tensor, bs: int,
                    actual_bs: int, tail_pad: int) -> None:
        """See ``Kernels.replay_fill``: each group's rows by a few strided ops (a copy at ratio 1, the
        branch-free expansion otherwise), the same ops on every device. ``meta`` is read on the host: these
        kernels declare ``host_meta``, so the graph runner hands them a CPU ``meta`` (a device one is read back).
        A ``meta`` naming rows outside ``packed`` is refused, never read past."""
        groups, width = meta.shape[0], dst.shape[2]
        if groups == 0 or bs == 0 or width == 0:
            return
        rows = max(0, min(actual_bs, bs))
        for g, (offset, cols, ratio) in enumerate(_host_meta(packed, meta, dst, bs, rows, tail_pad)):
            src = packed[offset: offset + rows * cols].view(rows, cols)
            _fill_group(dst[g], src, ratio, bs, tail_pad)


def _host_meta(packed: torch.Tensor, meta: torch.Tensor, dst: torch.Tensor, bs: int, rows: int,
               tail_pad: int) -> list[list[int]]:
    """``meta`` as host ints, after checking that every group's ``rows`` source rows lie inside ``packed`` and
    the shapes agree (``Kernels.replay_fill``'s precondition); a ValueError naming the group otherwise."""
    if meta.dim() != 2 or meta.shape[1] != 3 or packed.dim() != 1 or packed.dtype != torch.int32 \
            or dst.dtype != torch.int32 or packed.device != dst.device:
        raise ValueError(f"replay_fill: meta [G, 3], packed 1-D int32 and dst int32 on one device, got meta "
                         f"{tuple(meta.shape)}, packed {tuple(packed.shape)} {packed.dtype} on {packed.device}, "
                         f"dst {dst.dtype} on {dst.device}")
    if meta.shape[0] > dst.shape[0] or bs > dst.shape[1] or not -INT32_END <= tail_pad < INT32_END:
        raise ValueError(f"replay_fill: {meta.shape[0]} groups and bs {bs} into dst {tuple(dst.shape)}, tail pad "
                         f"{tail_pad}")
    plan = meta.tolist()
    for g, (offset, cols, ratio) in enumerate(plan):
        if ratio < 1 or cols < 0 or offset < 0 or offset + rows * cols > packed.numel():
            raise ValueError(f"replay_fill: group {g}'s meta (offset {offset}, columns {cols}, ratio {ratio}) "
                             f"names rows outside packed ({packed.numel()} elements, {rows} rows)")
    return plan


class StackedTorchKernels(TorchKernels):
    """The torch route with no grouped path: every eager call stacks the tables and runs ``stacked_locs`` /
    ``stacked_extend_locs``, the formula the z3 obligations prove (prover/obligations/torch_ops.py) and the
    graph replay runs; ``kvtable conform --backend torch-stacked`` judges it with the whole suite."""

    name = "torch-stacked"
    grouped_locs = None  # type: ignore[assignment]  # no grouped path: impl/locs.py stacks where it is None
    grouped_extend_locs = None  # type: ignore[assignment]  # as grouped_locs


TORCH_KERNELS = TorchKernels()
