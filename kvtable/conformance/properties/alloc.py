"""Allocator-driven steps (A1-A6): the backend chooses the slots and records them; ``reference.allocation`` judges.

Each example hands the backend (through ``conformance.alloc_calls``) an ``AllocState`` whose output buffer sits
between guard cells and holds a sentinel, whose free list is a view of a longer list (the pages popped before it
precede it, as in an allocator that slices its free list), and whose table has the engine's dtype. A 1-D integer
``torch.empty`` the backend makes during the call is guarded the same way (SGLang's paged allocator makes its own
output). It judges the ``Allocation`` returned with ``judge_allocation``: a fault that shows a write outside what
the step may touch (an input included) or a page handed out twice fails at the safety tier, naming the request,
its row and the token; any other fault is a correctness failure. On valid input a refusal is a correctness
failure; on the broken kinds (SGLang's bug classes) any refusal is safe and only what the backend writes is
judged.

``alloc/debug-mode``: the backend built with ``debug=True`` answers valid steps as the plain one
does, and its allocation checker (``check_allocation``) refuses each breach the reference judge finds.

``alloc/debug-checker`` takes a correct answer to a drawn step (kvtable's own allocator, ``impl.allocation``'s),
breaks it one way (a live slot chosen, a cell of another row written, a slot recorded wrong, a page column split
over two pages, a free page lost, a handed-out page put back on the free list, a write one past the output
buffer) and requires both judges to see it: the reference must find a fault of the breach's clause (else the
reference itself has a gap), and ``backend.check_allocation`` must raise a ``ContractViolation`` naming a clause
the reference found; the unbroken answer must pass both.
"""

from __future__ import annotations

import dataclasses
import random
import re
from collections.abc import Callable
from typing import Any

import torch
from hypothesis import strategies as st

from kvtable.alloc_contract import Allocation, AllocState
from kvtable.conformance.alloc_calls import OPERATION, alloc_outcome, alloc_state, call_allocator
from kvtable.conformance.checks import INT32_POOL, Mismatch, latent
from kvtable.conformance.core import Context, Property
from kvtable.conformance.levels import CORRECTNESS, SAFETY
from kvtable.conformance.properties.applies import BreachesHeld
from kvtable.errors import ContractViolation, Unsupported
from kvtable.impl.allocation import Allocator
from kvtable.reference.allocation import AllocFault, AllocOutcome, AllocStep, alloc_tokens, judge_allocation
from kvtable.strategies.allocator import AllocCase, alloc_cases


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


def _message(what: str, faults: list[AllocFault]) -> str:
    """The first fault, then the first of each other clause (a double allocation beside a write before the
    buffer)."""
    first = faults[0]
    others = {f.clause: f for f in reversed(faults) if f.clause != first.clause}
    also = "".join(f"; also {c}: {f.text()}" for c, f in sorted(others.items()))
    return f"{what}: {len(faults)} fault(s); first: {first.text()}{also}"


def _table_dtype(ctx: Context) -> torch.dtype:
    """The token table's dtype as the profile's engine keeps it (int64 where the profile does not say)."""
    conventions = ctx.profile.allocator
    name = conventions.table_dtype if conventions is not None and conventions.table_dtype else "int64"
    return getattr(torch, name)


def _check(broken: bool) -> Callable[[Context, AllocCase], None]:
    """Run one case through the backend and judge it."""
    def check(ctx: Context, case: AllocCase) -> None:
        op = OPERATION[case.step.mode]
        state, arena = alloc_state(case.step, _table_dtype(ctx))
        what = f"{op} on {case.kind} ({case.how})"
        try:
            got, made, changed = call_allocator(ctx.backend, op, state)
        except Unsupported:
            raise
        except Exception as err:  # noqa: BLE001 - broken input may be refused any way; valid input may not
            if broken:
                return
            raise Mismatch(case_clause(case), f"{what}: refused valid input: {type(err).__name__}: {err}",
                           tier=CORRECTNESS, kind="refused valid input") from err
        if why := _malformed(op, got):
            raise Mismatch("A4", f"{what}: {why}", tier=CORRECTNESS, kind="not an Allocation")
        faults = judge_allocation(case.step, alloc_outcome(got, arena, made, changed))
        if faults:
            first = faults[0]
            raise Mismatch(first.clause, _message(what, faults), tier=SAFETY if first.unsafe else CORRECTNESS,
                           kind=_kind(first))
        _check_dtypes(ctx, case, got, what)

    return check


def _check_dtypes(ctx: Context, case: AllocCase, got: Allocation, what: str) -> None:
    """Under a profile whose engine allocates (``Profile.allocator``): its slot, SWA location and table dtypes."""
    conventions = ctx.profile.allocator
    if conventions is None:
        return
    wanted: list[tuple[str, str, torch.Tensor, tuple[str, ...]]] = [
        ("A1", "locations", got.locs, (conventions.loc_dtype,))]
    if conventions.table_dtype:
        wanted.append(("A1", "the recorded table's entries", got.req_to_token, (conventions.table_dtype,)))
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


Breach = Callable[[AllocStep, AllocState, Allocation, random.Random], tuple[Allocation, str] | None]
"""Break a correct allocation one way: the broken one and the clause it breaks (None: not possible here)."""


def _live_slot(step: AllocStep, state: AllocState, got: Allocation, r: random.Random
               ) -> tuple[Allocation, str] | None:
    live = [slot for row, start in zip(step.rows, step.starts, strict=True)
            for slot in step.req_to_token[row][:max(start, 0)] if slot >= step.page_size]
    if not live or not got.locs.numel():
        return None
    locs = got.locs.clone()
    locs[0] = r.choice(live)
    return dataclasses.replace(got, locs=locs), "A3"


def _other_row(step: AllocStep, state: AllocState, got: Allocation, r: random.Random
               ) -> tuple[Allocation, str] | None:
    others = [row for row in range(1, len(step.req_to_token)) if row not in step.rows]
    if not others or not got.req_to_token.shape[1]:
        return None
    table = got.req_to_token.clone()
    row, col = r.choice(others), r.randrange(table.shape[1])
    table[row, col] = table[row, col] + step.page_size
    return dataclasses.replace(got, req_to_token=table), "A2"


def _misrecorded(step: AllocStep, state: AllocState, got: Allocation, r: random.Random
                 ) -> tuple[Allocation, str] | None:
    own = [(k, i, pos) for k, (i, pos) in enumerate(alloc_tokens(step)) if 0 <= pos < got.req_to_token.shape[1]]
    if not own:
        return None
    k, i, pos = r.choice(own)
    table = got.req_to_token.clone()
    table[step.rows[i], pos] = int(got.locs[k]) + step.pool_end  # no slot of the pool
    return dataclasses.replace(got, req_to_token=table), "A1"


def _split_column(step: AllocStep, state: AllocState, got: Allocation, r: random.Random
                  ) -> tuple[Allocation, str] | None:
    """The first token of a page column moved to an unused free page at its own offset: one column, two pages
    (a new request's position 0 first, where there is one: the edge a judge skipping position 0 misses)."""
    ps, tokens = step.page_size, alloc_tokens(step)
    used = {loc // ps for loc in got.locs.tolist()}
    spare = [p for p in step.free_pages if p not in used]
    firsts = [k for k in range(len(tokens) - 1) if tokens[k][0] == tokens[k + 1][0] and tokens[k][1] >= 0
              and tokens[k][1] // ps == tokens[k + 1][1] // ps]
    if ps == 1 or not spare or not firsts:
        return None
    k = r.choice([k for k in firsts if tokens[k][1] == 0] or firsts)
    locs, table = got.locs.clone(), got.req_to_token.clone()
    locs[k] = r.choice(spare) * ps + tokens[k][1] % ps
    i, pos = tokens[k]
    if pos < table.shape[1]:
        table[step.rows[i], pos] = locs[k].to(table.dtype)
    return dataclasses.replace(got, locs=locs, req_to_token=table), "A3"


def _lost_page(step: AllocStep, state: AllocState, got: Allocation, r: random.Random
               ) -> tuple[Allocation, str] | None:
    if got.free_pages is None or not got.free_pages.numel():
        return None
    keep = torch.ones(got.free_pages.numel(), dtype=torch.bool)
    keep[r.randrange(got.free_pages.numel())] = False
    return dataclasses.replace(got, free_pages=got.free_pages[keep]), "A6"


def _freed_while_held(step: AllocStep, state: AllocState, got: Allocation, r: random.Random
                      ) -> tuple[Allocation, str] | None:
    held = [loc // step.page_size for loc in got.locs.tolist() if loc >= step.page_size]
    if got.free_pages is None or not held:
        return None
    return dataclasses.replace(got, free_pages=torch.cat([got.free_pages, torch.tensor([r.choice(held)])])), "A6"


BREACHES: tuple[Breach, ...] = (_live_slot, _other_row, _misrecorded, _split_column, _lost_page, _freed_while_held)


def _checker(ctx: Context, case: AllocCase) -> None:
    """Break kvtable's own answer to ``case`` each possible way; both judges must see each breach."""
    state, arena = alloc_state(case.step)
    before = state.req_to_token.clone()
    got = Allocator().allocate(state)
    outcome = alloc_outcome(got, arena)
    if faults := judge_allocation(case.step, outcome):
        raise Mismatch(faults[0].clause, f"the reference judge faults kvtable's own allocation: {faults[0].text()}",
                       kind="reference faults a correct allocation")
    _expect_pass(ctx, before, state, got)
    r = random.Random(repr(case.step))
    for breach in BREACHES:
        broken = breach(case.step, state, got, r)
        if broken is None:
            continue
        bad, clause = broken
        found = {f.clause for f in judge_allocation(case.step, _outcome(bad, outcome))}
        what = f"{breach.__name__.strip('_').replace('_', ' ')} ({case.how})"
        if clause not in found:
            raise Mismatch(clause, f"the reference judge misses a breach of {clause}: {what}; it found "
                           f"{sorted(found) or 'nothing'}", kind="reference misses a breach")
        try:
            ctx.backend.check_allocation(before, state, bad)
        except ContractViolation as err:
            if err.clause_id not in found:
                raise Mismatch(clause, f"check_allocation names {err.clause_id} for {what}; the reference found "
                               f"{sorted(found)}: {err}", kind="checker names another clause") from err
        else:
            raise Mismatch(clause, f"check_allocation accepts {what}, a breach of {clause}", tier="",
                           kind="checker misses a breach")


def _outcome(bad: Allocation, good: AllocOutcome) -> AllocOutcome:
    """The judge's view of a broken allocation (the good one's guards: the buffer itself was never touched)."""
    return dataclasses.replace(good, locs=bad.locs.tolist(), req_to_token=bad.req_to_token.tolist(),
                               free_pages=None if bad.free_pages is None else bad.free_pages.tolist())


def _expect_pass(ctx: Context, before: torch.Tensor, state: AllocState, got: Allocation) -> None:
    try:
        ctx.backend.check_allocation(before, state, got)
    except ContractViolation as err:
        raise Mismatch(err.clause_id, f"check_allocation refuses a correct allocation: {err}",
                       kind="checker refuses a correct allocation") from err


def _debug_mode(ctx: Context, case: AllocCase) -> None:
    """The debug-mode backend answers a valid step as the contract asks (its checks must not refuse it)."""
    op = OPERATION[case.step.mode]
    state, arena = alloc_state(case.step)
    try:
        got, made, changed = call_allocator(ctx.debug_backend, op, state)
    except ContractViolation as err:
        raise Mismatch(err.clause_id, f"debug-mode {op} refuses a valid step ({case.how}): {err}",
                       kind="debug mode refuses valid input") from err
    if faults := judge_allocation(case.step, alloc_outcome(got, arena, made, changed)):
        raise Mismatch(faults[0].clause, f"debug-mode {op} ({case.how}): {faults[0].text()}", kind="debug answer")


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
    Property("alloc/decode-paged", "A3", "paged decode steps: the token fills its request's partial page at "
             "offset pos % ps, or takes a fresh page", alloc_cases("decode", swa=False, paged=True), _check(False),
             needs=_needs("decode")),
    Property("alloc/verify-paged", "A3", "paged verify steps: N tokens across the partial page and fresh pages, "
             "one page per page column", alloc_cases("verify", swa=False, paged=True), _check(False),
             needs=_needs("verify")),
    Property("alloc/over-allocated", "A1", "verify steps of requests an earlier speculative step over-allocated "
             "(allocated length past the committed one): slots from the allocated end, at most to the page end",
             alloc_cases("verify", swa=False, paged=True, edge="over-allocated"), _check(False),
             needs=_needs("verify")),
    Property("alloc/decode-over-allocated", "A1", "decode steps of over-allocated requests: a token whose slot "
             "is already allocated takes none, the others continue from the allocated end",
             alloc_cases("decode", swa=False, paged=True, edge="over-allocated"), _check(False),
             needs=_needs("decode")),
    Property("alloc/fresh-rows", "A2", "extend steps with a free row for every request: a backend that moves a "
             "request takes a free row, copies its prefix and touches no other row",
             alloc_cases("extend", swa=False, edge="fresh-rows"), _check(False), needs=_needs("extend")),
    Property("alloc/new-requests", "A3", "extend steps of requests with no prefix: positions from 0, each page "
             "column on one fresh page (page size 2: positions 0 and 1 on one page)",
             alloc_cases("extend", swa=False, edge="new-requests"), _check(False), needs=_needs("extend")),
    Property("alloc/page-aligned", "A3", "extend steps whose prefixes end on a page boundary: no partial page, "
             "every new column on a fresh page", alloc_cases("extend", swa=False, paged=True, edge="page-aligned"),
             _check(False), needs=_needs("extend")),
    Property("alloc/shared-prefix", "A3", "extend steps whose requests share prefix pages (radix-cache hits): "
             "no shared page is handed out or written", alloc_cases("extend", swa=False, paged=True,
                                                                     edge="shared-prefix"), _check(False),
             needs=_needs("extend")),
    Property("alloc/stale-rows", "A2", "decode steps on rows an earlier request left uncleared: only the new "
             "position's cell changes", alloc_cases("decode", swa=False, edge="stale-rows"), _check(False),
             needs=_needs("decode")),
    Property("alloc/one-request", "A4", "extend steps of a single request: one location per token, the whole "
             "output written, nothing around it", alloc_cases("extend", swa=False, edge="one-request"),
             _check(False), needs=_needs("extend")),
    Property("alloc/inputs-kept", "A4", "decode steps leave every input as handed: the free list (and the pages "
             "popped before it), rows, lengths", alloc_cases("decode", swa=None), _check(False),
             needs=_needs("decode")),
    Property("alloc/swa-tail", "A5", "extend steps with a declared SWA tail: the tail's tokens get free SWA "
             "slots, the head's may get 0", alloc_cases("extend", swa=True, paged=True, edge="swa-tail"), _check(False),
             needs=_needs("extend")),
    Property("alloc/swa-evicted", "A5", "decode steps whose requests' early SWA slots were evicted (mapped to 0): "
             "the translation of a live last slot is used, never an evicted one",
             alloc_cases("decode", swa=True, edge="swa-evicted"), _check(False), needs=_needs("decode")),
    Property("alloc/swa-new-requests", "A5", "extend steps with a SWA pool and no prefixes: last_loc -1 translates "
             "to -1 (the sentinel), SWA slots from fresh pages", alloc_cases("extend", swa=True,
                                                                            edge="new-requests"),
             _check(False), needs=_needs("extend")),
    Property("alloc/pool-decode", "A6", "decode steps keep the pool's accounting: pages handed out were free, the "
             "free list returned is the rest, none lost or held twice", alloc_cases("decode", swa=False),
             _check(False), needs=_needs("decode")),
    Property("alloc/pool-verify", "A6", "verify steps keep the pool's accounting (over-allocation included)",
             alloc_cases("verify", swa=False, paged=True, edge="over-allocated"), _check(False),
             needs=_needs("verify")),
    Property("alloc/pool-extend", "A6", "extend steps keep the pool's accounting, partial pages not taken twice",
             alloc_cases("extend", swa=False, paged=True), _check(False), needs=_needs("extend")),
    Property("alloc/pool-tight", "A6", "extend steps whose free list holds exactly the pages needed: every one "
             "handed out, nothing read before or past the free list", alloc_cases("extend", swa=False,
                                                                                 edge="tight-pool"),
             _check(False), needs=_needs("extend")),
    Property("alloc/swa-partial", "A5", "paged extend steps with a SWA pool: the SWA partial page is the "
             "translation of the request's last slot, filled at offset pos % ps", alloc_cases(
                 "extend", swa=True, paged=True), _check(False), needs=_needs("extend")),
    Property("alloc/pool-fresh-rows", "A6", "extend steps that may move requests to free rows: a copied prefix "
             "takes no page, the pages handed out were free", alloc_cases("extend", swa=False, edge="fresh-rows"),
             _check(False), needs=_needs("extend")),
    Property("alloc/prefix-past-length", "A4", "an extend with a request whose prefix exceeds its length writes "
             "nothing before or past the output buffer (or is refused)", alloc_cases("extend", "prefix past length"),
             _check(True), weight=2, tier=SAFETY, needs=_needs("extend"),
             not_applicable=BreachesHeld(("T9",), cheap=True, methods=_needs("extend"))),
    Property("alloc/short-verify", "A2", "a verify row shorter than N changes no other row of the token table "
             "(or is refused)", alloc_cases("verify", "short verify"), _check(True), weight=2, tier=SAFETY,
             needs=_needs("verify"), not_applicable=BreachesHeld(("W2",), cheap=True, methods=_needs("verify"))),
    Property("alloc/int32-slots", "A1", "free slots past 2^31 - 1 are recorded as chosen, never wrapped (or the "
             f"step is refused); {INT32_POOL}", alloc_cases("decode", "int32 slots"), latent(_check(True), INT32_POOL),
             tier=SAFETY, needs=_needs("decode")),

    Property("alloc/debug-mode", "A1", "the debug-mode backend (its allocation checks on) answers valid decode, "
             "verify and extend steps as the contract asks (paged SWA steps and declared SWA tails among them)",
             st.one_of(alloc_cases("extend", swa=None), alloc_cases("extend", swa=True, paged=True),
                       alloc_cases("extend", swa=True, paged=True, edge="swa-tail")), _debug_mode,
             debug=True, needs=("alloc_extend",)),
    Property("alloc/debug-checker", "A6", "check_allocation refuses each breach of kvtable's own allocation the "
             "reference finds (live slot, other row, wrong record, split page column, lost or re-freed page), "
             "and accepts the allocation itself", alloc_cases("extend", swa=False, paged=True, edge="new-requests"),
             _checker,
             debug=True, needs=("check_allocation",)),
)
