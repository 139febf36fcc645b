"""Torch ops dispatched per call, for decode, verify, extend and replay at 1, 3 and 8 groups: a deterministic
count, the same on any machine (on a GPU each op is about one kernel launch; a Triton launch counts as one)."""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from kvtable.bench.baselines import bare_decode_locs, loop_extend_locs, per_group_decode_locs
from kvtable.bench.harness import Section, Settings, Spread, Target, count_dispatched_ops
from kvtable.bench.workload import KERNEL_PAGE_SIZE, Workload, decode_workload, extend_workload, one_storage
from kvtable.impl.kernels import Kernels
from kvtable.impl.torch_kernels import TORCH_KERNELS

GROUPS = (1, 3, 8)
BATCH_SIZES = (1, 512)
MAX_SEQ = 4096
"""Short rows: the counts do not depend on lengths, and small tables keep the 8-group cases cheap."""
VERIFY_N = 4
CALLS = ("decode", "verify", "extend", "replay")
REPLAY_LAUNCHES = 2
"""A replay on kernels that fill every group in one launch: the fill launch and the location launch."""


def run(settings: Settings) -> Section:
    from kvtable.impl.triton_kernels import TRITON_KERNELS, interpreting, triton_available

    section = Section("ops", "Torch ops dispatched per call (each about one launch on a GPU; a Triton launch counts "
                      "as one); tables as separate tensors, and as views of one storage",
                      ["call", "kernels", "groups", "bs", "impl_ops", "one_storage_ops", "baseline", "baseline_ops",
                       "bare_ops"])
    sizes = BATCH_SIZES[:1] if settings.size == "smoke" else BATCH_SIZES
    for call in CALLS:
        for groups in GROUPS:
            for bs in sizes:
                section.add(call=call, kernels="torch", groups=groups, bs=bs,
                            **_counts(call, groups, bs, TORCH_KERNELS, "cpu"))
    if triton_available():
        device = "cpu" if interpreting() else "cuda"
        for groups in GROUPS:
            for bs in sizes:
                section.add(call="replay", kernels="triton", groups=groups, bs=bs,
                            **_counts("replay", groups, bs, TRITON_KERNELS, device,
                                      run_launches=bs == 1 or not interpreting()))
    else:
        section.skipped.append("replay on the Triton kernels: triton is not installed")
    for call in CALLS[:-1]:  # the torch replay fill writes each group with its own ops: no fixed count
        counts = _one_storage(section, call, "torch")
        section.targets.append(Target(f"{call}: ops per call with the tables in one storage", "the same count "
                                      f"for every G in {GROUPS} and bs in {sizes}", Spread.of(counts),
                                      min(counts) == max(counts)))
    counts = _one_storage(section, "replay", "triton")
    section.targets.append(Target(
        "replay on the Triton kernels: ops per call with the tables in one storage",
        f"{REPLAY_LAUNCHES} (the fill launch and the location launch) for every G in {GROUPS} and bs in {sizes}",
        Spread.of(counts) if counts else None,
        set(counts) == {REPLAY_LAUNCHES} if counts else None))
    section.notes += [
        "ops = aten ops dispatched by one call (after a warm-up call), views and allocations not counted; a Triton "
        "kernel launch counts as one op and the torch ops inside it (the interpreter's argument copies) do not",
        "kernels: torch = the torch route (impl/routes.py), the same ops on CPU and CUDA tensors",
        "impl = impl.locs.group_locs (decode, verify, extend: validation included; the torch kernels) or "
        "GroupGraphBuffers.replay on the kernels named; with separate tables each group costs one gather of its "
        "own (index_select); as views of one storage one gather reads every group",
        "replay reads tables in one storage where they lie; separate tables are packed by one cat first. On the "
        "Triton kernels replay_fill is one launch for every group and stacked_locs one more. On the torch kernels "
        "replay_fill writes each group with its own strided ops, 1 (ratio 1) or 6 (expanded), so that count grows "
        "with G and carries no target: per-group strided copies are the fastest torch-op fill (a fixed-count "
        "gather over every group measured 8.7-9.4x the copy floor); the fixed launch count is the Triton "
        "route's, the CUDA default",
        "Triton rows at bs 1 run their launches; interpreted, at bs 512 each launch is counted without running "
        "(the interpreter takes ~40 s for an 8-group bs-512 fill); no host step of replay reads what a launch "
        "wrote. seq_lens lie on the kernels' device (on a GPU a CPU seq_lens adds its upload, one copy)",
        "baseline: chains = one torch chain per group (upstream's eager decode), loop = upstream's per-request "
        "extend loop; bare = the fewest torch ops for the same decode/verify values, no validation",
    ]
    return section


def _one_storage(section: Section, call: str, kernels: str) -> list[int]:
    return [r["one_storage_ops"] for r in section.records if r["call"] == call and r["kernels"] == kernels]


def _counts(call: str, groups: int, bs: int, kernels: Kernels, device: str, *, run_launches: bool = True
            ) -> dict[str, object]:
    """impl's ops on separate tables and on one storage, and the baselines', for one call."""
    w = _workload(call, groups, bs, device)
    shared = Workload(w.specs, one_storage(w.tables), w.batch)
    return {"impl_ops": count_dispatched_ops(_impl(call, w, kernels, device), run_launches=run_launches),
            "one_storage_ops": count_dispatched_ops(_impl(call, shared, kernels, device), run_launches=run_launches),
            **_baselines(call, groups, bs)}


def _workload(call: str, groups: int, bs: int, device: str) -> Workload:
    """The batch every count of this call, group count and batch size is taken on (deterministic)."""
    if call == "extend":
        return extend_workload(groups, bs, max_extend=64, seed=groups, max_seq=MAX_SEQ)
    n = VERIFY_N if call == "verify" else 1
    return decode_workload(groups, bs, n=n, seed=groups, max_seq=MAX_SEQ, device=device)


@functools.cache
def _baselines(call: str, groups: int, bs: int) -> dict[str, object]:
    """The per-group chains' (or loop's) and the bare formula's ops on the same batch, counted once whatever the
    kernels (the loop at 8 groups, bs 512, dispatches 25k ops)."""
    w = _workload(call, groups, bs, "cpu")
    if call == "extend":
        prefix = list(w.batch.prefix_lens or ())
        extend = [seq - p for seq, p in zip(w.batch.seq_lens, prefix, strict=True)]
        ops = count_dispatched_ops(lambda: loop_extend_locs(w.specs, w.tables, prefix, extend))
        return {"baseline": "loop", "baseline_ops": ops, "bare_ops": None}
    if call == "replay":
        return {"baseline": "-", "baseline_ops": None, "bare_ops": None}
    n = w.batch.tokens_per_row
    seq = torch.tensor(w.batch.seq_lens, dtype=torch.int32)
    return {"baseline": "chains",
            "baseline_ops": count_dispatched_ops(lambda: per_group_decode_locs(w.specs, w.tables, seq, n)),
            "bare_ops": count_dispatched_ops(lambda: bare_decode_locs(w.specs, w.tables, seq, n))}


def _impl(call: str, w: Workload, kernels: Kernels, device: str) -> Callable[[], object]:
    from kvtable.impl.graph import GroupGraphBuffers
    from kvtable.impl.locs import group_locs

    if call != "replay":
        return lambda: group_locs(w.specs, w.tables, w.batch, debug=False, kernels=kernels)
    graph = GroupGraphBuffers(w.specs, max_bs=w.batch.bs, max_kernel_pages=-(-MAX_SEQ // KERNEL_PAGE_SIZE),
                              kernel_page_size=KERNEL_PAGE_SIZE, device=device, kernels=kernels)
    seq = torch.tensor(w.batch.seq_lens, dtype=torch.int32, device=device)
    return lambda: graph.replay(w.batch.bs, w.tables, seq)
