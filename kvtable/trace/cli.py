"""``kvtable trace record|check``: simulate a serving loop into a trace, or judge recorded traces."""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvtable import interrupts
from kvtable.argtypes import non_negative_int, positive_float, positive_int, share, writable_folder
from kvtable.backends.profiles import ALIASES, PROFILES
from kvtable.conformance.levels import LEVELS
from kvtable.conformance.options import DEFAULT_TIMEOUT_S
from kvtable.exitcodes import EXIT_CUT, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_PASSED, EXIT_USAGE, UsageError, most_serious
from kvtable.trace.store import CHUNKS, MANIFEST

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
    record.add_argument("--profile", default="kvtable", choices=sorted(PROFILES) + sorted(ALIASES),
                        help="the engine's conventions the tables follow")
    record.add_argument("--steps", type=positive_int, default=200, help="scheduler iterations (default 200)")
    record.add_argument("--seed", type=non_negative_int, default=0)
    record.add_argument("--faults", type=share, default=0.05, help="share of eager steps carrying a stale length "
                        "real engines publish, from 0 to 1 (default 0.05; 0: valid input only)")
    record.add_argument("--out", type=Path, required=True, help="the new trace folder")
    record.add_argument("--route", choices=("locations", "allocator"), default="locations",
                        help="drive the backend's location calls (default), or its allocator (alloc_decode/verify/"
                        "extend: the engine chooses the slots, as SGLang does)")
    record.add_argument("--page-size", type=positive_int, default=1, help="the allocator route's page size")
    record.add_argument("--pool-pages", type=positive_int, default=400, help="the allocator route's pool size in "
                        "pages (past 2^31 slots, its free pages straddle slot 2^31: ids no int32 holds)")
    record.add_argument("--debug", action="store_true", help="the backend in debug mode (full contract checks): "
                        "what --level strict judges refusals against")
    record.add_argument("--timeout", type=positive_float, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                        help="a backend call (with --engine: an engine step, once the engine has "
                        f"loaded) silent this long is a TIMEOUT at its step (default {DEFAULT_TIMEOUT_S:g})")
    check = sub.add_parser("check", help="judge every step of one or more traces")
    check.add_argument("paths", nargs="+", type=Path, metavar="PATH")
    check.add_argument("--profile", default=None, help="conventions to judge by (default: the trace's own)")
    check.add_argument("--level", choices=sorted(LEVELS), default="correct")
    check.add_argument("--workers", type=positive_int, default=1, help="traces checked in parallel (processes)")
    check.add_argument("--json", action="store_true", help="one JSON object per trace instead of text")
    check.add_argument("--max-failures", type=positive_int, default=20, metavar="N", help="failing steps reported "
                       "before judging stops (default 20), grouped by clause")


def run(args: argparse.Namespace) -> int:
    return _record(args) if args.trace_command == "record" else _check(args)


def _checked_out(out: Path) -> None:
    """``--out`` is a new trace folder that can be written, before any work."""
    if (out / MANIFEST).exists():
        raise UsageError(f"--out {out}: a trace is already there")
    writable_folder(out, "--out")


def _record(args: argparse.Namespace) -> int:
    _checked_out(args.out)
    if args.engine is not None:
        from kvtable.engines.record import record_engine

        return record_engine(args)
    from kvtable.backends import BackendNotFound, check_spec, default_spec

    try:
        check_spec(args.backend)
    except BackendNotFound as err:
        raise UsageError(str(err)) from None
    from kvtable.trace.isolated import RecordJob, record_isolated
    from kvtable.trace.recorder import Recorder
    from kvtable.trace.simulate import DEFAULT_GROUPS

    name = args.backend or default_spec()
    groups = DEFAULT_GROUPS if args.route == "locations" else ()
    meta = {"seed": args.seed, "steps": args.steps, "faults": args.faults, "debug": args.debug}
    job = RecordJob(name, args.debug, args.route, args.profile, args.steps, args.seed, args.faults, args.page_size,
                    args.pool_pages)
    start = time.perf_counter()
    recorder = Recorder(args.out, profile=args.profile, groups=groups, backend=name, steps_per_chunk=16, meta=meta)
    try:
        outcome = record_isolated(job, recorder.writer, groups, args.timeout)
    except KeyboardInterrupt:
        interrupts.hold()
        print(f"INTERRUPTED after {recorder.writer.steps} steps: the trace up to them is kept at {args.out} (cut)")
        return EXIT_INTERRUPTED
    except UsageError:  # the backend never ran: no trace
        (args.out / MANIFEST).unlink(missing_ok=True)
        shutil.rmtree(args.out / CHUNKS, ignore_errors=True)
        raise
    print(f"recorded {outcome.steps} steps of {args.steps} scheduler iterations ({name}, seed {args.seed}) to "
          f"{args.out}: {recorder.writer.bytes_written / 1e3:.0f} kB, {time.perf_counter() - start:.1f} s; "
          f"{outcome.injected} with an input fault put there on purpose (--faults {args.faults:g})")
    print(_slots(args, outcome.largest_slot))
    if outcome.verdict is not None:
        print(outcome.stopped(args.out))
        return EXIT_FAILED
    if not outcome.steps:
        print(f"no step recorded: the backend has none of the {args.route} route's operations, or the pool "
              "(--pool-pages) holds no page for one; nothing to check")
        return EXIT_USAGE
    return EXIT_PASSED


def _slots(args: argparse.Namespace, largest: int | None) -> str:
    """The largest slot the run chose, and whether the allocator route's pool asked for (and crossed) int32."""
    said = "no slot chosen" if largest is None else f"largest slot chosen {largest}"
    if args.route == "allocator" and (args.pool_pages + 1) * args.page_size > 2**31:
        crossed = largest is not None and largest >= 2**31
        return (f"{said}; the pool reaches past slot 2^31 ({2**31}): the int32 boundary was "
                + ("crossed" if crossed else "NOT crossed (no chosen slot past it)"))
    return said


def _check_one(job: tuple[Path, str | None, str, int]) -> Report:
    from kvtable.trace.check import check_trace

    return check_trace(*job)


def _quiet_worker() -> None:
    """A checking worker leaves Ctrl-C to the parent (which stops it): no worker traceback."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _reports(jobs: list[tuple[Path, str | None, str, int]], workers: int) -> Iterator[Report]:
    """Each trace's report in order, checked ``workers`` at a time (a Ctrl-C stops the workers)."""
    if workers <= 1 or len(jobs) <= 1:
        for job in jobs:
            interrupts.check()
            yield _check_one(job)
        return
    from kvtable.conformance.isolation import worker_context

    pool = worker_context().Pool(min(workers, len(jobs)), initializer=_quiet_worker)
    try:
        yield from pool.imap(_check_one, jobs)
        pool.close()
    finally:
        pool.terminate()
        pool.join()


STATUS = {"clean": EXIT_PASSED, "cut": EXIT_CUT, "failed": EXIT_FAILED, "damaged": EXIT_USAGE}


def _check(args: argparse.Namespace) -> int:
    for path in args.paths:
        if not (path / MANIFEST).is_file():
            raise UsageError(f"{path}: no trace here (no {MANIFEST})")
    from kvtable.trace.store import TraceError

    jobs = [(path, args.profile, args.level, args.max_failures) for path in args.paths]
    workers = min(args.workers, len(jobs))
    start = time.perf_counter()
    reports: list[Report] = []
    try:
        for report in _reports(jobs, workers):
            reports.append(report)
    except (TraceError, KeyError) as err:
        raise UsageError(str(err).strip("'\"")) from None
    except KeyboardInterrupt:
        interrupts.hold()
    for report in reports:
        print(json.dumps(_as_json(report)) if args.json else render(report))
    statuses = [r.status for r in reports]
    if not args.json:
        counts = ", ".join(f"{statuses.count(s)} {s}" for s in STATUS if statuses.count(s) or s in ("clean",
                                                                                                   "failed"))
        verdict = (f"INTERRUPTED after {len(reports)} of {len(jobs)} trace(s)" if len(reports) < len(jobs)
                   else f"{len(reports)} trace(s)")
        print(f"{verdict}, {sum(r.steps for r in reports)} steps, level {args.level}: {counts} "
              f"({time.perf_counter() - start:.1f} s, {workers} worker(s))")
    if len(reports) < len(jobs):
        return EXIT_INTERRUPTED
    return most_serious(EXIT_PASSED, *(STATUS[s] for s in statuses))


def render(report: Report) -> str:
    """A trace's verdict as text: clean, cut or every failure grouped by clause (the first of each in full, with
    its snippet), or the one line naming its damage."""
    if report.status == "damaged":
        return f"{report.path}: trace damaged: {report.damage}"
    judged = f"{report.steps} of {report.declared} steps judged"
    if report.violation is None:
        head = f"{report.path}: {judged}, clean" + (" to its last whole step; CUT" if report.cut else "")
    else:
        head = (f"{report.path}: {judged}, FAILED at step {report.violation.step}: {report.failing_steps} failing "
                f"step(s), {len(report.first)} clause(s)")
    lines = [head]
    for clause, first in report.first.items():
        others = [v for v in report.violations if v.clause == clause and v is not first.violation]
        lines.append(f"  {clause}: {1 + len(others)} failing step(s), first at step {first.violation.step}")
        lines.append(f"    {first.violation.text()}")
        if first.injected:
            lines.append(f"    this step's input carries a fault the simulator put there (--faults): {first.injected}")
        lines.append("    reproduce:")
        lines += [f"      {line}" for line in first.snippet.splitlines()]
        lines += [f"    also {v.text()}" for v in others]
    if report.stopped:
        lines.append(f"  stopped at {report.failing_steps} failing steps (--max-failures): steps {report.steps} to "
                     f"{report.declared - 1} not judged")
    if report.cut:
        lines.append(f"  cut: {report.cut}")
    lines += [f"  note: {note}" for note in report.notes]
    return "\n".join(lines)


def _as_json(report: Report) -> dict[str, Any]:
    v = report.violation
    return {"path": report.path, "status": report.status, "steps": report.steps, "declared": report.declared,
            "cut": report.cut, "damage": report.damage, "notes": report.notes, "injected": report.injected,
            "failing_steps": report.failing_steps, "stopped": report.stopped,
            "violations": [{**x.__dict__, "text": x.text()} for x in report.violations],
            "first": {clause: {**f.violation.__dict__, "text": f.violation.text(), "snippet": f.snippet,
                               "injected": f.injected} for clause, f in report.first.items()},
            "violation": None if v is None else {**v.__dict__, "text": v.text(), "snippet": report.snippet}}
