"""The Triton implementation of the ``Kernels`` protocol: each fused operation is one launch for all groups.

Triton is optional: without it this module still imports, ``triton_available()`` is False and
``TritonKernels()`` raises ``ImportError``. Without CUDA the kernels run in the Triton interpreter on
CPU tensors (``TRITON_INTERPRET=1`` is set before triton is imported, since it is read when a kernel is
decorated); the kernels use only core builtins, because triton.language.standard's jit helpers
(``tl.zeros``, ``tl.cdiv``) do not interpret if triton was imported before that.

The interpreter does not bounds-check memory, so every load and store is masked to lie in bounds
whatever the index values; masked-off lanes are never stored. Index and location arithmetic is
int64; divisions only ever see non-negative operands (compiled ``//`` and ``%`` truncate toward 0).
"""

from __future__ import annotations

import functools
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

try:
    import triton
    import triton.language as tl
except ImportError:  # the kernels below stay plain, never-called functions
    triton = None

_jit = triton.jit if triton is not None else (lambda fn: fn)
_INTERPRETED = triton is not None and bool(triton.knobs.runtime.interpret)
"""Read once, from the knob ``triton.jit`` reads when the kernels below are decorated."""

LOCS_BLOCK = 128
"""Tokens per program of the two location kernels."""
FILL_BLOCK_W = 128
"""Destination columns per program of the replay fill."""


def triton_available() -> bool:
    """Whether triton imports, i.e. whether ``TritonKernels`` can be built."""
    return triton is not None


def interpreting() -> bool:
    """Whether the kernels run in the Triton interpreter (on CPU tensors) rather than compiled."""
    return _INTERPRETED


@_jit
def _group_locs(tables_ptr, stride_tg, stride_tr, stride_tw, width, ps, g, b, pos, mask):
    """``max(page, 0) * ps + pos % ps`` for group ``g``, row ``b``; a column past the width is page -1, and
    a page whose slots pass int32 (W5: ``(page + 1) * ps > 2^31``) is page 0 (it would wrap in the store)."""
    col = pos // ps
    in_table = mask & (col >= 0) & (col < width)
    page = tl.load(tables_ptr + g * stride_tg + b * stride_tr + col * stride_tw, mask=in_table, other=-1)
    page = tl.where((page.to(tl.int64) + 1) * ps > 2147483648, 0, page)
    return tl.maximum(page.to(tl.int64), 0) * ps + pos % ps


@_jit
def _stacked_locs_kernel(tables_ptr, stride_tg, stride_tr, stride_tw, table_w,
                         widths_ptr, stride_wg, ps_ptr, stride_pg, seq_ptr, stride_s,
                         out_ptr, stride_og, stride_oi, n, total, BLOCK: tl.constexpr):
    """Grid (G, cdiv(bs*n, BLOCK)): token i = b*n + t of group g at ``pos = max(seq[b] - n + t, 0)``."""
    g = tl.program_id(0).to(tl.int64)
    i = tl.program_id(1).to(tl.int64) * BLOCK + tl.arange(0, BLOCK).to(tl.int64)
    mask = i < total
    b = i // n
    t = i % n
    seq = tl.load(seq_ptr + b * stride_s, mask=mask, other=1).to(tl.int64)
    pos = tl.maximum(seq - n + t, 0)
    width = tl.minimum(tl.load(widths_ptr + g * stride_wg).to(tl.int64), table_w)
    ps = tl.load(ps_ptr + g * stride_pg).to(tl.int64)
    loc = _group_locs(tables_ptr, stride_tg, stride_tr, stride_tw, width, ps, g, b, pos, mask)
    tl.store(out_ptr + g * stride_og + i * stride_oi, loc.to(tl.int32), mask=mask)


@_jit
def _stacked_extend_locs_kernel(tables_ptr, stride_tg, stride_tr, stride_tw, table_r, table_w,
                                widths_ptr, stride_wg, ps_ptr, stride_pg,
                                rows_ptr, stride_rows, pos_ptr, stride_pos,
                                out_ptr, stride_og, stride_oi, total, BLOCK: tl.constexpr):
    """Grid (G, cdiv(T, BLOCK)): token i of group g is row ``rows[i]`` at position ``positions[i]``."""
    g = tl.program_id(0).to(tl.int64)
    i = tl.program_id(1).to(tl.int64) * BLOCK + tl.arange(0, BLOCK).to(tl.int64)
    mask = i < total
    b = tl.load(rows_ptr + i * stride_rows, mask=mask, other=0).to(tl.int64)
    pos = tl.load(pos_ptr + i * stride_pos, mask=mask, other=0).to(tl.int64)
    row_ok = mask & (b >= 0) & (b < table_r)
    width = tl.minimum(tl.load(widths_ptr + g * stride_wg).to(tl.int64), table_w)
    ps = tl.load(ps_ptr + g * stride_pg).to(tl.int64)
    loc = _group_locs(tables_ptr, stride_tg, stride_tr, stride_tw, width, ps, g, b, pos, row_ok)
    tl.store(out_ptr + g * stride_og + i * stride_oi, loc.to(tl.int32), mask=mask)


@_jit
def _replay_fill_kernel(packed_ptr, stride_p, packed_numel, meta_ptr, stride_mg, stride_mf,
                        dst_ptr, stride_dg, stride_dr, stride_dw, dst_w, actual_bs, tail_pad,
                        BLOCK_W: tl.constexpr):
    """Grid (G, bs, cdiv(W, BLOCK_W)): one block of columns of row b of group g's destination."""
    g = tl.program_id(0).to(tl.int64)
    b = tl.program_id(1).to(tl.int64)
    w = tl.program_id(2).to(tl.int64) * BLOCK_W + tl.arange(0, BLOCK_W).to(tl.int64)
    in_dst = w < dst_w
    meta = meta_ptr + g * stride_mg
    offset = tl.load(meta).to(tl.int64)
    cols = tl.load(meta + stride_mf).to(tl.int64)
    ratio = tl.load(meta + stride_mf + stride_mf).to(tl.int64)  # not 2 * stride_mf: an int32 product
    src_col = w // ratio
    # b as a block: the interpreter (3.9) broadcasts a scalar comparison as int64, not as a mask
    live = (tl.full([BLOCK_W], 0, tl.int64) + b) < actual_bs
    in_src = src_col < cols
    idx = offset + b * cols + src_col
    in_packed = in_dst & live & in_src & (idx >= 0) & (idx < packed_numel)
    v = tl.load(packed_ptr + idx * stride_p, mask=in_packed, other=0).to(tl.int64)
    v = tl.where((v + 1) * ratio > 2147483648, 0, v)  # sub-pages past int32 would wrap: a hole
    expanded = tl.where(v > 0, v * ratio + w % ratio, v)
    value = tl.where(live, tl.where(in_src, expanded, tail_pad), 0)
    tl.store(dst_ptr + g * stride_dg + b * stride_dr + w * stride_dw, value.to(tl.int32), mask=in_dst)


class TritonKernels:
    """``Kernels`` in Triton: ``stacked_locs``, ``stacked_extend_locs`` and ``replay_fill``, one launch each."""

    name = "triton"

    def __init__(self) -> None:
        if triton is None:
            raise ImportError("TritonKernels needs triton; install kvtable[triton]")

    def stacked_locs(self, tables: torch.Tensor, widths: torch.Tensor, page_sizes: torch.Tensor,
                     seq_lens: torch.Tensor, out: torch.Tensor, bs: int, n: int) -> None:
        """See ``Kernels.stacked_locs``; grid (G, cdiv(bs*n, LOCS_BLOCK))."""
        groups = _check_stack(tables, widths, page_sizes, out)
        if n < 1 or bs < 0:
            raise ValueError(f"stacked_locs needs n >= 1 and bs >= 0, got n={n}, bs={bs}")
        _require(tables.shape[1] >= bs, f"tables have {tables.shape[1]} rows for bs={bs}")
        _require(seq_lens.dim() == 1 and seq_lens.shape[0] >= bs, f"seq_lens {tuple(seq_lens.shape)} for bs={bs}")
        _require(out.shape[1] >= bs * n, f"out has {out.shape[1]} columns for bs*n={bs * n}")
        _check_devices(tables, widths, page_sizes, seq_lens, out)
        total = bs * n
        if groups == 0 or total == 0:
            return
        grid = (groups, triton.cdiv(total, LOCS_BLOCK))
        _stacked_locs_kernel[grid](
            tables, *tables.stride(), tables.shape[2], widths, widths.stride(0), page_sizes,
            page_sizes.stride(0), seq_lens, seq_lens.stride(0), out, *out.stride(), n, total,
            BLOCK=LOCS_BLOCK)

    def stacked_extend_locs(self, tables: torch.Tensor, widths: torch.Tensor, page_sizes: torch.Tensor,
                            rows: torch.Tensor, positions: torch.Tensor, out: torch.Tensor) -> None:
        """See ``Kernels.stacked_extend_locs``; grid (G, cdiv(T, LOCS_BLOCK))."""
        groups = _check_stack(tables, widths, page_sizes, out)
        _require(rows.dim() == 1 and positions.shape == rows.shape,
                 f"rows {tuple(rows.shape)} and positions {tuple(positions.shape)} must be equal 1-D")
        total = rows.shape[0]
        _require(out.shape[1] >= total, f"out has {out.shape[1]} columns for {total} tokens")
        _check_devices(tables, widths, page_sizes, rows, positions, out)
        if groups == 0 or total == 0:
            return
        grid = (groups, triton.cdiv(total, LOCS_BLOCK))
        _stacked_extend_locs_kernel[grid](
            tables, *tables.stride(), tables.shape[1], tables.shape[2], widths, widths.stride(0),
            page_sizes, page_sizes.stride(0), rows, rows.stride(0), positions, positions.stride(0),
            out, *out.stride(), total, BLOCK=LOCS_BLOCK)

    def replay_fill(self, packed: torch.Tensor, meta: torch.Tensor, dst: torch.Tensor, bs: int,
                    actual_bs: int, tail_pad: int) -> None:
        """See ``Kernels.replay_fill``; grid (G, bs, cdiv(W, FILL_BLOCK_W))."""
        _require(packed.dim() == 1 and packed.dtype == torch.int32, f"packed must be int32 1-D, got "
                 f"{packed.dtype} {tuple(packed.shape)}")
        _require(dst.dim() == 3 and dst.dtype == torch.int32, f"dst must be int32 [G, max_bs, W], got "
                 f"{dst.dtype} {tuple(dst.shape)}")
        _require(meta.dim() == 2 and meta.shape[1] == 3 and meta.shape[0] <= dst.shape[0],
                 f"meta {tuple(meta.shape)} must be [G, 3] with G <= {dst.shape[0]}")
        _require(0 <= bs <= dst.shape[1], f"bs {bs} outside [0, {dst.shape[1]}]")
        _check_devices(packed, meta, dst)
        groups, width = meta.shape[0], dst.shape[2]
        if groups == 0 or bs == 0 or width == 0:
            return
        grid = (groups, bs, triton.cdiv(width, FILL_BLOCK_W))
        _replay_fill_kernel[grid](
            packed, packed.stride(0), packed.numel(), meta, *meta.stride(), dst, *dst.stride(), width,
            actual_bs, tail_pad, BLOCK_W=FILL_BLOCK_W)


def _require(ok: bool, message: str) -> None:
    """A caller bug (impl/validate.py lets only well-shaped arguments through), not a contract breach."""
    if not ok:
        raise ValueError(f"TritonKernels: {message}")


def _check_stack(tables: torch.Tensor, widths: torch.Tensor, page_sizes: torch.Tensor,
                 out: torch.Tensor) -> int:
    """The shapes and dtypes shared by both location kernels; returns the number of groups G."""
    _require(tables.dim() == 3 and tables.dtype == torch.int32, f"tables must be int32 [G, R, W], got "
             f"{tables.dtype} {tuple(tables.shape)}")
    groups = tables.shape[0]
    _require(widths.dim() == 1 and widths.shape[0] >= groups, f"widths {tuple(widths.shape)} for G={groups}")
    _require(page_sizes.dim() == 1 and page_sizes.shape[0] >= groups,
             f"page_sizes {tuple(page_sizes.shape)} for G={groups}")
    _require(out.dim() == 2 and out.dtype == torch.int32 and out.shape[0] >= groups,
             f"out must be int32 [>= {groups}, cap], got {out.dtype} {tuple(out.shape)}")
    return groups


def _check_devices(*tensors: torch.Tensor) -> None:
    """One device for all; CUDA when compiled, CPU when interpreted."""
    devices = {t.device for t in tensors}
    _require(len(devices) == 1, f"tensors on several devices: {sorted(map(str, devices))}")
    device = devices.pop()
    if interpreting():
        _require(device.type == "cpu", f"the Triton interpreter runs on CPU tensors, got {device}")
    else:
        _require(device.type == "cuda", f"compiled Triton kernels run on CUDA tensors, got {device}")


@functools.cache
def _shared() -> TritonKernels:
    return TritonKernels()


def __getattr__(name: str) -> TritonKernels:
    """``TRITON_KERNELS``: one shared instance, built on first use (so this module imports without triton)."""
    if name == "TRITON_KERNELS":
        return _shared()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
