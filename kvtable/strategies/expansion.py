"""Block tables for expansion (E1-E3): holes, pads (also mid-row), pages up to the int32 limit, dummy rows."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st

from kvtable.reference import NULL_PAGE
from kvtable.reference.model import Table
from kvtable.strategies.batches import draw_entry
from kvtable.strategies.domain import current
from kvtable.strategies.draws import BOOLEANS, between, pick


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
    ratio = pick(draw, (1, 2, 3, 4, 8))
    rows, width = draw(between(0, 5)), draw(between(1, 6))
    table = [[draw_entry(draw, ratio) for _ in range(width)] for _ in range(rows)]
    mkp = None if draw(BOOLEANS) else draw(between(0, width * ratio + 3))
    actual = None if draw(BOOLEANS) else draw(between(0, rows))
    if actual is not None:
        for row in table[actual:]:
            row[:] = [NULL_PAGE] * width
    return ExpandCase(table, width, ratio, mkp, pick(draw, current().tail_pads), actual)


