"""Cheap breaches (T1, T8, T9, W2: shapes, dtypes, CPU-mirror lengths) refused in any mode, debug or not: a
backend sees them without a device sync, so it must name the clause and the entry without ``debug=True``."""

from __future__ import annotations

from hypothesis import strategies as st

from kvtable.conformance.calls import lone_backend_call, lone_call
from kvtable.conformance.checks import expect_raises, judge
from kvtable.conformance.core import Context, Property
from kvtable.conformance.levels import STRICTNESS
from kvtable.conformance.properties.applies import BreachesHeld, calls
from kvtable.conformance.properties.rejects import expect_broken
from kvtable.strategies import Broken, broken_cases

_CHEAP_CLAUSES = frozenset({"T1", "T8", "T9", "W2"})
"""The clauses a lone call can see without reading a table back (T9: lengths on the CPU cost no sync)."""


def _rejects_cheap(ctx: Context, b: Broken) -> None:
    """group_locs refuses the breach; so do the lone-table calls a malformed tensor or CPU length reaches
    (``lone_call`` hands decode, verify and re-anchor their lengths as a CPU tensor, extend its mirrors); each
    only where the backend has it."""
    grouped, lone = calls(ctx, b.case.batch.mode)
    if grouped:
        expect_broken(ctx, ctx.backend, b)
    attention = {s.group_id for s in b.case.attention}
    if not lone:
        return
    if b.clause == "T1":
        for gid in sorted(set(b.case.raw) & attention):  # a malformed tensor is T1 for every call taking it
            what, call = lone_backend_call(ctx, ctx.backend, b.case, gid)
            expect_raises("T1", f"{what} on {b.how}", call)
    else:  # lone calls get the lengths as CPU mirrors (extend) or a CPU tensor: T8/T9/W2 cost no sync there either
        for gid in sorted(attention & set(b.case.tables)):
            what, expected, call = lone_call(ctx, ctx.backend, b.case, gid)
            if expected.clause in _CHEAP_CLAUSES and not (expected.clause == "W2" and ctx.profile.clamp_short_verify):
                judge(b.clause, f"{what} on {b.how}", expected, call, lambda _g, _e: None)


def _cheap(clause: str) -> st.SearchStrategy[Broken]:
    return broken_cases([clause], cheap=True)


_CHEAP = "breaches visible without a device sync are refused in any mode, naming the clause and the entry"
PROPERTIES = (
    Property("rejects-cheap/T1", "T1", "T1 " + _CHEAP, _cheap("T1"), _rejects_cheap, tier=STRICTNESS,
             not_applicable=BreachesHeld(("T1",), cheap=True)),
    Property("rejects-cheap/T8", "T8", "T8 " + _CHEAP, _cheap("T8"), _rejects_cheap, tier=STRICTNESS,
             not_applicable=BreachesHeld(("T8",), cheap=True)),
    Property("rejects-cheap/T9", "T9", "T9 " + _CHEAP, _cheap("T9"), _rejects_cheap, tier=STRICTNESS,
             not_applicable=BreachesHeld(("T9",), cheap=True)),
    Property("rejects-cheap/W2", "W2", "W2 " + _CHEAP, _cheap("W2"), _rejects_cheap, tier=STRICTNESS,
             not_applicable=BreachesHeld(("W2",), cheap=True)),
)
