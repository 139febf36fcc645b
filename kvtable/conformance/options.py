"""The options ``conform`` and ``fuzz`` share, and every check of them that needs nothing heavy: a bad invocation
is refused before torch or Hypothesis is imported (a usage error costs a fraction of a second, not a start-up)."""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

from kvtable.argtypes import memory_size, positive_float, positive_int, writable_folder
from kvtable.backends import BackendNotFound, check_spec, default_spec
from kvtable.backends.profiles import ALIASES, DOMAIN_ANY, PROFILES
from kvtable.conformance.levels import DEFAULT_LEVEL, LEVELS, with_latent
from kvtable.declared import declared
from kvtable.exitcodes import UsageError

DEFAULT_TIMEOUT_S = 60.0
DEFAULT_MAX_MEMORY_GROWTH = 2**30
"""``--max-memory-growth``: bytes of resident memory a backend may gain across one property's examples."""
"""``--timeout``: seconds a worker may go without a sign of life (each backend call is one)."""
URL_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):")
REDIS_SCHEMES = ("redis", "rediss")


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
    parser.add_argument("--budget", type=positive_float, default=None, metavar="SECONDS",
                        help="wall seconds for the whole run, shared out across the properties as each starts: a "
                             "property stops early when its share is spent (after 5 examples), drawing the examples "
                             "the run draws without a budget; each one's count is in the table. The counts depend on "
                             "the machine: the same command without --budget replays them (and the rest)")
    parser.add_argument("--seed", type=int, default=0, help="hypothesis seed; a run is deterministic for a seed")
    parser.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    parser.add_argument("--property", action="append", default=None, metavar="NAME",
                        help="run only this property, or every property tagged with this clause id (repeatable)")
    parser.add_argument("--level", default=DEFAULT_LEVEL, choices=sorted(LEVELS),
                        help="what fails the run: safety (writes stay in allowed slots), correct (safety and exact "
                             "values on valid input; default), strict (also refusals naming clause and entry)")
    parser.add_argument("--latent", action="store_true",
                        help="latent failures (safety failures reachable only past a stated size, such as a pool of "
                             "2^31 slots) fail the run too; without it they are reported and counted apart")
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
    parser.add_argument("--max-memory-growth", type=memory_size, default=DEFAULT_MAX_MEMORY_GROWTH, metavar="SIZE",
                        help="with --isolate: a backend whose resident memory grows by more than this across one "
                             "property's examples is a MEMORY verdict naming the operation (default 1G)")


def profile_arg(args: argparse.Namespace) -> str:
    """The profile named on the command line, ``NAME+any`` under ``--domain any``."""
    return args.profile + (DOMAIN_ANY if args.domain == "any" else "")


def precheck(args: argparse.Namespace) -> None:
    """The invocation's checks that import nothing heavy: option combinations, the backend's name, the database."""
    if args.workers > 1 and args.isolate is False:
        raise UsageError("--workers N runs properties in worker processes; it cannot be combined with --no-isolate")
    try:
        check_spec(args.backend)
    except BackendNotFound as err:
        raise UsageError(str(err)) from None
    check_property_names(args.property or ())
    if getattr(args, "database", None) is not None:
        database_target(args.database)


def check_property_names(names: Sequence[str]) -> None:
    """Each ``--property`` names a property or a clause some property is tagged with (read from the source)."""
    registry = declared("kvtable.conformance.properties", "Property", 2)
    unknown = sorted(set(names) - {name for entry in registry for name in entry})
    if unknown:
        raise UsageError(f"--property: no property or clause {unknown}; properties: "
                         f"{sorted(name for name, _ in registry)}")


def database_target(spec: str | Path | None) -> Path | str | None:
    """Where an example database lives, from ``--database``: a writable folder (created), a ``redis://`` URL whose
    server answered a ping, or None for ``none``; anything else is a ``UsageError``."""
    if spec is None:
        return None
    text = str(spec)
    if text.lower() in ("", "none"):
        return None
    scheme = URL_SCHEME.match(text)
    if scheme is None:
        return writable_folder(Path(text), "--database")
    if scheme[1].lower() not in REDIS_SCHEMES or not urlsplit(text).hostname or "://" not in text:
        raise UsageError(f"--database {text}: malformed URL; expected a directory, redis://host:port[/db] or none "
                         "(write ./NAME for a folder whose name has a colon)")
    try:
        urlsplit(text).port  # noqa: B018 - a port that is no number raises here, not deep in the client
    except ValueError as err:
        raise UsageError(f"--database {text}: malformed URL: {err}") from None
    _ping(text)
    return text


def _ping(url: str) -> None:
    """The Redis server at ``url`` answers (the ``redis`` package is imported only for a Redis database)."""
    try:
        import redis
    except ImportError as err:
        raise UsageError(f"--database {url}: the shared Redis database needs the redis package "
                         f"(pip install redis): {err}") from None
    try:
        redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=30).ping()
    except redis.RedisError as err:
        raise UsageError(f"--database {url}: cannot reach Redis: {err}") from None


def run_level(args: argparse.Namespace) -> str:
    """The level the run judges at: ``--level``, with the latent tier under ``--latent``."""
    return with_latent(args.level, getattr(args, "latent", False))
