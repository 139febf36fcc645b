"""Near-valid inputs (T1-T9, W2, W5): refused with a ContractViolation naming the clause and the offending entry.

Cheap breaches (shapes, dtypes, CPU-mirror lengths) must be refused in any mode; breaches that need
the table contents read back only by the backend built with ``debug=True``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import strategies as st

from kvtable.conformance.calls import check_group_locs, lone_call
from kvtable.conformance.checks import expect_raises, judge
from kvtable.conformance.checks import reference_outcome as outcome
from kvtable.conformance.core import Context, Property
from kvtable.conformance.levels import STRICTNESS
from kvtable.conformance.properties.applies import LONE, BreachesHeld, NeedsAny, calls
from kvtable.reference import GroupSpec
from kvtable.strategies import Broken, Case, CaseOptions, broken_cases, draw_case
from kvtable.strategies.draws import BOOLEANS, between


def _expect_broken(ctx: Context, backend: Any, b: Broken) -> None:
    if b.clause == "W2" and ctx.profile.clamp_short_verify:
        check_group_locs(ctx, backend, b.case, "W2")  # this profile clamps instead of raising
        return
    expect_raises(b.clause, f"group_locs on {b.how}",
                  lambda: backend.group_locs(list(b.case.specs), b.case.tensors(), b.case.batch,
                                             tail_pad=b.case.tail_pad), where=b.where)


_CHEAP_CLAUSES = frozenset({"T1", "T8", "T9", "W2"})
"""The clauses a lone call can see without reading a table back (T9: lengths on the CPU cost no sync)."""


def _rejects_cheap(ctx: Context, b: Broken) -> None:
    """group_locs refuses the breach; so do the lone-table calls a malformed tensor or CPU length reaches
    (``lone_call`` hands decode, verify and re-anchor their lengths as a CPU tensor, extend its mirrors); each
    only where the backend has it."""
    grouped, lone = calls(ctx, b.case.batch.mode)
    if grouped:
        _expect_broken(ctx, ctx.backend, b)
    attention = {s.group_id for s in b.case.attention}
    if not lone:
        return
    if b.clause == "T1":
        for gid in sorted(set(b.case.raw) & attention):  # a malformed tensor is T1 for every call taking it
            what, _, call = lone_call(ctx, ctx.backend, b.case, gid)
            expect_raises("T1", f"{what} on {b.how}", call)
    else:  # lone calls get the lengths as CPU mirrors (extend) or a CPU tensor: T8/T9/W2 cost no sync there either
        for gid in sorted(attention & set(b.case.tables)):
            what, expected, call = lone_call(ctx, ctx.backend, b.case, gid)
            if expected.clause in _CHEAP_CLAUSES and not (expected.clause == "W2" and ctx.profile.clamp_short_verify):
                judge(b.clause, f"{what} on {b.how}", expected, call, lambda _g, _e: None)


def _rejects_debug(ctx: Context, b: Broken) -> None:
    _expect_broken(ctx, ctx.debug_backend, b)


def _rejects_lone(ctx: Context, b: Broken) -> None:
    """Debug mode: where the reference's lone-table function rejects the table, the backend's does too."""
    calls(ctx, b.case.batch.mode, group=False)
    tensors = b.case.tensors()
    for spec in b.case.attention:
        if spec.group_id not in tensors:
            continue
        what, expected, call = lone_call(ctx, ctx.debug_backend, b.case, spec.group_id)
        if expected.raised and not (expected.clause == "W2" and ctx.profile.clamp_short_verify):
            judge(expected.clause or "T4", f"{what} on {b.how}", expected, call, lambda _g, _e: None)


@st.composite
def _bad_n(draw: st.DrawFn) -> tuple[Case, int]:
    return draw_case(draw, CaseOptions(modes=("verify", "reanchor"))), draw(between(-2, 0))


def _rejects_n(ctx: Context, arg: tuple[Case, int]) -> None:
    case, n = arg
    calls(ctx, case.batch.mode, group=False)
    bad = replace(case, batch=replace(case.batch, n=n))
    for spec in case.attention:
        what, expected, call = lone_call(ctx, ctx.backend, bad, spec.group_id)
        judge(expected.clause or "W2", f"{what} with n={n}", expected, call, lambda _g, _e: None)


@st.composite
def _bad_actual_bs(draw: st.DrawFn) -> tuple[Case, int]:
    case = draw_case(draw, CaseOptions(modes=("verify",)))
    bs = case.batch.bs
    return case, draw(between(bs + 1, bs + 3)) if draw(BOOLEANS) else draw(between(-3, -1))


def _rejects_actual_bs(ctx: Context, arg: tuple[Case, int]) -> None:
    """T9: ``verify_locs`` with ``actual_bs`` outside ``[0, bs]`` is refused (no ``Batch`` can even hold it)."""
    case, actual = arg
    seq, n = list(case.batch.seq_lens), case.batch.n

    def check(spec: GroupSpec) -> None:
        gid, ps = spec.group_id, spec.block_granularity
        expected = outcome(lambda: ctx.profile.verify_locs(case.tables[gid], seq, ps, n, actual))
        assert expected.clause == "T9", f"the reference accepts actual_bs={actual} for bs {len(seq)}"
        judge("T9", f"verify_locs[{gid}] with actual_bs={actual} for bs {len(seq)}", expected,
              lambda: ctx.backend.verify_locs(case.tensors()[gid], case.seq_tensor(), ps, n, actual_bs=actual),
              lambda _g, _e: None)

    for spec in case.attention:
        check(spec)


def _cheap(clause: str) -> st.SearchStrategy[Broken]:
    return broken_cases([clause], cheap=True)


def _debug(clause: str) -> st.SearchStrategy[Broken]:
    return broken_cases([clause])


_CHEAP = "breaches visible without a device sync are refused in any mode, naming the clause and the entry"
_DEBUG = "debug mode refuses every breach of the clause, naming it and the offending group, row and column"
PROPERTIES = (
    Property("rejects/n", "W2", "tokens per request < 1 is refused (W2 verify, W4 re-anchor)",
             _bad_n(), _rejects_n, tier=STRICTNESS,
             not_applicable=BreachesHeld(("W2",), methods=("verify_locs", "reanchor_locs"))),
    Property("rejects/actual-bs", "T9", "verify_locs with actual_bs outside [0, bs] is refused in any mode",
             _bad_actual_bs(), _rejects_actual_bs, tier=STRICTNESS, needs=("verify_locs",),
             not_applicable=BreachesHeld(("T9",))),
    Property("rejects-cheap/T1", "T1", "T1 " + _CHEAP, _cheap("T1"), _rejects_cheap, tier=STRICTNESS,
             not_applicable=BreachesHeld(("T1",), cheap=True)),
    Property("rejects-cheap/T8", "T8", "T8 " + _CHEAP, _cheap("T8"), _rejects_cheap, tier=STRICTNESS,
             not_applicable=BreachesHeld(("T8",), cheap=True)),
    Property("rejects-cheap/T9", "T9", "T9 " + _CHEAP, _cheap("T9"), _rejects_cheap, tier=STRICTNESS,
             not_applicable=BreachesHeld(("T9",), cheap=True)),
    Property("rejects-cheap/W2", "W2", "W2 " + _CHEAP, _cheap("W2"), _rejects_cheap, tier=STRICTNESS,
             not_applicable=BreachesHeld(("W2",), cheap=True)),
    Property("rejects/T1", "T1", "T1: " + _DEBUG, _debug("T1"), _rejects_debug, debug=True, tier=STRICTNESS,
             needs=("group_locs",), not_applicable=BreachesHeld(("T1",))),
    Property("rejects/T2", "T2", "T2: " + _DEBUG, _debug("T2"), _rejects_debug, debug=True, tier=STRICTNESS,
             needs=("group_locs",)),
    Property("rejects/T3", "T3", "T3: " + _DEBUG, _debug("T3"), _rejects_debug, debug=True, tier=STRICTNESS,
             needs=("group_locs",)),
    Property("rejects/T4", "T4", "T4: " + _DEBUG, _debug("T4"), _rejects_debug, debug=True, tier=STRICTNESS,
             needs=("group_locs",)),
    Property("rejects/T5", "T5", "T5: " + _DEBUG, _debug("T5"), _rejects_debug, debug=True, tier=STRICTNESS,
             needs=("group_locs",)),
    Property("rejects/T7", "T7", "T7: " + _DEBUG, _debug("T7"), _rejects_debug, debug=True, tier=STRICTNESS,
             needs=("group_locs",)),
    Property("rejects/T8", "T8", "T8: " + _DEBUG, _debug("T8"), _rejects_debug, debug=True, tier=STRICTNESS,
             needs=("group_locs",), not_applicable=BreachesHeld(("T8",))),
    Property("rejects/T9", "T9", "T9: " + _DEBUG, _debug("T9"), _rejects_debug, debug=True, tier=STRICTNESS,
             needs=("group_locs",), not_applicable=BreachesHeld(("T9",))),
    Property("rejects/W2", "W2", "W2: " + _DEBUG, _debug("W2"), _rejects_debug, debug=True, tier=STRICTNESS,
             needs=("group_locs",), not_applicable=BreachesHeld(("W2",))),
    Property("rejects/W5", "W5", "W5: " + _DEBUG, _debug("W5"), _rejects_debug, debug=True, tier=STRICTNESS,
             needs=("group_locs",)),
    Property("rejects/lone-table", "T4", "debug mode: lone-table calls refuse what the reference's do",
             broken_cases(["T4", "T8", "T9", "W2"], tail_pads=(-1,), padding=False), _rejects_lone, debug=True,
             tier=STRICTNESS, not_applicable=NeedsAny(tuple(LONE.values()))),
)
