"""The backend protocol: what the conformance suite, the fuzzer and the zoo call on a backend.

A backend takes and returns torch tensors (int32 tables, int32 locations) on its own device. It
raises ``kvtable.ContractViolation`` (naming the clause) for input it can see is broken without a
device sync; with ``debug=True`` it also runs the full contract check and the strong write checker.
Load any backend with ``kvtable.backends.load("pkg.mod:factory")``.

Allocator-driven engines (SGLang) choose their write slots before any table holds them: the
``ALLOCATOR_OPERATIONS`` hand them an ``AllocState`` and take back an ``Allocation`` (spec section 6a; the
types live in ``kvtable.alloc_contract`` and are re-exported here).

A backend may be partial: any object with at least one of the ``OPERATIONS`` is tested on what it
has (``present_operations``/``missing_operations``), and the properties that need a missing one are
reported not applicable, naming it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from kvtable.alloc_contract import Allocation, AllocState, SwaPool

if TYPE_CHECKING:
    import torch

    from kvtable.contract import Batch, GroupSpec


__all__ = ["ALLOCATOR_OPERATIONS", "OPERATIONS", "AllocState", "Allocation", "Backend", "GraphRunner", "SwaPool",
           "is_backend", "missing_operations", "present_operations"]

ALLOCATOR_OPERATIONS = ("alloc_decode", "alloc_verify", "alloc_extend")
"""The allocator-driven family (A1-A6): the backend chooses the slots and records them in its token table."""
RING_OPERATIONS = ("ring_locs",)
"""A sliding group stored as a ring (R1-R3, transformers): its write and read locations for one step."""
OPERATIONS = ("decode_locs", "verify_locs", "reanchor_locs", "extend_locs", "group_locs", "expand_table",
              "check_write_locs", "graph", *ALLOCATOR_OPERATIONS, "check_allocation", *RING_OPERATIONS)
"""The protocol's operations, in the order ``Backend`` declares them."""


def present_operations(backend: object) -> tuple[str, ...]:
    """The protocol operations ``backend`` has (callable attributes), in protocol order."""
    return tuple(op for op in OPERATIONS if callable(getattr(backend, op, None)))


def missing_operations(backend: object) -> tuple[str, ...]:
    """The protocol operations ``backend`` lacks, in protocol order (what a partial backend leaves out)."""
    present = present_operations(backend)
    return tuple(op for op in OPERATIONS if op not in present)


def is_backend(obj: object) -> bool:
    """Whether ``obj`` is a (possibly partial) backend: not a class, and at least one operation present."""
    return not isinstance(obj, type) and bool(present_operations(obj))


@runtime_checkable
class GraphRunner(Protocol):
    """Persistent per-group CUDA-graph buffers (clauses G1-G5)."""

    table_buffers: dict[str, torch.Tensor]
    """Group id -> int32 ``[max_bs, width_g]`` persistent table (a view of one stack is fine)."""
    loc_buffers: dict[str, torch.Tensor]
    """Group id -> int32 ``[max_bs * spec_n]`` persistent location buffer."""

    def capture(self, bs: int, group_ids: Sequence[str], tokens_per_req: int = 1
                ) -> tuple[dict[str, torch.Tensor] | None, dict[str, torch.Tensor] | None]:
        """G2: views ``table_buffers[g][:bs]`` and ``loc_buffers[g][:bs*tokens_per_req]``."""
        ...

    def replay(self, bs: int, tables: Mapping[str, torch.Tensor] | None, seq_lens: torch.Tensor,
               tokens_per_req: int = 1, *, actual_bs: int | None = None) -> None:
        """G3-G5: stale guard, then refill rows [:bs] and locations [:bs*tokens_per_req] in place."""
        ...


@runtime_checkable
class Backend(Protocol):
    """One implementation of the contract under test."""

    name: str
    device: str

    def decode_locs(self, table: torch.Tensor, seq_lens: torch.Tensor, page_size: int,
                    *, actual_bs: int | None = None) -> torch.Tensor:
        """W1: int32 ``[bs]``; rows ``>= actual_bs`` are padding (a CUDA-graph-padded decode), as in verify.

        ``actual_bs`` is optional: a backend whose ``decode_locs`` does not take it gets every row judged live.
        """
        ...

    def verify_locs(self, table: torch.Tensor, seq_lens: torch.Tensor, page_size: int, n: int,
                    *, actual_bs: int | None = None) -> torch.Tensor:
        """W2: int32 ``[bs*n]``, token-major."""
        ...

    def reanchor_locs(self, table: torch.Tensor, frontier: torch.Tensor, page_size: int, n: int
                      ) -> torch.Tensor:
        """W4: int32 ``[bs*n]``."""
        ...

    def extend_locs(self, table: torch.Tensor, prefix_lens: Sequence[int], extend_lens: Sequence[int],
                    page_size: int) -> torch.Tensor:
        """W3: int32 ``[sum(extend_lens)]``, request order; lengths are CPU mirrors."""
        ...

    def group_locs(self, specs: Sequence[GroupSpec], tables: Mapping[str, torch.Tensor], batch: Batch,
                   *, tail_pad: int = -1) -> dict[str, torch.Tensor]:
        """W1-W4 for every non-state group in one pass (T6: state groups shed), at each group's B.

        ``tail_pad`` is the batch's tail-pad convention (T3), which debug mode checks the tables against.
        """
        ...

    def expand_table(self, table: torch.Tensor, ratio: int, *, max_kernel_pages: int | None = None,
                     tail_pad: int = -1, actual_bs: int | None = None) -> torch.Tensor:
        """E2: int32 ``[rows, max_kernel_pages or width*ratio]``."""
        ...

    def check_write_locs(self, table: torch.Tensor, locs: torch.Tensor, batch: Batch, page_size: int,
                         *, group: str | None = None) -> None:
        """D1-D2: the strong debug write checker; raises ContractViolation."""
        ...

    def graph(self, specs: Sequence[GroupSpec], *, max_bs: int, max_kernel_pages: int,
              kernel_page_size: int, spec_n: int = 1, tail_pad: int = -1, expand: bool = True
              ) -> GraphRunner:
        """G1: allocate the persistent buffers on this backend's device."""
        ...

    def alloc_decode(self, state: AllocState) -> Allocation:
        """A1-A6: choose and record one slot per request, at position ``prefix_lens[i]`` (SGLang's
        ``alloc_for_decode``)."""
        ...

    def alloc_verify(self, state: AllocState) -> Allocation:
        """A1-A6: choose and record N slots per request, positions ``seq - N .. seq - 1``
        (``alloc_for_spec_decode``)."""
        ...

    def alloc_extend(self, state: AllocState) -> Allocation:
        """A1-A6: choose and record the chunk ``[prefix, seq)`` of each request (``alloc_for_extend``)."""
        ...

    def check_allocation(self, before: torch.Tensor, state: AllocState, allocation: Allocation) -> None:
        """A1-A6: the debug allocation checker (``before``: the table as handed); raises ContractViolation."""
        ...

    def ring_locs(self, table: torch.Tensor, prefix_lens: Sequence[int], extend_lens: Sequence[int], page_size: int,
                  window: int) -> tuple[torch.Tensor, torch.Tensor]:
        """R1-R3: a ring group's ``(writes [sum(extend_lens)], reads)`` for one step, request order; row ``i`` of
        ``table`` is request ``i``'s ring pages (then its tail pad), which has ``prefix_lens[i]`` tokens cached and
        ``extend_lens[i]`` new ones; lengths are CPU mirrors. Reads: per request with new tokens, the cached part of
        its first query's window, then ``RING_SENTINEL`` once per new token."""
        ...
