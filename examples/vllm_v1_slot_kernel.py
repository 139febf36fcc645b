"""vLLM V1's slot-mapping kernel shape (``vllm/v1/worker/block_table.py``), written for kvtable's proofs: our
own code in vLLM's style, not vLLM's.

Launched on ``num_reqs + 1`` programs. Program ``r < num_reqs`` maps request ``r``'s tokens
``[query_start_loc[r], query_start_loc[r + 1])`` through row ``r`` of the group's block table (int32
``[max_num_reqs, max_num_blocks_per_req]``, rows ``block_table_stride`` apart) to int64 slots; the last
program writes ``PAD_ID`` into ``[num_tokens, max_num_tokens)`` for the CUDA graph. Decode context
parallelism is part of the shape (a virtual block of ``block_size * CP_WORLD`` tokens; a token is this rank's
when its interleave chunk is), bound at world size 1 by ``examples/vllm_v1_slot_binding.toml``.

``slot_mapping_kernel`` loads the block with no column bound, as vLLM did before PR #54296: a position past a
narrow group's row reads the next row's block (#53982). ``guarded_slot_mapping_kernel`` bounds the column by
the row's width and writes ``PAD_ID`` there, as the fix does.

    kvtable prove --binding examples/vllm_v1_slot_binding.toml          # holds under the stated assumptions
    kvtable prove --binding examples/vllm_v1_slot_binding.toml \\
        --kernel examples/vllm_v1_slot_kernel.py:slot_mapping_kernel    # #53982: the read past the row
"""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import triton  # noqa: E402 (the interpreter knob is read when a kernel is decorated)
import triton.language as tl  # noqa: E402


@triton.jit
def _slot_mapping(num_tokens, max_num_tokens, query_start_loc_ptr, positions_ptr, block_table_ptr,
                  block_table_stride, block_size, slot_mapping_ptr, CP_WORLD: tl.constexpr, CP_RANK: tl.constexpr,
                  CP_INTERLEAVE: tl.constexpr, PAD_ID: tl.constexpr, BLOCK: tl.constexpr, GUARD: tl.constexpr):
    """One request's slots, or (the last program) the padding tokens' PAD_ID."""
    req = tl.program_id(0)
    if req == tl.num_programs(0) - 1:  # the extra program: every padding token of the CUDA graph gets PAD_ID
        for first in range(num_tokens, max_num_tokens, BLOCK):
            lanes = first + tl.arange(0, BLOCK)
            tl.store(slot_mapping_ptr + lanes, PAD_ID, mask=lanes < max_num_tokens)
        return

    begin = tl.load(query_start_loc_ptr + req).to(tl.int64)
    end = tl.load(query_start_loc_ptr + req + 1).to(tl.int64)
    tokens_per_block = block_size * CP_WORLD
    row = req * block_table_stride
    for first in range(begin, end, BLOCK):
        lanes = first + tl.arange(0, BLOCK)
        live = lanes < end
        pos = tl.load(positions_ptr + lanes, mask=live, other=0)
        column = pos // tokens_per_block
        if GUARD:  # PR #54296: a column past the row is not read, its token gets PAD_ID
            in_row = live & (column < block_table_stride)
            block = tl.load(block_table_ptr + row + column, mask=in_row, other=0).to(tl.int64)
        else:
            in_row = live
            block = tl.load(block_table_ptr + row + column).to(tl.int64)
        within = pos - column * tokens_per_block
        mine = (within // CP_INTERLEAVE) % CP_WORLD == CP_RANK
        offset = within // (CP_WORLD * CP_INTERLEAVE) * CP_INTERLEAVE + within % CP_INTERLEAVE
        slot = tl.where(mine & in_row, block * block_size + offset, PAD_ID)
        tl.store(slot_mapping_ptr + lanes, slot, mask=live)


@triton.jit
def slot_mapping_kernel(num_tokens, max_num_tokens, query_start_loc_ptr, positions_ptr, block_table_ptr,
                        block_table_stride, block_size, slot_mapping_ptr, CP_WORLD: tl.constexpr,
                        CP_RANK: tl.constexpr, CP_INTERLEAVE: tl.constexpr, PAD_ID: tl.constexpr,
                        BLOCK: tl.constexpr):
    """The block table read with no column bound (before vLLM #54296)."""
    _slot_mapping(num_tokens, max_num_tokens, query_start_loc_ptr, positions_ptr, block_table_ptr,
                  block_table_stride, block_size, slot_mapping_ptr, CP_WORLD, CP_RANK, CP_INTERLEAVE, PAD_ID, BLOCK,
                  False)


@triton.jit
def guarded_slot_mapping_kernel(num_tokens, max_num_tokens, query_start_loc_ptr, positions_ptr, block_table_ptr,
                                block_table_stride, block_size, slot_mapping_ptr, CP_WORLD: tl.constexpr,
                                CP_RANK: tl.constexpr, CP_INTERLEAVE: tl.constexpr, PAD_ID: tl.constexpr,
                                BLOCK: tl.constexpr):
    """The column bounded by the row's width, PAD_ID past it (vLLM #54296)."""
    _slot_mapping(num_tokens, max_num_tokens, query_start_loc_ptr, positions_ptr, block_table_ptr,
                  block_table_stride, block_size, slot_mapping_ptr, CP_WORLD, CP_RANK, CP_INTERLEAVE, PAD_ID, BLOCK,
                  True)
