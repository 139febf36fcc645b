"""One backend graph runner and one ``reference.GraphModel``, stepped together and compared after every step.

``GraphHarness`` compares the runner's persistent buffers with the model's over their full extent:
rows and entries the step must leave alone are compared too (a ``scribble`` step fills everything
with a sentinel first, so "untouched" is visible). Buffer identity is checked by data pointer:
buffers never move, and capture views alias them. The stale deliveries (``STALE_KINDS``) and the
steps outside the allocation (``BAD_STEPS``) are written here once, for the graph properties and the
``GraphProtocol`` state machine alike.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import replace
from enum import Enum
from typing import Any, Final

import torch

from kvtable.conformance.calls import loc_dtypes
from kvtable.conformance.checks import Mismatch, check_tensor, first_difference, judge, reference_outcome
from kvtable.conformance.core import Context
from kvtable.conformance.levels import CORRECTNESS, SAFETY, STRICTNESS
from kvtable.errors import ContractViolation, Unsupported
from kvtable.reference import NULL_PAGE, GraphModel
from kvtable.reference.safety import token_positions
from kvtable.strategies import GraphSetup, Replay, as_tensor

SENTINEL = 77
"""Written over every buffer by ``scribble``: not 0 (the dummy page), not a tail pad, a valid page id."""
STALE_KINDS = ("none", "empty dict", "missing group", "extra group", "empty table", "only state")
"""G5: deliveries a replay must refuse before writing anything."""
BAD_STEPS = ("capture bs 0", "capture bs > max_bs", "capture N > spec_n", "capture unknown group", "replay bs 0",
             "replay bs > max_bs", "replay N > spec_n", "replay short seq_lens")
"""G2-G4: capture and replay sizes outside what the buffers were allocated for, and unknown groups."""
class _Delivery(Enum):
    OWN_TABLES = "own tables"


OWN_TABLES: Final = _Delivery.OWN_TABLES
"""``GraphHarness.replay``'s default delivery: the step's own tables (None is the stale delivery of no tables)."""
ACCEPTED = "accepted broken input"
"""The kind ``checks.judge`` gives a backend that accepts what the reference refuses."""


class GraphHarness:
    """One backend graph runner and its reference model, stepped together and compared after each step."""

    def __init__(self, ctx: Context, setup: GraphSetup) -> None:
        self.ctx = ctx
        self.setup = setup
        self.expected_init = reference_outcome(lambda: ctx.profile.graph_model(setup.specs, **setup.kwargs()))
        self.model: GraphModel | None = self.expected_init.value
        self.runner: Any = None
        self.pointers: dict[tuple[str, str], int] = {}
        self.views: list[tuple[int, int, dict[str, torch.Tensor], dict[str, torch.Tensor]]] = []
        self.live_seq = [1] * setup.max_bs
        self.last: Replay | None = None
        """The last replay accepted with its own tables (``replay_again`` repeats its shape)."""
        self.allocated: set[str] = set()
        """Groups whose runner buffers exist and are compared (all from init, or each from its first capture)."""

    def captured_all(self) -> bool:
        """Every attention group has its buffers (always, unless the profile's engine allocates at first capture)."""
        return self.ctx.profile.buffers_at_init or (self.model is not None and set(self.model.groups) <= self.allocated)

    # -- G1 ---------------------------------------------------------------------------------------
    def init(self) -> None:
        """G1: allocate; the buffers match the model's shapes, dtype, device and zero contents.

        Under a profile whose engine allocates at first capture (``buffers_at == "first-capture"``), a
        group may have no buffers yet: it is compared from its first capture on (``allocate``).
        """
        self.runner = judge("G1", "graph init", self.expected_init,
                            lambda: self.ctx.backend.graph(list(self.setup.specs), **self.setup.kwargs()),
                            lambda _g, _e: None)
        if self.model is None:
            return
        lazy = not self.ctx.profile.buffers_at_init
        for kind, buffers in self._buffer_dicts():
            names = sorted(buffers)
            if set(names) - set(self.model.groups) or (names != sorted(self.model.groups) and not lazy):
                raise Mismatch("T6" if set(names) - set(self.model.groups) else "G1",
                               f"{kind} for groups {names}, expected the non-state groups "
                               f"{sorted(self.model.groups)}" + (" (or, allocated lazily, some of them)" if lazy
                                                                 else ""))
        for gid in sorted(self.runner.table_buffers):
            self._adopt("G1", gid)
        self.check_buffers("G1", "G1")

    def _adopt(self, clause: str, gid: str) -> None:
        """Start comparing ``gid``'s buffers: both exist, int32, the model's shapes; their pointers are kept."""
        assert self.model is not None
        group = self.model.groups[gid]
        for kind, buffers in self._buffer_dicts():
            buf = buffers.get(gid)
            if not isinstance(buf, torch.Tensor) or buf.dtype != torch.int32:
                raise Mismatch(clause, f"{kind}[{gid!r}] is not an int32 tensor"
                               + ("" if buf is not None else " (it is missing)"))
            self.pointers[(kind, gid)] = buf.data_ptr()
        shape = tuple(self.runner.table_buffers[gid].shape)
        if shape != (self.setup.max_bs, len(group.table[0])):
            raise Mismatch(clause, f"table_buffers[{gid!r}] has shape {shape}, expected "
                           f"{(self.setup.max_bs, len(group.table[0]))} (width ceil(max_kernel_pages*K/B)*r)")
        shape = tuple(self.runner.loc_buffers[gid].shape)
        if shape not in self._loc_shapes(len(group.locs)):
            raise Mismatch(clause, f"loc_buffers[{gid!r}] has shape {shape}, expected ({len(group.locs)},) "
                           "= max_bs * spec_n" + ("" if self.ctx.profile.buffers_at_init else
                                                  " (allocated lazily: max_bs * the tokens per request captured)"))
        self.allocated.add(gid)

    def _loc_shapes(self, full: int) -> list[tuple[int]]:
        """The location buffer shapes G1/G2 accept: ``max_bs * spec_n``; an engine allocating at first capture may
        size it ``max_bs * N`` for the tokens per request of its captures so far (tokenspeed's seed mixin)."""
        if self.ctx.profile.buffers_at_init:
            return [(full,)]
        return [(self.setup.max_bs * n,) for n in range(1, self.setup.spec_n + 1)]

    def allocate(self, gid: str) -> None:
        """G1 at a group's first capture (lazy engines): its buffers now exist and hold zeros, as the model's do.

        Replays before this capture wrote only the groups already allocated; a graph captured now reads
        the fresh zeros (page 0, the sink) until the next replay.
        """
        assert self.model is not None
        group = self.model.groups[gid]
        for row in group.table:
            row[:] = [NULL_PAGE] * len(row)
        group.locs[:] = [0] * len(group.locs)
        self._adopt("G2", gid)

    def _buffer_dicts(self) -> tuple[tuple[str, dict[str, torch.Tensor]], ...]:
        return (("table_buffers", self.runner.table_buffers), ("loc_buffers", self.runner.loc_buffers))

    # -- comparisons ------------------------------------------------------------------------------
    def check_buffers(self, table_clause: str = "G3", loc_clause: str = "G4") -> None:
        """Every entry of every buffer equals the model's, and no buffer moved (G2 pointer stability)."""
        assert self.model is not None
        for kind, buffers in self._buffer_dicts():
            for gid, buf in buffers.items():
                if buf.data_ptr() != self.pointers.setdefault((kind, gid), buf.data_ptr()):
                    raise Mismatch("G2", f"{kind}[{gid!r}] moved: data_ptr changed since it was allocated "
                                   "(captured graphs would read the old storage)")
        for gid, group in self.model.groups.items():
            if gid not in self.allocated:
                continue  # allocated lazily and not captured yet: no graph reads it, nothing to compare
            got = self.runner.table_buffers[gid].tolist()
            if got != group.table:
                row = next(r for r, (g, e) in enumerate(zip(got, group.table, strict=True)) if g != e)
                where = "a row >= bs, which replay must leave untouched" if row >= self._last_bs else "a row < bs"
                raise Mismatch(table_clause, f"table_buffers[{gid!r}] row {row} ({where}): "
                               f"{first_difference(got[row], group.table[row])}\n  got      {got[row]}\n"
                               f"  expected {group.table[row]}")
            got_locs = self.runner.loc_buffers[gid].tolist()
            want_locs = group.locs[: len(got_locs)]  # a lazily sized buffer covers the tokens it was captured for
            if got_locs != want_locs:
                i = next(i for i, (g, e) in enumerate(zip(got_locs, want_locs, strict=True)) if g != e)
                where = ("an entry >= bs*N, which replay must leave untouched" if i >= self._last_locs
                         else "an entry < bs*N")
                raise Mismatch(loc_clause, f"loc_buffers[{gid!r}] index {i} ({where}): got {got_locs[i]}, "
                               f"expected {want_locs[i]}\n  got      {got_locs}\n  expected {want_locs}")

    _last_bs = 0
    _last_locs = 0

    def check_views(self) -> None:
        """G2: every view handed out so far still aliases its buffer and shows its current contents."""
        for bs, tpr, tables, locs in self.views:
            for gid, view in tables.items():
                buf = self.runner.table_buffers[gid]
                if view.data_ptr() != buf.data_ptr() or view.stride() != buf.stride():
                    raise Mismatch("G2", f"captured table view of {gid!r} at bs={bs} does not alias "
                                   "table_buffers (different data_ptr or strides)")
                if tuple(view.shape) != (bs, buf.shape[1]):
                    raise Mismatch("G2", f"captured table view of {gid!r} has shape {tuple(view.shape)}, "
                                   f"expected {(bs, buf.shape[1])}")
            for gid, view in locs.items():
                buf = self.runner.loc_buffers[gid]
                if view.data_ptr() != buf.data_ptr() or tuple(view.shape) != (bs * tpr,):
                    raise Mismatch("G2", f"captured loc view of {gid!r} at bs={bs}, N={tpr}: shape "
                                   f"{tuple(view.shape)} (expected {(bs * tpr,)}) or data_ptr differs from "
                                   "loc_buffers")

    # -- G2 ---------------------------------------------------------------------------------------
    def capture(self, bs: int, group_ids: Sequence[str], tokens_per_req: int) -> int | None:
        """G2: capture on both sides; the index of the views handed out in ``views`` (None: refused or none)."""
        assert self.model is not None
        model = self.model
        expected = reference_outcome(lambda: model.capture(bs, list(group_ids), tokens_per_req))

        def compare(got: Any, want: Any) -> None:
            if not isinstance(got, tuple) or len(got) != 2:
                raise Mismatch("G2", f"capture returned {type(got).__name__}, expected (tables, locs)")
            want_tables, _ = want
            if want_tables is None:
                if got != (None, None):
                    raise Mismatch("T6" if group_ids else "G2", f"capture of {list(group_ids)} (no attention "
                                   f"group) returned views for {sorted(got[0] or {})}, expected (None, None)")
                return
            for kind, views in zip(("tables", "locs"), got, strict=True):
                if views is None or sorted(views) != sorted(want_tables):
                    raise Mismatch("G2", f"capture {kind} views for {sorted(views or {})}, expected "
                                   f"{sorted(want_tables)} (state groups skipped)")
            self.views.append((bs, tokens_per_req, dict(got[0]), dict(got[1])))

        before = len(self.views)
        judge("G2", f"capture(bs={bs})", expected,
              lambda: self.runner.capture(bs, list(group_ids), tokens_per_req), compare)
        for gid in sorted(set(self.views[-1][2]) - self.allocated if len(self.views) > before else ()):
            self.allocate(gid)
        self.check_views()
        return before if len(self.views) > before else None

    # -- G3-G5 ------------------------------------------------------------------------------------
    def replay(self, step: Replay, tables: Mapping[str, Any] | None | _Delivery = OWN_TABLES, *,
               clause: str = "G3") -> None:
        """Replay on both sides (``tables`` overrides the step's, None included, for stale deliveries) and compare."""
        assert self.model is not None
        model, profile = self.model, self.ctx.profile
        delivered = step.tensors() if tables is OWN_TABLES else tables
        if not profile.buffers_at_init and isinstance(delivered, Mapping) and self._never_captured(step, delivered):
            return  # such an engine replays only graphs it captured, with the groups they were captured with

        def model_replay() -> None:
            profile.replay(model, step.bs, delivered, list(step.seq_lens), step.tokens_per_req,
                           actual_bs=step.actual_bs)

        expected = reference_outcome(model_replay)
        judge(clause, f"replay(bs={step.bs}, N={step.tokens_per_req})", expected,
              lambda: self.runner.replay(step.bs, delivered, step.seq_tensor(), step.tokens_per_req,
                                         actual_bs=step.actual_bs),
              lambda _g, _e: None)
        if not expected.raised:
            self._last_bs, self._last_locs = step.bs, step.bs * step.tokens_per_req
            self.live_seq[: step.bs] = step.live_seq
            if tables is OWN_TABLES:
                self.last = step
        self.check_buffers()
        self.check_views()

    def _never_captured(self, step: Replay, delivered: Mapping[str, Any]) -> bool:
        """Whether a replay delivers a group with no buffers yet, or more tokens than a lazily sized location
        buffer was captured for: a graph the engine never captured, so never replays."""
        assert self.model is not None
        groups = set(delivered) & set(self.model.groups)
        return bool(groups - self.allocated) or any(
            step.bs * step.tokens_per_req > len(self.runner.loc_buffers[gid]) for gid in groups)

    def accepted(self, err: Mismatch, step: Replay | None, what: str) -> Mismatch:
        """An accepted step the model refuses: a missing refusal (strictness), unless the locations a captured
        graph would now write show an unsafe write (safety). ``step``: the replay whose true tables and lengths
        the written locations are judged against (None: a capture, which writes nothing)."""
        unsafe = self._unsafe_after(step) if step is not None else None
        if unsafe is not None:
            gid, bad = unsafe
            return Mismatch(err.clause, f"{what}: accepted, and loc_buffers[{gid!r}] now makes a captured graph "
                            f"write: group {gid!r} row {bad.row} token {bad.token} position {bad.position} loc "
                            f"{bad.loc}: {bad.reason}", tier=SAFETY,
                            kind="unsafe write: " + bad.reason.split(":")[0][:40])
        return Mismatch(err.clause, str(err).split("] ", 1)[1] + " (nothing unsafe written: a missing refusal)",
                        tier=STRICTNESS, kind=err.kind)

    def _unsafe_after(self, step: Replay) -> tuple[str, Any] | None:
        """The first location of ``[:bs*N]`` a captured graph would write outside the step's own slots, judged
        against the step's true tables as the model fills them (a step the model refuses: the runner's own)."""
        assert self.model is not None
        filled = copy.deepcopy(self.model)
        truth: GraphModel | None = filled
        try:
            self.ctx.profile.replay(filled, step.bs, step.tensors(), list(step.seq_lens), step.tokens_per_req,
                                    actual_bs=step.actual_bs)
        except ContractViolation:
            truth = None
        bs, n = min(step.bs, self.setup.max_bs), step.tokens_per_req
        seq = list(step.seq_lens[:bs]) + [1] * (bs - len(step.seq_lens[:bs]))
        live = bs if step.actual_bs is None else min(step.actual_bs, bs)
        tokens = token_positions("verify", seq, n=n, actual_bs=live)
        for gid in sorted(self.allocated):
            group = self.model.groups[gid]
            table = truth.groups[gid].table if truth is not None else self.runner.table_buffers[gid].tolist()
            locs = self.runner.loc_buffers[gid].tolist()[: bs * n]
            unsafe = self.ctx.profile.unsafe_writes(table, locs, tokens, group.page_size, group=gid)
            if unsafe:
                return gid, unsafe[0]
        return None

    def stale(self, step: Replay, kind: str) -> None:
        """G5: a stale or incomplete delivery is refused before anything is written (accepting it is a missing
        refusal; a safety failure only where the locations left behind write outside the step's own slots)."""
        assert self.model is not None
        tables = step.tensors()
        attention = sorted(self.model.groups)
        state = {gid: t for gid, t in tables.items() if gid not in self.model.groups}
        delivered: dict[str, Any] | None
        if kind == "none":
            delivered = None
        elif kind == "empty dict":
            delivered = {}
        elif kind == "missing group":
            delivered = {g: t for g, t in tables.items() if g != attention[0]}
        elif kind == "extra group":
            if not self.ctx.profile.domain.malformed_tables:
                return  # the engine's tables are exactly its published groups (tokenspeed's bridge refuses others)
            delivered = {**tables, "ghost": as_tensor([[1]])}
        elif kind == "empty table":
            delivered = {**tables, attention[-1]: torch.zeros((step.bs, 0), dtype=torch.int32)}
        else:
            delivered = state
        ignored = kind == "extra group" and self.ctx.profile.extra_groups == "ignore"
        # the state to go back to is copied only where it is used: an engine that ignores extra groups
        saved = copy.deepcopy((self.model, self._last_bs, self._last_locs, self.live_seq, self.last)) if ignored \
            else None
        try:
            self.replay(step, delivered, clause="G5")
        except Mismatch as err:
            if ignored and err.tier == CORRECTNESS:
                assert saved is not None
                # an engine that ignores extra groups may refuse one all the same, if it writes nothing
                self.model, self._last_bs, self._last_locs, self.live_seq, self.last = saved
                self.check_buffers()
                return
            if err.kind != ACCEPTED:
                raise
            raise self.accepted(err, step, f"replay with a stale delivery ({kind})") from err

    def reanchor(self, view_index: int, group_id: str, frontier: list[int], n: int) -> None:
        """W4 on a captured table view (strided, in consumer units) equals W4 on the model's view."""
        assert self.model is not None
        bs, _, tables, _ = self.views[view_index]
        group = self.model.groups[group_id]
        model_rows = [list(r) for r in group.table[:bs]]
        expected = reference_outcome(lambda: self.ctx.profile.reanchor_locs(model_rows, frontier, group.page_size, n))
        view = tables[group_id]

        def compare(got: Any, want: list[int]) -> None:
            check_tensor("W4", f"reanchor on the captured view of {group_id!r}", got, want,
                         dtypes=loc_dtypes(self.ctx))

        self.ctx.transcript.note(f"view = runner.capture({bs}, [{group_id!r}])[0][{group_id!r}]")
        self.ctx.transcript.alias(view, "view")  # the call below replays on the view, not on a copy of it

        def call() -> Any:
            return self.ctx.backend.reanchor_locs(view, torch.tensor(frontier, dtype=torch.int32), group.page_size, n)

        if not expected.raised:
            judge("W4", "reanchor_locs on a captured view", expected, call, compare)
            return
        # The view's rows are no valid table (a scribble, or rows left by replays of other sizes share pages):
        # no engine re-anchors there, so only safety is asked. Any refusal is safe.
        try:
            got = call()
        except Unsupported:
            raise
        except Exception:
            return
        tokens = token_positions("reanchor", frontier, n=n)
        unsafe = self.ctx.profile.unsafe_writes(model_rows, got, tokens, group.page_size, group=group_id)
        if unsafe:
            bad = unsafe[0]
            raise Mismatch("W4", f"reanchor_locs on a captured view of {group_id!r} (rows that are no valid table: "
                           f"[{expected.clause}]): row {bad.row} token {bad.token} position {bad.position} wrote "
                           f"loc {bad.loc}: {bad.reason}", tier=SAFETY,
                           kind="unsafe write: " + bad.reason.split(":")[0][:40])

    def scribble(self, value: int = SENTINEL) -> None:
        """Fill every buffer, backend and model alike, with ``value`` (to see what replay leaves alone)."""
        assert self.model is not None
        self.ctx.transcript.note(f"for b in (*runner.table_buffers.values(), *runner.loc_buffers.values()): "
                                 f"b.fill_({value})")
        for _, buffers in self._buffer_dicts():
            for buf in buffers.values():
                buf.fill_(value)
        for gid, group in self.model.groups.items():
            if gid not in self.allocated:
                continue  # no buffer yet: allocation will start it at zero
            for row in group.table:
                row[:] = [value] * len(row)
            group.locs[:] = [value] * len(group.locs)
        self.live_seq = [1] * self.setup.max_bs

    def bad_step(self, step: Replay, kind: str) -> None:
        """One of ``BAD_STEPS``: refused (or, where the model accepts it, done) exactly as the model does it.
        Accepting one is a missing refusal (strictness), a safety failure only with an unsafe write shown."""
        try:
            self._bad_step(step, kind)
        except Mismatch as err:
            if err.kind != ACCEPTED:
                raise
            judged = None if kind.startswith("capture") or kind in ("replay bs > max_bs", "replay N > spec_n") \
                else step
            raise self.accepted(err, judged, kind) from err

    def _bad_step(self, step: Replay, kind: str) -> None:
        setup = self.setup
        if kind.startswith("capture"):
            ids = [s.group_id for s in setup.attention]
            bs, tpr, group_ids = 1, 1, ids
            if kind == "capture bs 0":
                bs = 0
            elif kind == "capture bs > max_bs":
                bs = setup.max_bs + 1
            elif kind == "capture N > spec_n":
                tpr = setup.spec_n + 1
            else:
                group_ids = [*ids, "ghost"]
            self.capture(bs, group_ids, tpr)
            return
        if kind == "replay bs 0":
            step = replace(step, bs=0, actual_bs=None, live_seq=())
        elif kind == "replay bs > max_bs":
            if not self.ctx.profile.domain.oversized_replays:
                return  # the engine's wrapper replays only the sizes it captured
            step = replace(step, bs=setup.max_bs + 1, seq_lens=step.seq_lens + (1,) * setup.max_bs, actual_bs=None)
        elif kind == "replay N > spec_n":
            step = replace(step, tokens_per_req=setup.spec_n + 1)
        else:
            if not self.ctx.profile.domain.short_seq_lens:
                return  # the engine's wrapper always hands its whole lengths buffer
            step = replace(step, seq_lens=step.seq_lens[: step.bs - 1])
        self.replay(step, clause="G4" if kind == "replay short seq_lens" else "G3")
