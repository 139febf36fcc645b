"""The fused operations behind impl/, as one interface with a torch and a Triton implementation.

Both implementations must write identical values into the same output elements; neither writes
outside the elements named here. Inputs are already validated by the caller (impl/validate.py);
on the defined "sink" cases below (a pad or a column past the group's width) the result is a
location in the null page 0, never an out-of-bounds read. ``GroupedLocs`` and ``GroupedExtendLocs``
are optional fast paths a ``Kernels`` may add; callers use them when they are there and their
preconditions hold.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import torch


class Kernels(Protocol):
    name: str

    def stacked_locs(self, tables: torch.Tensor, widths: torch.Tensor, page_sizes: torch.Tensor,
                     seq_lens: torch.Tensor, out: torch.Tensor, bs: int, n: int) -> None:
        """Decode / verify / re-anchor locations of all groups at once (W1, W2, W4, G4).

        tables: int32 ``[G, R, W]`` (R >= bs); widths, page_sizes: int32 ``[G]`` (group g's real width
        and consumer page size); seq_lens: int32 ``[>= bs]``; out: int32 ``[G, cap]``, cap >= bs*n.
        For i = b*n + t < bs*n: ``pos = max(seq_lens[b] - n + t, 0)`` (int64), ``col = pos // ps``,
        ``page = tables[g, b, col]`` if ``col < widths[g]`` else -1, taken as 0 when its slots pass int32
        (``(page + 1) * ps > 2^31``, W5: the store would wrap), and
        ``out[g, i] = max(page, 0) * ps + pos % ps`` (int64 arithmetic, stored int32).
        ``out[g, bs*n:]`` is left untouched.
        """
        ...

    def stacked_extend_locs(self, tables: torch.Tensor, widths: torch.Tensor, page_sizes: torch.Tensor,
                            rows: torch.Tensor, positions: torch.Tensor, out: torch.Tensor) -> None:
        """Extend locations of all groups at once (W3).

        rows, positions: int64 ``[T]`` (token i belongs to request rows[i] at position positions[i]);
        out: int32 ``[G, >= T]``. ``out[g, i]`` as in ``stacked_locs`` with ``b = rows[i]``,
        ``pos = positions[i]``; ``out[g, T:]`` untouched.
        """
        ...

    def replay_fill(self, packed: torch.Tensor, meta: torch.Tensor, dst: torch.Tensor, bs: int,
                    actual_bs: int, tail_pad: int) -> None:
        """The CUDA-graph replay fill of all groups in one pass (G3).

        packed: int32 1-D holding every group's live table row-major (``actual_bs`` rows of ``cols``) at its
        offset: packed back to back, or a flat view of the one storage the tables lie in (elements between
        them are never read); meta: int32 ``[G, 3]`` = (element offset into packed, source columns, ratio r);
        dst: int32 ``[G, max_bs, W]``. For every g, b < bs and w < W:
        - b < actual_bs and ``w // r < cols``: v = packed[off + b*cols + w//r];
          ``dst = v*r + w % r`` if v > 0 else v (holes stay 0, pads stay pad); a block whose sub-pages
          pass int32 (``(v + 1) * r > 2^31``) is the hole 0;
        - b < actual_bs and ``w // r >= cols``: tail_pad;
        - actual_bs <= b < bs: 0.
        Rows b >= bs are untouched.
        """
        ...


class GroupedExtendLocs(Protocol):
    """An optional ``Kernels`` fast path; the torch kernels have it, the Triton ones go through the stack."""

    def grouped_extend_locs(self, tables: Sequence[torch.Tensor], page_sizes: Sequence[int],
                            prefix_lens: Sequence[int], extend_lens: Sequence[int], out: torch.Tensor) -> None:
        """``stacked_extend_locs`` without the stack: each group's own int32 2-D table, the tokens as runs.

        tables[g]: group g's table (any strides), on ``out``'s device; page_sizes[g]: its page size (an
        int >= 1); request i writes positions ``prefix_lens[i] .. prefix_lens[i] + extend_lens[i] - 1``
        (python ints); out: int32 ``[G, >= T]``, T = ``sum(extend_lens)``. The caller guarantees, from its
        host mirrors, that every table has at least ``len(extend_lens)`` rows and every written position
        p of every group satisfies ``0 <= p < tables[g].shape[1] * page_sizes[g]``. Then ``out[g, :T]`` is
        what ``stacked_extend_locs`` writes for the tables stacked, with the tokens of ``extend_tokens``
        (no column is past a width; a pad read still sinks to page 0); ``out[g, T:]`` untouched.
        """
        ...


class GroupedLocs(Protocol):
    """An optional ``Kernels`` fast path; the torch kernels have it, the Triton ones go through the stack."""

    def grouped_locs(self, tables: Sequence[torch.Tensor], page_sizes: Sequence[int], seq_lens: torch.Tensor,
                     out: torch.Tensor, bs: int, n: int) -> None:
        """``stacked_locs`` without the stack: each group's own int32 2-D table, its width its column count.

        tables[g]: group g's table (any strides, at least ``bs`` rows), on ``out``'s device; page_sizes[g]:
        its page size (an int >= 1); seq_lens, out, bs, n as in ``stacked_locs``. Then ``out[g, :bs*n]`` is
        what ``stacked_locs`` writes for the tables stacked with ``widths[g] = tables[g].shape[1]`` (a column
        at or past it sinks to page 0, as does a pad); ``out[g, bs*n:]`` untouched. ``seq_lens`` may live
        on the device: nothing here reads it back.
        """
        ...
