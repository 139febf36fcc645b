"""Extend (prefill) locations of all groups: impl's vectorized torch against the per-request loop, on CPU."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kvtable.bench.baselines import loop_extend_locs
from kvtable.bench.harness import Section, Settings, Size, Target, measure, require_same
from kvtable.bench.workload import extend_workload

TARGET_BS = 256
TARGET_GROUPS = 3
TARGET_MAX_EXTEND = 2048
TARGET_SPEEDUP = 20.0


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
    from kvtable.impl.locs import extend_locs, group_locs

    section = Section("extend", "Extend locations, all groups, CPU: per-request loop vs impl (vectorized torch)",
                      ["groups", "bs", "max_ext", "tokens", "loop_ms", "impl_ms", "per_group_ms", "speedup",
                       "loop_Mtok/s", "impl_Mtok/s", "loop_us/req", "impl_ns/tok"])
    for i, case in enumerate(case_list or cases(settings.size)):
        w = extend_workload(case.groups, case.bs, max_extend=case.max_extend, seed=100 + i)
        prefix = list(w.batch.prefix_lens or ())
        extend = [seq - p for seq, p in zip(w.batch.seq_lens, prefix, strict=True)]

        def loop(w=w, prefix=prefix, extend=extend):
            return loop_extend_locs(w.specs, w.tables, prefix, extend)

        def fused(w=w):
            return group_locs(w.specs, w.tables, w.batch, debug=False)

        def per_group(w=w, prefix=prefix, extend=extend):
            return {s.group_id: extend_locs(w.tables[s.group_id], prefix, extend, s.block_granularity, debug=False)
                    for s in w.specs}

        want = loop()
        require_same(f"extend {case}: group_locs vs loop", fused(), want)
        require_same(f"extend {case}: extend_locs vs loop", per_group(), want)
        t = measure({"loop": loop, "impl": fused, "per_group": per_group}, settings)
        loop_s, impl_s = t["loop"].median, t["impl"].median
        section.add(groups=case.groups, bs=case.bs, max_ext=case.max_extend, tokens=w.tokens,
                    loop_ms=loop_s * 1e3, impl_ms=impl_s * 1e3, per_group_ms=t["per_group"].median * 1e3,
                    speedup=loop_s / impl_s, **{"loop_Mtok/s": w.tokens / loop_s / 1e6,
                                                "impl_Mtok/s": w.tokens / impl_s / 1e6},
                    **{"loop_us/req": loop_s / case.bs * 1e6, "impl_ns/tok": impl_s / w.tokens * 1e9},
                    timings={name: timing.to_json() for name, timing in t.items()})
    at_target = [r for r in section.records if (r["groups"], r["bs"], r["max_ext"])
                 == (TARGET_GROUPS, TARGET_BS, TARGET_MAX_EXTEND)]
    got = at_target[0]["speedup"] if at_target else None
    section.targets.append(Target(f"extend speedup at bs {TARGET_BS} ({TARGET_GROUPS} groups, CPU)",
                                  f">= {TARGET_SPEEDUP:g}x", got, None if got is None else got >= TARGET_SPEEDUP))
    section.notes += [_growth(section.records, name) for name in ("loop", "impl") if len(section.records) >= 6]
    section.notes += [
        "speedup = loop_ms / impl_ms, both timed interleaved in this run; tokens = locations per group",
        "impl = impl.locs.group_locs (all groups, one pass); per_group = impl.locs.extend_locs once per group",
        "loop = upstream's per-request loop: arange per request, one gather per request per group",
    ]
    return section


def _growth(records: list[dict], name: str) -> str:
    """A least-squares fit ``time = fixed + per_request * bs + per_token * tokens`` over this run's cases."""
    x = torch.tensor([[1.0, r["bs"], r["tokens"]] for r in records], dtype=torch.float64)
    y = torch.tensor([[r[f"{name}_ms"] * 1e3] for r in records], dtype=torch.float64)
    fixed, per_req, per_tok = torch.linalg.lstsq(x, y).solution.flatten().tolist()
    return (f"{name} grows as {fixed:.0f} us + {per_req:.1f} us/request + {per_tok * 1e3:.0f} ns/token "
            f"(all groups; least squares over the {len(records)} cases above)")
