"""Grouped locations (W1-W5, T6, D1): every group of a batch in one ``group_locs`` call, state groups shed."""

from __future__ import annotations

from dataclasses import replace

import torch
from hypothesis import strategies as st

from kvtable.conformance.calls import MODE_CLAUSE, check_group_locs, check_lone
from kvtable.conformance.core import Context, Property
from kvtable.conformance.properties.applies import LOCS, NeedsAny, calls, debug_or_plain
from kvtable.reference import GroupSpec
from kvtable.strategies import Case, cases, draw_case
from kvtable.strategies.draws import pick

_GARBAGE_KINDS = ("holes", "int64", "1-D")
_STATE = GroupSpec("state9", "state", 0)


def _grouped(ctx: Context, case: Case) -> None:
    check_group_locs(ctx, ctx.backend, case, MODE_CLAUSE[case.batch.mode])


def _int32_edge(ctx: Context, case: Case) -> None:
    grouped, lone = calls(ctx, case.batch.mode)
    if grouped:
        check_group_locs(ctx, ctx.backend, case, "W5")
    if lone:
        check_lone(ctx, ctx.backend, case, "W5")


@st.composite
def _state_garbage(draw: st.DrawFn) -> Case:
    """A valid case whose state group's table is garbage: int64, 1-D, or full of holes and pads."""
    case = draw_case(draw)
    kind = pick(draw, _GARBAGE_KINDS)
    garbage = [[0, -1, 3, 3]] * case.batch.bs
    raw = {}
    if kind == "int64":
        raw[_STATE.group_id] = torch.tensor(garbage, dtype=torch.int64)
    elif kind == "1-D":
        raw[_STATE.group_id] = torch.tensor([0, -1, 3], dtype=torch.int32)
    return replace(case, specs=(*case.specs, _STATE), tables={**case.tables, _STATE.group_id: garbage}, raw=raw)


def _state_shed(ctx: Context, case: Case) -> None:
    """The case is valid but for its state table, so any refusal, crash or wrong value is a T6 breach (in debug
    mode where the backend has one, else in its only mode)."""
    check_group_locs(ctx, debug_or_plain(ctx), case, "T6")


def _debug_accepts(ctx: Context, case: Case) -> None:
    """Debug mode accepts every valid batch (a refusal names the clause it invoked) with the same locations.

    The lone-table calls take no tail-pad argument, so they are held to the default pad -1 only.
    """
    grouped, lone = calls(ctx, case.batch.mode)
    if grouped:
        check_group_locs(ctx, ctx.debug_backend, case, MODE_CLAUSE[case.batch.mode])
    if lone and case.tail_pad == -1 and (case.batch.mode == "verify" or case.batch.live_rows == case.batch.bs):
        check_lone(ctx, ctx.debug_backend, case)


_GROUP_LOCS = ("group_locs",)
PROPERTIES = (
    Property("group_locs/decode", "W1", "decode locations of every group at its own B in one call (T6: state shed)",
             cases(modes=("decode",)), _grouped, weight=4, needs=_GROUP_LOCS),
    Property("group_locs/verify", "W2", "verify locations of every group at its own B in one call (T6: state shed)",
             cases(modes=("verify",)), _grouped, weight=4, needs=_GROUP_LOCS),
    Property("group_locs/reanchor", "W4", "reanchor locations of every group at its own B in one call "
             "(T6: state shed)", cases(modes=("reanchor",)), _grouped, weight=4, needs=_GROUP_LOCS),
    Property("group_locs/extend", "W3", "extend locations of every group at its own B in one call (T6: state shed)",
             cases(modes=("extend",)), _grouped, weight=4, needs=_GROUP_LOCS),
    Property("group_locs/int32-edge", "W5", "pages just under 2^31 / B: locations near 2^31 - 1 stay exact",
             cases(big_pages=True), _int32_edge, weight=2, not_applicable=NeedsAny(LOCS)),
    Property("group_locs/state-shed", "T6", "state tables (int64, 1-D, holes) are never read, in debug mode too",
             _state_garbage(), _state_shed, needs=_GROUP_LOCS),
    Property("debug/accepts-valid", "D1", "debug mode accepts every valid batch (either tail pad) and returns "
             "the same locations", cases(), _debug_accepts, debug=True, weight=2, not_applicable=NeedsAny(LOCS)),
)
