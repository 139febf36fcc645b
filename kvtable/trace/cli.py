"""``kvtable trace record|check``: simulate a serving loop into a trace, or judge recorded traces."""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from kvtable.argtypes import positive_int
from kvtable.conformance.levels import LEVELS
from kvtable.exitcodes import EXIT_FAILED, EXIT_PASSED, UsageError
from kvtable.trace.store import MANIFEST

if TYPE_CHECKING:
    from kvtable.trace.check import Report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="trace_command", required=True, metavar="ACTION")
    record = sub.add_parser("record", help="run the serving-loop simulator on a backend and record its trace")
    record.add_argument("--backend", default=None, help="backend name (as for conform: torch, pkg.mod:factory, "
                        "path/file.py:factory)")
    record.add_argument("--engine", default=None, help="drive an installed engine's own scheduler instead of the "
                        "simulator: transformers, vllm or sglang (kvtable engines install NAME)")
    record.add_argument("--fault", default=None, help="with --engine: a named fault patched into the engine's "
                        "real code for this run (python -m kvtable.engines lists them)")
    record.add_argument("--profile", default="kvtable", help="the engine's conventions the tables follow")
    record.add_argument("--steps", type=positive_int, default=200, help="scheduler iterations (default 200)")
    record.add_argument("--seed", type=int, default=0)
    record.add_argument("--faults", type=float, default=0.05, help="share of eager steps carrying a stale length "
                        "real engines publish (default 0.05; 0: valid input only)")
    record.add_argument("--out", type=Path, required=True, help="the new trace folder")
    record.add_argument("--route", choices=("locations", "allocator"), default="locations",
                        help="drive the backend's location calls (default), or its allocator (alloc_decode/verify/"
                        "extend: the engine chooses the slots, as SGLang does)")
    record.add_argument("--page-size", type=positive_int, default=1, help="the allocator route's page size")
    record.add_argument("--pool-pages", type=positive_int, default=400, help="the allocator route's pool size in "
                        "pages (its free pages are the top ones: past 2^31 slots, ids no int32 holds)")
    record.add_argument("--debug", action="store_true", help="the backend in debug mode (full contract checks): "
                        "what --level strict judges refusals against")
    check = sub.add_parser("check", help="judge every step of one or more traces")
    check.add_argument("paths", nargs="+", type=Path, metavar="PATH")
    check.add_argument("--profile", default=None, help="conventions to judge by (default: the trace's own)")
    check.add_argument("--level", choices=sorted(LEVELS), default="correct")
    check.add_argument("--workers", type=positive_int, default=1, help="traces checked in parallel (processes)")
    check.add_argument("--json", action="store_true", help="one JSON object per trace instead of text")


def run(args: argparse.Namespace) -> int:
    return _record(args) if args.trace_command == "record" else _check(args)


def _record(args: argparse.Namespace) -> int:
    if args.engine is not None:
        from kvtable.engines.record import record_engine

        return record_engine(args)
    from kvtable.backends import BackendNotFound, BackendUnavailable, NoDebugMode, load, spec_of
    from kvtable.backends.profiles import get_profile
    from kvtable.trace.allocation import AllocSimulator
    from kvtable.trace.recorder import Recorder
    from kvtable.trace.simulate import SimConfig, simulate

    if (args.out / MANIFEST).exists():
        raise UsageError(f"--out {args.out}: a trace is already there")
    try:
        get_profile(args.profile)
        backend = load(args.backend, debug=True if args.debug else None)
    except (KeyError, BackendNotFound, BackendUnavailable, NoDebugMode) as err:
        raise UsageError(str(err).strip("'\"")) from None
    config = SimConfig(faults=args.faults)
    start = time.perf_counter()
    name = args.backend or spec_of(backend)
    meta = {"seed": args.seed, "steps": args.steps, "faults": args.faults, "debug": args.debug}
    groups = config.groups if args.route == "locations" else ()
    with Recorder(args.out, profile=args.profile, groups=groups, backend=name, steps_per_chunk=16,
                  meta=meta) as recorder:
        if args.route == "locations":
            simulate(backend, recorder, args.steps, seed=args.seed, config=config, profile=args.profile)
        else:
            sim = AllocSimulator(backend, recorder, seed=args.seed, page_size=args.page_size,
                                 pool_pages=args.pool_pages, faults=args.faults)
            for _ in range(args.steps):
                sim.step()
    print(f"recorded {recorder.steps} steps of {args.steps} scheduler iterations ({name}, seed {args.seed}) to "
          f"{args.out}: {recorder.writer.bytes_written / 1e3:.0f} kB, {time.perf_counter() - start:.1f} s; "
          f"{recorder.injected} with an input fault put there on purpose (--faults {args.faults:g})")
    return EXIT_PASSED


def _check_one(job: tuple[Path, str | None, str]) -> Report:
    from kvtable.trace.check import check_trace

    return check_trace(*job)


def _check(args: argparse.Namespace) -> int:
    for path in args.paths:
        if not (path / MANIFEST).is_file():
            raise UsageError(f"{path}: no trace here (no {MANIFEST})")
    from kvtable.trace.store import TraceError

    jobs = [(path, args.profile, args.level) for path in args.paths]
    start = time.perf_counter()
    try:
        if args.workers > 1 and len(jobs) > 1:
            with ProcessPoolExecutor(max_workers=min(args.workers, len(jobs))) as pool:
                reports = list(pool.map(_check_one, jobs))
        else:
            reports = [_check_one(job) for job in jobs]
    except (TraceError, KeyError) as err:
        raise UsageError(str(err).strip("'\"")) from None
    for report in reports:
        print(json.dumps(_as_json(report)) if args.json else render(report))
    failed = sum(r.violation is not None for r in reports)
    if not args.json:
        print(f"{len(reports)} trace(s), {sum(r.steps for r in reports)} steps, level {args.level}: "
              f"{len(reports) - failed} clean, {failed} failed ({time.perf_counter() - start:.1f} s, "
              f"{min(args.workers, len(jobs))} worker(s))")
    return EXIT_FAILED if failed else EXIT_PASSED


def render(report: Report) -> str:
    """A trace's verdict as text: clean or the first violation with its snippet, and where the trace ended."""
    lines = [f"{report.path}: {report.steps} steps judged, "
             + ("clean" if report.violation is None else f"FAILED at step {report.violation.step}")]
    if report.violation is not None:
        lines.append(f"  {report.violation.text()}")
        if report.injected:
            lines.append(f"  this step's input carries a fault the simulator put there (--faults): {report.injected}")
        lines.append("  reproduce:")
        lines += [f"    {line}" for line in report.snippet.splitlines()]
    if report.end_note:
        lines.append(f"  trace ends early: {report.end_note}")
    lines += [f"  note: {note}" for note in report.notes]
    return "\n".join(lines)


def _as_json(report: Report) -> dict:
    v = report.violation
    return {"path": report.path, "steps": report.steps, "end_note": report.end_note, "notes": report.notes,
            "injected": report.injected,
            "violation": None if v is None else {**v.__dict__, "text": v.text(), "snippet": report.snippet}}
