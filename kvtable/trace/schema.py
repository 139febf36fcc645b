"""The trace manifest's schema: header, chunk, step and close lines as dataclasses, each defect one message.

What ``trace check`` cannot judge is refused where it is made (``Recorder``: ``step_defects`` names the argument)
and, in a trace on disk, is damage (``TraceDamaged``): never a clean verdict, never the engine's fault.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, get_args

import numpy as np

from kvtable.contract import Family, GroupSpec

FORMAT = "kvtable-trace"
VERSION = 2
LOCATION_KINDS = ("decode", "verify", "reanchor", "extend")
KINDS = (*LOCATION_KINDS, "replay", "graph", "capture", "free", "alloc", "finish", "allocate")
ALLOC_MODES = ("decode", "verify", "extend")
ALLOC_GROUPS = ("req_to_token", "recorded")
"""An allocator step's two tables: the token table it was handed and the one it recorded."""
ALLOC_POOLS = ("req_to_token", "swa")
"""The pools a ``free`` event of an allocator trace names (never declared as groups): the full pool, whose slots
``req_to_token`` holds, and the SWA pool behind it (A6 across steps)."""
SWA_ARRAYS = ("swa/mapping", "swa/free_pages", "swa/locs", "swa/recorded", "swa/free_after")
"""An allocator step's SWA pool, where it has one (A5; ``swa/free_after``, its free list after the step, A6)."""
STEP_ARRAYS = ("seq_lens", "prefix_lens", "req_ids", "rows", "free_pages", "locs", "guard_before", "guard_after",
               "free_after", *SWA_ARRAYS)
"""``free_after``: an allocator step's free list after the step, where the allocator keeps one (A6)."""
GROUP_ARRAYS = ("table", "cells", "values", "locs", "buf", "pages", "reads")
"""A group's arrays in a step, stored as ``<group>/<name>``."""
BUFFERS = ("i32", "i64")
MAX_N = 2**16
"""The most tokens per row a step may carry (a speculative verify's drafts): past it, no engine's step."""
MAX_TOKENS = 2**24
"""The most tokens one step may write (an engine's batch holds tens of thousands): past it, no engine's step."""


class TraceDamaged(Exception):
    """A trace whose steps cannot all be read and judged: exit 2 naming the damage, never a verdict."""

    def __init__(self, step: int | None, total: int | None, defects: list[str]) -> None:
        self.step, self.total, self.defects = step, total, defects
        shown = "; ".join(defects[:3]) + (f" (and {len(defects) - 3} more)" if len(defects) > 3 else "")
        super().__init__(shown if step is None else f"step {step} of {total}: {shown}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _count(value: Any) -> bool:
    return _is_int(value) and value >= 0


def _opt_str(value: Any) -> bool:
    return value is None or isinstance(value, str)


def _spec_defects(spec: Any) -> list[str]:
    if not isinstance(spec, dict):
        return [f"group {spec!r} is no group spec"]
    names = {f.name for f in fields(GroupSpec)}
    if set(spec) - names or not {"group_id", "family", "block_granularity"} <= set(spec):
        return [f"group {spec.get('group_id')!r} has fields {sorted(spec)}, expected {sorted(names)}"]
    if not isinstance(spec["group_id"], str) or not _is_int(spec["block_granularity"]):
        return [f"group {spec.get('group_id')!r}: a string group_id and an integer block_granularity"]
    if spec["family"] not in get_args(Family):
        return [f"group {spec['group_id']!r}: family {spec['family']!r}, expected one of {get_args(Family)}"]
    if spec.get("layout") == "ring" and not _is_int(spec.get("window")):
        return [f"group {spec['group_id']!r}: a ring group needs an integer window"]
    return []


def schema_defects(cls: type, obj: Any, what: str) -> list[str]:
    """One message per field of ``obj`` missing, unknown or of the wrong type for the dataclass ``cls``."""
    if not isinstance(obj, dict):
        return [f"{what} is no JSON object"]
    out = []
    known = {f.name: f for f in fields(cls)}
    for name, f in known.items():
        if name not in obj:
            if f.metadata.get("required"):
                out.append(f"{what} has no {name!r}")
        elif not f.metadata["check"](obj[name]):
            out.append(f"{what}'s {name!r} is {obj[name]!r}: {f.metadata['want']}")
    out += [f"{what} has an unknown field {name!r}" for name in obj if name not in known]
    return out


def _f(check: Callable[[Any], bool], want: str, default: Any = None, *, required: bool = False,
       factory: Callable[[], Any] | None = None) -> Any:
    """A schema field: its check, what it must be, and its default (none: required)."""
    meta = {"check": check, "want": want, "required": required}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    if required:
        return field(metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class Header:
    """The manifest's first line: what recorded the trace and the groups it declares."""

    format: str = _f(lambda v: v == FORMAT, f"{FORMAT!r}", required=True)
    version: int = _f(lambda v: v == VERSION, f"{VERSION} (re-record older traces)", required=True)
    profile: str = _f(lambda v: isinstance(v, str), "a profile name", required=True)
    groups: list[dict[str, Any]] = _f(lambda v: isinstance(v, list), "a list of group specs", factory=list)
    backend: str | None = _f(_opt_str, "a backend name or null")
    backend_problem: str | None = _f(_opt_str, "why the backend name did not load when recorded, or null")
    meta: dict[str, Any] = _f(lambda v: isinstance(v, dict), "an object", factory=dict)

    @classmethod
    def parse(cls, obj: Any) -> Header:
        """The header, or ``TraceDamaged`` listing every defect."""
        defects = schema_defects(cls, obj, "the header")
        if not defects:
            defects = [d for spec in obj.get("groups", []) for d in _spec_defects(spec)]
        if defects:
            raise TraceDamaged(None, None, defects)
        return cls(**obj)

    @property
    def specs(self) -> list[GroupSpec]:
        return [GroupSpec(**g) for g in self.groups]


@dataclass(frozen=True)
class ChunkLine:
    """Written with a chunk's steps, before them: its file's checksum and the steps it holds."""

    chunk: int = _f(_count, "a chunk number", required=True)
    sha256: str = _f(lambda v: isinstance(v, str) and len(v) == 64, "a sha256 hex digest", required=True)
    first: int = _f(_count, "a step number", required=True)
    last: int = _f(_count, "a step number", required=True)


@dataclass(frozen=True)
class CloseLine:
    """The last line of a trace whose recorder was closed: how many steps and chunks it holds."""

    closed: bool = _f(lambda v: v is True, "true", required=True)
    steps: int = _f(_count, "a step count", required=True)
    chunks: int = _f(_count, "a chunk count", required=True)


def _array_ref(value: Any) -> bool:
    return (isinstance(value, list) and len(value) == 3 and value[0] in BUFFERS and _count(value[1])
            and isinstance(value[2], list) and all(_count(d) for d in value[2]))


@dataclass(frozen=True)
class StepLine:
    """One step's manifest line: its kind, groups and page sizes, and where each array lies in its chunk."""

    step: int = _f(_count, "a step number", required=True)
    kind: str = _f(lambda v: v in KINDS, f"one of {KINDS}", required=True)
    chunk: int = _f(_count, "a chunk number", required=True)
    n: int = _f(lambda v: _is_int(v) and 1 <= v <= MAX_N, f"an integer from 1 to {MAX_N}", 1)
    actual_bs: int | None = _f(lambda v: v is None or _count(v), "an integer >= 0 or null")
    groups: dict[str, int] = _f(lambda v: isinstance(v, dict) and all(_is_int(p) and p >= 1 for p in v.values()),
                      "group -> page size (>= 1)", factory=dict)
    declare: list[str] = _f(lambda v: isinstance(v, list) and all(isinstance(g, str) for g in v),
                       "a list of group ids", factory=list)
    delta: list[str] = _f(lambda v: isinstance(v, list) and all(isinstance(g, str) for g in v), "a list of group ids",
                     factory=list)
    arrays: dict[str, list[Any]] = _f(lambda v: isinstance(v, dict) and all(_array_ref(r) for r in v.values()),
                      "name -> [buffer, offset, shape]", factory=dict)
    error: str | None = _f(_opt_str, "a string or null")
    error_group: str | None = _f(_opt_str, "a string or null")
    unsafe: str | None = _f(_opt_str, "a string or null")
    injected: str | None = _f(_opt_str, "a string or null")
    meta: dict[str, Any] = _f(lambda v: isinstance(v, dict), "an object", factory=dict)

    @classmethod
    def parse(cls, obj: Any, declared: set[str]) -> tuple[StepLine | None, list[str]]:
        """The line and its defects (``declared``: the groups declared so far, this step's declarations added)."""
        what = f"step {obj.get('step', '?')}" if isinstance(obj, dict) else "a step line"
        defects = schema_defects(cls, obj, what)
        if defects:
            return None, defects
        line = cls(**obj)
        declared.update(line.declare)
        if line.kind == "graph":
            declared.update(s["group_id"] for s in line.meta.get("specs", [])
                            if isinstance(s, dict) and isinstance(s.get("group_id"), str))
        return line, line._defects(declared)

    def _defects(self, declared: set[str]) -> list[str]:
        what = f"step {self.step} ({self.kind})"
        names = set(self.arrays)
        out = []
        gids = set(self.groups)
        if self.kind != "allocate" and not (self.kind == "free" and gids <= set(ALLOC_POOLS)):
            out += [f"{what} names group {g!r}, which the trace never declared (the header's groups, a graph "
                    "event or a step's declare)" for g in sorted(gids - declared)]
        allowed = set(STEP_ARRAYS) | {f"{g}/{a}" for g in gids for a in GROUP_ARRAYS}
        out += [f"{what} has an unknown array {k!r}" for k in sorted(names - allowed)]
        need: list[str] = []
        if self.kind in LOCATION_KINDS or self.kind == "replay":
            need.append("seq_lens")
            if not gids:
                out.append(f"{what} has no group")
            for g in sorted(gids):
                need += [f"{g}/cells", f"{g}/values"] if g in self.delta else [f"{g}/table"]
            if self.kind == "replay" and not _count(self.meta.get("bs")):
                out.append(f"{what} has no batch size (meta 'bs')")
        elif self.kind == "allocate":
            need += ["rows", "prefix_lens", "seq_lens", "free_pages"]
            if "req_to_token" not in gids or gids - set(ALLOC_GROUPS):
                out.append(f"{what} has groups {sorted(gids)}, expected {list(ALLOC_GROUPS)}")
            if "recorded" in gids and self.error is None:
                need += ["locs", "guard_before", "guard_after"]
            if self.meta.get("mode") not in ALLOC_MODES or not _is_int(self.meta.get("pool_pages")) or not _is_int(
                    self.meta.get("canary")):
                out.append(f"{what}'s meta {self.meta!r} lacks mode, pool_pages or canary")
        elif self.kind in ("free", "alloc"):
            if len(gids) != 1:
                out.append(f"{what} names {len(gids)} groups, expected one")
            need += [f"{g}/pages" for g in gids]
        elif self.kind == "finish":
            need.append("req_ids")
        elif self.kind == "graph":
            specs, sizes = self.meta.get("specs"), self.meta.get("sizes")
            if not isinstance(specs, list) or not isinstance(sizes, dict):
                out.append(f"{what} has no group specs and sizes")
            else:
                out += [d for s in specs for d in _spec_defects(s)]
        elif self.kind == "capture":
            if not _count(self.meta.get("bs")) or not isinstance(self.meta.get("group_ids"), list):
                out.append(f"{what} has no batch size and group ids")
        for name in need:
            if name not in names:
                if name.endswith(("/cells", "/values")) or name.endswith("/table"):
                    out.append(f"{what} has no table for group {name.split('/')[0]!r} (array {name!r})")
                else:
                    out.append(f"{what} has no array {name!r}")
        return out


def _vector(name: str, value: np.ndarray | None, length: int | None = None) -> list[str]:
    if value is None:
        return []
    if value.ndim != 1:
        return [f"{name} has shape {value.shape}, expected one value per row"]
    if length is not None and len(value) != length:
        return [f"{name} has {len(value)} values for {length} row(s)"]
    return []


def _integers(arrays: Mapping[str, np.ndarray | None]) -> list[str]:
    return [f"{name} holds {value.dtype} values, not integers" for name, value in arrays.items()
            if value is not None and value.size and not np.issubdtype(value.dtype, np.integer)]


def _tokens(kind: str, seq: np.ndarray, prefix: np.ndarray | None, n: int) -> int:
    """How many tokens a step's lengths make it write (0 where they are no lengths: other defects say so)."""
    if seq.ndim != 1 or not np.issubdtype(seq.dtype, np.integer) and seq.size:
        return 0
    if kind != "extend":
        return len(seq) * (n if _is_int(n) else 1)
    if prefix is None or prefix.shape != seq.shape or not np.issubdtype(prefix.dtype, np.integer) and prefix.size:
        prefix = np.zeros(len(seq), np.int64)
    return int(np.maximum(seq.astype(np.int64) - prefix.astype(np.int64), 0).sum())


def step_defects(kind: str, arrays: Mapping[str, np.ndarray | None], tables: Mapping[str, np.ndarray | None],
                 *, n: int = 1, actual_bs: int | None = None) -> list[str]:
    """Why ``trace check`` could not judge a step with these arrays (empty: it can), one message per argument:
    the ``Recorder`` refuses such a call naming the argument, and a trace holding such a step is damaged."""
    out = _integers({**arrays, **{f"table {g!r}": t for g, t in tables.items()}})
    if not _is_int(n) or not 1 <= n <= MAX_N:
        out.append(f"n is {n!r}, expected an integer from 1 to {MAX_N} (tokens per row)")
    if actual_bs is not None and not _count(actual_bs):
        out.append(f"actual_bs is {actual_bs!r}, expected an integer >= 0")
    seq = arrays.get("seq_lens")
    if kind in LOCATION_KINDS or kind == "replay" or kind == "allocate":
        if seq is None:
            return [*out, "seq_lens is None: trace check needs each row's length (one integer per row)"]
        out += _vector("seq_lens", seq)
    rows = len(seq) if seq is not None and seq.ndim == 1 else None
    for name, table in tables.items():
        if table is None:
            out.append(f"table {name!r} is None")
        elif table.ndim != 2:
            out.append(f"table {name!r} has shape {table.shape}, expected (rows, columns)")
    if (kind in LOCATION_KINDS or kind == "replay") and seq is not None:
        out += _vector("prefix_lens", arrays.get("prefix_lens"), rows)
        tokens = _tokens(kind, seq, arrays.get("prefix_lens"), n)
        if tokens > MAX_TOKENS:
            out.append(f"seq_lens (and prefix_lens) make the step write {tokens} tokens, more than any step can "
                       f"(at most {MAX_TOKENS})")
        req_ids = arrays.get("req_ids")
        out += _vector("req_ids", req_ids)
        if rows is not None and req_ids is not None and req_ids.ndim == 1:
            live = rows if actual_bs is None or not _is_int(actual_bs) else min(actual_bs, rows)
            if not live <= len(req_ids) <= rows:
                want = str(rows) if live == rows else f"{live} to {rows}"
                out.append(f"req_ids has {len(req_ids)} ids for {want} row(s) (one per live row)")
    elif kind == "allocate":
        count = len(held) if (held := arrays.get("rows")) is not None and held.ndim == 1 else None
        for name in ("rows", "prefix_lens", "free_pages"):
            out += _vector(name, arrays.get(name)) if arrays.get(name) is not None else [f"{name} is None"]
        out += _vector("seq_lens", seq, count) + _vector("prefix_lens", arrays.get("prefix_lens"), count)
        out += _vector("req_ids", arrays.get("req_ids"), count)
    elif kind == "finish":
        out += _vector("req_ids", arrays.get("req_ids")) if arrays.get("req_ids") is not None else [
            "req_ids is None"]
    return out
