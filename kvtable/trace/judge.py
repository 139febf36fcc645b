"""One location step of a trace judged: safety, correctness and the strong write checker, vectorized.

The per-token work is numpy array ops over the whole step; only a step the fast path cannot clear goes to
the pure-Python reference (``kvtable.reference`` through the profile), which gives the verdict and names
the token. The fast path only clears what the reference clears: every live token at its own slot, padded
tokens at the profile's pad value, distinct live slots, on lengths the reference reads as valid.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kvtable.backends.profiles import Profile
from kvtable.errors import ContractViolation
from kvtable.reference.safety import Token, token_positions
from kvtable.trace.store import Step

MODE_CLAUSE = {"decode": "W1", "verify": "W2", "extend": "W3", "reanchor": "W4", "replay": "G4"}
"""The clause giving each step kind's locations."""


@dataclass(frozen=True)
class Violation:
    """One breach in a trace: the step, the clause or rule, the group, row and token, and why."""

    step: int
    tier: str
    """``safety``, ``correct`` or ``strict``: the lowest ``--level`` that fails on it."""
    clause: str
    group: str | None
    row: int | None
    token: int | None
    position: int | None
    loc: int | None
    reason: str

    def text(self) -> str:
        where = [f"group {self.group!r}" if self.group is not None else "",
                 f"row {self.row}" if self.row is not None else "",
                 f"token {self.token}" if self.token is not None else "",
                 f"position {self.position}" if self.position is not None else ""]
        return (f"step {self.step} [{self.tier}] {self.clause}: {', '.join(w for w in where if w)}: "
                f"{self.reason}")


@dataclass(frozen=True)
class Tokens:
    """``(row, position)`` of each output location of a step, as arrays, and the live row count."""

    rows: np.ndarray
    pos: np.ndarray
    live: int


def step_tokens(kind: str, seq_lens: np.ndarray, n: int, prefix_lens: np.ndarray | None,
                actual_bs: int | None) -> Tokens:
    """The arrays ``reference.safety.token_positions`` gives as a list, built with numpy (no validation)."""
    seq = seq_lens.astype(np.int64)
    bs = len(seq)
    live = bs if actual_bs is None else min(int(actual_bs), bs)
    if kind == "extend":
        prefix = (np.zeros(bs, np.int64) if prefix_lens is None else prefix_lens.astype(np.int64))
        counts = np.maximum(seq - prefix, 0)
        rows = np.repeat(np.arange(bs), counts)
        starts = np.cumsum(counts) - counts
        pos = prefix[rows] + np.arange(int(counts.sum())) - starts[rows]
        return Tokens(rows, pos, live)
    if kind == "decode":
        return Tokens(np.arange(bs), seq - 1, live)
    rows = np.repeat(np.arange(bs), n)
    pos = np.maximum(np.repeat(seq, n) - n + np.tile(np.arange(n), bs), 0)
    return Tokens(rows, pos, live)


def own_slots(table: np.ndarray, tokens: Tokens, page_size: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    """For the first ``count`` tokens: the table entry at each token's column (0 where none) and whether it exists."""
    rows, pos = tokens.rows[:count], tokens.pos[:count]
    cols = np.where(pos >= 0, pos // page_size, 0)
    exists = (pos >= 0) & (rows < table.shape[0]) & (cols < (table.shape[1] if table.ndim == 2 else 0))
    page = np.zeros(count, np.int64)
    page[exists] = table[rows[exists], cols[exists]]
    return page, exists


def dropped(profile: Profile, locs: np.ndarray) -> np.ndarray:
    """Locations that are no write: the pad slot, and whatever the profile's writer skips."""
    out = np.zeros(locs.shape, bool) if profile.pad_slot is None else locs == profile.pad_slot
    if profile.writer == "skips-negative":
        out |= locs < 0
    return out


def fast_clear(profile: Profile, table: np.ndarray, locs: np.ndarray, tokens: Tokens, page_size: int,
               kind: str, n: int, seq_lens: np.ndarray) -> bool:
    """Whether the step is exactly what the reference gives on valid input (then safe and correct, D2 held)."""
    count = len(tokens.rows)
    if len(locs) != count or (kind == "verify" and bool((seq_lens[: tokens.live] < n).any())):
        return False
    if kind == "extend" and bool((tokens.pos < 0).any()):
        return False
    page, exists = own_slots(table, tokens, page_size, count)
    live = tokens.rows < tokens.live
    expected = page * page_size + np.where(tokens.pos >= 0, tokens.pos % page_size, 0)
    if not bool((exists[live] & (page[live] > 0) & (locs[live] == expected[live])).all()):
        return False
    padded = ~live
    if padded.any():
        if profile.pad_slot is not None:
            if not bool((locs[padded] == profile.pad_slot).all()):
                return False
        elif not bool((exists[padded] & (page[padded] == 0) & (locs[padded] == expected[padded])).all()):
            return False
    written = np.sort(locs[live])
    return not bool((written[1:] == written[:-1]).any())


def reference_locs(profile: Profile, kind: str, table: list[list[int]], step: Step, page_size: int) -> list[int]:
    """The profile's expected locations for the step's inputs; raises ContractViolation for invalid input."""
    seq = [int(s) for s in step.need("seq_lens")]
    if kind == "extend":
        prefix = [int(p) for p in step.prefix_lens] if step.prefix_lens is not None else [0] * len(seq)
        return profile.extend_locs(table, prefix, [s - p for s, p in zip(seq, prefix, strict=True)], page_size)
    if kind == "reanchor":
        return profile.reanchor_locs(table, seq, page_size, step.n)
    if kind == "decode" and step.actual_bs is None:
        return profile.decode_locs(table, seq, page_size)
    return profile.verify_locs(table, seq, page_size, step.n, step.actual_bs)


def judge_group(profile: Profile, step: Step, gid: str, kind: str | None = None) -> list[Violation]:
    """Every violation of one group's locations in a location step (empty: clean); ``kind`` overrides the step's."""
    kind = kind or step.kind
    group = step.groups[gid]
    ps, table = group.page_size, group.table
    if table is None or step.seq_lens is None:
        return []
    tokens = step_tokens(kind, step.seq_lens, step.n, step.prefix_lens, step.actual_bs)
    if group.locs is None:
        return _judge_refusal(profile, step, gid, kind)
    locs = group.locs.astype(np.int64).reshape(-1)
    if fast_clear(profile, table, locs, tokens, ps, kind, step.n, step.seq_lens):
        return []
    return _judge_by_reference(profile, step, gid, kind, locs)


def _judge_by_reference(profile: Profile, step: Step, gid: str, kind: str, locs: np.ndarray) -> list[Violation]:
    """The reference's verdict on a step the fast path did not clear: safety, then correctness, then D2."""
    group = step.groups[gid]
    ps, rows = group.page_size, step.need("table", gid).tolist()
    mode = "verify" if kind == "replay" else kind
    seq = [int(s) for s in step.need("seq_lens")]
    prefix = None if step.prefix_lens is None else [int(p) for p in step.prefix_lens]
    tokens = token_positions(mode, seq, n=step.n, prefix_lens=prefix, actual_bs=step.actual_bs)
    values = locs.tolist()
    out = [Violation(step.index, "safety", "safety", gid, w.row, w.token, w.position, w.loc, w.reason)
           for w in profile.unsafe_writes(rows, values, tokens, ps, group=gid)]
    if out:
        return out
    try:
        expected = reference_locs(profile, mode, rows, step, ps)
    except ContractViolation:
        return []  # invalid input, safely handled: correctness does not apply (strictness: see judge_strict)
    if len(values) != len(expected):
        return [Violation(step.index, "correct", MODE_CLAUSE[kind], gid, None, None, None, None,
                          f"{len(values)} locations for {len(expected)} tokens")]
    for k, (got, want) in enumerate(zip(values, expected, strict=True)):
        if got != want:
            row, pos = tokens[k]
            return [Violation(step.index, "correct", MODE_CLAUSE[kind], gid, row, k, pos, got,
                              f"location {got}, the reference gives {want}")]
    return _duplicate_slots(step, gid, tokens, values, ps)


def _duplicate_slots(step: Step, gid: str, tokens: list[Token], values: list[int], page_size: int) -> list[Violation]:
    """D2 unique-slots: two live tokens of the step writing one real slot."""
    first: dict[int, int] = {}
    for k, ((row, pos), loc) in enumerate(zip(tokens, values, strict=False)):
        if pos is None or loc < page_size:
            continue
        if loc in first:
            return [Violation(step.index, "correct", "D2", gid, row, k, pos, loc,
                              f"slot {loc} also written by token {first[loc]} of this step")]
        first[loc] = k
    return []


def _judge_refusal(profile: Profile, step: Step, gid: str, kind: str) -> list[Violation]:
    """A refused step is safe; refusing input the reference reads as valid is a correctness failure."""
    try:
        reference_locs(profile, "verify" if kind == "replay" else kind, step.need("table", gid).tolist(), step,
                       step.groups[gid].page_size)
    except ContractViolation:
        return []
    return [Violation(step.index, "correct", MODE_CLAUSE[kind], gid, None, None, None, None,
                      f"refused valid input: {step.error}")]


def judge_strict(profile: Profile, step: Step, gids: list[str]) -> list[Violation]:
    """Strictness: a step the reference refuses in some group must be refused by a ContractViolation naming one
    of the clauses the reference names (a backend checks the groups in its own order)."""
    if not profile.backend_validates or step.kind not in MODE_CLAUSE or step.kind == "replay":
        return []
    refused: list[tuple[str, ContractViolation]] = []
    for gid in gids:
        group = step.groups[gid]
        try:
            reference_locs(profile, step.kind, step.need("table", gid).tolist(), step, group.page_size)
        except ContractViolation as err:
            refused.append((gid, err))
    if not refused or any(step.error and f"[{err.clause}]" in step.error for _, err in refused):
        return []
    first, refusal = refused[0]
    got = f"refused with {step.error}" if step.error else "accepted it"
    return [Violation(step.index, "strict", refusal.clause, first, refusal.row, None, None, None,
                      f"the reference refuses this input ({refusal}); the backend {got}")]
