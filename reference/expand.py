"""E1-E3: block tables (pages of B tokens) expanded to kernel pages (K tokens each)."""

from __future__ import annotations

from kvtable.errors import ContractViolation
from kvtable.reference.model import (
    DEFAULT_TAIL_PAD,
    NULL_PAGE,
    Table,
    check_actual_bs,
    check_pad_value,
    check_page_size,
    is_int,
)


def page_ratio(block_granularity: int, kernel_page_size: int, *, group: str | None = None) -> int:
    """E1 page-ratio: r = B // K, defined only when B is a positive multiple of K."""
    check_page_size(kernel_page_size, group=group)
    check_page_size(block_granularity, group=group)
    if block_granularity % kernel_page_size:
        raise ContractViolation("E1", f"block granularity {block_granularity} is not a positive multiple of "
                                f"kernel page size {kernel_page_size}", group=group)
    return block_granularity // kernel_page_size


def expand_entry(page: int, ratio: int) -> list[int]:
    """E2 block-expand: block b is kernel pages b*r .. b*r+r-1; a hole (0) or pad (< 0) repeats itself."""
    if page <= NULL_PAGE:
        return [page] * ratio
    return list(range(page * ratio, page * ratio + ratio))


def expand_table(table: Table, ratio: int, *, max_kernel_pages: int | None = None,
                 tail_pad: int = DEFAULT_TAIL_PAD, actual_bs: int | None = None) -> Table:
    """E2/E3: every row expanded entry by entry, cut or padded to ``max_kernel_pages`` columns.

    Columns past the expanded width take ``tail_pad``; rows ``>= actual_bs`` (dummy rows) stay all 0.
    """
    if not is_int(ratio) or ratio < 1:
        raise ContractViolation("E1", f"page ratio must be an int >= 1, got {ratio!r}")
    check_pad_value(tail_pad)
    width = len(table[0]) * ratio if table else 0
    out_width = width if max_kernel_pages is None else max_kernel_pages
    if not is_int(out_width) or out_width < 0:
        raise ContractViolation("E2", f"max_kernel_pages must be an int >= 0, got {max_kernel_pages!r}")
    live = len(table) if actual_bs is None else check_actual_bs(actual_bs, len(table))
    expanded: Table = []
    for r, row in enumerate(table):
        if r >= live:
            expanded.append([NULL_PAGE] * out_width)
            continue
        pages = [kp for page in row for kp in expand_entry(page, ratio)]
        pages = pages[:out_width] + [tail_pad] * max(out_width - len(pages), 0)
        expanded.append(pages)
    return expanded
