"""The trace format: npz chunks of step tensors plus an append-only JSON-lines manifest, crash-safe and checked.

A trace is a folder: ``manifest.jsonl`` and ``chunks/NNNNNN.npz``. The manifest is a header line, then per chunk
a chunk line (its file's sha256 and the steps it holds) followed by those steps' lines, and, once the recorder
is closed, a close line with the step count (``kvtable.trace.schema``). A chunk holds its steps' arrays
concatenated in two flat arrays, ``i32`` and ``i64`` (one read per chunk); a step's line gives each of its
arrays as ``[buffer, offset, shape]``. A chunk is written (and fsynced) before its lines are appended, so a
recorder killed mid-run leaves a trace whose whole steps all read back: it is *cut* (no close line), judged to
its last whole step. Anything else that does not read back as written (a missing or altered chunk, a line
missing, swapped or unreadable in the middle, a step the schema refuses) is ``TraceDamaged``. Group tables are
stored as deltas against the group's previous table of the same shape: the cells that changed.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kvtable.trace.schema import (
    FORMAT,
    LOCATION_KINDS,
    SWA_ARRAYS,
    VERSION,
    ChunkLine,
    CloseLine,
    Header,
    StepLine,
    TraceDamaged,
    schema_defects,
    step_defects,
)

MANIFEST = "manifest.jsonl"
CHUNKS = "chunks"


class TraceError(Exception):
    """A path that is no trace (no manifest, no trace header): a usage error, never a verdict."""


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
    changed: tuple[int, np.ndarray, np.ndarray] | None = None
    """A table stored as a delta: ``(version, cells, before)``, the group's table version (one past the table it
    changed), the flat cells the change set and their values before it (the rules across steps compare only those)."""


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
    """Allocator steps: their other arrays by name (rows, free_pages, locs, guards, and free_after if recorded)."""

    def need(self, name: str, gid: str | None = None) -> np.ndarray:
        """The array ``name`` of the step (of its group ``gid``) that its kind requires; ``TraceDamaged`` if absent."""
        value = getattr(self if gid is None else self.groups[gid], name)
        if not isinstance(value, np.ndarray):
            where = "" if gid is None else f" in group {gid!r}"
            raise TraceDamaged(self.index, None, [f"step {self.index} ({self.kind}) has no {name!r} array{where}"])
        return value


class TraceWriter:
    """Appends steps to a trace folder: ``steps_per_chunk`` steps per npz, each chunk fsynced before its lines."""

    def __init__(self, path: str | os.PathLike[str], header: Mapping[str, Any], *, steps_per_chunk: int = 1,
                 fsync: bool = True) -> None:
        self.path = Path(path)
        if (self.path / MANIFEST).exists():
            raise TraceError(f"{self.path}: a trace is already there (manifest.jsonl exists); pick a new path")
        (self.path / CHUNKS).mkdir(parents=True, exist_ok=True)
        self.steps_per_chunk = steps_per_chunk
        self.fsync = fsync
        self.bytes_written = 0
        self.steps = 0
        self.closed = False
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
        self.steps += 1
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
        """Write the queued steps' chunk (fsynced), then its chunk line and their manifest lines (fsynced)."""
        if not self._lines:
            return
        data = io.BytesIO()
        np.savez(data, i32=np.concatenate([np.zeros(0, np.int32), *self._buffers["i32"]]),
                 i64=np.concatenate([np.zeros(0, np.int64), *self._buffers["i64"]]))
        chunk = self.path / CHUNKS / f"{self._chunk:06d}.npz"
        tmp = chunk.with_suffix(".tmp")
        with open(tmp, "wb") as handle:
            handle.write(data.getbuffer())
            handle.flush()
            if self.fsync:
                os.fsync(handle.fileno())
        tmp.replace(chunk)
        self.bytes_written += data.getbuffer().nbytes
        first = self._lines[0]["step"]
        self._write_lines([{"chunk": self._chunk, "sha256": hashlib.sha256(data.getbuffer()).hexdigest(),
                            "first": first, "last": first + len(self._lines) - 1}, *self._lines])
        self._lines = []
        self._buffers = {"i32": [], "i64": []}
        self._sizes = {"i32": 0, "i64": 0}
        self._chunk += 1

    def close(self) -> None:
        """Flush, then the close line: the trace is whole, ``steps`` steps in its chunks (once; later: nothing)."""
        if self.closed:
            return
        self.flush()
        self._write_lines([{"closed": True, "steps": self.steps, "chunks": self._chunk}])
        self.closed = True

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
        self.steps.append(_step(StepLine(**{**line, "chunk": 0}), data.get, self._tables))

    def flush(self) -> None:
        """Nothing to write."""

    def close(self) -> None:
        """Nothing to write."""


@dataclass
class _Chunk:
    line: ChunkLine
    steps: list[StepLine] = field(default_factory=list)


class TraceReader:
    """Reads a trace folder step by step, every step checked as it reads (``TraceDamaged`` where one is not).

    The manifest is read whole first (every line parsed and checked against the schema, the chunks and steps in
    order, the close line's count); each chunk's checksum when it is read. ``total`` is the steps the trace
    declares (the close line's count; a cut trace's whole steps); ``cut`` says why a trace without a close line
    ends where it does, or is None for a closed one.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        manifest = self.path / MANIFEST
        if not manifest.is_file():
            raise TraceError(f"{self.path}: no trace here (no {MANIFEST})")
        with open(manifest, "rb") as handle:
            data = handle.read()
        lines = data.split(b"\n")
        try:
            first = json.loads(lines[0])
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise TraceError(f"{self.path}: the manifest's first line is no trace header") from None
        if not isinstance(first, dict) or first.get("format") != FORMAT:
            got = first.get("format") if isinstance(first, dict) else None
            raise TraceError(f"{self.path}: not a {FORMAT} manifest (format {got!r})")
        if first.get("version") != VERSION:
            raise TraceError(f"{self.path}: a version {first.get('version')!r} trace; this kvtable reads version "
                             f"{VERSION} (checksummed chunks and a step count): record it again")
        self.header = Header.parse(first)
        self.cut: str | None = None
        self._chunks: list[_Chunk] = []
        self.total = self._read_manifest(lines[1:])

    def _read_manifest(self, lines: list[bytes]) -> int:
        """Parse and check every line after the header; returns the step count the trace declares."""
        declared = {spec["group_id"] for spec in self.header.groups}
        steps = 0
        close: CloseLine | None = None
        defects: list[tuple[int, str]] = []  # (step, defect)
        ends_whole = lines[-1] == b""
        body = lines[:-1] if ends_whole else lines
        for number, raw in enumerate(body, start=2):
            last = number == len(body) + 1
            try:
                obj = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError):
                obj = None
            if obj is None or (last and not ends_whole):
                if last and not ends_whole and close is None:  # a write the recorder did not finish
                    self.cut = (f"manifest line {number} is cut ({len(raw)} bytes): the recorder stopped "
                                f"mid-write; judged to its last whole step, {steps}")
                    break
                defects.append((steps, f"manifest line {number} is unreadable ({len(raw)} bytes)"))
                continue
            if close is not None:
                defects.append((steps, f"manifest line {number} follows the close line"))
            elif isinstance(obj, dict) and "closed" in obj:
                close = self._close(obj, steps, defects)
            elif isinstance(obj, dict) and "sha256" in obj:
                self._chunk(obj, steps, number, defects)
            else:
                line, found = StepLine.parse(obj, declared)
                defects += [(steps, d) for d in found]
                if line is not None:
                    defects += [(steps, d) for d in self._place(line, steps, number)]
                    steps += 1
        if self._chunks and len(self._chunks[-1].steps) < self._chunks[-1].line.last - self._chunks[-1].line.first + 1:
            held = self._chunks[-1]
            missing = f"steps {held.line.first + len(held.steps)} to {held.line.last} of chunk {held.line.chunk}"
            if close is not None:
                defects.append((steps, f"the manifest lists no line for {missing}"))
            elif self.cut is None:
                self.cut = f"the manifest ends before {missing}: the recorder stopped mid-write"
        total = close.steps if close is not None else steps
        if close is None and self.cut is None:
            self.cut = f"no close line: the recorder was not closed (killed?); judged to its last whole step, {steps}"
        if defects:
            step, _ = defects[0]
            raise TraceDamaged(step, total, [d for _, d in defects])
        if not total:
            raise TraceDamaged(None, 0, ["the trace holds no step (a header only): nothing to judge"])
        return total

    def _close(self, obj: Any, steps: int, defects: list[tuple[int, str]]) -> CloseLine | None:
        bad = schema_defects(CloseLine, obj, "the close line")
        if bad:
            defects += [(steps, d) for d in bad]
            return None
        close = CloseLine(**obj)
        if close.steps != steps or close.chunks != len(self._chunks):
            defects.append((min(steps, close.steps), f"the close line declares {close.steps} steps in {close.chunks} "
                            f"chunks; the manifest lists {steps} in {len(self._chunks)}"))
        return close

    def _chunk(self, obj: Any, steps: int, number: int, defects: list[tuple[int, str]]) -> None:
        bad = schema_defects(ChunkLine, obj, f"chunk line {number}")
        if bad:
            defects += [(steps, d) for d in bad]
            return
        line = ChunkLine(**obj)
        if self._chunks:
            held = self._chunks[-1]
            if len(held.steps) != held.line.last - held.line.first + 1:
                defects.append((steps, f"chunk {held.line.chunk} declares steps {held.line.first} to "
                                f"{held.line.last}; the manifest lists {len(held.steps)} of them"))
        if line.chunk != len(self._chunks) or line.first != steps or line.last < line.first:
            defects.append((steps, f"manifest line {number} declares chunk {line.chunk} with steps {line.first} to "
                            f"{line.last}; chunk {len(self._chunks)} from step {steps} belongs there"))
        self._chunks.append(_Chunk(line))

    def _place(self, line: StepLine, steps: int, number: int) -> list[str]:
        """The step's place: the next step number, in the chunk its chunk line declared."""
        if not self._chunks:
            return [f"manifest line {number} (step {line.step}) comes before any chunk line"]
        held = self._chunks[-1]
        held.steps.append(line)
        out = []
        if line.step != steps:
            out.append(f"manifest line {number} holds step {line.step} where step {steps} belongs (lines "
                       "missing or out of order)")
        if line.chunk != held.line.chunk or not held.line.first <= line.step <= held.line.last:
            out.append(f"step {line.step} names chunk {line.chunk}, outside chunk {held.line.chunk}'s steps "
                       f"{held.line.first} to {held.line.last}")
        return out

    def steps(self, *, shared: bool = False) -> Iterator[Step]:
        """Every whole step in order, each checked as it is read; ``TraceDamaged`` at the first that is not.
        ``shared``: a group's table stored as a change is changed in place, not copied per step (a long trace's
        steps cost what they change, not their tables' size): a step's tables are valid until the next is read."""
        tables: dict[str, np.ndarray] = {}
        versions: dict[str, int] = {}
        owned: set[str] | None = set() if shared else None
        for held in self._chunks:
            chunk = self._load(held)
            for line in held.steps:
                try:
                    step = _step(line, _getter(chunk, line), tables, versions, owned)
                except _Unreadable as err:
                    raise TraceDamaged(line.step, self.total, [f"step {line.step}: {err}"]) from None
                found = step_defects(step.kind, _step_arrays(step), _step_tables(step), n=step.n,
                                     actual_bs=step.actual_bs)
                if found:
                    raise TraceDamaged(line.step, self.total, [f"step {line.step} ({step.kind}): {d}" for d in found])
                yield step

    def _load(self, held: _Chunk) -> dict[str, np.ndarray]:
        """A chunk's two buffers, once its bytes match the checksum its chunk line gives."""
        name = f"{held.line.chunk:06d}.npz"
        step = held.line.first
        try:
            data = (self.path / CHUNKS / name).read_bytes()
        except OSError as err:
            raise TraceDamaged(step, self.total, [f"chunk {name} (steps {held.line.first} to {held.line.last}) "
                                                  f"is missing or unreadable ({err.strerror or err})"]) from None
        if hashlib.sha256(data).hexdigest() != held.line.sha256:
            raise TraceDamaged(step, self.total, [f"chunk {name} (steps {held.line.first} to {held.line.last}) "
                                                  "does not match its checksum: altered or cut"])
        with np.load(io.BytesIO(data)) as npz:
            if sorted(npz.files) != ["i32", "i64"]:
                raise TraceDamaged(step, self.total, [f"chunk {name} holds arrays {sorted(npz.files)}, "
                                                      "expected ['i32', 'i64']"])
            return {"i32": npz["i32"], "i64": npz["i64"]}


class _Unreadable(Exception):
    """A step's array or delta that its chunk does not hold as its line says."""


def _getter(chunk: dict[str, np.ndarray], line: StepLine) -> Callable[[str], np.ndarray | None]:
    """``key -> array`` for one step: views into the chunk's flat buffers."""
    index = line.arrays

    def get(key: str) -> np.ndarray | None:
        if key not in index:
            return None
        name, offset, shape = index[key]
        size = math.prod(shape)
        buffer = chunk[name]
        if offset + size > len(buffer):
            raise _Unreadable(f"array {key!r} lies past the end of its chunk's {name} buffer")
        return buffer[offset: offset + size].reshape(shape)
    return get


def _step_arrays(step: Step) -> dict[str, np.ndarray | None]:
    return {"seq_lens": step.seq_lens, "prefix_lens": step.prefix_lens, "req_ids": step.req_ids, **step.arrays}


def _step_tables(step: Step) -> dict[str, np.ndarray | None]:
    """The tables a step's kind carries (a location, replay or allocator step's; an event has none)."""
    if step.kind not in (*LOCATION_KINDS, "replay", "allocate"):
        return {}
    return {gid: g.table for gid, g in step.groups.items()}


def _step(line: StepLine, get: Callable[[str], np.ndarray | None], tables: dict[str, np.ndarray],
          versions: dict[str, int] | None = None, owned: set[str] | None = None) -> Step:
    """A ``Step`` from its manifest line and arrays; ``tables`` keeps each group's last table for the deltas and
    ``versions`` counts each group's tables; ``owned``: the groups whose table is this reader's own array, which a
    delta changes in place (None: a delta's table is a copy)."""
    step = Step(line.step, line.kind, line.n, line.actual_bs, get("seq_lens"), get("prefix_lens"), get("req_ids"),
                error=line.error, error_group=line.error_group, unsafe=line.unsafe, injected=line.injected,
                meta=line.meta)
    if step.kind == "allocate":
        step.arrays = {k: v for k in ("rows", "free_pages", "locs", "guard_before", "guard_after", *SWA_ARRAYS)
                       if (v := get(k)) is not None}
        if (free_after := get("free_after")) is not None:  # the allocator's free list after the step (A6)
            step.arrays["free_after"] = free_after
    versions = {} if versions is None else versions
    delta = set(line.delta)
    for gid, page_size in line.groups.items():
        changed: tuple[int, np.ndarray, np.ndarray] | None = None
        table: np.ndarray | None
        if gid in delta:
            table, cells = _changed(gid, tables, get(f"{gid}/cells"), get(f"{gid}/values"), owned)
            changed = None if cells is None else (versions.get(gid, 0) + 1, *cells)
        else:
            table = get(f"{gid}/table")
            if owned is not None:
                owned.discard(gid)  # a view into the chunk: copied before any change
        if table is not None:
            tables[gid] = table
            versions[gid] = versions.get(gid, 0) + 1
        step.groups[gid] = GroupStep(page_size, table, get(f"{gid}/locs"), get(f"{gid}/buf"), get(f"{gid}/pages"),
                                     get(f"{gid}/reads"), changed)
    return step


def _changed(gid: str, tables: dict[str, np.ndarray], cells: np.ndarray | None, values: np.ndarray | None,
             owned: set[str] | None) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray] | None]:
    """The group's table with a delta's cells set, and those flat cells with their values before."""
    if gid not in tables or values is None or cells is None:
        raise _Unreadable(f"group {gid!r}'s table is stored as a change to an earlier table, and none is there")
    current = tables[gid]
    dtype = np.result_type(current, values)  # int64 where a value passes int32, though the last table fit it
    in_place = owned is not None and gid in owned and current.dtype == dtype
    table = current if in_place else current.astype(dtype)
    if owned is not None:
        owned.add(gid)
    flat = cells.astype(np.int64).reshape(-1)
    if len(flat) != values.size or (len(flat) and not 0 <= flat.min() <= flat.max() < table.size):
        raise _Unreadable(f"group {gid!r}'s changed cells lie outside its table")
    changed = (flat, table.reshape(-1)[flat]) if table.ndim == 2 and table.shape[1] else None  # a copy, before
    table.reshape(-1)[flat] = values.reshape(-1)
    return table, changed
