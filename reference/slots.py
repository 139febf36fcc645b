"""W0 slot-meaning: a row's slots, enumerated page by page, define every location.

Page p owns the slots ``p*ps .. p*ps + ps - 1`` of its group's pool. A row's slot list is the
concatenation of its pages' slots in column order; the location of token position q is entry q of
that list. A pad column (negative entry) owns no slots, shown as ``None``.
"""

from __future__ import annotations

from collections.abc import Sequence


def page_slots(page: int, page_size: int) -> Sequence[int | None]:
    """The slots page ``page`` owns (a ``range``: read lazily, whatever the page size), or ``page_size`` Nones
    for a pad entry."""
    if page < 0:
        return [None] * page_size
    first = page * page_size
    return range(first, first + page_size)


def row_slots(row: Sequence[int], page_size: int) -> list[int | None]:
    """Every slot of a row, in token order: entry q is where token q lives."""
    slots: list[int | None] = []
    for page in row:
        slots.extend(page_slots(page, page_size))
    return slots
