"""The pure parts of ``kvtable.engines.transformers`` (no transformers needed): how its indices read as kvtable slots,
the recorded rows, the workload and the faults' names; the engine itself runs in ``tests/engines``."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from kvtable.backends.profiles import get_profile
from kvtable.contract import RING_SENTINEL
from kvtable.engines import transformers as tf

ALLOCATOR = SimpleNamespace(block_physical_stride=16, tokens_per_page=4, write_trash_index=16, sentinel_index=1)
"""Two layers of keys and values per block at page size 4, one block per sector: the write trash is block 1."""


def test_an_index_reads_as_its_block_and_offset_and_the_trash_as_the_pad_slot() -> None:
    got = tf.slots([127 * 16 + 3, 16, 0, 2 * 16], ALLOCATOR)
    assert got.tolist() == [127 * 4 + 3, get_profile("transformers").pad_slot, 0, 2 * 4]


def test_a_shift_maps_blocks_past_the_trash_sectors_back_to_pages() -> None:
    assert tf.slots([3 * 16 + 1, 0], ALLOCATOR, shift=2).tolist() == [1 * 4 + 1, 0]


def test_the_sentinel_index_reads_as_the_ring_sentinel() -> None:
    assert tf.read_slots([1, 1, 40], ALLOCATOR).tolist() == [RING_SENTINEL, RING_SENTINEL, 2 * 4 + 8]


def test_block_lists_are_recorded_padded_with_block_0() -> None:
    assert tf.padded_rows([[5, 6], [7], []]).tolist() == [[5, 6], [7, 0], [0, 0]]
    assert tf.padded_rows([[]]).shape == (1, 1)


def test_the_workload_is_seeded_and_outlasts_the_steps() -> None:
    assert tf.workload(3, 200) == tf.workload(3, 200) != tf.workload(4, 200)
    requests = tf.workload(0, 200)
    assert len(requests) == 108
    assert all(1 <= t < 256 for prompt, _ in requests for t in prompt)
    assert np.mean([len(p) + n for p, n in requests]) > 30


def test_each_fault_has_a_backend_and_the_run_declares_the_ring() -> None:
    assert set(tf.FAULTS) == {"ring-off-by-one", "full-off-by-one"}
    assert tf.backend_ring_off_by_one.keywords == {"fault": "ring-off-by-one"}
    assert {f"backend_{fault.replace('-', '_')}" for fault in tf.FAULTS} <= set(dir(tf))
    assert [s.layout for s in tf.group_specs()] == ["holes", "ring"]
