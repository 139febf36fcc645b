"""D1-D2: the strong debug write checker.

The upstream checker asks only "is the written page somewhere in the group's table, and not 0";
a write into another request's page, the wrong column of one's own row, or the wrong in-page offset
all pass it. This one recomputes where each token must land.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvtable.errors import ContractViolation
from kvtable.reference.model import NULL_PAGE, Batch, Table, check_batch_form, write_positions


def check_write_locs(table: Table, locs: Sequence[int], batch: Batch, page_size: int,
                     *, group: str | None = None) -> None:
    """D1 own-page-write and D2 unique-slots for one group's eager (unpadded) write locations."""
    check_batch_form(batch)
    expected = [(row, pos) for row in range(batch.live_rows) for pos in write_positions(batch, row)]
    if len(locs) != len(expected):
        raise ContractViolation("D1", f"{len(locs)} write locations for {len(expected)} tokens", group=group)
    writer_of: dict[int, tuple[int, int]] = {}
    for (row, pos), loc in zip(expected, locs, strict=True):
        col = pos // page_size
        page, offset = divmod(loc, page_size)
        own = table[row][col]
        if loc < 0 or page == NULL_PAGE:
            raise ContractViolation("D1", f"position {pos} writes location {loc}, in the null page 0",
                                    group=group, row=row, col=col)
        if page != own:
            owner = _owner(table, batch, page)
            whose = f"row {owner[0]} col {owner[1]}" if owner else "no live row"
            raise ContractViolation("D1", f"position {pos} writes page {page} ({whose}), its own page is "
                                    f"{own}", group=group, row=row, col=col)
        if offset != pos % page_size:
            raise ContractViolation("D1", f"position {pos} writes offset {offset} of page {page}, expected "
                                    f"{pos % page_size}", group=group, row=row, col=col)
        if loc in writer_of:
            other_row, other_pos = writer_of[loc]
            raise ContractViolation("D2", f"location {loc} written by row {other_row} position {other_pos} "
                                    f"and by position {pos}", group=group, row=row, col=col)
        writer_of[loc] = (row, pos)


def _owner(table: Table, batch: Batch, page: int) -> tuple[int, int] | None:
    for row in range(batch.live_rows):
        if page in table[row]:
            return row, table[row].index(page)
    return None
