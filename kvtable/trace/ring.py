"""One ring group's step judged (R1-R3): its write and read locations against the reference through the profile.

A recorded step of a ring group (``GroupSpec(..., layout="ring")``) carries the request's ring pages as its table
row, the writes as its locations and, where recorded, the reads. Safety first (every write its token's own R1
slot, the sink or the pad slot; every read in the request's own ring), then the exact writes (R2) and reads (R3).
"""

from __future__ import annotations

import numpy as np

from kvtable.backends.profiles import Profile
from kvtable.errors import ContractViolation
from kvtable.trace.judge import Violation
from kvtable.trace.store import Step


def ring_lengths(step: Step, kind: str) -> tuple[list[int], list[int]]:
    """Each request's cached and new token counts: an extend step writes ``[prefix, seq_len)``, a decode step
    position ``seq_len - 1``, a verify or re-anchor step its last ``n``."""
    seq = [int(s) for s in step.need("seq_lens")]
    if kind == "extend":
        prefix = [0] * len(seq) if step.prefix_lens is None else [int(p) for p in step.prefix_lens]
    else:
        prefix = [s - (1 if kind == "decode" else step.n) for s in seq]
    return prefix, [s - p for s, p in zip(seq, prefix, strict=True)]


def judge_ring(profile: Profile, step: Step, gid: str, kind: str, window: int) -> list[Violation]:
    """Every violation of one ring group's step (empty: clean): safety, then R2's writes, then R3's reads."""
    group = step.groups[gid]
    if group.table is None or step.seq_lens is None:
        return []
    prefix, extend = ring_lengths(step, kind)
    table, ps = group.table.tolist(), group.page_size
    if group.locs is None:
        try:
            profile.ring_write_locs(table, prefix, extend, ps, window)
        except ContractViolation:
            return []
        return [Violation(step.index, "correct", "R2", gid, None, None, None, None,
                          f"refused valid input: {step.error}")]
    writes = group.locs.astype(np.int64).reshape(-1).tolist()
    reads = [] if group.reads is None else group.reads.astype(np.int64).reshape(-1).tolist()
    unsafe = profile.ring_unsafe(table, writes, reads, prefix, extend, ps, window, group=gid)
    if unsafe:
        w = unsafe[0]
        return [Violation(step.index, "safety", "R1", gid, w.row, w.token, w.position, w.loc, w.reason)]
    try:
        want = profile.ring_write_locs(table, prefix, extend, ps, window)
        want_reads = profile.ring_read_locs(table, prefix, extend, ps, window)
    except ContractViolation:
        return []  # a broken ring, safely handled: correctness does not apply
    found = _first_difference(step, gid, "R2", "write", writes, want)
    if not found and group.reads is not None:
        found = _first_difference(step, gid, "R3", "read", reads, want_reads)
    return found


def _first_difference(step: Step, gid: str, clause: str, what: str, got: list[int], want: list[int]
                      ) -> list[Violation]:
    if len(got) != len(want):
        return [Violation(step.index, "correct", clause, gid, None, None, None, None,
                          f"{len(got)} {what} locations, the reference gives {len(want)}")]
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        if g != w:
            return [Violation(step.index, "correct", clause, gid, None, k, None, g,
                              f"{what} location {g}, the reference gives {w}")]
    return []
