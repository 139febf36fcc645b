"""Crash isolation and workers: a crash or hang is that property's CRASH or TIMEOUT verdict with its example,
every other property still gets its verdict, and ``--workers N`` gives the verdicts of an in-process run."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis.database import InMemoryExampleDatabase

from kvtable.cli import main
from kvtable.conformance.properties import select
from kvtable.conformance.runner import run_conformance
from kvtable.exitcodes import EXIT_FAILED, EXIT_USAGE

pytestmark = pytest.mark.slow  # subprocesses and worker processes: seconds each

REPO = Path(__file__).resolve().parents[2]
PROPS = ["rejects/T1", "decode_locs", "verify_locs", "graph/init"]


def _conform(capsys: pytest.CaptureFixture, backend: str, *extra: str) -> tuple[int, str]:
    argv = ["conform", "--backend", f"runs_backends:{backend}", "--examples", "30", *extra]
    for name in PROPS:
        argv += ["--property", name]
    rc = main(argv)
    return rc, capsys.readouterr().out


def _row(out: str, prop: str) -> list[str]:
    return next(line.split() for line in out.splitlines() if f" {prop} " in line)


def test_a_kernel_that_aborts_is_a_crash_with_its_example(capsys: pytest.CaptureFixture) -> None:
    rc, out = _conform(capsys, "AbortOnMalformedTable")  # not built-in: isolated by default
    assert rc == EXIT_FAILED
    assert _row(out, "rejects/T1")[3] == "CRASH"
    assert _row(out, "rejects/T1")[-1] == "safety"  # a crash is never safe, whatever the property's own tier
    assert [_row(out, p)[3] for p in ("decode_locs", "verify_locs", "graph/init")] == ["PASSED"] * 3
    assert "the backend killed the worker process (SIGABRT) during example" in out
    crash = out[out.index("=== CRASH [T1 table-shape] rejects/T1"):]
    assert "load('runs_backends:AbortOnMalformedTable', debug=True)" in crash
    assert "debug_backend.group_locs([GroupSpec(" in crash  # the call it died in, as a replayable call
    assert out.strip().endswith("FAIL: T1 table-shape")


def test_a_kernel_that_hangs_is_a_timeout_with_its_example(capsys: pytest.CaptureFixture) -> None:
    rc, out = _conform(capsys, "HangOnBs5", "--timeout", "10")  # generous: a loaded CI box is slow
    assert rc == EXIT_FAILED
    assert _row(out, "verify_locs")[3] == "TIMEOUT"
    assert _row(out, "verify_locs")[-1] == "safety"  # nor is a hang
    assert [_row(out, p)[3] for p in ("rejects/T1", "decode_locs", "graph/init")] == ["PASSED"] * 3
    timeout = out[out.index("=== TIMEOUT [W2 verify-loc] verify_locs"):]
    assert "gave no sign of life for 10 s (killed)" in timeout
    assert "out = backend.verify_locs(torch.tensor([[" in timeout  # the batch of 5 it hung on
    assert "FAIL: W2 verify-loc" in out


def test_a_device_side_assert_is_a_crash_and_a_fresh_worker_runs_the_rest() -> None:
    report = run_conformance("runs_backends:DeviceAssertOnDecode", examples=10, seed=0, isolate=True,
                             properties=select(["decode_locs", "graph/init"]))
    assert [(r.property, r.status) for r in report.results] == [("decode_locs", "crash"), ("graph/init", "passed")]
    assert "device-side assert triggered" in report.results[0].message


def test_workers_give_the_in_process_verdicts_and_share_the_database() -> None:
    properties = select(["decode_locs", "verify_locs", "graph/init", "expand_table"])
    alone = run_conformance("runs_backends:DecodeOnePageOn", examples=15, seed=1, properties=properties)
    database = InMemoryExampleDatabase()
    spread = run_conformance("runs_backends:DecodeOnePageOn", examples=15, seed=1, properties=properties,
                             workers=2, database=database)
    assert [(r.property, r.status, r.clause) for r in spread.results] == \
        [(r.property, r.status, r.clause) for r in alone.results]
    assert [r.status for r in alone.results] == ["failed", "passed", "passed", "passed"]
    assert any(values for values in database.data.values())  # the failure was saved through the pipe


def test_zoo_workers_give_the_entries_verdicts_in_order(capsys: pytest.CaptureFixture) -> None:
    assert main(["zoo", "vllm-13418", "vllm-1486", "--workers", "2", "--quiet", "--no-shrink"]) == 0
    out = capsys.readouterr().out
    assert out.index("vllm-13418  ") < out.index("vllm-1486  ")
    assert "G2 capture-views (graph/capture)" in out and "W5 int32-locs (rejects/W5)" in out
    assert out.strip().endswith("2/2 entries caught by the clause they name: PASS")


@pytest.mark.parametrize(("factory", "why"), [
    ("segfault_on_load", "killed its worker (SIGSEGV) while loading"),
    ("abort_on_load", "killed its worker (SIGABRT) while loading"),
    ("hang_on_load", "loading it gave no sign of life for 3 s (killed)"),
    ("raise_on_load", "cannot be loaded: RuntimeError: no device for this backend"),
])
def test_a_factory_that_fails_while_loading_is_one_line_exit_2_naming_it(factory: str, why: str,
                                                                         capsys: pytest.CaptureFixture) -> None:
    rc = main(["conform", "--backend", f"runs_backends:{factory}", "--timeout", "3", "--property", "decode_locs"])
    out, err = capsys.readouterr()
    assert rc == EXIT_USAGE and out == ""
    assert err == f"kvtable conform: error: backend 'runs_backends:{factory}'{':' if 'loading' in why else ''} {why}\n"


@pytest.mark.slow
def test_a_fresh_cache_is_kvtables_cost_not_a_timeout_of_the_builtin_backend(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "TRITON_CACHE_DIR": str(tmp_path / "triton")}
    props = ["expand_table", "kernels/replay-fill", "decode_locs", "extend_locs"]
    argv = ["conform", "--backend", "torch", "--isolate", "--timeout", "5", "--examples", "10",
            *[a for p in props for a in ("--property", p)]]
    done = subprocess.run([sys.executable, "-m", "kvtable.cli", *argv], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "TIMEOUT" not in done.stdout and "4/4 properties passed" in done.stdout


def test_a_backend_whose_memory_grows_past_the_bound_gets_a_memory_verdict_naming_the_operation(
        capsys: pytest.CaptureFixture) -> None:
    """The bound is 256 MiB here so the test stays cheap: the leak (64 MiB a call) passes it by the fifth call,
    the run going on with a fresh worker for the next property."""
    rc, out = _conform(capsys, "LeaksOnDecode", "--max-memory-growth", "256M")
    assert rc == EXIT_FAILED
    assert _row(out, "decode_locs")[3] == "MEMORY"
    assert [_row(out, p)[3] for p in ("rejects/T1", "verify_locs", "graph/init")] == ["PASSED"] * 3
    memory = out[out.index("=== MEMORY [W1 decode-loc] decode_locs"):]
    grown = r"0\.[23]\d GiB"
    assert re.search(rf"grew its resident memory by {grown} across the property's examples, {grown} of it in "
                     r"backend\.decode_locs\(\.\.\.\)", memory), memory
    assert "(past --max-memory-growth 0.25 GiB; killed)" in memory


def test_in_this_process_a_growing_backend_gets_a_memory_verdict_naming_the_operation(
        capsys: pytest.CaptureFixture) -> None:
    """``--no-isolate``: nothing can be killed, but the property whose examples grew the memory past the bound
    is a ``memory`` verdict naming the operation, never a pass (issue 29)."""
    from runs_backends import LeaksALittleOnDecode

    try:
        rc, out = _conform(capsys, "LeaksALittleOnDecode", "--no-isolate", "--max-memory-growth", "32M")
    finally:
        LeaksALittleOnDecode.kept.clear()
    assert rc == EXIT_FAILED
    assert _row(out, "decode_locs")[3] == "MEMORY" and _row(out, "decode_locs")[-1] == "safety"
    assert [_row(out, p)[3] for p in ("rejects/T1", "verify_locs", "graph/init")] == ["PASSED"] * 3
    memory = out[out.index("=== MEMORY [W1 decode-loc] decode_locs"):]
    assert re.search(r"grew its resident memory by 0\.\d\d GiB across the property's examples, 0\.\d\d GiB of it "
                     r"in backend\.decode_locs\(\.\.\.\) \(past --max-memory-growth 0\.03125 GiB; in this process",
                     memory), memory
