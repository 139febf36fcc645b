"""Decode / verify locations of all groups: impl's ``group_locs`` against per-group torch chains and the bare formula.

On CPU every candidate is torch: the per-group chains (as engines write them), the bare formula (the
fewest ops that give the same values, no validation), impl's ``group_locs`` (validation included) and
``TorchKernels.stacked_locs`` on a prebuilt stack (as a graph replay runs it). Where CUDA is available
the fused pass is also timed as impl's Triton kernel, with device launches counted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from kvtable.bench.baselines import bare_decode_locs, per_group_decode_locs
from kvtable.bench.harness import (
    ON_THE_GPU,
    Section,
    Settings,
    Size,
    Spread,
    Target,
    Timing,
    count_device_launches,
    count_dispatched_ops,
    measure,
    ratio,
    require_same,
)
from kvtable.bench.workload import Workload, decode_workload, stacked

if TYPE_CHECKING:
    from kvtable.impl.kernels import Kernels

TARGET_GROUPS = 3
TARGET_BS = 512
SMALL_BS = 1
VERIFY_N = 4
TARGET_SPEEDUP = 2.0
"""eager group_locs vs the per-group chains at bs 512 (decode and verify)."""
TARGET_BARE = 1.3
"""eager group_locs vs the bare formula at bs 512 (decode and verify)."""
TARGET_BARE_SMALL = 1.5
"""eager group_locs vs the bare formula at bs 1 (decode)."""


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
    bs_sweep = (SMALL_BS, 64, TARGET_BS) if quick else (SMALL_BS, 8, 64, 256, TARGET_BS)
    out = [Case(TARGET_GROUPS, bs, n) for n in (1, VERIFY_N) for bs in bs_sweep]
    if not quick:
        out += [Case(g, 256, 1) for g in (2, 4)]
    return out


def run(settings: Settings, case_list: list[Case] | None = None) -> Section:
    section = Section("decode", "Decode/verify locations, all groups: per-group torch chains, the bare formula, "
                      "impl's group_locs", ["device", "groups", "bs", "n", "chains_us", "bare_us", "impl_us",
                                            "stacked_us", "vs_chains", "vs_bare", "chains_ops",
                                            "bare_ops", "impl_ops"])
    chosen = case_list or cases(settings.size)
    measured, on_gpu = {}, {}
    for i, case in enumerate(chosen):
        w = decode_workload(case.groups, case.bs, n=case.n, seed=200 + i)
        measured[case] = _cpu_row(section, w, case, settings)
    if torch.cuda.is_available():
        for i, case in enumerate(chosen):
            w = decode_workload(case.groups, case.bs, n=case.n, seed=200 + i, device="cuda")
            on_gpu[case] = _gpu_row(section, w, case, settings)
    _targets(section, measured, on_gpu)
    if not torch.cuda.is_available():
        section.skipped.append("GPU rows (Triton fused pass vs torch chains, launches and us): no CUDA device "
                               "in this run, so nothing on a GPU was measured")
    section.notes += [
        "vs_chains = chains / impl, vs_bare = impl / bare: medians of the per-repetition ratios of candidates "
        "timed interleaved in this run (the targets give min-max)",
        "impl = impl.locs.group_locs (host validation included; the torch route, the same ops CUDA tensors "
        "take: impl/routes.py); bare = the fewest torch ops for the same values on a valid batch, no validation; "
        "stacked = "
        "Kernels.stacked_locs on a prebuilt [G, bs, W] stack, as a CUDA-graph replay runs it",
        "ops = torch ops dispatched per call (allocations and views not counted): on a GPU each is a launch",
    ]
    section.moved.append(ON_THE_GPU)
    return section


def _stacked_pass(kernels: Kernels, w: Workload, seq: torch.Tensor, n: int
                  ) -> Callable[[], dict[str, torch.Tensor]]:
    stack, widths, page_sizes = stacked(w.specs, w.tables)
    out = torch.empty(stack.shape[0], w.batch.bs * n, dtype=torch.int32, device=stack.device)

    def call() -> dict[str, torch.Tensor]:
        kernels.stacked_locs(stack, widths, page_sizes, seq, out, w.batch.bs, n)
        return {s.group_id: out[g] for g, s in enumerate(w.specs)}

    return call


def cpu_candidates(w: Workload, n: int) -> dict[str, Callable[[], dict[str, torch.Tensor]]]:
    """The CPU candidates of one decode/verify batch, each checked against the chains before it is timed."""
    from kvtable.impl.locs import group_locs
    from kvtable.impl.torch_kernels import TORCH_KERNELS

    seq = torch.tensor(w.batch.seq_lens, dtype=torch.int32)
    candidates = {
        "chains": lambda: per_group_decode_locs(w.specs, w.tables, seq, n),
        "bare": lambda: bare_decode_locs(w.specs, w.tables, seq, n),
        "impl": lambda: group_locs(w.specs, w.tables, w.batch, debug=False),
        "stacked": _stacked_pass(TORCH_KERNELS, w, seq, n),
    }
    want = candidates["chains"]()
    for name, fn in candidates.items():
        require_same(f"decode {w.batch.bs}x{n}: {name} vs chains", fn(), want)
    return candidates


Measured = tuple[Spread, Spread, Timing]
"""One CPU row's speedup over the chains, its ratio to the bare formula, and impl's own timing."""


def _cpu_row(section: Section, w: Workload, case: Case, settings: Settings) -> Measured:
    candidates = cpu_candidates(w, case.n)
    t = measure(candidates, settings)
    ops = {name: count_dispatched_ops(fn) for name, fn in candidates.items()}
    vs_chains, vs_bare = ratio(t["chains"], t["impl"]), ratio(t["impl"], t["bare"])
    section.add(device="cpu", groups=case.groups, bs=case.bs, n=case.n, chains_us=t["chains"].median * 1e6,
                bare_us=t["bare"].median * 1e6, impl_us=t["impl"].median * 1e6,
                stacked_us=t["stacked"].median * 1e6,
                vs_chains=vs_chains.median, vs_bare=vs_bare.median,
                chains_ops=ops["chains"], bare_ops=ops["bare"], impl_ops=ops["impl"],
                spread={"vs_chains": vs_chains.to_json(), "vs_bare": vs_bare.to_json()},
                timings={name: timing.to_json() for name, timing in t.items()})
    return vs_chains, vs_bare, t["impl"]


def _targets(section: Section, measured: dict[Case, Measured], on_gpu: dict[Case, tuple[Spread, Spread]]) -> None:
    """The issue's decode/verify targets, from the rows just measured (not measured if a case was left out): at bs
    512 on the GPU rows (the fused Triton pass; ``ON_THE_GPU``) with the CPU route's figure beside, at bs 1 on CPU."""
    for n, mode in ((1, "decode"), (VERIFY_N, "verify")):
        case = Case(TARGET_GROUPS, TARGET_BS, n)
        at, gpu = measured.get(case), on_gpu.get(case)
        name = f"eager {mode} locations, {TARGET_GROUPS} groups, bs {TARGET_BS} (GPU: the fused Triton pass)"
        chains = Target.at_least(f"{name}: speedup over the per-group chains", TARGET_SPEEDUP, gpu and gpu[0])
        bare = Target.at_most(f"{name}: time / bare formula", TARGET_BARE, gpu and gpu[1])
        chains.cpu, bare.cpu = at and at[0], at and at[1]
        section.targets += [chains, bare]
    small = measured.get(Case(TARGET_GROUPS, SMALL_BS, 1))
    detail = "" if small is None else f"impl {_us(small[2])} us per call"
    section.targets.append(Target.at_most(f"eager decode group_locs, {TARGET_GROUPS} groups, bs {SMALL_BS}: "
                                          "time / bare formula", TARGET_BARE_SMALL, small and small[1], detail))


def _us(timing: Timing) -> str:
    return Spread.of([s * 1e6 for s in timing.samples]).render(".0f")


def _gpu_row(section: Section, w: Workload, case: Case, settings: Settings) -> tuple[Spread, Spread]:
    from kvtable.impl.torch_kernels import TORCH_KERNELS
    from kvtable.impl.triton_kernels import TritonKernels

    seq = torch.tensor(w.batch.seq_lens, dtype=torch.int32, device="cuda")
    candidates = {
        "chains": lambda: per_group_decode_locs(w.specs, w.tables, seq, case.n),
        "bare": lambda: bare_decode_locs(w.specs, w.tables, seq, case.n),
        "triton": _stacked_pass(TritonKernels(), w, seq, case.n),
        "torch_stacked": _stacked_pass(TORCH_KERNELS, w, seq, case.n),
    }
    want = candidates["chains"]()
    for name, fn in candidates.items():
        require_same(f"decode cuda {case}: {name} vs chains", fn(), want)
    t = measure(candidates, settings, device="cuda")
    launches = {name: count_device_launches(fn) for name, fn in candidates.items()}
    vs_chains, vs_bare = ratio(t["chains"], t["triton"]), ratio(t["triton"], t["bare"])
    section.add(device="cuda", groups=case.groups, bs=case.bs, n=case.n, chains_us=t["chains"].median * 1e6,
                bare_us=t["bare"].median * 1e6, impl_us=t["triton"].median * 1e6,
                stacked_us=t["torch_stacked"].median * 1e6, vs_chains=vs_chains.median,
                vs_bare=vs_bare.median, chains_ops=launches["chains"],
                bare_ops=launches["bare"], impl_ops=launches["triton"],
                timings={name: timing.to_json() for name, timing in t.items()})
    return vs_chains, vs_bare
