"""CUDA-graph runners (G1-G5): setups, captures, valid replays, and a replay again with fresh page ids."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from hypothesis import reject
from hypothesis import strategies as st

from kvtable.reference import GraphModel, GroupSpec
from kvtable.reference.model import Table
from kvtable.strategies.batches import (
    KERNEL_PAGE_SIZES,
    MAX_N,
    CaseOptions,
    as_tensor,
    ceil_div,
    draw_case,
    draw_group_specs,
)
from kvtable.strategies.domain import current
from kvtable.strategies.draws import between, digits, pick, rng, within


@dataclass(frozen=True)
class GraphSetup:
    """The arguments of ``backend.graph``."""

    specs: tuple[GroupSpec, ...]
    max_bs: int
    max_kernel_pages: int
    kernel_page_size: int
    spec_n: int
    tail_pad: int
    expand: bool

    @property
    def attention(self) -> tuple[GroupSpec, ...]:
        return tuple(sorted((s for s in self.specs if not s.is_state), key=lambda s: s.group_id))

    def source_width(self, spec: GroupSpec) -> int:
        """G1: a group's buffer width in its own block pages, ``ceil(max_kernel_pages * K / B)``."""
        return ceil_div(self.max_kernel_pages * self.kernel_page_size, spec.block_granularity)

    def kwargs(self) -> dict[str, Any]:
        return {"max_bs": self.max_bs, "max_kernel_pages": self.max_kernel_pages,
                "kernel_page_size": self.kernel_page_size, "spec_n": self.spec_n, "tail_pad": self.tail_pad,
                "expand": self.expand}


@dataclass(frozen=True)
class Replay:
    """One replay: padded ``bs``, the tables delivered (maybe fewer rows, maybe state ones), the seq_lens."""

    bs: int
    tables: Mapping[str, Table]
    seq_lens: tuple[int, ...]
    tokens_per_req: int
    actual_bs: int | None
    live_seq: tuple[int, ...]
    """The lengths that rows ``[0, bs)`` hold after this replay (1 for the zero-filled dummy rows)."""

    def tensors(self) -> dict[str, torch.Tensor]:
        return {gid: as_tensor(t, 1) for gid, t in self.tables.items()}

    def seq_tensor(self) -> torch.Tensor:
        return torch.tensor(self.seq_lens, dtype=torch.int32)


def draw_setup(draw: st.DrawFn) -> GraphSetup:
    """A runner's arguments; its buffers hold at least one verify step of ``spec_n`` tokens (no engine has less).
    The kernel page size, ``spec_n``, ``max_kernel_pages``, ``max_bs``, tail pad and expansion in two packed
    draws, then the groups. The tail pad is one the running domain's tables hold."""
    pads = current().tail_pads
    k_at, n_at, pages_at, bs_at, pad_at, expand = digits(draw, [len(KERNEL_PAGE_SIZES), MAX_N, 12, 5,
                                                                 len(pads), 2])
    k, spec_n = KERNEL_PAGE_SIZES[k_at], 1 + n_at
    specs = draw_group_specs(draw, k)
    return GraphSetup(specs, 1 + bs_at, within(pages_at, ceil_div(spec_n, k), 12), k, spec_n, pads[pad_at],
                      bool(expand))


@st.composite
def graph_setups(draw: st.DrawFn) -> GraphSetup:
    return draw_setup(draw)


def _sliding_at_ratio(draw: st.DrawFn, setup: GraphSetup) -> GraphSetup:
    """``setup`` with its first sliding group (one is added if there is none) at ratio 2 or 4, expanded."""
    k = setup.kernel_page_size
    ratio, window = digits(draw, [2, 8 * k])
    specs = list(setup.specs)
    at = next((i for i, s in enumerate(specs) if s.family == "sliding"), None)
    block = k * (2, 4)[ratio]
    sliding = GroupSpec("swa9" if at is None else specs[at].group_id, "sliding", block, 1 + window % (4 * block))
    if at is None:
        specs.append(sliding)
    else:
        specs[at] = sliding
    return replace(setup, specs=tuple(specs), expand=True)


@dataclass(frozen=True)
class ReanchorViews:
    """A runner with a sliding group at ratio > 1, one valid replay, then re-anchors of ``n`` on its views."""

    setup: GraphSetup
    replay: Replay
    n: int
    seed: int


@st.composite
def reanchor_view_cases(draw: st.DrawFn) -> ReanchorViews:
    """A draft re-anchor on captured views where the views hold kernel pages of a sliding group at ``r > 1``
    (the case a re-anchor that reads the view in scheduler pages gets wrong): every example has one."""
    setup = _sliding_at_ratio(draw, draw_setup(draw))
    step = draw_replay(draw, setup, min_live=1)
    return ReanchorViews(setup, step, draw(between(1, MAX_N)), draw(between(0, 2**16)))


_DELIVERIES = ("padded", "live rows only", "garbage dummy rows")
_GARBAGE = (-1, 5, 7)


def draw_replay(draw: st.DrawFn, setup: GraphSetup, *, bs: int | None = None, min_live: int = 0) -> Replay:
    """A replay the reference accepts: every live position falls on a real page inside the buffer (at least
    ``min_live`` live rows)."""
    bs = bs or draw(between(1, setup.max_bs))
    attention = setup.attention
    limit = min(setup.source_width(s) * s.block_granularity for s in attention)
    # each group's buffer width (-2..2 around its source width), N and the delivery in packed draws; N and
    # the delivery come first, so that every draw is a valid replay (nothing is drawn to be rejected): N never
    # exceeds what the narrowest buffer holds, and live rows only come with at least one live row
    *spreads, n_at, delivery_at = digits(draw, [5] * len(attention) + [setup.spec_n, len(_DELIVERIES)])
    widths = {s.group_id: max(1, setup.source_width(s) + d - 2) for s, d in zip(attention, spreads, strict=True)}
    limit = min(limit, *(w * s.block_granularity for s, w in zip(attention, widths.values(), strict=True)))
    n = within(n_at, 1, min(setup.spec_n, limit))
    delivery = _DELIVERIES[delivery_at]
    case = draw_case(draw, CaseOptions(
        modes=("verify",), specs=setup.specs, kernel_page_size=setup.kernel_page_size, bs=bs, n=n, max_seq=limit,
        widths=widths, min_live=max(min_live, int(delivery == "live rows only"))))
    live = case.batch.live_rows
    tables: dict[str, Table] = {gid: [list(r) for r in t] for gid, t in case.tables.items()}
    actual_bs = case.batch.actual_bs
    garbage = delivery == "garbage dummy rows" and actual_bs is not None
    # whether state tables travel along (the runner ignores them), up to two seq_lens past bs, the garbage in
    # each dummy row: packed draws
    along, extra, *rest = digits(draw, [2, 3, 9, 9] + [len(_GARBAGE)] * (len(widths) * (bs - live) * garbage))
    if delivery == "live rows only":  # the runner pads the dummy rows itself
        tables = {gid: t[:live] if gid in widths else t for gid, t in tables.items()}
        actual_bs = None
    elif garbage:
        fills = iter(rest[2:])
        for gid in widths:
            for row in tables[gid][live:bs]:
                row[:] = [_GARBAGE[next(fills)]] * len(row)
    if not along:
        tables = {gid: t for gid, t in tables.items() if gid in widths}
    seq = case.batch.seq_lens + tuple(1 + v for v in rest[:extra])
    live_seq = case.batch.seq_lens[:live] + (1,) * (bs - live)
    return Replay(bs, tables, seq, n, actual_bs, live_seq)


@st.composite
def replays(draw: st.DrawFn, setup: GraphSetup, *, bs: int | None = None) -> Replay:
    return draw_replay(draw, setup, bs=bs)


Capture = tuple[int, tuple[str, ...], int]
"""The arguments of ``runner.capture``: bs, group ids, tokens per request."""


def draw_capture(draw: st.DrawFn, setup: GraphSetup, *, min_groups: int = 0) -> Capture:
    """A capture inside the allocation: bs in [1, max_bs], distinct declared groups (state ones too), N <= spec_n."""
    ids = [s.group_id for s in setup.specs]
    count, *picks, bs_at, n_at = digits(draw, [len(ids) - min_groups + 1, *[len(ids)] * len(ids), setup.max_bs,
                                              setup.spec_n])
    chosen = tuple(dict.fromkeys(ids[i] for i in picks[:min_groups + count]))
    return 1 + bs_at, chosen, 1 + n_at


@dataclass(frozen=True)
class GraphCase:
    setup: GraphSetup
    captures: tuple[tuple[int, tuple[str, ...], int], ...]
    replay: Replay


def draw_graph_case(draw: st.DrawFn, *, min_live: int = 0) -> GraphCase:
    """A graph setup, a few captures (bs, group ids, tokens per request) and one valid replay."""
    setup = draw_setup(draw)
    captures = tuple(draw_capture(draw, setup) for _ in range(draw(between(1, 3))))
    return GraphCase(setup, captures, draw_replay(draw, setup, min_live=min_live))


@st.composite
def graph_cases(draw: st.DrawFn) -> GraphCase:
    return draw_graph_case(draw)


def repage(setup: GraphSetup, step: Replay, rand: random.Random) -> Replay:
    """``step`` again (same bs, N, actual_bs, seq_lens and table shapes) with every real page id of every
    attention table swapped for a fresh one: a replay a runner may not tell from ``step`` by shape alone.

    The renaming is one-to-one per group, so sharing, holes and pads keep their places and the replay
    stays valid; fresh ids are small, inside the W5 range of any block size.
    """
    attention = {s.group_id for s in setup.attention}
    tables: dict[str, Table] = {}
    for gid, table in step.tables.items():
        used = sorted({p for row in table for p in row if p > 0})
        if gid not in attention or not used:
            tables[gid] = table
            continue
        pool = sorted(set(range(1, 2 * len(used) + 64)) - set(used))
        rename = dict(zip(used, rand.sample(pool, len(used)), strict=True))
        tables[gid] = [[rename.get(p, p) for p in row] for row in table]
    return replace(step, tables=tables)


@st.composite
def repaged(draw: st.DrawFn, setup: GraphSetup, step: Replay) -> Replay:
    """:func:`repage` with a drawn seed."""
    return repage(setup, step, rng(draw))


@dataclass(frozen=True)
class StaleSeq:
    """A valid graph case whose replay then comes again with row ``row`` at a stale ``seq_len``."""

    case: GraphCase
    row: int
    seq_len: int
    on_pad: bool
    """Some token of the stale row falls on a pad entry (-1 or 0) inside every group's buffer width, as a
    stale length inside the width does (the -2 of a kernel without the negative-page clamp); otherwise
    the length reaches past every group's buffer."""


def live_rows(step: Replay, group_ids: Sequence[str]) -> int:
    """G3: the rows a replay fills from its tables, ``min(bs, rows delivered, actual_bs)``."""
    return min(step.bs, *(len(step.tables[g]) for g in group_ids),
               step.bs if step.actual_bs is None else step.actual_bs)


def _pad_lengths(setup: GraphSetup, step: Replay, row: int, lengths: range) -> list[int]:
    """The lengths of ``lengths`` whose last token falls on a pad entry of ``row`` in some group's buffer
    (as the model fills it from ``step``): -1 pads first, then 0 pads where a -1 is never reached."""
    model = GraphModel(setup.specs, **setup.kwargs())
    staged = model.replay_fill(step.tables, step.bs, step.actual_bs)
    hits: dict[int, list[int]] = {-1: [], 0: []}
    for seq in lengths:
        entries = {staged[gid][row][(seq - 1) // group.page_size] for gid, group in model.groups.items()}
        for pad in hits:
            if pad in entries and (pad == -1 or not hits[-1]):
                hits[pad].append(seq)
    return hits[-1] or hits[0]


def draw_stale_seq(draw: st.DrawFn) -> StaleSeq:
    """A stale length for one live row: usually on a pad inside every buffer's width (tail pad -1 mostly),
    else past every buffer."""
    gc = draw_graph_case(draw, min_live=1)
    if draw(between(0, 3)):
        gc = replace(gc, setup=replace(gc.setup, tail_pad=-1))
    step, setup = gc.replay, gc.setup
    row = draw(between(0, live_rows(step, [s.group_id for s in setup.attention]) - 1))
    capacity = min(setup.source_width(s) * s.block_granularity for s in setup.attention)
    reach = max(setup.source_width(s) * s.block_granularity for s in setup.attention)
    inside = _pad_lengths(setup, step, row, range(step.seq_lens[row] + 1, capacity + 1)) if draw(between(0, 3)) else []
    if inside:
        return StaleSeq(gc, row, pick(draw, inside), True)
    return StaleSeq(gc, row, reach + draw(between(1, 64)), False)


@st.composite
def stale_seq_cases(draw: st.DrawFn) -> StaleSeq:
    return draw_stale_seq(draw)


def draw_short_row(draw: st.DrawFn, setup: GraphSetup) -> Replay:
    """A replay with one live row at seq_len 0 (T9, where the profile's scheduler builds one) or, at N > 1, shorter
    than N (W2): the reference refuses
    it, an engine that clamps short rows (tokenspeed) writes position 0 of the row's own page."""
    step = draw_replay(draw, setup, min_live=1)
    row = draw(between(0, live_rows(step, [s.group_id for s in setup.attention]) - 1))
    seq = list(step.seq_lens)
    lowest = 0 if current().zero_length_rows else 1  # a live row at seq_len 0 only where the scheduler builds one
    if step.tokens_per_req - 1 < lowest:
        reject()
    seq[row] = draw(between(lowest, step.tokens_per_req - 1))
    live_seq = list(step.live_seq)
    live_seq[row] = max(seq[row], 1)
    return replace(step, seq_lens=tuple(seq), live_seq=tuple(live_seq))


@st.composite
def short_row_cases(draw: st.DrawFn) -> tuple[GraphCase, Replay]:
    """A graph case and, for its runner, a replay with one short live row (:func:`draw_short_row`)."""
    gc = draw_graph_case(draw)
    return gc, draw_short_row(draw, gc.setup)
