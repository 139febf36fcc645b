"""Grouped locations (W1-W5, T6): every group of a batch in one ``group_locs`` call, state groups shed, and a
request idle past a group's columns beside requests that write."""

from __future__ import annotations

from dataclasses import replace

import torch
from hypothesis import strategies as st

from kvtable.conformance.calls import MODE_CLAUSE, check_group_locs, check_lone
from kvtable.conformance.core import Context, Property
from kvtable.conformance.properties.applies import LOCS, NeedsAny, calls, debug_or_plain
from kvtable.reference import Batch, GroupSpec
from kvtable.strategies import Case, cases, draw_case
from kvtable.strategies.batches import ceil_div
from kvtable.strategies.draws import between, pick

_GARBAGE_KINDS = ("holes", "int64", "1-D")
_STATE = GroupSpec("state9", "state", 0)


def _grouped(ctx: Context, case: Case) -> None:
    check_group_locs(ctx, ctx.backend, case, MODE_CLAUSE[case.batch.mode])


def check_int32_locs(ctx: Context, case: Case) -> None:
    """W5: the case's locations from the mode's grouped and lone calls, each where the backend has it (near
    2^31 - 1 they stay exact; past a page size of 2^30 every call refuses)."""
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


@st.composite
def _idle_row_past_width(draw: st.DrawFn) -> Case:
    """Extend over two groups of different reach: one request with extend 0 whose prefix lies past a group's
    columns (it writes and needs nothing: T8 asks nothing of it) beside requests that write."""
    sizes = [pick(draw, (1, 2, 4)) for _ in range(2)]
    rows = draw(between(2, 3))
    idle = draw(between(0, rows - 1))
    prefix = [draw(between(0, 4)) for _ in range(rows)]
    extend = [0 if r == idle else draw(between(1, 4)) for r in range(rows)]
    needed = [max(ceil_div(p + e, ps) for p, e in zip(prefix, extend, strict=True) if e) for ps in sizes]
    widths = [need + draw(between(0, 1)) for need in needed]
    prefix[idle] = min(w * ps for w, ps in zip(widths, sizes, strict=True)) + draw(between(1, 6))
    specs = tuple(GroupSpec(f"full{g}", "full", ps) for g, ps in enumerate(sizes))
    tables = {s.group_id: [list(range(10 + 10 * r, 10 + 10 * r + w)) for r in range(rows)]
              for s, w in zip(specs, widths, strict=True)}
    return Case(specs, tables, Batch.extend(tuple(prefix), tuple(extend)))


def _idle_row_locs(ctx: Context, case: Case) -> None:
    """W3: the writing requests' locations in every group, as the reference gives them."""
    check_group_locs(ctx, ctx.backend, case, "W3")


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
             cases(big_pages=True), check_int32_locs, weight=2, not_applicable=NeedsAny(LOCS)),
    Property("group_locs/state-shed", "T6", "state tables (int64, 1-D, holes) are never read, in debug mode too",
             _state_garbage(), _state_shed, needs=_GROUP_LOCS),
    Property("group_locs/idle-row-past-width", "W3", "extend over groups of different reach: a request with "
             "extend 0 past a group's columns writes nothing and leaves the others' locations as they are",
             _idle_row_past_width(), _idle_row_locs, needs=_GROUP_LOCS),
)
