"""E1-E3: a block table (pages of B tokens) expanded to kernel pages (K tokens), through ``replay_fill``.

Expansion is the graph replay fill of a single group: block b becomes kernel pages b*r .. b*r+r-1,
holes (0) and pads (< 0) repeat themselves, columns past the expanded width take the tail pad and
dummy rows are all 0. So one kernel serves both, and the Triton backend accelerates both.
"""

from __future__ import annotations

import torch

from kvtable.contract import DEFAULT_TAIL_PAD
from kvtable.errors import ContractViolation
from kvtable.impl import validate
from kvtable.impl.kernels import Kernels
from kvtable.impl.tokens import upload
from kvtable.impl.torch_kernels import TORCH_KERNELS
from kvtable.impl.validate import page_ratio

__all__ = ["expand_table", "page_ratio"]


def expand_table(table: torch.Tensor, ratio: int, *, max_kernel_pages: int | None = None,
                 tail_pad: int = DEFAULT_TAIL_PAD, actual_bs: int | None = None,
                 out: torch.Tensor | None = None, kernels: Kernels = TORCH_KERNELS) -> torch.Tensor:
    """E2/E3: int32 ``[rows, max_kernel_pages or width*ratio]``, rows ``>= actual_bs`` all 0.

    With ``out``, the result is written into ``out[:rows, :columns]`` and that view is returned;
    nothing else of ``out`` is touched.
    """
    validate.check_table(table, 0, group=None)
    validate.check_tail_pad(tail_pad)
    kernels = kernels or TORCH_KERNELS
    if not isinstance(ratio, int) or isinstance(ratio, bool) or ratio < 1:
        raise ContractViolation("E1", f"page ratio must be an int >= 1, got {ratio!r}")
    rows, width = table.shape
    columns = width * ratio if max_kernel_pages is None else max_kernel_pages
    if columns < 0:
        raise ContractViolation("E2", f"max_kernel_pages must be >= 0, got {max_kernel_pages}")
    validate.check_actual_bs(actual_bs, rows)
    live = rows if actual_bs is None else actual_bs
    target = _target(out, table, rows, columns)
    dst = target.unsqueeze(0) if target.is_contiguous() else torch.empty_like(target).unsqueeze(0)
    home = "cpu" if getattr(kernels, "host_meta", False) else table.device  # where the kernels read meta
    meta = upload(torch.tensor([[0, width, ratio]], dtype=torch.int32), home)
    kernels.replay_fill(table.contiguous().view(-1), meta, dst, rows, live, tail_pad)
    if dst.data_ptr() != target.data_ptr():
        target.copy_(dst[0])
    return target


def _target(out: torch.Tensor | None, table: torch.Tensor, rows: int, columns: int) -> torch.Tensor:
    """The ``[rows, columns]`` tensor the expansion lands in: a fresh one, or a view of ``out``."""
    if out is None:
        return torch.empty(rows, columns, dtype=torch.int32, device=table.device)
    if out.dtype != torch.int32 or out.dim() != 2 or out.device != table.device:
        raise ContractViolation("E2", f"out must be an int32 2-D tensor on {table.device}, got {out.dtype} "
                                f"{tuple(out.shape)} on {out.device}")
    if out.numel() and table.numel() and out.untyped_storage().data_ptr() == table.untyped_storage().data_ptr():
        raise ContractViolation("E2", "out aliases the table it expands")
    if out.shape[0] < rows or out.shape[1] < columns:
        raise ContractViolation("E2", f"out {tuple(out.shape)} is smaller than the expansion [{rows}, {columns}]")
    return out[:rows, :columns]
