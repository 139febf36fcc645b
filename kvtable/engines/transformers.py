"""transformers' continuous batching (``generate_batch``'s manager) on a tiny random-weight Gemma3, judged by kvtable.

Both surfaces call the installed package's own code: ``record`` runs its manager, scheduler and paged cache and
observes every batch through ``PagedAttentionCache.extend_read_and_write_indices``; ``backend`` hands kvtable's
tables to its ``FullAttentionCacheAllocator`` / ``SlidingAttentionCacheAllocator`` and returns their write indices.
A write index ``i`` is recorded as kvtable slot ``(i // stride) * page_size + i % stride`` (``stride``: the
allocator's ``block_physical_stride``, every layer of its group per block), so a kvtable page is a block id; the
write trash is the profile's pad slot. No shim is needed.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from kvtable.backends import NoDebugMode
from kvtable.backends.profiles import PAD_SLOT_ID
from kvtable.backends.protocol import Allocation, AllocState
from kvtable.contract import RING_SENTINEL, Batch, GroupSpec
from kvtable.engines.base import EngineInfo, EngineUnavailable, RunSummary
from kvtable.errors import ContractViolation, Unsupported

ENGINE = EngineInfo(name="transformers", distribution="transformers", version="5.23.0", profile="transformers",
                    no_deps=False)

FAULTS: dict[str, str] = {
    "ring-off-by-one": "once a request's ring has wrapped, the sliding allocator's write indices start one slot past "
                       "position % window (each token overwrites the oldest one still in its window)",
    "full-off-by-one": "the full-attention allocator computes write indices from past_length - 1 (each token of a "
                       "continued request overwrites its predecessor's slot)",
}

PAGE_SIZE = 4
WINDOW = 8
FULL, SLIDING = "full_attention", "sliding_attention"
"""transformers' layer types, used as kvtable group ids."""


def _engine() -> SimpleNamespace:
    """The transformers classes both surfaces call; ``EngineUnavailable`` where transformers is not installed."""
    ENGINE.installed_version()
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig, GenerationConfig
    from transformers.generation.configuration_utils import ContinuousBatchingConfig
    from transformers.generation.continuous_batching import cache, input_outputs
    from transformers.generation.continuous_batching.cache_allocators import (
        cache_pool,
        full_attention,
        sliding_attention,
    )

    return SimpleNamespace(Model=Gemma3ForCausalLM, Config=Gemma3TextConfig, GenerationConfig=GenerationConfig,
                           CBConfig=ContinuousBatchingConfig, Cache=cache.PagedAttentionCache,
                           group_layers=cache.group_layers_by_attn_type, IOs=input_outputs.ContinuousBatchingIOs,
                           Pool=cache_pool.CachePool, Full=full_attention.FullAttentionCacheAllocator,
                           Sliding=sliding_attention.SlidingAttentionCacheAllocator)


def model_config(tf: SimpleNamespace, window: int = WINDOW) -> Any:
    """A tiny Gemma3: 4 layers (sliding, full, sliding, full), hidden 64, one KV head, vocabulary 256."""
    return tf.Config(hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=2,
                     num_key_value_heads=1, head_dim=32, layer_types=["sliding_attention", "full_attention"] * 2,
                     sliding_window=window, vocab_size=256, max_position_embeddings=1024)


# -- faults: patched into transformers' allocator classes while a run or a call lasts ----------------------------


def _ring_off_by_one(original: Callable[..., list[int]]) -> Callable[..., list[int]]:
    def get_write_indices(self: Any, request_id: str, past_length: int, query_length: int) -> list[int]:
        shift = 1 if past_length >= self.sliding_window else 0
        return original(self, request_id, past_length + shift, query_length)

    return get_write_indices


def _full_off_by_one(original: Callable[..., list[int]]) -> Callable[..., list[int]]:
    def get_write_indices(self: Any, request_id: str, past_length: int, query_length: int) -> list[int]:
        return original(self, request_id, max(past_length - 1, 0), query_length)

    return get_write_indices


_PATCHES = {"ring-off-by-one": ("Sliding", _ring_off_by_one), "full-off-by-one": ("Full", _full_off_by_one)}


@contextmanager
def faulted(tf: SimpleNamespace, fault: str | None) -> Iterator[None]:
    """transformers with ``fault`` patched into the allocator class it names (nothing for None), restored after."""
    if fault is None:
        yield
        return
    cls = getattr(tf, _PATCHES[fault][0])
    original = cls.__dict__["get_write_indices"]
    cls.get_write_indices = _PATCHES[fault][1](original)
    try:
        yield
    finally:
        cls.get_write_indices = original


# -- write indices as kvtable slots ------------------------------------------------------------------------------


def slots(indices: Sequence[int], allocator: Any, shift: int = 0) -> np.ndarray:
    """An allocator's write indices as kvtable slots, page = block id - ``shift`` (block 0 stays page 0); its write
    trash as the pad slot."""
    idx = np.asarray(indices, np.int64)
    block, within = np.divmod(idx, allocator.block_physical_stride)
    out = np.where(block == 0, 0, block - shift) * allocator.tokens_per_page + within
    out[idx == allocator.write_trash_index] = PAD_SLOT_ID
    return out


def read_slots(indices: Sequence[int], allocator: Any, shift: int = 0) -> np.ndarray:
    """A sliding allocator's read indices as kvtable slots; its sentinel index as ``RING_SENTINEL``."""
    out = slots(indices, allocator, shift)
    out[np.asarray(indices, np.int64) == allocator.sentinel_index] = RING_SENTINEL
    return out


def group_specs() -> list[GroupSpec]:
    """The recorded groups: the full group as a page table, the sliding group as a ring (R1-R3)."""
    return [GroupSpec(FULL, "full", PAGE_SIZE), GroupSpec(SLIDING, "sliding", PAGE_SIZE, window=WINDOW, layout="ring")]


def padded_rows(rows: Sequence[Sequence[int]]) -> np.ndarray:
    """Block lists as a table: each row padded with block 0 (the read trash no allocator hands out)."""
    table = np.zeros((len(rows), max([1, *map(len, rows)])), np.int64)
    for i, row in enumerate(rows):
        table[i, : len(row)] = row
    return table


# -- real runs ---------------------------------------------------------------------------------------------------


class _Observer:
    """Records what transformers' own code does, batch by batch: one extend step per batch, frees and finishes."""

    def __init__(self, recorder: Any, steps: int, groups: dict[int, str], requests: int) -> None:
        self.recorder, self.steps, self.groups, self.requests = recorder, steps, groups, requests
        self.batches = 0
        self.batch: list[tuple[int, int, int, dict[str, tuple[list[int], np.ndarray, np.ndarray | None]]]] = []
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.facts = {"requests finished": 0, "tokens written": 0, "trash writes": 0}
        self.sectors: dict[str, int] = {}
        """Each group's blocks per sector of the shared cache (``trace/shared-sector``)."""

    @property
    def recording(self) -> bool:
        return not self.done.is_set()

    def guarded(self, call: Callable[[], None]) -> None:
        """Run one observation; an error in it stops the run and is raised in the caller's thread (never lost in the
        engine's loop)."""
        if not self.recording:
            return
        try:
            call()
        except BaseException as err:  # noqa: BLE001 - handed to the main thread, which re-raises it
            self.error = err
            self.done.set()

    def request(self, cache: Any, request_id: str, past: int, query: int, writes: list[list[int]],
                reads: list[list[int]] | None) -> None:
        """One request's part of the batch: each group's block list, write slots and (a ring's) read slots."""
        per_group = {}
        self.sectors = {a.layer_type: a.blocks_per_sector for a in cache.cache_allocators.values()}
        for i, a in enumerate(cache.cache_allocators.values()):
            ring_reads = read_slots(reads[i], a) if reads is not None and a.layer_type == SLIDING else None
            per_group[a.layer_type] = (list(a.block_table[request_id]), slots(writes[i], a), ring_reads)
        self.batch.append((int(request_id.rpartition("_")[2]), past, query, per_group))

    def batch_done(self) -> None:
        if not self.batch:
            return
        reqs, pasts, queries, groups = zip(*self.batch, strict=True)
        tables = {g: padded_rows([grp[g][0] for grp in groups]) for g in (FULL, SLIDING)}
        locs = {g: np.concatenate([grp[g][1] for grp in groups]) for g in (FULL, SLIDING)}
        read = [grp[SLIDING][2] for grp in groups]
        reads = None if any(r is None for r in read) else {SLIDING: np.concatenate(read)}
        seq = np.asarray(pasts) + np.asarray(queries)
        self.recorder.locations("extend", tables, locs, seq, prefix_lens=np.asarray(pasts), req_ids=np.asarray(reqs),
                                reads=reads, blocks_per_sector=self.sectors)
        self.facts["tokens written"] += int(sum(queries))
        self.facts["trash writes"] += int(sum((loc == PAD_SLOT_ID).sum() for loc in locs.values()))
        self.batch = []
        self.batches += 1
        if self.batches >= self.steps:
            self.done.set()

    def finished(self, request_id: str) -> None:
        self.recorder.finish([int(request_id.rpartition("_")[2])])
        self.facts["requests finished"] += 1
        if self.facts["requests finished"] == self.requests:  # the workload ran out before ``steps`` batches
            self.done.set()

    def pool(self, event: str, index: int, blocks: Sequence[int]) -> None:
        if blocks:
            getattr(self.recorder, event)(self.groups[index], list(blocks))


@contextmanager
def observed(tf: SimpleNamespace, observer: _Observer) -> Iterator[None]:
    """transformers' cache, batch preparation and block pool wrapped so ``observer`` sees each call, restored after."""
    cache, ios, pool = tf.Cache, tf.IOs, tf.Pool
    originals = [(cache, "extend_read_and_write_indices"), (cache, "free_blocks"),
                 (ios, "prepare_batch_tensors"), (pool, "free_blocks"), (pool, "get_free_blocks")]
    saved = {(cls, name): cls.__dict__[name] for cls, name in originals}

    def extend(self: Any, request_id: str, past: int, query: int, read_index: Any, write_index: list[list[int]]
               ) -> None:
        before = [len(w) for w in write_index]
        read_before = None if read_index is None else [len(r) for r in read_index]
        saved[cache, "extend_read_and_write_indices"](self, request_id, past, query, read_index, write_index)
        writes = [w[b:] for w, b in zip(write_index, before, strict=True)]
        reads = None if read_index is None or read_before is None \
            else [r[b:] for r, b in zip(read_index, read_before, strict=True)]
        observer.guarded(lambda: observer.request(self, request_id, past, query, writes, reads))

    def prepare(self: Any, *args: Any, **kwargs: Any) -> None:
        observer.batch = []
        saved[ios, "prepare_batch_tensors"](self, *args, **kwargs)
        observer.guarded(observer.batch_done)

    def free_request(self: Any, request_id: str, no_cache: bool = False) -> None:
        observer.guarded(lambda: observer.finished(request_id))
        saved[cache, "free_blocks"](self, request_id, no_cache)

    def free_pages(self: Any, index: int, block_ids: list[int]) -> None:
        observer.guarded(lambda: observer.pool("free", index, block_ids))
        saved[pool, "free_blocks"](self, index, block_ids)

    def take_pages(self: Any, index: int, num_blocks: int) -> list[int]:
        blocks = saved[pool, "get_free_blocks"](self, index, num_blocks)
        observer.guarded(lambda: observer.pool("alloc", index, blocks))
        return blocks

    cache.extend_read_and_write_indices, cache.free_blocks = extend, free_request
    ios.prepare_batch_tensors = prepare
    pool.free_blocks, pool.get_free_blocks = free_pages, take_pages
    try:
        yield
    finally:
        for (cls, name), original in saved.items():
            setattr(cls, name, original)


def workload(seed: int, steps: int) -> list[tuple[list[int], int]]:
    """Seeded requests (prompt, max_new_tokens), more than ``steps`` batches need: the queue never runs dry, so
    requests keep arriving as others finish and free their pages."""
    rng = random.Random(seed)
    return [([rng.randrange(1, 256) for _ in range(rng.randrange(2, 40))], rng.randrange(4, 40))
            for _ in range(steps // 2 + 8)]


def record(out: str | Path, *, steps: int, seed: int, fault: str | None = None) -> RunSummary:
    """Drive transformers' continuous batching for ``steps`` batches (fewer if its workload runs out first) and
    record each through ``Recorder``."""
    import torch

    from kvtable.conformance.threads import one_thread
    from kvtable.trace import Recorder

    tf = _engine()
    torch.manual_seed(seed)
    model = tf.Model(model_config(tf)).eval()
    generation = tf.GenerationConfig(do_sample=False, eos_token_id=-1, pad_token_id=0)
    batching = tf.CBConfig(page_size=PAGE_SIZE, num_blocks=64, max_batch_tokens=16, use_async_batching=False,
                           allow_block_sharing=False)
    groups = dict(enumerate(tf.group_layers(model.config)))
    meta = {"engine": "transformers", "version": ENGINE.installed_version(), "seed": seed, "fault": fault}
    spec = "kvtable.engines.transformers:" + ("backend" if fault is None else "backend_" + fault.replace("-", "_"))
    with Recorder(out, profile=ENGINE.profile, groups=group_specs(), backend=spec, meta=meta,
                  steps_per_chunk=32) as recorder:
        requests = workload(seed, steps)
        observer = _Observer(recorder, steps, groups, len(requests))
        with one_thread(), faulted(tf, fault), observed(tf, observer):
            manager = model.init_continuous_batching(generation_config=generation,
                                                     continuous_batching_config=batching)
            for i, (prompt, new_tokens) in enumerate(requests):
                manager.add_request(prompt, request_id=f"req_{i}", max_new_tokens=new_tokens)
            manager.start()
            while not observer.done.wait(0.05) and manager.is_running():
                pass
            manager.stop(block=True, hard_stop=True)
    if observer.error is not None:
        raise observer.error
    return RunSummary(str(out), observer.batches, "transformers", str(meta["version"]), fault, observer.facts)


# -- the conform backend -----------------------------------------------------------------------------------------


class TransformersBackend:
    """kvtable's protocol on transformers' allocators: each row becomes a request's block list, each call their
    ``get_write_indices`` (through ``PagedAttentionCache.extend_read_and_write_indices`` for several groups).

    transformers has decode (a query of 1), extend (a chunk), block allocation from a free pool (``alloc_decode`` /
    ``alloc_extend``) and a ring sliding window (``ring_locs``); it has no
    speculative verify or re-anchor, no kernel-page expansion on this path, no CUDA-graph runner of kvtable's shape
    and no debug checker: those operations are absent. A sliding group with front holes is ``Unsupported``.
    """

    name = "transformers"
    device = "cpu"

    def __init__(self, fault: str | None = None) -> None:
        self.tf = _engine()
        self.fault = fault
        self._allocators: dict[tuple[str, int, int | None, int], Any] = {}

    def _allocator(self, family: str, page_size: int, window: int | None = None, group: int = 0) -> Any:
        """transformers' allocator of ``family`` at ``page_size`` for the ``group``-th group of a call (one object per
        group, as ``PagedAttentionCache`` has), registered on a small cache tensor of its own."""
        key = (family, page_size, window, group)
        if key not in self._allocators:
            cls = self.tf.Sliding if family == "sliding" else self.tf.Full
            allocator = cls(index=0, config=model_config(self.tf, window or WINDOW), num_key_value_heads=1,
                            cache_dtype=_float32(), page_size=page_size, layer_indices=[0, 1],
                            allow_block_sharing=False)
            size = allocator.bytes_per_block
            allocator.register_cache_tensor(size, size, _zeros(3 * size), self.tf.Pool(1, 1))
            self._allocators[key] = allocator
        return self._allocators[key]

    def _for(self, spec: GroupSpec, group: int) -> Any:
        """The allocator of a group in a batch call: a full group's; a ring's come from ``ring_locs`` alone (R1)."""
        if spec.layout == "ring":
            raise ContractViolation("R1", "a ring group's locations come from ring_locs (R1-R3), not from the batch "
                                    "calls", group=spec.group_id)
        if spec.family == "sliding":
            raise Unsupported("transformers keeps a sliding window as a ring of pages (layout='ring'), never as a "
                              "row with front holes")
        return self._allocator(spec.family, spec.block_granularity, group=group)

    @staticmethod
    def shift(allocator: Any) -> int:
        """kvtable page ``p > 0`` is block ``p + shift``, the first ``shift + 1`` blocks being the trash sectors that
        transformers never hands out (page 0, the sink, is block 0, the read trash)."""
        return allocator.pool.num_reserved_sectors * allocator.blocks_per_sector - 1

    def held(self, allocator: Any, row: Sequence[int], seq_len: int) -> list[int]:
        """The block list transformers holds for a request of ``seq_len`` tokens: the row's first pages (a ring holds
        the window's), as block ids."""
        tokens = min(seq_len, allocator.sliding_window) if hasattr(allocator, "sliding_window") else seq_len
        shift = self.shift(allocator)
        return [int(p) + shift if p > 0 else int(p) for p in row[: -(-tokens // allocator.tokens_per_page)]]

    def _indices(self, allocators: Sequence[Any], tables: Sequence[Any], prefix: Sequence[int], seq: Sequence[int],
                 live: int, reads: bool = False) -> tuple[list[list[int]], list[list[int]] | None]:
        """Each group's write (and read) indices for rows ``[0, live)`` with new tokens, through transformers' own
        multi-group call ``PagedAttentionCache.extend_read_and_write_indices``, one request at a time."""
        rows = [t.tolist() for t in tables]
        cache = SimpleNamespace(cache_allocators={str(i): a for i, a in enumerate(allocators)})
        writes: list[list[int]] = [[] for _ in allocators]
        read: list[list[int]] | None = [[] for _ in allocators] if reads else None
        with faulted(self.tf, self.fault):
            for r in range(live):
                if seq[r] == prefix[r]:  # a request with no new token is in no batch
                    continue
                for a, table in zip(allocators, rows, strict=True):
                    a.block_table = {"r": self.held(a, table[r], seq[r])}
                self.tf.Cache.extend_read_and_write_indices(cache, "r", prefix[r], seq[r] - prefix[r], read, writes)
        return writes, read

    def _writes(self, allocators: Sequence[Any], tables: Sequence[Any], prefix: Sequence[int], seq: Sequence[int],
                live: int) -> list[np.ndarray]:
        """Each group's write slots; padded rows (decode) write the trash, as transformers' reset index buffer has
        them."""
        writes, _ = self._indices(allocators, tables, prefix, seq, live)
        pads = np.full(len(seq) - live, PAD_SLOT_ID, np.int64)
        return [np.concatenate([slots(w, a, self.shift(a)), pads]) for a, w in zip(allocators, writes, strict=True)]

    def ring_locs(self, table: Any, prefix_lens: Sequence[int], extend_lens: Sequence[int], page_size: int,
                  window: int) -> tuple[Any, Any]:
        """R1-R3 by the sliding allocator: its write indices, and its read indices with the sentinel index as
        ``RING_SENTINEL``."""
        prefix = [int(p) for p in prefix_lens]
        seq = [p + int(e) for p, e in zip(prefix, extend_lens, strict=True)]
        ring = self._allocator("sliding", page_size, window)
        writes, reads = self._indices([ring], [table], prefix, seq, len(seq), reads=True)
        assert reads is not None
        shift = self.shift(ring)
        return _tensor(slots(writes[0], ring, shift)), _tensor(read_slots(reads[0], ring, shift))

    def _allocate(self, state: AllocState) -> Allocation:
        """A1-A4 by transformers' full allocator: each request's held pages (those of its already allocated positions)
        as its block list, ``state.free_pages`` as its pool's free blocks (in order), then its own
        ``allocate_cache_to_request`` and ``get_write_indices``; the slots of the positions not yet allocated go to
        ``state.out`` and into a copy of the token table."""
        if state.swa is not None:
            raise Unsupported("transformers keeps a sliding window as a ring of pages (layout='ring'), not a SWA pool")
        full = self._allocator("full", state.page_size)
        shift, ps = self.shift(full), state.page_size
        full.pool = self.tf.Pool(0, 1)
        full.pool.set_blocks_per_sector(0, full.blocks_per_sector)
        full.pool.free_blocks(0, [int(p) + shift for p in state.free_pages.tolist()])
        table = state.req_to_token.clone()
        chosen = []
        allocated = state.allocated_lens or state.prefix_lens
        with faulted(self.tf, self.fault):
            for i, (row, prefix, seq) in enumerate(zip(state.rows, state.prefix_lens, state.seq_lens, strict=True)):
                start = max(allocated[i], prefix)  # positions before ``start`` already hold slots
                held = [int(table[row, c * ps]) // ps for c in range(-(-start // ps))]
                full.block_table = {str(i): [p + shift if p > 0 else p for p in held]}
                full.allocate_cache_to_request(str(i), prefix, seq - prefix)
                locs = slots(full.get_write_indices(str(i), prefix, seq - prefix), full, shift)[start - prefix:]
                table[row, start:seq] = _tensor(locs)
                chosen.append(locs)
        state.out.copy_(_tensor(np.concatenate([np.zeros(0, np.int64), *chosen])))
        return Allocation(locs=state.out, req_to_token=table)

    def alloc_decode(self, state: AllocState) -> Allocation:
        """A1-A4: a decode step's one token per request (a query of 1 in transformers)."""
        return self._allocate(state)

    def alloc_extend(self, state: AllocState) -> Allocation:
        """A1-A4: a chunked-prefill step (a query of ``seq - prefix`` tokens in transformers)."""
        return self._allocate(state)

    def extend_locs(self, table: Any, prefix_lens: Sequence[int], extend_lens: Sequence[int], page_size: int) -> Any:
        seq = [int(p) + int(e) for p, e in zip(prefix_lens, extend_lens, strict=True)]
        full = self._allocator("full", page_size)
        return _tensor(self._writes([full], [table], [int(p) for p in prefix_lens], seq, len(seq))[0])

    def decode_locs(self, table: Any, seq_lens: Any, page_size: int, *, actual_bs: int | None = None) -> Any:
        seq = [int(s) for s in seq_lens.tolist()]
        live = len(seq) if actual_bs is None else actual_bs
        full = self._allocator("full", page_size)
        return _tensor(self._writes([full], [table], [s - 1 for s in seq], seq, live)[0])

    def group_locs(self, specs: Sequence[GroupSpec], tables: Any, batch: Batch, *, tail_pad: int = -1
                   ) -> dict[str, Any]:
        if batch.mode not in ("decode", "extend"):
            raise Unsupported(f"transformers' continuous batching has no {batch.mode} step")
        groups = [s for s in specs if not s.is_state]
        seq = list(batch.seq_lens)
        if batch.mode != "extend":
            prefix = [s - 1 for s in seq]
        elif batch.prefix_lens is None:
            raise ValueError("an extend batch needs prefix_lens")
        else:
            prefix = list(batch.prefix_lens)
        live = len(seq) if batch.mode == "extend" else batch.live_rows
        allocators = [self._for(s, i) for i, s in enumerate(groups)]
        writes = self._writes(allocators, [tables[s.group_id] for s in groups], prefix, seq, live)
        return {s.group_id: _tensor(w) for s, w in zip(groups, writes, strict=True)}


def _float32() -> Any:
    import torch

    return torch.float32


def _zeros(size: int) -> Any:
    import torch

    return torch.zeros(size, dtype=torch.uint8)


def _tensor(values: np.ndarray) -> Any:
    import torch

    return torch.from_numpy(values.astype(np.int64))


def backend(*, fault: str | None = None, debug: bool = False) -> TransformersBackend:
    """The conform backend (``--backend kvtable.engines.transformers:backend``); transformers has no debug mode."""
    if debug:
        raise NoDebugMode("transformers' allocators have no debug mode")
    if fault is not None and fault not in FAULTS:
        raise KeyError(f"no fault {fault!r} in transformers (known: {', '.join(FAULTS)})")
    try:
        return TransformersBackend(fault)
    except EngineUnavailable as err:
        from kvtable.backends import BackendUnavailable

        raise BackendUnavailable(str(err)) from err


backend_ring_off_by_one = partial(backend, fault="ring-off-by-one")
"""``--backend kvtable.engines.transformers:backend_ring_off_by_one``: the ring index one slot late."""
backend_full_off_by_one = partial(backend, fault="full-off-by-one")
"""``--backend kvtable.engines.transformers:backend_full_off_by_one``: full-group writes one slot early."""
