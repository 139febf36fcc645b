"""The reference model reproduces hand-derived vectors and its validator names the right clause."""

from __future__ import annotations

import pytest
from hand_vectors import FULL, SLIDING, SPECS

from kvtable import ContractViolation
from kvtable.reference import (
    Batch,
    GraphModel,
    GroupSpec,
    check_tables,
    check_write_locs,
    decode_locs,
    expand_table,
    extend_locs,
    page_ratio,
    reanchor_locs,
    row_slots,
    select_group,
    select_locs,
    shed_state_groups,
    verify_locs,
)
from kvtable.reference.tables import check_tail_pad

TABLES = {"sliding_attention": SLIDING, "full_attention": FULL}


def test_row_slots_enumerate_pages_in_column_order() -> None:
    assert row_slots([3, 0, -1], 2) == [6, 7, 0, 1, None, None]


def test_decode_vectors_two_groups_page_size_2() -> None:
    assert decode_locs(SLIDING, [5, 4], 2) == [14, 13]
    assert decode_locs(FULL, [5, 4], 2) == [6, 17]


def test_extend_vector_over_full_rows() -> None:
    assert extend_locs(FULL, [2, 0], [3, 2], 2) == [4, 5, 6, 8, 9]


def test_extend_with_nothing_to_write_writes_nothing() -> None:
    assert extend_locs([[5]], [0], [0], 2) == []


def test_verify_is_token_major_and_padded_rows_clamp_to_slot_0() -> None:
    table = [[11, 12], [0, 0]]
    assert verify_locs(table, [65, 1], 64, 4, actual_bs=1) == [765, 766, 767, 768, 0, 0, 0, 0]


def test_verify_rejects_a_real_row_shorter_than_n() -> None:
    with pytest.raises(ContractViolation, match=r"\[W2 verify-loc\] row 1") as err:
        verify_locs([[11, 12], [13, -1]], [65, 3], 64, 4)
    assert err.value.row == 1


def test_reanchor_vector_from_the_frontier() -> None:
    # k 4, page size 2, row [7, 8, 9], frontier 6: positions 2..5.
    assert reanchor_locs([[7, 8, 9]], [6], 2, 4) == [16, 17, 18, 19]


def test_reanchor_clamps_a_short_prompt_to_its_own_position_0() -> None:
    assert reanchor_locs([[7, 8]], [2], 2, 4) == [14, 14, 14, 15]


def test_block_expansion_keeps_holes_and_pads() -> None:
    assert expand_table([[3, 5, -1], [0, -1, -1]], 2, max_kernel_pages=6) == [
        [6, 7, 10, 11, -1, -1],
        [0, 0, -1, -1, -1, -1],
    ]
    assert expand_table([[3], [9]], 4, max_kernel_pages=6, actual_bs=1) == [[12, 13, 14, 15, -1, -1], [0] * 6]


def test_unit_invariance_on_the_upstream_vector() -> None:
    # B 128, K 64, seq 129, block table [3, 5] -> kernel table [6, 7, 10, 11], location 640.
    kernel = expand_table([[3, 5]], page_ratio(128, 64))
    assert kernel == [[6, 7, 10, 11]]
    assert decode_locs([[3, 5]], [129], 128) == decode_locs(kernel, [129], 64) == [640]


def test_page_ratio_rejects_non_multiples() -> None:
    with pytest.raises(ContractViolation, match=r"\[E1 page-ratio\]"):
        page_ratio(96, 64)


def test_check_tables_accepts_the_hand_batch_and_sheds_state() -> None:
    tables = dict(TABLES, mamba=[[0, 5], [0, 6]])
    checked = check_tables(SPECS, tables, Batch((5, 4)))
    assert checked == {"full_attention": FULL, "sliding_attention": SLIDING}
    assert set(shed_state_groups(SPECS, tables)) == {"full_attention", "sliding_attention"}


def _violation(tables: dict, batch: Batch, specs=SPECS, **kwargs) -> ContractViolation:
    with pytest.raises(ContractViolation) as err:
        check_tables(specs, tables, batch, **kwargs)
    return err.value


@pytest.mark.parametrize(
    ("group", "table", "batch", "clause", "where"),
    [
        # a hole after a real page
        ("sliding_attention", [[0, 5, 0, 7], [0, 6, -1, -1]], Batch((6, 4)), "T5", (0, 2)),
        # a -1 inside the live length
        ("full_attention", [[1, -1, 3, -1], [4, 8, -1, -1]], Batch((5, 4)), "T4", (0, 1)),
        # a write into page 0 of a full-attention row
        ("full_attention", [[1, 2, 0, -1], [4, 8, -1, -1]], Batch((5, 4)), "T4", (0, 2)),
        # a hole covering the page a sliding row writes
        ("sliding_attention", [[0, 0, 0, -1], [0, 6, -1, -1]], Batch((5, 4)), "T5", (0, 1)),
        # a real page after the tail pad
        ("full_attention", [[1, 2, 3, -1], [4, 8, -1, 9]], Batch((5, 4)), "T3", (1, 3)),
        # a page shared by two rows' write positions
        ("full_attention", [[1, 2, 3, -1], [4, 3, -1, -1]], Batch((5, 4)), "T7", (0, 2)),
        # a width too small for seq_len
        ("full_attention", [[1, 2, 3, -1], [4, 8, -1, -1]], Batch((9, 4)), "T8", (0, 4)),
    ],
)
def test_validator_names_the_clause_and_place(group, table, batch, clause, where) -> None:
    tables = dict(TABLES)
    tables[group] = table
    err = _violation(tables, batch)
    assert (err.clause_id, err.group, err.row, err.col) == (clause, group, *where)


def test_validator_rejects_a_nonzero_dummy_row() -> None:
    tables = {"sliding_attention": SLIDING + [[0, 0, 0, 0]], "full_attention": FULL + [[0, 3, 0, 0]]}
    err = _violation(tables, Batch((5, 4, 1), actual_bs=2))
    assert (err.clause_id, err.group, err.row, err.col) == ("T2", "full_attention", 2, 1)


def test_validator_rejects_seq_len_0_and_negative_prefix() -> None:
    assert _violation(TABLES, Batch((5, 0))).clause_id == "T9"
    assert _violation(TABLES, Batch((5, 4), mode="extend", prefix_lens=(-1, 0))).clause_id == "T9"


def test_validator_rejects_wrong_dtype_and_shape() -> None:
    class Int64Table(list):
        dtype = "torch.int64"

        def tolist(self) -> list:
            return list(self)

    assert _violation(dict(TABLES, full_attention=Int64Table(FULL)), Batch((5, 4))).clause_id == "T1"
    assert _violation(dict(TABLES, full_attention=[[1, 2, 3], [4, 8]]), Batch((5, 4))).clause_id == "T1"
    assert _violation(dict(TABLES, full_attention=[[1, 2, 3, -1]]), Batch((5, 4))).clause_id == "T1"
    assert _violation({"full_attention": FULL}, Batch((5, 4))).clause_id == "T1"


def test_validator_rejects_a_real_verify_row_shorter_than_n() -> None:
    assert _violation(TABLES, Batch((5, 3), mode="verify", n=4)).clause_id == "W2"


def test_validator_holds_the_tail_pad_convention() -> None:
    zero_tail = {"sliding_attention": [[0, 5, 7, 0], [0, 6, 0, 0]], "full_attention": [[1, 2, 3, 0], [4, 8, 0, 0]]}
    check_tables(SPECS, zero_tail, Batch((5, 4)), tail_pad=0)
    assert _violation(zero_tail, Batch((5, 4))).clause_id == "T3"


def test_t5_bound_is_exact() -> None:
    # window 3, page size 2, decode at seq 6: reads positions 3..5, so column 0 may be a hole, column 1 not.
    specs = (GroupSpec("swa", "sliding", 2, window=3),)
    check_tables(specs, {"swa": [[0, 5, 7]]}, Batch((6,)))
    err = _violation({"swa": [[0, 0, 7]]}, Batch((6,)), specs=specs)
    assert (err.clause_id, err.col) == ("T5", 1)


def test_strong_checker_catches_what_the_upstream_one_misses() -> None:
    batch = Batch((5, 4))
    check_write_locs(FULL, [6, 17], batch, 2)
    cases = {
        "another row's page": [6, 2 * 1 + 1],  # row 1 writes into row 0's page 1
        "wrong column of its own row": [2, 17],  # page 1 is row 0's column 0, not column 2
        "wrong offset": [7, 17],
        "null page": [0, 17],
        "count": [6],
    }
    for what, locs in cases.items():
        with pytest.raises(ContractViolation, match=r"\[D1 own-page-write\]"):
            check_write_locs(FULL, locs, batch, 2)
        assert what


def test_strong_checker_rejects_duplicate_slots() -> None:
    with pytest.raises(ContractViolation, match=r"\[D2 unique-slots\]"):
        check_write_locs([[7, 8]], [14, 14, 14, 15], Batch((2,), mode="reanchor", n=4), 2)


def test_group_selection_ladder() -> None:
    entries = {"full": "F", "swa": "S"}
    assert select_group(entries, "swa") == "S"
    assert select_group({"full": "F"}, "") == "F"
    assert select_group({"full": "F"}, "zz") == "F"
    with pytest.raises(KeyError, match=r"S1 group-select.*\['full', 'swa'\]"):
        select_group(entries, "zz")
    assert select_locs(entries, "full", "caller", prefer_caller=True) == "caller"
    assert select_locs(None, "full", "caller") == "caller"
    assert select_locs(entries, "full", "caller") == "F"


def _graph() -> GraphModel:
    return GraphModel(SPECS, max_bs=4, max_kernel_pages=4, kernel_page_size=2)


def test_graph_capture_reuses_buffers_and_replay_pads_dummy_rows() -> None:
    graph = _graph()
    tables2, locs2 = graph.capture(2, ["sliding_attention", "full_attention", "mamba"])
    tables3, locs3 = graph.capture(3, ["sliding_attention", "full_attention"])
    assert set(tables2) == {"sliding_attention", "full_attention"}
    for gid in tables2:
        assert tables2[gid].base is tables3[gid].base and locs2[gid].base is locs3[gid].base
        locs3[gid].base[:] = [99] * len(locs3[gid].base)
    graph.replay(3, TABLES, [5, 4, 1])
    assert locs3["sliding_attention"].contents() == [14, 13, 0]
    assert locs3["full_attention"].contents() == [6, 17, 0]
    assert graph.groups["full_attention"].locs[3:] == [99]
    assert tables3["full_attention"].contents() == [[1, 2, 3, -1], [4, 8, -1, -1], [0, 0, 0, 0]]


def test_graph_replay_leaves_rows_past_bs_untouched() -> None:
    graph = _graph()
    graph.replay(4, {g: t + [[9, -1, -1, -1], [10, -1, -1, -1]] for g, t in TABLES.items()}, [5, 4, 1, 1])
    graph.replay(2, TABLES, [5, 4])
    assert graph.groups["full_attention"].table[2:] == [[9, -1, -1, -1], [10, -1, -1, -1]]


def test_graph_replay_expands_to_kernel_pages_with_tail_pad_0() -> None:
    specs = (GroupSpec("full_attention", "full", 128),)
    graph = GraphModel(specs, max_bs=2, max_kernel_pages=6, kernel_page_size=64, tail_pad=0)
    graph.replay(2, {"full_attention": [[3, 5], [0, -1]]}, [129, 1], actual_bs=1)
    assert graph.groups["full_attention"].table == [[6, 7, 10, 11, 0, 0], [0] * 6]
    assert graph.groups["full_attention"].locs == [640, 0]


def test_graph_stale_guard_refuses_before_writing() -> None:
    graph = _graph()
    graph.replay(2, TABLES, [5, 4])
    before = [list(row) for row in graph.groups["full_attention"].table]
    with pytest.raises(ContractViolation, match=r"\[G5 stale-guard\].*stale page tables"):
        graph.replay(2, None, [5, 4])
    with pytest.raises(ContractViolation, match=r"missing captured groups \['sliding_attention'\]"):
        graph.replay(2, {"full_attention": FULL}, [5, 4])
    with pytest.raises(ContractViolation, match=r"uncaptured groups \['extra'\]"):
        graph.replay(2, dict(TABLES, extra=FULL), [5, 4])
    assert graph.groups["full_attention"].table == before


def test_graph_replay_reports_a_stale_seq_len_past_the_row() -> None:
    graph = _graph()
    with pytest.raises(ContractViolation, match=r"\[T4 live-pages\] group 'full_attention' row 1"):
        graph.replay(2, TABLES, [5, 6])


def test_graph_capture_limits() -> None:
    graph = _graph()
    with pytest.raises(ContractViolation, match=r"\[G2 capture-views\]"):
        graph.capture(5, ["full_attention"])
    with pytest.raises(ContractViolation, match=r"\[G2 capture-views\].*spec_n"):
        graph.capture(2, ["full_attention"], tokens_per_req=2)
    assert graph.capture(2, ["mamba"]) == (None, None)


def test_t7_catches_a_shared_prefix_page_repeated_in_one_row() -> None:
    specs = (GroupSpec("full", "full", 64),)
    err = _violation({"full": [[1, 2, -1], [1, 1, 5]]}, Batch((65, 129)), specs=specs)
    assert (err.clause_id, err.row, err.col) == ("T7", 1, 1)


def test_actual_bs_past_bs_is_a_lengths_breach() -> None:
    with pytest.raises(ContractViolation, match=r"\[T9 lengths\].*actual_bs 3 outside \[0, 2\]"):
        verify_locs([[1], [2]], [1, 1], 2, 1, actual_bs=3)


def test_lone_functions_refuse_a_zero_column_table_as_t1() -> None:
    with pytest.raises(ContractViolation, match=r"\[T1 table-shape\].*no columns"):
        decode_locs([[]], [1], 2)


def test_graph_refuses_a_live_seq_len_0_before_writing() -> None:
    graph = _graph()
    graph.replay(2, TABLES, [5, 4])
    before = [list(graph.groups[g].locs) for g in TABLES]
    with pytest.raises(ContractViolation, match=r"\[T9 lengths\] row 1: live row has seq_len 0"):
        graph.replay(2, TABLES, [5, 0])
    assert [graph.groups[g].locs for g in TABLES] == before


def test_graph_refuses_a_live_verify_row_shorter_than_n_but_clamps_dummy_rows() -> None:
    graph = GraphModel(SPECS, max_bs=4, max_kernel_pages=4, kernel_page_size=2, spec_n=3)
    with pytest.raises(ContractViolation, match=r"\[W2 verify-loc\] row 1: live row has seq_len 2 < N=3"):
        graph.replay(2, TABLES, [5, 2], 3)
    graph.replay(2, TABLES, [5, 1], 3, actual_bs=1)  # row 1 is a dummy row: positions 0, 0, 0 of page 0
    assert graph.groups["full_attention"].locs == [4, 5, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0]


def test_graph_short_rows_sink_sends_negative_positions_to_slot_0_of_page_0() -> None:
    graph = GraphModel(SPECS, max_bs=4, max_kernel_pages=4, kernel_page_size=2, spec_n=3, short_rows="sink")
    graph.replay(2, TABLES, [5, 2], 3)  # row 1 positions -1, 0, 1: sink, then slots 8, 9 of page 4
    assert graph.groups["full_attention"].locs[:6] == [4, 5, 6, 0, 8, 9]
    graph.replay(2, TABLES, [0, 4], 1)  # row 0 position -1
    assert graph.groups["full_attention"].locs[:2] == [0, 17]


def test_graph_short_rows_clamp_rewrites_position_0_like_tokenspeed() -> None:
    graph = GraphModel(SPECS, max_bs=4, max_kernel_pages=4, kernel_page_size=2, spec_n=3, short_rows="clamp")
    graph.replay(2, TABLES, [5, 2], 3)  # row 1 positions 0, 0, 1 of page 4
    assert graph.groups["full_attention"].locs[:6] == [4, 5, 6, 8, 8, 9]
    with pytest.raises(ValueError, match="short_rows is one of"):
        GraphModel(SPECS, max_bs=4, max_kernel_pages=4, kernel_page_size=2, short_rows="skip")


def test_graph_replay_clauses_each_have_their_own_function() -> None:
    graph = _graph()
    live = graph.stale_guard(2, TABLES)  # G5
    staged = graph.replay_fill(live, 3, actual_bs=2)  # G3: rows [:bs] after replay, nothing written yet
    assert staged["full_attention"] == [[1, 2, 3, -1], [4, 8, -1, -1], [0, 0, 0, 0]]
    locs = graph.replay_locs(staged, [5, 4, 1], 3, 1, {gid: 2 for gid in staged})  # G4
    assert locs == {"full_attention": [6, 17, 0], "sliding_attention": [14, 13, 0]}
    assert graph.groups["full_attention"].table[0] == [0, 0, 0, 0]


def test_graph_replay_refuses_a_negative_actual_bs_and_boolean_sizes() -> None:
    graph = _graph()
    with pytest.raises(ContractViolation, match=r"\[T9 lengths\].*actual_bs -1 outside"):
        graph.replay(2, TABLES, [5, 4], actual_bs=-1)
    with pytest.raises(ContractViolation, match=r"\[G3 replay-fill\].*bs True"):
        graph.replay(True, TABLES, [5])
    with pytest.raises(ContractViolation, match=r"\[G1 graph-init\]"):
        GraphModel(SPECS, max_bs=True, max_kernel_pages=4, kernel_page_size=2)


LONE_CALLS = [
    ("decode", lambda table, ps: decode_locs(table, [5, 4], ps)),
    ("verify", lambda table, ps: verify_locs(table, [5, 4], ps, 2)),
    ("reanchor", lambda table, ps: reanchor_locs(table, [5, 4], ps, 2)),
    ("extend", lambda table, ps: extend_locs(table, [2, 0], [3, 2], ps)),
]


@pytest.mark.parametrize("page_size", [0, -2, True, 2.0])
@pytest.mark.parametrize(("mode", "call"), LONE_CALLS, ids=[m for m, _ in LONE_CALLS])
def test_every_lone_call_refuses_a_page_size_below_1_as_e1(mode, call, page_size) -> None:
    with pytest.raises(ContractViolation, match=r"\[E1 page-ratio\] group 'table': page size must be a positive"):
        call(FULL, page_size)


def test_booleans_are_not_token_counts_or_lengths() -> None:
    with pytest.raises(ContractViolation, match=r"\[W2 verify-loc\].*got True"):
        verify_locs(FULL, [5, 4], 2, True)
    with pytest.raises(ContractViolation, match=r"\[W4 reanchor-loc\].*got True"):
        reanchor_locs(FULL, [5, 4], 2, True)
    with pytest.raises(ContractViolation, match=r"\[T9 lengths\] row 1: lengths are ints, got seq_len True"):
        decode_locs(FULL, [5, True], 2)
    with pytest.raises(ContractViolation, match=r"\[E1 page-ratio\]"):
        page_ratio(True, 1)


def test_a_lone_verify_call_checks_its_dummy_rows_like_a_batch() -> None:
    with pytest.raises(ContractViolation, match=r"\[T2 dummy-row\] group 'table' row 1 col 0: dummy row holds 5"):
        verify_locs([[11, 12], [5, 0]], [65, 1], 64, 4, actual_bs=1)


def test_a_lone_call_accepts_either_tail_pad_and_reads_page_0_as_a_dummy_row() -> None:
    assert decode_locs([[0, 5, 7, 0]], [5], 2) == decode_locs([[0, 5, 7, -1]], [5], 2) == [14]
    assert decode_locs([[3, 5], [0, 0]], [3, 1], 2) == [10, 0]  # row 1 writes the sink
    with pytest.raises(ContractViolation, match=r"\[T4 live-pages\] group 'table' row 0 col 1"):
        decode_locs([[3, -1]], [3], 2)


def test_short_verify_rows_clamp_or_sink_where_an_engine_does() -> None:
    table = [[11, 12], [13, -1]]
    assert verify_locs(table, [65, 3], 64, 4, short_rows="clamp") == [765, 766, 767, 768, 832, 832, 833, 834]
    assert verify_locs(table, [65, 3], 64, 4, short_rows="sink") == [765, 766, 767, 768, 0, 832, 833, 834]


def test_expand_table_refuses_what_impl_refuses() -> None:
    with pytest.raises(ContractViolation, match=r"\[T9 lengths\].*actual_bs 3 outside \[0, 2\]"):
        expand_table([[1], [2]], 2, actual_bs=3)
    with pytest.raises(ContractViolation, match=r"\[T3 tail-pad\].*got 5"):
        expand_table([[1], [2]], 2, tail_pad=5)
    with pytest.raises(ContractViolation, match=r"\[E1 page-ratio\].*got True"):
        expand_table([[1], [2]], True)


def test_t5_names_a_sliding_hole_after_a_real_page_and_t3_leaves_it_alone() -> None:
    spec = GroupSpec("sliding", "sliding", 2, window=2)
    table = [[5, 0, 7, -1]]  # the hole at col 1 is outside the window of seq_len 6 (reads from position 4)
    batch = Batch((6,))
    err = _violation({"sliding": table}, batch, specs=(spec,))
    assert (err.clause_id, err.row, err.col) == ("T5", 0, 1)
    check_tail_pad(table, batch, spec, -1)  # no T3: the hole is T5's
    with pytest.raises(ContractViolation, match=r"\[T3 tail-pad\] group 'sliding' row 0 col 2"):
        check_tail_pad([[5, -1, 7, -1]], batch, spec, -1)
