"""Every backend call is watched: an eager read past a table's width and a write into the caller's inputs are
safety failures naming the op and index, or the tensor and element, whatever the property made of the call."""

from __future__ import annotations

import pytest
import torch

from kvtable.conformance.oob import IndexGuard, OutOfBoundsIndex
from kvtable.conformance.properties import select
from kvtable.conformance.runner import run_conformance

NARROW = select(["safety/narrow-table"])


def _one(backend: str, properties=NARROW, examples: int = 60):
    """The one property's result at the safety tier, each failure as first found (no shrinking: faster)."""
    report = run_conformance(f"runs_backends:{backend}", examples=examples, seed=0, level="safety",
                             properties=properties, shrink=False)
    return report.results[0]


def test_an_eager_gather_past_the_width_is_an_unsafe_read_naming_the_op_and_index() -> None:
    result = _one("EagerGatherDecode")
    assert (result.status, result.tier, result.clause_id) == ("failed", "safety", "T8")
    assert result.failures[0].kind == "out-of-bounds read (aten.index)"
    assert "out-of-bounds read in backend.decode_locs: aten.index with index " in result.message
    assert "into dimension 1 of size " in result.message


def test_the_same_decode_refusing_with_its_own_check_passes() -> None:
    result = _one("EagerGatherDecodeChecked")
    assert result.status == "passed" and result.examples > 0


@pytest.mark.parametrize(("backend", "tensor", "kind"), [
    ("ZeroesTheTable", "table", "input changed: table"),
    ("BumpsSeqLens", "seq_lens", "input changed: seq_lens"),
    ("WritesPageIntoTable", "table", "input changed: table"),
])
def test_a_backend_writing_into_its_inputs_fails_safety_naming_the_tensor(backend: str, tensor: str,
                                                                          kind: str) -> None:
    result = _one(backend, select(["decode_locs"]), examples=10)
    assert (result.status, result.tier) == ("failed", "safety")
    assert result.failures[0].kind == kind
    assert f"backend.decode_locs changed the caller's {tensor}: element [" in result.message


@pytest.mark.parametrize(("op", "message"), [
    (lambda t: t.index_select(1, torch.tensor([0, 4])), "aten.index_select with index 4 at index position [1]"),
    (lambda t: torch.gather(t, 1, torch.tensor([[1], [-1], [0]])), "aten.gather with index -1 at index position [1,"),
    (lambda t: t[torch.tensor([3])], "aten.index with index 3 at index position [0] into dimension 0 of size 3"),
    (lambda t: torch.take(t, torch.tensor([12])), "aten.take with index 12"),
    (lambda t: t.clone().index_put_((torch.tensor([5]),), torch.tensor(1)), "out-of-bounds write: aten.index_put_"),
])
def test_the_guard_stops_each_indexing_op_before_it_runs(op, message: str) -> None:
    hits: list[OutOfBoundsIndex] = []
    table = torch.arange(12).reshape(3, 4)
    with pytest.raises(OutOfBoundsIndex), IndexGuard(hits.append):
        op(table)
    assert len(hits) == 1 and message in str(hits[0])


def test_the_guard_lets_in_bounds_indices_run_and_negative_ones_where_the_op_wraps() -> None:
    table = torch.arange(12).reshape(3, 4)
    with IndexGuard(lambda hit: pytest.fail(str(hit))):
        assert table[:, torch.tensor([0, -1])].tolist() == [[0, 3], [4, 7], [8, 11]]
        assert torch.gather(table, 1, torch.tensor([[3], [0], [1]])).tolist() == [[3], [4], [9]]
        assert table[table > 9].tolist() == [10, 11]


def test_an_int_index_past_a_table_is_a_refusal_not_an_unsafe_read() -> None:
    """``table[row]`` with a Python int is a view torch bounds-checks on the host on every device: out of range it
    raises before any read, so it is a refusal (safe), whatever the input."""
    result = _one("RowByRowDecode", select(["rejects-cheap/T1"]), examples=60)
    assert result.passed and result.examples > 0, result.message


SCREENED = {
    "a 0-d index tensor (read as an int)": lambda t: t[torch.tensor(5)],
    "two index tensors": lambda t: t[torch.tensor([0]), torch.tensor([9])],
    "torch.index_select": lambda t: torch.index_select(t, 0, torch.tensor([7])),
    "a slice then an index tensor": lambda t: t[:, torch.tensor([4])],
    "a list": lambda t: t[[0, 5]],
    "a mask": lambda t: t[torch.tensor([True, False, True, True])],
    "more index tensors than dimensions": lambda t: t[torch.tensor([0]), torch.tensor([0]), torch.tensor([0])],
    "in bounds, one wrapped": lambda t: t[torch.tensor([2]), torch.tensor([-1])],
    "an int32 index tensor": lambda t: t[torch.tensor([1, 3], dtype=torch.int32)],
    "repeat_interleave (an index_select inside)": lambda t: t.reshape(-1)[:2].repeat_interleave(torch.tensor([1, 2])),
    "a write": lambda t: t.clone().__setitem__(torch.tensor([3]), 1),
    "a write in bounds": lambda t: t.clone().__setitem__(torch.tensor([2, -3]), torch.tensor([[5], [6]])),
    "an int32 write past the end": lambda t: t.clone().__setitem__(torch.tensor([1, 9], dtype=torch.int32), 0),
    "a write through two index tensors": lambda t: t.clone().__setitem__((torch.tensor([0]), torch.tensor([4])), 1),
    "a write into a 0-d tensor": lambda t: t[0, 0].clone().__setitem__(torch.tensor([0]), 1),
    "sort, argsort and searchsorted": lambda t: torch.searchsorted(t.reshape(-1).sort().values, t.argsort(dim=1)),
    "arithmetic, views and a narrow past the end": lambda t: (t + 1)[1:].view(-1).narrow(0, 6, 4),
}


@pytest.mark.parametrize("name", sorted(SCREENED))
def test_the_screened_guard_finds_what_checking_every_aten_op_finds(name: str) -> None:
    """The guard skips calls that dispatch no indexing op and checks index_select and tensor[...] itself: each call
    ends as it does with every aten op checked (``IndexOps``), with the same hits."""
    from kvtable.conformance.oob import IndexOps

    outcomes = []
    for guard in (IndexGuard, IndexOps):
        hits: list[OutOfBoundsIndex] = []
        try:
            with guard(hits.append):
                value = SCREENED[name](torch.arange(12).reshape(3, 4))
            outcome = repr(value.tolist() if isinstance(value, torch.Tensor) else value)
        except Exception as err:
            outcome = type(err).__name__
        outcomes.append((outcome, [str(h) for h in hits]))
    assert outcomes[0] == outcomes[1]
