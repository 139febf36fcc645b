"""What the torch location kernels read each group's table through, built once per set of tables and reused.

Engines hand the same persistent tables to every step, so everything that depends only on the tables'
metadata (data pointer, shape, strides, device), never on their contents, is computed on the
first call and looked up by that metadata afterwards: the flat spans the pages are gathered from, each
group's page size, shift, last column and W5 bound as ``[G, 1, 1]`` tensors, and every row's first element
in its span. A table that is resized, re-pointed or restrided gets a new key, so a new plan; the cache holds
its spans (and so their storage) until it is evicted, so a key's data pointers can never name another
allocation while the key is cached (equal pointers: the same storages), and a span covers only its tables'
own elements and the gaps between them (it stays valid while they do).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import torch

from kvtable.impl.tokens import upload

T = TypeVar("T")

INT32_END = 2**31
"""One past the largest int32: indices below it are computed in int32."""

PLAN_CACHE_SIZE = 16
"""Plans kept (least recently used evicted): an engine uses one set of tables per step kind."""

ROW_CACHE_SIZE = 64
"""Batch sizes whose row starts a plan keeps."""

_plans: OrderedDict[tuple, ReadPlan] = OrderedDict()


@dataclass(frozen=True)
class ReadPlan:
    """The per-group constants of one set of tables, in one integer dtype (int32 when every index fits)."""

    spans: tuple[torch.Tensor, ...]
    """The flat int32 spans read: one when every table is a view of one storage, else one per table."""
    dtype: torch.dtype
    ps: torch.Tensor
    """``[G, 1, 1]`` page sizes (the other per-group constants have this shape too)."""
    shift: torch.Tensor | None
    """log2 of the page sizes when every one is a power of two (a shift is cheaper than a division)."""
    last: torch.Tensor
    """Each table's last column (0 for a table with no column: a stand-in zero is read)."""
    top: torch.Tensor
    """int32, W5: the largest page whose slots are all int32, ``2^31 // ps - 1``."""
    bound: torch.Tensor
    """int32, W5: pages above it sink (see ``sink``): the largest page whose slots are all int32, ``2^31 // ps - 1``,
    or, when every page size is a power of two, one past it (``2^31 - 1`` for page size 1, which has no such page)."""
    row_start: torch.Tensor
    """``[G, R]`` the element of row r's column 0 in its group's span (R: the fewest rows of any table)."""
    step: torch.Tensor | None
    """The column stride, None when every table's is 1."""
    reach: int
    """Tokens every table holds (the fewest ``width * ps``): positions below it read no column past a width."""
    bases: tuple[int, ...]
    """Each table's first element in its span."""
    pitches: tuple[int, ...]
    """Each table's row stride."""
    low_bits: torch.Tensor
    """``2^31 - 1`` as a 0-d tensor of ``dtype`` (a python scalar operand is wrapped anew on every call)."""
    _rows: dict[int, torch.Tensor] = field(default_factory=dict)

    def rows(self, bs: int) -> torch.Tensor:
        """``[G, bs, 1]``: the first ``bs`` rows' starts, contiguous (kept per batch size)."""
        rows = self._rows.get(bs)
        if rows is None:
            if len(self._rows) >= ROW_CACHE_SIZE:
                self._rows.clear()
            rows = self._rows[bs] = self.row_start[:, :bs, None].contiguous()
        return rows

    def col(self, positions: torch.Tensor) -> torch.Tensor:
        """``positions // ps`` per group, ``[G, *positions.shape]`` (non-negative positions)."""
        if self.shift is not None:
            return positions >> self.shift
        return torch.div(positions, self.ps, rounding_mode="floor")

    def index(self, rows: torch.Tensor, col: torch.Tensor) -> torch.Tensor:
        """The span element of (row start, column) per group: ``row_start + col * step``."""
        if self.step is None:
            return rows + col
        return torch.addcmul(rows, col, self.step)

    def sink(self, page: torch.Tensor, *, exact: bool = False) -> torch.Tensor:
        """Pads (negative pages) and pages past W5's top, int32 in place: to page 0 (always when ``exact``), or,
        when every page size is a power of two, to ``top + 1``, whose slots are exactly ``2^31 + offset``:
        ``unwrap`` of the slots then sends them to ``offset``, the sink slot in page 0 (two cheap ops instead of a
        compare and a masked fill).
        Slots computed in int32 wrap, so ``2^31 + offset`` is then ``-2^31 + offset``: the same low 31 bits."""
        bound = self.top if exact or self.shift is None else self.bound
        bound = bound if page.dim() == 3 else bound.view(-1, *(1,) * (page.dim() - 1))
        if self.shift is None or exact:
            return page.masked_fill_(page > bound, 0).clamp_min_(0)
        return torch.minimum(page, bound, out=page).clamp_min_(0)

    def unwrap(self, slots: torch.Tensor) -> torch.Tensor:
        """The slots of ``sink``'s pages past the top, ``2^31 + offset`` (``-2^31 + offset`` as int32), as
        ``offset`` in place; every other slot is in ``[0, 2^31)`` and kept."""
        if self.shift is not None:
            slots.bitwise_and_(self.low_bits)
        return slots

    def gather(self, index: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """``spans[g][index[g]]`` for every group (one ``index_select`` per span), int32 of ``index``'s shape,
        into ``out`` (contiguous, of that shape) when given."""
        page = torch.empty(index.shape, dtype=torch.int32, device=index.device) if out is None else out
        if len(self.spans) == 1:
            torch.index_select(self.spans[0], 0, index.view(-1), out=page.view(-1))
            return page
        for span, reads, dst in zip(self.spans, index.view(len(self.spans), -1).unbind(),
                                    page.view(len(self.spans), -1).unbind(), strict=True):
            torch.index_select(span, 0, reads, out=dst)
        return page


def read_plan(tables: Sequence[torch.Tensor], page_sizes: Sequence[int], device: torch.device,
              dtype: torch.dtype) -> ReadPlan:
    """The cached plan of these tables read at these page sizes with ``dtype`` positions (built on a miss)."""
    if device.type == "meta":
        return _build(tables, page_sizes, device, dtype)
    key = (device, dtype, tuple(page_sizes), *[(t.data_ptr(), t.shape, t.stride()) for t in tables])
    return kept(_plans, key, lambda: _build(tables, page_sizes, device, dtype), PLAN_CACHE_SIZE)


def kept(cache: OrderedDict[tuple, T], key: tuple, build: Callable[[], T], size: int) -> T:
    """``cache[key]``, built by ``build()`` on a miss, the least recently used entry evicted past ``size``."""
    value = cache.get(key)
    if value is None:
        value = cache[key] = build()
        if len(cache) > size:
            cache.popitem(last=False)
    else:
        cache.move_to_end(key)
    return value


def _build(tables: Sequence[torch.Tensor], page_sizes: Sequence[int], device: torch.device,
           dtype: torch.dtype) -> ReadPlan:
    widths = [t.shape[1] for t in tables]
    tables = [t if t.shape[1] else t.new_zeros(1, 1).expand(t.shape[0], 1) for t in tables]
    spans, bases = _spans(tables)
    if max(span.numel() for span in spans) >= INT32_END:
        dtype = torch.int64
    rows = min(t.shape[0] for t in tables)
    pow2 = all(size & (size - 1) == 0 for size in page_sizes)
    unit = all(t.stride(1) == 1 for t in tables)
    consts = upload([*page_sizes, *[size.bit_length() - 1 for size in page_sizes], *[max(w - 1, 0) for w in widths],
                     *[t.stride(1) for t in tables]], device, dtype).view(4, len(tables), 1, 1)
    # W5: page INT32_END // ps - 1 is the last with int32 slots; see ``sink`` for the power-of-two bound
    tops = [INT32_END // size - 1 for size in page_sizes]
    bounds = upload([*tops, *[min(INT32_END // size, INT32_END - 1) if pow2 else top
                              for size, top in zip(page_sizes, tops, strict=True)]], device).view(2, len(tables), 1, 1)
    starts = upload([*bases, *[t.stride(0) for t in tables]], device, dtype).view(2, len(tables), 1)
    row_start = torch.addcmul(starts[0], starts[1], torch.arange(rows, dtype=dtype, device=device))
    reach = min(w * size for w, size in zip(widths, page_sizes, strict=True))
    return ReadPlan(tuple(spans), dtype, consts[0], consts[1] if pow2 else None, consts[2], bounds[0], bounds[1],
                    row_start, None if unit else consts[3], reach, tuple(bases), tuple(t.stride(0) for t in tables),
                    torch.tensor(INT32_END - 1, dtype=dtype, device=device))


def _spans(tables: Sequence[torch.Tensor]) -> tuple[list[torch.Tensor], list[int]]:
    """The flat int32 spans the tables are read through, and each table's first element in its span: one
    span when every table is a view of one storage (one gather reads every group), else one per table.
    The one span covers the tables' own elements and what lies between them, nothing past them, so it stays
    valid while the tables do."""
    storage = tables[0].untyped_storage().data_ptr()
    if all(t.untyped_storage().data_ptr() == storage for t in tables[1:]):
        offsets = [int(t.storage_offset()) for t in tables]
        first = min(offsets)
        end = max(offset + flat(t).numel() for offset, t in zip(offsets, tables, strict=True))
        return [tables[0].as_strided((end - first,), (1,), first)], [offset - first for offset in offsets]
    return [flat(t) for t in tables], [0] * len(tables)


def flat(table: torch.Tensor) -> torch.Tensor:
    """The storage span of a non-empty 2-D table, 1-D: element (i, c) is at ``i * stride(0) + c * stride(1)``."""
    rows, width = table.shape
    return table.as_strided(((rows - 1) * table.stride(0) + (width - 1) * table.stride(1) + 1,), (1,))
