"""A slot-mapping kernel in the style of vLLM V1's runner, written for kvtable's kernel proofs (not vLLM's code).

One block table ``[max_num_reqs, max_num_blocks]`` (int32, contiguous rows), one request index and one
position per token, int64 slots, ``PAD_SLOT_ID = -1`` for the CUDA-graph padding tokens
``[num_tokens, max_num_tokens)``. ``slot_mapping_kernel`` trusts every position to fit the table, as
the kernel did before vLLM #53982: for a cache group whose table is narrower than the sequence, it
reads past the row (the next row's block, or past the table). ``bounded_slot_mapping_kernel`` masks the
column with the table's width and writes the pad there, as vLLM's fix does. ``request_slot_mapping_kernel`` is
vLLM V1's real shape: one program per request looping over that request's tokens (``for first in range(start,
end, BLOCK)`` with bounds loaded from ``query_start_loc``), bound by ``examples/vllm_request_binding.toml``.

    kvtable prove --binding examples/vllm_slot_binding.toml                       # bounded: holds under its assumption
    kvtable prove --binding examples/vllm_slot_binding.toml \\
        --kernel examples/vllm_slot_kernel.py:slot_mapping_kernel                 # the #53982 counterexample
"""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import triton  # noqa: E402 (the interpreter knob is read when a kernel is decorated)
import triton.language as tl  # noqa: E402

PAD_SLOT_ID = -1
BLOCK = 64


@triton.jit
def _slot_mapping(num_tokens, max_num_tokens, req_indices_ptr, positions_ptr, block_table_ptr, block_table_stride,
                  block_size, max_num_blocks, slot_mapping_ptr, PAD_SLOT_ID: tl.constexpr, BLOCK: tl.constexpr,
                  BOUND_COLUMNS: tl.constexpr):
    """slot[i] = block_table[req[i], pos[i] // block_size] * block_size + pos[i] % block_size; pads past."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    live = offsets < num_tokens
    req = tl.load(req_indices_ptr + offsets, mask=live, other=0)
    pos = tl.load(positions_ptr + offsets, mask=live, other=0)
    block_index = pos // block_size
    in_table = live
    if BOUND_COLUMNS:  # vLLM's fix of #53982: a block index past the table's width writes the pad
        in_table = live & (block_index < max_num_blocks)
    row = block_table_ptr + req.to(tl.int64) * block_table_stride
    block_number = tl.load(row + block_index, mask=in_table, other=0)
    slot = block_number.to(tl.int64) * block_size + pos % block_size
    tl.store(slot_mapping_ptr + offsets, tl.where(in_table, slot, PAD_SLOT_ID), mask=offsets < max_num_tokens)


@triton.jit
def slot_mapping_kernel(num_tokens, max_num_tokens, req_indices_ptr, positions_ptr, block_table_ptr,
                        block_table_stride, block_size, max_num_blocks, slot_mapping_ptr,
                        PAD_SLOT_ID: tl.constexpr, BLOCK: tl.constexpr):
    """Every position trusted to fit the table (before vLLM #53982's fix)."""
    _slot_mapping(num_tokens, max_num_tokens, req_indices_ptr, positions_ptr, block_table_ptr, block_table_stride,
                  block_size, max_num_blocks, slot_mapping_ptr, PAD_SLOT_ID, BLOCK, False)


@triton.jit
def bounded_slot_mapping_kernel(num_tokens, max_num_tokens, req_indices_ptr, positions_ptr, block_table_ptr,
                                block_table_stride, block_size, max_num_blocks, slot_mapping_ptr,
                                PAD_SLOT_ID: tl.constexpr, BLOCK: tl.constexpr):
    """The column bounded by the table's width, as vLLM's fix does."""
    _slot_mapping(num_tokens, max_num_tokens, req_indices_ptr, positions_ptr, block_table_ptr, block_table_stride,
                  block_size, max_num_blocks, slot_mapping_ptr, PAD_SLOT_ID, BLOCK, True)


@triton.jit
def request_slot_mapping_kernel(query_start_loc_ptr, positions_ptr, block_table_ptr, block_table_stride, block_size,
                                max_num_blocks, slot_mapping_ptr, PAD_SLOT_ID: tl.constexpr, BLOCK: tl.constexpr):
    """vLLM V1's real shape: one program per request, a loop over its tokens [qsl[r], qsl[r+1]) (symbolic
    bounds), the column bounded by the table's width."""
    req = tl.program_id(0)
    start = tl.load(query_start_loc_ptr + req).to(tl.int64)
    end = tl.load(query_start_loc_ptr + req + 1).to(tl.int64)
    row = block_table_ptr + req.to(tl.int64) * block_table_stride
    for first in range(start, end, BLOCK):
        offsets = first + tl.arange(0, BLOCK)
        live = offsets < end
        pos = tl.load(positions_ptr + offsets, mask=live, other=0)
        block_index = pos // block_size
        in_table = live & (block_index < max_num_blocks)
        block_number = tl.load(row + block_index, mask=in_table, other=0)
        slot = block_number.to(tl.int64) * block_size + pos % block_size
        tl.store(slot_mapping_ptr + offsets, tl.where(in_table, slot, PAD_SLOT_ID), mask=live)
