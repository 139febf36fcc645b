"""The trace checker: each rule fails where it should, names the step, group, row and token, and the snippet
redoes the step with one call; a clean run stays clean."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import numpy as np
import pytest

from kvtable.backends.torch_backend import TorchBackend
from kvtable.contract import GroupSpec
from kvtable.trace import Recorder, check_trace, wrap
from kvtable.trace.recorder import host
from kvtable.trace.simulate import SimConfig, Simulator, simulate

GROUPS = [GroupSpec("full", "full", 4), GroupSpec("swa", "sliding", 4, window=4)]


def _decode(rec: Recorder, table: list[list[int]], seq: list[int], reqs: list[int], *, gid: str = "full",
            locs: list[int] | None = None) -> None:
    t = np.array(table)
    own = [t[r, (s - 1) // 4] * 4 + (s - 1) % 4 for r, s in enumerate(seq)]
    rec.locations("decode", {gid: t}, {gid: own if locs is None else locs}, seq, req_ids=reqs)


def test_a_wrong_location_names_step_row_token_and_the_snippet_redoes_it(tmp_path: Path) -> None:
    with Recorder(tmp_path / "t", groups=GROUPS, backend="torch") as rec:
        _decode(rec, [[1, 2], [3, 4]], [5, 6], [0, 1])
        _decode(rec, [[1, 2], [3, 4]], [6, 7], [0, 1], locs=[9, 13])  # row 1 writes page 3, not its page 4
    report = check_trace(tmp_path / "t")
    v = report.violation
    assert (v.step, v.tier, v.group, v.row, v.token, v.position, v.loc) == (1, "safety", "full", 1, 1, 6, 13)
    assert "its own page is 4" in v.reason
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(report.snippet, "snippet", "exec"), {})
    assert out.getvalue().strip() == "tensor(18, dtype=torch.int32)"  # the backend's own answer for that token


def test_a_write_to_a_page_another_live_request_holds_breaks_t7_across_steps(tmp_path: Path) -> None:
    with Recorder(tmp_path / "t", groups=GROUPS) as rec:
        _decode(rec, [[1, 2]], [6], [0])  # request 0 holds pages 1 and 2
        _decode(rec, [[2, 5]], [2], [1])  # request 1 starts on page 2: fine while it writes page 5 only...
        _decode(rec, [[2, 5]], [3], [1], locs=[10])  # ...its own slot by its row, but page 2 is request 0's too
    v = check_trace(tmp_path / "t").violation
    assert (v.step, v.clause, v.row, v.token, v.loc) == (1, "T7", 0, 0, 9)
    assert "requests [0] hold too" in v.reason


def test_pages_changing_under_a_request_and_a_freed_page_written(tmp_path: Path) -> None:
    with Recorder(tmp_path / "a", groups=GROUPS) as rec:
        _decode(rec, [[1, 2]], [6], [0])
        _decode(rec, [[1, 3]], [7], [0])  # page 2 swapped for 3 under request 0
    v = check_trace(tmp_path / "a").violation
    assert (v.step, v.clause, v.tier) == (1, "trace/pages-kept", "correct")
    assert check_trace(tmp_path / "a", level="safety").violation is None
    with Recorder(tmp_path / "b", groups=GROUPS) as rec:
        rec.alloc("full", [7])
        _decode(rec, [[7]], [1], [0])
        rec.free("full", [7])
        _decode(rec, [[7]], [2], [1])  # request 1 writes page 7, freed and never allocated again
    v = check_trace(tmp_path / "b").violation
    assert (v.step, v.clause) == (3, "trace/freed-page-write") and "freed at step 2" in v.reason


def test_a_sliding_release_to_a_hole_is_no_change_under_the_request(tmp_path: Path) -> None:
    with Recorder(tmp_path / "t", groups=GROUPS) as rec:
        _decode(rec, [[1, 2, 3]], [9], [0], gid="swa")
        rec.free("swa", [1])
        _decode(rec, [[0, 2, 3]], [10], [0], gid="swa")
    assert check_trace(tmp_path / "t").violation is None


def test_wrap_records_a_backend_and_its_refusals(tmp_path: Path) -> None:
    backend = wrap(TorchBackend(), tmp_path / "t")
    table = host([[1, 2], [3, 4]]).astype(np.int32)
    import torch

    backend.decode_locs(torch.tensor(table), torch.tensor([5, 6], dtype=torch.int32), 4)
    backend.extend_locs(torch.tensor(table), [0, 2], [3, 2], 4)
    with pytest.raises(Exception, match="T8"):
        backend.decode_locs(torch.tensor(table), torch.tensor([5, 60], dtype=torch.int32), 4)
    backend.recorder.close()
    report = check_trace(tmp_path / "t")
    assert report.steps == 3 and report.violation is None and "no request ids" in report.notes[0]


class GathersPastTheTable(TorchBackend):
    """Decode as an unguarded kernel does it: the block-table load has no column bound (vLLM #53982)."""

    def decode_locs(self, table, seq_lens, page_size, *, actual_bs=None):  # type: ignore[no-untyped-def]
        import torch

        pos = seq_lens.long() - 1
        flat = table.reshape(-1).long()
        return flat[torch.arange(len(pos)) * table.shape[1] + pos // page_size] * page_size + pos % page_size


def test_wrap_records_a_read_past_the_table_as_unsafe_not_a_refusal(tmp_path: Path) -> None:
    import torch

    backend = wrap(GathersPastTheTable(), tmp_path / "t")
    table = torch.tensor([[1, 2], [3, 4]], dtype=torch.int32)
    with pytest.raises(IndexError):  # the call raises as it did unwrapped
        backend.decode_locs(table, torch.tensor([5, 9], dtype=torch.int32), 4)  # row 1 needs column 2 of 2
    backend.recorder.close()
    report = check_trace(tmp_path / "t")
    assert report.violation is not None and report.violation.tier == "safety"
    assert "out-of-bounds read in backend.decode_locs: aten.index with index 4" in report.violation.reason


def test_a_simulated_torch_run_is_clean_and_a_seed_gives_the_same_trace(tmp_path: Path) -> None:
    config = SimConfig(faults=0.1)
    for name in ("a", "b"):
        with Recorder(tmp_path / name, groups=config.groups, backend="torch") as rec:
            simulate(TorchBackend(), rec, 50, seed=3, config=config)
    report = check_trace(tmp_path / "a")
    assert report.violation is None and report.steps > 120
    assert (tmp_path / "a" / "manifest.jsonl").read_text() == (tmp_path / "b" / "manifest.jsonl").read_text()


def test_a_stale_graph_row_is_caught_and_the_snippet_replays_the_graph_to_it(tmp_path: Path) -> None:
    from trace_bugs import StaleGraphRowBackend

    config = SimConfig(max_len=24, max_live=3, pool_pages=32, capture_sizes=(2,))
    with Recorder(tmp_path / "t", groups=config.groups, backend="trace_bugs:StaleGraphRowBackend") as rec:
        sim = Simulator(StaleGraphRowBackend(), rec, seed=0, config=config)
        sim.arrive(1, False)
        sim.arrive(1, False)
        sim.prefill(list(sim.live))
        sim.decode(list(sim.live), graph=True)  # two live rows fill the buffer
        sim.decode(sim.live[:1], graph=True)  # one live row: the padded row keeps request 1's pages
    report = check_trace(tmp_path / "t")
    v = report.violation
    assert (v.tier, v.group, v.row, v.token, v.loc) == ("safety", "full", 1, 1, 8)
    assert "padded rows own no slot" in v.reason
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(report.snippet, "snippet", "exec"), {})
    assert out.getvalue().strip() == "tensor(8, dtype=torch.int32)"


def _three_violations(path: Path) -> None:
    """A wrong location (safety, step 1), a page swapped under a request (pages-kept, step 2), and another wrong
    location (safety, step 3)."""
    with Recorder(path, groups=GROUPS, backend="torch") as rec:
        _decode(rec, [[1, 2], [3, 4]], [5, 6], [0, 1])
        _decode(rec, [[1, 2], [3, 4]], [6, 7], [0, 1], locs=[9, 13])  # row 1 writes page 3, not its page 4
        _decode(rec, [[1, 2], [3, 5]], [6, 7], [0, 1])  # request 1's page 4 swapped for 5 under it
        _decode(rec, [[1, 2], [3, 5]], [7, 8], [0, 1], locs=[10, 9])  # row 1 writes request 0's page 2


def test_every_violation_is_reported_grouped_by_clause_each_first_in_full(tmp_path: Path) -> None:
    _three_violations(tmp_path / "t")
    report = check_trace(tmp_path / "t")
    assert [(v.step, v.clause) for v in report.violations] == [(1, "safety"), (2, "trace/pages-kept"), (3, "safety")]
    assert report.failing_steps == 3 and report.steps == report.declared == 4 and not report.stopped
    assert list(report.first) == ["safety", "trace/pages-kept"]
    assert report.first["trace/pages-kept"].violation.step == 2
    assert "# trace step 2 (decode), trace/pages-kept" in report.first["trace/pages-kept"].snippet
    from kvtable.trace.cli import render

    text = render(report)
    assert "FAILED at step 1: 3 failing step(s), 2 clause(s)" in text
    assert "  safety: 2 failing step(s), first at step 1" in text and "    also step 3 [safety] safety:" in text
    assert "  trace/pages-kept: 1 failing step(s), first at step 2" in text
    assert text.count("reproduce:") == 2


def test_max_failures_stops_judging_and_says_which_steps_were_not_judged(tmp_path: Path) -> None:
    _three_violations(tmp_path / "t")
    report = check_trace(tmp_path / "t", max_failures=2)
    assert report.failing_steps == 2 and report.steps == 3 and report.stopped
    from kvtable.trace.cli import render

    assert "stopped at 2 failing steps (--max-failures): steps 3 to 3 not judged" in render(report)


def test_a_wild_slot_or_page_id_is_judged_not_a_crash(tmp_path: Path) -> None:
    """Page ids past the dense range (a slot of 2^40, a page of 2^33) are counted sparsely: verdicts, no
    terabyte arrays."""
    with Recorder(tmp_path / "t", groups=GROUPS, backend="torch") as rec:
        rec.alloc("full", [1, 2, 2**33])  # the engine records its allocations: only an alloc reallocates
        _decode(rec, [[1, 2]], [6], [0], locs=[2**40])
        rec.free("full", [2**33])
        _decode(rec, [[2**33, 2]], [1], [1])  # request 1 writes page 2^33, freed and never allocated again
    report = check_trace(tmp_path / "t", level="safety")
    assert [(v.step, v.clause) for v in report.violations] == [(1, "safety"), (3, "trace/freed-page-write")]
    assert "wrote page 274877906944 (in no row)" in report.violations[0].reason
