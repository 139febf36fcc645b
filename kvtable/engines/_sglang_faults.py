"""Named faults for the SGLang integration: each one a bug class patched into SGLang's real path at run time."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from kvtable.engines._shims_sglang import sglang

PREFIX_PAST_LENGTH = "prefix-past-length"
SWA_TRANSLATION = "swa-translation-off-by-one"

FAULTS: dict[str, str] = {
    PREFIX_PAST_LENGTH: "the scheduler publishes a cached prefix past its request's length (the radix match not "
    "capped at input_len - 1, Req._compute_max_prefix_len): alloc_extend_kernel starts the next request's "
    "output before its buffer and reads free_pages[-1] (sglang issue 28, point 8)",
    SWA_TRANSLATION: "SWAKVPool.translate_loc_from_full_to_swa reads mapping[loc + 1]: the SWA last_loc and "
    "the SWA write slots are one full slot off",
}


def check(fault: str | None) -> None:
    """A usage error for a fault this integration does not have."""
    if fault is not None and fault not in FAULTS:
        raise ValueError(f"fault {fault!r}: not a fault of sglang (known: {', '.join(FAULTS)})")


@contextmanager
def patched(fault: str | None) -> Iterator[None]:
    """SGLang's code with ``fault`` patched in for the duration (input-class faults patch nothing here: the
    scheduler side publishes them)."""
    if fault != SWA_TRANSLATION:
        yield
        return
    pool = sglang().swa_memory_pool.SWAKVPool
    real = pool.translate_loc_from_full_to_swa

    def off_by_one(self: object, kv_indices: torch.Tensor) -> torch.Tensor:
        return real(self, torch.where(kv_indices >= 0, kv_indices + 1, kv_indices))

    pool.translate_loc_from_full_to_swa = off_by_one
    try:
        yield
    finally:
        pool.translate_loc_from_full_to_swa = real
