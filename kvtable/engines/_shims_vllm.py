"""Every shim vLLM 0.33's KV-table code needs on a CPU, in one place: applied once, before vllm is imported.

1. ``VLLM_TARGET_DEVICE=cpu`` (else ``CpuGpuBuffer.copy_to_gpu`` asks for an accelerator), ``HF_HUB_OFFLINE=1``
   and ``TRITON_INTERPRET=1`` (the engine's Triton kernels run in Triton's interpreter), from ``ENGINE.env``;
2. Triton's NVIDIA driver reports itself active while ``vllm.triton_utils`` is imported: otherwise vLLM finds no
   active driver and swaps every ``@triton.jit`` kernel for a placeholder that cannot run;
3. a tiny local model folder (a ``LlamaConfig``, no weights) for ``ModelConfig``, which the scheduler's config needs.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path


@contextlib.contextmanager
def _nvidia_driver_active() -> Iterator[None]:
    """Triton's NVIDIA driver answers ``is_active() -> True`` inside, and what it answered after."""
    from triton.backends import backends

    driver = backends["nvidia"].driver
    saved = driver.__dict__.get("is_active")
    driver.is_active = staticmethod(lambda: True)
    try:
        yield
    finally:
        if saved is None:
            del driver.is_active
        else:
            driver.is_active = saved


_PREPARED: list[bool] = []
_MODEL_DIRS: dict[str, tempfile.TemporaryDirectory[str]] = {}


def prepare(env: Mapping[str, str]) -> None:
    """Set ``env`` and import ``vllm.triton_utils`` with the NVIDIA driver reported active (once per process)."""
    if _PREPARED:
        return
    os.environ.update(env)
    with _nvidia_driver_active():
        import vllm.triton_utils

    if not vllm.triton_utils.HAS_TRITON:
        raise RuntimeError("vllm.triton_utils found no Triton: its kernels would be placeholders")
    _PREPARED.append(True)


def model_dir() -> Path:
    """A folder holding a tiny Llama ``config.json`` (no weights, no tokenizer): what ``ModelConfig`` loads; made
    once per process and removed when it ends."""
    if "model" not in _MODEL_DIRS:
        from transformers import LlamaConfig

        folder = _MODEL_DIRS["model"] = tempfile.TemporaryDirectory(prefix="kvtable-vllm-model-")
        LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, vocab_size=256, max_position_embeddings=4096).save_pretrained(folder.name)
    return Path(_MODEL_DIRS["model"].name)
