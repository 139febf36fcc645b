"""``--budget SECONDS``: a run's wall time shared out across its properties, each searching until its share is spent.

Each property, as it starts, gets the time left times its weight over the weight of the properties not started
yet (times the number of workers running side by side), so time a quick property leaves goes to the later ones.
A property stops drawing new examples when its share is spent, after at least ``FLOOR_EXAMPLES``; a failure found
is shrunk to the end whatever the clock says. The example count (``--examples``) is still what Hypothesis is
given, so the examples drawn are the first ones the same command draws without a budget: a budget changes only
how many each property runs, never which. (Hypothesis' choice of examples depends on that count, so a run with
``--examples`` set to a property's count would draw others.) How many depends on the machine and its load: a
budget run is not replayable by its budget or its counts; the report lists each property's count, and the same
command without ``--budget`` replays every example it ran, and the rest.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

FLOOR_EXAMPLES = 5
"""Examples every property runs whatever its share (a property that ran none would pass unseen)."""


class BudgetSpent(BaseException):  # noqa: N818 - a signal, like KeyboardInterrupt: Hypothesis lets it through
    """Raised at the start of an example once its property's share of the budget is spent: not a failure."""


@dataclass
class Budget:
    """The run's wall-clock budget and the weights its properties share it by."""

    seconds: float
    weights: Mapping[str, float]
    parallel: int = 1
    """Properties running side by side (``--workers``): each has that many times its share of the wall clock."""
    _end: float = field(default=0.0, init=False)
    _waiting: dict[str, float] = field(default_factory=dict, init=False)

    def start(self) -> None:
        """The clock starts: every property is waiting for its share."""
        self._end = time.monotonic() + self.seconds
        self._waiting = dict(self.weights)

    def share(self, name: str) -> float:
        """Seconds property ``name`` may search for, fixed as it starts: its weight's part of the time left."""
        weight = self._waiting.pop(name, 0.0)
        left = max(0.0, self._end - time.monotonic())
        total = weight + sum(self._waiting.values())
        return left * self.parallel * weight / total if total > 0 else 0.0


def spent(deadline: float | None, examples: int) -> bool:
    """Whether a property that has run ``examples`` is past its ``deadline`` (``time.monotonic``; None: none)."""
    return deadline is not None and examples >= FLOOR_EXAMPLES and time.monotonic() > deadline
