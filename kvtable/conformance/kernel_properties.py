"""Properties over a backend's fused kernels (``backend.kernels``, the impl/kernels.py ``Kernels`` protocol).

Each draws raw kernel arguments the host-side validation would never let through (stale lengths
past a group's width, pads inside rows, columns past the width holding another group's pages),
places them in pitched, strided views of larger buffers filled with a poison value, fills the
outputs with a sentinel, and compares every element with ``kernel_model``: the named outputs must
hold the model's values, everything else (the rest of the outputs, the inputs, the buffers around
the views) must be left as it was. A backend with no ``kernels`` gets these properties reported
"not applicable", never passed; so does one whose kernels lack an optional fast path
(``grouped_locs``, ``grouped_extend_locs``), for that fast path's property alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from hypothesis import strategies as st

from kvtable.conformance import kernel_model
from kvtable.conformance.checks import Mismatch, first_difference
from kvtable.strategies import PAGE_LIMIT

if TYPE_CHECKING:
    from kvtable.conformance.properties import Context

KERNEL_OPERATIONS = ("stacked_locs", "stacked_extend_locs", "replay_fill")
GROUPED_LOCS = "grouped_locs"
"""The optional fast path of impl/kernels.py's ``GroupedLocs``."""
GROUPED_EXTEND = "grouped_extend_locs"
"""The optional fast path of impl/kernels.py's ``GroupedExtendLocs``."""
SENTINEL = -7
"""Every output element starts as this: no kernel ever computes it (locations are >= 0, pads -1 or 0)."""
POISON = 4242
"""Input buffers around the views, and stack columns past a group's width: a real page no draw uses."""
PAGE_SIZES = (1, 2, 3, 4, 8, 16)

Rows = list[list[int]]


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


# ------------------------------------------------------------------------------------------------
# Memory layouts: a view in the corner of a larger buffer, maybe strided along its last dimension
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """``extra`` elements per dimension around the view, every ``step``-th element along the last one."""

    extra: tuple[int, ...]
    step: int = 1


def layouts(dims: int) -> st.SearchStrategy[Layout]:
    return st.builds(Layout, st.tuples(*[st.integers(0, 2)] * dims), st.sampled_from((1, 2)))


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


# ------------------------------------------------------------------------------------------------
# Inputs
# ------------------------------------------------------------------------------------------------


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


def _entries(page_size: int) -> st.SearchStrategy[int]:
    """Pads, holes, small pages and pages at the top of the W5 range (``(p + 1) * ps <= 2^31``)."""
    top = PAGE_LIMIT // page_size - 1
    return st.one_of(st.sampled_from((-1, 0)), st.integers(1, 64), st.integers(top - 64, top))


@st.composite
def stacks(draw: st.DrawFn, rows: int) -> Stack:
    groups, width = draw(st.integers(1, 3)), draw(st.integers(1, 6))
    page_sizes = [draw(st.sampled_from(PAGE_SIZES)) for _ in range(groups)]
    widths = [draw(st.integers(1, width)) for _ in range(groups)]
    tables = [[[draw(_entries(page_sizes[g])) if c < widths[g] else POISON for c in range(width)]
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
    bs, n = draw(st.integers(0, 4)), draw(st.integers(1, 4))
    stack = draw(stacks(bs + draw(st.integers(0, 2)) or 1))
    seq = draw(st.lists(st.integers(1, stack.reach + n), min_size=bs, max_size=bs + 2))
    cap = bs * n + draw(st.integers(0, 3))
    names = {"tables": 3, "widths": 1, "page_sizes": 1, "seq_lens": 1, "out": 2}
    return LocsCase(stack, seq, bs, n, cap, {k: draw(layouts(d)) for k, d in names.items()})


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
    stack = draw(stacks(draw(st.integers(1, 4))))
    tokens = draw(st.integers(0, 10))
    rows = [draw(st.integers(0, stack.shape[1] - 1)) for _ in range(tokens)]
    positions = [draw(st.integers(0, stack.reach)) for _ in range(tokens)]
    names = {"tables": 3, "widths": 1, "page_sizes": 1, "rows": 1, "positions": 1, "out": 2}
    return ExtendCase(stack, rows, positions, tokens + draw(st.integers(0, 3)),
                      {k: draw(layouts(d)) for k, d in names.items()})


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
    bs, n, groups = draw(st.integers(0, 4)), draw(st.integers(1, 4)), draw(st.integers(1, 3))
    page_sizes = [draw(st.sampled_from(PAGE_SIZES)) for _ in range(groups)]
    widths = [draw(st.integers(1, 6)) for _ in range(groups)]
    tables = [[[draw(_entries(ps)) for _ in range(w)] for _ in range(bs + draw(st.integers(0, 2)) or 1)]
              for ps, w in zip(page_sizes, widths, strict=True)]
    reach = (max(widths) + 2) * max(page_sizes)
    seq = draw(st.lists(st.integers(1, reach + n), min_size=bs, max_size=bs + 2))
    cap = bs * n + draw(st.integers(0, 3))
    return GroupedLocsCase(tables, page_sizes, seq, bs, n, cap,
                           [*(draw(layouts(2)) for _ in range(groups)), draw(layouts(1)), draw(layouts(2))])


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
    requests, groups = draw(st.integers(1, 4)), draw(st.integers(1, 3))
    page_sizes = [draw(st.sampled_from(PAGE_SIZES)) for _ in range(groups)]
    widths = [draw(st.integers(1, 6)) for _ in range(groups)]
    tables = [[[draw(_entries(ps)) for _ in range(w)] for _ in range(requests + draw(st.integers(0, 2)))]
              for ps, w in zip(page_sizes, widths, strict=True)]
    reach = min(w * ps for w, ps in zip(widths, page_sizes, strict=True))
    prefix = [draw(st.integers(0, reach)) for _ in range(requests)]
    extend = [draw(st.integers(0, reach - p)) for p in prefix]
    cap = sum(extend) + draw(st.integers(0, 3))
    return GroupedCase(tables, page_sizes, prefix, extend, cap, [draw(layouts(2)) for _ in range(groups + 1)])


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
    groups, max_bs, width = draw(st.integers(1, 3)), draw(st.integers(1, 4)), draw(st.integers(1, 8))
    bs = draw(st.integers(0, max_bs))
    actual_bs = draw(st.integers(0, bs))
    blocks = []
    for _ in range(groups):
        cols, ratio = draw(st.integers(1, 4)), draw(st.sampled_from((1, 2, 3, 4)))
        entries = [draw(_entries(ratio)) for _ in range(actual_bs * cols)]
        blocks.append((draw(st.integers(0, 2)), cols, ratio, entries))
    order = list(range(groups))[:: -1 if draw(st.booleans()) else 1]  # offsets need not follow group order
    packed: list[int] = []
    meta: list[tuple[int, int, int]] = [(0, 0, 0)] * groups
    for g in order:
        gap, cols, ratio, entries = blocks[g]
        packed += [POISON] * gap
        meta[g] = (len(packed), cols, ratio)
        packed += entries
    packed += [POISON] * draw(st.integers(0, 2))
    names = {"packed": 1, "meta": 2, "dst": 3}
    return FillCase(packed, meta, max_bs, width, bs, actual_bs, draw(st.sampled_from((-1, 0))),
                    {k: draw(layouts(d)) for k, d in names.items()})


# ------------------------------------------------------------------------------------------------
# Checks
# ------------------------------------------------------------------------------------------------


def _judge(ctx: Context, clause: str, what: str, call: Callable[[], Any], inputs: dict[str, Placed],
           out: Placed, expected: list[Any]) -> None:
    """Run the kernel; ``out`` must hold ``expected`` and nothing else may change."""
    for name, arg in (*inputs.items(), ("out", out)):
        ctx.transcript.note(arg.describe(name))
    before = {name: arg.storage.clone() for name, arg in inputs.items()}
    try:
        call()
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
    kernel_model.replay_fill(case.packed, case.meta, expected, case.bs, case.actual_bs, case.tail_pad)
    kernels = ctx.backend.kernels
    _judge(ctx, "G3", "replay_fill",
           lambda: kernels.replay_fill(inputs["packed"].view, inputs["meta"].view, dst.view, case.bs,
                                       case.actual_bs, case.tail_pad), inputs, dst, expected)
