"""Three of SGLang's KV-index kernels in SGLang's style, written for kvtable's proofs (our own code, not SGLang's),
with their bindings.

- ``flashinfer_kv_indices_kernel`` (cf. ``create_flashinfer_kv_indices_triton``): one program per request copies
  its token locations ``req_to_token[req_pool_indices[b], kv_start[b] : kv_start[b] + lens[b]]`` into the
  flat ``kv_indices`` at ``kv_indptr[b]``, in blocks of 512, the optional ``kv_start_idx`` an ``if`` on the
  argument, the loop count ``cdiv(len, 512)``. ``FLASHINFER_KV_INDICES``: in bounds (no clause gives its values).
- ``alloc_extend_kernel`` (cf. the paged allocator's ``alloc_extend_kernel``): one program per request writes
  the slots of its extend tokens into ``out_indices`` at the sum of the earlier requests' extend lengths
  (``tl.sum`` over a ``bs_upper`` block loaded with a mask and no ``other=``), in three parts: the rest of its
  last page (from ``last_loc``), whole new pages from ``free_pages``, the start of one more. Bound to SPEC 6a's
  A3 (every slot from the free list or the request's own page, at its token's output position) and, by its
  in-bounds obligation on an output sized to the total extend, A4: ``ALLOC_EXTEND_ONE``, ``ALLOC_EXTEND`` (two
  requests, ``masked_loads = "zero"``) hold under SGLang's host guarantees; ``ALLOC_EXTEND_UNDEFINED`` is the
  counterexample resting on masked-off lanes; ``ALLOC_EXTEND_UNCHECKED`` (no ``pre_lens <= seq_lens``) writes
  before ``out_indices`` when a prefix exceeds its length.
- ``write_req_to_token_kernel`` (cf. ``write_req_to_token_pool_triton``): one program per request writes its
  prefix, read through a uint64 table of the prefix tensors' ``data_ptr()``s cast with
  ``.to(tl.pointer_type(tl.int64))``, then its chosen slots, from the running sum of the earlier ``extend_lens``
  (a loop over ``range(pid)`` carrying the sum: unrolled, the launch bounds it), into its row of ``req_to_token``.
  ``WRITE_REQ_TO_TOKEN``: bound to A1 (each chosen slot recorded at its token's own position of its own row).

    kvtable prove --binding examples/sglang_kv_kernels.py:ALLOC_EXTEND
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
    # as SGLang loads them: masked, no other=, so lanes past b are whatever the target reads there
    seq_upto = tl.load(seq_lens_ptr + upto, mask=upto <= b)
    pre_upto = tl.load(pre_lens_ptr + upto, mask=upto <= b)
    seq_len = tl.load(seq_lens_ptr + b)
    pre_len = tl.load(pre_lens_ptr + b)
    own_pages = (seq_len + page_size - 1) // page_size - (pre_len + page_size - 1) // page_size
    out_start = tl.sum(seq_upto - pre_upto) - (seq_len - pre_len)
    pages_upto = (seq_upto + page_size - 1) // page_size - (pre_upto + page_size - 1) // page_size
    page_start = tl.sum(pages_upto) - own_pages

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
        page = tl.load(free_page_ptr + page_start + k // page_size, mask=live)
        tl.store(out_indices + out_start + part1 + k, page * page_size + k % page_size, mask=live)
    if pre_len + part1 + part2 == seq_len:
        return

    # part 3: the start of one more new page
    part3 = seq_len - seq_len // page_size * page_size
    page = tl.load(free_page_ptr + page_start + own_pages - 1)
    tl.store(out_indices + out_start + part1 + part2 + in_page, page * page_size + in_page, mask=in_page < part3)


@triton.jit
def write_req_to_token_kernel(req_to_token, req_pool_indices, prefix_ptrs, pre_lens, seq_lens, extend_lens,
                              out_cache_loc, req_to_token_stride: tl.constexpr):
    """Row ``req_pool_indices[b]`` of ``req_to_token``: the prefix (through its pointer) at ``[0, pre_len)``, then
    the request's chosen slots (``out_cache_loc`` from the earlier extend lengths' sum) at ``[pre_len, seq_len)``."""
    BLOCK: tl.constexpr = 512
    b = tl.program_id(0)
    row = tl.load(req_pool_indices + b)
    pre_len = tl.load(pre_lens + b)
    seq_len = tl.load(seq_lens + b)
    prefix = tl.load(prefix_ptrs + b).to(tl.pointer_type(tl.int64))

    for r in range(tl.cdiv(pre_len, BLOCK)):
        col = r * BLOCK + tl.arange(0, BLOCK)
        live = col < pre_len
        tl.store(req_to_token + row * req_to_token_stride + col, tl.load(prefix + col, mask=live), mask=live)

    first = tl.cast(0, tl.int64)
    for i in range(b):  # a running sum over the earlier requests: unrolled, the launch bounds b
        first += tl.load(extend_lens + i)
    for r in range(tl.cdiv(seq_len - pre_len, BLOCK)):
        col = r * BLOCK + tl.arange(0, BLOCK)
        live = col < seq_len - pre_len
        slot = tl.load(out_cache_loc + first + col, mask=live)
        tl.store(req_to_token + row * req_to_token_stride + pre_len + col, slot, mask=live)


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

def alloc_extend(requests: int, *, checked: bool = True, masked_loads: str = "zero") -> Binding:
    """The paged allocator's launch for ``requests`` requests: grid (bs,), ``bs_upper = next_power_of_2(bs)``, page
    size 4, out_indices sized to the total extend (as SGLang allocates it). Without ``checked``, the host's
    ``pre_lens <= seq_lens`` is not stated (SGLang checks it only under SGLANG_DEBUG_MEMORY_POOL)."""
    upper = 1 << (requests - 1).bit_length()
    j = range(requests)
    lengths = [f"0 <= pre_lens_ptr[{i}]" for i in j] + [f"seq_lens_ptr[{i}] < 2**31" for i in j]
    ordered = [f"pre_lens_ptr[{i}] <= seq_lens_ptr[{i}]" for i in j] if checked else [
        f"0 <= seq_lens_ptr[{i}]" for i in j]
    total = " + ".join(f"seq_lens_ptr[{i}] - pre_lens_ptr[{i}]" for i in j)
    pages = " + ".join(f"(seq_lens_ptr[{i}] + 3) / 4 - (pre_lens_ptr[{i}] + 3) / 4" for i in j)
    return Binding(
        kernel=alloc_extend_kernel, clause="A3", name=f"sglang-alloc-extend-{requests}" + ("" if checked else
                                                                                          "-unchecked"),
        params={"B": (requests, requests), "F": (0, INT32_MAX), "T": (0, INT32_MAX)},
        tensors={"pre_lens_ptr": TensorSpec("int64", ("B",), (1,)), "seq_lens_ptr": TensorSpec("int64", ("B",), (1,)),
                 "last_loc_ptr": TensorSpec("int64", ("B",), (1,)), "free_page_ptr": TensorSpec("int64", ("F",), (1,)),
                 "out_indices": TensorSpec("int64", ("T",), (1,))},
        constexprs={"bs_upper": upper, "page_size": 4}, grid=("B",), masked_loads=masked_loads,
        roles={"prefix_lens": "pre_lens_ptr", "lengths": "seq_lens_ptr", "last_loc": "last_loc_ptr",
               "free_pages": "free_page_ptr", "out": "out_indices", "page_sizes": "4", "bs": "B"},
        # what SGLang's host guarantees: token counts below 2^31, out_indices sized to the total extend, a free
        # list holding every new page the batch needs (its alloc_extend checks both before launching)
        assumes=(*lengths, *ordered, f"T == {total}", f"{pages} <= F"),
    )


ALLOC_EXTEND_ONE = alloc_extend(1)
"""One request: proved under its host guarantees."""
ALLOC_EXTEND = alloc_extend(2)
"""Two requests, ``masked_loads = "zero"``: proved under SGLang's host guarantees."""
ALLOC_EXTEND_UNDEFINED = alloc_extend(2, masked_loads="undefined")
"""Two requests where a masked-off lane is undefined (compiled Triton's documented semantics): the sums of the
earlier requests' lengths read lanes past the program's own, so the counterexample rests on masked lanes."""
ALLOC_EXTEND_UNCHECKED = alloc_extend(2, checked=False)
"""Two requests without ``pre_lens <= seq_lens``: a prefix past its length makes the next request's start
negative, and it writes before out_indices."""

WRITE_REQ_TO_TOKEN = Binding(
    kernel=write_req_to_token_kernel, clause="A1", name="sglang-write-req-to-token",
    params={"B": (2, 2), "P": (1, INT32_MAX), "C": (1, INT32_MAX), "T": (0, INT32_MAX), "L0": (0, INT32_MAX),
            "L1": (0, INT32_MAX)},
    tensors={"req_to_token": TensorSpec("int32", ("P", "C"), ("req_to_token_stride", 1)),
             "req_pool_indices": TensorSpec("int64", ("B",), (1,)),
             "prefix_ptrs": TensorSpec("uint64", ("B",), (1,)),
             "prefix_0": TensorSpec("int64", ("L0",), (1,)), "prefix_1": TensorSpec("int64", ("L1",), (1,)),
             "pre_lens": TensorSpec("int64", ("B",), (1,)), "seq_lens": TensorSpec("int64", ("B",), (1,)),
             "extend_lens": TensorSpec("int64", ("B",), (1,)), "out_cache_loc": TensorSpec("int64", ("T",), (1,))},
    pointer_tables={"prefix_ptrs": ("prefix_0", "prefix_1")},
    grid=("B",), requires=("req_to_token_stride == C", "P * C < 2**31"),
    roles={"out": "req_to_token", "rows": "req_pool_indices", "prefixes": "prefix_ptrs", "prefix_lens": "pre_lens",
           "lengths": "seq_lens", "extend_lens": "extend_lens", "locs": "out_cache_loc", "bs": "B"},
    # SGLang's host: each prefix tensor is the request's prefix_indices (pre_len entries), a pool row per
    # request, every sequence inside its row, extend_lens = seq_lens - pre_lens and out_cache_loc their total
    assumes=("req_pool_indices entries >= 0", "req_pool_indices[pid0] < P", "pre_lens entries >= 0",
             "pre_lens[0] <= L0", "pre_lens[1] <= L1", "pre_lens[0] <= seq_lens[0]", "pre_lens[1] <= seq_lens[1]",
             "seq_lens[pid0] <= C",
             "extend_lens entries >= 0",
             "extend_lens[0] == seq_lens[0] - pre_lens[0]", "extend_lens[1] == seq_lens[1] - pre_lens[1]",
             "extend_lens[0] + extend_lens[1] <= T"),
)
"""``write_req_to_token_pool_triton``'s launch for two requests: grid (bs,), a uint64 table of the prefix
tensors' ``data_ptr()``s, the pool's row stride a constexpr (here the columns)."""
