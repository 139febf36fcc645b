"""Calling a backend's allocator as every allocator check does: ``alloc_state`` hands it a step's tensors with its
output buffer between guard cells holding a sentinel, and its free list a view of a longer list; ``call_allocator``
runs it with every 1-D integer ``torch.empty`` it makes guarded the same way (``EngineBuffers``) and its inputs
compared after; ``alloc_outcome`` is what it did, as ``reference.allocation.judge_allocation`` reads it. The
``alloc/*`` properties, the trace judge and the SGLang recorder all call through here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from kvtable.alloc_contract import Allocation, AllocState, SwaPool
from kvtable.reference.allocation import AllocOutcome, AllocStep, alloc_tokens

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
        out = func(*args, **kwargs) if kwargs else func(*args)  # every torch call of the step (and its guard's)
        if func is torch.empty and out.dim() == 1 and out.dtype in (torch.int32, torch.int64):
            canary = CANARY if out.dtype == torch.int64 else CANARY32
            arena = torch.full((GUARD + out.numel() + GUARD,), canary, dtype=out.dtype, device=out.device)
            self.arenas.append(arena)
            return arena[GUARD:GUARD + out.numel()]
        return out


def _inputs(state: AllocState) -> dict[str, Any]:
    """The inputs a step may not write, as they are now (the tensors themselves; the free list with the popped
    pages before it)."""
    free = state.free_pages
    now: dict[str, Any] = {name: list(getattr(state, name) or []) for name in
                           ("rows", "prefix_lens", "seq_lens", "allocated_lens", "free_rows")}
    now["free_pages"] = free.as_strided((free.storage_offset() + free.numel(),), (1,), 0)
    now["req_to_token"] = state.req_to_token
    if state.swa is not None:
        now["swa.free_pages"] = state.swa.free_pages
        now["swa.tail_lens"] = list(state.swa.tail_lens or [])
    return now


def _snapshot(state: AllocState) -> dict[str, Any]:
    """The inputs a step may not write, as they were handed (copies)."""
    return {name: value.clone() if isinstance(value, torch.Tensor) else value
            for name, value in _inputs(state).items()}


def changed_inputs(state: AllocState, before: dict[str, Any], got: Allocation) -> list[str]:
    """Each input field the step wrote though only ``req_to_token`` (when returned as recorded), ``out`` and the
    SWA mapping are its to write: the field and its first changed entry."""
    now = _inputs(state)
    if got.req_to_token.untyped_storage().data_ptr() == state.req_to_token.untyped_storage().data_ptr():
        now["req_to_token"] = before["req_to_token"]  # recorded in place and returned: A1/A2 judge it
    changed = []
    offset = state.free_pages.storage_offset()
    for name, was in before.items():
        is_ = now[name]
        if isinstance(was, torch.Tensor):
            if torch.equal(was, is_):
                continue
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
