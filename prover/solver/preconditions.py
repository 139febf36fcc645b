"""The clauses' preconditions as z3 formulas over the kernels' variables (int32 loads, int64 arithmetic)."""

from __future__ import annotations

import z3

from kvtable.prover.solver.encoding import Lane, RowSetting, widen

TWO_31 = 2**31


def geometry(setting: RowSetting, *more_rows: z3.BitVecRef) -> list[z3.BoolRef]:
    """E1 (a page holds >= 1 token), T1 (a table has >= 1 column), row indices >= 0."""
    return [setting.page_size >= 1, setting.width >= 1, setting.row >= 0, *(r >= 0 for r in more_rows)]


def token_index(t: z3.BitVecRef, n: z3.BitVecRef) -> list[z3.BoolRef]:
    """N >= 1 tokens per request; ``t`` is one of them."""
    return [n >= 1, t >= 0, t < n]


def fits_width(length: z3.BitVecRef, setting: RowSetting) -> z3.BoolRef:
    """T8: ``ceil(length / ps) <= width``, i.e. ``length <= width * ps`` (exact in int64)."""
    return widen(length) <= widen(setting.width) * widen(setting.page_size)


def w5(page: z3.BitVecRef, page_size: z3.BitVecRef) -> z3.BoolRef:
    """W5 for one table entry: ``(page + 1) * ps <= 2^31`` (exact in int64 for int32 operands)."""
    return (widen(page) + 1) * widen(page_size) <= TWO_31


def real_page(setting: RowSetting, lane: Lane) -> list[z3.BoolRef]:
    """T4 and W5 at the lane's column: the kernel loads a real page whose slots are int32."""
    page = setting.entry(lane)
    return [lane.loads, page >= 1, w5(page, setting.page_size)]


def reads_live(lane: Lane, length: z3.BitVecRef, setting: RowSetting) -> z3.BoolRef:
    """The lane's position is a live position of the row (``[0, length)``) and its column exists."""
    return z3.And(lane.pos >= 0, lane.pos < widen(length), lane.col >= 0, lane.col < widen(setting.width))
