"""Debug mode's table contract (T1-T5, T7-T9, W2, W5), vectorized in torch on the tables' device.

Every check turns a whole group's table into a flag per entry (or per row) at once, nothing reduced or read
back here (``impl/findings.py`` reads every check's ``any`` back in one transfer). The checks come in the order
the contract reports breaches (lengths, then per group in id order: T1 entries, T2, T8, T5, T4, T3, T7, W5,
each over all rows), so the first breach named is the one the reference's ``check_tables`` meets first.
Intermediates two checks share (a row's real pages, what precedes each column) are computed once per group.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

import torch

from kvtable.contract import INT32_MAX, NULL_PAGE, GroupSpec, Mode
from kvtable.errors import ContractViolation
from kvtable.impl.findings import Finding


@dataclass(frozen=True)
class Spans:
    """Each row's step on the tables' device, int64 ``[bs, 1]``: its length and its first write (= first query)
    position, and whether it writes at all (None: every row does); rows ``>= live_rows`` are padding."""

    seq: torch.Tensor
    first: torch.Tensor
    writes: torch.Tensor | None
    mode: Mode
    n: int
    live_rows: int

    @cached_property
    def live_seq(self) -> torch.Tensor:
        return self.seq[: self.live_rows]

    @cached_property
    def live_first(self) -> torch.Tensor:
        return self.first[: self.live_rows]

    @cached_property
    def live_writes(self) -> torch.Tensor | None:
        return None if self.writes is None else self.writes[: self.live_rows]

    @cached_property
    def dummy_seq_bad(self) -> torch.Tensor:
        """T2: a padded row's length is not 1, ``[bs - live_rows, 1]``."""
        return self.seq[self.live_rows:] != 1


def spans(seq: torch.Tensor, prefix: torch.Tensor | None, mode: Mode, n: int, live_rows: int) -> Spans:
    """W1-W4 from int64 ``[bs]`` lengths: extend rows write ``[prefix, seq)``; the others write the ``n`` (1 for
    decode) positions before ``seq``, clamped at 0."""
    seq = seq.view(-1, 1)
    if mode == "extend":
        assert prefix is not None
        first = prefix.view(-1, 1)
        return Spans(seq, first, seq > first, mode, n, live_rows)
    return Spans(seq, (seq - (1 if mode == "decode" else n)).clamp_min(0), None, mode, n, live_rows)


@dataclass(frozen=True)
class GroupView:
    """One group's table: all its rows (``whole``), the live rows and the padded rows of the batch, as given
    (int32), with the quantities several checks share, each computed on first use."""

    spec: GroupSpec
    tail_pad: int
    whole: torch.Tensor
    spans: Spans
    width: int

    @property
    def gid(self) -> str:
        return self.spec.group_id

    @cached_property
    def page(self) -> torch.Tensor:
        """The live rows, ``[live_rows, width]``."""
        return self.whole[: self.spans.live_rows]

    @cached_property
    def col(self) -> torch.Tensor:
        return torch.arange(self.width, device=self.whole.device)

    @cached_property
    def end(self) -> torch.Tensor:
        """``ceil(seq / ps)``: one past the last column a live row writes (0 for a row that writes nothing, so no
        column counts as written or needed), ``[live_rows, 1]``."""
        ps = self.spec.block_granularity
        end = (self.spans.live_seq + (ps - 1)) // ps
        return end if self.spans.live_writes is None else end * self.spans.live_writes

    @cached_property
    def needed(self) -> torch.Tensor:
        """T4/T5: the columns ``[read_start // ps, ceil(seq / ps))`` of live writing rows, where a sliding group's
        ``read_start = max(first - window + 1, 0)`` and a full group reads from column 0."""
        upto = self.col < self.end
        if self.spec.family == "sliding":
            window = self.spec.window or 0
            start = (self.spans.live_first - (window - 1)).clamp_min(0) // self.spec.block_granularity
            upto = upto & (self.col >= start)
        return upto

    @cached_property
    def real(self) -> torch.Tensor:
        return self.page > 0

    @cached_property
    def zero(self) -> torch.Tensor:
        return self.page == NULL_PAGE

    @cached_property
    def real_before(self) -> torch.Tensor:
        return _before(self.real)

    @cached_property
    def pad_before(self) -> torch.Tensor:
        """Whether the tail pad ``-1`` appears in an earlier column (T3's pad, and T5's when the pad is -1)."""
        return _before(self.page == self.tail_pad)

    @cached_property
    def real_pages(self) -> torch.Tensor:
        """T7: the live rows' real pages, every other entry -1 (T7's two checks sort them)."""
        return torch.where(self.real, self.page, -1)



def group_view(table: torch.Tensor, spec: GroupSpec, s: Spans, tail_pad: int) -> GroupView:
    """One group's view of the step (nothing computed yet)."""
    return GroupView(spec, tail_pad, table, s, table.shape[1])


def length_findings(s: Spans) -> list[Finding]:
    """T9 lengths and W2 verify-loc for lengths that live on the device (host mirrors are checked on the host)."""
    short = s.seq < 1
    if s.mode == "verify":
        live = torch.arange(s.seq.shape[0], device=s.seq.device).unsqueeze(1) < s.live_rows
        flags = torch.cat([short, live & (s.seq < s.n)], 1)
    else:
        flags = short
    which = flags.shape[1]

    def explain(index: int, values: Sequence[int]) -> ContractViolation:
        row, w2 = divmod(index, which)
        if w2:
            return ContractViolation("W2", f"real row has seq_len {values[0]} < N={s.n}", row=row)
        return ContractViolation("T9", f"seq_len must be >= 1, got {values[0]}", row=row)

    return [Finding(flags, lambda: (flags, s.seq), explain)]


def _t1_entries(v: GroupView) -> Finding:
    """T1 table-shape: every entry of every row is a page id (>= 0) or the pad -1."""
    flags = v.whole < -1

    def explain(index: int, values: Sequence[int]) -> ContractViolation:
        row, col = divmod(index, v.width)
        return ContractViolation("T1", f"page id {values[0]} is neither a page (>= 0) nor the pad -1", group=v.gid,
                                 row=row, col=col)
    return Finding(flags, lambda: (flags, v.whole), explain)


def _t2_dummy_rows(v: GroupView) -> Finding | None:
    """T2 dummy-row: a padded row has seq_len 1 (checked first) and page 0 in every column."""
    s = v.spans
    dummy = v.whole[s.live_rows: s.seq.shape[0]]
    if not dummy.shape[0]:
        return None
    flags = torch.cat([s.dummy_seq_bad, dummy != NULL_PAGE], 1)

    def explain(index: int, values: Sequence[int]) -> ContractViolation:
        row, col = divmod(index, v.width + 1)
        if col == 0:
            return ContractViolation("T2", f"dummy row has seq_len {values[0]}, expected 1", group=v.gid,
                                     row=s.live_rows + row)
        return ContractViolation("T2", f"dummy row holds {values[0]}, expected page 0", group=v.gid,
                                 row=s.live_rows + row, col=col - 1)
    return Finding(flags, lambda: (flags, torch.cat([s.seq[s.live_rows:], dummy], 1)), explain)


def _t8_width(v: GroupView) -> Finding:
    """T8 table-width: a live writing row's last column, ``ceil(seq / ps) - 1``, exists."""
    flags = v.end > v.width

    def explain(index: int, values: Sequence[int]) -> ContractViolation:
        seq, end = values
        return ContractViolation("T8", f"seq_len {seq} needs {end} columns of {v.spec.block_granularity} tokens, "
                                 f"table has {v.width}", group=v.gid, row=index, col=end - 1)
    return Finding(flags, lambda: (flags, v.spans.live_seq, v.end), explain)


def _t5_front_holes(v: GroupView) -> Finding | None:
    """T5 swa-front-holes: a sliding row's holes (page 0) cover no column its step needs and, with a negative
    tail pad, sit before its first real page (a 0 after a real page is the pad when the pad is 0)."""
    if v.spec.family != "sliding":
        return None
    flags = v.needed & v.zero
    if v.tail_pad < 0:
        flags = torch.cat([flags, (v.zero & v.real_before) > v.pad_before], 1)
    width = flags.shape[1]

    def explain(index: int, values: Sequence[int]) -> ContractViolation:
        row, col = divmod(index, width)
        if col >= v.width:
            return ContractViolation("T5", "hole (page 0) after a real page; holes sit only at the front",
                                     group=v.gid, row=row, col=col - v.width)
        first, window = values[0], v.spec.window or 0
        return ContractViolation("T5", f"hole covers a needed column: queries from position {first} with window "
                                 f"{window} read from position {max(first - window + 1, 0)}", group=v.gid,
                                 row=row, col=col)
    return Finding(flags, lambda: (flags, v.spans.live_first), explain)


def _t4_live_pages(v: GroupView) -> Finding:
    """T4 live-pages: every column a live row's step needs holds a real page (a sliding row's front hole too,
    T5's to report first); a full row has no holes."""
    flags = v.needed & (v.page < 0 if v.spec.family == "sliding" else v.page <= NULL_PAGE)

    def explain(index: int, values: Sequence[int]) -> ContractViolation:
        row, col = divmod(index, v.width)
        entry, seq = values
        if entry < 0:
            return ContractViolation("T4", f"tail pad {entry} inside the live length (seq_len {seq})", group=v.gid,
                                     row=row, col=col)
        return ContractViolation("T4", "null page 0 inside the live length; full-attention rows have no holes",
                                 group=v.gid, row=row, col=col)
    return Finding(flags, lambda: (flags, v.page, v.spans.live_seq), explain)


def _t3_tail_pad(v: GroupView) -> Finding:
    """T3 tail-pad: a live row reads ``holes, real pages, tail pad``; nothing but the pad follows a pad, and a
    full row has no hole after a real page (a sliding row's is T5's to report).

    With the pad -1 an entry fits unless it is below -1, or not the pad and after a pad, or (full rows) a hole
    after a real page; with the pad 0 (a 0 after a real page) only a negative entry or a real page after a pad
    breaks the layout, every 0 being a front hole or the pad.
    """
    page = v.page
    if v.tail_pad < 0:
        late = v.pad_before | (v.zero & v.real_before) if v.spec.family == "full" else v.pad_before
        flags = (page < v.tail_pad) | (late & (page != v.tail_pad))
    else:
        flags = (page < 0) | (v.real & _before(v.zero & v.real_before))

    def explain(index: int, values: Sequence[int]) -> ContractViolation:
        row, col = divmod(index, v.width)
        what = "a real page" if values[0] > 0 else f"{values[0]}"
        return ContractViolation("T3", f"{what} where only the tail pad {v.tail_pad} may follow", group=v.gid,
                                 row=row, col=col)
    return Finding(flags, lambda: (flags, page), explain)


def _before(flags: torch.Tensor) -> torch.Tensor:
    """Per row: whether any earlier column is flagged (an exclusive running OR along dim 1: the running count
    passes the entry's own)."""
    return flags.cumsum(1) > flags


def _t7_twice_in_row(v: GroupView) -> Finding:
    """T7 private-write-pages: no real page appears twice in one live row (the later column is reported)."""
    ordered, order = torch.sort(v.real_pages, dim=1, stable=True)  # each row's pages, equal ones in column order
    later = (ordered[:, 1:] == ordered[:, :-1]) & (ordered[:, 1:] > 0)

    def probe() -> tuple[torch.Tensor, ...]:
        return torch.zeros_like(v.real).scatter_(1, order[:, 1:], later), v.page

    def explain(index: int, values: Sequence[int]) -> ContractViolation:
        row, col = divmod(index, v.width)
        return ContractViolation("T7", f"page {values[0]} appears twice in one row", group=v.gid, row=row, col=col)
    return Finding(later, probe, explain)


def _t7_shared_write(v: GroupView) -> Finding:
    """T7 private-write-pages: a page in a column a live row writes is in no other live row (the rows holding a
    page are the ends of its run among the sorted pages)."""
    ordered, order = torch.sort(v.real_pages.reshape(-1), stable=True)  # a page's rows: a run, in row order
    rows = order // v.width
    pages = v.real_pages.contiguous()  # searchsorted copies (and warns about) a strided view of the table
    low = rows[torch.searchsorted(ordered, pages)]
    high = rows[torch.searchsorted(ordered, pages, right=True) - 1]
    ps = v.spec.block_granularity
    writes = (v.col >= v.spans.live_first // ps) & (v.col < v.end)
    flags = v.real & writes & (low != high)

    def probe() -> tuple[torch.Tensor, ...]:
        row = torch.arange(flags.shape[0], device=flags.device).unsqueeze(1)
        position = torch.maximum(v.spans.live_first, v.col * ps)
        return flags, v.page, position, torch.where(low == row, high, low)

    def explain(index: int, values: Sequence[int]) -> ContractViolation:
        at_row, at_col = divmod(index, v.width)
        shared, pos, with_row = values
        return ContractViolation("T7", f"write page {shared} (position {pos}) is shared with row {with_row}",
                                 group=v.gid, row=at_row, col=at_col)
    return Finding(flags, probe, explain)


def _w5_int32(v: GroupView) -> Finding:
    """W5 int32-locs: every slot of every real page, ``(p + 1) * ps - 1``, is an int32 (``p`` at most
    ``2^31 // ps - 1``)."""
    ps = v.spec.block_granularity
    flags = v.whole > max((INT32_MAX + 1) // ps - 1, 0)

    def explain(index: int, values: Sequence[int]) -> ContractViolation:
        row, col = divmod(index, v.width)
        return ContractViolation("W5", f"page {values[0]} at page size {ps} has slots past 2^31 - 1", group=v.gid,
                                 row=row, col=col)
    return Finding(flags, lambda: (flags, v.whole), explain)


GROUP_CHECKS: tuple[Callable[[GroupView], Finding | None], ...] = (
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
"""One group's checks, in the order their breaches are reported (None: the check has nothing to look at)."""


def table_findings(specs: Mapping[str, GroupSpec], tables: Mapping[str, torch.Tensor], s: Spans,
                   tail_pad: int) -> list[Finding]:
    """Every group's table checks (groups in id order), none read back yet."""
    findings: list[Finding] = []
    for gid in sorted(tables):
        view = group_view(tables[gid], specs[gid], s, tail_pad)
        findings.extend(f for f in (check(view) for check in GROUP_CHECKS) if f is not None)
    return findings
