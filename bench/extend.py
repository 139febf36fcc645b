"""Extend (prefill) locations of all groups: impl's vectorized torch against the per-request loop and the
gather floor, on CPU."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kvtable.bench.baselines import gather_floor, loop_extend_locs
from kvtable.bench.harness import (
    ON_THE_GPU,
    Section,
    Settings,
    Size,
    Spread,
    Target,
    measure,
    ratio,
    require_same,
)
from kvtable.bench.workload import Workload, extend_workload

TARGET_BS = 256
TARGET_GROUPS = 3
TARGET_MAX_EXTEND = 2048
TARGET_SPEEDUP = 20.0
"""impl vs the per-request loop at the target case."""
TARGET_GATHER = 2.0
"""impl vs the gather floor at the target case."""


@dataclass(frozen=True)
class Case:
    groups: int
    bs: int
    max_extend: int


def cases(size: Size) -> list[Case]:
    """A bs sweep at mixed lengths, a token sweep at the target bs, and the group counts at the target."""
    if size == "smoke":
        return [Case(2, 1, 16), Case(2, 4, 64)]
    quick = size == "quick"
    bs_sweep = (1, 16, TARGET_BS) if quick else (1, 4, 16, 64, TARGET_BS, 512)
    token_sweep = (16,) if quick else (16, 256, 32768)
    group_sweep = () if quick else (2, 4)
    out = [Case(TARGET_GROUPS, bs, TARGET_MAX_EXTEND) for bs in bs_sweep]
    out += [Case(TARGET_GROUPS, TARGET_BS, m) for m in token_sweep]
    out += [Case(g, TARGET_BS, TARGET_MAX_EXTEND) for g in group_sweep]
    return out


def run(settings: Settings, case_list: list[Case] | None = None) -> Section:
    section = Section("extend", "Extend locations, all groups: per-request loop vs impl (vectorized torch) "
                      "vs the gather floor", ["device", "groups", "bs", "max_ext", "tokens", "loop_ms", "impl_ms",
                                              "per_group_ms", "gather_ms", "speedup", "vs_gather",
                                              "impl_Mtok/s", "loop_us/req", "impl_ns/tok"])
    measured = {}
    for i, case in enumerate(case_list or cases(settings.size)):
        measured[case] = _row(section, case, extend_workload(case.groups, case.bs, max_extend=case.max_extend,
                                                             seed=100 + i), settings)
    target = Case(TARGET_GROUPS, TARGET_BS, TARGET_MAX_EXTEND)
    at, gpu = measured.get(target), None
    if torch.cuda.is_available() and at is not None:  # the target case on the GPU rows (ON_THE_GPU)
        gpu = _row(section, target, extend_workload(target.groups, target.bs, max_extend=target.max_extend,
                                                    seed=100 + list(measured).index(target), device="cuda"), settings)
    else:
        section.skipped.append("GPU row (impl's extend locations vs the gather floor on CUDA): no CUDA device in this "
                               "run, so nothing on a GPU was measured")
    name = f"extend group_locs, {TARGET_GROUPS} groups, bs {TARGET_BS}, extends up to {TARGET_MAX_EXTEND}"
    section.targets.append(Target.at_least(f"{name} (cpu): speedup over the per-request loop", TARGET_SPEEDUP,
                                           at and at[0]))
    gather = Target.at_most(f"{name} (GPU): time / gather floor", TARGET_GATHER, gpu and gpu[1])
    gather.cpu = at and at[1]
    section.targets.append(gather)
    section.moved.append(ON_THE_GPU)
    cpu_rows = [r for r in section.records if r["device"] == "cpu"]
    section.notes += [_growth(cpu_rows, name) for name in ("loop", "impl") if len(cpu_rows) >= 6]
    section.notes += [
        "speedup = loop / impl, vs_gather = impl / gather: medians of per-repetition ratios of candidates timed "
        "interleaved in this run (the targets give min-max); tokens = locations per group",
        "impl = impl.locs.group_locs (all groups, one pass, host validation included; the torch route, the same "
        "ops CUDA tensors take: impl/routes.py); per_group = impl.locs.extend_locs once per group",
        "loop = upstream's per-request loop: arange per request, one gather per request per group",
        "gather = the memory floor: one index_select per group of the page each token reads (indices computed "
        "beforehand)",
    ]
    return section


def _row(section: Section, case: Case, w: Workload, settings: Settings) -> tuple[Spread, Spread]:
    """One measured case; returns the speedup over the loop and the ratio to the gather floor."""
    from kvtable.impl.locs import extend_locs, group_locs
    from kvtable.impl.tokens import extend_tokens

    prefix = list(w.batch.prefix_lens or ())
    extend = [seq - p for seq, p in zip(w.batch.seq_lens, prefix, strict=True)]
    device = next(iter(w.tables.values())).device
    rows, positions = extend_tokens(prefix, extend, device)
    flat = {s.group_id: w.tables[s.group_id].view(-1) for s in w.specs}
    reads = {s.group_id: rows * w.tables[s.group_id].shape[1] + positions // s.block_granularity for s in w.specs}
    candidates = {
        "loop": lambda: loop_extend_locs(w.specs, w.tables, prefix, extend),
        "impl": lambda: group_locs(w.specs, w.tables, w.batch, debug=False),
        "per_group": lambda: {s.group_id: extend_locs(w.tables[s.group_id], prefix, extend, s.block_granularity,
                                                      debug=False) for s in w.specs},
        "gather": lambda: gather_floor(flat, reads),
    }
    want = candidates["loop"]()
    require_same(f"extend {case}: group_locs vs loop", candidates["impl"](), want)
    require_same(f"extend {case}: extend_locs vs loop", candidates["per_group"](), want)
    t = measure(candidates, settings, device=device.type)
    speedup, vs_gather = ratio(t["loop"], t["impl"]), ratio(t["impl"], t["gather"])
    loop_s, impl_s = t["loop"].median, t["impl"].median
    section.add(device=device.type, groups=case.groups, bs=case.bs, max_ext=case.max_extend, tokens=w.tokens,
                loop_ms=loop_s * 1e3, impl_ms=impl_s * 1e3,
                per_group_ms=t["per_group"].median * 1e3, gather_ms=t["gather"].median * 1e3,
                speedup=speedup.median, vs_gather=vs_gather.median, **{"impl_Mtok/s": w.tokens / impl_s / 1e6},
                **{"loop_us/req": loop_s / case.bs * 1e6, "impl_ns/tok": impl_s / w.tokens * 1e9},
                spread={"speedup": speedup.to_json(), "vs_gather": vs_gather.to_json()},
                timings={name: timing.to_json() for name, timing in t.items()})
    return speedup, vs_gather


def _growth(records: list[dict], name: str) -> str:
    """A least-squares fit ``time = fixed + per_request * bs + per_token * tokens`` over this run's cases."""
    x = torch.tensor([[1.0, r["bs"], r["tokens"]] for r in records], dtype=torch.float64)
    y = torch.tensor([[r[f"{name}_ms"] * 1e3] for r in records], dtype=torch.float64)
    fixed, per_req, per_tok = torch.linalg.lstsq(x, y).solution.flatten().tolist()
    return (f"{name} grows as {fixed:.0f} us + {per_req:.1f} us/request + {per_tok * 1e3:.0f} ns/token "
            f"(all groups; least squares over the {len(records)} cases above)")
