"""The runner names the clause a broken backend breaks; loading, profiles and the CLI behave as documented."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import sys

import pytest
import torch

from kvtable import ContractViolation
from kvtable.backends import BackendNotFound, BackendUnavailable, load, spec_of
from kvtable.backends.profiles import PROFILES, get_profile
from kvtable.backends.reference_backend import ReferenceBackend
from kvtable.backends.torch_backend import TorchBackend
from kvtable.conformance.database import open_database
from kvtable.conformance.fuzz import budget, fuzz
from kvtable.conformance.properties import PROPERTIES, select
from kvtable.conformance.runner import run_conformance
from kvtable.impl import locs as impl_locs
from kvtable.reference import check_tables, decode_locs
from kvtable.reference.tables import as_table
from kvtable.strategies import CORRUPTIONS
from kvtable.zoo.sglang import Sglang25889

REFERENCE = ReferenceBackend()
"""A ready instance, for ``load("module:object")``."""
NOT_A_BACKEND = {"name": "dict"}


class DecodeLastOffByOne(TorchBackend):
    """W1: the last request's decode location is one slot off."""

    def decode_locs(self, table, seq_lens, page_size):
        out = super().decode_locs(table, seq_lens, page_size)
        out[-1] += 1
        return out


class GarbageOnce(TorchBackend):
    """Reads memory it does not own, once: its first decode writes a slot past the pool, every later one is right."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.calls = 0

    def decode_locs(self, table, seq_lens, page_size, *, actual_bs=None):
        out = super().decode_locs(table, seq_lens, page_size, actual_bs=actual_bs)
        self.calls += 1
        if self.calls == 1 and out.numel():
            out[0] = 2**31 - 1
        return out


def test_a_failure_that_does_not_replay_is_reported_not_an_error() -> None:
    """Hypothesis calls such a run flaky; the verdict is still the unsafe write, with the backend named as not
    deterministic (as an engine reading garbage is), never an ERROR of the run."""
    report = run_conformance(GarbageOnce(), examples=20, seed=0, properties=select(["decode_locs"]), isolate=False)
    [result] = report.results
    assert result.status == "failed" and result.tier == "safety", report.details()
    assert "not deterministic: this example failed once" in result.message


class StateNotShed(TorchBackend):
    """T6: state groups come back with locations."""

    def group_locs(self, specs, tables, batch, *, tail_pad=-1):
        out = super().group_locs(specs, tables, batch, tail_pad=tail_pad)
        state = [s.group_id for s in specs if s.is_state and s.group_id in tables]
        out.update({gid: torch.zeros(1, dtype=torch.int32) for gid in state})
        return out


class DebugSkipsSharing(TorchBackend):
    """T7: debug mode checks every clause except private write pages."""

    def group_locs(self, specs, tables, batch, *, tail_pad=-1):
        locs = impl_locs.group_locs(specs, tables, batch, kernels=self.kernels, debug=False)
        if self.debug:
            try:
                check_tables(specs, tables, batch, tail_pad=tail_pad)
            except ContractViolation as err:
                if err.clause_id != "T7":
                    raise
        return locs


class SubpageExpand(TorchBackend):
    """E2 under kvtable's convention; tokenspeed's convention exactly."""

    def expand_table(self, table, ratio, *, max_kernel_pages=None, tail_pad=-1, actual_bs=None):
        out = PROFILES["tokenspeed"].expand_table(as_table(table), ratio, max_kernel_pages=max_kernel_pages,
                                                  tail_pad=tail_pad, actual_bs=actual_bs)
        width = table.shape[1] * ratio if max_kernel_pages is None else max_kernel_pages
        return torch.tensor(out, dtype=torch.int32).reshape(len(out), width)


class PadSlotVerify(TorchBackend):
    """W2 under kvtable's convention; vLLM's PAD_SLOT_ID convention exactly."""

    def verify_locs(self, table, seq_lens, page_size, n, *, actual_bs=None):
        out = super().verify_locs(table, seq_lens, page_size, n, actual_bs=actual_bs)
        if actual_bs is not None:
            out[actual_bs * n:] = -1
        return out


class NoChecker(TorchBackend):
    """D1/D2: the debug write checker accepts everything."""

    def check_write_locs(self, table, locs, batch, page_size, *, group=None):
        return None


class _Runner:
    """A graph runner delegating to the torch one; subclasses break one step of the protocol."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.table_buffers = inner.table_buffers
        self.loc_buffers = inner.loc_buffers

    def capture(self, bs, group_ids, tokens_per_req=1):
        return self.inner.capture(bs, group_ids, tokens_per_req)

    def replay(self, bs, tables, seq_lens, tokens_per_req=1, *, actual_bs=None):
        self.inner.replay(bs, tables, seq_lens, tokens_per_req, actual_bs=actual_bs)


class _ZeroesPastBs(_Runner):
    def replay(self, bs, tables, seq_lens, tokens_per_req=1, *, actual_bs=None):
        super().replay(bs, tables, seq_lens, tokens_per_req, actual_bs=actual_bs)
        for buf in self.table_buffers.values():
            buf[bs:] = 0


class _NoStaleGuard(_Runner):
    def replay(self, bs, tables, seq_lens, tokens_per_req=1, *, actual_bs=None):
        if not tables or any(gid not in tables for gid in self.table_buffers):
            return  # replays over whatever the buffers held: the bug G5 exists to stop
        super().replay(bs, tables, seq_lens, tokens_per_req, actual_bs=actual_bs)


class ZeroesPastBs(TorchBackend):
    """G3: replay scrubs rows >= bs, which captured graphs of larger bs still read."""

    def graph(self, specs, **kwargs):
        return _ZeroesPastBs(super().graph(specs, **kwargs))


class NoStaleGuard(TorchBackend):
    """G5: a replay missing groups silently keeps the stale buffers."""

    def graph(self, specs, **kwargs):
        return _NoStaleGuard(super().graph(specs, **kwargs))


class TailPadZero(TorchBackend):
    """G3: the runner pads tails with 0 whatever tail pad it was built with."""

    def graph(self, specs, **kwargs):
        return super().graph(specs, **{**kwargs, "tail_pad": 0})


def _failed(report) -> list[str]:
    return [label.split()[0] for label in report.failed_clauses]


@pytest.mark.slow
@pytest.mark.parametrize(("mutant", "names", "clause"), [
    (DecodeLastOffByOne, ["decode_locs"], "W1"),
    (StateNotShed, ["group_locs/decode", "group_locs/state-shed"], "T6"),
    (DebugSkipsSharing, ["rejects/T7"], "T7"),
    (SubpageExpand, ["expand_table"], "E2"),
    (PadSlotVerify, ["verify_locs"], "W2"),
    (ZeroesPastBs, ["graph/replay-fill"], "G3"),
    (NoStaleGuard, ["graph/stale-guard"], "G5"),
    (TailPadZero, ["graph/replay-fill"], "G3"),
], ids=lambda v: getattr(v, "__name__", None))
def test_a_broken_backend_fails_naming_its_clause(mutant, names, clause) -> None:
    report = run_conformance(mutant, examples=60, seed=0, properties=select(names), level="strict")
    assert not report.passed
    assert set(_failed(report)) == {clause}, report.details()
    failure = report.failures[0]
    assert failure.status == "failed" and failure.counterexample.startswith("import torch")
    assert "crashed" not in failure.message, "caught for a crash, not for the bug"


@pytest.mark.parametrize("how", CORRUPTIONS)
def test_each_checker_corruption_is_caught_in_a_few_examples(how: str) -> None:
    name = f"checker/{how.replace(' ', '-')}"
    report = run_conformance(NoChecker, examples=20, seed=0, properties=select([name]), shrink=False,
                             level="strict")
    assert _failed(report) == [CORRUPTIONS[how]], report.details()
    assert report.failures[0].examples <= 3


def test_a_fill_cached_by_shape_is_caught_by_replaying_twice() -> None:
    """sglang #25889: the second replay of one shape, with fresh pages, shows the first one's tables."""
    report = run_conformance(Sglang25889, examples=20, seed=0, properties=select(["graph/replay-twice"]),
                             shrink=False)
    assert _failed(report) == ["G3"], report.details()
    assert report.failures[0].examples <= 5


def test_shrink_false_stops_at_the_first_failing_example() -> None:
    names = select(["decode_locs"])
    found = run_conformance(DecodeLastOffByOne, examples=30, seed=0, properties=names, shrink=False)
    shrunk = run_conformance(DecodeLastOffByOne, examples=30, seed=0, properties=names)
    assert _failed(found) == _failed(shrunk) == ["W1"]
    assert found.failures[0].examples < shrunk.failures[0].examples  # shrinking runs the property again


@pytest.mark.slow
def test_the_stateful_protocol_catches_a_graph_bug() -> None:
    report = run_conformance(NoStaleGuard, examples=60, seed=1, properties=select(["graph/protocol"]))
    assert _failed(report) == ["G5"], report.details()


@pytest.mark.slow
def test_instance_and_factory_give_the_same_verdicts() -> None:
    by_class = run_conformance(DebugSkipsSharing, examples=30, seed=2, properties=select(["rejects/T7"]),
                               level="strict")
    by_instance = run_conformance(DebugSkipsSharing(), examples=30, seed=2,
                                  properties=select(["rejects/T7"]), level="strict")
    assert _failed(by_class) == _failed(by_instance) == ["T7"]


def test_the_counterexample_replays() -> None:
    report = run_conformance(DecodeLastOffByOne, examples=30, seed=0, properties=select(["decode_locs"]))
    text = report.failures[0].counterexample
    assert f"load({spec_of(DecodeLastOffByOne())!r}, debug=False)" in text
    namespace: dict = {}
    with pytest.raises(SystemExit) as stop:
        exec(compile(text, "<counterexample>", "exec"), namespace)  # our own rendering of the calls made
    assert stop.value.code == 1  # the snippet checks itself: the failure reproduces
    call = next(line.strip() for line in text.splitlines() if line.strip().startswith("out = backend.decode_locs("))
    table, seq, ps = eval("(" + call.removeprefix("out = backend.decode_locs("), {"torch": torch})
    assert namespace["out"].tolist() != decode_locs(table.tolist(), seq.tolist(), ps)


@pytest.mark.parametrize(("mutant", "names", "profile"), [
    (SubpageExpand, ["expand_table"], "tokenspeed"),
    (PadSlotVerify, ["verify_locs"], "vllm-pad-slot"),
])
def test_a_profile_accepts_its_engine_convention(mutant, names, profile) -> None:
    assert run_conformance(mutant, examples=60, seed=0, profile=profile, properties=select(names)).passed


@pytest.mark.slow
@pytest.mark.parametrize(("profile", "names", "clause"), [
    ("vllm-pad-slot", ["verify_locs"], "W2"),  # torch writes dummy-row tokens to slot 0, not -1
    ("tokenspeed", ["expand_table"], "E2"),  # torch keeps holes and pads as holes and pads
])
def test_a_profile_changes_what_is_expected(profile, names, clause) -> None:
    assert run_conformance("torch", examples=60, seed=0, properties=select(names)).passed
    report = run_conformance("torch", examples=60, seed=0, profile=profile, properties=select(names))
    assert _failed(report) == [clause]


def test_get_profile() -> None:
    assert get_profile(None).name == "kvtable"
    with pytest.raises(KeyError, match="known"):
        get_profile("no-such-engine")


# -- loading ---------------------------------------------------------------------------------------


def test_load_names_factories_objects_and_the_env_var(monkeypatch: pytest.MonkeyPatch) -> None:
    assert load("reference").name == "reference"
    assert load("kvtable.backends.torch_backend:TorchBackend", debug=True).debug is True
    assert load(f"{__name__}:REFERENCE") is REFERENCE
    assert load(f"{__name__}:REFERENCE", debug=True).debug is True
    monkeypatch.setenv("KVTABLE_BACKEND", "reference")
    assert load().name == "reference"
    with pytest.raises(BackendNotFound, match="pkg.mod:factory"):
        load("reference_backend")
    with pytest.raises(BackendNotFound, match="no attribute"):
        load("kvtable.backends:Nope")
    with pytest.raises(BackendNotFound, match="cannot import 'nosuch.mod'"):
        load("nosuch.mod:thing")
    with pytest.raises(TypeError, match="has none of the operations"):
        load(f"{__name__}:NOT_A_BACKEND")


def test_triton_is_skipped_not_passed_when_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "triton", None)
    with pytest.raises(BackendUnavailable, match="triton is not importable"):
        load("triton")
    rc, out, err = _cli("conform", ["--backend", "triton", "--property", "graph/init"])
    assert rc == 3 and "SKIPPED" in err and not out


# -- the command line ------------------------------------------------------------------------------


def _cli(command: str, argv: list[str]) -> tuple[int, str, str]:
    module = importlib.import_module(f"kvtable.conformance.{command}")
    parser = argparse.ArgumentParser()
    module.add_arguments(parser)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = module.run(parser.parse_args(argv))
    return rc, out.getvalue(), err.getvalue()


@pytest.mark.slow
def test_conform_json_and_exit_status() -> None:
    rc, out, _ = _cli("conform", ["--backend", "reference", "--examples", "5", "--property", "G1", "--json"])
    report = json.loads(out)
    g1 = [p.name for p in PROPERTIES if p.clause == "G1"]
    assert rc == 0 and report["passed"] and [r["property"] for r in report["results"]] == g1
    rc, out, _ = _cli("conform", ["--backend", "reference", "--examples", "5", "--property", "kernels/stacked-locs"])
    assert rc == 1 and "G4 replay-locs  kernels/stacked-locs  N/A" in out  # nothing applied: no pass
    assert "N/A kernels/stacked-locs: backend 'reference' exposes no fused kernels" in out
    assert out.strip().endswith("0/0 properties passed, 1 not applicable in 0.0s; FAIL: no property applied to "
                                "this backend")
    rc, out, _ = _cli("conform", ["--backend", "reference", "--examples", "5", "--property", "kernels/stacked-locs",
                                  "--property", "graph/init", "--json"])
    report = json.loads(out)
    assert rc == 0 and report["passed"] and [r["status"] for r in report["results"]] == ["passed", "not applicable"]
    assert report["not_applicable"] == ["kernels/stacked-locs"]
    rc, out, _ = _cli("conform", ["--backend", f"{__name__}:TailPadZero", "--property", "graph/replay-fill",
                                  "--examples", "60"])
    assert rc == 1
    assert out.strip().splitlines()[-1].endswith("FAIL: G3 replay-fill")
    assert "G3 replay-fill  graph/replay-fill  FAILED" in out


@pytest.mark.slow
def test_fuzz_is_deterministic_shows_progress_and_keeps_failures(tmp_path) -> None:
    argv = ["--backend", "reference", "--examples", "40", "--seed", "3", "--property", "decode_locs",
            "--property", "expand_table", "--json", "--database", "none"]
    first, second = _cli("fuzz", argv), _cli("fuzz", argv)
    strip = [{k: r[k] for k in ("property", "status", "examples")} for r in json.loads(first[1])["results"]]
    assert strip == [{k: r[k] for k in ("property", "status", "examples")} for r in json.loads(second[1])["results"]]
    assert first[2] == ""  # stderr is no terminal here: no progress bar, no carriage returns in a log
    db = tmp_path / "db"
    rc, out, _ = _cli("fuzz", ["--backend", f"{__name__}:DecodeLastOffByOne", "--examples", "30",
                               "--property", "decode_locs", "--database", str(db), "--no-progress"])
    assert rc == 1 and "FAIL: W1 decode-loc" in out and "out = backend.decode_locs(" in out
    assert any(p.is_file() for p in db.rglob("*"))


def test_fuzz_api_shares_the_budget_by_weight() -> None:
    shares = budget(2000, PROPERTIES)
    assert shares["group_locs/verify"] > shares["graph/init"] >= 5
    assert abs(sum(shares.values()) - 2000) < len(PROPERTIES) * 5
    report = fuzz("reference", examples=20, seed=0, properties=select(["graph/init"]))
    assert report.kind == "fuzz" and report.passed


def test_open_database() -> None:
    assert open_database("none") is None and open_database(None) is None
    try:
        import redis  # noqa: F401
    except ImportError:
        with pytest.raises(SystemExit, match="pip install redis"):
            open_database("redis://localhost:6379")


@pytest.mark.parametrize("command", ["conform", "fuzz"])
def test_cli_names_a_backend_that_does_not_resolve_and_exits_2(command: str, capsys: pytest.CaptureFixture) -> None:
    from kvtable.cli import main

    assert main([command, "--backend", "nosuch.mod:thing", "--examples", "1"]) == 2
    assert f"kvtable {command}: error: backend 'nosuch.mod:thing': cannot import" in capsys.readouterr().err
