"""Allocator-driven steps (A1-A6): an SGLang-style pool state, the batch's rows and lengths, and one bug class each.

A drawn state is one an engine's bookkeeping can hold: row 0 is the padding row; each request's row holds
its prefix's slots (shared prefix pages allowed, a partially filled last page at page size > 1) and, past
them, 0 or stale slots of an earlier occupant (``ReqToTokenPool.free`` leaves rows uncleared); idle rows hold
pages that are neither free nor in the batch; free rows (``ReqToTokenPool.free_slots``) hold stale slots;
the free list (pages ``>= 1``, slot 0 is the sink) has room for the step and comes in any order; a SWA pool
maps the live full slots (evicted ones to 0) and keeps the ``-1`` sentinel last, and an extend may declare a
SWA tail where SGLang allocates one (``alloc_extend_swa_tail``: page size above 1, page-aligned prefixes, a
tail from a page boundary). A paged decode or verify may find its request over-allocated by an
earlier speculative step (``kv_allocated_len`` up to a page end past the committed length). Page size 1,
SGLang's default, is drawn half the time.

The broken kinds are SGLang's bug classes: a prefix past its request's length (extend), a verify row
shorter than N, and free pages whose slots pass ``2^31 - 1``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from kvtable.reference.allocation import AllocMode, AllocStep, SwaState
from kvtable.strategies.draws import digits, rng

ALLOC_KINDS = ("valid", "prefix past length", "short verify", "int32 slots")
EDGES = ("", "over-allocated", "fresh-rows", "tight-pool", "new-requests", "page-aligned", "shared-prefix",
         "stale-rows", "one-request", "swa-tail", "swa-evicted")
"""The edge a property draws every time (the input a clause exists for), besides what it draws at random:
an earlier speculative over-allocation, free rows for every request, a free list with exactly the pages the
step needs, requests with no prefix, prefixes ending on a page boundary, a shared prefix page, uncleared rows,
a single request, a declared SWA tail, evicted SWA slots."""
PAGE_SIZES = (1, 1, 2, 4)
"""Page size 1 (SGLang's default allocator) half the time."""
PAGED_SIZES = (2, 4)
"""The page sizes of ``paged`` steps (a partially filled last page exists only above 1)."""
INT32_SLOTS = 2**31


@dataclass(frozen=True)
class AllocCase:
    """One allocator step to hand a backend, and what kind of input it is."""

    step: AllocStep
    kind: str
    how: str = ""


def _pages(n_tokens: int, ps: int) -> int:
    return -(-max(n_tokens, 0) // ps)


def _lengths(mode: AllocMode, kind: str, shape: list[int], r: random.Random, edge: str = ""
             ) -> tuple[list[int], list[int], str]:
    """Per-request (prefix, seq) for the mode, with the broken kind's one bad request."""
    n_req, n = (1 if edge == "one-request" else shape[0] + 1), shape[1] + 1
    if kind == "short verify":
        n = max(n, 2)
    prefixes, seqs = [], []
    for _ in range(n_req):
        if mode == "extend":
            prefix = 0 if edge == "new-requests" else r.randrange(0, 9)
            seqs.append(prefix + r.randrange(0 if edge != "new-requests" else 1, 6))
        else:
            prefix = r.randrange(1, 9)
            seqs.append(prefix + (1 if mode == "decode" else n))
        prefixes.append(prefix)
    if mode == "extend" and all(s == p for p, s in zip(prefixes, seqs, strict=True)):
        seqs[-1] += 1
    how = ""
    if kind == "prefix past length":  # the first request, so a kernel summing extend lengths starts the next at -1/-2
        if n_req == 1:
            prefixes.append(r.randrange(0, 4))
            seqs.append(prefixes[-1] + 1 + r.randrange(0, 4))
        seqs[0] = max(prefixes[0] - 1 - r.randrange(0, 2), 0)
        prefixes[0] = max(prefixes[0], seqs[0] + 1)
        seqs[1] = max(seqs[1], prefixes[1] + 1)
        how = f"request 0: prefix {prefixes[0]} past its length {seqs[0]}"
    elif kind == "short verify":
        bad = r.randrange(0, len(seqs))
        seqs[bad] = r.randrange(1, n)
        prefixes[bad] = seqs[bad] - n
        how = f"request {bad}: seq_len {seqs[bad]} < N = {n}"
    return prefixes, seqs, how


def _over_allocated(mode: AllocMode, kind: str, prefixes: list[int], seqs: list[int], ps: int,
                    r: random.Random, edge: str) -> list[int] | None:
    """Each request's allocated length: a paged decode or verify request may hold slots up to the end of a page
    past its committed length (an earlier speculative step rounded up); None: the prefixes."""
    if ps == 1 or mode == "extend" or kind != "valid" or (edge != "over-allocated" and r.random() < 0.5):
        return None
    return [max(p, -(-(p + r.randrange(0, s - p + 1)) // ps) * ps) for p, s in zip(prefixes, seqs, strict=True)]


def _step(draw: st.DrawFn, mode: AllocMode, kind: str, swa: bool | None, paged: bool, edge: str) -> AllocCase:
    shape = digits(draw, (4, 4, len(PAGE_SIZES), 3, 2))
    r = rng(draw)
    ps = PAGED_SIZES[shape[2] % len(PAGED_SIZES)] if paged else PAGE_SIZES[shape[2]]
    prefixes, seqs, how = _lengths(mode, kind, shape, r, edge)
    if edge in ("page-aligned", "swa-tail"):  # every prefix ends on a page boundary: no partial page
        cut = [p - p % ps for p in prefixes]
        prefixes, seqs = cut, [s - p + c for p, s, c in zip(prefixes, seqs, cut, strict=True)]
    elif paged and not any(p % ps for p in prefixes):  # request 0 ends inside a page: its last page is partial
        prefixes[0], seqs[0] = prefixes[0] + 1, seqs[0] + 1
    allocated = _over_allocated(mode, kind, prefixes, seqs, ps, r, edge)
    held_to = allocated or prefixes  # the positions whose slots the rows hold
    n_req = len(seqs)
    width = max(max(seqs), max(prefixes), 1) + r.randrange(0, 4)
    if mode != "extend":  # room for a speculative step's allocation up to its page's end (SGLang asserts it)
        width = max(width, -(-max(seqs) // ps) * ps)
    n_free_rows = n_req + r.randrange(0, 2) if edge == "fresh-rows" else r.randrange(0, n_req + 2)
    n_rows = n_req + 1 + shape[3] + n_free_rows
    rows = r.sample(range(1, n_rows), n_req)
    idle = [row for row in range(1, n_rows) if row not in rows]
    idle, free_rows = idle[:len(idle) - n_free_rows], idle[len(idle) - n_free_rows:]
    own = [_pages(max(p, 0), ps) for p in held_to]
    # pages the step may take: a negative prefix's tokens get slots too, from column p // ps on
    new = sum(max((s + ps - 1) // ps - (p + ps - 1 if p > 0 else p) // ps, 0) for p, s in zip(prefixes, seqs,
                                                                                            strict=True))
    tight = edge == "tight-pool"  # the free list holds exactly the pages the step needs
    idle_pages = [0 if tight else r.randrange(0, 3) for _ in idle]
    held = 0 if tight else r.randrange(0, 3)
    spare = 0 if tight else r.randrange(0, 3)
    total = sum(own) + sum(idle_pages) + held + new + spare
    ids = r.sample(range(1, total + 1), total)
    table = [[0] * width for _ in range(n_rows)]
    taken = 0
    page_of: dict[tuple[int, int], int] = {}
    for i, (row, prefix) in enumerate(zip(rows, held_to, strict=True)):
        share = (i > 0 and ps * (own[0] - 1) > 0 and r.random() < (1 if edge == "shared-prefix" else 0.3)
                 and allocated is None)
        for col in range(own[i]):
            if share and col < own[0] - 1 and col < own[i] - 1:
                page = page_of[(0, col)]  # a full page of request 0's prefix (a radix-cache hit)
            else:
                page, taken = ids[taken], taken + 1
            page_of[(i, col)] = page
            for pos in range(col * ps, min((col + 1) * ps, max(prefix, 0))):
                table[row][pos] = page * ps + pos % ps
    for row, count in zip(idle, idle_pages, strict=True):
        for col in range(min(count, _pages(width, ps))):
            page, taken = ids[taken], taken + 1
            for pos in range(col * ps, min((col + 1) * ps, width)):
                table[row][pos] = page * ps + pos % ps
    # the ``held`` pages before them: neither free nor in a row (a cache holds them). int32 slots: the pages the
    # step may take lie past 2^31 - 1 slots (a pool that large), the rows hold the low ones an int32 table can
    base = INT32_SLOTS // ps if kind == "int32 slots" else 0
    free = [base + p for p in ids[taken + held:]]
    stale = [p for p in ids if r.random() < 0.5] or ids[:1]
    for row, prefix in zip(rows, held_to, strict=True):
        if shape[4] or edge == "stale-rows":  # an uncleared row: past the prefix, an earlier occupant's slots
            for pos in range(max(prefix, 0), width):
                table[row][pos] = r.choice(stale) * ps + pos % ps
    for row in free_rows:  # a row a finished request left: its slots, never cleared
        for pos in range(r.randrange(0, width + 1)):
            table[row][pos] = r.choice(stale) * ps + pos % ps
    pool_pages = base + total + r.randrange(0, 2)
    swa_state = None
    if swa or (swa is None and kind == "valid" and r.random() < 0.25):
        swa_state = _swa(table, rows, held_to, ps, pool_pages, new, r, 0.6 if edge == "swa-evicted" else 0.2)
        if mode == "extend" and ps > 1 and not any(p % ps for p in prefixes) and (edge == "swa-tail"
                                                                                or r.random() < 0.3):
            swa_state = SwaState(swa_state.mapping, swa_state.free_pages, swa_state.pool_pages,
                                 [_swa_tail(p, s, ps, r) for p, s in zip(prefixes, seqs, strict=True)])
    step = AllocStep(mode, table, rows, prefixes, seqs, free, ps, pool_pages, swa_state, allocated, free_rows)
    return AllocCase(step, kind, how or f"{mode}, page size {ps}" + (", SWA" if swa_state else "")
                     + (f", {edge}" if edge else ""))


def _swa_tail(prefix: int, seq: int, ps: int, r: random.Random) -> int:
    """A SWA tail as SGLang's disaggregated decode declares one (``disaggregation/decode.py``,
    ``_swa_tail_len``): from a window start floored to a page, at or past the cached prefix (the radix match is
    capped at ``fill_len - swa_tail_len``, ``_match_prefix_and_lock``), to the request's end."""
    starts = [k * ps for k in range(prefix // ps, seq // ps + 1) if k * ps < seq] or [seq]
    return seq - r.choice(starts)


def _swa(table: list[list[int]], rows: list[int], prefixes: list[int], ps: int, pool_pages: int, new: int,
         r: random.Random, evict: float) -> SwaState:
    """A SWA pool over the batch's live full pages: each mapped to its own SWA page, a front page evicted (0); a
    third of the pools hand out only pages past 256 (slot values no small-int cache or 8-bit type holds)."""
    full_pages: list[int] = []
    for row, prefix in zip(rows, prefixes, strict=True):
        for pos in range(0, max(prefix, 0), ps):
            if table[row][pos] // ps not in full_pages:
                full_pages.append(table[row][pos] // ps)
    last = {table[row][prefix - 1] // ps for row, prefix in zip(rows, prefixes, strict=True) if prefix > 0}
    total = len(full_pages) + new + len(rows) + r.randrange(0, 3)  # room for a tail starting inside a page
    base = 256 if r.random() < 1 / 3 else 0
    swa_ids = [base + page for page in r.sample(range(1, total + 1), total)]
    mapping = [0] * ((pool_pages + 1) * ps) + [-1]
    taken = 0
    for page in full_pages:
        if page not in last and r.random() < evict:
            continue  # out of the window: evicted, the mapping reads 0
        for off in range(ps):
            mapping[page * ps + off] = swa_ids[taken] * ps + off
        taken += 1
    return SwaState(mapping, swa_ids[taken:], base + total)


def alloc_cases(mode: AllocMode, kind: str = "valid", *, swa: bool | None = None, paged: bool = False,
                edge: str = "") -> SearchStrategy[AllocCase]:
    """Allocator steps of ``mode`` and ``kind`` (``ALLOC_KINDS``); ``swa`` True always adds a SWA pool, None
    sometimes (valid steps only), False never; ``paged``: page size 2 or 4, a request ending inside a page
    (unless ``edge`` is page-aligned); ``edge`` (``EDGES``): the edge drawn every time."""
    if kind not in ALLOC_KINDS:
        raise ValueError(f"unknown allocator case kind {kind!r}; expected one of {ALLOC_KINDS}")
    if edge not in EDGES:
        raise ValueError(f"unknown allocator edge {edge!r}; expected one of {EDGES}")
    return st.composite(lambda draw: _step(draw, mode, kind, swa, paged, edge))()
