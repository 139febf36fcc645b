"""impl/ in torch on the CPU: hand-derived vectors, graph buffers, every cheap ContractViolation, and
equality with the pure-Python reference on the strategies' valid batches."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import fields

import pytest
import torch
from hand_vectors import FULL, SLIDING, SPECS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvtable import ContractViolation, StaleGraphState
from kvtable.backends.protocol import Backend, GraphRunner
from kvtable.backends.torch_backend import TorchBackend
from kvtable.impl import (
    TORCH_KERNELS,
    GroupGraphBuffers,
    StackedTorchKernels,
    TorchKernels,
    check_write_locs,
    decode_locs,
    expand_table,
    extend_group_locs,
    extend_locs,
    group_locs,
    group_seq_locs,
    reanchor_locs,
    triton_kernels,
    verify_locs,
)
from kvtable.reference import Batch, GraphModel, GroupSpec, batch_locs
from kvtable.reference import check_write_locs as ref_check_write_locs
from kvtable.reference import expand_table as ref_expand_table
from kvtable.reference.model import write_positions
from kvtable.strategies import Case, as_tensor, cases
from kvtable.strategies.graph import GraphSetup, graph_setups, replays


def i32(values: object) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int32)


KERNELS = [TORCH_KERNELS, StackedTorchKernels(),
           *([triton_kernels.TRITON_KERNELS] if triton_kernels.interpreting() else [])]
"""The torch kernels both ways (grouped paths, and every call stacked: impl/routes.py), and Triton's."""
"""The kernels a CPU graph runner can use: the torch ones, and the Triton ones when they run interpreted."""


def tables() -> dict[str, torch.Tensor]:
    return {"sliding_attention": i32(SLIDING), "full_attention": i32(FULL), "mamba": i32([[0, 9], [0, 9]])}


# Hand-derived vectors -------------------------------------------------------------------------------------
def test_decode_vectors() -> None:
    """Page size 2, seq [5, 4]: position 4 is col 2 offset 0, position 3 is col 1 offset 1."""
    got_sliding = decode_locs(i32(SLIDING), i32([5, 4]), 2)
    assert got_sliding.dtype == torch.int32 and got_sliding.tolist() == [14, 13]  # 7*2+0, 6*2+1
    assert decode_locs(i32(FULL), i32([5, 4]), 2).tolist() == [6, 17]  # 3*2+0, 8*2+1


def test_extend_vector() -> None:
    """prefix [2, 0], extend [3, 2]: row 0 writes 2, 3, 4 (pages 2, 2, 3), row 1 writes 0, 1 (page 4)."""
    got = extend_locs(i32(FULL), [2, 0], [3, 2], 2)
    assert got.dtype == torch.int32 and got.tolist() == [4, 5, 6, 8, 9]


def test_verify_is_token_major_and_padded_rows_clamp() -> None:
    table = i32([[11, 12], [0, 0]])
    assert verify_locs(table, i32([65, 1]), 64, 4, actual_bs=1).tolist() == [765, 766, 767, 768, 0, 0, 0, 0]


def test_reanchor_vector_and_clamp() -> None:
    assert reanchor_locs(i32([[7, 8, 9]]), i32([6]), 2, 4).tolist() == [16, 17, 18, 19]
    assert reanchor_locs(i32([[7, 8, 9]]), i32([2]), 2, 4).tolist() == [14, 14, 14, 15]


def test_group_locs_all_modes_shed_state_groups() -> None:
    got = group_locs(SPECS, tables(), Batch((5, 4)))
    assert {g: t.tolist() for g, t in got.items()} == {"sliding_attention": [14, 13], "full_attention": [6, 17]}
    got = group_locs(SPECS, tables(), Batch.extend([2, 0], [3, 2]), debug=False)
    assert got["full_attention"].tolist() == [4, 5, 6, 8, 9]
    got = group_locs(SPECS, tables(), Batch((5, 4), mode="verify", n=2))
    assert got["full_attention"].tolist() == [5, 6, 16, 17]
    got = group_locs(SPECS, tables(), Batch((5, 4), mode="reanchor", n=2))
    assert got["sliding_attention"].tolist() == [11, 14, 12, 13]


def test_group_locs_each_group_at_its_own_granularity() -> None:
    specs = [GroupSpec("small", "full", 2), GroupSpec("large", "full", 4)]
    live = {"small": i32([[1, 2, 3]]), "large": i32([[6, 7]])}
    got = group_locs(specs, live, Batch((5,)))
    assert got["small"].tolist() == [6] and got["large"].tolist() == [28]
    live = {"small": i32([[10, 11, 12]]), "large": i32([[20, 21]])}
    got = group_locs(specs, live, Batch.extend([3], [3]))
    assert got["small"].tolist() == [23, 24, 25] and got["large"].tolist() == [83, 84, 85]


def test_device_paths_never_read_a_device_tensor_back() -> None:
    """On the ``meta`` device every host read (``.item()``, ``.tolist()``, ``bool()``) raises, so running
    the device-resident paths there proves they need no host-device sync."""
    meta = "meta"
    specs = [GroupSpec("s", "sliding", 2, window=2), GroupSpec("f", "full", 4), GroupSpec("st", "state", 1)]
    live = {"s": torch.empty(3, 5, dtype=torch.int32, device=meta),
            "f": torch.empty(2, 3, dtype=torch.int32, device=meta)}
    seq = torch.empty(2, dtype=torch.int32, device=meta)
    got = group_seq_locs(specs, live, seq, 2, mode="verify", actual_bs=1)
    assert {g: (tuple(t.shape), t.device.type) for g, t in got.items()} == {"f": ((4,), meta), "s": ((4,), meta)}
    with pytest.raises(ContractViolation, match="T1.*meta"):  # the debug check must read page ids back
        group_seq_locs(specs, live, seq, debug=True)
    assert extend_group_locs(live, {"s": 2, "f": 4}, [1, 2], [2, 3])["f"].shape == (5,)
    assert expand_table(live["f"], 2, max_kernel_pages=7, actual_bs=1).shape == (2, 7)
    runner = GroupGraphBuffers(specs, max_bs=4, max_kernel_pages=6, kernel_page_size=2, spec_n=2, device=meta)
    runner.replay(3, live, torch.empty(3, dtype=torch.int32, device=meta), 2, actual_bs=2)
    assert runner.loc_buffers["s"].device.type == meta


def test_sinks_pads_and_columns_past_width_to_page_0() -> None:
    """Sinks, never out-of-bounds reads: a pad entry and a column past the width both land in page 0."""
    table = i32([[5, -1]])
    assert TORCH_KERNELS.name == "torch"
    out = torch.full((1, 4), -7, dtype=torch.int32)
    TORCH_KERNELS.stacked_locs(table[None], i32([2]), i32([4]), i32([7]), out, 1, 2)
    assert out.tolist() == [[1, 2, -7, -7]]  # positions 5, 6 sit on the pad: offsets 1, 2 of page 0
    TORCH_KERNELS.stacked_locs(table[None], i32([1]), i32([4]), i32([3]), out, 1, 1)
    assert out.tolist() == [[22, 2, -7, -7]]  # position 2: col 0, page 5; out[1:] untouched
    TORCH_KERNELS.stacked_locs(table[None], i32([1]), i32([4]), i32([7]), out, 1, 1)
    assert out.tolist() == [[2, 2, -7, -7]]  # position 6: col 1 is past width 1, so page 0


def test_expand_holes_and_pads_stay_and_dummy_rows_zero() -> None:
    table = i32([[3, 5, -1], [0, -1, -1]])
    assert expand_table(table, 2, max_kernel_pages=6).tolist() == [[6, 7, 10, 11, -1, -1], [0, 0, -1, -1, -1, -1]]
    got = expand_table(table, 2, max_kernel_pages=8, tail_pad=0, actual_bs=1)
    assert got.tolist() == [[6, 7, 10, 11, -1, -1, 0, 0], [0] * 8]
    out = torch.full((3, 10), 99, dtype=torch.int32)
    view = expand_table(table, 3, out=out)
    assert view.data_ptr() == out.data_ptr() and view.shape == (2, 9)
    assert out[:, 9].tolist() == [99, 99, 99] and out[2].tolist() == [99] * 10


# Graph buffers ---------------------------------------------------------------------------------------------
GRAPH_SPECS = (GroupSpec("sliding_attention", "sliding", 2, window=2), GroupSpec("full_attention", "full", 2),
               GroupSpec("mamba", "state", 1))


def graph(**kw: object) -> GroupGraphBuffers:
    args = {"max_bs": 4, "max_kernel_pages": 4, "kernel_page_size": 2} | kw
    return GroupGraphBuffers(GRAPH_SPECS, **args)  # type: ignore[arg-type]


def test_graph_init_layout() -> None:
    specs = [GroupSpec("b", "full", 4), GroupSpec("a", "sliding", 2, window=3), GroupSpec("s", "state", 1)]
    runner = GroupGraphBuffers(specs, max_bs=3, max_kernel_pages=5, kernel_page_size=2, spec_n=2)
    assert runner.group_ids == ("a", "b")
    assert runner.ratios == {"a": 1, "b": 2} and runner.page_sizes == {"a": 2, "b": 2}
    assert runner.widths == {"a": 5, "b": 6}  # ceil(5*2/2)*1, ceil(5*2/4)*2
    assert runner.table_stack.shape == (2, 3, 6) and runner.loc_stack.shape == (2, 6)
    assert runner.table_buffers["a"].shape == (3, 5) and runner.loc_buffers["b"].shape == (6,)
    assert not runner.table_stack.any() and runner.table_stack.dtype == torch.int32
    flat = GroupGraphBuffers(specs, max_bs=3, max_kernel_pages=5, kernel_page_size=2, expand=False)
    assert flat.ratios == {"a": 1, "b": 1} and flat.page_sizes == {"a": 2, "b": 4}
    assert flat.widths == {"a": 5, "b": 3}


def test_capture_reuses_pointers_across_batch_sizes() -> None:
    runner = graph()
    t2, l2 = runner.capture(2, ["sliding_attention", "full_attention", "mamba"])
    t3, l3 = runner.capture(3, ["sliding_attention", "full_attention"])
    assert set(l2) == {"sliding_attention", "full_attention"}
    assert l2["full_attention"].shape == (2,) and l3["full_attention"].shape == (3,)
    assert t3["sliding_attention"].shape == (3, 4)
    for gid in l2:
        assert l2[gid].data_ptr() == l3[gid].data_ptr() == runner.loc_buffers[gid].data_ptr()
        assert t2[gid].data_ptr() == t3[gid].data_ptr() == runner.table_buffers[gid].data_ptr()
    assert runner.capture(2, []) == (None, None)
    assert runner.capture(2, ["mamba"]) == (None, None)


def test_replay_with_a_dummy_row_leaves_rows_past_bs_untouched() -> None:
    runner = graph()
    runner.table_stack.fill_(99)
    runner.loc_stack.fill_(99)
    _, locs = runner.capture(3, ["sliding_attention", "full_attention"])
    live = {"sliding_attention": i32(SLIDING + [[0] * 4]), "full_attention": i32(FULL + [[0] * 4]),
            "mamba": i32([[1], [2], [3]])}
    runner.replay(3, live, i32([5, 4, 1]))
    assert locs["sliding_attention"].tolist() == [14, 13, 0]
    assert locs["full_attention"].tolist() == [6, 17, 0]
    assert runner.loc_buffers["full_attention"][3:].tolist() == [99]
    assert runner.table_buffers["full_attention"][:3].tolist() == FULL + [[0] * 4]
    assert runner.table_buffers["full_attention"][3].tolist() == [99] * 4


def test_replay_pads_missing_rows_and_tail_columns() -> None:
    """Unpadded tables (2 rows for bs 3): row 2 becomes a dummy row; narrow tables take the tail pad."""
    for tail in (-1, 0):
        runner = graph(tail_pad=tail, spec_n=2)
        runner.replay(3, {"sliding_attention": i32([[0, 5], [0, 6]]), "full_attention": i32([[1, 2], [4, 8]])},
                      i32([4, 3, 1]), 2)
        assert runner.table_buffers["full_attention"][:3].tolist() == [[1, 2, tail, tail], [4, 8, tail, tail],
                                                                     [0] * 4]
        assert runner.loc_buffers["full_attention"][:6].tolist() == [4, 5, 9, 16, 0, 0]


def test_replay_with_actual_bs_and_unequal_row_counts_matches_the_model() -> None:
    specs = [GroupSpec("f", "full", 4), GroupSpec("g", "full", 2)]
    live = {"f": [[3, 5], [7, 9], [11, -1]], "g": [[2, 4, 6]]}
    model = GraphModel(specs, max_bs=4, max_kernel_pages=6, kernel_page_size=2, spec_n=2)
    runner = GroupGraphBuffers(specs, max_bs=4, max_kernel_pages=6, kernel_page_size=2, spec_n=2)
    for actual in (None, 2, 0):
        model.replay(3, live, [5, 2, 2], 2, actual_bs=actual)
        runner.replay(3, {g: i32(t) for g, t in live.items()}, i32([5, 2, 2]), 2, actual_bs=actual)
        assert_same_graph(model, runner)


def assert_same_graph(model: GraphModel, runner: GroupGraphBuffers) -> None:
    for gid, buffers in model.groups.items():
        assert runner.table_buffers[gid].tolist() == buffers.table, gid
        assert runner.loc_buffers[gid].tolist() == buffers.locs, gid


def test_stale_guard_refuses_before_any_write() -> None:
    runner = graph()
    runner.table_stack.fill_(42)
    full = i32(FULL)
    cases = [
        (None, "missing or empty"),
        ({}, "missing or empty"),
        ({"mamba": full}, "missing captured groups"),
        ({"full_attention": full}, r"missing captured groups \['sliding_attention'\]"),
        ({"full_attention": full, "sliding_attention": full, "other": full}, r"uncaptured groups \['other'\]"),
        ({"full_attention": full, "sliding_attention": i32([[]])}, "empty table"),
    ]
    for live, message in cases:
        with pytest.raises(StaleGraphState, match=message) as err:
            runner.replay(2, live, i32([5, 4]))
        assert err.value.clause_id == "G5"
    assert bool((runner.table_stack == 42).all()) and not runner.loc_stack.any()
    empty = GroupGraphBuffers([GroupSpec("s", "state", 1)], max_bs=2, max_kernel_pages=2, kernel_page_size=1)
    with pytest.raises(StaleGraphState, match="published no cache groups"):
        empty.replay(1, {"s": full}, i32([1]))


# Cheap ContractViolations --------------------------------------------------------------------------------
CHEAP_CASES = [
    ("T1", lambda: decode_locs(FULL, i32([5, 4]), 2)),  # type: ignore[arg-type]
    ("T1", lambda: decode_locs(i32(FULL).long(), i32([5, 4]), 2)),
    ("T1", lambda: decode_locs(i32([1, 2]), i32([5, 4]), 2)),
    ("T1", lambda: decode_locs(i32(FULL)[:1], i32([5, 4]), 2)),
    ("T1", lambda: decode_locs(torch.zeros(2, 0, dtype=torch.int32), i32([1, 1]), 2)),
    ("T1", lambda: group_locs(SPECS, {"full_attention": i32(FULL)}, Batch((5, 4)))),
    ("T1", lambda: group_locs(SPECS, tables() | {"other": i32(FULL)}, Batch((5, 4)))),
    ("E1", lambda: decode_locs(i32(FULL), i32([5, 4]), 0)),
    ("E1", lambda: expand_table(i32(FULL), 0)),
    ("E1", lambda: GroupGraphBuffers([GroupSpec("f", "full", 3)], max_bs=2, max_kernel_pages=2,
                                     kernel_page_size=2)),
    ("W2", lambda: verify_locs(i32(FULL), i32([5, 4]), 2, 0)),
    ("W4", lambda: reanchor_locs(i32(FULL), i32([5, 4]), 2, 0)),
    ("W2", lambda: verify_locs(i32(FULL), i32([5, 3]), 2, 4)),
    ("W2", lambda: group_locs(SPECS, tables(), Batch((5, 3), mode="verify", n=4))),
    ("T9", lambda: decode_locs(i32(FULL), i32([5, 0]), 2)),
    ("T9", lambda: decode_locs(i32(FULL), torch.tensor([5.0, 4.0]), 2)),
    ("T9", lambda: verify_locs(i32(FULL), i32([5, 4]), 2, 2, actual_bs=3)),
    ("T9", lambda: extend_locs(i32(FULL), [-1, 0], [3, 2], 2)),
    ("T9", lambda: extend_locs(i32(FULL), [2, 0], [3, -2], 2)),
    ("T9", lambda: extend_locs(i32(FULL), [2], [3, 2], 2)),
    ("T9", lambda: reanchor_locs(i32(FULL), i32([0, 4]), 2, 2)),
    ("T8", lambda: decode_locs(i32(FULL), i32([5, 9]), 2)),
    ("T8", lambda: extend_locs(i32(FULL), [2, 8], [3, 1], 2)),
    ("T8", lambda: group_locs([GroupSpec("f", "full", 1)], {"f": i32(FULL)}, Batch((5, 4)))),
    ("E2", lambda: expand_table(i32(FULL), 2, max_kernel_pages=-1)),
    ("E2", lambda: expand_table(i32(FULL), 2, out=torch.zeros(2, 7, dtype=torch.int32))),
    ("G1", lambda: graph(max_bs=0)),
    ("T3", lambda: graph(tail_pad=5)),
    ("G2", lambda: graph().capture(5, ["full_attention"])),
    ("G2", lambda: graph().capture(2, ["full_attention"], 2)),
    ("G2", lambda: graph().capture(2, ["nope"])),
    ("G3", lambda: graph().replay(5, tables(), i32([1] * 5))),
    ("G4", lambda: graph().replay(3, tables(), i32([5, 4]))),
    ("T1", lambda: graph().replay(2, tables() | {"full_attention": i32(FULL).long()}, i32([5, 4]))),
    ("T8", lambda: graph().replay(2, tables(), i32([9, 4]))),
    ("T4", lambda: graph().replay(2, {"sliding_attention": i32([[0, 5], [0, 6]]),
                                      "full_attention": i32([[1, 2], [4, 8]])}, i32([5, 4]))),
]


@pytest.mark.parametrize(("clause", "call"), CHEAP_CASES)
def test_cheap_checks_name_the_clause(clause: str, call) -> None:
    with pytest.raises(ContractViolation) as err:
        call()
    assert err.value.clause_id == clause, str(err.value)


def test_extend_that_writes_nothing_needs_no_columns() -> None:
    """Unlike upstream's bound check, a row with extend 0 reads no column, however long its prefix."""
    assert extend_locs(i32(FULL), [2, 30], [3, 0], 2).tolist() == [4, 5, 6]


def test_debug_mode_runs_the_full_contract(monkeypatch: pytest.MonkeyPatch) -> None:
    """A full row with a hole in its live length passes the cheap checks; debug mode names T4."""
    holed = {"full_attention": i32([[1, 0, 3, -1], [4, 8, -1, -1]]), "sliding_attention": i32(SLIDING)}
    assert group_locs(SPECS, holed, Batch((5, 4)))["full_attention"].tolist() == [6, 17]
    with pytest.raises(ContractViolation, match=r"\[T4 live-pages\] group 'full_attention' row 0 col 1"):
        group_locs(SPECS, holed, Batch((5, 4)), debug=True)
    monkeypatch.setenv("KVTABLE_DEBUG", "1")
    with pytest.raises(ContractViolation, match="T4"):
        group_locs(SPECS, holed, Batch((5, 4)))
    with pytest.raises(ContractViolation, match="T4"):
        TorchBackend().group_locs(SPECS, holed, Batch((5, 4)))
    assert group_locs(SPECS, holed, Batch((5, 4)), debug=False)["full_attention"].tolist() == [6, 17]
    assert group_locs(SPECS, tables(), Batch((5, 4)))["full_attention"].tolist() == [6, 17]
    with pytest.raises(ContractViolation, match=r"\[T2 dummy-row\] group 'table' row 1"):
        verify_locs(i32(FULL), i32([5, 1]), 2, 2, actual_bs=1)


def test_debug_mode_runs_the_length_checks_too() -> None:
    with pytest.raises(ContractViolation, match="T8"):
        decode_locs(i32(FULL), i32([5, 9]), 2, debug=True)


# The strong write checker ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("bad", "clause", "row"), [
    ([1, 17], "D1", 0),      # page 0
    ([6, 7], "D1", 1),       # row 0's page 3 written by row 1
    ([7, 17], "D1", 0),      # offset 1 of its own page, expected 0
    ([6, 6], "D1", 1),       # slot 6 is page 3, not row 1's page 8
    ([6, 17, 1], "D1", None),  # count
])
def test_checker_agrees_with_the_reference(bad: list[int], clause: str, row: int | None) -> None:
    batch = Batch((5, 4))
    assert_same_verdict(FULL, bad, batch, 2)
    with pytest.raises(ContractViolation) as err:
        check_write_locs(i32(FULL), i32(bad), batch, 2, group="full")
    assert err.value.clause_id == clause and err.value.row == row


def test_checker_duplicate_slot_is_d2() -> None:
    batch = Batch.extend([0, 0], [2, 2])
    table = [[3, -1], [4, -1]]
    check_write_locs(i32(table), i32([6, 7, 8, 9]), batch, 2)
    bad = [6, 7, 8, 8]
    assert_same_verdict(table, bad, batch, 2)
    with pytest.raises(ContractViolation, match=r"\[D1") as err:
        check_write_locs(i32(table), i32(bad), batch, 2)
    assert err.value.row == 1
    shared = [[3, 4], [3, 5]]
    dup_batch = Batch.extend([1, 1], [1, 1])
    assert_same_verdict(shared, [7, 7], dup_batch, 2)
    with pytest.raises(ContractViolation, match=r"\[D2 unique-slots\] row 1 col 0: location 7 written by row 0"):
        check_write_locs(i32(shared), i32([7, 7]), dup_batch, 2)


def assert_same_verdict(table: list[list[int]], locs: list[int], batch: Batch, ps: int) -> None:
    """The torch checker raises exactly the reference checker's error (clause, place and message)."""
    try:
        ref_check_write_locs(table, locs, batch, ps, group="g")
    except ContractViolation as expected:
        with pytest.raises(ContractViolation) as err:
            check_write_locs(i32(table), i32(locs), batch, ps, group="g")
        assert str(err.value) == str(expected)
    else:
        check_write_locs(i32(table), i32(locs), batch, ps, group="g")


# The strategies' valid batches against the reference ------------------------------------------------------
DRAWN = settings(max_examples=40, database=None, deadline=None, derandomize=True,
                 suppress_health_check=[HealthCheck.too_slow])
"""The project's strategies, derandomized: the same examples on every run, as the seeds before gave."""


@DRAWN
@given(cases(), st.data())
def test_drawn_batches_match_the_reference(case: Case, data: st.DataObject) -> None:
    """``group_locs`` (debug mode), the lone-table calls and the expansion equal the reference's values."""
    batch, by_id, live = case.batch, {s.group_id: s for s in case.specs}, case.tensors()
    got = group_locs(list(case.specs), live, batch, debug=True, tail_pad=case.tail_pad)
    want = {g: batch_locs(t, batch, by_id[g].block_granularity) for g, t in case.tables.items()
            if not by_id[g].is_state}
    assert {g: t.tolist() for g, t in got.items()} == want
    assert all(t.dtype == torch.int32 for t in got.values())
    # the lone calls check the default pad -1 only; reanchor_locs has no notion of dummy rows (W4: every row
    # re-anchors), so the debug check would rightly see their writes to page 0
    backend = TorchBackend(debug=case.tail_pad == -1 and (batch.mode != "reanchor" or batch.actual_bs is None))
    first = case.attention[0]
    table, ps = live[first.group_id], first.block_granularity
    seq = i32(list(batch.seq_lens))
    if batch.mode == "extend":
        assert batch.prefix_lens is not None
        extend = [s - p for s, p in zip(batch.seq_lens, batch.prefix_lens, strict=True)]
        lone = backend.extend_locs(table, batch.prefix_lens, extend, ps)
    elif batch.mode == "decode":
        lone = backend.decode_locs(table, seq, ps, actual_bs=batch.actual_bs)
    elif batch.mode == "verify":
        lone = backend.verify_locs(table, seq, ps, batch.n, actual_bs=batch.actual_bs)
    else:
        lone = backend.reanchor_locs(table, seq, ps, batch.n)
    assert lone.tolist() == want[first.group_id]
    for gid, plain in case.tables.items():
        ratio, cols, actual = data.draw(st.tuples(st.integers(1, 3), st.integers(0, 12), st.integers(0, batch.bs)))
        # W5: a block whose sub-pages pass int32 expands to holes (SPEC W5; tests/unit/test_int32_wrap.py)
        sunk = [[0 if p > 0 and (p + 1) * ratio > 2**31 else p for p in row] for row in plain]
        assert backend.expand_table(live[gid], ratio, max_kernel_pages=cols, actual_bs=actual).tolist() == \
            ref_expand_table(sunk, ratio, max_kernel_pages=cols, actual_bs=actual)


@settings(DRAWN, max_examples=20)
@given(graph_setups(), st.data())
def test_drawn_graph_replays_match_the_model(setup: GraphSetup, data: st.DataObject) -> None:
    """Up to three replays on fresh runners equal the reference model's, tables apart or in one pool."""
    kw = {f.name: getattr(setup, f.name) for f in fields(setup) if f.name != "specs"}
    model = GraphModel(setup.specs, **kw)
    runner, pool_runner = TorchBackend().graph(setup.specs, **kw), TorchBackend().graph(setup.specs, **kw)
    assert isinstance(runner, GraphRunner)
    for step in data.draw(st.lists(replays(setup), min_size=1, max_size=3)):
        seq, n = i32(list(step.seq_lens)), step.tokens_per_req
        model.replay(step.bs, step.tables, list(step.seq_lens), n, actual_bs=step.actual_bs)
        runner.replay(step.bs, {g: as_tensor(t) for g, t in step.tables.items()}, seq, n, actual_bs=step.actual_bs)
        assert_same_graph(model, runner)
        order = data.draw(st.permutations(sorted(step.tables)))
        gaps = data.draw(st.lists(st.integers(0, 3), min_size=len(order), max_size=len(order)))
        pool_runner.replay(step.bs, pooled(step.tables, order, gaps), seq, n, actual_bs=step.actual_bs)
        assert_same_graph(model, pool_runner)


def pooled(tables: Mapping[str, list[list[int]]], order: Sequence[str], gaps: Sequence[int]
           ) -> dict[str, torch.Tensor]:
    """The tables as row-major views of one int32 pool (as an engine allocating every group's table from one
    pool hands them over), in ``order`` with ``gaps`` of poison before each: replay reads them where they lie."""
    pool = torch.full((sum(len(t) * len(t[0]) for t in tables.values() if t) + sum(gaps),), 999, dtype=torch.int32)
    views, at = {}, 0
    for gid, gap in zip(order, gaps, strict=True):
        table = as_tensor(tables[gid])
        at += gap
        views[gid] = pool[at: at + table.numel()].view(table.shape)
        views[gid].copy_(table)
        at += table.numel()
    return views


@pytest.mark.parametrize("kernels", KERNELS, ids=[k.name for k in KERNELS])
def test_replay_reads_pooled_tables_in_place_and_never_its_own_stack(kernels: object) -> None:
    """Tables in one pool are read where they lie (the packed buffer stays untouched); tables that lie in the
    runner's own stack, where the fill writes, are packed first (the Triton fill, reading them in place,
    would read rows it already rewrote); both equal the reference model's replay."""
    specs = [GroupSpec("f", "full", 4), GroupSpec("g", "full", 2)]
    live = {"f": [[3, 5, -1], [7, 9, 11]], "g": [[2, 4, 6, 8, 10, -1], [12, 14, 16, 18, 20, 22]]}
    model = GraphModel(specs, max_bs=3, max_kernel_pages=6, kernel_page_size=2)
    model.replay(3, live, [8, 12, 1])
    runner = GroupGraphBuffers(specs, max_bs=3, max_kernel_pages=6, kernel_page_size=2, kernels=kernels)
    runner._packed.fill_(-5)
    runner.replay(3, pooled(live, ["g", "f"], [2, 1]), i32([8, 12, 1]))
    assert_same_graph(model, runner)
    assert runner._packed.eq(-5).all()
    # f's table over f's own row 0 of the stack (which the fill rewrites, expanded), g's over g's rows 0-1
    own = {"f": runner.table_stack[0, 0].view(2, 3), "g": runner.table_stack[1, :2]}
    assert own["f"].tolist() == [[6, 7, 10], [11, -1, -1]]
    snapshot = {gid: table.tolist() for gid, table in own.items()}
    runner.replay(2, own, i32([9, 4]))
    model.replay(2, snapshot, [9, 4])
    assert_same_graph(model, runner)


@DRAWN
@given(cases(modes=("decode", "verify", "extend"), tail_pads=(-1,)), st.data())
def test_drawn_checker_verdicts_match_the_reference(case: Case, data: st.DataObject) -> None:
    """The write checker's verdict equals the reference's on a batch's own locations and on one changed."""
    first, batch = case.attention[0], case.batch
    table, ps = case.tables[first.group_id], first.block_granularity
    locs = batch_locs(table, batch, ps)[: sum(len(write_positions(batch, r)) for r in range(batch.live_rows))]
    assert_same_verdict(table, locs, batch, ps)
    if not locs:
        return
    k = data.draw(st.integers(0, len(locs) - 1))
    for bad in (0, locs[k] + 1, locs[k] - 1, data.draw(st.sampled_from(locs)), data.draw(st.integers(0, 300 * ps))):
        assert_same_verdict(table, locs[:k] + [bad] + locs[k + 1:], batch, ps)


def test_backend_protocol() -> None:
    backend = TorchBackend()
    assert isinstance(backend, Backend) and backend.name == "torch" and backend.device == "cpu"
    assert backend.kernels is TORCH_KERNELS


def test_int32_boundary_and_debug_w5() -> None:
    """The last slot of page 2^23 - 1 at page size 256 is 2^31 - 1; one page further breaks W5."""
    top = 2**23 - 1
    assert decode_locs(i32([[top]]), i32([256]), 256, debug=True).tolist() == [2**31 - 1]
    with pytest.raises(ContractViolation, match=r"\[W5 int32-locs\]"):
        decode_locs(i32([[top + 1]]), i32([256]), 256, debug=True)


class DoubledKernels(TorchKernels):
    """Kernels that double every location: proves a subclass's kernels reach every behaviour."""

    name = "doubled"
    grouped_locs = None  # the optional fast path would bypass the stacked kernel this class changes

    def stacked_locs(self, tables, widths, page_sizes, seq_lens, out, bs, n) -> None:
        super().stacked_locs(tables, widths, page_sizes, seq_lens, out, bs, n)
        out[:, : bs * n] *= 2


def test_backend_is_subclassable_with_other_kernels() -> None:
    class Doubled(TorchBackend):
        name = "doubled"

        def __init__(self) -> None:
            super().__init__(kernels=DoubledKernels())

    backend = Doubled()
    assert backend.decode_locs(i32(FULL), i32([5, 4]), 2).tolist() == [12, 34]
    runner = backend.graph(GRAPH_SPECS, max_bs=2, max_kernel_pages=4, kernel_page_size=2)
    runner.replay(2, tables(), i32([5, 4]))
    assert runner.loc_buffers["full_attention"].tolist() == [12, 34]
