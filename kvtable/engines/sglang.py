"""SGLang's own token pools and paged / SWA allocators with their Triton kernels, judged by kvtable.

``backend`` puts SGLang's allocation path on kvtable's allocator route (``alloc_extend`` / ``alloc_decode`` /
``alloc_verify``: ``kvtable conform --backend kvtable.engines.sglang:backend --profile sglang``); ``record``
drives it with a seeded serving loop (``kvtable trace record --engine sglang``). The location route
(``decode_locs`` / ``verify_locs`` / ``extend_locs``) is SGLang's read of the write slots back from its token
table (``kvtable.engines._sglang_locs``). The calls are SGLang's (``kvtable.engines._sglang_path``); the shims
are in ``kvtable.engines._shims_sglang``.

The backend is handed only steps SGLang's scheduler builds (the ``sglang`` profile's domain: no prefix past its
length, no negative length, no row past ``req_to_token``'s width); ``--domain any`` hands SGLang's real code the
rest too. The ``prefix-past-length`` fault is the scheduler's bug: it publishes request 0's cached prefix one
token past its chunk's end (at an extend of two or more requests), so SGLang's real kernels write before their
output and hand out a held page twice; ``backend_<fault>`` are the faulted factories for ``--backend``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from kvtable.backends import BackendUnavailable
from kvtable.backends.protocol import Allocation, AllocState
from kvtable.engines._sglang_faults import (
    FAULTS,
    FREE_PAGES_LAUNCH,
    PREFIX_PAST_LENGTH,
    SWA_TRANSLATION,
    check,
    patched,
    published_prefixes,
)
from kvtable.engines._sglang_locs import gather
from kvtable.engines._shims_sglang import ENV, sglang
from kvtable.engines.base import EngineInfo, EngineUnavailable, RunSummary
from kvtable.errors import Unsupported

__all__ = ["ENGINE", "FAULTS", "SglangBackend", "backend", "record"]

ENGINE = EngineInfo(
    name="sglang", distribution="sglang", version="0.5.23", profile="sglang", no_deps=True,
    dependencies=("triton==3.9.*", "numpy", "orjson", "psutil", "pybase64", "requests", "packaging", "pillow",
                  "starlette", "msgspec", "pydantic", "pyzmq", "tqdm", "IPython", "aiohttp", "transformers", "dill",
                  "apache-tvm-ffi==0.1.11", "sentencepiece", "compressed-tensors", "gguf", "openai==2.8.0",
                  "partial_json_parser"),
    env=ENV)

BUILT_POOL_PAGES = 1 << 20
"""SGLang builds a free list of every page (``arange``) at construction; kvtable lays its own free list in, so a
pool past this many pages is built at this size (no allocation step reads the allocator's size)."""


def swa_tail_unsupported(prefix_lens: Sequence[int], seq_lens: Sequence[int], tails: Sequence[int],
                         page_size: int) -> str:
    """Why SGLang never allocates this SWA tail ('' where it does): ``alloc_extend_swa_tail`` runs at page size
    > 1 (``disaggregation/decode.py``, ``_uses_swa_tail_prealloc``), one request a call (``alloc_for_decode_prealloc``)
    after a cached prefix of whole pages capped at ``fill_len - swa_tail_len`` (``_match_prefix_and_lock``), for a
    tail from a page-aligned window start (``_swa_tail_len``). ``kvtable.strategies.allocator`` draws only these."""
    if page_size == 1:
        return "SGLang allocates a SWA tail (alloc_extend_swa_tail) at page size > 1 only"
    for i, (prefix, seq, tail) in enumerate(zip(prefix_lens, seq_lens, tails, strict=True)):
        if prefix % page_size or (seq - tail) % page_size or not prefix <= seq - tail <= seq:
            return (f"request {i}: a SWA tail of {tail} after prefix {prefix} of {seq} tokens; SGLang's "
                    "disaggregated decode allocates one after a prefix of whole pages, from a page-aligned window "
                    "start at or past it")
    return ""


class SglangBackend:
    """kvtable's allocator route over SGLang's allocation path, one fresh set of pools per step."""

    name = "sglang"
    device = "cpu"

    def __init__(self, *, fault: str | None = None, debug: bool = False) -> None:
        check(fault)
        self.fault, self.debug = fault, debug

    def _step(self, mode: str, state: AllocState) -> Allocation:
        from kvtable.engines._sglang_path import Pools

        swa, ps = state.swa, state.page_size
        prefix_lens = published_prefixes(self.fault, mode, state.prefix_lens, state.seq_lens)
        tails = None if swa is None else swa.tail_lens
        if tails is not None and (why := swa_tail_unsupported(state.prefix_lens, state.seq_lens, tails, ps)):
            raise Unsupported(why)
        pools = Pools(rows=state.req_to_token.shape[0], width=state.req_to_token.shape[1], page_size=ps,
                      pool_pages=min(state.pool_pages, BUILT_POOL_PAGES),
                      swa_pool_pages=None if swa is None else min(swa.pool_pages, BUILT_POOL_PAGES), debug=self.debug)
        pools.lay_out(state.req_to_token, state.free_pages, free_rows=state.free_rows,
                      swa_free_pages=None if swa is None else swa.free_pages,
                      mapping=None if swa is None else swa.mapping.clone())
        starts = list(prefix_lens if state.allocated_lens is None else state.allocated_lens)
        ends = list(state.seq_lens)
        with patched(self.fault):
            if mode == "extend":
                fresh = len(state.free_rows) >= len(state.rows)
                step = pools.extend(state.rows, prefix_lens, state.seq_lens, fresh_rows=fresh, swa_tails=tails)
            elif mode == "decode" and state.allocated_lens is None:
                step = pools.decode(state.rows, prefix_lens)
            else:  # a speculative step; a decode over-allocated by an earlier one runs on a speculative server
                if state.allocated_lens is not None:
                    ends = pools.spec_lens(prefix_lens, starts, state.seq_lens, ps)
                step = pools.verify(state.rows, starts, [max(s, e) for s, e in zip(starts, ends, strict=True)])
        allocated = None if state.allocated_lens is None else [max(s, e) for s, e in zip(starts, ends, strict=True)]
        return Allocation(step.locs, pools.req_to_token, step.swa_locs, pools.mapping, rows=step.rows,
                          allocated_lens=allocated, free_pages=pools.full.free_pages,
                          swa_free_pages=pools.allocator.swa_attn_allocator.free_pages if pools.swa else None)

    def alloc_extend(self, state: AllocState) -> Allocation:
        """``alloc_for_extend``: the chunk ``[prefix, seq)`` of each request."""
        return self._step("extend", state)

    def alloc_decode(self, state: AllocState) -> Allocation:
        """``alloc_for_decode``: one token per request."""
        return self._step("decode", state)

    def alloc_verify(self, state: AllocState) -> Allocation:
        """``alloc_for_spec_decode``: the draft tokens ``[prefix, seq)`` of each request."""
        return self._step("verify", state)

    # -- the location route: SGLang's read of the write slots back from its token table -----------------------
    def decode_locs(self, table: torch.Tensor, seq_lens: torch.Tensor, page_size: int) -> torch.Tensor:
        """Each request's slot at ``seq - 1`` (``assign_extend_cache_locs`` over one token)."""
        seq = seq_lens.tolist()
        return gather(table, page_size, [s - 1 for s in seq], seq)

    def verify_locs(self, table: torch.Tensor, seq_lens: torch.Tensor, page_size: int, n: int,
                    *, actual_bs: int | None = None) -> torch.Tensor:
        """The ``n`` draft tokens' slots ``[seq - n, seq)`` of each request (EAGLE's verify read); padded
        requests read the padding row."""
        seq = seq_lens.tolist()
        live = len(seq) if actual_bs is None else actual_bs
        starts = [s - n if i < live else 0 for i, s in enumerate(seq)]
        return gather(table, page_size, starts, [start + n for start in starts], live)

    def extend_locs(self, table: torch.Tensor, prefix_lens: Sequence[int], extend_lens: Sequence[int],
                    page_size: int) -> torch.Tensor:
        """The chunk ``[prefix, prefix + extend)`` of each request (the n-gram worker's extend read)."""
        return gather(table, page_size, list(prefix_lens),
                      [p + e for p, e in zip(prefix_lens, extend_lens, strict=True)])


def backend(*, fault: str | None = None, debug: bool = False) -> SglangBackend:
    """SGLang's allocation path for ``kvtable conform``; ``debug`` is ``SGLANG_DEBUG_MEMORY_POOL``. Where SGLang
    does not import, ``BackendUnavailable`` (conform's skip) names the install command."""
    try:
        ENGINE.check_version()
        sglang()
    except EngineUnavailable as err:
        raise BackendUnavailable(str(err)) from err
    except ImportError as err:
        raise BackendUnavailable(f"sglang does not import here: {err} (kvtable engines install sglang)") from err
    return SglangBackend(fault=fault, debug=debug)


def backend_prefix_past_length(*, debug: bool = False) -> SglangBackend:
    """Seeded: the scheduler publishes request 0's prefix past its length (``--backend`` form of the fault)."""
    return backend(fault=PREFIX_PAST_LENGTH, debug=debug)


def backend_swa_translation_off_by_one(*, debug: bool = False) -> SglangBackend:
    """Seeded: SGLang's full-to-SWA translation reads one slot off (``--backend`` form of the fault)."""
    return backend(fault=SWA_TRANSLATION, debug=debug)


def backend_free_pages_launch_off_by_one(*, debug: bool = False) -> SglangBackend:
    """Seeded: the paged allocator's extend kernel is launched one page into its free list (``--backend`` form)."""
    return backend(fault=FREE_PAGES_LAUNCH, debug=debug)


def record(out: str | Path, *, steps: int, seed: int, fault: str | None = None) -> RunSummary:
    """Drive SGLang's allocation path with a seeded serving loop for ``steps`` steps, recording each one."""
    from kvtable.engines._sglang_run import run

    check(fault)
    return run(Path(out), steps=steps, seed=seed, fault=fault, version=ENGINE.installed_version())

