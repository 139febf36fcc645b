"""``trace/shared-sector``: groups whose pages are blocks of sectors of one shared cache (transformers' ``CachePool``)
never hold live blocks in one sector at once; equal block ids in two groups are no aliasing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kvtable.contract import GroupSpec
from kvtable.trace import Recorder, check_trace

SPECS = [GroupSpec("a", "full", 1), GroupSpec("b", "full", 1)]
PER_SECTOR = {"a": 4, "b": 2}
"""Group a's block ``p`` lies in sector ``p // 4``, group b's in ``p // 2``."""


def _trace(tmp_path: Path, page_a: int, page_b: int, per_sector: dict[str, int] | None = PER_SECTOR) -> Path:
    out = tmp_path / f"{page_a}-{page_b}-{per_sector is None}"
    tables = {"a": np.array([[page_a]], np.int32), "b": np.array([[page_b]], np.int32)}
    with Recorder(out, profile="kvtable", groups=SPECS) as rec:
        rec.locations("decode", tables, {g: t[0].copy() for g, t in tables.items()}, np.array([1]),
                      req_ids=np.array([0]), blocks_per_sector=per_sector)
    return out


@pytest.mark.parametrize("page_b", [5, 6])
def test_blocks_of_two_groups_in_other_sectors_check_clean(tmp_path: Path, page_b: int) -> None:
    """Block 5 of a is in sector 1; block 5 of b (the same id) in sector 2, block 6 in sector 3."""
    assert check_trace(_trace(tmp_path, 5, page_b)).violation is None


def test_two_groups_live_blocks_in_one_sector_fail_safety(tmp_path: Path) -> None:
    v = check_trace(_trace(tmp_path, 5, 3)).violation  # a's block 5 and b's block 3: both in sector 1
    assert (v.step, v.tier, v.clause, v.group, v.row) == (0, "safety", "trace/shared-sector", "b", 0), v
    assert "block 3 lies in sector 1, which also holds block 5 of group 'a' (row 0)" in v.reason


def test_a_step_without_sectors_is_not_judged_for_them(tmp_path: Path) -> None:
    assert check_trace(_trace(tmp_path, 5, 3, per_sector=None)).violation is None
