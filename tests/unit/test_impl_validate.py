"""impl's own validator: the same clause, group, row and column as the reference's, one readback in debug mode,
and host checks on the CPU mirrors without a Python loop over rows."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from readbacks import count_readbacks

from kvtable import ContractViolation
from kvtable.contract import Batch, GroupSpec
from kvtable.impl import group_locs, group_seq_locs, validate
from kvtable.reference import check_tables
from kvtable.strategies import Broken, broken_cases

SPECS = (GroupSpec("swa", "sliding", 2, window=3), GroupSpec("full", "full", 4), GroupSpec("mamba", "state", 1))


def i32(rows: list) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.int32)


def _where(err: ContractViolation) -> tuple[str, str | None, int | None, int | None]:
    return err.clause_id, err.group, err.row, err.col


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(broken_cases())
def test_debug_mode_names_the_reference_clause_group_row_and_column(b: Broken) -> None:
    with pytest.raises(ContractViolation) as expected:
        check_tables(b.case.specs, b.case.tables if not b.case.raw else b.case.tensors(), b.case.batch,
                     tail_pad=b.case.tail_pad)
    with pytest.raises(ContractViolation) as got:
        group_locs(list(b.case.specs), b.case.tensors(), b.case.batch, tail_pad=b.case.tail_pad, debug=True)
    assert _where(got.value) == _where(expected.value), b.how


def _tables() -> dict[str, torch.Tensor]:
    return {"swa": i32([[0, 3, 4, -1], [5, 6, -1, -1], [0, 0, 0, 0]]), "full": i32([[7, 8], [9, -1], [0, 0]]),
            "mamba": i32([[1], [2], [3]])}


def test_debug_mode_reads_back_once_and_eager_mode_never() -> None:
    batch = Batch((6, 3, 1), mode="verify", n=2, actual_bs=2)
    with count_readbacks() as reads:
        group_locs(SPECS, _tables(), batch)
    assert reads == []
    with count_readbacks() as reads:
        group_locs(SPECS, _tables(), batch, debug=True)
    assert reads == ["tolist"]


def test_device_lengths_join_the_one_readback(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lengths on the device are checked (T9, W2) on the device, in the same single readback as the tables."""
    monkeypatch.setattr(validate, "cpu_lengths", lambda _seq: None)
    with count_readbacks() as reads:
        group_seq_locs(SPECS, _tables(), i32([6, 3, 1]), 2, mode="verify", actual_bs=2, debug=True)
    assert reads == ["tolist"]
    with pytest.raises(ContractViolation) as err:
        group_seq_locs(SPECS, _tables(), i32([6, 1, 1]), 2, mode="verify", actual_bs=2, debug=True)
    assert _where(err.value) == ("W2", None, 1, None)
    with pytest.raises(ContractViolation) as err:
        group_seq_locs(SPECS, _tables(), i32([6, 3, 2]), 2, mode="verify", actual_bs=2, debug=True)
    assert _where(err.value) == ("T2", "full", 2, None)


@pytest.mark.parametrize(("batch", "where"), [
    (Batch((3, 0, -1)), ("T9", None, 1, None)),
    (Batch((3, 1, 0), mode="verify", n=2), ("W2", None, 1, None)),
    (Batch((3, 1, 0), mode="verify", n=2, actual_bs=1), ("T9", None, 2, None)),
    (Batch.extend([0, 2, -1], [1, 1, 1]), ("T9", None, 2, None)),
    (Batch((1, 2), mode="extend", prefix_lens=(0, 3)), ("T9", None, 1, None)),
    (Batch((1, 2), mode="extend", prefix_lens=(0,)), ("T9", None, None, None)),
])
def test_host_length_checks_report_the_first_row(batch: Batch, where: tuple) -> None:
    with pytest.raises(ContractViolation) as err:
        validate.check_batch(batch)
    assert _where(err.value) == where


def test_host_width_check_skips_rows_that_write_nothing() -> None:
    batch = Batch.extend([9, 2], [0, 3])  # row 0 writes nothing, so it needs no column at all
    validate.check_width(batch, {"g": 2}, {"g": 4})
    with pytest.raises(ContractViolation) as err:
        validate.check_width(Batch.extend([9, 2], [1, 3]), {"g": 2}, {"g": 4})
    assert _where(err.value) == ("T8", "g", 0, 2)


@pytest.mark.parametrize(("swa", "full", "where"), [
    # T5 (a hole after a real page, row 1) is its own check, reported before T4 (the pad inside row 0's length)
    ([[3, -1, -1], [5, 0, 6], [0, 0, 0]], [[7, 8, -1], [9, 10, -1], [0, 0, 0]], ("T5", "swa", 1, 1)),
    # T4 in a later row (a pad inside row 1's length) before T3 in an earlier one (a page after row 0's pad)
    ([[3, 4, -1, 11], [5, -1, -1, -1], [0, 0, 0, 0]], [[7, 8, -1, -1], [9, 10, -1, -1], [0, 0, 0, 0]],
     ("T4", "swa", 1, 1)),
    # with the tail pad -1, a 0 after row 0's real page in a sliding row is a hole (T5), not the pad
    ([[3, 0, -1], [5, 6, -1], [0, 0, 0]], [[7, 8, -1], [9, 10, -1], [0, 0, 0]], ("T5", "swa", 0, 1)),
    # a full row's 0 after a real page, outside the live length, breaks only the row grammar (T3)
    ([[3, 4, -1], [5, 6, -1], [0, 0, 0]], [[7, 8, 0], [9, 10, -1], [0, 0, 0]], ("T3", "full", 0, 2)),
])
def test_each_layout_clause_has_its_own_check_in_the_reference_order(swa: list, full: list, where: tuple) -> None:
    """T5, T4 and T3 are three checks over all rows each (T5, then T4, then T3), as in ``check_tables``
    (groups in id order: ``full`` before ``swa``)."""
    specs = (GroupSpec("swa", "sliding", 2, window=8), GroupSpec("full", "full", 2))
    batch = Batch((4, 3, 1), mode="decode", actual_bs=2)
    with pytest.raises(ContractViolation) as expected:
        check_tables(specs, {"swa": swa, "full": full}, batch)
    with pytest.raises(ContractViolation) as got:
        group_locs(specs, {"swa": i32(swa), "full": i32(full)}, batch, debug=True)
    assert _where(expected.value) == _where(got.value) == where


def test_int32_mirrors_are_summed_as_python_ints() -> None:
    """An extend's ``prefix + extend`` from int32 numpy mirrors does not wrap past 2^31 (it gave location 0)."""
    import numpy as np

    batch = validate.extend_batch(np.array([2**31 - 1], np.int32), np.array([1], np.int32))
    assert batch.seq_lens == (2**31,)
    assert all(type(n) is int for n in (*batch.seq_lens, *batch.prefix_lens))
