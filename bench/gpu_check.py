"""The GPU check (``bench/gpu_check.sh``): every GPU route judged and timed on CUDA tensors, into one JSON file.

Steps, each a subprocess with its own time cap inside one overall budget (8 minutes by default), so a hung step
is recorded as timed out and the rest still run: the Triton unit tests compiled; a large compiled-Triton vs
torch comparison of the three fused operations (equality, time per call); ``kvtable conform`` on CUDA tensors
for each GPU route (torch, torch-stacked, compiled Triton; the graph runner's properties included) at a small
budget, in-process (kvtable's own backends need no crash isolation); then the bench's ops, decode and replay
sections with their GPU rows. Nothing here needs CUDA to be parsed, planned or written, so
tests/cli/test_gpu_check.py runs all of that on a CPU.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kvtable.bench.harness import source_commit

BUDGET_S = 480
"""The whole check: under 8 minutes of the lent machine."""
CONFORM_EXAMPLES = 5
GPU_ROUTES = ("torch", "torch-stacked", "triton")
"""The backends whose eager calls and graph runner take each GPU route (impl/routes.py), built on CUDA here."""
TAIL = 4000
"""Characters of each step's output kept in the JSON."""


@dataclass(frozen=True)
class Step:
    """One command of the check and the most seconds it may take."""

    name: str
    argv: tuple[str, ...]
    cap_s: int
    json_stdout: bool = False
    """Whether stdout is a JSON document (``kvtable conform --json``), kept parsed."""


@dataclass
class Outcome:
    name: str
    argv: list[str]
    rc: int | None
    seconds: float
    timed_out: bool
    output_tail: str
    report: Any = None
    summary: dict[str, Any] = field(default_factory=dict)


def plan(python: str, examples: int = CONFORM_EXAMPLES, out_dir: str = "bench/results") -> list[Step]:
    """The check's steps, in order (their caps sum to the budget)."""
    conform = [Step(f"conform {route} on cuda", (python, "-m", "kvtable.cli", "conform", "--backend",
                                                 f"kvtable.bench.gpu_check:{route.replace('-', '_')}_cuda",
                                                 "--examples", str(examples), "--level", "strict", "--json",
                                                 "--no-progress", "--no-isolate"), 100, json_stdout=True)
               for route in GPU_ROUTES]
    return [Step("triton unit tests, compiled", (python, "-m", "pytest", "tests/unit/test_triton_kernels.py", "-q",
                                                 "-p", "no:cacheprovider"), 60),
            Step("triton vs torch, large inputs", (python, "-m", "kvtable.bench.gpu_compare"), 30),
            *conform,
            Step("bench ops, decode, replay", (python, "-m", "kvtable.cli", "bench", "--quick", "--only", "ops",
                                               "--only", "decode", "--only", "replay", "--json",
                                               f"{out_dir}/gpu-bench.json"), 90)]


Runner = Callable[[Step, float], Outcome]


def run_step(step: Step, cap_s: float) -> Outcome:
    """Run one step as a subprocess, killed after ``cap_s`` seconds."""
    start = time.perf_counter()
    try:
        done = subprocess.run(step.argv, capture_output=True, text=True, timeout=cap_s)
        rc, stdout, stderr, timed_out = done.returncode, done.stdout, done.stderr, False
    except subprocess.TimeoutExpired as err:
        rc, timed_out = None, True
        stdout = err.stdout.decode() if isinstance(err.stdout, bytes) else err.stdout or ""
        stderr = err.stderr.decode() if isinstance(err.stderr, bytes) else err.stderr or ""
    outcome = Outcome(step.name, list(step.argv), rc, round(time.perf_counter() - start, 1), timed_out,
                      (stdout + stderr)[-TAIL:])
    if step.json_stdout and not timed_out:
        try:
            outcome.report = json.loads(stdout)
        except json.JSONDecodeError:
            outcome.report = None
    outcome.summary = summarize(outcome.report)
    return outcome


def summarize(report: Any) -> dict[str, Any]:
    """A conform report's verdict counts and failing properties (empty for anything else)."""
    if not isinstance(report, dict) or "results" not in report:
        return {}
    statuses = [r.get("status") for r in report["results"]]
    return {"passed": statuses.count("passed"), "not_applicable": statuses.count("not applicable"),
            "failed": [r.get("property") for r in report["results"]
                       if r.get("status") not in ("passed", "not applicable")]}


def check(steps: Sequence[Step], budget_s: float, runner: Runner = run_step) -> list[Outcome]:
    """Every step in order, each capped by its own limit and by what is left of the budget (a step with under
    5 s left is recorded as not run)."""
    deadline = time.perf_counter() + budget_s
    outcomes = []
    for step in steps:
        left = deadline - time.perf_counter()
        if left < 5:
            outcomes.append(Outcome(step.name, list(step.argv), None, 0.0, True, "not run: the budget was spent"))
            continue
        outcomes.append(runner(step, min(step.cap_s, left)))
    return outcomes


def write(path: Path, outcomes: Sequence[Outcome], budget_s: float, device: str) -> dict[str, Any]:
    """The one JSON file of the check: where and when it ran, and every step's outcome."""
    doc = {"schema": 1, "created": datetime.now(UTC).isoformat(timespec="seconds"), **source_commit(),
           "device": device, "budget_s": budget_s, "ok": all(o.rc == 0 for o in outcomes),
           "steps": [asdict(o) for o in outcomes]}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2) + "\n")
    return doc


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench/gpu_check.sh", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench/results/gpu-check.json"), help="the JSON file")
    parser.add_argument("--budget", type=float, default=BUDGET_S, help="seconds for the whole check")
    parser.add_argument("--examples", type=int, default=CONFORM_EXAMPLES, help="conform examples per property")
    parser.add_argument("--python", default=sys.executable, help="the interpreter the steps run under")
    return parser.parse_args(argv)


def torch_cuda(debug: bool | None = None) -> object:
    """The torch backend on CUDA tensors (``kvtable conform --backend kvtable.bench.gpu_check:torch_cuda``)."""
    from kvtable.backends.torch_backend import TorchBackend

    return TorchBackend(device="cuda", debug=debug)


def torch_stacked_cuda(debug: bool | None = None) -> object:
    """The torch-stacked backend (the proved formula on every eager call) on CUDA tensors."""
    from kvtable.backends.torch_backend import TorchStackedBackend

    return TorchStackedBackend(device="cuda", debug=debug)


def triton_cuda(debug: bool | None = None) -> object:
    """The Triton backend, compiled, on CUDA tensors."""
    from kvtable.backends.triton_backend import TritonBackend

    return TritonBackend(device="cuda", debug=debug)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    import torch

    if not torch.cuda.is_available():
        sys.stderr.write("gpu_check.sh needs CUDA\n")
        return 2
    outcomes = check(plan(args.python, args.examples, str(args.out.parent)), args.budget)
    doc = write(args.out, outcomes, args.budget, torch.cuda.get_device_name())
    for o in outcomes:
        print(f"{o.name}: rc {o.rc}{' (timed out)' if o.timed_out else ''}, {o.seconds}s {o.summary or ''}")
    print(f"results: {args.out}")
    return 0 if doc["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
