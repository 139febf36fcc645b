"""vLLM V1's own scheduler, KV-cache managers, block table and slot-mapping kernel, judged by kvtable."""

from __future__ import annotations

from kvtable.engines.base import EngineInfo

ENGINE = EngineInfo(
    name="vllm", distribution="vllm", version="0.33.0", profile="vllm", no_deps=True,
    dependencies=("numpy", "regex", "cachetools", "psutil", "pydantic", "msgspec", "cloudpickle", "pyzmq", "blake3",
                  "py-cpuinfo", "pyyaml", "typing_extensions", "filelock", "requests", "tqdm", "einops",
                  "triton==3.9.*", "packaging", "cbor2", "transformers", "aiohttp", "openai-harmony", "openai",
                  "pillow", "pybase64", "uvloop", "prometheus_client", "xgrammar", "fastapi", "partial_json_parser",
                  "llguidance"),
    env={"VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1", "TRITON_INTERPRET": "1"})

FAULTS: dict[str, str] = {}
