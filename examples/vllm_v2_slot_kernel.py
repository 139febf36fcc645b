"""vLLM Model Runner V2's slot-mapping kernel shape (``vllm/v1/worker/gpu/block_table.py``), written for kvtable's
proofs: our own code in vLLM's style, not vLLM's.

One launch for every KV-cache group: grid ``(num_groups, num_reqs + 1)``. Each group's block table is its own
int32 tensor ``[max_num_reqs, max_num_blocks]``, reached through a uint64 table of their ``data_ptr()``s and
``tl.cast`` to a pointer type; its row stride and block size are loaded per group too. Program ``(g, b)`` maps
batch entry ``b``'s tokens (request state row ``idx_mapping[b]``) to int64 slots in row ``g`` of
``slot_mappings``; the last program of each group writes ``PAD_ID`` into ``[num_tokens, max_num_tokens)``. The
context-parallel branch is a constexpr branch on ``CP_SIZE``, with ``cp_rank`` a kernel argument.

As in vLLM, ``block * block_size`` is an int32 product before it meets the int64 offset: it wraps once a
group's pool passes 2^31 slots. ``slot_mappings_kernel`` also reads the block with no column bound (#53982);
``guarded_slot_mappings_kernel`` has #54296's bound, so only the int32 product is left.

    kvtable prove --binding examples/vllm_v2_slot_binding.toml   # agreement refuted: the int32 product wraps
"""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import triton  # noqa: E402 (the interpreter knob is read when a kernel is decorated)
import triton.language as tl  # noqa: E402


@triton.jit
def _pointer_at(pointers, element_type):
    """Entry ``pointers[0]`` of a table of pointers, as a pointer to ``element_type``."""
    address = tl.load(pointers)
    return tl.multiple_of(tl.cast(address, tl.pointer_type(element_type)), 16)


@triton.jit
def _slot_mappings(num_tokens, max_num_tokens, idx_mapping, query_start_loc, positions_ptr, block_table_ptrs,
                   block_table_strides, block_sizes, slot_mappings_ptr, slot_mappings_stride, cp_rank,
                   CP_SIZE: tl.constexpr, CP_INTERLEAVE: tl.constexpr, PAD_ID: tl.constexpr, BLOCK: tl.constexpr,
                   GUARD: tl.constexpr):
    """Group ``g``'s slots of one batch entry, or (the last program) its padding tokens' PAD_ID."""
    group = tl.program_id(0)
    batch = tl.program_id(1)
    out = slot_mappings_ptr + group * slot_mappings_stride
    if batch == tl.num_programs(1) - 1:  # the padding program of this group
        for first in range(num_tokens, max_num_tokens, BLOCK):
            lanes = first + tl.arange(0, BLOCK)
            tl.store(out + lanes, PAD_ID, mask=lanes < max_num_tokens)
        return

    table = _pointer_at(block_table_ptrs + group, tl.int32)
    stride = tl.load(block_table_strides + group)
    block_size = tl.load(block_sizes + group)
    row = tl.load(idx_mapping + batch)
    begin = tl.load(query_start_loc + batch)
    end = tl.load(query_start_loc + batch + 1)
    for first in range(begin, end, BLOCK):
        lanes = first + tl.arange(0, BLOCK)
        live = lanes < end
        pos = tl.load(positions_ptr + lanes, mask=live, other=0)
        column = pos // (block_size * CP_SIZE)
        within = pos % (block_size * CP_SIZE)
        if GUARD:  # PR #54296: no read past the row; its token gets PAD_ID
            in_row = live & (column < stride)
            block = tl.load(table + row * stride + column, mask=in_row, other=0)
        else:
            in_row = live
            block = tl.load(table + row * stride + column)
        if CP_SIZE == 1:
            slot = block * block_size + within  # int32 * int32, then int64
        else:
            mine = within // CP_INTERLEAVE % CP_SIZE == cp_rank
            local = within // (CP_INTERLEAVE * CP_SIZE) * CP_INTERLEAVE + within % CP_INTERLEAVE
            slot = block * block_size + local
            slot = tl.where(mine, slot, PAD_ID)
        tl.store(out + lanes, tl.where(in_row, slot, PAD_ID), mask=live)


@triton.jit
def slot_mappings_kernel(num_tokens, max_num_tokens, idx_mapping, query_start_loc, positions_ptr, block_table_ptrs,
                         block_table_strides, block_sizes, slot_mappings_ptr, slot_mappings_stride, cp_rank,
                         CP_SIZE: tl.constexpr, CP_INTERLEAVE: tl.constexpr, PAD_ID: tl.constexpr,
                         BLOCK: tl.constexpr):
    """No column bound (before vLLM #54296)."""
    _slot_mappings(num_tokens, max_num_tokens, idx_mapping, query_start_loc, positions_ptr, block_table_ptrs,
                   block_table_strides, block_sizes, slot_mappings_ptr, slot_mappings_stride, cp_rank, CP_SIZE,
                   CP_INTERLEAVE, PAD_ID, BLOCK, False)


@triton.jit
def guarded_slot_mappings_kernel(num_tokens, max_num_tokens, idx_mapping, query_start_loc, positions_ptr,
                                 block_table_ptrs, block_table_strides, block_sizes, slot_mappings_ptr,
                                 slot_mappings_stride, cp_rank, CP_SIZE: tl.constexpr, CP_INTERLEAVE: tl.constexpr,
                                 PAD_ID: tl.constexpr, BLOCK: tl.constexpr):
    """The column bounded by the row's stride (vLLM #54296)."""
    _slot_mappings(num_tokens, max_num_tokens, idx_mapping, query_start_loc, positions_ptr, block_table_ptrs,
                   block_table_strides, block_sizes, slot_mappings_ptr, slot_mappings_stride, cp_rank, CP_SIZE,
                   CP_INTERLEAVE, PAD_ID, BLOCK, True)
