"""The edge strategies sit on their edges: the reference raises the clause each is labelled with, at the entry
it names, and accepts the valid ones; both sides agree on page sizes past 2^30 and on numpy lengths."""

from __future__ import annotations

import numpy
import pytest
import torch
from hypothesis import HealthCheck, given, settings

from kvtable import ContractViolation
from kvtable.conformance.kernel_model import sink_loc
from kvtable.conformance.properties import debug, group_locs, rejects
from kvtable.contract import Batch, GroupSpec
from kvtable.impl import CacheGroupsMixin
from kvtable.impl import decode_locs as impl_decode_locs
from kvtable.impl import extend_locs as impl_extend_locs
from kvtable.impl import group_locs as impl_group_locs
from kvtable.impl import reanchor_locs as impl_reanchor_locs
from kvtable.impl import verify_locs as impl_verify_locs
from kvtable.impl.graph import GroupGraphBuffers
from kvtable.reference import GraphModel, check_tables, decode_locs, extend_locs
from kvtable.strategies import Case
from kvtable.strategies.graph import GraphSetup

EDGE = settings(max_examples=40, deadline=None, database=None, suppress_health_check=list(HealthCheck))


def _reference_where(case: Case) -> tuple[str, str | None, int | None, int | None]:
    with pytest.raises(ContractViolation) as err:
        check_tables(case.specs, case.tables, case.batch, tail_pad=case.tail_pad)
    return err.value.clause_id, err.value.group, err.value.row, err.value.col


@EDGE
@given(rejects._window_start_mid_page())
def test_a_window_starting_mid_page_needs_its_first_column(edge: rejects.Edge) -> None:
    (gid, row, col), = edge.where
    assert _reference_where(edge.case) == ("T5", gid, row, col)
    spec = edge.case.spec(gid)
    first = edge.case.batch.seq_lens[row] - edge.case.batch.n
    assert (first - spec.window + 1) % spec.block_granularity != 0  # the window starts mid-page


@EDGE
@given(debug._hole_before_page_one())
def test_a_hole_before_page_one_is_valid(case: Case) -> None:
    check_tables(case.specs, case.tables, case.batch)
    assert case.tables["swa0"][0][0] == 0 and case.tables["swa0"][1][0] == 1


@EDGE
@given(rejects._w5_edge())
def test_the_w5_edge_is_the_last_legal_page(pair: tuple[Case, Case]) -> None:
    legal, over = pair
    check_tables(legal.specs, legal.tables, legal.batch)
    clause, gid, row, col = _reference_where(over)
    ps = over.spec("full0").block_granularity
    assert (clause, gid, row) == ("W5", "full0", 0)
    assert (over.tables["full0"][0][col] + 1) * ps == 2**31 + ps


@pytest.mark.parametrize("page_size", [2**30 + 1, 2**31, 2**40])
def test_both_sides_refuse_a_page_size_past_2_30_as_w5(page_size: int) -> None:
    with pytest.raises(ContractViolation, match=r"\[W5"):
        decode_locs([[1, -1]], [1], page_size)
    with pytest.raises(ContractViolation, match=r"\[W5"):
        impl_group_locs([GroupSpec("g", "full", page_size)], {"g": torch.tensor([[1, -1]], dtype=torch.int32)},
                        Batch((1,)))


def test_a_page_size_of_2_30_is_legal_on_both_sides() -> None:
    """Page 1 at page size 2^30 ends at slot 2^31 - 1 (kernel model only: the reference enumerates slots)."""
    got = impl_group_locs([GroupSpec("g", "full", 2**30)], {"g": torch.tensor([[1, -1]], dtype=torch.int32)},
                          Batch.extend((2**30 - 2,), (2,)))
    assert got["g"].tolist() == [2**31 - 2, 2**31 - 1]
    assert [sink_loc([1, -1], 2, 2**30, p) for p in (2**30 - 1, 2**30, 2**31 - 1)] == [2**31 - 1, 0, 2**30 - 1]


@pytest.mark.parametrize("kind", [numpy.int64, numpy.int32, numpy.int16])
def test_numpy_lengths_give_the_locations_of_python_ints(kind: type) -> None:
    table = [[3, 4, -1]]
    want = extend_locs(table, [1], [3], 2)
    assert want == [7, 8, 9]
    assert extend_locs(table, [kind(1)], [kind(3)], 2) == want
    assert impl_extend_locs(torch.tensor(table, dtype=torch.int32), [kind(1)], [kind(3)], 2).tolist() == want
    for call in (lambda: extend_locs(table, [1], [3.0], 2),
                 lambda: impl_extend_locs(torch.tensor(table, dtype=torch.int32), [1], [3.0], 2)):
        with pytest.raises(ContractViolation, match=r"\[T9"):
            call()


def test_lone_calls_check_page_sharing_and_w5_as_a_batch_does() -> None:
    """T7 (a written page in two rows) and W5 (a page past the int32 slots) need no family or pad: lone calls
    check them; impl's debug mode names the same entries."""
    cases = [([[3, -1], [3, -1]], [2, 2], 4, ("T7", 0, 0)), ([[2**30, -1]], [1], 2, ("W5", 0, 0))]
    for table, seq, ps, (clause, row, col) in cases:
        with pytest.raises(ContractViolation) as ref:
            decode_locs(table, seq, ps)
        with pytest.raises(ContractViolation) as impl:
            impl_decode_locs(torch.tensor(table, dtype=torch.int32), torch.tensor(seq, dtype=torch.int32), ps,
                             debug=True)
        assert (ref.value.clause_id, ref.value.row, ref.value.col) == (clause, row, col)
        assert (impl.value.clause_id, impl.value.row, impl.value.col) == (clause, row, col)


@pytest.mark.parametrize("bare", [3, numpy.int64(3)])
def test_both_sides_refuse_a_bare_number_for_a_length_mirror_as_t9(bare: object) -> None:
    table = [[3, 4, -1]]
    for call in (lambda: extend_locs(table, [1], bare, 2),
                 lambda: impl_extend_locs(torch.tensor(table, dtype=torch.int32), [1], bare, 2)):
        with pytest.raises(ContractViolation, match=r"\[T9 lengths\].*extend_lens are a sequence of ints"):
            call()


def test_lone_calls_refuse_cpu_lengths_outside_debug_mode() -> None:
    """T9, W2 and T8 on a CPU lengths tensor cost no sync: a lone call refuses them in any mode."""
    table = torch.tensor([[3, 4]], dtype=torch.int32)
    calls = [("T9", lambda: impl_decode_locs(table, torch.tensor([0]), 2, debug=False)),
             ("W2", lambda: impl_verify_locs(table, torch.tensor([1]), 2, 2, debug=False)),
             ("T8", lambda: impl_reanchor_locs(table, torch.tensor([5]), 2, 1, debug=False))]
    for clause, call in calls:
        with pytest.raises(ContractViolation, match=rf"\[{clause}"):
            call()


@EDGE
@given(rejects._tables_on_two_devices())
def test_the_two_device_case_is_valid_on_one_device(m: rejects.TwoDevices) -> None:
    check_tables(m.case.specs, m.case.tables, m.case.batch)
    tensors = m.case.tensors()
    impl_group_locs(list(m.case.specs), tensors, m.case.batch)
    tensors[m.moved] = tensors[m.moved].to("meta")
    with pytest.raises(ContractViolation, match=r"\[T1 .*share a device"):
        impl_group_locs(list(m.case.specs), tensors, m.case.batch)


@EDGE
@given(group_locs._idle_row_past_width())
def test_the_idle_row_lies_past_a_group_and_the_case_is_valid(case: Case) -> None:
    check_tables(case.specs, case.tables, case.batch)
    idle = case.extend_lens.index(0)
    reach = min(len(case.tables[s.group_id][0]) * s.block_granularity for s in case.specs)
    assert case.batch.prefix_lens[idle] > reach


@EDGE
@given(rejects._graph_sizes_below_one())
def test_graph_sizes_below_one_are_g1_on_both_sides(arg: tuple[GraphSetup, int]) -> None:
    setup, size = arg
    GraphModel(setup.specs, **setup.kwargs())
    for field in rejects._GRAPH_SIZES:
        for build in (GraphModel, GroupGraphBuffers):
            with pytest.raises(ContractViolation, match=r"\[G1"):
                build(setup.specs, **{**setup.kwargs(), field: size})


def test_the_mixin_reads_spec_num_tokens_0_as_one_token_and_has_no_default_sizes() -> None:
    """G1: ``spec_n = max(spec_num_tokens, 1)``; K and the page budget have no default (E1 needs a real K)."""

    class Backend(CacheGroupsMixin):
        max_num_pages = 2

    backend = Backend()
    backend.learn_cache_groups([GroupSpec("f", "full", 2)])
    with pytest.raises(AttributeError, match="kernel_page_size"):
        backend.init_graph_state(3)
    backend.kernel_page_size, backend.spec_num_tokens = 2, 0
    assert backend.init_graph_state(3).loc_buffers["f"].shape == (3,)
