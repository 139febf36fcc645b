"""The registry of conformance properties, one module per family; SPEC.md lists them by name per clause.

Each property draws inputs from ``kvtable.strategies``, computes the expected outcome with
``kvtable.reference`` (mapped through the convention profile) and requires the backend to match it
element for element, or to raise a ContractViolation naming the same clause and the offending entry.

Cheap and debug-only clauses. A backend must reject, in any mode, the breaches it can see without a
device sync: table dtype and shape (T1), the CPU-mirror lengths of a ``Batch`` or of extend (T8 width,
T9, W2's seq_len >= N), tokens per request (W2/W4), page ratios (E1) and the graph protocol's sizes
and deliveries (G2-G5). Breaches that need the table contents read back (T1 entries below -1, T2,
T3, T4, T5, T7, W5, and T4/T8 on device lengths) are checked only against the backend built with
``debug=True``; without debug the contract only asks that such input never writes outside the
token's own page, the sink (page 0) or the profile's pad slot (the ``safety/*`` properties).
"""

from __future__ import annotations

from kvtable.conformance.core import Context, Property
from kvtable.conformance.properties import (
    alloc,
    checker,
    debug,
    expand_table,
    graph,
    group_locs,
    groups,
    kernels,
    lengths,
    lone_locs,
    rejects,
    rejects_cheap,
    ring,
    routes,
    safety,
)

PROPERTIES: tuple[Property, ...] = (
    *lone_locs.PROPERTIES,
    *group_locs.PROPERTIES,
    *debug.PROPERTIES,
    *expand_table.PROPERTIES,
    *checker.PROPERTIES,
    *graph.PROPERTIES,
    *kernels.PROPERTIES,
    *routes.PROPERTIES,
    *rejects_cheap.PROPERTIES,
    *rejects.PROPERTIES,
    *safety.PROPERTIES,
    *lengths.PROPERTIES,
    *groups.PROPERTIES,
    *alloc.PROPERTIES,
    *ring.PROPERTIES,
)

BY_NAME = {p.name: p for p in PROPERTIES}
if len(BY_NAME) != len(PROPERTIES):
    raise RuntimeError("two conformance properties share a name")


def select(names: list[str] | None = None) -> tuple[Property, ...]:
    """Properties by name or by clause id (``"T4"`` selects every property tagged T4); all by default."""
    if not names:
        return PROPERTIES
    chosen = [p for p in PROPERTIES if p.name in names or p.clause in names]
    unknown = sorted(set(names) - {p.name for p in chosen} - {p.clause for p in chosen})
    if unknown:
        raise KeyError(f"no property or clause {unknown}; properties: {sorted(BY_NAME)}")
    return tuple(chosen)


__all__ = ["BY_NAME", "PROPERTIES", "Context", "Property", "select"]
