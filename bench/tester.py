"""The tester's own speed: differential examples per second of ``kvtable fuzz``, wall time of ``kvtable prove``."""

from __future__ import annotations

import time

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


def run(settings: Settings) -> Section:
    section = Section("tester", "The tester: kvtable fuzz differential examples/s, kvtable prove wall time",
                      ["command", "backend", "checks", "passed", "examples", "wall_s", "examples/s"])
    for backend in FUZZ_BACKENDS[settings.size]:
        _fuzz_row(section, backend, settings)
    _workers_rows(section, settings)
    _prove_row(section, settings)
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
