"""Device-side breach flags read back once: the debug validator's only host-device sync on a valid step.

A ``Finding`` holds one check's flags as a device tensor, nothing reduced yet. ``raise_first`` reduces each
check's flags to one ``any``, reads them all back in one transfer and, only when one is set, builds that first
failing check's probe (the first flagged entry and the values its message needs) and reads it back too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from kvtable.errors import ContractViolation

Explain = Callable[[int, Sequence[int]], ContractViolation]
"""Builds the error from the offending entry's flat index and the probed values at it."""

Probe = Callable[[], Sequence[torch.Tensor]]
"""Builds, for a breach only, ``(flags in report order, *values)``; each value broadcasts to the flags' shape."""


@dataclass(frozen=True)
class Finding:
    """One check's verdict, still on the device: ``flags`` set anywhere is a breach (in any order), ``probe``
    names its first entry in report (row-major) order and the values there."""

    flags: torch.Tensor
    probe: Probe
    explain: Explain


def first_entry(flags: torch.Tensor, *values: torch.Tensor) -> torch.Tensor:
    """``[flat index of the first True of flags (row-major), *each value at that index]`` as int64, sync-free
    (called only for a check known to have a True)."""
    index = torch.argmax(flags.reshape(-1).to(torch.uint8)).reshape(1)  # a tensor: reading it as an int syncs
    picked = [torch.broadcast_to(v, flags.shape).reshape(-1).index_select(0, index) for v in values]
    return torch.cat([index, *picked]).to(torch.int64)


def raise_first(findings: Sequence[Finding]) -> None:
    """Read every check's ``any`` back in one transfer; for the first set, in ``findings`` order, read its
    probe back and raise its breach."""
    if not findings:
        return
    hits = torch.stack([finding.flags.any() for finding in findings]).tolist()
    for finding, hit in zip(findings, hits, strict=True):
        if hit:
            index, *values = first_entry(*finding.probe()).tolist()
            raise finding.explain(index, values)
