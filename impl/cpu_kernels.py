"""Write locations of CPU tables, every group in one compiled loop (numba): the CPU counterpart of one fused device
kernel. Eager torch dispatches a dozen ops per call (each a pass over the tokens, and per-op overhead that
dominates at decode sizes) plus host arithmetic to set them up; these loops read each page once and write its
slots directly. W1/W2/W4 (``fixed_runs``: N tokens per request), W3 (``extend_runs``: a run per page) and the
CUDA-graph replay fill G3/E2 (``fill_rows``: one pass over the rows it writes)."""

from __future__ import annotations

import functools
import os
from collections import OrderedDict
from collections.abc import Callable, Sequence

import numpy as np
import torch

from kvtable.impl.read_plan import INT32_END, flat, kept


def fixed_runs(spans, pitches, steps, widths, sizes, seq, n, out):  # noqa: ANN001, ANN201
    """W1/W2/W4 for every group ``g`` (plain Python, compiled by ``_compiled``): token ``t`` of request ``b`` at
    position ``max(seq_b - n + t, 0)`` into ``out[g, b * n + t]`` (token-major) for the ``out.shape[1] // n``
    requests. Row ``b`` of the group starts at element ``b * pitches[g]`` of ``spans[g]``, its ``widths[g]``
    columns ``steps[g]`` apart; a column at or past the width, a pad or a page past W5 is the sink page 0."""
    for g in range(len(spans)):
        span, ps, step, width, locs = spans[g], sizes[g], steps[g], widths[g], out[g]
        top = INT32_END // ps - 1
        bs = locs.shape[0] // n
        for b in range(bs):
            row = b * pitches[g]
            for t in range(n):
                pos = max(seq[b] - n + t, 0)
                col = pos // ps
                page = span[row + col * step] if col < width else 0
                if not 0 <= page <= top:
                    page = 0
                locs[b * n + t] = (page - col) * ps + pos


def extend_runs(spans, pitches, steps, sizes, prefix, extend, out):  # noqa: ANN001, ANN201
    """W3 for every group ``g`` (plain Python, compiled by ``_compiled``): request ``i``'s positions
    ``[prefix_i, prefix_i + extend_i)`` into ``out[g]`` in request order, one run per page. Row ``i`` of the group
    starts at element ``i * pitches[g]`` of ``spans[g]``, its columns ``steps[g]`` apart; a pad (negative page) or a
    page whose slots pass int32 (W5: ``(page + 1) * ps > 2^31``) is the sink page 0."""
    for g in range(len(spans)):
        span, ps, step, locs = spans[g], sizes[g], steps[g], out[g]
        top = INT32_END // ps - 1
        t = 0
        for i in range(prefix.shape[0]):
            pos = prefix[i]
            end = pos + extend[i]
            row = i * pitches[g]
            col = pos // ps
            while pos < end:
                run = min(end, (col + 1) * ps) - pos
                page = span[row + col * step]
                if page < 0 or page > top:
                    page = 0
                first = (page - col) * ps + pos
                slots = locs[t: t + run]  # a slice: its index is never negative, so the loop vectorizes
                for j in range(run):
                    slots[j] = first + j
                t += run
                pos += run
                col += 1


def fill_rows(packed, meta, dst, bs, rows, tail_pad):  # noqa: ANN001, ANN201
    """G3/E2 for every group ``g`` of ``meta`` (plain Python, compiled by ``_compiled``): row ``b < rows`` of
    ``dst[g]`` is source row ``b`` (``meta[g, 1]`` values at ``meta[g, 0] + b * meta[g, 1]`` of ``packed``)
    expanded ``r = meta[g, 2]``-fold, sub-page ``j`` of a real block ``v`` at ``v * r + j`` (a block whose
    sub-pages pass int32 is the hole 0; holes and pads stay themselves), then the tail pad; rows ``[rows, bs)``
    are 0."""
    width = dst.shape[2]
    for g in range(meta.shape[0]):
        cols, r = meta[g, 1], meta[g, 2]
        top = INT32_END // r - 1
        filled = min(width, cols * r)
        for b in range(rows):
            src = meta[g, 0] + b * cols
            line = dst[g, b]
            if r == 1:  # E2 at ratio 1 is the identity (no int32 page passes the top): a copy
                line[:filled] = packed[src: src + filled]
            else:
                for k in range((filled + r - 1) // r):
                    v = packed[src + k]
                    if v > top:
                        v = 0
                    sub = 1 if v > 0 else 0
                    first = v * r if v > 0 else v
                    for j in range(min(r, filled - k * r)):
                        line[k * r + j] = first + sub * j
            line[filled:] = tail_pad
        dst[g, rows:bs] = 0


@functools.cache
def _compiled(loop: Callable[..., None]) -> Callable[..., None]:
    """``loop`` compiled on first use (numba is imported only then), the machine code cached beside this module
    when it has a file (a mutant's in-memory copy of the module has none)."""
    import numba

    return numba.njit(nogil=True, cache=os.path.exists(loop.__code__.co_filename))(loop)


LAYOUT_CACHE_SIZE = 16
"""Table sets whose numpy spans are kept (least recently used evicted), as impl/read_plan.py keeps its plans."""

_layouts: OrderedDict[tuple, tuple[tuple[np.ndarray, ...], np.ndarray]] = OrderedDict()


def _layout(tables: Sequence[torch.Tensor], page_sizes: Sequence[int]) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
    """Each table's storage span as a numpy view, and the row strides, column strides, widths and page sizes
    ``[4, G]``: kept per set of tables (data pointer, shape, strides) and page sizes. A kept span holds its
    storage, so a key's pointers cannot name another allocation while it is kept."""
    key = (tuple(page_sizes), *[(t.data_ptr(), t.shape, t.stride()) for t in tables])
    return kept(_layouts, key, lambda: _build_layout(tables, page_sizes), LAYOUT_CACHE_SIZE)


def _build_layout(tables: Sequence[torch.Tensor], page_sizes: Sequence[int]
                  ) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
    spans = tuple(flat(t).numpy() if t.shape[1] else np.zeros(1, np.int32) for t in tables)
    return spans, np.array([[t.stride(0) for t in tables], [t.stride(1) for t in tables],
                            [t.shape[1] for t in tables], page_sizes], dtype=np.int64)


def fixed_locs(tables: Sequence[torch.Tensor], page_sizes: Sequence[int], seq_lens: torch.Tensor,
               out: torch.Tensor, bs: int, n: int) -> None:
    """``GroupedLocs`` on CPU tensors, one compiled call: ``out[g, :bs * n]`` for every group ``g``."""
    if min(t.shape[0] for t in tables) < bs or seq_lens.shape[0] < bs:
        raise ValueError(f"fixed_locs: {bs} requests, but a table or seq_lens has fewer rows")
    spans, meta = _layout(tables, page_sizes)
    _compiled(fixed_runs)(spans, meta[0], meta[1], meta[2], meta[3], seq_lens.numpy(), n,
                          out.numpy()[: len(tables), : bs * n])


def extend_locs(tables: Sequence[torch.Tensor], page_sizes: Sequence[int], prefix: np.ndarray,
                extend: np.ndarray, out: torch.Tensor) -> None:
    """``GroupedExtendLocs`` on CPU tensors, one compiled call: ``out[g, :sum(extend)]`` for every group ``g``
    (int64 ``prefix`` and ``extend``; every written position inside every table, as the protocol requires)."""
    spans, meta = _layout(tables, page_sizes)
    _compiled(extend_runs)(spans, meta[0], meta[1], meta[3], prefix, extend, out.numpy())


def replay_fill(packed: torch.Tensor, meta: torch.Tensor, dst: torch.Tensor, bs: int, rows: int,
                tail_pad: int) -> None:
    """``Kernels.replay_fill`` on CPU tensors, one compiled call, for a ``meta`` whose every group's source rows
    lie inside ``packed`` (``rows``: the live rows written, ``min(actual_bs, bs)``)."""
    _compiled(fill_rows)(packed.numpy(), meta.numpy(), dst.numpy(), bs, rows, tail_pad)
