"""The conformance suite's core types: what a property is (``Property``) and what it runs against (``Context``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from hypothesis import event, reject
from hypothesis.stateful import RuleBasedStateMachine
from hypothesis.strategies import SearchStrategy

from kvtable.backends.profiles import Profile
from kvtable.conformance.checks import Mismatch, Transcript
from kvtable.conformance.levels import CORRECTNESS
from kvtable.conformance.sanitize import unsafe_found
from kvtable.conformance.watch import FOUND
from kvtable.errors import Unsupported


@dataclass
class Context:
    """What a property runs against: the backend (and its debug twin), the profile, the transcript."""

    backend: Any
    profile: Profile
    transcript: Transcript = field(default_factory=Transcript)
    debug_factory: Callable[[], Any] | None = None
    _debug: Any = None
    seen: set[tuple[str, str]] = field(default_factory=set)
    """(clause, kind) of the failures already reported for the property running: examples that only
    repeat one are discarded, so the search goes on to the next distinct failure."""
    unsupported: Counter[str] = field(default_factory=Counter)
    """Examples discarded because the backend raised ``Unsupported``, by reason."""

    @contextmanager
    def example(self, clause: str = "G3") -> Iterator[None]:
        """Run one example (or one state-machine step): an ``Unsupported`` configuration or a failure of a
        kind already reported discards it (hypothesis never shrinks toward it). An out-of-bounds indexing op, a
        backend call that changed its inputs or (under ``--sanitize``) an out-of-bounds Triton access in it fails
        it at the safety tier as ``clause`` (the property's; the graph protocol's G3 by default), whatever the
        property made of the call's exception."""
        try:
            with _sanitized(clause):
                yield
        except Unsupported as err:
            self.unsupported[err.reason] += 1
            event("unsupported", err.reason)  # Hypothesis' statistics and HypoFuzz's dashboard count it too
            reject()
        except Mismatch as err:
            if (err.clause, err.kind) in self.seen:
                reject()
            raise

    @property
    def debug_backend(self) -> Any:
        """The backend built with ``debug=True`` (recorded as ``debug_backend`` in the transcript)."""
        if self._debug is None:
            if self.debug_factory is None:
                raise RuntimeError("no debug-mode backend: pass a factory that accepts debug=True")
            self._debug = self.debug_factory()
        return self._debug

    @property
    def device(self) -> str:
        return str(getattr(self.backend, "device", "cpu"))


@dataclass(frozen=True)
class Property:
    """One differential property: inputs, the clause it checks, and the check itself."""

    name: str
    clause: str
    summary: str
    strategy: SearchStrategy | None
    check: Callable[[Context, Any], None] | None
    debug: bool = False
    weight: int = 1
    """Share of ``kvtable fuzz``'s example budget (large input spaces get more)."""
    stateful: Callable[[Context, Callable[[], None]], RuleBasedStateMachine] | None = None
    """A state machine's factory, given the context and the hook its teardown calls (``graph/protocol``), run
    instead of ``strategy``/``check``."""
    not_applicable: Callable[[Context], str | None] | None = None
    """Why the property does not apply to a backend (None: it does), e.g. no ``backend.kernels``; such a
    property is reported "not applicable", never run and never counted as passed."""
    tier: str = CORRECTNESS
    """The verdict tier a failure of this property counts against (``levels.TIERS``)."""
    needs: tuple[str, ...] = ()
    """The backend methods the property calls; a backend lacking one gets the property reported N/A."""


@contextmanager
def _sanitized(clause: str) -> Iterator[None]:
    """Raise the safety failure for what the watched calls found inside (an out-of-bounds index, a changed input,
    an access ``--sanitize`` blocked), in place of any other outcome."""
    FOUND.clear()
    try:
        yield
    except BaseException as err:
        blocked = unsafe_found(clause)
        if blocked is None:
            raise
        raise blocked from err
    blocked = unsafe_found(clause)
    if blocked is not None:
        raise blocked
