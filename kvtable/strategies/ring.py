"""Ring-group steps (R1-R3): each request's ring pages, its cached and new token counts, the window and page size.

Valid cases give every request ``ceil(min(seq_len, window) / ps)`` private real pages (what transformers'
sliding allocator holds), then the domain's tail pad. ``ring_broken_cases`` break R1 once and say which entry;
``ring_any_cases`` mixes both for the safety tier.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from hypothesis import strategies as st

from kvtable.reference.ring import ring_columns, ring_pages
from kvtable.strategies.batches import as_tensor
from kvtable.strategies.domain import current
from kvtable.strategies.draws import BOOLEANS, between, pick

MAX_WINDOW = 12
MAX_PREFIX = 40
MAX_EXTEND = 20
MAX_ROWS = 4
PAGE_SIZES = (1, 2, 3, 4, 8)
_POOL = st.lists(st.integers(1, 2**16), min_size=MAX_ROWS * MAX_WINDOW, max_size=MAX_ROWS * MAX_WINDOW, unique=True)
"""Distinct page ids, enough for every request's ring at page size 1 (drawn once per case)."""
BREAKS = ("hole", "shared", "narrow", "past")
"""How ``ring_broken_cases`` breaks R1: page 0 in a used column, a page of another row's ring, a column short,
a fresh real page in the first column past ``ceil(window / ps)``."""


@dataclass(frozen=True)
class RingCase:
    """One ring step: row ``i`` of ``table`` is request ``i``'s ring, with ``prefix_lens[i]`` tokens cached and
    ``extend_lens[i]`` new ones."""

    table: list[list[int]]
    prefix_lens: tuple[int, ...]
    extend_lens: tuple[int, ...]
    page_size: int
    window: int

    def tensor(self) -> torch.Tensor:
        """The table as the int32 tensor a backend gets."""
        return as_tensor(self.table)

    def args(self) -> tuple[torch.Tensor, list[int], list[int], int, int]:
        """``ring_locs``' arguments."""
        return self.tensor(), list(self.prefix_lens), list(self.extend_lens), self.page_size, self.window


@st.composite
def ring_cases(draw: st.DrawFn) -> RingCase:
    """A valid ring step in the current domain: private real ring pages, the domain's tail pad after them."""
    window, page_size = draw(between(1, MAX_WINDOW)), pick(draw, PAGE_SIZES)
    rows = draw(between(1, MAX_ROWS))
    prefix = [draw(between(0, MAX_PREFIX)) for _ in range(rows)]
    extend = [draw(between(1, MAX_EXTEND)) for _ in range(rows)]
    pool = iter(draw(_POOL))
    need = [ring_columns(p + e, window, page_size) for p, e in zip(prefix, extend, strict=True)]
    width = max(need) + draw(between(0, 2))
    pad = pick(draw, current().tail_pads)
    table = [[next(pool) for _ in range(n)] + [pad] * (width - n) for n in need]
    return RingCase(table, tuple(prefix), tuple(extend), page_size, window)


_VALID = ring_cases()
"""Built once: a strategy built inside a draw is built (and validated) again on every draw."""


@dataclass(frozen=True)
class BrokenRing:
    """A ring step with R1 broken once, and the (row, col) entries a refusal may name (col None: any column)."""

    case: RingCase
    how: str
    where: frozenset[tuple[int, int | None]]


@st.composite
def ring_broken_cases(draw: st.DrawFn) -> BrokenRing:
    """A valid ring step with one R1 breach: a used column at page 0, a page of another row's ring, one column
    fewer than the widest ring needs, or a real page past the ring's ``ceil(window / ps)`` columns."""
    case = draw(_VALID)
    rows = len(case.table)
    need = [ring_columns(p + e, case.window, case.page_size)
            for p, e in zip(case.prefix_lens, case.extend_lens, strict=True)]
    how = pick(draw, BREAKS)
    if (how == "shared" and rows < 2) or (how == "narrow" and max(need) < 2):
        how = "hole"
    table = [list(r) for r in case.table]
    if how == "narrow":
        width = max(need) - 1
        broken = RingCase([r[:width] for r in table], case.prefix_lens, case.extend_lens, case.page_size, case.window)
        return BrokenRing(broken, how, frozenset({(need.index(max(need)), None)}))
    row = draw(between(0, rows - 1))
    if how == "past":
        most, pad = ring_pages(case.window, case.page_size), pick(draw, current().tail_pads)
        table = [r + [pad] * (most + 1 - len(r)) for r in table]
        table[row][most] = 1 + max(page for r in table for page in r)
        broken = RingCase(table, case.prefix_lens, case.extend_lens, case.page_size, case.window)
        return BrokenRing(broken, how, frozenset({(row, most)}))
    col = draw(between(0, need[row] - 1))
    where = {(row, col)}
    if how == "hole":
        table[row][col] = 0
    else:
        other = (row + 1) % rows
        table[row][col] = table[other][0]
        where.add((other, 0))
    broken = RingCase(table, case.prefix_lens, case.extend_lens, case.page_size, case.window)
    return BrokenRing(broken, how, frozenset(where))


_BROKEN = ring_broken_cases()


@st.composite
def ring_any_cases(draw: st.DrawFn) -> RingCase:
    """What the safety tier judges: a valid ring step, or, where the domain holds malformed tables, one with R1
    broken (a page 0 or another ring's page in a used column, a column short)."""
    if current().malformed_tables and draw(BOOLEANS):
        return draw(_BROKEN).case
    return draw(_VALID)
