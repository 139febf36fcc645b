"""Ctrl-C always wins: a SIGINT is remembered, so no callback that swallows the ``KeyboardInterrupt`` can lose it.

Python raises ``KeyboardInterrupt`` wherever the signal lands; landing in a callback that ignores exceptions
(Hypothesis' gc callback: "Exception ignored in ... gc_callback") lost it, and the run went on. ``handled()``
installs a handler that records the interrupt before raising, the run checks ``check()`` at its safe points
(each example, each property, each zoo entry) and the command exits 130 when ``pending()``. Outside
``raising()`` (start-up, printing the final table) the interrupt is only recorded: the table is always whole.
A ``KeyboardInterrupt`` such a callback swallows is not reported ("Exception ignored in ..."): it is recorded.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

__all__ = ["check", "deferred", "handled", "hold", "pending", "raising"]

_state = {"pending": False, "raise": False, "depth": 0}


def _on_sigint(signum: int, frame: FrameType | None) -> None:
    _state["pending"] = True
    if _state["raise"]:
        raise KeyboardInterrupt


def _quieting(previous: Callable[[Any], object]) -> Callable[[Any], None]:
    """``previous`` unraisable hook, less the swallowed Ctrl-C it would print: that one is recorded."""

    def hook(unraisable: Any) -> None:
        if not (unraisable.exc_type is KeyboardInterrupt and _state["pending"]):
            previous(unraisable)

    return hook


def pending() -> bool:
    """Whether Ctrl-C came since the command started."""
    return bool(_state["pending"])


def check() -> None:
    """A safe point: raise ``KeyboardInterrupt`` if Ctrl-C came (and was swallowed where it landed)."""
    if _state["pending"]:
        raise KeyboardInterrupt


@contextmanager
def handled() -> Iterator[None]:
    """The command's extent: Ctrl-C is recorded (not raised until ``raising``); the previous handler is back after,
    and the record is cleared when the outermost command ends (``kvtable check`` runs others inside)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, _on_sigint)
    previous_hook = sys.unraisablehook
    sys.unraisablehook = _quieting(previous_hook)
    saved = _state["raise"]
    _state["depth"] += 1
    _state["raise"] = False
    try:
        yield
    finally:
        _state["depth"] -= 1
        _state["raise"] = saved
        signal.signal(signal.SIGINT, previous)
        sys.unraisablehook = previous_hook
        if not _state["depth"]:
            _state["pending"] = False


@contextmanager
def raising() -> Iterator[None]:
    """Work that Ctrl-C interrupts where it lands (as Python's default); one recorded before waits for a ``check``."""
    saved = _state["raise"]
    _state["raise"] = True
    try:
        yield
    finally:
        _state["raise"] = saved


@contextmanager
def deferred() -> Iterator[None]:
    """Work Ctrl-C must not cut short (printing the final table): the interrupt is recorded, not raised."""
    saved = _state["raise"]
    _state["raise"] = False
    try:
        yield
    finally:
        _state["raise"] = saved


def hold() -> None:
    """From here to the end of the command Ctrl-C is recorded, not raised: it is printing its result."""
    _state["raise"] = False
