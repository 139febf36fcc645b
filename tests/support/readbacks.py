"""Counting host reads of tensor values: on a GPU each one is a host-device sync.

``.tolist()`` and every scalar read (``.item()``, ``int()``, ``bool()``, ``float()`` of a tensor, which all
dispatch ``aten._local_scalar_dense``) are counted; CPU tensors count too, so a test that wants the count of
a device path runs it with lengths that claim to live on the device.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode


class _ScalarReads(TorchDispatchMode):
    def __init__(self, reads: list[str]) -> None:
        super().__init__()
        self.reads = reads

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func is torch.ops.aten._local_scalar_dense.default:
            self.reads.append("scalar")
        return func(*args, **(kwargs or {}))


@contextmanager
def count_readbacks() -> Iterator[list[str]]:
    """The host reads of tensor values made inside the block, one entry each."""
    reads: list[str] = []
    tolist = torch.Tensor.tolist

    def counted_tolist(self: torch.Tensor) -> Any:
        reads.append("tolist")
        return tolist(self)

    torch.Tensor.tolist = counted_tolist  # type: ignore[method-assign]
    try:
        with _ScalarReads(reads):
            yield reads
    finally:
        torch.Tensor.tolist = tolist  # type: ignore[method-assign]
