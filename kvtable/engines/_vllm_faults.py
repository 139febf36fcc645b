"""Named faults patched into vLLM 0.33's real worker code at run time (``--fault``): each one a known bug class.

vLLM 0.33.0's ``ComputeSlotMappingKernel`` loads ``block_table[row, pos // block_size]`` with no column bound
(vLLM #53982 is not fixed there): what keeps its loads inside a row is that every group's table is sized for
``max_model_len`` and padded up by ``get_block_table_width``. ``53982`` takes that away, as the hybrid tables of
#53982 did; ``51031`` hands the kernel a block size that is not its table's, as PR #51031 fixed in the V2 runner.
"""

from __future__ import annotations

from typing import Any

FAULTS: dict[str, str] = {
    "53982": "every group's block table one column narrower than its rows need, the blocks past it dropped "
             "(vLLM #53982's narrow hybrid tables): the unguarded slot-mapping load reads the next row's block",
    "51031": "the slot-mapping kernel launched with twice its group's block size (a stale block size, vLLM PR "
             "#51031): slots land in other blocks",
}

_APPLIED: set[str] = set()


def _narrow_tables() -> None:
    """``get_block_table_width`` one column short and unpadded; ``append_row`` keeps only the ids that fit."""
    from vllm.v1.worker import block_table

    append_row = block_table.BlockTable.append_row

    def narrow_width(max_num_blocks: int, block_size: int, *, token_alignment: int | None = 128) -> int:
        return max(max_num_blocks - 1, 1)

    def append_fitting(self: Any, block_ids: list[int], row_idx: int) -> None:
        room = self.max_num_blocks_per_req - int(self.num_blocks_per_row[row_idx])
        append_row(self, list(block_ids)[:max(room, 0)], row_idx)

    block_table.get_block_table_width = narrow_width
    block_table.BlockTable.append_row = append_fitting


def _stale_block_size() -> None:
    """Every launch of the slot-mapping kernel gets ``2 * kv_cache_block_size``."""
    from vllm.v1.worker.block_table import ComputeSlotMappingKernel

    call = ComputeSlotMappingKernel.__call__

    def launch(self: Any, num_reqs: int, num_tokens: int, max_num_tokens: int, query_start_loc: Any, positions: Any,
               table: Any, stride: int, slot_mapping: Any, kv_cache_block_size: int, *rest: int) -> Any:
        return call(self, num_reqs, num_tokens, max_num_tokens, query_start_loc, positions, table, stride,
                    slot_mapping, 2 * kv_cache_block_size, *rest)

    ComputeSlotMappingKernel.__call__ = launch


_PATCHES = {"53982": _narrow_tables, "51031": _stale_block_size}


def apply(fault: str | None) -> None:
    """Patch ``fault`` into the imported vLLM for the rest of this process (None: nothing); a name not in
    ``FAULTS`` is a ``KeyError`` naming the known ones."""
    if fault is None or fault in _APPLIED:
        return
    if fault not in _PATCHES:
        raise KeyError(f"no vLLM fault {fault!r} (known: {', '.join(FAULTS)})")
    _PATCHES[fault]()
    _APPLIED.add(fault)
