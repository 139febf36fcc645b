"""bench/RESULTS.md from ``kvtable bench --json`` files: the only place measured figures are written down.

``python -m kvtable.bench.results bench/results/*.json > bench/RESULTS.md`` regenerates it; a test checks the
committed file is exactly what its JSON renders to. Each run is shown with the command that made it, the commit
and date, the machine and its load (at the start and the end: ratios of candidates timed interleaved hold up
under load, absolute times do not), then every target with its median and min-max over the repetitions.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HEADER = ("# Benchmark results\n\nGenerated from the JSON files below by `python -m kvtable.bench.results "
          "bench/results/*.json > bench/RESULTS.md`; do not edit by hand. Targets are ratios of candidates timed "
          "interleaved in one run (median, min-max over the repetitions); the op counts are exact.\n")


def _load(values: Any) -> str:
    return "?" if not values else ", ".join(f"{v:.1f}" for v in values)


def _got(got: dict[str, float] | None, detail: str = "") -> str:
    if got is None:
        return "not measured"
    if detail.startswith("projected"):  # one figure scaled from a shorter run: no spread, and said to be projected
        return f"{got['median']:.3g}, {detail.split(';')[0]} (not measured at this size)"
    return f"{got['median']:.3g} ({got['min']:.3g}-{got['max']:.3g})"


def render_run(name: str, doc: dict[str, Any]) -> str:
    """One run: where it came from, then its targets section by section."""
    host = doc.get("host", {})
    dirty = " (impl/ or bench/ changed since)" if doc.get("dirty") else ""
    lines = [f"## {name}", "",
             f"- command: `{doc.get('command') or '?'}`",
             f"- commit: {doc.get('commit') or '?'}{dirty}; date: {doc.get('created', '?')}",
             f"- machine: torch {host.get('torch', '?')}, {host.get('torch_threads', '?')} thread(s) of "
             f"{host.get('cpu_count', '?')} cpus, cuda {host.get('cuda_device') or 'no'}",
             f"- load average (1, 5, 15 min) at the start: {_load(host.get('loadavg_start'))}; at the end: "
             f"{_load(host.get('loadavg'))}", ""]
    for section, body in doc.get("sections", {}).items():
        targets, tables = body.get("targets", []), body.get("tables", [])
        if not targets and not tables:
            continue
        lines += [f"### {section}", ""]
        if targets:
            lines += ["| target | want | got | verdict |", "|---|---|---|---|"]
            lines += [f"| {t['name']}{_cpu(t)} | {t['want']} | {_got(t.get('got'), t.get('detail', ''))} "
                      f"| {t['verdict']} |" for t in targets]
        lines += [f"- skipped: {s}" for s in body.get("skipped", [])]
        lines += [f"- on the GPU: {s}" for s in body.get("moved", [])]
        lines.append("")
        for table in tables:
            lines += [f"{table['title']}:", "", _row(table["columns"]), _row(["---"] * len(table["columns"]))]
            lines += [_row(row) for row in table["rows"]]
            lines.append("")
    return "\n".join(lines)


def _cpu(target: dict[str, Any]) -> str:
    """A GPU target's CPU figure, shown beside it (not judged)."""
    cpu = target.get("cpu")
    return "" if cpu is None else f" (the CPU route, not judged: {_got(cpu)})"


def _row(cells: Sequence[Any]) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def render(paths: Sequence[Path]) -> str:
    """RESULTS.md for these JSON files, in the order given."""
    runs = [render_run(path.name, json.loads(path.read_text())) for path in paths]
    return "\n".join([HEADER, *runs]).rstrip("\n") + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    paths = [Path(p) for p in (sys.argv[1:] if argv is None else argv)]
    if not paths:
        sys.stderr.write("usage: python -m kvtable.bench.results BENCH.json... > bench/RESULTS.md\n")
        return 2
    sys.stdout.write(render(sorted(paths)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
