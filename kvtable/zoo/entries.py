"""The bug zoo's registry: one entry per known engine bug that maps onto the contract.

Each entry names the public issue, its number in the zoo's list of 18 known engine bugs (vLLM 1-5,
SGLang 6-10, kvcached, FlashInfer, TensorRT-LLM and tokenspeed 11-15, SGLang's allocator 16-18), the clause
expected to catch it, and the mutant backend that re-creates it on top of the conforming torch backend (16-18:
on the torch backend's own allocator step, ``impl.allocation.Allocator``, swapped). The bugs that do not
map onto the contract are listed, with the reason, in ``OUTSIDE``; the two lists cover every number.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvtable.spec.clauses import clause_label
from kvtable.zoo import other_engines, sglang, trtllm, vllm
from kvtable.zoo.base import ZooBackend


@dataclass(frozen=True)
class Entry:
    """One known engine bug, re-created as a mutant backend."""

    name: str
    item: int
    """Its number in the zoo's list of known engine bugs (1-18)."""
    issue: str
    clause: str
    """The clause (id) expected to catch it."""
    bug: str
    mutant: str
    backend: type[ZooBackend]
    obligation: str = ""
    """A z3 obligation (prover/obligations/) that encodes the bug's formula and must yield a counterexample."""
    examples: int = 10
    """Examples per property the suite gets to catch it (most need far fewer; see the zoo table)."""

    @property
    def label(self) -> str:
        return clause_label(self.clause)


ENTRIES: tuple[Entry, ...] = (
    Entry("vllm-43810", 1, "vllm-project/vllm #43810 (fixed by PR #43869)", "W2",
          "padded slot -1 indexed Python-style landed in a real slot",
          "verify/re-anchor positions not clamped at 0; column -1 wraps to the row's last page, offset -1 to ps-1",
          vllm.Vllm43810, obligation="W0.truncation-differs-below-zero"),
    Entry("vllm-53982", 2, "vllm-project/vllm #53982 (PR #54296)", "T8",
          "block-table load out of bounds for narrow groups: the next row's block id (144)",
          "no host width check, no col < width mask: a column past the width reads the next row",
          vllm.Vllm53982, obligation="T8.decode-needs-width"),
    Entry("vllm-13418", 3, "vllm-project/vllm #13418 (PR #13922)", "G2",
          "slot_mapping.size(0) != key.size(0) under CUDA-graph padding",
          "capture hands out the whole max_bs*spec_n location buffer instead of a [:bs*N] view",
          vllm.Vllm13418),
    Entry("vllm-1486", 4, "vllm-project/vllm #1486 (PR #1514)", "W5",
          "int32 overflow in slot and cache-offset arithmetic with about 64K blocks",
          "int32 slot arithmetic, and debug mode lets page ids past the W5 range through (their slots wrap)",
          vllm.Vllm1486, obligation="W5.int32-product-wraps"),
    Entry("vllm-51031", 5, "vllm-project/vllm PR #51031", "G4",
          "stale user block_size instead of the backend-forced kernel block size",
          "replay divides by the block granularity B on tables expanded to kernel pages of K",
          vllm.Vllm51031),
    Entry("vllm-51031-swapped", 5, "vllm-project/vllm PR #51031 (eager, multi-group)", "W1",
          "a group's locations computed with another group's block size",
          "group_locs rotates the groups' page sizes by one (each group divides by its neighbour's B)",
          vllm.Vllm51031Swapped),
    Entry("sglang-35351", 6, "sgl-project/sglang PR #35351, PR #32477, issue #36207", "D1",
          "writers did not skip slot 0: padding and real tokens poisoned the dummy page",
          "the debug checker treats every write into page 0 as skipped, so a real token writing it passes",
          sglang.Sglang35351),
    Entry("sglang-35985", 7, "sgl-project/sglang PR #35985 (fixes #34239)", "G1",
          "CUDA-graph page table sized from context_len, without the verify tokens",
          "table buffers sized for max_kernel_pages minus the draft tokens' kernel pages",
          sglang.Sglang35985),
    Entry("sglang-23984", 8, "sgl-project/sglang PR #23984", "W1",
          "full-space out_cache_loc used in the SWA group",
          "group_locs hands every sliding group the full group's locations",
          sglang.Sglang23984, examples=60),  # needs a full+sliding pair: seeds 0-99 catch it within 4-37 examples
    Entry("sglang-25889", 9, "sgl-project/sglang PR #25889 (and review of PR #24138)", "G3",
          "cached full->SWA translation not invalidated when the mapping changed",
          "replay caches the translated tables per batch shape and skips the fill when the shape repeats",
          sglang.Sglang25889),
    Entry("sglang-swa-replay", 10,
          "sgl-project/sglang CUDA-graph runner comment (no number; out_cache_loc_swa now zeroed)", "G4",
          "stale padded SWA indices from an earlier replay pointed into live SWA slots",
          "replay leaves the padded rows' sliding-group locations as an earlier replay wrote them",
          sglang.SglangSwaReplay),
    Entry("sglang-alloc-extend-start", 16, "sgl-project/sglang alloc_extend_kernel (python/sglang/kernels/ops/memory/"
          "allocator.py)", "A4", "a prefix past its length made the next request's output start before the buffer",
          "the allocator step starts each request's output at the signed sum of the extend lengths before it",
          sglang.SglangAllocExtendStart),
    Entry("sglang-assign-short-row", 17, "sgl-project/sglang assign_req_to_token_pool (python/sglang/srt/mem_cache/"
          "allocation.py)", "A2", "a verify row shorter than N was recorded into the row before it",
          "the allocator step records each request from row * width + first position, a negative one too",
          sglang.SglangAssignShortRow),
    Entry("sglang-int32-req-to-token", 18, "sgl-project/sglang ReqToTokenPool (python/sglang/srt/mem_cache/"
          "memory_pool.py)", "A1", "an int32 req_to_token wraps slots >= 2^31",
          "the allocator step records into an int32 token table whatever the pool holds",
          sglang.SglangInt32ReqToToken),
    Entry("kvcached-398", 11, "ovg-project/kvcached PR #398", "G1",
          "the elastic pool's null block became a non-zero id (10), real block 0 went to a request",
          "graph buffers start out, and padded rows are refilled, with block 10 instead of page 0",
          other_engines.Kvcached398),
    Entry("flashinfer-919", 12, "flashinfer-ai/flashinfer #919", "W3",
          "AppendPagedKVCacheKernel processes every padded token, never skipping padding",
          "extend pads every request's run to the longest extend and locates the padding tokens too",
          other_engines.Flashinfer919),
    Entry("trtllm-13278", 14, "NVIDIA/TensorRT-LLM PR #13278", "G3",
          "padding dummies aliased the slots of parked live requests",
          "replay fills padded rows with the last live row's pages instead of page 0",
          other_engines.Trtllm13278),
    Entry("tokenspeed-667-short", 15, "lightseekorg/tokenspeed PR #667", "G2",
          "per-group locations covered only the real tokens; the store kernel walked past them",
          "capture hands out location views of bs entries, one per request, not bs*N",
          other_engines.Tokenspeed667Short),
    Entry("tokenspeed-667-baked", 15, "lightseekorg/tokenspeed PR #667 (second variant)", "G2",
          "capture-time write locations baked into the graph",
          "replay computes locations into a fresh buffer; captured views keep the capture-time values",
          other_engines.Tokenspeed667Baked),
    Entry("tokenspeed-709-extend", 15, "lightseekorg/tokenspeed #709 (the extend variant)", "T4",
          "an extend over a -1 page wrote a negative slot (-16 at page size 16): the fix clamped decode only",
          "the extend location path computes page * ps + offset with no clamp of a negative page",
          other_engines.Tokenspeed709Extend),
    Entry("trtllm-reanchor-view", 15, "lightseekorg/tokenspeed TensorRT-LLM backend (no upstream number)", "W4",
          "a draft re-anchor on a captured sliding-window view at ratio > 1 wrote a page in no row",
          "reanchor_locs reads a captured sliding view at r > 1 in block pages and expands its kernel pages again",
          trtllm.TrtReanchorView),
)

BY_NAME = {entry.name: entry for entry in ENTRIES}


@dataclass(frozen=True)
class Outside:
    """A known engine bug that does not map onto the contract, and why."""

    item: int
    issue: str
    reason: str


OUTSIDE: tuple[Outside, ...] = (
    Outside(3, "vllm-project/vllm #13418 (the writer's part)",
            "the fix makes reshape_and_cache tolerate slot_mapping shorter than the key rows; how a writer pairs "
            "key rows with locations is the writer's business. The contract's part (G2: the location view is "
            "exactly bs*N long) is the zoo entry vllm-13418."),
    Outside(6, "sgl-project/sglang issue #36207 (the payload's part)",
            "NaN k/v values of padding rows spreading through masked reads of page 0 is KV payload and attention "
            "maths. The contract only confines where writes go: dummy rows write page 0 alone (T2, W2) and no "
            "real token writes page 0 (D1, zoo entry sglang-35351); scrubbing page 0 is out of scope."),
    Outside(11, "ovg-project/kvcached PR #398 (the race)",
            "the race in the elastic pool's allocator is allocator policy; its consequence, a null block that is "
            "not page 0, is the zoo entry kvcached-398 (G1, G3)."),
    Outside(13, "flashinfer-ai/flashinfer PR #5176",
            "padded prefill grids read split-KV plan entries never written: the attention planner's workspace, "
            "not a page table or a write location. The analogous contract rule for location buffers (G4: replay "
            "rewrites every entry of [:bs*N]) is covered by the zoo entries sglang-swa-replay and "
            "tokenspeed-667-baked."),
    Outside(14, "NVIDIA/TensorRT-LLM PR #13278 (the mamba state part)",
            "mamba/GDN state slots are state-group tables, shed before location maths (T6); state-slot "
            "allocation under MTP is the state backend's. The aliasing of padding dummies into live slots is "
            "the zoo entry trtllm-13278 on attention groups (G3)."),
)
