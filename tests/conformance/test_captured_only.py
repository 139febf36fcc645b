"""Under tokenspeed's profile a group is replayed only once captured, and an extra delivered group may be refused
as well as ignored: the seed's graph runner (a KeyError for a group it has no buffers for) is judged clean."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
import torch

from kvtable.backends import load
from kvtable.conformance.properties import select
from kvtable.conformance.runner import run_conformance

EXAMPLE = "examples/tokenspeed_style.py:backend"


class _KeyedRunner:
    """The runner, looking each delivered group's buffers up by name as the seed did (KeyError if none)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def replay(self, bs: int, tables: Mapping[str, Any] | None, *args: Any, **kwargs: Any) -> None:
        for gid in tables or {}:
            if gid not in self.inner.state_ids:
                self.inner.table_buffers[gid]  # noqa: B018 - the seed's lookup: KeyError for a group never captured
        self.inner.replay(bs, tables, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class SeedStyle:
    """tokenspeed's example whose runner raises KeyError for a group it has no buffers for."""

    def __init__(self, debug: bool | None = None) -> None:
        self.inner = load(EXAMPLE, debug=debug)
        self.name, self.device = "seed-style", "cpu"

    def graph(self, *args: Any, **kwargs: Any) -> _KeyedRunner:
        return _KeyedRunner(self.inner.graph(*args, **kwargs))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class _SizedByCapture(_KeyedRunner):
    """The seed's lazy buffers: a group's location buffer is made at its first capture, ``max_bs`` times that
    capture's tokens per request (not ``spec_n``), and a group never captured has none."""

    def capture(self, bs: int, group_ids: Any, tokens_per_req: int = 1) -> Any:
        need = self.inner.max_bs * tokens_per_req
        short = [gid for gid in group_ids if gid not in self.inner.table_buffers
                 or self.inner.loc_buffers[gid].shape[0] < need]
        views = self.inner.capture(bs, group_ids, tokens_per_req)
        for gid in short:  # made anew when a capture needs more (the seed's hazard: earlier graphs keep the old one)
            if gid in self.inner.loc_buffers:
                self.inner.loc_buffers[gid] = torch.zeros(need, dtype=torch.int32)
        if views[1] is None:
            return views
        return views[0], {gid: self.inner.loc_buffers[gid][: bs * tokens_per_req] for gid in views[1]}


class LazySeedStyle(SeedStyle):
    """tokenspeed's example with the seed's capture-sized location buffers and its KeyError for a group it has no
    buffers for."""

    def graph(self, *args: Any, **kwargs: Any) -> _SizedByCapture:
        return _SizedByCapture(self.inner.graph(*args, **kwargs))


@pytest.fixture(autouse=True)
def _from_the_repo_root(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    monkeypatch.chdir(request.config.rootpath)


def test_a_runner_that_knows_only_captured_groups_passes_under_tokenspeed() -> None:
    report = run_conformance(f"{__name__}:SeedStyle", examples=20, seed=0, profile="tokenspeed",
                             properties=select(["graph/stale-guard", "graph/bounds", "graph/protocol"]),
                             level="correct", isolate=False)
    assert report.passed, report.details()


@pytest.mark.parametrize("seed", range(5))
def test_tokenspeed_709s_extend_variant_is_found_at_every_seed(seed: int) -> None:
    """An extend over a -1 page (no clamp on the extend path) is drawn first, not left to the seed's luck."""
    report = run_conformance("examples/tokenspeed_style.py:backend_709", examples=30, seed=seed, profile="tokenspeed",
                             properties=select(["safety/pad-inside"]), level="safety", shrink=False, isolate=False)
    [result] = report.results
    assert not result.passed and result.tier == "safety", report.details()


@pytest.mark.slow
def test_capture_sized_location_buffers_and_captured_only_replays_pass_under_tokenspeed() -> None:
    """The seed's runner (found false by running its real flat_groups.py): each replay step kvtable draws is one its
    wrapper makes, over groups it captured, and a location buffer as long as its captures need is accepted; the one
    failure left is real (a later capture for more tokens makes the buffer anew, and earlier graphs keep the old)."""
    report = run_conformance(f"{__name__}:LazySeedStyle", examples=10, seed=0, profile="tokenspeed",
                             properties=select(["graph/capture", "graph/replay-locs", "graph/short-rows"]),
                             level="correct", isolate=False)
    moved = ("moved", "does not alias", "data_ptr differs")  # the real hazard of a buffer made anew
    false = [r for r in report.failures if not any(word in r.message for word in moved)]
    assert not false and report.results and all(r.examples for r in report.results), report.details()


class _UnguardedLengths(_KeyedRunner):
    """Reads ``seq_lens[b]`` and stack row ``b`` for every ``b < bs`` before anything else, as tokenspeed's location
    and unpack kernels do."""

    def replay(self, bs: int, tables: Mapping[str, Any] | None, seq_lens: torch.Tensor, *args: Any,
               **kwargs: Any) -> None:
        seq_lens.gather(0, torch.arange(max(bs, 0)))
        torch.zeros(self.inner.max_bs).gather(0, torch.arange(max(bs, 0)))  # rows past the stack, unguarded
        self.inner.replay(bs, tables, seq_lens, *args, **kwargs)


class UnguardedLengths(SeedStyle):
    def graph(self, *args: Any, **kwargs: Any) -> _UnguardedLengths:
        return _UnguardedLengths(self.inner.graph(*args, **kwargs))


@pytest.mark.slow
def test_no_replay_is_handed_fewer_lengths_or_more_rows_than_captured_under_tokenspeed() -> None:
    """tokenspeed's wrapper hands its whole lengths buffer and replays captured sizes only: a runner that reads
    ``seq_lens[:bs]`` and ``bs`` stack rows unguarded passes graph/bounds under its profile, not under the wide one."""
    def bounds(profile: str) -> Any:
        return run_conformance(f"{__name__}:UnguardedLengths", examples=30, seed=0, profile=profile,
                               properties=select(["graph/bounds"]), level="safety", isolate=False)

    assert bounds("tokenspeed").passed
    assert not bounds("tokenspeed+any").passed


class _WritesThenRefuses(_KeyedRunner):
    """The seed's fill: it copies the groups it knows in delivery order, then a KeyError for one it has no buffers
    for (partly written)."""

    def replay(self, bs: int, tables: Mapping[str, Any] | None, *args: Any, **kwargs: Any) -> None:
        known = {g: t for g, t in (tables or {}).items() if g in self.inner.layout or g in self.inner.state_ids}
        self.inner.replay(bs, known if tables else tables, *args, **kwargs)
        unknown = sorted(set(tables or {}) - set(known))
        if unknown:
            raise KeyError(unknown[0])


class WritesThenRefuses(SeedStyle):
    def graph(self, *args: Any, **kwargs: Any) -> _WritesThenRefuses:
        return _WritesThenRefuses(self.inner.graph(*args, **kwargs))


@pytest.mark.slow
def test_no_replay_is_handed_an_undeclared_group_under_tokenspeed() -> None:
    """tokenspeed's tables are exactly its published groups: a runner that writes, then refuses an undeclared one
    passes graph/stale-guard under its profile and fails it under the wide domain."""
    def stale_guard(profile: str) -> Any:
        return run_conformance(f"{__name__}:WritesThenRefuses", examples=30, seed=0, profile=profile,
                               properties=select(["graph/stale-guard"]), level="correct", isolate=False)

    assert stale_guard("tokenspeed").passed
    assert not stale_guard("tokenspeed+any").passed
