"""Device-side breach flags gathered lazily and read back once: the debug validator's only host-device sync.

A ``Finding`` holds, as a small int64 device tensor, the flat index of the first offending entry of one
check (or -1) and the values its error message needs at that entry. ``raise_first`` concatenates every
finding's probe, reads them back in one transfer and raises the first breach in the order given.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from kvtable.errors import ContractViolation

Explain = Callable[[int, Sequence[int]], ContractViolation]
"""Builds the error from the offending entry's flat index and the probed values at it."""


@dataclass(frozen=True)
class Finding:
    """One check's verdict, still on the device: ``probe = [first index or -1, *values at it]``."""

    probe: torch.Tensor
    explain: Explain


def first_entry(flags: torch.Tensor, *values: torch.Tensor) -> torch.Tensor:
    """``[index of the first True of flags (row-major) or -1, *each value at that index]`` as int64, sync-free.

    ``values`` have the shape of ``flags`` (or broadcast to it).
    """
    flat = flags.reshape(-1)
    if flat.numel() == 0:
        return torch.full((1 + len(values),), -1, dtype=torch.int64, device=flags.device)
    index = torch.argmax(flat.to(torch.uint8)).reshape(1)  # a tensor index: reading it as an int would sync
    first = torch.where(flat.index_select(0, index), index, -1)
    picked = [v.expand(flags.shape).reshape(-1).index_select(0, index).to(torch.int64) for v in values]
    return torch.cat([first, *picked])


def raise_first(findings: Sequence[Finding]) -> None:
    """Read every probe back in one transfer and raise the first breach found, in ``findings`` order."""
    if not findings:
        return
    device = findings[0].probe.device
    probes = [f.probe.to(device) for f in findings]
    values = torch.cat(probes).tolist()
    start = 0
    for finding, probe in zip(findings, probes, strict=True):
        end = start + probe.numel()
        if values[start] >= 0:
            raise finding.explain(values[start], values[start + 1: end])
        start = end


def repeated(values: torch.Tensor) -> torch.Tensor:
    """1-D: True for every element equal to an earlier one (a stable sort, then neighbours compared)."""
    order = torch.sort(values, stable=True).indices
    ordered = values[order]
    later = torch.zeros_like(values, dtype=torch.bool)
    later[1:] = ordered[1:] == ordered[:-1]
    flags = torch.zeros_like(later)
    flags[order] = later
    return flags
