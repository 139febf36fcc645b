"""A1-A5: the contract of an allocator-driven step (SGLang's route): the engine picks the slots, then records them.

An allocator-driven engine is handed a token table (``req_to_token``: row ``r``, position ``p`` -> slot), the
request rows of a batch with their lengths, and a pool of free pages; it chooses one slot per new token and
records it in the table. Request ``i`` writes positions ``[prefix_lens[i], seq_lens[i])`` of row ``rows[i]``
(decode: one, verify: N, extend: the chunk); its tokens come in request order in the output. Page 0 (slot 0
at page size 1) is the reserved padding sink: no request owns it. Plain ints and lists, no torch.

``judge_allocation`` checks one step against every clause and returns every fault it finds (empty: legal).
A fault is ``unsafe`` when it shows a write outside what the step may touch (another row, a slot not free,
outside the pool, before or past the output buffer); the rest are correctness faults on a legal write.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

AllocMode = Literal["decode", "verify", "extend"]
ALLOC_MODES: tuple[AllocMode, ...] = ("decode", "verify", "extend")


@dataclass(frozen=True)
class SwaState:
    """The sliding-window pool behind a full pool: SGLang's ``full_to_swa_index_mapping`` and its free pages."""

    mapping: Sequence[int]
    """Full slot -> SWA slot (0: none); one entry per full slot, then the sentinel ``-1`` (so index -1 maps to -1)."""
    free_pages: Sequence[int]
    pool_pages: int
    """SWA pages ``1 .. pool_pages`` exist; page 0 is the SWA pool's reserved sink."""


@dataclass(frozen=True)
class AllocStep:
    """What an allocator-driven backend is handed for one step."""

    mode: AllocMode
    req_to_token: Sequence[Sequence[int]]
    """The token table before the step: ``req_to_token[row][pos]`` is the slot of position ``pos``."""
    rows: Sequence[int]
    """The table row of each request (SGLang's ``req_pool_indices``)."""
    prefix_lens: Sequence[int]
    """Positions already recorded per request; the step writes ``[prefix, seq)``."""
    seq_lens: Sequence[int]
    free_pages: Sequence[int]
    """Free pages in the order the allocator may take them (slots at page size 1)."""
    page_size: int
    pool_pages: int
    """Pages ``1 .. pool_pages`` form the pool: slots ``[page_size, (pool_pages + 1) * page_size)``."""
    swa: SwaState | None = None

    @property
    def pool_end(self) -> int:
        """One past the pool's last slot."""
        return (self.pool_pages + 1) * self.page_size


@dataclass(frozen=True)
class AllocOutcome:
    """What the backend did: the slots it chose (output order), the table as it recorded it, and the guards."""

    locs: Sequence[int]
    req_to_token: Sequence[Sequence[int]]
    guard_before: Sequence[int] = ()
    """The cells just before the output buffer as the step left them (``guard_before[-1]`` is entry -1)."""
    guard_after: Sequence[int] = ()
    """The cells just past the output buffer as the step left them."""
    canary: int = 0
    """What the guard cells held before the step."""
    swa_locs: Sequence[int] | None = None
    swa_mapping: Sequence[int] | None = None
    """The SWA mapping as the step recorded it."""


@dataclass(frozen=True)
class AllocFault:
    """One breach of an allocator clause, naming the request, its row and the token."""

    clause: str
    unsafe: bool
    request: int | None
    row: int | None
    token: int | None
    """Index of the token in the output (may be negative or past the end for a write outside the buffer)."""
    position: int | None
    loc: int | None
    reason: str

    def text(self) -> str:
        """``request i (row r) token k position p loc l: reason``."""
        who = "no request" if self.request is None else f"request {self.request} (row {self.row})"
        return f"{who} token {self.token} position {self.position} loc {self.loc}: {self.reason}"


Token = tuple[int, int]
"""``(request, position)`` of one output entry."""


def alloc_tokens(step: AllocStep) -> list[Token]:
    """``(request, position)`` of each output entry, in output order; a request with ``seq <= prefix`` has none."""
    return [(i, pos) for i, (prefix, seq) in enumerate(zip(step.prefix_lens, step.seq_lens, strict=True))
            for pos in range(prefix, seq)]


def swa_slot(mapping: Sequence[int], loc: int) -> int:
    """SGLang's translation of full slot ``loc``: ``mapping[loc]``, the sentinel -1 for ``loc == -1``, 0 if absent."""
    if loc == -1:
        return mapping[-1]
    return mapping[loc] if 0 <= loc < len(mapping) - 1 else 0


def _fault(step: AllocStep, clause: str, unsafe: bool, request: int | None, token: int | None,
           position: int | None, loc: int | None, reason: str) -> AllocFault:
    row = None if request is None else step.rows[request]
    return AllocFault(clause, unsafe, request, row, token, position, loc, reason)


def _cell(table: Sequence[Sequence[int]], row: int, pos: int) -> int | None:
    """``table[row][pos]``, or None where that cell does not exist."""
    if 0 <= row < len(table) and 0 <= pos < len(table[row]):
        return table[row][pos]
    return None


def check_recorded(step: AllocStep, outcome: AllocOutcome) -> list[AllocFault]:
    """A1 alloc-recorded: each chosen location is recorded at its token's own position of its own row (a cell
    holding another token's chosen slot is that token's misplaced write, A2's).

    A recorded value that differs and is no slot of the pool (nor the sink) is unsafe: a later write through
    the table lands outside the pool. One that names another slot is a correctness fault.
    """
    faults = []
    chosen = set(outcome.locs)
    for k, ((i, pos), loc) in enumerate(zip(alloc_tokens(step), outcome.locs, strict=False)):
        if _cell(step.req_to_token, step.rows[i], pos) is None:
            continue  # a token with no cell of its own (broken lengths): A2 judges where it went
        got = _cell(outcome.req_to_token, step.rows[i], pos)
        if got != loc and got not in chosen:  # another token's slot here: that token wrote out of place (A2)
            unsafe = got is None or not 0 <= got < step.pool_end
            faults.append(_fault(step, "A1", unsafe, i, k, pos, loc, f"recorded {got} at its position, "
                                 f"not the chosen {loc}" + (" (outside the pool)" if unsafe else "")))
    return faults


def check_rows_kept(step: AllocStep, outcome: AllocOutcome) -> list[AllocFault]:
    """A2 alloc-rows-kept: only the cells of this step's tokens change, each to no other token's slot; no other
    row and no other position."""
    before, after = step.req_to_token, outcome.req_to_token
    if len(after) != len(before) or any(len(a) != len(b) for a, b in zip(after, before, strict=False)):
        return [_fault(step, "A2", False, None, None, None, None, "the recorded table changed shape "
                       f"({len(before)} rows -> {len(after)})")]
    tokens = alloc_tokens(step)
    own = {(step.rows[i], pos): k for k, (i, pos) in enumerate(tokens)}
    writer = {loc: k for k, loc in reversed(list(enumerate(outcome.locs)))}
    faults = []
    for row, (old, new) in enumerate(zip(before, after, strict=True)):
        for col, (was, now) in enumerate(zip(old, new, strict=True)):
            mine = own.get((row, col))
            if was == now or (mine is not None and (now not in writer or _chose(outcome, mine) == now)):
                continue  # unchanged, or a token's own cell holding its slot or no token's slot (A1 judges it)
            k = writer.get(now)
            request, pos = tokens[k] if k is not None and k < len(tokens) else (None, None)
            whose = _row_owner(step, row)
            faults.append(_fault(step, "A2", True, request, k, pos, now,
                                 f"changed row {row} col {col} ({whose}) from {was} to {now}"))
    return faults


def _chose(outcome: AllocOutcome, token: int) -> int | None:
    return outcome.locs[token] if token < len(outcome.locs) else None


def _row_owner(step: AllocStep, row: int) -> str:
    """``request j's row`` or ``a row of no request in this batch``."""
    return f"request {list(step.rows).index(row)}'s row" if row in step.rows else "a row of no request in the batch"


def _partial_page(step: AllocStep, table: Sequence[Sequence[int]], i: int, mapping: Sequence[int] | None = None
                  ) -> int | None:
    """The page of request ``i``'s partially filled last page (its slot at ``prefix - 1``), if it has one."""
    prefix = step.prefix_lens[i]
    if step.page_size == 1 or prefix <= 0 or prefix % step.page_size == 0:
        return None
    last = _cell(table, step.rows[i], prefix - 1)
    if last is None:
        return None
    if mapping is not None:
        last = swa_slot(mapping, last)
    return last // step.page_size if last >= step.page_size else None


def _slot_faults(step: AllocStep, clause: str, locs: Sequence[int], free: set[int], pool_end: int,
                 partial: Sequence[int | None], live: dict[int, Token]) -> list[AllocFault]:
    """The free-slot rules (A3, and A5 in SWA space) for ``locs``, one per output token."""
    ps, faults = step.page_size, []
    seen: dict[int, int] = {}
    pages: dict[tuple[int, int], int] = {}
    for k, ((i, pos), loc) in enumerate(zip(alloc_tokens(step), locs, strict=False)):
        page = loc // ps
        unsafe_reason = ""
        if loc < 0:
            unsafe_reason = f"negative slot {loc}"
        elif loc >= pool_end:
            unsafe_reason = f"past the pool (slots end at {pool_end})"
        elif page == 0:
            unsafe_reason = "page 0, the reserved padding sink, which no request owns" if pos >= 0 else ""
        elif loc in live:
            unsafe_reason = f"slot of live token {live[loc]} (request, position)"
        elif page not in free and page != partial[i]:
            unsafe_reason = f"page {page} is neither free nor the request's own partially filled last page"
        elif loc in seen:
            unsafe_reason = f"also chosen for token {seen[loc]}"
        if unsafe_reason:
            faults.append(_fault(step, clause, True, i, k, pos, loc, unsafe_reason))
            continue
        seen[loc] = k
        if page and pos >= 0 and loc % ps != pos % ps:
            faults.append(_fault(step, clause, False, i, k, pos, loc, f"offset {loc % ps} in its page, but the "
                                 f"position's offset is {pos % ps} (a page table derived from the row misreads it)"))
        elif page and pos >= 0 and pages.setdefault((i, pos // ps), page) != page:
            faults.append(_fault(step, clause, False, i, k, pos, loc, f"page {page}, but the request's other "
                                 f"tokens of page column {pos // ps} use page {pages[(i, pos // ps)]}"))
    return faults


def _live_slots(step: AllocStep, table: Sequence[Sequence[int]], mapping: Sequence[int] | None = None
                ) -> dict[int, Token]:
    """Slot -> (request, position) of every live token of the batch's rows (positions below each prefix)."""
    live: dict[int, Token] = {}
    for i, (row, prefix) in enumerate(zip(step.rows, step.prefix_lens, strict=True)):
        for pos in range(max(prefix, 0)):
            slot = _cell(table, row, pos)
            if slot is not None and mapping is not None:
                slot = swa_slot(mapping, slot)
            if slot is not None and slot >= step.page_size:
                live.setdefault(slot, (i, pos))
    return live


def check_free_slots(step: AllocStep, outcome: AllocOutcome) -> list[AllocFault]:
    """A3 alloc-free-slot: each location is a slot of a free page, or of the request's own partially filled last
    page (page size > 1); never page 0, never outside the pool, never a live token's slot, never chosen twice;
    at offset ``pos % page_size`` of its page, one page per page column."""
    partial = [_partial_page(step, step.req_to_token, i) for i in range(len(step.rows))]
    return _slot_faults(step, "A3", outcome.locs, set(step.free_pages), step.pool_end, partial,
                        _live_slots(step, step.req_to_token))


def check_out_buffer(step: AllocStep, outcome: AllocOutcome) -> list[AllocFault]:
    """A4 alloc-out-buffer: one location per token, written inside the output buffer only (the guards intact)."""
    tokens = alloc_tokens(step)
    faults = []
    starts = [0]
    for prefix, seq in zip(step.prefix_lens, step.seq_lens, strict=True):
        starts.append(starts[-1] + seq - prefix)  # signed: where a kernel summing extend lengths starts each request
    edges = [(-len(outcome.guard_before) + g, v) for g, v in enumerate(outcome.guard_before)]
    edges += [(len(outcome.locs) + g, v) for g, v in enumerate(outcome.guard_after)]
    for index, value in edges:
        if value == outcome.canary:
            continue
        request = next((i for i in range(len(step.rows)) if starts[i] <= index < starts[i + 1]), None)
        pos = None if request is None else step.prefix_lens[request] + index - starts[request]
        side = "before" if index < 0 else "past"
        faults.append(_fault(step, "A4", True, request, index, pos, value,
                             f"wrote entry {index}, {side} the output buffer of {len(outcome.locs)} entries"))
    if len(outcome.locs) != len(tokens):
        faults.append(_fault(step, "A4", False, None, None, None, None,
                             f"{len(outcome.locs)} locations for {len(tokens)} tokens"))
    return faults


def check_swa_slots(step: AllocStep, outcome: AllocOutcome) -> list[AllocFault]:
    """A5 alloc-swa-slot: with a SWA pool, each token's SWA slot is free (or on its own partial SWA page), in the
    SWA pool, never its page 0, distinct; the mapping records it at the chosen full slot, changes nothing else
    and keeps the sentinel ``mapping[-1] = -1``."""
    swa = step.swa
    if swa is None:
        return []
    if outcome.swa_locs is None or outcome.swa_mapping is None:
        return [_fault(step, "A5", False, None, None, None, None, "a SWA pool was handed, but no SWA locations "
                       "or mapping came back")]
    partial = [_partial_page(step, step.req_to_token, i, swa.mapping) for i in range(len(step.rows))]
    faults = _slot_faults(step, "A5", outcome.swa_locs, set(swa.free_pages), (swa.pool_pages + 1) * step.page_size,
                          partial, _live_slots(step, step.req_to_token, swa.mapping))
    if len(outcome.swa_locs) != len(outcome.locs):
        faults.append(_fault(step, "A5", False, None, None, None, None,
                             f"{len(outcome.swa_locs)} SWA locations for {len(outcome.locs)} locations"))
    recorded, tokens = outcome.swa_mapping, alloc_tokens(step)
    if len(recorded) != len(swa.mapping) or recorded[-1] != -1:
        return [*faults, _fault(step, "A5", True, None, None, None, None, "the mapping lost its sentinel "
                                "(mapping[-1] = -1) or changed length: translating last_loc -1 names a real slot")]
    chosen = dict(zip(outcome.locs, range(len(tokens)), strict=False))
    for slot, (was, now) in enumerate(zip(swa.mapping, recorded, strict=True)):
        k = chosen.get(slot)
        if k is not None and k < len(outcome.swa_locs):
            if now != outcome.swa_locs[k]:
                i, pos = tokens[k]
                faults.append(_fault(step, "A5", False, i, k, pos, slot, f"mapping[{slot}] records {now}, not "
                                     f"the chosen SWA slot {outcome.swa_locs[k]}"))
        elif was != now:
            faults.append(_fault(step, "A5", True, None, None, None, slot, f"mapping[{slot}] of no chosen slot "
                                 f"changed from {was} to {now}"))
    return faults


def judge_allocation(step: AllocStep, outcome: AllocOutcome) -> list[AllocFault]:
    """Every fault of one allocator step against A1-A5: unsafe ones first, then A4, A1, A2, A3, A5 (where the
    output went, what was recorded at the token's own cell, what else changed, which slot, the SWA side)."""
    faults = [*check_out_buffer(step, outcome), *check_recorded(step, outcome), *check_rows_kept(step, outcome),
              *check_free_slots(step, outcome), *check_swa_slots(step, outcome)]
    return sorted(faults, key=lambda f: not f.unsafe)
