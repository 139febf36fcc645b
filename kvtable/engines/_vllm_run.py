"""A real run of vLLM 0.33's V1 ``Scheduler``: synthetic requests on a hybrid model (a full-attention group and a
sliding-window group), n-gram speculative decoding with synthetic drafts and acceptance, every step mirrored into
the worker's block tables, its slot mappings computed by vLLM's kernel and recorded through ``kvtable.trace``.

The model itself never runs: each step's ``ModelRunnerOutput`` is made up (a sampled token when a request's
prefill is done, a seeded number of accepted drafts), which is all the scheduler reads from it. Requests arrive
over the run with seeded prompt and output lengths, some are aborted, and the block pool is small enough that
the scheduler preempts and resumes requests.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np

from kvtable.contract import GroupSpec
from kvtable.engines._vllm_worker import WorkerTables
from kvtable.trace.recorder import Recorder

BLOCK_SIZE = 8
WINDOW = 20
MAX_MODEL_LEN = 128
NUM_BLOCKS = 72
MAX_NUM_SEQS = 8
MAX_BATCHED_TOKENS = 64
SPEC_TOKENS = 2
GROUPS = (GroupSpec("full", "full", BLOCK_SIZE), GroupSpec("sliding", "sliding", BLOCK_SIZE, window=WINDOW))
"""The kvtable view of the run's two KV-cache groups, in the order of vLLM's ``kv_cache_groups``."""


def _configs(model: Path) -> tuple[Any, Any]:
    """The ``VllmConfig`` and the hybrid ``KVCacheConfig`` of the run (no GPU profiling: the pool is given)."""
    import torch
    from vllm.config import CacheConfig, ModelConfig, ParallelConfig, SchedulerConfig, SpeculativeConfig, VllmConfig
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec, SlidingWindowSpec

    model_config = ModelConfig(model=str(model), skip_tokenizer_init=True, max_model_len=MAX_MODEL_LEN,
                               dtype="float32")
    cache = CacheConfig(block_size=BLOCK_SIZE)
    cache.num_gpu_blocks = NUM_BLOCKS
    spec = SpeculativeConfig(method="ngram", num_speculative_tokens=SPEC_TOKENS, prompt_lookup_max=3,
                             prompt_lookup_min=2, target_model_config=model_config,
                             target_parallel_config=ParallelConfig())
    config = VllmConfig(model_config=model_config, cache_config=cache, speculative_config=spec,
                        scheduler_config=SchedulerConfig(max_num_seqs=MAX_NUM_SEQS, max_model_len=MAX_MODEL_LEN,
                                                         max_num_batched_tokens=MAX_BATCHED_TOKENS,
                                                         enable_chunked_prefill=True, is_encoder_decoder=False))
    layer = {"num_kv_heads": 1, "head_size": 8, "dtype": torch.float32, "block_size": BLOCK_SIZE}
    groups = [KVCacheGroupSpec(["layers.0.attn"], FullAttentionSpec(**layer)),
              KVCacheGroupSpec(["layers.1.attn"], SlidingWindowSpec(**layer, sliding_window=WINDOW))]
    return config, KVCacheConfig(num_blocks=NUM_BLOCKS, kv_cache_tensors=[], kv_cache_groups=groups)


class Driver:
    """The scheduler, the worker's tables and the made-up model, stepped together."""

    def __init__(self, model: Path, seed: int) -> None:
        from vllm.v1.core.sched.scheduler import Scheduler
        from vllm.v1.structured_output import StructuredOutputManager

        config, kv_cache_config = _configs(model)
        self.scheduler = Scheduler(config, kv_cache_config, StructuredOutputManager(config), block_size=BLOCK_SIZE)
        groups = kv_cache_config.kv_cache_groups
        widths = [g.kv_cache_spec.max_num_blocks_per_req(config, MAX_MODEL_LEN) for g in groups]
        self.worker = WorkerTables([BLOCK_SIZE] * len(GROUPS), widths, MAX_NUM_SEQS, MAX_BATCHED_TOKENS)
        self.rng = random.Random(seed)
        self.next_id = 0
        self.facts = {"requests": 0, "finished": 0, "aborted": 0, "preempted": 0, "spec_steps": 0, "tokens": 0}

    def _arrivals(self) -> None:
        """New requests while fewer than ``MAX_NUM_SEQS + 2`` are unfinished (some wait: the queue is real)."""
        from vllm.sampling_params import SamplingParams
        from vllm.v1.request import Request

        while self.scheduler.get_num_unfinished_requests() < MAX_NUM_SEQS + 2 and self.rng.random() < 0.6:
            prompt = [self.rng.randrange(1, 200) for _ in range(self.rng.randint(1, 90))]
            params = SamplingParams(max_tokens=self.rng.randint(1, 60), ignore_eos=True)
            self.scheduler.add_request(Request(str(self.next_id), prompt, params, None))
            self.next_id += 1
            self.facts["requests"] += 1

    def _abort(self) -> None:
        from vllm.v1.request import RequestStatus

        running = [r.request_id for r in self.scheduler.running]
        if running and self.rng.random() < 0.03:
            self.scheduler.finish_requests(self.rng.choice(running), RequestStatus.FINISHED_ABORTED)
            self.facts["aborted"] += 1

    def _model_output(self, out: Any) -> Any:
        """What the model would hand back: a token per request whose known tokens are all computed, plus accepted
        drafts for a verify step (a seeded count of them)."""
        from vllm.v1.outputs import ModelRunnerOutput

        ids = list(out.num_scheduled_tokens)
        sampled: list[list[int]] = []
        for req_id in ids:
            request = self.scheduler.requests[req_id]
            drafts = out.scheduled_spec_decode_tokens.get(req_id, [])
            if request.num_computed_tokens - len(drafts) < request.num_tokens:  # computed: advanced by schedule()
                sampled.append([])  # a prefill chunk: nothing sampled yet
                continue
            accepted = self.rng.randint(0, len(drafts))
            sampled.append([*drafts[:accepted], self.rng.randrange(1, 200)])
        self.facts["spec_steps"] += bool(out.scheduled_spec_decode_tokens)
        return ModelRunnerOutput(req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)},
                                 sampled_token_ids=sampled)

    def _drafts(self) -> None:
        """Synthetic drafts (the n-gram proposer's job) for every running request past its prefill."""
        from vllm.v1.outputs import DraftTokenIds

        ids = [r.request_id for r in self.scheduler.running if not r.is_prefill_chunk]
        drafts = [[self.rng.randrange(1, 200) for _ in range(self.rng.randint(0, SPEC_TOKENS))] for _ in ids]
        self.scheduler.update_draft_token_ids(DraftTokenIds(ids, drafts))

    def step(self, recorder: Recorder, numbers: dict[str, int]) -> None:
        """One scheduler step: schedule, mirror, slot mappings, record, then the made-up model's output."""
        self._arrivals()
        self._abort()
        out = self.scheduler.schedule()
        preempted = sorted(out.preempted_req_ids or ())
        self.facts["preempted"] += len(preempted)
        batch = self.worker.update(out)
        gone = [numbers[r] for r in [*batch.left, *preempted] if r in numbers]
        if gone:  # a preempted request's blocks are all freed too (``KVCacheManager.free``): its rows are gone
            recorder.finish(np.array(gone, np.int64))
        self.facts["finished"] += len(batch.left)
        if batch.req_ids:
            slots = self.worker.slot_mappings(batch)
            rows = len(batch.req_ids)
            ids = np.array([numbers.setdefault(r, len(numbers)) for r in batch.req_ids], np.int64)
            prefix = np.array(batch.starts, np.int64)
            recorder.locations("extend", {g.group_id: self.worker.table(i, rows) for i, g in enumerate(GROUPS)},
                               {g.group_id: slots[i] for i, g in enumerate(GROUPS)},
                               prefix + np.array(batch.counts, np.int64), prefix_lens=prefix, req_ids=ids)
            self.facts["tokens"] += batch.total
        self.scheduler.update_from_output(out, self._model_output(out))
        self._drafts()


def run(out: Path, *, steps: int, seed: int, model: Path, meta: dict[str, Any]) -> dict[str, int]:
    """Drive ``steps`` scheduler steps, recording each batch; the run's counts."""
    driver = Driver(model, seed)
    numbers: dict[str, int] = {}
    with Recorder(out, profile="vllm", groups=GROUPS, backend="vllm", meta=meta, steps_per_chunk=16,
                  fsync=False) as recorder:
        for _ in range(steps):
            driver.step(recorder, numbers)
        driver.facts["trace_steps"] = recorder.steps
    return driver.facts
