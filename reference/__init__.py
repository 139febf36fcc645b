"""The pure-Python reference model: the contract's meaning in plain ints and lists (no torch)."""

from kvtable.reference.checker import check_write_locs
from kvtable.reference.expand import expand_entry, expand_table, page_ratio
from kvtable.reference.graph import GraphModel, View
from kvtable.reference.groups import select_group, select_locs
from kvtable.reference.locs import batch_locs, decode_locs, extend_locs, reanchor_locs, verify_locs
from kvtable.reference.model import DEFAULT_TAIL_PAD, NULL_PAGE, Batch, GroupSpec
from kvtable.reference.safety import UnsafeWrite, token_positions, unsafe_writes
from kvtable.reference.slots import page_slots, row_slots
from kvtable.reference.tables import check_int32_range, check_tables, shed_state_groups

__all__ = [
    "DEFAULT_TAIL_PAD", "NULL_PAGE", "Batch", "GraphModel", "GroupSpec", "View", "batch_locs",
    "check_int32_range", "check_tables", "check_write_locs", "decode_locs", "expand_entry", "expand_table",
    "extend_locs", "page_ratio", "page_slots", "reanchor_locs", "row_slots", "select_group", "select_locs",
    "shed_state_groups", "token_positions", "unsafe_writes", "UnsafeWrite", "verify_locs",
]
