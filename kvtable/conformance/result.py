"""Judging and recording one property's run: its distinct failures (``Failure``) and its verdict (``PropertyResult``).

A failure's tier decides whether it fails the property at the run's level or stays a note; a property that
does not apply to the backend is ``not applicable``, counted neither as passed nor as failed.
"""

from __future__ import annotations

import builtins
import time
import traceback
from dataclasses import dataclass, field

from kvtable.backends.profiles import Profile
from kvtable.conformance.checks import Mismatch
from kvtable.conformance.core import Context, Property
from kvtable.conformance.counterexample import counterexample
from kvtable.conformance.levels import CORRECTNESS, DEFAULT_LEVEL, LEVELS, STRICTNESS
from kvtable.spec.clauses import clause_label

__all__ = ["MAX_FAILURES", "NOT_APPLICABLE", "Failure", "PropertyResult", "Recording", "not_applicable"]

NOT_APPLICABLE = "not applicable"
MAX_FAILURES = 4
"""Distinct failures (by clause and kind) sought per property before the search stops."""
FLAKY_NOTE = (" (not deterministic: this example failed once, then passed or was refused when replayed; a backend"
              " that reads memory it does not own, or uninitialised memory, does this)")


@dataclass
class Failure:
    """One distinct way a property failed: the clause the example broke, the tier and kind of the failure."""

    clause: str
    """The clause the backend broke (as ``"T4 live-pages"``); the property charged is the result's."""
    tier: str
    kind: str
    message: str
    counterexample: str


@dataclass
class PropertyResult:
    """One property's verdict against one backend, at one level."""

    property: str
    clause: str
    """The clause the property checks, or, on failure, the clause the backend broke (as ``"T4 live-pages"``);
    ``property_clause`` is always the property's own."""
    status: str
    """``passed``, ``failed`` (the backend broke the clause at the run's level), ``error`` (the run itself
    could not proceed), ``crash`` or ``timeout`` (the backend took its worker process down or hung:
    ``kvtable.conformance.isolation``) or ``not applicable`` (not run, or every example unsupported:
    ``message`` says why)."""
    examples: int
    seconds: float
    debug: bool
    message: str = ""
    counterexample: str = ""
    property_clause: str = ""
    """The property's own clause: every failure of the property is charged to it."""
    tier: str = CORRECTNESS
    """The property's verdict tier, or on failure the tier of the first failure at the run's level."""
    failures: list[Failure] = field(default_factory=list)
    """Every distinct failure found (up to ``MAX_FAILURES``), at any tier; those above the run's level are notes."""
    unsupported: dict[str, int] = field(default_factory=dict)
    """Examples discarded because the backend raised ``kvtable.Unsupported``, by reason."""
    level: str = DEFAULT_LEVEL
    found_at: int = 0
    """The example at which the first failure came (1: the database's saved example, replayed first); 0: none."""
    # ``builtins.property`` below: the field ``property`` (the JSON's key) hides the builtin in this class body

    @builtins.property
    def passed(self) -> bool:
        return self.status == "passed"

    @builtins.property
    def applicable(self) -> bool:
        return self.status != NOT_APPLICABLE

    @builtins.property
    def label(self) -> str:
        """The result as the table shows it: PASSED, FAILED, ERROR or N/A."""
        return "N/A" if not self.applicable else self.status.upper()

    @builtins.property
    def clause_id(self) -> str:
        return self.clause.split()[0]

    @builtins.property
    def notes(self) -> list[Failure]:
        """Failures of tiers above the run's level: reported, not failing the run."""
        return [f for f in self.failures if f.tier not in LEVELS[self.level]]


def not_applicable(prop: Property, reason: str, level: str) -> PropertyResult:
    """The result of a property not run on this backend, saying why."""
    own = clause_label(prop.clause)
    return PropertyResult(prop.name, own, NOT_APPLICABLE, 0, 0.0, prop.debug, reason, property_clause=own,
                          tier=prop.tier, level=level)


@dataclass
class Recording:
    """One property's run as it goes: the distinct failures found so far, and the verdict they make."""

    prop: Property
    ctx: Context
    spec: str
    """The backend's replayable name, for the counterexamples."""
    level: str
    failures: list[Failure] = field(default_factory=list)
    start: float = field(default_factory=time.perf_counter)

    @property
    def failing(self) -> int:
        """How many failures found so far fail the property at the run's level."""
        return sum(f.tier in LEVELS[self.level] for f in self.failures)

    def add(self, err: Mismatch, flaky: bool) -> None:
        """Keep ``err`` (the example the transcript holds) as a failure; later examples repeating it are discarded."""
        self.ctx.seen.add((err.clause, err.kind))
        tier = err.tier or self.prop.tier
        message = str(err) + (FLAKY_NOTE if flaky else "") + _validation_note(self.ctx.profile, tier)
        self.failures.append(Failure(clause_label(err.clause), tier, err.kind, message,
                                     counterexample(self.ctx, self.spec, err, self.prop.name, self.level)))

    def result(self, status: str, examples: int, found_at: int, message: str = "", snippet: str = "",
               clause: str | None = None, tier: str | None = None) -> PropertyResult:
        own = clause_label(self.prop.clause)
        return PropertyResult(self.prop.name, clause or own, status, examples, time.perf_counter() - self.start,
                              self.prop.debug, message, snippet, own, tier or self.prop.tier, self.failures,
                              dict(self.ctx.unsupported), self.level, found_at)

    def verdict(self, examples: int, found_at: int) -> PropertyResult:
        """``failed`` with the first failure at the run's level, else ``passed``."""
        failing = [f for f in self.failures if f.tier in LEVELS[self.level]]
        if not failing:
            return self.result("passed", examples, found_at)
        first = failing[0]
        return self.result("failed", examples, found_at, first.message, first.counterexample, first.clause,
                           first.tier)

    def unsatisfiable(self, err: Exception, examples: int, found_at: int) -> PropertyResult:
        """No example could run: ``not applicable`` when the backend refused them all as unsupported, else an error."""
        unsupported = self.ctx.unsupported
        if not unsupported or examples > sum(unsupported.values()):
            return self.result("error", examples, found_at, f"{type(err).__name__}: {err}")
        reasons = "; ".join(f"{n} examples: {why}" for why, n in sorted(unsupported.items()))
        return self.result(NOT_APPLICABLE, examples, found_at, f"every example unsupported by the backend ({reasons})")

    def broke(self, err: Exception, examples: int, found_at: int) -> PropertyResult:
        """The run itself could not proceed: an ``error``, naming where it was raised."""
        frame = traceback.extract_tb(err.__traceback__)[-1] if err.__traceback__ else None
        where = f" (at {frame.filename}:{frame.lineno})" if frame else ""
        return self.result("error", examples, found_at, f"{type(err).__name__}: {err}{where}",
                           counterexample(self.ctx, self.spec, err, self.prop.name, self.level))


def _validation_note(profile: Profile, tier: str) -> str:
    """Where the profile leaves refusals to the scheduler, a strictness failure says so: a convention, not a bug."""
    if tier != STRICTNESS or profile.backend_validates:
        return ""
    return (f" (profile {profile.name!r}: validating this input is the scheduler's job, not the backend's, so this"
            " is a missing refusal, never a safety failure)")
