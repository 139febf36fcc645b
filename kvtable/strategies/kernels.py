"""Raw arguments for a backend's fused kernels (``backend.kernels``): what host validation never lets through.

Stale lengths past a group's width, pads inside rows, columns past the width holding another group's
pages, each argument laid out as a (maybe strided) view in the corner of a larger buffer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hypothesis import strategies as st

from kvtable.strategies.batches import draw_entry
from kvtable.strategies.domain import current
from kvtable.strategies.draws import BOOLEANS, between, digits, pick

POISON = 4242
"""Input buffers around the views, and stack columns past a group's width: a real page no draw uses."""
PAGE_SIZES = (1, 2, 3, 4, 8, 16)

Rows = list[list[int]]


@dataclass(frozen=True)
class Layout:
    """``extra`` elements per dimension around the view, every ``step``-th element along the last one."""

    extra: tuple[int, ...]
    step: int = 1


STEPS = (1, 2)


def draw_layouts(draw: st.DrawFn, dims: Sequence[int]) -> list[Layout]:
    """A layout per entry of ``dims`` (its argument's dimensions), their digits packed into few draws (a layout's
    extras 0-2 per dimension, then its step), each shrinking to no extra and step 1."""
    sizes = [size for d in dims for size in [3] * d + [len(STEPS)]]
    values = iter(digits(draw, sizes))
    return [Layout(tuple(next(values) for _ in range(d)), STEPS[next(values)]) for d in dims]


@dataclass(frozen=True)
class Stack:
    """``[G, R, W]`` tables, each group's real width and page size; columns past a width hold POISON."""

    tables: list[Rows]
    widths: list[int]
    page_sizes: list[int]

    @property
    def shape(self) -> tuple[int, int, int]:
        return len(self.tables), len(self.tables[0]), len(self.tables[0][0])

    @property
    def reach(self) -> int:
        """A position bound well past every group's width (stale lengths reach up to it)."""
        return (self.shape[2] + 2) * max(self.page_sizes)


def draw_stack(draw: st.DrawFn, rows: int) -> Stack:
    groups, width = (1 + d for d in digits(draw, [3, 6]))
    page_sizes = [PAGE_SIZES[d] for d in digits(draw, [len(PAGE_SIZES)] * groups)]
    widths = [1 + d for d in digits(draw, [width] * groups)]
    tables = [[[draw_entry(draw, page_sizes[g]) if c < widths[g] else POISON for c in range(width)]
               for _ in range(rows)] for g in range(groups)]
    return Stack(tables, widths, page_sizes)


@dataclass(frozen=True)
class LocsCase:
    """``stacked_locs`` arguments: ``seq_lens`` (maybe stale, past a width) for ``bs`` rows of ``n`` tokens."""

    stack: Stack
    seq_lens: list[int]
    bs: int
    n: int
    cap: int
    layouts: dict[str, Layout]


@st.composite
def locs_cases(draw: st.DrawFn) -> LocsCase:
    bs, n = draw(between(0, 4)), draw(between(1, 4))
    stack = draw_stack(draw, bs + draw(between(0, 2)) or 1)
    seq = [draw(between(1, stack.reach + n)) for _ in range(bs + draw(between(0, 2)))]
    cap = bs * n + draw(between(0, 3))
    names = {"tables": 3, "widths": 1, "page_sizes": 1, "seq_lens": 1, "out": 2}
    return LocsCase(stack, seq, bs, n, cap, dict(zip(names, draw_layouts(draw, list(names.values())), strict=True)))


@dataclass(frozen=True)
class ExtendCase:
    """``stacked_extend_locs`` arguments: tokens at (row, position), in any order, positions past widths."""

    stack: Stack
    rows: list[int]
    positions: list[int]
    cap: int
    layouts: dict[str, Layout]


@st.composite
def extend_cases(draw: st.DrawFn) -> ExtendCase:
    stack = draw_stack(draw, draw(between(1, 4)))
    tokens = draw(between(0, 10))
    rows = [draw(between(0, stack.shape[1] - 1)) for _ in range(tokens)]
    positions = [draw(between(0, stack.reach)) for _ in range(tokens)]
    names = {"tables": 3, "widths": 1, "page_sizes": 1, "rows": 1, "positions": 1, "out": 2}
    return ExtendCase(stack, rows, positions, tokens + draw(between(0, 3)),
                      dict(zip(names, draw_layouts(draw, list(names.values())), strict=True)))


def _sizes(draw: st.DrawFn, groups: int, max_width: int = 6) -> tuple[list[int], list[int]]:
    """Each group's page size and width (1..max_width), a group's pair packed in one draw."""
    pairs = digits(draw, [len(PAGE_SIZES), max_width] * groups)
    return [PAGE_SIZES[d] for d in pairs[::2]], [1 + d for d in pairs[1::2]]


@dataclass(frozen=True)
class GroupedLocsCase:
    """``grouped_locs`` arguments: each group's own table (its width its column count) and page size,
    ``seq_lens`` (maybe stale, past a width) for ``bs`` rows of ``n`` tokens."""

    tables: list[Rows]
    page_sizes: list[int]
    seq_lens: list[int]
    bs: int
    n: int
    cap: int
    layouts: list[Layout]
    """One per table, then the lengths', then the output's."""


@st.composite
def grouped_locs_cases(draw: st.DrawFn) -> GroupedLocsCase:
    bs, n, groups = draw(between(0, 4)), draw(between(1, 4)), draw(between(1, 3))
    page_sizes, widths = _sizes(draw, groups)
    tables = [[[draw_entry(draw, ps) for _ in range(w)] for _ in range(bs + draw(between(0, 2)) or 1)]
              for ps, w in zip(page_sizes, widths, strict=True)]
    reach = (max(widths) + 2) * max(page_sizes)
    seq = [draw(between(1, reach + n)) for _ in range(bs + draw(between(0, 2)))]
    cap = bs * n + draw(between(0, 3))
    lay = draw_layouts(draw, [2] * groups + [1, 2])
    return GroupedLocsCase(tables, page_sizes, seq, bs, n, cap, lay)


@dataclass(frozen=True)
class GroupedCase:
    """``grouped_extend_locs`` arguments: each group's own table and page size, request runs inside every
    table (its precondition), pads wherever they fall."""

    tables: list[Rows]
    page_sizes: list[int]
    prefix_lens: list[int]
    extend_lens: list[int]
    cap: int
    layouts: list[Layout]
    """One per table, then the output's."""

    def tokens(self) -> tuple[list[int], list[int]]:
        """(rows, positions) of every token, in request order."""
        pairs = [(b, p) for b, (start, count) in enumerate(zip(self.prefix_lens, self.extend_lens, strict=True))
                 for p in range(start, start + count)]
        return [b for b, _ in pairs], [p for _, p in pairs]


@st.composite
def grouped_cases(draw: st.DrawFn) -> GroupedCase:
    requests, groups = draw(between(1, 4)), draw(between(1, 3))
    page_sizes, widths = _sizes(draw, groups)
    tables = [[[draw_entry(draw, ps) for _ in range(w)] for _ in range(requests + draw(between(0, 2)))]
              for ps, w in zip(page_sizes, widths, strict=True)]
    reach = min(w * ps for w, ps in zip(widths, page_sizes, strict=True))
    prefix = [draw(between(0, reach)) for _ in range(requests)]
    extend = [draw(between(0, reach - p)) for p in prefix]
    cap = sum(extend) + draw(between(0, 3))
    return GroupedCase(tables, page_sizes, prefix, extend, cap, draw_layouts(draw, [2] * (groups + 1)))


@dataclass(frozen=True)
class FillCase:
    """``replay_fill`` arguments: every group's live rows packed (POISON in the gaps), into ``[G, max_bs, W]``."""

    packed: list[int]
    meta: list[tuple[int, int, int]]
    max_bs: int
    width: int
    bs: int
    actual_bs: int
    tail_pad: int
    layouts: dict[str, Layout]


@st.composite
def fill_cases(draw: st.DrawFn) -> FillCase:
    groups, max_bs, width = draw(between(1, 3)), draw(between(1, 4)), draw(between(1, 8))
    bs = draw(between(0, max_bs))
    actual_bs = draw(between(0, bs))
    blocks = []
    for _ in range(groups):
        cols, ratio = draw(between(1, 4)), pick(draw, (1, 2, 3, 4))
        entries = [draw_entry(draw, ratio) for _ in range(actual_bs * cols)]
        blocks.append((draw(between(0, 2)), cols, ratio, entries))
    order = list(range(groups))[:: -1 if draw(BOOLEANS) else 1]  # offsets need not follow group order
    packed: list[int] = []
    meta: list[tuple[int, int, int]] = [(0, 0, 0)] * groups
    for g in order:
        gap, cols, ratio, entries = blocks[g]
        packed += [POISON] * gap
        meta[g] = (len(packed), cols, ratio)
        packed += entries
    packed += [POISON] * draw(between(0, 2))
    names = {"packed": 1, "meta": 2, "dst": 3}
    layouts = dict(zip(names, draw_layouts(draw, list(names.values())), strict=True))
    for name in current().contiguous_args:  # what the engine always allocates fresh: no strided view of it
        if name in layouts:
            layouts[name] = Layout((0,) * names[name])
    return FillCase(packed, meta, max_bs, width, bs, actual_bs, pick(draw, current().tail_pads), layouts)
