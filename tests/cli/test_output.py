"""Progress only where a person watches: a rich bar on a terminal, nothing in a log, nothing with --no-progress."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # subprocesses and worker processes: seconds each

REPO = Path(__file__).resolve().parents[2]
FUZZ = ["fuzz", "--backend", "reference", "--examples", "10", "--property", "decode_locs", "--property", "graph/init",
        "--database", "none"]


def _stderr_on_a_terminal(*argv: str) -> str:
    """What the command writes to stderr when stderr is a terminal (a pseudo-terminal here)."""
    leader, follower = pty.openpty()
    done = subprocess.Popen([sys.executable, "-m", "kvtable.cli", *argv], cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=follower)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal's other side closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert done.wait(timeout=300) == 0
    return b"".join(chunks).decode(errors="replace")


def test_a_terminal_gets_a_progress_bar() -> None:
    shown = _stderr_on_a_terminal(*FUZZ)
    assert "kvtable fuzz" in shown and "2/2" in shown and "PASSED graph/init" in shown


@pytest.mark.parametrize("argv", [FUZZ + ["--no-progress"]], ids=["--no-progress"])
def test_no_progress_turns_it_off_on_a_terminal(argv: list[str]) -> None:
    assert _stderr_on_a_terminal(*argv) == ""


def test_a_log_gets_no_progress(tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    with log.open("w") as stderr:
        done = subprocess.run([sys.executable, "-m", "kvtable.cli", *FUZZ], cwd=REPO, stdout=subprocess.DEVNULL,
                              stderr=stderr, timeout=300)
    assert done.returncode == 0 and log.read_text() == ""
