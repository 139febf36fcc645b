"""Two independent sides: impl/ never runs the reference's code, and the reference never runs impl's or torch.

Read from the source (the AST of every module, following first-party imports transitively), so an import
hidden inside a function counts as much as one at the top.
"""

from __future__ import annotations

import pytest
from import_graph import closure, modules_of

IMPL = modules_of("impl", "kvtable.impl")
REFERENCE = modules_of("reference", "kvtable.reference")


def test_the_walk_sees_both_sides() -> None:
    assert "kvtable.impl.validate" in IMPL and "kvtable.reference.tables" in REFERENCE
    assert "kvtable.contract" in closure("kvtable.impl.locs")
    assert "torch" in closure("kvtable.impl.locs") and "kvtable.spec.clauses" in closure("kvtable.reference")


@pytest.mark.parametrize("module", IMPL)
def test_impl_never_imports_the_reference(module: str) -> None:
    assert not {m for m in closure(module) if m.startswith("kvtable.reference")}


@pytest.mark.parametrize("module", REFERENCE)
def test_reference_never_imports_impl_or_torch(module: str) -> None:
    forbidden = {m for m in closure(module) if m.startswith(("kvtable.impl", "torch", "triton"))}
    assert not forbidden
