"""transformers' continuous batching (``generate_batch``) on a tiny random-weight model, judged by kvtable."""

from __future__ import annotations

from kvtable.engines.base import EngineInfo

ENGINE = EngineInfo(name="transformers", distribution="transformers", version="5.23.0", profile="transformers",
                    no_deps=False)

FAULTS: dict[str, str] = {}
