"""A backend written in the style of tokenspeed's original cache-group mixin (our own code, not tokenspeed's).

What it models (read from tokenspeed's ``cache_groups.py``, formerly ``flat_groups.py``, ``page_table.py`` and
the kvcache Triton kernels):

- int32 tables with -1 tails and int32 locations ``max(page, 0) * page_size + pos % page_size``: a -1 pad
  or a hole that a stale length lands on sinks into the dummy page 0 (the clamp tokenspeed added in #709);
- padded (dummy) rows are page 0 at seq_len 1: the replay fill zeroes them, and the eager calls here treat
  rows past ``actual_bs`` the same way whatever they hold, so garbage left in them is never read;
- verify and re-anchor positions clamp at 0 (``max(seq - N + t, 0)``): a real row shorter than N writes
  position 0 more than once instead of being refused;
- expansion to kernel pages maps a hole or pad to the sub-pages ``0 .. r-1`` of dummy block 0 and leaves
  the expanded tail 0;
- CUDA-graph buffers allocated lazily, at a group's first capture (the original mixin; the current code
  allocates at graph init); a replay at bs 0 does nothing; a delivered group that was never declared is
  ignored, a missing declared one refused;
- refusals by ``assert`` and ``RuntimeError``, not by a named clause; the debug check only asks that a
  written page is non-zero and appears somewhere in the group's table.

Run it with its profile, from a clone's root::

    kvtable conform --backend examples/tokenspeed_style.py:backend --profile tokenspeed

Seeded variants: ``backend_709`` extends without the negative-page clamp (an extend over a -1 column returns
a negative location: tokenspeed #709's class), and ``backend_stale_tail`` computes decode-side locations
(eager decode, verify, re-anchor and the graph replay) without it, as before #709: a stale seq_len that
lands on the -1 tail pad inside the width returns a negative location such as -2.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

INT32_MAX = 2**31 - 1

def _gather(table: torch.Tensor, rows: torch.Tensor, positions: torch.Tensor, page_size: int,
            *, clamp_page: bool = True) -> torch.Tensor:
    """int32 locations of (row, position) pairs; every column must lie inside the table."""
    cols = torch.div(positions, page_size, rounding_mode="floor")
    assert bool((positions >= 0).all()), f"negative position {positions.min().item()}"
    assert bool((cols < table.shape[1]).all()), f"column {cols.max().item()} past the table width {table.shape[1]}"
    pages = table[rows, cols].long()
    if clamp_page:
        pages = pages.clamp_min(0)
    return _int32_locs(pages * page_size + positions % page_size)


def _int32_locs(locs: torch.Tensor) -> torch.Tensor:
    """int64 locations stored as int32, refused where a page id near the int32 edge would wrap."""
    assert bool((locs <= INT32_MAX).all()), f"location {locs.max().item()} does not fit int32"
    return locs.to(torch.int32)


def _check_table(table: torch.Tensor, bs: int) -> None:
    assert isinstance(table, torch.Tensor) and table.dim() == 2, "page tables are 2-D"
    assert table.dtype == torch.int32, f"page tables are int32, got {table.dtype}"
    assert table.shape[0] >= bs and table.shape[1] >= 1, f"table {tuple(table.shape)} for bs {bs}"


def _dummy_rows_scrubbed(table: torch.Tensor, seq_lens: torch.Tensor, actual_bs: int | None
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows ``>= actual_bs`` as padding should be, page 0 at seq_len 1, whatever the caller left in them."""
    if actual_bs is None or actual_bs >= seq_lens.shape[0]:
        return table, seq_lens
    table, seq_lens = table.clone(), seq_lens.clone()
    table[actual_bs:] = 0
    seq_lens[actual_bs:] = 1
    return table, seq_lens


def _clamped_positions(seq_lens: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows and positions ``max(seq - n + t, 0)`` of ``n`` tokens per request, token-major."""
    assert isinstance(n, int) and n >= 1, f"tokens per request must be >= 1, got {n}"
    bs = seq_lens.shape[0]
    rows = torch.arange(bs).repeat_interleave(n)
    pos = (seq_lens.long().repeat_interleave(n) - n + torch.arange(n).repeat(bs)).clamp_min(0)
    return rows, pos


def expand_page_table(table: torch.Tensor, ratio: int, max_kernel_pages: int) -> torch.Tensor:
    """Scheduler pages to kernel pages: ``max(p, 0)*r + j``; columns past the expansion stay 0."""
    assert ratio >= 1 and max_kernel_pages >= 0, f"ratio {ratio}, max_kernel_pages {max_kernel_pages}"
    rows, width = table.shape
    out = torch.zeros((rows, max_kernel_pages), dtype=torch.int32)
    if ratio == 1:
        kernel = table.to(torch.int32)
    else:
        base = table.long().clamp_min(0).repeat_interleave(ratio, dim=1) * ratio
        kernel = (base + torch.arange(ratio).repeat(width)).to(torch.int32)
    keep = min(max_kernel_pages, kernel.shape[1])
    out[:, :keep] = kernel[:, :keep]
    return out


class LazyGroupGraphBuffers:
    """Per-group persistent table and location buffers, allocated at each group's first capture."""

    def __init__(self, specs: Sequence[Any], *, max_bs: int, max_kernel_pages: int, kernel_page_size: int,
                 spec_n: int = 1, tail_pad: int = -1, expand: bool = True, clamp_page: bool = True) -> None:
        assert max_bs >= 1 and max_kernel_pages >= 1 and spec_n >= 1, "graph sizes must be >= 1"
        self.max_bs, self.spec_n, self.tail_pad, self.clamp_page = max_bs, spec_n, tail_pad, clamp_page
        self.state_ids = {s.group_id for s in specs if s.family == "state"}
        self.layout: dict[str, tuple[int, int, int, int]] = {}
        """group -> (source width, ratio, buffer width, consumer page size)."""
        for spec in specs:
            if spec.family == "state":
                continue
            granularity = spec.block_granularity
            ratio = granularity // kernel_page_size if expand else 1
            if ratio < 1 or (expand and granularity % kernel_page_size):
                raise ValueError("cache group page sizes must be positive multiples of their consumer page sizes")
            source_width = -(-max_kernel_pages * kernel_page_size // granularity)
            self.layout[spec.group_id] = (source_width, ratio, source_width * ratio, granularity // ratio)
        self.table_buffers: dict[str, torch.Tensor] = {}
        self.loc_buffers: dict[str, torch.Tensor] = {}

    def capture(self, bs: int, group_ids: Sequence[str], tokens_per_req: int = 1
                ) -> tuple[dict[str, torch.Tensor] | None, dict[str, torch.Tensor] | None]:
        assert 1 <= bs <= self.max_bs, f"capture bs {bs} outside [1, {self.max_bs}]"
        if tokens_per_req > self.spec_n:
            raise RuntimeError("location stack too small: tokens_per_req must not exceed spec_num_tokens")
        wanted = [gid for gid in group_ids if gid not in self.state_ids]
        if not wanted:
            return None, None
        for gid in wanted:
            if gid not in self.layout:
                raise RuntimeError(f"cache group {gid!r} has no declared page size; declare it before capture")
            if gid not in self.table_buffers:  # first capture of this group: allocate now
                self.table_buffers[gid] = torch.zeros((self.max_bs, self.layout[gid][2]), dtype=torch.int32)
                self.loc_buffers[gid] = torch.zeros(self.max_bs * self.spec_n, dtype=torch.int32)
        return ({gid: self.table_buffers[gid][:bs] for gid in wanted},
                {gid: self.loc_buffers[gid][: bs * tokens_per_req] for gid in wanted})

    def replay(self, bs: int, tables: Mapping[str, torch.Tensor] | None, seq_lens: torch.Tensor,
               tokens_per_req: int = 1, *, actual_bs: int | None = None) -> None:
        if bs == 0:
            return  # an idle replay: nothing runs
        assert 1 <= bs <= self.max_bs, f"replay bs {bs} outside [1, {self.max_bs}]"
        if tokens_per_req > self.spec_n:
            raise RuntimeError("location stack too small: tokens_per_req must not exceed spec_num_tokens")
        if not self.layout:
            raise RuntimeError("replay: the backend published no cache groups")
        if not tables:
            raise RuntimeError(f"buffers exist for groups {sorted(self.table_buffers)} but block_tables is missing "
                               f"at bs={bs}; the captured graph would read stale page tables")
        missing = sorted(set(self.layout) - set(tables))
        if missing:
            raise RuntimeError(f"replay is missing groups {missing} (delivered: {sorted(tables)})")
        assert seq_lens.shape[0] >= bs, f"{seq_lens.shape[0]} seq_lens for bs {bs}"
        live = bs if actual_bs is None else actual_bs
        assert 0 <= live <= bs, f"actual_bs {actual_bs} outside [0, {bs}]"
        for gid in self.layout:
            _check_table(tables[gid], 0)
            assert tables[gid].shape[1] >= 1, f"group {gid!r}: a zero-width table leaves dummy rows' col 0 unset"
        if not self.table_buffers:
            return  # nothing captured yet: no graph reads any buffer
        staged = {gid: self._staged(gid, tables[gid], bs, live) for gid in self.table_buffers}
        rows, pos = _clamped_positions(seq_lens[:bs], tokens_per_req)
        locs = {gid: self._locs(gid, staged[gid], rows, pos) for gid in self.table_buffers}
        for gid, buffer in self.table_buffers.items():  # every check passed: now write
            buffer[:bs] = staged[gid]
            self.loc_buffers[gid][: bs * tokens_per_req] = locs[gid]

    def _staged(self, gid: str, src: torch.Tensor, bs: int, live: int) -> torch.Tensor:
        """Rows ``[:bs]`` as the buffer will hold them: live rows expanded, dummy rows all page 0."""
        _check_table(src, 0)
        source_width, ratio, width, _ = self.layout[gid]
        cols = min(src.shape[1], source_width)
        rows = min(src.shape[0], bs, live)
        out = torch.zeros((bs, width), dtype=torch.int32)
        if ratio == 1:
            out[:rows] = self.tail_pad
            out[:rows, :cols] = src[:rows, :cols]
        else:
            out[:rows] = expand_page_table(src[:rows, :cols], ratio, width)
        return out

    def _locs(self, gid: str, staged: torch.Tensor, rows: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """The location kernel: a column past the buffer reads the dummy page (the load is masked)."""
        page_size = self.layout[gid][3]
        cols = torch.div(pos, page_size, rounding_mode="floor")
        inside = cols < staged.shape[1]
        pages = torch.where(inside, staged[rows, torch.where(inside, cols, 0)], 0).long()
        if self.clamp_page:
            pages = pages.clamp_min(0)
        return _int32_locs(pages * page_size + pos % page_size)


class TokenspeedStyleBackend:
    """Eager locations, expansion, a weak debug check and lazily allocated graph buffers."""

    name = "tokenspeed-style"

    def __init__(self, device: str = "cpu", debug: bool | None = None, *, clamp_extend: bool = True,
                 clamp_decode: bool = True) -> None:
        self.device = device
        self.debug = bool(debug)
        self.clamp_extend = clamp_extend
        self.clamp_decode = clamp_decode

    def decode_locs(self, table: torch.Tensor, seq_lens: torch.Tensor, page_size: int) -> torch.Tensor:
        _check_table(table, seq_lens.shape[0])
        return _gather(table, torch.arange(seq_lens.shape[0]), seq_lens.long() - 1, page_size,
                       clamp_page=self.clamp_decode)

    def verify_locs(self, table: torch.Tensor, seq_lens: torch.Tensor, page_size: int, n: int,
                    *, actual_bs: int | None = None) -> torch.Tensor:
        _check_table(table, seq_lens.shape[0])
        assert actual_bs is None or 0 <= actual_bs <= seq_lens.shape[0], f"actual_bs {actual_bs}"
        table, seq_lens = _dummy_rows_scrubbed(table, seq_lens, actual_bs)
        return _gather(table, *_clamped_positions(seq_lens, n), page_size, clamp_page=self.clamp_decode)

    def reanchor_locs(self, table: torch.Tensor, frontier: torch.Tensor, page_size: int, n: int) -> torch.Tensor:
        _check_table(table, frontier.shape[0])
        assert bool((frontier >= 1).all()), "a re-anchor frontier is >= 1"
        return _gather(table, *_clamped_positions(frontier, n), page_size, clamp_page=self.clamp_decode)

    def extend_locs(self, table: torch.Tensor, prefix_lens: Sequence[int], extend_lens: Sequence[int],
                    page_size: int) -> torch.Tensor:
        _check_table(table, len(extend_lens))
        rows: list[int] = []
        positions: list[int] = []
        for row, (prefix, extend) in enumerate(zip(prefix_lens, extend_lens, strict=True)):
            assert prefix >= 0 and extend >= 0, f"row {row}: prefix {prefix}, extend {extend}"
            rows += [row] * extend
            positions += range(prefix, prefix + extend)
        return _gather(table, torch.tensor(rows, dtype=torch.long), torch.tensor(positions, dtype=torch.long),
                       page_size, clamp_page=self.clamp_extend)

    def group_locs(self, specs: Sequence[Any], tables: Mapping[str, torch.Tensor], batch: Any,
                   *, tail_pad: int = -1) -> dict[str, torch.Tensor]:
        """Every attention group's locations at its own granularity; state groups are shed first."""
        attention = {s.group_id: s for s in specs if s.family != "state"}
        unknown = sorted(set(tables) - {s.group_id for s in specs})
        if unknown:
            raise RuntimeError(f"block_tables has groups {unknown} that no cache group spec declares")
        out = {}
        for gid in sorted(set(attention) & set(tables)):
            table, page_size = tables[gid], attention[gid].block_granularity
            if batch.mode == "extend":
                extend = [s - p for s, p in zip(batch.seq_lens, batch.prefix_lens, strict=True)]
                out[gid] = self.extend_locs(table, list(batch.prefix_lens), extend, page_size)
            elif batch.mode == "decode":
                scrubbed, seq = _dummy_rows_scrubbed(table, torch.tensor(batch.seq_lens), batch.actual_bs)
                out[gid] = self.decode_locs(scrubbed, seq, page_size)
            else:
                out[gid] = self.verify_locs(table, torch.tensor(batch.seq_lens), page_size, batch.n,
                                            actual_bs=batch.actual_bs)
            if self.debug:
                self.check_write_locs(table, out[gid], batch, page_size, group=gid)
        return out

    def expand_table(self, table: torch.Tensor, ratio: int, *, max_kernel_pages: int | None = None,
                     tail_pad: int = -1, actual_bs: int | None = None) -> torch.Tensor:
        _check_table(table, 0)
        out = expand_page_table(table, ratio, table.shape[1] * ratio if max_kernel_pages is None else max_kernel_pages)
        if actual_bs is not None:
            out[actual_bs:] = 0
        return out

    def check_write_locs(self, table: torch.Tensor, locs: torch.Tensor, batch: Any, page_size: int,
                         *, group: str | None = None) -> None:
        """The debug check: every live token's page is non-zero and appears somewhere in the group's table."""
        live_tokens = sum(batch.seq_lens[r] - batch.prefix_lens[r] for r in range(batch.bs)) \
            if batch.mode == "extend" else batch.live_rows * batch.tokens_per_row
        pages = torch.div(locs[:live_tokens].long(), page_size, rounding_mode="floor")
        known = set(table[: batch.bs].flatten().tolist()) - {0, -1}
        bad = [p for p in pages.tolist() if p == 0 or p not in known]
        if bad:
            raise RuntimeError(f"group {group!r}: write locations hit pages {bad[:4]} outside the group's table")

    def graph(self, specs: Sequence[Any], *, max_bs: int, max_kernel_pages: int, kernel_page_size: int,
              spec_n: int = 1, tail_pad: int = -1, expand: bool = True) -> LazyGroupGraphBuffers:
        return LazyGroupGraphBuffers(specs, max_bs=max_bs, max_kernel_pages=max_kernel_pages,
                                     kernel_page_size=kernel_page_size, spec_n=spec_n, tail_pad=tail_pad,
                                     expand=expand, clamp_page=self.clamp_decode)


def backend(debug: bool | None = None) -> TokenspeedStyleBackend:
    """The tokenspeed-style backend; ``debug=True`` adds its (weak) write check to ``group_locs``."""
    return TokenspeedStyleBackend(debug=debug)


def backend_709(debug: bool | None = None) -> TokenspeedStyleBackend:
    """Seeded with tokenspeed #709's class: extend has no negative-page clamp (a -1 column gives loc < 0)."""
    return TokenspeedStyleBackend(debug=debug, clamp_extend=False)


def backend_stale_tail(debug: bool | None = None) -> TokenspeedStyleBackend:
    """Seeded: decode-side locations without the negative-page clamp (a stale seq_len on the -1 tail gives -2)."""
    return TokenspeedStyleBackend(debug=debug, clamp_decode=False)
