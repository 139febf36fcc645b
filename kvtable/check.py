"""``kvtable check``: the main job on built-in defaults, prove every obligation then fuzz the torch backend."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--examples", type=int, default=300,
                        help="fuzz examples in all, shared out across the properties (default 300)")
    parser.add_argument("--seed", type=int, default=0, help="fuzz seed (default 0)")
    parser.add_argument("--backend", default="torch", help="backend to fuzz (default: torch)")


def run(args: argparse.Namespace) -> int:
    from kvtable.cli import main

    proved = main(["prove"])
    fuzzed = main(["fuzz", "--backend", args.backend, "--examples", str(args.examples), "--seed", str(args.seed)])
    return proved or fuzzed
