"""Allocator-driven steps (A1-A6): the backend chooses the slots and records them; ``reference.allocation`` judges.

Each example hands the backend an ``AllocState`` whose output buffer sits between guard cells and holds a
sentinel, whose free list is a view of a longer list (the pages popped before it precede it, as in an
allocator that slices its free list), and whose table has the engine's dtype. A 1-D integer ``torch.empty``
the backend makes during the call is guarded the same way (SGLang's paged allocator makes its own output).
It judges the ``Allocation`` returned with ``judge_allocation``: a fault that shows a write outside what the
step may touch (an input included) or a page handed out twice fails at the safety tier, naming the request,
its row and the token; any other fault is a correctness failure. On valid input a refusal is a correctness
failure; on the broken kinds (SGLang's bug classes) any refusal is safe and only what the backend writes is
judged.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from kvtable.alloc_contract import Allocation, AllocState, SwaPool
from kvtable.conformance.checks import INT32_POOL, Mismatch, latent
from kvtable.conformance.core import Context, Property
from kvtable.conformance.levels import CORRECTNESS, SAFETY
from kvtable.conformance.properties.applies import BreachesHeld
from kvtable.errors import Unsupported
from kvtable.reference.allocation import (
    AllocFault,
    AllocOutcome,
    AllocStep,
    alloc_tokens,
    judge_allocation,
)
from kvtable.strategies.allocator import AllocCase, alloc_cases

OPERATION = {"decode": "alloc_decode", "verify": "alloc_verify", "extend": "alloc_extend"}
GUARD = 2
"""Guard cells on each side of the output buffer."""
CANARY = -(2**62)
"""What the guard cells and an unwritten int64 buffer hold: no slot and no pad any engine would write."""
CANARY32 = -(2**31)
"""The same for an int32 buffer the engine makes."""


def _long(values: Any) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int64)


def _popped(step: AllocStep) -> list[int]:
    """The pages the batch's rows hold, each once: what an allocator slicing its free list popped before."""
    pages: dict[int, None] = {}
    for row, start in zip(step.rows, step.starts, strict=True):
        for pos in range(max(start, 0)):
            slot = step.req_to_token[row][pos] if pos < len(step.req_to_token[row]) else 0
            if slot >= step.page_size:
                pages.setdefault(slot // step.page_size)
    return list(pages)


def alloc_state(step: AllocStep, table_dtype: torch.dtype = torch.int64) -> tuple[AllocState, torch.Tensor]:
    """The tensors of ``step`` for the backend, and the arena its output buffer is a view of (guards around it,
    the sentinel inside). The free list is the tail of a list whose head holds the pages popped before it."""
    n = len(alloc_tokens(step))
    arena = torch.full((GUARD + n + GUARD,), CANARY, dtype=torch.int64)
    swa = None
    if step.swa is not None:
        swa = SwaPool(_long(step.swa.mapping), _long(step.swa.free_pages), step.swa.pool_pages,
                      None if step.swa.tail_lens is None else list(step.swa.tail_lens))
    popped = _popped(step)
    free_list = _long([*popped, *step.free_pages])
    state = AllocState(_long(step.req_to_token).reshape(len(step.req_to_token), -1).to(table_dtype),
                       list(step.rows), list(step.prefix_lens), list(step.seq_lens), free_list[len(popped):],
                       step.page_size, step.pool_pages, arena[GUARD:GUARD + n], swa,
                       None if step.allocated_lens is None else list(step.allocated_lens), list(step.free_rows))
    return state, arena


class EngineBuffers(TorchFunctionMode):
    """Guards every 1-D integer ``torch.empty`` made while active: an arena of sentinels around it, so a write
    before or past it, or an entry never written, shows."""

    def __init__(self) -> None:
        super().__init__()
        self.arenas: list[torch.Tensor] = []

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func is torch.empty and out.dim() == 1 and out.dtype in (torch.int32, torch.int64):
            canary = CANARY if out.dtype == torch.int64 else CANARY32
            arena = torch.full((GUARD + out.numel() + GUARD,), canary, dtype=out.dtype, device=out.device)
            self.arenas.append(arena)
            return arena[GUARD:GUARD + out.numel()]
        return out


def _snapshot(state: AllocState) -> dict[str, Any]:
    """The inputs a step may not write, as they were handed."""
    free = state.free_pages
    snap: dict[str, Any] = {name: list(getattr(state, name) or []) for name in
                            ("rows", "prefix_lens", "seq_lens", "allocated_lens", "free_rows")}
    snap["free_pages"] = free.as_strided((free.storage_offset() + free.numel(),), (1,), 0).clone()
    snap["req_to_token"] = state.req_to_token.clone()
    if state.swa is not None:
        snap["swa.free_pages"] = state.swa.free_pages.clone()
        snap["swa.tail_lens"] = list(state.swa.tail_lens or [])
    return snap


def changed_inputs(state: AllocState, before: dict[str, Any], got: Allocation) -> list[str]:
    """Each input field the step wrote though only ``req_to_token`` (when returned as recorded), ``out`` and the
    SWA mapping are its to write: the field and its first changed entry."""
    now = _snapshot(state)
    if got.req_to_token.untyped_storage().data_ptr() == state.req_to_token.untyped_storage().data_ptr():
        now["req_to_token"] = before["req_to_token"]  # recorded in place and returned: A1/A2 judge it
    changed = []
    offset = state.free_pages.storage_offset()
    for name, was in before.items():
        is_ = now[name]
        if isinstance(was, torch.Tensor):
            diff = (was != is_).nonzero() if was.shape == is_.shape else torch.zeros((1, 1), dtype=torch.long)
            if diff.numel():
                at = tuple(int(v) for v in diff[0])
                index = at[0] - offset if name == "free_pages" else (at if len(at) > 1 else at[0])
                changed.append(f"{name}: entry {index} changed from {int(was[at])} to {int(is_[at])}")
        elif was != is_:
            changed.append(f"{name}: {was} -> {is_}")
    return changed


def call_allocator(backend: Any, op: str, state: AllocState) -> tuple[Any, list[torch.Tensor], list[str]]:
    """Run ``backend.op(state)`` as the properties do: the buffers it makes guarded, its inputs compared after.
    Returns what it returned, the guarded arenas of the buffers it made and the inputs it changed."""
    snapshot, made = _snapshot(state), EngineBuffers()
    with made:
        got = getattr(backend, op)(state)
    changed = changed_inputs(state, snapshot, got) if isinstance(getattr(got, "req_to_token", None),
                                                                 torch.Tensor) else []
    return got, made.arenas, changed


def _guards(locs: torch.Tensor, arenas: Sequence[torch.Tensor]) -> tuple[list[int], list[int], int] | None:
    """The guard cells around ``locs`` and their sentinel, if ``locs`` is a view of one of the guarded arenas."""
    if not isinstance(locs, torch.Tensor) or locs.dim() != 1:
        return None
    for arena in arenas:
        if locs.device == arena.device and locs.untyped_storage().data_ptr() == arena.untyped_storage().data_ptr():
            at = locs.storage_offset() - arena.storage_offset()
            canary = CANARY if arena.dtype == torch.int64 else CANARY32
            return (arena[max(at - GUARD, 0):at].tolist(), arena[at + locs.numel():at + locs.numel() + GUARD].tolist(),
                    canary)
    return None


def alloc_outcome(allocation: Allocation, arena: torch.Tensor, made: Sequence[torch.Tensor] = (),
                  changed: Sequence[str] = ()) -> AllocOutcome:
    """What the backend did, as the judge reads it (``AllocOutcome``): the guards of whichever guarded buffer
    its locations are (``arena``, kvtable's, or one it made, ``made``); a buffer kvtable did not make (a view
    of the free list) has none."""
    guards = _guards(allocation.locs.reshape(-1), [arena, *made])
    before, after, canary = guards if guards is not None else ([], [], 0)
    swa_locs, swa_mapping = allocation.swa_locs, allocation.swa_mapping

    def _list(values: Any) -> list[int] | None:
        return None if values is None else [int(v) for v in (values.reshape(-1).tolist()
                                                              if isinstance(values, torch.Tensor) else values)]

    return AllocOutcome(allocation.locs.reshape(-1).tolist(), allocation.req_to_token.tolist(), before, after,
                        canary, _list(swa_locs), _list(swa_mapping), _list(allocation.rows),
                        _list(allocation.allocated_lens), _list(allocation.free_pages),
                        _list(allocation.freed_pages) or [], list(changed), guarded=guards is not None,
                        swa_free_pages=_list(getattr(allocation, "swa_free_pages", None)))


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
    wanted = [("A1", "locations", got.locs, (conventions.loc_dtype,))]
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
)
