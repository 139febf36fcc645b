"""Cross-route agreement: every implementation route of an operation (impl/routes.py) on the same drawn input.

One drawn case runs through every route that can run on the context's device (the torch grouped and stacked
paths, Triton compiled on CUDA or interpreted on a CPU) and through the backend's own kernels (its grouped
path when it has one, and its stacked path); each output must equal ``kernel_model``'s, so two routes that
disagree are both named, each against the model. The replay fill is compared under kvtable's convention (the
backend's own fill is judged under its profile by ``kernels/replay-fill``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from kvtable.conformance import kernel_model
from kvtable.conformance.checks import Mismatch, first_difference
from kvtable.conformance.core import Context, Property
from kvtable.conformance.properties.kernels import SENTINEL, missing_kernels
from kvtable.errors import Unsupported
from kvtable.impl.routes import routes
from kvtable.strategies.kernels import (
    POISON,
    FillCase,
    GroupedCase,
    GroupedLocsCase,
    Rows,
    fill_cases,
    grouped_cases,
    grouped_locs_cases,
)

Run = Callable[[object, str], list]
"""``(kernels, call) -> output as nested lists``: one operation on one drawn case."""


def _i32(values: object, device: str, dtype: torch.dtype = torch.int32) -> torch.Tensor:
    return torch.tensor(values, dtype=dtype, device=device)


def _stack(tables: list[Rows], device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The tables as one ``[G, R, Wmax]`` stack (POISON past each width; R the fewest rows) and the widths."""
    rows, width = min(len(t) for t in tables), max(len(t[0]) for t in tables)
    stack = torch.full((len(tables), rows, width), POISON, dtype=torch.int32, device=device)
    for g, table in enumerate(tables):
        stack[g, :, : len(table[0])] = _i32(table[:rows], device)
    return stack, _i32([len(t[0]) for t in tables], device)


def _agree(ctx: Context, clause: str, run: Run, expected: list, *, backend_too: bool = True) -> None:
    """Every route of ``run``'s operation that runs here, and the backend's own paths, must give ``expected``."""
    operation = run.__name__.removeprefix("_run_").replace("_", "-")
    candidates = [(f"route {r.name} ({r.entry})", r.kernels(ctx.device), r.call) for r in routes(operation)]
    kernels = getattr(ctx.backend, "target", ctx.backend).kernels
    if backend_too:
        candidates += [(f"backend.kernels.{call}", kernels, call) for call in _own_calls(kernels, operation)]
    ran: list[str] = []
    for name, chosen, call in candidates:
        if chosen is None:
            continue
        try:
            got = run(chosen, call)
        except Unsupported:
            raise  # a path the backend does not have: the example is discarded, as everywhere
        except Exception as err:  # a route that crashes on input its operation defines
            raise Mismatch(clause, f"{name}: crashed with {type(err).__name__}: {err}") from err
        ctx.transcript.note(f"# {name} -> {got}")
        if got != expected:
            raise Mismatch(clause, f"{name} disagrees with the model the other routes match ({ran or 'none yet'} "
                           f"agreed): {first_difference(got, expected)}\n  got      {got}\n  expected {expected}")
        ran.append(name)


def _own_calls(kernels: Any, operation: str) -> list[str]:
    """The backend kernels' paths for a location operation: the stacked one, and the grouped one if present."""
    stacked, grouped = {"fixed-locs": ("stacked_locs", "grouped_locs"),
                        "extend-locs": ("stacked_extend_locs", "grouped_extend_locs")}[operation]
    return [stacked] + ([grouped] if callable(getattr(kernels, grouped, None)) else [])


def check_fixed_locs(ctx: Context, case: GroupedLocsCase) -> None:
    """G4 (W1/W2/W4): every fixed-count location route gives the model's locations, sinks included."""
    groups = len(case.tables)
    expected = [[SENTINEL] * case.cap for _ in range(groups)]
    kernel_model.stacked_locs(case.tables, [len(t[0]) for t in case.tables], case.page_sizes, case.seq_lens,
                              expected, case.bs, case.n)

    def _run_fixed_locs(kernels: Any, call: str) -> list:
        out = torch.full((groups, case.cap), SENTINEL, dtype=torch.int32, device=ctx.device)
        seq = _i32(case.seq_lens, ctx.device)
        if call == "grouped_locs":
            kernels.grouped_locs([_i32(t, ctx.device) for t in case.tables], list(case.page_sizes), seq, out,
                                 case.bs, case.n)
        else:
            stack, widths = _stack(case.tables, ctx.device)
            kernels.stacked_locs(stack, widths, _i32(case.page_sizes, ctx.device), seq, out, case.bs, case.n)
        return out.tolist()

    _agree(ctx, "G4", _run_fixed_locs, expected)


def check_extend_locs(ctx: Context, case: GroupedCase) -> None:
    """W3: every extend location route gives the model's locations, pads sunk into page 0."""
    groups = len(case.tables)
    rows, positions = case.tokens()
    expected = [[SENTINEL] * case.cap for _ in range(groups)]
    kernel_model.stacked_extend_locs(case.tables, [len(t[0]) for t in case.tables], case.page_sizes, rows,
                                     positions, expected)

    def _run_extend_locs(kernels: Any, call: str) -> list:
        out = torch.full((groups, case.cap), SENTINEL, dtype=torch.int32, device=ctx.device)
        if call == "grouped_extend_locs":
            kernels.grouped_extend_locs([_i32(t, ctx.device) for t in case.tables], list(case.page_sizes),
                                        list(case.prefix_lens), list(case.extend_lens), out)
        else:
            stack, widths = _stack(case.tables, ctx.device)
            kernels.stacked_extend_locs(stack, widths, _i32(case.page_sizes, ctx.device),
                                        _i32(rows, ctx.device, torch.int64), _i32(positions, ctx.device, torch.int64),
                                        out)
        return out.tolist()

    _agree(ctx, "W3", _run_extend_locs, expected)


def check_replay_fill(ctx: Context, case: FillCase) -> None:
    """G3/E2: every replay-fill route gives the model's rows under kvtable's convention (rows >= bs untouched)."""
    groups = len(case.meta)
    expected = [[[SENTINEL] * case.width for _ in range(case.max_bs)] for _ in range(groups)]
    kernel_model.replay_fill(case.packed, case.meta, expected, case.bs, case.actual_bs, case.tail_pad)

    def _run_replay_fill(kernels: Any, call: str) -> list:
        dst = torch.full((groups, case.max_bs, case.width), SENTINEL, dtype=torch.int32, device=ctx.device)
        kernels.replay_fill(_i32(case.packed, ctx.device), _i32([list(m) for m in case.meta], ctx.device), dst,
                            case.bs, case.actual_bs, case.tail_pad)
        return dst.tolist()

    _agree(ctx, "G3", _run_replay_fill, expected, backend_too=False)


PROPERTIES = (
    Property("routes/fixed-locs-agree", "G4", "every fixed-count location route (impl/routes.py) and the "
             "backend's own paths agree with the model on one drawn input", grouped_locs_cases(), check_fixed_locs,
             not_applicable=missing_kernels),
    Property("routes/extend-locs-agree", "W3", "every extend location route and the backend's own paths agree "
             "with the model on one drawn input", grouped_cases(), check_extend_locs, not_applicable=missing_kernels),
    Property("routes/replay-fill-agree", "G3", "every replay-fill route agrees with the model on one drawn input "
             "(kvtable's convention)", fill_cases(), check_replay_fill, not_applicable=missing_kernels),
)
