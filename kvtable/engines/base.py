"""What every engine integration declares: its engine's version, profile, install recipe, and a run's summary."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import metadata

ENGINES = ("transformers", "vllm", "sglang")
"""The engines with an integration, in the order README presents them."""

TORCH_PIN = "torch==2.13.0"
"""Every engine venv keeps kvtable's torch: an engine's full install would replace it."""


class EngineUnavailable(Exception):
    """The engine (or a dependency it needs) is not installed here: a skip naming why, never a verdict."""


@dataclass(frozen=True)
class EngineInfo:
    """One engine as an integration was read against it."""

    name: str
    distribution: str
    """The PyPI distribution (``vllm``, ``sglang``, ``transformers``)."""
    version: str
    """The version whose code the integration was read against; another version is warned about."""
    profile: str
    """The kvtable profile that judges this engine's tables and locations."""
    no_deps: bool
    """True where the engine's full install would replace torch: it is installed ``--no-deps``."""
    dependencies: tuple[str, ...] = ()
    """With ``no_deps``: the pure-Python packages its KV-table code imports, installed beside torch 2.13.0 at the
    versions the engine's own metadata states (``kvtable.engines.pins``)."""
    env: dict[str, str] = field(default_factory=dict)
    """Environment variables its code needs on a CPU (set before it is imported)."""

    def installed_version(self) -> str:
        """The installed version; ``EngineUnavailable`` naming the install command if there is none."""
        try:
            return metadata.version(self.distribution)
        except metadata.PackageNotFoundError:
            raise EngineUnavailable(f"{self.distribution} is not installed here (kvtable engines install "
                                    f"{self.name})") from None

    def check_version(self) -> str:
        """The installed version, warning when it is not the one the integration was read against."""
        version = self.installed_version()
        if version != self.version:
            warnings.warn(f"kvtable.engines.{self.name} was read against {self.distribution} {self.version}; "
                          f"{version} is installed: its conventions may differ", stacklevel=2)
        return version


@dataclass(frozen=True)
class RunSummary:
    """What a real run recorded: where, how many steps, and what the engine did in them."""

    path: str
    steps: int
    engine: str
    version: str
    fault: str | None
    facts: Mapping[str, object] = field(default_factory=dict)
    """Counts worth printing (requests finished, tokens written, largest slot, ...), engine by engine."""

    def line(self) -> str:
        """One line for the terminal."""
        facts = ", ".join(f"{k} {v}" for k, v in self.facts.items())
        fault = f", fault {self.fault}" if self.fault else ""
        return (f"recorded {self.steps} steps of {self.engine} {self.version}{fault} to {self.path}"
                + (f": {facts}" if facts else ""))
