"""``kvtable trace record``: the backend runs in a worker process, so a crash or a hang is a verdict at its step
with the trace up to it kept (cut); every flag is checked before any work; the allocator route's int32 pool
crosses slot 2^31 and says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from record_interrupt import interrupt_at_step

from kvtable.cli import main
from kvtable.exitcodes import EXIT_CUT, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_USAGE

ROOT = Path(__file__).resolve().parents[2]


def _record(out: Path, backend: str, *extra: str) -> int:
    return main(["trace", "record", "--backend", backend, "--steps", "30", "--seed", "0", "--out", str(out), *extra])


@pytest.mark.parametrize(("backend", "verdict", "why"), [
    ("trace_bugs:SegfaultOnDecode", "CRASH", "the backend killed the worker process (SIGSEGV)"),
    ("trace_bugs:HangOnDecode", "TIMEOUT", "the backend gave no sign of life for 2 s (killed)"),
])
def test_a_crash_or_hang_is_a_verdict_at_its_step_and_the_trace_before_it_checks_as_cut(
        backend: str, verdict: str, why: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _record(tmp_path / "t", backend, "--timeout", "2") == EXIT_FAILED
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    line = next(line for line in out.splitlines() if line.startswith(verdict))
    steps = sum('"step"' in x for x in (tmp_path / "t" / "manifest.jsonl").read_text().splitlines())
    assert line.startswith(f"{verdict} at step {steps} in backend.decode_locs: {why}; the {steps} steps before it")
    assert main(["trace", "check", str(tmp_path / "t")]) == EXIT_CUT
    out = capsys.readouterr().out
    assert f"{steps} of {steps} steps judged, clean to its last whole step; CUT" in out


BAD_FLAGS = [
    (["--faults", "-1"], "argument --faults: must be from 0 to 1, got -1"),
    (["--faults", "7"], "argument --faults: must be from 0 to 1, got 7"),
    (["--faults", "nan"], "argument --faults: must be from 0 to 1, got nan"),
    (["--seed", "-3"], "argument --seed: must be >= 0, got -3"),
    (["--profile", "nosuch"], "argument --profile: invalid choice: 'nosuch'"),
    (["--backend", "nosuch.mod:thing"], "backend 'nosuch.mod:thing': cannot import 'nosuch.mod'"),
    (["--timeout", "0"], "argument --timeout: must be > 0, got 0"),
]


@pytest.mark.parametrize(("argv", "said"), BAD_FLAGS, ids=[" ".join(a) for a, _ in BAD_FLAGS])
def test_every_flag_is_checked_before_work_one_line_exit_2(argv: list[str], said: str, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    try:
        rc = main(["trace", "record", "--out", str(tmp_path / "t"), *argv])
    except SystemExit as stop:
        rc = int(stop.code or 0)
    assert rc == EXIT_USAGE
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and said in err and "Traceback" not in err, err
    assert not (tmp_path / "t" / "manifest.jsonl").exists()


def test_an_unwritable_out_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["trace", "record", "--backend", "torch", "--out", "/proc/kvtable-trace"]) == EXIT_USAGE
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert "--out /proc/kvtable-trace: /proc/kvtable-trace is not writable" in err


def test_a_backend_that_cannot_load_leaves_no_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _record(tmp_path / "t", "runs_backends:raise_on_load") == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no device for this backend" in err
    assert not (tmp_path / "t" / "manifest.jsonl").exists()


def test_a_pool_past_int32_crosses_slot_2_31_and_the_summary_says_so(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """The int64-table twin of the SGLang-style example records slots past 2^31 and checks clean; SGLang's own
    int32 table wraps them, and a run that really crossed the boundary is judged, not labelled latent."""
    assert _record(tmp_path / "t", f"{ROOT}/examples/sglang_style.py:backend_int64_table", "--route", "allocator",
                   "--profile", "sglang", "--pool-pages", "2147483700") == 0
    said = capsys.readouterr().out.splitlines()[1]
    largest = int(said.split("largest slot chosen ")[1].split(";")[0])
    assert largest >= 2**31 and said.endswith("the int32 boundary was crossed")
    chosen = [json.loads(x) for x in (tmp_path / "t" / "manifest.jsonl").read_text().splitlines()[1:]]
    assert any(c.get("kind") == "allocate" for c in chosen)
    assert main(["trace", "check", str(tmp_path / "t")]) == 0
    assert _record(tmp_path / "w", f"{ROOT}/examples/sglang_style.py:backend", "--route", "allocator", "--profile",
                   "sglang", "--pool-pages", "2147483700") == 0
    capsys.readouterr()
    assert main(["trace", "check", str(tmp_path / "w")]) == 1
    assert "[safety] A1" in capsys.readouterr().out


def test_ctrl_c_keeps_the_trace_so_far_cut_and_exits_130(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Ctrl-C reaches the recording process (its worker ignores it) as its fifth step comes in."""
    interrupt_at_step(monkeypatch, 5)
    assert _record(tmp_path / "t", "torch") == EXIT_INTERRUPTED
    out, err = capsys.readouterr()
    assert out.startswith("INTERRUPTED after 5 steps: the trace up to them is kept at") and "(cut)" in out
    assert err == "kvtable trace: interrupted\n"
    assert main(["trace", "check", str(tmp_path / "t")]) == EXIT_CUT
