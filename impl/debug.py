"""Debug mode: impl's own table validator and strong write checker over a step, one readback for a valid step
(a breach reads its entry back in a second)."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from kvtable.contract import Batch, GroupSpec, Mode
from kvtable.errors import ContractViolation
from kvtable.impl.checker import write_findings
from kvtable.impl.findings import Finding, raise_first
from kvtable.impl.tokens import batch_tokens, fixed_tokens, upload
from kvtable.impl.validate_tables import Spans, length_findings, spans, table_findings


def debug_check(specs: Mapping[str, GroupSpec], tables: Mapping[str, torch.Tensor], batch: Batch,
                locs: Mapping[str, torch.Tensor], *, tail_pad: int) -> None:
    """The full contract over a step given by its CPU mirrors: T9/W2 of decode, verify and re-anchor lengths,
    the tables, then D1/D2 on each group's live writes (extend lengths are checked on the host before).

    A re-anchored draft chain legitimately rewrites clamped position 0 (W4), so D2 does not apply to it and
    only the table contract is checked there.
    """
    device = _readable_device(tables)
    if device is None or batch.bs == 0:  # no rows: nothing written, nothing to check
        return
    seq = upload(batch.seq_lens, device, torch.int64)
    prefix = None if batch.prefix_lens is None else upload(batch.prefix_lens, device, torch.int64)
    s = spans(seq, prefix, batch.mode, batch.n, batch.live_rows)
    if batch.mode == "reanchor":
        tokens = None
    else:
        tokens = batch_tokens(batch, device) if batch.mode == "extend" else \
            fixed_tokens(seq, batch.live_rows, batch.tokens_per_row)
    _raise_first_breach(specs, tables, s, locs, tokens, tail_pad)


def debug_check_device(specs: Mapping[str, GroupSpec], tables: Mapping[str, torch.Tensor], seq_lens: torch.Tensor,
                       mode: Mode, n: int, live_rows: int, locs: Mapping[str, torch.Tensor], *, tail_pad: int) -> None:
    """``debug_check`` for decode / verify / re-anchor lengths that live on the device (no mirror to read)."""
    device = _readable_device(tables)
    if device is None or seq_lens.shape[0] == 0:  # no rows: nothing written, nothing to check
        return
    seq = seq_lens.to(device=device, dtype=torch.int64)
    s = spans(seq, None, mode, n, live_rows)
    tokens = None if mode == "reanchor" else fixed_tokens(seq, live_rows, 1 if mode == "decode" else n)
    _raise_first_breach(specs, tables, s, locs, tokens, tail_pad)


def _raise_first_breach(specs: Mapping[str, GroupSpec], tables: Mapping[str, torch.Tensor], s: Spans,
                        locs: Mapping[str, torch.Tensor], tokens: tuple[torch.Tensor, torch.Tensor] | None,
                        tail_pad: int) -> None:
    """Every verdict of the step in the contract's order, read back in one transfer (a breach's entry in a
    second); D1/D2 on the written ``tokens`` (none for a re-anchor)."""
    findings = [] if s.mode == "extend" else length_findings(s)
    findings += table_findings(specs, tables, s, tail_pad)
    if tokens is not None:
        findings += _write_findings(specs, tables, locs, *tokens, s.live_rows)
    raise_first(findings)


def _write_findings(specs: Mapping[str, GroupSpec], tables: Mapping[str, torch.Tensor],
                    locs: Mapping[str, torch.Tensor], rows: torch.Tensor, positions: torch.Tensor,
                    live_rows: int) -> list[Finding]:
    """D1/D2 for every group's live tokens (the locations of padded rows follow them and are not checked)."""
    findings: list[Finding] = []
    tokens = rows.numel()
    for gid in sorted(locs):
        findings += write_findings(tables[gid], locs[gid][:tokens], rows, positions,
                                   specs[gid].block_granularity, live_rows, group=gid)
    return findings


def _readable_device(tables: Mapping[str, torch.Tensor]) -> torch.device | None:
    """The tables' device (None without tables); T1 for the meta device, whose tables hold no page ids to check."""
    if not tables:
        return None
    device = next(iter(tables.values())).device
    if device.type == "meta":
        raise ContractViolation("T1", "debug mode reads page ids; tables on the meta device hold none")
    return device
