"""transformers 5.23.0 as installed, judged by kvtable: its allocators under ``conform``, a real 200-batch run of its
continuous batching under ``trace check``, and each seeded fault caught at the safety tier and at its first step."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from kvtable.trace import TraceReader

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("transformers")]
"""One worker runs them all under ``-n``, so the clean run they share is recorded once."""

BACKEND = "kvtable.engines.transformers:backend"
STEPS = "200"
MIN_APPLIED = 20
"""Properties that must apply to transformers' operations (issue 27's acceptance)."""


def _conform(kvtable_in, backend: str, *args: str):
    return kvtable_in("transformers", "conform", "--backend", backend, "--profile", "transformers", "--examples", "20",
                      "--no-progress", "--no-isolate", *args)


def test_conform_passes_on_transformers_own_allocators(kvtable_in) -> None:
    done = _conform(kvtable_in, BACKEND, "--level", "correct", "--json")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(done.stdout)
    applied = [r for r in report["results"] if r["status"] != "not applicable"]
    assert len(applied) >= MIN_APPLIED, sorted(r["property"] for r in applied)
    assert {r["status"] for r in applied} == {"passed"}
    assert {"ring/writes", "ring/reads", "group_locs/extend", "decode_locs"} <= {r["property"] for r in applied}


@pytest.mark.parametrize(("fault", "prop", "clause"), [("ring-off-by-one", "ring/slots-safe", "R1 ring-slot"),
                                                        ("full-off-by-one", "group_locs/extend", "W3 extend-loc")])
def test_conform_catches_each_fault_at_the_safety_tier(kvtable_in, fault: str, prop: str, clause: str) -> None:
    spec = "kvtable.engines.transformers:backend_" + fault.replace("-", "_")
    done = _conform(kvtable_in, spec, "--level", "safety", "--property", prop)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"FAIL: {clause}" in done.stdout.splitlines()[-1]


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory, kvtable_in) -> Path:
    """One 200-batch run at seed 0 (shared: the fault tests compare their runs with it)."""
    out = tmp_path_factory.mktemp("transformers") / "clean"
    done = kvtable_in("transformers", "trace", "record", "--engine", "transformers", "--steps", STEPS, "--seed", "0",
                      "--out", out)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"recorded {STEPS} steps of transformers 5.23.0" in done.stdout
    return out


def test_a_200_batch_run_is_clean_with_its_sliding_group_as_a_ring(kvtable_in, clean_run: Path) -> None:
    done = kvtable_in("transformers", "trace", "check", clean_run, "--profile", "transformers")
    assert done.returncode == 0, done.stdout[-3000:]
    assert "clean" in done.stdout
    steps = [s for s in TraceReader(clean_run).steps() if s.kind == "extend"]
    assert len(steps) == int(STEPS)
    ring = [s.groups["sliding_attention"] for s in steps]
    assert sum(g.reads is not None for g in ring) > 100  # chunked prefill and decodes read their window
    assert any((g.locs == -1).any() for g in ring)  # chunks longer than the window write the trash
    assert sum(1 for s in TraceReader(clean_run).steps() if s.kind == "finish") > 20  # requests keep arriving


def _first_difference(clean: Path, faulted: Path) -> int:
    """The first step whose locations (writes or ring reads) differ between two runs of the same schedule."""
    for a, b in zip(TraceReader(clean).steps(), TraceReader(faulted).steps(), strict=False):
        assert (a.index, a.kind) == (b.index, b.kind)
        for gid, group in a.groups.items():
            other = b.groups[gid]
            if not np.array_equal(group.locs, other.locs) or not np.array_equal(group.reads, other.reads):
                return a.index
    raise AssertionError("the fault never changed a location")


@pytest.mark.parametrize(("fault", "group"), [("ring-off-by-one", "sliding_attention"),
                                              ("full-off-by-one", "full_attention")])
def test_trace_check_names_the_step_each_fault_first_shows_at(kvtable_in, clean_run: Path, tmp_path: Path,
                                                              fault: str, group: str) -> None:
    out = tmp_path / fault
    done = kvtable_in("transformers", "trace", "record", "--engine", "transformers", "--steps", STEPS, "--seed", "0",
                      "--fault", fault, "--out", out)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    checked = kvtable_in("transformers", "trace", "check", out, "--profile", "transformers")
    assert checked.returncode == 1, checked.stdout[-3000:]
    step = _first_difference(clean_run, out)
    failed = re.search(r"step (\d+) \[(\w+)\] [^:]*: group '(\w+)'", checked.stdout)
    assert failed is not None, checked.stdout[-3000:]
    assert (int(failed[1]), failed[2], failed[3]) == (step, "safety", group)
