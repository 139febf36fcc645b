"""The strategies draw what they promise: valid batches pass the reference, near-valid ones break one clause."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st

from kvtable import ContractViolation
from kvtable.reference import GraphModel, check_tables, expand_table
from kvtable.reference import tables as ref_tables
from kvtable.reference.tables import check_int32_range
from kvtable.strategies import (
    CORRUPTIONS,
    VARIANTS,
    Broken,
    Case,
    ExpandCase,
    GraphCase,
    WriteLocCase,
    broken_case,
    broken_cases,
    cases,
    expand_cases,
    graph_cases,
    repaged,
    variants,
    write_loc_cases,
)

FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                         HealthCheck.filter_too_much])
CONTENT_CLAUSES = {"T2", "T3", "T4", "T5", "T7", "W5"}
"""Clauses broken through table contents only, where every single check can be run on its own."""


def _clause(fn) -> str | None:
    try:
        fn()
    except ContractViolation as err:
        return err.clause_id
    return None


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_valid_cases_pass_the_reference_validator(case: Case) -> None:
    checked = check_tables(case.specs, case.tensors(), case.batch, tail_pad=case.tail_pad)
    assert sorted(checked) == [s.group_id for s in case.attention]
    for gid, tensor in case.tensors().items():
        assert tensor.dtype == torch.int32 and tensor.dim() == 2
        assert tensor.shape[0] >= case.batch.bs, gid


@FAST
@given(cases(big_pages=True))
def test_big_pages_sit_just_under_the_int32_limit(case: Case) -> None:
    for spec in case.attention:
        limit = 2**31 // spec.block_granularity
        for page in {p for row in case.tables[spec.group_id] for p in row if p > 0}:
            assert limit - 2**12 <= page < limit


@FAST
@given(st.data())
def test_cases_cover_the_advertised_shapes(data: st.DataObject) -> None:
    case = data.draw(cases(modes=("verify",), min_pad=1, tail_pads=(0,)))
    assert case.batch.actual_bs is not None and case.batch.actual_bs < case.batch.bs
    assert case.tail_pad == 0
    for spec in case.attention:
        for row in case.tables[spec.group_id][case.batch.live_rows:case.batch.bs]:
            assert set(row) == {0}


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: f"{v.clause}-{v.name}")
def test_each_variant_is_labelled_with_the_clause_the_reference_raises(variant) -> None:
    @FAST
    @given(broken_case(variant))
    def check(b: Broken) -> None:
        assert b.clause == variant.clause
        raised = _clause(lambda: check_tables(b.case.specs, b.case.tensors(), b.case.batch, tail_pad=b.case.tail_pad))
        assert raised == b.clause, b.how

    check()


def _group_checks(table: list[list[int]], case: Case, gid: str) -> list:
    spec = case.spec(gid)
    return [
        lambda: ref_tables.check_dummy_rows(table, case.batch, group=gid),
        lambda: ref_tables.check_width(table, case.batch, spec),
        lambda: ref_tables.check_swa_holes(table, case.batch, spec, case.tail_pad),
        lambda: ref_tables.check_live_pages(table, case.batch, spec),
        lambda: ref_tables.check_tail_pad(table, case.batch, spec, case.tail_pad),
        lambda: ref_tables.check_page_sharing(table, case.batch, spec),
        lambda: check_int32_range(table, spec.block_granularity),
    ]


def _single_checks(b: Broken) -> set[str]:
    """The clauses each table check raises when run on its own (a check that cannot run counts as none)."""
    by_id = ref_tables.specs_by_id(b.case.specs)
    checks = [lambda: ref_tables.check_lengths(b.case.batch)]
    for gid, table in ref_tables.shed_state_groups(by_id, b.case.tables).items():
        checks += _group_checks(table, b.case, gid)
    return {_clause(check) for check in checks} - {None}


@pytest.mark.parametrize("variant", [v for v in VARIANTS if v.clause in CONTENT_CLAUSES],
                         ids=lambda v: f"{v.clause}-{v.name}")
def test_content_variants_break_exactly_one_clause(variant) -> None:
    """Whatever order a backend checks in, it can only name the labelled clause."""
    @FAST
    @given(broken_case(variant))
    def check(b: Broken) -> None:
        assert _single_checks(b) == {b.clause}, b.how

    check()


def test_variant_filters() -> None:
    assert {v.clause for v in variants(cheap=True)} == {"T1", "T8", "T9", "W2"}
    assert not [v for v in variants(padding=False) if v.clause == "T2"]
    with pytest.raises(ValueError, match="no near-valid variant"):
        variants(["T2"], padding=False)


@FAST
@given(broken_cases(tail_pads=(-1,)))
def test_default_pad_variants_keep_the_default_pad(b: Broken) -> None:
    assert b.case.tail_pad == -1


EXPECTED_VERDICT = {"null page": "D1", "foreign page": "D1", "wrong column": "D1", "wrong offset": "D1",
                    "count": "D1", "shared write page": "D2", "write through a hole": "D1",
                    "clamped re-anchor": "D2"}


def test_page_twice_in_one_row_also_repeats_another_rows_page() -> None:
    """T7 forbids a row holding a page twice even when the page's first owner is another row."""
    twice = next(v for v in VARIANTS if v.name == "page twice in one row")
    found = find(broken_case(twice), lambda b: "another row's" in b.how,
                 settings=settings(max_examples=500, database=None, phases=[Phase.generate],
                                   suppress_health_check=list(HealthCheck)))
    assert found.clause == "T7"


def test_corruption_labels_match_the_verdicts() -> None:
    assert CORRUPTIONS == EXPECTED_VERDICT


@pytest.mark.parametrize("how", CORRUPTIONS)
def test_write_loc_corruptions_are_labelled_by_the_reference_checker(how: str) -> None:
    @FAST
    @given(write_loc_cases(corrupt=True, corruptions=(how,)))
    def check(wc: WriteLocCase) -> None:
        assert wc.how == how
        assert wc.clause == EXPECTED_VERDICT[how]

    check()


@FAST
@given(write_loc_cases(corrupt=False))
def test_correct_locations_pass_the_checker(wc: WriteLocCase) -> None:
    assert wc.how == "correct locations"
    assert wc.clause is None


@FAST
@given(expand_cases())
def test_expand_cases_are_well_formed(ex: ExpandCase) -> None:
    out = expand_table(ex.table, ex.ratio, max_kernel_pages=ex.max_kernel_pages, tail_pad=ex.tail_pad,
                       actual_bs=ex.actual_bs)
    assert len(out) == len(ex.table)
    assert all(max(row, default=0) <= 2**31 - 1 for row in out)
    for row in ex.table[ex.actual_bs or len(ex.table):]:
        assert set(row) <= {0}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(graph_cases())
def test_graph_cases_replay_cleanly_on_the_model(gc: GraphCase) -> None:
    model = GraphModel(gc.setup.specs, **gc.setup.kwargs())
    for bs, ids, tpr in gc.captures:
        tables, locs = model.capture(bs, list(ids), tpr)
        assert (tables is None) == all(i.startswith("state") for i in ids)
    step = gc.replay
    model.replay(step.bs, step.tensors(), list(step.seq_lens), step.tokens_per_req, actual_bs=step.actual_bs)
    assert len(step.live_seq) == step.bs


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.data())
def test_repaged_replays_keep_the_shape_with_fresh_pages(data: st.DataObject) -> None:
    gc = data.draw(graph_cases())
    step = gc.replay
    again = data.draw(repaged(gc.setup, step))
    assert (again.bs, again.seq_lens, again.tokens_per_req, again.actual_bs) == \
        (step.bs, step.seq_lens, step.tokens_per_req, step.actual_bs)
    attention = {s.group_id for s in gc.setup.attention}
    for gid, table in step.tables.items():
        new = again.tables[gid]
        assert [len(r) for r in new] == [len(r) for r in table]
        assert [[p <= 0 for p in r] for r in new] == [[p <= 0 for p in r] for r in table]
        old_pages = {p for r in table for p in r if p > 0}
        if gid in attention:
            assert not old_pages & {p for r in new for p in r if p > 0}, "every real page is renamed"
        else:
            assert new == table
    model = GraphModel(gc.setup.specs, **gc.setup.kwargs())
    for replay in (step, again):
        model.replay(replay.bs, replay.tensors(), list(replay.seq_lens), replay.tokens_per_req,
                     actual_bs=replay.actual_bs)


def test_extend_rows_of_length_zero_are_drawn() -> None:
    """W3 allows a request that extends by 0 tokens, beside others that do not."""
    case = find(cases(modes=("extend",)), lambda c: 0 in c.extend_lens and max(c.extend_lens) > 0,
                settings=settings(database=None))
    assert case.batch.mode == "extend" and 0 in case.extend_lens


@pytest.mark.parametrize("profile", ["vllm", "sglang"])
def test_breaches_a_schedulers_engine_is_never_handed_are_not_drawn(profile: str) -> None:
    """Under vLLM's and SGLang's domains no near-valid case has a negative table entry, another table shape or a
    length breach (T9, W2): their state cannot hold one, so no verdict may rest on one."""
    from kvtable.backends.profiles import get_profile
    from kvtable.strategies.broken import broken_cases
    from kvtable.strategies.domain import drawing

    domain = get_profile(profile).domain

    @settings(max_examples=60, derandomize=True, suppress_health_check=list(HealthCheck), database=None)
    @given(broken_cases())
    def drawn(b) -> None:  # type: ignore[no-untyped-def]
        assert b.clause not in ("T9", "W2") and not (b.clause == "T1" and b.cheap), b.how
        assert all(v >= 0 for table in b.case.tables.values() for row in table for v in row), b.how

    with drawing(domain):
        drawn()


def test_properties_drawing_only_breaches_the_engine_never_builds_are_not_applicable() -> None:
    from kvtable.backends.torch_backend import TorchBackend
    from kvtable.conformance.properties import select
    from kvtable.conformance.runner import run_conformance

    names = ["rejects-cheap/T1", "rejects-cheap/T9", "rejects-cheap/W2", "rejects/T9", "rejects/W2"]
    vllm = run_conformance(TorchBackend, examples=5, seed=0, profile="vllm", properties=select(names),
                           isolate=False)
    assert all(r.status == "not applicable" and "never handed these breaches" in r.message for r in vllm.results)
    assert all(r.applicable for r in run_conformance(TorchBackend, examples=5, seed=0, properties=select(names),
                                                     isolate=False).results)
