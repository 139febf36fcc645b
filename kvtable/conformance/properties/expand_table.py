"""Block-to-kernel expansion (E1-E3): ratios refused, tables expanded (into ``out=`` buffers of every kind too:
larger, strided, too small, of another dtype, aliasing the table), locations invariant under expansion."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
from hypothesis import strategies as st

from kvtable.conformance.calls import lone_backend_call, lone_call, tensor_compare
from kvtable.conformance.checks import Mismatch, check_tensor, expect_raises, judge
from kvtable.conformance.checks import reference_outcome as outcome
from kvtable.conformance.core import Context, Property
from kvtable.conformance.properties.applies import LONE, NeedsAny, calls
from kvtable.conformance.properties.kernels import SENTINEL, missing_kernels
from kvtable.errors import ContractViolation
from kvtable.reference import GroupSpec, page_ratio
from kvtable.reference.model import Table
from kvtable.strategies import Case, ExpandCase, GraphSetup, as_tensor, cases, expand_cases
from kvtable.strategies.draws import between, pick
from kvtable.strategies.graph import draw_setup

_KERNEL_PAGE_SIZES = (2, 4, 8, 16)
OUT_KINDS = ("exact", "larger", "strided", "too-small", "wrong-dtype", "aliasing")
"""The ``out=`` buffers drawn: the first three must receive the expansion, the last three be refused (E2)."""


def _expand(ctx: Context, ex: ExpandCase) -> None:
    width = ex.max_kernel_pages if ex.max_kernel_pages is not None else ex.width * ex.ratio
    expected = outcome(lambda: ctx.profile.expand_table(ex.table, ex.ratio, max_kernel_pages=ex.max_kernel_pages,
                                                        tail_pad=ex.tail_pad, actual_bs=ex.actual_bs))

    def compare(got: Any, want: Table) -> None:
        if isinstance(got, torch.Tensor) and tuple(got.shape) != (len(ex.table), width):
            raise Mismatch("E2", f"expand_table: shape {tuple(got.shape)}, expected {(len(ex.table), width)}")
        if isinstance(got, torch.Tensor):
            want = ctx.profile.unread_rows_as_given(want, got.tolist(), ex.actual_bs)
        check_tensor("E2", "expand_table", got, want, device=ctx.device)

    judge("E2", "expand_table", expected,
          lambda: ctx.backend.expand_table(as_tensor(ex.table, ex.width), ex.ratio,
                                           max_kernel_pages=ex.max_kernel_pages, tail_pad=ex.tail_pad,
                                           actual_bs=ex.actual_bs), compare)


def _unit_invariance(ctx: Context, case: Case) -> None:
    """E3: the backend's locations on its own expanded table at K equal the reference's at B."""
    calls(ctx, case.batch.mode, group=False)  # the mode's lone call, or the example is discarded
    k = case.kernel_page_size
    for spec in case.attention:
        ratio = page_ratio(spec.block_granularity, k)
        expanded = ctx.backend.expand_table(case.tensor(spec.group_id), ratio, tail_pad=case.tail_pad)
        kernel_spec = GroupSpec(spec.group_id, spec.family, k, window=spec.window)
        kernel_case = replace(case, specs=(kernel_spec,), tables={spec.group_id: case.tables[spec.group_id]},
                              raw={spec.group_id: expanded})
        what, call = lone_backend_call(ctx, ctx.backend, kernel_case, spec.group_id)
        _, expected, _ = lone_call(ctx, ctx.backend, replace(case, specs=(spec,)), spec.group_id)
        judge("E3", f"{what} on expand_table(r={ratio}) at K={k}", expected, call,
              tensor_compare(ctx, "E3", what))


@st.composite
def _bad_ratios(draw: st.DrawFn) -> tuple[GraphSetup, int]:
    setup = draw_setup(draw)
    k = pick(draw, _KERNEL_PAGE_SIZES)
    spec = GroupSpec("full_odd", "full", k * draw(between(1, 3)) + draw(between(1, k - 1)))
    return replace(setup, specs=(*setup.specs, spec), kernel_page_size=k, expand=True), draw(between(-2, 0))


def _page_ratio(ctx: Context, arg: tuple[GraphSetup, int]) -> None:
    setup, ratio = arg
    expect_raises("E1", "graph() with B not a multiple of K",
                  lambda: ctx.backend.graph(list(setup.specs), **setup.kwargs()))
    expect_raises("E1", f"expand_table(ratio={ratio})",
                  lambda: ctx.backend.expand_table(as_tensor([[1, 2]]), ratio))


@st.composite
def _out_cases(draw: st.DrawFn) -> tuple[ExpandCase, str]:
    return draw(expand_cases()), pick(draw, OUT_KINDS)


def _out_buffer(kind: str, table: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """An ``out=`` buffer of ``kind``, filled with SENTINEL (``aliasing``: a view of the table's own storage)."""
    if kind == "aliasing":
        return table.view(-1)[:1].view(1, 1)
    shape = {"larger": (rows + 2, cols + 3), "strided": (rows, 2 * cols), "too-small": (rows, cols - 1)}
    out = torch.full(shape.get(kind, (rows, cols)), SENTINEL, device=table.device,
                     dtype=torch.int64 if kind == "wrong-dtype" else torch.int32)
    return out[:, ::2] if kind == "strided" else out


def _expand_out(ctx: Context, arg: tuple[ExpandCase, str]) -> None:
    """E2: ``expand_table(..., out=)`` writes exactly ``out[:rows, :cols]`` and returns that view, or refuses a
    buffer that is too small, of another dtype, or the table's own storage."""
    from kvtable.impl.expand import expand_table

    ex, kind = arg
    rows, cols = len(ex.table), ex.max_kernel_pages if ex.max_kernel_pages is not None else ex.width * ex.ratio
    expected = outcome(lambda: ctx.profile.expand_table(ex.table, ex.ratio, max_kernel_pages=ex.max_kernel_pages,
                                                        tail_pad=ex.tail_pad, actual_bs=ex.actual_bs))
    if expected.clause is not None:
        return  # the inputs themselves are refused: the expand_table property judges that
    table = as_tensor(ex.table, ex.width).to(ctx.device)
    if (kind == "aliasing" and not table.numel()) or (kind == "too-small" and not rows * cols):
        kind = "exact"  # nothing to alias, nothing smaller than nothing
    out = _out_buffer(kind, table, rows, cols)
    kernels = getattr(ctx.backend, "target", ctx.backend).kernels

    def call() -> torch.Tensor:
        return expand_table(table, ex.ratio, max_kernel_pages=ex.max_kernel_pages, tail_pad=ex.tail_pad,
                            actual_bs=ex.actual_bs, out=out, kernels=kernels)

    if kind in ("too-small", "wrong-dtype", "aliasing"):
        expect_raises("E2", f"expand_table(out= {kind} buffer {tuple(out.shape)} {out.dtype})", call)
        return
    before = out.clone()
    try:
        got = call()
    except ContractViolation as err:
        raise Mismatch("E2", f"expand_table(out= {kind} buffer {tuple(out.shape)}): refused a buffer that holds "
                       f"the expansion ({err})") from err
    check_tensor("E2", f"expand_table(out= {kind} buffer)", got, expected.value, device=ctx.device)
    if rows * cols and got.data_ptr() != out.data_ptr():
        raise Mismatch("E2", f"expand_table(out= {kind} buffer): the result is not a view of out[:rows, :cols]")
    outside = out.clone()
    outside[:rows, :cols] = before[:rows, :cols]
    if not torch.equal(outside, before):
        raise Mismatch("E2", f"expand_table(out= {kind} buffer {tuple(out.shape)}): wrote outside out[:{rows}, "
                       f":{cols}]")


PROPERTIES = (
    Property("expand_table", "E2", "block-to-kernel expansion: real blocks to b*r+j, holes and pads repeated",
             expand_cases(), _expand, weight=2, needs=("expand_table",)),
    Property("unit-invariance", "E3", "locations on the expanded table at K equal those on the block table at B",
             cases(), _unit_invariance, weight=2, needs=("expand_table",),
             not_applicable=NeedsAny(tuple(LONE.values()))),
    Property("page-ratio", "E1", "B not a positive multiple of K, or ratio < 1, is refused",
             _bad_ratios(), _page_ratio, needs=("graph", "expand_table")),
    Property("expand_table/out", "E2", "impl's expand_table into out= buffers with the backend's kernels: "
             "larger and strided ones get exactly [:rows, :cols], too small, int64 and aliasing ones are refused",
             _out_cases(), _expand_out, not_applicable=missing_kernels),
)
