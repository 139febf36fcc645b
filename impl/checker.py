"""D1-D2: the strong debug write checker, vectorized in torch (eager only: reporting a breach syncs).

Each live token's location must be slot ``pos % ps`` of the real page at column ``pos // ps`` of its
own row, and no two tokens may share a slot. The first bad token, in output order, is reported with
the same clause and precedence as ``kvtable.reference.check_write_locs``.
"""

from __future__ import annotations

import torch

from kvtable.contract import NULL_PAGE, Batch
from kvtable.errors import ContractViolation
from kvtable.impl.tokens import batch_tokens


def check_write_locs(table: torch.Tensor, locs: torch.Tensor, batch: Batch, page_size: int,
                     *, group: str | None = None) -> None:
    """D1 own-page-write and D2 unique-slots for one group's eager (unpadded) write locations."""
    rows, positions = batch_tokens(batch, table.device)
    if locs.numel() != rows.numel():
        raise ContractViolation("D1", f"{locs.numel()} write locations for {rows.numel()} tokens", group=group)
    if not rows.numel():
        return
    loc = locs.reshape(-1).to(device=table.device, dtype=torch.int64)
    col = positions // page_size
    if int(col.max()) >= table.shape[1]:
        token = int(torch.nonzero(col >= table.shape[1])[0])
        raise ContractViolation("D1", f"position {int(positions[token])} needs column {int(col[token])} past "
                                f"the table's {table.shape[1]}", group=group, row=int(rows[token]),
                                col=int(col[token]))
    page, offset = loc // page_size, loc % page_size
    own = table[rows, col].to(torch.int64)
    null = (loc < 0) | (page == NULL_PAGE)
    foreign = ~null & (page != own)
    shifted = ~null & ~foreign & (offset != positions % page_size)
    repeated = _repeats(loc)
    bad = null | foreign | shifted | repeated
    if not bool(bad.any()):
        return
    k = int(torch.nonzero(bad)[0])
    row, pos, at, slot = int(rows[k]), int(positions[k]), int(col[k]), int(loc[k])
    if bool(null[k]):
        raise ContractViolation("D1", f"position {pos} writes location {slot}, in the null page 0",
                                group=group, row=row, col=at)
    if bool(foreign[k]):
        raise ContractViolation("D1", f"position {pos} writes page {int(page[k])} ({_owner(table, batch, page[k])}),"
                                f" its own page is {int(own[k])}", group=group, row=row, col=at)
    if bool(shifted[k]):
        raise ContractViolation("D1", f"position {pos} writes offset {int(offset[k])} of page {int(page[k])}, "
                                f"expected {pos % page_size}", group=group, row=row, col=at)
    first = int(torch.nonzero(loc[:k] == loc[k])[0])
    raise ContractViolation("D2", f"location {slot} written by row {int(rows[first])} position "
                            f"{int(positions[first])} and by position {pos}", group=group, row=row, col=at)


def _repeats(loc: torch.Tensor) -> torch.Tensor:
    """True for every token whose location an earlier token already wrote."""
    order = torch.sort(loc, stable=True).indices
    ordered = loc[order]
    later = torch.zeros_like(loc, dtype=torch.bool)
    later[1:] = ordered[1:] == ordered[:-1]
    repeated = torch.zeros_like(later)
    repeated[order] = later
    return repeated


def _owner(table: torch.Tensor, batch: Batch, page: torch.Tensor) -> str:
    """Where ``page`` sits among the live rows, for the error message."""
    hits = torch.nonzero(table[: batch.live_rows] == page)
    if not hits.numel():
        return "no live row"
    return f"row {int(hits[0, 0])} col {int(hits[0, 1])}"
