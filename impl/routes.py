"""Every implementation route of every fused operation: what computes it, on which devices, and why it exists.

An operation is one formula of the contract (fixed-count locations, extend locations, the replay fill); a
route is one implementation of it. Each route names the backend through which ``kvtable conform`` judges it
with the whole suite (tests/conformance/test_routes.py runs each one), and the z3 obligations that prove its
formula, when any do. Kernels objects declare which route they take (``route_of``); no caller compares methods.
``python -m kvtable.impl.routes`` prints the table.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

OPERATIONS = ("fixed-locs", "extend-locs", "replay-fill")
"""W1/W2/W4 (decode, verify, re-anchor), W3 (extend), G3/E2 (the CUDA-graph replay fill)."""
GROUPED = {"fixed-locs": "grouped_locs", "extend-locs": "grouped_extend_locs"}
"""The optional ``Kernels`` fast path a kernels object declares by having it (impl/kernels.py)."""


@dataclass(frozen=True)
class Route:
    """One implementation of one operation."""

    operation: str
    name: str
    entry: str
    """The function that computes it, under ``kvtable.impl``."""
    devices: str
    backend: str
    """The built-in backend whose eager calls take this route (``kvtable conform --backend <it>``)."""
    reason: str
    """Why it exists, as a user feels it."""
    proved_by: tuple[str, ...] = ()
    """The z3 obligations on this route's own code (``kvtable prove``)."""

    @property
    def call(self) -> str:
        """The ``Kernels`` method the route is called through (impl/kernels.py)."""
        stacked = {"fixed-locs": "stacked_locs", "extend-locs": "stacked_extend_locs", "replay-fill": "replay_fill"}
        return GROUPED[self.operation] if self.name == "torch" and self.operation in GROUPED \
            else stacked[self.operation]

    def kernels(self, device: str) -> object | None:
        """A kernels object that takes this route on ``device`` tensors, or None where it cannot run (Triton
        without triton, compiled Triton on a CPU, interpreted Triton on a GPU)."""
        from kvtable.impl import triton_kernels
        from kvtable.impl.torch_kernels import TORCH_KERNELS

        if self.name != "triton":
            return TORCH_KERNELS
        if not triton_kernels.triton_available() or triton_kernels.interpreting() != (device == "cpu"):
            return None
        return triton_kernels.TritonKernels()


_TORCH_WHY = "default on CPU and CUDA: each group's own table read where it lies, a fixed op count for any G"
_STACKED_WHY = "the graph replay's persistent [G, R, W] stack; the torch formula the z3 obligations run"
_TRITON_WHY = "one fused launch per step on CUDA (a Triton engine's graph step); CPU runs it in the interpreter"

ROUTES: tuple[Route, ...] = (
    Route("fixed-locs", "torch", "torch_kernels.vectorized_locs", "cpu, cuda", "torch", _TORCH_WHY),
    Route("fixed-locs", "torch-stacked", "torch_kernels.TorchKernels.stacked_locs", "cpu, cuda", "torch-stacked",
          _STACKED_WHY, ("W0.torch-stacked-locs-is-the-encoding",)),
    Route("fixed-locs", "triton", "triton_kernels.TritonKernels.stacked_locs", "cuda (cpu: interpreter)", "triton",
          _TRITON_WHY, ("W0.kernel-stacked-locs-is-the-encoding", "G4.kernel-stacked-locs-safe")),
    Route("extend-locs", "torch", "torch_kernels.vectorized_extend_locs", "cpu, cuda", "torch", _TORCH_WHY),
    Route("extend-locs", "torch-stacked", "torch_kernels.TorchKernels.stacked_extend_locs", "cpu, cuda",
          "torch-stacked", "extend writes past a table's width (sunk to page 0), and the proved torch formula",
          ("W0.torch-extend-locs-is-the-encoding",)),
    Route("extend-locs", "triton", "triton_kernels.TritonKernels.stacked_extend_locs", "cuda (cpu: interpreter)",
          "triton", _TRITON_WHY, ("W0.kernel-extend-locs-is-the-encoding", "W3.kernel-extend-locs-safe")),
    Route("replay-fill", "torch", "torch_kernels.TorchKernels.replay_fill", "cpu, cuda", "torch",
          "default on CPU and CUDA: a strided copy (or expansion) per group, the fastest torch fill (<= 3x a copy)"),
    Route("replay-fill", "triton", "triton_kernels.TritonKernels.replay_fill", "cuda (cpu: interpreter)", "triton",
          _TRITON_WHY, ("G3.kernel-replay-fill-agrees", "E2.kernel-replay-fill-agrees")),
)


def routes(operation: str | None = None) -> tuple[Route, ...]:
    """The routes of ``operation`` (every route when None)."""
    if operation is not None and operation not in OPERATIONS:
        raise ValueError(f"operation {operation!r}: one of {', '.join(OPERATIONS)}")
    return tuple(r for r in ROUTES if operation in (None, r.operation))


def route_of(kernels: object, operation: str) -> Route:
    """The route a kernels object takes for ``operation`` on eager calls: its declared ``name``, and for the
    location operations the torch grouped path when it declares one (``grouped_locs`` / ``grouped_extend_locs``
    callable), else its stacked path."""
    name = getattr(kernels, "name", None)
    if name == "torch" and operation in GROUPED and not callable(getattr(kernels, GROUPED[operation], None)):
        name = "torch-stacked"
    if name == "torch-stacked" and operation == "replay-fill":
        name = "torch"
    found = [r for r in routes(operation) if r.name == name]
    if not found:
        raise LookupError(f"kernels {type(kernels).__name__} (name {name!r}) declare no route of {operation}")
    return found[0]


def backends() -> tuple[str, ...]:
    """The built-in backends that, together, take every route (each judged by the whole suite)."""
    return tuple(dict.fromkeys(r.backend for r in ROUTES))


def table() -> str:
    """Every route as an aligned text table, one line per route."""
    head = ("operation", "route", "devices", "backend", "proved by", "entry (kvtable.impl.)", "why")
    rows = [head, *[(r.operation, r.name, r.devices, r.backend, ", ".join(r.proved_by) or "-", r.entry, r.reason)
                    for r in ROUTES]]
    widths = [max(len(row[i]) for row in rows) for i in range(len(head) - 1)]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False)) + "  " + row[-1]
                     for row in rows)


if __name__ == "__main__":
    sys.stdout.write(table() + "\n")
