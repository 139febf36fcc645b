"""SGLang 0.5.23 driven from its own venv: conform passes, a real run is clean, each seeded fault is caught.

Budgets are small (10 examples per property, one 200-step run, the faulted runs stop at their first
corruption): each test is one or two subprocesses importing SGLang (about 25 s each on a busy 2-core machine).
The faulted conform runs isolate the property in a worker process, since a faulted kernel may write far
enough before its buffer to take the process down (a CRASH, a safety verdict).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess

import pytest

from kvtable.trace.store import TraceReader

Run = Callable[..., CompletedProcess[str]]

BACKEND = "kvtable.engines.sglang:backend"
FAULT_PROPERTY = {"prefix-past-length": "alloc/pool-extend", "swa-translation-off-by-one": "alloc/swa-decode",
                  "free-pages-launch-off-by-one": "alloc/extend"}
"""Each fault and a property that hands SGLang the input it breaks on."""


def _conform(kvtable_in: Run, backend: str, *args: str) -> dict:
    done = kvtable_in("sglang", "conform", "--backend", backend, "--profile", "sglang", "--examples", "10",
                      "--seed", "0", "--json", *args)
    assert done.stdout.strip(), done.stderr[-2000:]
    return json.loads(done.stdout)


def _check(kvtable_in: Run, trace: Path) -> dict:
    done = kvtable_in("sglang", "trace", "check", trace, "--profile", "sglang", "--json")
    return json.loads(done.stdout.strip().splitlines()[0])


def _record(kvtable_in: Run, out: Path, *extra: str, steps: int = 200) -> CompletedProcess[str]:
    done = kvtable_in("sglang", "trace", "record", "--engine", "sglang", "--steps", str(steps), "--seed", "0",
                      "--out", out, *extra)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done


def test_conform_passes_with_twenty_properties(kvtable_in: Run) -> None:
    report = _conform(kvtable_in, BACKEND, "--level", "correct", "--no-isolate")
    applied = [r["property"] for r in report["results"] if r["status"] != "not applicable"]
    failed = [(r["property"], r["message"][:200]) for r in report["results"]
              if r["status"] not in ("passed", "not applicable")]
    assert report["passed"] and not failed, failed
    assert len(applied) >= 20, applied
    assert {"alloc/extend", "alloc/verify", "alloc/swa-extend", "alloc/pool-extend", "verify_locs"} <= set(applied)


def test_real_run_is_clean(kvtable_in: Run, tmp_path: Path) -> None:
    done = _record(kvtable_in, tmp_path / "run")
    assert "recorded 2" in done.stdout and "verify" in done.stdout
    verdict = _check(kvtable_in, tmp_path / "run")
    assert verdict["violation"] is None and verdict["steps"] >= 200, verdict
    reader = TraceReader(tmp_path / "run")
    freed = {pool for s in reader.steps() if s.kind == "free" for pool in s.groups}
    assert freed == {"req_to_token", "swa"} and reader.header.meta["pool_frees"], freed  # A6 judged across steps


@pytest.mark.parametrize("fault", sorted(FAULT_PROPERTY))
def test_fault_fails_conform_at_safety(kvtable_in: Run, fault: str) -> None:
    factory = BACKEND + "_" + fault.replace("-", "_")
    report = _conform(kvtable_in, factory, "--level", "safety", "--property", FAULT_PROPERTY[fault])
    (result,) = report["results"]  # in a worker: a write far before SGLang's buffer may take the process down
    assert result["status"] in ("failed", "crash") and result["tier"] == "safety", result["message"][:2000]


@pytest.mark.parametrize("fault", sorted(FAULT_PROPERTY))
def test_fault_fails_trace_at_its_first_step(kvtable_in: Run, tmp_path: Path, fault: str) -> None:
    _record(kvtable_in, tmp_path / fault, "--fault", fault, steps=40)
    verdict = _check(kvtable_in, tmp_path / fault)
    violation = verdict["violation"]
    assert violation is not None and violation["tier"] == "safety", verdict
    steps = list(TraceReader(tmp_path / fault).steps())
    if fault == "prefix-past-length":  # the first step SGLang was handed the uncapped prefix
        first = next(s.index for s in steps if s.injected)
    else:  # the first allocation: each one translates through the SWA mapping, the first takes new pages
        first = next(s.index for s in steps if s.kind == "allocate")
    assert violation["step"] == first, (violation, first)
