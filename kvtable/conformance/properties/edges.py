"""Edges the valid and near-valid strategies rarely reach, each built on purpose: a sliding window that starts
mid-page, a hole in front of page 1, the largest page id W5 allows, page sizes past 2^30 and near it, and
CPU-mirror lengths that are numpy integers.

Each strategy draws only the free parts of its edge (page sizes, windows, offsets), so every example
sits on the edge; the checks are the families' own (``check_group_locs``, ``expect_raises``, the
kernel checks), with the offending entry named where the clause has one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy
from hypothesis import reject
from hypothesis import strategies as st

from kvtable.conformance.calls import check_group_locs, check_lone, tensor_compare
from kvtable.conformance.checks import Mismatch, expect_raises, judge
from kvtable.conformance.checks import reference_outcome as outcome
from kvtable.conformance.core import Context, Property
from kvtable.conformance.graph_harness import GraphHarness
from kvtable.conformance.levels import STRICTNESS
from kvtable.conformance.properties.applies import BreachesHeld, NeedsAny, calls
from kvtable.conformance.properties.kernels import (
    check_grouped_extend_locs,
    check_grouped_locs,
    missing_grouped_extend,
    missing_grouped_locs,
)
from kvtable.contract import INT32_MAX
from kvtable.errors import ContractViolation
from kvtable.reference import NULL_PAGE, Batch, GroupSpec
from kvtable.reference.model import check_page_size
from kvtable.strategies import Case
from kvtable.strategies.batches import PAGE_LIMIT, ceil_div
from kvtable.strategies.draws import BOOLEANS, between, pick
from kvtable.strategies.graph import GraphSetup, graph_setups
from kvtable.strategies.kernels import GroupedCase, GroupedLocsCase, draw_layouts, grouped_locs_cases

Where = frozenset[tuple[str | None, int | None, int | None]]


@dataclass(frozen=True)
class Edge:
    """A case on an edge, the clause the reference raises for it (None: valid) and the entry it names."""

    case: Case
    clause: str | None
    where: Where = frozenset()


def _row(holes: int, pages: list[int], width: int, tail_pad: int = -1) -> list[int]:
    return [NULL_PAGE] * holes + pages + [tail_pad] * (width - holes - len(pages))


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
    mode = "decode" if n == 1 else pick(draw, ("verify", "reanchor"))
    seq = first + n
    end = ceil_div(seq, ps)
    width = end + draw(between(0, 2))
    spec = GroupSpec("swa0", "sliding", ps, window=window)
    table = [_row(col + 1, list(range(10, 10 + end - col - 1)), width)]
    batch = Batch((seq,), mode=mode, n=n)
    return Edge(Case((spec,), {"swa0": table}, batch), "T5", frozenset({("swa0", 0, col)}))


def _rejects_window_start(ctx: Context, edge: Edge) -> None:
    case = edge.case
    expect_raises("T5", f"group_locs with the window of row 0 starting mid-page: {case.tables['swa0'][0]}",
                  lambda: ctx.debug_backend.group_locs(list(case.specs), case.tensors(), case.batch),
                  where=edge.where)


@st.composite
def _hole_before_page_one(draw: st.DrawFn) -> Case:
    """Valid: row 0 of a sliding group opens with a hole (its window starts past column 0) while row 1
    writes page 1. A page-sharing check that keys the hole by a number a real page can have sees page 1
    twice."""
    ps = pick(draw, (1, 2, 4))
    window = draw(between(1, ps))
    seq0 = ps + window + draw(between(0, ps))  # reads from position seq0 - window >= ps: column 0 is free
    seq1 = draw(between(1, ps))
    end0 = ceil_div(seq0, ps)
    width = end0 + draw(between(0, 1))
    spec = GroupSpec("swa0", "sliding", ps, window=window)
    table = [_row(1, list(range(2, 2 + end0 - 1)), width), _row(0, [1], width)]
    return Case((spec,), {"swa0": table}, Batch((seq0, seq1)))


def _debug_accepts_hole_before_page_one(ctx: Context, case: Case) -> None:
    check_group_locs(ctx, ctx.debug_backend, case, "T7")


def _top_page(ps: int) -> int:
    """W5's largest page id at page size ``ps``: its last slot is ``2^31 - 1``."""
    return PAGE_LIMIT // ps - 1


@st.composite
def _w5_edge(draw: st.DrawFn) -> tuple[Case, Case]:
    """The largest legal page id in a written column (valid), and the same case with the next id (W5)."""
    ps = pick(draw, (2, 4, 8, 16))
    seq = draw(between(1, 3 * ps))
    end = ceil_div(seq, ps)
    col = draw(between(0, end - 1))
    pages = [_top_page(ps) if c == col else 5 + c for c in range(end)]
    width = end + draw(between(0, 1))
    spec = GroupSpec("full0", "full", ps)
    prefix = draw(between(0, seq))
    batch = Batch((seq,)) if draw(BOOLEANS) else Batch.extend((prefix,), (seq - prefix,))
    legal = Case((spec,), {"full0": [_row(0, pages, width)]}, batch)
    over = [p + 1 if c == col else p for c, p in enumerate(pages)]
    return legal, Case((spec,), {"full0": [_row(0, over, width)]}, batch)


def _w5_exact_edge(ctx: Context, pair: tuple[Case, Case]) -> None:
    legal, over = pair
    check_group_locs(ctx, ctx.backend, legal, "W5")
    check_group_locs(ctx, ctx.debug_backend, legal, "W5")
    top = _top_page(over.spec("full0").block_granularity)
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
    """W5: page 1's slots end at ``2 * ps - 1 > 2^31 - 1``: no real page is addressable; refused in any mode.
    The reference that judges it must accept 2^30 itself, the largest page size W5 allows (its locations at 2^30
    are the large-page kernel properties' to judge: the reference lists a row's slots, 2^30 per page)."""
    try:
        check_page_size(2**30, group="full0")
    except ContractViolation as err:
        raise Mismatch("W5", f"the reference refuses page size 2^30, the largest W5 allows: {err}",
                       kind="reference refuses the W5 edge") from err
    grouped, lone = calls(ctx, case.batch.mode)
    if grouped:
        check_group_locs(ctx, ctx.backend, case, "W5")
    if lone:
        check_lone(ctx, ctx.backend, case, "W5")


@dataclass(frozen=True)
class Mirrors:
    """A one-row extend case and its CPU mirrors as handed over: numpy integers, one float, or the extend
    mirror one bare number instead of a sequence."""

    case: Case
    prefix: list
    extend: object

    @property
    def valid(self) -> bool:
        return isinstance(self.extend, list) and not any(isinstance(v, float) for v in (*self.prefix, *self.extend))


@st.composite
def _numpy_lengths(draw: st.DrawFn) -> Mirrors:
    """Extend lengths as numpy integers (valid), the extend length a float (T9), or the extend mirror the
    bare length, not a sequence (T9)."""
    ps = pick(draw, (1, 2, 4))
    prefix, extend = draw(between(0, 2 * ps)), draw(between(0, 2 * ps))
    end = max(ceil_div(prefix + extend, ps), 1)
    batch = Batch.extend((prefix,), (extend,))
    case = Case((GroupSpec("full0", "full", ps),), {"full0": [_row(0, list(range(3, 3 + end)), end + 1)]}, batch)
    kind = pick(draw, (numpy.int64, numpy.int32, numpy.int16, int))
    shape = pick(draw, ("ints", "float", "bare"))
    mirror = {"ints": [kind(extend)], "float": [float(extend)], "bare": kind(extend)}[shape]
    return Mirrors(case, [kind(prefix)], mirror)


def _numpy_length_mirrors(ctx: Context, m: Mirrors) -> None:
    """T9: lengths are a sequence of integers (python or numpy; never floats, never one bare number); numpy
    mirrors give the same locations."""
    if not m.valid and not ctx.profile.backend_validates:
        reject()  # a float or bare length is no input the engine's scheduler ever hands over: not a finding
    ps = m.case.spec("full0").block_granularity
    tensor = m.case.tensors()["full0"]
    what = f"extend_locs with lengths {m.prefix!r}, {m.extend!r}"
    expected = outcome(lambda: ctx.profile.extend_locs(m.case.tables["full0"], m.prefix, m.extend, ps))
    if expected.raised == m.valid:
        raise AssertionError(f"the reference {'refuses' if m.valid else 'accepts'} {what}")
    try:
        judge("T9", what, expected, lambda: ctx.backend.extend_locs(tensor, m.prefix, m.extend, ps),
              tensor_compare(ctx, "T9", what))
    except Mismatch as err:
        if err.tier:
            raise
        # a float or bare length accepted: a missing refusal, strictness as in every rejects/* property (the vLLM-style
        # example validates nothing and must pass safety and correctness)
        raise Mismatch(err.clause, str(err).split("] ", 1)[1], tier=STRICTNESS, kind=err.kind) from err


@st.composite
def _idle_row_past_width(draw: st.DrawFn) -> Case:
    """Extend over two groups of different reach: one request with extend 0 whose prefix lies past a group's
    columns (it writes and needs nothing: T8 asks nothing of it) beside requests that write."""
    sizes = [pick(draw, (1, 2, 4)) for _ in range(2)]
    rows = draw(between(2, 3))
    idle = draw(between(0, rows - 1))
    prefix = [draw(between(0, 4)) for _ in range(rows)]
    extend = [0 if r == idle else draw(between(1, 4)) for r in range(rows)]
    needed = [max(ceil_div(p + e, ps) for p, e in zip(prefix, extend, strict=True) if e) for ps in sizes]
    widths = [need + draw(between(0, 1)) for need in needed]
    prefix[idle] = min(w * ps for w, ps in zip(widths, sizes, strict=True)) + draw(between(1, 6))
    specs = tuple(GroupSpec(f"full{g}", "full", ps) for g, ps in enumerate(sizes))
    tables = {s.group_id: [list(range(10 + 10 * r, 10 + 10 * r + w)) for r in range(rows)]
              for s, w in zip(specs, widths, strict=True)}
    return Case(specs, tables, Batch.extend(tuple(prefix), tuple(extend)))


def _idle_row_locs(ctx: Context, case: Case) -> None:
    """W3: the writing requests' locations in every group, as the reference gives them."""
    check_group_locs(ctx, ctx.backend, case, "W3")


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
    mode = pick(draw, ("decode", "verify", "extend") if seq >= n else ("decode", "extend"))
    if mode == "extend":
        prefix = draw(between(0, seq))
        batch = Batch.extend((prefix,), (seq - prefix,))
    else:
        batch = Batch((seq,), mode=mode, n=n if mode == "verify" else 1)
    specs = tuple(GroupSpec(f"full{g}", "full", ps) for g, ps in enumerate(sizes))
    tables = {s.group_id: [_row(0, list(range(3, 3 + ceil_div(seq, s.block_granularity))),
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


_LARGE_PAGE_SIZES = (2**20, 2**24, 2**26, 2**28, 2**30)


@st.composite
def _zero_width_grouped_locs(draw: st.DrawFn) -> GroupedLocsCase:
    """``grouped_locs`` with one group's table column-less (the Kernels protocol allows it: all its tokens
    sink into page 0); the other groups as drawn."""
    case = draw(grouped_locs_cases())
    empty = draw(between(0, len(case.tables) - 1))
    return replace(case, tables=[[[] for _ in t] if g == empty else t for g, t in enumerate(case.tables)])


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
        GraphHarness(ctx, replace(setup, **{field: size})).init()


def _large_entry(draw: st.DrawFn, ps: int) -> int:
    """A pad, a hole, or a real page inside W5 at page size ``ps`` (page 1 only, at 2^30)."""
    kind = draw(between(0, 2))
    return (-1, NULL_PAGE)[kind] if kind < 2 else draw(between(1, _top_page(ps)))


@st.composite
def _large_grouped_extend(draw: st.DrawFn) -> GroupedCase:
    """``grouped_extend_locs`` at page sizes 2^20-2^30: the spans of later requests pass 2^31. Half the time the
    edge of many blocks: 8 requests at page size 2^28, each crossing its first page boundary (16 blocks of 2^28
    tokens pass 2^31 with every position below 2^29)."""
    cross = draw(BOOLEANS)
    requests, groups = (8, 1) if cross else (draw(between(2, 3)), draw(between(1, 2)))
    page_sizes = [2**28] if cross else [pick(draw, _LARGE_PAGE_SIZES) for _ in range(groups)]
    widths = [draw(between(2 if cross else 1, 3)) for _ in range(groups)]
    tables = [[[_large_entry(draw, ps) for _ in range(w)] for _ in range(requests)]
              for ps, w in zip(page_sizes, widths, strict=True)]
    reach = min(w * ps for w, ps in zip(widths, page_sizes, strict=True))
    if cross:
        prefix, extend = [2**28 - 1] * requests, [2] * requests
    else:
        extend = [draw(between(0, 3)) for _ in range(requests)]
        prefix = [reach - e - draw(between(0, 5)) if draw(BOOLEANS) else draw(between(0, 3)) for e in extend]
        prefix = [max(p, 0) for p in prefix]
        extend = [min(e, reach - p) for p, e in zip(prefix, extend, strict=True)]
    cap = sum(extend) + draw(between(0, 2))
    return GroupedCase(tables, page_sizes, prefix, extend, cap, draw_layouts(draw, [2] * (groups + 1)))


@st.composite
def _large_grouped_locs(draw: st.DrawFn) -> GroupedLocsCase:
    """``grouped_locs`` at page sizes 2^20-2^30, lengths near the last column and past the width."""
    bs, n, groups = draw(between(1, 3)), draw(between(1, 3)), draw(between(1, 2))
    page_sizes = [pick(draw, _LARGE_PAGE_SIZES) for _ in range(groups)]
    widths = [draw(between(1, 3)) for _ in range(groups)]
    tables = [[[_large_entry(draw, ps) for _ in range(w)] for _ in range(bs)]
              for ps, w in zip(page_sizes, widths, strict=True)]
    top = min(max(w * ps for w, ps in zip(widths, page_sizes, strict=True)) + 2, INT32_MAX)
    seq = [min(top - draw(between(0, 4)), INT32_MAX) if draw(BOOLEANS) else draw(between(1, 4)) for _ in range(bs)]
    lay = draw_layouts(draw, [2] * groups + [1, 2])
    return GroupedLocsCase(tables, page_sizes, seq, bs, n, bs * n, lay)


PROPERTIES = (
    Property("rejects/T5-window-start", "T5", "debug mode: a hole in the column where a sliding window starts "
             "mid-page is refused, naming that column", _window_start_mid_page(), _rejects_window_start,
             debug=True, tier=STRICTNESS, needs=("group_locs",)),
    Property("debug/hole-before-page-one", "T7", "debug mode accepts a row opening with a hole beside a row "
             "that writes page 1", _hole_before_page_one(), _debug_accepts_hole_before_page_one, debug=True,
             needs=("group_locs",)),
    Property("rejects/W5-edge", "W5", "the largest page id W5 allows gives its locations in any mode; the next "
             "one is refused in debug mode, naming its entry", _w5_edge(), _w5_exact_edge, debug=True,
             tier=STRICTNESS, needs=("group_locs",)),
    Property("rejects/page-size-past-2^30", "W5", "a page size above 2^30 (no real page has int32 slots) is "
             "refused in any mode, and the reference accepts 2^30 itself", _page_size_past_2_30(),
             _rejects_huge_page_size, tier=STRICTNESS,
             not_applicable=NeedsAny(("group_locs", "decode_locs", "extend_locs"))),
    Property("lengths/numpy-ints", "T9", "extend lengths that are numpy integers give the same locations; "
             "a float length, or a bare number for the mirror, is refused", _numpy_lengths(), _numpy_length_mirrors,
             needs=("extend_locs",)),
    Property("rejects/T1-devices", "T1", "tables of one batch on two devices (one on meta) are refused in any "
             "mode", _tables_on_two_devices(), _rejects_two_devices, tier=STRICTNESS, needs=("group_locs",),
             not_applicable=BreachesHeld(("T1",), cheap=True)),
    Property("group_locs/idle-row-past-width", "W3", "extend over groups of different reach: a request with "
             "extend 0 past a group's columns writes nothing and leaves the others' locations as they are",
             _idle_row_past_width(), _idle_row_locs, needs=("group_locs",)),
    Property("kernels/zero-width", "G4", "backend.kernels' fixed-count fast path with one group's table "
             "column-less: its tokens sink into page 0", _zero_width_grouped_locs(), check_grouped_locs,
             not_applicable=missing_grouped_locs),
    Property("rejects/G1-sizes", "G1", "graph init refuses max_bs, max_kernel_pages or spec_n below 1",
             _graph_sizes_below_one(), _rejects_graph_sizes, tier=STRICTNESS, needs=("graph",)),
    Property("kernels/large-page-extend", "W3", "backend.kernels' extend fast path at page sizes 2^20-2^30 "
             "(spans past 2^31) equals the stacked kernel", _large_grouped_extend(), check_grouped_extend_locs,
             not_applicable=missing_grouped_extend),
    Property("kernels/large-page-locs", "G4", "backend.kernels' fixed-count fast path at page sizes 2^20-2^30, "
             "lengths near and past the width", _large_grouped_locs(), check_grouped_locs,
             not_applicable=missing_grouped_locs),
)
