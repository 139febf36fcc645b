"""The ``kvtable`` command: each subcommand lives with the code it drives and registers itself here.

Only the chosen subcommand's module is imported (``kvtable --help`` and ``kvtable prove`` never import
torch or hypothesis). Exit statuses are those of ``kvtable.exitcodes``: a usage or infrastructure error
is one line on stderr and exit 2, never a traceback; Ctrl-C exits 130; a closed stdout pipe is no error.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from kvtable import interrupts
from kvtable.exitcodes import EXIT_INTERRUPTED, EXIT_PASSED, EXIT_USAGE, UsageError

# subcommand -> module providing ``add_arguments(parser)`` and ``run(args) -> int``
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "prove": ("kvtable.prover.prove", "discharge the z3 proof obligations of spec/SPEC.md"),
    "fuzz": ("kvtable.conformance.fuzz", "differential fuzzing of a backend against the reference"),
    "conform": ("kvtable.conformance.conform", "run the conformance suite against a backend"),
    "bench": ("kvtable.bench.cli", "benchmarks: implementation and tester speed, side by side"),
    "zoo": ("kvtable.zoo.cli", "run the suite against every known-engine-bug mutant"),
    "check": ("kvtable.check", "the main job on built-in defaults: prove, then a short fuzz"),
    "trace": ("kvtable.trace.cli", "record a serving run (or simulate one) and judge every step of its trace"),
    "engines": ("kvtable.engines.cli", "the installed engines kvtable drives (vLLM, SGLang, transformers)"),
}


class Parser(argparse.ArgumentParser):
    """argparse with its usage errors in one line (``kvtable fuzz: error: ...``), exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def build_parser(command: str | None = None) -> Parser:
    """The parser; only ``command``'s module is imported to add its options (all are listed by name)."""
    parser = Parser(prog="kvtable", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        subparser = sub.add_parser(name, help=help_text, description=help_text)
        if name == command:
            importlib.import_module(module_name).add_arguments(subparser)
    return parser


def _command(argv: Sequence[str]) -> str | None:
    """The subcommand named on the command line (the first word that is not an option), if any."""
    return next((word for word in argv if not word.startswith("-")), None)


def _close_stdout() -> None:
    """The reader of our stdout went away (``kvtable fuzz --json | head``): drop the rest of the output."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; Ctrl-C at any moment (even one a callback swallowed) ends it with exit 130."""
    argv = list(sys.argv[1:] if argv is None else argv)
    with interrupts.handled():  # Ctrl-C while starting up is kept for the run's first safe point
        parser = build_parser(_command(argv))
        args = parser.parse_args(argv)
        module = importlib.import_module(SUBCOMMANDS[args.command][0])
        try:
            with interrupts.raising():
                status = int(module.run(args) or 0)
        except UsageError as err:
            print(f"kvtable {args.command}: error: {err}", file=sys.stderr)
            return EXIT_USAGE
        except KeyboardInterrupt:
            status = EXIT_INTERRUPTED
        except BrokenPipeError:
            _close_stdout()
            return EXIT_PASSED
        if status == EXIT_INTERRUPTED or interrupts.pending():  # whoever caught it, every interrupted run says so
            print(f"kvtable {args.command}: interrupted", file=sys.stderr)
            return EXIT_INTERRUPTED
        return status


if __name__ == "__main__":
    sys.exit(main())
