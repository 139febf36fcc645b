"""SGLang's read of write slots back from its token table: the Triton ``assign_extend_cache_locs``
(``sglang/kernels/ops/speculative/cache_locs.py``), which EAGLE's verify and the n-gram worker use to gather
``req_to_token[row, start:end]`` of each request into ``out_cache_loc``.

kvtable's location calls hand a page table; SGLang keeps the token table it stands for, so the table is laid
out as SGLang's: row 0 the padding row (padded requests read it, as SGLang's padded ``req_pool_indices`` are
0), request ``i`` in row ``i + 1`` with ``req_to_token[i + 1, p] = table[i, p // ps] * ps + p % ps``
(``req_to_token[:, ::ps] // ps`` gives the page table back), int32 as SGLang keeps it. The kernel is
launched as its CUDA branch launches it (``assign_extend_cache_locs_func``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from kvtable.engines._shims_sglang import sglang
from kvtable.errors import Unsupported

MAX_TOKEN_COLUMNS = 1 << 16
"""A page table standing for a wider token table than this (huge page sizes) is not laid out: SGLang's
``req_to_token`` is ``max_context_len`` wide, and no context is this long here."""


def token_table(table: torch.Tensor, page_size: int, columns: int) -> torch.Tensor:
    """SGLang's int32 ``req_to_token`` of ``columns >= width * page_size`` columns (its ``max_context_len``) whose
    page table (from row 1) is ``table``; the columns past the page table hold 0, as a fresh row does."""
    rows, width = table.shape
    if columns > MAX_TOKEN_COLUMNS:
        raise Unsupported(f"a token table of {columns} columns (page size {page_size}) is not laid out")
    pages = table.long().repeat_interleave(page_size, dim=1)
    tokens = torch.zeros((rows + 1, columns), dtype=torch.int32)
    tokens[1:, :width * page_size] = (pages * page_size + torch.arange(width * page_size) % page_size).to(torch.int32)
    return tokens


def gather(table: torch.Tensor, page_size: int, starts: Sequence[int], ends: Sequence[int],
           live: int | None = None) -> torch.Tensor:
    """``req_to_token[row, start:end]`` of each request, in request order (int64, SGLang's ``out_cache_loc``);
    requests from ``live`` on are padding and read the padding row. The kernel has no column bound: the
    ``sglang`` profile's domain hands it no row past ``max_context_len`` (admission keeps every request inside)."""
    sg = sglang()
    bs = len(starts)
    columns = table.shape[1] * page_size
    rows = torch.arange(1, bs + 1)
    if live is not None:
        rows[live:] = 0
    firsts, lasts = torch.tensor(list(starts), dtype=torch.int64), torch.tensor(list(ends), dtype=torch.int64)
    out = torch.empty(int((lasts - firsts).clamp_min(0).sum()), dtype=torch.int64)
    if bs and out.numel():
        tokens = token_table(table, page_size, max(columns, int(lasts.max())))  # padded reads stay in row 0
        sg.cache_locs.assign_extend_cache_locs[(bs,)](rows, tokens, firsts, lasts, out, tokens.shape[1],
                                                      sg.utils.next_power_of_2(bs))
    return out
