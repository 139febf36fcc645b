"""Debug mode's table contract (T1-T5, T7-T9, W2, W5), vectorized in torch on the tables' device.

Every check turns a whole group's table into a flag per entry (or per row) at once and keeps only the
first flagged entry (``impl/findings.py``); nothing is read back here. The checks run in the order the
contract reports breaches (lengths, then per group in id order: T1 entries, T2, T8, T5, T4, T3, T7, W5,
each over all rows), so the first breach named is the one the reference's ``check_tables`` meets first.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch

from kvtable.contract import INT32_MAX, NULL_PAGE, GroupSpec, Mode
from kvtable.errors import ContractViolation
from kvtable.impl.findings import Finding, first_entry, repeated


@dataclass(frozen=True)
class Spans:
    """Each row's step on the tables' device, int64 ``[bs]``: its length, its first write (= first query)
    position, whether it writes at all, and whether it is a live (not padded) row."""

    seq: torch.Tensor
    first: torch.Tensor
    writes: torch.Tensor
    live: torch.Tensor
    mode: Mode
    n: int
    live_rows: int


def spans(seq: torch.Tensor, prefix: torch.Tensor | None, mode: Mode, n: int, live_rows: int) -> Spans:
    """W1-W4: extend rows write ``[prefix, seq)``; the others write the ``n`` (1 for decode) positions before
    ``seq``, clamped at 0."""
    seq = seq.to(torch.int64)
    rows = torch.arange(seq.shape[0], device=seq.device)
    if mode == "extend":
        assert prefix is not None
        first, writes = prefix.to(torch.int64), seq > prefix
    else:
        first, writes = (seq - (1 if mode == "decode" else n)).clamp_min(0), torch.ones_like(seq, dtype=torch.bool)
    return Spans(seq, first, writes, rows < live_rows, mode, n, live_rows)


@dataclass(frozen=True)
class GroupView:
    """One group's table (all rows, and the batch's rows) as int64, with the columns its live rows need."""

    spec: GroupSpec
    tail_pad: int
    whole: torch.Tensor
    rows: torch.Tensor
    spans: Spans
    end: torch.Tensor
    """``ceil(seq / ps)``: one past the last column a row writes, ``[bs, 1]``."""
    needed: torch.Tensor
    """Columns a live row's step reads or writes, ``[bs, width]``: from its first in-window read to ``end``."""

    @property
    def gid(self) -> str:
        return self.spec.group_id

    @property
    def width(self) -> int:
        return self.rows.shape[1]

    def at(self, index: int, width: int | None = None) -> tuple[int, int]:
        """(row, col) of a flat index into a ``[bs, width]`` flag matrix."""
        return divmod(index, self.width if width is None else width)


def group_view(table: torch.Tensor, spec: GroupSpec, s: Spans, tail_pad: int) -> GroupView:
    """T4/T5's needed columns: ``[read_start // ps, ceil(seq / ps))`` of live writing rows, where a sliding
    group's ``read_start = max(first - window + 1, 0)`` and a full group reads from column 0."""
    ps = spec.block_granularity
    whole = table.to(torch.int64)
    rows = whole[: s.seq.shape[0]]
    col = torch.arange(rows.shape[1], device=rows.device)
    end = (-(-s.seq // ps)).unsqueeze(1)
    window = spec.window if spec.family == "sliding" else None
    start = (s.first - window + 1).clamp_min(0) // ps if window is not None else torch.zeros_like(s.first)
    needed = (s.live & s.writes).unsqueeze(1) & (col >= start.unsqueeze(1)) & (col < end)
    return GroupView(spec, tail_pad, whole, rows, s, end, needed)


def length_findings(s: Spans) -> list[Finding]:
    """T9 lengths and W2 verify-loc for lengths that live on the device (host mirrors are checked on the host)."""
    short = s.seq < 1
    w2 = s.live & (s.seq < s.n) if s.mode == "verify" else torch.zeros_like(short)
    probe = first_entry(torch.stack([short, w2], 1), s.seq.unsqueeze(1))

    def explain(index: int, values: Sequence[int]) -> ContractViolation:
        row, which = divmod(index, 2)
        if which == 0:
            return ContractViolation("T9", f"seq_len must be >= 1, got {values[0]}", row=row)
        return ContractViolation("W2", f"real row has seq_len {values[0]} < N={s.n}", row=row)

    return [Finding(probe, explain)]


def _t1_entries(v: GroupView) -> Finding:
    """T1 table-shape: every entry of every row is a page id (>= 0) or the pad -1."""
    def explain(index: int, values: Sequence[int]) -> ContractViolation:
        row, col = v.at(index)
        return ContractViolation("T1", f"page id {values[0]} is neither a page (>= 0) nor the pad -1", group=v.gid,
                                 row=row, col=col)
    return Finding(first_entry(v.whole < -1, v.whole), explain)


def _t2_dummy_rows(v: GroupView) -> Finding:
    """T2 dummy-row: a padded row has seq_len 1 (checked first) and page 0 in every column."""
    dummy = ~v.spans.live.unsqueeze(1)
    flags = torch.cat([dummy & (v.spans.seq.unsqueeze(1) != 1), dummy & (v.rows != NULL_PAGE)], 1)
    probe = first_entry(flags, torch.cat([v.spans.seq.unsqueeze(1), v.rows], 1))

    def explain(index: int, values: Sequence[int]) -> ContractViolation:
        row, col = v.at(index, v.width + 1)
        if col == 0:
            return ContractViolation("T2", f"dummy row has seq_len {values[0]}, expected 1", group=v.gid, row=row)
        return ContractViolation("T2", f"dummy row holds {values[0]}, expected page 0", group=v.gid, row=row,
                                 col=col - 1)
    return Finding(probe, explain)


def _t8_width(v: GroupView) -> Finding:
    """T8 table-width: a live writing row's last column, ``ceil(seq / ps) - 1``, exists."""
    s = v.spans
    flags = s.live & s.writes & (v.end.squeeze(1) > v.width)

    def explain(index: int, values: Sequence[int]) -> ContractViolation:
        seq, end = values
        return ContractViolation("T8", f"seq_len {seq} needs {end} columns of {v.spec.block_granularity} tokens, "
                                 f"table has {v.width}", group=v.gid, row=index, col=end - 1)
    return Finding(first_entry(flags, s.seq, v.end.squeeze(1)), explain)


def _t5_front_holes(v: GroupView) -> Finding:
    """T5 swa-front-holes: a sliding row's holes (page 0) cover no column its step needs and, with a negative
    tail pad, sit before its first real page (a 0 after a real page is the pad when the pad is 0)."""
    page, live = v.rows, v.spans.live.unsqueeze(1)
    zero = page == NULL_PAGE
    after_page = live & zero & _before(page > 0) & ~_before(page == v.tail_pad) & (v.tail_pad < 0)
    flags = torch.cat([v.needed & zero, after_page], 1)
    if v.spec.family != "sliding":
        flags = torch.zeros_like(flags)

    def explain(index: int, values: Sequence[int]) -> ContractViolation:
        row, col = v.at(index, 2 * v.width)
        if col >= v.width:
            return ContractViolation("T5", "hole (page 0) after a real page; holes sit only at the front",
                                     group=v.gid, row=row, col=col - v.width)
        first, window = values[0], v.spec.window or 0
        return ContractViolation("T5", f"hole covers a needed column: queries from position {first} with window "
                                 f"{window} read from position {max(first - window + 1, 0)}", group=v.gid,
                                 row=row, col=col)
    return Finding(first_entry(flags, v.spans.first.unsqueeze(1)), explain)


def _t4_live_pages(v: GroupView) -> Finding:
    """T4 live-pages: every column a live row's step needs holds a real page (a sliding row's front hole too,
    T5's to report first); a full row has no holes."""
    page = v.rows
    flags = v.needed & ((page < 0) | ((page == NULL_PAGE) & (v.spec.family == "full")))

    def explain(index: int, values: Sequence[int]) -> ContractViolation:
        row, col = v.at(index)
        entry, seq = values
        if entry < 0:
            return ContractViolation("T4", f"tail pad {entry} inside the live length (seq_len {seq})", group=v.gid,
                                     row=row, col=col)
        return ContractViolation("T4", "null page 0 inside the live length; full-attention rows have no holes",
                                 group=v.gid, row=row, col=col)
    return Finding(first_entry(flags, page, v.spans.seq.unsqueeze(1)), explain)


def _t3_tail_pad(v: GroupView) -> Finding:
    """T3 tail-pad: a live row reads ``holes, real pages, tail pad``; nothing but the pad follows a pad, and a
    full row has no hole after a real page (a sliding row's is T5's to report)."""
    page, live = v.rows, v.spans.live.unsqueeze(1)
    real, zero = page > 0, page == NULL_PAGE
    real_before = _before(real)
    pad = (page == v.tail_pad) & (real_before | (page < 0))
    pad_before = _before(pad)
    hole = zero & ~pad_before & (~real_before | (v.spec.family == "sliding"))
    fits = (real & ~pad_before) | pad | hole

    def explain(index: int, values: Sequence[int]) -> ContractViolation:
        row, col = v.at(index)
        what = "a real page" if values[0] > 0 else f"{values[0]}"
        return ContractViolation("T3", f"{what} where only the tail pad {v.tail_pad} may follow", group=v.gid,
                                 row=row, col=col)
    return Finding(first_entry(live & ~fits, page), explain)


def _before(flags: torch.Tensor) -> torch.Tensor:
    """Per row: whether any earlier column is flagged (an exclusive running OR along dim 1)."""
    seen = flags.to(torch.int32).cummax(1).values.to(torch.bool)
    return torch.cat([torch.zeros_like(seen[:, :1]), seen[:, :-1]], 1)


def _t7_twice_in_row(v: GroupView) -> Finding:
    """T7 private-write-pages: no real page appears twice in one live row (the later column is reported)."""
    page = v.rows
    mine = v.spans.live.unsqueeze(1) & (page > 0)
    flat = torch.arange(page.numel(), device=page.device).view_as(page)
    key = torch.where(mine, torch.arange(page.shape[0], device=page.device).unsqueeze(1) * 2**32 + page, -1 - flat)

    def explain(index: int, values: Sequence[int]) -> ContractViolation:
        row, col = v.at(index)
        return ContractViolation("T7", f"page {values[0]} appears twice in one row", group=v.gid, row=row, col=col)
    return Finding(first_entry(repeated(key.reshape(-1)).view_as(page), page), explain)


def _t7_shared_write(v: GroupView) -> Finding:
    """T7 private-write-pages: a page in a column a live row writes is in no other live row."""
    page, s = v.rows, v.spans
    mine = s.live.unsqueeze(1) & (page > 0)
    row = torch.arange(page.shape[0], device=page.device).unsqueeze(1).expand_as(page)
    low, high = _row_range(torch.where(mine, page, -1 - torch.arange(page.numel(), device=page.device).view_as(page)),
                           row)
    ps = v.spec.block_granularity
    col = torch.arange(v.width, device=page.device)
    writes = (s.live & s.writes).unsqueeze(1) & (col >= (s.first // ps).unsqueeze(1)) & (col < v.end)
    other = torch.where(low == row, high, low)
    position = torch.maximum(s.first.unsqueeze(1), col * ps)
    probe = first_entry(mine & writes & (low != high), page, position, other)

    def explain(index: int, values: Sequence[int]) -> ContractViolation:
        at_row, at_col = v.at(index)
        shared, pos, with_row = values
        return ContractViolation("T7", f"write page {shared} (position {pos}) is shared with row {with_row}",
                                 group=v.gid, row=at_row, col=at_col)
    return Finding(probe, explain)


def _row_range(keys: torch.Tensor, row: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For each entry, the lowest and highest row holding an entry with the same key (sort, segment, scatter)."""
    flat_keys, flat_rows = keys.reshape(-1), row.reshape(-1)
    order = torch.sort(flat_keys, stable=True).indices
    ordered = flat_keys[order]
    segment = torch.cumsum(torch.cat([ordered.new_zeros(1), (ordered[1:] != ordered[:-1]).to(torch.int64)]), 0)
    rows = flat_rows[order]
    size = flat_keys.numel()
    low = rows.new_full((size,), size).scatter_reduce(0, segment, rows, "amin")
    high = rows.new_full((size,), -1).scatter_reduce(0, segment, rows, "amax")
    back = torch.empty_like(segment)
    back[order] = segment
    return low[back].view_as(keys), high[back].view_as(keys)


def _w5_int32(v: GroupView) -> Finding:
    """W5 int32-locs: every slot of every real page, ``(p + 1) * ps - 1``, is an int32."""
    ps = v.spec.block_granularity
    flags = (v.whole > 0) & ((v.whole + 1) * ps - 1 > INT32_MAX)

    def explain(index: int, values: Sequence[int]) -> ContractViolation:
        row, col = v.at(index)
        return ContractViolation("W5", f"page {values[0]} at page size {ps} has slots past 2^31 - 1", group=v.gid,
                                 row=row, col=col)
    return Finding(first_entry(flags, v.whole), explain)


GROUP_CHECKS: tuple[Callable[[GroupView], Finding], ...] = (
    _t1_entries,
    _t2_dummy_rows,
    _t8_width,
    _t5_front_holes,
    _t4_live_pages,
    _t3_tail_pad,
    _t7_twice_in_row,
    _t7_shared_write,
    _w5_int32,
)
"""One group's checks, in the order their breaches are reported."""


def table_findings(specs: Mapping[str, GroupSpec], tables: Mapping[str, torch.Tensor], s: Spans,
                   tail_pad: int) -> list[Finding]:
    """Every group's table checks (groups in id order), none read back yet."""
    findings: list[Finding] = []
    for gid in sorted(tables):
        view = group_view(tables[gid], specs[gid], s, tail_pad)
        findings.extend(check(view) for check in GROUP_CHECKS)
    return findings
