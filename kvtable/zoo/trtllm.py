"""The TensorRT-LLM backend's re-anchor on a captured sliding-window view at ratio > 1, as a mutant."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from kvtable.impl.graph import GroupGraphBuffers
from kvtable.reference.model import DEFAULT_TAIL_PAD, GroupSpec
from kvtable.zoo.base import ZooBackend


class TrtReanchorView(ZooBackend):
    """A draft re-anchor on a captured view of a sliding group at ratio ``r > 1`` reads the view as if it held
    the group's own pages: column ``pos // B`` and page ``entry * r + (pos mod B) // K``. The view already holds
    kernel pages ``b * r + j``, so the page it writes is expanded twice: a page no row holds."""

    name = "trtllm-reanchor-view"

    def __init__(self, device: str = "cpu", debug: bool | None = None) -> None:
        super().__init__(device=device, debug=debug)
        self._sliding: dict[int, int] = {}
        """Data pointer of a sliding group's table buffer at ratio > 1 -> that ratio."""

    def graph(self, specs: Sequence[GroupSpec], *, max_bs: int, max_kernel_pages: int, kernel_page_size: int,
              spec_n: int = 1, tail_pad: int = DEFAULT_TAIL_PAD, expand: bool = True) -> GroupGraphBuffers:
        runner = super().graph(specs, max_bs=max_bs, max_kernel_pages=max_kernel_pages,
                               kernel_page_size=kernel_page_size, spec_n=spec_n, tail_pad=tail_pad, expand=expand)
        for spec in specs:
            ratio = runner.ratios.get(spec.group_id, 1)
            if spec.family == "sliding" and ratio > 1:
                self._sliding[runner.table_buffers[spec.group_id].data_ptr()] = ratio
        return runner

    def reanchor_locs(self, table: torch.Tensor, frontier: torch.Tensor, page_size: int, n: int) -> torch.Tensor:
        ratio = self._sliding.get(table.data_ptr(), 1) if table.numel() else 1
        if ratio == 1:
            return super().reanchor_locs(table, frontier, page_size, n)
        block = page_size * ratio
        bs = table.shape[0]
        pos = (frontier.long().repeat_interleave(n) - n + torch.arange(n).repeat(bs)).clamp_min(0)
        rows = torch.arange(bs).repeat_interleave(n)
        cols = (pos // block).clamp_max(table.shape[1] - 1)
        entry = table[rows, cols].long().clamp_min(0)
        page = entry * ratio + (pos % block) // page_size
        return (page * page_size + pos % page_size).to(torch.int32)
