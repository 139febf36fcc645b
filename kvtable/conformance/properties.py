"""The differential properties, each tagged with the clause it checks (``PROPERTIES``).

Every property draws inputs from ``kvtable.strategies``, computes the expected outcome with
``kvtable.reference`` (mapped through the convention profile) and requires the backend to match it
element for element, or to raise a ContractViolation naming the same clause. Only elements the
contract defines are compared; buffer regions a step must not touch are compared to assert exactly
that (see ``stateful.py``).

Cheap and debug-only clauses. A backend must reject, in any mode, the breaches it can see without a
device sync: table dtype and shape (T1), the CPU-mirror lengths of a ``Batch`` or of extend (T8 width,
T9, W2's seq_len >= N), tokens per request (W2/W4), page ratios (E1) and the graph protocol's sizes
and deliveries (G2-G5). Breaches that need the table contents read back (T1 entries below -1, T2,
T3, T4, T5, T7, W5, and T4/T8 on device lengths) are checked only against the backend built with
``debug=True``; without debug the contract only asks that such input never writes outside page 0
of the right group, which the valid-input properties cannot observe and the debug ones do.

Kernel sinks. Where the host sees every length (CPU tensors), a backend refuses a stale seq_len
before any kernel runs, so the "write page 0, never read out of bounds" sink of its fused kernels is
tested directly: the ``kernels/*`` properties (``kernel_properties.py``) call ``backend.kernels`` on
raw arguments and compare with ``kernel_model``. A backend with no ``kernels`` gets them reported not
applicable (``Property.not_applicable``), never passed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from hypothesis import assume
from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from kvtable.backends.profiles import Profile
from kvtable.conformance.checks import (
    Mismatch,
    Outcome,
    Transcript,
    call_backend,
    check_tensor,
    expect_raises,
    first_difference,
    judge,
)
from kvtable.conformance.checks import reference_outcome as outcome
from kvtable.conformance.kernel_properties import (
    check_grouped_extend_locs,
    check_grouped_locs,
    check_replay_fill,
    check_stacked_extend_locs,
    check_stacked_locs,
    extend_cases,
    fill_cases,
    grouped_cases,
    grouped_locs_cases,
    locs_cases,
    missing_grouped_extend,
    missing_grouped_locs,
    missing_kernels,
)
from kvtable.conformance.stateful import STALE_KINDS, GraphHarness, machine
from kvtable.reference import GroupSpec, page_ratio
from kvtable.reference.model import MODES, Table
from kvtable.reference.tables import as_table
from kvtable.strategies import (
    BROKEN_CLAUSES,
    CHEAP_CLAUSES,
    CORRUPTIONS,
    Broken,
    Case,
    ExpandCase,
    GraphCase,
    GraphSetup,
    Replay,
    WriteLocCase,
    as_tensor,
    broken_cases,
    cases,
    expand_cases,
    graph_cases,
    graph_setups,
    repaged,
    write_loc_cases,
)


@dataclass
class Context:
    """What a property runs against: the backend (and its debug twin), the profile, the transcript."""

    backend: Any
    profile: Profile
    transcript: Transcript = field(default_factory=Transcript)
    debug_factory: Callable[[], Any] | None = None
    _debug: Any = None

    @property
    def debug_backend(self) -> Any:
        """The backend built with ``debug=True`` (recorded as ``debug_backend`` in the transcript)."""
        if self._debug is None:
            if self.debug_factory is None:
                raise RuntimeError("no debug-mode backend: pass a factory that accepts debug=True")
            self._debug = self.debug_factory()
        return self._debug

    @property
    def device(self) -> str:
        return str(getattr(self.backend, "device", "cpu"))


@dataclass(frozen=True)
class Property:
    """One differential property: inputs, the clause it checks, and the check itself."""

    name: str
    clause: str
    summary: str
    strategy: SearchStrategy | None
    check: Callable[[Context, Any], None] | None
    debug: bool = False
    weight: int = 1
    """Share of ``kvtable fuzz``'s example budget (large input spaces get more)."""
    stateful: Callable[[Context], type] | None = None
    not_applicable: Callable[[Context], str | None] | None = None
    """Why the property does not apply to a backend (None: it does), e.g. no ``backend.kernels``; such a
    property is reported "not applicable", never run and never counted as passed."""


# ------------------------------------------------------------------------------------------------
# Helpers
# ------------------------------------------------------------------------------------------------


def _lone_call(ctx: Context, backend: Any, case: Case, gid: str) -> tuple[str, Outcome, Callable[[], Any]]:
    """The lone-table call of the case's mode for group ``gid``: (description, expected, backend call)."""
    profile = ctx.profile
    tensor = case.tensors()[gid]
    def table() -> Table:  # the plain rows, after the T1 checks a backend makes on the tensor it gets
        return as_table(tensor, group=gid)

    ps = case.spec(gid).block_granularity
    batch = case.batch
    seq = list(batch.seq_lens)
    if batch.mode == "decode":
        return (f"decode_locs[{gid}]", outcome(lambda: profile.decode_locs(table(), seq, ps)),
                lambda: backend.decode_locs(tensor, case.seq_tensor(), ps))
    if batch.mode == "verify":
        return (f"verify_locs[{gid}]", outcome(lambda: profile.verify_locs(table(), seq, ps, batch.n, batch.actual_bs)),
                lambda: backend.verify_locs(tensor, case.seq_tensor(), ps, batch.n, actual_bs=batch.actual_bs))
    if batch.mode == "reanchor":
        return (f"reanchor_locs[{gid}]", outcome(lambda: profile.reanchor_locs(table(), seq, ps, batch.n)),
                lambda: backend.reanchor_locs(tensor, case.seq_tensor(), ps, batch.n))
    assert batch.prefix_lens is not None
    prefix, extend = list(batch.prefix_lens), case.extend_lens
    return (f"extend_locs[{gid}]", outcome(lambda: profile.extend_locs(table(), prefix, extend, ps)),
            lambda: backend.extend_locs(tensor, prefix, extend, ps))


_MODE_CLAUSE = {"decode": "W1", "verify": "W2", "reanchor": "W4", "extend": "W3"}


def _loc_dtypes(profile: Profile) -> tuple[torch.dtype, ...]:
    """The location dtypes the profile accepts (int64 engines may hand back int32)."""
    return tuple(d for d in (torch.int32, torch.int64) if profile.accepts_loc_dtype(d))


def _tensor_compare(clause: str, what: str, ctx: Context) -> Callable[[Any, Any], None]:
    return lambda got, want: check_tensor(clause, what, got, want, device=ctx.device, dtypes=_loc_dtypes(ctx.profile))


def _check_lone(ctx: Context, backend: Any, case: Case, clause: str | None = None) -> None:
    for spec in case.attention:
        what, expected, call = _lone_call(ctx, backend, case, spec.group_id)
        tag = clause or _MODE_CLAUSE[case.batch.mode]
        judge(tag, what, expected, call, _tensor_compare(tag, what, ctx))


def _group_compare(ctx: Context, case: Case, clause: str) -> Callable[[Any, Any], None]:
    state = {s.group_id for s in case.specs if s.is_state}

    def compare(got: Any, want: dict[str, list[int]]) -> None:
        if not isinstance(got, dict):
            raise Mismatch(clause, f"group_locs returned {type(got).__name__}, expected a dict")
        if sorted(got) != sorted(want):
            leaked = sorted(set(got) & state)
            raise Mismatch("T6" if leaked else clause, f"group_locs keys {sorted(got)}, expected {sorted(want)}"
                           + (f" (state groups {leaked} must be shed)" if leaked else ""))
        for gid in sorted(want):
            check_tensor(clause, f"group_locs[{gid!r}]", got[gid], want[gid], device=ctx.device,
                         dtypes=_loc_dtypes(ctx.profile))

    return compare


def _check_group_locs(ctx: Context, backend: Any, case: Case, clause: str) -> None:
    plain = {gid: t for gid, t in case.tables.items()}
    expected = outcome(lambda: ctx.profile.group_locs(list(case.specs), plain, case.batch))
    judge(clause, "group_locs", expected,
          lambda: backend.group_locs(list(case.specs), case.tensors(), case.batch, tail_pad=case.tail_pad),
          _group_compare(ctx, case, clause))


# ------------------------------------------------------------------------------------------------
# Valid inputs: element-for-element equality
# ------------------------------------------------------------------------------------------------


def _lone(mode: str) -> Callable[[Context, Case], None]:
    def check(ctx: Context, case: Case) -> None:
        _check_lone(ctx, ctx.backend, case)

    check.__doc__ = f"lone-table {mode} locations equal the reference"
    return check


def _grouped(ctx: Context, case: Case) -> None:
    _check_group_locs(ctx, ctx.backend, case, _MODE_CLAUSE[case.batch.mode])


def _int32_edge(ctx: Context, case: Case) -> None:
    _check_group_locs(ctx, ctx.backend, case, "W5")
    _check_lone(ctx, ctx.backend, case, "W5")


@st.composite
def _state_garbage(draw: st.DrawFn) -> Case:
    """A valid case whose state group's table is garbage: int64, 1-D, or full of holes and pads."""
    case = draw(cases())
    state = GroupSpec("state9", "state", 0)
    kind = draw(st.sampled_from(("holes", "int64", "1-D")))
    garbage = [[0, -1, 3, 3]] * case.batch.bs
    raw = {}
    if kind == "int64":
        raw[state.group_id] = torch.tensor(garbage, dtype=torch.int64)
    elif kind == "1-D":
        raw[state.group_id] = torch.tensor([0, -1, 3], dtype=torch.int32)
    return replace(case, specs=(*case.specs, state), tables={**case.tables, state.group_id: garbage}, raw=raw)


def _state_shed(ctx: Context, case: Case) -> None:
    """The case is valid but for its state table, so any refusal, crash or wrong value is a T6 breach."""
    _check_group_locs(ctx, ctx.debug_backend, case, "T6")


def _debug_accepts(ctx: Context, case: Case) -> None:
    """Debug mode accepts every valid batch (a refusal names the clause it invoked) with the same locations.

    The lone-table calls take no tail-pad argument, so they are held to the default pad -1 only.
    """
    _check_group_locs(ctx, ctx.debug_backend, case, _MODE_CLAUSE[case.batch.mode])
    if case.tail_pad == -1 and (case.batch.mode == "verify" or case.batch.live_rows == case.batch.bs):
        _check_lone(ctx, ctx.debug_backend, case)


def _expand(ctx: Context, ex: ExpandCase) -> None:
    width = ex.max_kernel_pages if ex.max_kernel_pages is not None else ex.width * ex.ratio
    expected = outcome(lambda: ctx.profile.expand_table(ex.table, ex.ratio, max_kernel_pages=ex.max_kernel_pages,
                                                        tail_pad=ex.tail_pad, actual_bs=ex.actual_bs))

    def compare(got: Any, want: Table) -> None:
        if isinstance(got, torch.Tensor) and tuple(got.shape) != (len(ex.table), width):
            raise Mismatch("E2", f"expand_table: shape {tuple(got.shape)}, expected {(len(ex.table), width)}")
        check_tensor("E2", "expand_table", got, want, device=ctx.device)

    judge("E2", "expand_table", expected,
          lambda: ctx.backend.expand_table(as_tensor(ex.table, ex.width), ex.ratio,
                                           max_kernel_pages=ex.max_kernel_pages, tail_pad=ex.tail_pad,
                                           actual_bs=ex.actual_bs), compare)


def _unit_invariance(ctx: Context, case: Case) -> None:
    """E3: the backend's locations on its own expanded table at K equal the reference's at B."""
    k = case.kernel_page_size
    for spec in case.attention:
        ratio = page_ratio(spec.block_granularity, k)
        expanded = ctx.backend.expand_table(case.tensors()[spec.group_id], ratio, tail_pad=case.tail_pad)
        kernel_spec = GroupSpec(spec.group_id, spec.family, k, window=spec.window)
        kernel_case = replace(case, specs=(kernel_spec,), tables={spec.group_id: case.tables[spec.group_id]},
                              raw={spec.group_id: expanded})
        what, _, call = _lone_call(ctx, ctx.backend, kernel_case, spec.group_id)
        _, expected, _ = _lone_call(ctx, ctx.backend, replace(case, specs=(spec,)), spec.group_id)
        judge("E3", f"{what} on expand_table(r={ratio}) at K={k}", expected, call,
              _tensor_compare("E3", what, ctx))


@st.composite
def _bad_ratios(draw: st.DrawFn) -> tuple[GraphSetup, int]:
    setup = draw(graph_setups())
    k = draw(st.sampled_from((2, 4, 8, 16)))
    spec = GroupSpec("full_odd", "full", k * draw(st.integers(1, 3)) + draw(st.integers(1, k - 1)))
    return replace(setup, specs=(*setup.specs, spec), kernel_page_size=k, expand=True), draw(st.integers(-2, 0))


def _page_ratio(ctx: Context, arg: tuple[GraphSetup, int]) -> None:
    setup, ratio = arg
    expect_raises("E1", "graph() with B not a multiple of K",
                  lambda: ctx.backend.graph(list(setup.specs), **setup.kwargs()))
    expect_raises("E1", f"expand_table(ratio={ratio})",
                  lambda: ctx.backend.expand_table(as_tensor([[1, 2]]), ratio))


def _checker(clause: str) -> Callable[[Context, WriteLocCase], None]:
    def check(ctx: Context, wc: WriteLocCase) -> None:
        expected = Outcome(clause=wc.clause) if wc.clause else Outcome(value=None)
        judge(wc.clause or clause, f"check_write_locs ({wc.how})", expected,
              lambda: ctx.backend.check_write_locs(as_tensor(wc.table), torch.tensor(wc.locs, dtype=torch.int32),
                                                   wc.batch, wc.page_size, group=wc.group),
              lambda _g, _e: None)

    return check


# ------------------------------------------------------------------------------------------------
# CUDA-graph buffers
# ------------------------------------------------------------------------------------------------


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
    h.replay(gc.replay)


@st.composite
def _twice_cases(draw: st.DrawFn) -> tuple[GraphCase, Replay]:
    gc = draw(graph_cases())
    return gc, draw(repaged(gc.setup, gc.replay))


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


@st.composite
def _stale_cases(draw: st.DrawFn) -> tuple[GraphCase, str]:
    return draw(graph_cases()), draw(st.sampled_from(STALE_KINDS))


def _graph_stale(ctx: Context, arg: tuple[GraphCase, str]) -> None:
    gc, kind = arg
    h = GraphHarness(ctx, gc.setup)
    h.init()
    h.scribble()
    h.replay(gc.replay)
    h.stale(gc.replay, kind)


@st.composite
def _state_only(draw: st.DrawFn) -> tuple[GraphSetup, GraphCase]:
    gc = draw(graph_cases())
    only = replace(gc.setup, specs=tuple(GroupSpec(f"state{i}", "state", 0) for i in range(draw(st.integers(1, 2)))))
    return only, gc


def _graph_state_only(ctx: Context, arg: tuple[GraphSetup, GraphCase]) -> None:
    """T6: a runner over state groups only has no buffers, captures nothing and refuses replays (G5)."""
    setup, gc = arg
    h = GraphHarness(ctx, setup)
    h.init()
    h.capture(1, [s.group_id for s in setup.specs], 1)
    h.replay(replace(gc.replay, bs=min(gc.replay.bs, setup.max_bs), actual_bs=None), clause="G5")


@st.composite
def _bounds_cases(draw: st.DrawFn) -> tuple[GraphCase, str]:
    return draw(graph_cases()), draw(st.sampled_from(("capture bs 0", "capture bs > max_bs", "capture N > spec_n",
                                                      "capture unknown group", "replay bs 0",
                                                      "replay bs > max_bs", "replay N > spec_n",
                                                      "replay short seq_lens")))


def _graph_bounds(ctx: Context, arg: tuple[GraphCase, str]) -> None:
    """G2/G3/G4: sizes outside what the buffers were allocated for are refused, and nothing is written."""
    gc, kind = arg
    setup, step = gc.setup, gc.replay
    h = GraphHarness(ctx, setup)
    h.init()
    h.scribble()
    ids = [s.group_id for s in setup.attention]
    if kind.startswith("capture"):
        bs, tpr, group_ids = 1, 1, ids
        if kind == "capture bs 0":
            bs = 0
        elif kind == "capture bs > max_bs":
            bs = setup.max_bs + 1
        elif kind == "capture N > spec_n":
            tpr = setup.spec_n + 1
        else:
            group_ids = [*ids, "ghost"]
        h.capture(bs, group_ids, tpr)
        return
    if kind == "replay bs 0":
        step = replace(step, bs=0, actual_bs=None)
    elif kind == "replay bs > max_bs":
        step = replace(step, bs=setup.max_bs + 1, seq_lens=step.seq_lens + (1,) * setup.max_bs, actual_bs=None)
    elif kind == "replay N > spec_n":
        step = replace(step, tokens_per_req=setup.spec_n + 1)
    else:
        step = replace(step, seq_lens=step.seq_lens[: step.bs - 1])
    h.replay(step, clause="G4" if kind == "replay short seq_lens" else "G3")


@st.composite
def _stale_seq(draw: st.DrawFn) -> tuple[GraphCase, int, int]:
    gc = draw(graph_cases())
    step = gc.replay
    live = min(step.bs, *(len(t) for g, t in step.tables.items() if not g.startswith("state")),
               step.bs if step.actual_bs is None else step.actual_bs)
    assume(live >= 1)
    return gc, draw(st.integers(0, live - 1)), draw(st.integers(1, 64))


def _graph_stale_seq(ctx: Context, arg: tuple[GraphCase, int, int]) -> None:
    """G4: a live row's seq_len past its pages (or past the buffer) is reported or lands in page 0.

    The reference reports it (T4/T8). A runner that does not (no sync on the device lengths) must mask
    its table read by the group's width and send the token to the null page: never to another row's
    page (vLLM #53982), never past the buffer. Its tables are filled as usual.
    """
    gc, row, extra = arg
    h = GraphHarness(ctx, gc.setup)
    h.init()
    model = h.model
    assert model is not None
    step = gc.replay
    h.replay(step)  # the model's staged rows for this delivery
    seq = list(step.seq_lens)
    seq[row] = max(len(g.table[0]) * g.page_size for g in model.groups.values()) + extra
    stale = replace(step, seq_lens=tuple(seq))
    got = call_backend(lambda: h.runner.replay(stale.bs, stale.tensors(), stale.seq_tensor(), stale.tokens_per_req,
                                               actual_bs=stale.actual_bs))
    if got.raised:
        if got.clause not in ("T4", "T8"):
            raise Mismatch("G4", f"stale seq_len {seq[row]}: raised [{got.clause}], expected T4/T8 or null-page writes")
        h.check_buffers()
        return
    n = stale.tokens_per_req
    live = min(stale.bs, *(len(stale.tables[g]) for g in model.groups),
               stale.bs if stale.actual_bs is None else stale.actual_bs)
    for gid, group in model.groups.items():
        width, ps = len(group.table[0]), group.page_size
        expected = []
        for b in range(stale.bs):
            for t in range(n):
                pos = max(seq[b] - n + t, 0)
                page = group.table[b][pos // ps] if pos // ps < width else -1
                expected.append(max(page, 0) * ps + pos % ps)
        expected = ctx.profile.pad_rows(expected, live, n)
        got_locs = h.runner.loc_buffers[gid].tolist()[: stale.bs * n]
        if got_locs != expected:
            raise Mismatch("G4", f"loc_buffers[{gid!r}] after a replay with row {row} at stale seq_len {seq[row]} "
                           f"(buffer holds {width} columns of {ps}): {first_difference(got_locs, expected)}\n"
                           f"  got      {got_locs}\n  expected {expected} (pads and columns past the width "
                           "read as the null page 0)")


# ------------------------------------------------------------------------------------------------
# Near-valid inputs: the same ContractViolation
# ------------------------------------------------------------------------------------------------


def _expect_broken(ctx: Context, backend: Any, b: Broken) -> None:
    if b.clause == "W2" and ctx.profile.clamp_short_verify:
        _check_group_locs(ctx, backend, b.case, "W2")  # this profile clamps instead of raising
        return
    expect_raises(b.clause, f"group_locs on {b.how}",
                  lambda: backend.group_locs(list(b.case.specs), b.case.tensors(), b.case.batch,
                                             tail_pad=b.case.tail_pad))


def _rejects_cheap(ctx: Context, b: Broken) -> None:
    """group_locs refuses the breach; so do the lone-table calls a malformed tensor or CPU length reaches."""
    _expect_broken(ctx, ctx.backend, b)
    attention = {s.group_id for s in b.case.attention}
    if b.clause == "T1":
        for gid in sorted(set(b.case.raw) & attention):  # a malformed tensor is T1 for every call taking it
            what, _, call = _lone_call(ctx, ctx.backend, b.case, gid)
            expect_raises("T1", f"{what} on {b.how}", call)
    elif b.case.batch.mode == "extend":  # extend lengths are CPU mirrors: T8/T9 are cheap there too
        for gid in sorted(attention & set(b.case.tables)):
            what, expected, call = _lone_call(ctx, ctx.backend, b.case, gid)
            if expected.raised:
                judge(b.clause, f"{what} on {b.how}", expected, call, lambda _g, _e: None)


def _rejects_debug(ctx: Context, b: Broken) -> None:
    _expect_broken(ctx, ctx.debug_backend, b)


def _rejects_lone(ctx: Context, b: Broken) -> None:
    """Debug mode: where the reference's lone-table function rejects the table, the backend's does too."""
    tensors = b.case.tensors()
    for spec in b.case.attention:
        if spec.group_id not in tensors:
            continue
        what, expected, call = _lone_call(ctx, ctx.debug_backend, b.case, spec.group_id)
        if expected.raised and not (expected.clause == "W2" and ctx.profile.clamp_short_verify):
            judge(expected.clause or "T4", f"{what} on {b.how}", expected, call, lambda _g, _e: None)


@st.composite
def _bad_n(draw: st.DrawFn) -> tuple[Case, int]:
    return draw(cases(modes=("verify", "reanchor"))), draw(st.integers(-2, 0))


def _rejects_n(ctx: Context, arg: tuple[Case, int]) -> None:
    case, n = arg
    bad = replace(case, batch=replace(case.batch, n=n))
    for spec in case.attention:
        what, expected, call = _lone_call(ctx, ctx.backend, bad, spec.group_id)
        judge(expected.clause or "W2", f"{what} with n={n}", expected, call, lambda _g, _e: None)


@st.composite
def _bad_actual_bs(draw: st.DrawFn) -> tuple[Case, int]:
    case = draw(cases(modes=("verify",)))
    bs = case.batch.bs
    return case, draw(st.one_of(st.integers(bs + 1, bs + 3), st.integers(-3, -1)))


def _rejects_actual_bs(ctx: Context, arg: tuple[Case, int]) -> None:
    """T9: ``verify_locs`` with ``actual_bs`` outside ``[0, bs]`` is refused (no ``Batch`` can even hold it)."""
    case, actual = arg
    seq, n = list(case.batch.seq_lens), case.batch.n

    def check(spec: GroupSpec) -> None:
        gid, ps = spec.group_id, spec.block_granularity
        expected = outcome(lambda: ctx.profile.verify_locs(case.tables[gid], seq, ps, n, actual))
        assert expected.clause == "T9", f"the reference accepts actual_bs={actual} for bs {len(seq)}"
        judge("T9", f"verify_locs[{gid}] with actual_bs={actual} for bs {len(seq)}", expected,
              lambda: ctx.backend.verify_locs(case.tensors()[gid], case.seq_tensor(), ps, n, actual_bs=actual),
              lambda _g, _e: None)

    for spec in case.attention:
        check(spec)


# ------------------------------------------------------------------------------------------------
# The registry
# ------------------------------------------------------------------------------------------------


def _registry() -> tuple[Property, ...]:
    props = [
        Property("decode_locs", "W1", "lone decode locations equal the reference (padded rows, both tail pads)",
                 cases(modes=("decode",)), _lone("decode"), weight=3),
        Property("verify_locs", "W2", "lone verify locations, token-major, padded rows clamped at 0",
                 cases(modes=("verify",)), _lone("verify"), weight=3),
        Property("reanchor_locs", "W4", "lone re-anchor locations, clamped at 0 for every row",
                 cases(modes=("reanchor",)), _lone("reanchor"), weight=3),
        Property("extend_locs", "W3", "lone extend locations in request order",
                 cases(modes=("extend",)), _lone("extend"), weight=3),
    ]
    for mode in MODES:
        props.append(Property(f"group_locs/{mode}", _MODE_CLAUSE[mode],
                              f"{mode} locations of every group at its own B in one call (T6: state shed)",
                              cases(modes=(mode,)), _grouped, weight=4))
    props += [
        Property("group_locs/int32-edge", "W5", "pages just under 2^31 / B: locations near 2^31 - 1 stay exact",
                 cases(big_pages=True), _int32_edge, weight=2),
        Property("group_locs/state-shed", "T6", "state tables (int64, 1-D, holes) are never read, even in debug",
                 _state_garbage(), _state_shed, debug=True),
        Property("debug/accepts-valid", "D1", "debug mode accepts every valid batch (either tail pad) and returns "
                 "the same locations", cases(), _debug_accepts, debug=True, weight=2),
        Property("expand_table", "E2", "block-to-kernel expansion: real blocks to b*r+j, holes and pads repeated",
                 expand_cases(), _expand, weight=2),
        Property("unit-invariance", "E3", "locations on the expanded table at K equal those on the block table at B",
                 cases(), _unit_invariance, weight=2),
        Property("page-ratio", "E1", "B not a positive multiple of K, or ratio < 1, is refused",
                 _bad_ratios(), _page_ratio),
        Property("checker/accepts", "D1", "the strong checker accepts correct eager locations",
                 write_loc_cases(corrupt=False), _checker("D1")),
    ]
    for how, clause in CORRUPTIONS.items():
        props.append(Property(f"checker/{how.replace(' ', '-')}", clause,
                              f"the strong checker refuses eager locations with one corruption: {how}",
                              write_loc_cases(corrupt=True, corruptions=(how,)), _checker(clause)))
    props += [
        Property("graph/init", "G1", "zeroed int32 buffers per non-state group, shapes from max_kernel_pages",
                 graph_setups(), _graph_init),
        Property("graph/capture", "G2", "capture views alias the buffers at every bs; state groups skipped",
                 graph_cases(), _graph_capture),
        Property("graph/replay-fill", "G3", "replay fills live rows, tail pads, zero dummy rows, nothing past bs",
                 graph_cases(), _graph_replay, weight=3),
        Property("graph/replay-locs", "G4", "replay recomputes locations into [:bs*N] only",
                 graph_cases(), _graph_replay, weight=2),
        Property("graph/replay-twice", "G3", "a second replay of the same shape with fresh page ids refills "
                 "every buffer (no cache keyed by shape)", _twice_cases(), _graph_replay_twice, weight=2),
        Property("graph/stale-seq-lens", "G4", "a stale seq_len past the buffer writes the null page, nothing else",
                 _stale_seq(), _graph_stale_seq),
        Property("kernels/stacked-locs", "G4", "backend.kernels: fixed-count locations on pitched views; stale "
                 "lengths and pads sink into page 0, nothing else is written", locs_cases(), check_stacked_locs,
                 weight=2, not_applicable=missing_kernels),
        Property("kernels/grouped-locs", "G4", "backend.kernels' optional fixed-count fast path: per-group "
                 "pitched tables, equal to the stacked kernel; stale lengths and pads sink into page 0",
                 grouped_locs_cases(), check_grouped_locs, not_applicable=missing_grouped_locs),
        Property("kernels/stacked-extend-locs", "W3", "backend.kernels: extend locations on pitched views, "
                 "positions past a width sink into page 0", extend_cases(), check_stacked_extend_locs,
                 not_applicable=missing_kernels),
        Property("kernels/grouped-extend-locs", "W3", "backend.kernels' optional extend fast path: per-group "
                 "pitched tables, equal to the stacked kernel, pads sink into page 0", grouped_cases(),
                 check_grouped_extend_locs, not_applicable=missing_grouped_extend),
        Property("kernels/replay-fill", "G3", "backend.kernels: replay fill on pitched views; rows >= bs and "
                 "the buffer around the view untouched", fill_cases(), check_replay_fill,
                 not_applicable=missing_kernels),
        Property("graph/stale-guard", "G5", "missing, empty, extra or state-only deliveries are refused unwritten",
                 _stale_cases(), _graph_stale),
        Property("graph/state-only", "T6", "a runner over state groups only: no buffers, no views, replay refused",
                 _state_only(), _graph_state_only),
        Property("graph/bounds", "G3", "bs or N outside the allocation, unknown groups, short seq_lens: refused",
                 _bounds_cases(), _graph_bounds),
        Property("graph/protocol", "G3", "random capture/replay/re-anchor/stale sequences match GraphModel",
                 None, None, weight=4, stateful=machine),
        Property("rejects/n", "W2", "tokens per request < 1 is refused (W2 verify, W4 re-anchor)",
                 _bad_n(), _rejects_n),
        Property("rejects/actual-bs", "T9", "verify_locs with actual_bs outside [0, bs] is refused in any mode",
                 _bad_actual_bs(), _rejects_actual_bs),
    ]
    for clause in CHEAP_CLAUSES:
        props.append(Property(f"rejects-cheap/{clause}", clause,
                              f"{clause} breaches visible without a device sync are refused in any mode",
                              broken_cases([clause], cheap=True), _rejects_cheap))
    for clause in BROKEN_CLAUSES:
        props.append(Property(f"rejects/{clause}", clause, f"debug mode refuses every {clause} breach, naming it",
                              broken_cases([clause]), _rejects_debug, debug=True))
    props.append(Property("rejects/lone-table", "T4", "debug mode: lone-table calls refuse what the reference's do",
                          broken_cases(["T4", "T8", "T9", "W2"], tail_pads=(-1,), padding=False),
                          _rejects_lone, debug=True))
    return tuple(props)


PROPERTIES: tuple[Property, ...] = _registry()
BY_NAME = {p.name: p for p in PROPERTIES}


def select(names: list[str] | None = None) -> tuple[Property, ...]:
    """Properties by name or by clause id (``"T4"`` selects every property tagged T4); all by default."""
    if not names:
        return PROPERTIES
    chosen = [p for p in PROPERTIES if p.name in names or p.clause in names]
    unknown = sorted(set(names) - {p.name for p in chosen} - {p.clause for p in chosen})
    if unknown:
        raise KeyError(f"no property or clause {unknown}; properties: {sorted(BY_NAME)}")
    return tuple(chosen)


__all__ = ["BY_NAME", "PROPERTIES", "Context", "Property", "select"]
