"""R1-R3: a sliding group stored as a ring of pages (``layout="ring"``, transformers' sliding-window cache).

A request's row holds its ring: at most ``ceil(window / ps)`` pages, reused forever. Position ``p`` lives at
ring index ``p % window`` (R1); a step writes its last ``min(q, window)`` tokens there and its earlier ones to
the sink (R2); it reads the cached part of its first query's window before writing, then takes its own keys
at the sentinels (R3). ``ring_unsafe`` is the safety oracle for any input.
"""

from __future__ import annotations

from collections.abc import Sequence
from numbers import Integral
from typing import Any

from kvtable.contract import RING_SENTINEL
from kvtable.errors import ContractViolation
from kvtable.reference.model import INT32_MAX, NULL_PAGE, Table, check_page_size, is_int
from kvtable.reference.safety import UnsafeWrite
from kvtable.reference.tables import as_table

RingToken = tuple[int, int | None]
"""``(row, position)`` of one write or read entry; position None marks a read sentinel (the step's own key)."""


def ring_pages(window: int, page_size: int) -> int:
    """R1 ring-slot: the most pages a request's ring holds, ``ceil(window / ps)``."""
    return -(-window // page_size)


def ring_columns(seq_len: int, window: int, page_size: int) -> int:
    """R1 ring-slot: the ring columns a row of ``seq_len`` tokens uses, ``ceil(min(seq_len, window) / ps)``."""
    return -(-min(seq_len, window) // page_size)


def ring_slot(row: Sequence[int], pos: int, window: int, page_size: int) -> int:
    """R1 ring-slot: position ``pos`` at ring index ``i = pos % window``: ``row[i // ps] * ps + i % ps``."""
    index = pos % window
    return row[index // page_size] * page_size + index % page_size


def check_window(window: object, *, group: str | None = None) -> None:
    """R1 ring-slot: a ring's window is an int >= 1 (its span: position p lives at index p % window)."""
    if isinstance(window, bool) or not isinstance(window, Integral) or window < 1:
        raise ContractViolation("R1", f"a ring group needs a window >= 1, got {window!r}", group=group)


def check_ring_lengths(prefix_lens: Sequence[int], extend_lens: Sequence[int]) -> None:
    """T9 lengths: one cached length and one new-token count per request, ints >= 0."""
    if len(prefix_lens) != len(extend_lens):
        raise ContractViolation("T9", f"{len(prefix_lens)} prefix lengths but {len(extend_lens)} extend lengths")
    for row, (prefix, extend) in enumerate(zip(prefix_lens, extend_lens, strict=True)):
        if not (is_int(prefix) and is_int(extend)) or prefix < 0 or extend < 0:
            raise ContractViolation("T9", f"prefix {prefix!r} and extend {extend!r} must be ints >= 0", row=row)


def check_ring_table(table: Any, prefix_lens: Sequence[int], extend_lens: Sequence[int], page_size: int,
                     window: int, *, group: str | None = None) -> Table:
    """R1 ring-slot: every ring column a live row uses holds a real page (W5: with int32 slots), no page twice in a
    row or in two rows' rings, no real page past ``ceil(window / ps)`` columns; returns the plain rows."""
    check_page_size(page_size, group=group)
    check_window(window, group=group)
    check_ring_lengths(prefix_lens, extend_lens)
    rows = as_table(table, group=group)
    if len(rows) < len(prefix_lens):
        raise ContractViolation("T1", f"{len(rows)} table rows for {len(prefix_lens)} requests", group=group)
    most = ring_pages(window, page_size)
    owner: dict[int, int] = {}
    for r, (prefix, extend) in enumerate(zip(prefix_lens, extend_lens, strict=True)):
        entries = rows[r]
        need = ring_columns(prefix + extend, window, page_size) if extend else 0
        if need > len(entries):
            raise ContractViolation("R1", f"the ring needs {need} pages (seq_len {prefix + extend}, window {window}, "
                                    f"page size {page_size}); the table has {len(entries)} columns", group=group, row=r)
        for c, page in enumerate(entries):
            if c < need and page <= NULL_PAGE:
                raise ContractViolation("R1", f"ring column {c} holds {page}, not a real page", group=group, row=r,
                                        col=c)
            if page > NULL_PAGE and c >= most:
                raise ContractViolation("R1", f"real page {page} past the ring's {most} pages", group=group, row=r,
                                        col=c)
            if c < need and (page + 1) * page_size > INT32_MAX + 1:
                raise ContractViolation("W5", f"page {page} has slots past 2^31 - 1", group=group, row=r, col=c)
            if c < need and page in owner:
                where = "twice in the row" if owner[page] == r else f"also in row {owner[page]}'s ring"
                raise ContractViolation("R1", f"ring page {page} is {where}", group=group, row=r, col=c)
            if c < need:
                owner[page] = r
    return rows


def ring_write_locs(table: Any, prefix_lens: Sequence[int], extend_lens: Sequence[int], page_size: int,
                    window: int, *, group: str | None = None) -> list[int]:
    """R2 ring-write: one location per new token, request order: the last ``min(q, window)`` tokens of a row at
    their R1 slots (each overwrites the token ``window`` positions back, which left the window), the earlier
    ones at the sink, slot 0 of page 0 (the step's later tokens take their slots)."""
    rows = check_ring_table(table, prefix_lens, extend_lens, page_size, window, group=group)
    out: list[int] = []
    for r, (prefix, extend) in enumerate(zip(prefix_lens, extend_lens, strict=True)):
        stored_from = prefix + extend - min(extend, window)
        out += [ring_slot(rows[r], p, window, page_size) if p >= stored_from else NULL_PAGE * page_size
                for p in range(prefix, prefix + extend)]
    return out


def ring_read_locs(table: Any, prefix_lens: Sequence[int], extend_lens: Sequence[int], page_size: int,
                   window: int, *, group: str | None = None) -> list[int]:
    """R3 ring-read: per row with new tokens, request order: the cached part of the first query's window,
    positions ``[max(prefix - window + 1, 0), prefix)`` at their R1 slots, then one ``RING_SENTINEL`` per new
    token (read before the step writes, so no write of the step can take a slot it reads)."""
    rows = check_ring_table(table, prefix_lens, extend_lens, page_size, window, group=group)
    out: list[int] = []
    for r, (prefix, extend) in enumerate(zip(prefix_lens, extend_lens, strict=True)):
        if extend:
            cached = min(prefix, window - 1)
            out += [ring_slot(rows[r], p, window, page_size) for p in range(prefix - cached, prefix)]
            out += [RING_SENTINEL] * extend
    return out


def ring_write_tokens(prefix_lens: Sequence[int], extend_lens: Sequence[int]) -> list[RingToken]:
    """``(row, position)`` of each write entry, in output order (no validation)."""
    return [(r, p) for r, (prefix, extend) in enumerate(zip(prefix_lens, extend_lens, strict=False))
            for p in range(prefix, prefix + extend)]


def ring_read_tokens(prefix_lens: Sequence[int], extend_lens: Sequence[int], window: int) -> list[RingToken]:
    """``(row, position)`` of each read entry, in output order, position None at a sentinel (no validation)."""
    out: list[RingToken] = []
    for r, (prefix, extend) in enumerate(zip(prefix_lens, extend_lens, strict=False)):
        if extend > 0:
            cached = max(min(prefix, window - 1), 0)
            out += [(r, p) for p in range(prefix - cached, prefix)] + [(r, None)] * extend
    return out


def ring_unsafe(table: Any, writes: Any, reads: Any, prefix_lens: Sequence[int], extend_lens: Sequence[int],
                page_size: int, window: int, *, pad_slot: int | None = None, group: str | None = None
                ) -> list[UnsafeWrite]:
    """The ring's safety oracle, for any input: every write is its token's own R1 slot (a stored token only: an
    earlier token of an over-long step races with the later token that owns that slot), the sink or the pad slot;
    every read is a sentinel, the sink or a slot of the row's own ring. Output order, writes first."""
    rows = table.tolist() if hasattr(table, "tolist") else table
    wrote = writes.tolist() if hasattr(writes, "tolist") else list(writes)
    read = reads.tolist() if hasattr(reads, "tolist") else list(reads)
    unsafe: list[UnsafeWrite] = []
    tokens = ring_write_tokens(prefix_lens, extend_lens)
    ends = {r: prefix + extend for r, (prefix, extend) in enumerate(zip(prefix_lens, extend_lens, strict=False))}
    for k, loc in enumerate(wrote):
        if loc == pad_slot or 0 <= loc < page_size:
            continue
        row, pos = tokens[k] if k < len(tokens) else (None, None)
        reason = _bad_write(rows, row, pos, loc, page_size, window, ends)
        if reason:
            unsafe.append(UnsafeWrite(group, row, k, pos, loc, reason))
    reads_of = ring_read_tokens(prefix_lens, extend_lens, window)
    for k, loc in enumerate(read):
        if loc == RING_SENTINEL or 0 <= loc < page_size:
            continue
        row = reads_of[k][0] if k < len(reads_of) else None
        if row is None or not _in_own_ring(rows, row, loc, page_size, window):
            unsafe.append(UnsafeWrite(group, row, k, reads_of[k][1] if k < len(reads_of) else None, loc,
                                      f"read of slot {loc} outside the row's own ring"))
    return unsafe


def _own_ring(rows: Any, row: int, page_size: int, window: int) -> list[int]:
    """The real pages of the row's ring columns (none where the row does not exist)."""
    if not 0 <= row < len(rows) or page_size < 1 or window < 1:
        return []
    return [p for p in rows[row][: ring_pages(window, page_size)] if p > NULL_PAGE]


def _in_own_ring(rows: Any, row: int, loc: int, page_size: int, window: int) -> bool:
    return loc >= 0 and loc // page_size in _own_ring(rows, row, page_size, window)


def _bad_write(rows: Any, row: int | None, pos: int | None, loc: int, page_size: int, window: int,
               ends: dict[int, int]) -> str:
    """Why a write (neither the sink nor the pad slot) is not its token's own ring slot; '' when it is."""
    if row is None or pos is None:
        return "no token writes this output entry"
    if loc < 0:
        return f"negative slot {loc}, not the pad slot"
    if window < 1 or page_size < 1:
        return f"window {window} and page size {page_size} define no ring"
    index = pos % window
    col = index // page_size
    entries = rows[row] if 0 <= row < len(rows) else []
    own = entries[col] if col < len(entries) else None
    if own is None or own <= NULL_PAGE:
        return f"position {pos}'s ring column {col} holds no real page; it wrote slot {loc}"
    want = own * page_size + index % page_size
    if loc != want:
        where = "another slot of its own ring" if _in_own_ring(rows, row, loc, page_size, window) else \
            "outside its ring (another request's page)"
        return f"wrote slot {loc}, {where}; its ring slot is {want} (index {index})"
    if pos < ends.get(row, 0) - window:
        return f"position {pos} is not stored (position {pos + window} of the same step takes slot {loc})"
    return ""
