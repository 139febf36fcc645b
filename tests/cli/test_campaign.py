"""Campaigns on Hypothesis' own engines: HypoFuzz fuzzes the conformance properties (``kvtable.conformance.campaign``)
with a shared example database and finds a broken backend's failure; the pytest route runs under pytest-xdist."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # subprocesses and worker processes: seconds each

TESTS = Path(__file__).resolve().parents[1]
SUPPORT = TESTS / "support"
REPO = TESTS.parent
CAMPAIGN = "kvtable/conformance/campaign.py"
HYPOTHESIS_CLI = "from hypothesis.extra.cli import main; main()"


def _run(*argv: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SUPPORT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, *argv], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout)


def _replay(backend: str, database: Path) -> subprocess.CompletedProcess:
    """pytest on the campaign's decode test, replaying only what ``database`` holds for ``backend``."""
    return _run("-m", "pytest", CAMPAIGN, "-k", "decode_locs", "--kvtable-backend", backend,
                "--kvtable-database", str(database), "--kvtable-replay", "-p", "no:cacheprovider", "-q")


def test_hypofuzz_finds_a_broken_backends_failure_and_shares_it(tmp_path: Path) -> None:
    database = tmp_path / "campaign-db"
    broken = "runs_backends:DecodeOnePageOn"
    fuzzed = _run("-c", HYPOTHESIS_CLI, "fuzz", "--no-dashboard", "-n", "1", "--", CAMPAIGN, "-k", "decode_locs",
                  "--kvtable-backend", broken, "--kvtable-database", str(database), "-p", "no:cacheprovider")
    assert "using 1 process to fuzz 1 test" in fuzzed.stdout, fuzzed.stdout + fuzzed.stderr
    assert "Found a failing input for every test!" in fuzzed.stderr  # HypoFuzz stops once every test has failed
    replayed = _replay(broken, database)  # no generation: the failure can only come from the campaign's database
    assert "1 failed" in replayed.stdout and "[W1]" in replayed.stdout, replayed.stdout
    assert "1 skipped" in _replay("torch", database).stdout  # keyed by backend: nothing saved for torch


def test_the_conformance_suite_runs_under_pytest_xdist() -> None:
    done = _run("-m", "pytest", "tests/conformance/test_conformance.py", "-n", "2", "-p", "no:cacheprovider", "-q",
                "-k", "decode_locs or graph/init or expand_table", "--kvtable-backend", "reference")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "bringing up nodes" in done.stdout and "3 passed" in done.stdout, done.stdout


def _campaign(backend: str, *tests: str) -> subprocess.CompletedProcess:
    """pytest on the campaign's ``tests`` (-k expressions) against a backend of tests/conformance/test_tiers.py."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS / "conformance"), str(SUPPORT)])}
    return subprocess.run([sys.executable, "-m", "pytest", CAMPAIGN, "-k", " or ".join(tests), "--kvtable-backend",
                           backend, "-p", "no:cacheprovider", "-q", "-rs", "--hypothesis-show-statistics"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


def test_unsupported_examples_are_discarded_and_counted_in_a_campaign() -> None:
    done = _campaign("test_tiers:NoRatios", "expand_table and not out")  # not expand_table/out
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout + done.stderr
    assert re.search(r"unsupported: ratio [2348] \(only 1\)", done.stdout), done.stdout  # Hypothesis' event count


def test_a_property_whose_every_example_is_unsupported_is_skipped_naming_why() -> None:
    done = _campaign("test_tiers:NoVerify", "verify_locs", "decode_locs")
    assert done.returncode == 0 and "1 passed, 1 skipped" in done.stdout, done.stdout + done.stderr
    assert "verify_locs not applicable: every example unsupported: no speculative decoding (20)" in done.stdout
