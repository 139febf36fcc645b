"""Debug mode accepts what is valid: every valid batch with the same locations, a row that opens with a hole
beside a row writing page 1, and a batch with no rows in every mode."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from hypothesis import strategies as st

from kvtable.conformance.calls import MODE_CLAUSE, check_group_locs, check_lone
from kvtable.conformance.checks import Mismatch
from kvtable.conformance.core import Context, Property
from kvtable.conformance.properties.applies import LOCS, NeedsAny, calls
from kvtable.contract import Batch, GroupSpec, Mode
from kvtable.errors import ContractViolation, Unsupported
from kvtable.strategies import Case, cases
from kvtable.strategies.batches import ceil_div, padded_row
from kvtable.strategies.draws import between, pick


def _debug_accepts(ctx: Context, case: Case) -> None:
    """Debug mode accepts every valid batch (a refusal names the clause it invoked) with the same locations.

    The lone-table calls take no tail-pad argument, so they are held to the default pad -1 only.
    """
    grouped, lone = calls(ctx, case.batch.mode)
    if grouped:
        check_group_locs(ctx, ctx.debug_backend, case, MODE_CLAUSE[case.batch.mode])
    if lone and case.tail_pad == -1 and (case.batch.mode == "verify" or case.batch.live_rows == case.batch.bs):
        check_lone(ctx, ctx.debug_backend, case)


@st.composite
def _hole_before_page_one(draw: st.DrawFn) -> Case:
    """Valid: row 0 of a sliding group opens with a hole (its window starts past column 0) while row 1
    writes page 1. A page-sharing check that keys the hole by a number a real page can have sees page 1
    twice."""
    ps = pick(draw, (1, 2, 4))
    window = draw(between(1, ps))
    seq0 = ps + window + draw(between(0, ps))  # reads from position seq0 - window >= ps: column 0 is free
    seq1 = draw(between(1, ps))
    end0 = ceil_div(seq0, ps)
    width = end0 + draw(between(0, 1))
    spec = GroupSpec("swa0", "sliding", ps, window=window)
    table = [padded_row(1, list(range(2, 2 + end0 - 1)), width), padded_row(0, [1], width)]
    return Case((spec,), {"swa0": table}, Batch((seq0, seq1)))


def _debug_accepts_hole_before_page_one(ctx: Context, case: Case) -> None:
    check_group_locs(ctx, ctx.debug_backend, case, "T7")


@dataclass(frozen=True)
class EmptyCase:
    """A batch of no rows in ``mode`` over groups of these page sizes and table widths."""

    mode: Mode
    page_sizes: tuple[int, ...]
    widths: tuple[int, ...]
    n: int


@st.composite
def _empty_cases(draw: st.DrawFn) -> EmptyCase:
    groups, mode = draw(between(1, 3)), pick(draw, tuple(MODE_CLAUSE))
    return EmptyCase(mode, tuple(pick(draw, (1, 2, 4, 16)) for _ in range(groups)),
                     tuple(draw(between(1, 4)) for _ in range(groups)),  # an engine's tables have a column
                     draw(between(1, 4)) if mode in ("verify", "reanchor") else 1)


def _empty_batch(ctx: Context, case: EmptyCase) -> None:
    """A batch with no rows writes nothing in debug mode too: every location tensor is empty, as without debug
    and in the reference (a refusal or a crash here is the bug issue 21 saw in impl's debug check)."""
    clause = MODE_CLAUSE[case.mode]
    specs = [GroupSpec(f"g{i}", "full", ps) for i, ps in enumerate(case.page_sizes)]
    tables = {s.group_id: torch.zeros(0, w, dtype=torch.int32, device=ctx.device)
              for s, w in zip(specs, case.widths, strict=True)}
    batch = Batch.extend([], []) if case.mode == "extend" else Batch((), mode=case.mode, n=case.n)
    backend, lengths = ctx.debug_backend, torch.zeros(0, dtype=torch.int32, device=ctx.device)
    table, ps = tables["g0"], case.page_sizes[0]
    lone = {"decode": lambda: backend.decode_locs(table, lengths, ps),
            "verify": lambda: backend.verify_locs(table, lengths, ps, case.n),
            "reanchor": lambda: backend.reanchor_locs(table, lengths, ps, case.n),
            "extend": lambda: backend.extend_locs(table, [], [], ps)}
    for what, call in ((f"group_locs ({case.mode}, no rows, debug)", lambda: backend.group_locs(specs, tables, batch)),
                       (f"{case.mode}_locs (no rows, debug)", lone[case.mode])):
        try:
            got = call()
        except ContractViolation as err:
            raise Mismatch(clause, f"{what}: refused a batch with no rows ({err})") from err
        except Unsupported:
            raise
        except Exception as err:  # a crash deep in torch is the bug itself
            raise Mismatch(clause, f"{what}: crashed with {type(err).__name__}: {err}") from err
        sizes = {k: v.numel() for k, v in got.items()} if isinstance(got, dict) else {"table": got.numel()}
        if any(sizes.values()):
            raise Mismatch(clause, f"{what}: wrote {sizes} locations for a batch with no rows")


PROPERTIES = (
    Property("debug/accepts-valid", "D1", "debug mode accepts every valid batch (either tail pad) and returns "
             "the same locations", cases(), _debug_accepts, debug=True, weight=2, not_applicable=NeedsAny(LOCS)),
    Property("debug/hole-before-page-one", "T7", "debug mode accepts a row opening with a hole beside a row "
             "that writes page 1", _hole_before_page_one(), _debug_accepts_hole_before_page_one, debug=True,
             needs=("group_locs",)),
    Property("debug/empty-batch", "W1", "a batch with no rows writes no location in debug mode either (every "
             "mode, grouped and lone calls)", _empty_cases(), _empty_batch, debug=True,
             needs=("group_locs", "decode_locs", "verify_locs", "reanchor_locs", "extend_locs")),
)
