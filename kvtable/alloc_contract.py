"""The allocator route's shared data (spec section 6a, A1-A6): what an allocator-driven step is handed and returns.

Like ``kvtable.contract`` this holds data only, no rule: the reference (``kvtable.reference.allocation``) and the
implementation (``kvtable.impl.allocation``) each judge these values their own way. The fields follow what a
real allocator-driven engine (SGLang) does: it may answer in a buffer it made itself (or a view of its free
list) instead of ``out``, take its own table rows, allocate past the committed length (a speculative step
rounded up to a page), give SWA slots to a tail only, and hands back its free list.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields, is_dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["AllocState", "Allocation", "SwaPool"]


def _source(obj: object) -> str:
    """Python source that rebuilds an allocator state (tensors as ``torch.tensor(...)``): replayable transcripts."""
    if hasattr(obj, "tolist") and hasattr(obj, "dtype"):
        return f"torch.tensor({obj.tolist()}, dtype={obj.dtype})"
    if is_dataclass(obj):
        return f"{type(obj).__name__}({', '.join(f'{f.name}={_source(getattr(obj, f.name))}' for f in fields(obj))})"
    return repr(obj)


@dataclass(frozen=True, repr=False)
class SwaPool:
    """A sliding-window pool behind the full pool (A5), as SGLang's SWA allocator keeps it."""

    mapping: torch.Tensor
    """int64 ``[full slots + 1]``: full slot -> SWA slot (0: none), then the sentinel -1 (``mapping[-1] = -1``).
    An output: record the chosen SWA slots in place or in a copy, and return it."""
    free_pages: torch.Tensor
    """int64 free SWA pages, in the order the allocator may take them."""
    pool_pages: int
    """SWA pages ``1 .. pool_pages`` exist; SWA page 0 is the reserved sink."""
    tail_lens: Sequence[int] | None = None
    """Declared tail-only allocation (SGLang's ``alloc_extend_swa_tail``): request ``i`` gets SWA slots for its
    last ``tail_lens[i]`` new tokens only, the others map to 0; None: every new token gets one."""

    __repr__ = _source


@dataclass(frozen=True, repr=False)
class AllocState:
    """What an allocator-driven step is handed (A1-A6, spec section 6a): request ``i`` gets the positions
    ``[allocated_lens[i], end)`` of row ``rows[i]`` of ``req_to_token``, ``end >= seq_lens[i]``; lengths are CPU
    mirrors. Only ``req_to_token``, ``out`` and ``swa.mapping`` may be written; every other field must come
    back as it was handed (A4)."""

    req_to_token: torch.Tensor
    """``[pool rows, max_context_len]`` token table (in the profile's table dtype: SGLang's is int32): slot of each
    (row, position). Record into it in place or into a copy; return the table as recorded."""
    rows: Sequence[int]
    """The table row of each request (SGLang's ``req_pool_indices``): where its prefix's slots are."""
    prefix_lens: Sequence[int]
    """Committed positions per request before the step."""
    seq_lens: Sequence[int]
    """Committed positions per request after the step: decode ``prefix + 1``, verify ``prefix + N``, extend the
    chunk's end."""
    free_pages: torch.Tensor
    """int64 free pages (slots at page size 1), in the order the allocator may take them."""
    page_size: int
    pool_pages: int
    """Pages ``1 .. pool_pages`` form the pool; page 0 (slot 0 at page size 1) is the reserved padding sink."""
    out: torch.Tensor
    """int64 output buffer, one entry per token in request order, filled with a sentinel: write the chosen slots
    here and return it, or return a buffer of your own (kvtable guards a 1-D integer ``torch.empty`` made
    inside the call)."""
    swa: SwaPool | None = None
    allocated_lens: Sequence[int] | None = None
    """Positions ``[0, allocated_lens[i])`` of request ``i`` already hold slots (``>= prefix``: an earlier
    speculative step over-allocated up to its page's end, SGLang's ``kv_allocated_len``). None: ``prefix_lens``,
    and the caller keeps no allocated lengths, so the step allocates exactly up to ``seq_lens``."""
    free_rows: Sequence[int] = ()
    """Table rows no request holds (SGLang's ``ReqToTokenPool.free_slots``): a backend that takes a fresh row for
    a request (``alloc_for_extend``) takes one of these, copies the prefix's slots to it and returns the rows."""

    __repr__ = _source


@dataclass(frozen=True, repr=False)
class Allocation:
    """What an allocator-driven step did: the slots it chose, the tables as it recorded them, its free list."""

    locs: torch.Tensor
    """The chosen slots, one per new token in request order: ``state.out``, or the backend's own buffer."""
    req_to_token: torch.Tensor
    """The token table as recorded (its dtype is the engine's: the profile's ``allocator.table_dtype``)."""
    swa_locs: torch.Tensor | None = None
    """With a SWA pool: each token's SWA slot (SGLang: int32, ``translate_loc_from_full_to_swa``)."""
    swa_mapping: torch.Tensor | None = None
    """With a SWA pool: the full-to-SWA mapping as recorded."""
    rows: Sequence[int] | None = None
    """The row each request's slots went to, if the backend chose them; None: ``state.rows``."""
    allocated_lens: Sequence[int] | None = None
    """Each request's allocated end after the step (``>= seq_lens``; at most the end of ``seq_lens``'s page, and
    only where the state carries ``allocated_lens``); None: ``max(seq_lens, allocated_lens)``."""
    free_pages: torch.Tensor | None = None
    """The free list after the step (A6); None: the backend keeps none kvtable can read."""
    freed_pages: torch.Tensor | None = None
    """Pages the step released and has not put back on its free list yet (A6)."""
    swa_free_pages: torch.Tensor | None = None
    """With a SWA pool: its free list after the step (A6); None: the backend keeps none kvtable can read."""

    __repr__ = _source
