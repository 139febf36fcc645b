"""R1-R3: the ring's index arithmetic, over int64 positions and int32 windows and page sizes (torch's floor ops).

Position ``p >= 0`` lives at ring index ``i = p % window``, column ``i // ps``, offset ``i % ps`` (R1). z3 shows
the index stays inside the ring's ``ceil(window / ps)`` pages, that a window's positions never share a slot,
that a write evicts only the token ``window`` positions back (R2), and that the reads of R3 are exactly the
cached keys of the first query's window. With the index shifted by one (``(p + 1) % window``), z3 finds the
write missing the slot R3 reads its token from.
"""

from __future__ import annotations

import z3

from kvtable.prover.obligations.base import Obligation
from kvtable.prover.solver.discharge import Query
from kvtable.prover.solver.encoding import floor_div, floor_mod, int32, int64, widen


def _setting() -> tuple[z3.BitVecRef, z3.BitVecRef, list[z3.BoolRef]]:
    """The window and page size as int64 values of int32 arguments, both >= 1."""
    window, ps = int32("window"), int32("page_size")
    return widen(window), widen(ps), [window >= 1, ps >= 1]


def _index(pos: z3.BitVecRef, window: z3.BitVecRef) -> z3.BitVecRef:
    return floor_mod(pos, window)


def in_bounds() -> Query:
    """R1: ``0 <= i < window``, ``col = i // ps < ceil(window / ps)``, ``0 <= i % ps < ps`` and ``col*ps + off = i``."""
    window, ps, pre = _setting()
    pos = int64("pos")
    index = _index(pos, window)
    col, off = floor_div(index, ps), floor_mod(index, ps)
    pages = floor_div(window + ps - 1, ps)
    goal = z3.And(index >= 0, index < window, col >= 0, col < pages, off >= 0, off < ps, col * ps + off == index)
    return Query((*pre, pos >= 0), goal, (("index", index), ("col", col), ("pages", pages)))


def distinct() -> Query:
    """R1: two positions less than a window apart never share a ring index."""
    window, _, pre = _setting()
    p, q = int64("p"), int64("q")
    return Query((*pre, p >= 0, q > p, q - p < window), _index(p, window) != _index(q, window),
                 (("index p", _index(p, window)), ("index q", _index(q, window))))


def evicts_left_token() -> Query:
    """R2: the write of ``p >= window`` takes the slot of ``p - window`` and of no position in ``(p - window, p)``."""
    window, _, pre = _setting()
    p, other = int64("p"), int64("other")
    goal = z3.And(_index(p, window) == _index(p - window, window),
                  z3.Implies(z3.And(other > p - window, other < p), _index(other, window) != _index(p, window)))
    return Query((*pre, p >= window), goal, (("index", _index(p, window)),))


def reads_cover_window() -> Query:
    """R3: a key ``k >= 0`` is among the reads ``[prefix - min(prefix, window - 1), prefix)`` iff it lies in the first
    query's window before it, ``(prefix - window, prefix)``."""
    window, _, pre = _setting()
    prefix, key = int64("prefix"), int64("key")
    cached = z3.If(prefix < window - 1, prefix, window - 1)
    read = z3.And(key >= prefix - cached, key < prefix)
    in_window = z3.And(key >= 0, key > prefix - window, key < prefix)
    return Query((*pre, prefix >= 0, prefix < 2**62, key >= 0), read == in_window, (("cached", cached),))


def shifted_index() -> Query:
    """R2 with the index ``(p + 1) % window``: the write of ``p`` lands where R3 reads ``p`` from (expected to fail)."""
    window, _, pre = _setting()
    p = int64("p")
    return Query((*pre, p >= 0, p < 2**62), _index(p + 1, window) == _index(p, window),
                 (("written index", _index(p + 1, window)), ("read index", _index(p, window))))


OBLIGATIONS: tuple[Obligation, ...] = (
    Obligation("R1.ring-index-in-bounds", "R1",
               "position p >= 0 lands at ring index p % window < window, in column < ceil(window / ps), offset < ps",
               in_bounds),
    Obligation("R1.window-slots-distinct", "R1", "positions less than a window apart never share a ring index",
               distinct),
    Obligation("R2.write-evicts-only-left-token", "R2",
               "the write of p takes the slot of p - window, the token that left the window, and no other's",
               evicts_left_token),
    Obligation("R3.reads-cover-window", "R3",
               "the reads [prefix - min(prefix, window - 1), prefix) are exactly the cached keys of the first "
               "query's window", reads_cover_window),
    Obligation("R2.shifted-index-misses-own-slot", "R2",
               "with the index (p + 1) % window the write of p misses the slot R3 reads p from",
               shifted_index, expect="counterexample"),
)
