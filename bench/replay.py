"""CUDA-graph replay fill: bytes moved per step against the memory-copy floor, as a ratio.

The fill (``Kernels.replay_fill``) writes every column of rows ``[:bs]`` of each group's persistent
table; the floor is one plain ``copy_`` of exactly that many bytes between contiguous buffers. The
whole replay step (``GroupGraphBuffers.replay``: guard, packing, fill, locations) is timed beside them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from kvtable.bench.baselines import copy_floor, per_group_decode_locs
from kvtable.bench.harness import (
    ON_THE_GPU,
    Section,
    Settings,
    Size,
    Spread,
    Target,
    count_dispatched_ops,
    measure,
    ratio,
    require_same,
)
from kvtable.bench.workload import KERNEL_PAGE_SIZE, MAX_SEQ, Workload, decode_workload
from kvtable.impl.kernels import Kernels
from kvtable.reference.expand import expand_table, page_ratio

TARGET_RATIO = 3.0
"""replay_fill vs the copy floor at bs 512, 3 and 4 groups."""
TARGET_STEP = 3.0
"""a whole replay step vs its two kernel calls at bs 1."""
TARGET_BS = 512
TAIL_PAD = -1


@dataclass(frozen=True)
class Case:
    groups: int
    bs: int


def cases(size: Size) -> list[Case]:
    """A bs sweep at 3 groups (ratios 1, 1, 4), and 4 groups (ratio 2 too) at the target bs."""
    if size == "smoke":
        return [Case(3, 2)]
    bs_sweep = (1, 64, TARGET_BS) if size == "quick" else (1, 8, 64, 256, TARGET_BS)
    return [Case(3, bs) for bs in bs_sweep] + [Case(4, TARGET_BS)]


@dataclass
class FillStep:
    """One replay step: the live block tables of a padded batch, packed in one storage as upstream does."""

    workload: Workload
    """``actual_bs`` live rows per table; the batch's seq_lens cover them."""
    bs: int
    packed: torch.Tensor
    meta: torch.Tensor
    """int32 ``[G, 3]``: (offset into packed, source columns, ratio), in spec order."""
    dst: torch.Tensor
    """int32 ``[G, bs, W]``, the persistent stack the fill writes."""

    @property
    def actual_bs(self) -> int:
        return self.workload.batch.bs

    @property
    def bytes_written(self) -> int:
        return self.dst.shape[0] * self.bs * self.dst.shape[2] * self.dst.element_size()

    def seq_lens(self) -> torch.Tensor:
        """Every row's length: the live rows', then 1 for the padded rows."""
        seq = list(self.workload.batch.seq_lens) + [1] * (self.bs - self.actual_bs)
        return torch.tensor(seq, dtype=torch.int32, device=self.dst.device)


def fill_step(groups: int, bs: int, *, seed: int, max_seq: int = MAX_SEQ, device: str = "cpu") -> FillStep:
    """A padded decode step: ``bs - bs // 8`` live rows, their tables packed back to back."""
    w = decode_workload(groups, max(1, bs - bs // 8), n=1, seed=seed, max_seq=max_seq, device=device)
    sources = [w.tables[s.group_id] for s in w.specs]
    ratios = [page_ratio(s.block_granularity, KERNEL_PAGE_SIZE, group=s.group_id) for s in w.specs]
    offsets = [0]
    for t in sources[:-1]:
        offsets.append(offsets[-1] + t.numel())
    meta = torch.tensor([[off, t.shape[1], r] for off, t, r in zip(offsets, sources, ratios, strict=True)],
                        dtype=torch.int32, device=device)
    width = max(t.shape[1] * r for t, r in zip(sources, ratios, strict=True))
    dst = torch.zeros(groups, bs, width, dtype=torch.int32, device=device)
    return FillStep(w, bs, torch.cat([t.reshape(-1) for t in sources]), meta, dst)


def check_fill(step: FillStep, filled: Mapping[str, torch.Tensor]) -> None:
    """Rows 0, actual_bs - 1 and bs - 1 of each group's filled table against the reference (E2, T2)."""
    rows = sorted({0, step.actual_bs - 1, step.bs - 1})
    for spec in step.workload.specs:
        src, got = step.workload.tables[spec.group_id], filled[spec.group_id]
        ratio = page_ratio(spec.block_granularity, KERNEL_PAGE_SIZE)
        for b in rows:
            live = b < step.actual_bs
            source_row = [src[b].tolist() if live else [0] * src.shape[1]]
            want = expand_table(source_row, ratio, max_kernel_pages=got.shape[1], tail_pad=TAIL_PAD,
                                actual_bs=1 if live else 0)[0]
            if got[b].tolist() != want:
                raise AssertionError(f"replay fill: group {spec.group_id!r} row {b} differs from the reference")


def run(settings: Settings, case_list: list[Case] | None = None) -> Section:
    from kvtable.impl.torch_kernels import TORCH_KERNELS

    section = Section("replay", "Replay, all groups: Kernels.replay_fill vs a plain copy_ of the same bytes; the "
                      "whole step vs its two kernel calls", ["device", "kernels", "groups", "bs", "MB_written",
                                                             "copy_us", "fill_us", "ratio", "launches_us",
                                                             "step_us", "step_ratio", "step_ops"])
    chosen = case_list or cases(settings.size)
    measured = {}
    for i, case in enumerate(chosen):
        measured[case] = _row(section, TORCH_KERNELS, fill_step(case.groups, case.bs, seed=300 + i), settings)
    on_gpu = {}
    if torch.cuda.is_available():
        from kvtable.impl.triton_kernels import TritonKernels

        for i, case in enumerate(chosen):
            on_gpu[case] = _row(section, TritonKernels(), fill_step(case.groups, case.bs, seed=300 + i, device="cuda"),
                                settings)
    for groups in (3, 4):  # on the GPU rows (ON_THE_GPU), the CPU route's figure beside
        got, cpu = on_gpu.get(Case(groups, TARGET_BS)), measured.get(Case(groups, TARGET_BS))
        target = Target.at_most(f"replay_fill / copy floor, {groups} groups, bs {TARGET_BS} (GPU: the Triton fill)",
                                TARGET_RATIO, got and got[0])
        target.cpu = cpu and cpu[0]
        section.targets.append(target)
    small = measured.get(Case(3, 1))
    section.targets.append(Target.at_most("replay step / its two kernel calls (fill + locations), 3 groups, bs 1 "
                                          "(cpu)", TARGET_STEP, small and small[1]))
    section.moved.append(ON_THE_GPU)
    if not torch.cuda.is_available():
        section.skipped.append("GPU rows (Triton replay fill vs a device copy_): no CUDA device in this run, "
                               "so nothing on a GPU was measured")
    section.notes += [
        "ratio = fill / copy, step_ratio = step / launches: medians of per-repetition ratios of candidates "
        "timed interleaved in this run (the targets give min-max)",
        "MB_written = G * bs * W * 4 bytes; copy = one plain copy_ of that many bytes (the memory floor)",
        "step = GroupGraphBuffers.replay: stale guard, host checks, packing the live tables, the fill, all "
        "groups' locations; launches = the fill and stacked_locs alone, on prepared inputs",
        "step_ops = torch ops dispatched per replay step (allocations and views not counted)",
        "actual_bs = bs - bs // 8: the padded rows are zero-filled by the fill, as the contract requires",
    ]
    return section


def _row(section: Section, kernels: Kernels, step: FillStep, settings: Settings) -> tuple[Spread, Spread]:
    """One measured row; returns the fill / copy and step / launches ratios."""
    from kvtable.impl.graph import GroupGraphBuffers

    w, n_bytes, device = step.workload, step.bytes_written, step.dst.device
    floor_src = torch.ones(n_bytes // 4, dtype=torch.int32, device=device)
    floor_dst = torch.empty_like(floor_src)
    graph = GroupGraphBuffers(w.specs, max_bs=step.bs, max_kernel_pages=-(-MAX_SEQ // KERNEL_PAGE_SIZE),
                              kernel_page_size=KERNEL_PAGE_SIZE, tail_pad=TAIL_PAD, device=device,
                              kernels=kernels)
    gids = graph.group_ids
    widths = torch.tensor([graph.widths[g] for g in gids], dtype=torch.int32, device=device)
    sizes = torch.tensor([graph.page_sizes[g] for g in gids], dtype=torch.int32, device=device)
    seq = step.seq_lens()

    def fill() -> None:
        kernels.replay_fill(step.packed, step.meta, step.dst, step.bs, step.actual_bs, TAIL_PAD)

    def launches() -> None:
        fill()
        kernels.stacked_locs(graph.table_stack, widths, sizes, seq, graph.loc_stack, step.bs, 1)

    def replay() -> None:
        graph.replay(step.bs, w.tables, seq, actual_bs=step.actual_bs)

    fill()
    check_fill(step, {s.group_id: step.dst[g] for g, s in enumerate(w.specs)})
    replay()
    check_fill(step, graph.table_buffers)
    live_locs = per_group_decode_locs(w.specs, w.tables, seq[: step.actual_bs], 1)
    require_same("replay step locations of the live rows", {g: graph.loc_buffers[g][: step.actual_bs]
                                                            for g in live_locs}, live_locs)
    t = measure({"copy": lambda: copy_floor(floor_dst, floor_src), "fill": fill, "launches": launches,
                 "step": replay}, settings, device=device.type)
    fill_ratio, step_ratio = ratio(t["fill"], t["copy"]), ratio(t["step"], t["launches"])
    section.add(device=device.type, kernels=kernels.name, groups=step.dst.shape[0], bs=step.bs,
                MB_written=n_bytes / 1e6, copy_us=t["copy"].median * 1e6, fill_us=t["fill"].median * 1e6,
                ratio=fill_ratio.median, launches_us=t["launches"].median * 1e6, step_us=t["step"].median * 1e6,
                step_ratio=step_ratio.median, step_ops=count_dispatched_ops(replay),
                spread={"ratio": fill_ratio.to_json(), "step_ratio": step_ratio.to_json()},
                timings={name: timing.to_json() for name, timing in t.items()})
    return fill_ratio, step_ratio
