"""The torch implementation's location formula run on z3 terms (prover/symexec/torch_symbolic.py,
prover/obligations/torch_ops.py): the symbolic run computes what torch computes, and its obligations
fail, with a counterexample, for a formula slip (that they hold for impl/torch_kernels.py is asserted
with every other obligation in tests/test_prove.py)."""

from __future__ import annotations

import itertools

import pytest
import torch
import z3
from hypothesis import given, settings
from hypothesis import strategies as st

from kvtable.impl import torch_kernels as tk
from kvtable.prover.obligations.torch_ops import stacked_locs_is_the_encoding
from kvtable.prover.solver.discharge import discharge
from kvtable.prover.symexec.torch_symbolic import SymTensor
from kvtable.prover.symexec.values import KernelNotSupported

TIMEOUT_MS = 60_000


def concrete(t: torch.Tensor) -> SymTensor:
    """``t`` as a SymTensor: element terms chosen by comparing the (symbolic) index with each position."""
    bits = {torch.int32: 32, torch.int64: 64}[t.dtype]

    def at(index: tuple[z3.ExprRef, ...]) -> z3.ExprRef:
        term = z3.BitVecVal(0, bits)
        for position in itertools.product(*(range(s) for s in t.shape)):
            hit = z3.And(*[i == p for i, p in zip(index, position, strict=True)])
            term = z3.If(hit, z3.BitVecVal(int(t[position]), bits), term)
        return term
    return SymTensor(tuple(SymTensor.scalar(z3.BitVecVal(s, 64)) for s in t.shape), at, t.dtype)  # sizes as terms


def value(term: z3.ExprRef) -> int:
    return z3.simplify(term).as_signed_long()


def test_floor_division_and_casts_are_torchs() -> None:
    a = SymTensor.scalar(z3.BitVecVal(-7, 64))
    assert value(torch.div(a, 2, rounding_mode="floor").at(())) == -4 and value((a % 2).at(())) == 1
    assert value(SymTensor.scalar(z3.BitVecVal(2**32 + 5, 64)).to(torch.int32).at(())) == 5


def test_a_python_branch_is_taken_only_when_decided() -> None:
    size = SymTensor.scalar(z3.BitVec("size", 64))
    assert bool(size == size) and not bool(size != size)  # the same size on both sides: decided
    with pytest.raises(KernelNotSupported, match="Python `if`"):
        bool(size > 0)
    with pytest.raises(KernelNotSupported, match="torch.cumsum"):
        torch.cumsum(SymTensor.scalar(z3.BitVecVal(1, 64)), 0)


@settings(max_examples=15, deadline=None)
@given(st.data())
def test_the_symbolic_run_computes_what_torch_computes(data: st.DataObject) -> None:
    groups, rows, width, n = (data.draw(st.integers(1, 3)) for _ in range(4))
    bs = data.draw(st.integers(1, rows))
    tables = torch.tensor(data.draw(st.lists(st.integers(-1, 50), min_size=groups * rows * width,
                                             max_size=groups * rows * width)), dtype=torch.int32)
    tables = tables.view(groups, rows, width)
    widths = torch.tensor(data.draw(st.lists(st.integers(0, width), min_size=groups, max_size=groups)),
                          dtype=torch.int32)
    page_sizes = torch.tensor(data.draw(st.lists(st.integers(1, 4), min_size=groups, max_size=groups)),
                              dtype=torch.int32)
    seq_lens = torch.tensor(data.draw(st.lists(st.integers(0, 14), min_size=bs, max_size=bs)), dtype=torch.int32)
    expected = tk._gather_locs(tables, widths, page_sizes, torch.arange(bs).view(bs, 1),
                               tk._fixed_positions(seq_lens, bs, n))
    bs_, n_ = SymTensor.scalar(z3.BitVecVal(bs, 64)), SymTensor.scalar(z3.BitVecVal(n, 64))
    symbolic = tk._gather_locs(concrete(tables), concrete(widths), concrete(page_sizes),
                               torch.arange(bs_).view(bs_, 1), tk._fixed_positions(concrete(seq_lens), bs_, n_))
    for index in itertools.product(range(groups), range(bs), range(n)):
        assert value(symbolic.at(tuple(z3.BitVecVal(i, 64) for i in index))) == int(expected[index])


def _slots_without_the_clamp(page: torch.Tensor, col: torch.Tensor, width: torch.Tensor, positions: torch.Tensor,
                             ps: torch.Tensor) -> torch.Tensor:
    page.masked_fill_(col >= width, 0)  # a pad (-1) is not sent to page 0
    return torch.addcmul(positions, page.sub_(col), ps)


def _positions_unclamped(seq_lens: torch.Tensor, bs: int, n: int) -> torch.Tensor:
    return seq_lens[:bs].to(torch.int64).view(bs, 1) + torch.arange(-n, 0, device=seq_lens.device)


def _gather_unclamped(tables: torch.Tensor, widths: torch.Tensor, page_sizes: torch.Tensor, rows: torch.Tensor,
                      positions: torch.Tensor) -> torch.Tensor:
    groups = tables.shape[0]
    shape = (groups,) + (1,) * positions.dim()
    ps = page_sizes[:groups].to(torch.int64).view(shape)
    col = torch.div(positions, ps, rounding_mode="floor")
    g = torch.arange(groups, device=tables.device).view(shape)
    page = tables[g, rows, col].to(torch.int64)  # the column is not clamped into the table
    return tk._slots(page, col, widths[:groups].to(torch.int64).view(shape), positions, ps)


@pytest.mark.slow
@pytest.mark.parametrize(("name", "slip"), [("_slots", _slots_without_the_clamp),
                                            ("_fixed_positions", _positions_unclamped),
                                            ("_gather_locs", _gather_unclamped)])
def test_a_formula_slip_is_refuted(monkeypatch: pytest.MonkeyPatch, name: str, slip: object) -> None:
    monkeypatch.setattr(tk, name, slip)
    outcome = discharge(stacked_locs_is_the_encoding(), TIMEOUT_MS)
    assert outcome.status == "counterexample", outcome
    model = dict(outcome.model)
    if name == "_gather_locs":  # a column past the table's last is read (torch would raise: not a location)
        assert model["reads inside"] is False
    elif name == "_slots":  # a negative page is not sent to page 0: another location
        assert model["reads inside"] is True and model["stored"] != model["encoding"]
    else:  # a negative position: a wrong slot, or a column torch refuses to read
        assert not (model["reads inside"] and model["stored"] == model["encoding"])
