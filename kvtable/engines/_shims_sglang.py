"""Every shim SGLang 0.5.23 needs on a CPU beside torch 2.13.0, and the one place that imports it.

Two shims, nothing else:

- ``TRITON_INTERPRET=1`` before Triton is imported: SGLang's allocator, token-pool and cache-location kernels
  run under Triton's interpreter on host tensors.
- A stub ``torchvision`` (``torchvision.transforms`` with ``InterpolationMode`` and ``functional``):
  ``sglang.srt.configs`` imports it for multimodal configs only. Installing the real one would replace
  torch, so the stub goes into ``sys.modules`` after transformers has decided torchvision is unavailable
  (transformers then never touches it).

``sglang()`` returns the SGLang modules the integration calls, imported once (its import-time warnings that
AWQ and GGUF quantization need CUDA silenced: nothing here quantizes).
"""

from __future__ import annotations

import enum
import os
import sys
import warnings
from functools import cache
from types import ModuleType, SimpleNamespace


class _InterpolationMode(enum.Enum):
    """What the multimodal configs read off ``torchvision.transforms.InterpolationMode`` at import time."""

    NEAREST = "nearest"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"


def _stub_torchvision() -> None:
    """Put a stub ``torchvision`` with ``transforms`` (and its ``functional``) into ``sys.modules``."""
    if "torchvision" in sys.modules:
        return
    from transformers.utils import import_utils

    import_utils.is_torchvision_available()  # decided (False) before the stub exists
    root, transforms, functional = (ModuleType(n) for n in ("torchvision", "torchvision.transforms",
                                                            "torchvision.transforms.functional"))
    functional.__dict__.update(InterpolationMode=_InterpolationMode)  # the stub modules' namespaces
    transforms.__dict__.update(InterpolationMode=_InterpolationMode, functional=functional)
    root.__dict__.update(transforms=transforms)
    sys.modules.update({m.__name__: m for m in (root, transforms, functional)})


ENV = {"TRITON_INTERPRET": "1"}
"""What SGLang's kernels need on a CPU (``ENGINE.env``), set unless the user set it, before Triton is imported."""


@cache
def sglang() -> SimpleNamespace:
    """The SGLang modules kvtable drives (memory pools, allocators, their Triton kernels), imported with the
    shims in place; ``ImportError`` if SGLang is not installed here."""
    for name, value in ENV.items():
        os.environ.setdefault(name, value)
    _stub_torchvision()
    with warnings.catch_warnings():  # "Only CUDA ... support AWQ / GGUF": nothing here quantizes
        warnings.simplefilter("ignore", UserWarning)
        return _import()


def _import() -> SimpleNamespace:
    from sglang.kernels.ops.memory import common as pool_kernels
    from sglang.kernels.ops.speculative import cache_locs
    from sglang.srt import utils
    from sglang.srt.managers import schedule_batch
    from sglang.srt.mem_cache import allocation, allocation_sizing, common, memory_pool, swa_memory_pool
    from sglang.srt.mem_cache.allocator import paged, swa, token

    return SimpleNamespace(pool_kernels=pool_kernels, cache_locs=cache_locs, schedule_batch=schedule_batch,
                           allocation=allocation, allocation_sizing=allocation_sizing, common=common,
                           memory_pool=memory_pool, swa_memory_pool=swa_memory_pool, paged=paged, swa=swa,
                           token=token, utils=utils)
