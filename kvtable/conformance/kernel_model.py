"""A pure-Python model of the fused ``Kernels`` operations (impl/kernels.py), sink cases included.

The kernels' contract is wider than the Backend protocol's: a column at or past a group's width, or
a pad inside it, is not an error there but a defined *sink*, the null page 0 at offset ``pos % ps``.
Validation on the host normally stops such input before a kernel runs, so the suite states the
sink semantics here, on plain lists, and compares a backend's ``kernels`` with it directly. Every
operation writes into ``out`` / ``dst`` in place and leaves the elements its docstring does not name
as they were.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvtable.reference import NULL_PAGE, expand_entry, page_slots

Rows = list[list[int]]


def sink_loc(row: Sequence[int], width: int, page_size: int, pos: int) -> int:
    """The slot of ``pos`` among the row's first ``width`` columns; a pad there, or a column past the
    width, sinks into the null page at the in-page offset.

    The row's slots are its pages' slots in column order, ``page_size`` per page, so slot ``pos`` is the
    ``pos % page_size``-th of column ``pos // page_size``'s page (read so, page sizes near 2^30 cost nothing).
    """
    col, offset = divmod(pos, page_size)
    page = row[col] if col < min(width, len(row)) else -1  # past the width: no slot, as a pad
    slot = page_slots(NULL_PAGE if page < 0 else page, page_size)[offset]
    assert slot is not None  # a page id >= 0 owns real slots
    return slot


def stacked_locs(tables: Sequence[Rows], widths: Sequence[int], page_sizes: Sequence[int],
                 seq_lens: Sequence[int], out: Rows, bs: int, n: int) -> None:
    """W1/W2/W4/G4: token ``i = b*n + t`` of every group at ``max(seq_lens[b] - n + t, 0)``; ``out[g][bs*n:]`` kept."""
    for g, table in enumerate(tables):
        for i in range(bs * n):
            b, t = divmod(i, n)
            out[g][i] = sink_loc(table[b], widths[g], page_sizes[g], max(seq_lens[b] - n + t, 0))


def stacked_extend_locs(tables: Sequence[Rows], widths: Sequence[int], page_sizes: Sequence[int],
                        rows: Sequence[int], positions: Sequence[int], out: Rows) -> None:
    """W3: token ``i`` of every group is row ``rows[i]`` at ``positions[i]``; ``out[g][len(rows):]`` kept."""
    for g, table in enumerate(tables):
        for i, (b, pos) in enumerate(zip(rows, positions, strict=True)):
            out[g][i] = sink_loc(table[b], widths[g], page_sizes[g], pos)


def replay_fill(packed: Sequence[int], meta: Sequence[Sequence[int]], dst: list[Rows], bs: int,
                actual_bs: int, tail_pad: int) -> None:
    """G3: rows ``[:bs]`` of every group refilled; live rows expanded (E2) and tail-padded, the rest page 0.

    ``meta[g] = (offset, cols, r)`` locates group g's ``actual_bs`` rows of ``cols`` entries in ``packed``;
    rows ``>= bs`` are kept.
    """
    for g, (offset, cols, ratio) in enumerate(meta):
        width = len(dst[g][0]) if dst[g] else 0
        for b in range(bs):
            if b >= actual_bs:
                dst[g][b] = [NULL_PAGE] * width
                continue
            source = packed[offset + b * cols: offset + (b + 1) * cols]
            pages = [kp for page in source for kp in expand_entry(page, ratio)][:width]
            dst[g][b] = pages + [tail_pad] * (width - len(pages))
