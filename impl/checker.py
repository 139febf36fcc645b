"""D1-D2: the strong debug write checker, vectorized in torch; its verdict is read back with the table checks'.

Each live token's location must be slot ``pos % ps`` of the real page at column ``pos // ps`` of its
own row, and no two tokens may share a slot. The first bad token, in output order, is reported; for one
token a write into page 0 comes before a foreign page, a foreign page before a wrong offset, and that
before a slot already written.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from kvtable.contract import NULL_PAGE, Batch
from kvtable.errors import ContractViolation
from kvtable.impl import validate
from kvtable.impl.findings import Finding, raise_first
from kvtable.impl.tokens import batch_tokens

_NULL, _FOREIGN, _SHIFTED, _REPEATED = range(4)


def check_write_locs(table: torch.Tensor, locs: torch.Tensor, batch: Batch, page_size: int,
                     *, group: str | None = None) -> None:
    """D1 own-page-write and D2 unique-slots for one group's eager (unpadded) write locations."""
    validate.check_batch_form(batch)
    validate.check_lengths(batch)  # T9/W2 before D1: a negative length is no write to judge
    page_size = validate.check_page_size(page_size, group=group)
    validate.check_table(table, batch.bs, group=group)
    rows, positions = batch_tokens(batch, table.device)
    raise_first(write_findings(table, locs, rows, positions, page_size, batch.live_rows, group=group))


def write_findings(table: torch.Tensor, locs: object, rows: torch.Tensor, positions: torch.Tensor, page_size: int,
                   live_rows: int, *, group: str | None = None) -> list[Finding]:
    """D1/D2 for the tokens ``(rows, positions)`` of the live rows, as findings on the table's device (nothing
    read back)."""
    dtype = locs.dtype if isinstance(locs, torch.Tensor) else None
    if dtype is None or dtype.is_floating_point or dtype.is_complex or dtype == torch.bool:
        what = type(locs).__name__ if dtype is None else dtype
        raise ContractViolation("D1", f"write locations are an integer tensor, got {what}", group=group)
    assert isinstance(locs, torch.Tensor)
    tokens = rows.numel()
    if locs.numel() != tokens:
        raise ContractViolation("D1", f"{locs.numel()} write locations for {tokens} tokens", group=group)
    if not tokens:
        return []
    loc = locs.reshape(-1).to(device=table.device, dtype=torch.int64)
    width = table.shape[1]
    col = positions // page_size
    past = col >= width

    def explain_past(token: int, values: Sequence[int]) -> ContractViolation:
        row, pos, at = values
        return ContractViolation("D1", f"position {pos} needs column {at} past the table's {width}",
                                 group=group, row=row, col=at)

    own = table[rows, col.clamp_max(width - 1)]
    page, offset = loc // page_size, loc % page_size
    null = (loc < 0) | (page == NULL_PAGE)
    foreign = page != own
    shifted = offset != positions % page_size
    ordered, order = torch.sort(loc, stable=True)
    # the earliest token (in output order) on each slot; searchsorted copies (and warns about) a strided view
    first_writer = order[torch.searchsorted(ordered, loc.contiguous())]
    bad = null | foreign | shifted | (first_writer != torch.arange(tokens, device=loc.device))

    def probe() -> tuple[torch.Tensor, ...]:
        kind = torch.where(null, _NULL, torch.where(foreign, _FOREIGN, torch.where(shifted, _SHIFTED, _REPEATED)))
        return (bad, kind, rows, positions, col, loc, page, offset, own, rows[first_writer], positions[first_writer],
                _owner(table[:live_rows], page))

    def explain(token: int, values: Sequence[int]) -> ContractViolation:
        what, row, pos, at, slot, written, off, mine, other_row, other_pos, where = values
        if what == _NULL:
            message = f"position {pos} writes location {slot}, in the null page 0"
        elif what == _FOREIGN:
            whose = "no live row" if where < 0 else f"row {where // width} col {where % width}"
            message = f"position {pos} writes page {written} ({whose}), its own page is {mine}"
        elif what == _SHIFTED:
            message = f"position {pos} writes offset {off} of page {written}, expected {pos % page_size}"
        else:
            return ContractViolation("D2", f"location {slot} written by row {other_row} position {other_pos} and "
                                     f"by position {pos}", group=group, row=row, col=at)
        return ContractViolation("D1", message, group=group, row=row, col=at)

    return [Finding(past, lambda: (past, rows, positions, col), explain_past), Finding(bad, probe, explain)]


def _owner(live_table: torch.Tensor, page: torch.Tensor) -> torch.Tensor:
    """For each page, the row-major flat index of its first occurrence among the live rows, or -1."""
    flat = live_table.reshape(-1).to(torch.int64)
    if flat.numel() == 0:
        return torch.full_like(page, -1)
    ordered, order = torch.sort(flat, stable=True)
    at = torch.searchsorted(ordered, page.contiguous()).clamp_max(flat.numel() - 1)
    return torch.where(ordered[at] == page, order[at], -1)
