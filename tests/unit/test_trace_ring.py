"""``trace check`` on ring groups (R1-R3): a transformers-style run is clean, an index off by one fails at the safety
tier at its step, a wrong read is R3's, and the snippet redoes the step with ``ring_locs``."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import numpy as np

from kvtable.backends.profiles import get_profile
from kvtable.contract import GroupSpec
from kvtable.reference import ring
from kvtable.trace import Recorder, check_trace

WINDOW, PS = 8, 4
GROUPS = [GroupSpec("swa", "sliding", PS, window=WINDOW, layout="ring")]
PROFILE = get_profile("transformers")
RINGS = [[5, 6], [7, 9]]
# two requests: a 6-token prompt in chunks of 4 and 2, then decodes; a 10-token prompt at once, then decodes
STEPS = [([0, 0], [4, 10]), ([4, 10], [2, 1]), ([6, 11], [1, 1]), ([7, 12], [1, 1]), ([8, 13], [1, 1])]


def _record(path: Path, *, shift_at: int | None = None, bad_read_at: int | None = None) -> None:
    with Recorder(path, profile="transformers", groups=GROUPS, backend="torch") as rec:
        for index, (prefix, extend) in enumerate(STEPS):
            seq = [p + e for p, e in zip(prefix, extend, strict=True)]
            table = [r[: ring.ring_columns(s, WINDOW, PS)] + [0] * (2 - ring.ring_columns(s, WINDOW, PS))
                     for r, s in zip(RINGS, seq, strict=True)]
            writes = PROFILE.ring_write_locs(table, prefix, extend, PS, WINDOW)
            reads = PROFILE.ring_read_locs(table, prefix, extend, PS, WINDOW)
            if index == shift_at:  # request 0's last token written at the next position's ring slot
                writes[extend[0] - 1] = ring.ring_slot(table[0], prefix[0] + extend[0], WINDOW, PS)
            if index == bad_read_at:  # request 0's first cached key read from the wrong slot of its ring
                reads[0] = reads[1]
            rec.locations("extend", {"swa": np.array(table)}, {"swa": writes}, seq, prefix_lens=prefix,
                          req_ids=[0, 1], reads={"swa": reads})


def test_a_transformers_style_ring_run_is_clean(tmp_path: Path) -> None:
    _record(tmp_path / "t")
    report = check_trace(tmp_path / "t")
    assert report.violation is None and report.steps == len(STEPS)


def test_an_index_off_by_one_fails_at_its_step_at_the_safety_tier(tmp_path: Path) -> None:
    _record(tmp_path / "t", shift_at=3)
    report = check_trace(tmp_path / "t", level="safety")
    v = report.violation
    assert (v.step, v.tier, v.clause, v.group, v.row, v.position) == (3, "safety", "R1", "swa", 0, 7)
    assert "another slot of its own ring" in v.reason
    assert "backend.ring_locs(" in report.snippet and report.snippet.count("[0]") == 2
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(report.snippet, "snippet", "exec"), {})
    assert out.getvalue().strip() == "tensor(27, dtype=torch.int32)"  # the torch backend's slot for position 7


def test_a_wrong_read_is_r3s_at_the_correct_level(tmp_path: Path) -> None:
    _record(tmp_path / "t", bad_read_at=2)
    assert check_trace(tmp_path / "t", level="safety").violation is None
    v = check_trace(tmp_path / "t").violation
    assert (v.step, v.tier, v.clause, v.token) == (2, "correct", "R3", 0)
