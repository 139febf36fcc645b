"""Verdict tiers and levels, Unsupported examples, N/A naming the method, every distinct failure, safety."""

from __future__ import annotations

import re

import pytest
from test_conformance_runner import DebugSkipsSharing

from kvtable import ContractViolation, Unsupported
from kvtable.backends.torch_backend import TorchBackend
from kvtable.conformance.properties import select
from kvtable.conformance.result import NOT_APPLICABLE
from kvtable.conformance.runner import run_conformance


class NoRatios(TorchBackend):
    """Supports block granularity == kernel page size only: any other ratio is Unsupported."""

    def expand_table(self, table, ratio, **kwargs):
        if ratio != 1:
            raise Unsupported(f"ratio {ratio} (only 1)")
        return super().expand_table(table, ratio, **kwargs)


class NoVerify(TorchBackend):
    def verify_locs(self, *args, **kwargs):
        raise Unsupported("no speculative decoding")


class DecodeOnly:
    """A partial backend: one protocol operation."""

    name, device = "decode-only", "cpu"

    def decode_locs(self, table, seq_lens, page_size):
        return TorchBackend().decode_locs(table, seq_lens, page_size)


class TwoBugs(TorchBackend):
    """W1 twice over: a batch of one crashes, a longer batch's last location is one slot off."""

    def decode_locs(self, table, seq_lens, page_size):
        if table.shape[0] == 1:
            raise IndexError("bs 1")
        out = super().decode_locs(table, seq_lens, page_size)
        out[-1] += 1
        return out


class MisplacedT4(TorchBackend):
    """Debug mode names T4 but always at row 99: the clause is right, the entry is not."""

    def group_locs(self, specs, tables, batch, *, tail_pad=-1):
        try:
            return super().group_locs(specs, tables, batch, tail_pad=tail_pad)
        except ContractViolation as err:
            if err.clause_id == "T4":
                raise ContractViolation("T4", "somewhere", group=err.group, row=99, col=err.col) from err
            raise


def test_unsupported_examples_are_discarded_and_counted() -> None:
    report = run_conformance(NoRatios, examples=30, seed=0, properties=select(["expand_table"]))
    result = report.results[0]
    assert result.passed and result.examples >= 30
    assert result.unsupported and all(re.fullmatch(r"ratio [2348] \(only 1\)", why) for why in result.unsupported)
    assert sum(report.unsupported.values()) == sum(result.unsupported.values()) > 0
    assert "unsupported:" in report.summary() and "unsupported: " in report.notes()


def test_a_property_whose_every_example_is_unsupported_is_not_applicable_and_no_pass() -> None:
    report = run_conformance(NoVerify, examples=10, seed=0, properties=select(["verify_locs"]))
    result = report.results[0]
    assert result.status == NOT_APPLICABLE and "every example unsupported" in result.message
    assert "no speculative decoding" in result.message
    assert not report.passed  # nothing applied


def test_a_partial_backend_gets_na_naming_the_missing_method() -> None:
    report = run_conformance(DecodeOnly(), examples=10, seed=0,
                             properties=select(["decode_locs", "group_locs/decode", "graph/init"]))
    by_name = {r.property: r for r in report.results}
    assert by_name["decode_locs"].passed
    assert by_name["group_locs/decode"].status == NOT_APPLICABLE
    assert by_name["group_locs/decode"].message == "backend 'decode-only' has no group_locs"
    assert by_name["graph/init"].message == "backend 'decode-only' has no graph"
    assert report.passed


@pytest.mark.slow
def test_strictness_failures_are_notes_below_level_strict() -> None:
    names = select(["rejects/T7"])
    correct = run_conformance(DebugSkipsSharing, examples=30, seed=2, properties=names)
    strict = run_conformance(DebugSkipsSharing, examples=30, seed=2, properties=names, level="strict")
    assert correct.passed and correct.results[0].notes and correct.results[0].notes[0].tier == "strictness"
    assert "note [strictness] rejects/T7" in correct.notes()
    assert not strict.passed and strict.results[0].tier == "strictness"
    assert strict.failed_clauses == ["T7 private-write-pages"]


@pytest.mark.slow
def test_a_refusal_must_name_the_offending_entry() -> None:
    report = run_conformance(MisplacedT4, examples=40, seed=0, properties=select(["rejects/T4"]), level="strict")
    result = report.results[0]
    assert not report.passed and result.failures[0].kind == "misplaced refusal"
    assert "row 99" in result.message and "expected one of (group" in result.message


@pytest.mark.slow
def test_every_distinct_failure_is_reported_with_its_own_counterexample() -> None:
    report = run_conformance(TwoBugs, examples=60, seed=0, properties=select(["decode_locs"]))
    result = report.results[0]
    kinds = {f.kind for f in result.failures}
    wrong = kinds - {"crashed (IndexError)"}  # a location one slot off lands on another token's slot: unsafe
    assert "crashed (IndexError)" in kinds and wrong and all(k.startswith("unsafe write: ") for k in wrong), kinds
    assert all(f.tier == "safety" for f in result.failures if f.kind in wrong)
    assert all(f.counterexample.startswith("import torch") for f in result.failures)
    assert {f.clause for f in result.failures} == {"W1 decode-loc"} and result.property_clause == "W1 decode-loc"
    assert report.to_dict()["results"][0]["failures"][0]["clause"] == "W1 decode-loc"


@pytest.mark.slow
def test_a_write_through_a_pad_column_fails_safety_naming_group_row_and_token() -> None:
    report = run_conformance("examples/tokenspeed_style.py:backend_709", examples=60, seed=0, profile="tokenspeed",
                             properties=select(["safety/pad-inside"]), level="safety")
    result = report.results[0]
    assert not report.passed and result.tier == "safety"
    assert "unsafe write" in result.message and " row " in result.message and " token " in result.message


def test_the_built_in_backend_is_safe_on_stale_and_broken_input() -> None:
    report = run_conformance("torch", examples=40, seed=0, properties=select(["safety/stale-seq-len",
                                                                               "safety/pad-inside",
                                                                               "safety/narrow-table"]))
    assert report.passed, report.details()
    assert [r.examples >= 40 for r in report.results] == [True] * 3


class SlotMappingsOnly:
    """A partial backend with the three lone location calls an engine's slot-mapping kernel gives."""

    name, device = "slot-mappings-only", "cpu"

    def __init__(self) -> None:
        self._torch = TorchBackend()

    def decode_locs(self, table, seq_lens, page_size):
        return self._torch.decode_locs(table, seq_lens, page_size)

    def verify_locs(self, table, seq_lens, page_size, n, *, actual_bs=None):
        return self._torch.verify_locs(table, seq_lens, page_size, n, actual_bs=actual_bs)

    def extend_locs(self, table, prefix_lens, extend_lens, page_size):
        return self._torch.extend_locs(table, prefix_lens, extend_lens, page_size)


CALL_ONLY_LONE_LOCS = {
    "decode_locs", "verify_locs", "extend_locs", "group_locs/int32-edge", "rejects/n", "rejects/actual-bs",
    "rejects-cheap/T1", "rejects-cheap/T8", "rejects-cheap/T9", "rejects-cheap/W2", "safety/stale-seq-len",
    "safety/pad-inside", "safety/narrow-table", "safety/int32-wrap",
    "rejects/page-size-past-2^30", "lengths/numpy-ints", "safety/oracle-sees-other-pages"}
"""Every property that can run on decode, verify and extend alone under the kvtable profile (the others need
another operation; safety/garbage-dummy-rows runs under profiles whose padded rows are never read;
safety/oracle-sees-other-pages checks the safety oracle itself wherever locations are judged)."""


@pytest.mark.slow
def test_a_backend_with_three_lone_calls_gets_every_property_that_calls_only_those() -> None:
    report = run_conformance(SlotMappingsOnly(), examples=5, seed=0, level="strict")
    assert {r.property for r in report.results if r.applicable} == CALL_ONLY_LONE_LOCS
    lacking = ("reanchor_locs", "group_locs", "expand_table", "check_write_locs", "graph", "alloc_", "kernels",
               "cache_groups", "debug", "scrubs padded rows", "check_allocation", "ring_locs")
    for r in report.not_applicable:  # each names an operation the backend lacks (or its debug mode)
        assert any(word in r.message for word in lacking), (r.property, r.message)
    assert report.passed, report.details()


class PadsDecodeRows(TorchBackend):
    """A CUDA-graph-padded decode as vLLM writes it: the dummy rows' tokens get the pad slot -1."""

    def decode_locs(self, table, seq_lens, page_size, *, actual_bs=None):
        out = super().decode_locs(table, seq_lens, page_size, actual_bs=actual_bs)
        if actual_bs is not None:
            out[actual_bs:] = -1
        return out


class HearsNoPadding(TorchBackend):
    """Takes ``actual_bs`` on decode and ignores it: dummy rows write slot 0, not vLLM's pad slot."""

    def decode_locs(self, table, seq_lens, page_size, *, actual_bs=None):
        return super().decode_locs(table, seq_lens, page_size)


def test_a_lone_decode_declares_its_padded_rows_and_the_properties_use_it() -> None:
    props = select(["decode_locs"])
    assert run_conformance(PadsDecodeRows, examples=40, seed=0, profile="vllm", properties=props).passed
    report = run_conformance(HearsNoPadding, examples=40, seed=0, profile="vllm", properties=props, shrink=False)
    assert re.search(r"decode_locs\[\w+\]: index \d+: got 0, expected -1", report.results[0].message), report.details()


class LastOffByOne(TorchBackend):
    """W1: the last request's decode location is one slot past its own (another token's slot)."""

    def decode_locs(self, table, seq_lens, page_size, *, actual_bs=None):
        out = super().decode_locs(table, seq_lens, page_size, actual_bs=actual_bs)
        out[-1:] += 1
        return out


def test_a_wrong_location_on_valid_input_fails_the_safety_level() -> None:
    """A value the reference would not give is judged by the safety oracle first: one slot off writes another
    token's slot, which fails even ``--level safety``, naming the group, row and token."""
    report = run_conformance(LastOffByOne, examples=30, seed=0, properties=select(["decode_locs"]), level="safety")
    result = report.results[0]
    assert not report.passed and result.tier == "safety" and result.clause == "W1 decode-loc", report.details()
    assert re.search(r"unsafe write\(s\); first: group '\w+' row \d+ token \d+ position \d+ wrote loc \d+",
                     result.message), result.message
