"""Named faults for the SGLang integration: each one a bug class patched into SGLang's real path at run time."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch

from kvtable.engines._shims_sglang import sglang

PREFIX_PAST_LENGTH = "prefix-past-length"
SWA_TRANSLATION = "swa-translation-off-by-one"
FREE_PAGES_LAUNCH = "free-pages-launch-off-by-one"

FAULTS: dict[str, str] = {
    PREFIX_PAST_LENGTH: "the scheduler publishes a cached prefix past its request's length (the radix match not "
    "capped at input_len - 1, Req._compute_max_prefix_len): alloc_extend_kernel starts the next request's "
    "output before its buffer, reads free_pages[-1] (a page another request holds) and slices its free list "
    "backwards",
    SWA_TRANSLATION: "SWAKVPool.translate_loc_from_full_to_swa reads mapping[loc + 1]: the SWA last_loc and "
    "the SWA write slots are one full slot off",
    FREE_PAGES_LAUNCH: "PagedTokenToKVPoolAllocator launches alloc_extend_kernel with free_pages[1:]: the kernel "
    "hands out pages one past those the allocator then slices off its free list (a page held and free at once)",
}


def check(fault: str | None) -> None:
    """A usage error for a fault this integration does not have."""
    if fault is not None and fault not in FAULTS:
        raise ValueError(f"fault {fault!r}: not a fault of sglang (known: {', '.join(FAULTS)})")


def published_prefixes(fault: str | None, mode: str, prefix_lens: Sequence[int], seq_lens: Sequence[int]
                       ) -> list[int]:
    """The prefixes the scheduler hands SGLang: as they are, or with the ``prefix-past-length`` fault request 0's
    one past its length at an extend of two or more requests (the radix match not capped at ``input_len - 1``)."""
    published = list(prefix_lens)
    if fault == PREFIX_PAST_LENGTH and mode == "extend" and len(published) > 1:
        published[0] = seq_lens[0] + 1
    return published


class _ShiftedFreePages:
    """``alloc_extend_kernel`` as the faulted allocator launches it: ``kernel[grid](...)`` with the free list
    (its fourth argument) one page further on."""

    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel

    def __getitem__(self, grid: Any) -> Any:
        def launch(*args: Any) -> Any:
            return self.kernel[grid](*args[:3], args[3][1:], *args[4:])

        return launch


@contextmanager
def patched(fault: str | None) -> Iterator[None]:
    """SGLang's code with ``fault`` patched in for the duration (input-class faults patch nothing here: the
    scheduler side publishes them)."""
    if fault == SWA_TRANSLATION:
        owner, name = sglang().swa_memory_pool.SWAKVPool, "translate_loc_from_full_to_swa"
        real = owner.translate_loc_from_full_to_swa

        def off_by_one(self: object, kv_indices: torch.Tensor) -> torch.Tensor:
            return real(self, torch.where(kv_indices >= 0, kv_indices + 1, kv_indices))

        replacement: Any = off_by_one
    elif fault == FREE_PAGES_LAUNCH:
        owner, name = sglang().paged, "alloc_extend_kernel"
        real = owner.alloc_extend_kernel
        replacement = _ShiftedFreePages(real)
    else:
        yield
        return
    setattr(owner, name, replacement)
    try:
        yield
    finally:
        setattr(owner, name, real)
