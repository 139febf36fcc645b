"""Contract-valid batches: :func:`cases` (and :func:`draw_case` for use inside other draws).

Every draw passes ``kvtable.reference.check_tables``: several groups (full, sliding with front holes
inside the T5 window condition, state), per-group block granularities ``B = r * K``, ragged lengths,
prefix/extend lengths (extend rows of length 0 included, W3 allows them), spec ``N``, padded rows,
tail pad -1 or 0, read-only prefix pages shared between rows, rows past ``bs`` and pages near the
int32 limit.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import product
from typing import Any

import torch
from hypothesis import strategies as st

from kvtable.reference import NULL_PAGE, Batch, GroupSpec
from kvtable.reference.model import MODES, Mode, Table, first_query
from kvtable.reference.tables import needed_columns
from kvtable.strategies.draws import BOOLEANS, TAIL_PADS, between, pick, rng

KERNEL_PAGE_SIZES = (1, 2, 4, 8, 16)
RATIOS = (1, 2, 4)
MAX_N = 4
PAGE_LIMIT = 2**31
"""W5: a real page ``p`` of a group with page size ``ps`` needs ``(p + 1) * ps <= 2^31``."""
_PREFIX = {"full": "full", "sliding": "swa", "state": "state"}
_STATE = between(0, 3)
"""No state group (0, 1), one of page size 0 (2) or of the kernel page size (3): see :func:`draw_group_specs`."""


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def as_tensor(table: Table, width: int | None = None) -> torch.Tensor:
    """An int32 ``[rows, width]`` tensor of a plain table (``width`` is needed only when it has no rows)."""
    if not table:
        return torch.zeros((0, width or 0), dtype=torch.int32)
    return torch.tensor(table, dtype=torch.int32).reshape(len(table), len(table[0]))


@dataclass(frozen=True)
class Case:
    """One batch: the group specs, a plain table per group (state groups included), the batch and its pads.

    ``raw`` replaces a group's tensor by a malformed object (wrong dtype or shape) in :meth:`tensors`.
    """

    specs: tuple[GroupSpec, ...]
    tables: Mapping[str, Table]
    batch: Batch
    tail_pad: int = -1
    kernel_page_size: int = 1
    raw: Mapping[str, Any] = field(default_factory=dict)

    @property
    def attention(self) -> tuple[GroupSpec, ...]:
        """The non-state groups, sorted by id: the ones with locations."""
        return tuple(sorted((s for s in self.specs if not s.is_state), key=lambda s: s.group_id))

    def spec(self, group_id: str) -> GroupSpec:
        return next(s for s in self.specs if s.group_id == group_id)

    def tensors(self) -> dict[str, Any]:
        """The tables as int32 tensors, malformed ones from ``raw`` in their place."""
        out: dict[str, Any] = {gid: as_tensor(t) for gid, t in self.tables.items()}
        out.update(self.raw)
        return out

    def seq_tensor(self) -> torch.Tensor:
        return torch.tensor(self.batch.seq_lens, dtype=torch.int32)

    @property
    def extend_lens(self) -> list[int]:
        assert self.batch.prefix_lens is not None
        return [s - p for s, p in zip(self.batch.seq_lens, self.batch.prefix_lens, strict=True)]


def draw_group_specs(draw: st.DrawFn, kernel_page_size: int, *, max_groups: int = 3, state: bool | None = None,
                     families: Sequence[str] = ("full", "sliding"), require: str | None = None
                     ) -> tuple[GroupSpec, ...]:
    """1..max_groups attention groups with ``B = r * K`` (r in 1, 2, 4), sliding windows, and a state group
    if ``state`` (None: maybe)."""
    count = draw(between(1, max_groups))
    kinds = tuple(product(families, RATIOS))  # a group's family and ratio in one draw
    chosen = [pick(draw, kinds) for _ in range(count)]
    if require is not None and require not in [family for family, _ in chosen]:
        at = draw(between(0, count - 1))
        chosen[at] = (require, chosen[at][1])
    specs = []
    for i, (family, ratio) in enumerate(chosen):
        block = kernel_page_size * ratio
        window = draw(between(1, 4 * block)) if family == "sliding" else None
        specs.append(GroupSpec(f"{_PREFIX[family]}{i}", family, block, window))
    # whether there is a state group and its page size in one draw: none for half of the draws (shrinks to none).
    # A state group has no page size its tables could be divided by: 0 trips a backend that uses it.
    state_page = pick(draw, (0, kernel_page_size)) if state else None
    if state is None:
        state_page = (None, None, 0, kernel_page_size)[draw(_STATE)]
    if state_page is not None:
        specs.append(GroupSpec(f"state{count}", "state", state_page))
    return tuple(specs)


def _lengths(draw: st.DrawFn, mode: Mode, n: int, live: int, limit: int
             ) -> tuple[list[int], list[int] | None]:
    """Live rows' seq_lens (and prefix_lens for extend: a row may extend by 0) for one mode, each <= limit."""
    if mode == "extend":
        prefix = [draw(between(0, limit)) for _ in range(live)]
        seq = [p + draw(between(0, limit - p)) for p in prefix]
        return seq, prefix
    low = n if mode == "verify" else 1
    return [draw(between(low, max(limit, low))) for _ in range(live)], None


def _pages(rand: random.Random, count: int, block: int, big: bool) -> list[int]:
    """``count`` distinct real page ids, small or just under the W5 limit ``2^31 / B``."""
    top = PAGE_LIMIT // block - 1
    if big:
        return rand.sample(range(max(1, top - 4 * count - 64), top + 1), count)
    return rand.sample(range(1, 4 * count + 32), count)


_ENTRY_SPAN = 65
"""Values per kind of :func:`draw_entry`: pages 1..64 (the 65th repeats page 1), the top 65 pages, the two pads."""
_ENTRY = between(0, 3 * _ENTRY_SPAN - 1)


def draw_entry(draw: st.DrawFn, page_size: int) -> int:
    """A table entry of any kind: the pad -1, a hole 0, a small page, or a page at the top of the W5 range
    (``(p + 1) * page_size <= 2^31``).

    One draw per entry (tables hold dozens): three equal spans of one integer, pads, small pages, top pages,
    in that order, so the entry shrinks toward the pad -1 as a draw of the kind and then the value did.
    """
    kind, value = divmod(draw(_ENTRY), _ENTRY_SPAN)
    if kind == 0:
        return TAIL_PADS[value % len(TAIL_PADS)]
    if kind == 1:
        return 1 + value % 64
    return PAGE_LIMIT // page_size - 1 - value


def _first_write_col(batch: Batch, row: int, block: int) -> int:
    """The first column a row writes (its columns before it hold read-only pages)."""
    first = first_query(batch, row)
    return ceil_div(batch.seq_lens[row], block) if first is None else first // block


_BIG_AND_SPARE = between(0, 23)
"""A group's pages near the int32 limit (1 draw in 8) and its spare columns (0-2), in one draw."""


def _big_and_spare(draw: st.DrawFn, big_pages: bool | None, spare: bool) -> tuple[bool, int]:
    """Whether a group's pages sit near the int32 limit (``big_pages``, else 1 in 8) and, if ``spare``, how many
    columns its table has past the longest row (0-2); one draw when both are drawn, shrinking to (small, 0)."""
    if big_pages is None and spare:
        big, columns = divmod(draw(_BIG_AND_SPARE), 3)
        return big == 7, columns
    big = draw(between(0, 7)) == 7 if big_pages is None else big_pages
    return big, draw(between(0, 2)) if spare else 0


def _group_table(draw: st.DrawFn, rand: random.Random, spec: GroupSpec, batch: Batch, tail_pad: int,
                 width: int | None, spare: int, big: bool, extra_rows: int) -> Table:
    """A valid table for one attention group: front holes, real pages, tail pads; dummy rows all 0.
    ``width`` None: the longest row's columns plus ``spare``."""
    block = spec.block_granularity
    spans = [ceil_div(batch.seq_lens[row], block) for row in range(batch.live_rows)]
    if width is None:
        width = max([1, *spans]) + spare
    holes = []
    for row in range(batch.live_rows):
        cols = needed_columns(batch, row, spec)
        start = cols.start if cols else 0
        holes.append(draw(between(0, start)) if spec.family == "sliding" else 0)
    pages = iter(_pages(rand, sum(s - h for s, h in zip(spans, holes, strict=True)), block, big))
    table: Table = []
    for row in range(batch.live_rows):
        entries = [NULL_PAGE] * holes[row] + [next(pages) for _ in range(spans[row] - holes[row])]
        table.append(entries + [tail_pad] * (width - len(entries)))
    shared_rows = draw(between(0, 2 ** (batch.live_rows - 1) - 1)) if batch.live_rows > 1 else 0  # one bit a row
    for row in range(1, batch.live_rows):
        if shared_rows >> (row - 1) & 1:  # read-only prefix pages shared with the previous row
            shared = min(_first_write_col(batch, row, block), _first_write_col(batch, row - 1, block))
            for col in range(shared):
                if table[row][col] > 0 and table[row - 1][col] > 0:
                    table[row][col] = table[row - 1][col]
    table += [[NULL_PAGE] * width for _ in range(batch.live_rows, batch.bs)]
    used = [p for r in table for p in r if p > 0]
    for _ in range(extra_rows):  # rows past bs are ignored: fill them with pages live rows write
        table.append([rand.choice((-1, 0, *used)) for _ in range(width)])
    return table


def _state_table(rand: random.Random, rows: int) -> Table:
    """State-group tables are full of holes, pads and repeats; they must never reach location maths."""
    width = rand.randint(1, 4)
    return [[rand.choice((0, 0, -1, 1, 2, 3)) for _ in range(width)] for _ in range(rows)]


def draw_case(draw: st.DrawFn, *, modes: Sequence[Mode] = MODES, specs: tuple[GroupSpec, ...] | None = None,
              kernel_page_size: int | None = None, kernel_page_sizes: Sequence[int] = KERNEL_PAGE_SIZES,
              bs: int | None = None, max_bs: int = 5, min_live: int = 0, min_pad: int = 0, n: int | None = None,
              tail_pads: Sequence[int] = TAIL_PADS, padding: bool = True, max_seq: int | None = None,
              widths: Mapping[str, int] | None = None, big_pages: bool | None = None, extra_rows: bool = True,
              max_cols: int = 6, require: str | None = None) -> Case:
    """A contract-valid batch (passes ``check_tables`` at its ``tail_pad``), drawn inside another draw.

    Fixed ``specs``/``kernel_page_size``/``bs``/``n``/``max_seq``/``widths`` pin those parts (the graph
    strategies use them); ``padding`` allows dummy rows (not in extend); ``big_pages`` forces pages near
    the int32 limit (None: sometimes).
    """
    k = kernel_page_size or pick(draw, tuple(kernel_page_sizes))
    specs = specs or draw_group_specs(draw, k, require=require)
    attention = [s for s in specs if not s.is_state]
    mode = pick(draw, tuple(modes))
    n = 1 if mode == "decode" else (n or draw(between(1, MAX_N)))
    bs = bs or draw(between(max(1, min_live + min_pad), max_bs))
    pad_rows = draw(between(min_pad, bs - min_live)) if padding and mode != "extend" else 0
    live = bs - pad_rows
    limit = max_seq or draw(between(1, max_cols)) * max(s.block_granularity for s in attention)
    seq, prefix = _lengths(draw, mode, n, live, limit)
    seq += [1] * pad_rows
    actual_bs = live if pad_rows or (mode == "verify" and draw(BOOLEANS)) else None
    batch = Batch(tuple(seq), mode=mode, n=n, prefix_lens=None if prefix is None else tuple(prefix),
                  actual_bs=actual_bs)
    tail_pad, extra = pick(draw, tuple(product(tail_pads, range(3 if extra_rows else 1))))  # one draw for both
    rand = rng(draw)
    tables: dict[str, Table] = {}
    for spec in attention:
        big, spare = _big_and_spare(draw, big_pages, widths is None)
        width = widths[spec.group_id] if widths is not None else None
        tables[spec.group_id] = _group_table(draw, rand, spec, batch, tail_pad, width, spare, big, extra)
    for spec in specs:
        if spec.is_state:
            tables[spec.group_id] = _state_table(rand, bs + extra)
    return Case(tuple(specs), tables, batch, tail_pad, k)


@st.composite
def cases(draw: st.DrawFn, **pins: Any) -> Case:
    """A contract-valid batch; ``pins`` are :func:`draw_case`'s keyword arguments. Build it once, draw it often."""
    return draw_case(draw, **pins)
