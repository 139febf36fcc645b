"""Run the properties against a backend and collect per-clause results: ``run_conformance`` and ``Report``.

Each property becomes one hypothesis test (``@seed`` for determinism, its own database key), run
quietly; a failure is reported with the clause it broke and the shrunk example's backend calls as
a replayable Python snippet. A property that does not apply to the backend (the kernel properties
on a backend with no ``backend.kernels``) is not run: it is reported ``not applicable``, shown as
``N/A`` in the table and counted neither as passed nor as failed.
"""

from __future__ import annotations

import json
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from hypothesis import HealthCheck, Phase, Verbosity, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis.database import ExampleDatabase
from hypothesis.errors import HypothesisException
from hypothesis.stateful import run_state_machine_as_test

from kvtable.backends import Backend, debug_twin, is_backend, load, spec_of
from kvtable.backends.profiles import Profile, get_profile
from kvtable.conformance.checks import Mismatch, Recorded, Transcript
from kvtable.conformance.database import KeyedDatabase, database_prefix
from kvtable.conformance.properties import PROPERTIES, Context, Property
from kvtable.exitcodes import UsageError
from kvtable.spec.clauses import clause_label

__all__ = ["NOT_APPLICABLE", "PropertyResult", "Report", "make_context", "run_conformance", "run_properties",
           "run_property"]

Progress = Callable[[int, int, "PropertyResult"], None]
STEPS_PER_MACHINE = 12
NOT_APPLICABLE = "not applicable"


@dataclass
class PropertyResult:
    """One property's verdict against one backend."""

    property: str
    clause: str
    """The clause the property checks, or, on failure, the clause the backend broke (as ``"T4 live-pages"``)."""
    status: str
    """``passed``, ``failed`` (the backend broke the clause), ``error`` (the run itself could not proceed),
    ``crash`` or ``timeout`` (the backend took its worker process down or hung: ``kvtable.conformance.isolation``)
    or ``not applicable`` (not run: ``message`` says why)."""
    examples: int
    seconds: float
    debug: bool
    message: str = ""
    counterexample: str = ""

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

    @property
    def passed(self) -> bool:
        """No property failed or errored (not-applicable ones neither pass nor fail the run)."""
        return not self.failures

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
    def seconds(self) -> float:
        return sum(r.seconds for r in self.results)

    def table(self) -> str:
        """The per-clause table: clause, property, result (N/A for a property that does not apply), examples, time."""
        rows = [("clause", "property", "result", "examples", "time")]
        for r in sorted(self.results, key=lambda r: (_clause_order(r.clause_id), r.property)):
            rows.append((r.clause, r.property, r.label, str(r.examples) if r.applicable else "-",
                         f"{r.seconds:.2f}s"))
        widths = [max(len(row[i]) for row in rows) for i in range(5)]
        lines = ["  ".join(cell.ljust(w) if i < 3 else cell.rjust(w) for i, (cell, w) in
                           enumerate(zip(row, widths, strict=True))) for row in rows]
        lines.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join(lines)

    def summary(self) -> str:
        verdict = "PASS" if self.passed else f"FAIL: {', '.join(self.failed_clauses)}"
        if self.interrupted:
            verdict = f"INTERRUPTED after {len(self.results)} properties; {verdict} so far"
        applicable = len(self.results) - len(self.not_applicable)
        skipped = f", {len(self.not_applicable)} not applicable" if self.not_applicable else ""
        return (f"kvtable {self.kind}: backend {self.backend}, profile {self.profile}, seed {self.seed}: "
                f"{sum(r.passed for r in self.results)}/{applicable} properties passed{skipped} in "
                f"{self.seconds:.1f}s; {verdict}")

    def notes(self) -> str:
        """Why each not-applicable property was not run, one line each."""
        return "\n".join(f"N/A {r.property}: {r.message}" for r in self.not_applicable)

    def details(self) -> str:
        """Each failure: the clause, the message and the replayable counterexample."""
        blocks = []
        for r in self.failures:
            blocks.append(f"=== {r.status.upper()} [{r.clause}] {r.property}\n{r.message}\n"
                          f"--- counterexample (replayable):\n{r.counterexample}")
        return "\n\n".join(blocks)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["passed"] = self.passed
        out["failed_clauses"] = self.failed_clauses
        out["not_applicable"] = [r.property for r in self.not_applicable]
        for r in out["results"]:
            r["clause_id"] = r["clause"].split()[0]
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)


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
                    report_multiple_bugs=False, verbosity=Verbosity.quiet, print_blob=False,
                    suppress_health_check=list(HealthCheck), phases=PHASES if shrink else FIND_PHASES,
                    **extra)


def run_property(prop: Property, ctx: Context, *, examples: int, seed: int, spec: str = "backend",
                 database: ExampleDatabase | None = None, shrink: bool = True) -> PropertyResult:
    """Run one property for up to ``examples`` examples; on failure keep the (shrunk, unless not ``shrink``)
    example's transcript."""
    reason = prop.not_applicable(ctx) if prop.not_applicable is not None else None
    if reason:
        return PropertyResult(prop.name, clause_label(prop.clause), NOT_APPLICABLE, 0, 0.0, prop.debug, reason)
    count = [0]
    start = time.perf_counter()
    try:
        if prop.stateful is not None:
            base = prop.stateful(ctx)
            machine_cls = type(base.__name__, (base,), {"__init__": _counting_init(base, count)})
            hypothesis_seed(seed)(machine_cls)
            run_state_machine_as_test(machine_cls, settings=_settings(examples, database, shrink,
                                                                      stateful_step_count=STEPS_PER_MACHINE))
        else:
            assert prop.strategy is not None and prop.check is not None
            check = prop.check

            def body(example: Any) -> None:
                count[0] += 1
                ctx.transcript.reset()
                check(ctx, example)

            # settings outside @seed: @seed alone would also switch the example database off
            test = _settings(examples, database, shrink)(hypothesis_seed(seed)(given(prop.strategy)(body)))
            test._hypothesis_internal_database_key = f"kvtable:{prop.name}".encode()  # type: ignore[attr-defined]
            test()
    except UsageError:  # the database failed: infrastructure, not a verdict
        raise
    except Mismatch as err:
        return PropertyResult(prop.name, clause_label(err.clause), "failed", count[0], time.perf_counter() - start,
                              prop.debug, str(err), _counterexample(ctx, spec, err))
    except (HypothesisException, Exception) as err:  # the run itself broke (strategy, reference, loader)
        frame = traceback.extract_tb(err.__traceback__)[-1] if err.__traceback__ else None
        where = f" (at {frame.filename}:{frame.lineno})" if frame else ""
        return PropertyResult(prop.name, clause_label(prop.clause), "error", count[0], time.perf_counter() - start,
                              prop.debug, f"{type(err).__name__}: {err}{where}", _counterexample(ctx, spec, err))
    return PropertyResult(prop.name, clause_label(prop.clause), "passed", count[0], time.perf_counter() - start,
                          prop.debug)


def _counting_init(base: type, count: list[int]) -> Callable[[Any], None]:
    def __init__(self: Any) -> None:
        count[0] += 1
        base.__init__(self)

    return __init__


def _counterexample(ctx: Context, spec: str, err: BaseException) -> str:
    return counterexample_text(spec, ctx.transcript.text(), f"FAILED: {err}")


def counterexample_text(spec: str, transcript: str, verdict: str) -> str:
    """A replayable snippet: the imports and backends, the recorded calls, the verdict as a comment."""
    comment = "\n".join(f"# {line}" for line in verdict.splitlines())
    return f"{_header(spec, 'debug_backend' in transcript)}\n{transcript}\n{comment}"


def run_properties(backend: BackendLike, properties: Sequence[Property], *, examples: Callable[[Property], int],
                   seed: int, profile: str | Profile | None = None, database: ExampleDatabase | None = None,
                   kind: str = "conform", total_examples: int = 0, progress: Progress | None = None,
                   shrink: bool = True, level: str = "correct", isolate: bool = False, workers: int = 1,
                   timeout: float | None = None) -> Report:
    """Run ``properties`` against ``backend``; ``examples(prop)`` gives each property's example budget.

    ``shrink=False`` reports each failure at the first failing example, unshrunk (the zoo's find runs).
    The database keeps one entry per (property, backend, profile, level). ``isolate`` (implied by
    ``workers`` > 1) runs the properties in worker processes (``kvtable.conformance.isolation``): a crash
    or a silence of ``timeout`` seconds is that property's verdict. Ctrl-C ends the run with the
    properties finished so far (``report.interrupted``).
    """
    ctx, spec = make_context(backend, profile)
    report = Report(spec, ctx.profile.name, seed, total_examples, kind)
    if database is not None:
        database = KeyedDatabase(database, database_prefix(spec, ctx.profile.name, level))
    results: Iterator[PropertyResult]
    if isolate or workers > 1:
        from kvtable.conformance.isolation import DEFAULT_TIMEOUT_S, WorkerSetup, run_isolated

        setup = WorkerSetup(backend, ctx.profile.name, seed, shrink, database is not None)
        results = run_isolated(setup, properties, examples, workers=workers, database=database,
                               timeout=DEFAULT_TIMEOUT_S if timeout is None else timeout)
    else:
        results = (run_property(prop, ctx, examples=examples(prop), seed=seed, spec=spec, database=database,
                                shrink=shrink) for prop in properties)
    try:
        for result in results:
            report.results.append(result)
            if progress is not None:
                progress(len(report.results), len(properties), result)
    except KeyboardInterrupt:
        report.interrupted = True
    order = {p.name: i for i, p in enumerate(properties)}
    report.results.sort(key=lambda r: order[r.property])
    return report


def run_conformance(backend: BackendLike, *, examples: int = 100, seed: int = 0,
                    profile: str | Profile | None = None, properties: Sequence[Property] | None = None,
                    database: ExampleDatabase | None = None, progress: Progress | None = None,
                    shrink: bool = True, **execution: Any) -> Report:
    """Every property (or ``properties``) against ``backend`` with ``examples`` examples each.

    ``backend`` is an instance, a ``kvtable.backends.load`` name or a factory taking ``debug=``; the
    debug-only properties run on its ``debug=True`` twin. The report names each failing clause;
    ``shrink=False`` keeps each failure's first failing example as found (faster, not minimal);
    ``execution``: ``isolate``, ``workers``, ``timeout``, as ``run_properties`` takes them.
    """
    return run_properties(backend, PROPERTIES if properties is None else properties, examples=lambda _p: examples,
                          seed=seed, profile=profile, database=database, total_examples=examples,
                          progress=progress, shrink=shrink, **execution)
