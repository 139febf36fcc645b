"""W3's index arithmetic on the host, from the CPU mirrors of the lengths (numpy; nothing read from a device).

Every page size is a whole number of ``unit`` tokens (the gcd of the page sizes). The unit blocks the requests
write are numbered in request order, ``k = 0 .. blocks - 1``; token ``p`` of request ``i`` gets the spot
``(K_i - a_i) * unit + p`` (``K_i``: blocks before request ``i``; ``a_i = prefix_i // unit``), so that
``spot // unit`` is its block and ``spot % unit`` its offset in the block. Block ``k`` of request ``i`` lies in
column ``c = (a_i + k - K_i) // (ps / unit)`` of row ``i`` of a group with page size ``ps``; its slots are
``page * ps + p - c * ps``, i.e. ``page * ps - lead + spot`` with ``lead = c * ps + (K_i - a_i) * unit``.
So a kernel reads each page once per block (``elem``), forms ``page * ps + base`` (``base = -lead``) per block,
and a token's location is its block's value plus its spot: one gather and one add per token.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kvtable.impl.read_plan import INT32_END

_ARANGES: dict[np.dtype, np.ndarray] = {}
"""``arange`` buffers per dtype, grown to the longest asked for (as engines keep one)."""


def arange(n: int, dtype: type[np.integer]) -> np.ndarray:
    """``np.arange(n, dtype=dtype)``, a read-only view of a kept buffer."""
    kept = _ARANGES.get(np.dtype(dtype))
    if kept is None or kept.shape[0] < n:
        kept = np.arange(max(n, 2 * (0 if kept is None else kept.shape[0]), 1024), dtype=dtype)
        kept.flags.writeable = False
        _ARANGES[np.dtype(dtype)] = kept
    return kept[:n]


@dataclass(frozen=True)
class ExtendBlocks:
    """Where every token of an extend batch sits, for every group (see the module docstring)."""

    unit: int
    spot: np.ndarray
    """``[T]`` each token's spot, in ``dtype``."""
    elem: np.ndarray
    """``[G, blocks]`` the span element of the page holding each block (int32 when every one fits)."""
    base: np.ndarray
    """``[G, blocks]`` minus ``lead``: what each block's slot formula adds to ``page * ps``, in ``dtype``."""
    dtype: type[np.integer]
    """int32 when every spot, lead and position fits (then every step of the formula does), else int64."""


def _floor_div(values: np.ndarray, divisors: int | np.ndarray) -> np.ndarray:
    """``values // divisors`` (numpy broadcasting), a right shift when every divisor is a power of two."""
    d = np.asarray(divisors, dtype=np.int64)
    if np.all(d & (d - 1) == 0):
        return values >> (np.frexp(d)[1] - 1)  # log2 of a power of two (exact: its float is exact)
    return values // d


def extend_blocks(prefix_lens: Sequence[int] | np.ndarray, extend_lens: Sequence[int] | np.ndarray,
                  page_sizes: Sequence[int], bases: Sequence[int], pitches: Sequence[int],
                  span_end: int) -> ExtendBlocks:
    """The blocks of requests writing ``[prefix_i, prefix_i + extend_i)`` (at least one token in all) in groups
    whose row ``i`` starts at element ``bases[g] + i * pitches[g]`` of their span (``span_end``: one past the
    largest element any span has)."""
    prefix = np.asarray(prefix_lens, dtype=np.int64)
    extend = np.asarray(extend_lens, dtype=np.int64)
    unit = math.gcd(*page_sizes)
    first = _floor_div(prefix, unit)
    last = prefix + extend - 1
    count = np.where(extend > 0, _floor_div(last, unit) - first + 1, 0)
    done = np.cumsum(count)
    blocks = int(done[-1])
    begin = done - count - first  # K_i - a_i
    ends = np.cumsum(extend)
    total = int(ends[-1])
    top = (blocks + 1) * unit + max(page_sizes) + int(last.max()) + 1
    dtype = np.int32 if top < INT32_END else np.int64
    spot = np.repeat((begin * unit + prefix - ends + extend).astype(dtype), extend)
    spot += arange(total, dtype)
    groups = len(page_sizes)
    per_row = np.empty((groups + 1, prefix.shape[0]), dtype=np.int64)
    np.multiply.outer(np.asarray(pitches, dtype=np.int64), arange(prefix.shape[0], np.int64), out=per_row[:groups])
    per_row[:groups] += np.asarray(bases, dtype=np.int64)[:, None]
    per_row[groups] = begin
    per_block = np.repeat(per_row, count, axis=1)
    unit_col = arange(blocks, np.int64) - per_block[groups]
    col = _floor_div(unit_col, np.asarray([size // unit for size in page_sizes])[:, None])
    elem = (per_block[:groups] + col).astype(np.int32 if span_end <= INT32_END else np.int64)
    base = col * -np.asarray(page_sizes, dtype=np.int64)[:, None]
    base -= per_block[groups] * unit
    return ExtendBlocks(unit, spot, elem, base.astype(dtype), dtype)
