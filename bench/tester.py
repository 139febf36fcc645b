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


def run(settings: Settings) -> Section:
    section = Section("tester", "The tester: kvtable fuzz differential examples/s, kvtable prove wall time",
                      ["command", "backend", "checks", "passed", "examples", "wall_s", "examples/s"])
    for backend in FUZZ_BACKENDS[settings.size]:
        _fuzz_row(section, backend, settings)
    _prove_row(section, settings)
    section.notes[:0] = [
        "fuzz runs without an example database (nothing replayed), so every example is a fresh draw",
        "examples = examples hypothesis actually ran, summed over properties; examples/s = examples / wall_s",
        "checks = properties fuzzed or obligations discharged; prove runs every obligation at the default z3 "
        "timeout, each in its own process, as `kvtable prove` does; passed = proved, or refuted as expected",
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


def _prove_row(section: Section, settings: Settings) -> None:
    from kvtable.spec.obligations import OBLIGATIONS
    from kvtable.spec.prove import DEFAULT_TIMEOUT_S, prove, select

    chosen = select(SMOKE_OBLIGATIONS if settings.size == "smoke" else None)
    start = time.perf_counter()
    results = prove(chosen, DEFAULT_TIMEOUT_S)
    wall = time.perf_counter() - start
    slowest = max(results, key=lambda r: r.seconds)
    section.add(command=f"prove ({len(chosen)} of {len(OBLIGATIONS)} obligations)", backend="z3",
                checks=len(results), passed=sum(r.passed for r in results),
                examples=None, wall_s=wall, **{"examples/s": None},
                failed=[r.obligation.name for r in results if not r.passed],
                slowest=f"{slowest.obligation.name} ({slowest.seconds:.2f}s, {slowest.verdict})")
    section.notes.append(f"prove's slowest obligation: {slowest.obligation.name}, {slowest.seconds:.2f}s "
                         f"({slowest.verdict}) of {wall:.2f}s")
