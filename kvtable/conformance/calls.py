"""The backend calls a location property makes, each with the reference's expected outcome through the profile.

Shared by the lone, grouped, expansion and rejects families: ``lone_call`` builds one group's
lone-table call of the case's mode, ``check_group_locs`` judges one ``group_locs`` call.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import torch

from kvtable.conformance.checks import Mismatch, Outcome, check_tensor, judge
from kvtable.conformance.checks import reference_outcome as outcome
from kvtable.conformance.core import Context
from kvtable.conformance.integrity import signature_of
from kvtable.conformance.levels import SAFETY
from kvtable.contract import Mode
from kvtable.reference.model import Table
from kvtable.reference.safety import Token, UnsafeWrite, token_positions
from kvtable.reference.tables import as_table
from kvtable.strategies import Case

MODE_CLAUSE: dict[Mode, str] = {"decode": "W1", "verify": "W2", "reanchor": "W4", "extend": "W3"}
"""The clause each mode's locations are defined by."""


def loc_dtypes(ctx: Context) -> tuple[torch.dtype, ...]:
    """The location dtypes the profile accepts (int64 engines may hand back int32)."""
    return tuple(d for d in (torch.int32, torch.int64) if ctx.profile.accepts_loc_dtype(d))


def lone_call(ctx: Context, backend: Any, case: Case, gid: str) -> tuple[str, Outcome, Callable[[], Any]]:
    """The lone-table call of the case's mode for group ``gid``: (description, expected, backend call)."""
    what, call, expect = _lone(ctx, backend, case, gid)
    return what, outcome(expect), call


def lone_backend_call(ctx: Context, backend: Any, case: Case, gid: str) -> tuple[str, Callable[[], Any]]:
    """``lone_call`` without the expected outcome, for a property that judges the result otherwise (the safety
    oracle, a refusal): the reference is not run for an answer no one reads."""
    what, call, _ = _lone(ctx, backend, case, gid)
    return what, call


def _lone(ctx: Context, backend: Any, case: Case, gid: str) -> tuple[str, Callable[[], Any], Callable[[], Any]]:
    """(description, backend call, reference call) of the case's mode for group ``gid``."""
    profile = ctx.profile
    tensor = case.tensor(gid)

    def table() -> Table:  # the plain rows, after the T1 checks a backend makes on the tensor it gets
        return as_table(tensor, group=gid)

    ps = case.spec(gid).block_granularity
    batch = case.batch
    seq = list(batch.seq_lens)
    if batch.mode == "decode":
        padded = decode_padding(backend, batch.actual_bs)
        return (f"decode_locs[{gid}]", lambda: backend.decode_locs(tensor, case.seq_tensor(), ps,
                                                                   **({} if padded is None else {"actual_bs": padded})),
                lambda: profile.decode_locs(table(), seq, ps, padded))
    if batch.mode == "verify":
        return (f"verify_locs[{gid}]",
                lambda: backend.verify_locs(tensor, case.seq_tensor(), ps, batch.n, actual_bs=batch.actual_bs),
                lambda: profile.verify_locs(table(), seq, ps, batch.n, batch.actual_bs))
    if batch.mode == "reanchor":
        return (f"reanchor_locs[{gid}]", lambda: backend.reanchor_locs(tensor, case.seq_tensor(), ps, batch.n),
                lambda: profile.reanchor_locs(table(), seq, ps, batch.n))
    assert batch.prefix_lens is not None
    prefix, extend = list(batch.prefix_lens), case.extend_lens
    return (f"extend_locs[{gid}]", lambda: backend.extend_locs(tensor, prefix, extend, ps),
            lambda: profile.extend_locs(table(), prefix, extend, ps))


def decode_padding(backend: Any, actual_bs: int | None) -> int | None:
    """``actual_bs`` for a lone decode call where the backend's ``decode_locs`` takes it (optional in the
    protocol), else None: its padded rows are declared only to a backend that can hear it."""
    method = getattr(getattr(backend, "target", backend), "decode_locs", None)
    if actual_bs is None or method is None:
        return None
    params = signature_of(method).parameters
    takes = "actual_bs" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())
    return actual_bs if takes else None


def tensor_compare(ctx: Context, clause: str, what: str) -> Callable[[Any, Any], None]:
    """A ``judge`` comparison: the result holds exactly the expected locations, in the profile's dtype."""
    return lambda got, want: check_tensor(clause, what, got, want, device=ctx.device, dtypes=loc_dtypes(ctx))


def token_slots(case: Case, actual_bs: int | None) -> list[Token]:
    """Each output location's ``(row, position)`` for the case's batch (position None: a padded row's token)."""
    batch = case.batch
    extend = case.extend_lens if batch.mode == "extend" else None
    return token_positions(batch.mode, batch.seq_lens, n=batch.n, prefix_lens=batch.prefix_lens, extend_lens=extend,
                           actual_bs=actual_bs)


def failure_kind(write: UnsafeWrite) -> str:
    """A failure kind from the oracle's reason, numbers left out (``another page``, ``negative slot``, ...)."""
    return "unsafe write: " + re.sub(r"-?\d+", "N", write.reason.split(":")[0])[:48]


def check_safe(ctx: Context, clause: str, what: str, case: Case, gid: str, got: Any, actual_bs: int | None) -> None:
    """Raise the safety failure of ``got`` (group ``gid``'s locations) if any is outside its token's allowed slots
    (the profile's writer applied): a wrong location on valid input is unsafe too when it lands elsewhere."""
    if not hasattr(got, "tolist"):
        return  # not a location tensor: a correctness matter
    ps = case.spec(gid).block_granularity
    bad = ctx.profile.unsafe_writes(case.tables[gid], got, token_slots(case, actual_bs), ps, group=gid)
    if bad:
        first = bad[0]
        raise Mismatch(clause, f"{what}: {len(bad)} unsafe write(s); first: group {first.group!r} row {first.row} "
                       f"token {first.token} position {first.position} wrote loc {first.loc}: {first.reason}",
                       tier=SAFETY, kind=failure_kind(first))


def location_compare(ctx: Context, clause: str, what: str, case: Case, gid: str,
                     actual_bs: int | None) -> Callable[[Any, Any], None]:
    """``tensor_compare``, where a result that differs is judged by the safety oracle first."""
    def compare(got: Any, want: Any) -> None:
        try:
            check_tensor(clause, what, got, want, device=ctx.device, dtypes=loc_dtypes(ctx))
        except Mismatch:
            check_safe(ctx, clause, what, case, gid, got, actual_bs)
            raise

    return compare


def check_lone(ctx: Context, backend: Any, case: Case, clause: str | None = None) -> None:
    """Every attention group's lone-table call equals the reference (or refuses with its clause)."""
    for spec in case.attention:
        what, expected, call = lone_call(ctx, backend, case, spec.group_id)
        tag = clause or MODE_CLAUSE[case.batch.mode]
        told = decode_padding(backend, case.batch.actual_bs) if case.batch.mode == "decode" else case.batch.actual_bs
        judge(tag, what, expected, call, location_compare(ctx, tag, what, case, spec.group_id, told))


def _group_compare(ctx: Context, case: Case, clause: str) -> Callable[[Any, Any], None]:
    state = {s.group_id for s in case.specs if s.is_state}

    def compare(got: Any, want: dict[str, list[int]]) -> None:
        if not isinstance(got, dict):
            raise Mismatch(clause, f"group_locs returned {type(got).__name__}, expected a dict")
        if sorted(got) != sorted(want):
            leaked = sorted(set(got) & state)
            raise Mismatch("T6" if leaked else clause, f"group_locs keys {sorted(got)}, expected {sorted(want)}"
                           + (f" (state groups {leaked} must be shed)" if leaked else ""))
        for gid in sorted(want):
            location_compare(ctx, clause, f"group_locs[{gid!r}]", case, gid, case.batch.actual_bs)(got[gid], want[gid])

    return compare


def check_group_locs(ctx: Context, backend: Any, case: Case, clause: str) -> None:
    """One ``group_locs`` call equals the reference through the profile (or refuses with its clause)."""
    plain = dict(case.tables)
    expected = outcome(lambda: ctx.profile.group_locs(list(case.specs), plain, case.batch))
    judge(clause, "group_locs", expected,
          lambda: backend.group_locs(list(case.specs), case.tensors(), case.batch, tail_pad=case.tail_pad),
          _group_compare(ctx, case, clause))
