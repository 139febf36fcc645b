"""The registry of proof obligations ``kvtable prove`` discharges with z3; SPEC.md lists them by name.

Each obligation names the clause of spec/clauses.py it is about, states in one line what z3 proves
(or, with ``expect="counterexample"``, which precondition it shows to be needed), and builds its query
over bit-vectors of the kernels' widths (spec/z3_encoding.py).
"""

from __future__ import annotations

from kvtable.spec import (
    obligations_expand,
    obligations_graph,
    obligations_kernels,
    obligations_locs,
    obligations_swa,
    obligations_torch,
)
from kvtable.spec.obligation_types import Expect, Obligation

OBLIGATIONS: tuple[Obligation, ...] = (
    *obligations_locs.OBLIGATIONS,
    *obligations_expand.OBLIGATIONS,
    *obligations_swa.OBLIGATIONS,
    *obligations_graph.OBLIGATIONS,
    *obligations_kernels.OBLIGATIONS,
    *obligations_torch.OBLIGATIONS,
)

_BY_NAME = {ob.name: ob for ob in OBLIGATIONS}
if len(_BY_NAME) != len(OBLIGATIONS):
    raise RuntimeError("two proof obligations share a name")


def obligation(name: str) -> Obligation:
    """The obligation called ``name``."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"no proof obligation {name!r}; known: {sorted(_BY_NAME)}") from None


__all__ = ["OBLIGATIONS", "Expect", "Obligation", "obligation"]
