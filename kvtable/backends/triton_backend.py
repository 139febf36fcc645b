"""The Triton backend: the torch backend with its three fused kernels swapped for impl/triton_kernels.py.

Compiled kernels need CUDA tensors; without CUDA they run in the Triton interpreter on CPU tensors,
so the default device follows that choice.
"""

from __future__ import annotations

from kvtable.backends.torch_backend import TorchBackend
from kvtable.impl.triton_kernels import TritonKernels, interpreting


class TritonBackend(TorchBackend):
    """``TorchBackend`` on ``TritonKernels``; ``device`` None means CPU when interpreting, else CUDA."""

    name = "triton"

    def __init__(self, device: str | None = None, debug: bool | None = None) -> None:
        kernels = TritonKernels()  # raises ImportError without triton, before anything else
        super().__init__(device=device or ("cpu" if interpreting() else "cuda"), debug=debug, kernels=kernels)
