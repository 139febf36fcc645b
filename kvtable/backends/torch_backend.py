"""The torch backend: impl/'s functional API behind the ``Backend`` protocol, on one device.

Each behaviour is one method, so a subclass can swap the kernels (``TritonBackend``) or override a
single behaviour (the bug zoo) without touching the rest.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from kvtable.backends.protocol import Allocation, AllocState
from kvtable.impl import locs as impl_locs
from kvtable.impl import ring as impl_ring
from kvtable.impl.allocation import Allocator, check_allocation
from kvtable.impl.checker import check_write_locs as strong_check
from kvtable.impl.expand import expand_table as impl_expand
from kvtable.impl.graph import GroupGraphBuffers
from kvtable.impl.kernels import Kernels
from kvtable.impl.mixin import CacheGroupsMixin
from kvtable.impl.torch_kernels import TORCH_KERNELS, StackedTorchKernels
from kvtable.impl.validate import debug_enabled
from kvtable.reference.model import DEFAULT_TAIL_PAD, Batch, GroupSpec


class TorchCacheGroups(CacheGroupsMixin):
    """impl's ``CacheGroupsMixin`` on its own, configured per instance (the engine-facing adapter)."""

    def __init__(self, specs: Sequence[GroupSpec], **settings: object) -> None:
        for name, value in settings.items():
            setattr(self, name, value)
        self.learn_cache_groups(specs)


class TorchBackend:
    """Vectorized torch on ``device``; ``debug`` None defers to ``KVTABLE_DEBUG=1``."""

    name = "torch"

    def __init__(self, device: str = "cpu", debug: bool | None = None, kernels: Kernels = TORCH_KERNELS) -> None:
        self.device = device
        self.debug = debug if debug is None else debug_enabled(debug)  # True, False or None, else a TypeError
        self.kernels = kernels

    def decode_locs(self, table: torch.Tensor, seq_lens: torch.Tensor, page_size: int,
                    *, actual_bs: int | None = None) -> torch.Tensor:
        return impl_locs.decode_locs(table, seq_lens, page_size, actual_bs=actual_bs, kernels=self.kernels,
                                     debug=self.debug)

    def verify_locs(self, table: torch.Tensor, seq_lens: torch.Tensor, page_size: int, n: int,
                    *, actual_bs: int | None = None) -> torch.Tensor:
        return impl_locs.verify_locs(table, seq_lens, page_size, n, actual_bs=actual_bs,
                                     kernels=self.kernels, debug=self.debug)

    def reanchor_locs(self, table: torch.Tensor, frontier: torch.Tensor, page_size: int, n: int
                      ) -> torch.Tensor:
        return impl_locs.reanchor_locs(table, frontier, page_size, n, kernels=self.kernels, debug=self.debug)

    def extend_locs(self, table: torch.Tensor, prefix_lens: Sequence[int], extend_lens: Sequence[int],
                    page_size: int) -> torch.Tensor:
        return impl_locs.extend_locs(table, prefix_lens, extend_lens, page_size, kernels=self.kernels,
                                     debug=self.debug)

    def group_locs(self, specs: Sequence[GroupSpec], tables: Mapping[str, torch.Tensor], batch: Batch,
                   *, tail_pad: int = DEFAULT_TAIL_PAD) -> dict[str, torch.Tensor]:
        return impl_locs.group_locs(specs, tables, batch, kernels=self.kernels, debug=self.debug, tail_pad=tail_pad)

    def expand_table(self, table: torch.Tensor, ratio: int, *, max_kernel_pages: int | None = None,
                     tail_pad: int = DEFAULT_TAIL_PAD, actual_bs: int | None = None) -> torch.Tensor:
        return impl_expand(table, ratio, max_kernel_pages=max_kernel_pages, tail_pad=tail_pad,
                           actual_bs=actual_bs, kernels=self.kernels)

    def check_write_locs(self, table: torch.Tensor, locs: torch.Tensor, batch: Batch, page_size: int,
                         *, group: str | None = None) -> None:
        strong_check(table, locs, batch, page_size, group=group)

    def graph(self, specs: Sequence[GroupSpec], *, max_bs: int, max_kernel_pages: int,
              kernel_page_size: int, spec_n: int = 1, tail_pad: int = DEFAULT_TAIL_PAD, expand: bool = True
              ) -> GroupGraphBuffers:
        return GroupGraphBuffers(specs, max_bs=max_bs, max_kernel_pages=max_kernel_pages,
                                 kernel_page_size=kernel_page_size, spec_n=spec_n, tail_pad=tail_pad,
                                 expand=expand, device=self.device, kernels=self.kernels)

    allocator: type[Allocator] = Allocator
    """kvtable's own allocator-driven step (A1-A6); the zoo's allocator mutants swap it for a buggy one."""

    def alloc_decode(self, state: AllocState) -> Allocation:
        return self._allocate(state)

    def alloc_verify(self, state: AllocState) -> Allocation:
        return self._allocate(state)

    def alloc_extend(self, state: AllocState) -> Allocation:
        return self._allocate(state)

    def check_allocation(self, before: torch.Tensor, state: AllocState, allocation: Allocation) -> None:
        """A1-A6: the debug checker any allocator step can be run through (``impl.allocation.check_allocation``)."""
        check_allocation(before, state, allocation)

    def _allocate(self, state: AllocState) -> Allocation:
        """One allocator step; debug mode checks it against A1-A6 (``check_allocation``) before answering."""
        before = state.req_to_token.clone() if debug_enabled(self.debug) else None
        allocation = self.allocator().allocate(state)
        if before is not None:
            check_allocation(before, state, allocation)
        return allocation

    def ring_locs(self, table: torch.Tensor, prefix_lens: Sequence[int], extend_lens: Sequence[int], page_size: int,
                  window: int) -> tuple[torch.Tensor, torch.Tensor]:
        """R1-R3: a ring group's writes and reads; debug mode reads the ring's pages back (R1, W5)."""
        return impl_ring.ring_locs(table, prefix_lens, extend_lens, page_size, window, debug=debug_enabled(self.debug))

    def cache_groups(self, specs: Sequence[GroupSpec], *, kernel_page_size: int, max_num_pages: int,
                     spec_num_tokens: int = 1, is_draft: bool = False, expand_tables: bool = True,
                     tail_pad: int = DEFAULT_TAIL_PAD) -> TorchCacheGroups:
        """The engine-facing adapter (S1/S2 selection, per-step metadata) over this backend's kernels."""
        return TorchCacheGroups(specs, kernel_page_size=kernel_page_size, max_num_pages=max_num_pages,
                                spec_num_tokens=spec_num_tokens, is_draft=is_draft, expand_tables=expand_tables,
                                table_tail_pad=tail_pad, device=self.device, kernels=self.kernels,
                                cache_debug=self.debug)


class TorchStackedBackend(TorchBackend):
    """``TorchBackend`` whose eager calls take the stacked torch formula (``StackedTorchKernels``), the one the
    z3 obligations prove, so the whole suite judges it as it judges the default grouped paths."""

    name = "torch-stacked"

    def __init__(self, device: str = "cpu", debug: bool | None = None) -> None:
        super().__init__(device=device, debug=debug, kernels=StackedTorchKernels())
