"""Allocator-driven traces (SGLang's route): the SGLang-style example records and checks clean, and each seeded
variant fails at the first step it differs from the good backend, naming the row and token."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kvtable.backends import load
from kvtable.trace import Recorder, TraceReader, check_trace
from kvtable.trace.allocation import POOL_FREES, AllocSimulator

ROOT = Path(__file__).resolve().parents[2]


def _run(tmp_path: Path, variant: str, *, page_size: int = 1, pool_pages: int = 400) -> Path:
    out = tmp_path / f"{variant}-{page_size}"
    name = f"{ROOT}/examples/sglang_style.py:{variant}"
    with Recorder(out, profile="sglang", backend=name) as rec:
        sim = AllocSimulator(load(name), rec, seed=0, page_size=page_size, pool_pages=pool_pages, faults=0.3)
        for _ in range(60):
            sim.step()
    return out


def _first_difference(a: Path, b: Path) -> int:
    for x, y in zip(TraceReader(a).steps(), TraceReader(b).steps(), strict=False):
        got = [x.arrays.get("locs"), x.groups.get("recorded")]
        want = [y.arrays.get("locs"), y.groups.get("recorded")]
        if x.kind == "allocate" and not (np.array_equal(got[0], want[0])
                                         and np.array_equal(got[1].table, want[1].table)):
            return x.index
    raise AssertionError("the traces agree")


@pytest.mark.parametrize("page_size", [1, 4])
def test_the_sglang_style_allocator_records_and_checks_clean(tmp_path: Path, page_size: int) -> None:
    report = check_trace(_run(tmp_path, "backend", page_size=page_size))
    assert report.violation is None and report.steps > 60


@pytest.mark.parametrize(("variant", "twin", "clause", "pool"), [
    ("backend_prefix_past_length", "backend", "A2", 400),  # page size 1: no buffer, the popped slots recorded
    ("backend_short_verify", "backend", "A2", 400),
    ("backend_int32_pool", "backend_int64_table", "A1", 3 * 10**9)])
def test_each_seeded_sglang_bug_fails_at_its_step_naming_row_and_token(tmp_path: Path, variant: str, twin: str,
                                                                       clause: str, pool: int) -> None:
    bad, good = _run(tmp_path, variant, pool_pages=pool), _run(tmp_path, twin, pool_pages=pool)
    v = check_trace(bad).violation
    assert (v.tier, v.clause) == ("safety", clause)
    assert v.step == _first_difference(bad, good)
    assert v.row is not None and v.token is not None


class LosesAFreePage:
    """The example, whose free list comes back one page short (a leak): A6 in ``trace check``."""

    def __init__(self, debug: bool | None = None) -> None:
        self.inner = load(f"{ROOT}/examples/sglang_style.py:backend", debug=debug)
        self.name, self.device = "loses-a-free-page", "cpu"

    def _short(self, got):  # type: ignore[no-untyped-def]
        import dataclasses

        return dataclasses.replace(got, free_pages=got.free_pages[:-1])

    def alloc_decode(self, state):  # type: ignore[no-untyped-def]
        return self._short(self.inner.alloc_decode(state))

    def alloc_verify(self, state):  # type: ignore[no-untyped-def]
        return self._short(self.inner.alloc_verify(state))

    def alloc_extend(self, state):  # type: ignore[no-untyped-def]
        return self._short(self.inner.alloc_extend(state))


def test_a_lost_free_page_fails_a6_at_the_first_step(tmp_path: Path) -> None:
    out = tmp_path / "lost"
    with pytest.warns(UserWarning, match="the name does not load here"), \
            Recorder(out, profile="sglang", backend="lost") as rec:
        sim = AllocSimulator(LosesAFreePage(), rec, seed=0, page_size=1, pool_pages=400)
        for _ in range(5):
            sim.step()
    v = check_trace(out).violation
    assert (v.step, v.tier, v.clause) == (0, "correct", "A6") and "is lost" in v.reason, v


WIDTH, POOL = 4, 8


def _allocate(rec: Recorder, table: np.ndarray, row: int, prefix: int, seq: int, free: list[int], req_id: int
              ) -> np.ndarray:
    """One page-size-1 allocator step of request ``req_id`` on ``row``: it takes the first free slots, records
    them, and returns the table as recorded."""
    locs = free[: seq - prefix]
    recorded = table.copy()
    recorded[row, prefix:seq] = locs
    rec.allocation("extend" if prefix == 0 else "decode", table, [row], [prefix], [seq], free, page_size=1,
                   pool_pages=POOL, locs=locs, recorded=recorded, req_ids=[req_id], free_after=free[seq - prefix:])
    return recorded


def _pool_trace(tmp_path: Path, name: str, events: str) -> Path:
    """A hand-made allocator trace: request 0 takes slots 3 and 4, then ``events`` (free, free-again, finish,
    use, new) follow, each as SGLang would record it or as a pool bug shows."""
    out = tmp_path / name
    table = np.zeros((3, WIDTH), np.int64)
    with Recorder(out, profile="sglang", backend=None, meta={POOL_FREES: True}) as rec:
        table = _allocate(rec, table, 1, 0, 2, [3, 4, 5, 6, 7, 8], req_id=0)
        for event in events.split():
            if event == "free":
                rec.pool_free("req_to_token", [3, 4], page_size=1)
            elif event == "free-again":
                rec.pool_free("req_to_token", [3], page_size=1)
            elif event == "finish":
                rec.finish([0])
            elif event == "use":  # request 0 decodes on over its freed slots 3 and 4 (staged, not yet listed)
                table = _allocate(rec, table, 1, 2, 3, [5, 6, 7, 8], req_id=0)
            elif event == "new":  # request 1 on row 2, with the free list as the allocator keeps it
                free = [5, 6, 7, 8] if "free" in events else [3, 4, 5, 6, 7, 8]
                table = _allocate(rec, table, 2, 0, 1, free, req_id=1)
    return out


def test_pool_frees_between_steps_check_clean(tmp_path: Path) -> None:
    report = check_trace(_pool_trace(tmp_path, "clean", "finish free new"))
    assert report.violation is None and report.steps == 4


@pytest.mark.parametrize(("events", "step", "says"), [
    ("finish free free-again", 3, "page 3 freed twice: the free at step 2 freed it already"),
    ("free use", 2, "page 3 used after free: request 0 (row 1, position 0) holds it, but the free at step 1"),
    ("new", 1, "page 3 is on the free list while request 0 (step 0) holds it: no free released it")])
def test_a6_across_steps_names_double_free_use_after_free_and_free_while_held(
        tmp_path: Path, events: str, step: int, says: str) -> None:
    v = check_trace(_pool_trace(tmp_path, events.replace(" ", "-"), events)).violation
    assert (v.step, v.tier, v.clause, v.group, v.loc) == (step, "safety", "A6", "req_to_token", 3), v
    assert says in v.reason, v.reason
