"""``kvtable conform``: run every property against a backend and print the per-clause table.

    kvtable conform [--backend X] [--profile P] [--examples N] [--seed S] [--json] [--property NAME ...]

``--backend`` takes a built-in name (``reference``, ``torch``, ``triton``) or ``pkg.mod:factory`` /
``pkg.mod:object``; without it ``$KVTABLE_BACKEND`` (default ``torch``) decides. Exit status: 0 when
every property that applies passed, 1 when any failed (the clause is named on the last line), 3 when
the backend is unavailable here (e.g. triton not importable) and nothing ran.

A property that does not apply to the backend is not run and shows as ``N/A`` in the table, with its
reason under it; it is neither passed nor failed (the ``kernels/*`` properties need the backend to
expose its fused kernels as ``backend.kernels``, which the reference backend does not).
"""

from __future__ import annotations

import argparse
import json
import sys

from kvtable.backends import BackendUnavailable, default_spec
from kvtable.backends.profiles import ALIASES, PROFILES
from kvtable.conformance.properties import select
from kvtable.conformance.runner import Report, run_conformance

EXIT_FAILED = 1
EXIT_UNAVAILABLE = 3


def add_common(parser: argparse.ArgumentParser, *, examples: int, examples_help: str) -> None:
    """The options ``conform`` and ``fuzz`` share."""
    parser.add_argument("--backend", default=None,
                        help="reference | torch | triton | pkg.mod:factory | pkg.mod:object "
                             f"(default: $KVTABLE_BACKEND or {default_spec()!r})")
    parser.add_argument("--profile", default="kvtable", choices=sorted(PROFILES) + sorted(ALIASES),
                        help="engine convention profile the expected values are mapped through (default kvtable)")
    parser.add_argument("--examples", type=int, default=examples, help=examples_help)
    parser.add_argument("--seed", type=int, default=0, help="hypothesis seed; a run is deterministic for a seed")
    parser.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    parser.add_argument("--property", action="append", default=None, metavar="NAME",
                        help="run only this property, or every property tagged with this clause id (repeatable)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_common(parser, examples=100, examples_help="examples per property (default 100)")


def emit(report: Report, as_json: bool) -> int:
    """Print a report (table, failures, summary; or JSON) and return the exit status."""
    if as_json:
        print(report.to_json())
    else:
        print(report.table())
        if report.not_applicable:
            print(report.notes())
        if report.failures:
            print()
            print(report.details())
        print()
        print(report.summary())
    return 0 if report.passed else EXIT_FAILED


def unavailable(err: BackendUnavailable, as_json: bool) -> int:
    if as_json:
        print(json.dumps({"skipped": True, "reason": str(err)}))
    print(f"SKIPPED: {err}", file=sys.stderr)
    return EXIT_UNAVAILABLE


def run(args: argparse.Namespace) -> int:
    spec = args.backend or default_spec()
    try:
        report = run_conformance(spec, examples=args.examples, seed=args.seed, profile=args.profile,
                                 properties=select(args.property))
    except BackendUnavailable as err:
        return unavailable(err, args.json)
    return emit(report, args.json)
