"""Near-valid batches: a valid case with exactly one clause broken, and where (group, row, col) it was broken.

Every :func:`broken_cases` draw carries the clause id the reference raises for it (``tests/test_strategies.py``
asserts the label) and ``where``: the (group, row, col) entries the breach created, so a property can
check that a refusal names the offending entry and not only the clause.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

import torch
from hypothesis import assume, reject
from hypothesis import strategies as st

from kvtable.contract import Mode
from kvtable.reference import NULL_PAGE
from kvtable.reference.model import Table, write_positions
from kvtable.reference.tables import needed_columns
from kvtable.strategies.batches import MAX_N, PAGE_LIMIT, Case, CaseOptions, as_tensor, ceil_div, draw_case
from kvtable.strategies.domain import Domain, current
from kvtable.strategies.draws import BOOLEANS, TAIL_PADS, between, pick

Where = tuple[str | None, int | None, int | None]
"""An offending entry: (group, row, col); None where the breach has no such coordinate (a dtype, a length).
(``kvtable.conformance.checks.Where`` spells the same type; strategies do not import the conformance package.)"""


@dataclass(frozen=True)
class Broken:
    """A near-valid batch: ``case`` breaks exactly ``clause`` (the id the reference raises), as ``how`` says.

    ``cheap`` breaches are visible without reading table contents (shapes, dtypes, CPU lengths): every
    backend must reject them; the others only a backend in debug mode must. ``where`` holds every entry
    a refusal may name (one of them must be named, each coordinate that is not None).
    """

    case: Case
    clause: str
    how: str
    cheap: bool
    where: frozenset[Where] = frozenset()


def copy_tables(case: Case) -> dict[str, Table]:
    return {gid: [list(r) for r in t] for gid, t in case.tables.items()}


def fresh_page(table: Table) -> int:
    """The smallest real page id the table does not use (small, so inside the W5 limit)."""
    used = {p for row in table for p in row}
    page = 1
    while page in used:
        page += 1
    return page


def _widen(case: Case, tables: dict[str, Table], gid: str, extra: int) -> None:
    """Add ``extra`` columns to a group's table: tail pads in live rows, page 0 in the others (stays valid)."""
    for row, entries in enumerate(tables[gid]):
        fill = case.tail_pad if row < case.batch.live_rows else NULL_PAGE
        entries.extend([fill] * extra)


def _span(case: Case, gid: str, row: int) -> int:
    """Columns a live row covers with holes and real pages (its tail pad starts there)."""
    return ceil_div(case.batch.seq_lens[row], case.spec(gid).block_granularity)


def writing_rows(case: Case) -> list[int]:
    return [r for r in range(case.batch.live_rows) if write_positions(case.batch, r)]


def real_cols(entries: list[int]) -> list[int]:
    return [c for c, p in enumerate(entries) if p > 0]


def _needed(case: Case, gid: str, row: int) -> range:
    return needed_columns(case.batch, row, case.spec(gid))


def _pick_group(draw: st.DrawFn, case: Case, family: str | None = None) -> str:
    return pick(draw, [s.group_id for s in case.attention if family in (None, s.family)])


def _cells(group: str | None, row: int | None, cols: Iterable[int | None]) -> frozenset[Where]:
    return frozenset((group, row, c) for c in cols)


Mutated = tuple[Case, str, frozenset[Where]]
Mutation = Callable[[st.DrawFn, Case], Mutated]
"""Draws a breach into a valid case; returns the broken case, a line saying what was broken, and where."""

_T1_DTYPES = (torch.int64, torch.int16, torch.float32)


def _t1_dtype(draw: st.DrawFn, case: Case) -> Mutated:
    gid = _pick_group(draw, case)
    dtype = pick(draw, _T1_DTYPES)
    raw = {gid: as_tensor(case.tables[gid]).to(dtype)}
    return replace(case, raw=raw), f"table of group {gid!r} has dtype {dtype}", _cells(gid, None, [None])


def _t1_one_dim(draw: st.DrawFn, case: Case) -> Mutated:
    gid = _pick_group(draw, case)
    return (replace(case, raw={gid: as_tensor(case.tables[gid]).reshape(-1)}), f"table of {gid!r} is 1-D",
            _cells(gid, None, [None]))


def _t1_rows(draw: st.DrawFn, case: Case) -> Mutated:
    gid = _pick_group(draw, case)
    rows = draw(between(0, case.batch.bs - 1))
    table = case.tables[gid][:rows]
    raw = {gid: as_tensor(table, len(case.tables[gid][0]))}
    tables = {**case.tables, gid: table}
    return (replace(case, tables=tables, raw=raw), f"table of {gid!r} has {rows} rows for bs {case.batch.bs}",
            _cells(gid, None, [None]))


def _t1_no_columns(draw: st.DrawFn, case: Case) -> Mutated:
    gid = _pick_group(draw, case)
    rows = len(case.tables[gid])
    tables: dict[str, list[list[int]]] = {**case.tables, gid: [[] for _ in range(rows)]}
    raw = {gid: torch.zeros((rows, 0), dtype=torch.int32)}
    return replace(case, tables=tables, raw=raw), f"table of {gid!r} has no columns", _cells(gid, None, [None])


def _t1_missing(draw: st.DrawFn, case: Case) -> Mutated:
    gid = _pick_group(draw, case)
    return (replace(case, tables={g: t for g, t in case.tables.items() if g != gid}), f"no table for {gid!r}",
            frozenset())


def _t1_undeclared(draw: st.DrawFn, case: Case) -> Mutated:
    gid = _pick_group(draw, case)
    return (replace(case, tables={**case.tables, "ghost": case.tables[gid]}), "a table for undeclared 'ghost'",
            frozenset())


def _t1_below_pad(draw: st.DrawFn, case: Case) -> Mutated:
    tables = copy_tables(case)
    gid = _pick_group(draw, case)
    row = draw(between(0, case.batch.bs - 1))
    col = draw(between(0, len(tables[gid][row]) - 1))
    tables[gid][row][col] = draw(_BELOW_PAD)
    return (replace(case, tables=tables), f"entry {tables[gid][row][col]} at {gid!r} [{row}, {col}]",
            _cells(gid, row, [col]))


_BELOW_PAD = st.integers(-(2**31), -2)


def _t2_dummy_entry(draw: st.DrawFn, case: Case) -> Mutated:
    tables = copy_tables(case)
    gid = _pick_group(draw, case)
    row = draw(between(case.batch.live_rows, case.batch.bs - 1))
    col = draw(between(0, len(tables[gid][row]) - 1))
    tables[gid][row][col] = pick(draw, (-1, fresh_page(tables[gid])) if current().negative_ids else
                                 (fresh_page(tables[gid]),))
    return (replace(case, tables=tables), f"dummy row {row} of {gid!r} holds {tables[gid][row][col]} at col {col}",
            _cells(gid, row, [col]))


def _t2_dummy_seq(draw: st.DrawFn, case: Case) -> Mutated:
    row = draw(between(case.batch.live_rows, case.batch.bs - 1))
    seq = list(case.batch.seq_lens)
    seq[row] = draw(between(2, 9))
    tables = copy_tables(case)
    for spec in case.attention:  # wide enough for that length, so no width check can fire first
        need = ceil_div(seq[row], spec.block_granularity) - len(tables[spec.group_id][0])
        _widen(case, tables, spec.group_id, max(need, 0))
    batch = replace(case.batch, seq_lens=tuple(seq))
    return (replace(case, tables=tables, batch=batch), f"dummy row {row} has seq_len {seq[row]}",
            _cells(None, row, [None]))


def _t3_page_after_pad(draw: st.DrawFn, case: Case) -> Mutated:
    tables = copy_tables(case)
    gid = _pick_group(draw, case)
    rows = [r for r in range(case.batch.live_rows) if case.tail_pad < 0 or real_cols(tables[gid][r])]
    row = pick(draw, rows)
    missing = _span(case, gid, row) + 2 - len(tables[gid][row])
    _widen(case, tables, gid, max(missing, 0))
    tables[gid][row][-1] = fresh_page(tables[gid])
    return (replace(case, tables=tables), f"real page after the tail pad in {gid!r} row {row}",
            _cells(gid, row, [len(tables[gid][row]) - 1]))


def _t3_foreign_pad(draw: st.DrawFn, case: Case) -> Mutated:
    tables = copy_tables(case)
    if case.tail_pad == 0:  # -1 in a 0-padded row, any family
        gid = _pick_group(draw, case)
        row = draw(between(0, case.batch.live_rows - 1))
        _widen(case, tables, gid, 1)
        tables[gid][row][-1] = -1
        return (replace(case, tables=tables), f"pad -1 in the 0-padded tail of {gid!r} row {row}",
                _cells(gid, row, [len(tables[gid][row]) - 1]))
    gid = _pick_group(draw, case, "full")
    row = pick(draw, [r for r in range(case.batch.live_rows) if real_cols(tables[gid][r])])
    span = _span(case, gid, row)
    _widen(case, tables, gid, max(span + 1 - len(tables[gid][row]), 0))
    tables[gid][row][span] = 0
    return (replace(case, tables=tables), f"page 0 in the -1-padded tail of full {gid!r} row {row} col {span}",
            _cells(gid, row, [span]))


def _t4_pad_inside(draw: st.DrawFn, case: Case) -> Mutated:
    tables = copy_tables(case)
    gid = _pick_group(draw, case)
    row = pick(draw, writing_rows(case))
    needed = _needed(case, gid, row)
    col = pick(draw, needed)
    tables[gid][row][col:] = [-1] * (len(tables[gid][row]) - col)
    return (replace(case, tables=tables), f"tail pad from col {col} inside the live length of {gid!r} row {row}",
            _cells(gid, row, range(col, needed.stop)))


def _t4_full_front_hole(draw: st.DrawFn, case: Case) -> Mutated:
    tables = copy_tables(case)
    gid = _pick_group(draw, case, "full")
    row = pick(draw, writing_rows(case))
    tables[gid][row][0] = NULL_PAGE
    return (replace(case, tables=tables), f"a write or read through page 0 at col 0 of full {gid!r} row {row}",
            _cells(gid, row, [0]))


def _t4_full_zero_tail(draw: st.DrawFn, case: Case) -> Mutated:
    tables = copy_tables(case)
    gid = _pick_group(draw, case, "full")
    row = pick(draw, writing_rows(case))
    needed = _needed(case, gid, row)
    col = pick(draw, needed)
    tables[gid][row][col:] = [NULL_PAGE] * (len(tables[gid][row]) - col)
    return (replace(case, tables=tables), f"page 0 from col {col} inside the live length of full {gid!r} row {row}",
            _cells(gid, row, range(col, needed.stop)))


def _t5_hole_needed(draw: st.DrawFn, case: Case) -> Mutated:
    tables = copy_tables(case)
    gid = _pick_group(draw, case, "sliding")
    row = pick(draw, writing_rows(case))
    needed = _needed(case, gid, row)
    col = pick(draw, needed)
    tables[gid][row][: col + 1] = [NULL_PAGE] * (col + 1)
    return (replace(case, tables=tables), f"holes up to needed col {col} of sliding {gid!r} row {row}",
            _cells(gid, row, range(needed.start, col + 1)))


def _t5_hole_after_page(draw: st.DrawFn, case: Case) -> Mutated:
    tables = copy_tables(case)
    gid = _pick_group(draw, case, "sliding")
    row = pick(draw, [r for r in range(case.batch.live_rows) if real_cols(tables[gid][r])])
    span = _span(case, gid, row)
    _widen(case, tables, gid, max(span + 1 - len(tables[gid][row]), 0))
    tables[gid][row][span] = NULL_PAGE
    return (replace(case, tables=tables), f"hole after the last real page of sliding {gid!r} row {row}",
            _cells(gid, row, [span]))


def _t7_shared_write(draw: st.DrawFn, case: Case) -> Mutated:
    tables = copy_tables(case)
    gid = _pick_group(draw, case)
    block = case.spec(gid).block_granularity
    writer = pick(draw, writing_rows(case))
    pos = pick(draw, write_positions(case.batch, writer))
    page = tables[gid][writer][pos // block]
    other = pick(draw, [r for r in range(case.batch.live_rows) if r != writer and real_cols(tables[gid][r])])
    col = pick(draw, real_cols(tables[gid][other]))
    tables[gid][other][col] = page
    where = _cells(gid, writer, [pos // block]) | _cells(gid, other, [col])
    return (replace(case, tables=tables), f"write page {page} of {gid!r} row {writer} also in row {other} col {col}",
            where)


def _t7_twice_in_row(draw: st.DrawFn, case: Case) -> Mutated:
    """One of the row's own pages, or a page another live row holds (a shared prefix page, say), at two
    real columns of the row."""
    tables = copy_tables(case)
    gid = _pick_group(draw, case)
    table, live = tables[gid], case.batch.live_rows
    row = pick(draw, [r for r in range(live) if len(real_cols(table[r])) >= 2])
    first = pick(draw, real_cols(table[row]))
    second = pick(draw, [c for c in real_cols(table[row]) if c != first])
    held = sorted({table[r][c] for r in range(live) if r != row for c in real_cols(table[r])})
    other = bool(held) and draw(BOOLEANS)
    page = pick(draw, held) if other else table[row][first]
    table[row][first] = table[row][second] = page
    whose = "its own" if page not in held else "another row's"
    # every cell holding the page: the row may already hold it (a prefix page it shares), and a refusal may name
    # any of its pairs
    where = frozenset((gid, r, c) for r in range(live) for c in real_cols(table[r]) if table[r][c] == page)
    return (replace(case, tables=tables), f"page {page} ({whose}) twice in {gid!r} row {row}, cols {first}, {second}",
            where)


def _t8_narrow(draw: st.DrawFn, case: Case) -> Mutated:
    tables = copy_tables(case)
    needs = {s.group_id: max([_needed(case, s.group_id, r).stop for r in writing_rows(case)], default=0)
             for s in case.attention}
    gid = pick(draw, [g for g, need in needs.items() if need >= 2])  # a group one column can be cut from
    need = needs[gid]
    width = draw(between(1, need - 1))
    tables[gid] = [row[:width] for row in tables[gid]]
    short = [r for r in writing_rows(case) if _needed(case, gid, r).stop > width]
    where = frozenset((gid, r, c) for r in short for c in range(width, _needed(case, gid, r).stop))
    return (replace(case, tables=tables), f"table of {gid!r} cut to {width} columns; a row needs {need}",
            where)


def rebuild_row(case: Case, tables: dict[str, Table], row: int, seq: int) -> None:
    """Give ``row`` fresh pages covering ``[0, max(seq, 1))`` in every group (no holes), then tail pads."""
    for spec in case.attention:
        entries = tables[spec.group_id][row]
        cols = ceil_div(max(seq, 1), spec.block_granularity)
        fresh: list[int] = []
        for _ in range(cols):
            fresh.append(fresh_page([*tables[spec.group_id], fresh]))
        entries[:] = fresh + [case.tail_pad] * (len(entries) - cols)


def _t9_zero_seq(draw: st.DrawFn, case: Case) -> Mutated:
    tables = copy_tables(case)
    row = draw(between(0, case.batch.live_rows - 1))
    rebuild_row(case, tables, row, 0)
    seq = list(case.batch.seq_lens)
    seq[row] = 0
    batch = replace(case.batch, seq_lens=tuple(seq))
    return replace(case, tables=tables, batch=batch), f"row {row} has seq_len 0", _cells(None, row, [None])


def _t9_prefix(draw: st.DrawFn, case: Case) -> Mutated:
    row = draw(between(0, case.batch.bs - 1))
    assert case.batch.prefix_lens is not None
    prefix = list(case.batch.prefix_lens)
    seq = case.batch.seq_lens[row]
    prefix[row] = pick(draw, (-1, seq + 1) if current().negative_prefixes else (seq + 1,))
    batch = replace(case.batch, prefix_lens=tuple(prefix))
    return (replace(case, batch=batch), f"row {row} has prefix {prefix[row]} and seq_len {seq}",
            _cells(None, row, [None]))


def _w2_short_row(draw: st.DrawFn, case: Case) -> Mutated:
    assume(case.batch.n >= 2)
    tables = copy_tables(case)
    row = draw(between(0, case.batch.live_rows - 1))
    seq_len = draw(between(1, case.batch.n - 1))
    rebuild_row(case, tables, row, seq_len)
    seq = list(case.batch.seq_lens)
    seq[row] = seq_len
    batch = replace(case.batch, seq_lens=tuple(seq))
    return (replace(case, tables=tables, batch=batch), f"real row {row} has seq_len {seq_len} < N={case.batch.n}",
            _cells(None, row, [None]))


def _w5_page(draw: st.DrawFn, case: Case) -> Mutated:
    tables = copy_tables(case)
    gid = pick(draw, [s.group_id for s in case.attention if s.block_granularity >= 2])
    row = pick(draw, [r for r in range(case.batch.live_rows) if real_cols(tables[gid][r])])
    col = pick(draw, real_cols(tables[gid][row]))
    page = PAGE_LIMIT // case.spec(gid).block_granularity
    tables[gid][row][col] = page
    return (replace(case, tables=tables), f"page {page} of {gid!r} has slots past 2^31 - 1",
            _cells(gid, row, [col]))


@dataclass(frozen=True)
class Variant:
    clause: str
    name: str
    mutate: Mutation
    cheap: bool
    base: CaseOptions = CaseOptions()
    """The base cases the mutation can apply to (one with ``min_pad`` keeps its dummy rows whatever the caller's
    ``padding``)."""

    negative: bool = False
    """It puts a negative entry into a table (which ``Domain.negative_ids`` says whether the engine holds)."""

    def held(self, domain: Domain) -> bool:
        """Whether an engine whose state is ``domain`` can be handed this breach: no shape breach where every
        table is the runner's own tensor, no length breach its scheduler never builds (a live seq_len 0 among
        them), no row past a table as wide as the context, no table without columns where every live row holds a
        page, no negative id where the tables hold none."""
        malformed = self.clause == "T1" and self.cheap  # dtype, rank, rows, columns, a group's table
        lengths = self.clause in ("T9", "W2")
        return ((domain.malformed_tables or not malformed) and (domain.broken_lengths or not lengths)
                and (domain.narrow_tables or self.clause != "T8")
                and (domain.negative_ids or not self.negative)
                and (domain.zero_length_rows or self.name != "seq_len 0")
                and (domain.empty_tables or self.name != "no columns"))


_FIXED: tuple[Mode, ...] = ("decode", "verify", "reanchor")
_PADDED = CaseOptions(modes=_FIXED, min_pad=1, padding=True)
VARIANTS: tuple[Variant, ...] = (
    Variant("T1", "wrong dtype", _t1_dtype, True),
    Variant("T1", "1-D table", _t1_one_dim, True),
    Variant("T1", "fewer rows than bs", _t1_rows, True),
    Variant("T1", "no columns", _t1_no_columns, True),
    Variant("T1", "missing group table", _t1_missing, True),
    Variant("T1", "undeclared group table", _t1_undeclared, True),
    Variant("T1", "entry below -1", _t1_below_pad, False, negative=True),
    Variant("T2", "nonzero dummy row", _t2_dummy_entry, False, _PADDED),
    Variant("T2", "dummy row seq_len != 1", _t2_dummy_seq, False, _PADDED),
    Variant("T3", "real page after the pad", _t3_page_after_pad, False, CaseOptions(min_live=1)),
    Variant("T3", "pad value of the other convention", _t3_foreign_pad, False,
            CaseOptions(min_live=1, require="full"), negative=True),
    Variant("T4", "-1 inside the live length", _t4_pad_inside, False, CaseOptions(min_live=1, tail_pads=(-1,)),
            negative=True),
    Variant("T4", "page 0 at col 0 of a full row", _t4_full_front_hole, False,
            CaseOptions(min_live=1, require="full")),
    Variant("T4", "page 0 inside the live length of a 0-padded full row", _t4_full_zero_tail, False,
            CaseOptions(min_live=1, require="full", tail_pads=(0,))),
    Variant("T5", "hole over a needed column", _t5_hole_needed, False, CaseOptions(min_live=1, require="sliding")),
    Variant("T5", "hole after a real page", _t5_hole_after_page, False,
            CaseOptions(min_live=1, require="sliding", tail_pads=(-1,))),
    Variant("T7", "write page shared by two rows", _t7_shared_write, False, CaseOptions(min_live=2)),
    Variant("T7", "page twice in one row", _t7_twice_in_row, False, CaseOptions(min_live=1)),
    Variant("T8", "table narrower than a row needs", _t8_narrow, True, CaseOptions(min_live=1, max_cols=6)),
    Variant("T9", "seq_len 0", _t9_zero_seq, True, CaseOptions(min_live=1, modes=_FIXED)),
    Variant("T9", "negative prefix or prefix past seq_len", _t9_prefix, True,
            CaseOptions(min_live=1, modes=("extend",))),
    Variant("W2", "real verify row with seq_len < N", _w2_short_row, True,
            CaseOptions(min_live=1, modes=("verify",), n=MAX_N)),
    Variant("W5", "page past the int32 range", _w5_page, False,
            CaseOptions(min_live=1, kernel_page_sizes=(2, 4, 8))),
)
"""Every near-valid construction, by the clause it breaks."""

BROKEN_CLAUSES = tuple(sorted({v.clause for v in VARIANTS}))
CHEAP_CLAUSES = tuple(sorted({v.clause for v in VARIANTS if v.cheap}))
"""Clauses with a breach every backend must see without a device sync (shapes, dtypes, CPU lengths)."""


def _base(variant: Variant, tail_pads: Sequence[int], padding: bool = True) -> CaseOptions:
    """The variant's base cases at the caller's tail pads (those the base allows) and dummy rows."""
    return replace(variant.base, tail_pads=tuple(p for p in tail_pads if p in variant.base.tail_pads),
                   padding=padding or variant.base.min_pad > 0)


def variants(clauses: Sequence[str] | None = None, *, cheap: bool | None = None,
             tail_pads: Sequence[int] = TAIL_PADS, padding: bool = True) -> tuple[Variant, ...]:
    """The variants breaking one of ``clauses`` (all by default), cheap ones only if ``cheap``;
    ``padding=False`` drops the ones that need dummy rows."""
    chosen = [v for v in VARIANTS if (clauses is None or v.clause in clauses)
              and (cheap is None or v.cheap == cheap) and _base(v, tail_pads).tail_pads
              and (padding or not v.base.min_pad)]
    if not chosen:
        raise ValueError(f"no near-valid variant for clauses {clauses} (cheap={cheap}, tail_pads={tail_pads})")
    return tuple(chosen)


def draw_broken(draw: st.DrawFn, variant: Variant, *, tail_pads: Sequence[int] = TAIL_PADS,
                padding: bool = True) -> Broken:
    """A near-valid batch made by ``variant`` inside another draw, labelled with the clause the reference raises."""
    base = draw_case(draw, _base(variant, tail_pads, padding))
    case, how, where = variant.mutate(draw, base)
    return Broken(case, variant.clause, f"{variant.name}: {how}", variant.cheap, where)


@st.composite
def broken_case(draw: st.DrawFn, variant: Variant, *, tail_pads: Sequence[int] = TAIL_PADS,
                padding: bool = True) -> Broken:
    """A near-valid batch made by ``variant``, labelled with the clause the reference raises for it."""
    return draw_broken(draw, variant, tail_pads=tail_pads, padding=padding)


def broken_cases(clauses: Sequence[str] | None = None, *, cheap: bool | None = None,
                 tail_pads: Sequence[int] = TAIL_PADS, padding: bool = True) -> st.SearchStrategy[Broken]:
    """A near-valid batch breaking one clause of ``clauses`` (see :func:`variants` for the filters).

    ``tail_pads=(-1,)`` keeps to the default pad (what the lone-table calls, which take no pad, assume);
    ``padding=False`` keeps dummy rows out (lone-table calls cannot tell them from live rows).
    """
    chosen = variants(clauses, cheap=cheap, tail_pads=tail_pads, padding=padding)

    @st.composite
    def one(draw: st.DrawFn) -> Broken:
        held = [v for v in chosen if v.held(current())] or reject()  # the running profile's engine is handed these
        return draw_broken(draw, pick(draw, held), tail_pads=tail_pads, padding=padding)

    return one()
