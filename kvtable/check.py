"""``kvtable check``: the main job on built-in defaults, prove every obligation then fuzz the torch backend.

Its exit status is the more serious of the two steps' (``kvtable.exitcodes.most_serious``): a broken contract
(1) outweighs an obligation z3 left unknown at its resource limit (4), which is no verdict about the contract.
"""

from __future__ import annotations

import argparse

from kvtable import interrupts
from kvtable.argtypes import positive_int
from kvtable.backends import BackendNotFound, check_spec
from kvtable.exitcodes import EXIT_INTERRUPTED, UsageError, most_serious


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--examples", type=positive_int, default=300,
                        help="fuzz examples in all, shared out across the properties (default 300)")
    parser.add_argument("--seed", type=int, default=0, help="fuzz seed (default 0)")
    parser.add_argument("--backend", default="torch", help="backend to fuzz (default: torch)")
    parser.add_argument("--no-progress", action="store_true",
                        help="no progress bar (there is none anyway when stderr is not a terminal)")


def run(args: argparse.Namespace) -> int:
    from kvtable.cli import main

    try:
        check_spec(args.backend)  # before minutes of proving
    except BackendNotFound as err:
        raise UsageError(str(err)) from None
    interrupts.check()  # Ctrl-C while starting up: nothing runs
    proved = main(["prove"])
    if proved == EXIT_INTERRUPTED or interrupts.pending():  # Ctrl-C while proving ends the job: no fuzz after it
        return EXIT_INTERRUPTED
    fuzz = ["fuzz", "--backend", args.backend, "--examples", str(args.examples), "--seed", str(args.seed)]
    fuzzed = main(fuzz + ["--no-progress"] * args.no_progress)
    return most_serious(proved, fuzzed)
