"""vLLM 0.33's own slot mapping, kernel-block expansion and block allocation behind kvtable's backend protocol
(``kvtable conform``).

Every call builds the worker's ``MultiGroupBlockTable`` (vllm/v1/worker/block_table.py) for the tables it is
handed, fills each row with ``add_row`` and runs ``compute_slot_mapping``, which launches vLLM's Triton
``ComputeSlotMappingKernel`` (in Triton's interpreter): the kernel is launched for the live requests only,
and its extra program writes ``PAD_SLOT_ID`` (-1) over the rest of the slot buffer, which is how V1 pads a
CUDA-graph batch. vLLM sizes every group's table for ``max_model_len`` (``AttentionSpec.max_num_blocks_per_req``,
padded by ``get_block_table_width``) and its scheduler never schedules a position past it, so a handed table
narrower than the batch's positions is a row of vLLM's table whose later columns hold 0: each group's table is
made at least as wide as the batch reaches, and a spare row follows the batch's (vLLM's kernel has no column
bound: a table narrower than its positions reads the next row, vLLM #53982; fault ``53982``).
Expansion is ``AttentionGroup.map_to_kernel_block_table`` (vllm/v1/worker/utils.py); the allocator route is
the scheduler's ``KVCacheManager`` (``kvtable.engines._vllm_alloc``), its slots by this backend's kernel.
What vLLM does not have is left out: no re-anchor (``Unsupported``), no debug checker, no kvtable-shaped
CUDA-graph runner, no validation (its scheduler and KV-cache manager keep the invariants).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from kvtable.alloc_contract import Allocation, AllocState
from kvtable.backends import NoDebugMode
from kvtable.engines._vllm_alloc import allocate
from kvtable.errors import Unsupported

CPU = torch.device("cpu")


def query_start_loc(counts: Sequence[int]) -> torch.Tensor:
    """int32 ``[len(counts) + 1]`` token offsets of each request, as the model runner builds them."""
    return torch.tensor([0, *itertools.accumulate(counts)], dtype=torch.int32)


def fixed_positions(seq_lens: torch.Tensor, n: int) -> torch.Tensor:
    """Positions ``seq - n .. seq - 1`` of each row, request-major (decode: ``n == 1``)."""
    seq = seq_lens.to(torch.int64).reshape(-1, 1)
    return (seq - n + torch.arange(n, dtype=torch.int64)).reshape(-1)


def extend_positions(prefix_lens: Sequence[int], extend_lens: Sequence[int]) -> torch.Tensor:
    """Positions ``prefix .. prefix + extend - 1`` of each row, request-major."""
    parts = [torch.arange(p, p + e, dtype=torch.int64) for p, e in zip(prefix_lens, extend_lens, strict=True)]
    return torch.cat([torch.zeros(0, dtype=torch.int64), *parts])


def table_sizes(tables: Sequence[torch.Tensor], block_sizes: Sequence[int], counts: Sequence[int],
                positions: torch.Tensor) -> tuple[int, list[int]]:
    """The batch's rows (a spare row follows them, as in a persistent batch) and each group's table width: the
    handed width, or as many columns as the batch's positions reach (vLLM sizes tables for ``max_model_len``)."""
    rows = max([len(t) for t in tables] + [len(counts), 1])
    reach = int(positions.max()) + 1 if len(positions) else 0
    return rows, [max(int(t.shape[1]), -(-reach // size), 1) for t, size in zip(tables, block_sizes, strict=True)]


class VllmBackend:
    """Slot mappings (decode, verify, extend, per group) and kernel-block expansion, each by vLLM's own code."""

    name = "vllm-0.33"
    device = "cpu"

    def __init__(self) -> None:
        from vllm.v1.worker.block_table import MultiGroupBlockTable

        self._tables = MultiGroupBlockTable

    # -- slot mapping ---------------------------------------------------------------------------
    def _slot_mappings(self, tables: Sequence[torch.Tensor], block_sizes: Sequence[int], counts: Sequence[int],
                       positions: torch.Tensor, total_tokens: int) -> list[torch.Tensor]:
        """Each table's int64 slots for the live requests' ``counts`` tokens at ``positions``, in a buffer of
        ``total_tokens`` (the rest: the kernel's -1 padding)."""
        rows, widths = table_sizes(tables, block_sizes, counts, positions)
        multi = self._tables(max_num_reqs=rows + 1, max_num_batched_tokens=max(total_tokens, 1), pin_memory=False,
                             device=CPU, block_sizes=list(block_sizes), max_num_blocks=widths)
        lists = [t.tolist() for t in tables]
        for row in range(rows):
            multi.add_row(tuple(entries[row] if row < len(entries) else [] for entries in lists), row)
        multi.commit_block_table(rows)
        multi.compute_slot_mapping(len(counts), query_start_loc(counts), positions)
        return [multi[g].slot_mapping.gpu[:total_tokens].clone() for g in range(len(tables))]

    def _one(self, table: torch.Tensor, page_size: int, counts: Sequence[int], positions: torch.Tensor,
             total_tokens: int) -> torch.Tensor:
        return self._slot_mappings([table], [page_size], counts, positions, total_tokens)[0]

    def decode_locs(self, table: torch.Tensor, seq_lens: torch.Tensor, page_size: int,
                    *, actual_bs: int | None = None) -> torch.Tensor:
        """One token per live request at ``seq_len - 1``; padded requests are not launched (their slots: -1)."""
        return self.verify_locs(table, seq_lens, page_size, 1, actual_bs=actual_bs)

    def verify_locs(self, table: torch.Tensor, seq_lens: torch.Tensor, page_size: int, n: int,
                    *, actual_bs: int | None = None) -> torch.Tensor:
        """``n`` tokens per live request (the target model's verify of ``n - 1`` drafts)."""
        live = len(seq_lens) if actual_bs is None else actual_bs
        return self._one(table, page_size, [n] * live, fixed_positions(seq_lens[:live], n), len(seq_lens) * n)

    def extend_locs(self, table: torch.Tensor, prefix_lens: Sequence[int], extend_lens: Sequence[int],
                    page_size: int) -> torch.Tensor:
        """A chunked prefill: ``extend_lens[i]`` tokens of request ``i`` from ``prefix_lens[i]``."""
        counts = [int(e) for e in extend_lens]
        return self._one(table, page_size, counts, extend_positions(prefix_lens, counts), sum(counts))

    def group_locs(self, specs: Sequence[Any], tables: Mapping[str, torch.Tensor], batch: Any,
                   *, tail_pad: int = 0) -> dict[str, torch.Tensor]:
        """Every attention group in one ``MultiGroupBlockTable`` (vLLM's mamba groups compute no slots)."""
        if batch.mode == "reanchor":
            raise Unsupported("vLLM has no re-anchor: its drafts are verified at their own positions")
        present = [s for s in specs if s.group_id in tables and not s.is_state]  # T6: no slots for state groups
        if batch.mode == "extend":
            counts = [s - p for s, p in zip(batch.seq_lens, batch.prefix_lens, strict=True)]
            positions, total = extend_positions(batch.prefix_lens, counts), sum(counts)
        else:
            n = batch.tokens_per_row
            counts = [n] * batch.live_rows
            positions = fixed_positions(torch.tensor(batch.seq_lens[:batch.live_rows]), n)
            total = batch.bs * n
        slots = self._slot_mappings([tables[s.group_id] for s in present], [s.block_granularity for s in present],
                                    counts, positions, total)
        return dict(sorted((s.group_id, loc) for s, loc in zip(present, slots, strict=True)))

    # -- the allocator route: the scheduler's KVCacheManager --------------------------------------
    def alloc_decode(self, state: AllocState) -> Allocation:
        """One token per request: ``KVCacheManager.allocate_slots(request, 1)``."""
        return allocate(state, self._slot_mappings)

    def alloc_verify(self, state: AllocState) -> Allocation:
        """The verify tokens of each request (``1 + drafts`` scheduled tokens) in one ``allocate_slots``."""
        return allocate(state, self._slot_mappings)

    def alloc_extend(self, state: AllocState) -> Allocation:
        """A chunk of each request's prefill: ``allocate_slots(request, seq - prefix)``."""
        return allocate(state, self._slot_mappings)

    # -- kernel-block expansion -----------------------------------------------------------------
    def expand_table(self, table: torch.Tensor, ratio: int, *, max_kernel_pages: int | None = None,
                     tail_pad: int = 0, actual_bs: int | None = None) -> torch.Tensor:
        """``AttentionGroup.map_to_kernel_block_table``: entry ``b`` -> ``b*ratio + j`` (every entry, tail and
        null block alike), in the group's persistent kernel table; ``max_kernel_pages`` cuts or zero-pads."""
        from vllm.v1.kv_cache_interface import FullAttentionSpec
        from vllm.v1.worker.block_table import get_block_table_width
        from vllm.v1.worker.utils import AttentionGroup

        if ratio < 1:
            raise ValueError(f"kernel blocks must divide the manager's blocks: ratio {ratio}")
        rows, cols = table.shape
        if ratio == 1:  # the kernel's block is the manager's: vLLM hands the table on as it is
            kernel = table.to(torch.int32)
        else:
            spec = FullAttentionSpec(block_size=ratio, num_kv_heads=1, head_size=1, dtype=torch.float32)
            width = get_block_table_width(max(cols, 1), ratio) * ratio
            group = AttentionGroup(backend=None, layer_names=[], kv_cache_spec=spec, kv_cache_group_id=0,
                                   kernel_block_size=1,
                                   kernel_block_table=torch.zeros(1, max(rows, 1), width, dtype=torch.int32),
                                   kernel_block_offsets=torch.arange(ratio, dtype=torch.int32))
            kernel = group.map_to_kernel_block_table(table.to(torch.int32))
        out_width = cols * ratio if max_kernel_pages is None else max_kernel_pages
        if out_width < 0:
            raise ValueError(f"max_kernel_pages must be >= 0, got {max_kernel_pages}")
        out = torch.zeros((rows, out_width), dtype=torch.int32)
        keep = min(out_width, kernel.shape[1])
        out[:, :keep] = kernel[:, :keep]
        return out


def make_backend(*, debug: bool = False, kind: type[VllmBackend] | None = None) -> VllmBackend:
    """The V1 backend, or ``kind`` (Model Runner V2's, ``_vllm_v2.VllmV2Backend``); vLLM has no debug mode (nothing
    checks a table on these paths), so ``debug=True`` is refused."""
    if debug:
        raise NoDebugMode("vLLM 0.33 has no debug mode on its slot-mapping path: its scheduler and KV-cache "
                          "manager keep the invariants, nothing checks a table")
    return (kind or VllmBackend)()
