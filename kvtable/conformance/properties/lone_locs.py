"""Lone-table locations (W1-W4): one group's table, one call per mode, equal to the reference element for element."""

from __future__ import annotations

from kvtable.conformance.calls import check_lone
from kvtable.conformance.core import Context, Property
from kvtable.strategies import Case, cases


def _lone(ctx: Context, case: Case) -> None:
    check_lone(ctx, ctx.backend, case)


PROPERTIES = (
    Property("decode_locs", "W1", "lone decode locations equal the reference (padded rows, both tail pads)",
             cases(modes=("decode",)), _lone, weight=3, needs=("decode_locs",)),
    Property("verify_locs", "W2", "lone verify locations, token-major, padded rows clamped at 0",
             cases(modes=("verify",)), _lone, weight=3, needs=("verify_locs",)),
    Property("reanchor_locs", "W4", "lone re-anchor locations, clamped at 0 for every row",
             cases(modes=("reanchor",)), _lone, weight=3, needs=("reanchor_locs",)),
    Property("extend_locs", "W3", "lone extend locations in request order (rows of length 0 included)",
             cases(modes=("extend",)), _lone, weight=3, needs=("extend_locs",)),
)
