"""Debug mode names the clause the reference and plain mode name, and a kernels object passed in is the one used
(two gaps a mutation sample found: impl/locs.py's debug shortcut, impl/expand.py's ``kernels or``)."""

from __future__ import annotations

import pytest
import torch

from kvtable.backends import load
from kvtable.errors import ContractViolation
from kvtable.impl.expand import expand_table
from kvtable.impl.torch_kernels import TorchKernels
from kvtable.reference import Batch, GroupSpec

SPECS = [GroupSpec("full", "full", 2)]


@pytest.mark.parametrize(("table", "batch"), [
    (torch.zeros((1, 0), dtype=torch.int32), Batch((0,), "decode")),  # no columns, a live row at seq_len 0
    (torch.zeros((1, 0), dtype=torch.int32), Batch((1,), "verify", n=2)),  # no columns, a row shorter than N
    (torch.zeros((1, 1), dtype=torch.int64), Batch((0,), "decode")),  # an int64 table, a live row at 0
])
def test_debug_mode_names_the_lengths_clause_first_as_the_reference_does(table: torch.Tensor, batch: Batch) -> None:
    named = []
    for backend in (load("reference"), load("torch"), load("torch", debug=True)):
        with pytest.raises(ContractViolation) as err:
            backend.group_locs(SPECS, {"full": table}, batch)
        named.append(err.value.clause_id)
    assert named[0] in ("T9", "W2") and named == [named[0]] * 3


class CountingKernels(TorchKernels):
    """The torch kernels, counting ``replay_fill`` calls (the expansion kernel)."""

    def __init__(self) -> None:
        super().__init__()
        self.fills = 0

    def replay_fill(self, *args: object, **kwargs: object) -> None:
        self.fills += 1
        super().replay_fill(*args, **kwargs)


def test_expand_table_runs_the_kernels_it_is_handed() -> None:
    kernels = CountingKernels()
    out = expand_table(torch.tensor([[3, -1]], dtype=torch.int32), 2, kernels=kernels)
    assert kernels.fills == 1 and out.tolist() == [[6, 7, -1, -1]]
