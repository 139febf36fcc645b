"""pytest plugin: ``--kvtable-backend`` and ``--kvtable-profile`` point the conformance suite at a backend.

Registered through the ``pytest11`` entry point, so any project can run kvtable's conformance tests
against its own backend::

    pytest tests/conformance --kvtable-backend mypkg.kv:make_backend --kvtable-profile vllm

The backend name is resolved like ``kvtable conform --backend`` (built-in names, ``pkg.mod:factory``,
``pkg.mod:object``), defaulting to ``$KVTABLE_BACKEND`` or ``torch``. ``--kvtable-database DIR|redis://...``
makes that database Hypothesis' default, keyed by backend and profile (a HypoFuzz campaign shares it:
``kvtable.conformance.campaign``); the suite runs under pytest-xdist (``-n N``) as it is. A backend
that cannot be loaded fails every test that asks for it, with the reason; one whose optional
dependency is missing (triton) is skipped, never passed. Nothing heavy is imported until a fixture is used.
"""

from __future__ import annotations

from typing import Any

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kvtable", "kvtable conformance suite")
    group.addoption("--kvtable-backend", default=None, metavar="NAME",
                    help="backend under test: reference | torch | triton | pkg.mod:factory | pkg.mod:object "
                         "(default: $KVTABLE_BACKEND or torch)")
    group.addoption("--kvtable-profile", default=None, metavar="PROFILE",
                    help="engine convention profile: kvtable (default) | vllm | sglang | tokenspeed | trtllm")
    group.addoption("--kvtable-database", default=None, metavar="DIR|URL",
                    help="Hypothesis' default example database for the session: a directory or redis://host:port, "
                         "keyed by backend, profile and level (share one across a HypoFuzz campaign)")
    group.addoption("--kvtable-replay", action="store_true",
                    help="with --kvtable-database: only replay the failures saved there, generate nothing new "
                         "(check a campaign's findings against a fixed backend)")
    group.addoption("--kvtable-level", default="correct", choices=("safety", "correct", "strict"),
                    help="verdict tiers that fail a test: safety | correct (default: safety + correctness) | strict")


def pytest_configure(config: pytest.Config) -> None:
    """Make ``--kvtable-database`` Hypothesis' default database, keyed by backend, profile and level."""
    location = config.getoption("--kvtable-database", default=None)
    if not location:
        return
    from hypothesis import Phase, settings

    from kvtable.backends import default_spec
    from kvtable.backends.profiles import get_profile
    from kvtable.conformance.database import KeyedDatabase, database_prefix, open_database
    from kvtable.exitcodes import UsageError

    try:
        database = open_database(location)
    except UsageError as err:
        raise pytest.UsageError(str(err)) from None
    backend = config.getoption("--kvtable-backend") or default_spec()
    profile = get_profile(config.getoption("--kvtable-profile")).name
    level = config.getoption("--kvtable-level")
    keyed = KeyedDatabase(database, database_prefix(backend, profile, level)) if database else None
    phases = (Phase.explicit, Phase.reuse) if config.getoption("--kvtable-replay") else settings().phases
    # derandomize off: Hypothesis' CI profile (loaded when CI is set) derandomizes, which ignores the shared
    # database and makes HypoFuzz refuse every test
    settings.register_profile("kvtable-database", parent=settings.default, database=keyed, phases=phases,
                              derandomize=False)
    settings.load_profile("kvtable-database")


@pytest.fixture(scope="session")
def kvtable_backend_spec(request: pytest.FixtureRequest) -> str:
    """The name of the backend under test."""
    from kvtable.backends import default_spec

    return request.config.getoption("--kvtable-backend") or default_spec()


@pytest.fixture(scope="session")
def kvtable_level(request: pytest.FixtureRequest) -> str:
    """The verdict level: ``safety``, ``correct`` (default) or ``strict``."""
    return request.config.getoption("--kvtable-level")


@pytest.fixture(scope="session")
def kvtable_profile(request: pytest.FixtureRequest) -> Any:
    """The convention profile expected values are mapped through."""
    from kvtable.backends.profiles import get_profile

    name = request.config.getoption("--kvtable-profile")
    try:
        return get_profile(name)
    except KeyError as err:
        pytest.fail(f"--kvtable-profile: {err}", pytrace=False)


@pytest.fixture(scope="session")
def kvtable_backend(kvtable_backend_spec: str) -> Any:
    """The backend under test (not in debug mode); skipped if unavailable here, failed if it cannot load."""
    from kvtable.backends import BackendUnavailable, load

    try:
        return load(kvtable_backend_spec, debug=False)
    except BackendUnavailable as err:
        pytest.skip(str(err))
    except Exception as err:  # any reason a named backend does not load is a failure, never a silent pass
        pytest.fail(f"cannot load kvtable backend {kvtable_backend_spec!r}: {type(err).__name__}: {err}",
                    pytrace=False)


@pytest.fixture(scope="session")
def kvtable_context(kvtable_backend: Any, kvtable_backend_spec: str, kvtable_profile: Any) -> Any:
    """A property context over the backend under test (its debug twin is loaded by name when needed)."""
    from kvtable.conformance.context import make_context

    ctx, _ = make_context(kvtable_backend_spec, kvtable_profile)
    return ctx
