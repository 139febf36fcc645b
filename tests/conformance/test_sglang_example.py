"""The SGLang-style example (examples/sglang_style.py): it passes the allocator route under its profile, and each
seeded SGLang bug class fails at the safety tier naming the request's row and the token."""

from __future__ import annotations

import dataclasses
import re

import pytest
import torch

from kvtable.backends import load
from kvtable.conformance.properties import alloc, select
from kvtable.conformance.runner import run_conformance

EXAMPLE = "examples/sglang_style.py"
ALLOC = [p.name for p in alloc.PROPERTIES if not p.name.startswith("alloc/debug-")]
"""The allocator route's properties (the debug-mode ones, ``alloc/debug-*``, need a debug checker)."""


def load_example(factory: str, *, debug: bool) -> object:
    return load(f"{EXAMPLE}:{factory}", debug=debug)


@pytest.fixture(autouse=True)
def _from_the_repo_root(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    monkeypatch.chdir(request.config.rootpath)  # the example path is relative to a clone's root


LENGTHS = {"alloc/prefix-past-length", "alloc/short-verify"}
"""Lengths SGLang's scheduler never builds: not drawn under ``sglang``, drawn under ``sglang+any``."""


@pytest.mark.parametrize("profile", ["sglang", "sglang+any"])
def test_the_example_passes_every_allocator_property_under_its_profile(profile: str) -> None:
    report = run_conformance(f"{EXAMPLE}:backend", examples=15, seed=0, profile=profile, properties=select(ALLOC),
                             level="correct")
    assert report.passed, report.details()
    skipped = set() if profile.endswith("+any") else LENGTHS
    assert sorted(r.property for r in report.results if r.passed) == sorted(set(ALLOC) - skipped)
    assert {r.property for r in report.results if r.status == "not applicable"} == skipped and len(ALLOC) == 30


@pytest.mark.parametrize(("factory", "prop", "clause", "what", "level"), [
    ("backend_prefix_past_length", "alloc/prefix-past-length", "A", r"page \d+ handed out again: request \d", "safety"),
    ("backend_short_verify", "alloc/short-verify", "A2", r"changed row \d+ col \d+", "safety"),
    ("backend_int32_pool", "alloc/int32-slots", "A1", r"recorded -\d+ at its position, not the chosen \d{10}",
     "safety+latent"),
])
def test_each_seeded_sglang_bug_fails_safety_naming_row_and_token(factory: str, prop: str, clause: str,
                                                                   what: str, level: str) -> None:
    """The int32 wrap needs a pool of 2^31 slots: it fails only with the latent tier judged (``--latent``); the
    broken lengths are drawn in the wide domain only."""
    profile = "sglang+any" if prop in LENGTHS else "sglang"
    report = run_conformance(f"{EXAMPLE}:{factory}", examples=15, seed=0, profile=profile, properties=select([prop]),
                             level=level, shrink=False)
    [result] = report.results
    tier = "latent" if level.endswith("+latent") else "safety"
    assert not result.passed and result.tier == tier and result.clause.startswith(clause), report.details()
    named = re.search(r"request \d+ \(row [1-9]\d*\) token (-?\d+|None) position (-?\d+) loc -?\d+: " + what,
                      result.message)
    assert named, result.message
    if clause == "A2":  # the token recorded from the negative start is one with no position of its own
        assert int(named.group(2)) < 0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_int32_slots_blame_only_the_steps_own_tokens(seed: int) -> None:
    """The rows before the step hold slots an int32 table holds; only the slots the step takes pass 2^31, so
    every fault is the step's own recording (A1), never a row it did not touch (A2)."""
    report = run_conformance(f"{EXAMPLE}:backend_int32_pool", examples=15, seed=seed, profile="sglang",
                             properties=select(["alloc/int32-slots"]), level="safety+latent")
    [result] = report.results
    assert not result.passed and {f.clause for f in result.failures} == {"A1 alloc-recorded"}, report.details()
    assert {f.tier for f in result.failures} == {"latent"} and "needs >= 2^31 slots" in result.message


def test_a_latent_failure_is_reported_but_passes_the_run_without_latent() -> None:
    """SGLang's int32 table wraps only past 2^31 slots: at ``--level safety`` the run passes, the failure a note."""
    report = run_conformance(f"{EXAMPLE}:backend", examples=15, seed=0, profile="sglang",
                             properties=select(["alloc/int32-slots"]), level="safety")
    [result] = report.results
    assert report.passed and [f.tier for f in result.notes] == ["latent"], report.details()


class Int32SwaLocations:
    """The example as older SGLang releases return SWA locations: cast to int32."""

    def __init__(self, debug: bool | None = None) -> None:
        self.inner = load_example("backend", debug=bool(debug))
        self.name, self.device = "sglang-style-int32-swa", "cpu"

    def alloc_extend(self, state):  # type: ignore[no-untyped-def]
        got = self.inner.alloc_extend(state)
        return dataclasses.replace(got, swa_locs=None if got.swa_locs is None else got.swa_locs.to(torch.int32))


def test_swa_locations_pass_as_int64_and_as_int32_under_the_profile() -> None:
    """SGLang returns the int64 mapping's entries (0.5.2x) or casts them to int32 (older): both are its engine."""
    for spec in (f"{EXAMPLE}:backend", f"{__name__}:Int32SwaLocations"):
        report = run_conformance(spec, examples=10, seed=0, profile="sglang", properties=select(["alloc/swa-extend"]),
                                 level="correct", isolate=False)
        assert report.passed and report.results[0].examples > 0, report.details()


def test_a_seeded_bug_passes_the_properties_of_the_other_classes() -> None:
    """Each variant changes one behaviour: the short-verify one still allocates and records valid steps right."""
    report = run_conformance(f"{EXAMPLE}:backend_short_verify", examples=10, seed=1, profile="sglang",
                             properties=select(["alloc/decode", "alloc/extend", "alloc/prefix-past-length"]))
    assert report.passed, report.details()


def test_debug_mode_is_sglangs_memory_pool_asserts() -> None:
    """``debug=True`` (SGLANG_DEBUG_MEMORY_POOL) asserts that last_loc agrees with the prefix length: a row whose
    slot at prefix - 1 sits at the wrong offset of its page is refused; without debug the step goes on."""
    from kvtable.conformance.alloc_calls import alloc_state
    from kvtable.reference.allocation import AllocStep

    # page size 4, prefix 3: the last prefix slot should be at offset 2 of its page; slot 13 is at offset 1
    step = AllocStep("extend", [[0] * 8, [8, 9, 13, 0, 0, 0, 0, 0]], rows=[1], prefix_lens=[3], seq_lens=[5],
                     free_pages=[5, 6], page_size=4, pool_pages=8)
    debug = load_example("backend", debug=True)
    with pytest.raises(AssertionError, match=r"last_loc \[13\] disagrees with prefix_lens \[3\]"):
        debug.alloc_extend(alloc_state(step)[0])
    got = load_example("backend", debug=False).alloc_extend(alloc_state(step)[0])
    assert got.locs.tolist() == [14, 20]  # offset 2 after slot 13, then a fresh page for position 4


class AllocatorOnly:
    """The example's allocator route and nothing else: what an adapter around real SGLang's allocators has."""

    def __init__(self, debug: bool | None = None) -> None:
        inner = load_example("backend", debug=bool(debug))
        self.name, self.device = "sglang-allocator-only", "cpu"
        self.alloc_decode, self.alloc_verify, self.alloc_extend = inner.alloc_decode, inner.alloc_verify, \
            inner.alloc_extend


@pytest.mark.parametrize(("profile", "least"), [("sglang+any", 30), ("sglang", 28)])
def test_an_allocator_only_backend_gets_at_least_30_properties_and_passes_them(profile: str, least: int) -> None:
    """30 in the wide domain; under ``sglang`` the two drawing lengths its scheduler never builds do not apply."""
    report = run_conformance(f"{__name__}:AllocatorOnly", examples=5, seed=0, profile=profile, level="correct",
                             isolate=False)
    applied = [r.property for r in report.results if r.applicable]
    assert len(applied) >= least and report.passed, (len(applied), report.details())
    assert profile.endswith("+any") or LENGTHS.isdisjoint(applied)
