"""``kvtable trace record --engine``: the engine runs in a worker process as ``--backend`` does, so an engine step
that crashes or hangs is a verdict at its step with the trace up to it kept (cut, exit 6 in ``trace check``)."""

from __future__ import annotations

from pathlib import Path

import crashing_engine
import pytest
from record_interrupt import interrupt_at_step

from kvtable.cli import main
from kvtable.exitcodes import EXIT_CUT, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_PASSED


@pytest.fixture
def crashing(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--engine crashing`` loads ``tests/support/crashing_engine.py`` (the worker imports it by name)."""
    import kvtable.engines.record as record

    monkeypatch.setattr(record, "load_engine", lambda name: crashing_engine)


def _record(out: Path, *extra: str) -> int:
    return main(["trace", "record", "--engine", "crashing", "--steps", "12", "--seed", "0", "--out", str(out), *extra])


@pytest.mark.parametrize(("fault", "verdict", "why"), [
    ("segfault", "CRASH", "the engine crashing killed the worker process (SIGSEGV)"),
    ("hang", "TIMEOUT", "the engine crashing gave no sign of life for 2 s (killed)"),
    ("raise", "ERROR", "the engine's run raised RuntimeError: the engine's own assertion"),
])
def test_an_engine_crash_hang_or_error_is_a_verdict_at_its_step_and_the_trace_before_it_checks_as_cut(
        crashing: None, fault: str, verdict: str, why: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    assert _record(tmp_path / "t", "--fault", fault, "--timeout", "2") == EXIT_FAILED
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    steps = crashing_engine.CRASH_AT
    assert f"{verdict} at step {steps}: {why}; the {steps} steps before it are kept" in out, out
    assert main(["trace", "check", str(tmp_path / "t")]) == EXIT_CUT
    assert f"{steps} of {steps} steps judged, clean to its last whole step; CUT" in capsys.readouterr().out


def test_an_engine_run_that_ends_whole_is_closed_and_checks_clean(crashing: None, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert _record(tmp_path / "t") == EXIT_PASSED
    assert "recorded 12 steps of crashing" in capsys.readouterr().out
    assert main(["trace", "check", str(tmp_path / "t")]) == EXIT_PASSED


def test_ctrl_c_keeps_an_engine_run_so_far_cut_and_exits_130(crashing: None, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """Ctrl-C reaches the recording process (its worker ignores it) as the engine's third step comes in."""
    interrupt_at_step(monkeypatch, 3)
    assert _record(tmp_path / "t") == EXIT_INTERRUPTED
    out, err = capsys.readouterr()
    assert out.startswith("INTERRUPTED after 3 steps: the trace up to them is kept at") and "(cut)" in out
    assert err == "kvtable trace: interrupted\n"
    assert main(["trace", "check", str(tmp_path / "t")]) == EXIT_CUT
