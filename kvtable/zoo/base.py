"""What every zoo mutant shares: a ``TorchBackend`` whose graph runner (or kernels) is swapped for a buggy one.

A mutant changes exactly one behaviour of the conforming torch backend, the way the upstream bug did;
everything else is the real implementation, so whatever the suite reports is that one bug.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvtable.backends.torch_backend import TorchBackend
from kvtable.impl.graph import GroupGraphBuffers
from kvtable.impl.kernels import Kernels
from kvtable.impl.torch_kernels import TORCH_KERNELS
from kvtable.reference.model import DEFAULT_TAIL_PAD, GroupSpec


class ZooBackend(TorchBackend):
    """``TorchBackend`` with a class-level choice of graph runner and kernels; subclasses name one bug."""

    name = "zoo"
    runner: type[GroupGraphBuffers] = GroupGraphBuffers

    def __init__(self, device: str = "cpu", debug: bool | None = None, kernels: Kernels | None = None) -> None:
        super().__init__(device=device, debug=debug, kernels=kernels or self.default_kernels())

    def default_kernels(self) -> Kernels:
        """The kernels this mutant runs on (the conforming torch ones unless the bug lives in a kernel)."""
        return TORCH_KERNELS

    def graph(self, specs: Sequence[GroupSpec], *, max_bs: int, max_kernel_pages: int,
              kernel_page_size: int, spec_n: int = 1, tail_pad: int = DEFAULT_TAIL_PAD, expand: bool = True
              ) -> GroupGraphBuffers:
        return self.runner(specs, max_bs=max_bs, max_kernel_pages=max_kernel_pages,
                           kernel_page_size=kernel_page_size, spec_n=spec_n, tail_pad=tail_pad, expand=expand,
                           device=self.device, kernels=self.kernels)
