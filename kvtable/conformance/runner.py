"""Run the properties against a backend and collect per-clause results: ``run_conformance`` and ``run_properties``.

The data flow: ``context.make_context`` (the backend, loaded once) -> each property through
``execute.run_property`` (``search`` runs Hypothesis, ``result`` judges and records), here or in worker
processes (``isolation``) -> the ``report.Report`` it renders. A property that does not apply to the backend is
reported ``not applicable``, shown as ``N/A`` and counted neither as passed nor as failed.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import replace
from typing import Any

from hypothesis.database import ExampleDatabase

from kvtable import interrupts
from kvtable.backends import Backend
from kvtable.backends.profiles import Profile, get_profile
from kvtable.conformance.budget import Budget
from kvtable.conformance.context import BackendLike, make_context
from kvtable.conformance.core import Context, Property
from kvtable.conformance.counterexample import counterexample_text
from kvtable.conformance.database import KeyedDatabase, database_prefix
from kvtable.conformance.execute import run_property
from kvtable.conformance.isolation import WorkerSetup, run_isolated
from kvtable.conformance.levels import DEFAULT_LEVEL, LEVELS, SAFETY
from kvtable.conformance.memory import MEMORY, Growth, resident_bytes
from kvtable.conformance.options import DEFAULT_MAX_MEMORY_GROWTH, DEFAULT_TIMEOUT_S
from kvtable.conformance.properties import PROPERTIES
from kvtable.conformance.report import Report
from kvtable.conformance.result import PropertyResult
from kvtable.conformance.sanitize import sanitizing

__all__ = ["Progress", "run_conformance", "run_properties"]

Progress = Callable[[int, int, PropertyResult], None]


def run_properties(backend: BackendLike, properties: Sequence[Property], *, examples: Callable[[Property], int],
                   seed: int, profile: str | Profile | None = None, database: ExampleDatabase | None = None,
                   kind: str = "conform", total_examples: int = 0, progress: Progress | None = None,
                   shrink: bool = True, level: str = DEFAULT_LEVEL, isolate: bool = False, workers: int = 1,
                   timeout: float | None = None, sanitize: bool = False, max_memory_growth: int | None = None,
                   budget: Budget | None = None, loaded: Backend | None = None) -> Report:
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
    the run's wall seconds, shared out as each property starts (``kvtable.conformance.budget``). ``loaded``: the
    backend a string ``backend`` names, already loaded (by preflight), used in this process instead of a new one.
    """
    if level not in LEVELS:
        raise ValueError(f"no level {level!r}; known: {sorted(LEVELS)}")
    isolating = isolate or workers > 1
    if isolating and isinstance(backend, str):  # never touched in this process
        ctx, spec, profile_name = None, backend, get_profile(profile).name
    else:
        ctx, spec = make_context(backend, profile, loaded=loaded)
        profile_name = ctx.profile.name
    report = Report(spec, profile_name, seed, total_examples, kind, level=level,
                    budget=None if budget is None else budget.seconds)
    if budget is not None:
        budget.parallel = workers if isolating else 1
        budget.start()
    if database is not None:
        database = KeyedDatabase(database, database_prefix(spec, profile_name, level))
    if isolating:
        setup = WorkerSetup(backend, profile_name, seed, shrink, database is not None, level, sanitize)
        results = run_isolated(setup, properties, examples, workers=workers, database=database,
                               timeout=DEFAULT_TIMEOUT_S if timeout is None else timeout,
                               max_memory_growth=max_memory_growth or DEFAULT_MAX_MEMORY_GROWTH, budget=budget)
    else:
        assert ctx is not None
        results = _in_process(ctx, spec, properties, examples, seed=seed, database=database, shrink=shrink,
                              level=level, sanitize=sanitize, budget=budget,
                              max_memory_growth=max_memory_growth or DEFAULT_MAX_MEMORY_GROWTH)
    return _collect(report, results, properties, progress)


def _collect(report: Report, results: Iterator[PropertyResult], properties: Sequence[Property],
             progress: Progress | None) -> Report:
    """``report`` with each result as it comes (Ctrl-C keeps those so far), in the properties' order."""
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
                budget: Budget | None = None, max_memory_growth: int = DEFAULT_MAX_MEMORY_GROWTH
                ) -> Iterator[PropertyResult]:
    """Each property's result, run in this process (under ``--sanitize``'s Triton guard if asked); a property
    across whose examples the backend's resident memory grew past ``max_memory_growth`` is a ``memory`` verdict."""
    with sanitizing() if sanitize else nullcontext():
        for prop in properties:
            growth = Growth()
            ctx.transcript.on_call = lambda statement, growth=growth: growth.calling(statement, resident_bytes())
            try:
                result = run_property(prop, ctx, examples=examples(prop), seed=seed, spec=spec, database=database,
                                      shrink=shrink, level=level,
                                      seconds=None if budget is None else budget.share(prop.name))
            finally:
                ctx.transcript.on_call = None
            grown = growth.calling("", resident_bytes())
            yield result if grown <= max_memory_growth else _grown(result, spec, growth.why(
                grown, max_memory_growth, "in this process: run it isolated to stop it at the bound"))


def _grown(result: PropertyResult, spec: str, why: str) -> PropertyResult:
    """``result`` as a ``memory`` verdict: the backend's memory grew past the bound while the property ran."""
    message = f"the backend {why}"
    return replace(result, status=MEMORY, tier=SAFETY, message=message, failures=[],
                   counterexample=counterexample_text(spec, "", f"{MEMORY.upper()}: {message}"))


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
    ``execution``: ``isolate``, ``workers``, ``timeout``, ``loaded``, as ``run_properties`` takes them.
    """
    chosen = PROPERTIES if properties is None else properties
    shared = None if budget is None else Budget(budget, {p.name: 1.0 for p in chosen})
    return run_properties(backend, chosen, examples=lambda _p: examples, seed=seed, profile=profile, database=database,
                          total_examples=examples, progress=progress, shrink=shrink, budget=shared, **execution)
