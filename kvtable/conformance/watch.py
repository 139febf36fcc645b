"""Every backend call watched for what no result shows: out-of-bounds indexing and writes into its inputs.

``watched`` runs one call under ``oob.IndexGuard`` and compares its inputs after it (``integrity.Inputs``);
what it finds is kept in ``FOUND`` (as the Triton guard of ``--sanitize`` keeps its blocked accesses) for
``Context.example`` to turn into a safety failure, whatever the property made of the call's exception: a
property may take any exception for a refusal, and an out-of-bounds read is never one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import torch

from kvtable.conformance import integrity, oob

__all__ = ["FOUND", "watched"]

Inputs: type[integrity.Inputs] = integrity.Inputs
IndexGuard: Callable[[Callable[[oob.OutOfBoundsIndex], None]], AbstractContextManager[Any]] = oob.IndexGuard
"""The input check and the index guard ``watched`` runs, looked up at each call (bench/tester_profile.py times
them by swapping its own in)."""

FOUND: list[Exception] = []
"""What the watched calls (and ``--sanitize``'s Triton guard) found since the example started."""


@contextmanager
def watched(call: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
            exempt: Iterable[torch.Tensor] = ()) -> Iterator[None]:
    """Run one backend call: its indexing ops bounds-checked, its inputs compared with their copies after it."""
    inputs = Inputs(call, fn, args, kwargs, exempt)
    try:
        with IndexGuard(lambda hit: FOUND.append(dataclasses.replace(hit, call=call))):
            yield
    finally:
        if (changed := inputs.changed()) is not None:
            FOUND.append(changed)
