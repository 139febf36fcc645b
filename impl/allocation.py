"""A1-A5 in torch: the allocator-step checker a debug mode (or a trace checker) runs with a few vectorized ops.

The rules are the reference's (``kvtable.reference.allocation``, which judges in plain Python and lists every
fault); this checker raises the first breach it finds as a ``ContractViolation`` naming the clause, the row
and the token. It needs the token table as it was before the step (``before``): a backend may record in place.
The output buffer's surroundings are the caller's to guard; A4 here is the one-location-per-token count.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from kvtable.errors import ContractViolation

if TYPE_CHECKING:
    from kvtable.backends.protocol import Allocation, AllocState


def _first(mask: torch.Tensor) -> int | None:
    """Index of the first True of a 1-D mask, or None."""
    hits = mask.nonzero()
    return int(hits[0, 0]) if hits.numel() else None


def _tokens(state: AllocState) -> tuple[torch.Tensor, torch.Tensor]:
    """(request, position) of every output entry, request order (a request with ``seq <= prefix`` has none)."""
    prefix, seq = torch.tensor(list(state.prefix_lens)), torch.tensor(list(state.seq_lens))
    counts = (seq - prefix).clamp_min(0)
    req = torch.arange(len(counts)).repeat_interleave(counts)
    starts = torch.cumsum(counts, 0) - counts
    return req, prefix[req] + torch.arange(int(counts.sum())) - starts[req]


def _live(state: AllocState, before: torch.Tensor) -> torch.Tensor:
    """Slots of the batch's live tokens (each request's positions below its prefix)."""
    rows = torch.tensor(list(state.rows))
    prefix = torch.tensor(list(state.prefix_lens)).clamp(0, before.shape[1])
    cols = torch.arange(before.shape[1])
    live = before[rows][cols < prefix[:, None]].long()
    return live[live >= state.page_size]


def _partial(state: AllocState, before: torch.Tensor, translate: torch.Tensor | None) -> torch.Tensor:
    """Per request: the page of its partially filled last page, or -1."""
    ps = state.page_size
    prefix, rows = torch.tensor(list(state.prefix_lens)), torch.tensor(list(state.rows))
    last = before[rows, (prefix - 1).clamp(0, before.shape[1] - 1)].long()
    if translate is not None:
        last = translate[last.clamp(0, translate.numel() - 2)]
    has = (ps > 1) & (prefix > 0) & (prefix % ps != 0) & (prefix <= before.shape[1]) & (last >= ps)
    return torch.where(has, torch.div(last, ps, rounding_mode="floor"), -1)


def _slots(clause: str, state: AllocState, locs: torch.Tensor, free: torch.Tensor, pool_end: int,
           partial: torch.Tensor, live: torch.Tensor, req: torch.Tensor, pos: torch.Tensor) -> None:
    """A3's rules for ``locs`` (A5's in SWA space): free or own partial page, in the pool, not page 0 (unless the
    token owns no position), not live, chosen once, at offset ``pos % ps``, one page per page column."""
    ps, rows = state.page_size, torch.tensor(list(state.rows))
    page = torch.div(locs, ps, rounding_mode="floor")
    sink = (page == 0) & (pos < 0)
    checks = [
        (locs < 0, "a negative slot"), (locs >= pool_end, f"a slot past the pool (slots end at {pool_end})"),
        ((page == 0) & (pos >= 0), "page 0, the reserved padding sink"),
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
    lo = torch.full((int(column.max()) + 1 if column.numel() else 0,), 2**62).scatter_reduce(0, column, page, "amin")
    checks.append(((page > 0) & (pos >= 0) & (page != lo[column]), "a page other than its page column's"))
    for mask, what in checks:
        k = _first(mask)
        if k is not None:
            raise ContractViolation(clause, f"token {k} (request {int(req[k])}, position {int(pos[k])}) chose "
                                    f"slot {int(locs[k])}: {what}", row=int(rows[req[k]]))


def check_allocation(before: torch.Tensor, state: AllocState, allocation: Allocation) -> None:
    """Raise the first breach of A1-A5 by ``allocation``, the backend's answer to ``state`` (``before``: the
    token table as handed, before the backend recorded anything)."""
    req, pos = _tokens(state)
    rows = torch.tensor(list(state.rows))[req]
    locs, after = allocation.locs.reshape(-1).long(), allocation.req_to_token.long()
    if locs.numel() != req.numel():
        raise ContractViolation("A4", f"{locs.numel()} locations for {req.numel()} tokens")
    if after.shape != before.shape:
        raise ContractViolation("A2", f"the recorded table has shape {tuple(after.shape)}, was {tuple(before.shape)}")
    own = (pos >= 0) & (pos < before.shape[1])
    k = _first(own & (after[rows, pos.clamp(0, before.shape[1] - 1)] != locs))
    if k is not None:
        raise ContractViolation("A1", f"token {k} position {int(pos[k])}: recorded "
                                f"{int(after[rows[k], pos[k]])}, chose {int(locs[k])}", row=int(rows[k]))
    allowed = torch.zeros_like(before, dtype=torch.bool)
    allowed[rows[own], pos[own]] = True
    changed = ((after != before.long()) & ~allowed).nonzero()
    if changed.numel():
        row, col = (int(v) for v in changed[0])
        raise ContractViolation("A2", f"cell changed from {int(before[row, col])} to {int(after[row, col])}, not a "
                                "cell of this step's tokens", row=row, col=col)
    live = _live(state, before)
    _slots("A3", state, locs, state.free_pages, (state.pool_pages + 1) * state.page_size,
           _partial(state, before, None), live, req, pos)
    if state.swa is not None:
        _check_swa(state, before, allocation, locs, live, req, pos)


def _check_swa(state: AllocState, before: torch.Tensor, allocation: Allocation, locs: torch.Tensor,
               live: torch.Tensor, req: torch.Tensor, pos: torch.Tensor) -> None:
    """A5: the SWA slots by A3's rules in the SWA pool, recorded at the chosen full slots, the sentinel kept."""
    swa, mapping = state.swa, allocation.swa_mapping
    if allocation.swa_locs is None or mapping is None:
        raise ContractViolation("A5", "a SWA pool was handed, but no SWA locations or mapping came back")
    swa_locs, mapping = allocation.swa_locs.reshape(-1).long(), mapping.reshape(-1).long()
    if swa_locs.numel() != locs.numel() or mapping.shape != swa.mapping.shape or int(mapping[-1]) != -1:
        raise ContractViolation("A5", "SWA locations or mapping of the wrong size, or the sentinel mapping[-1] = -1 "
                                "lost")
    live_swa = swa.mapping[live.clamp(0, swa.mapping.numel() - 2)]
    _slots("A5", state, swa_locs, swa.free_pages, (swa.pool_pages + 1) * state.page_size,
           _partial(state, before, swa.mapping), live_swa[live_swa >= state.page_size], req, pos)
    expected = swa.mapping.clone()
    expected[locs] = swa_locs
    slot = _first(expected != mapping)
    if slot is not None:
        raise ContractViolation("A5", f"mapping[{slot}] records {int(mapping[slot])}, expected {int(expected[slot])}")
