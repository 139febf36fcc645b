"""A serving-loop simulator: a stateful scheduler model drives a backend step by step and records the trace.

Requests arrive and finish; prompts are prefilled in chunks (extend steps), then decoded one token a step,
or verified N at a time with speculative decoding (then the draft chain is re-anchored at the accepted
frontier). Decode and verify batches that fit a captured size are replayed through the backend's CUDA-graph
runner, padded to that size. Sliding groups release the pages that fell out of the window (front holes);
finished requests free their pages (last in, first out, so freed pages come back soon with stale contents);
new requests may share a live request's complete prefix pages; each request holds one page of the state
group. With ``faults > 0`` some eager steps carry the stale lengths real engines publish (a length one page
ahead of the allocated pages, or past the table's width), which a backend must refuse or send to page 0.
Every decision comes from one seeded generator: a seed gives the same trace.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from kvtable.backends.profiles import get_profile
from kvtable.contract import GroupSpec
from kvtable.trace.recorder import Recorder
from kvtable.trace.watching import Watched, call_watched
from kvtable.trace.wrap import replay_buffers

DEFAULT_GROUPS = (GroupSpec("full", "full", 4), GroupSpec("swa", "sliding", 8, window=16),
                  GroupSpec("state", "state", 1))


@dataclass(frozen=True)
class SimConfig:
    """The scheduler's sizes and rates."""

    groups: tuple[GroupSpec, ...] = DEFAULT_GROUPS
    max_len: int = 48
    max_live: int = 6
    pool_pages: int = 96
    spec_n: int = 3
    chunk: int = 8
    capture_sizes: tuple[int, ...] = (1, 2, 4, 8)
    arrive: float = 0.35
    share: float = 0.4
    verify: float = 0.35
    graph: float = 0.5
    faults: float = 0.0


@dataclass
class Request:
    """One request's state: its id, lengths, and its pages per group (column order; 0 is a released hole)."""

    rid: int
    prompt: int
    target: int
    done: int = 0
    """Positions whose KV is written (prefilled or decoded)."""
    pages: dict[str, list[int]] = field(default_factory=dict)


class Simulator:
    """The scheduler model; ``step()`` runs one engine step (or an event) and records it."""

    def __init__(self, backend: Any, recorder: Recorder, *, seed: int = 0, config: SimConfig = SimConfig(),
                 profile: str = "kvtable") -> None:
        self.backend, self.rec, self.cfg = backend, recorder, config
        self.rng = np.random.default_rng(seed)
        self.profile = get_profile(profile)
        self.attn = [g for g in config.groups if not g.is_state]
        self.state = [g for g in config.groups if g.is_state]
        reach = config.max_len + config.spec_n
        self.width = {g.group_id: math.ceil(reach / g.block_granularity) for g in self.attn}
        self.free = {g.group_id: list(range(config.pool_pages, 0, -1)) for g in config.groups}
        self.refs: dict[str, dict[int, int]] = {g.group_id: {} for g in config.groups}
        self.live: list[Request] = []
        self.next_id = 0
        self.ops = {op for op in ("decode_locs", "verify_locs", "reanchor_locs", "extend_locs", "graph")
                    if callable(getattr(backend, op, None))}
        self.runner = self._graph() if "graph" in self.ops else None

    # -- pages -----------------------------------------------------------------------------------
    def _take(self, gid: str, count: int) -> list[int] | None:
        if len(self.free[gid]) < count:
            return None
        pages = [self.free[gid].pop() for _ in range(count)]
        for p in pages:
            self.refs[gid][p] = 1
        if pages:
            self.rec.alloc(gid, pages)
        return pages

    def _release(self, gid: str, pages: Sequence[int]) -> None:
        gone = []
        for p in pages:
            if p <= 0:
                continue
            self.refs[gid][p] -= 1
            if self.refs[gid][p] == 0:
                del self.refs[gid][p]
                gone.append(p)
        if gone:
            self.free[gid].extend(gone)
            self.rec.free(gid, gone)

    def _need(self, req: Request, length: int) -> dict[str, int]:
        """Pages each attention group still lacks for ``req`` to cover positions ``[0, length)`` (<= 0: none)."""
        return {g.group_id: math.ceil(length / g.block_granularity) - len(req.pages[g.group_id]) for g in self.attn}

    def _cover(self, req: Request, length: int) -> bool:
        """Allocate pages so every attention group covers positions ``[0, length)``; False if a pool is short."""
        need = self._need(req, length)
        if any(n > len(self.free[gid]) for gid, n in need.items()):
            return False
        for gid, n in need.items():
            if n > 0:
                req.pages[gid] += self._take(gid, n) or []
        return True

    # -- requests --------------------------------------------------------------------------------
    def arrive(self, prompt: int | None = None, share: bool | None = None) -> None:
        """A new request (prompt length and prefix sharing drawn unless given), if there is room for it."""
        if len(self.live) >= self.cfg.max_live or any(len(self.free[g.group_id]) < 2 for g in self.state):
            return
        prompt = int(self.rng.integers(1, self.cfg.max_len // 2 + 1)) if prompt is None else prompt
        req = Request(self.next_id, prompt, int(self.rng.integers(prompt + 1, self.cfg.max_len + 1)))
        self.next_id += 1
        req.pages = {g.group_id: [] for g in self.attn}
        for g in self.state:
            req.pages[g.group_id] = self._take(g.group_id, 1) or []
        share = self.rng.random() < self.cfg.share if share is None else share
        donor = self._donor() if share else None
        if donor is not None:
            self._share(req, donor)
        self.live.append(req)

    def _donor(self) -> Request | None:
        running = [r for r in self.live if r.done >= r.prompt]
        return running[int(self.rng.integers(len(running)))] if running else None

    def _share(self, req: Request, donor: Request) -> None:
        """Share the donor's complete pages of a common prefix (never a page either still writes)."""
        unit = math.lcm(*(g.block_granularity for g in self.attn))
        shared = min(donor.done - self.cfg.spec_n, req.prompt - 1) // unit * unit
        if shared <= 0:
            return
        for g in self.attn:
            pages = donor.pages[g.group_id][: shared // g.block_granularity]
            req.pages[g.group_id] = list(pages)
            for p in pages:
                if p > 0:
                    self.refs[g.group_id][p] += 1
        req.done = shared

    def finish(self) -> None:
        """Requests that reached their target length leave and free their pages (pages shared stay held)."""
        done = [r for r in self.live if r.done >= r.target]
        if not done:
            return
        self.rec.finish([r.rid for r in done])
        for req in done:
            for gid, pages in req.pages.items():
                self._release(gid, pages)
            self.live.remove(req)

    def slide(self) -> None:
        """Sliding groups: pages wholly before every position a later step reads become holes and are freed."""
        for g in self.attn:
            if g.family != "sliding" or g.window is None:
                continue
            for req in self.live:
                keep_from = req.done - g.window - self.cfg.spec_n
                row = req.pages[g.group_id]
                gone = [c for c, p in enumerate(row) if p > 0 and (c + 1) * g.block_granularity <= keep_from]
                if gone:
                    self._release(g.group_id, [row[c] for c in gone])
                    for c in gone:
                        row[c] = 0

    # -- tables and calls ------------------------------------------------------------------------
    def _tables(self, batch: Sequence[Request]) -> dict[str, torch.Tensor]:
        tables = {}
        for g in self.config_groups():
            width = self.width.get(g.group_id, 1)
            pad = self.profile.tail_pad
            rows = [r.pages[g.group_id] + [pad] * (width - len(r.pages[g.group_id])) for r in batch]
            tables[g.group_id] = torch.tensor(rows, dtype=torch.int32).reshape(len(batch), width)
        return tables

    def config_groups(self) -> tuple[GroupSpec, ...]:
        return self.cfg.groups

    def _call(self, kind: str, tables: dict[str, torch.Tensor], seq: list[int], n: int,
              prefix: list[int] | None, rids: list[int], injected: str | None = None) -> bool:
        """One eager location step over every attention group (``injected``: the input fault put into it on
        purpose, recorded with it); returns whether the backend accepted it."""
        locs: dict[str, Any] = {}
        args: tuple[Any, ...]
        outcome, failed = Watched(), None
        seq_t = torch.tensor(seq, dtype=torch.int32)
        for g in self.attn:
            failed, table, ps = g.group_id, tables[g.group_id], g.block_granularity
            if kind == "extend":
                assert prefix is not None
                name, args = "extend_locs", (table, prefix, [s - p for s, p in zip(seq, prefix, strict=True)], ps)
            elif kind == "decode":
                name, args = "decode_locs", (table, seq_t, ps)
            else:
                name, args = ("verify_locs" if kind == "verify" else "reanchor_locs"), (table, seq_t, ps, n)
            outcome = call_watched(f"backend.{name}", getattr(self.backend, name), *args)
            if outcome.error is None:
                locs[g.group_id] = outcome.value
            if outcome.error is not None or outcome.unsafe is not None:
                break
        stopped = outcome.error is not None or outcome.unsafe is not None
        self.rec.locations(kind, tables, locs, seq, n=n, prefix_lens=prefix, req_ids=rids, error=outcome.refusal,
                           error_group=failed if stopped else None, unsafe=outcome.unsafe, injected=injected)
        return outcome.error is None

    def _graph(self) -> Any:
        kernel = min(g.block_granularity for g in self.attn)
        pages = max(self.width[g.group_id] * g.block_granularity for g in self.attn) // kernel
        sizes: dict[str, Any] = {"max_bs": max(self.cfg.capture_sizes), "max_kernel_pages": pages,
                                 "kernel_page_size": kernel, "spec_n": self.cfg.spec_n,
                                 "tail_pad": self.profile.tail_pad}
        runner = self.backend.graph(list(self.cfg.groups), **sizes)
        self.rec.graph(list(self.cfg.groups), **sizes)
        for n in sorted({1, self.cfg.spec_n}):
            for bs in self.cfg.capture_sizes:
                runner.capture(bs, [g.group_id for g in self.attn], n)
                self.rec.capture(bs, [g.group_id for g in self.attn], n)
        return runner

    def _replay(self, batch: Sequence[Request], seq: list[int], n: int) -> bool:
        bs = min(s for s in self.cfg.capture_sizes if s >= len(batch))
        tables = {gid: t for gid, t in self._tables(batch).items() if gid in self.width}
        lengths = torch.tensor(seq + [1] * (bs - len(batch)), dtype=torch.int32)
        assert self.runner is not None  # _use_graph sends a batch here only when a runner was built
        outcome = call_watched("runner.replay", self.runner.replay, bs, tables, lengths, n, actual_bs=len(batch))
        locs, buffers = replay_buffers(self.runner, bs, n) if outcome.error is None else (None, None)
        self.rec.replay(tables, lengths, bs=bs, locs=locs, buffers=buffers, n=n, actual_bs=len(batch),
                        req_ids=[r.rid for r in batch], error=outcome.refusal, unsafe=outcome.unsafe)
        return outcome.error is None

    # -- steps -----------------------------------------------------------------------------------
    def step(self) -> None:
        """One scheduler iteration: arrivals, one forward step, window release, finished requests."""
        if self.rng.random() < self.cfg.arrive or not self.live:
            self.arrive()
        prefilling = [r for r in self.live if r.done < r.prompt]
        running = [r for r in self.live if r.done >= r.prompt]
        if prefilling and ("extend_locs" in self.ops) and (not running or self.rng.random() < 0.5):
            self.prefill(prefilling[:3])
        elif running and "verify_locs" in self.ops and self.cfg.spec_n > 1 and self.rng.random() < self.cfg.verify:
            self.verify(running)
        elif running and "decode_locs" in self.ops:
            self.decode(running)
        self.slide()
        self.finish()

    def prefill(self, batch: Sequence[Request]) -> None:
        """One chunked-prefill (extend) step of ``batch``."""
        chunks = [min(self.cfg.chunk, r.prompt - r.done) for r in batch]
        fault = self.rng.random() < self.cfg.faults
        lacking = fault and any(n > 0 for n in self._need(batch[0], batch[0].done + chunks[0]).values())
        ok = [fault and i == 0 or self._cover(r, r.done + c) for i, (r, c) in enumerate(zip(batch, chunks,
                                                                                          strict=True))]
        batch = [r for r, good in zip(batch, ok, strict=True) if good]
        chunks = [c for c, good in zip(chunks, ok, strict=True) if good]
        if not batch:
            return
        prefix = [r.done for r in batch]
        seq = [p + c for p, c in zip(prefix, chunks, strict=True)]
        injected = (f"row 0 extends to {seq[0]} over pages the scheduler did not allocate (a length ahead of its "
                    "pages)") if lacking else None
        if self._call("extend", self._tables(batch), seq, 1, prefix, [r.rid for r in batch], injected):
            for r, c in zip(batch, chunks, strict=True):
                r.done += c

    def _use_graph(self, batch: Sequence[Request], graph: bool | None) -> bool:
        fits = self.runner is not None and len(batch) <= max(self.cfg.capture_sizes)
        return fits and (self.rng.random() < self.cfg.graph if graph is None else graph)

    def decode(self, batch: Sequence[Request], graph: bool | None = None) -> None:
        """One decode step of ``batch`` (through the graph runner when drawn, or when ``graph``)."""
        batch = [r for r in batch if self._cover(r, r.done + 1)]
        if not batch:
            return
        seq = [r.done + 1 for r in batch]
        if self._use_graph(batch, graph):
            ok = self._replay(batch, seq, 1)
        else:
            injected = None
            if self.rng.random() < self.cfg.faults:
                seq, injected = self._stale(batch, seq)
            ok = self._call("decode", self._tables(batch), seq, 1, None, [r.rid for r in batch], injected)
        if ok:
            for r in batch:
                r.done += 1

    def _stale(self, batch: Sequence[Request], seq: list[int]) -> tuple[list[int], str]:
        """A stale length on one row: one page past its allocated pages, or past the table's width; and its words."""
        i = int(self.rng.integers(len(batch)))
        g = self.attn[0]
        allocated = len(batch[i].pages[g.group_id]) * g.block_granularity
        past = self.width[g.group_id] * g.block_granularity + 1
        seq = list(seq)
        ahead = self.rng.random() < 0.5 and allocated + 1 < past
        seq[i] = allocated + 1 if ahead else past
        where = "one past its allocated pages" if ahead else "past its table's width"
        return seq, f"row {i} has the stale length {seq[i]}, {where} (group {g.group_id!r})"

    def verify(self, batch: Sequence[Request], graph: bool | None = None) -> None:
        """One speculative verify step of ``batch`` (N tokens each), then the draft re-anchor at the frontier."""
        n = self.cfg.spec_n
        batch = [r for r in batch if self._cover(r, r.done + n)]
        if not batch:
            return
        seq = [r.done + n for r in batch]
        if self._use_graph(batch, graph):
            ok = self._replay(batch, seq, n)
        else:
            ok = self._call("verify", self._tables(batch), seq, n, None, [r.rid for r in batch])
        if not ok:
            return
        before = [r.done for r in batch]
        for r in batch:
            r.done = min(r.done + 1 + int(self.rng.integers(0, n)), r.target)
        if "reanchor_locs" in self.ops:
            back = min(r.done - b for r, b in zip(batch, before, strict=True))
            frontier = [r.done for r in batch]
            if all(f >= back for f in frontier):
                self._call("reanchor", self._tables(batch), frontier, back, None, [r.rid for r in batch])


def simulate(backend: Any, recorder: Recorder, steps: int, *, seed: int = 0, config: SimConfig = SimConfig(),
             profile: str = "kvtable") -> Simulator:
    """Run ``steps`` scheduler iterations of ``backend`` into ``recorder``; returns the simulator."""
    sim = Simulator(backend, recorder, seed=seed, config=config, profile=profile)
    for _ in range(steps):
        sim.step()
    return sim
