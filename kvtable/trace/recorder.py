"""``Recorder``: the few calls an engine makes where it computes write locations and replays graphs.

Each call is one step of the trace (see ``kvtable.trace.store`` for the format). Tensors may be torch
tensors (on any device: they are copied to the host), numpy arrays or lists. ``req_ids`` (one id per
row, the engine's request identity) turn on the rules across steps; ``finish`` says a request left.
A call ``trace check`` could not judge (no lengths, ids or lengths of the wrong count, a table that is no
matrix, values that are no integers) is refused where it is made (``RecordRefused``, naming the argument).
"""

from __future__ import annotations

import operator
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from typing import Any

import numpy as np

from kvtable.contract import GroupSpec
from kvtable.trace.schema import ALLOC_POOLS, KINDS, LOCATION_KINDS, step_defects
from kvtable.trace.store import MemoryWriter, TraceWriter

__all__ = ["KINDS", "LOCATION_KINDS", "RecordRefused", "Recorder", "host", "spec_dict"]

sink: Callable[[dict[str, Any], int, bool], Any] | None = None
"""Set in ``trace record --engine``'s worker: a ``Recorder`` given a path hands its header (with its steps per
chunk and fsync) here and writes through the writer it gets back; the parent process writes the trace."""

METHOD = {**{kind: "locations" for kind in LOCATION_KINDS}, "allocate": "allocation"}
"""The ``Recorder`` method that records each step kind (the kind's own name where not listed)."""


class RecordRefused(ValueError):
    """A step ``trace check`` could not judge, refused at the ``Recorder`` call that would record it."""


def _backend_problem(backend: str | None) -> str | None:
    """Why ``load(backend)`` cannot resolve the name here (its form, its file or package), or None."""
    from kvtable.backends import BackendNotFound, check_spec

    if backend is None:
        return None
    try:
        check_spec(backend)
    except BackendNotFound as err:
        return str(err)
    return None


def host(value: Any) -> np.ndarray | None:
    """A tensor, array or list as a host numpy array (None stays None)."""
    if value is None:
        return None
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    return np.asarray(value)


def spec_dict(spec: GroupSpec) -> dict[str, Any]:
    """A group spec as a manifest entry."""
    return asdict(spec)


class Recorder:
    """Records an engine's steps into a trace folder (``path`` None: in memory, as ``writer.steps``); use as a
    context manager or call ``close``."""

    def __init__(self, path: str | os.PathLike[str] | None, *, profile: str = "kvtable",
                 groups: Sequence[GroupSpec] = (), backend: str | None = None, steps_per_chunk: int = 1,
                 fsync: bool = True, meta: Mapping[str, Any] | None = None) -> None:
        self.page_sizes = {g.group_id: g.block_granularity for g in groups}
        self.declared = set(self.page_sizes)
        """Groups the trace has declared (the header's, a graph's, or a step's ``declare``): ``trace check`` judges
        no step naming another."""
        problem = _backend_problem(backend)
        if problem is not None:
            warnings.warn(f"Recorder(backend={backend!r}): the name does not load here ({problem}); the reproduce "
                          "snippets name it anyway, marked as not loading", stacklevel=2)
        header = {"profile": profile, "groups": [spec_dict(g) for g in groups], "backend": backend,
                  "backend_problem": problem, "meta": dict(meta or {})}
        self.header = header
        if path is None:
            self.writer: TraceWriter | MemoryWriter = MemoryWriter()
        elif sink is not None:
            self.writer = sink(header, steps_per_chunk, fsync)
        else:
            self.writer = TraceWriter(path, header, steps_per_chunk=steps_per_chunk, fsync=fsync)
        self.steps = 0
        self.injected = 0
        """Steps recorded with an input fault put there on purpose (``injected``)."""
        self.closed = False

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        """Closed when the block ends normally; on an exception only flushed: the run stopped, the trace is cut."""
        if kind is None:
            self.close()
        else:
            self.writer.flush()

    def close(self) -> None:
        """Write what is queued and the close line with the step count (a recorder never closed leaves a cut trace,
        judged to its last whole step: at most its unflushed chunk is lost)."""
        self.writer.close()
        self.closed = True

    def _emit(self, kind: str, arrays: Mapping[str, Any], *, tables: Mapping[str, Any] | None = None,
              groups: Mapping[str, int] | None = None, declare: bool = True, **fields: Any) -> int:
        method = f"Recorder.{METHOD.get(kind, kind)}"
        if kind not in KINDS:
            raise RecordRefused(f"{method}: unknown step kind {kind!r}; expected one of {KINDS}")
        if self.closed:
            raise RecordRefused(f"{method}: the recorder is closed")
        for name in ("n", "actual_bs"):
            if fields.get(name) is not None:
                try:
                    fields[name] = operator.index(fields[name])
                except TypeError:
                    raise RecordRefused(f"{method}: {name} is {fields[name]!r}, expected an integer") from None
        host_arrays = {k: host(v) for k, v in arrays.items()}
        host_tables = {gid: host(t) for gid, t in (tables or {}).items()}
        defects = step_defects(kind, host_arrays, host_tables, n=fields.get("n", 1), actual_bs=fields.get("actual_bs"))
        if defects:
            raise RecordRefused(f"{method}: {'; '.join(defects)}")
        index = self.steps
        line = {"step": index, "kind": kind, **{k: v for k, v in fields.items() if v is not None}}
        if groups is not None:
            line["groups"] = dict(groups)
            new = [gid for gid in groups if gid not in self.declared]
            if new and kind != "allocate" and declare:
                line["declare"] = new
                self.declared.update(new)
        self.writer.add(line, host_arrays, {gid: t for gid, t in host_tables.items() if t is not None})
        self.steps += 1
        self.injected += fields.get("injected") is not None
        return index

    def _page_sizes(self, gids: Sequence[str], page_sizes: Mapping[str, int] | None) -> dict[str, int]:
        sizes = {**self.page_sizes, **(page_sizes or {})}
        missing = [gid for gid in gids if gid not in sizes]
        if missing:
            raise ValueError(f"no page size for groups {missing}: declare them (groups=) or pass page_sizes=")
        return {gid: int(sizes[gid]) for gid in gids}

    def locations(self, kind: str, tables: Mapping[str, Any], locs: Mapping[str, Any] | None,
                  seq_lens: Any, *, page_sizes: Mapping[str, int] | None = None, n: int = 1,
                  actual_bs: int | None = None, prefix_lens: Any = None, req_ids: Any = None,
                  error: str | None = None, error_group: str | None = None, unsafe: str | None = None,
                  injected: str | None = None, reads: Mapping[str, Any] | None = None,
                  blocks_per_sector: Mapping[str, int] | None = None) -> int:
        """A location step (decode / verify / reanchor / extend): each group's table and the locations the engine
        produced for it; ``reads``: a ring group's read locations (R3), its table row the request's ring pages.
        ``error``: the engine refused the step (in ``error_group``, after computing the groups in ``locs``; None:
        every group). ``unsafe``: what a sanitizer saw the step do that no output shows (an
        out-of-bounds read, a write into an input): a safety violation whatever the step returned or raised.
        ``injected``: an input fault put into the step on purpose (a simulator's), named with its violations.
        Extend: ``seq_lens`` are ``prefix + extend`` per row. ``blocks_per_sector``: where the groups' pages are
        blocks of sectors of one shared cache (transformers' ``CachePool``), each group's blocks per sector, so that
        ``trace/shared-sector`` judges the groups' live pages across groups. Returns the step number."""
        if kind not in LOCATION_KINDS:
            raise ValueError(f"a location step is one of {LOCATION_KINDS}, got {kind!r}")
        locs = locs or {}
        arrays = {"seq_lens": seq_lens, "prefix_lens": prefix_lens, "req_ids": req_ids,
                  **{f"{gid}/locs": loc for gid, loc in locs.items()},
                  **{f"{gid}/reads": read for gid, read in (reads or {}).items()}}
        meta = {} if blocks_per_sector is None else {"blocks_per_sector": {g: int(b) for g, b in
                                                                            blocks_per_sector.items()}}
        return self._emit(kind, arrays, tables=tables, groups=self._page_sizes(list(tables), page_sizes),
                          n=n, actual_bs=actual_bs, error=error, error_group=error_group, unsafe=unsafe,
                          injected=injected, meta=meta or None)

    def graph(self, specs: Sequence[GroupSpec], *, max_bs: int, max_kernel_pages: int, kernel_page_size: int,
              spec_n: int = 1, tail_pad: int = -1, expand: bool = True) -> int:
        """The engine built its CUDA-graph buffers (G1) with these sizes."""
        for spec in specs:
            self.page_sizes.setdefault(spec.group_id, spec.block_granularity)
            self.declared.add(spec.group_id)
        sizes = {"max_bs": max_bs, "max_kernel_pages": max_kernel_pages, "kernel_page_size": kernel_page_size,
                 "spec_n": spec_n, "tail_pad": tail_pad, "expand": expand}
        return self._emit("graph", {}, meta={"specs": [spec_dict(s) for s in specs], "sizes": sizes})

    def capture(self, bs: int, group_ids: Sequence[str], tokens_per_req: int = 1) -> int:
        """A graph was captured at ``bs`` for these groups."""
        return self._emit("capture", {}, n=tokens_per_req, meta={"bs": bs, "group_ids": list(group_ids)})

    def replay(self, tables: Mapping[str, Any], seq_lens: Any, *, bs: int, locs: Mapping[str, Any] | None = None,
               buffers: Mapping[str, Any] | None = None, n: int = 1, actual_bs: int | None = None,
               req_ids: Any = None, error: str | None = None, unsafe: str | None = None) -> int:
        """A graph replay: the live tables delivered, and after it each group's location buffer ``[:bs*n]`` and
        table buffer rows ``[:bs]`` (what the captured kernels will read and write); ``unsafe`` as for
        ``locations``."""
        arrays = {"seq_lens": seq_lens, "req_ids": req_ids, **{f"{g}/locs": v for g, v in (locs or {}).items()},
                  **{f"{g}/buf": v for g, v in (buffers or {}).items()}}
        return self._emit("replay", arrays, tables=tables, groups=self._page_sizes(list(tables), None), n=n,
                          actual_bs=actual_bs, error=error, unsafe=unsafe, meta={"bs": bs})

    def allocation(self, mode: str, req_to_token: Any, rows: Any, prefix_lens: Any, seq_lens: Any, free_pages: Any,
                   *, page_size: int, pool_pages: int, locs: Any, recorded: Any, guard_before: Any = (),
                   guard_after: Any = (), canary: int = 0, req_ids: Any = None, error: str | None = None,
                   unsafe: str | None = None, injected: str | None = None, swa: Mapping[str, Any] | None = None,
                   free_after: Any = None) -> int:
        """An allocator-driven step (A1-A6, SGLang's route): the token table and free pages the allocator was
        handed, the slots it chose (``locs``, request order), the table as it recorded them, and the cells
        around its output buffer (``guard_before``/``guard_after``, which held ``canary`` before the step);
        ``unsafe`` and ``injected`` as for ``locations``. ``swa``, with a sliding-window pool (A5): the
        ``mapping`` and ``free_pages`` handed, its ``pool_pages``, each token's SWA slot (``locs``) and the
        mapping as recorded (``recorded``), its free list after the step (``free_after``). ``free_after``: the
        allocator's free list after the step, if it keeps one (A6 judges both)."""
        swa = dict(swa or {})
        arrays = {"rows": rows, "prefix_lens": prefix_lens, "seq_lens": seq_lens, "free_pages": free_pages,
                  "locs": locs, "guard_before": guard_before, "guard_after": guard_after, "req_ids": req_ids,
                  "free_after": free_after,
                  **{f"swa/{key}": swa.get(key) for key in ("mapping", "free_pages", "locs", "recorded", "free_after")}}
        tables = {"req_to_token": req_to_token} if recorded is None else {"req_to_token": req_to_token,
                                                                          "recorded": recorded}
        meta = {"mode": mode, "pool_pages": pool_pages, "canary": canary}
        if swa:
            meta["swa_pool_pages"] = int(swa["pool_pages"])
        return self._emit("allocate", arrays, tables=tables, groups={g: page_size for g in tables}, error=error,
                          unsafe=unsafe, injected=injected, meta=meta)

    def free(self, group: str, pages: Any) -> int:
        """The engine returned these pages of ``group`` to its free list (their contents stay stale)."""
        return self._emit("free", {f"{group}/pages": pages}, groups=self._page_sizes([group], None))

    def pool_free(self, pool: str, pages: Any, *, page_size: int) -> int:
        """An allocator-driven engine freed these pages of ``pool`` (``ALLOC_POOLS``: ``req_to_token``, the full
        pool, or ``swa``) between steps, e.g. a finished request's: A6 judges them across steps."""
        if pool not in ALLOC_POOLS:
            raise RecordRefused(f"Recorder.pool_free: pool {pool!r}, expected one of {ALLOC_POOLS}")
        return self._emit("free", {f"{pool}/pages": pages}, groups={pool: page_size}, declare=False)

    def alloc(self, group: str, pages: Any) -> int:
        """The engine handed these pages of ``group`` out again."""
        return self._emit("alloc", {f"{group}/pages": pages}, groups=self._page_sizes([group], None))

    def finish(self, req_ids: Any) -> int:
        """These requests left (finished or aborted): their rows are no longer live."""
        return self._emit("finish", {"req_ids": req_ids})
