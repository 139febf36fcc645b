"""R1-R3 in torch: a ring group's write and read locations for one step, vectorized over requests.

Lengths are CPU mirrors, so every bound (T9, the ring's width) is checked without a device sync; the page
contents (R1's real, private pages, W5) are read back only in debug mode; outside it a pad or hole in a ring
column, or a page past W5, is read as page 0: the write then lands on the sink, never on another page.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from kvtable.contract import INT32_MAX, NULL_PAGE, RING_SENTINEL
from kvtable.errors import ContractViolation
from kvtable.impl.validate import check_page_size, check_table, extend_batch


def ring_pages(window: int, page_size: int) -> int:
    """R1 ring-slot: the most pages a ring holds, ``ceil(window / ps)``."""
    return -(-window // page_size)


def check_ring_form(table: torch.Tensor, prefix_lens: Sequence[int], extend_lens: Sequence[int], page_size: int,
                    window: int, *, group: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """E1/W5 page size, R1 window, T9 lengths, T1 shape and R1 width, all on host values; returns the lengths
    as CPU int64 tensors (prefix, extend)."""
    check_page_size(page_size, group=group)
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ContractViolation("R1", f"a ring group needs a window >= 1, got {window!r}", group=group)
    batch = extend_batch(prefix_lens, extend_lens)
    prefix = torch.tensor(batch.prefix_lens, dtype=torch.int64)
    extend = torch.tensor(batch.seq_lens, dtype=torch.int64) - prefix
    if bool((prefix < 0).any()) or bool((extend < 0).any()):
        row = int(torch.nonzero((prefix < 0) | (extend < 0))[0, 0])
        raise ContractViolation("T9", f"prefix {int(prefix[row])} and extend {int(extend[row])} must be >= 0", row=row)
    check_table(table, len(prefix), group=group)
    need = torch.where(extend > 0, -(-torch.clamp(prefix + extend, max=window) // page_size), 0)
    if len(need) and int(need.max()) > table.shape[1]:
        row = int(torch.argmax(need))
        raise ContractViolation("R1", f"the ring needs {int(need[row])} pages; the table has {table.shape[1]} columns",
                                group=group, row=row)
    return prefix, extend


def check_ring_pages(table: torch.Tensor, prefix: torch.Tensor, extend: torch.Tensor, page_size: int,
                     window: int, *, group: str | None = None) -> None:
    """R1 ring-slot (debug mode): the used ring columns hold real private pages (W5: int32 slots), and no real
    page sits past ``ceil(window / ps)`` columns."""
    rows = table[: len(prefix)].to("cpu", torch.int64)
    cols = torch.arange(rows.shape[1])
    need = torch.where(extend > 0, -(-torch.clamp(prefix + extend, max=window) // page_size), 0)
    used = cols[None, :] < need[:, None]
    _first(used & (rows <= NULL_PAGE), "R1", "ring column {c} holds {v}, not a real page", rows, group)
    _first((cols[None, :] >= ring_pages(window, page_size)) & (rows > NULL_PAGE), "R1",
           "real page {v} past the ring's pages", rows, group)
    _first(used & ((rows + 1) * page_size > INT32_MAX + 1), "W5", "page {v} has slots past 2^31 - 1", rows, group)
    pages = rows[used]
    seen, counts = torch.unique(pages, return_counts=True)
    if bool((counts > 1).any()):
        page = int(seen[counts > 1][0])
        r, c = (int(x) for x in torch.nonzero(used & (rows == page))[1])
        raise ContractViolation("R1", f"ring page {page} is in two rings or twice in one", group=group, row=r, col=c)


def _first(bad: torch.Tensor, clause: str, message: str, rows: torch.Tensor, group: str | None) -> None:
    if bool(bad.any()):
        r, c = (int(x) for x in torch.nonzero(bad)[0])
        raise ContractViolation(clause, message.format(c=c, v=int(rows[r, c])), group=group, row=r, col=c)


def _slots(table: torch.Tensor, rows: torch.Tensor, pos: torch.Tensor, page_size: int, window: int) -> torch.Tensor:
    """R1: ``table[row][i // ps] * ps + i % ps`` at ``i = pos % window`` in int64; a pad, hole or page past W5 is
    page 0 (the sink)."""
    index = pos % window
    page = table[rows, index // page_size].long()
    page = torch.where((page <= NULL_PAGE) | ((page + 1) * page_size > INT32_MAX + 1), NULL_PAGE, page)
    return page * page_size + index % page_size


def ring_locs(table: torch.Tensor, prefix_lens: Sequence[int], extend_lens: Sequence[int], page_size: int,
              window: int, *, debug: bool = False, group: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """R2 ring-write and R3 ring-read: int32 ``(writes [sum(extend)], reads)`` on the table's device, request
    order. Writes: the last ``min(q, window)`` tokens of a row at their R1 slots, earlier ones at slot 0 of the
    sink. Reads, per row with new tokens: positions ``[max(prefix - window + 1, 0), prefix)`` at their R1 slots,
    then ``RING_SENTINEL`` once per new token."""
    prefix, extend = check_ring_form(table, prefix_lens, extend_lens, page_size, window, group=group)
    if debug:
        check_ring_pages(table, prefix, extend, page_size, window, group=group)
    device = table.device
    bs = len(prefix)
    rows = torch.repeat_interleave(torch.arange(bs), extend)
    starts = torch.cumsum(extend, 0) - extend
    pos = prefix[rows] + torch.arange(int(extend.sum())) - starts[rows]
    stored = pos >= (prefix + extend - torch.clamp(extend, max=window))[rows]
    writes = torch.where(stored.to(device), _slots(table, rows.to(device), pos.to(device), page_size, window), 0)
    cached = torch.where(extend > 0, torch.clamp(prefix, max=window - 1), 0)
    per_row = torch.where(extend > 0, cached + extend, 0)
    read_rows = torch.repeat_interleave(torch.arange(bs), per_row)
    local = torch.arange(int(per_row.sum())) - (torch.cumsum(per_row, 0) - per_row)[read_rows]
    is_cached = local < cached[read_rows]
    read_pos = torch.where(is_cached, prefix[read_rows] - cached[read_rows] + local, 0)
    reads = torch.where(is_cached.to(device), _slots(table, read_rows.to(device), read_pos.to(device), page_size,
                                                     window), RING_SENTINEL)
    return writes.to(torch.int32), reads.to(torch.int32)
