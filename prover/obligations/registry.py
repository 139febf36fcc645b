"""The registry of proof obligations ``kvtable prove`` discharges with z3; SPEC.md lists them by name.

Each obligation names the clause of spec/clauses.py it is about, states in one line what z3 proves
(or, with ``expect="counterexample"``, which precondition it shows to be needed), and builds its query
over bit-vectors of the kernels' widths (prover/solver/encoding.py).
"""

from __future__ import annotations

from kvtable.prover.obligations import expand, graph, kernels, locs, ring, swa, torch_ops
from kvtable.prover.obligations.base import Expect, Obligation

OBLIGATIONS: tuple[Obligation, ...] = (
    *locs.OBLIGATIONS,
    *expand.OBLIGATIONS,
    *swa.OBLIGATIONS,
    *ring.OBLIGATIONS,
    *graph.OBLIGATIONS,
    *kernels.OBLIGATIONS,
    *torch_ops.OBLIGATIONS,
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
