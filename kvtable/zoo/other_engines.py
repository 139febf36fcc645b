"""kvcached, FlashInfer, TensorRT-LLM and tokenspeed bugs (zoo items 11-15) as mutants."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from kvtable.contract import GroupSpec, Specs
from kvtable.impl.graph import GroupGraphBuffers
from kvtable.impl.kernels import Kernels
from kvtable.impl.locs import LONE, extend_group_locs
from kvtable.impl.torch_kernels import TorchKernels
from kvtable.reference.model import DEFAULT_TAIL_PAD, Batch
from kvtable.reference.tables import specs_by_id
from kvtable.zoo.base import ZooBackend
from kvtable.zoo.vllm import MutantLocKernels


class NonZeroNullRunner(GroupGraphBuffers):
    """kvcached PR #398: the pool's null block is not page 0 (the race left it at 10).

    The buffers start out, and padded rows are refilled, with that block, so dummy rows write into a
    block a real request may own, and the real page 0 is handed out.
    """

    null_block = 10

    def __init__(self, specs: Specs, **kwargs) -> None:
        super().__init__(specs, **kwargs)
        self.table_stack.fill_(self.null_block)

    def fill_tables(self, bs: int, tables: Mapping[str, torch.Tensor], live: Mapping[str, int]) -> None:
        super().fill_tables(bs, tables, live)
        for i, gid in enumerate(self.group_ids):
            self.table_stack[i, live[gid]:bs] = self.null_block


class Kvcached398(ZooBackend):
    name = "kvcached-398"
    runner = NonZeroNullRunner


class Flashinfer919(ZooBackend):
    """flashinfer #919: the append kernel walks every padded token slot instead of skipping padding.

    Every request's token run is padded to the batch's longest extend, and the padding tokens (past a
    request's length) get locations too.
    """

    name = "flashinfer-919"

    def extend_locs(self, table: torch.Tensor, prefix_lens: Sequence[int], extend_lens: Sequence[int],
                    page_size: int) -> torch.Tensor:
        super().extend_locs(table, prefix_lens, extend_lens, page_size)
        return self._padded({LONE: table}, {LONE: page_size}, prefix_lens, extend_lens)[LONE]

    def group_locs(self, specs: Sequence[GroupSpec], tables: Mapping[str, torch.Tensor], batch: Batch,
                   *, tail_pad: int = DEFAULT_TAIL_PAD) -> dict[str, torch.Tensor]:
        locs = super().group_locs(specs, tables, batch, tail_pad=tail_pad)
        if batch.mode != "extend":
            return locs
        assert batch.prefix_lens is not None
        by_id = specs_by_id(specs)
        extend = [seq - p for seq, p in zip(batch.seq_lens, batch.prefix_lens, strict=True)]
        return self._padded({gid: tables[gid] for gid in locs}, {gid: by_id[gid].block_granularity for gid in locs},
                            batch.prefix_lens, extend)

    def _padded(self, tables: Mapping[str, torch.Tensor], sizes: Mapping[str, int], prefix_lens: Sequence[int],
                extend_lens: Sequence[int]) -> dict[str, torch.Tensor]:
        longest = max(extend_lens, default=0)
        return extend_group_locs(tables, sizes, prefix_lens, [longest] * len(extend_lens), kernels=self.kernels)


class AliasingPaddingRunner(GroupGraphBuffers):
    """TensorRT-LLM PR #13278: padded rows reuse the last live request's entries instead of a sentinel,
    so the padding's writes alias that request's live slots."""

    def fill_tables(self, bs: int, tables: Mapping[str, torch.Tensor], live: Mapping[str, int]) -> None:
        super().fill_tables(bs, tables, live)
        for i, gid in enumerate(self.group_ids):
            if 0 < live[gid] < bs:
                self.table_stack[i, live[gid]:bs] = self.table_stack[i, live[gid] - 1]


class Trtllm13278(ZooBackend):
    name = "trtllm-13278"
    runner = AliasingPaddingRunner


class RequestSizedLocViewRunner(GroupGraphBuffers):
    """tokenspeed PR #667: the location view covers one token per request, not the ``bs*N`` padded tokens
    the store kernel walks, so the store reads past the location array."""

    def capture(self, bs: int, group_ids: Sequence[str], tokens_per_req: int = 1
                ) -> tuple[dict[str, torch.Tensor] | None, dict[str, torch.Tensor] | None]:
        tables, locs = super().capture(bs, group_ids, tokens_per_req)
        if locs is None:
            return tables, locs
        return tables, {gid: view[:bs] for gid, view in locs.items()}


class Tokenspeed667Short(ZooBackend):
    name = "tokenspeed-667-short"
    runner = RequestSizedLocViewRunner


class BakedLocsRunner(GroupGraphBuffers):
    """tokenspeed PR #667, second variant: replay computes the locations into a fresh buffer, so the views
    a graph captured keep the capture-time locations."""

    def replay(self, bs: int, tables: Mapping[str, torch.Tensor] | None, seq_lens: torch.Tensor,
               tokens_per_req: int = 1, *, actual_bs: int | None = None) -> None:
        self.loc_stack = self.loc_stack.clone()
        self.loc_buffers = {gid: self.loc_stack[i] for i, gid in enumerate(self.group_ids)}
        super().replay(bs, tables, seq_lens, tokens_per_req, actual_bs=actual_bs)


class Tokenspeed667Baked(ZooBackend):
    name = "tokenspeed-667-baked"
    runner = BakedLocsRunner


def _unclamped_pages(tables: torch.Tensor, widths: torch.Tensor, page_sizes: torch.Tensor, rows: torch.Tensor,
                     positions: torch.Tensor) -> torch.Tensor:
    """Each group's ``page * ps + pos % ps`` as read, a -1 page too (a column past the width still sinks)."""
    ps = page_sizes[: tables.shape[0]].to(torch.int64).unsqueeze(1)
    pos = positions.to(torch.int64).unsqueeze(0)
    col = pos // ps
    inside = col < widths[: tables.shape[0]].to(torch.int64).unsqueeze(1)
    g = torch.arange(tables.shape[0], device=tables.device).unsqueeze(1)
    page = tables[g, rows.to(torch.int64).unsqueeze(0), torch.where(inside, col, 0)].to(torch.int64)
    return (torch.where(inside, page, 0) * ps + pos % ps).to(torch.int32)


class UnclampedExtendKernels(MutantLocKernels):
    """tokenspeed #709, extend variant: ``_compute_extend_group_out_cache_locs`` has no negative-page clamp
    (the decode path got one with the fix), so an extend over a -1 page writes slot ``-ps + offset``."""

    stacked_locs = TorchKernels.stacked_locs
    locs = staticmethod(_unclamped_pages)


class Tokenspeed709Extend(ZooBackend):
    name = "tokenspeed-709-extend"

    def default_kernels(self) -> Kernels:
        return UnclampedExtendKernels()
