"""Allocator-driven steps (A1-A5): the backend chooses the slots and records them; ``reference.allocation`` judges.

Each example hands the backend an ``AllocState`` whose output buffer sits between guard cells, and judges
the ``Allocation`` it returns with ``judge_allocation``: a fault that shows a write outside what the step may
touch fails at the safety tier, naming the request, its row and the token; any other fault is a correctness
failure. On valid input a refusal is a correctness failure; on the broken kinds (SGLang's bug classes) any
refusal is safe and only what the backend writes is judged.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import torch

from kvtable.backends.protocol import Allocation, AllocState, SwaPool
from kvtable.conformance.checks import Mismatch
from kvtable.conformance.core import Context, Property
from kvtable.conformance.levels import CORRECTNESS, SAFETY
from kvtable.errors import Unsupported
from kvtable.reference.allocation import AllocFault, AllocOutcome, AllocStep, alloc_tokens, judge_allocation
from kvtable.strategies.allocator import AllocCase, alloc_cases

OPERATION = {"decode": "alloc_decode", "verify": "alloc_verify", "extend": "alloc_extend"}
GUARD = 2
"""Guard cells on each side of the output buffer."""
CANARY = -(2**62)
"""What the guard cells hold: no slot and no pad any engine would write."""


def _long(values: Any) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int64)


def alloc_state(step: AllocStep) -> tuple[AllocState, torch.Tensor]:
    """The tensors of ``step`` for the backend, and the arena its output buffer is a view of (guards around it)."""
    n = len(alloc_tokens(step))
    arena = torch.full((GUARD + n + GUARD,), CANARY, dtype=torch.int64)
    swa = None
    if step.swa is not None:
        swa = SwaPool(_long(step.swa.mapping), _long(step.swa.free_pages), step.swa.pool_pages)
    state = AllocState(_long(step.req_to_token).reshape(len(step.req_to_token), -1), list(step.rows),
                       list(step.prefix_lens), list(step.seq_lens), _long(step.free_pages), step.page_size,
                       step.pool_pages, arena[GUARD:GUARD + n], swa)
    return state, arena


def alloc_outcome(allocation: Allocation, arena: torch.Tensor) -> AllocOutcome:
    """What the backend did, as the judge reads it (``AllocOutcome``)."""
    n = arena.numel() - 2 * GUARD
    swa_locs, swa_mapping = allocation.swa_locs, allocation.swa_mapping
    return AllocOutcome(allocation.locs.reshape(-1).tolist(), allocation.req_to_token.tolist(),
                        arena[:GUARD].tolist(), arena[GUARD + n:].tolist(), CANARY,
                        None if swa_locs is None else swa_locs.reshape(-1).tolist(),
                        None if swa_mapping is None else swa_mapping.reshape(-1).tolist())


def _kind(fault: AllocFault) -> str:
    """A failure kind from the fault's reason, numbers left out."""
    return f"{'unsafe' if fault.unsafe else 'wrong'} {fault.clause}: " + re.sub(r"-?\d+", "N", fault.reason)[:48]


def _malformed(op: str, got: Any) -> str:
    """Why ``got`` is no ``Allocation`` the judge can read ('' when it is one)."""
    for name in ("locs", "req_to_token"):
        value = getattr(got, name, None)
        if not isinstance(value, torch.Tensor) or value.dtype.is_floating_point:
            return f"{op} returned {type(got).__name__} without an integer tensor {name!r}"
    return ""


def _check(broken: bool) -> Callable[[Context, AllocCase], None]:
    def check(ctx: Context, case: AllocCase) -> None:
        op = OPERATION[case.step.mode]
        state, arena = alloc_state(case.step)
        what = f"{op} on {case.kind} ({case.how})"
        try:
            got = getattr(ctx.backend, op)(state)
        except Unsupported:
            raise
        except Exception as err:  # noqa: BLE001 - broken input may be refused any way; valid input may not
            if broken:
                return
            raise Mismatch(case_clause(case), f"{what}: refused valid input: {type(err).__name__}: {err}",
                           tier=CORRECTNESS, kind="refused valid input") from err
        if why := _malformed(op, got):
            raise Mismatch("A4", f"{what}: {why}", tier=CORRECTNESS, kind="not an Allocation")
        faults = judge_allocation(case.step, alloc_outcome(got, arena))
        if faults:
            first = faults[0]
            raise Mismatch(first.clause, f"{what}: {len(faults)} fault(s); first: {first.text()}",
                           tier=SAFETY if first.unsafe else CORRECTNESS, kind=_kind(first))
        _check_dtypes(ctx, case, got, what)

    return check


def _check_dtypes(ctx: Context, case: AllocCase, got: Allocation, what: str) -> None:
    """Under a profile whose engine allocates (``Profile.allocator``): its slot and SWA location dtypes."""
    conventions = ctx.profile.allocator
    if conventions is None:
        return
    wanted = [("A1", "locations", got.locs, (conventions.loc_dtype,))]
    if case.step.swa is not None and got.swa_locs is not None:
        wanted.append(("A5", "SWA locations", got.swa_locs, conventions.swa_loc_dtypes))
    for clause, name, tensor, want in wanted:
        if str(tensor.dtype).removeprefix("torch.") not in want:
            raise Mismatch(clause, f"{what}: {name} are {tensor.dtype}; profile {ctx.profile.name!r} says the "
                           f"engine's are {' or '.join(want)}", tier=CORRECTNESS, kind=f"{name} dtype")


def case_clause(case: AllocCase) -> str:
    """The clause a refusal of this case's valid input breaks: the step's own recording clause."""
    return "A5" if case.step.swa is not None else "A1"


def _needs(mode: str) -> tuple[str, ...]:
    return (OPERATION[mode],)


_VALID = "{} steps ({}) choose free slots and record each at its token's own position"
PROPERTIES = (
    Property("alloc/decode", "A1", _VALID.format("decode", "one token per request, page size 1 and paged"),
             alloc_cases("decode", swa=False), _check(False), weight=2, needs=_needs("decode")),
    Property("alloc/verify", "A1", _VALID.format("speculative verify", "N tokens per request"),
             alloc_cases("verify", swa=False), _check(False), weight=2, needs=_needs("verify")),
    Property("alloc/extend", "A1", _VALID.format("extend", "chunked prefill after a prefix, shared prefix pages"),
             alloc_cases("extend", swa=False), _check(False), weight=2, needs=_needs("extend")),
    Property("alloc/partial-page", "A3", "paged extend steps of a request ending inside a page: its new tokens "
             "fill the rest of its own last page, at offset pos % ps, then free pages", alloc_cases(
                 "extend", swa=False, paged=True), _check(False), needs=_needs("extend")),
    Property("alloc/swa-decode", "A5", "decode steps with a SWA pool: SWA slots free, mapping recorded, "
             "sentinel kept", alloc_cases("decode", swa=True), _check(False), needs=_needs("decode")),
    Property("alloc/swa-verify", "A5", "verify steps with a SWA pool: SWA slots free, mapping recorded, "
             "sentinel kept", alloc_cases("verify", swa=True), _check(False), needs=_needs("verify")),
    Property("alloc/swa-extend", "A5", "extend steps with a SWA pool: SWA slots free (or on the own partial "
             "SWA page), mapping recorded", alloc_cases("extend", swa=True), _check(False), needs=_needs("extend")),
    Property("alloc/prefix-past-length", "A4", "an extend with a request whose prefix exceeds its length writes "
             "nothing before or past the output buffer (or is refused)", alloc_cases("extend", "prefix past length"),
             _check(True), weight=2, tier=SAFETY, needs=_needs("extend")),
    Property("alloc/short-verify", "A2", "a verify row shorter than N changes no other row of the token table "
             "(or is refused)", alloc_cases("verify", "short verify"), _check(True), weight=2, tier=SAFETY,
             needs=_needs("verify")),
    Property("alloc/int32-slots", "A1", "free slots past 2^31 - 1 are recorded as chosen, never wrapped (or the "
             "step is refused)", alloc_cases("decode", "int32 slots"), _check(True), tier=SAFETY,
             needs=_needs("decode")),
)
