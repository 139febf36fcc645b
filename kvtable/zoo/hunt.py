"""Run the conformance suite against one zoo mutant and say whether, where and how fast it was caught.

A hunt runs twice. The *find* run has shrinking switched off, so each property stops at its first
failing example and the example count is the number needed to catch the bug. The *shrink* run
repeats only the property that caught it, with shrinking on, for the smallest replayable call
sequence. Properties that the conforming torch backend itself fails earn no credit.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kvtable.conformance.properties import PROPERTIES, Property, select
from kvtable.conformance.report import Report
from kvtable.conformance.result import PropertyResult
from kvtable.conformance.runner import run_properties


@dataclass
class Catch:
    """The verdict on one mutant: the clause that caught it, how, after how many examples and how fast."""

    name: str
    expected: str
    """The clause id the zoo entry names."""
    caught_by: PropertyResult | None
    """The first failing property that names the expected clause, else the first failing property."""
    failures: list[PropertyResult] = field(default_factory=list)
    seconds: float = 0.0
    """Time to catch it (the find run)."""
    shrink_seconds: float = 0.0
    message: str = ""
    """The failure, as the suite reported it for the counterexample below."""
    counterexample: str = ""
    discredited: list[str] = field(default_factory=list)
    """Properties that failed here but also fail on the conforming backend (no credit)."""

    @property
    def caught(self) -> bool:
        return self.caught_by is not None

    @property
    def as_named(self) -> bool:
        """Caught, and by the clause the entry names."""
        return self.caught_by is not None and self.caught_by.clause_id == self.expected

    @property
    def clauses(self) -> list[str]:
        return list(dict.fromkeys(r.clause_id for r in self.failures))

    @property
    def how(self) -> str:
        if self.caught_by is None:
            return "-"
        prop = _by_name(self.caught_by.property)
        return "stateful sequence" if prop.stateful is not None else "fuzz counterexample"


ZOO_LEVEL = "strict+latent"
"""The zoo judges every tier, latent failures too (an entry reachable only past a stated size is caught, and its
verdict says latent)."""


def _by_name(name: str) -> Property:
    return next(p for p in PROPERTIES if p.name == name)


def properties_for(clause: str | None) -> tuple[Property, ...]:
    """The properties tagged with ``clause`` (every property for None)."""
    return PROPERTIES if clause is None else select([clause])


def failing(backend: Any, properties: Sequence[Property], *, examples: int, seed: int) -> list[PropertyResult]:
    """The properties ``backend`` fails, each stopped at its first failing example (no shrinking)."""
    return _whole(run_properties(backend, properties, examples=lambda _p: examples, seed=seed, shrink=False,
                                 level=ZOO_LEVEL)).failures


def _whole(report: Report) -> Report:
    """``report``, unless Ctrl-C cut it short: a part of a run is no verdict on a mutant."""
    if report.interrupted:
        raise KeyboardInterrupt
    return report


class Baseline:
    """Which properties the conforming torch backend itself fails, per property set, budget and seed (cached)."""

    def __init__(self, device: str = "cpu") -> None:
        self.device = device
        self._failing: dict[tuple[tuple[str, ...], int, int], frozenset[str]] = {}

    def failing(self, properties: Sequence[Property], *, examples: int, seed: int) -> frozenset[str]:
        from kvtable.backends.torch_backend import TorchBackend

        key = (tuple(p.name for p in properties), examples, seed)
        if key not in self._failing:
            conforming = TorchBackend(device=self.device)
            self._failing[key] = frozenset(r.property for r in failing(conforming, properties,
                                                                       examples=examples, seed=seed))
        return self._failing[key]

    def passes(self, properties: Sequence[Property], *, examples: int, seed: int) -> Callable[[str], bool]:
        broken = self.failing(properties, examples=examples, seed=seed)
        return lambda name: name not in broken


@dataclass(frozen=True)
class Z3Catch:
    """A z3 obligation that encodes the bug's formula: it must be refuted, with a concrete counterexample."""

    obligation: str
    status: str
    seconds: float
    model: tuple[tuple[str, int], ...]

    @property
    def caught(self) -> bool:
        return self.status == "counterexample"

    def text(self) -> str:
        values = ", ".join(f"{name} = {value}" for name, value in self.model)
        return f"z3 {self.obligation}: {self.status} in {self.seconds:.2f}s" + (f": {values}" if values else "")


def z3_catch(obligation: str, *, timeout_ms: int = 20_000) -> Z3Catch:
    """Discharge the named obligation (one that expects a counterexample) and keep z3's counterexample."""
    from kvtable.prover.obligations.registry import obligation as named
    from kvtable.prover.solver.discharge import discharge

    chosen = named(obligation)
    if chosen.expect != "counterexample":
        raise ValueError(f"obligation {obligation!r} expects a proof; a zoo entry needs one that is refuted")
    outcome = discharge(chosen.build(), timeout_ms)
    return Z3Catch(obligation, outcome.status, outcome.seconds, outcome.model)


def hunt(backend: Any, expected: str, *, name: str, properties: Sequence[Property], examples: int, seed: int,
         baseline: Callable[[str], bool] = lambda _prop: True, shrink: bool = True) -> Catch:
    """Run ``properties`` against ``backend``; ``baseline(prop)`` says whether the conforming backend passes it."""
    start = time.perf_counter()
    failures = failing(backend, properties, examples=examples, seed=seed)
    credited = [r for r in failures if baseline(r.property)]
    discredited = [r.property for r in failures if not baseline(r.property)]
    named = [r for r in credited if r.clause_id == expected]
    caught_by = next(iter(named or credited), None)
    catch = Catch(name, expected, caught_by, credited, time.perf_counter() - start, discredited=discredited)
    if caught_by is not None and shrink:
        start = time.perf_counter()
        shrunk = _whole(run_properties(backend, [_by_name(caught_by.property)], examples=lambda _p: examples,
                                       seed=seed, level=ZOO_LEVEL)).results[0]
        final = caught_by if shrunk.passed else shrunk
        catch.message, catch.counterexample = final.message, final.counterexample
        catch.shrink_seconds = time.perf_counter() - start
    elif caught_by is not None:
        catch.message, catch.counterexample = caught_by.message, caught_by.counterexample
    return catch
