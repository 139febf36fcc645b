"""A1-A6 in torch: kvtable's own allocator step (``Allocator``) and the checker a debug mode (or a trace checker)
runs on any backend's step with a few vectorized ops (``check_allocation``).

The rules are the reference's (``kvtable.reference.allocation``, which judges in plain Python and lists every
fault); this checker raises the first breach it finds as a ``ContractViolation`` naming the clause, the row
and the token. It needs the token table as it was before the step (``before``): a backend may record in place.
The output buffer's surroundings are the caller's to guard; A4 here is the one-location-per-token count.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

import torch

from kvtable.alloc_contract import Allocation, AllocState, SwaPool
from kvtable.errors import ContractViolation

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence


def _first(mask: torch.Tensor) -> int | None:
    """Index of the first True of a 1-D mask, or None (an ``any`` first: most masks hold none, and a ``nonzero``
    costs more, under an index guard most of all)."""
    return int(mask.nonzero()[0, 0]) if bool(mask.any()) else None


def _first_hit(checks: Sequence[tuple[torch.Tensor, str]]) -> tuple[int, str] | None:
    """The first True of the first mask with one (masks of one shape, in order) and what that check names: one
    stacked reduction where no check hits, instead of one ``nonzero`` per mask."""
    hit = torch.stack([mask for mask, _ in checks]).any(1).tolist()
    for (mask, what), found in zip(checks, hit, strict=True):
        if found:
            return int(mask.nonzero()[0, 0]), what
    return None


def _starts(state: AllocState) -> torch.Tensor:
    """Each request's first position to allocate: its allocated length, else its prefix."""
    return torch.tensor(list(state.prefix_lens if state.allocated_lens is None else state.allocated_lens))


def _ends(state: AllocState, allocated: Sequence[int] | None) -> torch.Tensor:
    """Each request's allocated end after the step: as returned, else ``max(seq, start)``."""
    if allocated is not None:
        return torch.tensor(list(allocated))
    return torch.maximum(torch.tensor(list(state.seq_lens)), _starts(state))


def _tokens(state: AllocState, allocated: Sequence[int] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(request, position) of every output entry, request order: positions ``[start, end)`` of each request."""
    start = _starts(state)
    counts = (_ends(state, allocated) - start).clamp_min(0)
    req = torch.arange(len(counts)).repeat_interleave(counts)
    first = torch.cumsum(counts, 0) - counts
    return req, start[req] + torch.arange(int(counts.sum())) - first[req]


def _live(state: AllocState, before: torch.Tensor) -> torch.Tensor:
    """Slots of the batch's live tokens (each request's positions below its allocated length)."""
    rows = torch.tensor(list(state.rows))
    prefix = _starts(state).clamp(0, before.shape[1])
    cols = torch.arange(before.shape[1])
    live = before[rows][cols < prefix[:, None]].long()
    return live[live >= state.page_size]


def _partial(state: AllocState, before: torch.Tensor, translate: torch.Tensor | None) -> torch.Tensor:
    """Per request: the page of its partially filled last page, or -1."""
    ps = state.page_size
    prefix, rows = _starts(state), torch.tensor(list(state.rows))
    last = before[rows, (prefix - 1).clamp(0, before.shape[1] - 1)].long()
    if translate is not None:
        last = translate[last.clamp(0, translate.numel() - 2)]
    has = (ps > 1) & (prefix > 0) & (prefix % ps != 0) & (prefix <= before.shape[1]) & (last >= ps)
    return torch.where(has, torch.div(last, ps, rounding_mode="floor"), -1)


def _slots(clause: str, state: AllocState, locs: torch.Tensor, free: torch.Tensor, pool_end: int,
           partial: torch.Tensor, live: torch.Tensor, req: torch.Tensor, pos: torch.Tensor,
           sink_ok: torch.Tensor | None = None) -> None:
    """A3's rules for ``locs`` (A5's in SWA space): free or own partial page, in the pool, not page 0 (unless the
    token owns no position, or is of ``sink_ok`` and gets slot 0), not live, chosen once, at offset ``pos % ps``,
    one page per page column."""
    ps, rows = state.page_size, torch.tensor(list(state.rows))
    page = torch.div(locs, ps, rounding_mode="floor")
    sink = (page == 0) & ((pos < 0) | ((locs == 0) & (sink_ok if sink_ok is not None else False)))
    checks = [
        (locs < 0, "a negative slot"), (locs >= pool_end, f"a slot past the pool (slots end at {pool_end})"),
        ((page == 0) & ~sink, "page 0, the reserved padding sink"),
        (torch.isin(locs, live) & ~sink, "a live token's slot"),
        (~torch.isin(page, free) & (page != partial[req]) & ~sink & (page > 0),
         "a page neither free nor the request's own partially filled last page"),
    ]
    ordered, inverse, counts = torch.unique(locs, return_inverse=True, return_counts=True)
    checks.append(((counts[inverse] > 1) & ~sink, "a slot chosen for two tokens"))
    checks.append(((page > 0) & (pos >= 0) & (locs % ps != pos % ps), "the wrong offset in its page"))
    col = torch.div(pos, ps, rounding_mode="floor")
    col = col - col.min() if col.numel() else col
    _, column = torch.unique(req * (int(col.max()) + 1 if col.numel() else 1) + col, return_inverse=True)
    lo = torch.full((int(column.max()) + 1 if column.numel() else 0,), 2**62).scatter_reduce(
        0, column, torch.where(page > 0, page, 2**62), "amin")
    checks.append(((page > 0) & (pos >= 0) & (page != lo[column]), "a page other than its page column's"))
    if (first := _first_hit(checks)) is not None:
        k, what = first
        raise ContractViolation(clause, f"token {k} (request {int(req[k])}, position {int(pos[k])}) chose "
                                f"slot {int(locs[k])}: {what}", row=int(rows[req[k]]))


def check_allocation(before: torch.Tensor, state: AllocState, allocation: Allocation) -> None:
    """Raise the first breach of A1-A6 by ``allocation``, the backend's answer to ``state`` (``before``: the
    token table as handed, before the backend recorded anything)."""
    req, pos = _tokens(state, allocation.allocated_lens)
    moved_rows = torch.tensor(list(state.rows if allocation.rows is None else allocation.rows))
    _check_rows(state, moved_rows)
    rows = moved_rows[req]
    locs, after = allocation.locs.reshape(-1).long(), allocation.req_to_token.long()
    if locs.numel() != req.numel():
        raise ContractViolation("A4", f"{locs.numel()} locations for {req.numel()} tokens")
    if after.shape != before.shape:
        raise ContractViolation("A2", f"the recorded table has shape {tuple(after.shape)}, was {tuple(before.shape)}")
    _check_ends(state, allocation)
    own = (pos >= 0) & (pos < before.shape[1])
    recorded = after[rows, pos.clamp(0, before.shape[1] - 1)]
    misplaced = own & (recorded != locs) & torch.isin(recorded, locs)  # another token's slot: its write (A2)
    k = _first(own & (recorded != locs) & ~misplaced)
    if k is not None:
        raise ContractViolation("A1", f"token {k} position {int(pos[k])}: recorded "
                                f"{int(after[rows[k], pos[k]])}, chose {int(locs[k])}", row=int(rows[k]))
    allowed = torch.zeros_like(before, dtype=torch.bool)
    allowed[rows[own & ~misplaced], pos[own & ~misplaced]] = True
    _check_moved(state, before, after, moved_rows, allowed)
    changed = (after != before.long()) & ~allowed
    if bool(changed.any()):
        row, col = (int(v) for v in changed.nonzero()[0])
        raise ContractViolation("A2", f"cell changed from {int(before[row, col])} to {int(after[row, col])}, not a "
                                "cell of this step's tokens", row=row, col=col)
    live = _live(state, before)
    partial = _partial(state, before, None)
    _slots("A3", state, locs, state.free_pages, (state.pool_pages + 1) * state.page_size, partial, live, req, pos)
    if state.swa is not None:
        _check_swa(state, state.swa, before, allocation, locs, live, req, pos)
    _check_pool(state.page_size, state.pool_pages, state.free_pages, allocation.free_pages,
                allocation.freed_pages, locs, live, partial, req, pos, rows=state.rows)


def _check_rows(state: AllocState, rows: torch.Tensor) -> None:
    """A2: a request moved to another row takes a free row, and no two requests share one."""
    moved = rows != torch.tensor(list(state.rows))
    k = _first(moved & ~torch.isin(rows, torch.tensor(list(state.free_rows), dtype=torch.long)))
    if k is not None:
        raise ContractViolation("A2", f"request {k} took row {int(rows[k])}, which is not a free row", row=int(rows[k]))
    _, inverse, counts = torch.unique(rows, return_inverse=True, return_counts=True)
    k = _first(counts[inverse] > 1)
    if k is not None:
        raise ContractViolation("A2", f"request {k} took row {int(rows[k])}, which another request also took",
                                row=int(rows[k]))


def _check_ends(state: AllocState, allocation: Allocation) -> None:
    """A1: every committed position has a slot, and no request allocates past the page of its last one."""
    start, end = _starts(state), _ends(state, allocation.allocated_lens)
    seq, ps = torch.tensor(list(state.seq_lens)), state.page_size
    k = _first(end < seq)
    if k is not None:
        raise ContractViolation("A1", f"request {k} allocated up to {int(end[k])}, but positions up to "
                                f"{int(seq[k])} are committed", row=int(state.rows[k]))
    limit = torch.div(seq + ps - 1, ps, rounding_mode="floor") * ps if state.allocated_lens is not None else seq
    k = _first(end > torch.maximum(limit, start))
    if k is not None:
        raise ContractViolation("A1", f"request {k} allocated up to {int(end[k])}, past {int(limit[k])} (the page "
                                "end with allocated lengths kept, else its length)", row=int(state.rows[k]))


def _check_moved(state: AllocState, before: torch.Tensor, after: torch.Tensor, rows: torch.Tensor,
                 allowed: torch.Tensor) -> None:
    """A1: a request moved to a fresh row has its earlier slots there (they may change: ``allowed`` marks them)."""
    for i in [i for i, moved in enumerate((rows != torch.tensor(list(state.rows))).tolist()) if moved]:
        start = max(int(_starts(state)[i]), 0)
        old, new = before[state.rows[i], :start].long(), after[int(rows[i]), :start]
        col = _first(old != new)
        if col is not None:
            raise ContractViolation("A1", f"request {i} moved to row {int(rows[i])}, which holds {int(new[col])} at "
                                    f"position {col}, not its slot {int(old[col])}", row=int(rows[i]), col=col)
        allowed[int(rows[i]), :start] = True


def _check_pool(ps: int, pool_pages: int, free_before: torch.Tensor, free_after: torch.Tensor | None,
                freed_pages: torch.Tensor | None, locs: torch.Tensor, live: torch.Tensor, partial: torch.Tensor,
                req: torch.Tensor, pos: torch.Tensor, *, rows: Sequence[int], pool: str = "") -> None:
    """A6 in one pool (``pool``: '' the full one, 'SWA ' the SWA one): every page handed out was free and goes
    to one page column only; with a free list returned, it holds each page once, no page the batch holds,
    nothing held before that the step did not free, and every page that was free and not handed out (or
    freed)."""
    page = torch.div(locs, ps, rounding_mode="floor")
    new = (locs >= ps) & (page != partial[req])
    column = req * (2**32) + torch.div(pos, ps, rounding_mode="floor")
    pages, cols = page[new], column[new]
    handed = torch.unique(torch.stack([pages, cols]), dim=1)[0]  # each (page, column) once, by page
    twice = _first(handed[1:] == handed[:-1])
    if twice is not None:
        raise ContractViolation("A6", f"{pool}page {int(handed[twice])} handed out twice, to two page columns")
    k = _first(new & ~torch.isin(page, free_before))
    if k is not None:
        raise ContractViolation("A6", f"{pool}page {int(page[k])} handed out again to request {int(req[k])}: it was "
                                "not free (a double allocation)", row=int(rows[int(req[k])]))
    if free_after is None:
        return
    free = free_after.reshape(-1).long()
    freed = torch.zeros(0, dtype=torch.long) if freed_pages is None else freed_pages.reshape(-1).long()
    listed = torch.cat([free, freed.reshape(-1)])
    held = torch.cat([pages, torch.div(live, ps, rounding_mode="floor")])
    _, inverse, counts = torch.unique(listed, return_inverse=True, return_counts=True)
    first = _first_hit((((listed < 1) | (listed > pool_pages), "outside the pool"), (counts[inverse] > 1, "free twice"),
                        (torch.isin(listed, held), "free while the batch holds it")))
    if first is not None:
        raise ContractViolation("A6", f"{pool}page {int(listed[first[0]])} on the free list or freed: {first[1]}")
    k = _first(torch.isin(free, free_before, invert=True) & torch.isin(free, freed, invert=True))
    if k is not None:
        raise ContractViolation("A6", f"{pool}page {int(free[k])} is on the free list after the step, but it was "
                                "held before it and the step freed no such page")
    lost = free_before.long()[~torch.isin(free_before.long(), torch.cat([pages, listed]))]
    if lost.numel():
        raise ContractViolation("A6", f"{pool}page {int(lost[0])} is lost: it was free, the step did not hand it "
                                "out, and it is neither free nor freed after it")


def _check_swa(state: AllocState, swa: SwaPool, before: torch.Tensor, allocation: Allocation, locs: torch.Tensor,
               live: torch.Tensor, req: torch.Tensor, pos: torch.Tensor) -> None:
    """A5: the SWA slots by A3's rules in the SWA pool, recorded at the chosen full slots, the sentinel kept."""
    mapping = allocation.swa_mapping
    if allocation.swa_locs is None or mapping is None:
        raise ContractViolation("A5", "a SWA pool was handed, but no SWA locations or mapping came back")
    swa_locs, mapping = allocation.swa_locs.reshape(-1).long(), mapping.reshape(-1).long()
    if swa_locs.numel() != locs.numel() or mapping.shape != swa.mapping.shape or int(mapping[-1]) != -1:
        raise ContractViolation("A5", "SWA locations or mapping of the wrong size, or the sentinel mapping[-1] = -1 "
                                "lost")
    live_swa = swa.mapping[live.clamp(0, swa.mapping.numel() - 2)]
    head = None
    if swa.tail_lens is not None:  # a declared tail: each request's new tokens before its last tail_lens[i]
        counts = torch.bincount(req, minlength=len(state.rows))
        rank = torch.arange(req.numel()) - (torch.cumsum(counts, 0) - counts)[req]
        head = rank < (counts - torch.tensor(list(swa.tail_lens)))[req]
    swa_partial, swa_live = _partial(state, before, swa.mapping), live_swa[live_swa >= state.page_size]
    _slots("A5", state, swa_locs, swa.free_pages, (swa.pool_pages + 1) * state.page_size, swa_partial, swa_live,
           req, pos, head)
    _check_pool(state.page_size, swa.pool_pages, swa.free_pages, allocation.swa_free_pages, None, swa_locs,
                swa_live, swa_partial, req, pos, rows=state.rows, pool="SWA ")
    expected = swa.mapping.clone()
    expected[locs] = swa_locs
    slot = _first(expected != mapping)
    if slot is not None:
        raise ContractViolation("A5", f"mapping[{slot}] records {int(mapping[slot])}, expected {int(expected[slot])}")


NO_COLUMN = -(2**62)
"""The partial page column of a request with no partially filled last page: no token's column."""


class Allocator:
    """kvtable's own allocator-driven step in torch (A1-A6): each request's new positions (from its allocated
    length) take the rest of its partially filled last page, then whole free pages in free-list order; tokens at
    negative positions (a verify row shorter than N) get slots too but own no cell, so nothing records them. The
    chosen slots go to ``state.out`` at each request's output offset and are recorded in a copy of the token
    table, returned with the free list that is left (a view of the one handed in, never written). What depends
    only on the lengths is counted on the host lists they come in; the per-token work is a few batched ops."""

    def out_starts(self, extend: torch.Tensor) -> torch.Tensor:
        """Each request's first output entry: the sum of the extend lengths before it (a negative one counts 0)."""
        counted = extend.clamp_min(0)
        return torch.cumsum(counted, 0) - counted

    def table_dtype(self, pool_end: int) -> torch.dtype:
        """The recorded table's dtype: int32 while every slot of the pool fits it, else int64."""
        return torch.int32 if pool_end <= 2**31 else torch.int64

    def record(self, table: torch.Tensor, rows: torch.Tensor, pos: torch.Tensor, locs: torch.Tensor) -> None:
        """Record each token's slot at its own cell; a token with no cell (position < 0) records nothing."""
        own = pos >= 0
        if not bool(own.all()):  # host tensors: no sync
            rows, pos, locs = rows[own], pos[own], locs[own]
        table[rows, pos] = locs.to(table.dtype)

    def allocate(self, state: AllocState) -> Allocation:
        before, ps = state.req_to_token, state.page_size
        plan = _Plan(state, before.shape[1], self.out_starts)
        last = before.reshape(-1)[plan.last_cell].long()  # each token's request's last slot before the step
        col = torch.div(plan.pos, ps, rounding_mode="floor")
        candidate, index = col == plan.partial_col, plan.page_shift + col
        locs = _choose(plan, candidate, index, last, state.free_pages, ps)
        _scatter(state.out, plan, locs)
        table = before.to(self.table_dtype((state.pool_pages + 1) * ps))
        self.record(table, plan.row, plan.pos, locs)
        free = state.free_pages[plan.pages:]
        if state.swa is None:
            return Allocation(state.out, table, free_pages=free)
        mapping = state.swa.mapping.clone()
        held = (plan.has_prefix > 0) & (last >= 0)  # a request without a prefix has no last slot
        swa_last = torch.where(held, mapping[torch.where(held, last, 0)], -1)
        swa_locs = _choose(plan, candidate, index, swa_last, state.swa.free_pages, ps)
        mapping[locs] = swa_locs
        return Allocation(state.out, table, swa_locs.to(torch.int32), mapping, free_pages=free,
                          swa_free_pages=state.swa.free_pages[plan.pages:])


class _Plan:
    """One step's arithmetic on its lengths, done on the host lists they come in (no device data is read): per
    request its output count and offset (``out_starts``), its first new page column and where its free pages
    start in the free list; then per token (one batched ``repeat_interleave``, none where each request has one
    token) its row, position, output offset, the column of its request's partial page, the shift from its page
    column to its free-list index, and the cell of its request's last slot (and whether it has one)."""

    def __init__(self, state: AllocState, width: int, out_starts: Callable[[torch.Tensor], torch.Tensor]) -> None:
        ps = state.page_size
        starts = list(state.prefix_lens if state.allocated_lens is None else state.allocated_lens)
        seqs = list(state.seq_lens)
        offsets = out_starts(torch.tensor([seq - start for start, seq in zip(starts, seqs, strict=True)],
                                          dtype=torch.long)).tolist()
        per_request, counts, self.spans = [], [], []
        out = pages = 0
        for start, seq, row, offset in zip(starts, seqs, state.rows, offsets, strict=True):
            count = max(seq - start, 0)
            first_new = -(-start // ps) if start > 0 else start // ps
            partial = ps > 1 and start > 0 and start % ps != 0
            per_request.append((row, start - out, offset - out, first_new - 1 if partial else NO_COLUMN,
                                pages - first_new, row * width + min(max(start - 1, 0), width - 1), int(start > 0)))
            counts.append(count)
            if count:
                self.spans.append((offset, count))
            out += count
            pages += max((seq + ps - 1) // ps - first_new, 0)
        self.pages = pages
        """The free pages the step takes."""
        ranks = torch.arange(out)
        tokens = torch.tensor(per_request, dtype=torch.long).reshape(len(per_request), 7)
        if out != len(counts) or any(c != 1 for c in counts):
            tokens = tokens.repeat_interleave(torch.tensor(counts, dtype=torch.long), dim=0, output_size=out)
        (self.row, pos_shift, offset_shift, self.partial_col, self.page_shift, self.last_cell,
         self.has_prefix) = tokens.unbind(1)
        self.pos, self.offsets = pos_shift + ranks, offset_shift + ranks


def _choose(plan: _Plan, candidate: torch.Tensor, index: torch.Tensor, last: torch.Tensor, free_pages: torch.Tensor,
            ps: int) -> torch.Tensor:
    """Each token's slot: on its request's partial last page (the page of ``last``, its request's last slot) where
    its column is that page's (``candidate``), else on the free page at ``index`` in the free list."""
    free = free_pages.numel()
    if plan.pages > free:
        raise RuntimeError(f"out of memory: the step needs {plan.pages} free pages, {free} are free")
    on_partial = candidate & (last >= 0)
    fresh = free_pages[index.clamp(0, free - 1)] if free else torch.zeros_like(plan.pos)  # no page taken: all partial
    page = torch.where(on_partial, torch.div(last, ps, rounding_mode="floor"), fresh)
    return page * ps + plan.pos % ps


def _scatter(out: torch.Tensor, plan: _Plan, values: torch.Tensor) -> None:
    """``out[plan.offsets] = values`` through ``out``'s storage, as a kernel's pointer arithmetic writes: an offset
    before 0 or past the view lands in the memory around it (the storage must hold it). The offsets are known on
    the host: where they run on without a gap (every request after the one before), one copy."""
    if not plan.spans:
        return
    if all(offset == before + count for (before, count), (offset, _) in itertools.pairwise(plan.spans)):
        out.as_strided((values.numel(),), (1,), out.storage_offset() + plan.spans[0][0]).copy_(values)
        return
    lo = min(min(offset for offset, _ in plan.spans), 0)
    hi = max(max(offset + count for offset, count in plan.spans), out.numel())
    span = out.as_strided((hi - lo,), (1,), out.storage_offset() + lo)
    span[plan.offsets - lo if lo else plan.offsets] = values.to(out.dtype)
