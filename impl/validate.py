"""Input checks for impl/: the cheap ones that need no device sync, and the debug-mode full check.

The cheap checks read only shapes, dtypes, python ints and CPU tensors. What they cannot see (page
contents, lengths that live on the device) the kernels turn into null-page sink writes; debug mode
(``KVTABLE_DEBUG=1`` or ``debug=True``) reads everything back and runs the full contract check and
the strong write checker.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import torch

from kvtable.contract import DEFAULT_TAIL_PAD, Batch, GroupSpec
from kvtable.errors import ContractViolation
from kvtable.reference.expand import page_ratio
from kvtable.reference.tables import check_lengths, check_tables, specs_by_id

__all__ = [
    "DEBUG_ENV", "check_batch", "check_n", "check_page_size", "check_seq_tensor", "check_table",
    "check_width", "cpu_lengths", "debug_check", "debug_enabled", "one_device", "page_ratio",
]

DEBUG_ENV = "KVTABLE_DEBUG"


def debug_enabled(debug: bool | None = None) -> bool:
    """An explicit ``debug`` wins; ``None`` defers to the ``KVTABLE_DEBUG=1`` environment variable."""
    if debug is not None:
        return debug
    return os.environ.get(DEBUG_ENV) == "1"


def check_table(table: object, bs: int, *, group: str | None = None) -> None:
    """T1 table-shape: an int32 2-D tensor with at least ``bs`` rows and (for a non-empty batch) a column."""
    if not isinstance(table, torch.Tensor):
        raise ContractViolation("T1", f"a table is an int32 torch tensor, got {type(table).__name__}",
                                group=group)
    if table.dtype != torch.int32:
        raise ContractViolation("T1", f"tables are int32, got dtype {table.dtype}", group=group)
    if table.dim() != 2:
        raise ContractViolation("T1", f"a table is 2-D [bs, max_pages], got shape {tuple(table.shape)}",
                                group=group)
    if table.shape[0] < bs:
        raise ContractViolation("T1", f"table has {table.shape[0]} rows for a batch of {bs}", group=group)
    if bs and table.shape[1] < 1:
        raise ContractViolation("T1", "table has no columns; col 0 must exist for dummy rows", group=group)


def one_device(tables: Mapping[str, torch.Tensor]) -> torch.device:
    """T1: the tables of one batch live on one device (they are stacked for the fused kernels)."""
    devices = {gid: t.device for gid, t in tables.items()}
    if len(set(devices.values())) > 1:
        raise ContractViolation("T1", f"tables of one batch must share a device, got {devices}")
    return next(iter(devices.values()))


def check_page_size(page_size: object, *, group: str | None = None) -> None:
    """E1 page-ratio: a page holds a positive whole number of tokens."""
    if not isinstance(page_size, int) or isinstance(page_size, bool) or page_size < 1:
        raise ContractViolation("E1", f"page size must be a positive int, got {page_size!r}", group=group)


def check_n(n: object, clause: str) -> None:
    """W2 / W4: tokens per request is an int >= 1."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ContractViolation(clause, f"tokens per request must be an int >= 1, got {n!r}")


def check_seq_tensor(seq_lens: object, clause: str = "T9") -> None:
    """T9 lengths: one integer length per row, as a 1-D tensor."""
    if not isinstance(seq_lens, torch.Tensor) or seq_lens.dim() != 1:
        what = tuple(seq_lens.shape) if isinstance(seq_lens, torch.Tensor) else type(seq_lens).__name__
        raise ContractViolation(clause, f"lengths are a 1-D integer tensor, got {what}")
    if seq_lens.dtype.is_floating_point or seq_lens.dtype.is_complex or seq_lens.dtype == torch.bool:
        raise ContractViolation(clause, f"lengths are integers, got dtype {seq_lens.dtype}")


def cpu_lengths(seq_lens: torch.Tensor) -> list[int] | None:
    """The lengths as python ints when reading them costs no sync (a CPU tensor), else None."""
    return seq_lens.tolist() if seq_lens.device.type == "cpu" else None


def check_batch(batch: Batch) -> None:
    """T9 lengths and W2's seq_len >= N for real verify rows, on the batch's CPU mirrors."""
    if batch.mode in ("verify", "reanchor"):
        check_n(batch.n, "W2" if batch.mode == "verify" else "W4")
    check_lengths(batch)


def check_width(batch: Batch, widths: Mapping[str, int], page_sizes: Mapping[str, int]) -> None:
    """T8 table-width: every row that writes has a column for its last position, in every group."""
    longest_row = max(batch.seq_lens, default=0)
    if all(longest_row <= widths[gid] * page_sizes[gid] for gid in widths):
        return  # even the longest row fits every group: no need to find the rows that write
    prefix = batch.prefix_lens or (0,) * batch.bs
    writing = [(row, seq) for row, seq in enumerate(batch.seq_lens) if batch.mode != "extend" or seq > prefix[row]]
    if not writing:
        return
    longest = max(seq for _, seq in writing)
    for gid in sorted(widths):
        width, ps = widths[gid], page_sizes[gid]
        if longest <= width * ps:
            continue
        row, seq = next((row, seq) for row, seq in writing if seq > width * ps)
        raise ContractViolation("T8", f"seq_len {seq} needs {-(-seq // ps)} columns of {ps} tokens, table "
                                f"has {width}", group=gid, row=row, col=(seq - 1) // ps)


def debug_check(specs: Sequence[GroupSpec] | Mapping[str, GroupSpec], tables: Mapping[str, torch.Tensor],
                batch: Batch, locs: Mapping[str, torch.Tensor], *, tail_pad: int = DEFAULT_TAIL_PAD) -> None:
    """Debug mode: the full table contract, then the strong write checker on each group's live writes.

    A re-anchored draft chain legitimately rewrites clamped position 0 (W4), so D2 does not apply to it
    and only the table contract is checked there.
    """
    from kvtable.impl.checker import check_write_locs

    check_tables(specs, tables, batch, tail_pad=tail_pad)
    if batch.mode == "reanchor":
        return
    by_id = specs_by_id(specs)
    live_tokens = (sum(batch.seq_lens[: batch.live_rows]) - sum((batch.prefix_lens or ())[: batch.live_rows])
                   if batch.mode == "extend" else batch.live_rows * batch.tokens_per_row)
    for gid in sorted(locs):
        check_write_locs(tables[gid], locs[gid][:live_tokens], batch, by_id[gid].block_granularity,
                         group=gid)
