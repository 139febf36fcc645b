"""Integrations that drive an installed engine's own KV-table code: one module per engine, each optional.

Each module ``kvtable.engines.<name>`` defines:

- ``ENGINE``: an ``EngineInfo`` (the version its integration was read against, the profile judging it, its
  install recipe beside torch 2.13.0);
- ``FAULTS``: named faults, each patched into the engine's real code at run time (name -> what it breaks);
- ``backend(*, fault=None, debug=False)``: a backend for ``kvtable conform`` exposing the operations the engine
  really has (select it as ``--backend kvtable.engines.<name>:backend``);
- ``record(out, *, steps, seed, fault=None) -> RunSummary``: drive the engine's own scheduler for ``steps``
  steps and record every one through ``kvtable.trace.Recorder`` (``kvtable trace record --engine <name>``).

Every shim an integration needs lives in its ``kvtable/engines/_shims_<name>.py``, nowhere else.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from kvtable.engines.base import ENGINES, EngineInfo, EngineUnavailable, RunSummary

__all__ = ["ENGINES", "EngineInfo", "EngineUnavailable", "RunSummary", "load_engine"]


def load_engine(name: str) -> ModuleType:
    """The integration module of engine ``name``: a usage-level error naming the known engines if unknown."""
    if name not in ENGINES:
        raise KeyError(f"--engine {name}: unknown engine (known: {', '.join(ENGINES)})")
    return importlib.import_module(f"kvtable.engines.{name}")
