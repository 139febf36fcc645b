"""Executing a property: one Hypothesis search (seeded, quiet, its own database key) and the examples it counts.

A search raises the (shrunk) ``Mismatch`` of a failure not seen before, Hypothesis' own errors when it cannot
proceed, or ``BudgetSpent`` when an example would start past the property's share of ``--budget``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from hypothesis import HealthCheck, Phase, Verbosity, given, reproduce_failure, settings
from hypothesis import seed as hypothesis_seed
from hypothesis.database import ExampleDatabase
from hypothesis.stateful import RuleBasedStateMachine, run_state_machine_as_test

import kvtable.internals
from kvtable import interrupts
from kvtable.conformance.budget import BudgetSpent, spent
from kvtable.conformance.checks import Mismatch
from kvtable.conformance.core import Context, Property
from kvtable.conformance.counterexample import Blob
from kvtable.conformance.threads import one_thread
from kvtable.strategies.domain import drawing

__all__ = ["PHASES", "STEPS_PER_MACHINE", "Count", "search"]

T = TypeVar("T")
STEPS_PER_MACHINE = 12
PHASES = (Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink)
"""Hypothesis' phases without ``explain``: its notes are never shown, and it doubles the time to shrink."""
FIND_PHASES = tuple(p for p in PHASES if p is not Phase.shrink)
"""``shrink=False``: stop at the first failing example, so the example count is the number needed to find it."""
SUPPRESSED = (
    HealthCheck.too_slow,  # a slow draw on a loaded machine is no verdict: verdicts never depend on machine load
    HealthCheck.filter_too_much,  # rejection is how an Unsupported example or a repeated failure is discarded:
    # a backend refusing most examples is "not applicable" (``Recording.unsatisfiable``), never a health error
)
"""The health checks kvtable turns off, each for its reason; the others stay on."""


def _settings(examples: int, database: ExampleDatabase | None, shrink: bool, **extra: Any) -> settings:
    return settings(max_examples=examples, database=database, deadline=None, derandomize=False,
                    report_multiple_bugs=False, verbosity=Verbosity.quiet, print_blob=True,
                    suppress_health_check=SUPPRESSED, phases=PHASES if shrink else FIND_PHASES, **extra)


@dataclass
class Count:
    """A property's examples: all that ran (shrinking included), those its searches drew before each failure (what
    ``--examples`` bounds), and the example at which the first failure came."""

    examples: int = 0
    searched: int = 0
    found_at: int = 0
    mismatch: Mismatch | None = None
    """The last failure an example raised: what a run Hypothesis then found flaky failed with."""
    _mark: int = 0
    _hit: bool = True

    def spent(self, deadline: float | None) -> bool:
        """The property's share of a budget is spent and its search found nothing to shrink: draw no more."""
        return not self._hit and spent(deadline, self.examples)

    def start(self) -> None:
        """A search begins."""
        self._mark, self._hit = self.examples, False

    def failed(self, err: Mismatch | None = None) -> None:
        """The search running failed (its first failure counts: the shrinking after it is not searching)."""
        self.mismatch = err or self.mismatch
        if not self._hit:
            self._hit = True
            self.searched += self.examples - self._mark
            self.found_at = self.found_at or self.examples


def search(prop: Property, ctx: Context, count: Count, *, examples: int, seed: int,
           database: ExampleDatabase | None, shrink: bool, reproduce: Blob | None = None,
           deadline: float | None = None) -> None:
    """One hypothesis run of the property (``reproduce``: only that example), counted in ``count``."""
    replay = reproduce_failure(*reproduce) if reproduce is not None else _as_drawn
    if prop.stateful is not None:
        factory = replay(hypothesis_seed(seed)(_machines(prop.stateful, ctx, count, deadline)))
        # Hypothesis annotates the factory as a class; it takes (and documents) any callable returning a machine
        machines = cast("type[RuleBasedStateMachine]", factory)
        with drawing(ctx.profile.domain), one_thread():
            run_state_machine_as_test(machines, settings=_settings(examples, database, shrink,
                                                                   stateful_step_count=STEPS_PER_MACHINE))
        return
    assert prop.strategy is not None
    # settings outside @seed: @seed alone would also switch the example database off
    test = _settings(examples, database, shrink)(replay(hypothesis_seed(seed)(given(prop.strategy)(
        _body(prop, ctx, count, deadline)))))
    kvtable.internals.set_database_key(test, f"kvtable:{prop.name}".encode())
    with drawing(ctx.profile.domain), one_thread():  # draws the profile's engine can hold, on one thread
        test()


def _as_drawn(test: T) -> T:
    """No ``@reproduce_failure``: the examples are drawn."""
    return test


def _body(prop: Property, ctx: Context, count: Count, deadline: float | None) -> Callable[[Any], None]:
    """The test Hypothesis runs on each drawn example: the property's check, counted and stopped at the budget."""
    assert prop.strategy is not None and prop.check is not None
    check = prop.check

    def body(example: Any) -> None:
        interrupts.check()  # a Ctrl-C swallowed where it landed (a gc callback) stops the run here
        if count.spent(deadline):
            raise BudgetSpent
        count.examples += 1
        ctx.transcript.reset()
        try:
            with ctx.example(prop.clause):
                check(ctx, example)
        except Mismatch as err:
            count.failed(err)
            raise

    return body


def _machines(build: Callable[[Context, Callable[[], None]], RuleBasedStateMachine], ctx: Context, count: Count,
              deadline: float | None) -> Callable[[], RuleBasedStateMachine]:
    """The factory ``run_state_machine_as_test`` calls for each run: a machine on ``ctx``, counted, whose teardown
    marks the search failed when a step failed and stops the search once the budget is spent."""

    def on_teardown() -> None:
        if isinstance(failure := sys.exc_info()[1], Mismatch):  # a step failed: the search is over, shrinking begins
            count.failed(failure)
        if count.spent(deadline):  # at the end of a machine's run, when its steps are drawn (earlier, Hypothesis
            raise BudgetSpent     # would find the example drawing less than it did before: flaky)

    def machine() -> RuleBasedStateMachine:
        interrupts.check()
        count.examples += 1
        return build(ctx, on_teardown)

    return machine
