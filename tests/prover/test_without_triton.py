"""kvtable's own kernels are proved on a machine without triton: the executor reads the module's triton imports
from its source and inlines its plain helpers (prover/symexec/run.py), so ``kvtable check`` needs no extra."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from kvtable.impl import triton_kernels
from kvtable.prover.bindings import builtin as kb
from kvtable.prover.bindings import queries as kq
from kvtable.prover.solver.discharge import discharge


@pytest.fixture
def without_triton(monkeypatch: pytest.MonkeyPatch):
    """impl/triton_kernels.py imported afresh where ``import triton`` fails: no ``tl``, ``@jit`` the identity."""
    monkeypatch.setitem(sys.modules, "triton", None)
    monkeypatch.setitem(sys.modules, "triton.language", None)
    spec = importlib.util.spec_from_file_location("_kvtable_kernels_without_triton", triton_kernels.__file__)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    return module


def test_the_kernels_prove_without_triton(without_triton) -> None:
    assert not without_triton.triton_available() and "tl" not in vars(without_triton)
    with pytest.raises(NameError, match="'tl' is not defined"):  # what the executor must not run into
        without_triton._group_locs(None, 0, 0, 0, 1, 1, 0, 0, 0, True)
    extend = kb.stacked_extend_locs(kernel=without_triton._stacked_extend_locs_kernel)  # calls _group_locs
    assert discharge(kq.agreement(extend)).status == "proved"
    fill = kb.replay_fill(kernel=without_triton._replay_fill_kernel)
    assert discharge(kq.in_bounds(fill)).status == "proved"
