"""R1-R3: the ring reference by hand (transformers' numbers), impl/ring.py against it, refusals and the oracle."""

from __future__ import annotations

import random

import pytest
import torch

from kvtable.backends.reference_backend import ReferenceBackend
from kvtable.backends.torch_backend import TorchBackend
from kvtable.contract import RING_SENTINEL, Batch, GroupSpec
from kvtable.errors import ContractViolation
from kvtable.impl.ring import ring_locs
from kvtable.reference import ring
from kvtable.reference.tables import specs_by_id

# Window 8, page size 4: a ring of two pages. Row 0 has 10 tokens cached and decodes one; row 1 prefills 3 from
# nothing; row 2 has 3 cached and a 12-token chunk, longer than the window.
TABLE = [[5, 6, -1], [7, -1, -1], [9, 10, -1]]
PREFIX, EXTEND = [10, 0, 3], [1, 3, 12]


def test_slots_are_position_mod_window_in_the_ring_pages() -> None:
    assert ring.ring_pages(8, 4) == 2 and ring.ring_pages(6, 4) == 2 and ring.ring_pages(1, 4) == 1
    assert [ring.ring_slot([5, 6], p, 8, 4) for p in (0, 3, 4, 7, 8, 10)] == [20, 23, 24, 27, 20, 22]
    # window 6 over two pages of 4: the span is the window, so position 6 wraps to index 0, not to slot 26
    assert [ring.ring_slot([5, 6], p, 6, 4) for p in (5, 6, 7)] == [25, 20, 21]
    assert ring.ring_columns(3, 8, 4) == 1 and ring.ring_columns(30, 8, 4) == 2


def test_writes_store_the_last_window_and_sink_the_rest() -> None:
    writes = ring.ring_write_locs(TABLE, PREFIX, EXTEND, 4, 8)
    # row 0: position 10 -> index 2; row 1: positions 0..2; row 2: positions 3..6 unstored (sink 0), 7..14 stored
    assert writes == [22, 28, 29, 30, 0, 0, 0, 0, 43, 36, 37, 38, 39, 40, 41, 42]


def test_reads_take_the_first_querys_cached_window_then_sentinels() -> None:
    reads = ring.ring_read_locs(TABLE, PREFIX, EXTEND, 4, 8)
    s = RING_SENTINEL
    assert reads == [23, 24, 25, 26, 27, 20, 21, s] + [s] * 3 + [36, 37, 38] + [s] * 12
    assert ring.ring_read_locs([[5]], [4], [0], 4, 8) == []  # no new tokens: no reads


@pytest.mark.parametrize(("table", "prefix", "extend", "where", "match"), [
    ([[5, 0]], [4], [4], (0, 1), "not a real page"),
    ([[5, 6], [6, 7]], [0, 0], [8, 8], (1, 0), "also in row 0"),
    ([[5, 5]], [0], [8], (0, 1), "twice"),
    ([[5, 6, 7]], [0], [2], (0, 2), "past the ring"),
    ([[5]], [0], [8], (0, None), "needs 2 pages"),
])
def test_broken_rings_are_refused_as_r1_naming_the_entry(table, prefix, extend, where, match) -> None:
    with pytest.raises(ContractViolation, match=match) as ref:
        ring.ring_write_locs(table, prefix, extend, 4, 8)
    with pytest.raises(ContractViolation) as imp:
        ring_locs(torch.tensor(table, dtype=torch.int32), prefix, extend, 4, 8, debug=True)
    for err in (ref.value, imp.value):
        assert err.clause_id == "R1" and (err.row, err.col) == where


def test_lengths_and_window_are_refused_by_their_clauses() -> None:
    table = torch.tensor([[5, 6]], dtype=torch.int32)
    for prefix, extend, window, clause in (([-1], [1], 8, "T9"), ([0], [1, 2], 8, "T9"), ([0], [1], 0, "R1")):
        with pytest.raises(ContractViolation) as ref:
            ring.ring_read_locs(table.tolist(), prefix, extend, 4, window)
        with pytest.raises(ContractViolation) as imp:
            ring_locs(table, prefix, extend, 4, window)
        assert ref.value.clause_id == imp.value.clause_id == clause


def test_a_ring_group_is_refused_by_the_batch_calls() -> None:
    spec = GroupSpec("swa", "sliding", 4, window=8, layout="ring")
    assert GroupSpec("swa", "sliding", 4, window=8).layout == "holes"
    with pytest.raises(ContractViolation, match="ring_locs") as err:
        specs_by_id([spec])
    assert err.value.clause_id == "R1" and err.value.group == "swa"
    with pytest.raises(ValueError, match="layout"):
        specs_by_id([GroupSpec("full", "full", 4, layout="ring")])
    table = {"swa": torch.tensor([[1, 2]], dtype=torch.int32)}
    for backend in (TorchBackend(), ReferenceBackend()):
        with pytest.raises(ContractViolation) as locs:
            backend.group_locs([spec], table, Batch((3,)))
        with pytest.raises(ContractViolation) as graph:
            backend.graph([spec], max_bs=2, max_kernel_pages=2, kernel_page_size=4)
        for err in (locs.value, graph.value):
            assert err.clause_id == "R1" and err.group == "swa"


def test_impl_agrees_with_the_reference_on_random_steps() -> None:
    rng = random.Random(0)
    for _ in range(120):
        window, ps, rows = rng.randint(1, 12), rng.choice((1, 2, 3, 4, 8)), rng.randint(1, 4)
        prefix = [rng.randint(0, 40) for _ in range(rows)]
        extend = [rng.randint(0, 20) for _ in range(rows)]
        need = [ring.ring_columns(p + e, window, ps) if e else 0 for p, e in zip(prefix, extend, strict=True)]
        pages = iter(rng.sample(range(1, 1000), sum(need)))
        width = max(max(need), 1) + rng.randint(0, 2)
        table = [[next(pages) for _ in range(n)] + [-1] * (width - n) for n in need]
        writes, reads = ring_locs(torch.tensor(table, dtype=torch.int32), prefix, extend, ps, window, debug=True)
        assert writes.dtype == reads.dtype == torch.int32
        assert writes.tolist() == ring.ring_write_locs(table, prefix, extend, ps, window)
        assert reads.tolist() == ring.ring_read_locs(table, prefix, extend, ps, window)
        assert ring.ring_unsafe(table, writes, reads, prefix, extend, ps, window) == []


def test_the_oracle_names_a_shifted_write_and_a_foreign_read() -> None:
    writes = ring.ring_write_locs(TABLE, PREFIX, EXTEND, 4, 8)
    reads = ring.ring_read_locs(TABLE, PREFIX, EXTEND, 4, 8)
    shifted = [ring.ring_slot(TABLE[0], 11, 8, 4), *writes[1:]]  # position 10 written at position 11's slot
    (bad,) = ring.ring_unsafe(TABLE, shifted, reads, PREFIX, EXTEND, 4, 8)
    assert (bad.row, bad.token, bad.position, bad.loc) == (0, 0, 10, 23) and "own ring" in bad.reason
    foreign = [28, *reads[1:]]  # row 0 reads a slot of row 1's page 7
    (bad,) = ring.ring_unsafe(TABLE, writes, foreign, PREFIX, EXTEND, 4, 8)
    assert (bad.row, bad.loc) == (0, 28) and "outside the row's own ring" in bad.reason
    raced = writes[:4] + [ring.ring_slot(TABLE[2], 3, 8, 4)] + writes[5:]  # unstored position 3 writes its slot
    (bad,) = ring.ring_unsafe(TABLE, raced, reads, PREFIX, EXTEND, 4, 8)
    assert bad.position == 3 and "not stored" in bad.reason


def test_outside_debug_a_pad_in_the_ring_sinks_the_write() -> None:
    writes, reads = ring_locs(torch.tensor([[5, -1]], dtype=torch.int32), [0], [8], 4, 8)
    assert writes.tolist() == [20, 21, 22, 23, 0, 1, 2, 3]
    assert ring.ring_unsafe([[5, -1]], writes, reads, [0], [8], 4, 8) == []
