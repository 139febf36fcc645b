"""W1-W5: write locations, looked up in the rows' slot lists (never by the page*ps + off formula).

Each function takes one group's table (rows of page ids) and that group's page size, and returns
the flat int locations in output order: request-major, and token-major within a request.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvtable.errors import ContractViolation
from kvtable.reference.model import INT32_MAX, Batch, Table, check_batch_form, write_positions
from kvtable.reference.slots import row_slots


def batch_locs(table: Table, batch: Batch, page_size: int, *, group: str | None = None) -> list[int]:
    """The location of every position ``batch`` writes, row by row, through the rows' slot lists."""
    check_batch_form(batch)
    check_table_shape(table, batch, group=group)
    locs: list[int] = []
    for row in range(batch.bs):
        slots = row_slots(table[row], page_size)
        for pos in write_positions(batch, row):
            if pos >= len(slots):
                raise ContractViolation(
                    "T8", f"position {pos} needs column {pos // page_size} but the row has "
                    f"{len(table[row])} columns of {page_size} tokens", group=group, row=row,
                    col=pos // page_size)
            slot = slots[pos]
            if slot is None:
                raise ContractViolation(
                    "T4", f"position {pos} falls on the tail pad {table[row][pos // page_size]}",
                    group=group, row=row, col=pos // page_size)
            locs.append(slot)
    return locs


def check_table_shape(table: Table, batch: Batch, *, group: str | None = None) -> None:
    """T1 table-shape: at least one row per batch row and at least one column."""
    if len(table) < batch.bs:
        raise ContractViolation("T1", f"table has {len(table)} rows for a batch of {batch.bs}", group=group)
    if batch.bs and not table[0]:
        raise ContractViolation("T1", "table has no columns; col 0 must exist for dummy rows", group=group)


def decode_locs(table: Table, seq_lens: Sequence[int], page_size: int) -> list[int]:
    """W1 decode-loc: one location per request, for position ``seq_len - 1``."""
    _require_positive(seq_lens, "W1")
    return batch_locs(table, Batch(tuple(seq_lens)), page_size)


def verify_locs(table: Table, seq_lens: Sequence[int], page_size: int, n: int,
                *, actual_bs: int | None = None) -> list[int]:
    """W2 verify-loc: N locations per request (token-major), positions ``seq_len-N .. seq_len-1``.

    Padded rows (``row >= actual_bs``, seq_len 1) clamp their positions at 0 and so write slot 0 of
    the dummy page N times. A real row with ``seq_len < N`` would clamp too and write one slot more
    than once; the contract forbids it.
    """
    batch = Batch(tuple(seq_lens), mode="verify", n=n, actual_bs=actual_bs)
    check_batch_form(batch)
    _require_n(n, "W2")
    _require_positive(seq_lens, "W2")
    for row in range(batch.live_rows):
        if seq_lens[row] < n:
            raise ContractViolation("W2", f"real row has seq_len {seq_lens[row]} < N={n}: clamped positions"
                                    " would write slot of position 0 more than once", row=row)
    return batch_locs(table, batch, page_size)


def reanchor_locs(table: Table, frontier: Sequence[int], page_size: int, n: int) -> list[int]:
    """W4 reanchor-loc: a draft chain re-anchored to ``frontier`` writes ``frontier-N .. frontier-1``.

    Positions clamp at 0 for every row (a prompt shorter than N rewrites position 0 of its own page).
    """
    _require_n(n, "W4")
    _require_positive(frontier, "W4")
    return batch_locs(table, Batch(tuple(frontier), mode="reanchor", n=n), page_size)


def extend_locs(table: Table, prefix_lens: Sequence[int], extend_lens: Sequence[int],
                page_size: int) -> list[int]:
    """W3 extend-loc: positions ``[prefix, prefix + extend)`` of each request, in request order."""
    for row, (prefix, extend) in enumerate(zip(prefix_lens, extend_lens, strict=False)):
        if prefix < 0 or extend < 0:
            raise ContractViolation("T9", f"prefix {prefix} and extend {extend} must be >= 0", row=row)
    return batch_locs(table, Batch.extend(prefix_lens, extend_lens), page_size)


def check_int32_range(table: Table, page_size: int, *, group: str | None = None) -> None:
    """W5 int32-locs: every slot of every real page in the table is an int32 location."""
    for r, row in enumerate(table):
        for c, page in enumerate(row):
            if page > 0 and (page + 1) * page_size - 1 > INT32_MAX:
                raise ContractViolation("W5", f"page {page} at page size {page_size} has slots past "
                                        f"2^31 - 1", group=group, row=r, col=c)


def _require_n(n: int, clause: str) -> None:
    if not isinstance(n, int) or n < 1:
        raise ContractViolation(clause, f"tokens per request must be an int >= 1, got {n!r}")


def _require_positive(seq_lens: Sequence[int], clause: str) -> None:
    for row, seq in enumerate(seq_lens):
        if seq < 1:
            raise ContractViolation("T9", f"seq_len must be >= 1 (the newest token is included), got {seq}"
                                    f" (needed by {clause})", row=row)
