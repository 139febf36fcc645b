"""vLLM 0.33's ``KVCacheManager`` and ``BlockPool`` on kvtable's allocator route (A1-A6): the scheduler's
``allocate_slots`` picks each request's blocks, the worker's slot-mapping kernel turns them into slots.

Each step builds a ``KVCacheManager`` (vllm/v1/core/kv_cache_manager.py) over one full-attention group with
prefix caching on, as the scheduler does, and brings it to the handed state through its own calls: the free
queue (``FreeKVCacheBlockQueue``, vLLM's allocation order) is laid out as the pages the batch's prefixes hold, in
request order, then the handed free list; each request with a prefix is admitted as the scheduler admits one
(``get_computed_blocks``, a prefix-cache hit where it shares full pages with an earlier request, then
``allocate_slots``; an over-allocated request with ``num_lookahead_tokens``, as EAGLE's lookahead does) and
its tokens counted computed. The step itself is one ``allocate_slots(request, seq - prefix)`` per request
with tokens to compute (a request with none is not scheduled). vLLM keeps block tables, not a token table: the
table returned is each request's block list expanded to slots by the slot-mapping kernel of the backend's model
runner, positions ``0 .. end - 1`` of its row (A2 then checks its earlier slots are the blocks it held), and
the free list returned is the pool's free queue after the step (A6).

Tokens are derived from the slots a prefix holds (``slot + 1``), so two requests share a block hash exactly
where they share a page. What vLLM has no code for is ``Unsupported``: a SWA pool (its sliding-window groups
take blocks from the same ``BlockPool``, no full-to-SWA mapping), lengths its scheduler never builds, and a pool
of 2^31 slots (``BlockPool`` keeps one object per block).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from kvtable.alloc_contract import Allocation, AllocState
from kvtable.errors import Unsupported

MAX_BUILT_BLOCKS = 1 << 20
"""Past this many pages the step is ``Unsupported``: ``BlockPool`` builds a ``KVCacheBlock`` per block."""

SlotMappings = Callable[[Sequence[torch.Tensor], Sequence[int], Sequence[int], torch.Tensor, int], list[torch.Tensor]]
"""The backend's ``_slot_mappings``: tables, block sizes, token counts, positions, total -> slots per table."""


def unsupported(state: AllocState) -> str:
    """Why vLLM has no code for this step ('' where it has)."""
    if state.swa is not None:
        return "a SWA pool with a full-to-SWA slot mapping: vLLM's sliding-window groups share one BlockPool"
    if state.pool_pages >= MAX_BUILT_BLOCKS:
        return "a pool past 2^20 pages (2^31 slots): vLLM's BlockPool builds one KVCacheBlock per block"
    starts = state.prefix_lens if state.allocated_lens is None else state.allocated_lens
    for prefix, seq, start in zip(state.prefix_lens, state.seq_lens, starts, strict=True):
        if prefix < 0 or seq < prefix or start < prefix:
            return ("a prefix below 0 or past its length: vLLM's scheduler counts num_computed_tokens up from 0 "
                    "and schedules only tokens past them")
    return ""


def _manager(page_size: int, pool_pages: int, max_model_len: int) -> Any:
    """A ``KVCacheManager`` over one full-attention group of ``pool_pages + 1`` blocks (block 0: the null block)."""
    from vllm.v1.core.kv_cache_manager import KVCacheManager
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec

    spec = FullAttentionSpec(block_size=page_size, num_kv_heads=1, head_size=1, dtype=torch.float32)
    config = KVCacheConfig(num_blocks=pool_pages + 1, kv_cache_tensors=[],
                           kv_cache_groups=[KVCacheGroupSpec(["layers.0.attn"], spec)])
    return KVCacheManager(config, max_model_len=max_model_len, scheduler_block_size=page_size,
                          hash_block_size=page_size, enable_caching=True)


def _lay_out_free_queue(pool: Any, pages: Sequence[int]) -> None:
    """The pool's free queue holds ``pages``, in that order (vLLM pops from its front)."""
    from vllm.v1.core.kv_cache_utils import FreeKVCacheBlockQueue

    for block in pool.blocks:
        block.prev_free_block = block.next_free_block = None
    pool.free_block_queue = FreeKVCacheBlockQueue([pool.blocks[p] for p in pages])


def _hasher(page_size: int) -> Callable[[Any], Any]:
    """The engine core's block hasher (``prefix_caching_hash_algo``'s default, sha256)."""
    from vllm.utils.hashing import get_hash_fn_by_name
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash

    hash_fn = get_hash_fn_by_name("sha256")
    init_none_hash(hash_fn)
    return get_request_block_hasher(page_size, hash_fn)


class Step:
    """One allocator step through vLLM's manager: the state laid out, then ``allocate_slots`` per request."""

    def __init__(self, state: AllocState, slot_mappings: SlotMappings) -> None:
        self.state, self.slot_mappings = state, slot_mappings
        self.ps = state.page_size
        self.table = state.req_to_token.tolist()
        self.starts = list(state.prefix_lens if state.allocated_lens is None else state.allocated_lens)
        self.manager = _manager(self.ps, state.pool_pages, state.req_to_token.shape[1])
        self.hasher = _hasher(self.ps)
        self.requests = [self._request(i) for i in range(len(state.rows))]

    def _held(self, i: int) -> list[int]:
        """The pages request ``i``'s row holds, one per page column of its allocated positions."""
        row = self.table[self.state.rows[i]]
        return [row[col * self.ps] // self.ps for col in range(-(-self.starts[i] // self.ps))]

    def _request(self, i: int) -> Any:
        """Request ``i``: its known tokens (a held slot + 1; past them, ids no slot gives)."""
        from vllm.sampling_params import SamplingParams
        from vllm.v1.request import Request

        row, end = self.table[self.state.rows[i]], max(self.state.seq_lens[i], self.starts[i])
        base = (self.state.pool_pages + 2) * self.ps
        tokens = [row[pos] + 1 if pos < self.starts[i] else base + i * len(row) + pos for pos in range(end)]
        return Request(f"req-{i}", tokens, SamplingParams(max_tokens=1), None, block_hasher=self.hasher)

    def lay_out(self) -> None:
        """The free queue, then every request with a prefix admitted and computed up to it."""
        from vllm.v1.request import RequestStatus

        own: dict[int, None] = {}
        for i in range(len(self.requests)):
            own.update(dict.fromkeys(self._held(i)))
        _lay_out_free_queue(self.manager.block_pool, [*own, *self.state.free_pages.tolist()])
        for i, request in enumerate(self.requests):
            prefix = self.state.prefix_lens[i]
            if prefix == 0:
                continue
            hit, hits, _ = self.manager.get_computed_blocks(request)
            if self.manager.allocate_slots(request, prefix - hits, hits, hit,
                                           num_lookahead_tokens=self.starts[i] - prefix) is None:
                raise RuntimeError(f"request {i}: vLLM could not admit its prefix of {prefix} tokens")
            request.num_computed_tokens = prefix
            request.status = RequestStatus.RUNNING

    def allocate(self) -> Allocation:
        """``allocate_slots`` for every request with tokens to compute, then its slots by the kernel."""
        for i, request in enumerate(self.requests):
            new = self.state.seq_lens[i] - self.state.prefix_lens[i]
            if new and self.manager.allocate_slots(request, new) is None:
                raise RuntimeError(f"request {i}: vLLM's pool has no room for its {new} tokens (allocate_slots)")
        return self._recorded()

    def _recorded(self) -> Allocation:
        """Each request's blocks as slots (positions ``0 .. end - 1`` of its row), its new ones as ``out``, and the
        pool's free queue."""
        ends = [max(s, e) for s, e in zip(self.starts, self.state.seq_lens, strict=True)]
        blocks = [self.manager.get_block_ids(r.request_id)[0] for r in self.requests]
        width = max([len(b) for b in blocks] + [1])
        table = torch.zeros((len(blocks), width), dtype=torch.int32)
        for i, ids in enumerate(blocks):
            table[i, :len(ids)] = torch.tensor(ids, dtype=torch.int32)
        positions = torch.cat([torch.zeros(0, dtype=torch.int64), *(torch.arange(e) for e in ends)])
        [slots] = self.slot_mappings([table], [self.ps], ends, positions, sum(ends))
        recorded = self.state.req_to_token.clone()
        locs, at = [], 0
        for i, (start, end) in enumerate(zip(self.starts, ends, strict=True)):
            recorded[self.state.rows[i], :end] = slots[at:at + end].to(recorded.dtype)
            locs.append(slots[at + start:at + end])
            at += end
        out = self.state.out
        out.copy_(torch.cat([torch.zeros(0, dtype=torch.int64), *locs]).to(out.dtype))
        free = [b.block_id for b in self.manager.block_pool.free_block_queue.get_all_free_blocks()]
        return Allocation(out, recorded, free_pages=torch.tensor(free, dtype=torch.int64))


def allocate(state: AllocState, slot_mappings: SlotMappings) -> Allocation:
    """One allocator step of ``state`` through vLLM's ``KVCacheManager``; ``Unsupported`` where it has no code."""
    if why := unsupported(state):
        raise Unsupported(why)
    step = Step(state, slot_mappings)
    step.lay_out()
    return step.allocate()
