"""The tester's examples on one torch thread: an intra-op thread pool costs small tensors more than it saves.

A property's tensors hold a few to a few thousand entries; torch's CPU kernels split such an op across its
intra-op threads (``repeat_interleave``, ``cumsum``, ``sort``), and the thread that hands work out spins while it
waits for the others. On a busy machine the others wait for a core, so one ``repeat_interleave`` of four
entries costs milliseconds of CPU instead of microseconds. Integer results do not depend on the thread count,
so no verdict does either.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

__all__ = ["one_thread"]


@contextmanager
def one_thread() -> Iterator[None]:
    """Torch's CPU ops run on one intra-op thread inside; the caller's thread count is restored after."""
    threads = torch.get_num_threads()
    if threads > 1:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        if threads > 1:
            torch.set_num_threads(threads)
