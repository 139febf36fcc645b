"""Decode / verify locations of all groups: one fused pass against one torch chain per group.

On CPU both sides are torch (impl's ``group_locs`` and ``TorchKernels.stacked_locs``); where CUDA is
available the fused pass is also timed as impl's Triton kernel, with device launches counted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from kvtable.bench.baselines import per_group_decode_locs
from kvtable.bench.harness import (
    Section,
    Settings,
    Size,
    count_device_launches,
    count_dispatched_ops,
    measure,
    require_same,
)
from kvtable.bench.workload import Workload, decode_workload, stacked


@dataclass(frozen=True)
class Case:
    groups: int
    bs: int
    n: int


def cases(size: Size) -> list[Case]:
    """Decode (n 1) and verify (n 4) over a bs sweep at 3 groups, then 2 and 4 groups at bs 256."""
    if size == "smoke":
        return [Case(2, 2, 1), Case(2, 3, 4)]
    quick = size == "quick"
    bs_sweep = (1, 64, 512) if quick else (1, 8, 64, 256, 512)
    out = [Case(3, bs, n) for n in (1, 4) for bs in bs_sweep]
    if not quick:
        out += [Case(g, 256, 1) for g in (2, 4)]
    return out


def run(settings: Settings, case_list: list[Case] | None = None) -> Section:
    section = Section("decode", "Decode/verify locations, all groups: per-group torch chains vs one fused pass",
                      ["device", "fused", "groups", "bs", "n", "chains_us", "fused_us", "speedup",
                       "chains_ops", "fused_ops"])
    chosen = case_list or cases(settings.size)
    for i, case in enumerate(chosen):
        w = decode_workload(case.groups, case.bs, n=case.n, seed=200 + i)
        _cpu_rows(section, w, case, settings)
    if torch.cuda.is_available():
        for i, case in enumerate(chosen):
            w = decode_workload(case.groups, case.bs, n=case.n, seed=200 + i, device="cuda")
            _gpu_rows(section, w, case, settings)
    else:
        section.skipped.append("GPU rows (Triton fused pass vs torch chains, launches and us): no CUDA device "
                               "in this run, so nothing on a GPU was measured")
    section.notes += [
        "speedup = chains_us / fused_us, timed interleaved in this run",
        "fused group_locs = impl.locs.group_locs (stacks the tables each call); fused stacked = "
        "Kernels.stacked_locs on a prebuilt [G, bs, W] stack, as a CUDA-graph replay runs it",
        "ops on CPU = non-view aten ops dispatched per call; on GPU = device activities per call (profiler)",
    ]
    return section


def _stacked_pass(kernels: object, w: Workload, seq: torch.Tensor, n: int
                  ) -> Callable[[], dict[str, torch.Tensor]]:
    stack, widths, page_sizes = stacked(w.specs, w.tables)
    out = torch.empty(stack.shape[0], w.batch.bs * n, dtype=torch.int32, device=stack.device)

    def call() -> dict[str, torch.Tensor]:
        kernels.stacked_locs(stack, widths, page_sizes, seq, out, w.batch.bs, n)
        return {s.group_id: out[g] for g, s in enumerate(w.specs)}

    return call


def _cpu_rows(section: Section, w: Workload, case: Case, settings: Settings) -> None:
    from kvtable.impl.locs import group_locs
    from kvtable.impl.torch_kernels import TORCH_KERNELS

    seq = torch.tensor(w.batch.seq_lens, dtype=torch.int32)
    candidates = {
        "chains": lambda: per_group_decode_locs(w.specs, w.tables, seq, case.n),
        "group_locs": lambda: group_locs(w.specs, w.tables, w.batch, debug=False),
        "stacked": _stacked_pass(TORCH_KERNELS, w, seq, case.n),
    }
    _rows(section, "cpu", case, candidates, settings, count_dispatched_ops, sync=None)


def _gpu_rows(section: Section, w: Workload, case: Case, settings: Settings) -> None:
    from kvtable.impl.torch_kernels import TORCH_KERNELS
    from kvtable.impl.triton_kernels import TritonKernels

    seq = torch.tensor(w.batch.seq_lens, dtype=torch.int32, device="cuda")
    candidates = {
        "chains": lambda: per_group_decode_locs(w.specs, w.tables, seq, case.n),
        "triton": _stacked_pass(TritonKernels(), w, seq, case.n),
        "torch_stacked": _stacked_pass(TORCH_KERNELS, w, seq, case.n),
    }
    _rows(section, "cuda", case, candidates, settings, count_device_launches, sync=torch.cuda.synchronize)


def _rows(section: Section, device: str, case: Case, candidates: dict[str, Callable[[], object]],
          settings: Settings, count: Callable[[Callable[[], object]], int],
          sync: Callable[[], None] | None) -> None:
    want = candidates["chains"]()
    for name, fn in candidates.items():
        require_same(f"decode {device} {case}: {name} vs chains", fn(), want)
    t = measure(candidates, settings, sync=sync)
    ops = {name: count(fn) for name, fn in candidates.items()}
    chains_s = t["chains"].median
    for name in candidates:
        if name == "chains":
            continue
        section.add(device=device, fused=name, groups=case.groups, bs=case.bs, n=case.n,
                    chains_us=chains_s * 1e6, fused_us=t[name].median * 1e6, speedup=chains_s / t[name].median,
                    chains_ops=ops["chains"], fused_ops=ops[name],
                    timings={"chains": t["chains"].to_json(), name: t[name].to_json()})
