"""``kvtable fuzz``: differential fuzzing of a backend against the reference, with a failure database.

    kvtable fuzz [--backend X] [--profile P] --examples N --seed S [--json] [--database DIR]

``--examples`` is the run's total budget, shared out across the properties by weight (the wide
differential properties get most); a run is deterministic for a given seed and database contents.
A progress bar goes to stderr when it is a terminal (never into a log; ``--no-progress`` turns it
off); the summary table, each failure's clause, message and shrunk
counterexample (a replayable Python snippet) go to stdout, or the whole report as JSON.

Failures are kept in a hypothesis example database and replayed first on the next run, so a fixed
bug stays fixed. The default is ``DirectoryBasedExampleDatabase(".hypothesis/kvtable")``;
``--database DIR`` picks another directory, ``--database none`` turns it off. A team can share one
database: ``--database redis://host:port`` uses hypothesis' ``RedisExampleDatabase`` (it needs the
``redis`` package, imported only then), so a counterexample found on one machine is replayed on all::

    pip install redis
    kvtable fuzz --backend mypkg.kv:Backend --examples 5000 --seed 1 --database redis://ci-cache:6379

From Python: ``kvtable.conformance.fuzz.fuzz(backend, examples=2000, seed=0, database=...)`` returns a
``Report``; ``database`` is an ``ExampleDatabase``, a directory or ``redis://`` string, or None (none).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kvtable.conformance.conform import run_command
from kvtable.conformance.options import add_common, profile_arg, run_level

if TYPE_CHECKING:
    from hypothesis.database import ExampleDatabase

    from kvtable.backends.profiles import Profile
    from kvtable.conformance.context import BackendLike
    from kvtable.conformance.properties import Property
    from kvtable.conformance.report import Report
    from kvtable.conformance.runner import Progress

__all__ = ["DEFAULT_DATABASE", "budget", "fuzz"]

DEFAULT_DATABASE = ".hypothesis/kvtable"
MIN_EXAMPLES = 5


def budget(examples: int, properties: Sequence[Property]) -> dict[str, int]:
    """Each property's share of ``examples``, by weight, at least ``MIN_EXAMPLES``."""
    total = sum(p.weight for p in properties) or 1
    return {p.name: max(MIN_EXAMPLES, round(examples * p.weight / total)) for p in properties}


def fuzz(backend: BackendLike, *, examples: int, seed: int, database: str | ExampleDatabase | None = None,
         profile: str | Profile | None = None, properties: Sequence[Property] | None = None,
         progress: Progress | None = None, seconds: float | None = None, **execution: Any) -> Report:
    """Fuzz ``backend`` with ``examples`` examples in all, shared out over the properties by weight; ``seconds``
    (``--budget``): the run's wall time, shared out by the same weights (a property stops early when its share is
    spent: ``kvtable.conformance.budget``).

    ``execution``: ``level``, ``isolate``, ``workers``, ``timeout``, as ``run_properties`` takes them.
    """
    from kvtable.conformance.budget import Budget
    from kvtable.conformance.database import open_database
    from kvtable.conformance.properties import PROPERTIES
    from kvtable.conformance.runner import run_properties

    chosen = PROPERTIES if properties is None else properties
    shares = budget(examples, chosen)
    timed = None if seconds is None else Budget(seconds, {p.name: float(p.weight) for p in chosen})
    return run_properties(backend, chosen, examples=lambda p: shares[p.name], seed=seed, profile=profile,
                          database=open_database(database), kind="fuzz", total_examples=examples,
                          progress=progress, budget=timed, **execution)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_common(parser, examples=2000, examples_help="examples in all, shared out across properties (default 2000)")
    parser.add_argument("--database", default=DEFAULT_DATABASE, metavar="DIR",
                        help=f"example database: a directory (default {DEFAULT_DATABASE}), redis://host:port, "
                             "or none")


def run(args: argparse.Namespace) -> int:
    return run_command(args, "fuzz", _fuzz)


def _fuzz(args: argparse.Namespace, spec: str, properties: Sequence[Property], progress: Progress | None,
          options: dict[str, Any]) -> Report:
    return fuzz(spec, examples=args.examples, seconds=args.budget, seed=args.seed, database=args.database,
                profile=profile_arg(args), properties=properties, progress=progress, level=run_level(args), **options)
