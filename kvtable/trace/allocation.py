"""Allocator-driven steps in a trace: judged by ``reference.allocation.judge_allocation`` (A1-A6) on what the
engine chose and recorded, and driven by a serving-loop model of an allocator (SGLang's route).

The loop keeps SGLang's state: a token table (``req_to_token``; row 0 the padding row), a free list of pages
(page 0 the reserved sink), request rows handed out and returned without clearing (``ReqToTokenPool.free``
leaves a row's old slots behind), chunked prefill (``alloc_extend``), decode (``alloc_decode``) and speculative
verify (``alloc_verify``; at page size 1 the rejected drafts' slots go back to the free list). The free pages
are the top ``rows * pages per row`` of ``pool_pages``; a pool past 2^31 slots has them from two pages below
slot 2^31 up (as many as the pool holds), and the allocator hands out the lowest first, so the first steps
choose slots on both sides of it. With
``faults > 0`` some steps carry one more request, on a free row, with the lengths a scheduler bug publishes: an
extend whose cached prefix is past its length, or a verify row shorter than N; its slots are freed after.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from kvtable.reference.allocation import (
    AllocMode,
    AllocOutcome,
    AllocStep,
    PoolLedger,
    SwaState,
    judge_allocation,
    swa_slot,
)
from kvtable.trace.judge import Violation
from kvtable.trace.recorder import Recorder
from kvtable.trace.schema import ALLOC_POOLS
from kvtable.trace.store import Step
from kvtable.trace.watching import call_watched

OPERATION = {"decode": "alloc_decode", "verify": "alloc_verify", "extend": "alloc_extend"}
INT32_SLOTS = 2**31
POOL_FREES = "pool_frees"
"""The header meta key of a trace that records every page its allocator put back as a ``free`` event (A6 then
judges a page back on the free list without one, and a live position on a freed page)."""
"""The first slot id no int32 holds."""


def alloc_step(step: Step) -> AllocStep:
    """The ``AllocStep`` a trace's allocator step was handed (with its SWA pool, where one was recorded)."""
    a = step.arrays
    swa = None
    if "swa/mapping" in a:
        swa = SwaState(a["swa/mapping"].tolist(), a["swa/free_pages"].tolist(), step.meta["swa_pool_pages"])
    return AllocStep(step.meta["mode"], step.need("table", "req_to_token").tolist(), a["rows"].tolist(),
                     step.need("prefix_lens").tolist(), step.need("seq_lens").tolist(), a["free_pages"].tolist(),
                     step.groups["req_to_token"].page_size, step.meta["pool_pages"], swa)


def judge_allocator_step(step: Step) -> list[Violation]:
    """Every A1-A6 fault of a recorded allocator step (unsafe first); a refused step is judged safe."""
    if step.error is not None or "recorded" not in step.groups:
        return []
    a = step.arrays
    swa_locs, swa_recorded = a.get("swa/locs"), a.get("swa/recorded")
    outcome = AllocOutcome(a["locs"].tolist(), step.need("table", "recorded").tolist(), a["guard_before"].tolist(),
                           a["guard_after"].tolist(), step.meta["canary"],
                           None if swa_locs is None else swa_locs.tolist(),
                           None if swa_recorded is None else swa_recorded.tolist(),
                           free_pages=a["free_after"].tolist() if "free_after" in a else None,
                           swa_free_pages=a["swa/free_after"].tolist() if "swa/free_after" in a else None,
                           guarded=bool(a["guard_before"].size))
    return [Violation(step.index, "safety" if f.unsafe else "correct", f.clause, "req_to_token", f.row, f.token,
                      f.position, f.loc, f.reason if f.request is None else f"request {f.request}: {f.reason}")
            for f in judge_allocation(alloc_step(step), outcome)]


class PoolJudge:
    """A6 across an allocator trace's steps: a ``PoolLedger`` for the full pool (``req_to_token``) and one for the
    SWA pool (``swa``), fed by each allocator step and by the ``free`` events between them. ``frees_recorded``:
    the trace records every page its allocator put back (header meta ``pool_frees``, ``POOL_FREES``)."""

    def __init__(self, *, frees_recorded: bool = False) -> None:
        self.ledgers: dict[str, PoolLedger] = {}
        self.frees_recorded = frees_recorded

    def _ledger(self, pool: str, pool_pages: int) -> PoolLedger:
        if pool not in self.ledgers:
            self.ledgers[pool] = PoolLedger(pool_pages, "SWA " if pool == "swa" else "",
                                            frees_recorded=self.frees_recorded)
        return self.ledgers[pool]

    def allocate(self, step: Step) -> list[Violation]:
        """A recorded allocator step: its free list against what the earlier steps handed out and freed, then what
        it handed out (a refused step hands out nothing)."""
        a, ps = step.arrays, step.groups["req_to_token"].page_size
        table = step.need("table", "req_to_token")
        rows, prefix, seq = a["rows"].tolist(), step.need("prefix_lens").tolist(), step.need("seq_lens").tolist()
        ids = a["req_ids"].tolist() if "req_ids" in a else list(range(len(rows)))
        done = step.error is None and "recorded" in step.groups
        pools = [("req_to_token", step.meta["pool_pages"], None, a["free_pages"], a.get("locs"), a.get("free_after"))]
        if "swa/mapping" in a:
            pools.append(("swa", step.meta["swa_pool_pages"], a["swa/mapping"].tolist(), a["swa/free_pages"],
                          a.get("swa/locs"), a.get("swa/free_after")))
        out: list[Violation] = []
        for pool, pool_pages, mapping, free, locs, free_after in pools:
            ledger = self._ledger(pool, pool_pages)
            live: dict[int, str] = {}
            for i, (row, end) in enumerate(zip(rows, prefix, strict=True)):
                for pos in range(max(min(end, table.shape[1]), 0)):
                    slot = int(table[row, pos]) if 0 <= row < len(table) else 0
                    slot = swa_slot(mapping, slot) if mapping is not None else slot
                    if slot >= ps:
                        live.setdefault(slot // ps, f"request {ids[i]} (row {row}, position {pos})")
            out += self._violations(step, pool, ps, ledger.before_step(free.tolist(), live))
            if done and locs is not None:
                tokens = [i for i, (p, q) in enumerate(zip(prefix, seq, strict=True))
                          for _ in range(max(q - p, 0))]
                handed = {int(loc) // ps: f"request {ids[tokens[k]] if k < len(tokens) else '?'} (step {step.index})"
                          for k, loc in enumerate(locs.tolist()) if ps <= loc < (pool_pages + 1) * ps}
                ledger.after_step(handed, None if free_after is None else free_after.tolist())
        return out

    def free(self, step: Step) -> list[Violation]:
        """A free event of an allocator pool: every page freed must be held, not free nor freed already."""
        out: list[Violation] = []
        for pool, group in step.groups.items():
            ledger = self.ledgers.get(pool)
            pages = step.need("pages", pool).astype(np.int64).reshape(-1).tolist()
            if ledger is not None:
                out += self._violations(step, pool, group.page_size,
                                        ledger.release(pages, f"the free at step {step.index}"))
        return out

    @staticmethod
    def _violations(step: Step, pool: str, ps: int, faults: list[tuple[int, bool, str]]) -> list[Violation]:
        return [Violation(step.index, "safety" if unsafe else "correct", "A6", pool, None, None, None, page * ps,
                          reason) for page, unsafe, reason in faults]


def is_pool_free(step: Step, declared: set[str]) -> bool:
    """Whether a ``free`` step frees pages of an allocator's pool (``ALLOC_POOLS``, never declared as a group)."""
    return step.kind == "free" and bool(step.groups) and all(g in ALLOC_POOLS and g not in declared
                                                               for g in step.groups)


class AllocSimulator:
    """The allocator's serving loop; ``step()`` runs one engine step through the backend and records it."""

    def __init__(self, backend: Any, recorder: Recorder, *, seed: int = 0, page_size: int = 1, rows: int = 8,
                 max_len: int = 40, pool_pages: int = 400, spec_n: int = 3, chunk: int = 8, faults: float = 0.0
                 ) -> None:
        self.backend, self.rec = backend, recorder
        self.rng = np.random.default_rng(seed)
        self.ps, self.max_len, self.spec_n, self.chunk = page_size, max_len, spec_n, chunk
        self.pool_pages, self.faults = pool_pages, faults
        self.table = np.zeros((rows, max_len + spec_n), np.int64)
        free = rows * (-(-(max_len + spec_n) // page_size) + 2)
        low = max(pool_pages - free, 0) + 1
        if (pool_pages + 1) * page_size > INT32_SLOTS:  # the first pages handed out straddle slot 2^31
            low = max(INT32_SLOTS // page_size - 2, 1)
        self.free_pages = list(range(min(pool_pages, low + free - 1), low - 1, -1))
        self.free_rows = list(range(rows - 1, 0, -1))
        self.live: list[dict[str, Any]] = []
        self.next_id = 0
        self.ops = {op for op in OPERATION.values() if callable(getattr(backend, op, None))}

    def step(self) -> None:
        """Arrivals, then one prefill, decode or verify step, then finished requests leave."""
        if self.free_rows and (not self.live or self.rng.random() < 0.35):
            prompt = int(self.rng.integers(1, self.max_len // 2))
            self.live.append({"id": self.next_id, "row": self.free_rows.pop(), "done": 0, "prompt": prompt,
                              "target": int(self.rng.integers(prompt + 1, self.max_len + 1)), "pages": set()})
            self.next_id += 1
        prefilling = [r for r in self.live if r["done"] < r["prompt"]]
        running = [r for r in self.live if r["done"] >= r["prompt"]]
        if prefilling and (not running or self.rng.random() < 0.5):
            self._run("extend", prefilling[:3], [min(self.chunk, r["prompt"] - r["done"]) for r in prefilling[:3]])
        elif running and self.rng.random() < 0.35 and "alloc_verify" in self.ops:
            self._run("verify", running, [self.spec_n] * len(running))
        elif running:
            self._run("decode", running, [1] * len(running))
        for req in [r for r in self.live if r["done"] >= r["target"]]:
            self._finish(req)

    def _run(self, mode: AllocMode, batch: list[dict[str, Any]], counts: list[int]) -> None:
        from kvtable.conformance.alloc_calls import alloc_outcome, alloc_state

        if OPERATION[mode] not in self.ops:
            return
        pages = sum(-(-c // self.ps) + 1 for c in counts)
        if pages > len(self.free_pages):
            return
        rows, prefix = [r["row"] for r in batch], [r["done"] for r in batch]
        seq = [p + c for p, c in zip(prefix, counts, strict=True)]
        phantom = mode != "decode" and bool(self.free_rows) and self.rng.random() < self.faults
        cached: list[int] = []
        if phantom:  # a cached prefix past the length (extend), a verify row shorter than N
            rows, prefix, seq = ([self.free_rows[-1], *rows], [3 if mode == "extend" else 1 - self.spec_n, *prefix],
                                 [2 if mode == "extend" else 1, *seq])
            if mode == "extend":  # its cached prefix: slots of its own, taken for the step
                cached = [self.free_pages.pop() for _ in range(-(-3 // self.ps))]
                self.table[rows[0], :3] = [cached[q // self.ps] * self.ps + q % self.ps for q in range(3)]
        step = AllocStep(mode, self.table.tolist(), rows, prefix, seq, list(reversed(self.free_pages)), self.ps,
                         self.pool_pages)
        state, arena = alloc_state(step)
        call = call_watched(f"backend.{OPERATION[mode]}", getattr(self.backend, OPERATION[mode]), state)
        error, outcome = call.refusal, None
        if call.error is None:
            try:
                outcome = alloc_outcome(call.value, arena)
            except Exception as err:  # not an Allocation of the state's tensors
                error = f"{type(err).__name__}: {err}"
        self.rec.allocation(mode, step.req_to_token, rows, prefix, seq, step.free_pages, page_size=self.ps,
                            pool_pages=self.pool_pages, locs=None if outcome is None else outcome.locs,
                            recorded=None if outcome is None else outcome.req_to_token,
                            guard_before=None if outcome is None else outcome.guard_before,
                            guard_after=None if outcome is None else outcome.guard_after,
                            canary=0 if outcome is None else outcome.canary,
                            free_after=None if outcome is None else outcome.free_pages,
                            req_ids=[-1] * phantom + [r["id"] for r in batch], error=error, unsafe=call.unsafe,
                            injected=f"request 0 (row {rows[0]}) is a phantom with prefix {prefix[0]} and length "
                            f"{seq[0]}, as a scheduler bug publishes" if phantom else None)
        if outcome is not None:
            skip = max(seq[0] - prefix[0], 0) if phantom else 0
            self._advance(mode, batch, counts, outcome.locs[skip:], outcome.req_to_token)
        self.free_pages += cached

    def _advance(self, mode: str, batch: list[dict[str, Any]], counts: list[int], locs: Sequence[int],
                 recorded: Sequence[Sequence[int]]) -> None:
        """Take the recorded table and the pages the batch's tokens used; accept drafts after a verify."""
        table = np.array(recorded, np.int64)
        if table.shape == self.table.shape:
            self.table = table
        used = {loc // self.ps for loc in locs if loc >= self.ps}
        self.free_pages = [p for p in self.free_pages if p not in used]
        starts = np.cumsum([0, *counts])
        for i, (req, count) in enumerate(zip(batch, counts, strict=True)):
            req["pages"] |= {loc // self.ps for loc in locs[starts[i]: starts[i + 1]] if loc >= self.ps}
            keep = count if mode != "verify" else 1 + int(self.rng.integers(0, count))
            if mode == "verify" and self.ps == 1:
                rejected = {int(s) for s in self.table[req["row"], req["done"] + keep: req["done"] + count] if s > 0}
                self.free_pages += sorted(rejected)
                req["pages"] -= rejected
            req["done"] = min(req["done"] + keep, req["target"])

    def _finish(self, req: dict[str, Any]) -> None:
        """The pages it was given go back to the free list; its row goes back without being cleared."""
        self.free_pages += sorted(req["pages"], reverse=True)
        self.free_rows.append(req["row"])
        self.live.remove(req)
        self.rec.finish([req["id"]])
