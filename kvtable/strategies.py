"""Hypothesis strategies: contract-valid batches, and near-valid ones with exactly one clause broken.

Every :func:`cases` draw passes ``kvtable.reference.check_tables``: several groups (full, sliding with
front holes inside the T5 window condition, state), per-group block granularities ``B = r * K``,
ragged lengths, prefix/extend lengths, spec ``N``, padded rows, tail pad -1 or 0, read-only prefix
pages shared between rows, rows past ``bs`` and pages near the int32 limit. Every :func:`broken_cases`
draw breaks one clause and carries the id the reference raises for it (``tests/test_strategies.py``
asserts the label). :func:`write_loc_cases`, :func:`expand_cases` and :func:`graph_cases` feed the
checker, expansion and CUDA-graph properties; :func:`repaged` re-delivers a replay's shape with fresh
page ids.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from hypothesis import assume
from hypothesis import strategies as st

from kvtable.errors import ContractViolation
from kvtable.reference import NULL_PAGE, Batch, GroupSpec, batch_locs, check_write_locs
from kvtable.reference.model import MODES, Mode, Table, first_query, write_positions
from kvtable.reference.tables import needed_columns

KERNEL_PAGE_SIZES = (1, 2, 4, 8, 16)
RATIOS = (1, 2, 4)
MAX_N = 4
PAGE_LIMIT = 2**31
"""W5: a real page ``p`` of a group with page size ``ps`` needs ``(p + 1) * ps <= 2^31``."""
_PREFIX = {"full": "full", "sliding": "swa", "state": "state"}


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def as_tensor(table: Table, width: int | None = None) -> torch.Tensor:
    """An int32 ``[rows, width]`` tensor of a plain table (``width`` is needed only when it has no rows)."""
    if not table:
        return torch.zeros((0, width or 0), dtype=torch.int32)
    return torch.tensor(table, dtype=torch.int32).reshape(len(table), len(table[0]))


@dataclass(frozen=True)
class Case:
    """One batch: the group specs, a plain table per group (state groups included), the batch and its pads.

    ``raw`` replaces a group's tensor by a malformed object (wrong dtype or shape) in :meth:`tensors`.
    """

    specs: tuple[GroupSpec, ...]
    tables: Mapping[str, Table]
    batch: Batch
    tail_pad: int = -1
    kernel_page_size: int = 1
    raw: Mapping[str, Any] = field(default_factory=dict)

    @property
    def attention(self) -> tuple[GroupSpec, ...]:
        """The non-state groups, sorted by id: the ones with locations."""
        return tuple(sorted((s for s in self.specs if not s.is_state), key=lambda s: s.group_id))

    def spec(self, group_id: str) -> GroupSpec:
        return next(s for s in self.specs if s.group_id == group_id)

    def tensors(self) -> dict[str, Any]:
        """The tables as int32 tensors, malformed ones from ``raw`` in their place."""
        out: dict[str, Any] = {gid: as_tensor(t) for gid, t in self.tables.items()}
        out.update(self.raw)
        return out

    def seq_tensor(self) -> torch.Tensor:
        return torch.tensor(self.batch.seq_lens, dtype=torch.int32)

    @property
    def extend_lens(self) -> list[int]:
        assert self.batch.prefix_lens is not None
        return [s - p for s, p in zip(self.batch.seq_lens, self.batch.prefix_lens, strict=True)]


@st.composite
def group_specs(draw: st.DrawFn, kernel_page_size: int, *, max_groups: int = 3, state: bool | None = None,
                families: Sequence[str] = ("full", "sliding"), require: str | None = None
                ) -> tuple[GroupSpec, ...]:
    """1..max_groups attention groups with ``B = r * K`` (r in 1, 2, 4), sliding windows, and a state group
    if ``state`` (None: maybe)."""
    count = draw(st.integers(1, max_groups))
    chosen = [draw(st.sampled_from(tuple(families))) for _ in range(count)]
    if require is not None and require not in chosen:
        chosen[draw(st.integers(0, count - 1))] = require
    specs = []
    for i, family in enumerate(chosen):
        block = kernel_page_size * draw(st.sampled_from(RATIOS))
        window = draw(st.integers(1, 4 * block)) if family == "sliding" else None
        specs.append(GroupSpec(f"{_PREFIX[family]}{i}", family, block, window))
    if state or (state is None and draw(st.booleans())):
        # A state group has no page size its tables could be divided by: 0 trips a backend that uses it.
        specs.append(GroupSpec(f"state{count}", "state", draw(st.sampled_from((0, kernel_page_size)))))
    return tuple(specs)


def _lengths(draw: st.DrawFn, mode: Mode, n: int, live: int, limit: int
             ) -> tuple[list[int], list[int] | None]:
    """Live rows' seq_lens (and prefix_lens for extend) for one mode, every length <= limit."""
    if mode == "extend":
        prefix = [draw(st.integers(0, limit)) for _ in range(live)]
        seq = [p + draw(st.integers(0, limit - p)) for p in prefix]
        return seq, prefix
    low = n if mode == "verify" else 1
    return [draw(st.integers(low, max(limit, low))) for _ in range(live)], None


def _pages(rng: random.Random, count: int, block: int, big: bool) -> list[int]:
    """``count`` distinct real page ids, small or just under the W5 limit ``2^31 / B``."""
    top = PAGE_LIMIT // block - 1
    if big:
        return rng.sample(range(max(1, top - 4 * count - 64), top + 1), count)
    return rng.sample(range(1, 4 * count + 32), count)


def _first_write_col(batch: Batch, row: int, block: int) -> int:
    """The first column a row writes (its columns before it hold read-only pages)."""
    first = first_query(batch, row)
    return _ceil(batch.seq_lens[row], block) if first is None else first // block


def _group_table(draw: st.DrawFn, rng: random.Random, spec: GroupSpec, batch: Batch, tail_pad: int,
                 width: int | None, big: bool, extra_rows: int) -> Table:
    """A valid table for one attention group: front holes, real pages, tail pads; dummy rows all 0."""
    block = spec.block_granularity
    spans = [_ceil(batch.seq_lens[row], block) for row in range(batch.live_rows)]
    if width is None:
        width = max([1, *spans]) + draw(st.integers(0, 2))
    holes = []
    for row in range(batch.live_rows):
        cols = needed_columns(batch, row, spec)
        start = cols.start if cols else 0
        holes.append(draw(st.integers(0, start)) if spec.family == "sliding" else 0)
    pages = iter(_pages(rng, sum(s - h for s, h in zip(spans, holes, strict=True)), block, big))
    table: Table = []
    for row in range(batch.live_rows):
        entries = [NULL_PAGE] * holes[row] + [next(pages) for _ in range(spans[row] - holes[row])]
        table.append(entries + [tail_pad] * (width - len(entries)))
    for row in range(1, batch.live_rows):
        if draw(st.booleans()):  # read-only prefix pages shared with the previous row
            shared = min(_first_write_col(batch, row, block), _first_write_col(batch, row - 1, block))
            for col in range(shared):
                if table[row][col] > 0 and table[row - 1][col] > 0:
                    table[row][col] = table[row - 1][col]
    table += [[NULL_PAGE] * width for _ in range(batch.live_rows, batch.bs)]
    used = [p for r in table for p in r if p > 0]
    for _ in range(extra_rows):  # rows past bs are ignored: fill them with pages live rows write
        table.append([rng.choice((-1, 0, *used)) for _ in range(width)])
    return table


def _state_table(rng: random.Random, rows: int) -> Table:
    """State-group tables are full of holes, pads and repeats; they must never reach location maths."""
    width = rng.randint(1, 4)
    return [[rng.choice((0, 0, -1, 1, 2, 3)) for _ in range(width)] for _ in range(rows)]


@st.composite
def cases(draw: st.DrawFn, *, modes: Sequence[Mode] = MODES, specs: tuple[GroupSpec, ...] | None = None,
          kernel_page_size: int | None = None, kernel_page_sizes: Sequence[int] = KERNEL_PAGE_SIZES,
          bs: int | None = None, max_bs: int = 5, min_live: int = 0, min_pad: int = 0, n: int | None = None,
          tail_pads: Sequence[int] = (-1, 0), padding: bool = True, max_seq: int | None = None,
          widths: Mapping[str, int] | None = None, big_pages: bool | None = None, extra_rows: bool = True,
          max_cols: int = 6, require: str | None = None) -> Case:
    """A contract-valid batch (passes ``check_tables`` at its ``tail_pad``).

    Fixed ``specs``/``kernel_page_size``/``bs``/``n``/``max_seq``/``widths`` pin those parts (the graph
    strategies use them); ``padding`` allows dummy rows (not in extend); ``big_pages`` forces pages near
    the int32 limit (None: sometimes).
    """
    k = kernel_page_size or draw(st.sampled_from(tuple(kernel_page_sizes)))
    specs = specs or draw(group_specs(k, require=require))
    attention = [s for s in specs if not s.is_state]
    mode = draw(st.sampled_from(tuple(modes)))
    n = 1 if mode == "decode" else (n or draw(st.integers(1, MAX_N)))
    bs = bs or draw(st.integers(max(1, min_live + min_pad), max_bs))
    pad_rows = draw(st.integers(min_pad, bs - min_live)) if padding and mode != "extend" else 0
    live = bs - pad_rows
    limit = max_seq or draw(st.integers(1, max_cols)) * max(s.block_granularity for s in attention)
    seq, prefix = _lengths(draw, mode, n, live, limit)
    seq += [1] * pad_rows
    actual_bs = live if pad_rows or (mode == "verify" and draw(st.booleans())) else None
    batch = Batch(tuple(seq), mode=mode, n=n, prefix_lens=None if prefix is None else tuple(prefix),
                  actual_bs=actual_bs)
    tail_pad = draw(st.sampled_from(tuple(tail_pads)))
    rng = draw(st.randoms(use_true_random=False))
    extra = draw(st.integers(0, 2)) if extra_rows else 0
    tables: dict[str, Table] = {}
    for spec in attention:
        big = draw(st.integers(0, 7)) == 7 if big_pages is None else big_pages
        width = None if widths is None else widths[spec.group_id]
        tables[spec.group_id] = _group_table(draw, rng, spec, batch, tail_pad, width, big, extra)
    for spec in specs:
        if spec.is_state:
            tables[spec.group_id] = _state_table(rng, bs + extra)
    return Case(tuple(specs), tables, batch, tail_pad, k)


# --------------------------------------------------------------------------------------------------
# Near-valid batches: one clause broken
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Broken:
    """A near-valid batch: ``case`` breaks exactly ``clause`` (the id the reference raises), as ``how`` says.

    ``cheap`` breaches are visible without reading table contents (shapes, dtypes, CPU lengths): every
    backend must reject them; the others only a backend in debug mode must.
    """

    case: Case
    clause: str
    how: str
    cheap: bool


def _copy_tables(case: Case) -> dict[str, Table]:
    return {gid: [list(r) for r in t] for gid, t in case.tables.items()}


def _fresh_page(table: Table) -> int:
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
    return _ceil(case.batch.seq_lens[row], case.spec(gid).block_granularity)


def _writing_rows(case: Case) -> list[int]:
    return [r for r in range(case.batch.live_rows) if write_positions(case.batch, r)]


def _real_cols(entries: list[int]) -> list[int]:
    return [c for c, p in enumerate(entries) if p > 0]


Mutation = Callable[[st.DrawFn, Case], tuple[Case, str]]
"""Draws a breach into a valid case; returns the broken case and a line saying what was broken."""


@dataclass(frozen=True)
class Variant:
    clause: str
    name: str
    mutate: Mutation
    cheap: bool
    base: Mapping[str, Any] = field(default_factory=dict)
    """Keyword arguments of :func:`cases` for a base case the mutation can apply to."""


def _pick(draw: st.DrawFn, items: Sequence[Any]) -> Any:
    assume(len(items) > 0)
    return draw(st.sampled_from(tuple(items)))


def _pick_group(draw: st.DrawFn, case: Case, family: str | None = None) -> str:
    return _pick(draw, [s.group_id for s in case.attention if family in (None, s.family)])


def _t1_dtype(draw: st.DrawFn, case: Case) -> tuple[Case, str]:
    gid = _pick_group(draw, case)
    dtype = draw(st.sampled_from((torch.int64, torch.int16, torch.float32)))
    raw = {gid: as_tensor(case.tables[gid]).to(dtype)}
    return replace(case, raw=raw), f"table of group {gid!r} has dtype {dtype}"


def _t1_one_dim(draw: st.DrawFn, case: Case) -> tuple[Case, str]:
    gid = _pick_group(draw, case)
    return replace(case, raw={gid: as_tensor(case.tables[gid]).reshape(-1)}), f"table of {gid!r} is 1-D"


def _t1_rows(draw: st.DrawFn, case: Case) -> tuple[Case, str]:
    gid = _pick_group(draw, case)
    rows = draw(st.integers(0, case.batch.bs - 1))
    table = case.tables[gid][:rows]
    raw = {gid: as_tensor(table, len(case.tables[gid][0]))}
    tables = {**case.tables, gid: table}
    return replace(case, tables=tables, raw=raw), f"table of {gid!r} has {rows} rows for bs {case.batch.bs}"


def _t1_no_columns(draw: st.DrawFn, case: Case) -> tuple[Case, str]:
    gid = _pick_group(draw, case)
    rows = len(case.tables[gid])
    tables = {**case.tables, gid: [[] for _ in range(rows)]}
    raw = {gid: torch.zeros((rows, 0), dtype=torch.int32)}
    return replace(case, tables=tables, raw=raw), f"table of {gid!r} has no columns"


def _t1_missing(draw: st.DrawFn, case: Case) -> tuple[Case, str]:
    gid = _pick_group(draw, case)
    return replace(case, tables={g: t for g, t in case.tables.items() if g != gid}), f"no table for {gid!r}"


def _t1_undeclared(draw: st.DrawFn, case: Case) -> tuple[Case, str]:
    gid = _pick_group(draw, case)
    return replace(case, tables={**case.tables, "ghost": case.tables[gid]}), "a table for undeclared 'ghost'"


def _t1_below_pad(draw: st.DrawFn, case: Case) -> tuple[Case, str]:
    tables = _copy_tables(case)
    gid = _pick_group(draw, case)
    row = draw(st.integers(0, case.batch.bs - 1))
    col = draw(st.integers(0, len(tables[gid][row]) - 1))
    tables[gid][row][col] = draw(st.integers(-(2**31), -2))
    return replace(case, tables=tables), f"entry {tables[gid][row][col]} at {gid!r} [{row}, {col}]"


def _t2_dummy_entry(draw: st.DrawFn, case: Case) -> tuple[Case, str]:
    tables = _copy_tables(case)
    gid = _pick_group(draw, case)
    row = draw(st.integers(case.batch.live_rows, case.batch.bs - 1))
    col = draw(st.integers(0, len(tables[gid][row]) - 1))
    tables[gid][row][col] = draw(st.sampled_from((-1, _fresh_page(tables[gid]))))
    return replace(case, tables=tables), f"dummy row {row} of {gid!r} holds {tables[gid][row][col]} at col {col}"


def _t2_dummy_seq(draw: st.DrawFn, case: Case) -> tuple[Case, str]:
    row = draw(st.integers(case.batch.live_rows, case.batch.bs - 1))
    seq = list(case.batch.seq_lens)
    seq[row] = draw(st.integers(2, 9))
    tables = _copy_tables(case)
    for spec in case.attention:  # wide enough for that length, so no width check can fire first
        need = _ceil(seq[row], spec.block_granularity) - len(tables[spec.group_id][0])
        _widen(case, tables, spec.group_id, max(need, 0))
    batch = replace(case.batch, seq_lens=tuple(seq))
    return replace(case, tables=tables, batch=batch), f"dummy row {row} has seq_len {seq[row]}"


def _t3_page_after_pad(draw: st.DrawFn, case: Case) -> tuple[Case, str]:
    tables = _copy_tables(case)
    gid = _pick_group(draw, case)
    rows = [r for r in range(case.batch.live_rows) if case.tail_pad < 0 or _real_cols(tables[gid][r])]
    row = _pick(draw, rows)
    missing = _span(case, gid, row) + 2 - len(tables[gid][row])
    _widen(case, tables, gid, max(missing, 0))
    tables[gid][row][-1] = _fresh_page(tables[gid])
    return replace(case, tables=tables), f"real page after the tail pad in {gid!r} row {row}"


def _t3_foreign_pad(draw: st.DrawFn, case: Case) -> tuple[Case, str]:
    tables = _copy_tables(case)
    if case.tail_pad == 0:  # -1 in a 0-padded row, any family
        gid = _pick_group(draw, case)
        row = draw(st.integers(0, case.batch.live_rows - 1))
        _widen(case, tables, gid, 1)
        tables[gid][row][-1] = -1
        return replace(case, tables=tables), f"pad -1 in the 0-padded tail of {gid!r} row {row}"
    gid = _pick_group(draw, case, "full")
    row = _pick(draw, [r for r in range(case.batch.live_rows) if _real_cols(tables[gid][r])])
    span = _span(case, gid, row)
    _widen(case, tables, gid, max(span + 1 - len(tables[gid][row]), 0))
    tables[gid][row][span] = 0
    return replace(case, tables=tables), f"page 0 in the -1-padded tail of full {gid!r} row {row} col {span}"


def _needed(case: Case, gid: str, row: int) -> range:
    return needed_columns(case.batch, row, case.spec(gid))


def _t4_pad_inside(draw: st.DrawFn, case: Case) -> tuple[Case, str]:
    tables = _copy_tables(case)
    gid = _pick_group(draw, case)
    row = _pick(draw, _writing_rows(case))
    col = _pick(draw, list(_needed(case, gid, row)))
    tables[gid][row][col:] = [-1] * (len(tables[gid][row]) - col)
    return replace(case, tables=tables), f"tail pad from col {col} inside the live length of {gid!r} row {row}"


def _t4_full_front_hole(draw: st.DrawFn, case: Case) -> tuple[Case, str]:
    tables = _copy_tables(case)
    gid = _pick_group(draw, case, "full")
    row = _pick(draw, _writing_rows(case))
    tables[gid][row][0] = NULL_PAGE
    return replace(case, tables=tables), f"a write or read through page 0 at col 0 of full {gid!r} row {row}"


def _t4_full_zero_tail(draw: st.DrawFn, case: Case) -> tuple[Case, str]:
    tables = _copy_tables(case)
    gid = _pick_group(draw, case, "full")
    row = _pick(draw, _writing_rows(case))
    col = _pick(draw, list(_needed(case, gid, row)))
    tables[gid][row][col:] = [NULL_PAGE] * (len(tables[gid][row]) - col)
    return replace(case, tables=tables), f"page 0 from col {col} inside the live length of full {gid!r} row {row}"


def _t5_hole_needed(draw: st.DrawFn, case: Case) -> tuple[Case, str]:
    tables = _copy_tables(case)
    gid = _pick_group(draw, case, "sliding")
    row = _pick(draw, _writing_rows(case))
    col = _pick(draw, list(_needed(case, gid, row)))
    tables[gid][row][: col + 1] = [NULL_PAGE] * (col + 1)
    return replace(case, tables=tables), f"holes up to needed col {col} of sliding {gid!r} row {row}"


def _t5_hole_after_page(draw: st.DrawFn, case: Case) -> tuple[Case, str]:
    tables = _copy_tables(case)
    gid = _pick_group(draw, case, "sliding")
    row = _pick(draw, [r for r in range(case.batch.live_rows) if _real_cols(tables[gid][r])])
    span = _span(case, gid, row)
    _widen(case, tables, gid, max(span + 1 - len(tables[gid][row]), 0))
    tables[gid][row][span] = NULL_PAGE
    return replace(case, tables=tables), f"hole after the last real page of sliding {gid!r} row {row}"


def _t7_shared_write(draw: st.DrawFn, case: Case) -> tuple[Case, str]:
    tables = _copy_tables(case)
    gid = _pick_group(draw, case)
    block = case.spec(gid).block_granularity
    writer = _pick(draw, _writing_rows(case))
    pos = draw(st.sampled_from(write_positions(case.batch, writer)))
    page = tables[gid][writer][pos // block]
    other = _pick(draw, [r for r in range(case.batch.live_rows) if r != writer and _real_cols(tables[gid][r])])
    col = draw(st.sampled_from(_real_cols(tables[gid][other])))
    tables[gid][other][col] = page
    return replace(case, tables=tables), (f"write page {page} of {gid!r} row {writer} also in row {other} "
                                          f"col {col}")


def _t7_twice_in_row(draw: st.DrawFn, case: Case) -> tuple[Case, str]:
    """One of the row's own pages, or a page another live row holds (a shared prefix page, say), at two
    real columns of the row."""
    tables = _copy_tables(case)
    gid = _pick_group(draw, case)
    table, live = tables[gid], case.batch.live_rows
    row = _pick(draw, [r for r in range(live) if len(_real_cols(table[r])) >= 2])
    first = draw(st.sampled_from(_real_cols(table[row])))
    second = draw(st.sampled_from([c for c in _real_cols(table[row]) if c != first]))
    held = sorted({table[r][c] for r in range(live) if r != row for c in _real_cols(table[r])})
    page = draw(st.sampled_from(held)) if held and draw(st.booleans()) else table[row][first]
    table[row][first] = table[row][second] = page
    whose = "its own" if page not in held else "another row's"
    return replace(case, tables=tables), f"page {page} ({whose}) twice in {gid!r} row {row}, cols {first}, {second}"


def _t8_narrow(draw: st.DrawFn, case: Case) -> tuple[Case, str]:
    tables = _copy_tables(case)
    gid = _pick_group(draw, case)
    need = max([_needed(case, gid, r).stop for r in _writing_rows(case)], default=0)
    assume(need >= 2)
    width = draw(st.integers(1, need - 1))
    tables[gid] = [row[:width] for row in tables[gid]]
    return replace(case, tables=tables), f"table of {gid!r} cut to {width} columns; a row needs {need}"


def _rebuild_row(case: Case, tables: dict[str, Table], row: int, seq: int) -> None:
    """Give ``row`` fresh pages covering ``[0, max(seq, 1))`` in every group (no holes), then tail pads."""
    for spec in case.attention:
        entries = tables[spec.group_id][row]
        cols = _ceil(max(seq, 1), spec.block_granularity)
        fresh = []
        for _ in range(cols):
            fresh.append(_fresh_page([*tables[spec.group_id], fresh]))
        entries[:] = fresh + [case.tail_pad] * (len(entries) - cols)


def _t9_zero_seq(draw: st.DrawFn, case: Case) -> tuple[Case, str]:
    tables = _copy_tables(case)
    row = draw(st.integers(0, case.batch.live_rows - 1))
    _rebuild_row(case, tables, row, 0)
    seq = list(case.batch.seq_lens)
    seq[row] = 0
    batch = replace(case.batch, seq_lens=tuple(seq))
    return replace(case, tables=tables, batch=batch), f"row {row} has seq_len 0"


def _t9_prefix(draw: st.DrawFn, case: Case) -> tuple[Case, str]:
    row = draw(st.integers(0, case.batch.bs - 1))
    assert case.batch.prefix_lens is not None
    prefix = list(case.batch.prefix_lens)
    seq = case.batch.seq_lens[row]
    prefix[row] = draw(st.sampled_from((-1, seq + 1)))
    batch = replace(case.batch, prefix_lens=tuple(prefix))
    return replace(case, batch=batch), f"row {row} has prefix {prefix[row]} and seq_len {seq}"


def _w2_short_row(draw: st.DrawFn, case: Case) -> tuple[Case, str]:
    assume(case.batch.n >= 2)
    tables = _copy_tables(case)
    row = draw(st.integers(0, case.batch.live_rows - 1))
    seq_len = draw(st.integers(1, case.batch.n - 1))
    _rebuild_row(case, tables, row, seq_len)
    seq = list(case.batch.seq_lens)
    seq[row] = seq_len
    batch = replace(case.batch, seq_lens=tuple(seq))
    return replace(case, tables=tables, batch=batch), f"real row {row} has seq_len {seq_len} < N={case.batch.n}"


def _w5_page(draw: st.DrawFn, case: Case) -> tuple[Case, str]:
    tables = _copy_tables(case)
    gid = _pick(draw, [s.group_id for s in case.attention if s.block_granularity >= 2])
    row = _pick(draw, [r for r in range(case.batch.live_rows) if _real_cols(tables[gid][r])])
    col = draw(st.sampled_from(_real_cols(tables[gid][row])))
    page = PAGE_LIMIT // case.spec(gid).block_granularity
    tables[gid][row][col] = page
    return replace(case, tables=tables), f"page {page} of {gid!r} has slots past 2^31 - 1"


_FIXED = ("decode", "verify", "reanchor")
_PADDED = {"modes": _FIXED, "min_pad": 1, "padding": True}
VARIANTS: tuple[Variant, ...] = (
    Variant("T1", "wrong dtype", _t1_dtype, True),
    Variant("T1", "1-D table", _t1_one_dim, True),
    Variant("T1", "fewer rows than bs", _t1_rows, True),
    Variant("T1", "no columns", _t1_no_columns, True),
    Variant("T1", "missing group table", _t1_missing, True),
    Variant("T1", "undeclared group table", _t1_undeclared, True),
    Variant("T1", "entry below -1", _t1_below_pad, False),
    Variant("T2", "nonzero dummy row", _t2_dummy_entry, False, _PADDED),
    Variant("T2", "dummy row seq_len != 1", _t2_dummy_seq, False, _PADDED),
    Variant("T3", "real page after the pad", _t3_page_after_pad, False, {"min_live": 1}),
    Variant("T3", "pad value of the other convention", _t3_foreign_pad, False,
            {"min_live": 1, "require": "full"}),
    Variant("T4", "-1 inside the live length", _t4_pad_inside, False, {"min_live": 1, "tail_pads": (-1,)}),
    Variant("T4", "page 0 at col 0 of a full row", _t4_full_front_hole, False,
            {"min_live": 1, "require": "full"}),
    Variant("T4", "page 0 inside the live length of a 0-padded full row", _t4_full_zero_tail, False,
            {"min_live": 1, "require": "full", "tail_pads": (0,)}),
    Variant("T5", "hole over a needed column", _t5_hole_needed, False, {"min_live": 1, "require": "sliding"}),
    Variant("T5", "hole after a real page", _t5_hole_after_page, False,
            {"min_live": 1, "require": "sliding", "tail_pads": (-1,)}),
    Variant("T7", "write page shared by two rows", _t7_shared_write, False, {"min_live": 2}),
    Variant("T7", "page twice in one row", _t7_twice_in_row, False, {"min_live": 1}),
    Variant("T8", "table narrower than a row needs", _t8_narrow, True, {"min_live": 1, "max_cols": 6}),
    Variant("T9", "seq_len 0", _t9_zero_seq, True, {"min_live": 1, "modes": _FIXED}),
    Variant("T9", "negative prefix or prefix past seq_len", _t9_prefix, True, {"min_live": 1, "modes": ("extend",)}),
    Variant("W2", "real verify row with seq_len < N", _w2_short_row, True,
            {"min_live": 1, "modes": ("verify",), "n": MAX_N}),
    Variant("W5", "page past the int32 range", _w5_page, False, {"min_live": 1, "kernel_page_sizes": (2, 4, 8)}),
)
"""Every near-valid construction, by the clause it breaks."""

BROKEN_CLAUSES = tuple(sorted({v.clause for v in VARIANTS}))
CHEAP_CLAUSES = tuple(sorted({v.clause for v in VARIANTS if v.cheap}))
"""Clauses with a breach every backend must see without a device sync (shapes, dtypes, CPU lengths)."""


def _base_kwargs(variant: Variant, tail_pads: Sequence[int]) -> dict[str, Any]:
    kwargs = dict(variant.base)
    pads = tuple(p for p in kwargs.get("tail_pads", tail_pads) if p in tail_pads)
    kwargs["tail_pads"] = pads
    return kwargs


def variants(clauses: Sequence[str] | None = None, *, cheap: bool | None = None,
             tail_pads: Sequence[int] = (-1, 0), padding: bool = True) -> tuple[Variant, ...]:
    """The variants breaking one of ``clauses`` (all by default), cheap ones only if ``cheap``;
    ``padding=False`` drops the ones that need dummy rows."""
    chosen = [v for v in VARIANTS if (clauses is None or v.clause in clauses)
              and (cheap is None or v.cheap == cheap) and _base_kwargs(v, tail_pads)["tail_pads"]
              and (padding or not v.base.get("min_pad"))]
    if not chosen:
        raise ValueError(f"no near-valid variant for clauses {clauses} (cheap={cheap}, tail_pads={tail_pads})")
    return tuple(chosen)


@st.composite
def broken_case(draw: st.DrawFn, variant: Variant, *, tail_pads: Sequence[int] = (-1, 0),
                padding: bool = True) -> Broken:
    """A near-valid batch made by ``variant``, labelled with the clause the reference raises for it."""
    base = draw(cases(**{"padding": padding, **_base_kwargs(variant, tail_pads)}))
    case, how = variant.mutate(draw, base)
    return Broken(case, variant.clause, f"{variant.name}: {how}", variant.cheap)


def broken_cases(clauses: Sequence[str] | None = None, *, cheap: bool | None = None,
                 tail_pads: Sequence[int] = (-1, 0), padding: bool = True) -> st.SearchStrategy[Broken]:
    """A near-valid batch breaking one clause of ``clauses`` (see :func:`variants` for the filters).

    ``tail_pads=(-1,)`` keeps to the default pad (what the lone-table calls, which take no pad, assume);
    ``padding=False`` keeps dummy rows out (lone-table calls cannot tell them from live rows).
    """
    chosen = variants(clauses, cheap=cheap, tail_pads=tail_pads, padding=padding)
    return st.sampled_from(chosen).flatmap(lambda v: broken_case(v, tail_pads=tail_pads, padding=padding))


# --------------------------------------------------------------------------------------------------
# Write locations for the debug checker (D1, D2)
# --------------------------------------------------------------------------------------------------


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


@st.composite
def write_loc_cases(draw: st.DrawFn, *, corrupt: bool | None = None,
                    corruptions: Sequence[str] = tuple(CORRUPTIONS)) -> WriteLocCase:
    """Correct locations (``corrupt=False``), or one corruption of them; labelled by the reference checker.

    ``clamped re-anchor`` keeps the locations correct but re-anchors a row below N, whose clamped
    positions repeat a slot (D2); ``write through a hole`` puts page 0 at a token's own column and
    computes its location from it, so the write lands in page 0 at the right offset (D1: only a check
    for page 0 itself sees it, "is it my own page" does not).
    """
    how = draw(st.sampled_from(tuple(corruptions))) if corrupt or (corrupt is None and draw(st.booleans())) \
        else "correct locations"
    if how == "clamped re-anchor":
        case = draw(cases(min_live=1, modes=("reanchor",), n=MAX_N))
        tables = _copy_tables(case)
        row = draw(st.integers(0, case.batch.live_rows - 1))
        frontier = draw(st.integers(1, min(MAX_N - 1, case.batch.seq_lens[row])))  # inside the row: no widening
        _rebuild_row(case, tables, row, frontier)
        seq = list(case.batch.seq_lens)
        seq[row] = frontier
        case = replace(case, tables=tables, batch=replace(case.batch, seq_lens=tuple(seq)))
    else:  # no clamped re-anchor rows: their repeated slots would be reported (D2) before the corruption
        case = draw(cases(min_live=1))
        assume(case.batch.mode != "reanchor" or min(case.batch.seq_lens[: case.batch.live_rows]) >= case.batch.n)
    gid = draw(st.sampled_from([s.group_id for s in case.attention]))
    block = case.spec(gid).block_granularity
    table = _copy_tables(case)[gid]
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
        row, pos = _pick(draw, tokens)
        table = [list(r) for r in table]
        table[row][pos // block] = NULL_PAGE
        return live_locs(table, batch, block), table
    if how == "shared write page":  # two rows write one slot: same page, same offset (D2)
        pairs = [(a, pa, b, pb) for a, pa in tokens for b, pb in tokens if a < b and pa % block == pb % block]
        a, pa, b, pb = _pick(draw, pairs)
        table = [list(r) for r in table]
        table[b][pb // block] = table[a][pa // block]
        return live_locs(table, batch, block), table
    assume(tokens)
    i = draw(st.integers(0, len(tokens) - 1))
    row, pos = tokens[i]
    locs = list(locs)
    if how == "count":
        return locs[:-1], table
    if how == "null page":
        locs[i] = pos % block
    elif how == "wrong offset":
        assume(block >= 2)
        locs[i] = locs[i] - pos % block + (pos + 1) % block
    else:
        pool = (table[r] for r in range(batch.live_rows) if r != row) if how == "foreign page" else [table[row]]
        pages = sorted({p for entries in pool for p in entries if p > 0} - {table[row][pos // block]})
        locs[i] = _pick(draw, pages) * block + pos % block
    return locs, table


# --------------------------------------------------------------------------------------------------
# Block expansion (E1-E3)
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExpandCase:
    table: Table
    width: int
    ratio: int
    max_kernel_pages: int | None
    tail_pad: int
    actual_bs: int | None


@st.composite
def expand_cases(draw: st.DrawFn) -> ExpandCase:
    """A block table with holes, pads (also mid-row), real pages up to the int32 limit, maybe dummy rows."""
    ratio = draw(st.sampled_from((1, 2, 3, 4, 8)))
    rows, width = draw(st.integers(0, 5)), draw(st.integers(1, 6))
    top = PAGE_LIMIT // ratio - 1
    entry = st.one_of(st.sampled_from((-1, 0)), st.integers(1, 64), st.integers(top - 64, top))
    table = [[draw(entry) for _ in range(width)] for _ in range(rows)]
    mkp = draw(st.one_of(st.none(), st.integers(0, width * ratio + 3)))
    actual = draw(st.one_of(st.none(), st.integers(0, rows)))
    if actual is not None:
        for row in table[actual:]:
            row[:] = [NULL_PAGE] * width
    return ExpandCase(table, width, ratio, mkp, draw(st.sampled_from((-1, 0))), actual)


# --------------------------------------------------------------------------------------------------
# CUDA-graph buffers (G1-G5)
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GraphSetup:
    """The arguments of ``backend.graph``."""

    specs: tuple[GroupSpec, ...]
    max_bs: int
    max_kernel_pages: int
    kernel_page_size: int
    spec_n: int
    tail_pad: int
    expand: bool

    @property
    def attention(self) -> tuple[GroupSpec, ...]:
        return tuple(sorted((s for s in self.specs if not s.is_state), key=lambda s: s.group_id))

    def source_width(self, spec: GroupSpec) -> int:
        """G1: a group's buffer width in its own block pages, ``ceil(max_kernel_pages * K / B)``."""
        return _ceil(self.max_kernel_pages * self.kernel_page_size, spec.block_granularity)

    def kwargs(self) -> dict[str, Any]:
        return {"max_bs": self.max_bs, "max_kernel_pages": self.max_kernel_pages,
                "kernel_page_size": self.kernel_page_size, "spec_n": self.spec_n, "tail_pad": self.tail_pad,
                "expand": self.expand}


@dataclass(frozen=True)
class Replay:
    """One replay: padded ``bs``, the tables delivered (maybe fewer rows, maybe state ones), the seq_lens."""

    bs: int
    tables: Mapping[str, Table]
    seq_lens: tuple[int, ...]
    tokens_per_req: int
    actual_bs: int | None
    live_seq: tuple[int, ...]
    """The lengths that rows ``[0, bs)`` hold after this replay (1 for the zero-filled dummy rows)."""

    def tensors(self) -> dict[str, torch.Tensor]:
        return {gid: as_tensor(t, 1) for gid, t in self.tables.items()}

    def seq_tensor(self) -> torch.Tensor:
        return torch.tensor(self.seq_lens, dtype=torch.int32)


@st.composite
def graph_setups(draw: st.DrawFn) -> GraphSetup:
    k = draw(st.sampled_from(KERNEL_PAGE_SIZES))
    specs = draw(group_specs(k))
    return GraphSetup(specs, draw(st.integers(1, 5)), draw(st.integers(1, 12)), k, draw(st.integers(1, MAX_N)),
                      draw(st.sampled_from((-1, 0))), draw(st.booleans()))


@st.composite
def replays(draw: st.DrawFn, setup: GraphSetup, *, bs: int | None = None) -> Replay:
    """A replay the reference accepts: every live position falls on a real page inside the buffer."""
    bs = bs or draw(st.integers(1, setup.max_bs))
    n = draw(st.integers(1, setup.spec_n))
    attention = setup.attention
    limit = min(setup.source_width(s) * s.block_granularity for s in attention)
    widths = {s.group_id: max(1, setup.source_width(s) + draw(st.integers(-2, 2))) for s in attention}
    limit = min(limit, *(w * s.block_granularity for s, w in zip(attention, widths.values(), strict=True)))
    case = draw(cases(modes=("verify",), specs=setup.specs, kernel_page_size=setup.kernel_page_size, bs=bs,
                      n=n, max_seq=max(limit, n), widths=widths, tail_pads=(-1, 0)))
    assume(max(case.batch.seq_lens) <= limit)
    live = case.batch.live_rows
    tables: dict[str, Table] = {gid: [list(r) for r in t] for gid, t in case.tables.items()}
    actual_bs = case.batch.actual_bs
    delivery = draw(st.sampled_from(("padded", "live rows only", "garbage dummy rows")))
    if delivery == "live rows only":  # the runner pads the dummy rows itself
        tables = {gid: t[:live] if gid in widths else t for gid, t in tables.items()}
        actual_bs = None
        assume(live >= 1)
    elif delivery == "garbage dummy rows" and actual_bs is not None:
        for gid in widths:
            for row in tables[gid][live:bs]:
                row[:] = [draw(st.sampled_from((-1, 5, 7)))] * len(row)
    if not draw(st.booleans()):  # state tables may travel along; the runner ignores them
        tables = {gid: t for gid, t in tables.items() if gid in widths}
    seq = case.batch.seq_lens + tuple(draw(st.lists(st.integers(1, 9), max_size=2)))
    live_seq = case.batch.seq_lens[:live] + (1,) * (bs - live)
    return Replay(bs, tables, seq, n, actual_bs, live_seq)


@dataclass(frozen=True)
class GraphCase:
    setup: GraphSetup
    captures: tuple[tuple[int, tuple[str, ...], int], ...]
    replay: Replay


@st.composite
def graph_cases(draw: st.DrawFn) -> GraphCase:
    """A graph setup, a few captures (bs, group ids, tokens per request) and one valid replay."""
    setup = draw(graph_setups())
    ids = [s.group_id for s in setup.specs]
    capture = st.tuples(st.integers(1, setup.max_bs), st.lists(st.sampled_from(ids), unique=True).map(tuple),
                        st.integers(1, setup.spec_n))
    captures = tuple(draw(st.lists(capture, min_size=1, max_size=3)))
    return GraphCase(setup, captures, draw(replays(setup)))


@st.composite
def repaged(draw: st.DrawFn, setup: GraphSetup, step: Replay) -> Replay:
    """``step`` again (same bs, N, actual_bs, seq_lens and table shapes) with every real page id of every
    attention table swapped for a fresh one: a replay a runner may not tell from ``step`` by shape alone.

    The renaming is one-to-one per group, so sharing, holes and pads keep their places and the replay
    stays valid; fresh ids are small, inside the W5 range of any block size.
    """
    attention = {s.group_id for s in setup.attention}
    rng = draw(st.randoms(use_true_random=False))
    tables: dict[str, Table] = {}
    for gid, table in step.tables.items():
        used = sorted({p for row in table for p in row if p > 0})
        if gid not in attention or not used:
            tables[gid] = table
            continue
        pool = sorted(set(range(1, 2 * len(used) + 64)) - set(used))
        rename = dict(zip(used, rng.sample(pool, len(used)), strict=True))
        tables[gid] = [[rename.get(p, p) for p in row] for row in table]
    return replace(step, tables=tables)
