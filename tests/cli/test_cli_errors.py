"""Every bad invocation is one line on stderr and exit 2 before any work (README "Exit codes"); Ctrl-C is 130,
a closed stdout pipe is no error, and ``kvtable --help``/``prove`` never import torch or hypothesis."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis.database import ExampleDatabase, InMemoryExampleDatabase

from kvtable.cli import main
from kvtable.conformance.database import DatabaseFailed, KeyedDatabase, open_database
from kvtable.conformance.fuzz import fuzz
from kvtable.conformance.properties import select
from kvtable.exitcodes import EXIT_INTERRUPTED, EXIT_USAGE, UsageError

TESTS = Path(__file__).resolve().parents[1]
SUPPORT = TESTS / "support"
REPO = TESTS.parent
A_FILE = str(Path(__file__))

BAD_INVOCATIONS = [
    (["conform", "--examples", "0"], "argument --examples: must be >= 1, got 0"),
    (["fuzz", "--examples", "-5"], "argument --examples: must be >= 1, got -5"),
    (["zoo", "--examples", "0"], "argument --examples: must be >= 1, got 0"),
    (["conform", "--budget", "0"], "argument --budget: must be > 0, got 0"),
    (["fuzz", "--budget", "soon"], "argument --budget: expected a number > 0, got 'soon'"),
    (["bench", "--baseline", "/no/such/python"], "--baseline /no/such/python: not an executable interpreter"),
    (["conform", "--property", "typo"], "--property: no property or clause ['typo']"),
    (["conform", "--backend", "nosuch.mod:thing"], "backend 'nosuch.mod:thing': cannot import 'nosuch.mod'"),
    (["fuzz", "--backend", "kvtable"], "backend 'kvtable': expected 'pkg.mod:factory'"),
    (["check", "--backend", "nope"], "backend 'nope': expected 'pkg.mod:factory'"),  # before any proving
    (["conform", "--backend", "kvtable:nothing"], "'kvtable' has no attribute 'nothing'"),
    (["conform", "--backend", "kvtable:__version__"], "'kvtable:__version__' gave str, which has none"),
    (["fuzz", "--database", "redis:/typo"], "--database redis:/typo: malformed URL"),
    (["fuzz", "--database", "http://host/db"], "--database http://host/db: malformed URL"),
    (["fuzz", "--database", "redis://127.0.0.1:1"], "--database redis://127.0.0.1:1: cannot reach Redis"),
    (["fuzz", "--database", "redis://host:notaport"], "--database redis://host:notaport: malformed URL: Port could"),
    (["fuzz", "--database", A_FILE], f"--database {A_FILE}: {A_FILE} exists and is not a directory"),
    (["fuzz", "--database", "/proc/kvtable-db"], "--database /proc/kvtable-db: /proc/kvtable-db is not writable"),
    (["bench", "--json", "/proc/kvtable/bench.json"], "--json /proc/kvtable/bench.json: /proc/kvtable is not writable"),
    (["bench", "--json", str(TESTS)], f"--json {TESTS}: is a directory, not a file"),
    (["zoo", "nosuch-123"], "unknown entries ['nosuch-123']"),
    (["conform", "--workers", "2", "--no-isolate"], "--workers N runs properties in worker processes"),
    (["prove", "--timeout", "0"], "argument --timeout: must be > 0, got 0"),
    (["prove", "--only", "no-such-obligation"], "kvtable prove: error: no proof obligation matches"),
    (["nosuch"], "argument COMMAND: invalid choice: 'nosuch'"),
]
if not torch.cuda.is_available():
    BAD_INVOCATIONS.append((["zoo", "--device", "cuda"], "--device cuda: CUDA is not available on this machine"))


def _main(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as stop:  # argparse's own usage errors
        return int(stop.code or 0)


@pytest.mark.parametrize(("argv", "message"), BAD_INVOCATIONS, ids=[" ".join(a) for a, _ in BAD_INVOCATIONS])
def test_a_bad_invocation_is_one_line_and_exit_2(argv: list[str], message: str, capsys: pytest.CaptureFixture
                                                 ) -> None:
    assert _main(argv) == EXIT_USAGE
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("kvtable") and "Traceback" not in err, err
    assert message in err


def test_the_readme_table_lists_every_bad_invocation() -> None:
    readme = (REPO / "README.md").read_text()
    table = readme[readme.index("## Exit codes"):]
    for argv, _ in BAD_INVOCATIONS:
        if argv[0] != "nosuch" and argv[-1] not in (A_FILE, str(TESTS)):
            assert f"`kvtable {' '.join(argv)}`" in table, argv


class DiesMidRun(ExampleDatabase):
    """A database server that goes away once the run has started."""

    def fetch(self, key: bytes) -> list[bytes]:
        return []

    def save(self, key: bytes, value: bytes) -> None:
        raise ConnectionError("Connection closed by server.")

    def delete(self, key: bytes, value: bytes) -> None:
        raise ConnectionError("Connection closed by server.")


def test_a_database_that_fails_mid_run_is_infrastructure_not_a_verdict() -> None:
    with pytest.raises(DatabaseFailed, match="ConnectionError: Connection closed by server"):
        fuzz("runs_backends:DecodeOnePageOn", examples=20, seed=0, database=DiesMidRun(),
             properties=select(["decode_locs"]))
    assert issubclass(DatabaseFailed, UsageError)


def test_open_database_checks_before_any_work(tmp_path: Path) -> None:
    assert open_database("none") is None and open_database(None) is None
    folder = tmp_path / "new" / "db"
    open_database(str(folder))
    assert folder.is_dir()
    keyed = KeyedDatabase(InMemoryExampleDatabase(), b"p:")
    keyed.save(b"k", b"v")
    assert list(keyed.inner.fetch(b"p:k")) == [b"v"] and list(keyed.fetch(b"k")) == [b"v"]


def _cli(*argv: str, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SUPPORT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, "-m", "kvtable.cli", *argv], cwd=REPO, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs)


@pytest.mark.slow
def test_ctrl_c_reports_the_finished_properties_and_exits_130() -> None:
    done = _cli("conform", "--backend", "runs_backends:InterruptOnExtend", "--examples", "3", "--no-isolate",
                "--property", "decode_locs", "--property", "verify_locs", "--property", "extend_locs",
                "--property", "group_locs/decode")
    out, err = done.communicate(timeout=300)
    assert done.returncode == EXIT_INTERRUPTED, err
    assert "W1 decode-loc  decode_locs  PASSED" in out and "W2 verify-loc  verify_locs  PASSED" in out
    assert "extend_locs" not in out and "group_locs/decode" not in out
    assert "INTERRUPTED after 2 properties; PASS so far" in out and "Traceback" not in err


@pytest.mark.slow
def test_json_into_a_closed_pipe_is_not_an_error() -> None:
    done = _cli("conform", "--backend", "reference", "--examples", "2", "--property", "G1", "--json")
    done.stdout.close()  # the reader (``| head -0``) went away before the report was written
    err = done.stderr.read()
    assert done.wait(timeout=300) == 0 and "Traceback" not in err and "BrokenPipe" not in err, err


def test_help_and_prove_never_import_torch_or_hypothesis() -> None:
    probe = ("import sys\nfrom kvtable.cli import main\n"
             "for argv in (['--help'], ['prove', '--help'], ['prove', '--only', 'W1.in-bounds']):\n"
             "    try:\n        main(argv)\n    except SystemExit:\n        pass\n"
             "print(sorted(m for m in ('torch', 'hypothesis', 'numpy') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"



LOADED = (["conform", "--backend", "kvtable:nothing"], ["conform", "--backend", "kvtable:__version__"])
"""Names only the backend's own module can answer: it is imported (in a worker process, as every backend is
first touched) to find out, which costs a start-up; every other bad invocation is refused before one."""


def test_a_usage_error_never_imports_torch() -> None:
    """Refused before any work: no bad invocation (but those only the backend's module can answer) loads torch, the
    start-up that costs seconds. Checked in one child process, so the answer does not depend on the machine's load
    (the CPU it costs is a benchmark's to measure, not a test's to assert)."""
    refused = [argv for argv, _ in BAD_INVOCATIONS if argv not in LOADED] + [["trace", "record", "--seed", "-3",
                                                                              "--out", "t"]]
    probe = ("import json, sys\nfrom kvtable.cli import main\nfirst = None\n"
             "for argv in json.loads(sys.argv[1]):\n"
             "    try:\n        main(argv)\n    except SystemExit:\n        pass\n"
             "    if first is None and 'torch' in sys.modules:\n        first = argv\n"
             "print(json.dumps(first))")
    done = subprocess.run([sys.executable, "-c", probe, json.dumps(refused)], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "null", f"torch imported by {done.stdout}"
