"""vLLM V1's own scheduler, KV-cache managers, block table and slot-mapping kernel, judged by kvtable.

``backend`` (``kvtable conform --backend kvtable.engines.vllm:backend --profile vllm``) exposes what vLLM 0.33
has: slot mapping for decode, verify, chunked prefill and per group (the worker's ``MultiGroupBlockTable`` and
its Triton kernel), kernel-block expansion (``AttentionGroup.map_to_kernel_block_table``) and the allocator
route (the scheduler's ``KVCacheManager.allocate_slots`` over ``BlockPool``); ``backend_v2`` the same calls on
Model Runner V2's slot-mapping and gather kernels. ``record`` drives the real V1 ``Scheduler``
(``kvtable trace record --engine vllm``). ``backend_53982`` and ``backend_51031`` are the V1 backend with a
fault patched in.
"""

from __future__ import annotations

import os
from pathlib import Path

from kvtable.engines._vllm_faults import FAULTS
from kvtable.engines.base import EngineInfo, RunSummary

ENGINE = EngineInfo(
    name="vllm", distribution="vllm", version="0.33.0", profile="vllm", no_deps=True,
    dependencies=("numpy", "regex", "cachetools", "psutil", "pydantic", "msgspec", "cloudpickle", "pyzmq", "blake3",
                  "py-cpuinfo", "pyyaml", "typing_extensions", "filelock", "requests", "tqdm", "einops",
                  "triton==3.9.*", "packaging", "cbor2", "transformers", "aiohttp", "openai-harmony", "openai",
                  "pillow", "pybase64", "uvloop", "prometheus_client", "xgrammar", "fastapi", "partial_json_parser",
                  "llguidance"),
    env={"VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1", "TRITON_INTERPRET": "1"})

__all__ = ["ENGINE", "FAULTS", "backend", "backend_51031", "backend_53982", "backend_v2", "record"]


def _load(fault: str | None) -> None:
    """The installed vLLM imported with its CPU shims, its version checked and ``fault`` patched in."""
    from kvtable.engines import _shims_vllm, _vllm_faults

    ENGINE.check_version()
    _shims_vllm.prepare(ENGINE.env)
    _vllm_faults.apply(fault)


def backend(*, fault: str | None = None, debug: bool = False) -> object:
    """vLLM's slot mapping, expansion and block allocation as a kvtable backend (vLLM has no debug mode:
    ``debug=True`` refused)."""
    from kvtable.engines._vllm_backend import make_backend

    _load(fault)
    return make_backend(debug=debug)


def backend_v2(*, debug: bool = False) -> object:
    """The backend on Model Runner V2's kernels: its slot mapping (all groups in one launch) and its gather."""
    from kvtable.engines._vllm_backend import make_backend

    _load(None)
    from kvtable.engines._vllm_v2 import VllmV2Backend  # after the shims, as vLLM's own modules are

    return make_backend(debug=debug, kind=VllmV2Backend)


def backend_53982(*, debug: bool = False) -> object:
    """The backend with fault ``53982``: tables one column short, read past by the unguarded kernel."""
    return backend(fault="53982", debug=debug)


def backend_51031(*, debug: bool = False) -> object:
    """The backend with fault ``51031``: the kernel launched with twice the block size."""
    return backend(fault="51031", debug=debug)


def record(out: str | os.PathLike[str], *, steps: int, seed: int, fault: str | None = None) -> RunSummary:
    """``steps`` steps of vLLM's scheduler on synthetic requests, recorded to ``out`` (profile ``vllm``)."""
    from kvtable.engines import _shims_vllm
    from kvtable.engines._vllm_run import run

    _load(fault)
    meta = {"engine": "vllm", "version": ENGINE.installed_version(), "seed": seed, "fault": fault}
    facts = run(Path(out), steps=steps, seed=seed, model=_shims_vllm.model_dir(), meta=meta)
    return RunSummary(str(out), steps, "vllm", ENGINE.installed_version(), fault, facts)
