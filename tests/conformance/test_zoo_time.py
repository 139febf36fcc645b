"""The zoo's time column is the whole cost of judging an entry: the baseline it needed, the hunt, the shrinking."""

from __future__ import annotations

import time

import pytest

import kvtable.zoo.run as zoo_run
from kvtable.zoo.entries import ENTRIES
from kvtable.zoo.hunt import Baseline, Catch


def test_an_entrys_time_includes_its_baseline_hunt_and_shrinking(monkeypatch: pytest.MonkeyPatch) -> None:
    spent: dict[str, float] = {}
    catches: list[Catch] = []
    failing, hunt = Baseline.failing, zoo_run.hunt

    def timed_failing(self: Baseline, *args, **kwargs):
        start = time.perf_counter()
        try:
            return failing(self, *args, **kwargs)
        finally:
            spent["baseline"] = spent.get("baseline", 0.0) + time.perf_counter() - start

    def recorded_hunt(*args, **kwargs) -> Catch:
        catches.append(hunt(*args, **kwargs))
        return catches[-1]

    monkeypatch.setattr(Baseline, "failing", timed_failing)
    monkeypatch.setattr(zoo_run, "hunt", recorded_hunt)
    entry = next(e for e in ENTRIES if not e.obligation and e.clause == "W1")  # no z3 part: hunt and shrink only
    verdict = zoo_run.judge_entry(entry, baseline=Baseline())
    catch = catches[0]
    assert verdict.caught and catch.shrink_seconds > 0 and spent["baseline"] > 0
    assert verdict.seconds >= spent["baseline"] + catch.seconds + catch.shrink_seconds
