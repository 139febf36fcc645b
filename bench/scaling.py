"""Decode cost against tokens: bs 1 to 4096 at 1, 3 and 8 groups, fitted as a per-call constant plus a cost per
token, for impl's ``group_locs`` and the bare formula, timed interleaved."""

from __future__ import annotations

from functools import partial

import torch

from kvtable.bench.baselines import bare_decode_locs
from kvtable.bench.harness import Section, Settings, Timing, measure, require_same
from kvtable.bench.workload import decode_workload

GROUPS = (1, 3, 8)
MAX_SEQ = 4096
"""Short rows keep 8 groups at bs 4096 small (tables of 256 columns); the cost per token does not depend on it."""


def batch_sizes(size: str) -> tuple[int, ...]:
    if size == "smoke":
        return (1, 4)
    return (1, 16, 256, 4096) if size == "quick" else (1, 4, 16, 64, 256, 1024, 4096)


def run(settings: Settings) -> Section:
    from kvtable.impl.locs import group_locs

    section = Section("scaling", "Decode locations vs batch size and groups (cpu): impl's group_locs and the bare "
                      "formula", ["groups", "bs", "impl_us", "bare_us", "impl_ns/tok", "bare_ns/tok"])
    for groups in GROUPS:
        timings: dict[int, dict[str, Timing]] = {}
        for bs in batch_sizes(settings.size):
            w = decode_workload(groups, bs, n=1, seed=400 + bs, max_seq=MAX_SEQ)
            seq = torch.tensor(w.batch.seq_lens, dtype=torch.int32)
            candidates = {"impl": partial(group_locs, w.specs, w.tables, w.batch, debug=False),
                          "bare": partial(bare_decode_locs, w.specs, w.tables, seq, 1)}
            require_same(f"scaling {groups} groups bs {bs}", candidates["impl"](), candidates["bare"]())
            t = timings[bs] = measure(candidates, settings)
            section.add(groups=groups, bs=bs, impl_us=t["impl"].median * 1e6, bare_us=t["bare"].median * 1e6,
                        **{"impl_ns/tok": t["impl"].median / bs * 1e9, "bare_ns/tok": t["bare"].median / bs * 1e9},
                        timings={name: timing.to_json() for name, timing in t.items()})
        section.notes += [_fit(groups, name, {bs: t[name].median for bs, t in timings.items()})
                          for name in ("impl", "bare")]
    section.notes.append("each fit is least squares of the medians over the batch sizes above (tokens = bs, one "
                         "token per request); worst residual = the largest |measured - fit| / measured")
    return section


def _fit(groups: int, name: str, seconds: dict[int, float]) -> str:
    """``time = per_call + per_token * tokens``, least squares, with the worst relative residual."""
    x = torch.tensor([[1.0, bs] for bs in seconds], dtype=torch.float64)
    y = torch.tensor([[s] for s in seconds.values()], dtype=torch.float64)
    solution = torch.linalg.lstsq(x, y).solution
    per_call, per_token = solution.flatten().tolist()
    worst = ((x @ solution - y).abs() / y).max().item()
    return (f"{groups} groups, {name}: {per_call * 1e6:.0f} us per call + {per_token * 1e9:.1f} ns per token "
            f"(worst residual {worst:.0%})")
