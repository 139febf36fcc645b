"""CUDA-graph replay (G4) and the kernels' masked table read: in bounds by construction, for any seq_len.

The Triton interpreter does not bounds-check memory (an unmasked out-of-range lane reads neighbouring
host memory or crashes; only masked-off lanes are skipped), so a test run cannot show that no lane reads
outside the table; these proofs do, over all int32 inputs.
"""

from __future__ import annotations

import z3

from kvtable.prover.obligations.base import Obligation
from kvtable.prover.solver.discharge import Query
from kvtable.prover.solver.encoding import Lane, RowSetting, int32, int64, widen
from kvtable.prover.solver.preconditions import geometry, token_index


def _show(lane: Lane) -> tuple[tuple[str, z3.ExprRef], ...]:
    return (("pos", lane.pos), ("col", lane.col), ("loads", lane.loads), ("loc", lane.out))


def _in_bounds_or_sunk(lane: Lane, s: RowSetting) -> z3.BoolRef:
    """A loading lane reads a column in [0, width); a masked lane writes into the null page."""
    null_page = z3.And(lane.out >= 0, lane.out < s.page_size)
    return z3.And(z3.Implies(lane.loads, z3.And(lane.col >= 0, lane.col < widen(s.width))),
                  z3.Implies(z3.Not(lane.loads), null_page))


def dummy_rows() -> Query:
    """T2/G3 fill padded rows with page 0 and replay them at seq_len 1."""
    s = RowSetting.fresh()
    n, t = int32("N"), int32("t")
    lane = s.stacked(z3.BitVecVal(1, 32), n, t)
    pre = (*geometry(s), *token_index(t, n), s.entry(lane) == 0)
    goal = z3.And(lane.pos == 0, lane.col == 0, lane.loads, lane.out == 0)
    return Query(pre, goal, _show(lane))


def stacked_masked_load() -> Query:
    s = RowSetting.fresh()
    seq, n, t = int32("seq_len"), int32("N"), int32("t")
    lane = s.stacked(seq, n, t)
    return Query((*geometry(s), *token_index(t, n)), _in_bounds_or_sunk(lane, s), _show(lane))


def extend_masked_load() -> Query:
    s = RowSetting.fresh()
    lane = s.at(int64("pos"))
    return Query((*geometry(s), lane.pos >= 0), _in_bounds_or_sunk(lane, s), _show(lane))


def pad_sinks() -> Query:
    """A stale seq_len that reaches the tail pad (-1, or 0) writes the null page, never a real page."""
    s = RowSetting.fresh()
    seq, n, t = int32("seq_len"), int32("N"), int32("t")
    lane = s.stacked(seq, n, t)
    pre = (*geometry(s), *token_index(t, n), s.entry(lane) >= -1, s.entry(lane) <= 0)
    return Query(pre, z3.And(lane.out >= 0, lane.out < s.page_size), _show(lane))


OBLIGATIONS: tuple[Obligation, ...] = (
    Obligation("G4.dummy-rows-read-column-0", "G4",
               "a padded row (seq_len 1, all page 0) reads column 0 and writes slot 0 of page 0 for every N",
               dummy_rows),
    Obligation("G4.masked-load-in-bounds", "G4",
               "stacked_locs: for every int32 seq_len (stale ones too) a loading lane reads a column in"
               " [0, width), a masked one writes the null page", stacked_masked_load),
    Obligation("G4.pad-writes-null-page", "G4",
               "a lane that reads the tail pad (-1 or 0) writes into page 0, whatever the seq_len",
               pad_sinks),
    Obligation("W3.masked-load-in-bounds", "W3",
               "stacked_extend_locs: for every position >= 0 a loading lane reads a column in [0, width),"
               " a masked one writes the null page", extend_masked_load),
)
