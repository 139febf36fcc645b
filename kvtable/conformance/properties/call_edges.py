"""Calls at the edges of impl/'s API that no other property makes: a 0-row batch in debug mode, and
``kvtable.impl.expand_table(..., out=buf)`` into buffers of every kind (larger, strided, too small, of another
dtype, aliasing the table), run with the backend's own kernels.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from hypothesis import strategies as st

from kvtable.conformance.checks import Mismatch, check_tensor, expect_raises
from kvtable.conformance.checks import reference_outcome as outcome
from kvtable.conformance.core import Context, Property
from kvtable.conformance.properties.kernels import SENTINEL, missing_kernels
from kvtable.contract import Batch, GroupSpec, Mode
from kvtable.errors import ContractViolation, Unsupported
from kvtable.strategies import ExpandCase, as_tensor, expand_cases
from kvtable.strategies.draws import between, pick

MODE_CLAUSE: dict[Mode, str] = {"decode": "W1", "verify": "W2", "reanchor": "W4", "extend": "W3"}
OUT_KINDS = ("exact", "larger", "strided", "too-small", "wrong-dtype", "aliasing")
"""The ``out=`` buffers drawn: the first three must receive the expansion, the last three be refused (E2)."""


@dataclass(frozen=True)
class EmptyCase:
    mode: Mode
    page_sizes: tuple[int, ...]
    widths: tuple[int, ...]
    n: int


@st.composite
def _empty_cases(draw: st.DrawFn) -> EmptyCase:
    groups, mode = draw(between(1, 3)), pick(draw, tuple(MODE_CLAUSE))
    return EmptyCase(mode, tuple(pick(draw, (1, 2, 4, 16)) for _ in range(groups)),
                     tuple(draw(between(1, 4)) for _ in range(groups)),  # an engine's tables have a column
                     draw(between(1, 4)) if mode in ("verify", "reanchor") else 1)


def _empty_batch(ctx: Context, case: EmptyCase) -> None:
    """A batch with no rows writes nothing in debug mode too: every location tensor is empty, as without debug
    and in the reference (a refusal or a crash here is the bug issue 21 saw in impl's debug check)."""
    clause = MODE_CLAUSE[case.mode]
    specs = [GroupSpec(f"g{i}", "full", ps) for i, ps in enumerate(case.page_sizes)]
    tables = {s.group_id: torch.zeros(0, w, dtype=torch.int32, device=ctx.device)
              for s, w in zip(specs, case.widths, strict=True)}
    batch = Batch.extend([], []) if case.mode == "extend" else Batch((), mode=case.mode, n=case.n)
    backend, lengths = ctx.debug_backend, torch.zeros(0, dtype=torch.int32, device=ctx.device)
    table, ps = tables["g0"], case.page_sizes[0]
    lone = {"decode": lambda: backend.decode_locs(table, lengths, ps),
            "verify": lambda: backend.verify_locs(table, lengths, ps, case.n),
            "reanchor": lambda: backend.reanchor_locs(table, lengths, ps, case.n),
            "extend": lambda: backend.extend_locs(table, [], [], ps)}
    for what, call in ((f"group_locs ({case.mode}, no rows, debug)", lambda: backend.group_locs(specs, tables, batch)),
                       (f"{case.mode}_locs (no rows, debug)", lone[case.mode])):
        try:
            got = call()
        except ContractViolation as err:
            raise Mismatch(clause, f"{what}: refused a batch with no rows ({err})") from err
        except Unsupported:
            raise
        except Exception as err:  # a crash deep in torch is the bug itself
            raise Mismatch(clause, f"{what}: crashed with {type(err).__name__}: {err}") from err
        sizes = {k: v.numel() for k, v in got.items()} if isinstance(got, dict) else {"table": got.numel()}
        if any(sizes.values()):
            raise Mismatch(clause, f"{what}: wrote {sizes} locations for a batch with no rows")


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
    Property("debug/empty-batch", "W1", "a batch with no rows writes no location in debug mode either (every "
             "mode, grouped and lone calls)", _empty_cases(), _empty_batch, debug=True,
             needs=("group_locs", "decode_locs", "verify_locs", "reanchor_locs", "extend_locs")),
    Property("expand_table/out", "E2", "impl's expand_table into out= buffers with the backend's kernels: "
             "larger and strided ones get exactly [:rows, :cols], too small, int64 and aliasing ones are refused",
             _out_cases(), _expand_out, not_applicable=missing_kernels),
)
