"""G1-G5: persistent per-group CUDA-graph buffers in torch, one stack for tables and one for locations.

Capture hands out views of the stacks (stable data pointers across batch sizes). Replay checks
everything it can before it writes, then refills every group's rows in one ``replay_fill`` call over the
live tables (read where they lie when they share one storage, else packed by one ``cat``), and
recomputes every group's locations in one ``stacked_locs`` call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from kvtable.contract import DEFAULT_TAIL_PAD, Specs
from kvtable.errors import ContractViolation, StaleGraphState
from kvtable.impl import validate
from kvtable.impl.groups import specs_by_id
from kvtable.impl.kernels import Kernels
from kvtable.impl.read_plan import INT32_END
from kvtable.impl.tokens import upload
from kvtable.impl.torch_kernels import TORCH_KERNELS

MAX_LAYOUTS = 1024
"""Kept ``replay_fill`` metadata tensors, one per layout of the live tables (offsets, columns)."""


def _buffer_device(device: Any) -> torch.device:
    """G1: a torch device this process can allocate on, or a refusal naming it."""
    try:
        found = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ContractViolation("G1", f"device {device!r} is not a torch device ({err})") from err
    backend = getattr(torch, found.type, None)
    if found.type not in ("cpu", "meta") and not (backend is not None and backend.is_available()):
        raise ContractViolation("G1", f"device {device!r}: {found.type} is not available in this process")
    return found


class GroupGraphBuffers:
    """The ``GraphRunner`` of impl/: G1 init, G2 capture, G3-G5 replay on ``device`` through ``kernels``."""

    def __init__(self, specs: Specs, *, max_bs: int, max_kernel_pages: int, kernel_page_size: int,
                 spec_n: int = 1, tail_pad: int = DEFAULT_TAIL_PAD, expand: bool = True,
                 device: torch.device | str = "cpu", kernels: Kernels = TORCH_KERNELS) -> None:
        for name, value in (("max_bs", max_bs), ("max_kernel_pages", max_kernel_pages), ("spec_n", spec_n)):
            if not validate._is_int(value) or value < 1:
                raise ContractViolation("G1", f"{name} must be an int >= 1, got {value!r}")
        validate.check_page_size(kernel_page_size)
        validate.check_tail_pad(tail_pad)
        by_id = specs_by_id(specs)
        self.max_bs, self.spec_n, self.tail_pad = int(max_bs), int(spec_n), tail_pad
        self.device = _buffer_device(device)
        self.kernels = kernels
        self.state_ids = frozenset(gid for gid, spec in by_id.items() if spec.is_state)
        self.group_ids = tuple(sorted(gid for gid in by_id if gid not in self.state_ids))
        self.ratios: dict[str, int] = {}
        self.page_sizes: dict[str, int] = {}
        self.source_widths: dict[str, int] = {}
        for gid in self.group_ids:
            block = by_id[gid].block_granularity
            self.ratios[gid] = validate.page_ratio(block, kernel_page_size, group=gid) if expand else 1
            self.page_sizes[gid] = block // self.ratios[gid]
            self.source_widths[gid] = -(-max_kernel_pages * kernel_page_size // block)
        self.widths = {gid: self.source_widths[gid] * self.ratios[gid] for gid in self.group_ids}
        groups, wmax = len(self.group_ids), max(self.widths.values(), default=0)
        if groups * max_bs * wmax >= INT32_END:
            raise ContractViolation("G1", f"buffers of {groups} groups x max_bs {max_bs} x {wmax} kernel pages pass "
                                    "2^31 entries: no engine captures a graph that large")
        self.table_stack = torch.zeros(groups, max_bs, wmax, dtype=torch.int32, device=self.device)
        self.loc_stack = torch.zeros(groups, max_bs * spec_n, dtype=torch.int32, device=self.device)
        self.table_buffers = {gid: self.table_stack[i, :, : self.widths[gid]]
                              for i, gid in enumerate(self.group_ids)}
        self.loc_buffers = {gid: self.loc_stack[i] for i, gid in enumerate(self.group_ids)}
        # replay packs the live tables here: one buffer for every step, no allocation per replay
        self._packed = torch.empty(max_bs * sum(self.source_widths.values()), dtype=torch.int32,
                                   device=self.device)
        self._metas: dict[tuple[int, ...], torch.Tensor] = {}
        self._widths = upload([self.widths[g] for g in self.group_ids], self.device)
        self._page_sizes = upload([self.page_sizes[g] for g in self.group_ids], self.device)

    def capture(self, bs: int, group_ids: Sequence[str], tokens_per_req: int = 1
                ) -> tuple[dict[str, torch.Tensor] | None, dict[str, torch.Tensor] | None]:
        """G2 capture-views: ``[:bs]`` of the tables and ``[:bs*N]`` of the locations; state ids skipped."""
        self._check_step(bs, tokens_per_req, "G2")
        wanted = [gid for gid in group_ids if gid not in self.state_ids]
        if unknown := sorted(set(wanted) - set(self.group_ids)):
            raise ContractViolation("G2", f"groups {unknown} have no persistent buffers "
                                    f"(buffers: {list(self.group_ids)}); declare them before graph init")
        if not wanted:  # state groups only: nothing to capture
            return None, None
        tables = {gid: self.table_buffers[gid][:bs] for gid in wanted}
        locs = {gid: self.loc_buffers[gid][: bs * tokens_per_req] for gid in wanted}
        return tables, locs

    def replay(self, bs: int, tables: Mapping[str, torch.Tensor] | None, seq_lens: torch.Tensor,
               tokens_per_req: int = 1, *, actual_bs: int | None = None) -> None:
        """G3 replay-fill and G4 replay-locs after the G5 stale guard; every check runs before any write."""
        self._check_step(bs, tokens_per_req, "G3")
        live_tables = self.stale_guard(bs, tables)
        validate.check_actual_bs(actual_bs, None)
        if not isinstance(seq_lens, torch.Tensor):
            seq_lens = torch.tensor(validate.host_lengths(seq_lens, "seq_lens", "G4"), dtype=torch.int32)
        seq = self._seq_tensor(seq_lens, bs)
        cap = bs if actual_bs is None else min(actual_bs, bs)
        live = {gid: min(t.shape[0], cap) for gid, t in live_tables.items()}
        lengths = validate.cpu_lengths(seq_lens)
        if lengths is not None:
            self.check_short_rows(lengths[: max(live.values())], tokens_per_req)
            self.check_reach(lengths[:bs], tokens_per_req, live_tables, live)
        self.fill_tables(bs, live_tables, live)
        self.kernels.stacked_locs(self.table_stack, self._widths, self._page_sizes, seq, self.loc_stack, bs,
                                  tokens_per_req)

    def stale_guard(self, bs: int, tables: Mapping[str, torch.Tensor] | None) -> dict[str, torch.Tensor]:
        """G5 stale-guard: the delivered attention groups are exactly the captured ones, none empty; raises before
        any write. A step that delivers what was captured costs one set comparison; the reason is worked out only
        for a refusal.

        impl's own check, apart from ``reference.GraphModel``'s guard on purpose: the reference judges this one,
        and a shared guard would make the differential G5 properties blind to a bug in it.
        """
        captured = set(self.group_ids)
        delivered = {gid for gid in tables or () if gid not in self.state_ids}
        if not captured or delivered != captured:
            raise StaleGraphState("G5", self._stale_groups(bs, captured, delivered, bool(tables)))
        assert tables is not None  # it delivered the captured groups, and there are some
        live = {gid: tables[gid] for gid in self.group_ids}
        for gid, table in live.items():
            validate.check_table(table, 0, group=gid)
        empty = [gid for gid, table in live.items() if table.numel() == 0]
        if empty:
            raise StaleGraphState("G5", "empty table at replay", group=empty[0])
        return live

    def _stale_groups(self, bs: int, captured: set[str], delivered: set[str], any_table: bool) -> str:
        """Why a replay's delivered groups are not the captured ones: G5's message."""
        if not captured:
            return "the runner published no cache groups; nothing to replay"
        if not any_table:
            return (f"buffers exist for groups {list(self.group_ids)} but block_tables is missing or empty at "
                    f"bs={bs}; the graph would read stale page tables")
        if captured - delivered:
            return f"replay is missing captured groups {sorted(captured - delivered)} (delivered: {sorted(delivered)})"
        return f"replay delivered uncaptured groups {sorted(delivered - captured)}; their writes would have no buffers"

    def _check_step(self, bs: int, tokens_per_req: int, clause: str) -> None:
        if not 1 <= bs <= self.max_bs:
            raise ContractViolation(clause, f"bs {bs} outside the captured range [1, {self.max_bs}]")
        if not 1 <= tokens_per_req <= self.spec_n:
            raise ContractViolation(clause, f"tokens_per_req {tokens_per_req} outside [1, spec_n={self.spec_n}]"
                                    "; the location buffers were sized for spec_n")

    def _seq_tensor(self, seq_lens: torch.Tensor, bs: int) -> torch.Tensor:
        """G4: at least ``bs`` integer lengths, as int32 on the buffers' device (not the meta device unless the
        buffers are: it holds no lengths)."""
        validate.check_seq_tensor(seq_lens, "G4")
        if seq_lens.device.type == "meta" and self.device.type != "meta":
            raise ContractViolation("G4", f"seq_lens on the meta device hold no lengths; the buffers are on "
                                    f"{self.device}")
        if seq_lens.shape[0] < bs:
            raise ContractViolation("G4", f"{seq_lens.shape[0]} seq_lens for a replay at bs={bs}")
        return upload(seq_lens, self.device)

    @staticmethod
    def check_short_rows(live_lengths: Sequence[int], n: int) -> None:
        """T9 / W2 on the live rows' CPU lengths, one C-level ``min`` over them all: none is 0 (it would write
        position 0 of its own page) and none is shorter than N (clamped positions would write one slot twice),
        as the eager calls refuse. The first short row is named."""
        if min(live_lengths, default=n) >= n:
            return
        row = next(r for r, seq in enumerate(live_lengths) if seq < n)
        seq = live_lengths[row]
        if seq < 1:
            clause, why = "T9", "; it would write position 0 of its own page"
        else:
            clause, why = "W2", f" < N={n}: clamped positions would write the slot of position 0 more than once"
        raise ContractViolation(clause, f"live row has seq_len {seq}{why}", row=row)

    def check_reach(self, lengths: Sequence[int], n: int, tables: Mapping[str, torch.Tensor],
                    live: Mapping[str, int]) -> None:
        """T8 / T4 on CPU lengths: no position reaches past a buffer's width or (tail pad -1) onto its tail.

        Reports the first such position of the first such row of the first such group, as the
        reference model does; a pad inside a live table's own columns is left to the sink.
        """
        longest = max(lengths)
        for gid in self.group_ids:
            ps, width = self.page_sizes[gid], self.widths[gid]
            filled = min(tables[gid].shape[1] * self.ratios[gid], width) if self.tail_pad < 0 else width
            if longest <= filled * ps:
                continue
            row = next(r for r, seq in enumerate(lengths) if seq > (filled if r < live[gid] else width) * ps)
            boundary = filled if row < live[gid] else width
            col = max(lengths[row] - n, 0, boundary * ps) // ps
            if col >= width:
                raise ContractViolation("T8", f"seq_len {lengths[row]} reaches past the buffer's {width} "
                                        "columns", group=gid, row=row, col=col)
            raise ContractViolation("T4", f"seq_len {lengths[row]} falls on the tail pad past the table's "
                                    f"{filled} kernel columns (stale seq_len?)", group=gid, row=row, col=col)

    def fill_tables(self, bs: int, tables: Mapping[str, torch.Tensor], live: Mapping[str, int]) -> None:
        """G3 replay-fill: one ``replay_fill`` over the live tables, then zero any group's extra rows. The step of
        ``replay`` that writes the table buffers, after every check: a runner that fills them its own way (an
        engine's padding convention, a zoo mutant) overrides this.

        When the live tables are row-major views of one storage on the buffers' device (an engine that
        allocates every group's table from one pool), ``replay_fill`` reads them where they lie, through
        one flat view of that storage: no packing op. Otherwise one ``cat`` packs them into the persistent
        packed buffer (a table on another device through a pinned upload first). The per-group offsets
        are uploaded once per layout, then reused. Groups normally share one live row count; a group with
        fewer rows is packed with zero rows up to the common count, and those rows (now dummy rows) are
        zeroed after the fill.
        """
        rows = max(live.values())
        columns = tuple(min(tables[gid].shape[1], self.source_widths[gid]) for gid in self.group_ids)
        where = self._in_place(tables, live, rows, columns)
        if where is None:
            packed, offsets = self._pack(tables, live, rows, columns)
        else:
            packed, offsets = where
        self.kernels.replay_fill(packed, self._meta(offsets, columns), self.table_stack, bs, rows, self.tail_pad)
        for i, gid in enumerate(self.group_ids):
            if live[gid] < rows:
                self.table_stack[i, live[gid]:bs] = 0

    def _in_place(self, tables: Mapping[str, torch.Tensor], live: Mapping[str, int], rows: int,
                  columns: tuple[int, ...]) -> tuple[torch.Tensor, tuple[int, ...]] | None:
        """One flat view over the storage every live table lies in, and each table's offset in it, when every
        group has ``rows`` live rows stored row-major at its packed width on the buffers' device (the layout
        ``replay_fill`` reads) and none shares the stack's storage (the fill would read what it writes)."""
        first = tables[self.group_ids[0]]
        storage = first.untyped_storage().data_ptr()
        if storage == self.table_stack.untyped_storage().data_ptr():
            return None
        # the storage first: tables allocated apart (the common case) are told by one op each, not six
        if any(tables[gid].untyped_storage().data_ptr() != storage for gid in self.group_ids[1:]):
            return None
        starts = []
        for gid, cols in zip(self.group_ids, columns, strict=True):
            table = tables[gid]
            if (live[gid] != rows or table.device != self.device or table.dtype != torch.int32
                    or table.shape[1] != cols or not table[:rows].is_contiguous()):
                return None
            starts.append(int(table.storage_offset()))
        low = min(starts)
        span = max(start + rows * cols for start, cols in zip(starts, columns, strict=True)) - low
        if span >= INT32_END:
            return None
        return first.as_strided((span,), (1,), low), tuple(start - low for start in starts)

    def _pack(self, tables: Mapping[str, torch.Tensor], live: Mapping[str, int], rows: int,
              columns: tuple[int, ...]) -> tuple[torch.Tensor, tuple[int, ...]]:
        """The live tables back to back in the persistent packed buffer (one ``cat``), and their offsets."""
        pieces = []
        for gid, cols in zip(self.group_ids, columns, strict=True):
            source = tables[gid][: live[gid], :cols]
            source = source if source.device == self.device else upload(source, self.device)
            pieces.append(source.reshape(-1))
            if live[gid] < rows:
                pieces.append(source.new_zeros((rows - live[gid]) * cols))
        packed = self._packed[: rows * sum(columns)]
        torch.cat(pieces, out=packed)
        return packed, tuple(rows * sum(columns[:g]) for g in range(len(columns)))

    def _meta(self, offsets: tuple[int, ...], columns: tuple[int, ...]) -> torch.Tensor:
        """``replay_fill``'s int32 ``[G, 3]`` (offset, columns, ratio) for one layout of the live tables,
        uploaded on first use and kept on the kernels' device, or on the CPU for kernels that declare
        ``host_meta`` (a replay step then uploads nothing but the tables); the kept set is
        emptied when it reaches ``MAX_LAYOUTS``, so tables that move every step cannot grow it for ever."""
        key = (*offsets, *columns)
        if key not in self._metas:
            if len(self._metas) >= MAX_LAYOUTS:
                self._metas.clear()
            ratios = [self.ratios[gid] for gid in self.group_ids]
            flat = [v for row in zip(offsets, columns, ratios, strict=True) for v in row]
            home = "cpu" if getattr(self.kernels, "host_meta", False) else self.device
            self._metas[key] = upload(flat, home).view(len(columns), 3)
        return self._metas[key]
