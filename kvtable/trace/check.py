"""``check_trace``: judge every step of a trace, stop at the first violation at the chosen level.

Location steps go through ``kvtable.trace.judge`` (safety, correctness, the strong write checker) and, with
request ids, ``kvtable.trace.history`` (the rules across steps). Graph replays are judged for safety against
the live tables delivered at their own step, and, after a ``graph`` event, against the reference's buffer
model (G3 replay-fill: the buffer rows the replay left; G4 replay-locs: its locations).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from kvtable.backends.profiles import Profile, get_profile
from kvtable.contract import GroupSpec
from kvtable.errors import ContractViolation
from kvtable.reference.graph import GraphModel
from kvtable.trace.allocation import judge_allocator_step
from kvtable.trace.history import GroupHistory
from kvtable.trace.judge import Violation, dropped, judge_group, judge_strict, step_tokens
from kvtable.trace.recorder import LOCATION_KINDS
from kvtable.trace.ring import judge_ring
from kvtable.trace.store import GroupStep, Step, TraceReader
from kvtable.trace.window_front import unread_front

REPLAYS_KEPT = 8
"""A failing replay's snippet replays the graph's last replays up to it (earlier ones are left out)."""
LEVELS = {"safety": ("safety",), "correct": ("safety", "correct"), "strict": ("safety", "correct", "strict")}


@dataclass
class Report:
    """What checking one trace found: steps judged, the first violation, where the trace ended early."""

    path: str
    steps: int = 0
    violation: Violation | None = None
    snippet: str = ""
    injected: str | None = None
    """The input fault the failing step carried on purpose (``kvtable trace record --faults``), if any."""
    end_note: str | None = None
    notes: list[str] = field(default_factory=list)


class TraceJudge:
    """Judges a trace's steps in order, keeping the state the rules across steps need."""

    def __init__(self, profile: Profile, level: str, groups: Sequence[GroupSpec] = ()) -> None:
        self.profile = profile
        self.tiers = LEVELS[level]
        self.level = level
        self.families = {g.group_id: g.family for g in groups}
        self.windows = {g.group_id: g.window for g in groups if g.family == "sliding"}
        self.rings = {g.group_id: g.window for g in groups if g.layout == "ring"}
        """Ring groups (R1-R3) by id: their window; their steps are judged by ``judge_ring``."""
        self.history: dict[str, GroupHistory] = {}
        self.model: GraphModel | None = None
        self.saw_req_ids = False
        self.saw_locations = False

    def _history(self, gid: str) -> GroupHistory:
        if gid not in self.history:
            self.history[gid] = GroupHistory(gid, self.families.get(gid) == "sliding")
        return self.history[gid]

    def feed(self, step: Step) -> list[Violation]:
        """Every violation of ``step`` at this judge's level (in the order found)."""
        found = [v for v in self._judge(step) if v.tier in self.tiers]
        return found

    def _judge(self, step: Step) -> list[Violation]:
        if step.unsafe is not None:  # an out-of-bounds read or a write into an input: unsafe, whatever it returned
            return [Violation(step.index, "safety", "safety", step.error_group, None, None, None, None, step.unsafe)]
        if step.kind in LOCATION_KINDS:
            self.saw_locations = True
            return self._locations(step, step.kind)
        if step.kind == "replay":
            return self._replay(step)
        if step.kind == "allocate":
            return judge_allocator_step(step)
        if step.kind == "graph":
            specs = [GroupSpec(**s) for s in step.meta["specs"]]
            self.families.update({s.group_id: s.family for s in specs})
            self.rings.update({s.group_id: s.window for s in specs if s.layout == "ring"})
            self.model = self.profile.graph_model(specs, **step.meta["sizes"])
        elif step.kind in ("free", "alloc"):
            for gid, group in step.groups.items():
                pages = group.pages.astype(np.int64).reshape(-1)
                hist = self._history(gid)
                hist.free(step.index, pages) if step.kind == "free" else hist.alloc(pages)
        elif step.kind == "finish":
            for hist in self.history.values():
                hist.finish(step.req_ids)
        return []

    def _locations(self, step: Step, kind: str) -> list[Violation]:
        out: list[Violation] = []
        attention = [gid for gid, g in step.groups.items() if self.families.get(gid) != "state" and (
            g.locs is not None or (step.error is not None and step.error_group in (None, gid)))]
        if "strict" in self.tiers:
            out += judge_strict(self.profile, step, [gid for gid in attention if gid not in self.rings])
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
        return self._history(gid).observe(step.index, group.table, step.req_ids, live)

    def _writes(self, step: Step, gid: str, group: GroupStep, kind: str) -> list[Violation]:
        tokens = step_tokens(kind, step.seq_lens, step.n, step.prefix_lens, step.actual_bs)
        locs = group.locs.astype(np.int64).reshape(-1)[: len(tokens.rows)]
        rows = tokens.rows[: len(locs)]
        real = (rows < tokens.live) & (locs >= group.page_size) & ~dropped(self.profile, locs)
        index = np.flatnonzero(real)
        return self._history(gid).writes(step.index, locs[index], group.page_size, index, rows[index], step.req_ids)

    def _replay(self, step: Step) -> list[Violation]:
        bs = int(step.meta["bs"])
        padded = Step(step.index, "replay", step.n, step.actual_bs, step.seq_lens, None, step.req_ids,
                      error=step.error)
        live = bs
        for gid, group in step.groups.items():
            table = group.table
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
        tables = {gid: g.table.tolist() for gid, g in step.groups.items()}
        try:
            self.profile.replay(self.model, bs, tables, [int(s) for s in step.seq_lens], step.n,
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


def check_trace(path: str | Path, profile: str | Profile | None = None, level: str = "correct") -> Report:
    """Judge every complete step of the trace at ``path``; the profile defaults to the one it was recorded with."""
    from kvtable.trace.snippet import snippet

    reader = TraceReader(path)
    header = reader.header
    prof = get_profile(profile or header.get("profile"))
    groups = [GroupSpec(**g) for g in header.get("groups", [])]
    report = Report(str(path))
    if level == "strict" and not header.get("meta", {}).get("debug"):
        level = "correct"
        report.notes.append("recorded without debug mode (meta 'debug'), where a backend refuses only what it sees "
                            "without a device sync: strictness not judged, level correct")
    judge = TraceJudge(prof, level, groups)
    setup: list[Step] = []
    replays: deque[Step] = deque(maxlen=REPLAYS_KEPT)
    for step in reader.steps():
        report.steps += 1
        if step.kind == "graph":
            setup, replays = [step], deque(maxlen=REPLAYS_KEPT)
        elif step.kind == "capture":
            setup.append(step)
        elif step.kind == "replay":
            replays.append(step)
        found = judge.feed(step)
        if found:
            report.violation, report.injected = found[0], step.injected
            report.snippet = snippet(header, step, found[0], [*setup, *replays])
            break
    report.end_note = reader.end_note
    if judge.saw_locations and not judge.saw_req_ids:
        report.notes.append("no request ids recorded: the rules across steps (T7 across the run, "
                            "trace/pages-kept, trace/freed-page-write) were not judged")
    return report
