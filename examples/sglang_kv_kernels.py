"""Two of SGLang's KV-index kernels in SGLang's style, written for kvtable's proofs (our own code, not SGLang's),
with their bindings (``FLASHINFER_KV_INDICES``, ``ALLOC_EXTEND``).

- ``flashinfer_kv_indices_kernel`` (cf. ``create_flashinfer_kv_indices_triton``): one program per request copies
  its token locations ``req_to_token[req_pool_indices[b], kv_start[b] : kv_start[b] + lens[b]]`` into the
  flat ``kv_indices`` at ``kv_indptr[b]``, in blocks of 512, the optional ``kv_start_idx`` an ``if`` on the
  argument, the loop count ``cdiv(len, 512)``.
- ``alloc_extend_kernel`` (cf. the paged allocator's ``alloc_extend_kernel``): one program per request writes
  the slots of its extend tokens into ``out_indices`` at the sum of the earlier requests' extend lengths
  (``tl.sum`` over a ``bs_upper`` block), in three parts: the rest of its last page (from ``last_loc``), whole
  new pages from ``free_pages``, the start of one more. A request whose prefix is longer than its sequence
  has a negative extend length, so every later request starts before ``out_indices``.

Both are proved in bounds only (no kvtable clause gives their values), under the assumptions their bindings
state: what SGLang's host guarantees (``kv_indptr`` the running sum of the lengths, rows of the pool, ...).
"""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import triton  # noqa: E402 (the interpreter knob is read when a kernel is decorated)
import triton.language as tl  # noqa: E402

from kvtable.prover.bindings.binding import INT32_MAX, Binding, TensorSpec  # noqa: E402

KV_BLOCK = 512
EXTEND_BLOCK = 1024


@triton.jit
def flashinfer_kv_indices_kernel(req_to_token_ptr, req_pool_indices_ptr, page_kernel_lens_ptr, kv_indptr,
                                 kv_start_idx, kv_indices_ptr, req_to_token_ptr_stride: tl.constexpr):
    """kv_indices[kv_indptr[b] + j] = req_to_token[req_pool_indices[b], kv_start[b] + j], j < lens[b]."""
    BLOCK: tl.constexpr = 512
    b = tl.program_id(axis=0)
    pool_row = tl.load(req_pool_indices_ptr + b)
    out_first = tl.load(kv_indptr + b)
    first = 0
    last = 0
    if kv_start_idx:  # sliding-window groups start their copy later in the row
        first = tl.load(kv_start_idx + b).to(tl.int32)
        last = first
    last += tl.load(page_kernel_lens_ptr + b).to(tl.int32)
    rounds = tl.cdiv(last - first, BLOCK)
    for r in range(rounds):
        j = tl.arange(0, BLOCK).to(tl.int64) + r * BLOCK
        live = j < last - first
        token = tl.load(req_to_token_ptr + pool_row * req_to_token_ptr_stride + first + j, mask=live)
        tl.store(kv_indices_ptr + out_first + j, token, mask=live)


@triton.jit
def alloc_extend_kernel(pre_lens_ptr, seq_lens_ptr, last_loc_ptr, free_page_ptr, out_indices,
                        bs_upper: tl.constexpr, page_size: tl.constexpr):
    """out_indices[start_b : start_b + seq_len_b - pre_len_b] = the slots of request b's extend tokens."""
    BLOCK: tl.constexpr = 1024
    b = tl.program_id(0)
    upto = tl.arange(0, bs_upper)
    seq_upto = tl.load(seq_lens_ptr + upto, mask=upto <= b, other=0)
    pre_upto = tl.load(pre_lens_ptr + upto, mask=upto <= b, other=0)
    seq_len = tl.load(seq_lens_ptr + b)
    pre_len = tl.load(pre_lens_ptr + b)
    own_pages = (seq_len + page_size - 1) // page_size - (pre_len + page_size - 1) // page_size
    out_start = tl.sum(seq_upto - pre_upto) - (seq_len - pre_len)
    page_start = tl.sum((seq_upto + page_size - 1) // page_size - (pre_upto + page_size - 1) // page_size) - own_pages

    # part 1: the free tail of the last page, continuing from last_loc
    in_page = tl.arange(0, page_size)
    last_loc = tl.load(last_loc_ptr + b)
    part1 = min(seq_len, (pre_len + page_size - 1) // page_size * page_size) - pre_len
    tl.store(out_indices + out_start + in_page, last_loc + 1 + in_page, mask=in_page < part1)
    if pre_len + part1 == seq_len:
        return

    # part 2: whole new pages
    part2 = seq_len // page_size * page_size - (pre_len + page_size - 1) // page_size * page_size
    for round in range((part2 + BLOCK - 1) // BLOCK):
        k = round * BLOCK + tl.arange(0, BLOCK)
        live = k < part2
        page = tl.load(free_page_ptr + page_start + k // page_size, mask=live, other=0)
        tl.store(out_indices + out_start + part1 + k, page * page_size + k % page_size, mask=live)
    if pre_len + part1 + part2 == seq_len:
        return

    # part 3: the start of one more new page
    part3 = seq_len - seq_len // page_size * page_size
    page = tl.load(free_page_ptr + page_start + own_pages - 1)
    tl.store(out_indices + out_start + part1 + part2 + in_page, page * page_size + in_page, mask=in_page < part3)


# How SGLang launches them ------------------------------------------------------------------------------------
FLASHINFER_KV_INDICES = Binding(
    kernel=flashinfer_kv_indices_kernel, clause="T8", name="sglang-flashinfer-kv-indices",
    params={"B": (1, INT32_MAX), "P": (1, INT32_MAX), "C": (1, INT32_MAX), "T": (0, INT32_MAX)},
    tensors={"req_to_token_ptr": TensorSpec("int32", ("P", "C"), ("req_to_token_ptr_stride", 1)),
             "req_pool_indices_ptr": TensorSpec("int64", ("B",), (1,)),
             "page_kernel_lens_ptr": TensorSpec("int32", ("B",), (1,)),
             "kv_indptr": TensorSpec("int32", ("B + 1",), (1,)),
             "kv_start_idx": TensorSpec("int32", ("B",), (1,)),
             "kv_indices_ptr": TensorSpec("int32", ("T",), (1,))},
    grid=("B",), requires=("req_to_token_ptr_stride == C",),
    roles={"table": "req_to_token_ptr", "out": "kv_indices_ptr"},
    # what SGLang's host builds: a pool row per request, kv_indptr the running sum of the lengths with
    # kv_indices sized to the total, each window inside its row, and a pool under 2^31 entries (int32 row offset)
    assumes=("req_pool_indices_ptr entries >= 0", "req_pool_indices_ptr[pid0] < P", "kv_start_idx entries >= 0",
             "kv_start_idx[pid0] + page_kernel_lens_ptr[pid0] <= C", "kv_indptr entries >= 0",
             "kv_indptr[pid0] + page_kernel_lens_ptr[pid0] <= T", "P * C < 2**31"),
)
"""``create_flashinfer_kv_indices_triton``'s launch: grid (bs,), the pool's row stride a constexpr."""

ALLOC_EXTEND = Binding(
    kernel=alloc_extend_kernel, clause="T8", name="sglang-alloc-extend",
    params={"B": (1, 4), "F": (0, INT32_MAX), "T": (0, INT32_MAX)},
    tensors={"pre_lens_ptr": TensorSpec("int64", ("B",), (1,)), "seq_lens_ptr": TensorSpec("int64", ("B",), (1,)),
             "last_loc_ptr": TensorSpec("int64", ("B",), (1,)), "free_page_ptr": TensorSpec("int64", ("F",), (1,)),
             "out_indices": TensorSpec("int64", ("T",), (1,))},
    constexprs={"bs_upper": 4, "page_size": 16}, grid=("B",), roles={"table": "free_page_ptr", "out": "out_indices"},
    # lengths are token counts below 2^31; NOT that a prefix is at most its sequence (SGLang's host does not
    # check it outside SGLANG_DEBUG_MEMORY_POOL): that is the write before out_indices this binding finds
    assumes=tuple(bound for j in range(4) for bound in (f"0 <= pre_lens_ptr[{j}]", f"0 <= seq_lens_ptr[{j}]",
                                                        f"pre_lens_ptr[{j}] < 2**31", f"seq_lens_ptr[{j}] < 2**31")),
)
"""The paged allocator's launch: grid (bs,), ``bs_upper = next_power_of_2(bs)`` (here 4), page size 16."""
