"""The trace format: npz chunks of step tensors plus an append-only JSON-lines manifest, crash-safe.

A trace is a folder: ``manifest.jsonl`` (a header line, then one line per step) and ``chunks/NNNNNN.npz``.
A chunk holds its steps' arrays concatenated in two flat arrays, ``i32`` and ``i64`` (one read per chunk);
a step's manifest line gives each of its arrays as ``[buffer, offset, shape]``.
A step's tensors are written and fsynced in their chunk before its manifest line is appended and fsynced,
so a run killed mid-write keeps every step whose line is whole; a truncated last line or a missing chunk
ends the trace there, and ``TraceReader.end_note`` says so. Group tables are stored as deltas against
the group's previous table of the same shape: the cells that changed (a decode loop changes a few per step).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

FORMAT = "kvtable-trace"
VERSION = 1
MANIFEST = "manifest.jsonl"
CHUNKS = "chunks"


class TraceError(Exception):
    """A path that is no trace (no manifest, a bad header): a usage error, never a verdict."""


@dataclass
class GroupStep:
    """One group's part of a step: its page size, table, the locations produced, and a graph's buffer rows."""

    page_size: int
    table: np.ndarray | None = None
    locs: np.ndarray | None = None
    buf: np.ndarray | None = None
    """Graph replays: the persistent table buffer's rows ``[:bs]`` after the replay."""
    pages: np.ndarray | None = None
    """free / alloc events: the pages freed or allocated."""
    reads: np.ndarray | None = None
    """Ring groups (R3): the read locations, where recorded."""


@dataclass
class Step:
    """One recorded engine step (a location call, a graph event or an allocator event), tables rebuilt."""

    index: int
    kind: str
    n: int = 1
    actual_bs: int | None = None
    seq_lens: np.ndarray | None = None
    prefix_lens: np.ndarray | None = None
    req_ids: np.ndarray | None = None
    groups: dict[str, GroupStep] = field(default_factory=dict)
    error: str | None = None
    """The backend refused the step: ``ExceptionType: message``."""
    error_group: str | None = None
    """The group whose call raised ``error`` (None: the step as a whole)."""
    unsafe: str | None = None
    """What a sanitizer saw the step do that no output shows (an out-of-bounds read, a write into an input)."""
    injected: str | None = None
    """An input fault put into the step on purpose (``kvtable trace record --faults``)."""
    meta: dict[str, Any] = field(default_factory=dict)
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    """Allocator steps: their other arrays by name (rows, free_pages, locs, guards)."""


def _fsync_write(path: Path, data: bytes, mode: str = "wb") -> None:
    with open(path, mode) as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


class TraceWriter:
    """Appends steps to a trace folder: ``steps_per_chunk`` steps per npz, each chunk fsynced before its lines."""

    def __init__(self, path: str | os.PathLike[str], header: Mapping[str, Any], *, steps_per_chunk: int = 1,
                 fsync: bool = True) -> None:
        self.path = Path(path)
        (self.path / CHUNKS).mkdir(parents=True, exist_ok=True)
        if (self.path / MANIFEST).exists():
            raise TraceError(f"{self.path}: a trace is already there (manifest.jsonl exists); pick a new path")
        self.steps_per_chunk = steps_per_chunk
        self.fsync = fsync
        self.bytes_written = 0
        self._chunk = 0
        self._buffers: dict[str, list[np.ndarray]] = {"i32": [], "i64": []}
        self._sizes = {"i32": 0, "i64": 0}
        self._lines: list[dict[str, Any]] = []
        self._last: dict[str, np.ndarray] = {}
        self._write_lines([{"format": FORMAT, "version": VERSION, **header}])

    def add(self, line: dict[str, Any], arrays: Mapping[str, np.ndarray | None],
            tables: Mapping[str, np.ndarray] | None = None) -> None:
        """Queue one step: its manifest fields, its arrays, and group tables (stored as deltas)."""
        stored = {k: np.asarray(v) for k, v in arrays.items() if v is not None}
        for gid, table in (tables or {}).items():
            self._add_table(gid, np.asarray(table), stored, line.setdefault("delta", []))
        line["arrays"] = {key: self._put(value) for key, value in stored.items()}
        line["chunk"] = self._chunk
        self._lines.append(line)
        if len(self._lines) >= self.steps_per_chunk:
            self.flush()

    def _put(self, value: np.ndarray) -> list[Any]:
        """Append ``value`` to the chunk's int32 or int64 buffer; returns its ``[buffer, offset, shape]``."""
        name = "i32" if value.dtype.itemsize <= 4 or value.size == 0 or (
            value.min() >= -(2**31) and value.max() < 2**31) else "i64"
        flat = value.astype(np.int32 if name == "i32" else np.int64).reshape(-1)
        offset = self._sizes[name]
        self._buffers[name].append(flat)
        self._sizes[name] += flat.size
        return [name, offset, list(value.shape)]

    def _add_table(self, gid: str, table: np.ndarray, stored: dict[str, np.ndarray], delta: list[str]) -> None:
        last = self._last.get(gid)
        self._last[gid] = table.copy()
        cells = np.flatnonzero(last != table) if last is not None and last.shape == table.shape else None
        if cells is not None and 2 * len(cells) < table.size:
            stored[f"{gid}/cells"], stored[f"{gid}/values"] = cells, table.reshape(-1)[cells]
            delta.append(gid)
        else:
            stored[f"{gid}/table"] = table

    def flush(self) -> None:
        """Write the queued steps' chunk (fsynced), then their manifest lines (fsynced)."""
        if not self._lines:
            return
        chunk = self.path / CHUNKS / f"{self._chunk:06d}.npz"
        tmp = chunk.with_suffix(".tmp")
        with open(tmp, "wb") as handle:
            np.savez(handle, i32=np.concatenate([np.zeros(0, np.int32), *self._buffers["i32"]]),
                     i64=np.concatenate([np.zeros(0, np.int64), *self._buffers["i64"]]))
            handle.flush()
            if self.fsync:
                os.fsync(handle.fileno())
        tmp.replace(chunk)
        self.bytes_written += chunk.stat().st_size
        self._write_lines(self._lines)
        self._lines = []
        self._buffers = {"i32": [], "i64": []}
        self._sizes = {"i32": 0, "i64": 0}
        self._chunk += 1

    def _write_lines(self, lines: list[dict[str, Any]]) -> None:
        data = "".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines).encode()
        self.bytes_written += len(data)
        with open(self.path / MANIFEST, "ab") as handle:
            handle.write(data)
            handle.flush()
            if self.fsync:
                os.fsync(handle.fileno())


class MemoryWriter:
    """A trace kept in memory as ``Step`` objects (``steps``), for the state machine and tests."""

    def __init__(self) -> None:
        self.steps: list[Step] = []
        self.bytes_written = 0
        self._tables: dict[str, np.ndarray] = {}

    def add(self, line: dict[str, Any], arrays: Mapping[str, np.ndarray | None],
            tables: Mapping[str, np.ndarray] | None = None) -> None:
        data = {k: np.asarray(v) for k, v in arrays.items() if v is not None}
        data.update({f"{gid}/table": np.array(t) for gid, t in (tables or {}).items()})
        self.steps.append(_step(line, data.get, self._tables))

    def flush(self) -> None:
        """Nothing to write."""


class TraceReader:
    """Reads a trace folder step by step; where the trace ends early, ``end_note`` says where and why."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        manifest = self.path / MANIFEST
        if not manifest.is_file():
            raise TraceError(f"{self.path}: no trace here (no {MANIFEST})")
        with open(manifest, "rb") as handle:
            self._lines = handle.read().split(b"\n")
        try:
            self.header = json.loads(self._lines[0])
        except (json.JSONDecodeError, IndexError):
            raise TraceError(f"{self.path}: the manifest's first line is no trace header") from None
        if self.header.get("format") != FORMAT:
            raise TraceError(f"{self.path}: not a {FORMAT} manifest (format {self.header.get('format')!r})")
        self.end_note: str | None = None
        self.complete_steps = 0

    def steps(self) -> Iterator[Step]:
        """Every complete step in order; stops at a truncated line or a missing or unreadable chunk."""
        tables: dict[str, np.ndarray] = {}
        chunk_id, chunk = None, None
        body = self._lines[1:]
        for number, raw in enumerate(body, start=2):
            if not raw.strip():
                continue
            try:
                line = json.loads(raw)
            except json.JSONDecodeError:
                self.end_note = (f"manifest line {number} is truncated ({len(raw)} bytes): the trace ends after "
                                 f"{self.complete_steps} complete steps")
                return
            if line["chunk"] != chunk_id:
                try:
                    with np.load(self.path / CHUNKS / f"{line['chunk']:06d}.npz") as data:
                        chunk = {"i32": data["i32"], "i64": data["i64"]}
                    chunk_id = line["chunk"]
                except (OSError, ValueError, KeyError) as err:
                    self.end_note = (f"chunk {line['chunk']:06d}.npz of step {line['step']} is missing or "
                                     f"unreadable ({type(err).__name__}): the trace ends after "
                                     f"{self.complete_steps} complete steps")
                    return
            assert chunk is not None
            step = _step(line, _getter(chunk, line.get("arrays", {})), tables)
            self.complete_steps += 1
            yield step


def _getter(chunk: dict[str, np.ndarray], index: dict[str, list[Any]]) -> Callable[[str], np.ndarray | None]:
    """``key -> array`` for one step: views into the chunk's flat buffers."""

    def get(key: str) -> np.ndarray | None:
        if key not in index:
            return None
        name, offset, shape = index[key]
        return chunk[name][offset: offset + int(np.prod(shape, dtype=np.int64))].reshape(shape)
    return get


SWA_ARRAYS = ("swa/mapping", "swa/free_pages", "swa/locs", "swa/recorded")
"""An allocator step's SWA pool, where it has one (A5)."""


def _step(line: dict[str, Any], get: Callable[[str], np.ndarray | None], tables: dict[str, np.ndarray]) -> Step:
    """A ``Step`` from its manifest line and arrays; ``tables`` keeps each group's last table for the deltas."""
    step = Step(line["step"], line["kind"], line.get("n", 1), line.get("actual_bs"), get("seq_lens"),
                get("prefix_lens"), get("req_ids"), error=line.get("error"), error_group=line.get("error_group"),
                unsafe=line.get("unsafe"), injected=line.get("injected"), meta=line.get("meta", {}))
    if step.kind == "allocate":
        step.arrays = {k: get(k) for k in ("rows", "free_pages", "locs", "guard_before", "guard_after")}
        step.arrays.update({k: v for k in SWA_ARRAYS if (v := get(k)) is not None})
    delta = set(line.get("delta", ()))
    for gid, page_size in line.get("groups", {}).items():
        if gid in delta:
            values = get(f"{gid}/values")  # int64 where a value passes int32, though the last table fit it
            table = tables[gid].astype(np.result_type(tables[gid], values))
            table.reshape(-1)[get(f"{gid}/cells")] = values
            tables[gid] = table
        else:
            table = get(f"{gid}/table")
            if table is not None:
                tables[gid] = table
        step.groups[gid] = GroupStep(page_size, table, get(f"{gid}/locs"), get(f"{gid}/buf"), get(f"{gid}/pages"),
                                     get(f"{gid}/reads"))
    return step
