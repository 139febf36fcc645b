"""The engine-style example backends: each passes with its profile, each seeded engine bug writes unsafely."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import torch

from kvtable.backends import NoDebugMode, load, missing_methods
from kvtable.backends.profiles import PROFILES
from kvtable.backends.protocol import ALLOCATOR_OPERATIONS, RING_OPERATIONS
from kvtable.conformance.properties import select
from kvtable.conformance.runner import run_conformance
from kvtable.reference import Batch, GroupSpec, token_positions, unsafe_writes

VLLM = "examples/vllm_style.py:backend"
VLLM_53982 = "examples/vllm_style.py:backend_53982"
TOKENSPEED = "examples/tokenspeed_style.py:backend"
TOKENSPEED_709 = "examples/tokenspeed_style.py:backend_709"
TOKENSPEED_STALE_TAIL = "examples/tokenspeed_style.py:backend_stale_tail"

VALID_INPUT = ["decode_locs", "verify_locs", "reanchor_locs", "extend_locs", "group_locs/decode",
               "group_locs/verify", "group_locs/reanchor", "group_locs/extend", "group_locs/int32-edge",
               "expand_table", "unit-invariance"]
"""The valid-input properties that need no debug mode and no graph runner."""
SAFETY = ["safety/garbage-dummy-rows", "safety/stale-seq-len", "safety/pad-inside", "safety/narrow-table"]


@pytest.fixture(autouse=True)
def _from_the_repo_root(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    monkeypatch.chdir(request.config.rootpath)  # the example paths are relative to a clone's root


@pytest.mark.parametrize(("spec", "profile"), [(VLLM, "vllm"), (TOKENSPEED, "tokenspeed")])
def test_an_example_passes_safety_and_correctness_under_its_profile(spec: str, profile: str) -> None:
    report = run_conformance(spec, examples=10, seed=0, profile=profile, properties=select(VALID_INPUT + SAFETY),
                             level="correct")
    assert report.passed, report.details()
    assert {r.property for r in report.not_applicable} <= {"safety/garbage-dummy-rows"}


@pytest.mark.slow
def test_the_vllm_examples_missing_validation_is_a_strictness_failure_not_a_safety_one() -> None:
    properties = select(["rejects-cheap/T8"])  # a group's table narrower than a row needs: vLLM's state holds it
    assert run_conformance(VLLM, examples=10, seed=0, profile="vllm", properties=properties, level="correct").passed
    strict = run_conformance(VLLM, examples=10, seed=0, profile="vllm", properties=properties, level="strict")
    assert not strict.passed
    assert {f.tier for r in strict.results for f in r.failures} == {"strictness"}
    assert any("accepted input that breaks" in f.message for r in strict.results for f in r.failures)
    assert all("profile 'vllm': validating this input is the scheduler's job" in f.message
               for r in strict.results for f in r.failures)  # the profile's `validates`, stated in the verdict


@pytest.mark.slow
def test_a_profile_whose_backend_validates_adds_no_scheduler_note() -> None:
    strict = run_conformance(VLLM, examples=10, seed=0, profile="kvtable", properties=select(["rejects-cheap/T9"]),
                             level="strict")
    messages = [f.message for r in strict.results for f in r.failures]
    assert messages and not any("scheduler's job" in m for m in messages)


def test_the_vllm_example_is_slot_mapping_only_int64_and_has_no_debug_mode() -> None:
    backend = load(VLLM)
    assert missing_methods(backend) == ("check_write_locs", "graph", *ALLOCATOR_OPERATIONS, "check_allocation",
                                        *RING_OPERATIONS)
    locs = backend.verify_locs(torch.tensor([[3, 4], [0, 0]], dtype=torch.int32), torch.tensor([5, 1]), 4, 2,
                               actual_bs=1)
    assert locs.dtype == torch.int64 and locs.tolist() == [15, 16, -1, -1]  # padded tokens: PAD_SLOT_ID
    with pytest.raises(NoDebugMode):
        load(VLLM, debug=True)


def test_the_vllm_example_expands_the_null_block_to_sub_blocks() -> None:
    """``append_row`` maps a row's own blocks (a null block among them to sub-blocks 0, 1); the 0 tail after its
    last real block stays 0."""
    table = torch.tensor([[3, 0, 5, 0]], dtype=torch.int32)  # vLLM tables: a null block, then a 0 tail
    assert load(VLLM).expand_table(table, 2).tolist() == [[6, 7, 0, 1, 10, 11, 0, 0]]
    assert load(VLLM).expand_table(torch.tensor([[0]], dtype=torch.int32), 2, max_kernel_pages=2,
                                   tail_pad=0).tolist() == [[0, 0]]


# -- the seeded engine bugs, judged by the safety oracle ---------------------------------------------------


def test_vllm_53982_reads_the_next_rows_block_past_a_narrow_table() -> None:
    table = torch.tensor([[5], [9]], dtype=torch.int32)  # one block per row; row 0's position 5 needs two
    seq = [6, 1]
    tokens = token_positions("decode", seq)
    fixed = load(VLLM).decode_locs(table, torch.tensor(seq), 4)
    buggy = load(VLLM_53982).decode_locs(table, torch.tensor(seq), 4)
    assert fixed.tolist() == [-1, 36] and not unsafe_writes(table, fixed, tokens, 4, pad_slot=-1)
    assert buggy.tolist() == [37, 36]  # block 9 is row 1's
    [bad] = unsafe_writes(table, buggy, tokens, 4, pad_slot=-1)
    assert (bad.row, bad.token, bad.position, bad.loc) == (0, 0, 5, 37)


def test_tokenspeed_709_extends_over_a_pad_column_into_negative_slots() -> None:
    table = torch.tensor([[3, -1]], dtype=torch.int32)
    tokens = token_positions("extend", [6], prefix_lens=[3], extend_lens=[3])
    fixed = load(TOKENSPEED).extend_locs(table, [3], [3], 4)
    buggy = load(TOKENSPEED_709).extend_locs(table, [3], [3], 4)
    assert fixed.tolist() == [15, 0, 1] and not unsafe_writes(table, fixed, tokens, 4)
    assert buggy.tolist() == [15, -4, -3]
    assert [(w.row, w.token, w.loc) for w in unsafe_writes(table, buggy, tokens, 4)] == [(0, 1, -4), (0, 2, -3)]


def _replayed(spec: str, seq_len: int) -> list[int]:
    runner = load(spec).graph([GroupSpec("full", "full", 4)], max_bs=2, max_kernel_pages=4, kernel_page_size=4)
    assert runner.table_buffers == {} and runner.loc_buffers == {}  # allocated at first capture
    _, locs = runner.capture(1, ["full"])
    runner.replay(1, {"full": torch.tensor([[3, -1]], dtype=torch.int32)}, torch.tensor([seq_len]))
    return locs["full"].tolist()


def test_a_stale_seq_len_on_the_tail_pad_inside_the_width_sinks_unless_seeded() -> None:
    tokens = token_positions("decode", [7])
    buffer_row = [[3, -1, -1, -1]]  # the replayed buffer row: width 4, tail pad -1
    assert _replayed(TOKENSPEED, 7) == [2]  # page 0, the sink
    assert _replayed(TOKENSPEED_STALE_TAIL, 7) == [-2]
    eager = load(TOKENSPEED_STALE_TAIL).decode_locs(torch.tensor(buffer_row, dtype=torch.int32), torch.tensor([7]), 4)
    assert eager.tolist() == [-2]
    [bad] = unsafe_writes(buffer_row, [-2], tokens, 4)
    assert (bad.row, bad.token, bad.position, bad.loc) == (0, 0, 6, -2)


# -- the tokenspeed-style graph runner against the model under its profile ---------------------------------

SPECS = (GroupSpec("sliding", "sliding", 4, window=4), GroupSpec("full", "full", 4), GroupSpec("mamba", "state", 1))


def test_the_lazy_graph_runner_replays_what_the_model_does_under_the_tokenspeed_profile() -> None:
    runner = load(TOKENSPEED).graph(SPECS, max_bs=3, max_kernel_pages=4, kernel_page_size=2, spec_n=2)
    model = PROFILES["tokenspeed"].graph_model(SPECS, max_bs=3, max_kernel_pages=4, kernel_page_size=2, spec_n=2)
    tables = {"sliding": [[0, 5, -1, -1], [0, 0, 0, 0]], "full": [[1, 2, -1, -1], [0, 0, 0, 0]],
              "draft": [[7, 0, 0, 0], [0, 0, 0, 0]]}
    views, locs = runner.capture(2, ["sliding", "full", "mamba"], 2)
    assert sorted(views) == ["full", "sliding"] and sorted(runner.table_buffers) == ["full", "sliding"]
    runner.replay(0, None, torch.tensor([], dtype=torch.int32), 2)  # bs 0: a no-op
    as_tensors = {gid: torch.tensor(t, dtype=torch.int32) for gid, t in tables.items()}
    runner.replay(2, as_tensors, torch.tensor([7, 1], dtype=torch.int32), 2, actual_bs=1)  # "draft": ignored
    PROFILES["tokenspeed"].replay(model, 2, tables, [7, 1], 2, actual_bs=1)
    for gid in ("sliding", "full"):
        assert runner.table_buffers[gid].tolist() == model.groups[gid].table
        assert runner.loc_buffers[gid].tolist() == model.groups[gid].locs
    assert locs["full"].tolist() == [9, 10, 0, 0]


def test_the_tokenspeed_example_refuses_with_asserts_and_runtime_errors() -> None:
    backend = load(TOKENSPEED)
    with pytest.raises(AssertionError, match="past the table width"):
        backend.decode_locs(torch.tensor([[3]], dtype=torch.int32), torch.tensor([9]), 4)
    runner = backend.graph(SPECS, max_bs=2, max_kernel_pages=4, kernel_page_size=2)
    runner.capture(1, ["full", "sliding"])
    with pytest.raises(RuntimeError, match="missing groups"):
        runner.replay(1, {"full": torch.tensor([[1]], dtype=torch.int32)}, torch.tensor([1]))
    debug = load(TOKENSPEED, debug=True)
    with pytest.raises(RuntimeError, match="outside the group's table"):
        debug.check_write_locs(torch.tensor([[3]], dtype=torch.int32), torch.tensor([1], dtype=torch.int32),
                               Batch((2,)), 4)


# -- the README's minimal adapter ---------------------------------------------------------------------------

ADAPTER = "examples/minimal_adapter.py:SlotMappingAdapter"


def test_the_minimal_adapter_is_at_most_40_lines_and_passes_what_it_implements() -> None:
    assert len(open("examples/minimal_adapter.py").read().splitlines()) <= 40
    assert missing_methods(load(ADAPTER)) == ("reanchor_locs", "group_locs", "expand_table", "check_write_locs",
                                              "graph", *ALLOCATOR_OPERATIONS, "check_allocation",
                                              *RING_OPERATIONS)
    report = run_conformance(ADAPTER, examples=25, seed=0, profile="vllm",
                             properties=select(["decode_locs", "verify_locs", "extend_locs"]))
    assert report.passed, report.details()


# -- the seeded engine bugs, caught by the suite at the safety tier ------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(("spec", "profile", "prop", "clause"), [
    (VLLM_53982, "vllm", "safety/narrow-table", "T8"),
    (TOKENSPEED_709, "tokenspeed", "safety/pad-inside", "T4"),
    (TOKENSPEED_STALE_TAIL, "tokenspeed", "safety/stale-seq-len", "T4"),
])
def test_a_seeded_engine_bug_fails_safety_naming_clause_group_row_and_token(spec: str, profile: str, prop: str,
                                                                           clause: str) -> None:
    report = run_conformance(spec, examples=50, seed=0, profile=profile, properties=select([prop]), level="safety")
    [result] = report.results
    assert result.status == "failed" and result.clause.split()[0] == clause, report.details()
    failure = result.failures[0]
    assert failure.tier == "safety"
    wrote = r"group '[^']+' row \d+ token \d+ position \d+ wrote loc -?\d+"
    read = r"out-of-bounds read in backend\.\w+: aten\.\w+ with index -?\d+ at index position \[\d+\]"  # lane
    assert re.search(f"{wrote}|{read}", failure.message), failure.message
    pasted = subprocess.run([sys.executable, "-c", failure.counterexample], capture_output=True, text=True,
                            timeout=300)
    assert pasted.returncode == 1, pasted.stderr  # the snippet re-judges its example: 1 while the bug is there
    assert f"still FAILED [{result.clause}]" in pasted.stderr


def test_the_readme_shows_the_minimal_adapter_as_tested() -> None:
    assert open("examples/minimal_adapter.py").read() in open("README.md").read()


@pytest.mark.slow
def test_strictness_notes_under_a_scheduler_validating_profile_are_one_line_per_clause() -> None:
    props = select(["rejects-cheap/T8", "rejects/T8", "lengths/numpy-ints"])
    report = run_conformance("examples/sglang_style.py:backend", examples=20, seed=0, profile="sglang+any",
                             properties=props)  # the wide domain: SGLang's scheduler never builds a narrow table
    assert report.passed, report.details()
    notes = [line for line in report.notes().splitlines() if line.startswith("note ")]
    assert len(notes) == 1 and notes[0].startswith("note [strictness] T8 table-width: "), notes
    assert "missing or unnamed refusal(s) in rejects-cheap/T8, rejects/T8" in notes[0]
    assert "numpy" not in report.notes()  # a bare or float length is no input SGLang's scheduler hands over
