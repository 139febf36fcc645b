"""The trace format: steps round-trip with their tables (stored as deltas), and a cut trace ends where it is whole."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kvtable.contract import GroupSpec
from kvtable.trace import Recorder, TraceReader
from kvtable.trace.store import CHUNKS, MANIFEST, TraceError

GROUPS = [GroupSpec("full", "full", 4)]


def _record(path: Path, steps: int = 3, **options: object) -> list[np.ndarray]:
    tables = []
    with Recorder(path, groups=GROUPS, backend="torch", **options) as rec:
        for i in range(steps):
            table = np.array([[1, 2, -1], [3, 4 + i, -1]], np.int32)
            tables.append(table)
            seq = np.array([5, 6])
            rec.locations("decode", {"full": table}, {"full": table[:, 1] * 4 + (seq - 1) % 4}, seq,
                          req_ids=[10, 11])
    return tables


def test_steps_round_trip_with_row_deltas(tmp_path: Path) -> None:
    tables = _record(tmp_path / "t", steps_per_chunk=2)
    steps = list(TraceReader(tmp_path / "t").steps())
    assert [s.index for s in steps] == [0, 1, 2]
    for step, table in zip(steps, tables, strict=True):
        assert step.kind == "decode" and step.groups["full"].page_size == 4
        assert step.groups["full"].table.tolist() == table.tolist()
        assert step.req_ids.tolist() == [10, 11]
    lines = (tmp_path / "t" / MANIFEST).read_text().splitlines()
    assert '"delta":["full"]' in lines[2]  # the second step stores only its changed cell
    assert len(list((tmp_path / "t" / CHUNKS).iterdir())) == 2


def test_a_delta_past_int32_reads_back_exact(tmp_path: Path) -> None:
    """A table that fit int32 and then gains a slot >= 2^31 (an allocator's int64 token table) reads back
    unwrapped: the delta's int64 values widen the table instead of wrapping into its int32 copy."""
    seq = np.array([5, 6])
    tables = [np.array([[1, 2, 0, 0], [3, 4, 0, 0]], np.int64), np.array([[1, 2, 2**31, 0], [3, 4, 0, 0]], np.int64)]
    with Recorder(tmp_path / "t", groups=GROUPS, backend="torch") as rec:
        for table in tables:
            rec.locations("decode", {"full": table}, {"full": table[:, 1] * 4}, seq)
    steps = list(TraceReader(tmp_path / "t").steps())
    assert '"delta":["full"]' in (tmp_path / "t" / MANIFEST).read_text().splitlines()[2]
    assert [s.groups["full"].table.tolist() for s in steps] == [t.tolist() for t in tables]


def test_a_truncated_last_line_ends_the_trace_and_says_so(tmp_path: Path) -> None:
    _record(tmp_path / "t")
    manifest = tmp_path / "t" / MANIFEST
    manifest.write_bytes(manifest.read_bytes()[:-25])
    reader = TraceReader(tmp_path / "t")
    assert len(list(reader.steps())) == 2
    assert "manifest line 4 is truncated" in reader.end_note and "after 2 complete steps" in reader.end_note


def test_a_missing_chunk_ends_the_trace_and_says_so(tmp_path: Path) -> None:
    _record(tmp_path / "t")
    (tmp_path / "t" / CHUNKS / "000001.npz").unlink()
    reader = TraceReader(tmp_path / "t")
    assert len(list(reader.steps())) == 1
    assert "chunk 000001.npz of step 1 is missing" in reader.end_note


def test_no_trace_and_an_existing_trace_are_errors(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no trace here"):
        TraceReader(tmp_path)
    _record(tmp_path / "t", steps=1)
    with pytest.raises(TraceError, match="already there"):
        Recorder(tmp_path / "t", groups=GROUPS)


def test_in_memory_recorder_gives_the_same_steps(tmp_path: Path) -> None:
    rec = Recorder(None, groups=GROUPS)
    rec.locations("extend", {"full": [[7, -1]]}, {"full": [28, 29]}, [2], prefix_lens=[0])
    rec.free("full", [7])
    step, event = rec.writer.steps
    assert step.kind == "extend" and step.groups["full"].locs.tolist() == [28, 29]
    assert event.kind == "free" and event.groups["full"].pages.tolist() == [7]
