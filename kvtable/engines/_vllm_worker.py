"""The worker's persistent batch, reduced to its block tables: ``SchedulerOutput`` mirrored into vLLM's own
``MultiGroupBlockTable`` as ``GPUModelRunner._update_states`` and ``InputBatch`` do it.

Finished and unscheduled requests leave their row (``clear_row``); new and resumed ones take the lowest free
row (``add_row``); running ones get their new block ids appended (``append_row``); ``condense`` then moves the
last rows down into the holes (``move_row``). Only the table calls are vLLM's; the bookkeeping around them is
ours, read from vllm/v1/worker/gpu_model_runner.py and gpu_input_batch.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from kvtable.engines._vllm_backend import CPU, query_start_loc


@dataclass
class Step:
    """One step's batch as the kernel sees it: request ids by row, tokens and first position per row."""

    req_ids: list[str]
    counts: list[int]
    starts: list[int]
    left: list[str] = field(default_factory=list)
    """Requests that finished (or were aborted) at this step."""

    @property
    def total(self) -> int:
        return sum(self.counts)


class WorkerTables:
    """vLLM's ``MultiGroupBlockTable`` kept as the model runner keeps it, and its slot mappings per step."""

    def __init__(self, block_sizes: list[int], max_num_blocks: list[int], max_num_reqs: int,
                 max_num_tokens: int) -> None:
        from vllm.v1.worker.block_table import MultiGroupBlockTable

        self.tables = MultiGroupBlockTable(max_num_reqs=max_num_reqs, max_num_batched_tokens=max_num_tokens,
                                           pin_memory=False, device=CPU, block_sizes=block_sizes,
                                           max_num_blocks=max_num_blocks)
        self.groups = len(block_sizes)
        self.rows: list[str | None] = []
        self.block_ids: dict[str, list[list[int]]] = {}
        self.removed: list[int] = []

    def _remove(self, req_id: str) -> None:
        if req_id in self.rows:
            row = self.rows.index(req_id)
            self.rows[row] = None
            self.tables.clear_row(row)
            self.removed.append(row)

    def _add(self, req_id: str) -> None:
        self.removed.sort()
        row = self.removed.pop(0) if self.removed else len(self.rows)
        if row == len(self.rows):
            self.rows.append(req_id)
        else:
            self.rows[row] = req_id
        self.tables.add_row(tuple(self.block_ids[req_id]), row)

    def _condense(self) -> None:
        self.removed.sort()
        while self.removed:
            last = max((i for i, r in enumerate(self.rows) if r is not None), default=-1)
            if self.removed[0] >= last:
                break
            empty = self.removed.pop(0)
            self.rows[empty], self.rows[last] = self.rows[last], None
            self.tables.move_row(last, empty)
        live = sum(r is not None for r in self.rows)
        del self.rows[live:]
        self.removed = []

    def update(self, out: Any) -> Step:
        """Mirror one ``SchedulerOutput``; the step's batch in row order."""
        left = sorted(out.finished_req_ids)
        for req_id in left:
            self.block_ids.pop(req_id, None)
            self._remove(req_id)
        cached = out.scheduled_cached_reqs
        scheduled = set(out.num_scheduled_tokens)
        for req_id in [r for r in self.rows if r is not None and (r not in scheduled or r in cached.resumed_req_ids)]:
            self._remove(req_id)
        starts = {new.req_id: new.num_computed_tokens for new in out.scheduled_new_reqs}
        for new in out.scheduled_new_reqs:
            self.block_ids[new.req_id] = [list(ids) for ids in new.block_ids]
            self._add(new.req_id)
        for i, req_id in enumerate(cached.req_ids):
            starts[req_id] = cached.num_computed_tokens[i]
            new_ids = cached.new_block_ids[i]
            if req_id in cached.resumed_req_ids:
                self.block_ids[req_id] = [list(ids) for ids in new_ids]
            elif new_ids is not None:
                for ids, more in zip(self.block_ids[req_id], new_ids, strict=True):
                    ids.extend(more)
            if req_id not in self.rows:
                self._add(req_id)
            elif new_ids is not None:
                self.tables.append_row(new_ids, self.rows.index(req_id))
        self._condense()
        live = [r for r in self.rows if r is not None]
        return Step(live, [out.num_scheduled_tokens[r] for r in live], [starts[r] for r in live], left)

    def slot_mappings(self, step: Step) -> list[np.ndarray]:
        """Each group's slots for the step, by vLLM's kernel, and the tables it read (rows of the batch)."""
        positions = torch.cat([torch.zeros(0, dtype=torch.int64)] + [
            torch.arange(s, s + n, dtype=torch.int64) for s, n in zip(step.starts, step.counts, strict=True)])
        self.tables.commit_block_table(len(step.req_ids))
        self.tables.compute_slot_mapping(len(step.req_ids), query_start_loc(step.counts), positions)
        return [self.tables[g].slot_mapping.gpu[:step.total].numpy().copy() for g in range(self.groups)]

    def table(self, group: int, rows: int) -> np.ndarray:
        """Group ``group``'s table as the kernel read it: the batch's rows, every column."""
        return self.tables[group].block_table.np[:rows].copy()
