"""The kernel contract of a clause: a location or fill contract (prover/bindings/contracts.py) or an allocator one
(prover/bindings/alloc_contracts.py), chosen here so that neither module imports the other back."""

from __future__ import annotations

from typing import Any

from kvtable.prover.bindings.alloc_contracts import alloc_contract
from kvtable.prover.bindings.binding import Launch
from kvtable.prover.bindings.contracts import (
    ALLOC_CLAUSES,
    FILL_CLAUSES,
    LOCATION_CLAUSES,
    FillContract,
    LocationContract,
    Roles,
)
from kvtable.prover.symexec.values import KernelNotSupported


def contract(clause: str, launch: Launch) -> Any:
    """The clause's contract: a location, fill or (prover/bindings/alloc_contracts.py) allocator contract."""
    roles = Roles(launch)
    if clause in LOCATION_CLAUSES:
        return LocationContract(clause, roles)
    if clause in FILL_CLAUSES:
        return FillContract(clause, roles)
    if clause in ALLOC_CLAUSES:
        return alloc_contract(clause, roles)
    raise KernelNotSupported(f"no kernel contract for clause {clause}; kernels implement one of "
                             f"{LOCATION_CLAUSES + FILL_CLAUSES + ALLOC_CLAUSES}")
