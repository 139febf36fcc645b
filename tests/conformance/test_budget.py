"""``--budget``: a property stops drawing when its share of the run's wall time is spent, after a floor of examples,
drawing the first examples the same run draws without a budget (a budget changes how many, never which)."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

import pytest

from kvtable.conformance import budget as budget_module
from kvtable.conformance.budget import FLOOR_EXAMPLES, Budget
from kvtable.conformance.context import make_context
from kvtable.conformance.execute import run_property
from kvtable.conformance.properties import select
from kvtable.conformance.runner import run_conformance


def _drawn(name: str, seconds: float | None) -> tuple[Any, list[str]]:
    """The property's result and the examples its check saw, in order."""
    prop = select([name])[0]
    seen: list[str] = []

    def check(ctx: Any, example: Any) -> None:
        seen.append(repr(example))
        prop.check(ctx, example)

    ctx, spec = make_context("torch")
    result = run_property(dataclasses.replace(prop, check=check), ctx, examples=30, seed=0, spec=spec,
                          seconds=seconds)
    return result, seen


@pytest.mark.parametrize("name", ["decode_locs", "rejects/T4"])
def test_a_spent_share_stops_at_the_floor_on_the_examples_of_the_run_without_budget(name: str) -> None:
    budgeted, first = _drawn(name, seconds=0.0)
    whole, every = _drawn(name, seconds=None)
    assert budgeted.passed and budgeted.examples == FLOOR_EXAMPLES == len(first)
    assert whole.passed and whole.examples == 30
    assert first == every[:FLOOR_EXAMPLES]


def test_a_state_machine_stops_at_the_floor_when_its_share_is_spent() -> None:
    report = run_conformance("torch", examples=30, seed=0, properties=select(["graph/protocol"]), budget=1e-9)
    (result,) = report.results
    assert result.passed and result.examples == FLOOR_EXAMPLES
    assert "budget 1e-09s: 5 examples, 5-5 per property" in report.summary()


def test_a_share_is_the_weight_of_the_time_left_over_the_weight_not_started(monkeypatch) -> None:
    clock = SimpleNamespace(monotonic=lambda: 1000.0)
    monkeypatch.setattr(budget_module, "time", clock)
    budget = Budget(100.0, {"a": 1.0, "b": 3.0, "c": 1.0}, parallel=2)
    budget.start()
    assert budget.share("a") == 40.0  # 100 s x 2 workers x 1/5
    clock.monotonic = lambda: 1070.0  # 30 s left, 'a' ran 70
    assert budget.share("b") == 45.0  # 30 s x 2 x 3/4
    assert budget.share("c") == 60.0  # the last one waiting: all that is left
    assert budget.share("d") == 0.0  # not in the run
