"""transformers' own sliding allocator against R1-R3: for random steps, the write and read indices its
``SlidingAttentionCacheAllocator`` computes, read as kvtable slots, are the transformers profile's."""

from __future__ import annotations

import json
import random
import subprocess

from kvtable.backends.profiles import get_profile
from kvtable.contract import RING_SENTINEL
from kvtable.reference.ring import ring_columns

SENTINEL, BLOCKS_PER_SECTOR = 1, 3
"""transformers' ``sentinel_index``; its write trash is the first block of sector 1, ``BLOCKS_PER_SECTOR``."""

SCRIPT = """
import json, sys
from transformers.generation.continuous_batching.cache_allocators.sliding_attention import (
    SlidingAttentionCacheAllocator as Sliding)
out = []
for window, ps, stride, pages, past, query, trash in json.loads(sys.stdin.read()):
    allocator = Sliding.__new__(Sliding)  # the index methods read only these; no model, no cache tensor
    allocator.sliding_window, allocator.tokens_per_page, allocator.block_physical_stride = window, ps, stride
    allocator.block_table, allocator.sentinel_index, allocator.write_trash_index = {"r": pages}, 1, trash
    out.append([allocator.get_write_indices("r", past, query), allocator.get_read_indices("r", past, query)])
print(json.dumps(out))
"""


def _cases(count: int) -> list[list]:
    rng = random.Random(0)
    cases = []
    for _ in range(count):
        window, ps, layers = rng.randint(1, 12), rng.choice((1, 2, 3, 4, 8)), rng.randint(1, 3)
        past, query = rng.randint(0, 40), rng.randint(1, 20)
        stride = 2 * ps * layers  # keys and values of every layer of the group
        pages = rng.sample(range(2 * BLOCKS_PER_SECTOR, 200), ring_columns(past + query, window, ps))
        cases.append([window, ps, stride, pages, past, query, stride * BLOCKS_PER_SECTOR])
    return cases


def _slot(index: int, ps: int, stride: int, trash: int, *, read: bool) -> int:
    """transformers' index as kvtable reads it: the write trash is the pad slot, the sentinel RING_SENTINEL."""
    if read and index == SENTINEL:
        return RING_SENTINEL
    if not read and index == trash:
        return get_profile("transformers").pad_slot
    return index // stride * ps + index % stride


def test_the_real_sliding_allocator_is_the_rings_reference(engine_python_of) -> None:
    cases = _cases(400)
    done = subprocess.run([str(engine_python_of("transformers")), "-c", SCRIPT], input=json.dumps(cases),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    profile = get_profile("transformers")
    for (window, ps, stride, pages, past, query, trash), (writes, reads) in zip(cases, json.loads(done.stdout),
                                                                               strict=True):
        table = [pages]
        assert [_slot(i, ps, stride, trash, read=False) for i in writes] == profile.ring_write_locs(
            table, [past], [query], ps, window)
        assert [_slot(i, ps, stride, trash, read=True) for i in reads] == profile.ring_read_locs(
            table, [past], [query], ps, window)
