"""CUDA-graph buffers (G1-G5, T6): init, capture, replay, stale guards and bounds, and the random protocol.

Every property drives ``GraphHarness`` (one backend runner beside one ``GraphModel``). ``GraphProtocol``
is the protocol as a hypothesis state machine: captured views go into a Bundle, rules that need a
captured view or a previous replay say so with ``@precondition``, and every value a rule takes comes
from a strategy built once (the setup is ``st.shared``, so the rules' replays fit the runner drawn
by ``init``).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, replace

from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, invariant, multiple, precondition, rule

from kvtable.conformance import kernel_model
from kvtable.conformance.checks import Mismatch, call_backend, first_difference
from kvtable.conformance.core import Context, Property
from kvtable.conformance.graph_harness import BAD_STEPS, STALE_KINDS, GraphHarness
from kvtable.conformance.levels import CORRECTNESS, SAFETY, STRICTNESS
from kvtable.conformance.properties.applies import has
from kvtable.errors import ContractViolation, Unsupported
from kvtable.reference import GroupSpec
from kvtable.reference.graph import GraphModel, GroupBuffers
from kvtable.reference.safety import token_positions
from kvtable.strategies import MAX_N, GraphCase, GraphSetup, Replay, graph_cases, graph_setups
from kvtable.strategies.draws import SEEDS, between, pick, rng
from kvtable.strategies.graph import (
    Capture,
    ReanchorViews,
    StaleSeq,
    draw_capture,
    draw_replay,
    live_rows,
    reanchor_view_cases,
    repage,
    short_row_cases,
    stale_seq_cases,
)

_NEEDS = ("graph",)


def _graph_init(ctx: Context, setup: GraphSetup) -> None:
    GraphHarness(ctx, setup).init()


def _graph_capture(ctx: Context, gc: GraphCase) -> None:
    h = GraphHarness(ctx, gc.setup)
    h.init()
    for bs, ids, tpr in gc.captures:
        h.capture(bs, ids, tpr)
    h.replay(gc.replay)  # the views see what replay wrote


def _graph_replay(ctx: Context, gc: GraphCase) -> None:
    h = GraphHarness(ctx, gc.setup)
    h.init()
    h.scribble()
    for bs, ids, tpr in gc.captures:
        h.capture(bs, ids, tpr)
    if not ctx.profile.buffers_at_init:
        h.scribble()  # buffers allocated at capture: fill them too, so that what replay leaves alone shows
    h.replay(gc.replay)


@st.composite
def _twice_cases(draw: st.DrawFn) -> tuple[GraphCase, Replay]:
    gc = draw(_GRAPH_CASES)
    return gc, repage(gc.setup, gc.replay, rng(draw))


def _graph_replay_twice(ctx: Context, arg: tuple[GraphCase, Replay]) -> None:
    """G3/G4: a second replay of the same shape with fresh page ids refills every table and location.

    A runner that caches what it filled by batch shape (sglang #25889) keeps the first replay's pages.
    """
    gc, again = arg
    h = GraphHarness(ctx, gc.setup)
    h.init()
    for bs, ids, tpr in gc.captures:
        h.capture(bs, ids, tpr)
    h.replay(gc.replay)
    h.replay(again)


def _graph_stale_seq(ctx: Context, stale_case: StaleSeq) -> None:
    """G4 at the safety tier: a live row's seq_len past its pages (on a pad inside the buffer width, or past
    the buffer) never writes outside the slots ``reference.safety`` allows, whatever the backend.

    Stale lengths are the input of a real bug: a stale seq_len on the -1 tail pad inside a buffer's width
    gave -2 from a kernel without the negative-page clamp. Any refusal is safe; the reference's is T4/T8
    named (strictness otherwise). A runner that does not refuse (no sync on device lengths) is expected to
    send the stale tokens where ``kernel_model.stacked_locs`` sinks them, the null page: another safe slot
    is a strictness note, a wrong location of a row that is not stale is a correctness failure. The
    captures come first (a lazily allocating runner has buffers from its first capture on).
    """
    gc, row = stale_case.case, stale_case.row
    setup = gc.setup
    h = GraphHarness(ctx, setup)
    h.init()
    model = h.model
    assert model is not None
    h.capture(setup.max_bs, [s.group_id for s in setup.attention], setup.spec_n)
    step = gc.replay
    h.replay(step)  # the model's staged rows for this delivery
    seq = list(step.seq_lens)
    seq[row] = stale_case.seq_len
    stale = replace(step, seq_lens=tuple(seq))
    what = f"replay with row {row} at stale seq_len {seq[row]}"
    try:
        got = call_backend(lambda: h.runner.replay(stale.bs, stale.tensors(), stale.seq_tensor(),
                                                   stale.tokens_per_req, actual_bs=stale.actual_bs))
    except Unsupported:
        raise
    except Exception as err:  # any refusal is safe
        h.check_buffers()
        raise Mismatch("G4", f"{what}: refused, unnamed: {type(err).__name__}: {err} (expected ContractViolation "
                       "[T4] or [T8], or null-page writes)", tier=STRICTNESS, kind="refused, unnamed") from err
    if got.raised:
        h.check_buffers()
        if got.clause not in ("T4", "T8"):
            raise Mismatch("G4", f"{what}: raised [{got.clause}], expected [T4] or [T8] (or null-page writes)",
                           tier=STRICTNESS, kind=f"refused as {got.clause}")
        _check_named(model, stale, row, what, got.error)
        return
    live = live_rows(stale, list(model.groups))
    for gid, group in model.groups.items():
        _check_stale_group(ctx, h, gid, group, stale, row, live)


def _check_named(model: GraphModel, stale: Replay, row: int, what: str, err: ContractViolation | None) -> None:
    """A refusal names the stale row, a group it breaks and a column of its step with no slot: T8 past the
    buffer's width, T4 on a tail pad inside it (a runner may leave a pad inside the delivered table's own
    columns to the sink and name a later column)."""
    assert err is not None
    group = model.groups.get(err.group or "")
    seq, n = stale.seq_lens[row], stale.tokens_per_req
    if group is None or err.row != row or not isinstance(err.col, int):
        raise Mismatch("G4", f"{what}: refused naming group {err.group!r} row {err.row} col {err.col}; expected "
                       f"row {row} of a captured group and a column", tier=STRICTNESS, kind="misnamed")
    width, ps = len(group.table[row]), group.page_size
    step = range(max(seq - n, 0) // ps, (seq - 1) // ps + 1)
    slotless = err.col >= width or group.table[row][err.col] < 0
    clause = "T8" if err.col >= width else "T4"
    if err.col not in step or not slotless or err.clause_id != clause:
        raise Mismatch("G4", f"{what}: refused as [{err.clause_id}] at group {err.group!r} col {err.col}; the "
                       f"step writes columns {step.start}..{step.stop - 1} of {width} (expected [{clause}] at one "
                       "with no slot: a tail pad, T4, or past the width, T8)", tier=STRICTNESS, kind="misnamed")


def _check_stale_group(ctx: Context, h: GraphHarness, gid: str, group: GroupBuffers, stale: Replay, row: int,
                       live: int) -> None:
    """One group's buffers after an accepted stale replay: safe writes first, then the fill and the sink."""
    seq, n = list(stale.seq_lens), stale.tokens_per_req
    width, ps = len(group.table[0]), group.page_size
    got_locs = h.runner.loc_buffers[gid].tolist()[: stale.bs * n]
    where = (f"loc_buffers[{gid!r}] after a replay with row {row} at stale seq_len {seq[row]} "
             f"(buffer holds {width} columns of {ps})")
    tokens = token_positions("verify", seq, n=n, actual_bs=live)
    unsafe = ctx.profile.unsafe_writes(group.table, got_locs, tokens, ps, group=gid)
    if unsafe:  # another request's page, a negative slot: the safety tier
        bad = unsafe[0]
        raise Mismatch("G4", f"{where}: group {gid!r} row {bad.row} token {bad.token} position {bad.position} "
                       f"wrote loc {bad.loc}: {bad.reason}\n  got      {got_locs}", tier=SAFETY,
                       kind="unsafe write: " + bad.reason.split(":")[0][:40])
    got_table = h.runner.table_buffers[gid].tolist()
    if got_table != group.table:
        raise Mismatch("G3", f"table_buffers[{gid!r}] after the stale replay: "
                       f"{first_difference(got_table, group.table)} (the fill does not depend on seq_lens)")
    out = [[0] * (stale.bs * n)]
    kernel_model.stacked_locs([group.table], [width], [ps], seq, out, stale.bs, n)
    expected = ctx.profile.pad_rows(out[0], live, n)
    wrong = [i for i, (g, e) in enumerate(zip(got_locs, expected, strict=True)) if g != e]
    if not wrong:
        return
    fresh = [i for i in wrong if i // n != row]
    raise Mismatch("G4", f"{where}: {first_difference(got_locs, expected)}\n  got      {got_locs}\n"
                   f"  expected {expected} (pads and columns past the width read as the null page 0"
                   + ("; a row that is not stale is wrong)" if fresh else "; what was written is safe, but not "
                      "the sink)"), tier=CORRECTNESS if fresh else STRICTNESS,
                   kind="wrong location" if fresh else "safe, not the sink")


def _graph_short_rows(ctx: Context, arg: tuple[GraphCase, Replay]) -> None:
    """G4 with T9 / W2: a live row at seq_len 0, or shorter than N, is refused before anything is written, as
    the eager calls refuse it; under a profile whose engine clamps short rows, it writes the clamped slots."""
    gc, short = arg
    h = GraphHarness(ctx, gc.setup)
    h.init()
    for bs, ids, tpr in gc.captures:
        h.capture(bs, ids, tpr)
    h.scribble()
    h.replay(short, clause="G4")


def _graph_stale(ctx: Context, arg: tuple[GraphCase, Replay]) -> None:
    """G5: every stale kind on each case, each refused unwritten (a kind drawn per example went untried in some
    runs of a few examples: the zoo's stale-guard-dropped mutant, killed only by a missing group, survived). A
    kind failing as already reported does not hide the kinds after it. The stale deliveries belong to the next
    step (fresh page ids): a runner that accepts one and keeps the last tables writes pages the step does not
    own, which the safety tier shows; accepting one without such a write is a missing refusal."""
    gc, after = arg
    setup = gc.setup
    h = GraphHarness(ctx, setup)
    h.init()
    h.capture(setup.max_bs, [s.group_id for s in setup.attention], setup.spec_n)  # a lazy runner's buffers too
    h.scribble()
    h.replay(gc.replay)
    for kind in STALE_KINDS:
        try:
            h.stale(after, kind)
        except Mismatch as err:
            if (err.clause, err.kind) not in ctx.seen:
                raise


@st.composite
def _state_only(draw: st.DrawFn) -> tuple[GraphSetup, GraphCase]:
    gc = draw(_GRAPH_CASES)
    only = replace(gc.setup, specs=tuple(GroupSpec(f"state{i}", "state", 0) for i in range(draw(between(1, 2)))))
    return only, gc


def _graph_reanchor_views(ctx: Context, case: ReanchorViews) -> None:
    """W4 on every captured view after a replay: a sliding group at ratio > 1 holds kernel pages there, and a
    re-anchor must read them as such (the TRT-LLM re-anchor on a captured SWA view wrote a page in no row)."""
    setup, step = case.setup, case.replay
    h = GraphHarness(ctx, setup)
    h.init()
    index = h.capture(step.bs, [s.group_id for s in setup.attention], 1)
    h.replay(step)
    if index is None:
        return
    rand = random.Random(case.seed)
    for gid in sorted(h.views[index][2]):
        frontier = [rand.randint(1, h.live_seq[r]) for r in range(step.bs)]
        h.reanchor(index, gid, frontier, case.n)


def _graph_state_only(ctx: Context, arg: tuple[GraphSetup, GraphCase]) -> None:
    """T6: a runner over state groups only has no buffers, captures nothing and refuses replays (G5)."""
    setup, gc = arg
    h = GraphHarness(ctx, setup)
    h.init()
    h.capture(1, [s.group_id for s in setup.specs], 1)
    h.replay(replace(gc.replay, bs=min(gc.replay.bs, setup.max_bs), actual_bs=None), clause="G5")


@st.composite
def _bounds_cases(draw: st.DrawFn) -> tuple[GraphCase, str]:
    return draw(_GRAPH_CASES), pick(draw, BAD_STEPS)


def _graph_bounds(ctx: Context, arg: tuple[GraphCase, str]) -> None:
    """G2/G3/G4: sizes outside what the buffers were allocated for are refused, and nothing is written."""
    gc, kind = arg
    h = GraphHarness(ctx, gc.setup)
    h.init()
    if not ctx.profile.buffers_at_init and kind.startswith("replay"):  # such an engine replays only what it captured
        h.capture(gc.setup.max_bs, [spec.group_id for spec in gc.setup.attention], gc.setup.spec_n)
    h.scribble()
    h.bad_step(gc.replay, kind)


# ------------------------------------------------------------------------------------------------
# The protocol as a state machine
# ------------------------------------------------------------------------------------------------

_SETUP = st.shared(graph_setups(), key="kvtable.graph-protocol.setup")


@st.composite
def _replays(draw: st.DrawFn) -> Replay:
    """A valid replay for the runner ``init`` allocated (the shared setup)."""
    return draw_replay(draw, draw(_SETUP))


@st.composite
def _captures(draw: st.DrawFn) -> Capture:
    return draw_capture(draw, draw(_SETUP), min_groups=1)


@dataclass(frozen=True)
class CapturedView:
    """One group's table view of one capture (``GraphHarness.views[index]``)."""

    index: int
    group_id: str


_REPLAYS = _replays()
_CAPTURES = _captures()


class GraphProtocol(RuleBasedStateMachine):
    """Random sequences of init, captures at several bs, replays with changing tables and seq_lens, the last
    replay again with fresh page ids, draft re-anchors on captured views, stale deliveries and bad steps."""

    views = Bundle("views")

    def __init__(self, ctx: Context, on_teardown: Callable[[], None]) -> None:
        """A machine running against ``ctx`` (backend, profile, transcript); ``on_teardown`` ends each run."""
        super().__init__()
        self.ctx, self.on_teardown = ctx, on_teardown
        self.ctx.transcript.reset()
        self.harness: GraphHarness | None = None
        self.compared = False
        """The step just run compared every buffer and view itself (a replay): the invariant has nothing new to
        see, so it skips the same comparison once."""

    def teardown(self) -> None:
        self.on_teardown()

    @initialize(setup=_SETUP)
    def init(self, setup: GraphSetup) -> None:
        self.harness = GraphHarness(self.ctx, setup)
        with self.ctx.example():
            self.harness.init()

    def ready(self) -> bool:
        return self.harness is not None and self.harness.model is not None

    def replayable(self) -> bool:
        """Ready, and (under a profile whose engine allocates at first capture) every group captured: such an
        engine replays only what it captured, so a replay of a never-captured group is no input it is handed."""
        return self.ready() and self.h.captured_all()

    @property
    def h(self) -> GraphHarness:
        assert self.harness is not None
        return self.harness

    @precondition(ready)
    @rule(target=views, capture=_CAPTURES)
    def capture(self, capture: Capture) -> object:
        bs, group_ids, tokens_per_req = capture
        with self.ctx.example():
            index = self.h.capture(bs, group_ids, tokens_per_req)
        if index is None:
            return multiple()
        return multiple(*(CapturedView(index, gid) for gid in sorted(self.h.views[index][2])))

    @precondition(replayable)
    @rule(step=_REPLAYS)
    def replay(self, step: Replay) -> None:
        with self.ctx.example():
            self.h.replay(step)
        self.compared = True

    @precondition(lambda self: self.ready() and self.h.last is not None)
    @rule(seed=SEEDS)
    def replay_again(self, seed: int) -> None:
        """The last replay's shape again, with fresh page ids: no fill may be cached by shape."""
        assert self.h.last is not None
        with self.ctx.example():
            self.h.replay(repage(self.h.setup, self.h.last, random.Random(seed)))
        self.compared = True

    @precondition(replayable)
    @rule(step=_REPLAYS, kind=st.sampled_from(STALE_KINDS))
    def stale_delivery(self, step: Replay, kind: str) -> None:
        with self.ctx.example():
            self.h.stale(step, kind)

    @precondition(replayable)
    @rule(step=_REPLAYS, kind=st.sampled_from(BAD_STEPS))
    def bad_step(self, step: Replay, kind: str) -> None:
        with self.ctx.example():
            self.h.bad_step(step, kind)

    @precondition(lambda self: self.ready() and has(self.ctx, "reanchor_locs"))
    @rule(view=views, n=st.integers(1, MAX_N), seed=SEEDS)
    def reanchor(self, view: CapturedView, n: int, seed: int) -> None:
        """W4 on a captured table view, at a frontier inside each row's current length."""
        bs = self.h.views[view.index][0]
        rand = random.Random(seed)
        frontier = [rand.randint(1, self.h.live_seq[r]) for r in range(bs)]
        with self.ctx.example():
            self.h.reanchor(view.index, view.group_id, frontier, n)

    @precondition(ready)
    @rule()
    def scribble(self) -> None:
        with self.ctx.example():
            self.h.scribble()

    @invariant()
    def buffers_match(self) -> None:
        if self.compared:  # GraphHarness.replay compared them after the step; nothing ran since
            self.compared = False
            return
        if self.ready() and self.h.runner is not None:
            with self.ctx.example():
                self.h.check_buffers()
                self.h.check_views()


_GRAPH_CASES = graph_cases()
PROPERTIES = (
    Property("graph/init", "G1", "zeroed int32 buffers per non-state group, shapes from max_kernel_pages",
             graph_setups(), _graph_init, needs=_NEEDS),
    Property("graph/capture", "G2", "capture views alias the buffers at every bs; state groups skipped",
             _GRAPH_CASES, _graph_capture, needs=_NEEDS),
    Property("graph/replay-fill", "G3", "replay fills live rows, tail pads, zero dummy rows, nothing past bs",
             _GRAPH_CASES, _graph_replay, weight=3, needs=_NEEDS),
    Property("graph/replay-locs", "G4", "replay recomputes locations into [:bs*N] only",
             _GRAPH_CASES, _graph_replay, weight=2, needs=_NEEDS),
    Property("graph/replay-twice", "G3", "a second replay of the same shape with fresh page ids refills "
             "every buffer (no cache keyed by shape)", _twice_cases(), _graph_replay_twice, weight=2, needs=_NEEDS),
    Property("graph/stale-seq-lens", "G4", "a stale seq_len (on a tail pad inside the buffer, or past it) writes "
             "only allowed slots (the null page), or is refused", stale_seq_cases(), _graph_stale_seq, tier=SAFETY,
             needs=_NEEDS),
    Property("graph/short-rows", "G4", "a live row at seq_len 0 or shorter than N is refused (T9, W2), or "
             "clamped where the profile says so", short_row_cases(), _graph_short_rows, tier=STRICTNESS,
             needs=_NEEDS),
    Property("graph/stale-guard", "G5", "missing, empty, extra or state-only deliveries are refused unwritten",
             _twice_cases(), _graph_stale, tier=SAFETY, needs=_NEEDS),
    Property("graph/state-only", "T6", "a runner over state groups only: no buffers, no views, replay refused",
             _state_only(), _graph_state_only, needs=_NEEDS),
    Property("graph/bounds", "G3", "bs or N outside the allocation, unknown groups, short seq_lens: refused",
             _bounds_cases(), _graph_bounds, tier=SAFETY, needs=_NEEDS),
    Property("graph/reanchor-views", "W4", "a re-anchor on every captured view after a replay (a sliding group "
             "at ratio > 1 among them) reads the views' kernel pages", reanchor_view_cases(), _graph_reanchor_views,
             needs=("graph", "reanchor_locs")),
    Property("graph/protocol", "G3", "random capture/replay/re-anchor/stale sequences match GraphModel",
             None, None, weight=4, stateful=GraphProtocol, needs=_NEEDS),
)
