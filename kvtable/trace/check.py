"""``check_trace``: judge every step of a trace, report every failing step up to ``max_failures``, by clause.

A verdict needs evidence: a trace is clean only when every step it declares was read and judged. A trace that
does not read back as written is damaged (``Report.damage``: no verdict); one whose recorder was not closed is
cut (``Report.cut``), judged to its last whole step. ``TraceJudge.judges`` maps each step kind to its judge.

Location steps go through ``kvtable.trace.judge`` (safety, correctness, the strong write checker) and, with
request ids, ``kvtable.trace.history`` (the rules across steps). Graph replays are judged for safety against
the live tables delivered at their own step, and, after a ``graph`` event, against the reference's buffer
model (G3 replay-fill: the buffer rows the replay left; G4 replay-locs: its locations).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from kvtable.backends.profiles import Profile, get_profile
from kvtable.contract import GroupSpec
from kvtable.errors import ContractViolation
from kvtable.reference.graph import GraphModel
from kvtable.trace.allocation import POOL_FREES, PoolJudge, is_pool_free, judge_allocator_step
from kvtable.trace.history import GroupHistory
from kvtable.trace.judge import Violation, dropped, judge_group, judge_strict, step_tokens
from kvtable.trace.ring import judge_ring
from kvtable.trace.schema import KINDS, LOCATION_KINDS, TraceDamaged
from kvtable.trace.sectors import judge_sectors
from kvtable.trace.store import GroupStep, Step, TraceReader
from kvtable.trace.window_front import unread_front

REPLAYS_KEPT = 8
"""A failing replay's snippet replays the graph's last replays up to it (earlier ones are left out)."""
LEVELS = {"safety": ("safety",), "correct": ("safety", "correct"), "strict": ("safety", "correct", "strict")}
MAX_FAILURES = 20
"""Failing steps reported before judging stops (``--max-failures``)."""


@dataclass(frozen=True)
class Failure:
    """The first violation of one clause in full: the snippet that redoes its step and any fault put there."""

    violation: Violation
    snippet: str
    injected: str | None = None
    """The input fault the failing step carried on purpose (``kvtable trace record --faults``), if any."""


@dataclass
class Report:
    """What checking one trace found: steps judged of those declared, every violation (one per clause and step)
    up to ``max_failures`` failing steps, the first of each clause in full, and why the trace is cut or damaged."""

    path: str
    steps: int = 0
    declared: int = 0
    """The steps the trace declares (its close line's count; a cut trace's whole steps)."""
    violations: list[Violation] = field(default_factory=list)
    first: dict[str, Failure] = field(default_factory=dict)
    """Clause -> its first violation in full, in the order the clauses first failed."""
    failing_steps: int = 0
    stopped: bool = False
    """Judging stopped at ``max_failures`` failing steps: the steps after were not judged."""
    cut: str | None = None
    damage: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def violation(self) -> Violation | None:
        """The first violation (None: none found)."""
        return self.violations[0] if self.violations else None

    @property
    def snippet(self) -> str:
        """The first violation's snippet."""
        v = self.violation
        return "" if v is None else self.first[v.clause].snippet

    @property
    def injected(self) -> str | None:
        v = self.violation
        return None if v is None else self.first[v.clause].injected

    @property
    def status(self) -> str:
        """``damaged`` (no verdict), ``failed``, ``cut`` (no violation in a trace not closed) or ``clean``."""
        if self.damage is not None:
            return "damaged"
        if self.violations:
            return "failed"
        return "cut" if self.cut is not None else "clean"


class TraceJudge:
    """Judges a trace's steps in order, keeping the state the rules across steps need."""

    def __init__(self, profile: Profile, level: str, groups: Sequence[GroupSpec] = (), *, pool_frees: bool = False
                 ) -> None:
        self.profile = profile
        self.tiers = LEVELS[level]
        self.level = level
        self.families = {g.group_id: g.family for g in groups}
        self.windows = {g.group_id: g.window for g in groups if g.family == "sliding"}
        self.rings = {g.group_id: g.window for g in groups if g.layout == "ring" and g.window is not None}
        """Ring groups (R1-R3) by id: their window; their steps are judged by ``judge_ring``."""
        self.history: dict[str, GroupHistory] = {}
        self.pools = PoolJudge(frees_recorded=pool_frees)
        """A6 across an allocator trace's steps and free events."""
        self.model: GraphModel | None = None
        self.saw_req_ids = False
        self.saw_locations = False
        self._by_kind = self.judges
        assert set(self._by_kind) == set(KINDS), "every step kind the schema admits has a judge"

    def _history(self, gid: str) -> GroupHistory:
        if gid not in self.history:
            self.history[gid] = GroupHistory(gid, self.families.get(gid) == "sliding")
        return self.history[gid]

    @property
    def judges(self) -> dict[str, Callable[[Step], list[Violation]]]:
        """Each step kind's judge: the one place a new kind is added (a kind with none is no trace's)."""
        return {**{kind: self._locations for kind in LOCATION_KINDS}, "replay": self._replay,
                "allocate": self._allocate, "graph": self._graph, "capture": _nothing, "free": self._pages,
                "alloc": self._pages, "finish": self._finish}

    def feed(self, step: Step) -> list[Violation]:
        """Every violation of ``step`` at this judge's level (in the order found)."""
        return [v for v in self._judge(step) if v.tier in self.tiers]

    def _judge(self, step: Step) -> list[Violation]:
        if step.unsafe is not None:  # an out-of-bounds read or a write into an input: unsafe, whatever it returned
            return [Violation(step.index, "safety", "safety", step.error_group, None, None, None, None, step.unsafe)]
        return self._by_kind[step.kind](step)

    def _graph(self, step: Step) -> list[Violation]:
        specs = [GroupSpec(**s) for s in step.meta["specs"]]
        self.families.update({s.group_id: s.family for s in specs})
        self.rings.update({s.group_id: s.window for s in specs if s.layout == "ring" and s.window is not None})
        try:
            self.model = self.profile.graph_model(specs, **step.meta["sizes"])
        except (TypeError, ValueError, ContractViolation) as err:  # the recorded event names no graph
            raise TraceDamaged(step.index, None, [f"step {step.index} (graph): its specs and sizes build no "
                                                  f"graph ({type(err).__name__}: {err})"]) from None
        return []

    def _allocate(self, step: Step) -> list[Violation]:
        return judge_allocator_step(step) + self.pools.allocate(step)

    def _pages(self, step: Step) -> list[Violation]:
        if is_pool_free(step, set(self.families)):
            return self.pools.free(step)
        for gid in step.groups:
            pages = step.need("pages", gid).astype(np.int64).reshape(-1)
            hist = self._history(gid)
            hist.free(step.index, pages) if step.kind == "free" else hist.alloc(pages)
        return []

    def _finish(self, step: Step) -> list[Violation]:
        for hist in self.history.values():
            hist.finish(step.need("req_ids"))
        return []

    def _locations(self, step: Step, kind: str | None = None) -> list[Violation]:
        kind = kind or step.kind
        self.saw_locations |= kind in LOCATION_KINDS
        out: list[Violation] = []
        attention = [gid for gid, g in step.groups.items() if self.families.get(gid) != "state" and (
            g.locs is not None or (step.error is not None and step.error_group in (None, gid)))]
        if "strict" in self.tiers:
            out += judge_strict(self.profile, step, [gid for gid in attention if gid not in self.rings])
        if step.seq_lens is not None:
            rows = len(step.seq_lens)
            out += judge_sectors(step, rows if step.actual_bs is None else min(step.actual_bs, rows), self.families)
        for gid, group in step.groups.items():
            if gid in attention and gid in self.rings:
                out += judge_ring(self.profile, step, gid, kind, self.rings[gid])
            elif gid in attention:
                out += judge_group(self.profile, step, gid, kind)
            out += self._observe(step, gid, unread_front(self.profile, step, kind, group, self.windows.get(gid)))
            if group.locs is not None and step.req_ids is not None:
                out += self._writes(step, gid, group, kind)
        return out

    def _observe(self, step: Step, gid: str, group: GroupStep) -> list[Violation]:
        if step.req_ids is None or group.table is None:
            return []
        self.saw_req_ids = True
        live = len(step.req_ids) if step.actual_bs is None else min(step.actual_bs, len(step.req_ids))
        return self._history(gid).observe(step.index, group.table, step.req_ids, live, group.changed)

    def _writes(self, step: Step, gid: str, group: GroupStep, kind: str) -> list[Violation]:
        tokens = step_tokens(kind, step.need("seq_lens"), step.n, step.prefix_lens, step.actual_bs)
        locs = step.need("locs", gid).astype(np.int64).reshape(-1)[: len(tokens.rows)]
        rows = tokens.rows[: len(locs)]
        real = (rows < tokens.live) & (locs >= group.page_size) & ~dropped(self.profile, locs)
        index = np.flatnonzero(real)
        return self._history(gid).writes(step.index, locs[index], group.page_size, index, rows[index],
                                         step.need("req_ids"))

    def _replay(self, step: Step) -> list[Violation]:
        bs = int(step.meta["bs"])
        padded = Step(step.index, "replay", step.n, step.actual_bs, step.seq_lens, None, step.req_ids,
                      error=step.error)
        live = bs
        for gid, group in step.groups.items():
            table = step.need("table", gid)
            live = min(live, len(table))
            full = np.zeros((bs, table.shape[1]), np.int64)
            full[: min(bs, len(table))] = table[:bs]
            padded.groups[gid] = GroupStep(group.page_size, full, group.locs, group.buf)
        padded.actual_bs = live if step.actual_bs is None else min(live, step.actual_bs)
        out = self._locations(padded, "replay") if step.error is None else []
        return out + self._model_replay(step, bs, padded.actual_bs)

    def _model_replay(self, step: Step, bs: int, live: int) -> list[Violation]:
        """G3 and G4 against the reference's buffer model, which carries the buffers from replay to replay."""
        if self.model is None:
            return []
        tables = {gid: step.need("table", gid).tolist() for gid in step.groups}
        try:
            self.profile.replay(self.model, bs, tables, [int(s) for s in step.need("seq_lens")], step.n,
                                actual_bs=step.actual_bs)
        except ContractViolation as err:
            if step.error is None and self.profile.backend_validates:
                return [Violation(step.index, "strict", err.clause, err.group, err.row, None, None, None,
                                  f"the reference refuses this replay ({err}); the runner accepted it")]
            return []
        if step.error is not None:
            return [Violation(step.index, "correct", "G3", None, None, None, None, None,
                              f"the runner refused a replay the reference accepts: {step.error}")]
        return [v for gid, g in step.groups.items() for v in self._compare(step, gid, g, bs, live)][:1]

    def _compare(self, step: Step, gid: str, group: GroupStep, bs: int, live: int) -> list[Violation]:
        model = self.model.groups.get(gid) if self.model else None
        if model is None:
            return []
        rows = bs if self.profile.scrubs_dummy_rows else live
        if group.buf is not None:
            want = np.asarray(model.table[:rows], np.int64)
            got = group.buf.astype(np.int64)[:rows]
            if got.shape != want.shape or not np.array_equal(got, want):
                if got.shape != want.shape:
                    return [Violation(step.index, "correct", "G3", gid, None, None, None, None,
                                      f"table buffer rows have shape {got.shape}, the model's {want.shape}")]
                r, c = (int(x) for x in np.argwhere(got != want)[0])
                return [Violation(step.index, "correct", "G3", gid, r, None, None, None,
                                  f"after the replay the table buffer holds {int(got[r, c])} at col {c}; the "
                                  f"step's live tables give {int(want[r, c])}")]
        if group.locs is not None:
            want = np.asarray(model.locs[: bs * step.n], np.int64)
            got = group.locs.astype(np.int64).reshape(-1)[: bs * step.n]
            bad = np.flatnonzero(got != want) if got.shape == want.shape else np.array([0])
            if len(bad):
                k = int(bad[0])
                return [Violation(step.index, "correct", "G4", gid, k // step.n, k, None, int(got[k]),
                                  f"location {int(got[k])}, the buffer model gives {int(want[k])}")]
        return []


def _kept(step: Step) -> Step:
    """A step whose tables stay as they are after the next step is read (``TraceReader.steps(shared=True)``)."""
    groups = {gid: replace(g, table=None if g.table is None else g.table.copy()) for gid, g in step.groups.items()}
    return replace(step, groups=groups)


def _nothing(step: Step) -> list[Violation]:
    """A step that changes nothing judged (a capture: the replays after it are judged)."""
    return []


def check_trace(path: str | Path, profile: str | Profile | None = None, level: str = "correct",
                max_failures: int = MAX_FAILURES) -> Report:
    """Judge every step of the trace at ``path`` (the profile defaults to the one it was recorded with), reporting
    every failing step up to ``max_failures``; a damaged trace is ``Report.damage``, never a verdict."""
    report = Report(str(path))
    try:
        reader = TraceReader(path)
    except TraceDamaged as err:
        report.damage, report.declared = str(err), err.total or 0
        return report
    report.declared, report.cut = reader.total, reader.cut
    try:
        _judge_steps(reader, report, profile, level, max_failures)
    except TraceDamaged as err:
        report.damage = str(TraceDamaged(err.step, reader.total, err.defects))
    return report


def _judge_steps(reader: TraceReader, report: Report, profile: str | Profile | None, level: str,
                 max_failures: int) -> None:
    from kvtable.trace.snippet import snippet

    header = reader.header
    prof = get_profile(profile or header.profile)
    if level == "strict" and not header.meta.get("debug"):
        level = "correct"
        report.notes.append("recorded without debug mode (meta 'debug'), where a backend refuses only what it sees "
                            "without a device sync: strictness not judged, level correct")
    judge = TraceJudge(prof, level, header.specs, pool_frees=bool(header.meta.get(POOL_FREES)))
    setup: list[Step] = []
    replays: deque[Step] = deque(maxlen=REPLAYS_KEPT)
    for step in reader.steps(shared=True):
        report.steps += 1
        if step.kind == "graph":
            setup, replays = [step], deque(maxlen=REPLAYS_KEPT)
        elif step.kind == "capture":
            setup.append(step)
        elif step.kind == "replay":
            replays.append(_kept(step))
        found = judge.feed(step)
        if not found:
            continue
        report.failing_steps += 1
        clauses: set[str] = set()
        for v in found:  # the first of each clause in the step
            if v.clause in clauses:
                continue
            clauses.add(v.clause)
            report.violations.append(v)
            if v.clause not in report.first:
                report.first[v.clause] = Failure(v, snippet(header, step, v, [*setup, *replays]), step.injected)
        if report.failing_steps >= max_failures:
            report.stopped = report.steps < reader.total
            break
    if judge.saw_locations and not judge.saw_req_ids:
        report.notes.append("no request ids recorded: the rules across steps (T7 across the run, "
                            "trace/pages-kept, trace/freed-page-write) were not judged")
