"""The reference's reading of the shared vocabulary (``kvtable.contract``): which positions a row writes and reads.

The data types live in ``kvtable.contract`` and are re-exported here for existing callers; the rules that
give them meaning (a batch's well-formedness, its write and read positions) are the reference's own.
"""

from __future__ import annotations

from numbers import Integral
from typing import Literal, TypeGuard

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
    "MAX_PAGE_SIZE", "SHORT_ROWS", "ShortRows", "Table", "check_actual_bs", "check_batch_form", "check_group_spec",
    "check_pad_value", "check_page_size",
    "first_query", "is_int", "read_start", "unclamped_positions", "write_positions",
]

Table = list[list[int]]

ShortRows = Literal["refuse", "sink", "clamp"]
SHORT_ROWS: tuple[ShortRows, ...] = ("refuse", "sink", "clamp")
"""What a runner does with a live row shorter than N (in graph replay, also of length 0): refuse it (T9 / W2),
send its negative positions to the sink (slot 0 of page 0), or clamp them at 0 (tokenspeed)."""


def is_int(value: object) -> TypeGuard[int]:
    """An integer (a python int, or any ``numbers.Integral`` such as numpy's) that is not a bool: ``True`` is
    no batch size, page size or token count."""
    return isinstance(value, Integral) and not isinstance(value, bool)


def check_actual_bs(actual_bs: int, bs: int | None) -> int:
    """T9 lengths: ``actual_bs`` is an int in ``[0, bs]`` (no upper bound when ``bs`` is None); returns it."""
    if not is_int(actual_bs) or actual_bs < 0 or (bs is not None and actual_bs > bs):
        raise ContractViolation("T9", f"actual_bs {actual_bs!r} outside [0, {'inf' if bs is None else bs}]")
    return actual_bs


def check_pad_value(tail_pad: object) -> None:
    """T3 tail-pad: the tail pad is -1, or 0 for a backend whose kernels need full-width tables."""
    if not is_int(tail_pad) or tail_pad not in (-1, 0):
        raise ContractViolation("T3", f"the tail pad is -1 or 0, got {tail_pad!r}")


MAX_PAGE_SIZE = (INT32_MAX + 1) // 2
"""W5: the largest page size at which page 1, the first real page, has int32 slots (``2 * ps <= 2^31``)."""


def check_page_size(page_size: object, *, group: str | None = None) -> None:
    """E1 page-ratio: a page holds a positive whole number of tokens (an int, not a bool); and W5 int32-locs:
    at most ``2^30`` of them, else no real page has int32 slots (checked before any table is read)."""
    if not is_int(page_size) or page_size < 1:
        raise ContractViolation("E1", f"page size must be a positive int, got {page_size!r}", group=group)
    if page_size > MAX_PAGE_SIZE:
        raise ContractViolation("W5", f"page size {page_size} leaves no real page int32 slots (page 1 ends at "
                                f"{2 * page_size - 1} > 2^31 - 1)", group=group)


def check_group_spec(spec: GroupSpec) -> None:
    """A declared group: a known family and layout (R1: a ring group is refused here, ``ring_locs`` serves it); E1
    page-ratio for a non-state group's block granularity; a window for a sliding group, and none for a
    full-attention one."""
    if spec.family not in ("full", "sliding", "state"):
        raise ValueError(f"group {spec.group_id!r}: unknown family {spec.family!r}")
    if spec.layout not in ("holes", "ring") or (spec.layout == "ring" and spec.family != "sliding"):
        raise ValueError(f"group {spec.group_id!r}: layout {spec.layout!r} (holes, or ring for a sliding group)")
    if spec.layout == "ring":
        raise ContractViolation("R1", "a ring group's locations come from ring_locs (R1-R3), not from the batch "
                                "calls", group=spec.group_id)
    if spec.is_state:
        return
    check_page_size(spec.block_granularity, group=spec.group_id)
    if spec.family == "sliding" and (not isinstance(spec.window, int) or spec.window < 1):
        raise ValueError(f"sliding group {spec.group_id!r} needs a window >= 1, got {spec.window!r}")
    if spec.family == "full" and spec.window is not None:
        raise ContractViolation("T4", f"a full-attention group reads every column from 0 and has no window, got "
                                f"{spec.window!r}; declare it sliding", group=spec.group_id)


def check_batch_form(batch: Batch) -> None:
    """A batch the reference can read: a known mode, prefix lengths for extend, n = 1 for decode, an int
    n >= 1 for verify (W2) and re-anchor (W4), and (T9) lengths and ``actual_bs`` within ``[0, bs]``."""
    if batch.seq_lens is None:
        raise ContractViolation("T9", "a batch needs seq_lens (one length per row), got None")
    if batch.mode not in MODES:
        raise ValueError(f"unknown mode {batch.mode!r}; expected one of {MODES}")
    if batch.mode == "extend" and batch.prefix_lens is None:
        raise ValueError("an extend batch needs prefix_lens")
    if batch.mode == "decode" and batch.n != 1:
        raise ValueError(f"decode writes one token per request, got n={batch.n}; use mode='verify'")
    if batch.mode in ("verify", "reanchor") and (not is_int(batch.n) or batch.n < 1):
        raise ContractViolation("W2" if batch.mode == "verify" else "W4",
                                f"tokens per request must be an int >= 1, got {batch.n!r}")
    if batch.actual_bs is not None:
        check_actual_bs(batch.actual_bs, batch.bs)


def write_positions(batch: Batch, row: int) -> list[int]:
    """The token positions row ``row`` writes, in output order (clamped at 0 where the mode clamps)."""
    if batch.mode == "extend":
        return unclamped_positions(batch, row)
    return [max(pos, 0) for pos in unclamped_positions(batch, row)]


def unclamped_positions(batch: Batch, row: int) -> list[int]:
    """The positions before W2 / W4's clamp: ``seq_len - N + t`` (may be negative), or extend's range."""
    seq = batch.seq_lens[row]
    if batch.mode == "extend":
        assert batch.prefix_lens is not None
        return list(range(batch.prefix_lens[row], seq))
    return [seq - batch.tokens_per_row + t for t in range(batch.tokens_per_row)]


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
