"""The plain-Python vocabulary of the contract: group specs, the batch, and its token positions.

A batch is described by its rows' lengths and its mode; which positions each row writes and reads
is defined here once, and every other module (validator, locations, checker, graph model) asks it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from kvtable.errors import ContractViolation

NULL_PAGE = 0
"""Page 0: the zero-initialised dummy page of padded rows and the null page of SWA holes."""

DEFAULT_TAIL_PAD = -1
INT32_MAX = 2**31 - 1
INT32_MIN = -(2**31)

Family = Literal["full", "sliding", "state"]
Mode = Literal["decode", "verify", "extend", "reanchor"]
MODES: tuple[Mode, ...] = ("decode", "verify", "extend", "reanchor")
Table = list[list[int]]


@dataclass(frozen=True)
class GroupSpec:
    """One cache group: its family, its block granularity (tokens per page) and, if sliding, its window."""

    group_id: str
    family: Family
    block_granularity: int
    window: int | None = None
    """Sliding groups: a query at position q attends to the keys at positions (q - window, q]."""

    def __post_init__(self) -> None:
        if self.family not in ("full", "sliding", "state"):
            raise ValueError(f"group {self.group_id!r}: unknown family {self.family!r}")
        if self.family == "state":
            return
        if not isinstance(self.block_granularity, int) or self.block_granularity < 1:
            raise ContractViolation("E1", f"block granularity must be a positive int, got "
                                    f"{self.block_granularity!r}", group=self.group_id)
        if self.family == "sliding" and (self.window is None or self.window < 1):
            raise ValueError(f"sliding group {self.group_id!r} needs a window >= 1, got {self.window!r}")

    @property
    def is_state(self) -> bool:
        return self.family == "state"


@dataclass(frozen=True)
class Batch:
    """The lengths of a batch's rows and the mode that decides what each row writes.

    ``seq_lens`` has one entry per row, padded rows included: the length after this step's tokens
    (for ``reanchor`` it is the draft frontier). Rows ``>= actual_bs`` are CUDA-graph padding
    (dummy rows). ``prefix_lens`` is for ``extend`` only: row i writes ``[prefix_i, seq_len_i)``.
    """

    seq_lens: tuple[int, ...]
    mode: Mode = "decode"
    n: int = 1
    prefix_lens: tuple[int, ...] | None = None
    actual_bs: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "seq_lens", tuple(self.seq_lens))
        if self.prefix_lens is not None:
            object.__setattr__(self, "prefix_lens", tuple(self.prefix_lens))
        if self.mode not in MODES:
            raise ValueError(f"unknown mode {self.mode!r}; expected one of {MODES}")
        if self.mode == "extend" and self.prefix_lens is None:
            raise ValueError("an extend batch needs prefix_lens")
        if self.mode == "decode" and self.n != 1:
            raise ValueError(f"decode writes one token per request, got n={self.n}; use mode='verify'")
        if self.actual_bs is not None and not 0 <= self.actual_bs <= self.bs:
            raise ContractViolation("T9", f"actual_bs {self.actual_bs} outside [0, {self.bs}]")

    @classmethod
    def extend(cls, prefix_lens: Sequence[int], extend_lens: Sequence[int]) -> Batch:
        """An extend batch from the CPU mirrors ``prefix_lens`` and ``extend_lens``."""
        if len(prefix_lens) != len(extend_lens):
            raise ContractViolation("T9", f"{len(prefix_lens)} prefix lengths but {len(extend_lens)} "
                                    "extend lengths")
        seq = tuple(p + e for p, e in zip(prefix_lens, extend_lens, strict=True))
        return cls(seq_lens=seq, mode="extend", prefix_lens=tuple(prefix_lens))

    @property
    def bs(self) -> int:
        return len(self.seq_lens)

    @property
    def live_rows(self) -> int:
        return self.bs if self.actual_bs is None else self.actual_bs

    def is_dummy(self, row: int) -> bool:
        return row >= self.live_rows

    @property
    def tokens_per_row(self) -> int:
        """Locations per row for the fixed-count modes (decode, verify, reanchor)."""
        return 1 if self.mode == "decode" else self.n

    def write_positions(self, row: int) -> list[int]:
        """The token positions row ``row`` writes, in output order (clamped at 0 where the mode clamps)."""
        seq = self.seq_lens[row]
        if self.mode == "extend":
            assert self.prefix_lens is not None
            return list(range(self.prefix_lens[row], seq))
        first = seq - self.tokens_per_row
        return [max(first + t, 0) for t in range(self.tokens_per_row)]

    def first_query(self, row: int) -> int | None:
        """The earliest position this step queries from, or None if the row writes nothing."""
        seq = self.seq_lens[row]
        if self.mode == "extend":
            assert self.prefix_lens is not None
            prefix = self.prefix_lens[row]
            return prefix if seq > prefix else None
        return max(seq - self.tokens_per_row, 0)

    def read_start(self, row: int, window: int | None) -> int:
        """The first key position this row's queries read: 0 for full attention, else the window start."""
        first = self.first_query(row)
        if window is None or first is None:
            return 0
        return max(first - window + 1, 0)
