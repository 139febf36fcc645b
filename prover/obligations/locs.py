"""Obligations on the write-location formulas: in-bounds reads, int32 safety, agreement with W0, own pages.

Every query quantifies over all values of its variables at the kernels' widths (int32 loads, int64
arithmetic); the preconditions are the clauses' own, spelled out in each builder.
"""

from __future__ import annotations

import z3

from kvtable.prover.obligations.base import Obligation
from kvtable.prover.solver.discharge import Query
from kvtable.prover.solver.encoding import (
    I32,
    INT32_MAX,
    Lane,
    RowSetting,
    Slot,
    bv_max,
    c_div,
    c_mod,
    clamped_meaning_position,
    exact_product,
    exact_sum,
    fits_int32,
    floor_div,
    floor_mod,
    int32,
    int64,
    nn_div,
    nn_mod,
    signed_value,
    store_int32,
    widen,
)
from kvtable.prover.solver.preconditions import TWO_31, fits_width, geometry, reads_live, real_page, token_index

Shown = tuple[tuple[str, z3.ExprRef], ...]


def _show(lane: Lane) -> Shown:
    return (("pos", lane.pos), ("col", lane.col), ("page", lane.page), ("loc", lane.out))


def _verify_rows(seq: z3.BitVecRef, n: z3.BitVecRef, s: RowSetting) -> tuple[z3.BoolRef, z3.BoolRef]:
    """W2/T2: a real row holds N <= seq_len <= width*ps tokens; a padded row replays at seq_len 1."""
    real = z3.Bool("real_row")
    return real, z3.If(real, z3.And(seq >= n, fits_width(seq, s)), seq == 1)


def _extend_range(s: RowSetting, pos: z3.BitVecRef, *, prefix_min: int | None = 0) -> list[z3.BoolRef]:
    """W3/T9/T8: host position ``pos`` in ``[prefix, seq_len)``, ``prefix >= 0``, ``seq_len <= width*ps``."""
    prefix, seq = int64("prefix"), int64("seq_len")
    pre = [prefix <= pos, pos < seq, fits_width(seq, s)]
    if prefix_min is not None:
        pre.append(prefix >= prefix_min)
    return pre


# In-bounds: every position a mode reads is live and its column exists ------------------------------
def decode_in_bounds(*, seq_min: int = 1, check_width: bool = True) -> Query:
    s = RowSetting.fresh()
    seq = int32("seq_len")
    lane = s.stacked(seq, 1, 0)
    pre = [*geometry(s), seq >= seq_min]
    if check_width:
        pre.append(fits_width(seq, s))
    goal = z3.And(reads_live(lane, seq, s), lane.pos == widen(seq) - 1)
    return Query(tuple(pre), goal, _show(lane))


def verify_in_bounds() -> Query:
    s = RowSetting.fresh()
    seq, n, t = int32("seq_len"), int32("N"), int32("t")
    lane = s.stacked(seq, n, t)
    real, rows = _verify_rows(seq, n, s)
    position = z3.If(real, widen(seq) - widen(n) + widen(t), widen(0))
    pre = (*geometry(s), *token_index(t, n), rows)
    return Query(pre, z3.And(reads_live(lane, seq, s), lane.pos == position), _show(lane))


def reanchor_in_bounds() -> Query:
    s = RowSetting.fresh()
    frontier, n, t = int32("frontier"), int32("N"), int32("t")
    lane = s.stacked(frontier, n, t)
    pre = (*geometry(s), *token_index(t, n), frontier >= 1, fits_width(frontier, s))
    return Query(pre, reads_live(lane, frontier, s), _show(lane))


def extend_in_bounds(*, prefix_min: int | None = 0) -> Query:
    s = RowSetting.fresh()
    lane = s.at(int64("pos"))
    pre = (*geometry(s), *_extend_range(s, lane.pos, prefix_min=prefix_min))
    return Query(pre, z3.And(lane.col >= 0, lane.col < widen(s.width)), _show(lane))


def negative_position_off_page() -> Query:
    """Host position -1: truncating division keeps column 0 while ``pos % ps`` turns -1."""
    s = RowSetting.fresh()
    lane = s.at(int64("pos"))
    pre = (*geometry(s), lane.pos >= -1, *real_page(s, lane))
    return Query(pre, floor_div(widen(lane.out), widen(s.page_size)) == widen(s.entry(lane)), _show(lane))


# int32 safety (W5) ------------------------------------------------------------------------------
def _any_entry_lane() -> tuple[RowSetting, Lane, list[z3.BoolRef]]:
    """A lane at any position >= 0 reading any T1 entry (a page id >= 0 or the pad -1)."""
    s = RowSetting.fresh()
    lane = s.at(int64("pos"))
    return s, lane, [*geometry(s), lane.pos >= 0, s.entry(lane) >= -1]


def int64_exact() -> Query:
    s, lane, pre = _any_entry_lane()
    page64, ps64 = widen(bv_max(lane.page, z3.BitVecVal(0, I32))), widen(s.page_size)
    goal = z3.And(exact_product(page64, ps64), exact_sum(page64 * ps64, c_mod(lane.pos, ps64)))
    return Query(tuple(pre), goal, _show(lane))


def store_exact(*, with_w5: bool = True, sink: bool = True) -> Query:
    """The int64 location is in [0, 2^31) and survives the store: the kernels' lane (with its W5 sink), or
    the bare formula ``max(page, 0) * ps + pos % ps`` (``sink=False``)."""
    s, lane, pre = _any_entry_lane()
    if with_w5:
        pre.append((widen(s.entry(lane)) + 1) * widen(s.page_size) <= TWO_31)
    ps = widen(s.page_size)
    loc = lane.loc if sink else widen(bv_max(lane.page, z3.BitVecVal(0, I32))) * ps + c_mod(lane.pos, ps)
    goal = z3.And(loc >= 0, loc <= INT32_MAX, fits_int32(loc))
    shown = (*_show(lane)[:-1], ("loc", store_int32(loc)), ("loc before the int32 store", loc))
    return Query(tuple(pre), goal, shown)


def int32_product() -> Query:
    """The vLLM #1486 class: the same formula with an int32 product and sum."""
    page, ps, pos = int32("page"), int32("page_size"), int32("pos")
    loc32 = page * ps + c_mod(pos, ps)
    loc64 = widen(page) * widen(ps) + widen(c_mod(pos, ps))
    show = (("loc in int32 arithmetic", loc32), ("loc in int64 arithmetic", loc64))
    return Query((ps >= 1, pos >= 0, page >= 1), widen(loc32) == loc64, show)


def truncation_is_floor(*, non_negative: bool = True) -> Query:
    a, b = int64("pos"), int64("page_size")
    agree = z3.And(c_div(a, b) == floor_div(a, b), c_mod(a, b) == floor_mod(a, b))
    show = (("pos // ps in Triton", c_div(a, b)), ("pos // ps in torch", floor_div(a, b)),
            ("pos % ps in Triton", c_mod(a, b)), ("pos % ps in torch", floor_mod(a, b)))
    if not non_negative:
        return Query((b >= 1,), agree, show)
    natural = z3.And(floor_div(a, b) == nn_div(a, b), floor_mod(a, b) == nn_mod(a, b))
    return Query((a >= 0, b >= 1), z3.And(agree, natural), show)


# Agreement with the meaning (W0) ----------------------------------------------------------------
def _agrees(s: RowSetting, lane: Lane, slot: Slot, pre: list[z3.BoolRef]) -> Query:
    """The kernel's column and stored location equal W0's, where W0's column holds a page or hole (T4, W5)."""
    pre = [*pre, slot.defined, slot.page >= 0, (slot.page + 1) * slot.page_size <= TWO_31]
    goal = z3.And(signed_value(lane.col) == slot.col, signed_value(lane.out) == slot.location)
    return Query(tuple(pre), goal, (*_show(lane), ("W0 col", slot.col), ("W0 loc", slot.location)))


def decode_agrees() -> Query:
    s = RowSetting.fresh()
    seq = int32("seq_len")
    one, zero = z3.BitVecVal(1, I32), z3.BitVecVal(0, I32)
    slot = s.meaning(clamped_meaning_position(seq, one, zero))
    return _agrees(s, s.stacked(seq, one, zero), slot, [*geometry(s), seq >= 1, fits_width(seq, s)])


def verify_agrees(*, clamp_for_all: bool = False) -> Query:
    s = RowSetting.fresh()
    seq, n, t = int32("seq_len"), int32("N"), int32("t")
    if clamp_for_all:  # W4 re-anchor: every row clamps
        rows = z3.And(seq >= 1, fits_width(seq, s))
    else:
        rows = _verify_rows(seq, n, s)[1]
    slot = s.meaning(clamped_meaning_position(seq, n, t))
    return _agrees(s, s.stacked(seq, n, t), slot, [*geometry(s), *token_index(t, n), rows])


def extend_agrees() -> Query:
    s = RowSetting.fresh()
    lane = s.at(int64("pos"))
    pre = [*geometry(s), *_extend_range(s, lane.pos)]
    return _agrees(s, lane, s.meaning(signed_value(lane.pos)), pre)


# Lands in the page it reads (D1, D2, T7) ----------------------------------------------------------
def located(s: RowSetting, lane: Lane) -> tuple[z3.BoolRef, ...]:
    """Proof steps for a lane that loads a real page under W5: the position splits into column and
    offset, the int64 location is ``page*ps + offset`` inside ``[ps, 2^31)``, and the store keeps it."""
    ps, page = widen(s.page_size), widen(s.entry(lane))
    offset = c_mod(lane.pos, ps)
    return (lane.pos == lane.col * ps + offset,
            z3.And(offset >= 0, offset < ps),
            lane.loc == page * ps + offset,
            z3.And(lane.loc >= ps, lane.loc < TWO_31),
            widen(lane.out) == lane.loc)


def own_page() -> Query:
    """D1 on the stored int32 value, read back as the checker does (Python's divmod)."""
    s = RowSetting.fresh()
    lane = s.at(int64("pos"))
    ps, page = widen(s.page_size), widen(s.entry(lane))
    loc = widen(lane.out)
    pre = (*geometry(s), lane.pos >= 0, *real_page(s, lane))
    steps = (*located(s, lane),
             z3.And(floor_div(lane.loc, ps) == page, floor_mod(lane.loc, ps) == c_mod(lane.pos, ps)))
    goal = z3.And(floor_div(loc, ps) == page, floor_mod(loc, ps) == floor_mod(lane.pos, ps), loc >= ps)
    return Query(pre, goal, _show(lane), steps)


def _two_writes(same_row: bool) -> Query:
    first = RowSetting.fresh("row" if same_row else "row_a")
    second = first if same_row else first.with_row("row_b")
    a, b = first.at(int64("pos_a")), second.at(int64("pos_b"))
    pre = [*geometry(first, second.row), a.pos >= 0, b.pos >= 0, *real_page(first, a), *real_page(second, b)]
    if same_row:  # T7: no page twice in one row
        pre += [a.pos != b.pos, z3.Implies(a.col != b.col, a.page != b.page)]
    else:  # T7: a write page is in one live row only
        pre += [first.row != second.row, a.page != b.page]
    steps = (*located(first, a), *located(second, b))
    return Query(tuple(pre), a.out != b.out, (("loc_a", a.out), ("loc_b", b.out)), steps)


def verify_distinct(*, real_rows_hold_n: bool = True) -> Query:
    s = RowSetting.fresh()
    seq, n, t_a, t_b = int32("seq_len"), int32("N"), int32("t_a"), int32("t_b")
    a, b = s.stacked(seq, n, t_a), s.stacked(seq, n, t_b)
    pre = [*geometry(s), *token_index(t_a, n), *token_index(t_b, n), t_a != t_b, fits_width(seq, s),
           seq >= (n if real_rows_hold_n else 1), *real_page(s, a), *real_page(s, b),
           z3.Implies(a.col != b.col, a.page != b.page)]  # T7 within the row
    show = (("pos_a", a.pos), ("pos_b", b.pos), ("loc_a", a.out), ("loc_b", b.out))
    goal = z3.And(a.pos != b.pos, a.out != b.out)
    if not real_rows_hold_n:  # the counterexample needs no proof plan
        return Query(tuple(pre), goal, show)
    return Query(tuple(pre), goal, show, (a.pos != b.pos, *located(s, a), *located(s, b)))


OBLIGATIONS: tuple[Obligation, ...] = (
    Obligation("W0.truncation-is-floor", "W0",
               "for pos >= 0, ps >= 1 (int64), Triton's truncating // and % equal torch's floor // and %",
               truncation_is_floor),
    Obligation("W0.truncation-differs-below-zero", "W0",
               "for pos < 0 the conventions differ (vLLM #43810: -1 // 16 is 0 on the GPU, -1 in torch)",
               lambda: truncation_is_floor(non_negative=False), expect="counterexample"),
    Obligation("W1.in-bounds", "W1",
               "decode writes pos = seq_len-1, a live position in a column in [0, width), if 1 <= seq_len <= width*ps",
               decode_in_bounds),
    Obligation("T9.decode-needs-seq-len-1", "T9",
               "decode with seq_len 0 allowed: the clamped position 0 is not a live position of the row",
               lambda: decode_in_bounds(seq_min=0), expect="counterexample"),
    Obligation("T8.decode-needs-width", "T8",
               "decode without seq_len <= width*ps: the column reaches past the table",
               lambda: decode_in_bounds(check_width=False), expect="counterexample"),
    Obligation("W2.in-bounds", "W2",
               "verify: real rows (N <= seq_len <= width*ps) write seq_len-N+t, padded rows (seq_len 1) clamp"
               " to 0; every position live, every column in [0, width)", verify_in_bounds),
    Obligation("W4.in-bounds", "W4",
               "re-anchor: max(frontier-N+t, 0) is live, its column in [0, width), if 1 <= frontier <= width*ps",
               reanchor_in_bounds),
    Obligation("W3.in-bounds", "W3",
               "extend: each position in [prefix, seq_len), prefix >= 0, seq_len <= width*ps, has a column in"
               " [0, width)", extend_in_bounds),
    Obligation("T9.extend-needs-prefix-0", "T9",
               "extend with a negative prefix: a column below 0 passes the kernels' `col < width` mask",
               lambda: extend_in_bounds(prefix_min=None), expect="counterexample"),
    Obligation("T9.negative-position-leaves-page", "T9",
               "position -1: truncating // keeps column 0 but pos % ps is -1, a slot of another page",
               negative_position_off_page, expect="counterexample"),
    Obligation("W5.int64-exact", "W5",
               "the kernels' int64 product and sum never wrap, for any int32 entry >= -1, ps >= 1, pos >= 0",
               int64_exact),
    Obligation("W5.no-overflow", "W5",
               "with (page+1)*ps <= 2^31 the int64 location is in [0, 2^31) and the int32 store keeps it",
               store_exact),
    Obligation("W5.needed-for-the-store", "W5",
               "without W5 the int64 location of an int32 page id does not survive the int32 store",
               lambda: store_exact(with_w5=False, sink=False), expect="counterexample"),
    Obligation("W5.sink-keeps-int32", "W5",
               "the kernels take a page past W5 as page 0: for any int32 entry >= -1 the stored location is in"
               " [0, 2^31), so a non-debug call never stores a wrapped (negative or foreign) slot",
               lambda: store_exact(with_w5=False)),
    Obligation("W5.int32-product-wraps", "W5",
               "computed in int32 (vLLM #1486), page*ps + pos%ps wraps for an int32 page id past W5",
               int32_product, expect="counterexample"),
    Obligation("W0.decode-agrees", "W0",
               "the decode kernel's column and location are those of slot seq_len-1 of the row's slot list",
               decode_agrees),
    Obligation("W0.verify-agrees", "W0",
               "the verify kernel's columns and locations are the slots of max(seq_len-N+t, 0), padded rows too",
               verify_agrees),
    Obligation("W0.reanchor-agrees", "W0",
               "the re-anchor kernel's columns and locations are the slots of max(frontier-N+t, 0)",
               lambda: verify_agrees(clamp_for_all=True)),
    Obligation("W0.extend-agrees", "W0",
               "the extend kernel's column and location are the slot of each position in [prefix, seq_len)",
               extend_agrees),
    Obligation("D1.own-page", "D1",
               "a location read from a real page lands in it: loc // ps == page, loc % ps == pos % ps, not page 0",
               own_page),
    Obligation("D2.distinct-in-row", "D2",
               "two positions of one request get two locations when no page repeats in the row (T7)",
               lambda: _two_writes(same_row=True)),
    Obligation("T7.distinct-across-rows", "T7",
               "writes of two requests never share a location when write pages are private (T7)",
               lambda: _two_writes(same_row=False)),
    Obligation("W2.distinct-positions", "W2",
               "verify: the N tokens of a real row (seq_len >= N) get N distinct positions and locations",
               verify_distinct),
    Obligation("W2.needs-seq-len-n", "W2",
               "verify on a real row with seq_len < N: two tokens clamp to one position and share a slot",
               lambda: verify_distinct(real_rows_hold_n=False), expect="counterexample"),
)
