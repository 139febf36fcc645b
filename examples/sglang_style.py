"""A backend written in SGLang's style (our own code, modelled on SGLang's memory pools and allocators).

What it models (read from SGLang's ``python/sglang/srt/mem_cache/`` and ``python/sglang/kernels/ops/memory/``):

- the allocator chooses the write slots before any table holds them. At page size 1 (the default,
  ``TokenToKVPoolAllocator``) ``alloc(n)`` hands out a view of the first ``n`` entries of its free list: there
  is no output buffer. Above it (``PagedTokenToKVPoolAllocator``) ``alloc_extend`` makes its own output with
  ``torch.empty`` and, per request (one "program" each, as ``alloc_extend_kernel`` runs one per request),
  takes the slots of ``[start, end)`` first from the request's partially filled last page (``last_loc + 1
  ..``), then from whole free pages; then it slices its free list past the pages taken. Both return their
  free list (A6);
- the chosen slots are then recorded in ``req_to_token`` (``ReqToTokenPool``: int32 whatever the pool, row 0
  the padding row) as ``alloc_for_extend``/``alloc_for_decode``/``alloc_for_spec_decode`` do with
  ``assign_req_to_token_pool``: an extend takes a fresh row per request from the free rows and copies the
  prefix there first (the radix cache's prefix indices); a speculative verify allocates up to the end of its
  last page (``kv_allocated_len`` past ``seq_len``) from the request's allocated length;
- a declared SWA tail (``alloc_extend_swa_tail``) gives SWA slots to each request's last tokens only;
- with a sliding-window pool, the SWA allocator runs the same kernel over the SWA free pages from the
  translated last location (``translate_loc_from_full_to_swa``: ``mapping[loc]``, the sentinel -1 for
  ``last_loc = -1``), records ``mapping[full] = swa`` and returns the SWA locations as the int64 mapping holds
  them (older releases cast them to int32);
- the location route (decode/verify/re-anchor/extend, per group) reads slots through the token table a page
  table stands for, ``req_to_token[row, pos] = page * ps + pos % ps`` (so a page table is
  ``req_to_token[:, ::ps] // ps``); padded rows' tokens write the reserved slot 0;
- a CUDA-graph runner with per-group persistent page tables and location buffers; a replay zero-fills the
  location buffer only when the batch is padded (``bs != raw_bs``), so an unpadded replay leaves its tail;
- ``debug=True`` is ``SGLANG_DEBUG_MEMORY_POOL``: the paged allocator asserts that ``last_loc`` agrees with
  the prefix length and that the chosen slots are unique. No other validation: SGLang's scheduler owns it.

Run it with its profile, from a clone's root::

    kvtable conform --backend examples/sglang_style.py:backend --profile sglang

Seeded variants, each one of SGLang's bug classes: ``backend_prefix_past_length`` keeps a negative extend length
in its signed sums (``alloc_extend_kernel``), so a request whose prefix exceeds its length makes the next one
write before the output buffer, read the free page before its free list (one an earlier request holds: a
double allocation, A6) and slice its free list backwards; ``backend_short_verify`` records a verify row
shorter than N from its negative start, into the row before it (``assign_req_to_token_pool``). The example
itself keeps SGLang's int32 ``req_to_token`` whatever the pool, so slots ``>= 2^31`` wrap: a latent failure
(``backend_int32_pool`` names it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from kvtable.backends.protocol import Allocation, AllocState


def _pages(tokens: torch.Tensor, page_size: int) -> torch.Tensor:
    return torch.div(tokens + page_size - 1, page_size, rounding_mode="floor")


def _store(buffer: torch.Tensor, offset: int, values: torch.Tensor) -> None:
    """Store ``values`` at ``buffer + offset`` as a kernel's pointer does: the storage around a view is memory too."""
    if values.numel():
        buffer.as_strided((values.numel(),), (1,), buffer.storage_offset() + offset).copy_(values)


def _load(buffer: torch.Tensor, offset: int, count: int) -> torch.Tensor:
    return buffer.as_strided((count,), (1,), buffer.storage_offset() + offset).clone()


def alloc_extend(prefix_lens: torch.Tensor, seq_lens: torch.Tensor, last_loc: torch.Tensor,
                 free_pages: torch.Tensor, out: torch.Tensor, page_size: int, *, signed: bool = False) -> int:
    """Fill ``out`` with the slots of every request's ``[prefix, seq)``; returns the free pages taken.

    Request ``i`` writes from the sum of the extend lengths before it and takes free pages from the sum of the
    page counts before it. ``signed`` keeps a negative count (a prefix past its length) in both sums, as
    SGLang's kernel does; otherwise it counts 0.
    """
    extend = seq_lens - prefix_lens
    new_pages = _pages(seq_lens, page_size) - _pages(prefix_lens, page_size)
    if not signed:
        extend, new_pages = extend.clamp_min(0), new_pages.clamp_min(0)
    starts = torch.cumsum(extend, 0) - extend
    page_starts = torch.cumsum(new_pages, 0) - new_pages
    for i in range(len(seq_lens)):  # one program per request
        prefix, seq, start = int(prefix_lens[i]), int(seq_lens[i]), int(starts[i])
        if seq <= prefix:
            continue
        part1 = min(seq, int(_pages(prefix_lens[i], page_size)) * page_size) - prefix
        _store(out, start, int(last_loc[i]) + 1 + torch.arange(part1))
        tail = torch.arange(seq - prefix - part1)
        pages = _load(free_pages, int(page_starts[i]), int(_pages(seq_lens[i], page_size) - _pages(prefix_lens[i],
                                                                                                     page_size)))
        _store(out, start + part1, pages[torch.div(tail, page_size, rounding_mode="floor")] * page_size
               + tail % page_size)
    return int(new_pages.sum())


class TokenAllocator:
    """Page size 1 (``TokenToKVPoolAllocator``): ``alloc(n)`` hands out the first ``n`` free slots as a view of
    the free list, and keeps the rest; no output buffer of its own."""

    def __init__(self, free_pages: torch.Tensor) -> None:
        self.free_pages = free_pages

    def alloc(self, n: int) -> torch.Tensor:
        out, self.free_pages = self.free_pages[:n], self.free_pages[n:]
        return out


class PagedAllocator:
    """Page size > 1 (``PagedTokenToKVPoolAllocator``): ``alloc_extend`` makes its own output with
    ``torch.empty`` and advances the free list by the pages the kernel took."""

    def __init__(self, free_pages: torch.Tensor, page_size: int, *, signed: bool = False) -> None:
        self.free_pages, self.page_size, self.signed = free_pages, page_size, signed

    def alloc_extend(self, prefix_lens: torch.Tensor, seq_lens: torch.Tensor, last_loc: torch.Tensor,
                     n_tokens: int) -> torch.Tensor:
        out = torch.empty((max(n_tokens, 0),), dtype=torch.int64)
        taken = alloc_extend(prefix_lens, seq_lens, last_loc, self.free_pages, out, self.page_size,
                             signed=self.signed)
        self.free_pages = self.free_pages[taken:]  # a negative count moves the view back: popped pages come back
        return out


def last_locs(req_to_token: torch.Tensor, rows: torch.Tensor, prefix_lens: torch.Tensor) -> torch.Tensor:
    """Each request's slot at ``prefix - 1``, or -1 for an empty prefix (``get_last_loc``)."""
    cols = (prefix_lens - 1).clamp(0, req_to_token.shape[1] - 1)
    return torch.where(prefix_lens > 0, req_to_token[rows, cols].long(), -1)


class ReqToTokenPool:
    """The token table: ``req_to_token[row, pos]`` is the slot of position ``pos`` of the request in ``row``."""

    def __init__(self, req_to_token: torch.Tensor, dtype: torch.dtype) -> None:
        self.req_to_token = req_to_token.to(dtype)

    def write(self, rows: torch.Tensor, prefix_lens: torch.Tensor, seq_lens: torch.Tensor, locs: torch.Tensor,
              starts: torch.Tensor, *, clamp_start: bool = True) -> None:
        """Record ``locs[starts[i] ..]`` at positions ``[prefix, seq)`` of ``rows[i]`` (``assign_req_to_token_pool``):
        one flat store per request, from its row's start plus the first position. ``clamp_start`` stores only
        positions ``>= 0``; without it a negative start reaches into the row before."""
        flat, width = self.req_to_token.reshape(-1), self.req_to_token.shape[1]
        for i in range(len(rows)):
            first = max(int(prefix_lens[i]), 0) if clamp_start else int(prefix_lens[i])
            count = int(seq_lens[i]) - first
            if count > 0:
                values = _load(locs, int(starts[i]) + first - int(prefix_lens[i]), count)
                _store(flat, int(rows[i]) * width + first, values.to(flat.dtype))


def _swa_tail(start: torch.Tensor, end: torch.Tensor, tail_lens: torch.Tensor, free_pages: torch.Tensor,
              out: torch.Tensor, page_size: int) -> int:
    """SWA slots for each request's last ``tail_lens[i]`` new tokens only (``alloc_extend_swa_tail``): each page
    column of the tail takes the next free SWA page; the head tokens keep 0. Returns the free pages taken."""
    k, taken, pages = 0, 0, {}
    for i in range(len(start)):
        first = int(end[i]) - int(tail_lens[i])
        for pos in range(int(start[i]), int(end[i])):
            if pos >= first:
                if (i, pos // page_size) not in pages:
                    pages[i, pos // page_size], taken = int(free_pages[taken]), taken + 1
                out[k] = pages[i, pos // page_size] * page_size + pos % page_size
            k += 1
    return taken


class CudaGraphRunner:
    """Persistent per-group page tables (at the attention kernel's page size) and ``out_cache_loc`` buffers (int32,
    as kvtable's G1 asks; SGLang's are int64), allocated at init. A replay copies the live rows and recomputes
    their slots, zero-filling the location buffer first only when the batch is padded (``bs != raw_bs``), as
    SGLang's CUDA-graph runner does."""

    def __init__(self, specs: Sequence[Any], backend: SglangStyleBackend, *, max_bs: int, max_kernel_pages: int,
                 kernel_page_size: int, spec_n: int = 1, tail_pad: int = 0, expand: bool = True) -> None:
        if min(max_bs, max_kernel_pages, spec_n, kernel_page_size) < 1:
            raise ValueError("graph sizes must be >= 1")
        self.backend, self.max_bs, self.spec_n, self.tail_pad = backend, max_bs, spec_n, tail_pad
        self.state_ids = {s.group_id for s in specs if s.family == "state"}
        self.layout: dict[str, tuple[int, int]] = {}
        """group -> (page ratio, kernel page size)."""
        self.table_buffers: dict[str, torch.Tensor] = {}
        self.loc_buffers: dict[str, torch.Tensor] = {}
        for spec in specs:
            if spec.family == "state":
                continue
            ratio = spec.block_granularity // kernel_page_size if expand else 1
            if ratio < 1 or (expand and spec.block_granularity % kernel_page_size):
                raise ValueError(f"group {spec.group_id!r}: page size {spec.block_granularity} is no multiple of "
                                 f"the kernel's {kernel_page_size}")
            width = -(-max_kernel_pages * kernel_page_size // spec.block_granularity) * ratio
            self.layout[spec.group_id] = (ratio, spec.block_granularity // ratio)
            self.table_buffers[spec.group_id] = torch.zeros((max_bs, width), dtype=torch.int32)
            self.loc_buffers[spec.group_id] = torch.zeros(max_bs * spec_n, dtype=torch.int32)  # G1 (SGLang: int64)

    def _sizes(self, bs: int, tokens_per_req: int) -> None:
        if not 1 <= bs <= self.max_bs or not 1 <= tokens_per_req <= self.spec_n:
            raise RuntimeError(f"bs {bs} / tokens per request {tokens_per_req} outside the captured sizes "
                               f"[1, {self.max_bs}] / [1, {self.spec_n}]")

    def capture(self, bs: int, group_ids: Sequence[str], tokens_per_req: int = 1
                ) -> tuple[dict[str, torch.Tensor] | None, dict[str, torch.Tensor] | None]:
        self._sizes(bs, tokens_per_req)
        wanted = [gid for gid in group_ids if gid not in self.state_ids]
        if not wanted:
            return None, None
        unknown = sorted(set(wanted) - set(self.layout))
        if unknown:
            raise RuntimeError(f"groups {unknown} have no graph buffers")
        return ({gid: self.table_buffers[gid][:bs] for gid in wanted},
                {gid: self.loc_buffers[gid][: bs * tokens_per_req] for gid in wanted})

    def replay(self, bs: int, tables: Mapping[str, torch.Tensor] | None, seq_lens: torch.Tensor,
               tokens_per_req: int = 1, *, actual_bs: int | None = None) -> None:
        self._sizes(bs, tokens_per_req)
        delivered = {gid for gid in tables or {} if gid not in self.state_ids}
        if not self.layout or not tables or delivered != set(self.layout):
            raise RuntimeError(f"replay delivered groups {sorted(delivered)}, the graph was built for "
                               f"{sorted(self.layout)}: it would read stale page tables")
        raw_bs = bs if actual_bs is None else actual_bs
        if not 0 <= raw_bs <= bs or seq_lens.shape[0] < bs:
            raise RuntimeError(f"raw bs {raw_bs} and {seq_lens.shape[0]} seq_lens for a graph of bs {bs}")
        staged = {gid: self._rows(gid, tables[gid], bs, raw_bs) for gid in self.layout}
        locs = {gid: self._locs(gid, staged[gid], seq_lens[:bs], tokens_per_req) for gid in self.layout}
        for gid in self.layout:  # every check passed: now write
            if raw_bs != bs:
                self.loc_buffers[gid].zero_()
            self.table_buffers[gid][:bs] = staged[gid]
            self.loc_buffers[gid][: bs * tokens_per_req] = locs[gid]

    def _rows(self, gid: str, src: torch.Tensor, bs: int, raw_bs: int) -> torch.Tensor:
        """Rows ``[:bs]`` as the buffer will hold them: live rows at the kernel page size, padded rows page 0."""
        width, ratio = self.table_buffers[gid].shape[1], self.layout[gid][0]
        live = min(raw_bs, src.shape[0])
        out = torch.zeros((bs, width), dtype=torch.int32)
        out[:live] = self.backend.expand_table(src[:live, : -(-width // ratio)], ratio, max_kernel_pages=width,
                                               tail_pad=self.tail_pad)
        return out

    def _locs(self, gid: str, staged: torch.Tensor, seq_lens: torch.Tensor, n: int) -> torch.Tensor:
        """Slots of ``n`` tokens per row at ``max(seq - n + t, 0)``; a column past the buffer reads page 0."""
        page_size = self.layout[gid][1]
        rows = torch.arange(staged.shape[0]).repeat_interleave(n)
        pos = (seq_lens.long().repeat_interleave(n) - n + torch.arange(n).repeat(staged.shape[0])).clamp_min(0)
        cols = torch.div(pos, page_size, rounding_mode="floor")
        inside = cols < staged.shape[1]
        pages = torch.where(inside, staged[rows, torch.where(inside, cols, 0)].long(), 0).clamp_min(0)
        return (pages * page_size + pos % page_size).to(torch.int32)


class SglangStyleBackend:
    """An allocator-driven backend with a token pool (page size 1 and paged), SWA translation and slot lookups."""

    name = "sglang-style"

    def __init__(self, device: str = "cpu", debug: bool | None = None, *, signed_starts: bool = False,
                 clamp_start: bool = True, table_dtype: torch.dtype = torch.int32) -> None:
        self.table_dtype = table_dtype
        self.device = device
        self.debug = bool(debug)
        self.signed_starts = signed_starts
        self.clamp_start = clamp_start

    # -- the allocator route (A1-A6) ------------------------------------------------------------
    def _allocate(self, state: AllocState, *, fresh_rows: bool = False, round_up: bool = False) -> Allocation:
        """One step as ``alloc_for_extend`` / ``alloc_for_decode`` / ``alloc_for_spec_decode`` run it:
        ``fresh_rows`` takes a free row per request and copies its prefix there (the radix cache's prefix
        indices); ``round_up`` allocates to the end of the last page (``kv_allocated_len``)."""
        ps = state.page_size
        rows, prefix = torch.tensor(list(state.rows)), torch.tensor(list(state.prefix_lens))
        start = prefix if state.allocated_lens is None else torch.tensor(list(state.allocated_lens))
        seq = torch.tensor(list(state.seq_lens))
        end = _pages(seq, ps) * ps if round_up and ps > 1 and state.allocated_lens is not None else seq
        end = torch.maximum(end, start) if not self.signed_starts else end
        pool = ReqToTokenPool(state.req_to_token, self.table_dtype)  # SGLang's: int32, whatever the pool
        last = last_locs(state.req_to_token, rows, start)
        if self.debug and ps > 1:  # SGLANG_DEBUG_MEMORY_POOL
            bad = (start > 0) & ((last + 1) % ps != start % ps)
            assert not bool(bad.any()), f"last_loc {last.tolist()} disagrees with prefix_lens {start.tolist()}"
        counted = (end - start) if self.signed_starts else (end - start).clamp_min(0)
        if ps == 1:
            allocator = TokenAllocator(state.free_pages)
            out = allocator.alloc(int(counted.sum()))
        else:
            allocator = PagedAllocator(state.free_pages, ps, signed=self.signed_starts)
            out = allocator.alloc_extend(start, end, last, int(counted.sum()))
        if self.debug:
            assert out.unique().numel() == out.numel(), "duplicate slots in out_cache_loc"
        new_rows = rows
        if fresh_rows and len(state.free_rows) >= len(rows):
            new_rows = torch.tensor(list(state.free_rows[:len(rows)]))
            for old, new, n in zip(rows.tolist(), new_rows.tolist(), start.clamp_min(0).tolist(), strict=True):
                pool.req_to_token[new, :n] = pool.req_to_token[old, :n]
        pool.write(new_rows, start, end, out, torch.cumsum(counted, 0) - counted, clamp_start=self.clamp_start)
        kept = {"rows": new_rows.tolist(), "allocated_lens": end.tolist(), "free_pages": allocator.free_pages}
        if state.swa is None:
            return Allocation(out, pool.req_to_token, **kept)
        mapping = state.swa.mapping.clone()
        swa_out = torch.zeros_like(out)
        if state.swa.tail_lens is None:
            taken = alloc_extend(start, end, mapping[last], state.swa.free_pages, swa_out, ps,
                                 signed=self.signed_starts)
        else:
            taken = _swa_tail(start, end, torch.tensor(list(state.swa.tail_lens)), state.swa.free_pages, swa_out, ps)
        mapping[out] = swa_out
        return Allocation(out, pool.req_to_token, swa_out, mapping,  # int64, as the mapping's entries
                          swa_free_pages=state.swa.free_pages[taken:], **kept)

    def alloc_decode(self, state: AllocState) -> Allocation:
        return self._allocate(state)

    def alloc_verify(self, state: AllocState) -> Allocation:
        return self._allocate(state, round_up=True)

    def alloc_extend(self, state: AllocState) -> Allocation:
        return self._allocate(state, fresh_rows=True)

    # -- the location route: slots read through the token table a page table stands for ----------
    @staticmethod
    def _slots(table: torch.Tensor, rows: torch.Tensor, positions: torch.Tensor, page_size: int) -> torch.Tensor:
        """``req_to_token[row, pos]`` of a page table's token table; a position outside its row is refused."""
        width = table.shape[1] * page_size
        outside = (positions < 0) | (positions >= width) | (rows >= table.shape[0])
        if bool(outside.any()):
            raise RuntimeError(f"position {positions[outside][0].item()} outside req_to_token's {width} columns")
        pages = table[rows, torch.div(positions, page_size, rounding_mode="floor")].long().clamp_min(0)
        return pages * page_size + positions % page_size

    def _fixed(self, table: torch.Tensor, seq_lens: torch.Tensor, page_size: int, n: int,
               live: int | None) -> torch.Tensor:
        """N tokens per request at ``max(seq - N + t, 0)``; padded requests' tokens write slot 0."""
        bs = seq_lens.shape[0]
        live = bs if live is None else live
        rows = torch.arange(live).repeat_interleave(n)
        pos = (seq_lens[:live].long().repeat_interleave(n) - n + torch.arange(n).repeat(live)).clamp_min(0)
        return torch.cat([self._slots(table, rows, pos, page_size), torch.zeros((bs - live) * n, dtype=torch.long)])

    def decode_locs(self, table: torch.Tensor, seq_lens: torch.Tensor, page_size: int) -> torch.Tensor:
        return self._slots(table, torch.arange(seq_lens.shape[0]), seq_lens.long() - 1, page_size)

    def verify_locs(self, table: torch.Tensor, seq_lens: torch.Tensor, page_size: int, n: int,
                    *, actual_bs: int | None = None) -> torch.Tensor:
        return self._fixed(table, seq_lens, page_size, n, actual_bs)

    def reanchor_locs(self, table: torch.Tensor, frontier: torch.Tensor, page_size: int, n: int) -> torch.Tensor:
        return self._fixed(table, frontier, page_size, n, None)

    def extend_locs(self, table: torch.Tensor, prefix_lens: Sequence[int], extend_lens: Sequence[int],
                    page_size: int) -> torch.Tensor:
        counts = torch.tensor(list(extend_lens), dtype=torch.long)
        rows = torch.arange(len(counts)).repeat_interleave(counts)
        pos = [torch.arange(p, p + e) for p, e in zip(prefix_lens, extend_lens, strict=True)]
        return self._slots(table, rows, torch.cat([torch.zeros(0, dtype=torch.long), *pos]), page_size)

    def group_locs(self, specs: Sequence[Any], tables: Mapping[str, torch.Tensor], batch: Any,
                   *, tail_pad: int = 0) -> dict[str, torch.Tensor]:
        """Every attention group's slots at its own page size (state groups own no slots)."""
        out = {}
        for spec in specs:
            if spec.family == "state" or spec.group_id not in tables:
                continue
            table, size = tables[spec.group_id], spec.block_granularity
            if batch.mode == "extend":
                extend = [s - p for s, p in zip(batch.seq_lens, batch.prefix_lens, strict=True)]
                out[spec.group_id] = self.extend_locs(table, batch.prefix_lens, extend, size)
            else:
                seq = torch.tensor(list(batch.seq_lens), dtype=torch.long)
                out[spec.group_id] = self._fixed(table, seq, size, batch.tokens_per_row, batch.live_rows)
        return dict(sorted(out.items()))

    def expand_table(self, table: torch.Tensor, ratio: int, *, max_kernel_pages: int | None = None,
                     tail_pad: int = 0, actual_bs: int | None = None) -> torch.Tensor:
        """The page table at a page size ``ratio`` times smaller: page ``b > 0`` becomes ``b*r .. b*r+r-1``; holes
        stay holes; columns past the row are ``tail_pad``; padded rows are the padding row's zeros."""
        if ratio < 1:
            raise ValueError(f"page sizes must divide (ratio {ratio})")
        rows, width = table.shape
        out_width = width * ratio if max_kernel_pages is None else max_kernel_pages
        if out_width < 0:
            raise ValueError(f"max_kernel_pages must be >= 0, got {max_kernel_pages}")
        pages = table.long().repeat_interleave(ratio, dim=1)
        sub = torch.where(pages > 0, pages * ratio + torch.arange(ratio).repeat(width), pages)
        out = torch.full((rows, out_width), tail_pad, dtype=torch.int32)
        keep = min(out_width, sub.shape[1])
        out[:, :keep] = sub[:, :keep].to(torch.int32)
        out[rows if actual_bs is None else actual_bs:] = 0
        return out

    def graph(self, specs: Sequence[Any], *, max_bs: int, max_kernel_pages: int, kernel_page_size: int,
              spec_n: int = 1, tail_pad: int = 0, expand: bool = True) -> CudaGraphRunner:
        return CudaGraphRunner(specs, self, max_bs=max_bs, max_kernel_pages=max_kernel_pages,
                               kernel_page_size=kernel_page_size, spec_n=spec_n, tail_pad=tail_pad, expand=expand)


def backend(debug: bool | None = None) -> SglangStyleBackend:
    """The SGLang-style backend; ``debug=True`` turns on its ``SGLANG_DEBUG_MEMORY_POOL`` asserts."""
    return SglangStyleBackend(debug=debug)


def backend_prefix_past_length(debug: bool | None = None) -> SglangStyleBackend:
    """Seeded: output starts are signed sums of extend lengths (``alloc_extend_kernel``'s write before its buffer)."""
    return SglangStyleBackend(debug=debug, signed_starts=True)


def backend_short_verify(debug: bool | None = None) -> SglangStyleBackend:
    """Seeded: a verify row shorter than N is recorded from its negative start (``assign_req_to_token_pool``)."""
    return SglangStyleBackend(debug=debug, clamp_start=False)


def backend_int32_pool(debug: bool | None = None) -> SglangStyleBackend:
    """The backend itself, named for its latent bug: ``req_to_token`` is int32 whatever the pool, so slots
    ``>= 2^31`` wrap (reachable only with a pool that large)."""
    return backend(debug)


def backend_int64_table(debug: bool | None = None) -> SglangStyleBackend:
    """The int32 wrap fixed (``req_to_token`` int64): the passing twin of ``backend_int32_pool`` at a pool past
    2^31 slots, and no longer SGLang's table dtype (``--profile sglang`` says so)."""
    return SglangStyleBackend(debug=debug, table_dtype=torch.int64)
