"""Properties over a backend's fused kernels (``backend.kernels``, the impl/kernels.py ``Kernels`` protocol).

Each draws raw kernel arguments the host-side validation would never let through (stale lengths
past a group's width, pads inside rows, columns past the width holding another group's pages),
places them in pitched, strided views of larger buffers filled with a poison value, fills the
outputs with a sentinel, and compares every element with ``kernel_model``: the named outputs must
hold the model's values, everything else (the rest of the outputs, the inputs, the buffers around
the views) must be left as it was. A backend with no ``kernels`` gets these properties reported
"not applicable", never passed; so does one whose kernels lack an optional fast path
(``grouped_locs``, ``grouped_extend_locs``), for that fast path's property alone.

The profile applies as everywhere: the replay fill gets the profile's tail pad (kvtable's contract takes
either pad, so its profile draws both) and its expected rows go through the profile's sub-page
convention (``Profile.subpages``, as after a graph replay). The location kernels have no convention to
map: they take no ``actual_bs`` (no pad slot), pads and holes sink into page 0 under every profile,
and the ``Kernels`` protocol's outputs are int32 whatever the engine's location dtype. Edges built on purpose:
a column-less table (its tokens sink into page 0) and page sizes 2^20-2^30, whose spans pass 2^31.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from hypothesis import strategies as st

from kvtable.conformance import kernel_model
from kvtable.conformance.checks import Mismatch, first_difference
from kvtable.conformance.core import Context, Property
from kvtable.contract import DEFAULT_TAIL_PAD, INT32_MAX, NULL_PAGE
from kvtable.errors import Unsupported
from kvtable.strategies.batches import top_page
from kvtable.strategies.draws import BOOLEANS, between, pick
from kvtable.strategies.kernels import (
    POISON,
    ExtendCase,
    FillCase,
    GroupedCase,
    GroupedLocsCase,
    Layout,
    LocsCase,
    Rows,
    Stack,
    draw_layouts,
    extend_cases,
    fill_cases,
    grouped_cases,
    grouped_locs_cases,
    locs_cases,
)

KERNEL_OPERATIONS = ("stacked_locs", "stacked_extend_locs", "replay_fill")
GROUPED_LOCS = "grouped_locs"
"""The optional fast path of impl/kernels.py's ``GroupedLocs``."""
GROUPED_EXTEND = "grouped_extend_locs"
"""The optional fast path of impl/kernels.py's ``GroupedExtendLocs``."""
SENTINEL = -7
"""Every output element starts as this: no kernel ever computes it (locations are >= 0, pads -1 or 0)."""


def missing_kernels(ctx: Context) -> str | None:
    """Why the kernel properties do not apply to this backend (None: they do)."""
    backend = getattr(ctx.backend, "target", ctx.backend)
    kernels = getattr(backend, "kernels", None)
    if kernels is None:
        name = getattr(backend, "name", type(backend).__name__)
        return f"backend {name!r} exposes no fused kernels (backend.kernels)"
    lacking = [op for op in KERNEL_OPERATIONS if not callable(getattr(kernels, op, None))]
    if lacking:
        return f"backend.kernels ({type(kernels).__name__}) lacks {', '.join(lacking)} of the Kernels protocol"
    return None


def _missing_fast_path(ctx: Context, fast_path: str) -> str | None:
    """Why a fast path's property does not apply (None: the kernels have it)."""
    reason = missing_kernels(ctx)
    if reason is not None:
        return reason
    kernels = getattr(ctx.backend, "target", ctx.backend).kernels
    if not callable(getattr(kernels, fast_path, None)):
        return f"backend.kernels ({type(kernels).__name__}) has no optional {fast_path} fast path"
    return None


def missing_grouped_locs(ctx: Context) -> str | None:
    """Why the ``grouped_locs`` property does not apply (None: the kernels have the fast path)."""
    return _missing_fast_path(ctx, GROUPED_LOCS)


def missing_grouped_extend(ctx: Context) -> str | None:
    """Why the ``grouped_extend_locs`` property does not apply (None: the kernels have the fast path)."""
    return _missing_fast_path(ctx, GROUPED_EXTEND)


@dataclass
class Placed:
    """A kernel argument: ``view`` (what the kernel gets) inside ``storage`` at ``box``, the rest ``fill``."""

    view: torch.Tensor
    storage: torch.Tensor
    box: tuple[slice, ...]
    fill: int

    def untouched_outside(self) -> bool:
        outside = self.storage.clone()
        outside[self.box] = self.fill
        return bool((outside == self.fill).all())

    def describe(self, name: str) -> str:
        return (f"# {name}: shape {tuple(self.view.shape)}, strides {self.view.stride()}, in a "
                f"{tuple(self.storage.shape)} buffer of {self.fill}")


def place(values: Any, shape: Sequence[int], layout: Layout, *, fill: int, device: str,
          dtype: torch.dtype = torch.int32) -> Placed:
    """``values`` (nested lists of ``shape``) as a view laid out as ``layout`` in a ``fill``-ed buffer."""
    full = [n + e for n, e in zip(shape, layout.extra, strict=True)]
    full[-1] *= layout.step
    storage = torch.full(full, fill, dtype=dtype, device=device)
    box = (*(slice(0, n) for n in shape[:-1]), slice(0, shape[-1] * layout.step, layout.step))
    view = storage[box]
    if view.numel():
        view.copy_(torch.tensor(values, dtype=dtype).reshape(tuple(shape)))
    return Placed(view, storage, box, fill)


def _judge(ctx: Context, clause: str, what: str, call: Callable[[], Any], inputs: dict[str, Placed],
           out: Placed, expected: list[Any]) -> None:
    """Run the kernel; ``out`` must hold ``expected`` and nothing else may change."""
    for name, arg in (*inputs.items(), ("out", out)):
        ctx.transcript.note(arg.describe(name))
    before = {name: arg.storage.clone() for name, arg in inputs.items()}
    try:
        call()
    except Unsupported:
        raise
    except Exception as err:  # a crash on arguments the Kernels protocol defines
        raise Mismatch(clause, f"kernels.{what}: crashed with {type(err).__name__}: {err}") from err
    got = out.view.tolist()
    ctx.transcript.note(f"#   out -> {got}")
    if got != expected:
        raise Mismatch(clause, f"kernels.{what}: {first_difference(got, expected)}\n  got      {got}\n"
                       f"  expected {expected} (pads and columns past a group's width sink into page 0; "
                       f"{SENTINEL} marks elements that must stay untouched)")
    if not out.untouched_outside():
        raise Mismatch(clause, f"kernels.{what} wrote outside its output view (the buffer around it changed)")
    for name, storage in before.items():
        if not torch.equal(storage, inputs[name].storage):
            raise Mismatch(clause, f"kernels.{what} wrote into its input {name!r}")


def _stack_inputs(ctx: Context, stack: Stack, lay: dict[str, Layout]) -> dict[str, Placed]:
    groups = stack.shape[0]
    return {"tables": place(stack.tables, stack.shape, lay["tables"], fill=POISON, device=ctx.device),
            "widths": place(stack.widths, (groups,), lay["widths"], fill=POISON, device=ctx.device),
            "page_sizes": place(stack.page_sizes, (groups,), lay["page_sizes"], fill=POISON, device=ctx.device)}


def _sentinels(rows: int, cols: int) -> Rows:
    return [[SENTINEL] * cols for _ in range(rows)]


def check_stacked_locs(ctx: Context, case: LocsCase) -> None:
    """G4 (and W1/W2/W4): the fixed-count location kernel equals the model, sinks included."""
    stack, groups = case.stack, case.stack.shape[0]
    inputs = _stack_inputs(ctx, stack, case.layouts)
    inputs["seq_lens"] = place(case.seq_lens, (len(case.seq_lens),), case.layouts["seq_lens"], fill=POISON,
                               device=ctx.device)
    out = place(_sentinels(groups, case.cap), (groups, case.cap), case.layouts["out"], fill=SENTINEL,
                device=ctx.device)
    expected = _sentinels(groups, case.cap)
    kernel_model.stacked_locs(stack.tables, stack.widths, stack.page_sizes, case.seq_lens, expected, case.bs,
                              case.n)
    kernels = ctx.backend.kernels
    _judge(ctx, "G4", "stacked_locs",
           lambda: kernels.stacked_locs(*(inputs[k].view for k in ("tables", "widths", "page_sizes", "seq_lens")),
                                        out.view, case.bs, case.n), inputs, out, expected)


def check_stacked_extend_locs(ctx: Context, case: ExtendCase) -> None:
    """W3: the extend location kernel equals the model, sinks included."""
    stack, groups = case.stack, case.stack.shape[0]
    inputs = _stack_inputs(ctx, stack, case.layouts)
    for name, values in (("rows", case.rows), ("positions", case.positions)):
        inputs[name] = place(values, (len(values),), case.layouts[name], fill=POISON, device=ctx.device,
                             dtype=torch.int64)
    out = place(_sentinels(groups, case.cap), (groups, case.cap), case.layouts["out"], fill=SENTINEL,
                device=ctx.device)
    expected = _sentinels(groups, case.cap)
    kernel_model.stacked_extend_locs(stack.tables, stack.widths, stack.page_sizes, case.rows, case.positions,
                                     expected)
    kernels = ctx.backend.kernels
    names = ("tables", "widths", "page_sizes", "rows", "positions")
    _judge(ctx, "W3", "stacked_extend_locs",
           lambda: kernels.stacked_extend_locs(*(inputs[k].view for k in names), out.view), inputs, out, expected)


def check_grouped_locs(ctx: Context, case: GroupedLocsCase) -> None:
    """G4: the optional fast path equals ``stacked_locs`` on the stacked tables (stale lengths and pads sink)."""
    groups = len(case.tables)
    inputs = {f"tables[{g}]": place(t, (len(t), len(t[0])), case.layouts[g], fill=POISON, device=ctx.device)
              for g, t in enumerate(case.tables)}
    inputs["seq_lens"] = place(case.seq_lens, (len(case.seq_lens),), case.layouts[groups], fill=POISON,
                               device=ctx.device)
    out = place(_sentinels(groups, case.cap), (groups, case.cap), case.layouts[-1], fill=SENTINEL,
                device=ctx.device)
    expected = _sentinels(groups, case.cap)
    kernel_model.stacked_locs(case.tables, [len(t[0]) for t in case.tables], case.page_sizes, case.seq_lens,
                              expected, case.bs, case.n)
    kernels = ctx.backend.kernels
    tables = [inputs[f"tables[{g}]"].view for g in range(groups)]
    _judge(ctx, "G4", GROUPED_LOCS,
           lambda: kernels.grouped_locs(tables, list(case.page_sizes), inputs["seq_lens"].view, out.view,
                                        case.bs, case.n), inputs, out, expected)


def check_grouped_extend_locs(ctx: Context, case: GroupedCase) -> None:
    """W3: the optional fast path equals ``stacked_extend_locs`` on the stacked tables (pads sink to page 0)."""
    groups = len(case.tables)
    inputs = {f"tables[{g}]": place(t, (len(t), len(t[0])), case.layouts[g], fill=POISON, device=ctx.device)
              for g, t in enumerate(case.tables)}
    out = place(_sentinels(groups, case.cap), (groups, case.cap), case.layouts[-1], fill=SENTINEL,
                device=ctx.device)
    expected = _sentinels(groups, case.cap)
    rows, positions = case.tokens()
    kernel_model.stacked_extend_locs(case.tables, [len(t[0]) for t in case.tables], case.page_sizes, rows,
                                     positions, expected)
    kernels = ctx.backend.kernels
    _judge(ctx, "W3", GROUPED_EXTEND,
           lambda: kernels.grouped_extend_locs([arg.view for arg in inputs.values()], list(case.page_sizes),
                                               list(case.prefix_lens), list(case.extend_lens), out.view),
           inputs, out, expected)


def check_replay_fill(ctx: Context, case: FillCase) -> None:
    """G3: the replay fill equals the model: live rows expanded and padded, dummy rows 0, rows >= bs kept."""
    groups = len(case.meta)
    inputs = {"packed": place(case.packed, (len(case.packed),), case.layouts["packed"], fill=POISON,
                              device=ctx.device),
              "meta": place([list(m) for m in case.meta], (groups, 3), case.layouts["meta"], fill=POISON,
                            device=ctx.device)}
    expected = [_sentinels(case.max_bs, case.width) for _ in range(groups)]
    dst = place(expected, (groups, case.max_bs, case.width), case.layouts["dst"], fill=SENTINEL, device=ctx.device)
    tail_pad = case.tail_pad if ctx.profile.tail_pad == DEFAULT_TAIL_PAD else ctx.profile.tail_pad
    kernel_model.replay_fill(case.packed, case.meta, expected, case.bs, case.actual_bs, tail_pad)
    live = min(case.actual_bs, case.bs)
    for g, (offset, cols, ratio) in enumerate(case.meta):
        source = [case.packed[offset + b * cols: offset + (b + 1) * cols] for b in range(live)]
        expected[g][: case.bs] = ctx.profile.subpages(expected[g][: case.bs], source, ratio, live)
    kernels = ctx.backend.kernels
    _judge(ctx, "G3", "replay_fill",
           lambda: kernels.replay_fill(inputs["packed"].view, inputs["meta"].view, dst.view, case.bs,
                                       case.actual_bs, tail_pad), inputs, dst, expected)


_LARGE_PAGE_SIZES = (2**20, 2**24, 2**26, 2**28, 2**30)


@st.composite
def _zero_width_grouped_locs(draw: st.DrawFn) -> GroupedLocsCase:
    """``grouped_locs`` with one group's table column-less (the Kernels protocol allows it: all its tokens
    sink into page 0); the other groups as drawn."""
    case = draw(grouped_locs_cases())
    empty = draw(between(0, len(case.tables) - 1))
    return replace(case, tables=[[[] for _ in t] if g == empty else t for g, t in enumerate(case.tables)])


def _large_entry(draw: st.DrawFn, ps: int) -> int:
    """A pad, a hole, or a real page inside W5 at page size ``ps`` (page 1 only, at 2^30)."""
    kind = draw(between(0, 2))
    return (-1, NULL_PAGE)[kind] if kind < 2 else draw(between(1, top_page(ps)))


@st.composite
def _large_grouped_extend(draw: st.DrawFn) -> GroupedCase:
    """``grouped_extend_locs`` at page sizes 2^20-2^30: the spans of later requests pass 2^31. Half the time the
    edge of many blocks: 8 requests at page size 2^28, each crossing its first page boundary (16 blocks of 2^28
    tokens pass 2^31 with every position below 2^29)."""
    cross = draw(BOOLEANS)
    requests, groups = (8, 1) if cross else (draw(between(2, 3)), draw(between(1, 2)))
    page_sizes = [2**28] if cross else [pick(draw, _LARGE_PAGE_SIZES) for _ in range(groups)]
    widths = [draw(between(2 if cross else 1, 3)) for _ in range(groups)]
    tables = [[[_large_entry(draw, ps) for _ in range(w)] for _ in range(requests)]
              for ps, w in zip(page_sizes, widths, strict=True)]
    reach = min(w * ps for w, ps in zip(widths, page_sizes, strict=True))
    if cross:
        prefix, extend = [2**28 - 1] * requests, [2] * requests
    else:
        extend = [draw(between(0, 3)) for _ in range(requests)]
        prefix = [reach - e - draw(between(0, 5)) if draw(BOOLEANS) else draw(between(0, 3)) for e in extend]
        prefix = [max(p, 0) for p in prefix]
        extend = [min(e, reach - p) for p, e in zip(prefix, extend, strict=True)]
    cap = sum(extend) + draw(between(0, 2))
    return GroupedCase(tables, page_sizes, prefix, extend, cap, draw_layouts(draw, [2] * (groups + 1)))


@st.composite
def _large_grouped_locs(draw: st.DrawFn) -> GroupedLocsCase:
    """``grouped_locs`` at page sizes 2^20-2^30, lengths near the last column and past the width."""
    bs, n, groups = draw(between(1, 3)), draw(between(1, 3)), draw(between(1, 2))
    page_sizes = [pick(draw, _LARGE_PAGE_SIZES) for _ in range(groups)]
    widths = [draw(between(1, 3)) for _ in range(groups)]
    tables = [[[_large_entry(draw, ps) for _ in range(w)] for _ in range(bs)]
              for ps, w in zip(page_sizes, widths, strict=True)]
    top = min(max(w * ps for w, ps in zip(widths, page_sizes, strict=True)) + 2, INT32_MAX)
    seq = [min(top - draw(between(0, 4)), INT32_MAX) if draw(BOOLEANS) else draw(between(1, 4)) for _ in range(bs)]
    lay = draw_layouts(draw, [2] * groups + [1, 2])
    return GroupedLocsCase(tables, page_sizes, seq, bs, n, bs * n, lay)


PROPERTIES = (
    Property("kernels/stacked-locs", "G4", "backend.kernels: fixed-count locations on pitched views; stale "
             "lengths and pads sink into page 0, nothing else is written", locs_cases(), check_stacked_locs,
             weight=2, not_applicable=missing_kernels),
    Property("kernels/grouped-locs", "G4", "backend.kernels' optional fixed-count fast path: per-group "
             "pitched tables, equal to the stacked kernel; stale lengths and pads sink into page 0",
             grouped_locs_cases(), check_grouped_locs, not_applicable=missing_grouped_locs),
    Property("kernels/stacked-extend-locs", "W3", "backend.kernels: extend locations on pitched views, "
             "positions past a width sink into page 0", extend_cases(), check_stacked_extend_locs,
             not_applicable=missing_kernels),
    Property("kernels/grouped-extend-locs", "W3", "backend.kernels' optional extend fast path: per-group "
             "pitched tables, equal to the stacked kernel, pads sink into page 0", grouped_cases(),
             check_grouped_extend_locs, not_applicable=missing_grouped_extend),
    Property("kernels/replay-fill", "G3", "backend.kernels: replay fill on pitched views; rows >= bs and "
             "the buffer around the view untouched", fill_cases(), check_replay_fill,
             not_applicable=missing_kernels),
    Property("kernels/large-page-extend", "W3", "backend.kernels' extend fast path at page sizes 2^20-2^30 "
             "(spans past 2^31) equals the stacked kernel", _large_grouped_extend(), check_grouped_extend_locs,
             not_applicable=missing_grouped_extend),
    Property("kernels/grouped-locs-edges", "G4", "backend.kernels' fixed-count fast path at its edges: a group "
             "whose table has no column (its tokens sink into page 0), page sizes 2^20-2^30 with lengths near "
             "and past the width", st.one_of(_zero_width_grouped_locs(), _large_grouped_locs()),
             check_grouped_locs, weight=2, not_applicable=missing_grouped_locs),
)
