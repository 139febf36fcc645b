"""W3 extend locations of CPU tables, every group in one compiled loop (numba): the CPU counterpart of one fused
device kernel. Eager torch needs several passes over the tokens (and the host arithmetic to set them up); this
loop reads each page a request writes once and writes its slots as one run of consecutive ints."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence

import numpy as np
import torch

from kvtable.impl.read_plan import INT32_END, flat


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


@functools.cache
def _compiled() -> Callable[..., None]:
    """``extend_runs`` compiled on first use (numba is imported only then), the machine code cached beside this
    module when it has a file (a mutant's in-memory copy of the module has none)."""
    import numba

    return numba.njit(nogil=True, cache=os.path.exists(extend_runs.__code__.co_filename))(extend_runs)


def extend_locs(tables: Sequence[torch.Tensor], page_sizes: Sequence[int], prefix: np.ndarray,
                extend: np.ndarray, out: torch.Tensor) -> None:
    """``GroupedExtendLocs`` on CPU tensors, one compiled call: ``out[g, :sum(extend)]`` for every group ``g``
    (int64 ``prefix`` and ``extend``; every written position inside every table, as the protocol requires)."""
    meta = np.array([[t.stride(0) for t in tables], [t.stride(1) for t in tables], page_sizes], dtype=np.int64)
    _compiled()(tuple(flat(t).numpy() for t in tables), meta[0], meta[1], meta[2], prefix, extend, out.numpy())
