"""SGLang's own token pools and paged / SWA allocators with their Triton kernels, judged by kvtable."""

from __future__ import annotations

from kvtable.engines.base import EngineInfo

ENGINE = EngineInfo(
    name="sglang", distribution="sglang", version="0.5.23", profile="sglang", no_deps=True,
    dependencies=("triton==3.9.*", "numpy", "orjson", "psutil", "pybase64", "requests", "packaging", "pillow",
                  "starlette", "msgspec", "pydantic", "pyzmq", "tqdm", "IPython", "aiohttp", "transformers", "dill",
                  "apache-tvm-ffi==0.1.11", "sentencepiece", "compressed-tensors", "gguf", "openai==2.8.0",
                  "partial_json_parser"),
    env={"TRITON_INTERPRET": "1"})

FAULTS: dict[str, str] = {}
