"""E1-E3: a block table at granularity B = r*K, expanded to kernel pages of K tokens, locates the same slots.

The expanded table is the one ``replay_fill`` writes (impl/kernels.py): kernel column w holds
``v*r + w % r`` for the block ``v = table[w // r]`` if ``v > 0``, else ``v`` (holes and pads repeat).
"""

from __future__ import annotations

import z3

from kvtable.prover.obligations.base import Obligation
from kvtable.prover.solver.discharge import Query
from kvtable.prover.solver.encoding import (
    INT32_MAX,
    RowSetting,
    TableRead,
    c_div,
    c_mod,
    int32,
    int64,
    lane_at,
    store_int32,
    widen,
)
from kvtable.prover.solver.preconditions import TWO_31, geometry, real_page


def _expanded(block_table: z3.FuncDeclRef, ratio: z3.BitVecRef) -> TableRead:
    """``replay_fill``'s kernel-page table as a read function ``(row, kernel col) -> int32``."""
    r = widen(ratio)

    def read(row: z3.BitVecRef, col: z3.BitVecRef) -> z3.BitVecRef:
        block = block_table(row, c_div(col, r))
        return z3.If(block > 0, store_int32(widen(block) * r + c_mod(col, r)), block)

    return read


def unit_invariance(*, multiple: bool = True) -> Query:
    """The lane at K on the expanded table stores what the lane at B on the block table stores."""
    blocks = RowSetting.fresh(page_size="block_size")
    kernel_ps, ratio = int32("kernel_page_size"), int32("ratio")
    big_b, k, r = widen(blocks.page_size), widen(kernel_ps), widen(ratio)
    if multiple:  # E1: B = r*K
        shape = [big_b == r * k]
    else:  # B = r*K + e with 0 < e < K, and r = B // K as page_ratio would compute it
        extra = int64("extra")
        shape = [big_b == r * k + extra, extra >= 1, extra < k]
    pos = int64("pos")
    by_block = blocks.at(pos)
    kernel_width = store_int32(widen(blocks.width) * r)
    by_kernel = lane_at(_expanded(blocks.table, ratio), blocks.row, pos, kernel_ps, kernel_width)
    pre = [*geometry(blocks), kernel_ps >= 1, ratio >= 1, *shape, widen(blocks.width) * r <= INT32_MAX,
           pos >= 0, *real_page(blocks, by_block)]
    goal = z3.And(by_kernel.loads == by_block.loads, by_kernel.out == by_block.out)
    show = (("block", blocks.entry(by_block)), ("block loc", by_block.out), ("kernel col", by_kernel.col),
            ("kernel page", by_kernel.page), ("kernel loc", by_kernel.out))
    return Query(tuple(pre), goal, show)


def block_formula() -> Query:
    """E3 as arithmetic: kernel page ``b*r + j``, ``j = (pos % B) // K``, locates slot ``b*B + pos % B``.

    In int64 with W5 at B; the steps split the nested divisions (``B = r*K``) into lemmas z3 proves
    one at a time.
    """
    k32, r32, b32, pos = int32("kernel_page_size"), int32("ratio"), int32("block"), int64("pos")
    k, r, b = widen(k32), widen(r32), widen(b32)
    big_b = r * k
    pre = (k32 >= 1, r32 >= 1, b32 >= 1, pos >= 0, big_b <= INT32_MAX, (b + 1) * big_b <= TWO_31)
    within = c_mod(pos, big_b)
    j = c_div(within, k)
    steps = (c_div(pos, big_b) == c_div(c_div(pos, k), r),
             pos == c_div(pos, big_b) * big_b + within,
             within == c_mod(c_div(pos, k), r) * k + c_mod(pos, k),
             j == c_mod(c_div(pos, k), r))
    goal = (b * r + j) * k + c_mod(pos, k) == b * big_b + within
    show = (("j", j), ("kernel loc", (b * r + j) * k + c_mod(pos, k)), ("block loc", b * big_b + within))
    return Query(pre, goal, show, steps)


def masks_agree() -> Query:
    """For any position >= 0: the kernel column is inside width*r iff the block column is inside width."""
    k32, r32, width32, pos = int32("kernel_page_size"), int32("ratio"), int32("width"), int64("pos")
    k, r, width = widen(k32), widen(r32), widen(width32)
    big_b = r * k
    pre = (k32 >= 1, r32 >= 1, width32 >= 1, big_b <= INT32_MAX, width * r <= INT32_MAX, pos >= 0)
    kernel_col, block_col = c_div(pos, k), c_div(pos, big_b)
    goal = z3.And(c_div(kernel_col, r) == block_col, (kernel_col < width * r) == (block_col < width))
    return Query(pre, goal, (("kernel col", kernel_col), ("block col", block_col)))


OBLIGATIONS: tuple[Obligation, ...] = (
    Obligation("E2.masks-agree", "E2",
               "kernel column pos//K is inside width*r iff block column pos//B is inside width, and"
               " (pos//K)//r == pos//B", masks_agree),
    Obligation("E3.unit-invariance", "E3",
               "for a real block: the kernel lane at K on the expanded table loads and stores what the lane"
               " at B on the block table does", unit_invariance),
    Obligation("E3.block-formula", "E3",
               "for a real block b, j = (pos%B)//K: (b*r + j)*K + pos%K == b*B + pos%B (int64, W5 at B)",
               block_formula),
    Obligation("E1.needs-a-multiple", "E1",
               "with B not a multiple of K (r = B // K) the expanded table locates another slot",
               lambda: unit_invariance(multiple=False), expect="counterexample"),
)
