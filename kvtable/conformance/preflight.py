"""Checks a ``conform``/``fuzz``/``zoo`` run makes before any work: every bad name is a ``UsageError`` (exit 2)."""

from __future__ import annotations

from collections.abc import Sequence

from kvtable.backends import BUILTIN, Backend, BackendNotFound, BackendUnavailable, load
from kvtable.conformance.properties import Property, select
from kvtable.exitcodes import UsageError


def checked_properties(names: Sequence[str] | None) -> tuple[Property, ...]:
    """The properties ``--property`` names (all by default); an unknown name is a usage error."""
    try:
        return select(list(names) if names else None)
    except KeyError as err:
        raise UsageError(f"--property: {err.args[0]}") from None


def check_backend(spec: str) -> Backend:
    """Load ``spec`` once: a name that does not resolve, or an object that is no backend or fails to build,
    is a usage error; a built-in whose dependency is missing raises ``BackendUnavailable`` (skipped, exit 3)."""
    try:
        return load(spec, debug=False)
    except (BackendUnavailable, UsageError):
        raise
    except BackendNotFound as err:
        raise UsageError(str(err)) from None
    except Exception as err:  # the user's factory itself failed: the run cannot start
        raise UsageError(f"backend {spec!r} cannot be loaded: {type(err).__name__}: {err}") from None


def isolated(spec: str, isolate: bool | None) -> tuple[bool, Backend | None]:
    """Whether the run isolates (``isolate``, or by default) and the backend if it was loaded here: a built-in
    is (it is ours), one on CUDA is then isolated too; any other is first touched in a worker process, so a
    factory that crashes or hangs while loading cannot take this process with it."""
    if spec not in BUILTIN and isolate is not False:
        return True, None
    backend = check_backend(spec)
    default = spec not in BUILTIN or str(getattr(backend, "device", "cpu")).startswith("cuda")
    return (default if isolate is None else isolate), backend
