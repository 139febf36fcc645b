"""``wrap(backend, path)``: any kvtable backend, recording every location call and graph replay it serves.

Each protocol call is one step. A lone call (``decode_locs`` and the like) names no group, so its group is
``ps<page_size>``; ``group_locs`` and graph replays record the real group ids. A call that raises is
recorded as a refused step and the exception propagates unchanged; every call is watched (``trace.watching``),
so an out-of-bounds read or a write into an input is recorded as unsafe, not as a refusal. Lone calls carry
no request ids, so only the per-step rules apply to them (``Recorder`` takes ``req_ids`` for the rules across steps).
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kvtable.backends import spec_of
from kvtable.backends.protocol import Backend
from kvtable.contract import GroupSpec
from kvtable.trace.recorder import Recorder
from kvtable.trace.watching import Watched, call_watched

_LONE = {"decode_locs": "decode", "verify_locs": "verify", "reanchor_locs": "reanchor", "extend_locs": "extend"}


def replay_buffers(runner: Any, bs: int, n: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """After a replay: each group's location buffer ``[:bs*n]`` and table buffer rows ``[:bs]`` (copies)."""
    locs = {g: b[: bs * n].clone() for g, b in runner.loc_buffers.items()}
    return locs, {g: b[:bs].clone() for g, b in runner.table_buffers.items()}


class RecordingRunner:
    """A graph runner whose captures and replays are recorded, with the buffers each replay left."""

    def __init__(self, runner: Any, recorder: Recorder) -> None:
        self._runner = runner
        self._recorder = recorder

    def __getattr__(self, name: str) -> Any:
        return getattr(self._runner, name)

    def capture(self, bs: int, group_ids: Sequence[str], tokens_per_req: int = 1) -> Any:
        views = self._runner.capture(bs, group_ids, tokens_per_req)
        self._recorder.capture(bs, group_ids, tokens_per_req)
        return views

    def replay(self, bs: int, tables: Mapping[str, Any] | None, seq_lens: Any, tokens_per_req: int = 1, *,
               actual_bs: int | None = None) -> None:
        outcome = call_watched("runner.replay", self._runner.replay, bs, tables, seq_lens, tokens_per_req,
                               actual_bs=actual_bs)
        locs, buffers = replay_buffers(self._runner, bs, tokens_per_req) if outcome.error is None else (None, None)
        self._recorder.replay(dict(tables or {}), seq_lens, bs=bs, locs=locs, buffers=buffers, n=tokens_per_req,
                              actual_bs=actual_bs, error=outcome.refusal, unsafe=outcome.unsafe)
        if outcome.error is not None:
            raise outcome.error


class RecordingBackend:
    """The wrapped backend: the same operations (only those it has), each call recorded as a step."""

    def __init__(self, backend: Any, recorder: Recorder) -> None:
        self.target = backend
        self.recorder = recorder
        self.name = f"recorded {getattr(backend, 'name', type(backend).__name__)}"
        self.device = getattr(backend, "device", "cpu")

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.target, name)
        if name in _LONE and callable(attr):
            return self._lone(name, attr)
        return attr

    def _lone(self, name: str, call: Callable[..., Any]) -> Callable[..., Any]:
        kind = _LONE[name]
        signature = inspect.signature(getattr(Backend, name))

        def recorded(*args: Any, **kwargs: Any) -> Any:
            given = signature.bind(self.target, *args, **kwargs).arguments
            ps, gid = given["page_size"], f"ps{given['page_size']}"
            fields: dict[str, Any] = {"page_sizes": {gid: ps}}
            if kind == "extend":
                prefix, extend = list(given["prefix_lens"]), list(given["extend_lens"])
                fields.update(prefix_lens=prefix, seq=[p + e for p, e in zip(prefix, extend, strict=False)])
            else:
                fields.update(seq=given.get("seq_lens", given.get("frontier")), n=given.get("n", 1),
                              actual_bs=given.get("actual_bs"))
            return self._record(kind, {gid: given["table"]}, call_watched(f"backend.{name}", call, *args, **kwargs),
                                seq=fields.pop("seq"), group=gid, **fields)
        return recorded

    def _record(self, kind: str, tables: Mapping[str, Any], outcome: Watched, *, seq: Any, group: str | None = None,
                **fields: Any) -> Any:
        """Record one watched call (a lone call's locations are ``group``'s), then return or raise as it did."""
        out = outcome.value if group is None or outcome.error is not None else {group: outcome.value}
        self.recorder.locations(kind, tables, out, seq, error=outcome.refusal, unsafe=outcome.unsafe, **fields)
        if outcome.error is not None:
            raise outcome.error
        return outcome.value

    def group_locs(self, specs: Sequence[GroupSpec], tables: Mapping[str, Any], batch: Any, **kwargs: Any
                   ) -> Any:
        sizes = {s.group_id: s.block_granularity for s in specs if not s.is_state}
        live = {gid: t for gid, t in tables.items() if gid in sizes}
        outcome = call_watched("backend.group_locs", self.target.group_locs, specs, tables, batch, **kwargs)
        return self._record(batch.mode, live, outcome, seq=list(batch.seq_lens), page_sizes=sizes, n=batch.n,
                            actual_bs=batch.actual_bs,
                            prefix_lens=None if batch.prefix_lens is None else list(batch.prefix_lens))

    def graph(self, specs: Sequence[GroupSpec], **sizes: Any) -> RecordingRunner:
        runner = self.target.graph(specs, **sizes)
        self.recorder.graph(specs, **sizes)
        return RecordingRunner(runner, self.recorder)


def wrap(backend: Any, path: str | os.PathLike[str], *, profile: str = "kvtable", name: str | None = None,
         **options: Any) -> RecordingBackend:
    """``backend`` recording into a new trace at ``path`` (``name``: how ``kvtable.backends.load`` finds it, for
    the snippets; ``options``: ``Recorder``'s); close with ``wrapped.recorder.close()``."""
    missing = [op for op in ("group_locs", "graph") if not callable(getattr(backend, op, None))]
    recorder = Recorder(path, profile=profile, backend=name or spec_of(backend), **options)
    wrapped = RecordingBackend(backend, recorder)
    for op in missing:
        setattr(wrapped, op, None)
    return wrapped


__all__ = ["RecordingBackend", "RecordingRunner", "replay_buffers", "wrap"]
