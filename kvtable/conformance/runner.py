"""Run the properties against a backend and collect per-clause results: ``run_conformance`` and ``Report``.

Each property becomes one hypothesis test (``@seed`` for determinism, its own database key), run
quietly; a failure is reported with the clause it broke and the shrunk example's backend calls as
a replayable Python snippet. A property that does not apply to the backend (the kernel properties
on a backend with no ``backend.kernels``) is not run: it is reported ``not applicable``, shown as
``N/A`` in the table and counted neither as passed nor as failed.
"""

from __future__ import annotations

import gc
import json
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass, field
from typing import Any

from hypothesis import HealthCheck, Phase, Verbosity, given, reproduce_failure, settings
from hypothesis import seed as hypothesis_seed
from hypothesis.database import ExampleDatabase
from hypothesis.errors import DidNotReproduce, FlakyFailure, HypothesisException, Unsatisfiable
from hypothesis.stateful import run_state_machine_as_test

import kvtable.internals
from kvtable import interrupts
from kvtable.backends import Backend, NoDebugMode, debug_twin, is_backend, load, missing_methods, spec_of
from kvtable.backends.profiles import Profile, get_profile
from kvtable.conformance.budget import Budget, BudgetSpent, spent
from kvtable.conformance.checks import Mismatch, Recorded, Transcript
from kvtable.conformance.core import Context, Property
from kvtable.conformance.database import KeyedDatabase, database_prefix
from kvtable.conformance.levels import CORRECTNESS, DEFAULT_LEVEL, LATENT, LEVELS, STRICTNESS
from kvtable.conformance.notes import note_lines
from kvtable.conformance.properties import PROPERTIES
from kvtable.conformance.reproduce import Blob, blob_of, verdict_lines
from kvtable.conformance.sanitize import sanitizing
from kvtable.conformance.threads import one_thread
from kvtable.exitcodes import UsageError
from kvtable.spec.clauses import clause_label
from kvtable.strategies.domain import drawing

__all__ = ["DEFAULT_LEVEL", "LEVELS", "NOT_APPLICABLE", "Failure", "PropertyResult", "Report", "make_context",
           "run_conformance", "run_properties", "run_property"]

Progress = Callable[[int, int, "PropertyResult"], None]
STEPS_PER_MACHINE = 12
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

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    @property
    def applicable(self) -> bool:
        return self.status != NOT_APPLICABLE

    @property
    def label(self) -> str:
        """The result as the table shows it: PASSED, FAILED, ERROR or N/A."""
        return "N/A" if not self.applicable else self.status.upper()

    @property
    def clause_id(self) -> str:
        return self.clause.split()[0]

    @property
    def notes(self) -> list[Failure]:
        """Failures of tiers above the run's level: reported, not failing the run."""
        return [f for f in self.failures if f.tier not in LEVELS[self.level]]


@dataclass
class Report:
    """The results of a conformance or fuzz run: per property, with the clause each checks or broke."""

    backend: str
    profile: str
    seed: int
    examples: int
    """``conform``: examples per property; ``fuzz``: the run's total budget."""
    kind: str = "conform"
    results: list[PropertyResult] = field(default_factory=list)
    interrupted: bool = False
    """Ctrl-C stopped the run: ``results`` holds the properties that finished."""
    level: str = DEFAULT_LEVEL
    """``safety``, ``correct`` (safety + correctness) or ``strict`` (all three tiers): what fails the run."""
    budget: float | None = None
    """``--budget``: the wall seconds the properties shared (each one's examples are in ``results``)."""

    @property
    def passed(self) -> bool:
        """No property failed or errored at the level, and at least one property applied and ran examples
        (not-applicable ones neither pass nor fail the run; a run where none applied is no pass)."""
        return not self.failures and any(r.applicable and r.examples > 0 for r in self.results)

    @property
    def failures(self) -> list[PropertyResult]:
        return [r for r in self.results if r.applicable and not r.passed]

    @property
    def not_applicable(self) -> list[PropertyResult]:
        return [r for r in self.results if not r.applicable]

    @property
    def failed_clauses(self) -> list[str]:
        """The clauses broken, each once, in registry order of first failure."""
        return list(dict.fromkeys(r.clause for r in self.failures))

    @property
    def unsupported(self) -> dict[str, int]:
        """Examples discarded as unsupported by the backend, by reason, over all properties."""
        total: dict[str, int] = {}
        for r in self.results:
            for reason, n in r.unsupported.items():
                total[reason] = total.get(reason, 0) + n
        return total

    @property
    def seconds(self) -> float:
        return sum(r.seconds for r in self.results)

    def table(self) -> str:
        """The per-clause table: clause, property, result (N/A where it does not apply), examples, time, tier."""
        rows = [("clause", "property", "result", "examples", "time", "tier")]
        for r in sorted(self.results, key=lambda r: (_clause_order(_own_id(r)), r.property)):
            result = r.label + (f" ({len(r.notes)} note{'s' * (len(r.notes) > 1)})" if r.notes else "")
            if not r.passed and r.applicable and r.clause_id != _own_id(r):
                result += f" (broke {r.clause_id})"
            rows.append((r.property_clause or r.clause, r.property, result, str(r.examples) if r.applicable else "-",
                         f"{r.seconds:.2f}s", r.tier))
        widths = [max(len(row[i]) for row in rows) for i in range(6)]
        lines = ["  ".join(cell.rjust(w) if i in (3, 4) else cell.ljust(w) for i, (cell, w) in
                           enumerate(zip(row, widths, strict=True))).rstrip() for row in rows]
        lines.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join(lines)

    def summary(self) -> str:
        if self.passed:
            verdict = "PASS"
        elif self.failures:
            verdict = "FAIL: " + ", ".join(dict.fromkeys(
                (r.property_clause or r.clause) + (f" (broke {r.clause})" if r.clause_id != _own_id(r) else "")
                for r in self.failures))
        else:
            verdict = "FAIL: no property applied to this backend"
        if self.interrupted:
            verdict = f"INTERRUPTED after {len(self.results)} properties; {verdict} so far"
        applicable = len(self.results) - len(self.not_applicable)
        skipped = f", {len(self.not_applicable)} not applicable" if self.not_applicable else ""
        unsupported = sum(self.unsupported.values())
        discarded = f", unsupported: {unsupported} examples" if unsupported else ""
        latent = sum(f.tier == LATENT for r in self.results for f in r.failures)
        apart = f", {latent} latent failure(s) (reachable only past a stated size)" if latent else ""
        return (f"kvtable {self.kind}: backend {self.backend}, profile {self.profile}, level {self.level}, "
                f"seed {self.seed}: {sum(r.passed for r in self.results)}/{applicable} properties passed{skipped}"
                f"{discarded}{apart} in {self.seconds:.1f}s{self._budget_words()}; {verdict}")

    def _budget_words(self) -> str:
        """Under ``--budget``: how many examples the properties got (each one's count is in the table)."""
        ran = [r.examples for r in self.results if r.applicable]
        if self.budget is None or not ran:
            return ""
        return (f" (budget {self.budget:g}s: {sum(ran)} examples, {min(ran)}-{max(ran)} per property as the table "
                "lists; the counts depend on the machine: the same command without --budget draws these examples "
                "and the rest)")

    def notes(self) -> str:
        """Why each not-applicable property was not run, unsupported examples by reason, and failures of
        tiers above the run's level (``notes.note_lines``)."""
        lines = [f"N/A {r.property}: {r.message}" for r in self.not_applicable]
        lines += [f"unsupported: {n} examples: {reason}" for reason, n in sorted(self.unsupported.items())]
        lines += note_lines(self.results, self.profile)
        return "\n".join(lines)

    def details(self) -> str:
        """Each failure at the level: the property and its clause, the clause broken, the message and the
        replayable counterexample; every distinct failure of a property in turn."""
        blocks = []
        for r in self.failures:
            if r.status == "error" or not r.failures:
                blocks.append(f"=== {r.status.upper()} [{r.clause}] {r.property}\n{r.message}\n"
                              f"--- counterexample (replayable):\n{r.counterexample}")
                continue
            for f in r.failures:
                if f.tier in LEVELS[r.level]:
                    blocks.append(f"=== FAILED [{r.property_clause}] {r.property}: broke [{f.clause}] "
                                  f"({f.tier}: {f.kind})\n{f.message}\n"
                                  f"--- counterexample (replayable):\n{f.counterexample}")
        return "\n\n".join(blocks)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["passed"] = self.passed
        out["failed_clauses"] = self.failed_clauses
        out["not_applicable"] = [r.property for r in self.not_applicable]
        out["unsupported"] = self.unsupported
        for r in out["results"]:
            r["clause_id"] = r["clause"].split()[0]
            r["property_clause_id"] = r["property_clause"].split()[0] if r["property_clause"] else r["clause_id"]
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)


def _own_id(result: PropertyResult) -> str:
    return (result.property_clause or result.clause).split()[0]


def _clause_order(clause_id: str) -> int:
    from kvtable.spec.clauses import CLAUSES

    ids = [c.id for c in CLAUSES]
    return ids.index(clause_id) if clause_id in ids else len(ids)


BackendLike = Backend | str | Callable[..., Backend]


def make_context(backend: BackendLike, profile: str | Profile | None = None,
                 transcript: Transcript | None = None) -> tuple[Context, str]:
    """A property context for a backend given as an instance, a ``load`` name, or a factory taking ``debug=``."""
    transcript = Transcript() if transcript is None else transcript
    debug_factory: Callable[[], Any]
    if isinstance(backend, str):
        spec = backend
        plain = load(backend, debug=False)
        debug_factory = lambda: load(spec, debug=True)  # noqa: E731
    elif callable(backend) and not is_backend(backend):
        factory = backend
        plain = factory(debug=False)
        spec = spec_of(plain)
        debug_factory = lambda: factory(debug=True)  # noqa: E731
    else:
        instance = backend
        plain = instance
        if getattr(instance, "debug", False):
            plain = debug_twin(instance, debug=False)
        spec = spec_of(plain)
        debug_factory = lambda: debug_twin(instance, debug=True)  # noqa: E731

    def recorded_debug() -> Any:
        return Recorded(debug_factory(), "debug_backend", transcript)

    ctx = Context(Recorded(plain, "backend", transcript), get_profile(profile), transcript, recorded_debug)
    return ctx, spec


def _header(spec: str, debug: bool) -> str:
    lines = ["import torch", "from kvtable.backends import load",
             "from kvtable.backends.protocol import AllocState, SwaPool",
             "from kvtable.reference import Batch, GroupSpec",
             f"backend = load({spec!r}, debug=False)"]
    if debug:
        lines.append(f"debug_backend = load({spec!r}, debug=True)")
    return "\n".join(lines)


PHASES = (Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink)
"""Hypothesis' phases without ``explain``: its notes are never shown, and it doubles the time to shrink."""
FIND_PHASES = tuple(p for p in PHASES if p is not Phase.shrink)
"""``shrink=False``: stop at the first failing example, so the example count is the number needed to find it."""


def _settings(examples: int, database: ExampleDatabase | None, shrink: bool, **extra: Any) -> settings:
    return settings(max_examples=examples, database=database, deadline=None, derandomize=False,
                    report_multiple_bugs=False, verbosity=Verbosity.quiet, print_blob=True,
                    suppress_health_check=list(HealthCheck), phases=PHASES if shrink else FIND_PHASES,
                    **extra)


def _lacking(prop: Property, ctx: Context) -> str | None:
    """Why ``prop`` cannot run on this backend: the protocol methods it needs that the backend lacks."""
    backend = getattr(ctx.backend, "target", ctx.backend)
    missing = set(missing_methods(backend))
    lacking = [m for m in prop.needs if m in missing]
    if not lacking:
        return _no_debug_mode(prop, ctx)
    name = getattr(backend, "name", type(backend).__name__)
    return f"backend {name!r} has no {', '.join(lacking)}"


def _no_debug_mode(prop: Property, ctx: Context) -> str | None:
    """Why a debug-mode property cannot run: the backend's factory takes no ``debug`` (``NoDebugMode``)."""
    if not prop.debug:
        return None
    try:
        ctx.debug_backend  # noqa: B018 - built once and kept; the debug properties use it next
    except NoDebugMode as err:
        return str(err)
    return None


def run_property(prop: Property, ctx: Context, *, examples: int, seed: int, spec: str = "backend",
                 database: ExampleDatabase | None = None, shrink: bool = True,
                 level: str = DEFAULT_LEVEL, reproduce: Blob | None = None, seconds: float | None = None
                 ) -> PropertyResult:
    """Run one property for up to ``examples`` examples; on failure keep the (shrunk, unless not ``shrink``)
    example's transcript, and search on for up to ``MAX_FAILURES`` distinct failures (by clause and kind).
    With ``reproduce`` only that one example runs (a counterexample snippet re-judging itself). ``seconds``: its
    share of a ``--budget``: no new example is drawn past it (``budget.spent``), a failure is still shrunk.

    Examples the backend raises ``kvtable.Unsupported`` for are discarded and counted; a failure's tier
    decides whether it fails the property at ``level`` or stays a note.
    """
    own = clause_label(prop.clause)
    reason = _lacking(prop, ctx) or (prop.not_applicable(ctx) if prop.not_applicable is not None else None)
    if reason:
        return PropertyResult(prop.name, own, NOT_APPLICABLE, 0, 0.0, prop.debug, reason, property_clause=own,
                              tier=prop.tier, level=level)
    count = _Count()
    ctx.seen.clear()
    ctx.unsupported.clear()
    failures: list[Failure] = []
    start = time.perf_counter()
    deadline = None if seconds is None else time.monotonic() + seconds

    def result(status: str, message: str = "", counterexample: str = "", clause: str = own,
               tier: str = prop.tier) -> PropertyResult:
        return PropertyResult(prop.name, clause, status, count.examples, time.perf_counter() - start, prop.debug,
                              message, counterexample, own, tier, failures, dict(ctx.unsupported), level,
                              count.found_at)

    try:
        # a find run (no shrinking) and a reproduction stop at the first failure that fails at ``level`` (a note
        # below it, such as an unnamed refusal at level correct, does not end the search)
        wanted = MAX_FAILURES if shrink and reproduce is None else 1
        while len(failures) < MAX_FAILURES and sum(f.tier in LEVELS[level] for f in failures) < wanted:
            left = examples - count.searched  # --examples bounds the searches together (shrinking apart)
            if left < 1:
                break
            count.start()
            try:
                # only the first search uses the database: a later one would drop the saved example it rejects
                _search(prop, ctx, count, examples=left, seed=seed, database=None if failures else database,
                        shrink=shrink, reproduce=reproduce, deadline=deadline)
                break
            except (DidNotReproduce, BudgetSpent):  # the example of ``reproduce`` passes now; the share is spent
                break
            except (Mismatch, FlakyFailure) as caught:
                err = caught if isinstance(caught, Mismatch) else count.mismatch
                if err is None:  # flaky with no failure of ours: the run itself broke
                    raise
                count.failed(err)  # where the failing example's own hook did not see it (a machine's __init__)
                ctx.seen.add((err.clause, err.kind))
                tier = err.tier or prop.tier
                flaky = "" if caught is err else FLAKY_NOTE
                failures.append(Failure(clause_label(err.clause), tier, err.kind,
                                        str(err) + flaky + _validation_note(ctx.profile, tier),
                                        _counterexample(ctx, spec, err, prop.name, level)))
            except Unsatisfiable:
                if not failures:
                    raise
                break  # every example left repeats a failure already reported
    except UsageError:  # the database failed: infrastructure, not a verdict
        raise
    except Unsatisfiable as err:
        if not ctx.unsupported or count.examples > sum(ctx.unsupported.values()):
            return result("error", f"{type(err).__name__}: {err}")
        reasons = "; ".join(f"{n} examples: {why}" for why, n in sorted(ctx.unsupported.items()))
        return result(NOT_APPLICABLE, f"every example unsupported by the backend ({reasons})")
    except (HypothesisException, Exception) as err:  # the run itself broke (strategy, reference, loader)
        frame = traceback.extract_tb(err.__traceback__)[-1] if err.__traceback__ else None
        where = f" (at {frame.filename}:{frame.lineno})" if frame else ""
        return result("error", f"{type(err).__name__}: {err}{where}", _counterexample(ctx, spec, err, prop.name, level))
    failing = [f for f in failures if f.tier in LEVELS[level]]
    if failing:
        first = failing[0]
        return result("failed", first.message, first.counterexample, first.clause, first.tier)
    return result("passed")


def _validation_note(profile: Profile, tier: str) -> str:
    """Where the profile leaves refusals to the scheduler, a strictness failure says so: a convention, not a bug."""
    if tier != STRICTNESS or profile.backend_validates:
        return ""
    return (f" (profile {profile.name!r}: validating this input is the scheduler's job, not the backend's, so this"
            " is a missing refusal, never a safety failure)")


@dataclass
class _Count:
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


def _search(prop: Property, ctx: Context, count: _Count, *, examples: int, seed: int,
            database: ExampleDatabase | None, shrink: bool, reproduce: Blob | None = None,
            deadline: float | None = None) -> None:
    """One hypothesis run of the property; raises the (shrunk) ``Mismatch`` of a failure not seen before, or
    ``BudgetSpent`` when an example would start past ``deadline``."""
    replay = reproduce_failure(*reproduce) if reproduce is not None else (lambda test: test)
    if prop.stateful is not None:
        base = prop.stateful(ctx)
        machine_cls = type(base.__name__, (base,), {"__init__": _counting_init(base, count),
                                                    "teardown": _counting_teardown(base, count, deadline)})
        replay(hypothesis_seed(seed)(machine_cls))
        with drawing(ctx.profile.domain), one_thread():
            run_state_machine_as_test(machine_cls, settings=_settings(examples, database, shrink,
                                                                      stateful_step_count=STEPS_PER_MACHINE))
        return
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

    # settings outside @seed: @seed alone would also switch the example database off
    test = _settings(examples, database, shrink)(replay(hypothesis_seed(seed)(given(prop.strategy)(body))))
    kvtable.internals.set_database_key(test, f"kvtable:{prop.name}".encode())
    with drawing(ctx.profile.domain), one_thread():  # draws the profile's engine can hold, on one thread
        test()


def _counting_init(base: type, count: _Count) -> Callable[[Any], None]:
    def __init__(self: Any) -> None:
        interrupts.check()
        count.examples += 1
        base.__init__(self)

    return __init__


def _counting_teardown(base: type, count: _Count, deadline: float | None) -> Callable[[Any], None]:
    def teardown(self: Any) -> None:
        if isinstance(failure := sys.exc_info()[1], Mismatch):  # a step failed: the search is over, shrinking begins
            count.failed(failure)
        base.teardown(self)
        if count.spent(deadline):  # at the end of a machine's run, when its steps are drawn (earlier, Hypothesis
            raise BudgetSpent     # would find the example drawing less than it did before: flaky)

    return teardown


def _counterexample(ctx: Context, spec: str, err: BaseException, prop: str, level: str) -> str:
    blob = blob_of(err)
    check = verdict_lines(prop, spec, ctx.profile.name, level, blob) if blob is not None else ""
    return counterexample_text(spec, ctx.transcript.text(), f"FAILED: {err}", check)


def counterexample_text(spec: str, transcript: str, verdict: str, check: str = "") -> str:
    """A replayable snippet: the imports and backends, the recorded calls (a call that raises ends them, as a
    crash would), the verdict as a comment, then ``check``: lines that re-judge the example and exit 1 while
    it still fails (0 once fixed)."""
    comment = "\n".join(f"# {line}" for line in verdict.splitlines())
    calls = "\n".join(f"    {line}" for line in _guarded(transcript.splitlines() or ["pass"]))
    body = (f"try:\n{calls}\nexcept Exception as err:  # the verdict below decides whether this is the failure\n"
            "    print(f'the calls stopped at {type(err).__name__}: {err}')")
    return "\n".join(part for part in (_header(spec, "debug_backend" in transcript), body, comment, check) if part)


def _guarded(lines: list[str]) -> list[str]:
    """The transcript's lines, each call that raised when recorded in its own ``try`` (a refusal goes on)."""
    out: list[str] = []
    for line, after in zip(lines, [*lines[1:], ""], strict=True):
        if after.startswith("#   raised ") and not line.startswith("#"):
            out += ["try:", f"    {line}", "except Exception as err:",
                    "    print(f'raised {type(err).__name__}: {err}')"]
        else:
            out.append(line)
    return out


def run_properties(backend: BackendLike, properties: Sequence[Property], *, examples: Callable[[Property], int],
                   seed: int, profile: str | Profile | None = None, database: ExampleDatabase | None = None,
                   kind: str = "conform", total_examples: int = 0, progress: Progress | None = None,
                   shrink: bool = True, level: str = DEFAULT_LEVEL, isolate: bool = False, workers: int = 1,
                   timeout: float | None = None, sanitize: bool = False, max_memory_growth: int | None = None,
                   budget: Budget | None = None) -> Report:
    """Run ``properties`` against ``backend``; ``examples(prop)`` gives each property's example budget.

    ``shrink=False`` reports each failure at the first failing example, unshrunk (the zoo's find runs);
    ``level`` (``safety``, ``correct``, ``strict``) says which tiers' failures fail the run.
    The database keeps one entry per (property, backend, profile, level). ``isolate`` (implied by
    ``workers`` > 1) runs the properties in worker processes (``kvtable.conformance.isolation``): a crash
    or a silence of ``timeout`` seconds is that property's verdict, and so is a resident memory growth past
    ``max_memory_growth`` bytes (default 1 GiB) across its examples. Ctrl-C ends the run with the
    properties finished so far (``report.interrupted``). ``sanitize``: every Triton interpreter launch is
    bounds-checked (``sanitize.sanitizing``), in the workers too. An isolated backend named by a string is
    first loaded in a worker: a factory that crashes or hangs there is a ``UsageError`` naming it. ``budget``:
    the run's wall seconds, shared out as each property starts (``kvtable.conformance.budget``).
    """
    if level not in LEVELS:
        raise ValueError(f"no level {level!r}; known: {sorted(LEVELS)}")
    isolating = isolate or workers > 1
    if isolating and isinstance(backend, str):  # never touched in this process
        ctx, spec, profile_name = None, backend, get_profile(profile).name
    else:
        ctx, spec = make_context(backend, profile)
        profile_name = ctx.profile.name
    report = Report(spec, profile_name, seed, total_examples, kind, level=level,
                    budget=None if budget is None else budget.seconds)
    if budget is not None:
        budget.parallel = workers if isolating else 1
        budget.start()
    if database is not None:
        database = KeyedDatabase(database, database_prefix(spec, profile_name, level))
    results: Iterator[PropertyResult]
    if isolating:
        from kvtable.conformance.isolation import WorkerSetup, run_isolated
        from kvtable.conformance.options import DEFAULT_MAX_MEMORY_GROWTH, DEFAULT_TIMEOUT_S

        setup = WorkerSetup(backend, profile_name, seed, shrink, database is not None, level, sanitize)
        results = run_isolated(setup, properties, examples, workers=workers, database=database,
                               timeout=DEFAULT_TIMEOUT_S if timeout is None else timeout,
                               max_memory_growth=max_memory_growth or DEFAULT_MAX_MEMORY_GROWTH, budget=budget)
    else:
        assert ctx is not None
        results = _in_process(ctx, spec, properties, examples, seed=seed, database=database, shrink=shrink,
                              level=level, sanitize=sanitize, budget=budget)
    try:
        interrupts.check()  # Ctrl-C while starting up: no property starts
        with long_lived_frozen():
            for result in results:
                report.results.append(result)
                if progress is not None:
                    progress(len(report.results), len(properties), result)
                interrupts.check()
    except KeyboardInterrupt:
        report.interrupted = True
    report.interrupted = report.interrupted or interrupts.pending()
    order = {p.name: i for i, p in enumerate(properties)}
    report.results.sort(key=lambda r: order[r.property])
    return report


def _in_process(ctx: Context, spec: str, properties: Sequence[Property], examples: Callable[[Property], int], *,
                seed: int, database: ExampleDatabase | None, shrink: bool, level: str, sanitize: bool,
                budget: Budget | None = None) -> Iterator[PropertyResult]:
    """Each property's result, run in this process (under ``--sanitize``'s Triton guard if asked)."""
    with sanitizing() if sanitize else nullcontext():
        for prop in properties:
            yield run_property(prop, ctx, examples=examples(prop), seed=seed, spec=spec, database=database,
                               shrink=shrink, level=level, seconds=None if budget is None else budget.share(prop.name))


@contextmanager
def long_lived_frozen() -> Iterator[None]:
    """Keep the objects alive when a run starts (modules, torch, Hypothesis, the backend) out of the garbage
    collector's full passes until it ends: none of them becomes garbage mid-run, and each full pass rescanned
    them all (~0.15 s each, 4% of a 2000-example fuzz run). ``gc.freeze`` moves them to the permanent
    generation; ``gc.unfreeze`` hands them back, so a later collection still frees what the run left."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def run_conformance(backend: BackendLike, *, examples: int = 100, seed: int = 0,
                    profile: str | Profile | None = None, properties: Sequence[Property] | None = None,
                    database: ExampleDatabase | None = None, progress: Progress | None = None,
                    shrink: bool = True, budget: float | None = None, **execution: Any) -> Report:
    """Every property (or ``properties``) against ``backend`` with ``examples`` examples each; ``budget``: wall
    seconds shared equally across the properties (each stops early when its share is spent).

    ``backend`` is an instance, a ``kvtable.backends.load`` name or a factory taking ``debug=``; the
    debug-only properties run on its ``debug=True`` twin. The report names each failing clause;
    ``shrink=False`` keeps each failure's first failing example as found (faster, not minimal);
    ``execution``: ``isolate``, ``workers``, ``timeout``, as ``run_properties`` takes them.
    """
    chosen = PROPERTIES if properties is None else properties
    shared = None if budget is None else Budget(budget, {p.name: 1.0 for p in chosen})
    return run_properties(backend, chosen, examples=lambda _p: examples, seed=seed, profile=profile, database=database,
                          total_examples=examples, progress=progress, shrink=shrink, budget=shared, **execution)
