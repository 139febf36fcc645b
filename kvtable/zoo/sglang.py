"""SGLang's page-table bugs (zoo items 6-10) and allocator bugs (16-18), each as the smallest mutant of the torch
backend (the allocator ones of the torch backend with kvtable's own allocator step)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from kvtable.contract import GroupSpec, Specs
from kvtable.impl.allocation import Allocator
from kvtable.impl.checker import check_write_locs as strong_check
from kvtable.impl.graph import GroupGraphBuffers
from kvtable.impl.tokens import batch_tokens
from kvtable.reference.model import DEFAULT_TAIL_PAD, Batch
from kvtable.reference.tables import specs_by_id
from kvtable.zoo.base import ZooBackend


class Sglang35351(ZooBackend):
    """sglang PR #35351 / #32477 / issue #36207: the checker trusts that writers skip page 0.

    Every check of the strong checker runs, except that a write into page 0 counts as skipped,
    so a real token writing (and poisoning) the dummy page is never reported.
    """

    name = "sglang-35351"

    def check_write_locs(self, table: torch.Tensor, locs: torch.Tensor, batch: Batch, page_size: int,
                         *, group: str | None = None) -> None:
        rows, positions = batch_tokens(batch, table.device)
        flat = locs.reshape(-1)
        if flat.numel() == rows.numel() and rows.numel():
            col = (positions // page_size).clamp_max(table.shape[1] - 1)
            own = table[rows, col].to(torch.int64) * page_size + positions % page_size
            flat = torch.where(flat.to(torch.int64) // page_size == 0, own, flat.to(torch.int64)).to(locs.dtype)
        strong_check(table, flat, batch, page_size, group=group)


class DraftlessWidthRunner(GroupGraphBuffers):
    """sglang PR #35985: the graph page table is sized from the context length, without the draft tokens
    that ``target_verify`` adds to ``seq_lens`` (one kernel page short per ``K`` draft tokens)."""

    def __init__(self, specs: Specs, *, max_kernel_pages: int, kernel_page_size: int, spec_n: int = 1,
                 **kwargs) -> None:
        draft_pages = -(-(spec_n - 1) // kernel_page_size)
        super().__init__(specs, max_kernel_pages=max(max_kernel_pages - draft_pages, 1),
                         kernel_page_size=kernel_page_size, spec_n=spec_n, **kwargs)


class Sglang35985(ZooBackend):
    name = "sglang-35985"
    runner = DraftlessWidthRunner


class Sglang23984(ZooBackend):
    """sglang PR #23984: the sliding group is handed the full group's (full-space) write locations."""

    name = "sglang-23984"

    def group_locs(self, specs: Sequence[GroupSpec], tables: Mapping[str, torch.Tensor], batch: Batch,
                   *, tail_pad: int = DEFAULT_TAIL_PAD) -> dict[str, torch.Tensor]:
        locs = super().group_locs(specs, tables, batch, tail_pad=tail_pad)
        by_id = specs_by_id(specs)
        full = [gid for gid in sorted(locs) if by_id[gid].family == "full"]
        if not full:
            return locs
        return {gid: locs[full[0]] if by_id[gid].family == "sliding" else loc for gid, loc in locs.items()}


class CachedTranslationRunner(GroupGraphBuffers):
    """sglang PR #25889: the translated (expanded) tables are cached per batch shape and never invalidated,
    so a replay whose tables changed but whose shape did not reuses the previous batch's pages."""

    _cached_key: tuple | None = None

    def fill_tables(self, bs: int, tables: Mapping[str, torch.Tensor], live: Mapping[str, int]) -> None:
        key = (bs, tuple((gid, tuple(tables[gid].shape), live[gid]) for gid in self.group_ids))
        if key == self._cached_key:
            return
        super().fill_tables(bs, tables, live)
        self._cached_key = key


class Sglang25889(ZooBackend):
    name = "sglang-25889"
    runner = CachedTranslationRunner


class StaleSwaLocsRunner(GroupGraphBuffers):
    """SGLang CUDA-graph runner (fixed upstream): padded rows' sliding-window locations are not rewritten on
    replay, so a padded row keeps the live slot an earlier replay gave that row."""

    def __init__(self, specs: Specs, **kwargs) -> None:
        super().__init__(specs, **kwargs)
        by_id = specs_by_id(specs)
        self._sliding = torch.tensor([i for i, g in enumerate(self.group_ids) if by_id[g].family == "sliding"],
                                     dtype=torch.int64, device=self.device)

    def replay(self, bs: int, tables: Mapping[str, torch.Tensor] | None, seq_lens: torch.Tensor,
               tokens_per_req: int = 1, *, actual_bs: int | None = None) -> None:
        live = bs if actual_bs is None else max(min(actual_bs, bs), 0)
        padded = slice(live * tokens_per_req, bs * tokens_per_req)
        kept = self.loc_stack[self._sliding, padded].clone()
        super().replay(bs, tables, seq_lens, tokens_per_req, actual_bs=actual_bs)
        self.loc_stack[self._sliding, padded] = kept


class SglangSwaReplay(ZooBackend):
    name = "sglang-swa-replay"
    runner = StaleSwaLocsRunner


class SignedOutputStarts(Allocator):
    """Output offsets from the signed sum of the extend lengths before each request."""

    def out_starts(self, extend: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(extend, 0) - extend


class SglangAllocExtendStart(ZooBackend):
    """sglang ``alloc_extend_kernel``: a request whose prefix exceeds its length has a negative extend length,
    and the next request's output starts that far before its own, one entry before the output buffer."""

    name = "sglang-alloc-extend-start"
    allocator = SignedOutputStarts


class UnclampedRecord(Allocator):
    """Records each request's tokens from ``row * width + first position``, a negative first position too."""

    def record(self, table: torch.Tensor, rows: torch.Tensor, pos: torch.Tensor, locs: torch.Tensor) -> None:
        flat = table.view(-1)
        flat[rows * table.shape[1] + pos] = locs.to(table.dtype)


class SglangAssignShortRow(ZooBackend):
    """sglang ``assign_req_to_token_pool``: a verify row shorter than N starts at ``seq_len - N < 0``, and its
    first tokens land at the end of the row before it in ``req_to_token``."""

    name = "sglang-assign-short-row"
    allocator = UnclampedRecord


class Int32Table(Allocator):
    """Keeps the token table int32 whatever the pool holds."""

    def table_dtype(self, pool_end: int) -> torch.dtype:
        return torch.int32


class SglangInt32ReqToToken(ZooBackend):
    """sglang ``ReqToTokenPool``: ``req_to_token`` is int32, so a slot ``>= 2^31`` recorded in it wraps to a
    negative slot, which a later write through the table lands on."""

    name = "sglang-int32-req-to-token"
    allocator = Int32Table
