"""Inputs that make real engine bugs live, for the safety tier: whatever a backend returns for them, every
write must stay in the token's own slot, the sink (page 0) or the profile's pad slot.

- ``stale seq_len on the tail pad``: a live row's seq_len grows past its pages while the table is wide
  enough, so the new positions fall on tail-pad columns inside the width (no T8 to refuse it cheaply);
- ``-1 inside the live range``: a needed column of a writing row holds the pad (decode, verify, extend:
  the bug class of tokenspeed #709);
- ``garbage dummy rows``: padded rows hold live rows' pages, -1, or pages at the int32 edge;
- ``narrow table``: a group's table narrower than its sequence (vLLM #53982 read the next row's pages);
- ``page past int32``: a needed column holds a page whose slots pass 2^31 - 1 (W5 broken): the first page
  past the bound, one a few pages further, the largest int32, or one whose slot wraps (mod 2^32) exactly
  onto another page's slot (vLLM #1486's wrap, made to land on a live page).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from hypothesis import strategies as st

from kvtable.contract import Mode
from kvtable.reference.model import Table, write_positions
from kvtable.reference.tables import needed_columns
from kvtable.strategies.batches import KERNEL_PAGE_SIZES, PAGE_LIMIT, Case, CaseOptions, ceil_div, draw_case
from kvtable.strategies.broken import copy_tables, writing_rows
from kvtable.strategies.domain import current
from kvtable.strategies.draws import BOOLEANS, between, pick

UNSAFE_KINDS = ("stale seq_len on the tail pad", "-1 inside the live range", "garbage dummy rows", "narrow table",
                "page past int32")
_FIXED: tuple[Mode, ...] = ("decode", "verify", "reanchor")


@dataclass(frozen=True)
class UnsafeCase:
    """A batch broken so that a backend without validation would write somewhere it must not; ``how`` says how."""

    case: Case
    kind: str
    how: str


def _stale_tail(draw: st.DrawFn) -> UnsafeCase:
    case = draw_case(draw, CaseOptions(modes=_FIXED, min_live=1, tail_pads=(-1,)))
    row = draw(between(0, case.batch.live_rows - 1))
    seq = list(case.batch.seq_lens)
    seq[row] += draw(between(1, 8))
    tables = copy_tables(case)
    for spec in case.attention:  # wide enough (tail pads) that no width check sees the stale length
        entries = tables[spec.group_id]
        missing = ceil_div(seq[row], spec.block_granularity) - len(entries[0])
        for r, entries_row in enumerate(entries):
            entries_row.extend([case.tail_pad if r < case.batch.live_rows else 0] * max(missing, 0))
    batch = replace(case.batch, seq_lens=tuple(seq))
    return UnsafeCase(replace(case, tables=tables, batch=batch), UNSAFE_KINDS[0],
                      f"row {row} at stale seq_len {seq[row]} (was {case.batch.seq_lens[row]}), past its pages")


_PAD_INSIDE_MODES: tuple[Mode, ...] = ("extend", "decode", "verify", "extend")
"""Extend first (the simplest draw, so every seed tries it at once) and half the time: the extend location path
is the one engines leave unclamped (tokenspeed #709's extend variant)."""


def _pad_inside(draw: st.DrawFn) -> UnsafeCase:
    case = draw_case(draw, CaseOptions(modes=_PAD_INSIDE_MODES, min_live=1))
    tables = copy_tables(case)
    gid = pick(draw, [s.group_id for s in case.attention])
    row = pick(draw, writing_rows(case))
    col = pick(draw, needed_columns(case.batch, row, case.spec(gid)))
    pad = current().entry(-1)  # an engine whose tables hold no -1 gets its tail value there
    tables[gid][row][col] = pad
    return UnsafeCase(replace(case, tables=tables), UNSAFE_KINDS[1], f"{pad} at {gid!r} row {row} col {col}")


def _garbage_dummy(draw: st.DrawFn) -> UnsafeCase:
    case = draw_case(draw, CaseOptions(modes=_FIXED, min_live=1, min_pad=1))
    tables = copy_tables(case)
    domain = current()
    for spec in case.attention:
        table: Table = tables[spec.group_id]
        used = [p for r in table[: case.batch.live_rows] for p in r if p > 0] or [1]
        top = PAGE_LIMIT // spec.block_granularity - 1
        # what stale rows can hold: earlier ids (here: the live rows' pages) and pads; the wide domain adds the edge
        kinds = (*domain.pads, used[0]) if domain.stale == "earlier-ids" else (-1, used[0], top)
        for row in range(case.batch.live_rows, case.batch.bs):
            table[row] = [v if v != used[0] else pick(draw, used) for v in (pick(draw, kinds) for _ in table[row])]
    return UnsafeCase(replace(case, tables=tables), UNSAFE_KINDS[2],
                      f"dummy rows {case.batch.live_rows}..{case.batch.bs - 1} hold "
                      + ("earlier page ids or pads" if domain.stale == "earlier-ids" else
                         "live pages, -1 or int32-edge pages"))


def _narrow(draw: st.DrawFn) -> UnsafeCase:
    case = draw_case(draw, CaseOptions(min_live=1, max_cols=6))
    tables = copy_tables(case)
    needs = {s.group_id: max([needed_columns(case.batch, r, s).stop for r in writing_rows(case)], default=0)
             for s in case.attention}
    gid = pick(draw, [g for g, need in needs.items() if need >= 2])  # a group one column can be cut from
    need = needs[gid]
    width = draw(between(1, need - 1))
    tables[gid] = [row[:width] for row in tables[gid]]
    return UnsafeCase(replace(case, tables=tables), UNSAFE_KINDS[3],
                      f"table of {gid!r} cut to {width} columns; a row needs {need}")


def wrapping_pages(block: int, live_page: int) -> tuple[int, ...]:
    """int32 page ids past W5 at page size ``block``: the first past the bound, one 3 further, the largest
    int32, and (for a power-of-two ``block`` >= 4) the page whose first slot wraps mod 2^32 onto
    ``live_page``'s first slot."""
    first = PAGE_LIMIT // block
    pages = [first, min(first + 3, PAGE_LIMIT - 1), PAGE_LIMIT - 1]
    if block >= 4 and block & (block - 1) == 0:
        pages.append(2 * PAGE_LIMIT // block + live_page)
    return tuple(pages)


def _int32_wrap(draw: st.DrawFn) -> UnsafeCase:
    # kernel page sizes >= 2: at page size 1 every int32 page is inside W5
    case = draw_case(draw, CaseOptions(modes=("decode", "verify", "reanchor", "extend"), min_live=1,
                                         kernel_page_sizes=KERNEL_PAGE_SIZES[1:]))
    tables = copy_tables(case)
    gid = pick(draw, [s.group_id for s in case.attention])
    block = case.spec(gid).block_granularity
    row = pick(draw, writing_rows(case))
    cols = sorted({pos // block for pos in write_positions(case.batch, row)})
    live = [p for r in tables[gid][: case.batch.live_rows] for p in r if p > 0] or [1]
    changed = []
    for col in cols if draw(BOOLEANS) else [pick(draw, cols)]:
        tables[gid][row][col] = pick(draw, wrapping_pages(block, pick(draw, live)))
        changed.append(f"col {col} = {tables[gid][row][col]}")
    return UnsafeCase(replace(case, tables=tables), UNSAFE_KINDS[4],
                      f"{gid!r} (page size {block}) row {row}: {', '.join(changed)}, past 2^31 // {block} - 1")


_MAKERS = {UNSAFE_KINDS[0]: _stale_tail, UNSAFE_KINDS[1]: _pad_inside, UNSAFE_KINDS[2]: _garbage_dummy,
           UNSAFE_KINDS[3]: _narrow, UNSAFE_KINDS[4]: _int32_wrap}


@st.composite
def unsafe_cases(draw: st.DrawFn, kind: str) -> UnsafeCase:
    """A batch broken the ``kind`` way (one of ``UNSAFE_KINDS``)."""
    return _MAKERS[kind](draw)
