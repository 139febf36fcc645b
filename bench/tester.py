"""The tester's own speed: differential examples per second of ``kvtable fuzz``, wall time of ``kvtable prove``."""

from __future__ import annotations

import time

from kvtable.bench.harness import Section, Settings

FUZZ_EXAMPLES = {"smoke": 10, "quick": 300, "full": 2000}
"""The run's total example budget, as ``kvtable fuzz --examples`` (each property gets at least 5)."""
FUZZ_BACKENDS = {"smoke": ("torch",), "quick": ("torch",), "full": ("torch", "reference")}
SMOKE_PROPERTIES = ["decode_locs", "graph/replay-fill"]
SEED = 0


def run(settings: Settings) -> Section:
    section = Section("tester", "The tester: kvtable fuzz differential examples/s, kvtable prove wall time",
                      ["command", "backend", "properties", "passed", "examples", "wall_s", "examples/s"])
    for backend in FUZZ_BACKENDS[settings.size]:
        _fuzz_row(section, backend, settings)
    section.notes += [
        "fuzz runs without an example database (nothing replayed), so every example is a fresh draw",
        "examples = examples hypothesis actually ran, summed over properties; examples/s = examples / wall_s",
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
                properties=len(report.results), passed=sum(r.passed for r in report.results), examples=ran,
                wall_s=wall, **{"examples/s": ran / wall}, failed_clauses=report.failed_clauses,
                slowest=max(report.results, key=lambda r: r.seconds).property if report.results else None)
