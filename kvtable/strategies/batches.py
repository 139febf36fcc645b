"""Contract-valid batches: :func:`cases` (and :func:`draw_case` for use inside other draws, with :class:`CaseOptions`).

Every draw passes ``kvtable.reference.check_tables``: several groups (full, sliding with front holes
inside the T5 window condition, state), per-group block granularities ``B = r * K``, ragged lengths,
prefix/extend lengths (extend rows of length 0 included, W3 allows them), spec ``N``, padded rows,
tail pad -1 or 0, read-only prefix pages shared between rows, rows past ``bs`` and pages near the
int32 limit.
"""

from __future__ import annotations

import random
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain, product
from typing import Any

import torch
from hypothesis import strategies as st

from kvtable.contract import Family
from kvtable.reference import NULL_PAGE, Batch, GroupSpec
from kvtable.reference.model import MODES, Mode, Table, first_query
from kvtable.reference.tables import needed_columns
from kvtable.strategies.domain import current
from kvtable.strategies.draws import TAIL_PADS, between, digits, rng, within

KERNEL_PAGE_SIZES = (1, 2, 4, 8, 16)
RATIOS = (1, 2, 4)
MAX_N = 4
PAGE_LIMIT = 2**31
"""W5: a real page ``p`` of a group with page size ``ps`` needs ``(p + 1) * ps <= 2^31``."""
_PREFIX = {"full": "full", "sliding": "swa", "state": "state"}


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def top_page(page_size: int) -> int:
    """W5's largest page id at ``page_size``: its last slot is ``2^31 - 1``."""
    return PAGE_LIMIT // page_size - 1


def padded_row(holes: int, pages: list[int], width: int, tail_pad: int = -1) -> list[int]:
    """A table row of ``width``: ``holes`` holes (page 0), then ``pages``, then the tail pad."""
    return [NULL_PAGE] * holes + pages + [tail_pad] * (width - holes - len(pages))


def as_tensor(table: Table, width: int | None = None) -> torch.Tensor:
    """An int32 ``[rows, width]`` tensor of a plain table (``width`` is needed only when it has no rows), read from
    a flat int32 buffer: half the time of ``torch.tensor`` on nested lists, and every example builds a few."""
    cols = len(table[0]) if table else width or 0
    flat = array("i", chain.from_iterable(table))
    if not flat:
        return torch.zeros((len(table), cols), dtype=torch.int32)
    return torch.frombuffer(flat, dtype=torch.int32).reshape(len(table), cols)


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

    def tensor(self, group_id: str) -> Any:
        """``tensors()[group_id]``, without converting the other groups' tables."""
        return self.raw[group_id] if group_id in self.raw else as_tensor(self.tables[group_id])

    def seq_tensor(self) -> torch.Tensor:
        return torch.tensor(self.batch.seq_lens, dtype=torch.int32)

    @property
    def extend_lens(self) -> list[int]:
        assert self.batch.prefix_lens is not None
        return [s - p for s, p in zip(self.batch.seq_lens, self.batch.prefix_lens, strict=True)]


def draw_group_specs(draw: st.DrawFn, kernel_page_size: int, *, max_groups: int = 3, state: bool | None = None,
                     families: Sequence[Family] = ("full", "sliding"), require: Family | None = None
                     ) -> tuple[GroupSpec, ...]:
    """1..max_groups attention groups with ``B = r * K`` (r in 1, 2, 4), sliding windows, and a state group
    if ``state`` (None: maybe).

    The count, the state group and its page size and each group's family and ratio come in packed draws that
    shrink to one full group of ratio 1 and no state group; then each sliding window (drawn for the widest
    block). A state group has no page size its tables could be divided by: 0 trips a backend that
    uses it.
    """
    kinds = tuple(product(families, RATIOS))
    # the state group's page size (None: no state group): none for half of the draws when it is maybe
    states = {None: (None, None, 0, kernel_page_size), True: (0, kernel_page_size), False: (None,)}[state]
    count, at, state_at = digits(draw, [max_groups, max_groups if require else 1, len(states)])
    kind_at = digits(draw, [len(kinds)] * max_groups)  # apart: the count shrinks, the groups left keep their kinds
    count += 1
    chosen = [kinds[i] for i in kind_at[:count]]
    if require is not None and require not in [family for family, _ in chosen]:
        at = within(at, 0, count - 1)
        chosen[at] = (require, chosen[at][1])
    windows = digits(draw, [4 * kernel_page_size * max(RATIOS) if family == "sliding" else 1 for family, _ in chosen])
    specs = [GroupSpec(f"{_PREFIX[family]}{i}", family, kernel_page_size * ratio,
                       within(window, 1, 4 * kernel_page_size * ratio) if family == "sliding" else None)
             for i, ((family, ratio), window) in enumerate(zip(chosen, windows, strict=True))]
    if (state_page := states[state_at]) is not None:
        specs.append(GroupSpec(f"state{count}", "state", state_page))
    return tuple(specs)


def _lengths(draw: st.DrawFn, mode: Mode, n: int, live: int, limit: int, writes: bool
             ) -> tuple[list[int], list[int] | None]:
    """Live rows' seq_lens (and prefix_lens for extend: a row may extend by 0, though not every row when
    ``writes``) for one mode, each <= limit; a draw per row (and per extension), so that the engine drops a
    row's draws with the row."""
    if mode == "extend":
        prefix = [draw(between(0, limit)) for _ in range(live)]
        seq = [p + draw(between(0, limit - p)) for p in prefix]
        if writes and live and seq == prefix:  # the last row extends by one token instead
            prefix[-1] = min(prefix[-1], limit - 1)
            seq[-1] = prefix[-1] + 1
        return seq, prefix
    low = n if mode == "verify" else 1
    return [draw(between(low, max(limit, low))) for _ in range(live)], None


def _pages(rand: random.Random, count: int, block: int, big: bool) -> list[int]:
    """``count`` distinct real page ids, small or just under the W5 limit ``2^31 / B``."""
    top = top_page(block)
    if big:
        return rand.sample(range(max(1, top - 4 * count - 64), top + 1), count)
    return rand.sample(range(1, 4 * count + 32), count)


_ENTRY_SPAN = 65
"""Values per kind of :func:`draw_entry`: pages 1..64 (the 65th repeats page 1), the top 65 pages, the two pads."""
_ENTRY = between(0, 3 * _ENTRY_SPAN - 1)


def draw_entry(draw: st.DrawFn, page_size: int) -> int:
    """A table entry of any kind: the pad -1, a hole 0, a small page, or a page at the top of the W5 range
    (``(p + 1) * page_size <= 2^31``). The pads are the running domain's (no -1 where the engine holds none).

    One draw per entry (tables hold dozens): three equal spans of one integer, pads, small pages, top pages,
    in that order, so the entry shrinks toward the pad -1 as a draw of the kind and then the value did.
    """
    kind, value = divmod(draw(_ENTRY), _ENTRY_SPAN)
    if kind == 0:
        pads = current().pads
        return pads[value % len(pads)]
    if kind == 1:
        return 1 + value % 64
    return top_page(page_size) - value


def _first_write_col(batch: Batch, row: int, block: int) -> int:
    """The first column a row writes (its columns before it hold read-only pages)."""
    first = first_query(batch, row)
    return ceil_div(batch.seq_lens[row], block) if first is None else first // block


_BIG = 5
"""Pages near the int32 limit for one group in ``_BIG`` (when not pinned): 5 keeps a group's packed draw in one
integer of at most ``PACKED`` values with its spare columns and the sharing mask of 5 rows (5 * 3 * 16 = 240;
at 8 it took two draws)."""


def _group_table(draw: st.DrawFn, rand: random.Random, spec: GroupSpec, batch: Batch, tail_pad: int,
                 width: int | None, big_pages: bool | None, extra_rows: int, rows: int) -> Table:
    """A valid table for one attention group: front holes, real pages, tail pads; dummy rows all 0.
    ``width`` None: the longest row's columns plus 0-2 spare ones.

    One packed draw: pages near the int32 limit (``big_pages``, else 1 in ``_BIG``), the rows that share read-only
    prefix pages (one bit for each of up to ``rows`` rows) and the spare columns; then one for a sliding
    group's front holes. They shrink to small pages, no spare column, no sharing and no hole.
    """
    block = spec.block_granularity
    live = batch.live_rows
    spans = [ceil_div(batch.seq_lens[row], block) for row in range(live)]
    starts = [0] * live  # only a sliding group has front holes
    if spec.family == "sliding":
        for row in range(live):
            cols = needed_columns(batch, row, spec)
            starts[row] = cols.start if cols else 0
    # the spare columns last (least significant): the shrinker trades a row's length for a spare column in one step
    big, shared_rows, spare = digits(draw, [_BIG if big_pages is None else 1, 2 ** max(rows - 1, 0),
                                            3 if width is None else 1])
    holes = digits(draw, [start + 1 for start in starts])
    big = big == _BIG - 1 if big_pages is None else big_pages
    if width is None:
        width = max([1, *spans]) + spare
    pages = iter(_pages(rand, sum(s - h for s, h in zip(spans, holes, strict=True)), block, big))
    table: Table = []
    for row in range(live):
        entries = [NULL_PAGE] * holes[row] + [next(pages) for _ in range(spans[row] - holes[row])]
        table.append(entries + [tail_pad] * (width - len(entries)))
    for row in range(1, live):
        if shared_rows >> (row - 1) & 1:  # read-only prefix pages shared with the previous row
            shared = min(_first_write_col(batch, row, block), _first_write_col(batch, row - 1, block))
            for col in range(shared):
                if table[row][col] > 0 and table[row - 1][col] > 0:
                    table[row][col] = table[row - 1][col]
    table += [[NULL_PAGE] * width for _ in range(live, batch.bs)]
    used = [p for r in table for p in r if p > 0]
    pads = current().pads
    for _ in range(extra_rows):  # rows past bs are ignored: fill them with pages live rows write
        table.append([rand.choice((*pads, *used)) for _ in range(width)])
    return table


def _state_table(rand: random.Random, rows: int) -> Table:
    """State-group tables are full of holes, pads and repeats; they must never reach location maths."""
    width = rand.randint(1, 4)
    values = (0, 0, *current().pads, 1, 2, 3)
    return [[rand.choice(values) for _ in range(width)] for _ in range(rows)]


@dataclass(frozen=True)
class CaseOptions:
    """What :func:`draw_case` may draw: the defaults draw every valid batch; a field narrows or pins one part."""

    # the batch
    modes: Sequence[Mode] = MODES
    bs: int | None = None
    """Pins the batch size; else one in ``[max(1, min_live + min_pad), max_bs]``."""
    max_bs: int = 5
    min_live: int = 0
    min_pad: int = 0
    padding: bool = True
    """Dummy rows (never in extend)."""
    n: int | None = None
    """Pins N (verify and re-anchor); else drawn up to ``MAX_N``."""
    max_seq: int | None = None
    """Pins the longest length; else drawn up to ``max_cols`` pages of the widest group."""
    max_cols: int = 6
    writes: bool = False
    """Some live row writes a token (an extend batch is not all empty rows)."""
    # the groups and their tables
    specs: tuple[GroupSpec, ...] | None = None
    kernel_page_size: int | None = None
    kernel_page_sizes: Sequence[int] = KERNEL_PAGE_SIZES
    require: Family | None = None
    """A family the drawn groups must include."""
    widths: Mapping[str, int] | None = None
    """Pins each attention group's table width."""
    tail_pads: Sequence[int] = TAIL_PADS
    """Those outside the running domain's are not drawn (its first one stands in)."""
    big_pages: bool | None = None
    """Pages near the int32 limit: always, never, or (None) sometimes."""
    extra_rows: bool = True
    """Rows past ``bs`` (ignored by the contract)."""


def draw_case(draw: st.DrawFn, options: CaseOptions = CaseOptions()) -> Case:
    """A contract-valid batch (passes ``check_tables`` at its ``tail_pad``) within ``options``, drawn inside
    another draw."""
    o = options
    low_bs = max(1, o.min_live + o.min_pad)
    top_bs = o.bs or o.max_bs
    domain_pads = current().tail_pads
    pads = (tuple(p for p in o.tail_pads if p in domain_pads) or domain_pads[:1], range(3 if o.extra_rows else 1))
    # the batch's shape in packed draws (a choice costs the engine more than a digit): shrinks to the first
    # kernel page size and mode, N 1, no padding, one column, tail pad first, no extra rows. The rows come in a
    # draw of their own, so that the engine drops a row's length draws with the row as it shrinks
    k_at, mode_at, n_at, actual_at, pad_at, cols_at, tail_at = digits(draw, [
        1 if o.kernel_page_size else len(o.kernel_page_sizes), len(o.modes), 1 if o.n else MAX_N,
        2 if "verify" in o.modes else 1, top_bs - o.min_live - o.min_pad + 1 if o.padding else 1,
        1 if o.max_seq else o.max_cols, len(pads[0]) * len(pads[1])])
    k = o.kernel_page_size or o.kernel_page_sizes[k_at]
    specs = o.specs or draw_group_specs(draw, k, require=o.require)
    attention = [s for s in specs if not s.is_state]
    mode = o.modes[mode_at]
    n = 1 if mode == "decode" else (o.n or 1 + n_at)
    bs = o.bs or draw(between(low_bs, o.max_bs))
    pad_rows = within(pad_at, o.min_pad, bs - o.min_live) if o.padding and mode != "extend" else 0
    live = bs - pad_rows
    limit = o.max_seq or (1 + cols_at) * max(s.block_granularity for s in attention)
    seq, prefix = _lengths(draw, mode, n, live, limit, o.writes)
    seq += [1] * pad_rows
    actual_bs = live if pad_rows or (mode == "verify" and actual_at) else None
    batch = Batch(tuple(seq), mode=mode, n=n, prefix_lens=None if prefix is None else tuple(prefix),
                  actual_bs=actual_bs)
    tail_pad, extra = pads[0][tail_at // len(pads[1])], pads[1][tail_at % len(pads[1])]
    rand = rng(draw)
    tables: dict[str, Table] = {}
    for spec in attention:
        width = o.widths[spec.group_id] if o.widths is not None else None
        tables[spec.group_id] = _group_table(draw, rand, spec, batch, tail_pad, width, o.big_pages, extra, top_bs)
    for spec in specs:
        if spec.is_state:
            tables[spec.group_id] = _state_table(rand, bs + extra)
    return Case(tuple(specs), tables, batch, tail_pad, k)


@st.composite
def cases(draw: st.DrawFn, **pins: Any) -> Case:
    """A contract-valid batch; ``pins`` are :class:`CaseOptions`' fields. Build it once, draw it often."""
    return draw_case(draw, CaseOptions(**pins))
