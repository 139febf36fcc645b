"""The SGLang-style example (examples/sglang_style.py): it passes the allocator route under its profile, and each
seeded SGLang bug class fails at the safety tier naming the request's row and the token."""

from __future__ import annotations

import re

import pytest

from kvtable.conformance.properties import PROPERTIES, select
from kvtable.conformance.runner import run_conformance

EXAMPLE = "examples/sglang_style.py"
ALLOC = [p.name for p in PROPERTIES if p.name.startswith("alloc/")]


@pytest.fixture(autouse=True)
def _from_the_repo_root(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    monkeypatch.chdir(request.config.rootpath)  # the example path is relative to a clone's root


def test_the_example_passes_every_allocator_property_under_its_profile() -> None:
    report = run_conformance(f"{EXAMPLE}:backend", examples=15, seed=0, profile="sglang", properties=select(ALLOC),
                             level="correct")
    assert report.passed, report.details()
    assert sorted(r.property for r in report.results if r.passed) == sorted(ALLOC) and len(ALLOC) == 9


@pytest.mark.parametrize(("factory", "prop", "clause", "what"), [
    ("backend_prefix_past_length", "alloc/prefix-past-length", "A4", r"wrote entry -\d, before the output buffer"),
    ("backend_short_verify", "alloc/short-verify", "A2", r"changed row \d+ col \d+"),
    ("backend_int32_pool", "alloc/int32-slots", "A1", r"recorded -\d+ at its position, not the chosen \d{10}"),
])
def test_each_seeded_sglang_bug_fails_safety_naming_row_and_token(factory: str, prop: str, clause: str,
                                                                   what: str) -> None:
    report = run_conformance(f"{EXAMPLE}:{factory}", examples=15, seed=0, profile="sglang", properties=select([prop]),
                             level="safety", shrink=False)
    [result] = report.results
    assert not result.passed and result.tier == "safety" and result.clause.startswith(clause), report.details()
    named = re.search(r"request \d+ \(row [1-9]\d*\) token (-?\d+) position (-?\d+) loc -?\d+: " + what, result.message)
    assert named, result.message
    if clause == "A2":  # the token recorded from the negative start is one with no position of its own
        assert int(named.group(2)) < 0


def test_a_seeded_bug_passes_the_properties_of_the_other_classes() -> None:
    """Each variant changes one behaviour: the short-verify one still allocates and records valid steps right."""
    report = run_conformance(f"{EXAMPLE}:backend_short_verify", examples=10, seed=1, profile="sglang",
                             properties=select(["alloc/decode", "alloc/extend", "alloc/prefix-past-length"]))
    assert report.passed, report.details()
