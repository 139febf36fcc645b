"""Near-valid inputs (T1-T9, W2, W5, G1): refused by the backend built with ``debug=True`` with a ContractViolation
naming the clause and the offending entry (the cheap ones in any mode: ``rejects_cheap``).

Besides the breach strategies' draws, edges built on purpose: a sliding window that starts mid-page, the page
id one past W5's top, page sizes past 2^30, tables on two devices, graph sizes below 1. Each such strategy
draws only the free parts of its edge, so every example sits on it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from hypothesis import strategies as st

from kvtable import reference
from kvtable.conformance.calls import check_group_locs, lone_call
from kvtable.conformance.checks import Mismatch, expect_raises, judge
from kvtable.conformance.checks import reference_outcome as outcome
from kvtable.conformance.core import Context, Property
from kvtable.conformance.graph_harness import GraphHarness
from kvtable.conformance.levels import STRICTNESS
from kvtable.conformance.properties.applies import LONE, BreachesHeld, NeedsAny, calls
from kvtable.conformance.properties.group_locs import check_int32_locs
from kvtable.contract import Mode
from kvtable.errors import ContractViolation
from kvtable.reference import Batch, GroupSpec
from kvtable.reference.model import check_page_size
from kvtable.strategies import Broken, Case, CaseOptions, broken_cases, draw_case
from kvtable.strategies.batches import ceil_div, padded_row, top_page
from kvtable.strategies.draws import BOOLEANS, between, pick
from kvtable.strategies.graph import GraphSetup, graph_setups


def expect_broken(ctx: Context, backend: Any, b: Broken) -> None:
    """``backend.group_locs`` refuses the breach ``b`` naming its clause and entry (a clamping profile: W2's
    locations instead)."""
    if b.clause == "W2" and ctx.profile.clamp_short_verify:
        check_group_locs(ctx, backend, b.case, "W2")  # this profile clamps instead of raising
        return
    expect_raises(b.clause, f"group_locs on {b.how}",
                  lambda: backend.group_locs(list(b.case.specs), b.case.tensors(), b.case.batch,
                                             tail_pad=b.case.tail_pad), where=b.where)


def _rejects_debug(ctx: Context, b: Broken) -> None:
    expect_broken(ctx, ctx.debug_backend, b)


def _rejects_lone(ctx: Context, b: Broken) -> None:
    """Debug mode: where the reference's lone-table function rejects the table, the backend's does too."""
    calls(ctx, b.case.batch.mode, group=False)
    tensors = b.case.tensors()
    for spec in b.case.attention:
        if spec.group_id not in tensors:
            continue
        what, expected, call = lone_call(ctx, ctx.debug_backend, b.case, spec.group_id)
        if expected.raised and not (expected.clause == "W2" and ctx.profile.clamp_short_verify):
            judge(expected.clause or "T4", f"{what} on {b.how}", expected, call, lambda _g, _e: None)


@st.composite
def _bad_n(draw: st.DrawFn) -> tuple[Case, int]:
    return draw_case(draw, CaseOptions(modes=("verify", "reanchor"))), draw(between(-2, 0))


def _rejects_n(ctx: Context, arg: tuple[Case, int]) -> None:
    case, n = arg
    calls(ctx, case.batch.mode, group=False)
    bad = replace(case, batch=replace(case.batch, n=n))
    for spec in case.attention:
        what, expected, call = lone_call(ctx, ctx.backend, bad, spec.group_id)
        judge(expected.clause or "W2", f"{what} with n={n}", expected, call, lambda _g, _e: None)


@st.composite
def _bad_actual_bs(draw: st.DrawFn) -> tuple[Case, int]:
    case = draw_case(draw, CaseOptions(modes=("verify",)))
    bs = case.batch.bs
    return case, draw(between(bs + 1, bs + 3)) if draw(BOOLEANS) else draw(between(-3, -1))


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


def _debug(clause: str) -> st.SearchStrategy[Broken]:
    return broken_cases([clause])


_COLUMN_ZERO = st.builds(
    lambda ps, entry, mode: Case((GroupSpec("full0", "full", ps),), {"full0": [[entry, 5]]},
                                 Batch((ps + 1,)) if mode == "decode" else Batch.extend((0,), (ps + 1,))),
    st.sampled_from((1, 2, 4)), st.sampled_from((0, -1)), st.sampled_from(("decode", "extend")))
"""A full group's one live row whose column 0, which its queries read (and at page size 1 write), holds page 0 or
the tail pad: the first column, the edge a reference whose read window starts one token late misses."""


def _rejects_column_zero(ctx: Context, case: Case) -> None:
    """T4: the reference refuses the row naming T4 at column 0 (else it has a gap), and so does debug mode."""
    where = frozenset({("full0", 0, 0)})
    expect_raises("T4", f"the reference's table check on column 0 = {case.tables['full0'][0][0]}",
                  lambda: reference.check_tables(list(case.specs), dict(case.tables), case.batch), where=where)
    expect_raises("T4", f"group_locs on column 0 = {case.tables['full0'][0][0]}",
                  lambda: ctx.debug_backend.group_locs(list(case.specs), case.tensors(), case.batch), where=where)


_DEBUG = "debug mode refuses every breach of the clause, naming it and the offending group, row and column"


Where = frozenset[tuple[str | None, int | None, int | None]]


@dataclass(frozen=True)
class Edge:
    """A case on an edge and the entry the reference names when it refuses it."""

    case: Case
    where: Where = frozenset()


@st.composite
def _window_start_mid_page(draw: st.DrawFn) -> Edge:
    """T5: a sliding row whose window starts at ``c * ps + off`` (0 < off < ps), holes through column c.

    Column c is needed (the window's first position lies in it) although the window does not start on
    a page boundary: a check that divides the start exactly, not by floor, misses the hole.
    """
    ps = pick(draw, (2, 3, 4, 8))
    window, n = draw(between(1, 3 * ps)), draw(between(1, 3))
    col = draw(between(0, 2))
    read_start = col * ps + draw(between(1, ps - 1))
    first = read_start + window - 1
    mode: Mode = "decode" if n == 1 else pick(draw, ("verify", "reanchor"))
    seq = first + n
    end = ceil_div(seq, ps)
    width = end + draw(between(0, 2))
    spec = GroupSpec("swa0", "sliding", ps, window=window)
    table = [padded_row(col + 1, list(range(10, 10 + end - col - 1)), width)]
    batch = Batch((seq,), mode=mode, n=n)
    return Edge(Case((spec,), {"swa0": table}, batch), frozenset({("swa0", 0, col)}))


def _rejects_window_start(ctx: Context, edge: Edge) -> None:
    case = edge.case
    expect_raises("T5", f"group_locs with the window of row 0 starting mid-page: {case.tables['swa0'][0]}",
                  lambda: ctx.debug_backend.group_locs(list(case.specs), case.tensors(), case.batch),
                  where=edge.where)


@st.composite
def _w5_edge(draw: st.DrawFn) -> tuple[Case, Case]:
    """The largest legal page id in a written column (valid), and the same case with the next id (W5)."""
    ps = pick(draw, (2, 4, 8, 16))
    seq = draw(between(1, 3 * ps))
    end = ceil_div(seq, ps)
    col = draw(between(0, end - 1))
    pages = [top_page(ps) if c == col else 5 + c for c in range(end)]
    width = end + draw(between(0, 1))
    spec = GroupSpec("full0", "full", ps)
    prefix = draw(between(0, seq))
    batch = Batch((seq,)) if draw(BOOLEANS) else Batch.extend((prefix,), (seq - prefix,))
    legal = Case((spec,), {"full0": [padded_row(0, pages, width)]}, batch)
    over = [p + 1 if c == col else p for c, p in enumerate(pages)]
    return legal, Case((spec,), {"full0": [padded_row(0, over, width)]}, batch)


def _w5_exact_edge(ctx: Context, pair: tuple[Case, Case]) -> None:
    legal, over = pair
    check_group_locs(ctx, ctx.backend, legal, "W5")
    check_group_locs(ctx, ctx.debug_backend, legal, "W5")
    top = top_page(over.spec("full0").block_granularity)
    col = next(c for c, p in enumerate(over.tables["full0"][0]) if p == top + 1)
    expect_raises("W5", f"group_locs with page {over.tables['full0'][0][col]} (one past W5's top)",
                  lambda: ctx.debug_backend.group_locs(list(over.specs), over.tensors(), over.batch),
                  where=frozenset({("full0", 0, col)}))


_HUGE_PAGE_SIZES = st.one_of(st.integers(2**30 + 1, 2**31), st.sampled_from((2**31 - 1, 2**32, 2**40)))


@st.composite
def _page_size_past_2_30(draw: st.DrawFn) -> Case:
    """A valid one-row decode or extend case whose group is then declared with a page size above 2^30."""
    ps = draw(_HUGE_PAGE_SIZES)
    mode = pick(draw, ("decode", "extend"))
    batch = Batch((1,)) if mode == "decode" else Batch.extend((0,), (1,))
    return Case((GroupSpec("full0", "full", ps),), {"full0": [[1, -1]]}, batch)


def _rejects_huge_page_size(ctx: Context, case: Case) -> None:
    """W5: the page size is refused in any mode; and the reference that judges it must accept 2^30 itself, the
    largest page size W5 allows (its locations at 2^30 are the large-page kernel properties' to judge: the
    reference lists a row's slots, 2^30 per page)."""
    try:
        check_page_size(2**30, group="full0")
    except ContractViolation as err:
        raise Mismatch("W5", f"the reference refuses page size 2^30, the largest W5 allows: {err}",
                       kind="reference refuses the W5 edge") from err
    check_int32_locs(ctx, case)


@dataclass(frozen=True)
class TwoDevices:
    """A valid two-group case whose table ``moved`` is handed over on the meta device, the other where it is."""

    case: Case
    moved: str


@st.composite
def _tables_on_two_devices(draw: st.DrawFn) -> TwoDevices:
    """Two full groups (page sizes drawn apart), one request of any mode; either table moves to meta."""
    sizes = [pick(draw, (1, 2, 4)) for _ in range(2)]
    seq, n = draw(between(1, 8)), draw(between(1, 2))
    mode: Mode = pick(draw, ("decode", "verify", "extend") if seq >= n else ("decode", "extend"))
    if mode == "extend":
        prefix = draw(between(0, seq))
        batch = Batch.extend((prefix,), (seq - prefix,))
    else:
        batch = Batch((seq,), mode=mode, n=n if mode == "verify" else 1)
    specs = tuple(GroupSpec(f"full{g}", "full", ps) for g, ps in enumerate(sizes))
    tables = {s.group_id: [padded_row(0, list(range(3, 3 + ceil_div(seq, s.block_granularity))),
                                ceil_div(seq, s.block_granularity))] for s in specs}
    return TwoDevices(Case(specs, tables, batch), pick(draw, ("full0", "full1")))


def _rejects_two_devices(ctx: Context, m: TwoDevices) -> None:
    """T1: the tables of one batch share a device; a table on another one is refused (any mode; no sync)."""
    case = m.case
    tensors = case.tensors()
    tensors[m.moved] = tensors[m.moved].to("meta")
    expect_raises("T1", f"group_locs with table {m.moved!r} on the meta device, the other on "
                  f"{tensors['full1' if m.moved == 'full0' else 'full0'].device}",
                  lambda: ctx.backend.group_locs(list(case.specs), tensors, case.batch))


@st.composite
def _graph_sizes_below_one(draw: st.DrawFn) -> tuple[GraphSetup, int]:
    """A valid runner setup and a size below 1, 0 or negative (``spec_n`` is already ``max(spec_num_tokens,
    1)``: the engine's 0 for "no speculation" never reaches the runner)."""
    return draw(graph_setups()), pick(draw, (0, -1))


_GRAPH_SIZES = ("max_bs", "max_kernel_pages", "spec_n")


def _rejects_graph_sizes(ctx: Context, arg: tuple[GraphSetup, int]) -> None:
    """G1: graph init refuses each of ``max_bs``, ``max_kernel_pages`` and ``spec_n`` below 1 (the others
    valid), as the reference does (``GraphHarness.init`` judges it)."""
    setup, size = arg
    for field in _GRAPH_SIZES:
        sizes: dict[str, Any] = {field: size}
        GraphHarness(ctx, replace(setup, **sizes)).init()


PROPERTIES = (
    Property("rejects/n", "W2", "tokens per request < 1 is refused (W2 verify, W4 re-anchor)",
             _bad_n(), _rejects_n, tier=STRICTNESS,
             not_applicable=BreachesHeld(("W2",), methods=("verify_locs", "reanchor_locs"))),
    Property("rejects/actual-bs", "T9", "verify_locs with actual_bs outside [0, bs] is refused in any mode",
             _bad_actual_bs(), _rejects_actual_bs, tier=STRICTNESS, needs=("verify_locs",),
             not_applicable=BreachesHeld(("T9",))),
    Property("rejects/T1", "T1", "T1: " + _DEBUG, _debug("T1"), _rejects_debug, debug=True, tier=STRICTNESS,
             needs=("group_locs",), not_applicable=BreachesHeld(("T1",))),
    Property("rejects/T2", "T2", "T2: " + _DEBUG, _debug("T2"), _rejects_debug, debug=True, tier=STRICTNESS,
             needs=("group_locs",)),
    Property("rejects/T3", "T3", "T3: " + _DEBUG, _debug("T3"), _rejects_debug, debug=True, tier=STRICTNESS,
             needs=("group_locs",)),
    Property("rejects/T4", "T4", "T4: " + _DEBUG, _debug("T4"), _rejects_debug, debug=True, tier=STRICTNESS,
             needs=("group_locs",)),
    Property("rejects/T4-column-zero", "T4", "debug mode and the reference refuse a full group's row whose "
             "column 0 holds page 0 or the tail pad (page sizes 1, 2, 4)", _COLUMN_ZERO, _rejects_column_zero,
             debug=True, tier=STRICTNESS, needs=("group_locs",)),
    Property("rejects/T5", "T5", "T5: " + _DEBUG, _debug("T5"), _rejects_debug, debug=True, tier=STRICTNESS,
             needs=("group_locs",)),
    Property("rejects/T7", "T7", "T7: " + _DEBUG, _debug("T7"), _rejects_debug, debug=True, tier=STRICTNESS,
             needs=("group_locs",)),
    Property("rejects/T8", "T8", "T8: " + _DEBUG, _debug("T8"), _rejects_debug, debug=True, tier=STRICTNESS,
             needs=("group_locs",), not_applicable=BreachesHeld(("T8",))),
    Property("rejects/T9", "T9", "T9: " + _DEBUG, _debug("T9"), _rejects_debug, debug=True, tier=STRICTNESS,
             needs=("group_locs",), not_applicable=BreachesHeld(("T9",))),
    Property("rejects/W2", "W2", "W2: " + _DEBUG, _debug("W2"), _rejects_debug, debug=True, tier=STRICTNESS,
             needs=("group_locs",), not_applicable=BreachesHeld(("W2",))),
    Property("rejects/W5", "W5", "W5: " + _DEBUG, _debug("W5"), _rejects_debug, debug=True, tier=STRICTNESS,
             needs=("group_locs",)),
    Property("rejects/lone-table", "T4", "debug mode: lone-table calls refuse what the reference's do",
             broken_cases(["T4", "T8", "T9", "W2"], tail_pads=(-1,), padding=False), _rejects_lone, debug=True,
             tier=STRICTNESS, not_applicable=NeedsAny(tuple(LONE.values()))),
    Property("rejects/T5-window-start", "T5", "debug mode: a hole in the column where a sliding window starts "
             "mid-page is refused, naming that column", _window_start_mid_page(), _rejects_window_start,
             debug=True, tier=STRICTNESS, needs=("group_locs",)),
    Property("rejects/W5-edge", "W5", "the largest page id W5 allows gives its locations in any mode; the next "
             "one is refused in debug mode, naming its entry", _w5_edge(), _w5_exact_edge, debug=True,
             tier=STRICTNESS, needs=("group_locs",)),
    Property("rejects/page-size-past-2^30", "W5", "a page size above 2^30 (no real page has int32 slots) is "
             "refused in any mode, and the reference accepts 2^30 itself", _page_size_past_2_30(),
             _rejects_huge_page_size, tier=STRICTNESS,
             not_applicable=NeedsAny(("group_locs", "decode_locs", "extend_locs"))),
    Property("rejects/T1-devices", "T1", "tables of one batch on two devices (one on meta) are refused in any "
             "mode", _tables_on_two_devices(), _rejects_two_devices, tier=STRICTNESS, needs=("group_locs",),
             not_applicable=BreachesHeld(("T1",), cheap=True)),
    Property("rejects/G1-sizes", "G1", "graph init refuses max_bs, max_kernel_pages or spec_n below 1",
             _graph_sizes_below_one(), _rejects_graph_sizes, tier=STRICTNESS, needs=("graph",)),
)
