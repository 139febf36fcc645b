"""The clause registry: one id and one name per clause, shared by SPEC.md, the reference, z3 and the tests.

Every ``ContractViolation`` names a clause from here; a test checks that SPEC.md, this registry and the
reference functions named here agree.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Clause:
    """One numbered clause of the contract."""

    id: str
    name: str
    summary: str
    reference: str
    """Dotted path (under ``kvtable.reference``) of the function that implements the clause."""

    @property
    def label(self) -> str:
        return f"{self.id} {self.name}"


CLAUSES: tuple[Clause, ...] = (
    # Tables ------------------------------------------------------------------------------------------
    Clause("T1", "table-shape", "one int32 [rows >= bs, width >= 1] table per non-state group",
           "tables.check_table_shape"),
    Clause("T2", "dummy-row", "padded rows (row >= actual_bs) are all page 0", "tables.check_dummy_rows"),
    Clause("T3", "tail-pad", "after a row's last real page only the tail pad (-1, or 0) follows",
           "tables.check_tail_pad"),
    Clause("T4", "live-pages", "every column a live position maps to holds a real page (> 0) or a front hole",
           "tables.check_live_pages"),
    Clause("T5", "swa-front-holes", "holes (page 0) only at a sliding row's front, never covering a needed page",
           "tables.check_swa_holes"),
    Clause("T6", "state-shed", "state-family groups are shed before location math, capture and checks",
           "tables.shed_state_groups"),
    Clause("T7", "private-write-pages", "a page with a write position is in one live row only",
           "tables.check_page_sharing"),
    Clause("T8", "table-width", "a row is wide enough for every position the mode reads or writes",
           "tables.check_width"),
    Clause("T9", "lengths", "seq_len >= 1 for live rows, prefix >= 0, extend >= 0, prefix + extend = seq_len",
           "tables.check_lengths"),
    # Write locations ----------------------------------------------------------------------------------
    Clause("W0", "slot-meaning", "the location of token p is slot p of the row's expanded slot list",
           "slots.row_slots"),
    Clause("W1", "decode-loc", "one location per request, at position seq_len - 1", "locs.decode_locs"),
    Clause("W2", "verify-loc", "N locations per request at seq_len-N .. seq_len-1, token-major, padded rows"
           " clamped at 0; real rows need seq_len >= N", "locs.verify_locs"),
    Clause("W3", "extend-loc", "positions [prefix, prefix + extend) per request, flattened in request order",
           "locs.extend_locs"),
    Clause("W4", "reanchor-loc", "a draft chain re-anchored to frontier f writes f-N .. f-1 (clamped at 0)",
           "locs.reanchor_locs"),
    Clause("W5", "int32-locs", "locations are int32: every page id p of a group satisfies (p+1)*ps <= 2^31",
           "tables.check_int32_range"),
    # Heterogeneous page sizes ------------------------------------------------------------------------
    Clause("E1", "page-ratio", "block granularity B is a positive multiple of kernel page size K; r = B // K",
           "expand.page_ratio"),
    Clause("E2", "block-expand", "block b covers kernel pages b*r .. b*r+r-1; holes stay 0, pads stay pad",
           "expand.expand_table"),
    Clause("E3", "unit-invariance", "locations from the block table at B equal those from the expanded table"
           " at K", "expand.expand_table"),
    # CUDA-graph buffers ------------------------------------------------------------------------------
    Clause("G1", "graph-init", "zeroed persistent buffers: tables [n, max_bs, width_g], locs [n, max_bs*N]",
           "graph.GraphModel.__init__"),
    Clause("G2", "capture-views", "capture hands out views [:bs] of the persistent buffers (stable pointers)",
           "graph.GraphModel.capture"),
    Clause("G3", "replay-fill", "replay copies live rows, pads tails, zero-fills rows [live, bs), leaves"
           " rows >= bs untouched", "graph.GraphModel.replay_fill"),
    Clause("G4", "replay-locs", "replay recomputes locs from live seq_lens into [:bs*N] only",
           "graph.GraphModel.replay_locs"),
    Clause("G5", "stale-guard", "replay refuses missing or empty tables, missing captured groups and extra"
           " uncaptured groups", "graph.GraphModel.stale_guard"),
    # Debug write checker -----------------------------------------------------------------------------
    Clause("D1", "own-page-write", "each write lands at column pos // ps of its own row, in a real page,"
           " at offset pos % ps", "checker.check_write_locs"),
    Clause("D2", "unique-slots", "no two live tokens of a group write the same slot", "checker.check_write_locs"),
    # Group selection ---------------------------------------------------------------------------------
    Clause("S1", "group-select", "a layer reads its own group's table; the sole group serves an empty or"
           " unknown id; otherwise KeyError naming the keys", "groups.select_group"),
    Clause("S2", "loc-select", "draft chains keep the caller's locations (prefer-caller)",
           "groups.select_locs"),
    # Allocator-driven steps --------------------------------------------------------------------------
    Clause("A1", "alloc-recorded", "each chosen location is recorded at its token's own position of its own row",
           "allocation.check_recorded"),
    Clause("A2", "alloc-rows-kept", "a step changes only its tokens' cells: no other row, no other position",
           "allocation.check_rows_kept"),
    Clause("A3", "alloc-free-slot", "each location is free (or on the request's own partial last page), in the"
           " pool, not page 0, not live, chosen once, at offset pos % ps", "allocation.check_free_slots"),
    Clause("A4", "alloc-out-buffer", "one location per token, every entry written, nothing before or past the"
           " output buffer, no input written",
           "allocation.check_out_buffer"),
    Clause("A5", "alloc-swa-slot", "each SWA slot is free, in the SWA pool, distinct; the mapping records it and"
           " keeps mapping[-1] = -1", "allocation.check_swa_slots"),
    Clause("A6", "alloc-pool-accounting", "the pages held, the free list and the freed pages partition the pool:"
           " no page handed out twice, none lost, none free while held", "allocation.check_pool"),
    # Sliding groups stored as a ring --------------------------------------------------------------
    Clause("R1", "ring-slot", "a ring row holds at most ceil(window / ps) private real pages; position p lives at ring"
           " index p % window", "ring.check_ring_table"),
    Clause("R2", "ring-write", "a step writes its last min(q, window) tokens at their R1 slots, earlier ones to the"
           " sink or pad slot", "ring.ring_write_locs"),
    Clause("R3", "ring-read", "a step reads its first query's cached window at R1 slots, then one sentinel per new"
           " token", "ring.ring_read_locs"),
)

_BY_ID = {c.id: c for c in CLAUSES}


def clause(clause_id: str) -> Clause:
    """The clause with this id (``"T2"``) or label (``"T2 dummy-row"``)."""
    key = clause_id.split()[0]
    try:
        return _BY_ID[key]
    except KeyError:
        raise KeyError(f"no clause {clause_id!r}; known: {sorted(_BY_ID)}") from None


def clause_label(clause_id: str) -> str:
    """``"T2"`` -> ``"T2 dummy-row"``; the form used in every error message."""
    return clause(clause_id).label
