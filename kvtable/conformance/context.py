"""What a run's properties share: the backend (given as an instance, a ``load`` name or a factory) in a ``Context``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from kvtable.backends import Backend, debug_twin, is_backend, load, spec_of
from kvtable.backends.profiles import Profile, get_profile
from kvtable.conformance.checks import Recorded, Transcript
from kvtable.conformance.core import Context

__all__ = ["BackendLike", "make_context"]

BackendLike = Backend | str | Callable[..., Backend]


def make_context(backend: BackendLike, profile: str | Profile | None = None,
                 transcript: Transcript | None = None, loaded: Backend | None = None) -> tuple[Context, str]:
    """A property context for a backend given as an instance, a ``load`` name, or a factory taking ``debug=``;
    ``loaded``: the backend a ``load`` name already gave (preflight's), so it is not built twice."""
    transcript = Transcript() if transcript is None else transcript
    plain, spec, debug_factory = _backends(backend, loaded)

    def recorded_debug() -> Any:
        return Recorded(debug_factory(), "debug_backend", transcript)

    ctx = Context(Recorded(plain, "backend", transcript), get_profile(profile), transcript, recorded_debug)
    return ctx, spec


def _backends(backend: BackendLike, loaded: Backend | None) -> tuple[Backend, str, Callable[[], Backend]]:
    """The plain backend, its replayable name and the factory of its debug twin."""
    if isinstance(backend, str):
        spec = backend
        plain = load(backend, debug=False) if loaded is None else loaded
        return plain, spec, lambda: load(spec, debug=True)
    if callable(backend) and not is_backend(backend):
        factory = backend
        plain = factory(debug=False)
        return plain, spec_of(plain), lambda: factory(debug=True)
    instance = cast(Backend, backend)
    plain = debug_twin(instance, debug=False) if getattr(instance, "debug", False) else instance
    return plain, spec_of(plain), lambda: debug_twin(instance, debug=True)
