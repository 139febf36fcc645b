"""Torch ops dispatched per call, for decode, verify, extend and replay at 1, 3 and 8 groups: a deterministic
count, the same on any machine (on a GPU each op is about one kernel launch)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from kvtable.bench.baselines import bare_decode_locs, loop_extend_locs, per_group_decode_locs
from kvtable.bench.harness import Section, Settings, Spread, Target, count_dispatched_ops
from kvtable.bench.workload import KERNEL_PAGE_SIZE, Workload, decode_workload, extend_workload, one_storage

GROUPS = (1, 3, 8)
BATCH_SIZES = (1, 512)
MAX_SEQ = 4096
"""Short rows: the counts do not depend on lengths, and small tables keep the 8-group cases cheap."""
VERIFY_N = 4
CALLS = ("decode", "verify", "extend", "replay")


def run(settings: Settings) -> Section:
    section = Section("ops", "Torch ops dispatched per call (each about one launch on a GPU); tables as separate "
                      "tensors, and as views of one storage", ["call", "groups", "bs", "impl_ops",
                                                               "one_storage_ops", "baseline", "baseline_ops",
                                                               "bare_ops"])
    sizes = BATCH_SIZES[:1] if settings.size == "smoke" else BATCH_SIZES
    for call in CALLS:
        for groups in GROUPS:
            for bs in sizes:
                section.add(call=call, groups=groups, bs=bs, **_counts(call, groups, bs))
    for call in CALLS:
        counts = [r["one_storage_ops"] for r in section.records if r["call"] == call]
        section.targets.append(Target(f"{call}: ops per call with the tables in one storage", "the same count "
                                      f"for every G in {GROUPS} and bs in {sizes}", Spread.of(counts),
                                      min(counts) == max(counts)))
    section.notes += [
        "ops = aten ops dispatched by one call (after a warm-up call), views and allocations not counted",
        "impl = impl.locs.group_locs (decode, verify, extend: validation included) or GroupGraphBuffers.replay; "
        "with separate tables each group costs one gather of its own (index_select); as views of one storage "
        "one gather reads every group",
        "replay on the torch kernels: one cat packs the tables, replay_fill writes each group with 1 op (ratio 1) "
        "or 3 (expanded), then one location pass; the Triton replay_fill is one launch for every group",
        "baseline: chains = one torch chain per group (upstream's eager decode), loop = upstream's per-request "
        "extend loop; bare = the fewest torch ops for the same decode/verify values, no validation",
    ]
    return section


def _counts(call: str, groups: int, bs: int) -> dict[str, object]:
    """impl's ops on separate tables and on one storage, and the baselines', for one call."""
    if call == "extend":
        w = extend_workload(groups, bs, max_extend=64, seed=groups, max_seq=MAX_SEQ)
        prefix = list(w.batch.prefix_lens or ())
        extend = [seq - p for seq, p in zip(w.batch.seq_lens, prefix, strict=True)]
        baseline = ("loop", count_dispatched_ops(lambda: loop_extend_locs(w.specs, w.tables, prefix, extend)))
        bare = None
    elif call == "replay":
        w = decode_workload(groups, bs, n=1, seed=groups, max_seq=MAX_SEQ)
        baseline, bare = ("-", None), None
    else:
        n = VERIFY_N if call == "verify" else 1
        w = decode_workload(groups, bs, n=n, seed=groups, max_seq=MAX_SEQ)
        seq = torch.tensor(w.batch.seq_lens, dtype=torch.int32)
        baseline = ("chains", count_dispatched_ops(lambda: per_group_decode_locs(w.specs, w.tables, seq, n)))
        bare = count_dispatched_ops(lambda: bare_decode_locs(w.specs, w.tables, seq, n))
    shared = Workload(w.specs, one_storage(w.tables), w.batch)
    return {"impl_ops": count_dispatched_ops(_impl(call, w)),
            "one_storage_ops": count_dispatched_ops(_impl(call, shared)), "baseline": baseline[0],
            "baseline_ops": baseline[1], "bare_ops": bare}


def _impl(call: str, w: Workload) -> Callable[[], object]:
    from kvtable.impl.graph import GroupGraphBuffers
    from kvtable.impl.locs import group_locs

    if call != "replay":
        return lambda: group_locs(w.specs, w.tables, w.batch, debug=False)
    graph = GroupGraphBuffers(w.specs, max_bs=w.batch.bs, max_kernel_pages=-(-MAX_SEQ // KERNEL_PAGE_SIZE),
                              kernel_page_size=KERNEL_PAGE_SIZE)
    seq = torch.tensor(w.batch.seq_lens, dtype=torch.int32)
    return lambda: graph.replay(w.batch.bs, w.tables, seq)
