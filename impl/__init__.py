"""The optimized implementation: vectorized torch (and, through ``Kernels``, Triton) per-group tables.

impl/routes.py names every route of every fused operation (``python -m kvtable.impl.routes``).

Functional API (every group at once, one fused kernel call per step) plus the graph buffers and the
``CacheGroupsMixin`` built on it. ``kvtable.backends.torch_backend.TorchBackend`` wraps it as a Backend.
"""

from kvtable.impl.checker import check_write_locs
from kvtable.impl.expand import expand_table, page_ratio
from kvtable.impl.graph import GroupGraphBuffers
from kvtable.impl.kernels import Kernels
from kvtable.impl.locs import (
    decode_locs,
    extend_group_locs,
    extend_locs,
    fixed_group_locs,
    group_locs,
    group_seq_locs,
    reanchor_locs,
    verify_locs,
)
from kvtable.impl.mixin import CacheGroupsMixin, GroupMetadata
from kvtable.impl.torch_kernels import TORCH_KERNELS, StackedTorchKernels, TorchKernels
from kvtable.impl.validate import DEBUG_ENV, debug_enabled

__all__ = [
    "DEBUG_ENV", "TORCH_KERNELS", "CacheGroupsMixin", "GroupGraphBuffers", "GroupMetadata", "Kernels",
    "StackedTorchKernels", "TorchKernels", "check_write_locs", "debug_enabled", "decode_locs", "expand_table",
    "extend_group_locs", "extend_locs", "fixed_group_locs", "group_locs", "group_seq_locs", "page_ratio",
    "reanchor_locs", "verify_locs",
]
