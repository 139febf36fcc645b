"""The location formulas as z3 terms: the kernels' arithmetic at its real widths, and the meaning in integers.

Kernel side (impl/kernels.py): tables, widths, page sizes and seq_lens are int32 loads; positions,
columns and locations are computed in int64 (``widen`` is the sign-extending promotion torch and
Triton apply); the result is stored as int32 (``store_int32`` keeps the low 32 bits). Compiled
Triton divides by truncation (``c_div``/``c_mod``), torch by flooring (``floor_div``/``floor_mod``).

Meaning side (W0, reference/slots.py): integers without bounds; token p of a row is slot p of the
concatenated slot ranges ``[page*ps, page*ps + ps)`` of the row's pages, in column order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import z3

I32 = 32
I64 = 64
INT32_MAX = 2**31 - 1
MASKED_PAGE = -1
"""What the kernels use for a column past the group's width: a pad, sunk into the null page."""


# Bit-vector vocabulary ------------------------------------------------------------------------------
def int32(name: str) -> z3.BitVecRef:
    return z3.BitVec(name, I32)


def int64(name: str) -> z3.BitVecRef:
    return z3.BitVec(name, I64)


def widen(x: z3.BitVecRef | int, width: int = I64) -> z3.BitVecRef:
    """Sign-extending promotion (int32 -> int64), as an int32 tensor meets an int64 one."""
    if isinstance(x, int):
        return z3.BitVecVal(x, width)
    return x if x.size() == width else z3.SignExt(width - x.size(), x)


def store_int32(x: z3.BitVecRef) -> z3.BitVecRef:
    """The int32 store of an int64 value: its low 32 bits."""
    return z3.Extract(I32 - 1, 0, x)


def fits_int32(x: z3.BitVecRef) -> z3.BoolRef:
    """The int64 value ``x`` survives the int32 store unchanged."""
    return widen(store_int32(x)) == x


def bv_max(a: z3.BitVecRef, b: z3.BitVecRef | int) -> z3.BitVecRef:
    """Signed maximum (``torch.clamp_min`` / ``tl.maximum``)."""
    return z3.If(a > b, a, b)


def c_div(a: z3.BitVecRef, b: z3.BitVecRef) -> z3.BitVecRef:
    """``a // b`` in compiled Triton (and C): signed, rounding toward zero."""
    return a / b


def c_mod(a: z3.BitVecRef, b: z3.BitVecRef) -> z3.BitVecRef:
    """``a % b`` in compiled Triton (and C): the remainder takes the dividend's sign."""
    return z3.SRem(a, b)


def floor_div(a: z3.BitVecRef, b: z3.BitVecRef) -> z3.BitVecRef:
    """``a // b`` in torch and Python: signed, rounding toward minus infinity."""
    q = a / b
    return z3.If(z3.And(z3.SRem(a, b) != 0, (a < 0) != (b < 0)), q - 1, q)


def floor_mod(a: z3.BitVecRef, b: z3.BitVecRef) -> z3.BitVecRef:
    """``a % b`` in torch and Python: the remainder takes the divisor's sign (SMT-LIB ``bvsmod``)."""
    return a % b  # z3py: `%` on bit-vectors is bvsmod


def nn_div(a: z3.BitVecRef, b: z3.BitVecRef) -> z3.BitVecRef:
    """Floor division of a non-negative ``a`` by a positive ``b``; every rounding convention agrees there."""
    return z3.UDiv(a, b)


def nn_mod(a: z3.BitVecRef, b: z3.BitVecRef) -> z3.BitVecRef:
    """Remainder of a non-negative ``a`` by a positive ``b``."""
    return z3.URem(a, b)


def exact_product(a: z3.BitVecRef, b: z3.BitVecRef) -> z3.BoolRef:
    """``a * b`` does not wrap at its width: the doubled-width product equals the widened one."""
    wide = 2 * a.size()
    return widen(a, wide) * widen(b, wide) == widen(a * b, wide)


def exact_sum(a: z3.BitVecRef, b: z3.BitVecRef) -> z3.BoolRef:
    """``a + b`` does not wrap at its width."""
    wide = a.size() + 1
    return widen(a, wide) + widen(b, wide) == widen(a + b, wide)


def signed_value(x: z3.BitVecRef) -> z3.ArithRef:
    """The integer a signed bit-vector stands for."""
    return z3.BV2Int(x, is_signed=True)


# Tables ---------------------------------------------------------------------------------------------
def page_table(name: str = "table") -> z3.FuncDeclRef:
    """An int32 page table of unknown contents: ``table(row, col)`` for int64 indices."""
    return z3.Function(name, z3.BitVecSort(I64), z3.BitVecSort(I64), z3.BitVecSort(I32))


# The kernels' lanes (impl/kernels.py) ---------------------------------------------------------------
@dataclass(frozen=True)
class Lane:
    """What one output element of ``stacked_locs`` / ``stacked_extend_locs`` computes, step by step."""

    pos: z3.BitVecRef
    """int64 position."""
    col: z3.BitVecRef
    """int64 column ``pos // ps``."""
    loads: z3.BoolRef
    """The load mask ``col < width``: the table is read only where it holds."""
    page: z3.BitVecRef
    """int32 page id read (``MASKED_PAGE`` where masked off)."""
    loc: z3.BitVecRef
    """int64 location ``max(page, 0) * ps + pos % ps``, the page taken as 0 past W5 (``w5_sink``)."""
    out: z3.BitVecRef
    """The int32 value stored."""


def clamped_position(seq_len: z3.BitVecRef, n: z3.BitVecRef, t: z3.BitVecRef) -> z3.BitVecRef:
    """``max(seq_len - n + t, 0)`` in int64 from int32 operands (decode, verify, re-anchor, replay)."""
    return bv_max(widen(seq_len) - widen(n) + widen(t), widen(0))


TableRead = Callable[[z3.BitVecRef, z3.BitVecRef], z3.BitVecRef]
"""``read(row, col)``: the int32 entry at int64 indices; a ``page_table()`` or a derived table."""


def lane_at(table: TableRead, row: z3.BitVecRef, pos: z3.BitVecRef, page_size: z3.BitVecRef,
            width: z3.BitVecRef) -> Lane:
    """The lane for int64 position ``pos`` of row ``row``: masked table read, then the location formula."""
    ps = widen(page_size)
    col = c_div(pos, ps)
    loads = col < widen(width)
    page = z3.If(loads, table(widen(row), col), z3.BitVecVal(MASKED_PAGE, I32))
    loc = widen(bv_max(w5_sink(page, ps), z3.BitVecVal(0, I32))) * ps + c_mod(pos, ps)
    return Lane(pos=pos, col=col, loads=loads, page=page, loc=loc, out=store_int32(loc))


def w5_sink(page: z3.BitVecRef, ps: z3.BitVecRef) -> z3.BitVecRef:
    """The int32 page the kernels use: 0 (the sink) where its slots would pass int32, ``(page + 1) * ps > 2^31``
    in int64 (W5 broken: the store would wrap to a negative or another page's slot), else the page read."""
    return z3.If((widen(page) + 1) * ps > z3.BitVecVal(2**31, I64), z3.BitVecVal(0, I32), page)


def stacked_lane(table: TableRead, row: z3.BitVecRef, seq_len: z3.BitVecRef, n: z3.BitVecRef,
                 t: z3.BitVecRef, page_size: z3.BitVecRef, width: z3.BitVecRef) -> Lane:
    """Element ``row*n + t`` of ``stacked_locs``: position ``max(seq_len - n + t, 0)``."""
    return lane_at(table, row, clamped_position(seq_len, n, t), page_size, width)


# The meaning (reference/slots.py, W0) ---------------------------------------------------------------
@dataclass(frozen=True)
class Slot:
    """Token ``position`` of a row as W0 defines it: column ``col``, offset ``offset`` into that page."""

    position: z3.ArithRef
    col: z3.ArithRef
    offset: z3.ArithRef
    page: z3.ArithRef
    page_size: z3.ArithRef

    @property
    def defined(self) -> z3.BoolRef:
        """Column and offset are the ones the slot list puts position ``position`` at."""
        return z3.And(self.position == self.col * self.page_size + self.offset,
                      0 <= self.offset, self.offset < self.page_size)

    @property
    def location(self) -> z3.ArithRef:
        """The slot: offset ``offset`` of the ``page_size`` slots page ``page`` owns."""
        return self.page * self.page_size + self.offset


def meaning_slot(table: TableRead, row: z3.BitVecRef, position: z3.ArithRef,
                 page_size: z3.BitVecRef) -> Slot:
    """Token ``position`` of ``row`` by W0, reading the same table; column and offset are fresh integers."""
    col = z3.Int("meaning_col")
    page = signed_value(table(widen(row), z3.Int2BV(col, I64)))
    return Slot(position=position, col=col, offset=z3.Int("meaning_offset"), page=page,
                page_size=signed_value(page_size))


def clamped_meaning_position(seq_len: z3.BitVecRef, n: z3.BitVecRef, t: z3.BitVecRef) -> z3.ArithRef:
    """``reference.model.write_positions``: ``max(seq_len - n + t, 0)`` over the integers."""
    first = signed_value(seq_len) - signed_value(n) + signed_value(t)
    return z3.If(first > 0, first, 0)


# A row of one group's table: the variables most queries share ---------------------------------------
@dataclass(frozen=True)
class RowSetting:
    """One group's int32 table, a row index, the page size and the group's width (all int32)."""

    table: z3.FuncDeclRef
    row: z3.BitVecRef
    page_size: z3.BitVecRef
    width: z3.BitVecRef

    @classmethod
    def fresh(cls, row: str = "row", page_size: str = "page_size", width: str = "width") -> RowSetting:
        return cls(page_table(), int32(row), int32(page_size), int32(width))

    def with_row(self, row: str) -> RowSetting:
        """The same table and geometry, another row."""
        return RowSetting(self.table, int32(row), self.page_size, self.width)

    def stacked(self, seq_len: z3.BitVecRef, n: z3.BitVecRef | int, t: z3.BitVecRef | int) -> Lane:
        """Element ``t`` of this row in ``stacked_locs``."""
        n32, t32 = (z3.BitVecVal(x, I32) if isinstance(x, int) else x for x in (n, t))
        return stacked_lane(self.table, self.row, seq_len, n32, t32, self.page_size, self.width)

    def at(self, pos: z3.BitVecRef) -> Lane:
        """The lane of int64 position ``pos`` (``stacked_extend_locs``)."""
        return lane_at(self.table, self.row, pos, self.page_size, self.width)

    def entry(self, lane: Lane) -> z3.BitVecRef:
        """The table entry at the lane's column, whether or not the kernel's mask lets it load."""
        return self.table(widen(self.row), lane.col)

    def meaning(self, position: z3.ArithRef) -> Slot:
        """Token ``position`` of this row by W0."""
        return meaning_slot(self.table, self.row, position, self.page_size)
