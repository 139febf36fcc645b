"""A1-A6: the contract of an allocator-driven step (SGLang's route): the engine picks the slots, then records them.

An allocator-driven engine is handed a token table (``req_to_token``: row ``r``, position ``p`` -> slot), the
request rows of a batch with their lengths, and a pool of free pages; it chooses one slot per new token and
records it in the table. Request ``i`` writes positions ``[allocated, end)`` of row ``rows[i]``, where
``allocated`` is its allocated length before the step (its prefix unless an earlier speculative step
over-allocated) and ``end >= seq_lens[i]`` (decode: one, verify: N, extend: the chunk; a speculative step may
round up to its page's end); its tokens come in request order in the output. An engine may take a fresh row
for a request (copying its prefix's slots there) and hands back its free list: after the step the pages it
holds, its free list and what it freed partition the pool (A6, ``pool_faults``). Page 0 (slot 0 at page size 1)
is the reserved padding sink: no request owns it. Plain ints and lists, no torch.

``judge_allocation`` checks one step against every clause and returns every fault it finds (empty: legal).
A fault is ``unsafe`` when it shows a write outside what the step may touch (another row, a slot not free,
outside the pool, before or past the output buffer, an input), or a page two holders get; the rest are
correctness faults on a legal write.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
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
    tail_lens: Sequence[int] | None = None
    """Declared tail-only allocation: request ``i``'s last ``tail_lens[i]`` new tokens get SWA slots, the others
    may map to 0 (SGLang's ``alloc_extend_swa_tail``); None: every new token gets one."""


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
    allocated_lens: Sequence[int] | None = None
    """Positions ``[0, allocated)`` of each request already hold slots (>= prefix: an earlier speculative step
    over-allocated); None: the prefix lengths, and the caller keeps no allocated lengths, so the step may not
    allocate past ``seq``."""
    free_rows: Sequence[int] = ()
    """Rows no request holds, which the step may take for a request."""

    @property
    def starts(self) -> list[int]:
        """Each request's first position to allocate: its allocated length (its prefix unless over-allocated)."""
        return list(self.prefix_lens if self.allocated_lens is None else self.allocated_lens)

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
    rows: Sequence[int] | None = None
    """The row each request's slots went to, if the engine chose them; None: the step's rows."""
    allocated_lens: Sequence[int] | None = None
    """Each request's allocated end after the step; None: ``max(seq, allocated before)``."""
    free_pages: Sequence[int] | None = None
    """The engine's free list after the step (A6); None: it keeps none the judge can read."""
    freed_pages: Sequence[int] = ()
    """Pages the step released and has not put back on its free list (A6)."""
    changed_inputs: Sequence[str] = ()
    """Each input field the step wrote though it may not, with what changed (``free_pages: entry 0 5 -> 7``)."""
    guarded: bool = False
    """Whether the output buffer was kvtable's (or one it guarded) and so filled with ``canary`` before the step:
    an entry still holding it was never written."""
    swa_free_pages: Sequence[int] | None = None
    """With a SWA pool: the SWA free list after the step (A6); None: none the judge can read."""


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


def alloc_ends(step: AllocStep, outcome: AllocOutcome | None = None) -> list[int]:
    """Each request's allocated end after the step: as the engine returned it, else ``max(seq, start)``."""
    if outcome is not None and outcome.allocated_lens is not None:
        return list(outcome.allocated_lens)
    return [max(seq, start) for seq, start in zip(step.seq_lens, step.starts, strict=True)]


def alloc_tokens(step: AllocStep, outcome: AllocOutcome | None = None) -> list[Token]:
    """``(request, position)`` of each output entry, in output order: positions ``[start, end)`` of each request
    (a request with ``seq <= start`` has none unless the engine over-allocates)."""
    return [(i, pos) for i, (start, end) in enumerate(zip(step.starts, alloc_ends(step, outcome), strict=True))
            for pos in range(start, end)]


def out_rows(step: AllocStep, outcome: AllocOutcome) -> list[int]:
    """The row each request's slots went to."""
    return list(step.rows if outcome.rows is None else outcome.rows)


def swa_slot(mapping: Sequence[int], loc: int) -> int:
    """SGLang's translation of full slot ``loc``: ``mapping[loc]``, the sentinel -1 for ``loc == -1``, 0 if absent."""
    if loc == -1:
        return mapping[-1]
    return mapping[loc] if 0 <= loc < len(mapping) - 1 else 0


def _fault(step: AllocStep, clause: str, unsafe: bool, request: int | None, token: int | None,
           position: int | None, loc: int | None, reason: str, rows: Sequence[int] | None = None) -> AllocFault:
    row = None if request is None else (step.rows if rows is None else rows)[request]
    return AllocFault(clause, unsafe, request, row, token, position, loc, reason)


def _cell(table: Sequence[Sequence[int]], row: int, pos: int) -> int | None:
    """``table[row][pos]``, or None where that cell does not exist."""
    if 0 <= row < len(table) and 0 <= pos < len(table[row]):
        return table[row][pos]
    return None


def check_recorded(step: AllocStep, outcome: AllocOutcome) -> list[AllocFault]:
    """A1 alloc-recorded: each chosen location is recorded at its token's own position of its own row (a cell
    holding another token's chosen slot is that token's misplaced write, A2's); a request moved to a fresh row
    has its earlier slots copied there; every committed position has a slot (``end >= seq``), and a request
    allocates no page past the one its last committed position needs.

    A recorded value that differs and is no slot of the pool (nor the sink) is unsafe: a later write through
    the table lands outside the pool. So is a committed position left without a slot (its KV goes wherever the
    stale cell points). One that names another slot is a correctness fault.
    """
    faults = []
    rows = out_rows(step, outcome)
    chosen = set(outcome.locs)
    for k, ((i, pos), loc) in enumerate(zip(alloc_tokens(step, outcome), outcome.locs, strict=False)):
        if _cell(step.req_to_token, rows[i], pos) is None:
            continue  # a token with no cell of its own (broken lengths): A2 judges where it went
        got = _cell(outcome.req_to_token, rows[i], pos)
        if got != loc and got not in chosen:  # another token's slot here: that token wrote out of place (A2)
            unsafe = got is None or not 0 <= got < step.pool_end
            faults.append(_fault(step, "A1", unsafe, i, k, pos, loc, f"recorded {got} at its position, "
                                 f"not the chosen {loc}" + (" (outside the pool)" if unsafe else ""), rows))
    for i, (start, end, seq) in enumerate(zip(step.starts, alloc_ends(step, outcome), step.seq_lens, strict=True)):
        if end < seq:
            faults.append(_fault(step, "A1", True, i, None, end, None, f"allocated up to {end}, but positions "
                                 f"[{end}, {seq}) are committed: their KV goes where the stale cells point", rows))
        elif end > max(-(-seq // step.page_size) * step.page_size if step.allocated_lens is not None else seq,
                       start):
            faults.append(_fault(step, "A1", False, i, None, end, None, f"allocated up to {end}, past " + (
                f"the end of the page of its last position {seq - 1}" if step.allocated_lens is not None else
                f"its length {seq}, though the state keeps no allocated lengths"), rows))
        if rows[i] != step.rows[i]:
            for pos in range(max(start, 0)):
                was, now = _cell(step.req_to_token, step.rows[i], pos), _cell(outcome.req_to_token, rows[i], pos)
                if was != now:
                    faults.append(_fault(step, "A1", False, i, None, pos, now, f"moved to row {rows[i]}, which "
                                         f"holds {now} at position {pos}, not its slot {was}", rows))
                    break
    return faults


def check_rows_kept(step: AllocStep, outcome: AllocOutcome) -> list[AllocFault]:
    """A2 alloc-rows-kept: only the cells of this step's tokens change (and, for a request moved to a row of
    ``free_rows``, that row's earlier positions), each to no other token's slot; no other row, no other position."""
    before, after = step.req_to_token, outcome.req_to_token
    if len(after) != len(before) or any(len(a) != len(b) for a, b in zip(after, before, strict=False)):
        return [_fault(step, "A2", False, None, None, None, None, "the recorded table changed shape "
                       f"({len(before)} rows -> {len(after)})")]
    rows = out_rows(step, outcome)
    faults = _row_choices(step, rows)
    tokens = alloc_tokens(step, outcome)
    own = {(rows[i], pos): k for k, (i, pos) in enumerate(tokens)}
    copied = {(row, pos) for i, row in enumerate(rows) if row != step.rows[i] for pos in range(step.starts[i])}
    writer = {loc: k for k, loc in reversed(list(enumerate(outcome.locs)))}
    for row, (old, new) in enumerate(zip(before, after, strict=True)):
        if old == new:
            continue  # a row the step left as it was (most of them): nothing to judge cell by cell
        for col, (was, now) in enumerate(zip(old, new, strict=True)):
            mine = own.get((row, col))
            if was == now or (row, col) in copied or (mine is not None and (now not in writer
                                                                           or _chose(outcome, mine) == now)):
                continue  # unchanged, a moved prefix (A1 judges it), or a token's own cell holding its slot
            k = writer.get(now)
            request, pos = tokens[k] if k is not None and k < len(tokens) else (None, None)
            whose = (f"request {rows.index(row)}'s new row" if row in rows and row not in step.rows
                     else _row_owner(step, row))
            faults.append(_fault(step, "A2", True, request, k, pos, now,
                                 f"changed row {row} col {col} ({whose}) from {was} to {now}", rows))
    return faults


def _row_choices(step: AllocStep, rows: Sequence[int]) -> list[AllocFault]:
    """A2: a request moved to another row takes a row of ``free_rows``, and no two requests share one."""
    faults: list[AllocFault] = []
    seen: dict[int, int] = {}
    for i, row in enumerate(rows):
        if row != step.rows[i] and row not in step.free_rows:
            faults.append(_fault(step, "A2", True, i, None, None, None, f"took row {row} "
                                 f"({_row_owner(step, row)}), which is not a free row", rows))
        elif row in seen:
            faults.append(_fault(step, "A2", True, i, None, None, None, f"took row {row}, which request "
                                 f"{seen[row]} also took", rows))
        seen.setdefault(row, i)
    return faults


def _chose(outcome: AllocOutcome, token: int) -> int | None:
    return outcome.locs[token] if token < len(outcome.locs) else None


def _row_owner(step: AllocStep, row: int) -> str:
    """``request j's row`` or ``a row of no request in this batch``."""
    if row in step.rows:
        return f"request {list(step.rows).index(row)}'s row"
    return "a free row" if row in step.free_rows else "a row of no request in the batch"


def _partial_page(step: AllocStep, table: Sequence[Sequence[int]], i: int, mapping: Sequence[int] | None = None
                  ) -> int | None:
    """The page of request ``i``'s partially filled last page (its slot at ``start - 1``), if it has one."""
    prefix = step.starts[i]
    if step.page_size == 1 or prefix <= 0 or prefix % step.page_size == 0:
        return None
    last = _cell(table, step.rows[i], prefix - 1)
    if last is None:
        return None
    if mapping is not None:
        last = swa_slot(mapping, last)
    return last // step.page_size if last >= step.page_size else None


def _slot_faults(step: AllocStep, outcome: AllocOutcome, clause: str, locs: Sequence[int], free: set[int],
                 pool_end: int, partial: Sequence[int | None], live: dict[int, Token],
                 sink_ok: frozenset[int] | set[int] = frozenset()) -> list[AllocFault]:
    """The free-slot rules (A3, and A5 in SWA space) for ``locs``, one per output token; a token of ``sink_ok``
    (a head token of a declared SWA tail) may get the sink 0."""
    ps, faults, rows = step.page_size, [], out_rows(step, outcome)
    seen: dict[int, int] = {}
    pages: dict[tuple[int, int], int] = {}
    for k, ((i, pos), loc) in enumerate(zip(alloc_tokens(step, outcome), locs, strict=False)):
        page = loc // ps
        unsafe_reason = ""
        if loc < 0:
            unsafe_reason = f"negative slot {loc}"
        elif loc >= pool_end:
            unsafe_reason = f"past the pool (slots end at {pool_end})"
        elif page == 0:
            if pos >= 0 and not (k in sink_ok and loc == 0):
                unsafe_reason = "page 0, the reserved padding sink, which no request owns"
        elif loc in live:
            unsafe_reason = f"slot of live token {live[loc]} (request, position)"
        elif page not in free and page != partial[i]:
            unsafe_reason = f"page {page} is neither free nor the request's own partially filled last page"
        elif loc in seen:
            unsafe_reason = f"also chosen for token {seen[loc]}"
        if unsafe_reason:
            faults.append(_fault(step, clause, True, i, k, pos, loc, unsafe_reason, rows))
            continue
        seen[loc] = k
        if page and pos >= 0 and loc % ps != pos % ps:
            faults.append(_fault(step, clause, False, i, k, pos, loc, f"offset {loc % ps} in its page, but the "
                                 f"position's offset is {pos % ps} (a page table derived from the row misreads it)",
                                 rows))
        elif page and pos >= 0 and pages.setdefault((i, pos // ps), page) != page:
            faults.append(_fault(step, clause, False, i, k, pos, loc, f"page {page}, but the request's other "
                                 f"tokens of page column {pos // ps} use page {pages[(i, pos // ps)]}", rows))
    return faults


def _live_slots(step: AllocStep, table: Sequence[Sequence[int]], mapping: Sequence[int] | None = None
                ) -> dict[int, Token]:
    """Slot -> (request, position) of every live token of the batch's rows (positions below each allocated
    length)."""
    live: dict[int, Token] = {}
    for i, (row, start) in enumerate(zip(step.rows, step.starts, strict=True)):
        for pos in range(max(start, 0)):
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
    return _slot_faults(step, outcome, "A3", outcome.locs, set(step.free_pages), step.pool_end, partial,
                        _live_slots(step, step.req_to_token))


def _out_starts(step: AllocStep, outcome: AllocOutcome) -> list[int]:
    """Each request's first output entry (and one past the last), counting each request's signed token count:
    where a kernel summing extend lengths starts each request."""
    ends = step.seq_lens if outcome.allocated_lens is None else outcome.allocated_lens
    starts = [0]
    for start, end in zip(step.starts, ends, strict=True):
        starts.append(starts[-1] + end - start)
    return starts


def check_out_buffer(step: AllocStep, outcome: AllocOutcome) -> list[AllocFault]:
    """A4 alloc-out-buffer: one location per token, every entry of a guarded buffer written, nothing written
    before or past it (the guards intact), and no input written (only the table, the buffer and the SWA mapping
    are the step's to write)."""
    tokens, rows = alloc_tokens(step, outcome), out_rows(step, outcome)
    faults = [_fault(step, "A4", True, None, None, None, None, f"wrote its input {what}")
              for what in outcome.changed_inputs]
    starts = _out_starts(step, outcome)
    edges = [(-len(outcome.guard_before) + g, v) for g, v in enumerate(outcome.guard_before)]
    edges += [(len(outcome.locs) + g, v) for g, v in enumerate(outcome.guard_after)]
    for index, value in edges:
        if value == outcome.canary:
            continue
        request = next((i for i in range(len(step.rows)) if starts[i] <= index < starts[i + 1]), None)
        pos = None if request is None else step.starts[request] + index - starts[request]
        side = "before" if index < 0 else "past"
        faults.append(_fault(step, "A4", True, request, index, pos, value,
                             f"wrote entry {index}, {side} the output buffer of {len(outcome.locs)} entries", rows))
    if outcome.guarded:
        for k, ((i, pos), loc) in enumerate(zip(tokens, outcome.locs, strict=False)):
            if loc == outcome.canary:
                faults.append(_fault(step, "A4", True, i, k, pos, loc, f"left entry {k} of the output buffer "
                                     "unwritten (it still holds the sentinel): its KV goes wherever garbage points",
                                     rows))
    if len(outcome.locs) != len(tokens):
        faults.append(_fault(step, "A4", False, None, None, None, None,
                             f"{len(outcome.locs)} locations for {len(tokens)} tokens"))
    return faults


def _swa_sink_ok(step: AllocStep, outcome: AllocOutcome) -> set[int]:
    """The output entries a declared SWA tail leaves without a SWA slot: each request's new tokens before its
    last ``tail_lens[i]``."""
    if step.swa is None or step.swa.tail_lens is None:
        return set()
    tokens = alloc_tokens(step, outcome)
    counts = [sum(1 for i, _ in tokens if i == r) for r in range(len(step.rows))]
    seen = [0] * len(step.rows)
    head = set()
    for k, (i, _) in enumerate(tokens):
        if seen[i] < counts[i] - step.swa.tail_lens[i]:
            head.add(k)
        seen[i] += 1
    return head


def check_swa_slots(step: AllocStep, outcome: AllocOutcome) -> list[AllocFault]:
    """A5 alloc-swa-slot: with a SWA pool, each token's SWA slot is free (or on its own partial SWA page), in the
    SWA pool, never its page 0 (except a head token of a declared tail, which gets 0), distinct; the mapping
    records it at the chosen full slot, changes nothing else and keeps the sentinel ``mapping[-1] = -1``."""
    swa = step.swa
    if swa is None:
        return []
    if outcome.swa_locs is None or outcome.swa_mapping is None:
        return [_fault(step, "A5", False, None, None, None, None, "a SWA pool was handed, but no SWA locations "
                       "or mapping came back")]
    partial = [_partial_page(step, step.req_to_token, i, swa.mapping) for i in range(len(step.rows))]
    faults = _slot_faults(step, outcome, "A5", outcome.swa_locs, set(swa.free_pages),
                          (swa.pool_pages + 1) * step.page_size, partial,
                          _live_slots(step, step.req_to_token, swa.mapping), _swa_sink_ok(step, outcome))
    if len(outcome.swa_locs) != len(outcome.locs):
        faults.append(_fault(step, "A5", False, None, None, None, None,
                             f"{len(outcome.swa_locs)} SWA locations for {len(outcome.locs)} locations"))
    recorded, tokens = outcome.swa_mapping, alloc_tokens(step, outcome)
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


PoolFault = tuple[int, bool, str]
"""``(page, unsafe, reason)``: one page the pool's partition breaks."""


def pool_faults(pool_pages: int, owners: Mapping[int, str], free: Sequence[int], freed: Sequence[int] = (),
                accounted: Iterable[int] | None = None) -> list[PoolFault]:
    """A6 pool-accounting at one moment, for a trace judge as for one step: the pages held (``owners``: page ->
    who holds it), the free list and the freed pages partition the pool. A page free twice, outside the pool,
    or free (or freed) while held is unsafe (it will be handed out to a second holder); a page of ``accounted``
    (default: every page ``1 .. pool_pages``) that nobody holds, nor free, nor freed, is lost (a leak)."""
    faults: list[PoolFault] = []
    listed: dict[int, str] = {}
    for where, pages in (("free list", free), ("freed pages", freed)):
        for page in pages:
            if not 1 <= page <= pool_pages:
                faults.append((page, True, f"page {page} on the {where} is outside the pool (pages 1 .. "
                               f"{pool_pages})"))
            elif page in listed:
                faults.append((page, True, f"page {page} is on the {listed[page]} and on the {where}: free twice, "
                               "it will be handed out twice"))
            elif page in owners:
                faults.append((page, True, f"page {page} is on the {where} while {owners[page]} holds it"))
            listed.setdefault(page, where)
    for page in range(1, pool_pages + 1) if accounted is None else sorted(set(accounted)):
        if page not in owners and page not in listed:
            faults.append((page, False, f"page {page} is lost: nobody holds it, and it is neither free nor freed"))
    return faults


@dataclass
class PoolLedger:
    """A6 across steps, for a trace judge: which pages of one pool requests hold and which were freed, from each
    allocator step (its free list before, the pages it handed out, its free list after) and each free event
    between steps. A page freed while free or freed already (a double free), a page on a step's free list
    while the request it was handed to still holds it (no free released it), and a live request's position
    on a page freed since it was handed out (a use after free) are unsafe, at the step or event that shows
    them (the last two where every free is recorded). Pages not on the first step's free list were held before
    the trace; freeing them is no fault."""

    pool_pages: int
    name: str = ""
    """``""`` for the full pool, ``"SWA "`` for the sliding-window pool behind it (prefixes each reason)."""
    held: dict[int, str] = field(default_factory=dict)
    """Page -> the request it was handed to (and the step), while no free released it."""
    freed: dict[int, str] = field(default_factory=dict)
    """Page -> the event that freed it, until a step hands it out again."""
    free: set[int] = field(default_factory=set)
    """The pages on the free list as the last step left it."""
    started: bool = False
    frees_recorded: bool = True
    """Whether every free is an event (a page back on the free list without one is then held still); False: only
    the free events seen are judged (a trace of an engine that records none of its frees)."""

    def before_step(self, free_pages: Sequence[int], live: Mapping[int, str]) -> list[PoolFault]:
        """A step's state as handed: its free list, and ``live`` (page -> the request position holding it)."""
        faults: list[PoolFault] = []
        if self.started and self.frees_recorded:
            for page in dict.fromkeys(free_pages):
                if page in self.held:
                    faults.append((page, True, f"{self.name}page {page} is on the free list while "
                                   f"{self.held[page]} holds it: no free released it (it will be handed out twice)"))
            for page, who in live.items():
                if page in self.freed:
                    faults.append((page, True, f"{self.name}page {page} used after free: {who} holds it, but "
                                   f"{self.freed[page]} freed it and no step handed it out since"))
        self.started = True
        self.free = set(free_pages)
        return faults

    def after_step(self, handed: Mapping[int, str], free_after: Sequence[int] | None) -> None:
        """The pages a step handed out (page -> who) and its free list after it (None: not returned)."""
        for page, who in handed.items():
            self.held[page] = who
            self.freed.pop(page, None)
            self.free.discard(page)
        if free_after is not None:
            self.free = set(free_after)

    def release(self, pages: Sequence[int], when: str) -> list[PoolFault]:
        """A free event (``when``: which, e.g. ``free at step 12``): each page must be held, never free or freed."""
        faults: list[PoolFault] = []
        for page in pages:
            if not 1 <= page <= self.pool_pages:
                faults.append((page, True, f"{self.name}page {page} freed, but it is outside the pool (pages 1 .. "
                               f"{self.pool_pages})"))
            elif page in self.freed:
                faults.append((page, True, f"{self.name}page {page} freed twice: {self.freed[page]} freed it "
                               "already and no step handed it out since (it will be handed out twice)"))
            elif page in self.free:
                faults.append((page, True, f"{self.name}page {page} freed while on the free list: nobody held it "
                               "(it will be handed out twice)"))
            self.held.pop(page, None)
            self.freed[page] = when
        return faults


@dataclass(frozen=True)
class _Pool:
    """One pool as A6 accounts it: the full pool, or the SWA pool behind it (its slots through the mapping)."""

    name: str
    pool_pages: int
    pool_end: int
    free_before: Sequence[int]
    free_after: Sequence[int] | None
    freed: Sequence[int]
    mapping: Sequence[int] | None
    """The full-to-SWA mapping before the step (None: the full pool)."""


def _pools(step: AllocStep, outcome: AllocOutcome) -> list[_Pool]:
    """The full pool, and the SWA pool where the step has one and its SWA locations came back."""
    pools = [_Pool("", step.pool_pages, step.pool_end, step.free_pages, outcome.free_pages, outcome.freed_pages,
                   None)]
    if step.swa is not None and outcome.swa_locs is not None:
        pools.append(_Pool("SWA ", step.swa.pool_pages, (step.swa.pool_pages + 1) * step.page_size,
                           step.swa.free_pages, outcome.swa_free_pages, (), step.swa.mapping))
    return pools


def check_pool(step: AllocStep, outcome: AllocOutcome) -> list[AllocFault]:
    """A6 pool-accounting, in the full pool and (with one) the SWA pool: every page the step hands out was free
    and goes to one request only (never a page another holder has: a double allocation); with the free list
    returned, the pages the batch holds, the free list and the freed pages partition the pages the step
    touched, none lost, none free while held, and no page that was held before comes back free unless the step
    freed it."""
    return _dedup([fault for pool in _pools(step, outcome) for fault in _pool_faults(step, outcome, pool)])


def _pool_faults(step: AllocStep, outcome: AllocOutcome, pool: _Pool) -> list[AllocFault]:
    ps, rows, name = step.page_size, out_rows(step, outcome), pool.name
    partial = [_partial_page(step, step.req_to_token, i, pool.mapping) for i in range(len(step.rows))]
    held: dict[int, str] = {}
    for slot, (i, pos) in _live_slots(step, step.req_to_token, pool.mapping).items():
        held.setdefault(slot // ps, f"request {i} (row {step.rows[i]}, position {pos})")
    was_free, faults = set(pool.free_before), []
    taken: dict[int, tuple[int, int]] = {}
    for k, (i, pos), loc in _new_slots(step, outcome, partial, pool):
        page, column = loc // ps, (i, pos // ps)
        if taken.setdefault(page, column) != column:
            j = taken[page][0]
            faults.append(_fault(step, "A6", True, i, k, pos, loc, f"{name}page {page} handed out twice: to "
                                 f"request {j} and to request {i}", rows))
        elif page not in was_free:
            who = held.get(page, "a holder outside the batch (it was not free)")
            faults.append(_fault(step, "A6", True, i, k, pos, loc, f"{name}page {page} handed out again: {who} "
                                 "holds it (a double allocation)", rows))
    if pool.free_after is None:
        return faults
    owners = {**held, **{page: f"request {i} (row {rows[i]})" for page, (i, _) in taken.items()}}
    freed = list(pool.freed)
    for page, unsafe, reason in pool_faults(pool.pool_pages, owners, pool.free_after, freed,
                                            was_free | set(taken) | set(pool.free_after) | set(freed)):
        faults.append(_fault(step, "A6", unsafe, None, None, None, page * ps, f"{name}{reason}"))
    for page in dict.fromkeys(pool.free_after):
        if page not in was_free and page not in owners and page not in freed and 1 <= page <= pool.pool_pages:
            faults.append(_fault(step, "A6", True, None, None, None, page * ps, f"{name}page {page} is on the free "
                                 "list after the step, but it was held before it and the step freed no such page"))
    return faults


def _new_slots(step: AllocStep, outcome: AllocOutcome, partial: Sequence[int | None], pool: _Pool
               ) -> list[tuple[int | None, Token, int]]:
    """``(token, (request, position), slot)`` of every slot of ``pool`` the step gave a request: each chosen
    location, and (full pool) each slot recorded at a request's new positions (a slot recorded from outside
    the buffer counts too), leaving out the sink, the request's own partial page and slots outside the pool."""
    rows, ps = out_rows(step, outcome), step.page_size
    locs = outcome.locs if pool.mapping is None else outcome.swa_locs or []
    given: list[tuple[int | None, Token, int]] = [
        (k, token, loc) for k, (token, loc) in enumerate(zip(alloc_tokens(step, outcome), locs, strict=False))]
    for i, (start, end) in enumerate(zip(step.starts, alloc_ends(step, outcome), strict=True)):
        for pos in range(max(start, 0), end) if pool.mapping is None else ():
            slot = _cell(outcome.req_to_token, rows[i], pos)
            if slot is not None:
                given.append((None, (i, pos), slot))
    return [(k, (i, pos), loc) for k, (i, pos), loc in given
            if ps <= loc < pool.pool_end and loc // ps != partial[i]]


def _dedup(faults: list[AllocFault]) -> list[AllocFault]:
    """Each page's double allocation once per request (a page column's tokens share it)."""
    seen, kept = set(), []
    for fault in faults:
        key = (fault.reason, fault.request)
        if key not in seen:
            seen.add(key)
            kept.append(fault)
    return kept


def judge_allocation(step: AllocStep, outcome: AllocOutcome) -> list[AllocFault]:
    """Every fault of one allocator step against A1-A6: unsafe ones first, then A4, A1, A2, A3, A5, A6 (where the
    output went, what was recorded at the token's own cell, what else changed, which slot, the SWA side, the
    pool's accounting)."""
    faults = [*check_out_buffer(step, outcome), *check_recorded(step, outcome), *check_rows_kept(step, outcome),
              *check_free_slots(step, outcome), *check_swa_slots(step, outcome), *check_pool(step, outcome)]
    return sorted(faults, key=lambda f: not f.unsafe)
