"""Backends with bugs that need history: each is safe on any one fresh step, and writes another request's
page only after earlier steps set it up. The trace checker and its state machine must find them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from kvtable.backends.torch_backend import TorchBackend


class _StaleRowRunner:
    """The torch graph runner, except that a replay leaves padded rows as an earlier replay filled them and
    writes their tokens through those rows (SGLang's fixed bug: stale padded indices from an earlier replay)."""

    def __init__(self, runner: Any, kernel_page_size: int) -> None:
        self.runner = runner
        self.kernel_page_size = kernel_page_size
        self.table_buffers = runner.table_buffers
        self.loc_buffers = runner.loc_buffers

    def capture(self, bs: int, group_ids: Sequence[str], tokens_per_req: int = 1) -> Any:
        return self.runner.capture(bs, group_ids, tokens_per_req)

    def replay(self, bs: int, tables: Mapping[str, torch.Tensor] | None, seq_lens: torch.Tensor,
               tokens_per_req: int = 1, *, actual_bs: int | None = None) -> None:
        live = bs if actual_bs is None else actual_bs
        stale = {g: b[live:bs].clone() for g, b in self.table_buffers.items()}
        self.runner.replay(bs, tables, seq_lens, tokens_per_req, actual_bs=actual_bs)
        for gid, rows in stale.items():
            self.table_buffers[gid][live:bs] = rows
            first = (rows[:, 0].long() * self.kernel_page_size).to(self.loc_buffers[gid].dtype)
            self.loc_buffers[gid][live * tokens_per_req: bs * tokens_per_req] = first.repeat_interleave(tokens_per_req)


class StaleGraphRowBackend(TorchBackend):
    """The torch backend whose graph replays keep stale padded rows (a freed page written by a padded row)."""

    name = "stale-graph-rows"

    def graph(self, specs: Sequence[Any], *, kernel_page_size: int, **sizes: Any) -> _StaleRowRunner:
        return _StaleRowRunner(super().graph(specs, kernel_page_size=kernel_page_size, **sizes), kernel_page_size)


class StaleMirrorBackend(TorchBackend):
    """The torch backend reading a persistent mirror of each table that it syncs append-only: a row slot reused
    by another request keeps the pages the last occupant had there, so the new request writes them."""

    name = "stale-table-mirror"

    def __init__(self, device: str = "cpu", debug: bool | None = None) -> None:
        super().__init__(device=device, debug=debug)
        self.mirrors: dict[int, torch.Tensor] = {}

    def _synced(self, table: torch.Tensor, page_size: int) -> torch.Tensor:
        rows = table.shape[0]
        mirror = self.mirrors.get(page_size)
        if mirror is None or mirror.shape[1] != table.shape[1]:
            mirror = table.clone()
        elif mirror.shape[0] < rows:
            mirror = torch.cat([mirror, table[mirror.shape[0]:]])
        mirror[:rows] = torch.where(mirror[:rows] > 0, mirror[:rows], table)
        self.mirrors[page_size] = mirror
        return mirror[:rows].clone()

    def decode_locs(self, table: torch.Tensor, seq_lens: torch.Tensor, page_size: int, **kw: Any) -> torch.Tensor:
        return super().decode_locs(self._synced(table, page_size), seq_lens, page_size, **kw)

    def verify_locs(self, table: torch.Tensor, seq_lens: torch.Tensor, page_size: int, n: int, **kw: Any
                    ) -> torch.Tensor:
        return super().verify_locs(self._synced(table, page_size), seq_lens, page_size, n, **kw)

    def reanchor_locs(self, table: torch.Tensor, frontier: torch.Tensor, page_size: int, n: int) -> torch.Tensor:
        return super().reanchor_locs(self._synced(table, page_size), frontier, page_size, n)

    def extend_locs(self, table: torch.Tensor, prefix_lens: Sequence[int], extend_lens: Sequence[int],
                    page_size: int) -> torch.Tensor:
        return super().extend_locs(self._synced(table, page_size), prefix_lens, extend_lens, page_size)


class SegfaultOnDecode(TorchBackend):
    """Its decode kernel takes the process down (SIGSEGV) on the third eager decode of a run."""

    calls = 0

    def decode_locs(self, table, seq_lens, page_size, *, actual_bs=None):  # type: ignore[no-untyped-def]
        import ctypes

        SegfaultOnDecode.calls += 1
        if SegfaultOnDecode.calls == 3:
            ctypes.string_at(0)
        return super().decode_locs(table, seq_lens, page_size)


class HangOnDecode(TorchBackend):
    """Its decode kernel never returns on the second eager decode of a run."""

    calls = 0

    def decode_locs(self, table, seq_lens, page_size, *, actual_bs=None):  # type: ignore[no-untyped-def]
        import time

        HangOnDecode.calls += 1
        if HangOnDecode.calls == 2:
            time.sleep(3600)
        return super().decode_locs(table, seq_lens, page_size)

