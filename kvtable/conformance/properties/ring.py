"""Ring groups (R1-R3): ``ring_locs``' writes and reads equal the reference's through the profile, every write and
read stays in the request's own ring (the safety tier), and debug mode refuses a broken ring naming R1."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from kvtable.conformance.calls import loc_dtypes
from kvtable.conformance.checks import Mismatch, check_tensor, expect_raises, judge
from kvtable.conformance.checks import reference_outcome as outcome
from kvtable.conformance.core import Context, Property
from kvtable.conformance.levels import SAFETY, STRICTNESS
from kvtable.errors import Unsupported
from kvtable.strategies.ring import BrokenRing, RingCase, ring_any_cases, ring_broken_cases, ring_cases

_CASES = ring_cases()
_NEEDS = ("ring_locs",)


def _unsafe(ctx: Context, case: RingCase, writes: Any, reads: Any, what: str) -> None:
    """Raise the safety failure of the first write or read outside the request's ring, the sink, pad or sentinel."""
    bad = ctx.profile.ring_unsafe(case.table, writes, reads, case.prefix_lens, case.extend_lens, case.page_size,
                                  case.window, group="ring")
    if bad:
        first = bad[0]
        raise Mismatch("R1", f"{what}: {len(bad)} unsafe entries; first: row {first.row} entry {first.token} "
                       f"position {first.position} loc {first.loc}: {first.reason}", tier=SAFETY,
                       kind=f"unsafe ring {'read' if first.reason.startswith('read') else 'write'}: "
                            + re.sub(r"-?\d+", "N", first.reason)[:48])


def _slots_safe(ctx: Context, case: RingCase) -> None:
    try:
        got = ctx.backend.ring_locs(*case.args())
    except Unsupported:
        raise
    except Exception:  # noqa: BLE001 - a refusal writes nothing: safe (the other ring properties judge it)
        return
    if isinstance(got, tuple) and len(got) == 2 and all(hasattr(x, "tolist") for x in got):
        _unsafe(ctx, case, got[0], got[1], "ring_locs")


def _compare(ctx: Context, clause: str, what: str, case: RingCase, side: int) -> Callable[[Any, Any], None]:
    """Exact equality in the profile's dtype; a difference that leaves the ring is a safety failure first."""
    def compare(got: Any, want: Any) -> None:
        try:
            check_tensor(clause, what, got, want, device=ctx.device, dtypes=loc_dtypes(ctx))
        except Mismatch:
            if hasattr(got, "tolist"):
                _unsafe(ctx, case, got if side == 0 else [], got if side == 1 else [], what)
            raise

    return compare


def _writes(ctx: Context, case: RingCase) -> None:
    expected = outcome(lambda: ctx.profile.ring_write_locs(case.table, case.prefix_lens, case.extend_lens,
                                                           case.page_size, case.window))
    judge("R2", "ring_locs writes", expected, lambda: ctx.backend.ring_locs(*case.args())[0],
          _compare(ctx, "R2", "ring_locs writes", case, 0))


def _reads(ctx: Context, case: RingCase) -> None:
    expected = outcome(lambda: ctx.profile.ring_read_locs(case.table, case.prefix_lens, case.extend_lens,
                                                          case.page_size, case.window))
    judge("R3", "ring_locs reads", expected, lambda: ctx.backend.ring_locs(*case.args())[1],
          _compare(ctx, "R3", "ring_locs reads", case, 1))


def _rejects(ctx: Context, broken: BrokenRing) -> None:
    """Debug mode refuses the broken ring naming R1 and an entry of the breach, and so does the reference that
    judges every other ring property (a reference that let the breach through would pass it as valid)."""
    case, where = broken.case, frozenset((None, row, col) for row, col in broken.where)
    expect_raises("R1", f"the reference's ring writes on a ring with {broken.how}",
                  lambda: ctx.profile.ring_write_locs(case.table, case.prefix_lens, case.extend_lens, case.page_size,
                                                      case.window), where=where)
    backend = ctx.debug_backend
    expect_raises("R1", f"ring_locs on a ring with {broken.how}", lambda: backend.ring_locs(*case.args()), where=where)


PROPERTIES = (
    Property("ring/slots-safe", "R1", "every ring write is its token's own slot, the sink or the pad slot; every read "
             "a sentinel, the sink or a slot of the request's own ring (valid and broken rings)", ring_any_cases(),
             _slots_safe, weight=2, tier=SAFETY, needs=_NEEDS),
    Property("ring/rejects", "R1", "debug mode and the reference refuse a ring with page 0 in a used column, a page "
             "of another ring, too few columns, or a real page past ceil(window / ps) columns, naming R1 and the "
             "entry", ring_broken_cases(), _rejects, debug=True,
             tier=STRICTNESS, needs=_NEEDS),
    Property("ring/writes", "R2", "ring writes: the last min(q, window) tokens at their R1 slots, earlier ones at the "
             "sink or pad slot", _CASES, _writes, weight=2, needs=_NEEDS),
    Property("ring/reads", "R3", "ring reads: the first query's cached window at R1 slots, then one sentinel per new "
             "token", _CASES, _reads, weight=2, needs=_NEEDS),
)
