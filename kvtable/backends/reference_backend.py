"""The Backend protocol over the pure-Python reference: tensors become lists, the model runs, lists go back.

It is the suite's own yardstick (a conformance run against it must pass) and a readable template for
engine adapters. It validates whatever the reference functions validate; ``debug=True`` adds the full
table contract (``check_tables``) to ``group_locs``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from kvtable import reference
from kvtable.contract import INT32_MAX, INT32_MIN
from kvtable.errors import ContractViolation
from kvtable.reference import DEFAULT_TAIL_PAD, Batch, GroupSpec, ring
from kvtable.reference.tables import (
    as_table,
    check_group_ids,
    check_lengths,
    check_table_shape,
    check_width,
    shed_state_groups,
    specs_by_id,
)

__all__ = ["ReferenceBackend", "ReferenceGraphRunner"]


def _ints(values: torch.Tensor, *, clause: str = "T9") -> list[int]:
    """A 1-D integer tensor as python ints."""
    if not isinstance(values, torch.Tensor) or values.dim() != 1 or values.dtype.is_floating_point:
        raise ContractViolation(clause, f"lengths are a 1-D integer tensor, got {values!r}")
    return [int(v) for v in values.tolist()]


def _table(obj: Any, group: str | None = None) -> list[list[int]]:
    """T1: a 2-D int32 tensor as plain rows (``as_table`` checks dtype, rank and entries)."""
    if not isinstance(obj, torch.Tensor) or obj.dim() != 2:
        raise ContractViolation("T1", f"a table is a 2-D int32 tensor, got {getattr(obj, 'shape', obj)!r}",
                                group=group)
    return as_table(obj, group=group)


def _int32(values: list[int], what: str, group: str | None = None) -> list[int]:
    """``values`` unchanged when every one is an int32; else W5 (a page past ``2^31 // page_size - 1`` gives
    a slot, or an expanded page, that the int32 output cannot hold: refused, never wrapped)."""
    for i, v in enumerate(values):
        if not INT32_MIN <= v <= INT32_MAX:
            raise ContractViolation("W5", f"{what} {i} is {v}, past int32: a page past 2^31 // page_size - 1",
                                    group=group)
    return values


def _out(values: list[int], device: str, group: str | None = None) -> torch.Tensor:
    return torch.tensor(_int32(values, "output location", group), dtype=torch.int32, device=device)


class ReferenceGraphRunner:
    """``reference.GraphModel`` with its buffers mirrored in persistent int32 tensors.

    Before each replay the model reads the tensors (so writes made through views are seen), after it
    the tensors are refilled in place: their data pointers never change.
    """

    def __init__(self, model: reference.GraphModel, device: str) -> None:
        self.model = model
        self.table_buffers = {gid: torch.tensor(b.table, dtype=torch.int32, device=device)
                              for gid, b in model.groups.items()}
        self.loc_buffers = {gid: torch.tensor(b.locs, dtype=torch.int32, device=device)
                            for gid, b in model.groups.items()}

    def capture(self, bs: int, group_ids: Sequence[str], tokens_per_req: int = 1
                ) -> tuple[dict[str, torch.Tensor] | None, dict[str, torch.Tensor] | None]:
        tables, locs = self.model.capture(bs, list(group_ids), tokens_per_req)
        if tables is None or locs is None:
            return None, None
        return ({gid: self.table_buffers[gid][: v.length] for gid, v in tables.items()},
                {gid: self.loc_buffers[gid][: v.length] for gid, v in locs.items()})

    def replay(self, bs: int, tables: Mapping[str, torch.Tensor] | None, seq_lens: torch.Tensor,
               tokens_per_req: int = 1, *, actual_bs: int | None = None) -> None:
        for gid, buffers in self.model.groups.items():
            buffers.table[:] = self.table_buffers[gid].tolist()
            buffers.locs[:] = self.loc_buffers[gid].tolist()
        self.model.replay(bs, tables, _ints(seq_lens, clause="G4"), tokens_per_req, actual_bs=actual_bs)
        filled = {gid: (torch.tensor([_int32(row, "table entry", gid) for row in buffers.table], dtype=torch.int32),
                        torch.tensor(_int32(buffers.locs, "replayed location", gid), dtype=torch.int32))
                  for gid, buffers in self.model.groups.items()}  # all converted before any buffer is written
        for gid, (table, locs) in filled.items():
            self.table_buffers[gid].copy_(table)
            self.loc_buffers[gid].copy_(locs)


class ReferenceBackend:
    """Every Backend operation computed by ``kvtable.reference`` on plain lists."""

    name = "reference"

    def __init__(self, device: str = "cpu", debug: bool | None = None) -> None:
        self.device = device
        self.debug = bool(debug)

    def decode_locs(self, table: torch.Tensor, seq_lens: torch.Tensor, page_size: int,
                    *, actual_bs: int | None = None) -> torch.Tensor:
        seq = _ints(seq_lens)
        return _out(reference.decode_locs(_table(table), seq, page_size, actual_bs=actual_bs), self.device)

    def verify_locs(self, table: torch.Tensor, seq_lens: torch.Tensor, page_size: int, n: int,
                    *, actual_bs: int | None = None) -> torch.Tensor:
        seq = _ints(seq_lens)
        return _out(reference.verify_locs(_table(table), seq, page_size, n, actual_bs=actual_bs),
                    self.device)

    def reanchor_locs(self, table: torch.Tensor, frontier: torch.Tensor, page_size: int, n: int
                      ) -> torch.Tensor:
        seq = _ints(frontier)
        return _out(reference.reanchor_locs(_table(table), seq, page_size, n), self.device)

    def extend_locs(self, table: torch.Tensor, prefix_lens: Sequence[int], extend_lens: Sequence[int],
                    page_size: int) -> torch.Tensor:
        rows = _table(table)
        locs = reference.extend_locs(rows, list(prefix_lens), list(extend_lens), page_size)
        return _out(locs, self.device)

    def group_locs(self, specs: Sequence[GroupSpec], tables: Mapping[str, torch.Tensor], batch: Batch,
                   *, tail_pad: int = DEFAULT_TAIL_PAD) -> dict[str, torch.Tensor]:
        by_id = specs_by_id(specs)
        if self.debug:
            plain = reference.check_tables(by_id, tables, batch, tail_pad=tail_pad)
        else:
            check_lengths(batch)
            live = shed_state_groups(by_id, tables)
            check_group_ids(by_id, live)
            plain = {gid: _table(t, gid) for gid, t in live.items()}
            for gid, table in plain.items():
                check_table_shape(table, batch, group=gid)
                check_width(table, batch, by_id[gid])
        return {gid: _out(reference.batch_locs(t, batch, by_id[gid].block_granularity, group=gid), self.device, gid)
                for gid, t in sorted(plain.items())}

    def expand_table(self, table: torch.Tensor, ratio: int, *, max_kernel_pages: int | None = None,
                     tail_pad: int = -1, actual_bs: int | None = None) -> torch.Tensor:
        rows = _table(table)
        out = reference.expand_table(rows, ratio, max_kernel_pages=max_kernel_pages, tail_pad=tail_pad,
                                     actual_bs=actual_bs)
        width = max_kernel_pages if max_kernel_pages is not None else table.shape[1] * ratio
        entries = [_int32(row, "expanded entry") for row in out]
        return torch.tensor(entries, dtype=torch.int32, device=self.device).reshape(len(out), width)

    def check_write_locs(self, table: torch.Tensor, locs: torch.Tensor, batch: Batch, page_size: int,
                         *, group: str | None = None) -> None:
        reference.check_write_locs(_table(table, group), _ints(locs, clause="D1"), batch, page_size, group=group)

    def ring_locs(self, table: torch.Tensor, prefix_lens: Sequence[int], extend_lens: Sequence[int], page_size: int,
                  window: int) -> tuple[torch.Tensor, torch.Tensor]:
        """R1-R3 by the reference (which always checks the ring's pages)."""
        rows, prefix, extend = _table(table), list(prefix_lens), list(extend_lens)
        return (_out(ring.ring_write_locs(rows, prefix, extend, page_size, window), self.device),
                _out(ring.ring_read_locs(rows, prefix, extend, page_size, window), self.device))

    def graph(self, specs: Sequence[GroupSpec], *, max_bs: int, max_kernel_pages: int,
              kernel_page_size: int, spec_n: int = 1, tail_pad: int = -1, expand: bool = True
              ) -> ReferenceGraphRunner:
        model = reference.GraphModel(specs, max_bs=max_bs, max_kernel_pages=max_kernel_pages,
                                     kernel_page_size=kernel_page_size, spec_n=spec_n, tail_pad=tail_pad,
                                     expand=expand)
        return ReferenceGraphRunner(model, self.device)
