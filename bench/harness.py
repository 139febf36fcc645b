"""Timing, tables and JSON for the benchmarks: candidates are timed side by side in one run.

Speed claims here are ratios between candidates measured in the same process, interleaved sample
by sample, so a noisy or shared machine slows every candidate alike instead of skewing one of them.
"""

from __future__ import annotations

import gc
import json
import math
import os
import platform
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import torch

"""Where results land by default; git-ignored."""


Size = Literal["full", "quick", "smoke"]
SIZES: tuple[Size, ...] = ("full", "quick", "smoke")


@dataclass(frozen=True)
class Settings:
    """How big the cases are and how hard to measure: warmup calls, interleaved samples, least sample time.

    ``smoke`` runs tiny cases once each: it checks the pipeline end to end and its numbers mean nothing.
    """

    size: Size
    warmup: int
    repeats: int
    min_sample_s: float

    @classmethod
    def for_size(cls, size: Size) -> Settings:
        if size == "smoke":
            return cls(size, warmup=0, repeats=1, min_sample_s=0.0)
        if size == "quick":
            return cls(size, warmup=1, repeats=5, min_sample_s=0.002)
        return cls(size, warmup=3, repeats=15, min_sample_s=0.02)


@dataclass(frozen=True)
class Timing:
    """Seconds per call of each interleaved sample (a sample may average several back-to-back calls)."""

    samples: tuple[float, ...]
    calls_per_sample: int

    @property
    def median(self) -> float:
        ordered = sorted(self.samples)
        mid = len(ordered) // 2
        return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2

    @property
    def best(self) -> float:
        return min(self.samples)

    def to_json(self) -> dict[str, Any]:
        return {"median_s": self.median, "min_s": self.best, "samples": len(self.samples),
                "calls_per_sample": self.calls_per_sample}


def measure(candidates: Mapping[str, Callable[[], object]], settings: Settings, *,
            sync: Callable[[], None] | None = None) -> dict[str, Timing]:
    """Time every candidate in this one run, round-robin, so each sample of each sees the same machine.

    Each candidate is warmed up, then calibrated to a number of back-to-back calls per sample that
    lasts at least ``settings.min_sample_s``; ``sync`` (e.g. ``torch.cuda.synchronize``) brackets a sample.
    """
    if not candidates:
        raise ValueError("nothing to measure")
    wait = sync or (lambda: None)
    calls: dict[str, int] = {}
    for name, fn in candidates.items():
        for _ in range(settings.warmup):
            fn()
        once = _sample(fn, 1, wait)
        calls[name] = max(1, math.ceil(settings.min_sample_s / max(once, 1e-9)))
    samples: dict[str, list[float]] = {name: [] for name in candidates}
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(settings.repeats):
            for name, fn in candidates.items():
                samples[name].append(_sample(fn, calls[name], wait))
    finally:
        if gc_was_enabled:
            gc.enable()
    return {name: Timing(tuple(samples[name]), calls[name]) for name in candidates}


def _sample(fn: Callable[[], object], calls: int, sync: Callable[[], None]) -> float:
    sync()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    sync()
    return (time.perf_counter() - start) / calls


def count_dispatched_ops(fn: Callable[[], object]) -> int:
    """How many non-view aten ops one call dispatches: on a GPU each is (about) one kernel launch."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Counter(TorchDispatchMode):
        ops = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            Counter.ops += not func.is_view
            return func(*args, **(kwargs or {}))

    with Counter():
        fn()
    return Counter.ops


def count_device_launches(fn: Callable[[], object]) -> int:
    """How many device activities (kernels, memcpys, memsets) one call runs, from the CUDA profiler."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)


def require_same(what: str, got: Mapping[str, torch.Tensor], want: Mapping[str, torch.Tensor]) -> None:
    """Refuse to time two candidates that do not compute the same values: a fast wrong answer is no result."""
    if set(got) != set(want):
        raise AssertionError(f"{what}: groups differ: {sorted(got)} vs {sorted(want)}")
    for gid in sorted(want):
        a, b = got[gid].cpu(), want[gid].cpu()
        if a.dtype != b.dtype or a.shape != b.shape or not torch.equal(a, b):
            raise AssertionError(f"{what}: group {gid!r} differs ({a.dtype} {tuple(a.shape)} vs "
                                 f"{b.dtype} {tuple(b.shape)})")


@dataclass
class Target:
    """A speed target the issue states; checked by reading the output, never by a test."""

    name: str
    want: str
    got: float | None
    met: bool | None
    """None when the measurement it needs was not run (skipped is never reported as met)."""

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "want": self.want, "got": self.got, "met": self.met}


@dataclass
class Section:
    """One benchmark's result: a printed table, its rows as JSON records, notes and targets."""

    name: str
    title: str
    columns: Sequence[str]
    records: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    """Parts not run here, with the reason (e.g. no CUDA device)."""

    def add(self, **record: Any) -> None:
        self.records.append(record)

    def to_json(self) -> dict[str, Any]:
        return {"title": self.title, "columns": list(self.columns), "records": self.records,
                "notes": self.notes, "targets": [t.to_json() for t in self.targets],
                "skipped": self.skipped}

    def render(self) -> str:
        """The section as an aligned text table followed by its targets, skips and notes."""
        header = list(self.columns)
        body = [[_cell(rec.get(col)) for col in header] for rec in self.records]
        widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]
        lines = [f"== {self.title} =="]
        lines.append("  ".join(h.rjust(w) for h, w in zip(header, widths, strict=True)))
        lines.append("  ".join("-" * w for w in widths))
        lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in body]
        for t in self.targets:
            verdict = "not measured" if t.met is None else ("MET" if t.met else "MISSED")
            got = "-" if t.got is None else _cell(t.got)
            lines.append(f"target {t.name}: want {t.want}, got {got}: {verdict}")
        lines += [f"skipped: {s}" for s in self.skipped]
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if value == 0 or 0.01 <= abs(value) < 1e6:
            return f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"
        return f"{value:.2e}"
    return str(value)


def host_info() -> dict[str, Any]:
    """What the numbers were measured on: they only mean something next to this."""
    info: dict[str, Any] = {
        "python": platform.python_version(), "torch": torch.__version__, "machine": platform.machine(),
        "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
        "cuda": torch.cuda.is_available(),
    }
    if torch.cuda.is_available():
        info["cuda_device"] = torch.cuda.get_device_name()
    if hasattr(os, "getloadavg"):
        info["loadavg"] = os.getloadavg()
    return info


def write_json(path: Path, sections: Sequence[Section], settings: Settings) -> None:
    """One JSON document for the whole run: host, settings and every section."""
    doc = {"schema": 1, "created": datetime.now(UTC).isoformat(timespec="seconds"),
           "settings": {"size": settings.size, "warmup": settings.warmup, "repeats": settings.repeats,
                        "min_sample_s": settings.min_sample_s},
           "host": host_info(), "sections": {s.name: s.to_json() for s in sections}}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2) + "\n")
