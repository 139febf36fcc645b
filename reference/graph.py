"""G1-G5: a model of the CUDA-graph buffer protocol, tracking buffer identity and contents.

The model owns one persistent table buffer and one location buffer per attention group. Capture
hands out views (a base object plus a length); replay refills the same bases in place, so a view
taken at capture sees every later replay, as a captured graph would.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kvtable.errors import ContractViolation, StaleGraphState
from kvtable.reference.expand import expand_entry, page_ratio
from kvtable.reference.model import DEFAULT_TAIL_PAD, NULL_PAGE, Batch, Table, write_positions
from kvtable.reference.slots import row_slots
from kvtable.reference.tables import Specs, as_table, specs_by_id


@dataclass(frozen=True)
class View:
    """The leading ``length`` entries of a persistent buffer; ``base`` is the buffer itself."""

    base: list
    length: int

    def contents(self) -> list:
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
                 spec_n: int = 1, tail_pad: int = DEFAULT_TAIL_PAD, expand: bool = True) -> None:
        if max_bs < 1 or max_kernel_pages < 1 or spec_n < 1:
            raise ContractViolation("G1", f"max_bs {max_bs}, max_kernel_pages {max_kernel_pages} and spec_n "
                                    f"{spec_n} must all be >= 1")
        if tail_pad not in (-1, 0):
            raise ContractViolation("T3", f"the tail pad is -1 or 0, got {tail_pad}")
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
        """G3 replay-fill and G4 replay-locs, after the G5 stale guard; all checks run before any write."""
        self._check_step(bs, tokens_per_req, "G3")
        live_tables = self._stale_guard(bs, tables)
        if len(seq_lens) < bs:
            raise ContractViolation("G4", f"{len(seq_lens)} seq_lens for a replay at bs={bs}")
        batch = Batch(tuple(seq_lens[:bs]), mode="verify", n=tokens_per_req)
        staged = {gid: self._staged_rows(gid, live_tables[gid], bs, actual_bs) for gid in self.groups}
        new_locs = {gid: self._locs(gid, staged[gid], batch) for gid in self.groups}
        for gid, buffers in self.groups.items():
            buffers.table[:bs] = staged[gid]
            buffers.locs[: len(new_locs[gid])] = new_locs[gid]

    def _check_step(self, bs: int, tokens_per_req: int, clause: str) -> None:
        if not 1 <= bs <= self.max_bs:
            raise ContractViolation(clause, f"bs {bs} outside the captured range [1, {self.max_bs}]")
        if not 1 <= tokens_per_req <= self.spec_n:
            raise ContractViolation(clause, f"tokens_per_req {tokens_per_req} outside [1, spec_n={self.spec_n}]"
                                    "; the location buffers were sized for spec_n")

    def _stale_guard(self, bs: int, tables: Mapping[str, Any] | None) -> dict[str, Table]:
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

    def _staged_rows(self, gid: str, src: Table, bs: int, actual_bs: int | None) -> Table:
        """G3 replay-fill: rows [:live] expanded and tail-padded, rows [live, bs) all page 0."""
        buffers = self.groups[gid]
        width = len(buffers.table[0])
        live = min(len(src), bs, bs if actual_bs is None else actual_bs)
        rows: Table = []
        for r in range(bs):
            if r >= live:
                rows.append([NULL_PAGE] * width)
                continue
            pages = [kp for page in src[r] for kp in expand_entry(page, buffers.ratio)][:width]
            rows.append(pages + [self.tail_pad] * (width - len(pages)))
        return rows

    def _locs(self, gid: str, rows: Table, batch: Batch) -> list[int]:
        """G4 replay-locs: clamped positions ``max(seq - N + t, 0)`` looked up in the staged rows."""
        page_size = self.groups[gid].page_size
        locs: list[int] = []
        for row in range(batch.bs):
            slots = row_slots(rows[row], page_size)
            for pos in write_positions(batch, row):
                if pos >= len(slots):
                    raise ContractViolation("T8", f"seq_len {batch.seq_lens[row]} reaches past the buffer's "
                                            f"{len(rows[row])} columns", group=gid, row=row,
                                            col=pos // page_size)
                slot = slots[pos]
                if slot is None:
                    raise ContractViolation("T4", f"position {pos} falls on the tail pad (stale seq_len?)",
                                            group=gid, row=row, col=pos // page_size)
                locs.append(slot)
        return locs
