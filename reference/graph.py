"""G1-G5: a model of the CUDA-graph buffer protocol, tracking buffer identity and contents.

The model owns one persistent table buffer and one location buffer per attention group. Capture
hands out views (a base object plus a length); replay refills the same bases in place, so a view
taken at capture sees every later replay, as a captured graph would.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kvtable.contract import Specs
from kvtable.errors import ContractViolation, StaleGraphState
from kvtable.reference.expand import expand_entry, page_ratio
from kvtable.reference.model import (
    DEFAULT_TAIL_PAD,
    NULL_PAGE,
    SHORT_ROWS,
    Batch,
    ShortRows,
    Table,
    check_actual_bs,
    check_pad_value,
    is_int,
    unclamped_positions,
)
from kvtable.reference.slots import row_slots
from kvtable.reference.tables import as_table, specs_by_id


@dataclass(frozen=True)
class View:
    """The leading ``length`` entries of a persistent buffer; ``base`` is the buffer itself."""

    base: list[Any]
    length: int

    def contents(self) -> list[Any]:
        return self.base[: self.length]


@dataclass(frozen=True)
class GroupBuffers:
    """One group's persistent buffers and the units its kernels see."""

    table: Table
    locs: list[int]
    ratio: int
    page_size: int
    """The consumer page size the location kernel divides by (K when expanded, else B)."""


class GraphModel:
    """The persistent per-group buffers of a CUDA-graph runner (G1), with capture (G2) and replay (G3-G5)."""

    def __init__(self, specs: Specs, *, max_bs: int, max_kernel_pages: int, kernel_page_size: int,
                 spec_n: int = 1, tail_pad: int = DEFAULT_TAIL_PAD, expand: bool = True,
                 short_rows: ShortRows = "refuse") -> None:
        if not all(is_int(v) and v >= 1 for v in (max_bs, max_kernel_pages, spec_n)):
            raise ContractViolation("G1", f"max_bs {max_bs!r}, max_kernel_pages {max_kernel_pages!r} and spec_n "
                                    f"{spec_n!r} must all be ints >= 1")
        check_pad_value(tail_pad)
        if short_rows not in SHORT_ROWS:
            raise ValueError(f"short_rows is one of {SHORT_ROWS}, got {short_rows!r}")
        self.short_rows = short_rows
        self.max_bs = max_bs
        self.spec_n = spec_n
        self.tail_pad = tail_pad
        self.state_ids = {gid for gid, s in specs_by_id(specs).items() if s.is_state}
        self.groups: dict[str, GroupBuffers] = {}
        for gid, spec in sorted(specs_by_id(specs).items()):
            if spec.is_state:
                continue
            block = spec.block_granularity
            ratio = page_ratio(block, kernel_page_size, group=gid) if expand else 1
            source_width = -(-max_kernel_pages * kernel_page_size // block)
            width = source_width * ratio
            self.groups[gid] = GroupBuffers(
                table=[[NULL_PAGE] * width for _ in range(max_bs)],
                locs=[0] * (max_bs * spec_n),
                ratio=ratio,
                page_size=block // ratio,
            )

    def capture(self, bs: int, group_ids: Sequence[str],
                tokens_per_req: int = 1) -> tuple[dict[str, View] | None, dict[str, View] | None]:
        """G2 capture-views: views ``[:bs]`` of the tables and ``[:bs*N]`` of the locations, per group."""
        self._check_step(bs, tokens_per_req, "G2")
        wanted = [gid for gid in group_ids if gid not in self.state_ids]
        if not wanted:
            return None, None
        unknown = sorted(set(wanted) - set(self.groups))
        if unknown:
            raise ContractViolation("G2", f"groups {unknown} have no persistent buffers "
                                    f"(buffers: {sorted(self.groups)}); declare them before graph init")
        tables = {gid: View(self.groups[gid].table, bs) for gid in wanted}
        locs = {gid: View(self.groups[gid].locs, bs * tokens_per_req) for gid in wanted}
        return tables, locs

    def replay(self, bs: int, tables: Mapping[str, Any] | None, seq_lens: Sequence[int],
               tokens_per_req: int = 1, *, actual_bs: int | None = None) -> None:
        """One replay: the G5 guard, G3's rows and G4's locations, all computed before any buffer is written."""
        self._check_step(bs, tokens_per_req, "G3")
        live_tables = self.stale_guard(bs, tables)
        staged = self.replay_fill(live_tables, bs, actual_bs)
        live = {gid: self._live_rows(live_tables[gid], bs, actual_bs) for gid in self.groups}
        new_locs = self.replay_locs(staged, seq_lens, bs, tokens_per_req, live)
        for gid, buffers in self.groups.items():
            buffers.table[:bs] = staged[gid]
            buffers.locs[: len(new_locs[gid])] = new_locs[gid]

    def _check_step(self, bs: int, tokens_per_req: int, clause: str) -> None:
        if not is_int(bs) or not 1 <= bs <= self.max_bs:
            raise ContractViolation(clause, f"bs {bs!r} outside the captured range [1, {self.max_bs}]")
        if not is_int(tokens_per_req) or not 1 <= tokens_per_req <= self.spec_n:
            raise ContractViolation(clause, f"tokens_per_req {tokens_per_req!r} outside [1, spec_n={self.spec_n}]"
                                    "; the location buffers were sized for spec_n")

    def stale_guard(self, bs: int, tables: Mapping[str, Any] | None) -> dict[str, Table]:
        """G5 stale-guard: every buffered group delivered, no undeclared ones, none empty."""
        if not self.groups:
            raise StaleGraphState("G5", "the runner published no cache groups; nothing to replay")
        if not tables:
            raise StaleGraphState("G5", f"buffers exist for groups {sorted(self.groups)} but block_tables is "
                                  f"missing or empty at bs={bs}; the graph would read stale page tables")
        delivered = {gid for gid in tables if gid not in self.state_ids}
        missing = sorted(set(self.groups) - delivered)
        if missing:
            raise StaleGraphState("G5", f"replay is missing captured groups {missing} (delivered: "
                                  f"{sorted(delivered)})")
        extra = sorted(delivered - set(self.groups))
        if extra:
            raise StaleGraphState("G5", f"replay delivered uncaptured groups {extra}; their writes would "
                                  "have no buffers")
        live = {gid: as_table(tables[gid], group=gid) for gid in sorted(delivered)}
        for gid, table in live.items():
            if not table or not table[0]:
                raise StaleGraphState("G5", "empty table at replay", group=gid)
        return live

    def replay_fill(self, live_tables: Mapping[str, Table], bs: int, actual_bs: int | None) -> dict[str, Table]:
        """G3 replay-fill: each group's rows ``[:bs]`` after replay (not yet written), by group id.

        Rows ``[:live]`` are expanded (E2) and tail-padded to the buffer width; rows ``[live, bs)`` are all
        page 0, whatever the caller delivered in them.
        """
        staged: dict[str, Table] = {}
        for gid, buffers in self.groups.items():
            src = live_tables[gid]
            width = len(buffers.table[0])
            live = self._live_rows(src, bs, actual_bs)
            rows: Table = []
            for r in range(bs):
                if r >= live:
                    rows.append([NULL_PAGE] * width)
                    continue
                pages = [kp for page in src[r] for kp in expand_entry(page, buffers.ratio)][:width]
                rows.append(pages + [self.tail_pad] * (width - len(pages)))
            staged[gid] = rows
        return staged

    def replay_locs(self, staged: Mapping[str, Table], seq_lens: Sequence[int], bs: int, n: int,
                    live: Mapping[str, int]) -> dict[str, list[int]]:
        """G4 replay-locs: every group's ``bs*N`` locations (not yet written), looked up in its staged rows.

        ``live`` is each group's live row count (G3); its dummy rows clamp their positions ``seq - N + t``
        at 0. A live row's length must be at least 1 (T9) and at least N (W2), as for the eager reference,
        unless the runner's ``short_rows`` convention sinks or clamps those positions.
        """
        lengths = self._replay_lengths(seq_lens, bs, n, max(live.values()))
        return {gid: self._group_locs(gid, staged[gid], lengths, n, live[gid]) for gid in self.groups}

    def _replay_lengths(self, seq_lens: Sequence[int], bs: int, n: int, live: int) -> list[int]:
        """G4: ``bs`` int lengths; live rows checked against T9 and W2 unless ``short_rows`` says otherwise."""
        if len(seq_lens) < bs:
            raise ContractViolation("G4", f"{len(seq_lens)} seq_lens for a replay at bs={bs}")
        lengths = list(seq_lens[:bs])
        for row, seq in enumerate(lengths):
            if not is_int(seq):
                raise ContractViolation("G4", f"seq_lens are ints, got {seq!r}", row=row)
            if row >= live or self.short_rows != "refuse":
                continue
            if seq < 1:
                raise ContractViolation("T9", f"live row has seq_len {seq}; it would write position 0 of its "
                                        "own page", row=row)
            if seq < n:
                raise ContractViolation("W2", f"live row has seq_len {seq} < N={n}: clamped positions would "
                                        "write the slot of position 0 more than once", row=row)
        return lengths

    def _group_locs(self, gid: str, rows: Table, lengths: Sequence[int], n: int, live: int) -> list[int]:
        """One group's replay locations: positions ``seq - N + t`` (sunk or clamped below 0) in its rows."""
        page_size = self.groups[gid].page_size
        locs: list[int] = []
        batch = Batch(tuple(lengths), mode="verify", n=n)
        for row, seq in enumerate(lengths):
            slots = row_slots(rows[row], page_size)
            for pos in unclamped_positions(batch, row):
                if pos < 0 and row < live and self.short_rows == "sink":
                    locs.append(NULL_PAGE * page_size)
                    continue
                pos = max(pos, 0)
                if pos >= len(slots):
                    raise ContractViolation("T8", f"seq_len {seq} reaches past the buffer's {len(rows[row])} "
                                            "columns", group=gid, row=row, col=pos // page_size)
                slot = slots[pos]
                if slot is None:
                    raise ContractViolation("T4", f"position {pos} falls on the tail pad (stale seq_len?)",
                                            group=gid, row=row, col=pos // page_size)
                locs.append(slot)
        return locs

    @staticmethod
    def _live_rows(src: Table, bs: int, actual_bs: int | None) -> int:
        """G3: ``min(rows delivered, bs, actual_bs)``; ``actual_bs`` may exceed ``bs`` but not be negative."""
        live = min(len(src), bs)
        return live if actual_bs is None else min(live, check_actual_bs(actual_bs, None))
