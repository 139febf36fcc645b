"""``kvtable trace record|check``: exit statuses, the failing step of a seeded bug, cut traces, parallel checks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kvtable.cli import main
from kvtable.trace import TraceReader

ROOT = Path(__file__).resolve().parents[2]
BUGGY = f"{ROOT}/examples/tokenspeed_style.py:backend_709"
GOOD = f"{ROOT}/examples/tokenspeed_style.py:backend"


def _record(out: Path, backend: str = "torch", steps: int = 40, *extra: str) -> None:
    assert main(["trace", "record", "--backend", backend, "--steps", str(steps), "--seed", "0", "--out", str(out),
                 *extra]) == 0


def _same(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    return (a is None) == (b is None) and (a is None or np.array_equal(a, b))


def _first_difference(a: Path, b: Path) -> int:
    """The first step where two traces of one seed recorded different locations, tables or refusals (an
    allocator's chosen slots and recorded token table included)."""
    for x, y in zip(TraceReader(a).steps(), TraceReader(b).steps(), strict=False):
        if (x.error is None) != (y.error is None) or not _same(x.arrays.get("locs"), y.arrays.get("locs")):
            return x.index
        for gid, gx in x.groups.items():
            gy = y.groups[gid]
            if not (_same(gx.locs, gy.locs) and _same(gx.table, gy.table)):
                return x.index
    raise AssertionError("the traces agree")


def test_record_then_check_is_clean(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _record(tmp_path / "t0")
    assert main(["trace", "check", str(tmp_path / "t0"), "--profile", "kvtable"]) == 0
    assert "clean" in capsys.readouterr().out


def test_a_seeded_bug_fails_at_the_step_it_first_differs_with_a_snippet(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    _record(tmp_path / "bug", BUGGY, 40, "--profile", "tokenspeed")
    _record(tmp_path / "good", GOOD, 40, "--profile", "tokenspeed")
    capsys.readouterr()
    assert main(["trace", "check", str(tmp_path / "bug")]) == 1
    out = capsys.readouterr().out
    step = _first_difference(tmp_path / "bug", tmp_path / "good")
    assert f"FAILED at step {step}" in out and "negative slot" in out
    assert "backend = load(" in out and "backend.extend_locs(" in out
    # tokenspeed's extend has no clamp (#709): the simulator's injected extend ahead of its pages shows it, and
    # the report says the input fault is the simulator's own
    assert "this step's input carries a fault the simulator put there (--faults): row 0 extends to" in out


ALLOCATOR = ("--route", "allocator")
SEEDED = {  # each example backend seeded with an engine's bug: its passing twin, profile, options, what is said
    "vllm_style.py:backend_53982": ("vllm_style.py:backend", "vllm", (), "out-of-bounds read in backend.decode_locs"),
    "sglang_style.py:backend_prefix_past_length": ("sglang_style.py:backend", "sglang", ALLOCATOR,
                                                   "changed row"),
    "sglang_style.py:backend_short_verify": ("sglang_style.py:backend", "sglang", ALLOCATOR, "(a row of no request"),
    "sglang_style.py:backend_int32_pool": ("sglang_style.py:backend_int64_table", "sglang",
                                           (*ALLOCATOR, "--pool-pages", str(2**31 + 512)), "outside the pool"),
}


@pytest.mark.slow
@pytest.mark.parametrize("bug", sorted(SEEDED))
def test_every_seeded_example_fails_at_the_step_it_first_differs(bug: str, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """The simulator finds each seeded engine bug at default rates (an eager read past the table is unsafe, not a
    refusal), at the step where the bug's trace first leaves its passing twin's, with a snippet that redoes it."""
    good, profile, extra, said = SEEDED[bug]
    _record(tmp_path / "bug", f"{ROOT}/examples/{bug}", 300, "--profile", profile, *extra)
    _record(tmp_path / "good", f"{ROOT}/examples/{good}", 300, "--profile", profile, *extra)
    assert main(["trace", "check", str(tmp_path / "good")]) == 0
    capsys.readouterr()
    assert main(["trace", "check", str(tmp_path / "bug")]) == 1
    out = capsys.readouterr().out
    assert f"FAILED at step {_first_difference(tmp_path / 'bug', tmp_path / 'good')}" in out
    assert said in out and "[safety]" in out and "backend = load(" in out, out


def test_four_traces_check_in_parallel(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = [tmp_path / f"rank{i}" for i in range(4)]
    for path in paths:
        _record(path, steps=15)
    assert main(["trace", "check", *map(str, paths), "--workers", "2"]) == 0
    assert "4 trace(s)" in capsys.readouterr().out.splitlines()[-1]


def test_not_a_trace_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["trace", "check", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no trace here" in err


def test_the_example_traces_check_as_their_names_say(capsys: pytest.CaptureFixture[str]) -> None:
    traces = sorted((ROOT / "examples" / "traces").iterdir())
    assert main(["trace", "check", *map(str, traces)]) == 1
    out = capsys.readouterr().out
    assert out.count("FAILED at step") == 1
    assert "tokenspeed-709-fails: 141 of 141 steps judged, FAILED at step 10: 1 failing step(s), 1 clause(s)" in out
    assert out.count(" steps judged, clean\n") == len(traces) - 1


def test_the_trace_benchmark_runs_end_to_end() -> None:
    from kvtable.bench.harness import Settings
    from kvtable.bench.trace import run

    section = run(Settings.for_size("smoke"))
    check = section.records[-1]
    assert (check["what"], check["steps"]) == ("check_trace", 20) and check["cpu_s"] > 0
    assert section.records[0]["bytes_per_step"] > 256 * 3 * 4  # at least each group's locations
    assert section.targets[0].met is None  # a smoke run judges no target


def test_ctrl_c_prints_the_traces_checked_so_far_and_exits_130(monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    import kvtable.trace.cli as trace_cli

    checked = trace_cli._check_one
    traces = sorted((ROOT / "examples" / "traces").iterdir())[:3]

    def interrupted_at_the_second(job: tuple) -> object:
        if job[0] == traces[1]:
            raise KeyboardInterrupt
        return checked(job)

    monkeypatch.setattr(trace_cli, "_check_one", interrupted_at_the_second)
    assert main(["trace", "check", *map(str, traces)]) == 130
    out, err = capsys.readouterr()
    assert f"{traces[0]}: " in out and f"{traces[1]}: " not in out
    assert out.splitlines()[-1].startswith("INTERRUPTED after 1 of 3 trace(s)")
    assert err == "kvtable trace: interrupted\n"
