"""The data both sides of the contract share, and nothing else: constants, group specs, the batch, the errors.

The reference model (``kvtable.reference``) and the implementation (``kvtable.impl``) each check these
values their own way; nothing here validates or computes a clause, so a bug in one side's rules can never
hide in the other's. ``spec/SPEC.md`` gives every field its meaning.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from kvtable.errors import ContractViolation, StaleGraphState

__all__ = [
    "DEFAULT_TAIL_PAD", "INT32_MAX", "INT32_MIN", "MODES", "NULL_PAGE", "RING_SENTINEL", "Batch", "ContractViolation",
    "Family", "GroupSpec", "Layout", "Mode", "Specs", "StaleGraphState",
]

NULL_PAGE = 0
"""Page 0: the zero-initialised dummy page of padded rows and the null page of SWA holes."""

DEFAULT_TAIL_PAD = -1
"""The pad past a row's last real page (a full-width-table backend pads with 0 instead)."""

RING_SENTINEL = -1
"""A ring group's read entry that takes one of the step's own new keys, not a cached slot (R3; transformers'
``sentinel_index``)."""

INT32_MAX = 2**31 - 1
INT32_MIN = -(2**31)

Family = Literal["full", "sliding", "state"]
Layout = Literal["holes", "ring"]
"""How a sliding group stores its window: ``holes`` (a row of pages, those that left the window page 0 at the front,
T5) or ``ring`` (a fixed set of pages reused as a ring buffer, R1-R3)."""
Mode = Literal["decode", "verify", "extend", "reanchor"]
MODES: tuple[Mode, ...] = ("decode", "verify", "extend", "reanchor")


@dataclass(frozen=True)
class GroupSpec:
    """One cache group as declared: its family, its block granularity (tokens per page) and, if sliding, its window.

    Nothing checks the values here: each side's validator does (E1 for the granularity).
    """

    group_id: str
    family: Family
    block_granularity: int
    window: int | None = None
    """Sliding groups: a query at position q attends to the keys at positions (q - window, q]."""
    layout: Layout = "holes"
    """Sliding groups: ``holes`` (T5) or ``ring`` (R1-R3, transformers' sliding-window cache)."""

    @property
    def is_state(self) -> bool:
        return self.family == "state"


Specs = Sequence[GroupSpec] | Mapping[str, GroupSpec]
"""The declared groups as the API takes them: a sequence of specs, or a mapping from group id to spec."""


@dataclass(frozen=True)
class Batch:
    """The lengths of a batch's rows and the mode that decides what each row writes.

    ``seq_lens`` has one entry per row, padded rows included: the length after this step's tokens
    (for ``reanchor`` it is the draft frontier). Rows ``>= actual_bs`` are CUDA-graph padding
    (dummy rows). ``prefix_lens`` is for ``extend`` only: row i writes ``[prefix_i, seq_len_i)``.
    Iterables are stored as tuples; nothing else is checked here (T9 and W2 are each side's to check).
    """

    seq_lens: tuple[int, ...]
    mode: Mode = "decode"
    n: int = 1
    prefix_lens: tuple[int, ...] | None = None
    actual_bs: int | None = None

    def __post_init__(self) -> None:
        for name in ("seq_lens", "prefix_lens"):
            values = getattr(self, name)
            if hasattr(values, "tolist"):  # a tensor or array of lengths: its values, not 0-d elements
                values = values.tolist()
            if isinstance(values, Iterable) and not isinstance(values, (str, bytes)):
                object.__setattr__(self, name, tuple(values))

    @classmethod
    def extend(cls, prefix_lens: Sequence[int], extend_lens: Sequence[int]) -> Batch:
        """An extend batch from the CPU mirrors: ``seq_len = prefix + extend`` per request.

        Mirrors of different lengths describe no batch at all, so they are refused here (T9) rather than cut.
        """
        if len(prefix_lens) != len(extend_lens):
            raise ContractViolation("T9", f"{len(prefix_lens)} prefix lengths but {len(extend_lens)} "
                                    "extend lengths")
        seq = tuple(p + e for p, e in zip(prefix_lens, extend_lens, strict=True))
        return cls(seq_lens=seq, mode="extend", prefix_lens=tuple(prefix_lens))

    @property
    def bs(self) -> int:
        """Rows in the batch, padded rows included."""
        return len(self.seq_lens)

    @property
    def live_rows(self) -> int:
        """Rows ``[0, live_rows)`` are real requests; the rest are padding."""
        return self.bs if self.actual_bs is None else self.actual_bs

    def is_dummy(self, row: int) -> bool:
        """A padded (CUDA-graph dummy) row."""
        return row >= self.live_rows

    @property
    def tokens_per_row(self) -> int:
        """Locations per row for the fixed-count modes (decode, verify, reanchor)."""
        return 1 if self.mode == "decode" else self.n
