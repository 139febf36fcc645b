"""Which (row, position) pairs a batch writes, as int64 tensors built without a per-request loop."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from kvtable.reference.model import Batch


def extend_tokens(prefix_lens: Sequence[int], extend_lens: Sequence[int], device: torch.device | str
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """W3: request i writes positions ``[prefix_i, prefix_i + extend_i)``, flattened in request order."""
    total = sum(extend_lens)
    extend = torch.tensor(list(extend_lens), dtype=torch.int64, device=device)
    prefix = torch.tensor(list(prefix_lens), dtype=torch.int64, device=device)
    rows = torch.repeat_interleave(torch.arange(len(extend_lens), device=device), extend, output_size=total)
    starts = torch.cumsum(extend, 0) - extend
    positions = torch.arange(total, device=device) - starts[rows] + prefix[rows]
    return rows, positions


def fixed_tokens(seq_lens: torch.Tensor, rows: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """W1/W2/W4: request b writes ``max(seq_b - n + t, 0)`` for t < n, token-major."""
    token = torch.arange(rows * n, device=seq_lens.device)
    row = token // n
    positions = (seq_lens[:rows].to(torch.int64)[row] - n + token % n).clamp_min(0)
    return row, positions


def batch_tokens(batch: Batch, device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
    """The live rows' writes of ``batch`` (dummy rows excluded), in output order."""
    live = batch.live_rows
    if batch.mode == "extend":
        assert batch.prefix_lens is not None
        prefix = batch.prefix_lens[:live]
        extend = [seq - p for seq, p in zip(batch.seq_lens[:live], prefix, strict=True)]
        return extend_tokens(prefix, extend, device)
    seq = torch.tensor(batch.seq_lens, dtype=torch.int64, device=device)
    return fixed_tokens(seq, live, batch.tokens_per_row)
