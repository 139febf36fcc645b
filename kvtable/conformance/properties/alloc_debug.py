"""The allocator's debug mode (A1-A6): the backend built with ``debug=True`` answers valid steps as the plain one
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
from collections.abc import Callable

import torch
from hypothesis import strategies as st

from kvtable.alloc_contract import Allocation, AllocState
from kvtable.conformance.checks import Mismatch
from kvtable.conformance.core import Context, Property
from kvtable.conformance.properties.allocator import OPERATION, alloc_outcome, alloc_state, call_allocator
from kvtable.errors import ContractViolation
from kvtable.impl.allocation import Allocator
from kvtable.reference.allocation import AllocOutcome, AllocStep, alloc_tokens, judge_allocation
from kvtable.strategies.allocator import AllocCase, alloc_cases

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
