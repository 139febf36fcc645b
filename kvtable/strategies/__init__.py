"""Hypothesis strategies for every property family, one module each; this package re-exports the public ones.

- ``batches``: contract-valid batches (:func:`cases`).
- ``broken``: near-valid batches with exactly one clause broken and the entries that break it.
- ``checker``: eager write locations for the debug checker, correct or corrupted once.
- ``expansion``: block tables for expansion.
- ``graph``: CUDA-graph setups, captures and replays.
- ``kernels``: raw arguments for a backend's fused kernels.
- ``unsafe``: inputs that make real bugs live (stale lengths on the tail pad, -1 inside the live range,
  garbage dummy rows, narrow tables), judged at the safety tier.

Every strategy is built once at import (or once per range, ``draws.between``); nothing builds a strategy
inside a draw.
"""

from kvtable.strategies.batches import (
    KERNEL_PAGE_SIZES,
    MAX_N,
    PAGE_LIMIT,
    RATIOS,
    Case,
    CaseOptions,
    as_tensor,
    cases,
    draw_case,
)
from kvtable.strategies.broken import (
    BROKEN_CLAUSES,
    CHEAP_CLAUSES,
    VARIANTS,
    Broken,
    Variant,
    Where,
    broken_case,
    broken_cases,
    variants,
)
from kvtable.strategies.checker import CORRUPTIONS, WriteLocCase, live_locs, write_loc_cases
from kvtable.strategies.expansion import ExpandCase, expand_cases
from kvtable.strategies.graph import GraphCase, GraphSetup, Replay, graph_cases, graph_setups, repage, repaged, replays

__all__ = [
    "BROKEN_CLAUSES", "CHEAP_CLAUSES", "CORRUPTIONS", "KERNEL_PAGE_SIZES", "MAX_N", "PAGE_LIMIT", "RATIOS",
    "VARIANTS", "Broken", "Case", "CaseOptions", "ExpandCase", "GraphCase", "GraphSetup", "Replay", "Variant", "Where",
    "WriteLocCase", "as_tensor", "broken_case", "broken_cases", "cases", "draw_case", "expand_cases", "graph_cases",
    "graph_setups", "live_locs", "repage", "repaged", "replays", "variants", "write_loc_cases",
]
