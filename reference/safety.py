"""The safety oracle: for ANY input, which slots each output location may name, and which do not.

Safety is weaker than correctness and holds for broken input too (stale or garbage ``seq_lens``, -1
columns inside the live range, positions past a row's width, page ids near the int32 edge, garbage
in dummy rows): whatever a backend returns, a write may only land where it cannot hurt another
request. Nothing here validates or raises; every input gets an answer.

A location written for token ``(row, pos)`` is allowed iff it is one of:

- **the token's own slot**: ``p = table[row][pos // page_size]`` exists (the row and column are
  inside the table, ``pos >= 0``), ``p > 0`` (a real page, below ``pool_pages`` when the pool size is
  known) and ``loc == p * page_size + pos % page_size``. The request owns that page, so the write can
  only touch its own tokens;
- **the sink**, a slot of page 0 (``0 <= loc < page_size``): page 0 is the zero-initialised dummy page
  that padded rows and swallowed writes go to; no request owns it;
- **the profile's pad slot** (``pad_slot``, e.g. -1): a value writers skip, so nothing is written.

Everything else is unsafe: another request's page, the wrong column or offset of the own row, a
negative slot other than the pad, a slot past the pool, or a real slot written for a token that owns
none (a padded row, a negative position, a column past the row or on a pad entry).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

Token = tuple[int, int | None]
"""``(row, position)`` of one output location; position None marks a padded row's token (it owns no slot)."""


@dataclass(frozen=True)
class UnsafeWrite:
    """One output location that lands outside every slot its token may write."""

    group: str | None
    row: int | None
    """The token's row, or None for an output entry past the last token."""
    token: int
    """Index of the location in the output."""
    position: int | None
    """The token's position, or None for a padded row's token or an entry past the last token."""
    loc: int
    reason: str


def token_positions(mode: str, seq_lens: Sequence[int], *, n: int = 1, prefix_lens: Sequence[int] | None = None,
                    extend_lens: Sequence[int] | None = None, actual_bs: int | None = None) -> list[Token]:
    """``(row, position)`` of each output location, in output order, for any lengths (no validation).

    decode: position ``seq_len - 1`` per row, unclamped (seq_len 0 gives -1, which owns no slot).
    verify and reanchor: ``max(seq_len - n + t, 0)`` for ``t < n``, token-major (the clamp is W2/W4's).
    extend: ``[prefix, prefix + extend)`` per row, ``extend = extend_lens[i]`` (else ``seq_len - prefix``).
    Rows ``>= actual_bs`` are padding: their tokens come with position None (sink or pad slot only).
    """
    if mode == "extend":
        prefixes = list(prefix_lens) if prefix_lens is not None else [0] * len(seq_lens)
        if extend_lens is None:
            extend_lens = [seq - prefix for seq, prefix in zip(seq_lens, prefixes, strict=False)]
        rows: list[tuple[int, Sequence[int]]] = [(row, range(prefix, prefix + extend))
                for row, (prefix, extend) in enumerate(zip(prefixes, extend_lens, strict=False))]
    elif mode == "decode":
        rows = [(row, [seq - 1]) for row, seq in enumerate(seq_lens)]
    elif mode in ("verify", "reanchor"):
        rows = [(row, [max(seq - n + t, 0) for t in range(n)]) for row, seq in enumerate(seq_lens)]
    else:
        raise ValueError(f"unknown mode {mode!r}; expected decode, verify, reanchor or extend")
    live = len(seq_lens) if actual_bs is None else actual_bs
    return [(row, pos if row < live else None) for row, positions in rows for pos in positions]


def unsafe_writes(table: Any, locs: Any, tokens: Sequence[Token], page_size: int, *, group: str | None = None,
                  pad_slot: int | None = None, pool_pages: int | None = None) -> list[UnsafeWrite]:
    """Every output location outside its token's allowed slots (own slot, sink, pad slot), in output order.

    ``table`` and ``locs`` may be lists or anything with ``tolist()``. Output entries past the last
    token may only be the sink or the pad slot; a missing location is no write and so is safe.
    """
    rows = table.tolist() if hasattr(table, "tolist") else table
    values = locs.tolist() if hasattr(locs, "tolist") else list(locs)
    unsafe: list[UnsafeWrite] = []
    for index, loc in enumerate(values):
        row, pos = tokens[index] if index < len(tokens) else (None, None)
        if loc == pad_slot or 0 <= loc < page_size:
            continue
        reason = _why_unsafe(rows, row, pos, loc, page_size, pool_pages)
        if reason:
            unsafe.append(UnsafeWrite(group, row, index, pos, loc, reason))
    return unsafe


def _why_unsafe(rows: Any, row: int | None, pos: int | None, loc: int, page_size: int,
                pool_pages: int | None) -> str:
    """Why ``loc`` (neither the sink nor the pad slot) is not the token's own slot; '' when it is."""
    if loc < 0:
        return f"negative slot {loc}, not the pad slot"
    if page_size < 1:
        return f"page size {page_size} defines no slots"
    page, offset = divmod(loc, page_size)
    if pool_pages is not None and page >= pool_pages:
        return f"past the pool: page {page} of a pool of {pool_pages} pages"
    if row is None:
        return "no token writes this output entry"
    if pos is None:
        return f"a padded row writes page {page}; padded rows own no slot"
    own = _own_page(rows, row, pos, page_size)
    if own is None:
        return f"position {pos} owns no slot (negative, or its column is outside the row); it wrote page {page}"
    if own <= 0:
        return f"position {pos} falls on entry {own} (a hole or pad, no own slot); it wrote page {page}"
    if page != own:
        return f"another page: wrote page {page}{_whose(rows, page)}, its own page is {own}"
    if offset != pos % page_size:
        return f"wrong offset: wrote offset {offset} of its own page {own}, expected {pos % page_size}"
    return ""


def _own_page(rows: Any, row: int, pos: int, page_size: int) -> int | None:
    """The table entry at the token's column, or None when the row, column or position does not exist."""
    col = pos // page_size
    if pos < 0 or not 0 <= row < len(rows) or col >= len(rows[row]):
        return None
    entry: int = rows[row][col]
    return entry


def _whose(rows: Any, page: int) -> str:
    """`` (row r col c)`` for the first table entry holding ``page``, or ``` (in no row)``."""
    for r, entries in enumerate(rows):
        if page in entries:
            return f" (row {r} col {list(entries).index(page)})"
    return " (in no row)"
