"""The ``kvtable`` command: each subcommand lives with the code it drives and registers itself here."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# subcommand -> module providing ``add_arguments(parser)`` and ``run(args) -> int``
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "prove": ("kvtable.spec.prove", "discharge the z3 proof obligations of spec/SPEC.md"),
    "fuzz": ("kvtable.conformance.fuzz", "differential fuzzing of a backend against the reference"),
    "conform": ("kvtable.conformance.conform", "run the conformance suite against a backend"),
    "bench": ("kvtable.bench.cli", "benchmarks: implementation and tester speed, side by side"),
    "zoo": ("kvtable.zoo.cli", "run the suite against every known-engine-bug mutant"),
    "check": ("kvtable.check", "the main job on built-in defaults: prove, then a short fuzz"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kvtable", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        module = importlib.import_module(module_name)
        module.add_arguments(sub.add_parser(name, help=help_text, description=help_text))
    return parser


EXIT_USAGE = 2


def main(argv: Sequence[str] | None = None) -> int:
    from kvtable.backends import BackendNotFound

    parser = build_parser()
    args = parser.parse_args(argv)
    module = importlib.import_module(SUBCOMMANDS[args.command][0])
    try:
        return int(module.run(args) or 0)
    except BackendNotFound as err:
        print(f"kvtable {args.command}: error: {err}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
