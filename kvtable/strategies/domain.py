"""The input domain the strategies draw from: the profile's (``Profile.domain``), set for the run that draws.

A property's strategy is built once at import, before any profile is known; the runner sets the running
profile's domain around each search (``drawing``), and the draws ask ``current()`` which table values the
engine's state can hold. Outside a run the domain is the wide ``ANY_DOMAIN``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from kvtable.backends.profiles import ANY_DOMAIN, Domain

_CURRENT: ContextVar[Domain] = ContextVar("kvtable_domain", default=ANY_DOMAIN)


def current() -> Domain:
    """The domain the draws of the running search come from."""
    return _CURRENT.get()


@contextmanager
def drawing(domain: Domain) -> Iterator[None]:
    """Draw from ``domain`` inside the block."""
    token = _CURRENT.set(domain)
    try:
        yield
    finally:
        _CURRENT.reset(token)
