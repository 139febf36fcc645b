"""``kvtable conform``: run every property against a backend and print the per-clause table.

    kvtable conform [--backend X] [--profile P] [--examples N] [--seed S] [--json] [--property NAME ...]

``--backend`` takes a built-in name (``reference``, ``torch``, ``triton``) or ``pkg.mod:factory`` /
``pkg.mod:object``; without it ``$KVTABLE_BACKEND`` (default ``torch``) decides. Exit status
(``kvtable.exitcodes``): 0 when every property that applies passed, 1 when any failed (the clause is
named on the last line), 2 for a bad invocation (unknown backend or property, ``--examples`` below 1),
3 when the backend is unavailable here (e.g. triton not importable) and nothing ran, 130 on Ctrl-C
(after the table of the properties that finished).

A property that does not apply to the backend is not run and shows as ``N/A`` in the table, with its
reason under it; it is neither passed nor failed (the ``kernels/*`` properties need the backend to
expose its fused kernels as ``backend.kernels``, which the reference backend does not).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from kvtable import interrupts
from kvtable.backends import BackendUnavailable, default_spec
from kvtable.conformance.options import add_common, precheck, profile_arg, run_level
from kvtable.console import progress_bar, wants_progress
from kvtable.exitcodes import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_PASSED, EXIT_SKIPPED

if TYPE_CHECKING:
    from kvtable.conformance.core import Property
    from kvtable.conformance.report import Report
    from kvtable.conformance.runner import Progress

Start = Callable[[argparse.Namespace, str, Sequence["Property"], "Progress | None", dict[str, Any]], "Report"]
"""What a command runs once the backend is checked: args, backend spec, properties, progress, execution options."""


def execution(args: argparse.Namespace, spec: str) -> dict[str, Any]:
    """The run's execution options (``isolate``, ``workers``, ``timeout``, ``sanitize``), the backend checked first
    (here if built-in, else by the first worker: ``preflight.isolated``) and, if loaded here, kept as ``loaded``:
    the run uses it rather than loading it again."""
    from kvtable.conformance.preflight import isolated

    isolate, backend = isolated(spec, True if args.workers > 1 else args.isolate)
    return {"isolate": isolate, "workers": args.workers, "timeout": args.timeout, "loaded": backend,
            "sanitize": getattr(args, "sanitize", False), "max_memory_growth": args.max_memory_growth}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_common(parser, examples=100, examples_help="examples per property (default 100)")


def emit(report: Report, as_json: bool) -> int:
    """Print a report (table, failures, summary; or JSON), whole even if Ctrl-C comes meanwhile, and return the
    exit status."""
    with interrupts.deferred():
        report.interrupted = report.interrupted or interrupts.pending()
        _print(report, as_json)
    if report.interrupted or interrupts.pending():
        return EXIT_INTERRUPTED
    return EXIT_PASSED if report.passed else EXIT_FAILED


def _print(report: Report, as_json: bool) -> None:
    if as_json:
        print(report.to_json())
        return
    print(report.table())
    if report.notes():
        print(report.notes())
    if report.failures:
        print()
        print(report.details())
    print()
    print(report.summary())


def unavailable(err: BackendUnavailable, as_json: bool) -> int:
    if as_json:
        print(json.dumps({"skipped": True, "reason": str(err)}))
    print(f"SKIPPED: {err}", file=sys.stderr)
    return EXIT_SKIPPED


def run(args: argparse.Namespace) -> int:
    return run_command(args, "conform", _conform)


def _conform(args: argparse.Namespace, spec: str, properties: Sequence[Property], progress: Progress | None,
             options: dict[str, Any]) -> Report:
    from kvtable.conformance.runner import run_conformance

    return run_conformance(spec, examples=args.examples, budget=args.budget, seed=args.seed, profile=profile_arg(args),
                           properties=properties, level=run_level(args), progress=progress, **options)


def run_command(args: argparse.Namespace, kind: str, start: Start) -> int:
    """``kvtable conform``/``fuzz``: check the invocation, load the backend once, run ``start`` under a progress
    bar, print the report; return the exit status (a missing backend is a skip, Ctrl-C keeps what finished)."""
    precheck(args)  # before the suite is imported: a bad invocation costs no start-up
    with interrupts.deferred():  # Ctrl-C while the suite loads waits for the run's first safe point
        import kvtable.conformance.runner  # noqa: F401 - the suite loads before the run starts
        from kvtable.conformance.preflight import checked_properties

    spec = args.backend or default_spec()
    properties = checked_properties(args.property)
    try:
        options = execution(args, spec)
        with progress_bar(wants_progress(args.no_progress), f"kvtable {kind}") as progress:
            report = start(args, spec, properties, progress, options)
    except BackendUnavailable as err:
        return unavailable(err, args.json)
    except KeyboardInterrupt:
        report = interrupted_before_any(args, spec, kind)
    return emit(report, args.json)


def interrupted_before_any(args: argparse.Namespace, spec: str, kind: str) -> Report:
    """The report of a run Ctrl-C stopped before its first property (while loading the backend): an empty table."""
    from kvtable.conformance.report import Report

    return Report(spec, profile_arg(args), args.seed, args.examples, kind, interrupted=True, level=run_level(args),
                  budget=args.budget)
