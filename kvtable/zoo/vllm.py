"""vLLM's slot-mapping bugs (zoo items 1-5), each as the smallest mutant of the torch backend."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from kvtable.errors import ContractViolation
from kvtable.impl.graph import GroupGraphBuffers
from kvtable.impl.kernels import Kernels
from kvtable.impl.locs import extend_group_locs, fixed_group_locs
from kvtable.impl.torch_kernels import TorchKernels
from kvtable.reference.model import DEFAULT_TAIL_PAD, Batch, GroupSpec
from kvtable.reference.tables import shed_state_groups, specs_by_id
from kvtable.zoo.base import ZooBackend


class MutantLocKernels(TorchKernels):
    """Torch kernels whose every location goes through one mutated ``locs``; positions clamp at 0 unless
    ``clamp_positions`` is off."""

    clamp_positions = True
    grouped_locs = None  # type: ignore[assignment]  # no grouped path: impl/locs.py takes the mutated stacked one
    grouped_extend_locs = None  # type: ignore[assignment]  # as grouped_locs
    """No fast paths: every location goes through the mutated ``locs``."""

    @staticmethod
    def locs(tables: torch.Tensor, widths: torch.Tensor, page_sizes: torch.Tensor, rows: torch.Tensor,
             positions: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def stacked_locs(self, tables: torch.Tensor, widths: torch.Tensor, page_sizes: torch.Tensor,
                     seq_lens: torch.Tensor, out: torch.Tensor, bs: int, n: int) -> None:
        if bs * n == 0 or tables.shape[0] == 0:
            return
        token = torch.arange(bs * n, device=seq_lens.device)
        row = token // n
        positions = seq_lens[:bs].to(torch.int64)[row] - n + token % n
        if self.clamp_positions:
            positions = positions.clamp_min(0)
        out[: tables.shape[0], : bs * n] = self.locs(tables, widths, page_sizes, row, positions)

    def stacked_extend_locs(self, tables: torch.Tensor, widths: torch.Tensor, page_sizes: torch.Tensor,
                            rows: torch.Tensor, positions: torch.Tensor, out: torch.Tensor) -> None:
        if rows.shape[0] == 0 or tables.shape[0] == 0:
            return
        out[: tables.shape[0], : rows.shape[0]] = self.locs(tables, widths, page_sizes, rows, positions)


class PythonIndexKernels(MutantLocKernels):
    """vllm #43810: positions are not clamped at 0, and the gather indexes Python-style.

    A padded verify row (seq_len 1 < N) or a short re-anchored prompt reaches position -1; Python
    semantics turn column -1 into the row's last column and offset -1 into ``ps - 1``, a real slot.
    Extend positions are never negative, so extend keeps the torch kernels' own path.
    """

    clamp_positions = False
    stacked_extend_locs = TorchKernels.stacked_extend_locs

    @staticmethod
    def locs(tables: torch.Tensor, widths: torch.Tensor, page_sizes: torch.Tensor, rows: torch.Tensor,
             positions: torch.Tensor) -> torch.Tensor:
        ps = page_sizes[: tables.shape[0]].to(torch.int64).unsqueeze(1)
        pos = positions.to(torch.int64).unsqueeze(0)
        col = pos // ps  # -1 for position -1: torch indexing reads the row's last column, as Python does
        inside = col < widths[: tables.shape[0]].to(torch.int64).unsqueeze(1)
        g = torch.arange(tables.shape[0], device=tables.device).unsqueeze(1)
        page = tables[g, rows.to(torch.int64).unsqueeze(0), torch.where(inside, col, 0)].to(torch.int64)
        return (torch.where(inside, page, -1).clamp_min(0) * ps + pos % ps).to(torch.int32)


class Vllm43810(ZooBackend):
    name = "vllm-43810"

    def default_kernels(self) -> Kernels:
        return PythonIndexKernels()


def _unmasked_locs(tables: torch.Tensor, widths: torch.Tensor, page_sizes: torch.Tensor, rows: torch.Tensor,
                   positions: torch.Tensor) -> torch.Tensor:
    result = []
    for g in range(tables.shape[0]):
        width, ps = int(widths[g]), int(page_sizes[g])
        own = tables[g, :, :width].reshape(-1)
        index = (rows.to(torch.int64) * width + positions // ps) % own.numel()
        result.append(own[index].to(torch.int64).clamp_min(0) * ps + positions % ps)
    return torch.stack(result).to(torch.int32)


class UnguardedBlockTableKernels(MutantLocKernels):
    """vllm #53982: the block-table load has no ``col < width`` mask.

    Each group's table is read row-major with its own width as the stride, so a column past the
    width is the next row's page (the regression test got 144, the next row's block id); past the
    last row the read wraps into other memory.
    """

    locs = staticmethod(_unmasked_locs)


class TrustingRunner(GroupGraphBuffers):
    """vllm #53982: the replay trusts seq_lens (a device kernel never sees the CPU mirror)."""

    def check_reach(self, lengths: Sequence[int], n: int, tables: Mapping[str, torch.Tensor],
                    live: Mapping[str, int]) -> None:
        return None


class Vllm53982(ZooBackend):
    """vllm #53982: the host has no width check (T8) and the kernel no width mask, so a seq_len past a group's
    width reads the next row's block instead of being refused.

    Every call goes through the conforming backend on a view of each table that runs on into the next
    rows' pages (the row-major memory an unmasked load reads), so the width check sees room that is not
    the row's own.
    """

    name = "vllm-53982"
    runner = TrustingRunner

    def default_kernels(self) -> Kernels:
        return UnguardedBlockTableKernels()

    def decode_locs(self, table: torch.Tensor, seq_lens: torch.Tensor, page_size: int,
                    *, actual_bs: int | None = None) -> torch.Tensor:
        return super().decode_locs(_run_on(table), seq_lens, page_size, actual_bs=actual_bs)

    def verify_locs(self, table: torch.Tensor, seq_lens: torch.Tensor, page_size: int, n: int,
                    *, actual_bs: int | None = None) -> torch.Tensor:
        return super().verify_locs(_run_on(table), seq_lens, page_size, n, actual_bs=actual_bs)

    def reanchor_locs(self, table: torch.Tensor, frontier: torch.Tensor, page_size: int, n: int
                      ) -> torch.Tensor:
        return super().reanchor_locs(_run_on(table), frontier, page_size, n)

    def extend_locs(self, table: torch.Tensor, prefix_lens: Sequence[int], extend_lens: Sequence[int],
                    page_size: int) -> torch.Tensor:
        return super().extend_locs(_run_on(table), prefix_lens, extend_lens, page_size)

    def group_locs(self, specs: Sequence[GroupSpec], tables: Mapping[str, torch.Tensor], batch: Batch,
                   *, tail_pad: int = DEFAULT_TAIL_PAD) -> dict[str, torch.Tensor]:
        return super().group_locs(specs, {gid: _run_on(t) for gid, t in tables.items()}, batch, tail_pad=tail_pad)


def _run_on(table: torch.Tensor) -> torch.Tensor:
    """A ``[rows, rows * width]`` view whose row r reads the table row-major from row r on (then zeros): what a
    load without a column mask sees. Anything but a non-empty 2-D tensor is passed on as it is."""
    if not isinstance(table, torch.Tensor) or table.dim() != 2 or table.numel() == 0:
        return table
    rows, width = table.shape
    memory = torch.cat([table.reshape(-1), table.new_zeros(rows * width)])
    return memory.as_strided((rows, rows * width), (width, 1))


def _locs_at(tables: Mapping[str, torch.Tensor], sizes: Mapping[str, int], batch: Batch, kernels: Kernels
             ) -> dict[str, torch.Tensor]:
    """Every group's locations at the given page sizes, straight from the kernels (no width check)."""
    if batch.mode == "extend":
        assert batch.prefix_lens is not None
        extend = [seq - p for seq, p in zip(batch.seq_lens, batch.prefix_lens, strict=True)]
        return extend_group_locs(tables, sizes, batch.prefix_lens, extend, kernels=kernels)
    seq = torch.tensor(batch.seq_lens, dtype=torch.int32)
    return fixed_group_locs(tables, sizes, seq, batch.tokens_per_row, kernels=kernels)


class WholeBufferLocViewRunner(GroupGraphBuffers):
    """vllm #13418: the location view is the whole persistent buffer, not this capture's ``bs*N`` tokens,
    so ``slot_mapping.size(0)`` and the padded key rows disagree."""

    def capture(self, bs: int, group_ids: Sequence[str], tokens_per_req: int = 1
                ) -> tuple[dict[str, torch.Tensor] | None, dict[str, torch.Tensor] | None]:
        tables, locs = super().capture(bs, group_ids, tokens_per_req)
        if locs is None:
            return tables, locs
        return tables, {gid: self.loc_buffers[gid] for gid in locs}


class Vllm13418(ZooBackend):
    name = "vllm-13418"
    runner = WholeBufferLocViewRunner


class UserBlockSizeRunner(GroupGraphBuffers):
    """vllm PR #51031: replay divides by the user block size B on tables expanded to kernel pages of K."""

    def __init__(self, specs: Sequence[GroupSpec] | Mapping[str, GroupSpec], **kwargs) -> None:
        super().__init__(specs, **kwargs)
        by_id = specs_by_id(specs)
        self._page_sizes = torch.tensor([by_id[g].block_granularity for g in self.group_ids], dtype=torch.int32,
                                        device=self.device)


class Vllm51031(ZooBackend):
    name = "vllm-51031"
    runner = UserBlockSizeRunner


class Vllm51031Swapped(ZooBackend):
    """vllm PR #51031, eager form: each group's locations use another group's page size (the groups'
    sizes rotated one place), as a stale or shared ``block_size`` does in a multi-group batch."""

    name = "vllm-51031-swapped"

    def group_locs(self, specs: Sequence[GroupSpec], tables: Mapping[str, torch.Tensor], batch: Batch,
                   *, tail_pad: int = DEFAULT_TAIL_PAD) -> dict[str, torch.Tensor]:
        checked = super().group_locs(specs, tables, batch, tail_pad=tail_pad)
        by_id = specs_by_id(specs)
        gids = sorted(checked)
        sizes = {gid: by_id[gids[(i + 1) % len(gids)]].block_granularity for i, gid in enumerate(gids)}
        return _locs_at({gid: tables[gid] for gid in gids}, sizes, batch, self.kernels)


def _int32_locs(tables: torch.Tensor, widths: torch.Tensor, page_sizes: torch.Tensor, rows: torch.Tensor,
                positions: torch.Tensor) -> torch.Tensor:
    groups = tables.shape[0]
    ps = page_sizes[:groups].to(torch.int32).unsqueeze(1)
    pos = positions.to(torch.int32).unsqueeze(0)
    col = pos // ps
    inside = col < widths[:groups].unsqueeze(1)
    g = torch.arange(groups, device=tables.device).unsqueeze(1)
    page = tables[g, rows.unsqueeze(0), torch.where(inside, col, 0)]
    return torch.where(inside, page, -1).clamp_min(0) * ps + pos % ps


class Int32SlotKernels(MutantLocKernels):
    """vllm #1486: ``page * ps + pos % ps`` computed in int32 (an int32 store wraps it the same way, so the
    values alone cannot tell; the z3 obligation W5.int32-product-wraps can)."""

    locs = staticmethod(_int32_locs)


class Vllm1486(ZooBackend):
    """vllm #1486: int32 slot arithmetic, and nothing checks that page ids keep their slots in int32 range.

    Debug mode runs every other check; a W5 breach is let through and its locations wrap.
    """

    name = "vllm-1486"

    def default_kernels(self) -> Kernels:
        return Int32SlotKernels()

    def group_locs(self, specs: Sequence[GroupSpec], tables: Mapping[str, torch.Tensor], batch: Batch,
                   *, tail_pad: int = DEFAULT_TAIL_PAD) -> dict[str, torch.Tensor]:
        try:
            return super().group_locs(specs, tables, batch, tail_pad=tail_pad)
        except ContractViolation as err:
            if err.clause_id != "W5":
                raise
        by_id = specs_by_id(specs)
        live = shed_state_groups(by_id, tables)
        return _locs_at(live, {gid: by_id[gid].block_granularity for gid in live}, batch, self.kernels)
