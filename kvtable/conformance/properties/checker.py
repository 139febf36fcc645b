"""The strong debug write checker (D1, D2): correct eager locations accepted, each corruption refused by its clause."""

from __future__ import annotations

from collections.abc import Callable

import torch
from hypothesis.strategies import SearchStrategy

from kvtable.conformance.checks import Outcome, judge
from kvtable.conformance.core import Context, Property
from kvtable.conformance.levels import STRICTNESS
from kvtable.strategies import WriteLocCase, as_tensor, write_loc_cases


def _checker(clause: str) -> Callable[[Context, WriteLocCase], None]:
    def check(ctx: Context, wc: WriteLocCase) -> None:
        expected = Outcome(clause=wc.clause) if wc.clause else Outcome(value=None)
        judge(wc.clause or clause, f"check_write_locs ({wc.how})", expected,
              lambda: ctx.backend.check_write_locs(as_tensor(wc.table), torch.tensor(wc.locs, dtype=torch.int32),
                                                   wc.batch, wc.page_size, group=wc.group),
              lambda _g, _e: None)

    return check


def _corrupted(how: str) -> SearchStrategy[WriteLocCase]:
    return write_loc_cases(corrupt=True, corruptions=(how,))


_NEEDS = ("check_write_locs",)
_SUMMARY = "the strong checker refuses eager locations with one corruption: "
_D1, _D2 = _checker("D1"), _checker("D2")
PROPERTIES = (
    Property("checker/accepts", "D1", "the strong checker accepts correct eager locations",
             write_loc_cases(corrupt=False), _D1, needs=_NEEDS),
    Property("checker/null-page", "D1", _SUMMARY + "null page", _corrupted("null page"), _D1,
             tier=STRICTNESS, needs=_NEEDS),
    Property("checker/write-through-a-hole", "D1", _SUMMARY + "write through a hole",
             _corrupted("write through a hole"), _D1, tier=STRICTNESS, needs=_NEEDS),
    Property("checker/foreign-page", "D1", _SUMMARY + "foreign page", _corrupted("foreign page"), _D1,
             tier=STRICTNESS, needs=_NEEDS),
    Property("checker/wrong-column", "D1", _SUMMARY + "wrong column", _corrupted("wrong column"), _D1,
             tier=STRICTNESS, needs=_NEEDS),
    Property("checker/wrong-offset", "D1", _SUMMARY + "wrong offset", _corrupted("wrong offset"), _D1,
             tier=STRICTNESS, needs=_NEEDS),
    Property("checker/count", "D1", _SUMMARY + "count", _corrupted("count"), _D1, tier=STRICTNESS, needs=_NEEDS),
    Property("checker/shared-write-page", "D2", _SUMMARY + "shared write page", _corrupted("shared write page"),
             _D2, tier=STRICTNESS, needs=_NEEDS),
    Property("checker/clamped-re-anchor", "D2", _SUMMARY + "clamped re-anchor", _corrupted("clamped re-anchor"),
             _D2, tier=STRICTNESS, needs=_NEEDS),
)
