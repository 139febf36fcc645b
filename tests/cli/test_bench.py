"""The benchmark baselines compute impl's (and the reference's) locations; ``kvtable bench`` runs end to end.

No timing is asserted here: speed targets are read off the benchmark output.
"""

from __future__ import annotations

import json

import pytest
import torch

from kvtable.bench.baselines import chain_decode_locs, loop_extend_locs, per_group_decode_locs
from kvtable.bench.harness import count_dispatched_ops
from kvtable.bench.replay import check_fill, fill_step
from kvtable.bench.workload import decode_workload, extend_workload, stacked
from kvtable.cli import main
from kvtable.errors import ContractViolation
from kvtable.impl.locs import group_locs
from kvtable.impl.torch_kernels import TORCH_KERNELS
from kvtable.reference.locs import batch_locs
from kvtable.reference.model import GroupSpec
from kvtable.reference.tables import check_tables

SMALL_SEQ = 600


def _reference(w) -> dict[str, list[int]]:
    return {s.group_id: batch_locs(w.tables[s.group_id].tolist(), w.batch, s.block_granularity)
            for s in w.specs}


def _lists(locs: dict[str, torch.Tensor]) -> dict[str, list[int]]:
    assert all(t.dtype == torch.int32 for t in locs.values())
    return {gid: t.tolist() for gid, t in locs.items()}


def test_loop_extend_hand_vector():
    # table row [3, 5] at page size 4: positions 2..5 are slots 14, 15 (page 3) and 20, 21 (page 5)
    spec = GroupSpec("g", "full", 4)
    table = torch.tensor([[3, 5, -1]], dtype=torch.int32)
    assert _lists(loop_extend_locs([spec], {"g": table}, [2], [4])) == {"g": [14, 15, 20, 21]}


def test_loop_extend_refuses_a_row_too_narrow():
    spec = GroupSpec("g", "full", 4)
    with pytest.raises(ContractViolation, match="T8"):
        loop_extend_locs([spec], {"g": torch.tensor([[3, 5]], dtype=torch.int32)}, [2], [7])


@pytest.mark.parametrize("groups", [2, 3, 4])
def test_loop_extend_matches_impl_and_reference(groups):
    w = extend_workload(groups, 5, max_extend=200, seed=groups, max_seq=SMALL_SEQ)
    check_tables(w.specs, w.tables, w.batch)
    prefix = list(w.batch.prefix_lens)
    extend = [seq - p for seq, p in zip(w.batch.seq_lens, prefix, strict=True)]
    loop = _lists(loop_extend_locs(w.specs, w.tables, prefix, extend))
    assert loop == _lists(group_locs(w.specs, w.tables, w.batch, debug=False))
    assert loop == _reference(w)
    assert sum(len(v) for v in loop.values()) == groups * w.tokens


def test_chain_decode_hand_vector():
    # table [7, 8, 9] at page size 2, seq 6, n 4: positions 2..5 are slots 16..19 (test_inkling_mtp vector)
    table = torch.tensor([[7, 8, 9]], dtype=torch.int32)
    got = chain_decode_locs(table, torch.tensor([6], dtype=torch.int32), 2, 4)
    assert got.dtype == torch.int32 and got.tolist() == [16, 17, 18, 19]


@pytest.mark.parametrize("n", [1, 4])
def test_chains_and_stacked_pass_match_impl_and_reference(n):
    w = decode_workload(4, 6, n=n, seed=n, max_seq=SMALL_SEQ)
    check_tables(w.specs, w.tables, w.batch)
    seq = torch.tensor(w.batch.seq_lens, dtype=torch.int32)
    chains = _lists(per_group_decode_locs(w.specs, w.tables, seq, n))
    assert chains == _lists(group_locs(w.specs, w.tables, w.batch, debug=False))
    assert chains == _reference(w)
    stack, widths, page_sizes = stacked(w.specs, w.tables)
    out = torch.full((len(w.specs), 6 * n), 12345, dtype=torch.int32)
    TORCH_KERNELS.stacked_locs(stack, widths, page_sizes, seq, out, 6, n)
    assert {s.group_id: out[g].tolist() for g, s in enumerate(w.specs)} == chains


def test_fill_step_check_accepts_the_fill_and_catches_a_wrong_entry():
    step = fill_step(4, 5, seed=1, max_seq=SMALL_SEQ)
    assert step.actual_bs == 5 and step.meta[:, 2].tolist() == [1, 1, 4, 2]
    TORCH_KERNELS.replay_fill(step.packed, step.meta, step.dst, step.bs, step.actual_bs, -1)
    filled = {s.group_id: step.dst[g] for g, s in enumerate(step.workload.specs)}
    check_fill(step, filled)
    step.dst[2, 4, 0] += 1
    with pytest.raises(AssertionError, match="full_b64"):
        check_fill(step, filled)


@pytest.mark.slow
@pytest.mark.parametrize("run_launches", [True, False])
def test_a_triton_launch_counts_as_one_op(run_launches):
    """The interpreter's own argument copies inside a launch are not counted; a launch counted without
    running it writes nothing."""
    from kvtable.impl.triton_kernels import TRITON_KERNELS, triton_available

    if not triton_available():
        pytest.skip("triton is not installed")
    step = fill_step(3, 4, seed=2, max_seq=SMALL_SEQ)

    def fill():
        TRITON_KERNELS.replay_fill(step.packed, step.meta, step.dst, step.bs, step.actual_bs, -1)

    step.dst.fill_(-7)
    assert count_dispatched_ops(fill, run_launches=run_launches) == 1
    assert step.dst.eq(-7).all().item() is not run_launches
    assert count_dispatched_ops(lambda: (fill(), step.dst.add_(1)), run_launches=run_launches) == 2
    # the torch fill of the same step: each group its own strided ops
    assert count_dispatched_ops(lambda: TORCH_KERNELS.replay_fill(step.packed, step.meta, step.dst, step.bs,
                                                                  step.actual_bs, -1)) > 3


def _bench(tmp_path, *flags):
    """``kvtable bench FLAGS`` through the real command line, and the JSON it wrote."""
    path = tmp_path / "bench.json"
    assert main(["bench", *flags, "--json", str(path)]) == 0
    return json.loads(path.read_text())


@pytest.mark.slow
def test_smoke_run_writes_every_section(tmp_path, capsys):
    doc = _bench(tmp_path, "--smoke")
    assert doc["schema"] == 1 and doc["settings"]["size"] == "smoke"
    assert doc["host"]["torch_threads"] == 1
    assert set(doc["sections"]) == {"ops", "extend", "decode", "replay", "scaling", "tester", "trace"}
    for name, section in doc["sections"].items():
        assert set(section) == {"title", "columns", "records", "notes", "targets", "skipped", "tables", "moved"}, name
        assert section["records"], name
        for record in section["records"]:
            assert set(section["columns"]) <= set(record), name
    # the smoke cases do not include the timed target cases: the targets say so, and are not reported met
    timed = [t for name, s in doc["sections"].items() if name != "ops" for t in s["targets"]]
    assert timed and all(t["met"] is None and t["got"] is None and t["verdict"] == "not measured" for t in timed)
    # op counts are deterministic: measured even here (decode's with the tables in one storage is one count)
    counts = {t["name"]: t for t in doc["sections"]["ops"]["targets"]}
    decode = counts["decode: ops per call with the tables in one storage"]
    # the torch route (every device): a fixed count per call, whatever G and bs
    for call in ("decode", "verify", "extend"):
        fixed = counts[f"{call}: ops per call with the tables in one storage"]
        assert fixed["met"] and fixed["got"]["min"] == fixed["got"]["max"] > 1
    assert decode["met"] is True and decode["got"]["min"] == decode["got"]["max"] > 0
    # replay's target is for the Triton kernels (its name says so): the fill launch and the location launch
    replay, = (t for name, t in counts.items() if name.startswith("replay on the Triton kernels"))
    assert replay["met"] is True and replay["got"]["min"] == replay["got"]["max"] == 2
    rows = {(r["kernels"], r["groups"]): r for r in doc["sections"]["ops"]["records"] if r["call"] == "replay"}
    assert [rows["triton", g]["impl_ops"] for g in (1, 3, 8)] == [2, 3, 3]  # separate tables: one cat packs them
    torch_ops = [rows["torch", g]["one_storage_ops"] for g in (1, 3, 8)]
    assert torch_ops[0] < torch_ops[1] < torch_ops[2]  # the torch-op fill: each group its own ops, shown
    if not torch.cuda.is_available():
        assert any("no CUDA" in s for s in doc["sections"]["decode"]["skipped"])
        assert all(r["device"] == "cpu" for r in doc["sections"]["decode"]["records"])
    out = capsys.readouterr().out
    assert "== Extend locations" in out and "not measured" in out


@pytest.mark.slow
def test_quick_extend_measures_its_target(tmp_path):
    doc = _bench(tmp_path, "--quick", "--only", "extend")
    assert set(doc["sections"]) == {"extend"} and doc["settings"]["size"] == "quick"
    loop, gather = doc["sections"]["extend"]["targets"]
    assert (loop["want"], gather["want"]) == (">= 20x", "<= 2x") and "(GPU)" in gather["name"]
    got = loop["got"]
    assert got["min"] <= got["median"] <= got["max"] and isinstance(loop["met"], bool)
    assert loop["verdict"] == ("MET" if loop["met"] else "MISSED")
    # the gather floor is the GPU's target (bench/harness.ON_THE_GPU): judged there, the CPU figure beside it
    assert gather["cpu"]["min"] <= gather["cpu"]["median"] <= gather["cpu"]["max"]
    if not torch.cuda.is_available():
        assert gather["got"] is None and gather["verdict"] == "not measured"
    assert doc["sections"]["extend"]["moved"]
    assert {(r["groups"], r["bs"]) for r in doc["sections"]["extend"]["records"]} >= {(3, 256)}


def test_family_rows_compare_each_family_on_the_properties_both_commits_have():
    from kvtable.bench.tester_profile import family
    from kvtable.bench.version_runs import family_rows

    this = {"this": True, "commit": "new", "per_property": {
        "decode_locs": [0.2, 100], "rejects/T1": [0.6, 100], "alloc/decode": [0.3, 100]}}
    base = {"this": False, "commit": "old", "per_property": {"decode_locs": [0.4, 100], "rejects/T1": [0.3, 100]}}
    columns, rows = family_rows([this, base], family)
    assert columns == ["family", "this: properties", "this: ms/example", "old: properties", "old: ms/example",
                       "this / old (shared)"]
    assert rows == [["alloc", 1, 3.0, 0, None, None],
                    ["locs", 1, 2.0, 1, 4.0, 2.0],
                    ["rejects", 1, 6.0, 1, 3.0, 0.5],
                    ["all", 3, 3.67, 2, 3.5, 0.88]]  # shared: (4 + 3) / (2 + 6) ms, alloc/decode left out


def test_ceiling_runs_are_candidates_with_a_table_of_their_own_and_no_target(monkeypatch):
    from kvtable.bench import version_runs
    from kvtable.bench.harness import Section, Settings
    from kvtable.bench.tester import versions

    rates = {("this", ""): [100, 110], ("base", ""): [200, 200], ("this", "unchecked"): [300, 330]}
    served: dict[tuple[str, str], int] = {}

    def run_once(python, kind, examples, variant=""):
        who = ("this" if python == version_runs.sys.executable else "base", variant)
        rate = rates[who][served.get(who, 0)]
        served[who] = served.get(who, 0) + 1
        return {"kvtable": "/nowhere/kvtable/__init__.py", "examples": rate, "properties": 3, "passed": True,
                "cpu_s": 1.0, "wall_s": 1.0, "startup_cpu_s": 0.5, "per_property": {"decode_locs": [1.0, rate]}}

    monkeypatch.setattr(version_runs, "run_once", run_once)
    monkeypatch.setattr(version_runs, "commit_of", lambda _: "c0ffee")
    section = Section("tester", "t", [])
    versions(section, Settings.for_size("quick", ["base-python"]), [("fuzz", 10, 2)], variants=("unchecked",))
    assert served == {("this", ""): 2, ("base", ""): 2, ("this", "unchecked"): 2}
    # the target compares this checkout with the baseline alone: (100/200, 110/200)
    [target] = section.targets
    assert (target.got.min, target.got.max) == (0.5, 0.55) and not target.met
    # the ceiling: the run without checks over the baseline, round by round (300/200, 330/200); medians 105, 200
    # and 315 examples per CPU second are 9.52, 5 and 3.17 ms per example, and 2x 200/s is 2.5 ms per example
    tester, ceiling = section.tables
    assert [row[2] for row in tester["rows"]] == ["this", "baseline", "this, checks removed"]
    assert ceiling["rows"] == [["fuzz --examples 10 --seed 0", "this, checks removed", "c0ffee", "1.57 (1.5-1.65)",
                                6.35, -0.67]]
    # a later call without variants (tester_versions' default conform run) adds no ceiling table
    rates.update({("this", ""): [100, 110, 120], ("base", ""): [200, 200, 200]})
    versions(section, Settings.for_size("quick", ["base-python"]), [("fuzz", 10, 1)])
    assert [t["title"].startswith("The ceiling") for t in section.tables] == [False, True, False]
    # without a baseline there is nothing to hold a ceiling against: no variant runs
    served.clear()
    versions(Section("tester", "t", []), Settings.for_size("quick"), [("fuzz", 10, 1)], variants=("unchecked",))
    assert served == {("this", ""): 1}


def test_a_baseline_named_relative_to_the_working_directory_is_run_from_there(monkeypatch, tmp_path):
    import os
    import subprocess
    from types import SimpleNamespace

    from kvtable.bench import version_runs

    python = tmp_path / "base" / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("")
    seen = []
    monkeypatch.setattr(subprocess, "run", lambda argv, **kw: seen.append((argv[0], kw["cwd"])) or SimpleNamespace(
        returncode=0, stdout='{"examples": 1}\n', stderr=""))
    monkeypatch.chdir(tmp_path / "base")
    assert version_runs.run_once(os.path.join(".venv", "bin", "python"), "fuzz", 1) == {"examples": 1}
    # the run's cwd is the interpreter's folder: the path it is given is absolute, not relative to that cwd
    assert seen == [(str(python), python.parent)]


def test_the_profile_clock_counts_entries_and_takes_the_timers_cost_out():
    from kvtable.bench.tester_profile import Clock

    clock = Clock()
    timed = clock.timed("reference", lambda: None)
    with clock.phase("hypothesis"):
        for _ in range(3):
            timed()
        with clock.phase("draw"):
            timed()
    assert clock.entries == {("", "hypothesis"): 1, ("hypothesis", "reference"): 3, ("hypothesis", "draw"): 1,
                             ("draw", "reference"): 1}
    # each entry costs the phase it was made from 2 s and its own 1 s (never below zero): hypothesis 20 - 1 - 4 * 2
    clock.totals = {"hypothesis": 20.0, "reference": 10.0, "draw": 1.5}
    assert clock.net((2.0, 1.0)) == {"hypothesis": 11.0, "reference": 6.0, "draw": 0.0}


def test_profile_figures_are_medians_over_the_runs():
    from kvtable.bench.tester_profile import _medians

    runs = [{"locs": {"examples": 10.0, "draw": 1.0, "backend": 9.0}},
            {"locs": {"examples": 10.0, "draw": 3.0}},
            {"locs": {"examples": 10.0, "draw": 2.0, "backend": 1.0}, "ring": {"draw": 5.0}}]
    # a stall in one run's backend does not move the figure; a family only later runs have is left out
    assert _medians(runs) == {"locs": {"examples": 10.0, "draw": 2.0, "backend": 1.0}}
