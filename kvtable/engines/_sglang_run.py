"""A seeded serving loop over SGLang's allocation path, every step recorded for ``kvtable trace check``.

The loop is the scheduler's part (which requests run, how long their chunks are, how many drafts are
accepted); every pool and allocator call is SGLang's (``_sglang_path.Pools``), with its per-request KV state
kept in SGLang's own ``ReqKvInfo``. Requests arrive on free ``req_to_token`` rows (``alloc_rows``), prefill
in chunks (``alloc_for_extend``), then decode one token (``alloc_for_decode``) or verify drafts
(``alloc_for_spec_decode`` over ``page_aligned_decode_alloc_lens``, which over-allocates up to a page and
keeps the rejected drafts' slots allocated). Before each step the sliding-window slots that left the window
are freed (``free_swa_out_of_window_slots``); a finished request's row goes back uncleared after its slots
(``free_kv_row_segments``, ``free_rows``). Paged (page size 4, the Triton kernels) with a SWA pool. Every page
SGLang's allocators put back is recorded as a ``free`` event of its pool (``req_to_token`` or ``swa``) before
the next step, so ``trace check`` judges A6 across steps (a page freed twice, used after free).

The ``prefix-past-length`` fault publishes, at each extend of two or more requests, request 0's cached prefix
one token past its chunk's end (``published_prefixes``); the step is recorded with the lengths SGLang was handed.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from kvtable.alloc_contract import Allocation
from kvtable.conformance.alloc_calls import EngineBuffers, alloc_outcome
from kvtable.engines._sglang_faults import PREFIX_PAST_LENGTH, patched, published_prefixes
from kvtable.engines._sglang_path import OutOfPool, Pools, Step
from kvtable.engines._shims_sglang import sglang
from kvtable.engines.base import RunSummary
from kvtable.trace.allocation import POOL_FREES
from kvtable.trace.recorder import Recorder

PAGE_SIZE, WINDOW, DRAFTS, CHUNK = 4, 8, 3, 8
ROWS, MAX_PROMPT, MAX_OUTPUT = 8, 24, 16
POOL_PAGES, SWA_POOL_PAGES = 96, 64
RESERVE = 2 * DRAFTS
"""``get_alloc_reserve_per_decode``: twice the drafts of one step, rounded up to a page by the allocation."""
WIDTH = MAX_PROMPT + MAX_OUTPUT + RESERVE + 2 * PAGE_SIZE


class ServingLoop:
    """Requests through SGLang's pools; ``step()`` runs one scheduler step and records it."""

    def __init__(self, recorder: Recorder, *, seed: int, fault: str | None) -> None:
        sg = sglang()
        self.rec, self.fault, self.rng = recorder, fault, np.random.default_rng(seed)
        self.kv_info, self.component = sg.schedule_batch.ReqKvInfo, sg.common.ComponentType.SWA
        self.pools = Pools(rows=ROWS, width=WIDTH, page_size=PAGE_SIZE, pool_pages=POOL_PAGES,
                           swa_pool_pages=SWA_POOL_PAGES)
        self.live: list[SimpleNamespace] = []
        self.next_id = 0
        self.counts = {"extend": 0, "decode": 0, "verify": 0, "finished": 0, "refused": 0, "swa_evictions": 0,
                       "frees": 0}
        self.freed: dict[str, list[int]] = {"req_to_token": [], "swa": []}
        for pool, allocator in (("req_to_token", self.pools.full), ("swa", self.pools.allocator.swa_attn_allocator)):
            allocator._release_page_ids = self._releasing(pool, allocator._release_page_ids)

    def _releasing(self, pool: str, release: Any) -> Any:
        """SGLang's ``_release_page_ids`` (where ``free``, ``free_segment`` and ``free_group_end`` of a paged
        allocator put pages back), noting the pages for the pool's next free event."""
        def noted(*page_ids: torch.Tensor) -> Any:
            self.freed[pool] += [int(p) for ids in page_ids for p in ids.reshape(-1).tolist()]
            return release(*page_ids)

        return noted

    def _record_frees(self) -> None:
        """One free event per pool for the pages SGLang released since the last one (A6 judges them across steps)."""
        for pool, pages in self.freed.items():
            if pages:
                self.rec.pool_free(pool, pages, page_size=PAGE_SIZE)
                self.counts["frees"] += 1
            self.freed[pool] = []

    # -- the scheduler's decisions -------------------------------------------------------------------------------
    def step(self) -> None:
        """Arrivals, then one extend, decode or verify step, then finished requests leave."""
        rowless = sum(not r.kv.holds_kv for r in self.live)
        if self.pools.req_to_token_pool.available_size() > rowless and (not self.live or self.rng.random() < 0.35):
            self._arrive()
        prefilling = [r for r in self.live if r.kv.kv_committed_len < r.prompt]
        running = [r for r in self.live if r.kv.kv_committed_len >= r.prompt]
        if prefilling and (not running or self.rng.random() < 0.5):
            self._extend(prefilling[:3])
        elif running:
            over = any(r.kv.kv_allocated_len > r.kv.kv_committed_len for r in running)
            self._verify(running) if over or self.rng.random() < 0.4 else self._decode(running)
        for req in [r for r in self.live if r.kv.kv_committed_len >= r.prompt + r.output]:
            self._finish(req)

    def _arrive(self) -> None:
        """A request without a row: ``alloc_for_extend`` gives it one at its first chunk."""
        self.live.append(SimpleNamespace(id=self.next_id, prompt=int(self.rng.integers(1, MAX_PROMPT + 1)),
                                         output=int(self.rng.integers(1, MAX_OUTPUT + 1)), decode_batch_idx=0,
                                         kv=self.kv_info()))
        self.next_id += 1

    def _extend(self, batch: list[SimpleNamespace]) -> None:
        prefix = [r.kv.kv_committed_len for r in batch]
        seq = [p + min(CHUNK, r.prompt - p) for p, r in zip(prefix, batch, strict=True)]
        for req, pre in zip(batch, prefix, strict=True):  # maybe_evict_swa: no prefix sharing, extend evicts too
            self._evict_swa(req, pre)
        self.pools.req_to_token_pool.alloc(batch)  # alloc_req_slots: a row for each request without one
        published = published_prefixes(self.fault, "extend", prefix, seq)
        injected = None
        if published != prefix:
            injected = (f"request 0 (row {batch[0].kv.req_pool_idx}) published with a cached prefix {published[0]} "
                        f"past its length {seq[0]} (fault {PREFIX_PAST_LENGTH})")
        if self._run("extend", batch, published, seq, injected) is not None:
            for req, end in zip(batch, seq, strict=True):
                req.kv.kv_allocated_len = req.kv.kv_committed_len = end

    def _decode(self, batch: list[SimpleNamespace]) -> None:
        committed = [r.kv.kv_committed_len for r in batch]
        self._evict_before_decode(batch)
        if self._run("decode", batch, committed, [c + 1 for c in committed]) is not None:
            for req in batch:
                req.kv.kv_allocated_len += 1
                req.kv.kv_committed_len += 1

    def _verify(self, batch: list[SimpleNamespace]) -> None:
        sg = sglang()
        self._evict_before_decode(batch)
        cur, nxt, _ = sg.allocation_sizing.page_aligned_decode_alloc_lens(batch, reserve=RESERVE,
                                                                          page_size=PAGE_SIZE)
        if self._run("verify", batch, cur, nxt) is not None:
            for req, end in zip(batch, nxt, strict=True):
                req.kv.kv_allocated_len = max(req.kv.kv_allocated_len, end)
                accepted = int(self.rng.integers(1, DRAFTS + 1))
                req.kv.kv_committed_len = min(req.kv.kv_committed_len + accepted, req.prompt + req.output)

    def _evict_before_decode(self, batch: list[SimpleNamespace]) -> None:
        for req in batch:
            if req.decode_batch_idx >= 1:
                self._evict_swa(req, req.kv.kv_committed_len - 1)
            req.decode_batch_idx += 1

    def _evict_swa(self, req: SimpleNamespace, pre_len: int) -> None:
        before = req.kv.get_evicted_seqlen(self.component)
        sglang().common.free_swa_out_of_window_slots(
            req, pre_len, sliding_window_size=WINDOW, page_size=PAGE_SIZE,
            req_to_token_pool=self.pools.req_to_token_pool, token_to_kv_pool_allocator=self.pools.allocator,
            supports_prefix_sharing=False)
        self.counts["swa_evictions"] += req.kv.get_evicted_seqlen(self.component) > before

    def _finish(self, req: SimpleNamespace) -> None:
        """``release_kv_cache`` without a tree: the row's slots go back (SWA-evicted ones full-side only), then
        the row, uncleared."""
        kv, sg = req.kv, sglang()
        row = self.pools.req_to_token[kv.req_pool_idx, :kv.kv_allocated_len].to(torch.int64)
        sg.common.free_kv_row_segments(self.pools.allocator, [(row, 0)],
                                       swa_evicted_seqlen=kv.get_evicted_seqlen(self.component),
                                       swa_dead_lo=kv.swa_dead_lo(PAGE_SIZE))
        self.pools.req_to_token_pool.free_rows([kv.req_pool_idx])
        self.live.remove(req)
        self.counts["finished"] += 1
        self._record_frees()
        self.rec.finish([req.id])

    # -- one call into SGLang, recorded --------------------------------------------------------------------------
    def _run(self, mode: str, batch: list[SimpleNamespace], prefix: list[int], seq: list[int],
             injected: str | None = None) -> Step | None:
        self._record_frees()  # the window's slots SGLang freed before the step
        pools = self.pools
        rows = [r.kv.req_pool_idx for r in batch]
        table, free = pools.req_to_token.clone(), pools.full.free_pages.clone()
        allocator = pools.allocator  # this run's pools have SWA: pools.mapping is the allocator's
        swa_free = allocator.swa_attn_allocator.free_pages.clone()
        mapping = allocator.full_to_swa_index_mapping.clone()
        buffers, step, error = EngineBuffers(), None, None
        try:
            with patched(self.fault), buffers:
                calls: dict[str, Callable[..., Step]] = {"extend": pools.extend, "decode": pools.decode,
                                                         "verify": pools.verify}
                call = calls[mode]
                step = call(rows, prefix, seq) if mode != "decode" else call(rows, prefix)
        except (OutOfPool, AssertionError, RuntimeError) as err:
            error = f"{type(err).__name__}: {err}"
            self.counts["refused"] += 1
        swa: dict[str, Any] = {"mapping": mapping, "free_pages": swa_free, "pool_pages": SWA_POOL_PAGES}
        outcome = None
        if step is not None:  # the guards around SGLang's own output buffer, as conform reads them
            outcome = alloc_outcome(Allocation(step.locs, pools.req_to_token), torch.empty(0), buffers.arenas)
            swa.update(locs=step.swa_locs, recorded=pools.mapping,
                       free_after=pools.allocator.swa_attn_allocator.free_pages)
            self.counts[mode] += 1
        self.rec.allocation(mode, table, rows, prefix, seq, free, page_size=PAGE_SIZE, pool_pages=POOL_PAGES,
                            locs=None if step is None else step.locs, recorded=None if step is None else
                            pools.req_to_token, guard_before=outcome.guard_before if outcome else (),
                            guard_after=outcome.guard_after if outcome else (),
                            canary=outcome.canary if outcome else 0, req_ids=[r.id for r in batch], error=error,
                            injected=injected, swa=swa, free_after=pools.full.free_pages if step else None)
        return step


def run(out: Path, *, steps: int, seed: int, fault: str | None, version: str) -> RunSummary:
    """At least ``steps`` recorded steps (each allocation or finish is one) into ``out``; a run whose pools a fault
    corrupted stops where SGLang's own assertions fire, saying so."""
    meta = {"engine": "sglang", "version": version, "seed": seed, "fault": fault, "page_size": PAGE_SIZE,
            "window": WINDOW, "drafts": DRAFTS, POOL_FREES: True}
    factory = "backend" if fault is None else "backend_" + fault.replace("-", "_")
    with Recorder(out, profile="sglang", backend=f"kvtable.engines.sglang:{factory}", meta=meta) as rec:
        loop = ServingLoop(rec, seed=seed, fault=fault)
        stopped = ""
        while rec.steps < steps and not stopped:
            try:
                loop.step()
            except AssertionError as err:  # SGLang's own invariants, once a fault has corrupted its pools
                stopped = f"SGLang's assertion after step {rec.steps - 1}: {err or 'assert'}"
    facts: dict[str, object] = dict(loop.counts)
    if stopped:
        facts["stopped"] = stopped
    return RunSummary(str(out), rec.steps, "sglang", version, fault, facts)
