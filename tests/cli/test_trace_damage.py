"""A verdict needs evidence: every way a trace can fail to read back as written is ``trace damaged`` (exit 2, one
line naming the step and the damage), never clean (0) and never the engine's fault (1); a trace whose recorder
was killed is cut (exit 5), judged to its last whole step."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from kvtable.cli import main
from kvtable.exitcodes import EXIT_CUT, EXIT_FAILED, EXIT_PASSED, EXIT_USAGE
from kvtable.trace import Recorder
from kvtable.trace.simulate import SimConfig, simulate
from kvtable.trace.store import CHUNKS, MANIFEST

STEPS = 20
"""Scheduler iterations of the trace every case damages (its chunks hold 16 steps each)."""


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from kvtable.backends.torch_backend import TorchBackend

    path = tmp_path_factory.mktemp("trace") / "t"
    config = SimConfig(faults=0.0)
    eager = TorchBackend()
    eager.graph = None  # no graph event: the header alone declares the groups
    with Recorder(path, groups=config.groups, backend="torch", steps_per_chunk=16) as rec:
        simulate(eager, rec, STEPS, seed=0, config=config)
    return path


def _lines(path: Path) -> list[str]:
    return (path / MANIFEST).read_text().splitlines(keepends=True)


def _write(path: Path, lines: list[str]) -> None:
    (path / MANIFEST).write_text("".join(lines))


def _edit_step(path: Path, number: int, edit: Callable[[dict], None]) -> None:
    """Rewrite manifest line ``number`` (0 the header) through ``edit`` on its JSON object."""
    lines = _lines(path)
    obj = json.loads(lines[number])
    edit(obj)
    lines[number] = json.dumps(obj, separators=(",", ":")) + "\n"
    _write(path, lines)


def _first_step_line(path: Path, kind: str) -> int:
    return next(i for i, line in enumerate(_lines(path)) if f'"kind":"{kind}"' in line)


def _rename_array(path: Path) -> None:
    def edit(obj: dict) -> None:
        obj["arrays"]["seq"] = obj["arrays"].pop("seq_lens")
    _edit_step(path, _first_step_line(path, "extend"), edit)


def _swap(path: Path) -> None:
    lines = _lines(path)
    lines[3], lines[4] = lines[4], lines[3]
    _write(path, lines)


def _cut_middle_line(path: Path) -> None:
    lines = _lines(path)
    lines[9] = lines[9][: len(lines[9]) // 2] + "\n"
    _write(path, lines)


def _unknown_kind(path: Path) -> None:
    _edit_step(path, _first_step_line(path, "decode"), lambda obj: obj.update(kind="prefill"))


def _unknown_group(path: Path) -> None:
    def edit(obj: dict) -> None:
        obj["groups"]["mla"] = 4
        obj["arrays"]["mla/table"] = obj["arrays"]["full/table"] if "full/table" in obj["arrays"] else ["i32", 0, [0]]
    _edit_step(path, _first_step_line(path, "extend"), edit)


def _wrong_shape(path: Path) -> None:
    def edit(obj: dict) -> None:
        obj["arrays"]["req_ids"][2] = [0]
    _edit_step(path, _first_step_line(path, "extend"), edit)


def _past_chunk(path: Path) -> None:
    def edit(obj: dict) -> None:
        obj["arrays"]["seq_lens"][1] = 10**6
    _edit_step(path, _first_step_line(path, "extend"), edit)


def _chunk_garbage(path: Path) -> None:
    chunk = path / CHUNKS / "000000.npz"
    chunk.write_bytes(np.random.default_rng(0).bytes(chunk.stat().st_size))


def _chunk_halved(path: Path) -> None:
    chunk = path / CHUNKS / "000001.npz"
    chunk.write_bytes(chunk.read_bytes()[: chunk.stat().st_size // 2])


def _steps_dropped(path: Path) -> None:
    lines = _lines(path)
    _write(path, [lines[0], lines[-1]])  # the header and the close line: every step's line gone


DAMAGE = {  # how a trace is damaged -> what the one line says
    "data deleted": (lambda p: shutil.rmtree(p / CHUNKS), "step 0 of {total}: chunk 000000.npz (steps 0 to 15) is "
                     "missing or unreadable"),
    "chunk garbage": (_chunk_garbage, "step 0 of {total}: chunk 000000.npz (steps 0 to 15) does not match its "
                      "checksum"),
    "chunk cut in half": (_chunk_halved, "step 16 of {total}: chunk 000001.npz (steps 16 to 31) does not match"),
    "arrays renamed": (_rename_array, "has an unknown array 'seq'"),
    "header only": (lambda p: _write(p, _lines(p)[:1]), "the trace holds no step (a header only): nothing to judge"),
    "step lines gone": (_steps_dropped, "step 0 of {total}: the close line declares {total} steps in"),
    "a line cut in the middle": (_cut_middle_line, "manifest line 10 is unreadable"),
    "lines swapped": (_swap, "manifest line 4 holds step 2 where step 1 belongs"),
    "groups emptied": (lambda p: _edit_step(p, 0, lambda h: h.update(groups=[])),
                       "names group 'full', which the trace never declared"),
    "unknown kind": (_unknown_kind, "'kind' is 'prefill': one of ("),
    "unknown group": (_unknown_group, "names group 'mla', which the trace never declared"),
    "close line altered": (lambda p: _edit_step(p, -1, lambda c: c.update(steps=c["steps"] + 5)),
                           "the close line declares {more} steps"),
    "ids of the wrong count": (_wrong_shape, "req_ids has 0 ids for 1 row(s)"),
    "an array past its chunk": (_past_chunk, "array 'seq_lens' lies past the end of its chunk"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_trace_is_exit_2_with_one_line_naming_the_damage(damage: str, recorded: Path, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    total = json.loads(_lines(recorded)[-1])["steps"]
    path = tmp_path / "t"
    shutil.copytree(recorded, path)
    make, said = DAMAGE[damage]
    make(path)
    assert main(["trace", "check", str(path)]) == EXIT_USAGE
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    damaged = [line for line in out.splitlines() if "trace damaged" in line]
    assert len(damaged) == 1 and len(out.splitlines()) == 2, out
    assert damaged[0].startswith(f"{path}: trace damaged: ")
    assert said.format(total=total, more=total + 5) in damaged[0], damaged[0]
    assert "clean" not in damaged[0] and "FAILED" not in out


def test_a_recorder_never_closed_is_cut_judged_to_its_last_whole_step(recorded: Path, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "t"
    shutil.copytree(recorded, path)
    lines = _lines(path)
    _write(path, lines[:-1])  # no close line
    assert main(["trace", "check", str(path)]) == EXIT_CUT
    out = capsys.readouterr().out
    steps = json.loads(lines[-1])["steps"]
    assert f"{steps} of {steps} steps judged, clean to its last whole step; CUT" in out
    assert "the recorder was not closed" in out
    _write(path, [*lines[:20], lines[20][:17]])  # killed mid-write of line 21
    assert main(["trace", "check", str(path)]) == EXIT_CUT
    out = capsys.readouterr().out
    assert "manifest line 21 is cut (17 bytes)" in out and "17 of 17 steps judged" in out


def test_a_cut_trace_with_a_violation_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from kvtable.contract import GroupSpec

    rec = Recorder(tmp_path / "t", groups=[GroupSpec("full", "full", 4)], backend="torch")
    rec.locations("decode", {"full": [[1, 2]]}, {"full": [9]}, [6], req_ids=[0])  # its own slot is 9
    rec.locations("decode", {"full": [[1, 2]]}, {"full": [3]}, [7], req_ids=[0])  # page 0: not its own
    rec.writer.flush()  # never closed
    assert main(["trace", "check", str(tmp_path / "t")]) == EXIT_FAILED
    out = capsys.readouterr().out
    assert "2 of 2 steps judged, FAILED at step 1" in out and "cut: no close line" in out


def test_an_older_format_is_a_usage_error_naming_the_version(recorded: Path, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "t"
    shutil.copytree(recorded, path)
    _edit_step(path, 0, lambda h: h.update(version=1))
    assert main(["trace", "check", str(path)]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "a version 1 trace; this kvtable reads version 2" in err


def test_the_undamaged_trace_is_clean(recorded: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["trace", "check", str(recorded)]) == EXIT_PASSED
    assert ", clean" in capsys.readouterr().out
