"""``kvtable trace record --engine NAME``: one real run of an installed engine, recorded step by step in a worker
process (``kvtable.trace.isolated``), so an engine that crashes or hangs is a verdict at its step with the trace
up to it kept, as for ``--backend``."""

from __future__ import annotations

import argparse

from kvtable import interrupts
from kvtable.engines import EngineUnavailable, load_engine
from kvtable.exitcodes import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_PASSED, EXIT_SKIPPED, UsageError
from kvtable.trace.store import MANIFEST, TraceWriter


def record_engine(args: argparse.Namespace) -> int:
    """Validate the flags that apply to a real run, then drive the engine in a worker; a missing engine is a skip
    (exit 3), a crash or hang a verdict at its step (exit 1, the trace before it kept cut)."""
    from kvtable.trace.isolated import EngineJob, record_isolated

    if args.backend is not None:
        raise UsageError("--engine and --backend: choose one (an engine brings its own code)")
    if (args.out / MANIFEST).exists():
        raise UsageError(f"--out {args.out}: a trace is already there")
    try:
        module = load_engine(args.engine)
    except KeyError as err:
        raise UsageError(str(err).strip("'\"")) from None
    if args.fault is not None and args.fault not in module.FAULTS:
        raise UsageError(f"--fault {args.fault}: not a fault of {args.engine} (known: {', '.join(module.FAULTS)})")
    try:
        module.ENGINE.check_version()
    except EngineUnavailable as err:
        return _skipped(str(err))

    opened: list[TraceWriter] = []

    def opener(header: dict, steps_per_chunk: int, fsync: bool) -> TraceWriter:
        opened.append(TraceWriter(args.out, header, steps_per_chunk=steps_per_chunk, fsync=fsync))
        return opened[0]

    job = EngineJob(module.ENGINE.name, module.__name__, str(args.out), args.steps, args.seed, args.fault)
    try:
        outcome = record_isolated(job, opener, (), args.timeout)
    except KeyboardInterrupt:
        interrupts.hold()
        steps = opened[0].steps if opened else 0
        print(f"INTERRUPTED after {steps} steps: the trace up to them is kept at {args.out} (cut)")
        return EXIT_INTERRUPTED
    if outcome.skipped:
        return _skipped(outcome.skipped)
    if outcome.verdict is not None:
        if not opened:
            raise UsageError(f"{job.what}: {outcome.why}, before it recorded anything")
        print(outcome.stopped(args.out))
        return EXIT_FAILED
    print(outcome.summary.line())
    return EXIT_PASSED


def _skipped(why: str) -> int:
    print(f"kvtable trace record: skipped: {why}")
    return EXIT_SKIPPED
