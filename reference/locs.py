"""W1-W5: write locations, looked up in the rows' slot lists (never by the page*ps + off formula).

Each function takes one group's table (rows of page ids) and that group's page size, and returns
the flat int locations in output order: request-major, and token-major within a request. The lone
calls (one table, no group specs) validate their input like a batch first (``tables.check_lone_table``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kvtable.errors import ContractViolation
from kvtable.reference.model import (
    NULL_PAGE,
    Batch,
    ShortRows,
    Table,
    check_batch_form,
    check_page_size,
    unclamped_positions,
    write_positions,
)
from kvtable.reference.slots import row_slots
from kvtable.reference.tables import check_lone_table, check_table_shape, length_mirror


def batch_locs(table: Table, batch: Batch, page_size: int, *, group: str | None = None) -> list[int]:
    """The location of every position ``batch`` writes, row by row, through the rows' slot lists."""
    check_batch_form(batch)
    check_page_size(page_size, group=group)
    check_table_shape(table, batch, group=group)
    locs: list[int] = []
    for row in range(batch.bs):
        slots = row_slots(table[row], page_size)
        for pos in write_positions(batch, row):
            locs.append(_slot(slots, pos, table[row], page_size, group, row))
    return locs


def _slot(slots: list[int | None], pos: int, entries: list[int], page_size: int, group: str | None,
          row: int) -> int:
    """W0: the slot of position ``pos``, or T8 / T4 where the row has none."""
    if pos >= len(slots):
        raise ContractViolation("T8", f"position {pos} needs column {pos // page_size} but the row has "
                                f"{len(entries)} columns of {page_size} tokens", group=group, row=row,
                                col=pos // page_size)
    slot = slots[pos]
    if slot is None:
        raise ContractViolation("T4", f"position {pos} falls on the tail pad {entries[pos // page_size]}",
                                group=group, row=row, col=pos // page_size)
    return slot


def decode_locs(table: Any, seq_lens: Sequence[int], page_size: int, *, actual_bs: int | None = None) -> list[int]:
    """W1 decode-loc: one location per request, for position ``seq_len - 1`` (rows ``>= actual_bs``: padding)."""
    batch = Batch(tuple(seq_lens), actual_bs=actual_bs)
    return batch_locs(check_lone_table(table, batch, page_size), batch, page_size)


def verify_locs(table: Any, seq_lens: Sequence[int], page_size: int, n: int, *, actual_bs: int | None = None,
                short_rows: ShortRows = "refuse") -> list[int]:
    """W2 verify-loc: N locations per request (token-major), positions ``seq_len-N .. seq_len-1``.

    Padded rows (``row >= actual_bs``, seq_len 1) clamp their positions at 0 and so write slot 0 of
    the dummy page N times. A real row with ``seq_len < N`` would clamp too and write one slot more
    than once; the contract forbids it (W2), unless ``short_rows`` is an engine's convention: ``"clamp"``
    (tokenspeed) keeps the clamped positions, ``"sink"`` sends the negative ones to slot 0 of page 0.
    """
    batch = Batch(tuple(seq_lens), mode="verify", n=n, actual_bs=actual_bs)
    rows = check_lone_table(table, batch, page_size, short_rows=short_rows)
    locs = batch_locs(rows, batch, page_size)
    if short_rows != "sink":
        return locs
    negative = [row < batch.live_rows and pos < 0 for row in range(batch.bs) for pos in unclamped_positions(batch, row)]
    return [NULL_PAGE * page_size if sink else loc for loc, sink in zip(locs, negative, strict=True)]


def reanchor_locs(table: Any, frontier: Sequence[int], page_size: int, n: int) -> list[int]:
    """W4 reanchor-loc: a draft chain re-anchored to ``frontier`` writes ``frontier-N .. frontier-1``.

    Positions clamp at 0 for every row (a prompt shorter than N rewrites position 0 of its own page).
    """
    batch = Batch(tuple(frontier), mode="reanchor", n=n)
    return batch_locs(check_lone_table(table, batch, page_size), batch, page_size)


def extend_locs(table: Any, prefix_lens: Sequence[int], extend_lens: Sequence[int], page_size: int) -> list[int]:
    """W3 extend-loc: positions ``[prefix, prefix + extend)`` of each request, in request order."""
    batch = Batch.extend(length_mirror(prefix_lens, "prefix_lens"), length_mirror(extend_lens, "extend_lens"))
    return batch_locs(check_lone_table(table, batch, page_size), batch, page_size)
