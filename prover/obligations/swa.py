"""T5 swa-front-holes: holes may cover exactly the columns before a row's first in-window key.

A sliding row with ``h`` front holes has page 0 in columns ``0 .. h-1``. reference/tables.py allows
them iff ``h * ps <= read_start``, where ``read_start = max(first_query - window + 1, 0)`` and the
first query is ``seq_len - 1`` (decode), ``seq_len - N`` (verify) or ``prefix`` (extend). A query at
position ``x`` reads the keys ``(x - window, x]``; its own write is the key ``x``.

Per mode: the condition is sufficient (no write and no in-window key falls in a hole), it is
necessary (with more holes the first query's first key is in one), and one token past it z3 shows a
needed position in a hole.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import z3

from kvtable.prover.obligations.base import Obligation
from kvtable.prover.solver.discharge import Query
from kvtable.prover.solver.encoding import bv_max, c_div, clamped_position, int32, int64, widen
from kvtable.prover.solver.preconditions import token_index


@dataclass(frozen=True)
class SlidingRow:
    """One mode's view of a sliding row: its queries, its first query and the clause preconditions."""

    query: z3.BitVecRef
    """A position this step writes and queries from (int64)."""
    first_query: z3.BitVecRef
    preconditions: tuple[z3.BoolRef, ...]


def _decode() -> SlidingRow:
    seq = int32("seq_len")
    one, zero = z3.BitVecVal(1, 32), z3.BitVecVal(0, 32)
    return SlidingRow(clamped_position(seq, one, zero), widen(seq) - 1, (seq >= 1,))


def _verify() -> SlidingRow:
    seq, n, t = int32("seq_len"), int32("N"), int32("t")
    return SlidingRow(clamped_position(seq, n, t), widen(seq) - widen(n), (*token_index(t, n), seq >= n))


def _extend() -> SlidingRow:
    prefix, seq, pos = int64("prefix"), int64("seq_len"), int64("pos")
    return SlidingRow(pos, prefix, (prefix >= 0, prefix <= pos, pos < seq))


MODES: dict[str, Callable[[], SlidingRow]] = {"decode": _decode, "verify": _verify, "extend": _extend}


def _setting(mode: str) -> tuple[SlidingRow, z3.BitVecRef, z3.BitVecRef, z3.BitVecRef, z3.BitVecRef, list]:
    row = MODES[mode]()
    ps, window, holes = int32("page_size"), int32("window"), int32("holes")
    read_start = bv_max(row.first_query - widen(window) + 1, widen(0))
    pre = [*row.preconditions, ps >= 1, window >= 1, holes >= 0]
    return row, ps, window, holes, read_start, pre


def _in_hole(pos: z3.BitVecRef, ps: z3.BitVecRef, holes: z3.BitVecRef) -> z3.BoolRef:
    return c_div(pos, widen(ps)) < widen(holes)


def sufficient(mode: str, *, slack: int = 0) -> Query:
    """With ``h*ps <= read_start + slack``, no key any query of the step reads lies in a hole."""
    row, ps, window, holes, read_start, pre = _setting(mode)
    key = int64("key")
    reads = z3.And(key >= 0, key > row.query - widen(window), key <= row.query)
    pre += [widen(holes) * widen(ps) <= read_start + slack, reads]
    show = (("query", row.query), ("read_start", read_start), ("key column", c_div(key, widen(ps))))
    return Query(tuple(pre), z3.Not(_in_hole(key, ps, holes)), show)


def necessary(mode: str) -> Query:
    """With ``h*ps > read_start``, the first query reads position read_start and it lies in a hole."""
    row, ps, window, holes, read_start, pre = _setting(mode)
    pre.append(widen(holes) * widen(ps) > read_start)
    first_reads_it = z3.And(read_start >= 0, read_start > row.first_query - widen(window),
                            read_start <= row.first_query)
    if mode == "extend":  # the first query is a written position only when the step writes something
        pre.append(row.first_query < int64("seq_len"))
    return Query(tuple(pre), z3.And(first_reads_it, _in_hole(read_start, ps, holes)),
                 (("read_start", read_start),))


OBLIGATIONS: tuple[Obligation, ...] = (
    Obligation("T5.decode-holes-safe", "T5",
               "decode: with h*ps <= read_start (first query seq_len-1) no write and no in-window key is in a hole",
               lambda: sufficient("decode")),
    Obligation("T5.decode-bound-is-weakest", "T5",
               "decode: with h*ps > read_start the first query's first key read_start is in a hole",
               lambda: necessary("decode")),
    Obligation("T5.decode-one-past", "T5", "decode: allowing h*ps = read_start + 1, a needed key falls in a hole",
               lambda: sufficient("decode", slack=1), expect="counterexample"),
    Obligation("T5.verify-holes-safe", "T5",
               "verify: with h*ps <= read_start (first query seq_len-N) no write and no in-window key is in a hole",
               lambda: sufficient("verify")),
    Obligation("T5.verify-bound-is-weakest", "T5",
               "verify: with h*ps > read_start the first query's first key read_start is in a hole",
               lambda: necessary("verify")),
    Obligation("T5.verify-one-past", "T5", "verify: allowing h*ps = read_start + 1, a needed key falls in a hole",
               lambda: sufficient("verify", slack=1), expect="counterexample"),
    Obligation("T5.extend-holes-safe", "T5",
               "extend: with h*ps <= read_start (first query prefix) no write and no in-window key is in a hole",
               lambda: sufficient("extend")),
    Obligation("T5.extend-bound-is-weakest", "T5",
               "extend: with h*ps > read_start the first query's first key read_start is in a hole",
               lambda: necessary("extend")),
    Obligation("T5.extend-one-past", "T5", "extend: allowing h*ps = read_start + 1, a needed key falls in a hole",
               lambda: sufficient("extend", slack=1), expect="counterexample"),
)
