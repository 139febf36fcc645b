"""The allocator judge (reference/allocation.py, A1-A6) on hand vectors: legal steps pass, each breach names its
clause, request, row and token."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hypothesis import given, settings

from kvtable.alloc_contract import Allocation, AllocState
from kvtable.backends import load
from kvtable.backends.profiles import get_profile
from kvtable.conformance.alloc_calls import alloc_outcome, alloc_state, call_allocator
from kvtable.errors import ContractViolation
from kvtable.impl.allocation import check_allocation
from kvtable.reference import GroupSpec
from kvtable.reference.allocation import (
    AllocOutcome,
    AllocStep,
    SwaState,
    alloc_tokens,
    judge_allocation,
    swa_slot,
)
from kvtable.strategies.allocator import alloc_cases

CANARY = -7


def _table(rows: list[list[int]], width: int = 8) -> list[list[int]]:
    return [row + [0] * (width - len(row)) for row in rows]


def _record(step: AllocStep, locs: list[int]) -> list[list[int]]:
    """The table with each token's location at its own position (what a conforming engine records)."""
    table = [list(r) for r in step.req_to_token]
    for (i, pos), loc in zip(alloc_tokens(step), locs, strict=True):
        table[step.rows[i]][pos] = loc
    return table


def _outcome(step: AllocStep, locs: list[int], table: list[list[int]] | None = None, **kw) -> AllocOutcome:
    return AllocOutcome(locs, _record(step, locs) if table is None else table, guard_before=[CANARY] * 2,
                        guard_after=[CANARY] * 2, canary=CANARY, **kw)


# Page size 1: row 1 holds slots 3, 4 (prefix 2); row 2 holds slot 5 (prefix 1); free slots 6, 7, 8.
DECODE = AllocStep("decode", _table([[], [3, 4], [5]]), rows=[1, 2], prefix_lens=[2, 1], seq_lens=[3, 2],
                   free_pages=[6, 7, 8], page_size=1, pool_pages=10)


def test_a_legal_decode_passes_and_the_tokens_are_each_rows_next_position() -> None:
    assert alloc_tokens(DECODE) == [(0, 2), (1, 1)]
    assert judge_allocation(DECODE, _outcome(DECODE, [6, 7])) == []


def test_a_slot_recorded_elsewhere_in_the_row_fails_a1_and_a2() -> None:
    table = _record(DECODE, [6, 7])
    table[1][2], table[1][3] = 0, 6  # request 0's slot recorded one position late
    faults = judge_allocation(DECODE, _outcome(DECODE, [6, 7], table))
    assert [(f.clause, f.unsafe, f.request, f.row, f.token, f.position) for f in faults] == [
        ("A2", True, 0, 1, 0, 2), ("A1", False, 0, 1, 0, 2)]
    assert "changed row 1 col 3" in faults[0].reason and "recorded 0 at its position" in faults[1].reason


def test_a_live_slot_page_zero_and_a_slot_past_the_pool_are_unsafe_a3() -> None:
    for locs, reason in (([4, 7], "slot of live token (0, 1)"), ([0, 7], "page 0"), ([11, 7], "past the pool"),
                         ([9, 7], "neither free"), ([7, 7], "also chosen for token 0")):
        faults = [f for f in judge_allocation(DECODE, _outcome(DECODE, locs)) if f.clause == "A3"]
        assert faults and faults[0].unsafe, locs
        assert reason in faults[0].reason, (locs, faults[0].reason)
        assert (faults[0].request, faults[0].row) == ((1, 2) if reason.startswith("also") else (0, 1))


def test_another_rows_cell_changed_names_the_writing_token() -> None:
    table = _record(DECODE, [6, 7])
    table[0][7] = 7  # request 1's slot also written into row 0, a row of no request
    faults = judge_allocation(DECODE, _outcome(DECODE, [6, 7], table))
    assert [(f.clause, f.unsafe, f.request, f.row, f.token) for f in faults] == [("A2", True, 1, 2, 1)]
    assert "changed row 0 col 7 (a row of no request in the batch) from 0 to 7" in faults[0].reason


def test_an_int32_wrapped_record_is_unsafe_a1() -> None:
    big = 2**31 + 5
    step = AllocStep("decode", _table([[3]]), rows=[0], prefix_lens=[1], seq_lens=[2], free_pages=[big],
                     page_size=1, pool_pages=2**31 + 10)
    table = _record(step, [big])
    table[0][1] = big - 2**32
    faults = judge_allocation(step, _outcome(step, [big], table))
    assert [(f.clause, f.unsafe, f.token, f.position) for f in faults] == [("A1", True, 0, 1)]
    assert f"recorded {big - 2**32} at its position, not the chosen {big} (outside the pool)" in faults[0].reason


# Page size 4: row 0 holds positions 0..5 on pages 2, 3 (page 3 half full); free pages 5, 6.
PAGED = AllocStep("extend", _table([[8, 9, 10, 11, 12, 13]], 12), rows=[0], prefix_lens=[6], seq_lens=[11],
                  free_pages=[5, 6], page_size=4, pool_pages=8)


def test_paged_extend_fills_the_own_partial_page_then_free_pages() -> None:
    assert judge_allocation(PAGED, _outcome(PAGED, [14, 15, 20, 21, 22])) == []


def test_paged_wrong_offset_and_split_page_column_are_correctness_a3() -> None:
    wrong_offset = judge_allocation(PAGED, _outcome(PAGED, [14, 15, 21, 20, 22]))
    assert [(f.clause, f.unsafe, f.token) for f in wrong_offset][:1] == [("A3", False, 2)]
    assert "offset 1 in its page, but the position's offset is 0" in wrong_offset[0].reason
    split = judge_allocation(PAGED, _outcome(PAGED, [14, 15, 20, 25, 22]))
    assert [(f.clause, f.unsafe, f.token) for f in split] == [("A3", False, 3)]
    assert "use page 5" in split[0].reason


def test_a_write_before_the_output_buffer_names_the_request_whose_start_went_negative() -> None:
    # request 0 has a prefix past its length (extend -1): a kernel summing extend lengths starts request 1 at -1
    step = AllocStep("extend", _table([[3, 4, 5], []]), rows=[0, 1], prefix_lens=[3, 0], seq_lens=[2, 2],
                     free_pages=[6, 7], page_size=1, pool_pages=10)
    outcome = AllocOutcome([7, 7], _record(step, [6, 7]), guard_before=[CANARY, 6], guard_after=[CANARY],
                           canary=CANARY)
    faults = judge_allocation(step, outcome)
    assert (faults[0].clause, faults[0].unsafe, faults[0].request, faults[0].row, faults[0].token,
            faults[0].position) == ("A4", True, 1, 1, -1, 0)
    assert "wrote entry -1, before the output buffer of 2 entries" in faults[0].reason


def test_swa_translation_sentinel_and_free_swa_slots() -> None:
    mapping = [0] * 12 + [-1]
    mapping[3], mapping[4] = 1, 2
    assert (swa_slot(mapping, -1), swa_slot(mapping, 3), swa_slot(mapping, 7), swa_slot(mapping, 50)) == (-1, 1, 0, 0)
    step = AllocStep("decode", _table([[3, 4]]), rows=[0], prefix_lens=[2], seq_lens=[3], free_pages=[6],
                     page_size=1, pool_pages=10, swa=SwaState(mapping, free_pages=[3], pool_pages=4))
    recorded = list(mapping)
    recorded[6] = 3
    assert judge_allocation(step, _outcome(step, [6], swa_locs=[3], swa_mapping=recorded)) == []
    live = judge_allocation(step, _outcome(step, [6], swa_locs=[2], swa_mapping=[*mapping[:6], 2, *mapping[7:]]))
    assert [(f.clause, f.unsafe, f.token) for f in live] == [("A5", True, 0), ("A6", True, 0)]
    assert "live token (0, 1)" in live[0].reason and "SWA page 2 handed out again: request 0" in live[1].reason
    lost = recorded[:-1] + [0]
    faults = judge_allocation(step, _outcome(step, [6], swa_locs=[3], swa_mapping=lost))
    assert [(f.clause, f.unsafe) for f in faults] == [("A5", True)] and "sentinel" in faults[0].reason


# The torch checker (impl/allocation.py) against the reference judge, on drawn steps answered by the SGLang-style
# example, kvtable's own allocator step (the torch backend's, the zoo's base) and seeded variants: it raises
# exactly when the judge finds a fault, naming one of its clauses.
_OPS = {"decode": "alloc_decode", "verify": "alloc_verify", "extend": "alloc_extend"}


@pytest.mark.parametrize(("factory", "mode", "kind", "swa"), [
    ("backend", "decode", "valid", None), ("backend", "verify", "valid", True), ("backend", "extend", "valid", None),
    ("backend", "extend", "prefix past length", False), ("backend", "verify", "short verify", False),
    ("backend_prefix_past_length", "extend", "prefix past length", False),
    ("backend_short_verify", "verify", "short verify", False), ("backend_int32_pool", "decode", "int32 slots", False),
    ("torch", "extend", "valid", True),
    ("kvtable.zoo.sglang:SglangAssignShortRow", "verify", "short verify", False),
])
def test_the_torch_checker_agrees_with_the_judge(factory: str, mode: str, kind: str, swa: bool | None) -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "sglang_style.py"
    backend = load(factory if ":" in factory or factory == "torch" else f"{example}:{factory}")
    verdicts = []

    @settings(max_examples=15, derandomize=True, database=None, deadline=None)
    @given(alloc_cases(mode, kind, swa=swa))
    def agree(case) -> None:
        state, arena = alloc_state(case.step)
        before = state.req_to_token.clone()
        got, made, changed = call_allocator(backend, _OPS[mode], state)
        faults = judge_allocation(case.step, alloc_outcome(got, arena, made, changed))
        try:
            check_allocation(before, state, got)
        except ContractViolation as err:
            assert err.clause_id in {f.clause for f in faults}, (str(err), [f.text() for f in faults])
            verdicts.append("fault")
        else:
            assert faults == [], [f.text() for f in faults]
            verdicts.append("legal")

    agree()
    if factory in ("backend", "torch"):
        assert set(verdicts) == {"legal"}
    else:
        assert "fault" in verdicts


def test_the_sglang_profile_zeroes_the_location_tail_only_on_padded_replays() -> None:
    """SGLang's CUDA-graph runner zero-fills ``out_cache_loc`` only when ``bs != raw_bs``: an unpadded replay keeps
    the tail an earlier, longer replay left; a padded one zeroes it (the kvtable profile never touches it)."""
    sglang, kvtable = get_profile("sglang"), get_profile("kvtable")
    spec = [GroupSpec("full", "full", 1)]
    tail = {}
    for name, profile in (("sglang", sglang), ("kvtable", kvtable)):
        model = profile.graph_model(spec, max_bs=3, max_kernel_pages=4, kernel_page_size=1)
        profile.replay(model, 3, {"full": [[5, 6], [7, 8], [9, 10]]}, [2, 2, 2])
        profile.replay(model, 1, {"full": [[3, 4]]}, [1])  # unpadded, shorter: entries [1:] keep the earlier replay's
        tail[name, "unpadded"] = model.groups["full"].locs[1:]
        profile.replay(model, 2, {"full": [[3, 4], [0, 0]]}, [1, 1], actual_bs=1)  # padded
        tail[name, "padded"] = model.groups["full"].locs[2:]
    assert tail["sglang", "unpadded"] == tail["kvtable", "unpadded"] == [8, 10]
    assert tail["sglang", "padded"] == [0] and tail["kvtable", "padded"] == [10]
    assert sglang.allocator is not None and kvtable.allocator is None


def _paged_prefix_past_length() -> AllocStep:
    """Page size 2: request 0 (row 1, pages 3 and 4) has prefix 4 past its length 2; request 1 (row 2) is new and
    needs one page; pages 5 and 6 are free."""
    return AllocStep("extend", _table([[], [6, 7, 8, 9], []]), rows=[1, 2], prefix_lens=[4, 0], seq_lens=[2, 2],
                     free_pages=[5, 6], page_size=2, pool_pages=8)


def test_the_seeded_prefix_past_length_names_the_double_allocated_page_and_the_write_before_the_buffer() -> None:
    """SGLang's signed sums: request 1 starts its output at -2 and its free pages at -1, the page popped before
    the free list (page 4, request 0's): a write before the buffer (A4) and a double allocation (A6)."""
    example = Path(__file__).resolve().parents[2] / "examples" / "sglang_style.py"
    step = _paged_prefix_past_length()
    state, arena = alloc_state(step)
    got, made, changed = call_allocator(load(f"{example}:backend_prefix_past_length"), "alloc_extend", state)
    faults = judge_allocation(step, alloc_outcome(got, arena, made, changed))
    texts = [f"{f.clause} {f.text()}" for f in faults]
    assert any(t.startswith("A4 request 1 (row 2) token -2") and "before the output buffer" in t for t in texts), texts
    assert any(t.startswith("A6 request 1 (row 2)") and "page 4 handed out again: request 0 (row 1, position 2"
               in t for t in texts), texts
    clean, _ = alloc_state(step)
    got = load(f"{example}:backend").alloc_extend(clean)
    assert got.locs.tolist() == [10, 11] and got.free_pages.tolist() == [6]  # page 5 for request 1, page 6 left


def test_pool_faults_name_double_free_lost_and_free_while_held_pages() -> None:
    """A6 at one moment (what a trace judge calls across steps): the pages held, the free list and the freed pages
    partition the pool."""
    from kvtable.reference.allocation import pool_faults

    assert pool_faults(4, {1: "row 1", 2: "row 2"}, [3, 4]) == []
    found = {page: (unsafe, reason) for page, unsafe, reason in pool_faults(5, {1: "row 1"}, [1, 3, 3], [9])}
    assert found[1] == (True, "page 1 is on the free list while row 1 holds it")
    assert found[3][0] and "free twice" in found[3][1]
    assert found[9][0] and "outside the pool" in found[9][1]
    assert found[2] == (False, "page 2 is lost: nobody holds it, and it is neither free nor freed")


def test_a_step_that_loses_free_pages_or_frees_a_held_one_fails_a6() -> None:
    """The free list returned must be the one handed minus the pages taken: none lost, none held put back."""
    locs = [6, 7]
    lost = judge_allocation(DECODE, _outcome(DECODE, locs, free_pages=[]))
    assert [(f.clause, f.unsafe) for f in lost] == [("A6", False)] and "page 8 is lost" in lost[0].reason
    back = judge_allocation(DECODE, _outcome(DECODE, locs, free_pages=[8, 3]))
    assert [(f.clause, f.unsafe) for f in back] == [("A6", True)] and "page 3" in back[0].reason
    assert judge_allocation(DECODE, _outcome(DECODE, locs, free_pages=[8])) == []


def test_a_new_requests_first_page_column_split_over_two_pages_fails_a3() -> None:
    """Page size 2, no prefix: positions 0 and 1 share page column 0, so they must share one page (position 0 is
    judged like any other)."""
    step = AllocStep("extend", _table([[], []]), rows=[1], prefix_lens=[0], seq_lens=[2], free_pages=[3, 4],
                     page_size=2, pool_pages=6)
    assert judge_allocation(step, _outcome(step, [6, 7])) == []
    faults = judge_allocation(step, _outcome(step, [6, 9]))
    assert ("A3", False, 1) in {(f.clause, f.unsafe, f.token) for f in faults}, [f.text() for f in faults]


def test_a_write_one_past_the_output_buffer_is_blamed_on_no_request() -> None:
    """Request 1's range ends at the buffer's end: entry 2 (one past) belongs to no request, entry -1 to none."""
    outcome = AllocOutcome([6, 7], _record(DECODE, [6, 7]), guard_before=[CANARY, CANARY],
                           guard_after=[99, CANARY], canary=CANARY)
    [fault] = [f for f in judge_allocation(DECODE, outcome) if f.clause == "A4"]
    assert (fault.request, fault.token, fault.unsafe) == (None, 2, True)
    assert "wrote entry 2, past the output buffer of 2 entries" in fault.reason


def test_an_unwritten_entry_and_a_changed_input_fail_a4_naming_them() -> None:
    """A guarded buffer starts as the sentinel: an entry still holding it was never written; an input the step
    wrote is named with its field."""
    outcome = AllocOutcome([6, CANARY], _record(DECODE, [6, 0]), guard_before=[CANARY] * 2,
                           guard_after=[CANARY] * 2, canary=CANARY, guarded=True,
                           changed_inputs=["free_pages: entry 0 changed from 6 to 9"])
    reasons = [f.reason for f in judge_allocation(DECODE, outcome) if f.clause == "A4"]
    assert "wrote its input free_pages: entry 0 changed from 6 to 9" in reasons
    assert any(r.startswith("left entry 1 of the output buffer unwritten") for r in reasons), reasons


def test_the_swa_free_list_is_accounted_as_its_own_pool() -> None:
    """A6 in the SWA pool: the SWA free list returned must be the one handed less the SWA pages taken."""
    mapping = [0] * 12 + [-1]
    mapping[3], mapping[4] = 1, 2
    step = AllocStep("decode", _table([[3, 4]]), rows=[0], prefix_lens=[2], seq_lens=[3], free_pages=[6],
                     page_size=1, pool_pages=10, swa=SwaState(mapping, free_pages=[3, 4], pool_pages=4))
    recorded = list(mapping)
    recorded[6] = 3
    kept = _outcome(step, [6], swa_locs=[3], swa_mapping=recorded, swa_free_pages=[4])
    assert judge_allocation(step, kept) == []
    lost = judge_allocation(step, _outcome(step, [6], swa_locs=[3], swa_mapping=recorded, swa_free_pages=[]))
    assert [(f.clause, f.unsafe) for f in lost] == [("A6", False)] and lost[0].reason.startswith("SWA page 4 is lost")
    held = judge_allocation(step, _outcome(step, [6], swa_locs=[3], swa_mapping=recorded, swa_free_pages=[4, 1]))
    assert [(f.clause, f.unsafe) for f in held] == [("A6", True)] and "SWA page 1" in held[0].reason


def test_pool_ledger_judges_frees_across_steps_only_as_far_as_the_trace_records_them() -> None:
    from kvtable.reference.allocation import PoolLedger

    ledger = PoolLedger(4)
    assert ledger.before_step([3, 4], {}) == []
    ledger.after_step({3: "request 0"}, [4])
    assert [(p, u) for p, u, _ in ledger.release([3, 9], "the free at step 1")] == [(9, True)]  # 9: outside
    assert [r for _, _, r in ledger.release([4], "the free at step 2")] == [
        "page 4 freed while on the free list: nobody held it (it will be handed out twice)"]
    assert ledger.before_step([4], {3: "request 0 (row 1, position 0)"})[0][2].startswith("page 3 used after free")
    blind = PoolLedger(4, frees_recorded=False)  # a trace that records none of its frees: nothing held is judged
    blind.before_step([3, 4], {})
    blind.after_step({3: "request 0"}, [4])
    assert blind.before_step([3, 4], {}) == [] and PoolLedger(4).release([1], "a free") == []


def test_the_torch_checker_names_a_page_handed_to_two_page_columns() -> None:
    """Page size 2: request 0's position 0 and request 1's position 1 both on free page 3 (offsets 0 and 1) pass
    every slot rule of A3, but one page went to two page columns (A6); request 1 on its own partial page 4 passes."""
    step = AllocStep("extend", _table([[], [], [8]]), rows=[1, 2], prefix_lens=[0, 1], seq_lens=[1, 2],
                     free_pages=[3, 5], page_size=2, pool_pages=6)

    def answer(locs: list[int]) -> tuple[torch.Tensor, AllocState, Allocation]:
        state, _ = alloc_state(step)
        table = torch.tensor(_record(step, locs))
        return state.req_to_token.clone(), state, Allocation(torch.tensor(locs), table, free_pages=torch.tensor([5]))

    check_allocation(*answer([6, 9]))
    with pytest.raises(ContractViolation, match="page 3 handed out twice, to two page columns") as err:
        check_allocation(*answer([6, 7]))
    assert err.value.clause_id == "A6"
