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

from kvtable import interrupts
from kvtable.argtypes import positive_float, positive_int
from kvtable.backends import BackendUnavailable, default_spec
from kvtable.backends.profiles import ALIASES, DOMAIN_ANY, PROFILES
from kvtable.conformance.isolation import DEFAULT_TIMEOUT_S
from kvtable.conformance.levels import DEFAULT_LEVEL, LEVELS
from kvtable.conformance.preflight import checked_properties, isolated
from kvtable.conformance.runner import Report, run_conformance
from kvtable.console import progress_bar, wants_progress
from kvtable.exitcodes import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_PASSED, EXIT_SKIPPED, UsageError


def add_common(parser: argparse.ArgumentParser, *, examples: int, examples_help: str) -> None:
    """The options ``conform`` and ``fuzz`` share."""
    parser.add_argument("--backend", default=None,
                        help="reference | torch | triton | pkg.mod:factory | pkg.mod:object "
                             f"(default: $KVTABLE_BACKEND or {default_spec()!r})")
    parser.add_argument("--profile", default="kvtable", choices=sorted(PROFILES) + sorted(ALIASES),
                        help="engine convention profile the expected values are mapped through (default kvtable)")
    parser.add_argument("--domain", default="profile", choices=("profile", "any"),
                        help="input domain: the table values the profile's engine can hold (default), or any "
                             "(-1 anywhere, both tail pads, stale rows with any page)")
    parser.add_argument("--examples", type=positive_int, default=examples, help=examples_help)
    parser.add_argument("--seed", type=int, default=0, help="hypothesis seed; a run is deterministic for a seed")
    parser.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    parser.add_argument("--property", action="append", default=None, metavar="NAME",
                        help="run only this property, or every property tagged with this clause id (repeatable)")
    parser.add_argument("--level", default=DEFAULT_LEVEL, choices=sorted(LEVELS),
                        help="what fails the run: safety (writes stay in allowed slots), correct (safety and exact "
                             "values on valid input; default), strict (also refusals naming clause and entry)")
    parser.add_argument("--no-progress", action="store_true",
                        help="no progress bar (there is none anyway when stderr is not a terminal)")
    add_execution(parser)


def add_execution(parser: argparse.ArgumentParser) -> None:
    """Where properties run: worker processes (crash isolation, ``--workers``) or this process."""
    parser.add_argument("--isolate", action=argparse.BooleanOptionalAction, default=None,
                        help="run the properties in worker processes, so a crash or hang is that property's "
                             "CRASH or TIMEOUT verdict and the run goes on (default: on for a backend that is "
                             "not built-in or runs on CUDA; --no-isolate runs in this process)")
    parser.add_argument("--workers", type=positive_int, default=1, metavar="N",
                        help="spread the properties over N worker processes (implies --isolate; default 1)")
    parser.add_argument("--sanitize", action="store_true",
                        help="bounds-check every Triton interpreter launch against its tensor arguments: an"
                             " out-of-bounds load or store fails the property (in the worker processes too)")
    parser.add_argument("--timeout", type=positive_float, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                        help="with --isolate: a property whose worker gives no sign of life (each backend call "
                             f"is one) for this long is a TIMEOUT (default {DEFAULT_TIMEOUT_S:g})")


def execution(args: argparse.Namespace, spec: str) -> dict[str, object]:
    """The run's execution options (``isolate``, ``workers``, ``timeout``, ``sanitize``), the backend checked first
    (here if built-in, else by the first worker: ``preflight.isolated``)."""
    if args.workers > 1 and args.isolate is False:
        raise UsageError("--workers N runs properties in worker processes; it cannot be combined with --no-isolate")
    isolate, _backend = isolated(spec, True if args.workers > 1 else args.isolate)
    return {"isolate": isolate, "workers": args.workers, "timeout": args.timeout,
            "sanitize": getattr(args, "sanitize", False)}


def profile_arg(args: argparse.Namespace) -> str:
    """The profile named on the command line, ``NAME+any`` under ``--domain any``."""
    return args.profile + (DOMAIN_ANY if args.domain == "any" else "")


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
    spec = args.backend or default_spec()
    properties = checked_properties(args.property)
    try:
        options = execution(args, spec)
        with progress_bar(wants_progress(args.no_progress), "kvtable conform") as progress:
            report = run_conformance(spec, examples=args.examples, seed=args.seed, profile=profile_arg(args),
                                     properties=properties, level=args.level, progress=progress, **options)
    except BackendUnavailable as err:
        return unavailable(err, args.json)
    except KeyboardInterrupt:
        report = interrupted_before_any(args, spec, "conform")
    return emit(report, args.json)


def interrupted_before_any(args: argparse.Namespace, spec: str, kind: str) -> Report:
    """The report of a run Ctrl-C stopped before its first property (while loading the backend): an empty table."""
    return Report(spec, profile_arg(args), args.seed, args.examples, kind, interrupted=True, level=args.level)
