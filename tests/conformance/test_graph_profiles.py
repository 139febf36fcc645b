"""Graph properties under engine profiles: lazily allocated buffers, stale lengths judged by safety, short rows."""

from __future__ import annotations

import importlib.util
import re
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings

from kvtable.backends.profiles import PROFILES, Profile
from kvtable.backends.torch_backend import TorchBackend
from kvtable.conformance.properties import PROPERTIES, select
from kvtable.conformance.runner import run_conformance
from kvtable.impl.graph import GroupGraphBuffers
from kvtable.reference import GraphModel, GroupSpec
from kvtable.strategies.graph import StaleSeq, live_rows, stale_seq_cases

_SPEC = importlib.util.spec_from_file_location("tokenspeed_style",
                                               Path(__file__).parents[2] / "examples" / "tokenspeed_style.py")
assert _SPEC is not None and _SPEC.loader is not None
ts = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(ts)

GRAPH = [p.name for p in PROPERTIES if p.name.startswith("graph/")]


# -- lazily allocating runners (buffers_at = "first-capture") ---------------------------------------------


@pytest.mark.slow
def test_the_lazy_tokenspeed_example_passes_every_graph_property_under_its_profile() -> None:
    report = run_conformance(ts.backend, examples=10, seed=0, profile="tokenspeed", properties=select(GRAPH),
                             level="correct")
    assert report.passed, report.details()
    assert {r.property for r in report.results if r.applicable} == set(GRAPH)


class GarbageAtFirstCapture(ts.LazyGroupGraphBuffers):
    """Seeded: a group's buffers allocated at first capture are not zeroed (page 5 where page 0 is due)."""

    def capture(self, bs, group_ids, tokens_per_req=1):
        fresh = [g for g in group_ids if g in self.layout and g not in self.table_buffers]
        out = super().capture(bs, group_ids, tokens_per_req)
        for gid in fresh:
            self.table_buffers[gid].fill_(5)
        return out


class FrozenAtFirstCapture(ts.LazyGroupGraphBuffers):
    """Seeded: replays keep writing only the groups of the first capture; later captured groups go stale."""

    first: frozenset[str] | None = None

    def capture(self, bs, group_ids, tokens_per_req=1):
        out = super().capture(bs, group_ids, tokens_per_req)
        if self.first is None and self.table_buffers:
            self.first = frozenset(self.table_buffers)
        return out

    def replay(self, bs, tables, seq_lens, tokens_per_req=1, *, actual_bs=None):
        later = {g: (self.table_buffers.pop(g), self.loc_buffers.pop(g))
                 for g in list(self.table_buffers) if g not in (self.first or ())}
        try:
            super().replay(bs, tables, seq_lens, tokens_per_req, actual_bs=actual_bs)
        finally:
            for gid, (table, locs) in later.items():
                self.table_buffers[gid], self.loc_buffers[gid] = table, locs


class MovesAtEachCapture(ts.LazyGroupGraphBuffers):
    """Seeded: every capture reallocates its groups' buffers (graphs captured earlier read the old storage)."""

    def capture(self, bs, group_ids, tokens_per_req=1):
        for gid in group_ids:
            if gid in self.table_buffers:
                self.table_buffers[gid] = self.table_buffers[gid].clone()
                self.loc_buffers[gid] = self.loc_buffers[gid].clone()
        return super().capture(bs, group_ids, tokens_per_req)


def _with_runner(runner_cls: type) -> type:
    class Backend(ts.TokenspeedStyleBackend):
        def graph(self, specs, *, max_bs, max_kernel_pages, kernel_page_size, spec_n=1, tail_pad=-1, expand=True):
            return runner_cls(specs, max_bs=max_bs, max_kernel_pages=max_kernel_pages,
                              kernel_page_size=kernel_page_size, spec_n=spec_n, tail_pad=tail_pad, expand=expand)

    return Backend


@pytest.mark.parametrize(("runner_cls", "prop", "message"), [
    (GarbageAtFirstCapture, "graph/capture", r"got 5, expected 0"),
    (FrozenAtFirstCapture, "graph/capture", r"(table|loc)_buffers\['\w+'\] (row|index) \d+ \(a row < bs|an entry < bs"),
    (MovesAtEachCapture, "graph/capture", r"moved: data_ptr changed|does not alias table_buffers"),
])
def test_a_wrong_lazy_runner_still_fails_under_the_tokenspeed_profile(runner_cls: type, prop: str,
                                                                     message: str) -> None:
    report = run_conformance(_with_runner(runner_cls), examples=100, seed=0, profile="tokenspeed",
                             properties=select([prop]), level="correct", shrink=False)
    [result] = report.results
    assert result.status == "failed", report.details()
    assert any(re.search(message, f.message) for f in result.failures), result.failures[0].message


def test_a_lazy_runner_fails_graph_init_under_a_profile_that_allocates_at_init() -> None:
    report = run_conformance(ts.backend, examples=10, seed=0, profile="trtllm", properties=select(["graph/init"]))
    [result] = report.results
    assert result.status == "failed" and result.clause.startswith("G1"), report.details()
    assert "table_buffers for groups []" in result.failures[0].message


def test_a_lazy_runner_refusing_replays_before_its_first_capture_passes_replay_fill() -> None:
    """tokenspeed's wrapper replays only graphs it captured: a replay before any capture is a step it never takes."""
    class RefusesUncaptured(ts.LazyGroupGraphBuffers):
        def replay(self, bs, tables, seq_lens, tokens_per_req=1, *, actual_bs=None):
            if bs and not self.table_buffers:
                raise RuntimeError("replay before any capture")
            super().replay(bs, tables, seq_lens, tokens_per_req, actual_bs=actual_bs)

    report = run_conformance(_with_runner(RefusesUncaptured), examples=100, seed=0, profile="tokenspeed",
                             properties=select(["graph/replay-fill"]), shrink=False)
    [result] = report.results
    assert result.status == "passed" and result.examples, report.details()


# -- graph/stale-seq-lens: the safety tier, stale lengths on the tail pad inside the width -----------------


@settings(max_examples=60, deadline=None, database=None, derandomize=True)
@given(stale_seq_cases())
def test_stale_lengths_land_inside_the_width_on_a_pad_or_past_every_buffer(case: StaleSeq) -> None:
    setup, step = case.case.setup, case.case.replay
    assert case.row < live_rows(step, [s.group_id for s in setup.attention])
    assert case.seq_len > step.seq_lens[case.row]
    capacity = min(setup.source_width(s) * s.block_granularity for s in setup.attention)
    if not case.on_pad:
        assert case.seq_len > max(setup.source_width(s) * s.block_granularity for s in setup.attention)
        return
    assert case.seq_len <= capacity
    model = GraphModel(setup.specs, **setup.kwargs())
    staged = model.replay_fill(step.tables, step.bs, step.actual_bs)
    entries = [staged[g][case.row][(case.seq_len - 1) // b.page_size] for g, b in model.groups.items()]
    assert min(entries) <= 0


def test_stale_lengths_reach_the_minus_one_tail_pad_inside_the_width_often() -> None:
    seen = []

    @settings(max_examples=150, deadline=None, database=None, derandomize=True)
    @given(stale_seq_cases())
    def collect(case: StaleSeq) -> None:
        setup, step = case.case.setup, case.case.replay
        model = GraphModel(setup.specs, **setup.kwargs())
        staged = model.replay_fill(step.tables, step.bs, step.actual_bs)
        seen.append(case.on_pad and any(staged[g][case.row][(case.seq_len - 1) // b.page_size] == -1
                                        for g, b in model.groups.items()))

    collect()
    assert sum(seen) >= len(seen) // 5, f"{sum(seen)} of {len(seen)} on a -1 pad inside the width"


@pytest.mark.parametrize(("backend", "profile", "level"), [
    (TorchBackend, "kvtable", "strict"),
    (ts.backend, "tokenspeed", "strict"),
])
def test_sinking_or_refusing_backends_pass_graph_stale_seq_lens(backend, profile: str, level: str) -> None:
    report = run_conformance(backend, examples=60, seed=0, profile=profile,
                             properties=select(["graph/stale-seq-lens"]), level=level)
    assert report.passed, report.details()


def test_a_replay_kernel_without_the_page_clamp_fails_stale_seq_lens_at_the_safety_tier() -> None:
    report = run_conformance(ts.backend_stale_tail, examples=100, seed=0, profile="tokenspeed",
                             properties=select(["graph/stale-seq-lens"]), level="safety", shrink=False)
    [result] = report.results
    assert result.status == "failed" and result.clause.startswith("G4"), report.details()
    failure = result.failures[0]
    assert failure.tier == "safety"
    assert re.search(r"group '[^']+' row \d+ token \d+ position \d+ wrote loc -\d+: negative slot", failure.message)


# -- graph/short-rows: T9 / W2 in replay, as the eager calls ------------------------------------------------


REFUSING_TOKENSPEED = replace(PROFILES["tokenspeed"], name="tokenspeed-refusing", clamp_short_verify=False)
"""tokenspeed's conventions, but short rows refused: the clamping example must fail graph/short-rows."""


class AcceptsShortRows(TorchBackend):
    """Seeded: impl's graph replay without its T9 / W2 check (it clamps, as it did before)."""

    def graph(self, specs, **sizes):
        runner = super().graph(specs, **sizes)
        runner.check_short_rows = lambda lengths, n: None
        return runner


def test_impl_refuses_a_live_seq_len_0_and_a_short_verify_row_in_replay() -> None:
    runner = GroupGraphBuffers([GroupSpec("full", "full", 2)], max_bs=2, max_kernel_pages=4, kernel_page_size=2,
                               spec_n=3)
    tables = {"full": torch.tensor([[3, 4], [5, 6]], dtype=torch.int32)}
    with pytest.raises(Exception, match=r"T9.*row 1"):
        runner.replay(2, tables, torch.tensor([4, 0], dtype=torch.int32), 3)
    with pytest.raises(Exception, match=r"W2.*row 0"):
        runner.replay(2, tables, torch.tensor([2, 4], dtype=torch.int32), 3)
    runner.replay(2, tables, torch.tensor([4, 0], dtype=torch.int32), 3, actual_bs=1)  # row 1 is padding
    assert runner.loc_buffers["full"].tolist()[:6] == [7, 8, 9, 0, 0, 0]


@pytest.mark.parametrize(("backend", "profile", "passes"), [
    (TorchBackend, "kvtable", True),
    (AcceptsShortRows, "kvtable", False),
    (ts.backend, "tokenspeed", True),
    (ts.backend, REFUSING_TOKENSPEED, False),
])
def test_graph_short_rows_follows_the_profile(backend, profile: str | Profile, passes: bool) -> None:
    report = run_conformance(backend, examples=40, seed=0, profile=profile, properties=select(["graph/short-rows"]),
                             level="strict", shrink=False)
    assert report.passed == passes, report.details()
    if not passes:
        clauses = {f.clause.split()[0] for r in report.results for f in r.failures}
        assert clauses & {"T9", "W2"} and {f.tier for r in report.results for f in r.failures} == {"strictness"}



# -- the graph-only profile fields: bs-0 replays, extra delivered groups, the location buffer's tail ---------


class RefusesBs0(ts.LazyGroupGraphBuffers):
    """Seeded: an idle replay (bs 0) is refused, where tokenspeed's runner does nothing."""

    def replay(self, bs, tables, seq_lens, tokens_per_req=1, *, actual_bs=None):
        assert bs >= 1, "replay at bs 0"
        super().replay(bs, tables, seq_lens, tokens_per_req, actual_bs=actual_bs)


class ZeroesLocTail(ts.LazyGroupGraphBuffers):
    """SGLang's convention on tokenspeed's runner: every replay zeroes the location buffer past ``bs*N``."""

    def replay(self, bs, tables, seq_lens, tokens_per_req=1, *, actual_bs=None):
        super().replay(bs, tables, seq_lens, tokens_per_req, actual_bs=actual_bs)
        if bs == 0:
            return  # an idle replay runs nothing, as in the runner this one extends
        for locs in self.loc_buffers.values():
            locs[bs * tokens_per_req:] = 0


ZERO_TAIL_TOKENSPEED = replace(PROFILES["tokenspeed"], name="tokenspeed-zero-tail", loc_buffer_tail=0)
"""tokenspeed's conventions with SGLang's location-buffer tail (``loc_buffer_tail = 0``)."""


@pytest.mark.parametrize(("runner_cls", "profile", "prop", "message"), [
    (RefusesBs0, "tokenspeed", "graph/bounds", r"replay\(bs=0, N=\d\): crashed with AssertionError: replay at bs 0"),
    (ZeroesLocTail, "tokenspeed", "graph/replay-locs", r"index \d+ \(an entry >= bs\*N, .*\): got 0, expected 77"),
    (ts.LazyGroupGraphBuffers, ZERO_TAIL_TOKENSPEED, "graph/replay-locs",
     r"index \d+ \(an entry >= bs\*N, .*\): got 77, expected 0"),
])
def test_the_graph_strategies_draw_the_profiles_graph_conventions(runner_cls: type, profile: str | Profile, prop: str,
                                                                  message: str) -> None:
    report = run_conformance(_with_runner(runner_cls), examples=100, seed=0, profile=profile,
                             properties=select([prop]), level="correct", shrink=False)
    [result] = report.results
    assert result.status == "failed", report.details()
    assert any(re.search(message, f.message) for f in result.failures), result.failures[0].message


@pytest.mark.slow
def test_a_runner_with_the_zero_location_tail_passes_under_that_convention() -> None:
    report = run_conformance(_with_runner(ZeroesLocTail), examples=25, seed=0, profile=ZERO_TAIL_TOKENSPEED,
                             properties=select(["graph/replay-locs", "graph/protocol"]), level="correct")
    assert report.passed, report.details()


# -- re-anchors on captured views whose rows are no valid table (scribbled): safety only ---------------------


class ReanchorsScribbleUnsafely(TorchBackend):
    """Seeded: a re-anchor over a scribbled view (every entry the sentinel 77) writes a negative slot."""

    def reanchor_locs(self, table, frontier, page_size, n):
        out = super().reanchor_locs(table, frontier, page_size, n)
        return out - 10_000 if bool((table == 77).all()) else out


@pytest.mark.slow
def test_reanchor_on_a_scribbled_view_is_judged_by_safety_only() -> None:
    assert run_conformance(TorchBackend, examples=60, seed=0, properties=select(["graph/protocol"]),
                           level="strict").passed  # the reference refuses such rows (T7); torch need not
    report = run_conformance(ReanchorsScribbleUnsafely, examples=200, seed=0, properties=select(["graph/protocol"]),
                             level="safety", shrink=False)
    [result] = report.results
    assert result.status == "failed" and result.failures[0].tier == "safety", report.details()
    assert re.search(r"no valid table: \[T\d\]\): row 0 token 0 position \d+ wrote loc -\d+", result.message)


# -- accepting is never unsafe by itself: graph/bounds and graph/stale-guard judge what was written -----------


class AcceptsCaptureBs0(ts.LazyGroupGraphBuffers):
    """tokenspeed's ``_capture_group_views`` at bs 0: empty views, nothing written (a missing refusal only)."""

    def capture(self, bs, group_ids, tokens_per_req=1):
        if bs == 0:
            return super().capture(1, group_ids, tokens_per_req) and (None, None)
        return super().capture(bs, group_ids, tokens_per_req)


class KeepsStaleTables(ts.LazyGroupGraphBuffers):
    """Seeded: a replay without tables keeps the last ones and recomputes locations from them (no stale guard)."""

    last = None

    def replay(self, bs, tables, seq_lens, tokens_per_req=1, *, actual_bs=None):
        if tables:
            self.last = tables
        super().replay(bs, tables or self.last, seq_lens, tokens_per_req, actual_bs=actual_bs)


@pytest.mark.slow
def test_a_runner_accepting_capture_bs_0_and_writing_nothing_passes_graph_bounds() -> None:
    props = select(["graph/bounds", "graph/protocol"])
    report = run_conformance(_with_runner(AcceptsCaptureBs0), examples=60, seed=0, profile="tokenspeed",
                             properties=props, level="correct")
    assert report.passed, report.details()
    notes = [f for r in report.results for f in r.notes]
    assert {f.tier for f in notes} == {"strictness"}
    assert any(f.kind == "accepted broken input" and "capture(bs=0)" in f.message for f in notes), notes


def test_a_runner_keeping_stale_tables_fails_safety_with_the_write_shown() -> None:
    report = run_conformance(_with_runner(KeepsStaleTables), examples=60, seed=0, profile="tokenspeed",
                             properties=select(["graph/stale-guard"]), level="safety", shrink=False)
    [result] = report.results
    assert result.status == "failed" and result.tier == "safety", report.details()
    assert re.search(r"group '\w+' row \d+ token \d+ position \d+ loc \d+: another page", result.message), \
        result.message


# -- tokenspeed's other replay paths: MHA's seq_len >= N clamp, the packed unpack's tail pad at r > 1 ----------


class MhaClampsSeqLens(ts.LazyGroupGraphBuffers):
    """tokenspeed MHA's capture buffer: a verify replay's seq_lens are clamped to at least N first."""

    def replay(self, bs, tables, seq_lens, tokens_per_req=1, *, actual_bs=None):
        if tokens_per_req > 1:
            seq_lens = seq_lens.clamp_min(tokens_per_req)
        super().replay(bs, tables, seq_lens, tokens_per_req, actual_bs=actual_bs)


class PackedTail(ts.LazyGroupGraphBuffers):
    """tokenspeed's packed unpack: at r > 1 a live row's columns past its source hold the tail pad, not 0."""

    def _staged(self, gid, src, bs, live):
        out = super()._staged(gid, src, bs, live)
        source_width, ratio, _, _ = self.layout[gid]
        if ratio > 1:
            out[: min(src.shape[0], bs, live), min(src.shape[1], source_width) * ratio:] = self.tail_pad
        return out


@pytest.mark.slow
@pytest.mark.parametrize("runner_cls", [MhaClampsSeqLens, PackedTail])
def test_tokenspeeds_other_replay_paths_pass_under_its_profile(runner_cls: type) -> None:
    props = select(["graph/replay-fill", "graph/replay-locs", "graph/protocol"])
    report = run_conformance(_with_runner(runner_cls), examples=60, seed=0, profile="tokenspeed", properties=props)
    assert report.passed, report.details()
    one_path = replace(PROFILES["tokenspeed"], name="tokenspeed-one-path", mha_verify_clamp=False, packed_tail=False)
    strict = run_conformance(_with_runner(runner_cls), examples=200, seed=0, profile=one_path, properties=props,
                             shrink=False)
    assert not strict.passed  # the paths do differ: only the profile's two fields model them
