"""The shared example database against a real ``redis-server`` (Debian's, started on a loopback port in a temp
dir): two fuzz processes and a HypoFuzz campaign of two workers share it, a replay from a fresh process finds
every saved failure first, and a Redis killed mid-run is one line, exit 2 (restarted with its append-only file,
no saved failure is lost)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvtable.exitcodes import EXIT_FAILED, EXIT_USAGE

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("redis-server") is None,
                                 reason="redis-server not found (apt-get install -y redis-server; .ci/run does)")]
TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
FUZZ = ["fuzz", "--backend", "runs_backends:DecodeOnePageOn", "--property", "decode_locs", "--property",
        "verify_locs", "--seed", "0", "--no-progress"]
CAMPAIGN = "kvtable/conformance/campaign.py"


class Server:
    """A redis-server on a free loopback port, its data (append-only) in ``folder``."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.process = subprocess.Popen(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                                         "--dir", str(self.folder), "--appendonly", "yes", "--save", ""],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(100):
            if subprocess.run(["redis-cli", "-p", str(self.port), "ping"], capture_output=True,
                              text=True).stdout.strip() == "PONG":
                return
            time.sleep(0.1)
        raise RuntimeError("redis-server did not answer")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=30)
            self.process = None

    def keys(self) -> list[str]:
        """Every key, its bytes read as text (Hypothesis' keys end in a binary digest)."""
        return sorted(key.decode(errors="replace") for key in self.client().scan_iter())

    def clients(self) -> int:
        """Connections other than the one asking."""
        return len(self.client().client_list()) - 1

    def client(self):
        import redis

        return redis.Redis(port=self.port, socket_timeout=30)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    redis = Server(tmp_path)
    redis.start()
    yield redis
    redis.stop()


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS / "support"), os.environ.get("PYTHONPATH", "")])}


def _fuzz(server: Server, *extra: str, argv: list[str] = FUZZ) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "kvtable.cli", *argv, "--database", server.url, *extra],
                            cwd=REPO, env=_env(), text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _result(out: str, prop: str) -> dict:
    return next(r for r in json.loads(out)["results"] if r["property"] == prop)


def test_two_fuzz_processes_share_it_and_a_fresh_process_replays_every_failure_first(server: Server) -> None:
    runs = [_fuzz(server, "--examples", "40", "--json"), _fuzz(server, "--examples", "40", "--seed", "1")]
    for run in runs:
        out, err = run.communicate(timeout=600)
        assert run.returncode == EXIT_FAILED, out[-500:] + err[-500:]
    saved = [key for key in server.keys() if "decode_locs" in key]
    assert saved and all("kvtable[runs_backends:DecodeOnePageOn|kvtable|correct]:" in key for key in saved)
    replay = _fuzz(server, "--examples", "40", "--seed", "7", "--json")
    out, _ = replay.communicate(timeout=600)
    decode = _result(out, "decode_locs")
    assert decode["status"] == "failed" and decode["found_at"] == 1, decode  # the saved example, replayed first
    assert _result(out, "verify_locs")["status"] == "passed"


def test_a_hypofuzz_campaign_of_two_workers_shares_it_with_a_fresh_replay(server: Server) -> None:
    broken, tests = "runs_backends:DecodeAndExtendOnePageOn", "decode_locs or extend_locs"
    fuzzed = subprocess.run([sys.executable, "-c", "from hypothesis.extra.cli import main; main()", "fuzz",
                             "--no-dashboard", "-n", "2", "--", CAMPAIGN, "-k", tests, "--kvtable-backend", broken,
                             "--kvtable-database", server.url, "-p", "no:cacheprovider"],
                            cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600)
    assert "using 2 processes to fuzz 2 tests" in fuzzed.stdout, fuzzed.stdout + fuzzed.stderr
    assert "Found a failing input for every test!" in fuzzed.stderr, fuzzed.stderr[-2000:]
    prefix = f"hypothesis-example:kvtable[{broken}|kvtable|correct]:"
    assert server.keys() and all(key.startswith(prefix) for key in server.keys()), server.keys()
    # a fresh process generates nothing: both failures can only come from what the campaign saved
    replayed = subprocess.run([sys.executable, "-m", "pytest", CAMPAIGN, "-k", tests, "--kvtable-backend", broken,
                               "--kvtable-database", server.url, "--kvtable-replay", "-p", "no:cacheprovider", "-q"],
                              cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600)
    assert "2 failed" in replayed.stdout, replayed.stdout + replayed.stderr
    assert "[W1]" in replayed.stdout and "[W3]" in replayed.stdout, replayed.stdout


def test_a_redis_killed_mid_run_is_one_line_exit_2_and_loses_no_saved_failure(server: Server) -> None:
    extend = ["fuzz", "--backend", "runs_backends:ExtendOnePageOn", "--seed", "0", "--no-progress",
              "--property", "verify_locs", "--property", "extend_locs"]
    first = _fuzz(server, "--examples", "40", argv=extend)
    out, err = first.communicate(timeout=600)
    assert first.returncode == EXIT_FAILED, out[-500:] + err[-500:]
    saved = server.keys()
    assert any("extend_locs" in key for key in saved), saved
    # verify_locs (passing, thousands of examples) runs first; Redis dies while it does, so extend_locs'
    # fetch of its saved failure meets a dead server
    run = _fuzz(server, "--examples", "40000", argv=extend)
    deadline = time.monotonic() + 120
    while server.clients() == 0 and run.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    server.stop()
    out, err = run.communicate(timeout=600)
    assert run.returncode == EXIT_USAGE, out[-500:] + err[-500:]
    assert err.count("\n") == 1 and f"example database redis://127.0.0.1:{server.port}/0 failed" in err, err
    server.start()  # the append-only file brings back what was saved
    assert set(saved) <= set(server.keys())
