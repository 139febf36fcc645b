"""vLLM's stale sliding-window columns: no false T7 where a block the window left is handed out again, and the
rule still holds inside the window."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from kvtable.backends.profiles import get_profile
from kvtable.contract import GroupSpec
from kvtable.trace import Recorder, check_trace

GROUPS = [GroupSpec("swa", "sliding", 4, window=4)]


def _step(path: Path, row0: list[int]) -> None:
    """Request 0 writes position 8 (column 2); request 1 writes position 0 of its page 5."""
    with Recorder(path, profile="vllm", groups=GROUPS) as rec:
        table = np.array([row0, [5, 0, 0, 0]])
        rec.locations("extend", {"swa": table}, {"swa": [table[0, 2] * 4, 20]}, [9, 1], prefix_lens=[8, 0],
                      req_ids=[0, 1])


def test_a_freed_block_left_in_a_row_below_its_window_is_no_sharing(tmp_path: Path) -> None:
    _step(tmp_path / "t", [5, 6, 7, 0])  # column 0 covers positions 0..3, below position 8's window (5..8]
    assert check_trace(tmp_path / "t", "vllm").violation is None
    strict = replace(get_profile("vllm"), stale_window_front=False)
    found = check_trace(tmp_path / "t", strict).violation
    assert (found.clause, found.row, found.loc) == ("T7", 1, 20)


def test_a_block_inside_the_window_is_still_shared(tmp_path: Path) -> None:
    _step(tmp_path / "t", [6, 5, 7, 0])  # column 1 covers positions 4..7: position 8 reads 5..8
    found = check_trace(tmp_path / "t", "vllm").violation
    assert (found.clause, found.tier, found.row, found.loc) == ("T7", "safety", 1, 20)
