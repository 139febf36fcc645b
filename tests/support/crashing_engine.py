"""An engine integration whose engine step takes its process down, for ``trace record --engine``'s isolation.

Its "engine" decodes one request a step (page size 4, pages 1, 2, ...) and records each step as a real
integration does; in step ``CRASH_AT``, ``--fault segfault`` kills the process (SIGSEGV), ``--fault hang`` never
returns and ``--fault raise`` raises. Loaded in place of a real integration by monkeypatching
``kvtable.engines.record.load_engine``; the worker imports it by its module name (``tests/support`` is on the
path).
"""

from __future__ import annotations

import ctypes
import os
import time
from importlib import metadata
from pathlib import Path

import numpy as np

from kvtable.contract import GroupSpec
from kvtable.engines.base import EngineInfo, RunSummary
from kvtable.trace.recorder import Recorder

ENGINE = EngineInfo(name="crashing", distribution="kvtable", version=metadata.version("kvtable"), profile="kvtable",
                    no_deps=False)
FAULTS = {"segfault": "the engine's step dereferences NULL (SIGSEGV) at step CRASH_AT",
          "hang": "the engine's step never returns at step CRASH_AT",
          "raise": "the engine's step raises at step CRASH_AT"}
CRASH_AT = 5
PAGE = 4


def _engine_step(step: int, fault: str | None) -> tuple[np.ndarray, np.ndarray]:
    """The request's table and the slot of its token at position ``step``; the fault strikes at ``CRASH_AT``."""
    if step == CRASH_AT and fault == "segfault":
        ctypes.string_at(0)
    if step == CRASH_AT and fault == "hang":
        while True:
            time.sleep(1)
    if step == CRASH_AT and fault == "raise":
        raise RuntimeError("the engine's own assertion")
    table = np.arange(1, step // PAGE + 2, dtype=np.int32).reshape(1, -1)
    return table, np.array([table[0, -1] * PAGE + step % PAGE], dtype=np.int32)


def record(out: str | os.PathLike[str], *, steps: int, seed: int, fault: str | None = None) -> RunSummary:
    """``steps`` decode steps of one request, recorded to ``out``."""
    with Recorder(out, groups=[GroupSpec("full", "full", PAGE)], meta={"seed": seed, "fault": fault}) as recorder:
        for step in range(steps):
            table, locs = _engine_step(step, fault)
            recorder.locations("decode", {"full": table}, {"full": locs}, np.array([step + 1]))
    return RunSummary(str(Path(out)), steps, "crashing", ENGINE.version, fault, {"trace_steps": recorder.steps})
