"""The trace format: steps round-trip with their tables (stored as deltas), a cut trace ends where it is whole, and
a damaged one is ``TraceDamaged`` naming the step; the Recorder refuses a step trace check could not judge."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kvtable.contract import GroupSpec
from kvtable.trace import Recorder, TraceReader
from kvtable.trace.recorder import RecordRefused
from kvtable.trace.schema import TraceDamaged
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
    assert '"chunk":0,"sha256":' in lines[1] and '"first":0,"last":1}' in lines[1]
    assert '"delta":["full"]' in lines[3]  # the second step stores only its changed cell
    assert lines[-1] == '{"closed":true,"steps":3,"chunks":2}'
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
    assert '"delta":["full"]' in (tmp_path / "t" / MANIFEST).read_text().splitlines()[4]
    assert [s.groups["full"].table.tolist() for s in steps] == [t.tolist() for t in tables]


def test_a_truncated_last_line_is_a_cut_trace_judged_to_its_last_whole_step(tmp_path: Path) -> None:
    _record(tmp_path / "t")
    manifest = tmp_path / "t" / MANIFEST
    lines = manifest.read_bytes().splitlines(keepends=True)
    manifest.write_bytes(b"".join(lines[:-2]) + lines[-2][:-25])  # the close line and half of step 2's: gone
    reader = TraceReader(tmp_path / "t")
    assert len(list(reader.steps())) == 2 and reader.total == 2
    assert "manifest line 7 is cut" in reader.cut and "last whole step, 2" in reader.cut


def test_a_missing_chunk_is_damage_naming_the_step(tmp_path: Path) -> None:
    _record(tmp_path / "t")
    (tmp_path / "t" / CHUNKS / "000001.npz").unlink()
    reader = TraceReader(tmp_path / "t")
    steps = reader.steps()
    assert next(steps).index == 0
    with pytest.raises(TraceDamaged, match=r"step 1 of 3: chunk 000001.npz \(steps 1 to 1\) is missing"):
        next(steps)


REFUSED = {  # a call trace check could not judge -> the argument the refusal names
    "no lengths": (dict(seq_lens=None), "Recorder.locations: seq_lens is None"),
    "ids of the wrong count": (dict(req_ids=[1, 2, 3]), "req_ids has 3 ids for 2 row(s)"),
    "lengths as a matrix": (dict(seq_lens=[[5, 6]]), "seq_lens has shape (1, 2), expected one value per row"),
    "a table that is no matrix": (dict(tables={"full": [1, 2]}), "table 'full' has shape (2,), expected (rows,"),
    "float lengths": (dict(seq_lens=[5.0, 6.5]), "seq_lens holds float64 values, not integers"),
    "prefixes of the wrong count": (dict(prefix_lens=[0]), "prefix_lens has 1 values for 2 row(s)"),
    "n of zero": (dict(n=0), "n is 0, expected an integer from 1 to 65536"),
    "actual_bs of a string": (dict(actual_bs="2"), "actual_bs is '2', expected an integer"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_the_recorder_refuses_what_trace_check_cannot_judge_naming_the_argument(case: str) -> None:
    change, said = REFUSED[case]
    call = {"tables": {"full": [[1, 2], [3, 4]]}, "seq_lens": [5, 6], "req_ids": [10, 11], **change}
    rec = Recorder(None, groups=GROUPS)
    tables, seq = call.pop("tables"), call.pop("seq_lens")
    with pytest.raises(RecordRefused, match=None) as refused:
        rec.locations("decode", tables, None, seq, **call)
    assert said in str(refused.value) and rec.steps == 0


def test_a_backend_name_that_does_not_load_is_a_warning_and_marked_in_snippets(tmp_path: Path) -> None:
    from kvtable.trace import check_trace

    with pytest.warns(UserWarning, match=r"Recorder\(backend='toy'\): the name does not load here"):
        rec = Recorder(tmp_path / "t", groups=GROUPS, backend="toy")
    rec.locations("decode", {"full": [[1, 2]]}, {"full": [3]}, [6], req_ids=[0])  # page 0 is no page of its own
    rec.close()
    report = check_trace(tmp_path / "t")
    assert "backend = load('toy')  # this name did not load when the trace was recorded: backend 'toy'" in (
        report.snippet)


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
