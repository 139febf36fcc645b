"""Write locations for the debug checker (D1, D2): correct ones, or one corruption of them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

from hypothesis import assume
from hypothesis import strategies as st

from kvtable.errors import ContractViolation
from kvtable.reference import NULL_PAGE, Batch, batch_locs, check_write_locs
from kvtable.reference.model import Table, write_positions
from kvtable.strategies.batches import MAX_N, Case, CaseOptions, draw_case
from kvtable.strategies.broken import copy_tables, rebuild_row
from kvtable.strategies.draws import BOOLEANS, between, pick


@dataclass(frozen=True)
class WriteLocCase:
    """One group's eager write locations for the checker, maybe corrupted; ``clause`` is the reference's verdict."""

    table: Table
    locs: list[int]
    batch: Batch
    page_size: int
    group: str
    clause: str | None
    how: str


def live_locs(table: Table, batch: Batch, page_size: int) -> list[int]:
    """The correct eager locations of the live rows (dummy rows write nothing the checker sees)."""
    live = batch.live_rows
    prefix = None if batch.prefix_lens is None else batch.prefix_lens[:live]
    trimmed = Batch(batch.seq_lens[:live], mode=batch.mode, n=batch.n, prefix_lens=prefix)
    return batch_locs(table, trimmed, page_size)


def _checker_verdict(table: Table, locs: list[int], batch: Batch, page_size: int) -> str | None:
    try:
        check_write_locs(table, locs, batch, page_size)
    except ContractViolation as err:
        return err.clause_id
    return None


CORRUPTIONS: dict[str, str] = {
    "null page": "D1", "write through a hole": "D1", "foreign page": "D1", "wrong column": "D1",
    "wrong offset": "D1", "count": "D1", "shared write page": "D2", "clamped re-anchor": "D2",
}
"""Each corruption of :func:`write_loc_cases` and the clause the reference checker names for it."""
_MIN_LIVE = {"foreign page": 2, "shared write page": 2}
"""Corruptions that take a second live row's page: drawn with two live rows, not drawn with one and rejected."""


@st.composite
def write_loc_cases(draw: st.DrawFn, *, corrupt: bool | None = None,
                    corruptions: Sequence[str] = tuple(CORRUPTIONS)) -> WriteLocCase:
    """Correct locations (``corrupt=False``), or one corruption of them; labelled by the reference checker.

    ``clamped re-anchor`` keeps the locations correct but re-anchors a row below N, whose clamped
    positions repeat a slot (D2); ``write through a hole`` puts page 0 at a token's own column and
    computes its location from it, so the write lands in page 0 at the right offset (D1: only a check
    for page 0 itself sees it, "is it my own page" does not).
    """
    how = pick(draw, tuple(corruptions)) if corrupt or (corrupt is None and draw(BOOLEANS)) \
        else "correct locations"
    if how == "clamped re-anchor":
        case = draw_case(draw, CaseOptions(min_live=1, modes=("reanchor",), n=MAX_N))
        tables = copy_tables(case)
        row = draw(between(0, case.batch.live_rows - 1))
        frontier = draw(between(1, min(MAX_N - 1, case.batch.seq_lens[row])))  # inside the row: no widening
        rebuild_row(case, tables, row, frontier)
        seq = list(case.batch.seq_lens)
        seq[row] = frontier
        case = replace(case, tables=tables, batch=replace(case.batch, seq_lens=tuple(seq)))
    else:  # no clamped re-anchor rows: their repeated slots would be reported (D2) before the corruption
        case = draw_case(draw, CaseOptions(min_live=_MIN_LIVE.get(how, 1), writes=how != "correct locations"))
        assume(case.batch.mode != "reanchor" or min(case.batch.seq_lens[: case.batch.live_rows]) >= case.batch.n)
    gid = pick(draw, [s.group_id for s in case.attention])
    block = case.spec(gid).block_granularity
    table = copy_tables(case)[gid]
    locs = live_locs(table, case.batch, block)
    if how not in ("correct locations", "clamped re-anchor"):
        locs, table = _corrupt(draw, case, table, locs, block, how)
    return WriteLocCase(table, locs, case.batch, block, gid, _checker_verdict(table, locs, case.batch, block),
                        how)


def _corrupt(draw: st.DrawFn, case: Case, table: Table, locs: list[int], block: int, how: str
             ) -> tuple[list[int], Table]:
    batch = case.batch
    tokens = [(r, p) for r in range(batch.live_rows) for p in write_positions(batch, r)]
    if how == "write through a hole":
        row, pos = pick(draw, tokens)
        table = [list(r) for r in table]
        table[row][pos // block] = NULL_PAGE
        return live_locs(table, batch, block), table
    if how == "shared write page":  # two rows write one slot: same page, same offset (D2)
        a, pa, b, pb = _shared_pair(draw, tokens, block)
        table = [list(r) for r in table]
        table[b][pb // block] = table[a][pa // block]
        return live_locs(table, batch, block), table
    if how in ("foreign page", "wrong column"):  # only tokens with another page to point at: none is rejected
        targets = [_other_pages(table, batch, token, block, how) for token in tokens]
        i = pick(draw, [i for i, pages in enumerate(targets) if pages])
        locs = list(locs)
        locs[i] = pick(draw, targets[i]) * block + tokens[i][1] % block
        return locs, table
    assume(tokens)
    i = draw(between(0, len(tokens) - 1))
    row, pos = tokens[i]
    locs = list(locs)
    if how == "count":
        return locs[:-1], table
    if how == "null page":
        locs[i] = pos % block
    else:  # wrong offset
        assume(block >= 2)
        locs[i] = locs[i] - pos % block + (pos + 1) % block
    return locs, table


def _shared_pair(draw: st.DrawFn, tokens: list[tuple[int, int]], block: int) -> tuple[int, int, int, int]:
    """``pick`` over the pairs ``(a, pa, b, pb)`` of ``tokens`` (in row order) with ``a < b`` and one offset in the
    page, in token order, without listing them: they grow with the square of the tokens."""
    counts = [0] * len(tokens)  # the pairs each token starts: same-offset tokens of later rows
    after: Counter[int] = Counter()
    pending: Counter[int] = Counter()
    row = None
    for i in reversed(range(len(tokens))):
        r, p = tokens[i]
        if r != row:
            after.update(pending)
            pending.clear()
            row = r
        counts[i] = after[p % block]
        pending[p % block] += 1
    total = sum(counts)
    if total != 1:
        assume(total > 0)
    index = draw(between(0, total - 1)) if total > 1 else 0
    first = next(i for i, count in enumerate(counts) if (index := index - count) < 0)
    index += counts[first]  # the pair's place among those its first token starts
    a, pa = tokens[first]
    partners = [(b, pb) for b, pb in tokens[first + 1:] if b > a and pb % block == pa % block]
    b, pb = partners[index]
    return a, pa, b, pb


def _other_pages(table: Table, batch: Batch, token: tuple[int, int], block: int, how: str) -> list[int]:
    """The real pages a token's location may be pointed at instead of its own: another live row's
    (``foreign page``) or another column's of its own row (``wrong column``)."""
    row, pos = token
    pool = (table[r] for r in range(batch.live_rows) if r != row) if how == "foreign page" else [table[row]]
    return sorted({p for entries in pool for p in entries if p > 0} - {table[row][pos // block]})


