"""Model Runner V2's route (vllm/v1/worker/gpu/block_table.py): its gather and slot-mapping kernels, launched as
``BlockTables`` launches them, on tables of our own.

``BlockTables`` itself cannot be built on a CPU (its staged writes keep pinned UVA buffers), so each call lays the
handed tables out as V2's persistent per-group tables (int32, a pointer table over them, per-group strides and
block sizes) and launches ``_compute_slot_mappings_kernel`` (every group in one launch, the tail of the slot
buffer padded with -1 from the live tokens on) or ``_gather_block_tables_kernel`` (each batch row's first
``num_blocks`` entries copied into the forward-pass tables, padded rows zeroed). Both load their tables through
the pointer table, which Triton's interpreter follows. Kernel blocks smaller than the manager's are V1's
``map_to_kernel_block_table`` in V2 too.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from kvtable.engines._vllm_backend import VllmBackend, query_start_loc, table_sizes

PAD_SLOT_ID = -1


def _pointers(tables: Sequence[torch.Tensor]) -> torch.Tensor:
    """uint64 data pointers, as ``BlockTables._make_ptr_tensor`` keeps them."""
    return torch.tensor([t.data_ptr() for t in tables], dtype=torch.uint64)


def _persistent(tables: Sequence[torch.Tensor], rows: int, widths: Sequence[int]) -> list[torch.Tensor]:
    """Each group's persistent table: the handed rows, 0 past them (``StagedWriteTensor`` starts zeroed)."""
    out = []
    for table, width in zip(tables, widths, strict=True):
        persistent = torch.zeros(rows + 1, width, dtype=torch.int32)
        persistent[:len(table), :table.shape[1]] = table
        out.append(persistent)
    return out


class VllmV2Backend(VllmBackend):
    """The V1 backend's calls, every slot mapping by Model Runner V2's kernel and ratio-1 expansion by its gather."""

    name = "vllm-0.33-v2"

    def _slot_mappings(self, tables: Sequence[torch.Tensor], block_sizes: Sequence[int], counts: Sequence[int],
                       positions: torch.Tensor, total_tokens: int) -> list[torch.Tensor]:
        from vllm.v1.worker.gpu.block_table import _compute_slot_mappings_kernel

        rows, widths = table_sizes(tables, block_sizes, counts, positions)
        persistent = _persistent(tables, rows, widths)
        groups = len(tables)
        slots = torch.zeros(groups, max(total_tokens, 1), dtype=torch.int64)
        enabled = torch.ones(groups, dtype=torch.bool)
        _compute_slot_mappings_kernel[(groups, len(counts) + 1)](
            slots.shape[1], torch.arange(len(counts), dtype=torch.int32), query_start_loc(counts), positions,
            _pointers(persistent), torch.tensor([t.stride(0) for t in persistent], dtype=torch.int64),
            torch.tensor(list(block_sizes), dtype=torch.int32), enabled, enabled, slots, slots.stride(0), 0,
            CP_SIZE=1, CP_INTERLEAVE=1, PAD_ID=PAD_SLOT_ID, TRITON_BLOCK_SIZE=1024)
        return [slots[g, :total_tokens].clone() for g in range(groups)]

    def expand_table(self, table: torch.Tensor, ratio: int, *, max_kernel_pages: int | None = None,
                     tail_pad: int = 0, actual_bs: int | None = None) -> torch.Tensor:
        """At ratio 1, ``gather_block_tables``: the live rows' entries copied (all of them: ``num_blocks`` is
        the row's width), the padded rows zeroed; otherwise V1's expansion."""
        if ratio != 1:
            return super().expand_table(table, ratio, max_kernel_pages=max_kernel_pages, tail_pad=tail_pad,
                                        actual_bs=actual_bs)
        from vllm.v1.worker.gpu.block_table import _gather_block_tables_kernel

        rows, cols = table.shape
        live = rows if actual_bs is None else actual_bs
        source = _persistent([table.to(torch.int32)], rows, [max(cols, 1)])
        gathered = [torch.zeros_like(source[0])]
        num_blocks = torch.full((1, rows + 1), cols, dtype=torch.int32)
        if rows:
            _gather_block_tables_kernel[(1, rows)](
                torch.arange(live, dtype=torch.int32), _pointers(source), _pointers(gathered),
                torch.tensor([source[0].stride(0)], dtype=torch.int64), num_blocks, num_blocks.stride(0), live,
                num_blocks[0], torch.zeros(1, dtype=torch.int32), torch.ones(1, dtype=torch.int32),
                MASK_SLIDING_WINDOW=False, BLOCK_SIZE=1024)
        out_width = cols if max_kernel_pages is None else max_kernel_pages
        out = torch.zeros((rows, out_width), dtype=torch.int32)
        keep = min(out_width, cols)
        out[:, :keep] = gathered[0][:rows, :keep]
        return out
