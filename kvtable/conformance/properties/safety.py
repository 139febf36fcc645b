"""The safety tier (any input): for broken or stale input a non-debug backend may refuse (any exception) or
return anything, but every location it returns must be allowed by ``kvtable.reference.safety``: the
token's own slot, a slot of the sink page 0, or the profile's pad slot. Never another request's page,
never a negative slot other than the pad.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kvtable import reference
from kvtable.conformance.calls import check_safe, decode_padding, lone_backend_call, token_slots
from kvtable.conformance.checks import INT32_POOL, Mismatch, latent
from kvtable.conformance.core import Context, Property
from kvtable.conformance.levels import SAFETY
from kvtable.conformance.properties.applies import LOCS, NeedsAny, calls
from kvtable.errors import Unsupported
from kvtable.strategies import Case, cases
from kvtable.strategies.unsafe import UNSAFE_KINDS, UnsafeCase, unsafe_cases

_ANY_LOCS = NeedsAny(LOCS)


def scrubbed_dummy_rows(ctx: Context) -> str | None:
    """N/A where the profile's engine holds its padded rows at page 0 (T2: the backend may read them)."""
    if ctx.profile.scrubs_dummy_rows:
        return (f"profile {ctx.profile.name!r} scrubs padded rows to page 0 (T2), so a backend may read them; "
                "profiles whose dummy rows are never read (vllm, tokenspeed) run this property")
    return _ANY_LOCS(ctx)


def narrow_tables(ctx: Context) -> str | None:
    """N/A where the profile's engine keeps one table as wide as its context (``Domain.narrow_tables``)."""
    if not ctx.profile.domain.narrow_tables:
        return (f"profile {ctx.profile.name!r}: its engine's table is as wide as the context and admission keeps "
                "every request inside it, so no row reaches past its table (T8)")
    return _ANY_LOCS(ctx)


def _refused(call: Callable[[], Any]) -> tuple[bool, Any]:
    """Run a backend call; any exception but ``Unsupported`` is a refusal (safe)."""
    try:
        return False, call()
    except Unsupported:
        raise
    except Exception:  # noqa: BLE001 - any refusal is safe; what it is called is the strictness tier's business
        return True, None


def _judge(ctx: Context, clause: str, what: str, u: UnsafeCase, gid: str, got: Any, actual_bs: int | None) -> None:
    check_safe(ctx, clause, f"{what} on {u.kind} ({u.how})", u.case, gid, got, actual_bs)


def _check(clause: str) -> Callable[[Context, UnsafeCase], None]:
    def check(ctx: Context, u: UnsafeCase) -> None:
        case = u.case
        grouped, lone = calls(ctx, case.batch.mode)
        if grouped:
            refused, got = _refused(lambda: ctx.backend.group_locs(list(case.specs), case.tensors(), case.batch,
                                                                   tail_pad=case.tail_pad))
            if not refused and isinstance(got, dict):
                for gid in sorted(set(got) & {s.group_id for s in case.attention}):
                    _judge(ctx, clause, f"group_locs[{gid!r}]", u, gid, got[gid], case.batch.live_rows)
        if not lone:
            return
        mode = case.batch.mode
        actual_bs = (case.batch.actual_bs if mode == "verify" else
                     decode_padding(ctx.backend, case.batch.actual_bs) if mode == "decode" else None)
        for spec in case.attention:
            what, call = lone_backend_call(ctx, ctx.backend, case, spec.group_id)
            refused, got = _refused(call)
            if not refused:
                _judge(ctx, clause, what, u, spec.group_id, got, actual_bs)

    return check


def _judge_sees_other_pages(ctx: Context, case: Case) -> None:
    """The safety oracle itself: the reference's own extend locations pass it, and each token's write moved to the
    same offset of another real page of its row's table (the lowest and the highest) is flagged, at that token."""
    tokens = token_slots(case, None)
    for spec in case.attention:
        gid, ps, table = spec.group_id, spec.block_granularity, case.tables[spec.group_id]
        locs = reference.batch_locs(table, case.batch, ps, group=gid)
        if bad := reference.unsafe_writes(table, locs, tokens, ps, group=gid):
            raise Mismatch("W3", f"the safety oracle flags the reference's own locations of {gid!r}: {bad[0]}",
                           tier=SAFETY, kind="oracle flags a correct write")
        others = [sorted({p for p in table[row] if p > 0} - {loc // ps}) for (row, _), loc in
                  zip(tokens, locs, strict=True)]
        # every token moved at once, to its lowest (then its highest) other page: the oracle judges each output entry
        # by its own token alone, so one call over the whole batch flags each move (not one call per token)
        flagged = [{w.token for w in reference.unsafe_writes(
            table, [pages[end] * ps + loc % ps if pages else loc for pages, loc in zip(others, locs, strict=True)],
            tokens, ps, group=gid)} for end in (0, -1)]
        for k, ((row, _), loc, pages) in enumerate(zip(tokens, locs, others, strict=True)):
            for moves, page in zip(flagged, pages[:1] + pages[-1:], strict=False):
                if k not in moves:
                    raise Mismatch("W3", f"the safety oracle misses token {k} of {gid!r} (row {row}) written to "
                                   f"page {page} instead of page {loc // ps}", tier=SAFETY,
                                   kind="oracle misses another page")


_SUMMARY = "non-debug calls on {} write only own slots, the sink or the pad slot (or refuse)"
PROPERTIES = (
    Property("safety/garbage-dummy-rows", "T2", _SUMMARY.format("garbage in dummy rows"),
             unsafe_cases(UNSAFE_KINDS[2]), _check("T2"), tier=SAFETY, not_applicable=scrubbed_dummy_rows),
    Property("safety/stale-seq-len", "T4", _SUMMARY.format("a stale seq_len landing on the tail pad inside the "
             "width"), unsafe_cases(UNSAFE_KINDS[0]), _check("T4"), weight=2, tier=SAFETY,
             not_applicable=_ANY_LOCS),
    Property("safety/pad-inside", "T4", _SUMMARY.format("-1 inside the live range (decode, verify, extend)"),
             unsafe_cases(UNSAFE_KINDS[1]), _check("T4"), weight=2, tier=SAFETY, not_applicable=_ANY_LOCS),
    Property("safety/narrow-table", "T8", _SUMMARY.format("a table narrower than its group's sequence"),
             unsafe_cases(UNSAFE_KINDS[3]), _check("T8"), tier=SAFETY, not_applicable=narrow_tables),
    Property("safety/int32-wrap", "W5", _SUMMARY.format("a needed page whose slots pass 2^31 - 1 (the int32 store "
             f"would wrap to a negative or another page's slot); {INT32_POOL}"), unsafe_cases(UNSAFE_KINDS[4]),
             latent(_check("W5"), INT32_POOL),
             tier=SAFETY, not_applicable=_ANY_LOCS),
    Property("safety/oracle-sees-other-pages", "W3", "the safety oracle passes the reference's own extend "
             "locations and flags each token moved to another real page of its row (the lowest, the highest)",
             cases(modes=("extend",), writes=True), _judge_sees_other_pages, tier=SAFETY, not_applicable=_ANY_LOCS),
)
