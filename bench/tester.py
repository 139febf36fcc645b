"""The tester's own speed: differential examples per second of ``kvtable fuzz``, wall time of ``kvtable prove``."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from kvtable.bench.harness import Section, Settings

FUZZ_EXAMPLES = {"smoke": 10, "quick": 300, "full": 2000}
"""The run's total example budget, as ``kvtable fuzz --examples`` (each property gets at least 5)."""
FUZZ_BACKENDS = {"smoke": ("torch",), "quick": ("torch",), "full": ("torch", "reference")}
SMOKE_PROPERTIES = ["decode_locs", "graph/replay-fill"]
SMOKE_OBLIGATIONS = ["W1.in-bounds", "W0.decode-agrees"]
SEED = 0
WORKERS = (1, 2)
WORKER_REPEATS = {"smoke": 1, "quick": 3, "full": 3}
"""Runs of ``fuzz --workers N`` per worker count, interleaved, for the spread of examples/s."""


VERSION_RUNS = {"quick": (("fuzz", 2000, 3), ("conform", 20, 2), ("conform", 100, 1)),
                "full": (("fuzz", 2000, 5), ("conform", 20, 3), ("conform", 100, 3))}
"""(command, examples, rounds) timed beside the baselines: fuzz's examples in all, conform's per property (100:
the default run, whose CPU seconds are a target)."""
PROFILE_EXAMPLES = {"smoke": 3, "quick": 20, "full": 50}
"""Examples per property of the profiled conform run (and of its run without the guard)."""
CONFORM_DEFAULT_EXAMPLES = 100
CONFORM_DEFAULT_CPU_S = 60.0
SPEEDUP = 2.0
CEILING_VARIANTS = ("unchecked", "bare")
"""This checkout's runs with less of the tester beside fuzz's and conform --examples 20's (``version_runs.VARIANTS``):
the ceiling on what a cut to the checks (or to the draws too) could give."""


def run(settings: Settings) -> Section:
    section = Section("tester", "The tester: kvtable fuzz differential examples/s, kvtable prove wall time",
                      ["command", "backend", "checks", "passed", "examples", "wall_s", "examples/s"])
    for backend in FUZZ_BACKENDS[settings.size]:
        _fuzz_row(section, backend, settings)
    _workers_rows(section, settings)
    _prove_row(section, settings)
    versions(section, settings, VERSION_RUNS.get(settings.size, ()), variants=CEILING_VARIANTS)
    profile(section, PROFILE_EXAMPLES[settings.size], smoke=settings.size == "smoke")
    section.notes[:0] = [
        "fuzz runs without an example database (nothing replayed), so every example is a fresh draw",
        "examples = examples hypothesis actually ran, summed over properties; examples/s = examples / wall_s",
        "checks = properties fuzzed or obligations discharged; prove runs every obligation at the default z3 "
        "resource limit, each in its own process, as `kvtable prove` does; passed = proved, or refuted as expected",
    ]
    if "reference" in FUZZ_BACKENDS[settings.size]:
        section.notes.append("the reference backend (pure Python) fuzzed beside torch shows what the tester "
                             "itself costs per example (generation, the reference model, comparison)")
    return section


def _fuzz_row(section: Section, backend: str, settings: Settings) -> None:
    from kvtable.conformance.fuzz import fuzz
    from kvtable.conformance.properties import select

    properties = select(SMOKE_PROPERTIES if settings.size == "smoke" else None)
    start = time.perf_counter()
    report = fuzz(backend, examples=FUZZ_EXAMPLES[settings.size], seed=SEED, database=None,
                  properties=properties)
    wall = time.perf_counter() - start
    ran = sum(r.examples for r in report.results)
    section.add(command=f"fuzz --examples {report.examples} --seed {SEED}", backend=backend,
                checks=len(report.results), passed=sum(r.passed for r in report.results), examples=ran,
                wall_s=wall, **{"examples/s": ran / wall}, failed_clauses=report.failed_clauses,
                slowest=max(report.results, key=lambda r: r.seconds).property if report.results else None)


def _workers_rows(section: Section, settings: Settings) -> None:
    """``fuzz --workers N`` on torch for each N, runs interleaved: examples/s (median, min, max), start-up
    of the workers included, the forkserver started beforehand (once per process, like an import)."""
    from kvtable.conformance.fuzz import fuzz
    from kvtable.conformance.isolation import start_server
    from kvtable.conformance.properties import select

    properties = select(SMOKE_PROPERTIES if settings.size == "smoke" else None)
    start_server()
    rates: dict[int, list[float]] = {n: [] for n in WORKERS}
    reports = {}
    for _ in range(WORKER_REPEATS[settings.size]):
        for workers in WORKERS:
            start = time.perf_counter()
            reports[workers] = fuzz("torch", examples=FUZZ_EXAMPLES[settings.size], seed=SEED, database=None,
                                    properties=properties, isolate=True, workers=workers)
            rates[workers].append(sum(r.examples for r in reports[workers].results) / (time.perf_counter() - start))
    for workers, report in reports.items():
        ran, spread = sum(r.examples for r in report.results), sorted(rates[workers])
        section.add(command=f"fuzz --examples {report.examples} --seed {SEED} --workers {workers}", backend="torch",
                    checks=len(report.results), passed=sum(r.passed for r in report.results), examples=ran,
                    wall_s=ran / spread[len(spread) // 2], **{"examples/s": spread[len(spread) // 2]},
                    examples_per_s_min=spread[0], examples_per_s_max=spread[-1], repeats=len(spread))
    section.notes.append(f"fuzz --workers N: properties in N worker processes (crash isolation); examples/s is the "
                         f"median of {WORKER_REPEATS[settings.size]} interleaved runs (min/max in the JSON), "
                         "the workers' start-up included")


def _prove_row(section: Section, settings: Settings) -> None:
    from kvtable.prover.obligations.registry import OBLIGATIONS
    from kvtable.prover.prove import prove, select

    chosen = select(SMOKE_OBLIGATIONS if settings.size == "smoke" else None)
    start = time.perf_counter()
    results = prove(chosen)
    wall = time.perf_counter() - start
    slowest = max(results, key=lambda r: r.seconds)
    section.add(command=f"prove ({len(chosen)} of {len(OBLIGATIONS)} obligations)", backend="z3",
                checks=len(results), passed=sum(r.passed for r in results),
                examples=None, wall_s=wall, **{"examples/s": None},
                failed=[r.obligation.name for r in results if not r.passed],
                slowest=f"{slowest.obligation.name} ({slowest.seconds:.2f}s, {slowest.verdict})")
    section.notes.append(f"prove's slowest obligation: {slowest.obligation.name}, {slowest.seconds:.2f}s "
                         f"({slowest.verdict}) of {wall:.2f}s")


def versions(section: Section, settings: Settings, runs: Sequence[tuple[str, int, int]], *,
             alone: bool = False, variants: Sequence[str] = ()) -> None:
    """fuzz and conform on torch in this checkout and each ``--baseline``, fresh processes, interleaved: examples
    per CPU second and this checkout's ratio over each baseline (targets: >= 2x), the default conform's CPU;
    ``variants``: beside each baseline's runs that are not the default conform, the ceiling runs (``_ceiling``)."""
    from kvtable.bench.harness import Spread, Target
    from kvtable.bench.version_runs import VARIANTS, compare

    if not runs:
        section.skipped.append("the runs beside earlier commits: not in a smoke run")
        return
    rows: list[list[Any]] = []
    ceilings: list[list[Any]] = []
    for kind, examples, rounds in runs:
        default = kind == "conform" and examples == CONFORM_DEFAULT_EXAMPLES
        ceiling = variants if settings.baselines and not default else ()  # a ceiling is over a baseline's rate
        result = compare(settings.baselines, kind, examples, rounds, ceiling)
        command = f"{kind} --examples {examples} --seed 0" if kind == "fuzz" else f"conform --examples {examples}"
        for c in result["candidates"]:
            rate, ratio = c["examples_per_cpu_s"], c["this_over_it"]
            label = VARIANTS[c["variant"]] if c.get("variant") else "this" if c["this"] else "baseline"
            rows.append([command, c["commit"] or "?", label, c["properties"],
                         c["examples"], _fmt(c["cpu_s"]), _fmt(c["startup_cpu_s"]), _fmt(rate),
                         _fmt(c["examples_per_wall_s"]), "-" if c["this"] else _fmt(ratio)])
            section.add(command=f"{command} (versions)", backend="torch", checks=c["properties"], passed=c["passed"],
                        examples=c["examples"], wall_s=None, **{"examples/s": rate["median"]}, version=c)
            if c.get("variant"):
                ceilings += _ceiling(command, c, result["candidates"])
                continue
            if c["this"]:
                if default:
                    cpu = [c["cpu_s"][k] + c["startup_cpu_s"][k] for k in ("min", "median", "max")]
                    got = Spread(cpu[0], cpu[1], cpu[2])
                    section.targets.append(Target(
                        "conform --backend torch, default run: CPU seconds (start-up included)",
                        f"<= {CONFORM_DEFAULT_CPU_S:g} s", got, got.median <= CONFORM_DEFAULT_CPU_S))
                continue
            section.targets.append(Target.at_least(
                f"{command}, torch: examples per CPU second over {c['commit']}'s", SPEEDUP,
                Spread(ratio["min"], ratio["median"], ratio["max"])))
        if kind == "conform" and len(result["candidates"]) > 1:
            _family_table(section, result["candidates"], examples)
    if not settings.baselines and not alone:
        section.skipped.append("no --baseline given: this checkout's rates only, no ratio to an earlier commit")
    if rows:
        section.tables.append({
            "title": "The tester beside earlier commits (torch backend, fresh process per run, interleaved rounds; "
                     "median (min-max) over the rounds)",
            "columns": ["command", "commit", "candidate", "properties", "examples", "cpu_s", "startup_cpu_s",
                        "examples/cpu_s", "examples/wall_s", "this / it"],
            "rows": rows})
    if ceilings:
        _ceiling_table(section, ceilings)


def _ceiling(command: str, variant: dict[str, Any], candidates: Sequence[dict[str, Any]]) -> list[list[Any]]:
    """Per baseline, a row of the ceiling table: the variant's examples per CPU second over the baseline's, round
    by round (the most a cut to what the variant removed could make of this checkout's ratio), and, in ms of CPU
    per example (medians), what the removed part costs now and what it may cost for ``SPEEDUP`` times the
    baseline's rate."""
    from kvtable.bench.harness import Spread
    from kvtable.bench.version_runs import VARIANTS

    this = next(c for c in candidates if c["this"])
    rows = []
    for base in (c for c in candidates if not c["this"] and not c.get("variant")):
        ratios = [a / b for a, b in zip(variant["rounds_examples_per_cpu_s"], base["rounds_examples_per_cpu_s"],
                                        strict=True)]
        kept, now, allowed = (1000 / c["examples_per_cpu_s"]["median"] for c in (variant, this, base))
        rows.append([command, VARIANTS[variant["variant"]], base["commit"], Spread.of(ratios).render(),
                     round(now - kept, 2), round(allowed / SPEEDUP - kept, 2)])
    return rows


def _ceiling_table(section: Section, rows: list[list[Any]]) -> None:
    """The ceiling rows as a table, what they mean in its title."""
    section.tables.append({
        "title": "The ceiling: this checkout run with less of its tester in the same rounds ('checks removed' keeps "
                 "the draws, Hypothesis' engine and the runner, and drops the backend call, the reference, the index "
                 "guard, the input copies and the judge; 'checks and draws removed' keeps the engine and the runner; "
                 "the state machines run as they are): its speed over the baseline's is the most any cut to the "
                 f"removed part can give; for {SPEEDUP:g}x, that part may cost at most the last column, in ms of CPU "
                 "per example (medians)",
        "columns": ["command", "run", "baseline", "examples/cpu_s over the baseline's", "removed part now, ms/example",
                    f"removed part allowed for {SPEEDUP:g}x, ms/example"],
        "rows": rows})


def _family_table(section: Section, candidates: Sequence[dict[str, Any]], examples: int) -> None:
    """conform's wall ms per example per property family, this checkout beside each baseline."""
    from kvtable.bench.tester_profile import family
    from kvtable.bench.version_runs import family_rows

    columns, rows = family_rows(candidates, family)
    section.tables.append({
        "title": f"conform --examples {examples} per property family beside the earlier commits: wall ms per "
                 "example over the rounds (one torch thread, so about CPU on a quiet machine); this / it is the "
                 "speed ratio on the properties both commits have",
        "columns": columns, "rows": rows})


def profile(section: Section, examples: int, *, smoke: bool = False) -> None:
    """The profile table: where an example's CPU time goes, per property family (``tester_profile``)."""
    from kvtable.bench.tester_profile import PROFILE_REPEATS, profile_table
    from kvtable.conformance.properties import select

    columns, rows = profile_table(examples, properties=select(SMOKE_PROPERTIES) if smoke else None)
    section.tables.append({
        "title": f"Where an example's CPU time goes: ms per example by phase, per property family (conform "
                 f"--examples {examples} on torch, in process, medians of {PROFILE_REPEATS} interleaved runs, the "
                 "timers' own cost taken out; guard = the backend time a run without the index guard saves; "
                 "untimed = the whole CPU per example of a run without timers, the check on the phases' sum)",
        "columns": columns, "rows": rows})


def _fmt(spread: dict[str, float]) -> str:
    return f"{spread['median']:.3g} ({spread['min']:.3g}-{spread['max']:.3g})"
