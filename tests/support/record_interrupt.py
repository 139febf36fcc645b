"""Ctrl-C delivered to a recording process as its ``k``-th trace step arrives from the worker."""

from __future__ import annotations

import os
import signal

import pytest

import kvtable.trace.isolated as isolated


def interrupt_at_step(monkeypatch: pytest.MonkeyPatch, k: int) -> None:
    """SIGINT to this process when the worker's ``k``-th step message is handled (the worker ignores SIGINT)."""
    handle, steps = isolated._handle, []

    def interrupted(message: tuple, *args: object) -> bool:
        steps.append(message[0] == "step")
        if sum(steps) == k and steps[-1]:
            os.kill(os.getpid(), signal.SIGINT)
        return handle(message, *args)

    monkeypatch.setattr(isolated, "_handle", interrupted)
