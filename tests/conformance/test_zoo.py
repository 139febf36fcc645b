"""The bug zoo: every known engine bug that maps onto the contract is caught, by the clause it names."""

from __future__ import annotations

import argparse
import re

import pytest
import torch

from kvtable.backends import load
from kvtable.backends.torch_backend import TorchBackend
from kvtable.exitcodes import UsageError
from kvtable.spec.clauses import clause
from kvtable.zoo import cli, entries
from kvtable.zoo.base import ZooBackend
from kvtable.zoo.entries import BY_NAME, ENTRIES, OUTSIDE, Entry
from kvtable.zoo.hunt import Baseline, z3_catch
from kvtable.zoo.run import judge_entry
from kvtable.zoo.vllm import Int32SlotKernels, PythonIndexKernels, UnguardedBlockTableKernels

KNOWN_BUGS = range(1, 19)
"""The zoo's numbers for the 18 known engine bugs it tracks (``Entry.item``); each is an entry or in OUTSIDE."""


@pytest.fixture(scope="module")
def baseline() -> Baseline:
    return Baseline()


def test_every_known_bug_is_an_entry_or_explained() -> None:
    assert {e.item for e in ENTRIES} | {o.item for o in OUTSIDE} == set(KNOWN_BUGS)
    assert {e.item for e in ENTRIES} >= set(KNOWN_BUGS) - {13}  # only #13 maps onto nothing at all
    assert len(BY_NAME) == len(ENTRIES)


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.name)
def test_entry_is_a_one_behaviour_mutant_citing_its_issue(entry: Entry) -> None:
    clause(entry.clause)
    assert re.match(r"[\w.-]+/[\w.-]+ ", entry.issue), "the issue names its owner/repo first"
    assert issubclass(entry.backend, ZooBackend) and entry.backend is not ZooBackend
    assert entry.backend.name == entry.name
    assert {k for k in vars(entry.backend) if not k.startswith("__")} - {"name"}, "the mutant changes nothing"


@pytest.mark.slow
@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.name)
def test_entry_is_caught_by_the_clause_it_names(entry: Entry, baseline: Baseline) -> None:
    verdict = judge_entry(entry, shrink=False, baseline=baseline)
    assert verdict.catch is not None and verdict.catch.caught_by is not None, f"{entry.name} not caught"
    assert verdict.catch.caught_by.clause_id == entry.clause, verdict.catch.clauses
    assert verdict.caught
    assert verdict.catch.caught_by.examples <= entry.examples * 2  # stateful counts include discarded machines
    assert not verdict.catch.discredited, "the conforming backend fails these too"


@pytest.mark.parametrize("entry", [e for e in ENTRIES if e.obligation], ids=lambda e: e.name)
def test_z3_refutes_the_mutated_formula(entry: Entry) -> None:
    found = z3_catch(entry.obligation)
    assert found.caught, found.text()
    assert found.model


def test_the_conforming_backend_passes_what_catches_the_zoo(baseline: Baseline) -> None:
    from kvtable.zoo.hunt import properties_for

    for entry in ENTRIES:
        props = properties_for(entry.clause)
        assert not baseline.failing(props, examples=entry.examples, seed=0), entry.clause


def test_python_index_kernels_wrap_position_minus_one_into_the_last_column() -> None:
    """vllm-43810 by hand: a padded verify row (seq 1, N 2) writes slot 3 (ps 4) of its last page."""
    table = torch.tensor([[[5, 0, 0], [0, 0, 9]]], dtype=torch.int32)
    out = torch.zeros(1, 4, dtype=torch.int32)
    PythonIndexKernels().stacked_locs(table, torch.tensor([3], dtype=torch.int32),
                                      torch.tensor([4], dtype=torch.int32),
                                      torch.tensor([2, 1], dtype=torch.int32), out, 2, 2)
    assert out.tolist() == [[20, 21, 39, 0]]  # conforming: [20, 21, 0, 0]


def test_unguarded_block_table_reads_the_next_row() -> None:
    """vllm-53982 by hand: row 0 at seq_len 5 (ps 2, width 2) reads column 2, i.e. row 1's block 144."""
    table = torch.tensor([[[3, 4], [144, 7]]], dtype=torch.int32)
    out = torch.zeros(1, 2, dtype=torch.int32)
    UnguardedBlockTableKernels().stacked_locs(table, torch.tensor([2], dtype=torch.int32),
                                              torch.tensor([2], dtype=torch.int32),
                                              torch.tensor([5, 1], dtype=torch.int32), out, 2, 1)
    assert out.tolist() == [[288, 288]]  # conforming: [0 (null page, offset 0), 288]


def test_int32_slot_kernels_wrap_past_w5_where_kvtables_sink() -> None:
    """vllm-1486: the int32 product stores the int64 value's low bits (a wrapped slot); kvtable's kernels take
    a page past W5 as page 0 (SPEC W5), so the safety tier (safety/int32-wrap) tells them apart."""
    big = 2**31 // 4 + 3  # (page + 1) * 4 > 2^31: a W5 breach
    table = torch.tensor([[[big, 7]]], dtype=torch.int32)
    args = (table, torch.tensor([2], dtype=torch.int32), torch.tensor([4], dtype=torch.int32),
            torch.tensor([3], dtype=torch.int32))
    ours, theirs = torch.zeros(1, 1, dtype=torch.int32), torch.zeros(1, 1, dtype=torch.int32)
    Int32SlotKernels().stacked_locs(*args, ours, 1, 1)
    TorchBackend().kernels.stacked_locs(*args, theirs, 1, 1)
    assert ours.tolist() == [[(big * 4 + 2 + 2**31) % 2**32 - 2**31]]
    assert theirs.tolist() == [[2]]  # the sink: offset 2 of page 0


def test_counterexample_replays_through_load() -> None:
    entry = BY_NAME["vllm-43810"]
    verdict = judge_entry(entry)
    snippet = verdict.catch.counterexample
    assert "load('kvtable.zoo.vllm:Vllm43810', debug=False)" in snippet
    assert "verify_locs(" in snippet and "FAILED: [W2]" in snippet
    code = compile(snippet, "<counterexample>", "exec")
    with pytest.raises(SystemExit) as stop:  # the snippet re-judges its example and exits 1: it reproduces
        exec(code, {})
    assert stop.value.code == 1


def _run_cli(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    return cli.run(parser.parse_args(list(argv)))


@pytest.mark.slow
def test_cli_prints_the_table_and_exits_0_when_caught(capsys: pytest.CaptureFixture[str]) -> None:
    assert _run_cli("sglang-35351", "kvcached-398") == 0
    out = capsys.readouterr().out
    assert "D1 own-page-write (checker/null-page)" in out and "G1 graph-init (graph/init)" in out
    assert "counterexample (replayable)" in out and "2/2 entries caught by the clause they name: PASS" in out


def test_cli_exits_1_when_an_entry_escapes(monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    class NoBug(ZooBackend):
        name = "no-bug"

    harmless = Entry("kvcached-398", 1, "none #0", "G3", "nothing", "nothing", NoBug)  # a known name, no bug
    monkeypatch.setitem(entries.BY_NAME, "kvcached-398", harmless)
    assert _run_cli("kvcached-398", "--quiet") == 1
    assert "NOT CAUGHT" in capsys.readouterr().out


def test_cli_refuses_unknown_entries() -> None:
    with pytest.raises(UsageError, match="unknown entries"):  # kvtable.cli prints it in one line, exit 2
        _run_cli("vllm-00000")


def test_zoo_backends_load_by_name() -> None:
    for entry in ENTRIES:
        backend = load(f"{entry.backend.__module__}:{entry.backend.__qualname__}", debug=True)
        assert type(backend) is entry.backend and backend.debug is True


def test_cli_seeds_catches_an_entry_only_if_every_seed_does(capsys: pytest.CaptureFixture[str]) -> None:
    assert _run_cli("sglang-35985", "--seeds", "2", "--quiet", "--no-shrink") == 0
    out = capsys.readouterr().out
    assert re.search(r"sglang-35985 .* 2/2\n", out) and "caught by the clause they name at every seed of 0..1" in out


def test_judge_seeds_reports_the_seeds_that_missed(monkeypatch: pytest.MonkeyPatch) -> None:
    from kvtable.zoo import run

    entry = BY_NAME["sglang-35985"]
    real = run.judge_entry

    def flaky(entry: Entry, *, seed: int = 0, **options: object) -> run.Verdict:
        verdict = real(entry, seed=0, **options)
        if seed == 1:
            verdict.catch = None  # missed at seed 1
        return verdict

    monkeypatch.setattr(run, "judge_entry", flaky)
    verdict = run.judge_seeds(entry, 3, shrink=False)
    assert verdict.missed == (1,) and not verdict.caught
    assert "2/3 (missed [1])" in run.entry_table([entry], [verdict])
