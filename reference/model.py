"""The reference's reading of the shared vocabulary (``kvtable.contract``): which positions a row writes and reads.

The data types live in ``kvtable.contract`` and are re-exported here for existing callers; the rules that
give them meaning (a batch's well-formedness, its write and read positions) are the reference's own.
"""

from __future__ import annotations

from kvtable.contract import (
    DEFAULT_TAIL_PAD,
    INT32_MAX,
    INT32_MIN,
    MODES,
    NULL_PAGE,
    Batch,
    ContractViolation,
    Family,
    GroupSpec,
    Mode,
)

__all__ = [
    "DEFAULT_TAIL_PAD", "INT32_MAX", "INT32_MIN", "MODES", "NULL_PAGE", "Batch", "Family", "GroupSpec", "Mode",
    "Table", "check_actual_bs", "check_batch_form", "check_group_spec", "first_query", "is_int", "read_start",
    "write_positions",
]

Table = list[list[int]]


def is_int(value: object) -> bool:
    """An int that is not a bool: ``True`` is no batch size, page size or token count."""
    return isinstance(value, int) and not isinstance(value, bool)


def check_actual_bs(actual_bs: int, bs: int | None) -> int:
    """T9 lengths: ``actual_bs`` is an int in ``[0, bs]`` (no upper bound when ``bs`` is None); returns it."""
    if not is_int(actual_bs) or actual_bs < 0 or (bs is not None and actual_bs > bs):
        raise ContractViolation("T9", f"actual_bs {actual_bs!r} outside [0, {'inf' if bs is None else bs}]")
    return actual_bs


def check_group_spec(spec: GroupSpec) -> None:
    """A declared group: a known family; E1 page-ratio for a non-state group's block granularity; a window
    for a sliding group, and none for a full-attention one."""
    if spec.family not in ("full", "sliding", "state"):
        raise ValueError(f"group {spec.group_id!r}: unknown family {spec.family!r}")
    if spec.is_state:
        return
    granularity = spec.block_granularity
    if not is_int(granularity) or granularity < 1:
        raise ContractViolation("E1", f"block granularity must be a positive int, got {granularity!r}",
                                group=spec.group_id)
    if spec.family == "sliding" and (not isinstance(spec.window, int) or spec.window < 1):
        raise ValueError(f"sliding group {spec.group_id!r} needs a window >= 1, got {spec.window!r}")
    if spec.family == "full" and spec.window is not None:
        raise ContractViolation("T4", f"a full-attention group reads every column from 0 and has no window, got "
                                f"{spec.window!r}; declare it sliding", group=spec.group_id)


def check_batch_form(batch: Batch) -> None:
    """A batch the reference can read: a known mode, prefix lengths for extend, n = 1 for decode, and
    (T9) ``actual_bs`` within ``[0, bs]``."""
    if batch.mode not in MODES:
        raise ValueError(f"unknown mode {batch.mode!r}; expected one of {MODES}")
    if batch.mode == "extend" and batch.prefix_lens is None:
        raise ValueError("an extend batch needs prefix_lens")
    if batch.mode == "decode" and batch.n != 1:
        raise ValueError(f"decode writes one token per request, got n={batch.n}; use mode='verify'")
    if batch.actual_bs is not None:
        check_actual_bs(batch.actual_bs, batch.bs)


def write_positions(batch: Batch, row: int) -> list[int]:
    """The token positions row ``row`` writes, in output order (clamped at 0 where the mode clamps)."""
    seq = batch.seq_lens[row]
    if batch.mode == "extend":
        assert batch.prefix_lens is not None
        return list(range(batch.prefix_lens[row], seq))
    first = seq - batch.tokens_per_row
    return [max(first + t, 0) for t in range(batch.tokens_per_row)]


def first_query(batch: Batch, row: int) -> int | None:
    """The earliest position this step queries from, or None if the row writes nothing."""
    seq = batch.seq_lens[row]
    if batch.mode == "extend":
        assert batch.prefix_lens is not None
        prefix = batch.prefix_lens[row]
        return prefix if seq > prefix else None
    return max(seq - batch.tokens_per_row, 0)


def read_start(batch: Batch, row: int, window: int | None) -> int:
    """The first key position this row's queries read: 0 for full attention, else the window start."""
    first = first_query(batch, row)
    if window is None or first is None:
        return 0
    return max(first - window + 1, 0)
