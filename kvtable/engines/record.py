"""``kvtable trace record --engine NAME``: one real run of an installed engine, recorded step by step."""

from __future__ import annotations

import argparse

from kvtable.engines import EngineUnavailable, load_engine
from kvtable.exitcodes import EXIT_PASSED, EXIT_SKIPPED, UsageError
from kvtable.trace.store import MANIFEST


def record_engine(args: argparse.Namespace) -> int:
    """Validate the flags that apply to a real run, then drive the engine; a missing engine is a skip (exit 3)."""
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
        summary = module.record(args.out, steps=args.steps, seed=args.seed, fault=args.fault)
    except EngineUnavailable as err:
        print(f"kvtable trace record: skipped: {err}")
        return EXIT_SKIPPED
    print(summary.line())
    return EXIT_PASSED
