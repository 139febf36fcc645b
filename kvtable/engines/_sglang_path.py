"""SGLang's allocation path through its own objects: what ``alloc_for_extend``, ``alloc_for_decode_default`` and
``alloc_for_spec_decode`` (``sglang/srt/mem_cache/allocation.py``) do once the scheduler has built a batch.

``Pools`` holds SGLang's ``ReqToTokenPool`` and a token allocator: ``TokenToKVPoolAllocator`` (page size 1),
``PagedTokenToKVPoolAllocator`` (its Triton ``alloc_extend_kernel`` / ``alloc_decode_kernel``, switched on with
``use_triton_kernels``), or ``SWATokenToKVPoolAllocator`` over two of them with a real ``SWAKVPool`` (one
full and one sliding layer of one head) holding the full-to-SWA mapping. Each step calls what the real path
calls, in its order; what needs a ``ScheduleBatch`` or the server's published config is replaced by the call
it dispatches to on a CUDA machine with Triton attention backends: ``get_last_loc`` by
``get_last_loc_triton``, ``write_cache_indices`` by its ``write_req_to_token_pool_triton`` launch. The tree
cache's eviction is not modelled: a step the pool cannot hold is an ``OutOfPool`` refusal, as SGLang's is a
``RuntimeError`` after eviction failed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import torch

from kvtable.engines._shims_sglang import sglang

KV_DTYPE = torch.float16
"""The KV cache's element type: the allocators only carry it; no KV is ever written."""


class OutOfPool(RuntimeError):
    """SGLang's allocator returned None: the step does not fit the free pages (its ``Out of memory`` error)."""


@dataclass(frozen=True)
class Step:
    """What one allocation step gave: ``out_cache_loc`` as SGLang made it, the rows the slots went to and, with
    SWA, each token's SWA slot as the attention backend translates it (``translate_loc_from_full_to_swa``)."""

    locs: torch.Tensor
    rows: list[int]
    swa_locs: torch.Tensor | None


def _long(values: Sequence[int]) -> torch.Tensor:
    return torch.tensor(list(values), dtype=torch.int64)


class Pools:
    """SGLang's token table and allocator for one run (``record``) or one step (``backend``)."""

    def __init__(self, *, rows: int, width: int, page_size: int, pool_pages: int, swa_pool_pages: int | None = None,
                 debug: bool = False) -> None:
        sg = sglang()
        self.page_size, self.width = page_size, width
        self.req_to_token_pool = sg.memory_pool.ReqToTokenPool(size=rows - 1, max_context_len=width, device="cpu",
                                                               enable_memory_saver=False)
        size = pool_pages * page_size
        self.kv_pool: Any = None  # SGLang's SWA pool, where there is one
        if swa_pool_pages is not None:
            self.kv_pool = sg.swa_memory_pool.SWAKVPool(
                size=size, size_swa=swa_pool_pages * page_size, page_size=page_size, dtype=KV_DTYPE, head_num=1,
                head_dim=1, swa_attention_layer_ids=[0], full_attention_layer_ids=[1], device="cpu")
            self.allocator = sg.swa.SWATokenToKVPoolAllocator(size, swa_pool_pages * page_size, page_size, KV_DTYPE,
                                                              "cpu", self.kv_pool, False)
            paged = [self.allocator.full_attn_allocator, self.allocator.swa_attn_allocator]
        elif page_size == 1:
            self.allocator = sg.token.TokenToKVPoolAllocator(size, KV_DTYPE, "cpu", None, False)
            paged = []
        else:
            self.allocator = sg.paged.PagedTokenToKVPoolAllocator(size, page_size, KV_DTYPE, "cpu", None, False)
            paged = [self.allocator]
        for allocator in paged:
            if page_size > 1:
                allocator.use_triton_kernels = True  # the Triton kernels, not the torch fallbacks a CPU picks
                allocator.debug_mode = debug  # SGLANG_DEBUG_MEMORY_POOL
        self.swa = swa_pool_pages is not None

    # -- state ---------------------------------------------------------------------------------------------------
    @property
    def req_to_token(self) -> torch.Tensor:
        """SGLang's int32 token table (row 0 the padding row)."""
        return self.req_to_token_pool.req_to_token

    @property
    def full(self) -> Any:
        """The allocator of the full-attention pool (the only one without SWA)."""
        return self.allocator.full_attn_allocator if self.swa else self.allocator

    @property
    def mapping(self) -> torch.Tensor | None:
        """The full-to-SWA mapping (int64, the sentinel -1 last), or None without SWA."""
        return self.allocator.full_to_swa_index_mapping if self.swa else None

    def lay_out(self, req_to_token: torch.Tensor, free_pages: torch.Tensor, *, free_rows: Sequence[int] = (),
                swa_free_pages: torch.Tensor | None = None, mapping: torch.Tensor | None = None) -> None:
        """Put a given state into SGLang's objects: the table (in place where it is int32 already), the free
        rows, the free lists, the SWA mapping."""
        self.req_to_token_pool.req_to_token = req_to_token.to(torch.int32)
        self.req_to_token_pool.free_slots = list(free_rows)
        self.full.free_pages = free_pages
        if self.swa:
            self.allocator.swa_attn_allocator.free_pages = swa_free_pages
            self.allocator.full_to_swa_index_mapping = mapping
            self.kv_pool.register_mapping(mapping)

    # -- the three allocation paths ------------------------------------------------------------------------------
    def _swa_locs(self, locs: torch.Tensor) -> torch.Tensor | None:
        return self.allocator.translate_loc_from_full_to_swa(locs) if self.swa else None

    def _last_locs(self, rows: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
        """Each request's slot at ``lens - 1`` (-1 for none): ``get_last_loc``'s Triton kernel."""
        return sglang().pool_kernels.get_last_loc_triton(self.req_to_token, rows, lens)

    def extend(self, rows: Sequence[int], prefix_lens: Sequence[int], seq_lens: Sequence[int], *,
               fresh_rows: bool = False, swa_tails: Sequence[int] | None = None) -> Step:
        """``alloc_for_extend``: slots for ``[prefix, seq)`` of each request, recorded with the prefix's slots
        (read from ``rows``, as the radix cache's prefix indices) by ``write_cache_indices``' Triton launch.
        ``fresh_rows``: the requests hold no row yet and take free ones (``alloc_req_slots``). ``swa_tails``:
        SWA slots for each request's last tokens only (``alloc_extend_swa_tail``, one request per call)."""
        sg = sglang()
        prefix, seq = _long(prefix_lens), _long(seq_lens)
        extend = seq - prefix
        count = int(extend.sum())
        prefix_tensors = [self.req_to_token[r, :max(p, 0)].to(torch.int64) for r, p in zip(rows, prefix_lens,
                                                                                           strict=True)]
        if fresh_rows:
            rows = self.req_to_token_pool.alloc_rows(len(rows))
        last = torch.cat([t[-1:] if len(t) else torch.full((1,), -1) for t in prefix_tensors])
        if swa_tails is not None:
            parts = [self.allocator.alloc_extend_swa_tail(prefix[i:i + 1], prefix[i:i + 1], seq[i:i + 1],
                                                          seq[i:i + 1], last[i:i + 1], int(extend[i]), tail)
                     for i, tail in enumerate(swa_tails)]
            locs = None if any(p is None for p in parts) else torch.cat(parts)
        elif self.page_size == 1:
            locs = self.allocator.alloc(count)
        else:
            locs = self.allocator.alloc_extend(prefix, prefix, seq, seq, last, count)
        if locs is None:
            raise OutOfPool(f"Prefill out of memory: {count} tokens, {self.free_count()} free slots")
        pointers = torch.tensor([t.data_ptr() for t in prefix_tensors], dtype=torch.uint64)
        sg.pool_kernels.write_req_to_token_pool_triton[(len(rows),)](
            self.req_to_token, _long(rows), pointers, prefix, seq, extend, locs, self.req_to_token.shape[1])
        return Step(locs, list(rows), self._swa_locs(locs))

    def decode(self, rows: Sequence[int], committed: Sequence[int]) -> Step:
        """``alloc_for_decode_default`` with one token per request: a slot for position ``committed``."""
        rows_t, seq = _long(rows), _long(committed)
        if self.page_size == 1:
            locs = self.allocator.alloc(len(rows))
        else:
            last = self.req_to_token[rows_t, seq - 1]
            locs = self.allocator.alloc_decode(seq + 1, seq + 1, last)
        if locs is None:
            raise OutOfPool(f"Decode out of memory: {len(rows)} tokens, {self.free_count()} free slots")
        self.req_to_token_pool.write((rows_t, seq), locs.to(torch.int32))
        return Step(locs, list(rows), self._swa_locs(locs))

    def verify(self, rows: Sequence[int], cur_kv_lens: Sequence[int], nxt_kv_lens: Sequence[int]) -> Step:
        """``alloc_for_spec_decode``: slots for ``[cur, nxt)`` of each request (the draft tokens to verify),
        recorded by ``assign_req_to_token_pool``."""
        sg = sglang()
        rows_t, cur, nxt = _long(rows), _long(cur_kv_lens), _long(nxt_kv_lens)
        count = int((nxt - cur).sum())
        if count > 0:
            if self.page_size == 1:
                locs = self.allocator.alloc(count)
            else:
                locs = self.allocator.alloc_extend(cur, cur, nxt, nxt, self._last_locs(rows_t, cur), count)
            if locs is None:
                raise OutOfPool(f"Spec decode out of memory: {count} tokens, {self.free_count()} free slots")
            sg.allocation.assign_req_to_token_pool_func(rows_t, self.req_to_token, cur, nxt, locs, len(rows))
        else:
            locs = torch.zeros(0, dtype=torch.int64)
        return Step(locs, list(rows), self._swa_locs(locs))

    @staticmethod
    def spec_lens(committed: Sequence[int], allocated: Sequence[int], seq_lens: Sequence[int], page_size: int
                  ) -> list[int]:
        """Each request's allocated end after a speculative step: ``page_aligned_decode_alloc_lens`` with the
        step's own tokens as the reserve (the allocation rounds up to a page, past ``seq``)."""
        align = sglang().allocation_sizing.page_aligned_decode_alloc_lens
        info = sglang().schedule_batch.ReqKvInfo
        ends = []
        for c, a, s in zip(committed, allocated, seq_lens, strict=True):
            req = SimpleNamespace(kv=info(kv_committed_len=c, kv_allocated_len=a))
            ends.append(align([req], reserve=s - c, page_size=page_size)[1][0])
        return ends

    def free_count(self) -> int:
        """Free slots the step could take (the smaller pool's with SWA)."""
        return int(self.allocator.available_size())
