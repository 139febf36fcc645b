"""A recorded run's backend calls, watched as the conformance suite watches them (``conformance.watch``): an
out-of-bounds index or a write into an input is what the step did unsafely, never taken for a refusal."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

announce: Callable[[str], None] | None = None
"""Told each call's name before it is made (``trace record``'s worker: the parent knows the call that crashed)."""


@dataclass(frozen=True)
class Watched:
    """One call's outcome: its value, or the exception it raised, and the first unsafe access the watch saw."""

    value: Any = None
    error: BaseException | None = None
    unsafe: str | None = None

    @property
    def refusal(self) -> str | None:
        """The exception as a trace records it (``Type: message``), or None."""
        return None if self.error is None else f"{type(self.error).__name__}: {self.error}"


def call_watched(call: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Watched:
    """``fn(*args, **kwargs)`` with its indexing bounds-checked and its inputs compared after it (``call`` names
    it in what is found); an exception it raises is returned, not raised."""
    from kvtable.conformance.watch import FOUND, watched  # torch's dispatch modes: imported with the first call

    if announce is not None:
        announce(call)
    FOUND.clear()
    try:
        with watched(call, fn, args, kwargs):
            value = fn(*args, **kwargs)
    except Exception as err:
        return Watched(error=err, unsafe=_first_found())
    return Watched(value, unsafe=_first_found())


def _first_found() -> str | None:
    from kvtable.conformance.watch import FOUND

    found = [str(f) for f in FOUND]
    FOUND.clear()
    return found[0] if found else None
